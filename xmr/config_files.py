"""Reading a config file through MMEngine, with a fault in a file's own text named by its place.

MMEngine parses a config (and each of its ``_base_`` files) with ``ast.parse`` and no file name,
then runs it: a syntax error came out as ``'(' was never closed (<unknown>, line 2)`` and a name
the file does not define as ``name 'x' is not defined``, neither saying which file of the chain
holds it. :func:`read_config_file` names ``<file>:<line>``.
"""
from __future__ import annotations

import os
import traceback

from mmengine.config import Config

from xmr.utils.cli import UserError

#: The source file of MMEngine's config reader, whose frames hold the file they read.
_READER_SOURCE = Config.fromfile.__code__.co_filename


def read_config_file(path: str | os.PathLike, import_custom_modules: bool = False) -> Config:
    """``Config.fromfile(path)``, with an error raised by the text of ``path`` or of one of its
    ``_base_`` files (a syntax error, a name it does not define, a call that fails) as a
    :class:`~xmr.utils.cli.UserError` naming that file and line.

    Args:
        path: the config file.
        import_custom_modules: as ``Config.fromfile`` takes it.

    Raises:
        UserError: ``<file>:<line>``, the error's type and message.
    """
    try:
        return Config.fromfile(str(path), import_custom_modules=import_custom_modules)
    except Exception as error:
        place = _place_in_config_text(error)
        if place is None:
            raise
        message = error.msg if isinstance(error, SyntaxError) else str(error)
        raise UserError(place, f'{type(error).__name__}: {message}',
                        'correct the config file there') from error


def _place_in_config_text(error: BaseException) -> str | None:
    """``<file>:<line>`` of the config text that raised ``error`` as MMEngine read it, or
    ``None`` for an error of another origin (a missing ``_base_`` file, MMEngine's own checks).
    """
    frames = list(traceback.walk_tb(error.__traceback__))
    read = [frame.f_locals['filename'] for frame, _ in frames
            if frame.f_code.co_filename == _READER_SOURCE
            and isinstance(frame.f_locals.get('filename'), str)]
    if isinstance(error, SyntaxError):
        # MMEngine parses with no file name; the innermost of its frames names the file.
        if error.filename and os.path.isfile(error.filename):
            return f'{os.path.normpath(error.filename)}:{error.lineno}'
        return f'{os.path.normpath(read[-1])}:{error.lineno}' if read else None
    # A config's text runs as a module whose code MMEngine compiled under the file's name.
    ran = [(frame, line) for frame, line in frames
           if frame.f_code.co_name == '<module>' and frame.f_code.co_filename in read]
    return f'{ran[-1][0].f_code.co_filename}:{ran[-1][1]}' if ran else None
