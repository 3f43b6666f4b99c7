"""tools/dist_*.sh and tools/slurm_*.sh compose the launcher commands documented for them."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from xmr.console import available
from xmr.packaged import tool_path

TOOLS = REPO / 'tools'
sys.path.insert(0, str(TOOLS))
import train as train_tool  # noqa: E402


def run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    # The scripts read PYTHON (the interpreter to start): the caller's own is not the test's.
    inherited = {key: value for key, value in os.environ.items() if key != 'PYTHON'}
    return subprocess.run(['bash', str(TOOLS / script), *args], capture_output=True, text=True,
                          env={**inherited, **env}, check=False)


def test_dist_train_runs_torchrun_with_the_pytorch_launcher():
    out = run('dist_train.sh', 'cfg.py', '4', '--amp', PYTHON='echo', NNODES='2',
              NODE_RANK='1', MASTER_ADDR='node0', PORT='1234')
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        '-m', 'torch.distributed.run', '--nnodes=2', '--node_rank=1', '--master_addr=node0',
        '--master_port=1234', '--nproc_per_node=4', f'{TOOLS}/train.py', 'cfg.py',
        '--launcher', 'pytorch', '--amp']


@pytest.mark.parametrize('env, port', [
    (dict(MASTER_PORT='29511'), '29511'), (dict(PORT='1234', MASTER_PORT='29511'), '1234'),
    ({}, '29500')])
def test_the_port_is_port_else_torch_s_master_port_beside_master_addr(env, port, tmp_path):
    """MASTER_ADDR was read and MASTER_PORT, torch's name of its pair, ignored: a second job
    on a node set MASTER_PORT=29511 and still bound 29500 ('address already in use'), and
    nodes told a port their firewall opens met at another until the rendezvous timed out.
    Under srun, MMEngine's slurm launcher meets at the MASTER_PORT the tasks inherit: PORT
    never reached it, so two Slurm jobs sharing a node both bound 29500."""
    inherited = {key: value for key, value in os.environ.items()
                 if key not in ('PORT', 'MASTER_PORT', 'PYTHON', 'SRUN')}
    printer = tmp_path / 'print_port'
    printer.write_text('#!/usr/bin/env bash\necho "MASTER_PORT=$MASTER_PORT"\n')
    printer.chmod(0o755)
    runs = {'dist_train.sh': ['cfg.py', '2'], 'slurm_train.sh': ['part', 'job', 'cfg.py']}
    said = {}
    for script, args in runs.items():
        out = subprocess.run(['bash', str(TOOLS / script), *args], text=True,
                             capture_output=True, check=False,
                             env={**inherited, 'PYTHON': 'echo', 'SRUN': str(printer), **env})
        assert out.returncode == 0, out.stderr
        said[script] = out.stdout.split()
    assert f'--master_port={port}' in said['dist_train.sh']
    assert said['slurm_train.sh'] == [f'MASTER_PORT={port}']


def test_a_slurm_port_that_is_no_port_is_refused_before_srun():
    out = run('slurm_train.sh', 'part', 'job', 'cfg.py', SRUN='echo', PORT='70000')
    assert (out.returncode, out.stdout, out.stderr) == (
        2, '', "error: PORT: '70000' is no port number (1 to 65535); set PORT=N\n")


def test_dist_test_passes_the_checkpoint():
    out = run('dist_test.sh', 'cfg.py', 'ckpt.pth', '2', PYTHON='echo')
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-5:] == [f'{TOOLS}/test.py', 'cfg.py', 'ckpt.pth', '--launcher',
                                       'pytorch']


def test_slurm_scripts_run_one_task_per_gpu_with_the_slurm_launcher():
    out = run('slurm_train.sh', 'part', 'job', 'cfg.py', '--amp', SRUN='echo', GPUS='16',
              SRUN_ARGS='--time=1:00 --qos=high')
    assert out.stdout.split() == [
        '-p', 'part', '--job-name=job', '--gres=gpu:8', '--nodes=2', '--ntasks=16',
        '--ntasks-per-node=8', '--cpus-per-task=5', '--kill-on-bad-exit=1', '--time=1:00',
        '--qos=high', 'python', '-u', f'{TOOLS}/train.py', 'cfg.py', '--launcher', 'slurm', '--amp']
    out = run('slurm_test.sh', 'part', 'job', 'cfg.py', 'ckpt.pth', SRUN='echo', GPUS='2')
    assert '--ntasks=2' in out.stdout and out.stdout.split()[-4:] == [
        'cfg.py', 'ckpt.pth', '--launcher', 'slurm']


@pytest.mark.parametrize('env, per_node, nodes', [
    (dict(GPUS='2', GPUS_PER_NODE='8'), 2, 1), (dict(GPUS='2'), 2, 1),
    (dict(GPUS='16', GPUS_PER_NODE='4'), 4, 4), (dict(GPUS='8', GPUS_PER_NODE='8'), 8, 1),
    (dict(GPUS='3', GPUS_PER_NODE='3'), 3, 1)])
def test_slurm_reserves_the_gpus_its_tasks_use_on_the_nodes_they_fill(tmp_path, env, per_node,
                                                                       nodes):
    """GPUS=2 GPUS_PER_NODE=8 reserved --gres=gpu:8 (a shared node's 8 GPUs for 2 tasks) with
    --ntasks-per-node=8."""
    out = run('slurm_train.sh', 'part', 'job', 'cfg.py', SRUN=str(args_printer(tmp_path)), **env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[3:7] == [f'--gres=gpu:{per_node}', f'--nodes={nodes}',
                          f'--ntasks={env["GPUS"]}', f'--ntasks-per-node={per_node}']


@pytest.mark.parametrize('gpus, per_node', [('12', '8'), ('10', '4')])
def test_slurm_gpus_that_do_not_fill_whole_nodes_are_refused(tmp_path, gpus, per_node):
    """12 tasks at 8 a node: the second node got 4 tasks but --gres=gpu:8."""
    out = run('slurm_train.sh', 'part', 'job', 'cfg.py', SRUN=str(args_printer(tmp_path)),
              GPUS=gpus, GPUS_PER_NODE=per_node)
    assert (out.returncode, out.stdout, out.stderr) == (
        2, '', f'error: GPUS: {gpus} GPUs do not fill nodes of GPUS_PER_NODE={per_node} each; '
        f'set GPUS to a multiple of {per_node}, or GPUS_PER_NODE to a divisor of {gpus}\n')


@pytest.mark.parametrize('script, args', [('dist_train.sh', ['cfg.py']),
                                          ('dist_test.sh', ['cfg.py', 'ckpt.pth']),
                                          ('slurm_train.sh', ['part', 'job']),
                                          ('slurm_test.sh', ['part', 'job', 'cfg.py'])])
def test_missing_arguments_print_the_usage(script, args):
    out = run(script, *args, PYTHON='echo', SRUN='echo')
    assert out.returncode == 2 and out.stderr.startswith('usage:')


@pytest.mark.parametrize('script, args, given, names', [
    ('dist_train.sh', ['cfg.py', '--amp'], '--amp', 'CONFIG'),
    ('dist_test.sh', ['cfg.py', 'ckpt.pth', '--out', 'r.json'], '--out', 'CONFIG CHECKPOINT'),
    ('dist_train.sh', ['cfg.py', '0'], '0', 'CONFIG')])
def test_a_number_of_processes_that_is_no_positive_integer_prints_the_usage(script, args, given,
                                                                            names):
    """NUM_PROCESSES left out, an option in its place: torchrun stopped with its traceback."""
    out = run(script, *args, PYTHON='echo')
    assert out.returncode == 2 and out.stdout == ''
    assert out.stderr.splitlines() == [
        f'usage: {TOOLS / script} {names} NUM_PROCESSES [tools/{script[5:-3]}.py options...]',
        f"error: NUM_PROCESSES: '{given}' is no positive number of processes; give it after "
        f'{names}']


@pytest.mark.parametrize('env, refused', [
    (dict(GPUS='abc'), "error: GPUS: 'abc' is no positive number of GPUs (tasks); set GPUS=N"),
    (dict(GPUS='0'), "error: GPUS: '0' is no positive number of GPUs (tasks); set GPUS=N"),
    (dict(GPUS='4', GPUS_PER_NODE='-2'), "error: GPUS_PER_NODE: '-2' is no positive number of "
     'GPUs a node; set GPUS_PER_NODE=N'),
    (dict(CPUS_PER_TASK='0'), "error: CPUS_PER_TASK: '0' is no positive number of CPUs a task; "
     'set CPUS_PER_TASK=N')])
def test_a_slurm_gpu_count_that_is_no_positive_integer_is_refused(env, refused):
    """'abc' stopped bash on 'abc: unbound variable'; 0 and -2 reached srun as --ntasks=0."""
    out = run('slurm_train.sh', 'part', 'job', 'cfg.py', SRUN='echo', **env)
    assert (out.returncode, out.stdout, out.stderr) == (2, '', refused + '\n')


def test_train_amp_dtype_implies_amp(tmp_path):
    demo = str(REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py')
    cfg = train_tool.build_config(train_tool.parse_args([demo, '--work-dir', str(tmp_path),
                                                         '--amp-dtype', 'float16']))
    assert cfg.optim_wrapper.type == 'AutocastOptimWrapper'
    assert cfg.optim_wrapper.dtype == 'float16'
    plain = train_tool.build_config(train_tool.parse_args([demo, '--work-dir', str(tmp_path),
                                                           '--amp']))
    assert 'dtype' not in plain.optim_wrapper


@pytest.mark.parametrize('script, args', [('dist_train.sh', ['cfg.py', '2']),
                                          ('dist_test.sh', ['cfg.py', 'ckpt.pth', '2'])])
def test_the_scripts_tell_the_tools_whether_their_caller_set_omp_num_threads(tmp_path, script,
                                                                            args):
    """torchrun sets OMP_NUM_THREADS=1 where its caller set none; the tools must know that 1
    is not the caller's (xmr.engine.threads.CALLER_SET_NO_OMP)."""
    from xmr.engine.threads import CALLER_SET_NO_OMP

    python = tmp_path / 'python'
    python.write_text(f'#!/bin/sh\necho "[${{{CALLER_SET_NO_OMP}-}}]"\n')
    python.chmod(0o755)
    inherited = {key: value for key, value in os.environ.items() if key != 'OMP_NUM_THREADS'}
    unset = subprocess.run(['bash', str(TOOLS / script), *args], capture_output=True, text=True,
                           env={**inherited, 'PYTHON': str(python)}, check=True)
    assert unset.stdout == '[1]\n'
    # A mark left in the caller's environment by an earlier call is not taken for this one's.
    chosen = subprocess.run(['bash', str(TOOLS / script), *args], capture_output=True,
                            text=True, check=True,
                            env={**inherited, 'PYTHON': str(python), 'OMP_NUM_THREADS': '3',
                                 CALLER_SET_NO_OMP: '1'})
    assert chosen.stdout == '[]\n'


@pytest.mark.parametrize('launcher, names', [
    ('dist_train', 'CONFIG NUM_PROCESSES [tools/train.py options...]'),
    ('dist_test', 'CONFIG CHECKPOINT NUM_PROCESSES [tools/test.py options...]'),
    ('slurm_train', 'PARTITION JOB_NAME CONFIG [tools/train.py options...]'),
    ('slurm_test', 'PARTITION JOB_NAME CONFIG CHECKPOINT [tools/test.py options...]')])
def test_the_xmr_command_runs_the_launch_scripts_by_their_names(launcher, names):
    """An installed xmr has no tools/ folder to run them from: `xmr dist_train ...`."""
    shown = subprocess.run([sys.executable, '-m', 'xmr', launcher, '--help'],
                           capture_output=True, text=True, check=False)
    assert (shown.returncode, shown.stdout, shown.stderr) == (
        0, f'usage: xmr {launcher} {names}\n', '')
    assert launcher in available()


def fake_srun(folder: Path) -> Path:
    """An ``srun`` printing the PYTHONPATH it was given and its arguments."""
    srun = folder / 'srun'
    srun.write_text('#!/bin/sh\necho "PYTHONPATH=$PYTHONPATH"\necho "$@"\n')
    srun.chmod(0o755)
    return srun


def test_the_launched_processes_run_the_interpreter_of_the_xmr_command(tmp_path):
    """`/path/venv/bin/xmr dist_train ...` with no environment activated: the `python` first
    on PATH may lack xmr."""
    inherited = {key: value for key, value in os.environ.items() if key != 'PYTHON'}
    out = subprocess.run([sys.executable, '-m', 'xmr', 'slurm_train', 'part', 'job', 'cfg.py'],
                         capture_output=True, text=True, check=False,
                         env={**inherited, 'SRUN': str(fake_srun(tmp_path)), 'GPUS': '1'})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].split()[-6:] == [
        sys.executable, '-u', str(tool_path('train.py')), 'cfg.py', '--launcher', 'slurm']


