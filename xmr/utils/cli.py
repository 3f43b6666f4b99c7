"""How every command line of xmr reports a bad input: one line, exit status 2.

Each ``tools/*.py`` and ``tools/data/*.py`` entry ends with ``run_tool(main)``.
A failure is printed as ``error: <file/key/value>: <what is wrong>: <fix>`` on stderr and the
process exits with status 2 (as ``argparse`` does for a bad flag); the traceback is shown only
with ``--debug``. Library code raises :class:`UserError` where it knows the fault and its fix;
other exceptions still produce one line (marked as unexpected unless xmr raised it on
purpose, e.g. a ``MediaReadError`` naming the file), so that no tool prints a raw traceback by
default; an error a DataLoader worker raised, which torch re-raises wrapped in the worker's
traceback, is printed as if raised in the main process (:func:`worker_error`). Run by the
``xmr`` command, the line names the tools it suggests as ``xmr`` commands (:func:`as_typed`). A
Ctrl-C ends the tool with one line, ``interrupted``, as killed by SIGINT; SIGTERM (a
scheduler's stop, ``kill``) ends it alike, its clean-up run (a lock given back, a temporary
folder removed, a partial build named), with one line, ``terminated``, and exit status 143.

:func:`run_tool` runs every tool under :func:`sigterm_interrupts`, once for all, rather than
each tool itself: Python's default SIGTERM ended any of them at once, its ``finally`` blocks
not run, and a tool that forgot the line died so. What runs its own SIGTERM handler within
keeps it: ``tools/train.py``'s ``PreemptionHook`` replaces the handler for the training (a
checkpoint, then exit 143) and restores this one after, so that SIGTERM while the runner is
built, or during ``--test``, ends the run as Ctrl-C does, its work dir lock given back. The
processes a tool forks (DataLoader workers, which PyTorch's handler or
:mod:`xmr.engine.worker_signals`'s ignoring replaces as they start; a ``multiprocessing``
child, which its parent stops with SIGTERM) inherit the handler; in them it does what Python's
default did, end the process at once. Under a launcher every rank gets SIGTERM and each stops
as at a Ctrl-C, the loaders' workers, which ignore it, ending with their rank. Its stdout takes a
reader that quits early and a terminal that is not UTF-8 (:class:`ReaderStdout`). Under a
launcher (torchrun, srun, mpirun), a refusal before the process group starts is printed by the
first process of each node alone, a bad flag's usage error included
(:func:`quiet_on_other_processes`); every process still exits with status 2.
"""
from __future__ import annotations

import argparse
import ast
import codecs
import difflib
import errno
import io
import logging
import os
import re
import signal
import stat
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

__all__ = ['EXIT_ERROR', 'GatherAction', 'Terminated', 'UserError', 'UserKeyError',
           'add_custom_imports', 'comma_list', 'did_you_mean', 'given_device', 'given_file',
           'given_folder', 'given_json_output', 'given_output', 'import_user_module',
           'int_at_least',
           'quiet_on_other_processes', 'run_tool', 'sigterm_interrupts', 'worker_error']

