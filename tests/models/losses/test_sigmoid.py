"""SigLIP's sigmoid loss: by hand, equal to open_clip's SigLipLoss, and on the backbone's own
scale and bias inside a retriever (frozen)."""
import math

import pytest
import torch
import torch.nn.functional as F
from open_clip.loss import SigLipLoss

from tests.conftest import tiny_backbone_cfg, tiny_branch_cfg
from tests.models.backbones.open_clip_families import (
    XLMR_TOKENIZER,
    backbone_cfg,
    siglip_cfg,
    xlmr_tokenizer,
)
from xmr.models.losses import SigmoidLoss
from xmr.models.losses.sigmoid import pairwise_sigmoid_loss
from xmr.registry import MODELS


def test_two_pairs_by_hand():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    b = torch.tensor([[3.0, 0.0], [1.0, 1.0]])
    cos = [[1.0, 1 / math.sqrt(2)], [0.0, 1 / math.sqrt(2)]]  # cos(a_i, b_j)
    t, bias = 10.0, -2.0
    expected = 0.0
    for i in range(2):
        for j in range(2):
            sign = 1 if i == j else -1
            expected -= math.log(1 / (1 + math.exp(-sign * (t * cos[i][j] + bias))))
    loss = SigmoidLoss(logit_scale=t, logit_bias=bias)(a, b)
    assert loss.item() == pytest.approx(expected / 2, rel=1e-6)


def test_equals_open_clips_siglip_loss():
    torch.manual_seed(0)
    a, b = torch.randn(6, 8), torch.randn(6, 8)
    ours = SigmoidLoss(logit_scale=12.5, logit_bias=-7.0)(a, b)
    reference = SigLipLoss()(F.normalize(a, dim=-1), F.normalize(b, dim=-1),
                             torch.tensor(12.5), torch.tensor(-7.0))
    torch.testing.assert_close(ours, reference)


def test_the_gradient_of_each_logit_is_the_derivative_written_out_in_float64():
    """``∂L/∂S_ij = −z_ij σ(−z_ij (S_ij + b)) / B`` on the scaled cosines (0 for a masked pair),
    and ``gradcheck`` through the normalisation of the embeddings."""
    torch.manual_seed(0)
    a, b = (torch.randn(5, 8, dtype=torch.float64, requires_grad=True) for _ in range(2))
    media = ['u', 'v', 'u', 'w', 'v']
    same_media = torch.tensor([[i == j for j in media] for i in media])
    loss_fn = SigmoidLoss(logit_scale=7.0, logit_bias=-3.0, mask_same_media=True)
    scaled = (7.0 * F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).t()).detach()
    scaled.requires_grad_()
    masked = same_media & ~torch.eye(5, dtype=torch.bool)
    pairwise_sigmoid_loss(scaled, -3.0, masked).backward()
    signs = 2 * torch.eye(5, dtype=torch.float64) - 1
    expected = -signs * torch.sigmoid(-signs * (scaled.detach() - 3.0)) / 5
    torch.testing.assert_close(scaled.grad, expected.masked_fill(masked, 0.0))
    assert torch.autograd.gradcheck(lambda a, b: loss_fn(a, b, same_media), (a, b))


def test_masked_pairs_of_one_medium_leave_the_sum():
    """Every pair but the mismatches of one medium: -log σ(±(t·cos + b)), summed, over B."""
    torch.manual_seed(0)
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    media = ['u', 'v', 'u', 'u']
    same_media = torch.tensor([[i == j for j in media] for i in media])
    loss = SigmoidLoss(logit_scale=5.0, logit_bias=-1.0, mask_same_media=True)(a, b, same_media)
    cos = F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).t()
    expected = 0.0
    for i in range(4):
        for j in range(4):
            if i == j or media[i] != media[j]:
                sign = 1 if i == j else -1
                expected -= math.log(1 / (1 + math.exp(-sign * (5.0 * cos[i, j].item() - 1.0))))
    assert loss.item() == pytest.approx(expected / 4, rel=1e-6)


