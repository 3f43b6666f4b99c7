"""The configs and tools shipped inside the package, for projects outside an xmr checkout.

``xmr/.mim/configs`` and ``xmr/.mim/tools`` are the repository's ``configs/`` and ``tools/``
(links in a checkout and an editable install, copies in a wheel), where OpenMMLab packages keep
theirs. A config names a packaged config with the ``xmr::`` scheme::

    _base_ = ['xmr::demo/static_tiny-clip_synthetic.py']

MMEngine's own ``package::`` lookup accepts only the packages of its internal list and does not
find editable installs, so importing xmr adds the ``xmr::`` scheme to ``Config`` itself (any
other base path is resolved by MMEngine as before).
"""
from __future__ import annotations

from pathlib import Path

from mmengine.config import Config

from xmr.utils.cli import UserError, did_you_mean

__all__ = ['CONFIG_SCHEME', 'packaged_root', 'config_path', 'tool_path', 'missing_base']

CONFIG_SCHEME = 'xmr::'


def packaged_root() -> Path:
    """``xmr/.mim``: the folder holding ``configs/`` and ``tools/``."""
    return Path(__file__).resolve().parent / '.mim'


def _packaged_file(kind: str, name: str, example: str) -> Path:
    path = packaged_root() / kind / name
    if not path.is_file():
        raise FileNotFoundError(f"xmr ships no {kind} file '{name}' (looked in "
                                f'{packaged_root() / kind}); name one relative to that folder, '
                                f"e.g. '{example}'")
    return path


def config_path(name: str) -> Path:
    """The packaged config ``name`` (``'dasd/dasd_clip-vit-b32_multi30k_clft.py'``; a leading
    ``xmr::`` is accepted)."""
    return _packaged_file('configs', name.removeprefix(CONFIG_SCHEME),
                          f'{CONFIG_SCHEME}demo/static_tiny-clip_synthetic.py')


def tool_path(name: str) -> Path:
    """The packaged tool script ``name`` (``'train.py'``, ``'data/prepare_multi30k.py'``)."""
    return _packaged_file('tools', name, 'train.py')


def missing_base(cfg_path: str, filename: str) -> UserError:
    """The error for a ``_base_`` entry of ``filename`` that names no file (MMEngine: the
    resolved path alone, not the config that lists it): the file meant in its folder, or the
    packaged config of that name for a config copied out of ``configs/``."""
    path = Path(filename).parent / cfg_path
    siblings = [p.name for p in path.parent.glob('*.py')] if path.parent.is_dir() else []
    hint = did_you_mean(path.name, siblings)
    shipped = _shipped_name(path)
    if shipped is not None and not hint:
        fix = f"a config outside xmr's configs/ names xmr's as '{CONFIG_SCHEME}{shipped}'"
        bases, rewritten = _bases_by_scheme(filename)
        if rewritten > 1:
            # MMEngine stops at the first: a config copied out of configs/ would take a run
            # for each of its bases.
            fix += f': _base_ = {bases}'
    elif Path(cfg_path).is_absolute():
        fix = 'correct it'
    else:
        fix = f'correct it: a relative path starts at the folder of {Path(filename).name}'
    resolved = '' if Path(cfg_path).is_absolute() else f' ({path})'
    return UserError(filename, f"_base_ '{cfg_path}' names no file{resolved}{hint}", fix)


def _shipped_name(path: Path) -> str | None:
    """The packaged config (its path under ``configs/``) a base ``path`` that names no file
    means: the one whose folders the path ends with (``../_base_/models/x.py``), else the only
    one of its name; ``None`` where there is none or several."""
    shipped = sorted(str(p.relative_to(packaged_root() / 'configs')) for p in
                     (packaged_root() / 'configs').rglob(path.name))
    meant = [name for name in shipped if path.resolve().as_posix().endswith('/' + name)]
    return (meant or shipped)[0] if len(meant or shipped) == 1 else None


def _bases_by_scheme(filename: str) -> tuple[list[str], int]:
    """The ``_base_`` list of ``filename``, each entry that names no file and is a packaged
    config written ``xmr::<path>``, the others as they are; and how many were rewritten."""
    if not Path(filename).is_file():
        return [], 0
    bases, rewritten = [], 0
    for base in Config._get_base_files(filename):
        path = Path(filename).parent / base
        shipped = None if '::' in base or path.is_file() else _shipped_name(path)
        bases.append(base if shipped is None else f'{CONFIG_SCHEME}{shipped}')
        rewritten += shipped is not None
    return bases, rewritten


def _install_config_scheme() -> None:
    """Teach ``Config`` the ``xmr::`` base paths (idempotent)."""
    resolve = Config._get_cfg_path
    if getattr(resolve, 'xmr_scheme', False):
        return

    def get_cfg_path(cfg_path: str, filename: str) -> tuple[str, str | None]:
        if cfg_path.startswith(CONFIG_SCHEME):
            # No scope: packaged configs already build in xmr's default scope.
            return str(config_path(cfg_path)), None
        path, scope = resolve(cfg_path, filename)
        if scope is None and not Path(path).is_file():
            raise missing_base(cfg_path, filename)
        return path, scope

    get_cfg_path.xmr_scheme = True
    Config._get_cfg_path = staticmethod(get_cfg_path)


_install_config_scheme()