def test_only_a_checkout_s_folder_goes_on_the_python_path(tmp_path):
    """A wheel's launch scripts lie in xmr/.mim/tools: that folder's parent on PYTHONPATH would
    put xmr's configs/ and tools/ before a project's own of those names."""
    installed = tmp_path / 'site-packages' / 'xmr' / '.mim' / 'tools'
    installed.mkdir(parents=True)
    for script in ('slurm_train.sh', 'slurm_launch.sh', 'dist_launch.sh'):
        shutil.copy(TOOLS / script, installed)
    env = {**{key: value for key, value in os.environ.items() if key != 'PYTHONPATH'},
           'SRUN': str(fake_srun(tmp_path)), 'GPUS': '1'}
    for tools, pythonpath in ((installed, ''), (TOOLS, f'{TOOLS}/..')):
        out = subprocess.run(['bash', str(tools / 'slurm_train.sh'), 'part', 'job', 'cfg.py'],
                             capture_output=True, text=True, check=False, env=env)
        assert out.stdout.splitlines()[0] == f'PYTHONPATH={pythonpath}', out.stderr


def args_printer(folder: Path) -> Path:
    """A stand-in for ``python`` or ``srun`` that prints each argument it got on a line."""
    printer = folder / 'printer'
    printer.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    printer.chmod(0o755)
    return printer


