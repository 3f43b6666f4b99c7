"""run_tool: every tool failure is one ``error:`` line on stderr and exit status 2."""
from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import signal
import subprocess
import sys
from pathlib import Path

import PIL
import pytest
import torch

from xmr.datasets.media_io import MediaReadError
from xmr.run_config import ConfigOptionsAction
from xmr.utils import cli
from xmr.utils.cli import (
    EXIT_ERROR,
    GatherAction,
    UserError,
    UserKeyError,
    argument_text,
    comma_list,
    did_you_mean,
    given_device,
    given_file,
    run_tool,
)

TOOLS = Path(__file__).resolve().parents[2] / 'tools'


def _fails_with(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run_tool(main, argv)
    assert exit_info.value.code == EXIT_ERROR
    return capsys.readouterr().err


def _raise(error):
    def main(argv):
        raise error
    return main


def test_a_user_error_is_one_line_naming_where_what_and_the_fix(capsys):
    err = _fails_with(_raise(UserError('a.json', 'has no items', 'convert it again')), [],
                      capsys)
    assert err == 'error: a.json: has no items: convert it again\n'


def test_other_failures_are_one_line_too_and_unexpected_ones_say_so(capsys):
    assert _fails_with(_raise(FileNotFoundError(2, 'No such file or directory', 'x.pth')), [],
                       capsys) == 'error: x.pth: No such file or directory\n'
    assert _fails_with(_raise(SystemExit('error: old style')), [], capsys) == \
        'error: old style\n'
    err = _fails_with(_raise(ZeroDivisionError('division by zero')), [], capsys)
    assert err == ('error: ZeroDivisionError: division by zero (unexpected; run again with '
                   '--debug for the traceback)\n')
    assert 'Traceback' not in err
    err = _fails_with(_raise(MediaReadError('x.jpg', 'truncated JPEG')), [], capsys)
    assert err == ("error: x.jpg: truncated JPEG: replace the file, or set on_corrupt='skip' on "
                   'the dataset to leave it out\n')


def test_a_key_error_xmr_raises_on_purpose_prints_as_written(capsys):
    err = _fails_with(_raise(UserKeyError("phase 1 (x): unknown keys ['itres']")), [], capsys)
    assert err == "error: phase 1 (x): unknown keys ['itres']\n"
    err = _fails_with(_raise(KeyError('itres')), [], capsys)  # a bug's KeyError stays one
    assert err == ("error: KeyError: 'itres' (unexpected; run again with --debug for the "
                   'traceback)\n')


def test_a_ctrl_c_a_library_turned_into_another_error_stays_an_interrupt(capsys):
    def main(argv):
        try:
            raise KeyboardInterrupt
        except:  # noqa: E722  (as MMEngine's Config.pretty_text does)
            raise SyntaxError('Failed to format the config file')  # noqa: B904

    with pytest.raises(KeyboardInterrupt):
        run_tool(main, [])
    assert capsys.readouterr().err == ''


def test_debug_shows_the_traceback_and_is_not_passed_to_main(capsys):
    seen = []

    def main(argv):
        seen.append(argv)
        raise UserError('k', 'bad', 'fix')

    err = _fails_with(main, ['--x', '--debug'], capsys)
    assert seen == [['--x']]
    assert err.startswith('Traceback') and err.endswith('error: k: bad: fix\n')


def test_success_and_argparse_exits_pass_through(capsys):
    calls = []
    run_tool(calls.append, ['a'])
    assert calls == [['a']]

    def main(argv):
        argparse.ArgumentParser(prog='tool').parse_args(argv)

    with pytest.raises(SystemExit) as exit_info:
        run_tool(main, ['--nope'])
    assert exit_info.value.code == 2 and 'unrecognized arguments' in capsys.readouterr().err


@pytest.mark.parametrize('script', sorted(
    str(path.relative_to(TOOLS)) for path in [*TOOLS.glob('*.py'), *TOOLS.glob('*/*.py')]))
def test_every_tool_entry_runs_through_run_tool(script):
    source = (TOOLS / script).read_text(encoding='utf-8')
    entry = source[source.index("if __name__ == '__main__':"):]
    assert 'run_tool(' in entry, f'tools/{script} does not end with run_tool(main)'


@pytest.mark.parametrize('name, problem', [('nope.py', 'no such file'),
                                           ('configs', 'is a folder, not a file')])
def test_train_with_a_missing_config_prints_no_traceback(tmp_path, monkeypatch, capsys, name,
                                                         problem):
    """A folder given for the config was said not to exist."""
    (tmp_path / 'configs').mkdir()
    monkeypatch.setattr(sys, 'argv', ['train.py', str(tmp_path / name)])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(TOOLS / 'train.py'), run_name='__main__')
    err = capsys.readouterr().err
    assert exit_info.value.code == EXIT_ERROR
    assert err == (f'error: {tmp_path / name} (CONFIG): {problem}: give the path of a config '
                   "file, or name a config xmr ships as 'xmr::demo/static_tiny-clip_synthetic.py'"
                   '\n')
    assert sorted(p.name for p in tmp_path.iterdir()) == ['configs']  # nothing written


