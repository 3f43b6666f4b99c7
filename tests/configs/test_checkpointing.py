"""Every shipped config saves resumable checkpoints periodically, through xmr's CheckpointHook,
and holds the hooks that lock the work dir and make checkpoints loadable and resumable."""
from __future__ import annotations

from pathlib import Path

import pytest
from mmengine.config import Config

from xmr.engine.epoch_counts import is_epochs

REPO = Path(__file__).resolve().parents[2]
# Ablations are overlays on these (tests/test_ablations.py), not configs of their own.
LEAF_CONFIGS = sorted(p for p in (REPO / 'configs').rglob('*.py')
                      if not {'_base_', 'ablations'} & set(p.parts))


def test_the_shipped_configs_are_found():
    assert len(LEAF_CONFIGS) > 50


@pytest.mark.parametrize('path', LEAF_CONFIGS, ids=lambda p: str(p.relative_to(REPO / 'configs')))
def test_a_shipped_config_saves_resumable_checkpoints_before_its_end(path):
    cfg = Config.fromfile(path)
    if cfg.get('train_cfg') is None:
        pytest.skip('a test-only config')
    assert cfg.default_scope == 'xmr'  # so 'CheckpointHook' is xmr's atomic one
    checkpoint = cfg.default_hooks.checkpoint
    assert checkpoint.type == 'CheckpointHook'
    assert not checkpoint.get('by_epoch', True)
    phases = cfg.train_cfg.get('phases', [])
    # A count in epochs (docs/configs.md) is checked against phases in epochs.
    length = 'epochs' if is_epochs(checkpoint.interval) else 'iters'
    interval = checkpoint.interval.epochs if length == 'epochs' else checkpoint.interval
    assert interval > 0
    if phases and all(phase.get(length) for phase in phases):
        assert interval < sum(phase[length] for phase in phases)
    hooks = {hook.type for hook in cfg.custom_hooks}
    assert {'WorkDirLockHook', 'RNGStateHook', 'WeightsOnlyCheckpointHook',
            'CorruptMediaHook'} <= hooks