def test_arguments_with_spaces_and_quotes_reach_the_tools_unchanged(tmp_path):
    printer = str(args_printer(tmp_path))
    options = ['--cfg-options', "work_dir='runs/a b'", 'x="y z"']
    out = run('dist_train.sh', 'my cfg.py', '2', *options, PYTHON=printer)
    assert out.stdout.splitlines()[-6:] == ['my cfg.py', '--launcher', 'pytorch', *options]
    out = run('slurm_test.sh', 'part', 'job name', 'my cfg.py', 'a ckpt.pth', *options,
              SRUN=printer, GPUS='1')
    lines = out.stdout.splitlines()
    assert '--job-name=job name' in lines
    assert lines[-7:] == ['my cfg.py', 'a ckpt.pth', '--launcher', 'slurm', *options]


def test_srun_args_are_split_as_the_shell_splits_them(tmp_path):
    """``SRUN_ARGS='--comment="a b"'`` went to srun as '--comment="a' and 'b"'."""
    out = run('slurm_train.sh', 'part', 'job', 'cfg.py', SRUN=str(args_printer(tmp_path)),
              GPUS='1', SRUN_ARGS='--time=1:00 --comment="two words" --mail-user=\'a b\'')
    lines = out.stdout.splitlines()
    start = lines.index('--kill-on-bad-exit=1') + 1
    assert lines[start:start + 4] == ['--time=1:00', '--comment=two words', '--mail-user=a b',
                                      'python']
    blank = run('slurm_train.sh', 'part', 'job', 'cfg.py', SRUN=str(args_printer(tmp_path)),
                GPUS='1', SRUN_ARGS='  ')
    assert blank.stdout.splitlines()[start - 1:start + 1] == ['--kill-on-bad-exit=1', 'python']
    unclosed = run('slurm_train.sh', 'part', 'job', 'cfg.py', SRUN='echo',
                   SRUN_ARGS='--comment="a b')
    assert (unclosed.returncode, unclosed.stdout) == (2, '')
    assert unclosed.stderr == ('error: SRUN_ARGS: \'--comment="a b\' is no command line of srun '
                               "options (no closing quotation); quote as a shell does, e.g. "
                               'SRUN_ARGS=\'--comment="a b"\'\n')


