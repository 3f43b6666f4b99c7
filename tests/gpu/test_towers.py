"""Text towers and every adapter type on the accelerator give the CPU's outputs and gradients,
padded and packed; a mixed-language batch does, without a host sync."""
from __future__ import annotations

import pytest
import torch

from tests.conftest import randomise, tiny_backbone_cfg, tiny_branch_cfg
from tests.gpu.conftest import FP32_TOLERANCE
from tests.models.language.test_branch import ROUTED_LANGS, ROUTED_TEXTS
from tests.models.language.test_packed_tokens import (
    ADAPTER_SETS,
    batch,
    bert_tower,
    encode,
    open_clip_tower,
)
from xmr.models.adapters.language_adapters import LanguageAdapters
from xmr.models.language.tokenizers import TokenBatch
from xmr.registry import MODELS

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


def branch_run(backbone, branch, tokens, condition, device: torch.device):
    """``r^T`` of the mixed batch and the gradients of ``|r^T|^2`` w.r.t. the branch, on the
    CPU; on CUDA, any host sync inside the forward or backward raises."""
    backbone, branch = backbone.to(device), branch.to(device)
    tokens = TokenBatch(**{key: value.to(device) for key, value in tokens.items()})
    condition = {i: c.to(device) for i, c in condition.items()}
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
        torch.cuda.set_sync_debug_mode('error')
    try:
        r_target = branch(tokens, ROUTED_LANGS, condition)
        grads = torch.autograd.grad(r_target.square().sum(), list(branch.parameters()))
    finally:
        if device.type == 'cuda':
            torch.cuda.set_sync_debug_mode(0)
    return [r_target.cpu(), *(g.cpu() for g in grads)]


# DASD's dynamic adapters run grouped and unsorted; static adapters sort the batch by language.
@pytest.mark.parametrize('adapter_set', ['dynamic', 'static'])
def test_a_mixed_language_batch_equals_the_cpu_and_never_waits_for_the_gpu(accelerator,
                                                                            adapter_set):
    torch.manual_seed(0)
    backbone = MODELS.build(tiny_backbone_cfg())
    branch = MODELS.build(tiny_branch_cfg(languages=('de', 'zh', 'fr'),
                                          adapters=ADAPTER_SETS[adapter_set]),
                          default_args=dict(tower=backbone.text_tower))
    randomise(branch.adapters, 1)
    tokens = branch.tokenize(ROUTED_TEXTS)
    generator = torch.Generator().manual_seed(4)
    condition = {i: torch.randn(len(ROUTED_TEXTS), 4, 4, generator=generator)
                 for i in range(backbone.text_tower.num_blocks)}
    reference = branch_run(backbone, branch, tokens, condition, torch.device('cpu'))
    got = branch_run(backbone, branch, tokens, condition, accelerator)
    for mine, expected in zip(got, reference, strict=True):
        torch.testing.assert_close(mine, expected, **FP32_TOLERANCE)