EXIT_ERROR = 2
DEBUG_FLAG = '--debug'
# torch re-raises an error of a DataLoader worker as one whose text is "Caught <Type> in
# DataLoader worker process <n>.\nOriginal Traceback ...": the worker's traceback, ending with
# "<module>.<Type>: <message>". A type that cannot be built from that one text (MediaReadError
# takes the file and the reason) comes back as a RuntimeError.
_WORKER_ERROR = re.compile(r'Caught (\w+) in DataLoader worker process \d+\.\nOriginal ')
# OSError's str() with a file, the reason first: "[Errno 2] No such file or directory: 'x.jpg'".
# The file is one string literal (its repr), so that two files ("'a' -> 'b'") stay as they are.
_OS_ERROR_TEXT = re.compile(
    r"""\[Errno -?\d+\] (?P<reason>.+): (?P<file>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
# The lone surrogates Python decodes the bytes of an argument its locale could not read to.
_UNDECODED = re.compile('[\udc80-\udcff]+')
# A tool of the repository as a message names it: ``tools/test.py``, ``python
# tools/data/prepare_multi30k.py``, ``tools/data/prepare_<dataset>.py``, ``tools/dist_train.sh``
# (not a path ending so).
_TOOL_IN_TEXT = re.compile(
    r'(?<![\w/.-])(?:python )?tools/(?:(data|convert)/)?(\w+(?:<\w+>)?)\.(?:py|sh)\b')


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` for the choice closest to a misspelt ``word``, else ``''``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ''


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` taking a whole number of at least ``minimum``, whose usage error
    names the value (``--batch-size 0`` divided by zero once the model was built)."""

    def whole_number(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            number = None
        if number is None or number < minimum:
            raise argparse.ArgumentTypeError(f'{text!r} is no whole number >= {minimum}')
        return number

    return whole_number


def comma_list(item: Callable[[str], Any], example: str) -> Callable[[str], list]:
    """An argparse ``type`` taking a comma-separated list, each entry read by ``item`` (an
    argparse ``type`` itself, such as :func:`int_at_least`), empty entries skipped; a list with
    no entry is refused as a usage error naming the value (``--workers ''`` printed a table of
    no rows).

    Args:
        item: reads one entry; its ``ArgumentTypeError`` names the entry at fault.
        example: a list the usage error suggests (``'0,1,2'``).
    """

    def entries(text: str) -> list:
        values = [item(entry) for entry in text.split(',') if entry.strip()]
        if not values:
            raise argparse.ArgumentTypeError(
                f'{text!r} lists nothing: give one or more comma-separated, e.g. {example}')
        return values

    return entries


class GatherAction(argparse.Action):
    """A list flag (``nargs='+'``) whose repeats add up: ``--media a --media b`` gives
    ``[a, b]``, as ``--cfg-options`` does, where argparse's ``store`` kept the last use alone
    (``--ablation x --ablation y`` trained row ``y`` under a name that read right). The first
    use replaces the default; argparse's ``extend`` would add to it (``--languages de`` on a
    default of ten languages).
    """

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        given = getattr(namespace, self.dest, None)
        first = given is None or given is self.default
        setattr(namespace, self.dest, list(values) if first else [*given, *values])


class _ImportModules(GatherAction):
    """``--custom-imports MODULE ...``: the modules are imported as the flag is parsed, before
    the tool reads a file or a language code."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        for module in values:
            try:
                import_user_module(module, option_string)
            except UserError:
                if os.path.exists(module):  # the flag took the tool's own arguments after it
                    raise UserError(option_string, f'{module} is a file, not a module',
                                    'give the flag after the other arguments') from None
                raise
        super().__call__(parser, namespace, values, option_string)


def add_custom_imports(parser: argparse.ArgumentParser) -> None:
    """Give a tool without a config the ``--custom-imports`` of a config: the modules of the
    user's code that register what the tool must know, such as a language
    (``register_language``)."""
    parser.add_argument('--custom-imports', nargs='+', default=[], action=_ImportModules,
                        metavar='MODULE', help="modules to import first, as a config's "
                        "custom_imports: those registering a language of one's own "
                        '(docs/data.md); the folder holding them on PYTHONPATH')


def import_user_module(module: str, where: str | os.PathLike, **options: Any) -> None:
    """Import ``module`` of the user's code (again only where not yet imported), named at
    ``where`` (``<config>: custom_imports``, a tool's ``--custom-imports``).

    Args:
        module: its dotted name.
        where: the config or flag naming it, for the error.
        options: MMEngine's ``custom_imports`` options (``allow_failed_imports``).

    Raises:
        UserError: naming the module and why its import failed (any error it raised, a
            ``NameError`` or ``SyntaxError`` in it included; xmr's own refusals of what it
            registers are raised as they are). MMEngine reports a failure as a missing folder
            on ``PYTHONPATH`` and lists ``sys.path``, where the cause (a misspelt name inside
            the module, a missing package) is at the end of the error's chain.
    """
    from mmengine.utils import import_modules_from_strings

    try:
        import_modules_from_strings(module, **options)
    except (UserError, UserKeyError):
        raise
    except Exception as error:  # the user's module may raise anything
        cause = error
        while cause.__cause__ or cause.__context__:
            cause = cause.__cause__ or cause.__context__
        missing = isinstance(cause, ModuleNotFoundError) and cause.name is not None and (
            module == cause.name or str(module).startswith(f'{cause.name}.'))
        raise UserError(where, f'{module} failed to import: {type(cause).__name__}: {cause}',
                        'check its name, and that the folder holding it is on PYTHONPATH'
                        if missing else f'fix {module} (run again with --debug for the '
                        'traceback)') from error


class UserError(Exception):
    """A fault in what the user gave, with where it is and how to fix it.

    Args:
        where: the file, config key or value at fault.
        problem: what is wrong with it.
        fix: what to do instead (may be empty when the problem says it all).
    """

    def __init__(self, where: str | os.PathLike, problem: str, fix: str = '') -> None:
        self.where, self.problem, self.fix = str(where), problem, fix
        super().__init__(': '.join(part for part in (self.where, problem, fix) if part))

    def __reduce__(self) -> tuple:
        # Pickled as built (an error raised in a spawned worker or another process): the
        # default rebuilds it from its message alone.
        return type(self), (self.where, self.problem, self.fix)


def given_file(path: str | os.PathLike, key: str, fix: str, folder_ok: bool = False,
               stream_ok: bool = False) -> None:
    """Refuse a file the user named (a flag, a config key, an argument) that is missing, a
    folder, no regular file or unreadable, naming the path and where it came from: one wording
    for every tool, checked before any work dir, log or output is written.

    Args:
        path: the path as given.
        key: where it was given (``'--resume'``, ``'load_from'``, ``'CHECKPOINT'``).
        fix: what to give instead.
        folder_ok: a folder passes too (a hub snapshot whose files its reader picks).
        stream_ok: a pipe or a device passes too, for an input read once from start to end
            (the shell's ``<(command)``); a checkpoint or an index is read by offset.

    Raises:
        UserError: ``<path> (<key>): no such file | is a folder, not a file | is no regular
            file | cannot be read``.
    """
    if folder_ok and os.path.isdir(path):
        return
    problem = ('is a folder, not a file' if os.path.isdir(path) else
               'no such file' if not os.path.exists(path) else
               'is no regular file (a pipe, a device or a socket)'
               if not (os.path.isfile(path) or stream_ok and _is_stream(path)) else
               None if os.access(path, os.R_OK) else 'cannot be read (permission denied)')
    if problem is not None:
        raise UserError(f'{os.fspath(path)} ({key})', problem, fix)


def _is_stream(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a pipe or a character device (``/dev/stdin``, ``/dev/fd/63``)."""
    mode = os.stat(path).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def given_folder(path: str | os.PathLike, key: str, fix: str) -> None:
    """Refuse a folder the user named for a run to write in (a work dir) where a file stands,
    naming the path and where it came from, before anything is written (``os.makedirs`` said
    ``File exists``, naming no key). A folder that does not exist yet passes: the run makes it.

    Raises:
        UserError: ``<path> (<key>): is a file, not a folder``, ``cannot be made there (<file>
            is a file, not a folder)`` for a file standing where a folder above it goes
            (``os.makedirs`` said ``Not a directory`` once the run's work was done), or a link
            to nothing (a scratch disk not mounted; ``os.makedirs`` said ``File exists``).
    """
    if os.path.islink(path) and not os.path.exists(path):
        raise UserError(f'{os.fspath(path)} ({key})', f'is a link to {os.readlink(path)}, which '
                        'does not exist', 'mount or make the folder it points to, or give '
                        'another')
    standing = _nearest_existing(os.path.abspath(path))
    if not os.path.isdir(standing):
        problem = ('is a file, not a folder' if standing == os.path.abspath(path)
                   else f'cannot be made there ({standing} is a file, not a folder)')
        raise UserError(f'{os.fspath(path)} ({key})', problem, fix)


def _nearest_existing(path: str) -> str:
    """``path`` or the nearest folder above it that exists: what stands where a folder to be
    made goes."""
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def given_output(path: str | os.PathLike, key: str, fix: str) -> None:
    """Refuse a file a tool is told to write (``--out``, a new ``--index``) where it cannot be
    written, before the work that makes it (a search wrote its hits, a gallery its index,
    only to fail on a folder standing there). Nothing is made: a trial file is written and
    removed in the nearest folder that stands, the file's own or the one its missing folders
    will be made in (by the writer, :func:`~xmr.fileio.atomic_open`), so a tool refused
    later leaves no empty folder behind.

    Raises:
        UserError: ``<path> (<key>): is a folder, not a file``, or ``cannot be written there
            (<reason>)`` (a folder not writable, a file standing where a folder of the path
            goes).
    """
    where = f'{os.fspath(path)} ({key})'
    if os.path.isdir(path):
        raise UserError(where, 'is a folder, not a file', fix)
    standing = _nearest_existing(os.path.dirname(os.path.abspath(path)))
    if not os.path.isdir(standing):  # os.makedirs says 'File exists', naming no file
        raise UserError(where, f'cannot be written there ({standing} is a file, not a folder)',
                        fix)
    try:
        with tempfile.TemporaryFile(dir=standing):
            pass
    except OSError as error:
        raise UserError(where, f'cannot be written there ({error.strerror or error})',
                        fix) from error


def given_json_output(path: str | os.PathLike, key: str, what: str, keys: Collection[str],
                      overwrite: bool) -> None:
    """:func:`given_output` for a JSON file a tool writes, whose file standing at ``path`` is
    replaced only where it holds the tool's own earlier output (a JSON object holding
    ``keys``, those every output of the tool holds) and ``overwrite`` is given: a checkpoint, a
    test result or an index standing there was written over.

    Args:
        what: the tool's earlier output, for the messages (``"an earlier search's hits"``).

    Raises:
        UserError: naming ``<path> (<key>)``, what stands there, and the fix.
    """
    from xmr.json_files import JSONFileError, load_json

    where, fix = f'{os.fspath(path)} ({key})', f'give {key} another .json path'
    given_output(path, key, f'give {key} the path of a .json file to write')
    if not os.path.exists(path):
        return
    try:
        earlier = load_json(path)
    except (OSError, JSONFileError) as error:
        raise UserError(where, f'exists and is not {what} ({error}); it is left as it is',
                        fix) from error
    if not (isinstance(earlier, dict) and set(keys) <= earlier.keys()):
        raise UserError(where, f"exists and is not {what} (a JSON object of "
                        f"{', '.join(sorted(keys))}); it is left as it is", fix)
    if not overwrite:
        raise UserError(where, f'holds {what}; it is kept',
                        f'pass --overwrite to replace it, or {fix}')


def given_device(name: str | None) -> str:
    """The device a tool runs its model on: ``--device``, checked before the model is built, or
    the first GPU, else the CPU.

    Raises:
        UserError: a device torch does not know, or a GPU this machine lacks, naming the value
            and the devices there are.
    """
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if name is None:
        return 'cuda' if gpus else 'cpu'
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f'--device {name}', 'is no torch device',
                        'give cpu, cuda or cuda:N') from None
    if device.type == 'cuda' and (device.index or 0) >= gpus:
        # Not 'leave --device out': some tools' default is the CPU, others' the first GPU.
        raise UserError(f'--device {name}', f'this machine has {gpus} CUDA device(s)',
                        'give cpu' + (f' or cuda:0 to cuda:{gpus - 1}' if gpus else ''))
    return name


class UserKeyError(KeyError):
    """A key, name or type the user gave that xmr cannot take: a type no registry holds, a
    phase key, a language, a name already registered.

    A ``KeyError``, so that ``except KeyError`` still catches it, whose message prints as
    written (a plain ``KeyError`` prints the repr of its message, quotes and escapes included).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ''


#: What the ``xmr`` command names the tool it runs (``xmr train``), for its usage line.
command_name: str | None = None


def print_for_reader(text: str) -> None:
    """Print ``text`` to stdout; a reader that stopped early (``xmr train --help | head``)
    wants no more, so a closed pipe is not an error, at once or at Python's flush at exit."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _stdout_to_devnull(sys.stdout)


def _stdout_to_devnull(stream: Any) -> None:
    """Send what is still to come on ``stream``'s file to ``/dev/null``: its reader is gone."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def _bytes_or_escapes(error: UnicodeError) -> tuple[str | bytes, int]:
    """Encoding error handler: the bytes of a name Python could not decode (lone surrogates, as
    ``surrogateescape`` writes them: a path printed names its file), escapes for any other
    character the encoding cannot hold (``\\u7ea2``, as ``backslashreplace``)."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    if _UNDECODED.fullmatch(text):
        return bytes(ord(char) - 0xdc00 for char in text), error.end
    return codecs.backslashreplace_errors(error)


_BYTES_OR_ESCAPES = 'xmr-bytes-or-escapes'
codecs.register_error(_BYTES_OR_ESCAPES, _bytes_or_escapes)


class ReaderStdout:
    """The process's stdout for a tool whose reader may stop early or may not read UTF-8.

    ``tools/test.py ... | head -3`` closes the pipe while the tool still logs and prints: every
    log line then printed a ``--- Logging error --- BrokenPipeError`` traceback, and a print
    between two outputs (a language module exported, the next one not) stopped the tool. Writes
    after the reader has gone go to ``/dev/null`` and the tool carries on. On a stdout that is
    not UTF-8 (``LC_ALL=C``, ``PYTHONIOENCODING=ascii``), a character it cannot hold is printed
    as its escape (``\\u7ea2``), as stderr prints it, not an error after the work is done; a
    path whose bytes are not the locale's text is printed as those bytes, which name its file.
    """

    def __init__(self, stream: Any) -> None:
        stream.reconfigure(errors=_BYTES_OR_ESCAPES)
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _stdout_to_devnull(self._stream)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _stdout_to_devnull(self._stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def argument_text(value: str, errors: str = 'backslashreplace') -> str:
    """A command-line argument as the UTF-8 text its bytes are.

    Python decodes the arguments with the locale's encoding: under ``LC_ALL=C`` (without UTF-8
    mode) the UTF-8 bytes of ``赤い丸`` arrive as lone surrogates, and a Latin-1 file name
    (``mod\\xe8le.py``) does under a UTF-8 locale. Their bytes are decoded as UTF-8 again;
    ``errors`` says what becomes of bytes that are not UTF-8 (``'backslashreplace'``: their
    ``\\xe8`` escapes, as a UTF-8 file can hold them; ``'strict'``: a ``UnicodeDecodeError``). An
    argument without surrogates is the text its locale's encoding (GBK, Latin-1) says it is.
    """
    if not _UNDECODED.search(value):
        return value
    return os.fsencode(value).decode('utf-8', errors)


def worker_error(error: BaseException) -> tuple[str, str] | None:
    """``(qualified type, message)`` of the error a DataLoader worker raised, which torch
    re-raised in the main process as ``error``; ``None`` for any other error."""
    text = str(error)
    caught = _WORKER_ERROR.match(text)
    raised = caught and list(re.finditer(rf'^((?:\w+\.)*{caught[1]}): ', text, re.MULTILINE))
    if not raised:
        return None
    return raised[-1][1], text[raised[-1].end():].rstrip()


def error_line(error: BaseException) -> str:
    """The one line a tool prints for ``error`` (without the ``error: `` prefix); a
    DataLoader worker's error (:func:`worker_error`) is printed as if raised here."""
    worker = worker_error(error)
    if worker is not None:
        raised, message = worker
        if not _expected_type(raised):
            return f'{raised.rpartition(".")[2]}: {message}'
        os_error = _OS_ERROR_TEXT.fullmatch(message)
        return message if os_error is None else (
            f"{ast.literal_eval(os_error['file'])}: {os_error['reason']}")
    if isinstance(error, SystemExit):
        return str(error.code).removeprefix('error: ')
    if _peer_gone(error):
        reason = _PEER_GONE.search(str(error))[0]
        return (f'rank {_rank()}: another process of the launch stopped first (the process '
                f"group's {reason}): the error line that process printed says why")
    if isinstance(error, OSError) and error.filename is not None:
        # OSError's own str() puts the file after the reason; every line leads with the file.
        return f'{error.filename}: {error.strerror or type(error).__name__}'
    if isinstance(error, OSError) and error.errno in _WRITE_ERRNOS:
        written = _file_being_written(error)
        if written is not None:  # a write's error names no file (a full disk)
            return f'{written}: writing it failed: {error.strerror or error}'
    if isinstance(error, (UserError, ValueError)) or _expected(error):
        return str(error)
    return f'{type(error).__name__}: {error}'


#: The errors of a write that the disk refused (full, over quota, read-only, failing).
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})


def _file_being_written(error: OSError) -> str | None:
    """The file a write was writing when it raised ``error``, which names none (``write()`` on a
    full disk: MMEngine's run log and config dump): the innermost frame of its traceback that
    holds a log file's handler or a file opened by name; ``None`` where none does."""
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, logging.FileHandler):
                return value.baseFilename
            name = getattr(value, 'name', None) if isinstance(value, io.IOBase) else None
            if isinstance(name, str) and not name.startswith('<'):  # not <stdout>
                return name
    return None


class Terminated(BaseException):
    """SIGTERM (a scheduler's stop, ``kill``) received under :func:`sigterm_interrupts`,
    raised where the tool stands, as Ctrl-C raises ``KeyboardInterrupt``: what the tool holds
    is given back on the way out (a lock file, a partial write), and :func:`run_tool` ends it
    with one line and exit status 143. Not an ``Exception``, so that no ``except Exception``
    goes on past it."""


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated`: Python's default ended the
    process at once, silent, its ``finally`` blocks not run (``tools/search.py`` left its
    index's lock file). A second SIGTERM meanwhile is ignored, so that the clean-up the first
    starts ends; the handler before is restored as the block ends. A block run outside the
    main thread (where Python delivers signals) keeps the default.

    A process forked meanwhile (``os.fork``: ``multiprocessing``, DataLoader workers) starts
    with the default, as before the block: its parent stops it with SIGTERM
    (``Process.terminate``) and expects it gone at once (see :func:`_sigterm_default_in_child`).
    """
    global _sigterm_handler
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(number: int, frame: Any) -> None:
        signal.signal(number, signal.SIG_IGN)
        raise Terminated(number)

    previous, previous_handler = signal.signal(signal.SIGTERM, terminate), _sigterm_handler
    _sigterm_handler = terminate
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        _sigterm_handler = previous_handler


_sigterm_handler: Callable[[int, Any], None] | None = None  # the innermost block's
_mask_before_fork: set[int] | None = None  # None: SIGTERM not held back for this fork


def _block_sigterm_for_fork() -> None:
    """Hold SIGTERM back across ``fork`` while :func:`sigterm_interrupts`'s handler is the
    process's (not while another replaces it: ``PreemptionHook``'s, inherited by the
    DataLoader workers, which ignore the signal once started).

    A child inherits Python's handler, and a SIGTERM reaching it before the interpreter's
    after-fork reset is dropped: ``Process.terminate()`` right after ``start()`` then left the
    child running to its end (CI's test of it hung 60 s). Blocked, the signal waits in the
    kernel until the child has the default.
    """
    global _mask_before_fork
    _mask_before_fork = None
    if _sigterm_handler is not None and signal.getsignal(signal.SIGTERM) is _sigterm_handler:
        _mask_before_fork = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _unblock_sigterm_in_parent() -> None:
    if _mask_before_fork is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, _mask_before_fork)


def _sigterm_default_in_child() -> None:
    """The child of a process under :func:`sigterm_interrupts` dies of SIGTERM at once, as
    ``multiprocessing`` expects of its children: one raising :class:`Terminated` printed a
    traceback and could linger in its own clean-up. A SIGTERM held back meanwhile is
    delivered as the mask before the fork comes back, to the default; one the fork's caller
    blocked itself stays blocked (a DataLoader worker that ignores it once started:
    :class:`~xmr.engine.worker_signals.BlockedSignalsContext`)."""
    global _sigterm_handler
    if _mask_before_fork is not None:
        _sigterm_handler = None
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, _mask_before_fork)


if hasattr(os, 'register_at_fork'):  # a platform without fork has no child to hand it to
    os.register_at_fork(before=_block_sigterm_for_fork,
                        after_in_parent=_unblock_sigterm_in_parent,
                        after_in_child=_sigterm_default_in_child)


def run_tool(main: Callable[[list[str]], Any], argv: Sequence[str] | None = None) -> None:
    """Run a tool's ``main``; turn a failure into one ``error:`` line and exit status 2.

    ``main`` runs under :func:`sigterm_interrupts`: SIGTERM ends it as Ctrl-C does, its
    clean-up run, with one line and exit status 143.

    Args:
        main: the tool's entry, called with the arguments (``--debug`` removed).
        argv: the arguments (default: ``sys.argv[1:]``); ``--debug`` anywhere among them shows
            the traceback of a failure before the line.

    Raises:
        SystemExit: with :data:`EXIT_ERROR` after a failure, with 143 (128 + SIGTERM) after a
            :class:`Terminated`; ``argparse``'s own exits (``--help``, a bad flag) pass through
            unchanged.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if command_name is not None:
        sys.argv[0] = command_name  # runpy put the script's path there
    if sys.stdout is sys.__stdout__ and sys.stdout is not None:
        sys.stdout = ReaderStdout(sys.stdout)  # the process's own: not a test's capture
    debug = DEBUG_FLAG in args
    try:
        # Every tool, once here (the module's docstring says why not each in its main).
        with sigterm_interrupts():
            main([arg for arg in args if arg != DEBUG_FLAG])
    except KeyboardInterrupt:
        if argv is None:
            _quiet_interrupt(debug)
        raise
    except Terminated as stop:
        _report_terminated(stop, debug)
    except SystemExit as error:
        if not isinstance(error.code, str):
            if error.code in (0, None) and {'-h', '--help'} & set(args):
                print_for_reader(f'\nevery xmr tool also takes:\n  {DEBUG_FLAG:<22}show the '
                                 'traceback of a failure before its error line')
            raise
        _report(error, debug)
    except Exception as error:  # noqa: BLE001  (every failure becomes one line; --debug shows it)
        interrupt = _swallowed_interrupt(error)
        if isinstance(interrupt, Terminated):
            _report_terminated(interrupt, debug)
        if interrupt is not None:
            if argv is None:
                _quiet_interrupt(debug)
            raise interrupt from None
        _report(error, debug)


def _report_terminated(stop: Terminated, debug: bool) -> NoReturn:
    """End a tool stopped by SIGTERM as Ctrl-C ends one: one line (``--debug``: the traceback)
    under the tool's last message, which says what it kept, and the status a shell gives a
    process SIGTERM killed, 143."""
    if debug:
        traceback.print_exception(stop)
    print(f'terminated by SIGTERM ({DEBUG_FLAG} shows where)', file=sys.stderr, flush=True)
    raise SystemExit(128 + signal.SIGTERM) from None


def _quiet_interrupt(debug: bool) -> None:
    """Have the Ctrl-C about to end this process print one line (``--debug``: the traceback),
    not a traceback of dozens of lines under the tool's last message (what a stopped build kept,
    and where). Python still ends the process after its clean-up as killed by SIGINT (status
    130 in a shell)."""
    if debug:
        return
    print(f'interrupted ({DEBUG_FLAG} shows where)', file=sys.stderr, flush=True)
    shown = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, trace: Any) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            shown(kind, value, trace)

    sys.excepthook = hook


def _swallowed_interrupt(error: BaseException) -> KeyboardInterrupt | Terminated | None:
    """The Ctrl-C (or :class:`Terminated`) a library turned into another error (MMEngine's
    ``Config.pretty_text``, which every checkpoint save calls, catches it with a bare ``except``
    and raises a SyntaxError)."""
    seen = error.__context__
    while seen is not None:
        if isinstance(seen, (KeyboardInterrupt, Terminated)):
            return seen
        seen = seen.__context__
    return None


def _expected(error: BaseException) -> bool:
    """Whether ``error`` is one xmr raises on purpose (its own classes, bad values, files),
    in this process or in a DataLoader worker."""
    worker = worker_error(error)
    if worker is not None:
        return _expected_type(worker[0])
    return (isinstance(error, (UserError, SystemExit, OSError, ValueError))
            or type(error).__module__.split('.')[0] == 'xmr' or _peer_gone(error))


#: How gloo tells a rank that a peer of its process group is gone (the peer's process ended).
_PEER_GONE = re.compile(r'Connection (closed|reset) by peer')


def _peer_gone(error: BaseException) -> bool:
    """Whether ``error`` is a process group's word that another rank ended (gloo's
    ``Connection closed by peer``): that rank's own error says why, this one is its symptom."""
    return (isinstance(error, RuntimeError) and _process_group_started()
            and _PEER_GONE.search(str(error)) is not None)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank()


def _expected_type(qualified: str) -> bool:
    """Whether the type a traceback names (``xmr.datasets.media_io.MediaReadError``,
    ``ValueError``, ``PIL.UnidentifiedImageError``: looked up in its loaded module) is one xmr
    raises on purpose."""
    module, _, name = qualified.rpartition('.')
    kind = getattr(sys.modules.get(module or 'builtins'), name, None)
    return qualified.split('.')[0] == 'xmr' or (
        isinstance(kind, type) and issubclass(kind, (SystemExit, OSError, ValueError)))


#: Where a launcher tells a process its rank on its node: torchrun, srun, mpirun.
LOCAL_RANK_VARIABLES = ('LOCAL_RANK', 'SLURM_LOCALID', 'OMPI_COMM_WORLD_LOCAL_RANK')


def _printed_by_another_process(error: BaseException) -> bool:
    """Whether another process of this launch prints ``error``'s line already.

    Before a process group exists, the processes of one node check the same arguments, config
    and files and refuse them alike: the node's local rank 0 alone prints an expected refusal
    (one line per node, so that a file missing on one node is still named). An unexpected
    error, or any error once the group exists, may be its process's own: each prints it.
    """
    return _expected(error) and _another_process_reports()


def _another_process_reports() -> bool:
    """Whether this process is not its node's local rank 0, before any process group exists."""
    if _process_group_started():
        return False
    return any(os.environ.get(name, '0') not in ('', '0') for name in LOCAL_RANK_VARIABLES)


def quiet_on_other_processes(parser: argparse.ArgumentParser) -> None:
    """Have the node's local rank 0 alone print ``parser``'s usage errors (a bad flag, a
    missing argument); the other processes of the launch exit with the same status, silent.

    argparse prints its usage and error itself, before :func:`run_tool` sees the exit, so
    under torchrun a mistyped flag came out once per process.
    """
    print_and_exit = parser.error

    def error(message: str) -> NoReturn:
        if _another_process_reports():
            raise SystemExit(EXIT_ERROR)
        print_and_exit(message)

    parser.error = error  # type: ignore[method-assign]


def _process_group_started() -> bool:
    # A tool that failed before importing torch has started no group.
    dist = sys.modules.get('torch.distributed')
    return dist is not None and dist.is_available() and dist.is_initialized()


def as_typed(text: str) -> str:
    """``text`` with each tool of the repository it names (``tools/test.py``, ``python
    tools/data/prepare_multi30k.py``, ``tools/dist_train.sh``) as the user runs it: ``xmr test``,
    ``xmr data prepare_multi30k``, ``xmr dist_train`` where the ``xmr`` command runs this tool
    (a project outside the checkout has no ``tools/``); ``text`` itself otherwise."""
    if not (command_name or '').startswith('xmr '):
        return text
    from xmr.console import available  # the console imports this module
    commands = set(available())

    def typed(tool: re.Match) -> str:
        group, name = tool.groups()
        words = f'{group} {name}' if group else name
        placeholder = group and '<' in name  # 'data prepare_<dataset>'
        return f'xmr {words}' if words in commands or placeholder else tool[0]

    return _TOOL_IN_TEXT.sub(typed, text)


def _report(error: BaseException, debug: bool) -> NoReturn:
    if debug:
        traceback.print_exception(error)
    line = f'error: {as_typed(error_line(error))}'
    if not _expected(error):
        line += f' (unexpected; run again with {DEBUG_FLAG} for the traceback)'
    if not _printed_by_another_process(error):
        print(line, file=sys.stderr)
    _write_to_run_log(line, error)
    raise SystemExit(EXIT_ERROR) from error


def _write_to_run_log(line: str, error: BaseException) -> None:
    """Append ``line`` and ``error``'s traceback to the log file of the run it stopped.

    stderr may be gone (a batch job's output, a closed terminal) while the work dir stays:
    without this a run's log ended at its last iteration with no word of why.
    """
    logger_module = sys.modules.get('mmengine.logging.logger')
    if logger_module is None:  # mmengine never loaded: no runner, no run log
        return
    logger = logger_module.MMLogger.get_current_instance()
    record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, line, None,
                               (type(error), error, error.__traceback__))
    # A log on a full disk, the error's own cause, would print logging's traceback under it.
    quiet, logging.raiseExceptions = logging.raiseExceptions, False
    try:
        for handler in logger.handlers:
            if isinstance(handler, logging.FileHandler):
                handler.handle(record)
    finally:
        logging.raiseExceptions = quiet