@pytest.mark.parametrize('env, refused', [
    (dict(PORT='abc'), "error: PORT: 'abc' is no port number (1 to 65535); set PORT=N"),
    (dict(PORT='70000'), "error: PORT: '70000' is no port number (1 to 65535); set PORT=N"),
    (dict(PORT='0'), "error: PORT: '0' is no port number (1 to 65535); set PORT=N"),
    (dict(MASTER_PORT='x'), "error: MASTER_PORT: 'x' is no port number (1 to 65535); set "
     'PORT=N'),
    (dict(NNODES='0'), "error: NNODES: '0' is no positive number of nodes; set NNODES=N"),
    (dict(NNODES='4:2'), "error: NNODES: '4:2' has its fewest nodes above its most; set "
     'NNODES=MIN:MAX with MIN <= MAX'),
    (dict(NNODES='2', NODE_RANK='2'), "error: NODE_RANK: '2' is no node of NNODES=2; set "
     'NODE_RANK to 0 to 1, one per node'),
    (dict(NODE_RANK='x'), "error: NODE_RANK: 'x' is no node of NNODES=1; set NODE_RANK to 0 "
     'to 0, one per node')])
def test_a_bad_port_or_node_is_refused_before_torchrun(env, refused):
    """torchrun refused PORT=70000 and NNODES=4:2 with a traceback, and a NODE_RANK past
    NNODES waited for its rendezvous until the timeout."""
    out = run('dist_train.sh', 'cfg.py', '2', PYTHON='echo', **env)
    assert (out.returncode, out.stdout, out.stderr) == (2, '', refused + '\n')
