"""Text towers and every adapter type on the accelerator give the CPU's outputs and gradients,
padded and packed."""
from __future__ import annotations

import pytest
import torch

from tests.gpu.conftest import FP32_TOLERANCE
from tests.models.language.test_packed_tokens import (
    ADAPTER_SETS,
    batch,
    bert_tower,
    encode,
    open_clip_tower,
    randomise,
)
from xmr.models.adapters.language_adapters import LanguageAdapters

pytestmark = pytest.mark.gpu


def run(tower, adapters, inputs, condition, device: torch.device, pack: bool):
    """``r`` and the real tokens' hidden states, with the gradients of ``|r|^2`` w.r.t. the input
    and every adapter parameter, all returned on the CPU."""
    tower, adapters = tower.to(device), adapters.to(device)
    x, mask, eos = (t.detach().to(device) for t in inputs)
    x.requires_grad_()
    condition = {i: c.to(device) for i, c in condition.items()}
    pooled, hidden = encode(tower, adapters, x, mask, eos, condition, pack)
    grads = torch.autograd.grad(pooled.square().sum(), [x, *adapters.parameters()])
    return [pooled.cpu(), hidden[mask].cpu(), *(g.cpu() for g in grads)]


@pytest.mark.parametrize('make_tower', [open_clip_tower, bert_tower], ids=['clip', 'bert'])
@pytest.mark.parametrize('adapter_set', list(ADAPTER_SETS))
def test_towers_and_adapters_equal_the_cpu_padded_and_packed(accelerator, make_tower,
                                                             adapter_set):
    tower = make_tower()
    adapters = LanguageAdapters(['de'], ADAPTER_SETS[adapter_set], tower.width,
                                tower.num_blocks, tower.linear_shapes())
    randomise(adapters, 1)
    inputs = batch(tower)
    generator = torch.Generator().manual_seed(4)
    condition = {i: torch.randn(inputs[0].shape[0], 4, 4, generator=generator)
                 for i in range(tower.num_blocks)}
    reference = run(tower, adapters, inputs, condition, torch.device('cpu'), pack=False)
    for pack in (False, True):
        got = run(tower, adapters, inputs, condition, accelerator, pack)
        for mine, expected in zip(got, reference, strict=True):
            torch.testing.assert_close(mine, expected, **FP32_TOLERANCE)
