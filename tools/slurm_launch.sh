# shellcheck shell=bash
# The shared body of tools/slurm_train.sh and tools/slurm_test.sh, sourced by them (not run):
#
#   slurm_launch SCRIPT 'POSITIONAL NAMES' "$@"
#
# prints the usage for -h or --help; checks that the caller got PARTITION JOB_NAME and SCRIPT's
# positional arguments (else prints the usage and exits 2), then runs tools/SCRIPT under srun,
# one task per GPU on GPUS / GPUS_PER_NODE nodes, with MMEngine's `slurm` launcher, which reads
# the rank, world size and master address from Slurm's environment.
# Environment: GPUS (8), GPUS_PER_NODE (8; min(GPUS, GPUS_PER_NODE) is used, which must divide
# GPUS), CPUS_PER_TASK (5), PORT (else MASTER_PORT, else 29500; handed on as MASTER_PORT),
# SRUN_ARGS (srun's further options, quoted as on a command line: PYTHON's shlex splits them),
# SRUN, PYTHON, XMR_COMMAND (the name the usage shows; `xmr slurm_train` sets it).

source "$(dirname "${BASH_SOURCE[0]}")/dist_launch.sh"

slurm_launch() {
    local script=$1
    local -a names
    read -r -a names <<< "$2"
    shift 2
    local usage="usage: ${XMR_COMMAND:-$0} PARTITION JOB_NAME ${names[*]} [tools/$script options...]"
    if [[ ${1:-} == -h || ${1:-} == --help ]]; then
        echo "$usage"
        exit 0
    fi
    if [ $# -lt $(( 2 + ${#names[@]} )) ]; then
        echo "$usage" >&2
        exit 2
    fi
    local partition=$1 job_name=$2
    shift 2
    local -a positionals=("${@:1:${#names[@]}}")
    shift "${#names[@]}"
    local gpus=${GPUS:-8}
    # Else bash stopped on 'abc: unbound variable', and 0 or -2 went on to srun as --ntasks=0.
    if ! [[ $gpus =~ ^[1-9][0-9]*$ ]]; then
        echo "error: GPUS: '$gpus' is no positive number of GPUs (tasks); set GPUS=N" >&2
        exit 2
    fi
    local gpus_per_node=${GPUS_PER_NODE:-8}
    if ! [[ $gpus_per_node =~ ^[1-9][0-9]*$ ]]; then
        echo "error: GPUS_PER_NODE: '$gpus_per_node' is no positive number of GPUs a node;" \
            "set GPUS_PER_NODE=N" >&2
        exit 2
    fi
    # --gres and --ntasks-per-node are what each node runs: GPUS_PER_NODE=8 with GPUS=2 reserved
    # 8 GPUs of a shared node for 2 tasks.
    if (( gpus_per_node > gpus )); then
        gpus_per_node=$gpus
    fi
    # A remainder would leave the last node fewer tasks than the GPUs its --gres reserves.
    if (( gpus % gpus_per_node != 0 )); then
        echo "error: GPUS: $gpus GPUs do not fill nodes of GPUS_PER_NODE=$gpus_per_node each;" \
            "set GPUS to a multiple of $gpus_per_node, or GPUS_PER_NODE to a divisor of $gpus" >&2
        exit 2
    fi
    local nodes=$(( gpus / gpus_per_node ))
    local cpus_per_task=${CPUS_PER_TASK:-5}
    # srun's own refusal named --cpus-per-task, an option the caller never wrote.
    if ! [[ $cpus_per_task =~ ^[1-9][0-9]*$ ]]; then
        echo "error: CPUS_PER_TASK: '$cpus_per_task' is no positive number of CPUs a task;" \
            "set CPUS_PER_TASK=N" >&2
        exit 2
    fi
    # MMEngine's slurm launcher meets at MASTER_PORT, else 29500, which two jobs sharing a
    # node both bound ('address already in use'); srun hands the tasks this environment.
    local port
    port=$(rendezvous_port) || exit 2
    export MASTER_PORT=$port
    local tools
    tools=$(dirname "$0")
    # Split as the shell splits a command line (SRUN_ARGS='--comment="a b"'): split at blanks
    # alone, srun got '--comment="a' and 'b"'. One option a line, none holding a line break.
    local -a extra_srun_args=()
    if [ -n "${SRUN_ARGS:-}" ]; then
        local split_args
        if ! split_args=$("${PYTHON:-python}" -c 'import shlex, sys
try:
    print("\n".join(shlex.split(sys.argv[1])))
except ValueError as error:
    sys.exit(str(error).lower())' "$SRUN_ARGS" 2>&1); then
            echo "error: SRUN_ARGS: '$SRUN_ARGS' is no command line of srun options" \
                "($split_args); quote as a shell does, e.g. SRUN_ARGS='--comment=\"a b\"'" >&2
            exit 2
        fi
        if [ -n "$split_args" ]; then  # blanks alone: no option (mapfile would read one '')
            mapfile -t extra_srun_args <<< "$split_args"
        fi
    fi

    # A checkout's xmr, for the tools run from it uninstalled; an installed xmr's tools lie in
    # the package (xmr/.mim/tools), found by the interpreter anyway, and its folder on the path
    # would put xmr's configs/ and tools/ before a project's own.
    if [ -d "$tools/../xmr" ]; then
        export PYTHONPATH="$tools/..${PYTHONPATH:+:$PYTHONPATH}"
    fi
    exec "${SRUN:-srun}" -p "$partition" \
        --job-name="$job_name" \
        --gres=gpu:"$gpus_per_node" \
        --nodes="$nodes" \
        --ntasks="$gpus" \
        --ntasks-per-node="$gpus_per_node" \
        --cpus-per-task="$cpus_per_task" \
        --kill-on-bad-exit=1 \
        "${extra_srun_args[@]}" \
        "${PYTHON:-python}" -u "$tools/$script" "${positionals[@]}" --launcher slurm "$@"
}
