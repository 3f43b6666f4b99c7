"""Where a run writes: the work directory every tool derives from a config the same way."""
from __future__ import annotations

import os
import os.path as osp

from mmengine.config import Config


def resolve_work_dir(cfg: Config, config_path: str | os.PathLike,
                     work_dir: str | None = None) -> str:
    """Set and return ``cfg.work_dir``: ``work_dir`` when given, else the config's own
    ``work_dir``, else ``work_dirs/<config name>``.

    ``tools/train.py``, ``tools/test.py`` and ``tools/cache_features.py`` agree through this, so
    that a cache built ahead of time lies where training looks for it.
    """
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('work_dirs', osp.splitext(osp.basename(str(config_path)))[0])
    return cfg.work_dir


def latest_checkpoint(work_dir: str | os.PathLike) -> str | None:
    """The checkpoint that ``<work_dir>/last_checkpoint`` names, or ``None`` when there is none.

    Raises:
        FileNotFoundError: ``last_checkpoint`` names a file that does not exist.
    """
    pointer = osp.join(str(work_dir), 'last_checkpoint')
    if not osp.isfile(pointer):
        return None
    with open(pointer, encoding='utf-8') as handle:
        checkpoint = handle.read().strip()
    if not osp.isfile(checkpoint):
        raise FileNotFoundError(f'{pointer}: names {checkpoint!r}, which does not exist; resume '
                                'from a checkpoint by path: --resume PATH')
    return checkpoint