@pytest.mark.skipif(not XLMR_TOKENIZER.is_file(), reason=f'no XLM-R tokenizer at {XLMR_TOKENIZER}')
def test_the_cross_modal_phase_trains_on_the_backbones_own_scale_and_bias():
    torch.manual_seed(0)
    model = MODELS.build(dict(
        type='CrossLingualRetriever',
        backbone=backbone_cfg({**siglip_cfg(), 'init_logit_bias': -3.0},
                              xlmr_tokenizer(clean='canonicalize')),
        language_branch=dict(type='TargetLanguageBranch', languages=['sw'],
                             tokenizer=xlmr_tokenizer(max_length=24),
                             embedding=dict(type='TowerTokenEmbedding'),
                             adapters=dict(type='StaticAdapter', hidden=8)),
        losses=dict(cm=dict(type='SigmoidLoss'))))
    clip = model.backbone.clip
    with torch.no_grad():
        clip.logit_scale.fill_(math.log(7.0))
    assert model.losses['cm'].backbone is model.backbone
    assert not [k for k in model.state_dict() if k.startswith('losses.cm')]  # held, not owned
    model.set_phase('cross_modal', dict(cm=1.0))
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith('language_branch.'))
    # Trainable or not, the backbone's scale and bias are read frozen: no gradient reaches them
    # (a phase that fine-tunes the towers must not move SigLIP's learnt calibration).
    clip.logit_scale.requires_grad_(True)
    clip.logit_bias.requires_grad_(True)
    batch = dict(media=torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8),
                 source_text=['a', 'b', 'c'], target_text=['paka mweusi', 'mbwa', 'ndege'],
                 lang=['sw'] * 3)
    data = model.data_preprocessor(batch, True)
    loss = model(mode='loss', **data)['loss_cm']
    r_target, _ = model.encode_target(data['target_tokens'], ['sw'] * 3)
    r_media = model.encode_media(data['media'])
    reference = SigLipLoss()(F.normalize(r_media, dim=-1), F.normalize(r_target, dim=-1),
                             torch.tensor(7.0), torch.tensor(-3.0))
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-6)
    loss.backward()
    assert clip.logit_scale.grad is None and clip.logit_bias.grad is None


def test_a_backbone_without_a_bias_is_named():
    model = MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                              language_branch=tiny_branch_cfg(),
                              losses=dict(cm=dict(type='SigmoidLoss'))))
    with pytest.raises(ValueError, match='OpenCLIPBackbone learnt no logit bias.*give '
                                         'SigmoidLoss a logit_bias'):
        model.losses['cm'](torch.ones(2, 32), torch.ones(2, 32))
    given = MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                              language_branch=tiny_branch_cfg(),
                              losses=dict(cm=dict(type='SigmoidLoss', logit_bias=-10.0))))
    scale, bias = given.losses['cm'].scale_and_bias()
    assert bias == -10.0 and float(scale) == pytest.approx(float(
        given.backbone.clip.logit_scale.exp()))
    with pytest.raises(ValueError, match='give both or build it inside a retriever'):
        SigmoidLoss(logit_scale=10.0)



class LearntCalibration(torch.nn.Module):
    """A backbone that learnt ``t = 7`` and ``b = -3``."""

    def pair_logits(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tensor(7.0), torch.tensor(-3.0)


def test_a_given_value_overrides_the_backbones_and_the_missing_one_is_read_from_it():
    backbone = LearntCalibration()
    assert SigmoidLoss(logit_scale=3.0, backbone=backbone).scale_and_bias() == (3.0, -3.0)
    assert SigmoidLoss(logit_bias=-10.0, backbone=backbone).scale_and_bias() == (7.0, -10.0)
    assert SigmoidLoss(backbone=backbone).scale_and_bias() == (7.0, -3.0)
