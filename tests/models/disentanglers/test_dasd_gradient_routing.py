"""DASD inside the retriever: which parameters each loss trains (DESIGN.md, DASD) and the
discriminator ``F`` written out from its weights.

* ``L_adv`` (the ``adv`` loss behind gradient reversal): ``F`` and the SDM's ``sa`` stream only;
  not the embedding block, the target branch's adapters, the generator or the ``sr`` stream;
* ``L_sc``: the ``sr`` stream and the embedding block it reads; not ``F``, ``sa`` or the
  generator;
* ``L_CL`` / ``L_CM``: the branch, the generator and both streams (through ``W^z``); never ``F``;
* no loss reaches the frozen towers.
"""
from __future__ import annotations

import pytest
import torch

from tests.conftest import MIXED_BATCH as BATCH
from tests.conftest import tiny_dasd_cfg
from xmr.models.disentanglers.discriminator import PairDiscriminator
from xmr.registry import MODELS

SDM = 'disentangler.'
PARTS = {
    'discriminator': SDM + 'discriminator.',
    'sa_stream': (SDM + 'sa_adapters.', SDM + 'sa_norm.'),
    'sr_stream': (SDM + 'sr_adapters.', SDM + 'sr_norm.', SDM + 'sr_projection.'),
    'generator': SDM + 'generator.',
    'embedding': 'language_branch.embedding.',
    'adapters': 'language_branch.adapters.',
    'backbone': 'backbone.',
}


@pytest.fixture(scope='module')
def model():
    torch.manual_seed(0)
    return MODELS.build(tiny_dasd_cfg())


def trained_parts(model, phase: str, weights: dict, loss: str) -> set[str]:
    """The parts whose parameters get a non-zero gradient from ``loss`` alone."""
    model.set_phase(phase, weights)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(3)
    losses = model(mode='loss', **model.data_preprocessor(BATCH, True))
    losses[loss].backward()
    reached = set()
    for name, parameter in model.named_parameters():
        if parameter.grad is not None and parameter.grad.abs().sum() > 0:
            part = [key for key, prefixes in PARTS.items() if name.startswith(prefixes)]
            assert len(part) == 1, name
            reached.add(part[0])
    return reached


def test_the_adversarial_loss_trains_the_discriminator_and_the_sa_stream_alone(model):
    assert trained_parts(model, 'cross_lingual', dict(cl=1.0, disentangler=1.0),
                         'loss_adv') == {'discriminator', 'sa_stream'}


def test_the_consistency_loss_trains_the_sr_stream_and_the_embedding_block_alone(model):
    assert trained_parts(model, 'cross_lingual', dict(cl=1.0, disentangler=1.0),
                         'loss_sc') == {'sr_stream', 'embedding'}


@pytest.mark.parametrize('phase,weights,loss', [
    ('cross_lingual', dict(cl=1.0, disentangler=1.0), 'loss_cl'),
    ('cross_modal', dict(cm=1.0, disentangler=1.0), 'loss_cm')])
def test_the_alignment_losses_train_everything_but_the_discriminator_and_the_towers(
        model, phase, weights, loss):
    assert trained_parts(model, phase, weights, loss) == {
        'sa_stream', 'sr_stream', 'generator', 'embedding', 'adapters'}


def test_the_towers_are_frozen_and_r_source_reaches_the_sdm_detached(model):
    assert not any(p.requires_grad for p in model.backbone.parameters())
    data = model.data_preprocessor(BATCH, True)
    model.set_phase('cross_lingual', dict(cl=1.0, disentangler=1.0))
    seen = {}
    handle = model.disentangler.register_forward_pre_hook(
        lambda module, args, kwargs: seen.update(r_source=kwargs['r_source']),
        with_kwargs=True)
    try:
        model(mode='loss', **data)
    finally:
        handle.remove()
    assert not seen['r_source'].requires_grad


def test_the_discriminator_is_a_tanh_mlp_of_the_pair_with_the_papers_widths():
    torch.manual_seed(0)
    disc = PairDiscriminator(512 + 512)
    shapes = [tuple(p.shape) for p in disc.parameters()]
    assert shapes == [(256, 1024), (256,), (128, 256), (128,), (1, 128), (1,)]
    assert sum(p.numel() for p in disc.parameters()) == 295_425
    a, b, b_neg = torch.randn(3, 6, 512).unbind()
    (w1, b1), (w2, b2), (w3, b3) = [(layer.weight, layer.bias) for layer in disc.mlp
                                    if isinstance(layer, torch.nn.Linear)]

    def prob(x, y):     # F(a, b) = sigma(W3 tanh(W2 tanh(W1 [a; b] + b1) + b2) + b3)
        hidden = torch.tanh(torch.tanh(torch.cat([x, y], -1) @ w1.T + b1) @ w2.T + b2)
        return torch.sigmoid(hidden @ w3.T + b3).squeeze(-1)

    expected = (-torch.log(prob(a, b)) - torch.log(1 - prob(a, b_neg))).mean()
    torch.testing.assert_close(disc.loss(a, b, b_neg), expected)