def test_a_failure_exits_with_status_2_as_a_bad_argparse_flag_does(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_tool(_raise(UserError('a', 'b')), [])
    assert exit_info.value.code == 2
    capsys.readouterr()


def test_comma_list_reads_each_entry_and_refuses_a_list_of_none():
    counts = comma_list(cli.int_at_least(0), '0,1,2')
    assert counts('0,1,,2') == [0, 1, 2]
    for text in ('', ',', ' , '):
        with pytest.raises(argparse.ArgumentTypeError,
                           match=f"^{text!r} lists nothing: give one or more comma-separated, "
                                 'e.g. 0,1,2$'):
            counts(text)
    with pytest.raises(argparse.ArgumentTypeError, match="'-1' is no whole number >= 0"):
        counts('1,-1')


def test_did_you_mean_names_a_close_choice_and_nothing_for_a_far_one():
    # 'trian' is 'train' with two letters swapped: 0.8 similar, above the 0.6 cutoff.
    assert did_you_mean('trian', ['test', 'train']) == " (did you mean 'train'?)"
    assert did_you_mean('zzzz', ['test', 'train']) == ''


def test_help_that_exits_without_a_status_still_lists_debug(capsys):
    def main(argv):
        print('usage: tool')
        raise SystemExit  # code None, as sys.exit() with no argument

    with pytest.raises(SystemExit) as exit_info:
        run_tool(main, ['--help'])
    assert exit_info.value.code is None
    assert '--debug' in capsys.readouterr().out


def test_a_ctrl_c_beneath_two_library_errors_stays_an_interrupt(capsys):
    def main(argv):
        try:
            try:
                raise KeyboardInterrupt
            except:  # noqa: E722
                raise RuntimeError('while saving')  # noqa: B904
        except RuntimeError:
            raise SyntaxError('Failed to format the config file')  # noqa: B904

    with pytest.raises(KeyboardInterrupt):
        run_tool(main, [])
    assert capsys.readouterr().err == ''


@pytest.mark.parametrize('variable', ['LOCAL_RANK', 'SLURM_LOCALID', 'OMPI_COMM_WORLD_LOCAL_RANK'])
def test_a_refusal_before_the_process_group_is_printed_by_local_rank_0_alone(variable, monkeypatch,
                                                                           capsys):
    """torchrun printed a refused work dir once per process; each still exits with status 2."""
    for name in ('LOCAL_RANK', 'SLURM_LOCALID', 'OMPI_COMM_WORLD_LOCAL_RANK'):
        monkeypatch.delenv(name, raising=False)
    refusal = _raise(UserError('work_dirs/x', 'holds the checkpoints of an earlier run'))
    monkeypatch.setenv(variable, '1')
    assert _fails_with(refusal, [], capsys) == ''
    monkeypatch.setenv(variable, '0')
    assert _fails_with(refusal, [], capsys) == \
        'error: work_dirs/x: holds the checkpoints of an earlier run\n'


def test_an_unexpected_error_or_one_after_the_group_starts_is_printed_by_every_rank(
        monkeypatch, capsys):
    """Such an error may be its rank's own (a GPU, a shard only it reads): hiding it would leave
    the other ranks waiting for a process that is gone without a word."""
    import torch.distributed as dist

    monkeypatch.setenv('LOCAL_RANK', '1')
    assert _fails_with(_raise(RuntimeError('CUDA error: invalid device ordinal')), [],
                       capsys).startswith('error: RuntimeError: CUDA error')
    dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert _fails_with(_raise(UserError('shard-1', 'is missing')), [], capsys) == \
            'error: shard-1: is missing\n'
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize('tool', ['train', 'test', 'cache_features'])
def test_a_usage_error_under_a_launcher_is_printed_by_local_rank_0_alone(tool, monkeypatch,
                                                                        capsys):
    """argparse printed its usage and error itself, once per torchrun process; the others now
    exit with the same status, silent."""
    module = runpy.run_path(str(TOOLS / f'{tool}.py'))
    for name in ('LOCAL_RANK', 'SLURM_LOCALID', 'OMPI_COMM_WORLD_LOCAL_RANK'):
        monkeypatch.delenv(name, raising=False)
    for rank, printed in (('1', False), ('0', True)):
        monkeypatch.setenv('LOCAL_RANK', rank)
        with pytest.raises(SystemExit) as exit_info:
            module['parse_args'](['--cfg-options', 'resume'])
        assert exit_info.value.code == EXIT_ERROR
        err = capsys.readouterr().err
        assert ("'resume' is no KEY=VALUE" in err and 'usage:' in err) is printed
        assert bool(err) is printed


class _FailingDataset(torch.utils.data.Dataset):
    """One item, whose read raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int):
        raise self.error


@pytest.mark.parametrize('error', [
    MediaReadError('x.jpg', 'truncated JPEG'), ZeroDivisionError('division by zero'),
    # OSError / ValueError subclasses outside builtins, named by their module in the traceback
    PIL.UnidentifiedImageError('cannot identify image file x.jpg'),
    json.JSONDecodeError('Expecting value', 'x', 0),
    # its text names the file last ("[Errno 2] No such file or directory: 'x.jpg'")
    FileNotFoundError(2, 'No such file or directory', "frames/it's x.jpg")], ids=[
        'xmr', 'unexpected', 'pil', 'json', 'file'])
def test_an_error_a_dataloader_worker_raised_prints_as_without_workers(capsys, error):
    """torch re-raises a worker's MediaReadError as a RuntimeError whose text is 'Caught
    MediaReadError in DataLoader worker process 0.' and the worker's traceback: a training
    run under on_corrupt='raise' (every config reads with workers) printed about 50 lines,
    marked unexpected, the file named on the last."""
    def main(argv):
        next(iter(torch.utils.data.DataLoader(_FailingDataset(error), num_workers=1)))

    assert _fails_with(main, [], capsys) == _fails_with(_raise(error), [], capsys)


def test_xmrs_errors_built_from_parts_pickle_as_they_were_raised():
    """An error raised in a spawned dataloader worker or another process comes back pickled:
    rebuilt from its message alone, MediaReadError, NoMediaReadError and UserError failed
    (``missing 1 required positional argument: 'reason'``), hiding the error raised."""
    import pickle

    from xmr.apis.inference import NoMediaReadError
    from xmr.datasets.corrupt_policy import SkippedMedia

    for error in (MediaReadError('x.jpg', 'truncated JPEG'),
                  MediaReadError('x.jpg', 'truncated JPEG', 'give another'),
                  NoMediaReadError([SkippedMedia(3, 'y.png', 'empty file')]),
                  UserError('cfg.py', 'no model', 'add one'), UserError('cfg.py', 'no model')):
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), str(copy), copy.__dict__) == (type(error), str(error),
                                                          error.__dict__)


def test_a_failure_is_written_to_the_log_file_of_the_run_it_stopped(tmp_path, capsys):
    """A run's log ended at its last iteration: why it stopped went to stderr alone."""
    from mmengine.logging import MMLogger
    log_file = tmp_path / 'run.log'
    logger = MMLogger.get_instance('test_cli_run_log', log_file=str(log_file))
    logger.info('Iter(train) [3/10]')

    def main(argv):
        raise RuntimeError('boom at iteration 4')

    err = _fails_with(main, [], capsys)
    line = 'error: RuntimeError: boom at iteration 4 (unexpected; run again with --debug'
    assert err.count(line) == 1  # the logger's own console handler did not print it again
    log = log_file.read_text()
    assert log.index('Iter(train) [3/10]') < log.index(line)
    assert 'Traceback (most recent call last)' in log
    assert "raise RuntimeError('boom at iteration 4')" in log


def test_given_file_names_the_path_the_key_and_what_is_wrong(tmp_path, monkeypatch):
    """One wording for a missing, folder or unreadable file, whatever tool or key it came from."""
    present = tmp_path / 'a.pth'
    present.write_bytes(b'x')
    given_file(present, '--resume', 'give a .pth')  # a readable file passes
    for path, problem in ((tmp_path / 'gone.pth', 'no such file'),
                          (tmp_path, 'is a folder, not a file')):
        with pytest.raises(UserError) as error:
            given_file(path, 'load_from', 'give a .pth')
        assert str(error.value) == f'{path} (load_from): {problem}: give a .pth'
    given_file(tmp_path, 'pretrained', 'give a file or folder', folder_ok=True)
    # A pipe exists: it was named 'no such file'. An input read once passes (stream_ok).
    os.mkfifo(tmp_path / 'pipe')
    with pytest.raises(UserError) as error:
        given_file(tmp_path / 'pipe', '--queries', 'give a text file')
    assert str(error.value) == (f"{tmp_path / 'pipe'} (--queries): is no regular file (a pipe, "
                                'a device or a socket): give a text file')
    given_file(tmp_path / 'pipe', '--queries', 'give a text file', stream_ok=True)
    # Root reads any file whatever its mode: the permission is what os.access answers.
    monkeypatch.setattr(os, 'access', lambda path, mode: False)
    with pytest.raises(UserError) as error:
        given_file(present, 'CHECKPOINT', 'give a .pth')
    assert str(error.value) == (f'{present} (CHECKPOINT): cannot be read (permission denied): '
                                'give a .pth')


@pytest.mark.parametrize('gpus', [0, 2])
def test_given_device_takes_the_gpus_this_machine_has_and_no_other(monkeypatch, gpus):
    """``cuda`` is ``cuda:0``: refused on a machine without a GPU, as ``cuda:N`` past the last."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: gpus)
    assert given_device(None) == ('cuda' if gpus else 'cpu')
    assert given_device('cpu') == 'cpu'
    for name in ('cuda', f'cuda:{gpus}'):
        if name == 'cuda' and gpus:
            assert given_device(name) == name
            continue
        with pytest.raises(UserError, match=rf'^--device {name}: this machine has {gpus} CUDA '
                           r'device\(s\): give cpu'):
            given_device(name)
    with pytest.raises(UserError, match='^--device gpu0: is no torch device'):
        given_device('gpu0')


def test_a_gathered_list_flag_adds_its_repeats_and_replaces_its_default():
    default = ['en', 'de']
    parser = argparse.ArgumentParser()
    parser.add_argument('--languages', nargs='+', action=GatherAction, default=default)
    assert parser.parse_args([]).languages == ['en', 'de']
    assert parser.parse_args(['--languages', 'fr']).languages == ['fr']
    assert parser.parse_args(['--languages', 'fr', 'cs', '--languages', 'ja']).languages == [
        'fr', 'cs', 'ja']
    assert parser.parse_args(['--languages', 'fr']).languages == ['fr']  # nothing carried over
    assert default == ['en', 'de']


def _parsers_of(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers_of(sub)


@pytest.mark.parametrize('script', sorted(
    str(path.relative_to(TOOLS)) for path in [*TOOLS.glob('*.py'), *TOOLS.glob('*/*.py')]))
def test_every_list_flag_of_every_tool_gathers_its_repeats(script, monkeypatch):
    """``--ablation a --ablation b`` kept ``b`` alone (argparse's ``store``): a run trained
    another paper row than its name said."""
    built = []

    def record(parser, args=None, namespace=None):
        built.append(parser)
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, 'parse_known_args', record)
    monkeypatch.setattr(sys, 'argv', [script, '--help'])
    with pytest.raises(SystemExit):
        runpy.run_path(str(TOOLS / script), run_name='__main__')
    assert built, f'tools/{script} parsed no command line'
    single = [f'{action.option_strings[0]} ({type(action).__name__})'
              for parser in _parsers_of(built[0]) for action in parser._actions
              if action.option_strings and action.nargs in ('+', '*')
              and not isinstance(action, (GatherAction, ConfigOptionsAction))]
    assert not single, f'tools/{script}: list flags that keep their last use alone: {single}'


# A tool run as a process: it logs (MMEngine's logger), prints between its outputs, writes them.
# Its text is ASCII (escapes): Python under LC_ALL=C cannot read a command line that is not.
LOGGING_TOOL = '''
import sys
from pathlib import Path
from mmengine.logging import MMLogger, print_log
from xmr.utils.cli import run_tool

def main(args):
    MMLogger.get_instance('tool', logger_name='tool')
    for name in ('de', 'fr', 'zh'):
        for line in range(200):
            print_log(f'exporting {name}: step {line}', logger='current')
        Path(args[0], f'{name}.txt').write_text(name)
        print(f'{name}: \\u7ea2\\u8272\\u7684\\u5706\\u5708 written')

run_tool(main)
'''


def run_logging_tool(folder: Path, stdout, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-c', LOGGING_TOOL, str(folder)], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=120,
                          env={**{key: value for key, value in os.environ.items()
                                  if key != 'PYTHONIOENCODING'}, **env})


def test_a_reader_that_quits_early_stops_neither_the_tool_nor_its_log(tmp_path):
    """`tools/language_modules.py export ... | head -1`: the print between two exports stopped
    the tool after the first (`error: [Errno 32] Broken pipe`), and each later log line printed
    a `--- Logging error ---` traceback."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        tool = run_logging_tool(tmp_path, writer)
    finally:
        os.close(writer)
    assert (tool.returncode, tool.stderr) == (0, '')
    assert sorted(path.name for path in tmp_path.iterdir()) == ['de.txt', 'fr.txt', 'zh.txt']


@pytest.mark.parametrize('env', [dict(PYTHONIOENCODING='ascii'),
                                 dict(LC_ALL='C', PYTHONUTF8='0')])
def test_a_stdout_that_is_not_utf8_prints_escapes_after_the_work_is_done(tmp_path, env):
    """`tools/search.py ... --out hits.json` on an ASCII terminal failed at the table, printed
    before the file was written: `error: 'ascii' codec can't encode characters`."""
    tool = run_logging_tool(tmp_path, subprocess.PIPE, **env)
    assert (tool.returncode, tool.stderr) == (0, '')
    assert tool.stdout.splitlines()[-1] == ('zh: \\u7ea2\\u8272\\u7684\\u5706\\u5708 written')
    assert (tmp_path / 'zh.txt').read_text() == 'zh'


PATH_PRINTING_TOOL = '''
import os
from xmr.utils.cli import run_tool

run_tool(lambda args: print('wrote', os.fsdecode(b'mod\\xe8le.pt'), '\\u7ea2'))
'''


@pytest.mark.parametrize('env, red', [(dict(LC_ALL='C', PYTHONUTF8='0'), rb'\u7ea2'),
                                      (dict(LC_ALL='C.UTF-8'), '\u7ea2'.encode()),
                                      (dict(PYTHONUTF8='1'), '\u7ea2'.encode()),
                                      (dict(PYTHONIOENCODING='ascii'), rb'\u7ea2')])
def test_a_path_a_tool_prints_names_its_file_whatever_the_terminal(env, red):
    """A file name that is not UTF-8 (Latin-1's mod\\xe8le) printed as 'mod\\udce8le', which
    names no file, under C, C.UTF-8 and UTF-8 mode, whose stdout writes such names' bytes."""
    tool = subprocess.run([sys.executable, '-c', PATH_PRINTING_TOOL], capture_output=True,
                          timeout=60, env={**os.environ, **env})
    assert (tool.returncode, tool.stderr) == (0, b'')
    assert tool.stdout == b'wrote mod\xe8le.pt ' + red + b'\n'


def test_an_argument_is_read_as_the_utf8_its_bytes_are():
    """Under LC_ALL=C without UTF-8 mode, Python decodes the arguments as ASCII: the bytes of
    赤い丸 arrive as lone surrogates, which tools/search.py refused as not UTF-8."""
    as_ascii = '赤い丸'.encode().decode('ascii', 'surrogateescape')
    assert os.fsencode(as_ascii) == '赤い丸'.encode()  # what os.fsencode gives back here
    assert argument_text(as_ascii) == argument_text(as_ascii, 'strict') == '赤い丸'
    latin1 = 'modèle'.encode('latin-1').decode('utf-8', 'surrogateescape')
    assert argument_text(latin1) == 'mod\\xe8le'
    with pytest.raises(UnicodeDecodeError):
        argument_text(latin1, 'strict')


def test_an_argument_a_locale_of_another_encoding_decoded_is_taken_as_it_is(monkeypatch):
    """Under LC_ALL=fr_FR.ISO-8859-1 (or zh_CN.GBK) Python decodes 'modèle' right; encoded
    back in that locale's encoding and read as UTF-8, search refused it as not UTF-8."""
    monkeypatch.setattr(os, 'fsencode', lambda text: text.encode('latin-1', 'surrogateescape'))
    assert argument_text('modèle', 'strict') == argument_text('modèle') == 'modèle'


INTERRUPTED_TOOL = '''
import sys
from pathlib import Path
from xmr.utils.cli import run_tool

def main(args):
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        if args[1] == 'swallowed':  # as MMEngine's Config.pretty_text turns it into another
            raise SyntaxError('Failed to format the config file') from None
        raise
    finally:
        Path(args[0]).write_text('kept')

run_tool(main)
'''


@pytest.mark.parametrize('how', ['raised', 'swallowed'])
def test_a_ctrl_c_ends_a_tool_with_one_line_as_killed_by_sigint(tmp_path, how):
    """The tool's last message (an interrupted cache build: 'the rows encoded so far are kept
    in ...') was followed by a traceback of 36 to 72 lines."""
    kept = tmp_path / 'kept.txt'
    ended = subprocess.run([sys.executable, '-c', INTERRUPTED_TOOL, str(kept), how],
                           capture_output=True, text=True, timeout=60)
    assert (ended.returncode, ended.stderr) == (-signal.SIGINT,
                                                'interrupted (--debug shows where)\n')
    assert kept.read_text() == 'kept'
    shown = subprocess.run([sys.executable, '-c', INTERRUPTED_TOOL, str(kept), how, '--debug'],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == -signal.SIGINT
    assert shown.stderr.startswith('Traceback') and 'KeyboardInterrupt' in shown.stderr


TERMINATED_TOOL = '''
import multiprocessing, sys, time
from pathlib import Path
from xmr.utils.cli import run_tool

def main(args):
    kept, ready = Path(args[0]), Path(args[1])
    child = multiprocessing.get_context('fork').Process(target=time.sleep, args=(60,))
    child.start()
    try:
        ready.write_text('started')
        time.sleep(60)
    finally:
        child.terminate()  # multiprocessing's own stop, SIGTERM: the child's default, not ours
        child.join()
        kept.write_text(str(child.exitcode))

run_tool(main)
'''


def test_sigterm_ends_every_tool_as_ctrl_c_does_and_a_forked_child_as_it_did(tmp_path):
    """A tool that did not ask for it (all but tools/search.py) died of SIGTERM at once, its
    finally blocks not run (a lock, a temporary folder left behind); a process it forked still
    dies of SIGTERM at once, as multiprocessing's terminate() expects."""
    import time

    kept, ready = tmp_path / 'kept.txt', tmp_path / 'ready'
    run = subprocess.Popen([sys.executable, '-c', TERMINATED_TOOL, str(kept), str(ready)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert (run.returncode, err) == (128 + signal.SIGTERM,
                                     'terminated by SIGTERM (--debug shows where)\n')
    assert kept.read_text() == str(-signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the test's own, untouched


def _report_sigterm_handler(queue):
    queue.put(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)


def test_a_child_forked_under_the_handler_and_stopped_at_once_dies_of_sigterm():
    """A SIGTERM reaching a child before the interpreter's after-fork reset was dropped and
    the child ran on (about three in four in a row of ``start(); terminate()`` here; CI's test
    above hung on one): SIGTERM is held back across ``fork`` and given to the default."""
    import multiprocessing
    import time

    fork = multiprocessing.get_context('fork')
    with cli.sigterm_interrupts():
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # the block is active
        queue = fork.Queue()
        alive = fork.Process(target=_report_sigterm_handler, args=(queue,))
        alive.start()
        assert queue.get(timeout=30) is True
        alive.join(30)
        exits = []
        for _ in range(40):
            child = fork.Process(target=time.sleep, args=(30,))
            child.start()
            child.terminate()
            child.join(30)
            exits.append(child.exitcode)
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert exits == [-signal.SIGTERM] * 40


def test_run_tool_gives_back_the_sigterm_handler_it_found(capsys):
    """Called from Python (a test, a notebook), the handler before the tool is the one after."""
    def own(number, frame):
        raise AssertionError('not called')

    before = signal.signal(signal.SIGTERM, own)
    try:
        run_tool(lambda args: None, [])
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, before)


NAMED_TOOLS = ('tools/test.py CONFIG CHECKPOINT; python tools/data/prepare_multi30k.py; '
               'tools/data/prepare_<dataset>.py; tools/convert/dasd_to_xmr.py; '
               'tools/dist_train.sh; tools/benchmarks/loop_time.py; /opt/tools/test.py; '
               'tools/nothing.py')


@pytest.mark.parametrize('run_by, named', [
    (None, NAMED_TOOLS),
    ('xmr train', 'xmr test CONFIG CHECKPOINT; xmr data prepare_multi30k; '
                  'xmr data prepare_<dataset>; xmr convert dasd_to_xmr; xmr dist_train; '
                  'tools/benchmarks/loop_time.py; /opt/tools/test.py; tools/nothing.py')])
def test_run_by_the_xmr_command_an_error_names_the_tools_as_xmr_commands(run_by, named,
                                                                         monkeypatch, capsys):
    monkeypatch.setattr(sys, 'argv', sys.argv[:])
    monkeypatch.setattr(cli, 'command_name', run_by)
    err = _fails_with(_raise(UserError('a.json', 'is old', NAMED_TOOLS)), [], capsys)
    assert err == f'error: a.json: is old: {named}\n'


def test_a_folder_or_output_beneath_a_file_is_named_before_anything_is_written(tmp_path):
    """A work dir beneath a file passed, and the run failed on 'Not a directory' once its work
    was done (tools/cache_features.py --work-dir, tools/visualize_features.py --out-dir)."""
    (tmp_path / 'file').write_text('')
    with pytest.raises(UserError, match=re.escape(
            f"{tmp_path / 'file' / 'a' / 'b'} (--work-dir): cannot be made there "
            f"({tmp_path / 'file'} is a file, not a folder): give a folder")):
        cli.given_folder(tmp_path / 'file' / 'a' / 'b', '--work-dir', 'give a folder')
    with pytest.raises(UserError, match=re.escape(
            f"{tmp_path / 'file'} (--work-dir): is a file, not a folder: give a folder")):
        cli.given_folder(tmp_path / 'file', '--work-dir', 'give a folder')
    cli.given_folder(tmp_path / 'new' / 'deeper', '--work-dir', 'give a folder')
    with pytest.raises(UserError, match=re.escape(
            f"{tmp_path / 'file' / 'r.json'} (--out): cannot be written there "
            f"({tmp_path / 'file'} is a file, not a folder)")):
        cli.given_output(tmp_path / 'file' / 'r.json', '--out', 'give another')
    before = sorted(tmp_path.iterdir())
    cli.given_output(tmp_path / 'new' / 'deeper' / 'r.json', '--out', 'give another')
    # Checked, nothing made: a tool refused after the check left the folders empty.
    assert sorted(tmp_path.iterdir()) == before


def test_an_output_whose_folders_cannot_be_made_is_refused_and_nothing_is_made(tmp_path,
                                                                              monkeypatch):
    """The folder an output goes in is made by its writer: the check tries a file in the
    nearest folder that stands, where the missing ones would be made (a read-only folder
    refuses it, whatever user the tests run as)."""
    tried = []

    def refused(dir: str, **kwargs):
        tried.append(dir)
        raise PermissionError(13, 'Permission denied')

    monkeypatch.setattr(cli.tempfile, 'TemporaryFile', refused)
    with pytest.raises(UserError, match=re.escape(
            f"{tmp_path / 'new' / 'r.json'} (--out): cannot be written there "
            '(Permission denied): give another')):
        cli.given_output(tmp_path / 'new' / 'r.json', '--out', 'give another')
    assert tried == [str(tmp_path)] and not list(tmp_path.iterdir())


def test_a_folder_allowed_leaves_a_missing_file_refused_and_a_device_is_a_stream(tmp_path):
    """``folder_ok`` lets a folder pass, not a path to nothing; ``stream_ok`` takes a
    character device (``/dev/stdin`` of a terminal) as it takes a pipe."""
    with pytest.raises(UserError, match=r'gone \(pretrained\): no such file'):
        given_file(tmp_path / 'gone', 'pretrained', 'give a file or folder', folder_ok=True)
    with pytest.raises(UserError, match=r'null \(--queries\): is no regular file'):
        given_file(os.devnull, '--queries', 'give a text file')
    given_file(os.devnull, '--queries', 'give a text file', stream_ok=True)


def test_a_work_dir_that_is_a_link_to_nothing_is_named_with_its_target(tmp_path):
    """A scratch disk not mounted: ``os.makedirs`` said 'File exists', naming no key."""
    (tmp_path / 'work').symlink_to(tmp_path / 'scratch' / 'run')
    with pytest.raises(UserError, match=re.escape(
            f"{tmp_path / 'work'} (--work-dir): is a link to {tmp_path / 'scratch' / 'run'}, "
            'which does not exist: mount or make the folder it points to, or give another')):
        cli.given_folder(tmp_path / 'work', '--work-dir', 'give a folder')


def test_an_output_where_a_folder_stands_is_refused():
    with pytest.raises(UserError, match=r' \(--out\): is a folder, not a file: give a file'):
        cli.given_output(Path(__file__).parent, '--out', 'give a file')


def test_a_json_output_replaces_only_the_tools_own_earlier_output_when_told(tmp_path):
    """A checkpoint, a test result or an index standing at the path was written over."""
    def check(path, overwrite=False):
        cli.given_json_output(path, '--out', "an earlier search's hits", ('hits', 'queries'),
                              overwrite)

    check(tmp_path / 'new.json')  # nothing there yet
    other = tmp_path / 'other.json'
    other.write_text(json.dumps(dict(hits=[])))
    with pytest.raises(UserError, match=re.escape(
            f"{other} (--out): exists and is not an earlier search's hits (a JSON object of "
            'hits, queries); it is left as it is: give --out another .json path')):
        check(other, overwrite=True)
    earlier = tmp_path / 'earlier.json'
    earlier.write_text(json.dumps(dict(hits=[], queries=[])))
    with pytest.raises(UserError, match=re.escape(
            f"{earlier} (--out): holds an earlier search's hits; it is kept: pass --overwrite "
            'to replace it, or give --out another .json path')):
        check(earlier)
    check(earlier, overwrite=True)


def test_a_key_error_raised_without_a_message_prints_as_nothing():
    assert str(UserKeyError()) == ''


def test_a_workers_error_is_the_last_one_its_traceback_raises():
    """An error raised while handling another prints both; the one raised is the last."""
    text = ('Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent '
            'call last):\n  File "a.py", line 1, in f\nValueError: the first\n\nDuring handling '
            'of the above exception, another exception occurred:\n\nTraceback (most recent call '
            'last):\n  File "a.py", line 3, in f\nValueError: the one raised\n')
    assert cli.worker_error(RuntimeError(text)) == ('ValueError', 'the one raised')


def test_a_file_error_without_a_reason_names_its_file_and_kind():
    error = PermissionError()
    error.filename = 'frames/x.jpg'
    assert cli.error_line(error) == 'frames/x.jpg: PermissionError'


def test_a_usage_error_before_help_is_reached_lists_no_debug_flag(capsys):
    """argparse stops at the first bad value, before ``-h``: the note belongs to help."""
    def main(argv):
        parser = argparse.ArgumentParser(prog='tool')
        parser.add_argument('--n', type=int)
        parser.parse_args(argv)

    with pytest.raises(SystemExit) as exit_info:
        run_tool(main, ['--n', 'x', '-h'])
    assert exit_info.value.code == 2
    assert '--debug' not in capsys.readouterr().out


def test_a_block_run_outside_the_main_thread_keeps_the_default():
    """Python takes a signal handler in the main thread alone: elsewhere setting one raised."""
    import threading

    ran, errors = [], []

    def body():
        try:
            with cli.sigterm_interrupts():
                ran.append(signal.getsignal(signal.SIGTERM))
        except Exception as error:  # noqa: BLE001 (reported below, in the test's thread)
            errors.append(error)

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert errors == [] and ran == [before]


@pytest.mark.skipif(not Path('/dev/full').exists(), reason='needs /dev/full (a full disk)')
def test_a_write_error_that_names_no_file_is_named_by_the_file_being_written():
    """MMEngine's run log and config dump write to a full disk: `error: [Errno 28] No space
    left on device` named neither, nor the folder to free."""
    import logging

    def dump() -> None:
        with open('/dev/full', 'w') as dumped:
            dumped.write('model = dict()\n')
            dumped.flush()

    def log(handler: logging.FileHandler) -> None:
        handler.stream.write('Name of parameter - Initialization information\n')
        handler.stream.flush()

    handler = logging.FileHandler('/dev/full')
    try:
        for write in (dump, lambda: log(handler)):
            with pytest.raises(OSError) as raised:
                write()
            assert raised.value.filename is None
            assert cli.error_line(raised.value) == (
                '/dev/full: writing it failed: No space left on device')
    finally:
        handler.stream = None  # its close would flush to /dev/full again
        handler.close()
    # Where no frame holds the file, the line stays the error's own.
    assert cli.error_line(OSError(28, 'No space left on device')) == (
        '[Errno 28] No space left on device')


PEER_GONE = '''
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from xmr.utils import cli

def run(rank, port):
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank,
                            world_size=2)
    if rank == 1:
        os._exit(3)  # its own error line said why
    try:
        dist.all_reduce(torch.ones(1))
    except RuntimeError as error:
        print(cli.error_line(error), cli._expected(error), sep='\\n', flush=True)

if __name__ == '__main__':
    # Not joined together: a joined spawn ends rank 0 as soon as rank 1 has ended.
    context = mp.spawn(run, args=(int(sys.argv[1]),), nprocs=2, join=False)
    context.processes[0].join()
'''


def test_a_rank_whose_peer_ended_says_so_not_an_unexpected_gloo_error(tmp_path):
    """Rank 0's line (and the run's log, which rank 0 writes) was `RuntimeError: [.../pair.cc:
    561] Connection closed by peer ... (unexpected; run again with --debug ...)`: the symptom,
    naming neither the rank nor where the cause is."""
    import socket

    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        port = probe.getsockname()[1]
    script = tmp_path / 'peer_gone.py'
    script.write_text(PEER_GONE)
    ran = subprocess.run([sys.executable, str(script), str(port)], capture_output=True,
                         text=True, timeout=120)
    line, expected = ran.stdout.splitlines()[:2]
    assert re.fullmatch(r"rank 0: another process of the launch stopped first \(the process "
                        r"group's Connection (closed|reset) by peer\): the error line that "
                        r'process printed says why', line)
    assert expected == 'True'  # not 'unexpected; run again with --debug'
