"""Every loss under CPU autocast equals the fp32 loss of its (bf16) inputs and comes out in fp32.

The inputs are chosen so that autocast's bf16 products are exact: unit rows of four entries
±0.5 in eight columns have cosines in multiples of 0.25, and the logit scales (10, 100) keep
them exact in bf16. What is left to differ is the part :func:`in_fp32` covers, the scores'
way to the scalar: in fp32 it matches to **1e-5 relative** (measured: at most 1.6e-7). In bf16,
as CPU autocast ran the sums, log-sigmoids and variances before, it missed by 1.1e-3 to 5.3e-3
and came out in bf16 (InfoNCE's and the plain alignment's were fp32 already). Inputs the
products do not keep exact add the products' bf16 rounding, the same on CUDA
(docs/benchmarks.md, "Mixed precision").
"""
from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from xmr.models.losses import (
    AlignmentLoss,
    CDDSInformationIntegrityLoss,
    CDDSModalityConsistencyLoss,
    CDDSSemanticConsistencyLoss,
    CDDSXSemanticReconstructionLoss,
    InfoNCELoss,
    SigmoidLoss,
    TranslationAlignmentLoss,
    VSEHingeLoss,
)
from xmr.models.losses.precision import in_fp32

RTOL = 1e-5
BATCH, TOKENS, WIDTH = 12, 5, 8


def unit_rows(*shape: int, seed: int) -> torch.Tensor:
    """``[*shape, WIDTH]`` rows of four entries ±0.5 (norm 1) at random columns."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.zeros(*shape, WIDTH)
    columns = torch.rand(*shape, WIDTH, generator=generator).argsort(-1)[..., :4]
    signs = torch.randint(0, 2, (*shape, 4), generator=generator) * 2 - 1
    return rows.scatter(-1, columns, 0.5 * signs.float())


def normal(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


MASK = torch.ones(BATCH, TOKENS, dtype=torch.bool)
MASK[::2, 3:] = False  # every other sample has padding
SAME_MEDIA = torch.arange(BATCH)[:, None] // 2 == torch.arange(BATCH)[None, :] // 2

#: name -> (loss, its inputs): pairs of unit rows, or token sets with their masks.
PAIRS = (unit_rows(BATCH, seed=0), unit_rows(BATCH, seed=1))
TOKEN_PAIRS = (unit_rows(BATCH, TOKENS, seed=2), unit_rows(BATCH, TOKENS, seed=3))
LOSSES: dict[str, tuple[Callable[..., torch.Tensor], tuple[torch.Tensor, ...]]] = {
    'InfoNCE': (InfoNCELoss(temperature=0.01), PAIRS),
    'InfoNCE masked': (lambda a, b: InfoNCELoss(mask_same_media=True)(a, b, SAME_MEDIA), PAIRS),
    'SigLIP': (SigmoidLoss(logit_scale=10.0, logit_bias=-10.0), PAIRS),
    'SigLIP masked': (lambda a, b: SigmoidLoss(10.0, -10.0, mask_same_media=True)(
        a, b, SAME_MEDIA), PAIRS),
    'VSE++ summed': (VSEHingeLoss(hardest_after_pairs=None), PAIRS),
    'VSE++ hardest': (VSEHingeLoss(), PAIRS),
    'alignment normalised': (AlignmentLoss(normalize=True), (normal(BATCH, WIDTH, seed=4),
                                                             normal(BATCH, WIDTH, seed=5))),
    'alignment smooth_l1 sum': (AlignmentLoss('smooth_l1', 'sum'), (
        normal(BATCH, WIDTH, seed=4), normal(BATCH, WIDTH, seed=5))),
    'translation contrastive': (TranslationAlignmentLoss('contrastive'), PAIRS),
    'CDDS L_s': (lambda image, text: CDDSSemanticConsistencyLoss()(image, MASK, text, MASK),
                 TOKEN_PAIRS),
    'CDDS L_m': (lambda tokens: CDDSModalityConsistencyLoss()(tokens, MASK),
                 (normal(BATCH, TOKENS, WIDTH, seed=6),)),
    'CDDS L_f': (lambda s, m, x: CDDSInformationIntegrityLoss()(s, m, x, MASK),
                 tuple(normal(BATCH, TOKENS, WIDTH, seed=seed) for seed in (7, 8, 9))),
    'CDDS L_x': (lambda s, m, x: CDDSXSemanticReconstructionLoss()(s, m, x, MASK),
                 tuple(normal(BATCH, TOKENS, WIDTH, seed=seed) for seed in (7, 8, 9))),
}


@pytest.mark.parametrize('name', LOSSES)
def test_a_loss_under_cpu_autocast_is_the_fp32_loss_of_its_inputs(name):
    loss, inputs = LOSSES[name]
    half = [x.bfloat16().requires_grad_() for x in inputs]
    rounded = [x.detach().float().requires_grad_() for x in half]
    with torch.autocast('cpu', dtype=torch.bfloat16):
        mixed = loss(*half)
    expected = loss(*rounded)
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, expected, rtol=RTOL, atol=0)
    # The gradients reach the bf16 inputs, as bf16, near the fp32 ones (autocast's backward
    # products round them).
    for got, want in zip(torch.autograd.grad(mixed, half), torch.autograd.grad(expected, rounded),
                         strict=True):
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2 * want.abs().max())


def test_in_fp32_turns_autocast_off_and_casts_only_half_tensors():
    seen = {}

    @in_fp32
    def record(*args, **kwargs):
        seen.update(autocast=torch.is_autocast_enabled('cpu'),
                    dtypes=[x.dtype for x in (*args, *kwargs.values())
                            if isinstance(x, torch.Tensor)])
        return args[0] @ args[0]

    half = torch.ones(2, 2, dtype=torch.float16)
    others = (torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.long),
              torch.ones(2, dtype=torch.bool))
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = record(torch.eye(2).bfloat16(), *others, 0.5, key=half)
        assert torch.is_autocast_enabled('cpu')  # on again after it
    assert out.dtype == torch.float32  # its product too: autocast is off inside
    assert seen == dict(autocast=False, dtypes=[torch.float32, torch.float64, torch.long,
                                                torch.bool, torch.float32])
