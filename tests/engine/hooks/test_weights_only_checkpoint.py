"""WeightsOnlyCheckpointHook: the message hub's history buffers survive a weights-only load."""
from __future__ import annotations

import torch
from mmengine.logging import HistoryBuffer

from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
from xmr.engine.hooks import WeightsOnlyCheckpointHook


def test_history_buffers_come_back_whole_from_a_weights_only_load(tmp_path):
    loss = HistoryBuffer(max_length=3)
    for value, count in ((4.0, 1), (2.0, 2), (1.0, 1), (0.5, 4)):  # the first falls out
        loss.update(value, count)
    hook = WeightsOnlyCheckpointHook()
    checkpoint = dict(message_hub=dict(log_scalars={'train/loss': loss}, runtime_info={}))
    hook.before_save_checkpoint(None, checkpoint)
    torch.save(checkpoint, tmp_path / 'iter_4.pth')
    allow_mmengine_checkpoint_types()
    loaded = torch.load(tmp_path / 'iter_4.pth', weights_only=True)
    hook.after_load_checkpoint(None, loaded)
    restored = loaded['message_hub']['log_scalars']['train/loss']
    assert isinstance(restored, HistoryBuffer) and restored.max_length == 3
    values, counts = restored.data
    assert values.tolist() == [2.0, 1.0, 0.5] and counts.tolist() == [2, 1, 4]
    assert restored.mean() == 0.5  # MMEngine's: the values' sum over the counts', 3.5 / 7
