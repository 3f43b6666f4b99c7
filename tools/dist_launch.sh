# shellcheck shell=bash
# The shared body of tools/dist_train.sh and tools/dist_test.sh, sourced by them (not run):
#
#   dist_launch SCRIPT 'POSITIONAL NAMES' "$@"
#
# prints the usage for -h or --help; checks that the caller got SCRIPT's positional arguments
# followed by NUM_PROCESSES, a positive integer (else prints the usage and exits 2), and that
# PORT, NNODES (N or torchrun's elastic MIN:MAX) and NODE_RANK are in range (else names the
# variable and exits 2), then runs tools/SCRIPT under torchrun with MMEngine's `pytorch`
# launcher. Environment: NNODES (1), NODE_RANK (0), MASTER_ADDR (127.0.0.1), PORT (else
# MASTER_PORT, else 29500), PYTHON, XMR_COMMAND (the name the usage shows; `xmr dist_train`
# sets it).

# Prints the rendezvous port (tools/slurm_launch.sh's too): PORT, else MASTER_PORT, else 29500;
# a value that is no port is named on stderr (status 2). MASTER_PORT is torch's name of MASTER_ADDR's pair: ignored, a
# second job on a node that set it bound 29500 anyway ('address already in use').
rendezvous_port() {
    local variable=PORT
    if [ -z "${PORT:-}" ] && [ -n "${MASTER_PORT:-}" ]; then
        variable=MASTER_PORT
    fi
    local port=${!variable:-29500}
    if ! [[ $port =~ ^[1-9][0-9]{0,4}$ ]] || (( port > 65535 )); then
        echo "error: $variable: '$port' is no port number (1 to 65535); set PORT=N" >&2
        return 2
    fi
    echo "$port"
}

dist_launch() {
    local script=$1
    local -a names
    read -r -a names <<< "$2"
    shift 2
    local usage="usage: ${XMR_COMMAND:-$0} ${names[*]} NUM_PROCESSES [tools/$script options...]"
    if [[ ${1:-} == -h || ${1:-} == --help ]]; then
        echo "$usage"
        exit 0
    fi
    if [ $# -lt $(( ${#names[@]} + 1 )) ]; then
        echo "$usage" >&2
        exit 2
    fi
    local -a positionals=("${@:1:${#names[@]}}")
    shift "${#names[@]}"
    local num_processes=$1
    shift
    # Else torchrun stops with its own traceback ('Unsupported nproc_per_node value: --amp')
    # when NUM_PROCESSES was left out and an option took its place.
    if ! [[ $num_processes =~ ^[1-9][0-9]*$ ]]; then
        echo "$usage" >&2
        echo "error: NUM_PROCESSES: '$num_processes' is no positive number of processes; give" \
            "it after ${names[*]}" >&2
        exit 2
    fi
    # torchrun refused a bad PORT with its traceback, and a NODE_RANK past NNODES waited for its
    # rendezvous until the timeout.
    local nnodes=${NNODES:-1} node_rank=${NODE_RANK:-0} port
    port=$(rendezvous_port) || exit 2
    if ! [[ $nnodes =~ ^[1-9][0-9]{0,5}(:[1-9][0-9]{0,5})?$ ]]; then
        echo "error: NNODES: '$nnodes' is no positive number of nodes; set NNODES=N" >&2
        exit 2
    fi
    local most_nodes=${nnodes#*:}
    if (( ${nnodes%%:*} > most_nodes )); then
        echo "error: NNODES: '$nnodes' has its fewest nodes above its most; set" \
            "NNODES=MIN:MAX with MIN <= MAX" >&2
        exit 2
    fi
    if ! [[ $node_rank =~ ^(0|[1-9][0-9]{0,5})$ ]] || (( node_rank >= most_nodes )); then
        echo "error: NODE_RANK: '$node_rank' is no node of NNODES=$nnodes; set NODE_RANK to 0" \
            "to $(( most_nodes - 1 )), one per node" >&2
        exit 2
    fi
    local tools
    tools=$(dirname "$0")
    # torchrun sets OMP_NUM_THREADS=1 where the caller set none: the tools would take that for
    # the caller's word unless told (xmr/engine/threads.py, CALLER_SET_NO_OMP).
    if [ -z "${OMP_NUM_THREADS+set}" ]; then
        export XMR_CALLER_SET_NO_OMP_NUM_THREADS=1
        export OMP_NUM_THREADS=1  # what torchrun sets, set here so that it prints no warning
    else
        unset XMR_CALLER_SET_NO_OMP_NUM_THREADS
    fi

    # A checkout's xmr, for the tools run from it uninstalled; an installed xmr's tools lie in
    # the package (xmr/.mim/tools), found by the interpreter anyway, and its folder on the path
    # would put xmr's configs/ and tools/ before a project's own.
    if [ -d "$tools/../xmr" ]; then
        export PYTHONPATH="$tools/..${PYTHONPATH:+:$PYTHONPATH}"
    fi
    exec "${PYTHON:-python}" -m torch.distributed.run \
        --nnodes="$nnodes" \
        --node_rank="$node_rank" \
        --master_addr="${MASTER_ADDR:-127.0.0.1}" \
        --master_port="$port" \
        --nproc_per_node="$num_processes" \
        "$tools/$script" "${positionals[@]}" --launcher pytorch "$@"
}
