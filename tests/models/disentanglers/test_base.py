"""The two disentangler contracts: a user's SDM-style module trains; the wrong kind is refused."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.conftest import tiny_backbone_cfg, tiny_retriever_cfg
from xmr.datasets.synthetic import SyntheticPairDataset
from xmr.models.disentanglers import ConditionDisentangler, TokenDisentangler
from xmr.registry import DISENTANGLERS, MODELS


class LengthPenalty(ConditionDisentangler):
    """A user's module: no condition, one loss pulling a learned gate towards the mean token."""

    def __init__(self, tower: nn.Module, condition_blocks: list[int]) -> None:
        super().__init__()
        self.gate = nn.Linear(tower.width, 1)

    @property
    def loss_names(self) -> frozenset[str]:
        return frozenset({'gate'})

    def forward(self, embeddings, tokens, r_source=None):
        if r_source is None:
            return None, {}
        return None, {'gate': self.gate(embeddings).pow(2).mean()}


def test_a_users_condition_disentangler_trains_its_own_loss_alone():
    DISENTANGLERS.register_module(name='TestLengthPenalty', module=LengthPenalty, force=True)
    torch.manual_seed(0)
    model = MODELS.build(tiny_retriever_cfg(disentangler=dict(type='TestLengthPenalty')))
    model.set_phase('cross_lingual', dict(cl=1.0, disentangler=0.5))
    items = [SyntheticPairDataset(num_scenes=2, languages=['de', 'zh'])[i] for i in range(4)]
    from xmr.datasets.collate import retrieval_collate

    losses = model(mode='loss', **model.data_preprocessor(retrieval_collate(items), True))
    assert set(losses) == {'loss_cl', 'loss_gate'}
    (losses['loss_gate'] / 0.5).backward()
    assert model.disentangler.gate.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.backbone.parameters())


def test_a_token_disentangler_is_refused_by_the_cross_lingual_retriever():
    cfg = tiny_retriever_cfg(disentangler=dict(type='CDDSDisentangler'))
    with pytest.raises(TypeError, match='CrossLingualRetriever runs disentanglers that subclass '
                                        'ConditionDisentangler; CDDSDisentangler does not'):
        MODELS.build(cfg)


def test_a_condition_disentangler_is_refused_by_the_dual_encoder():
    class NeedsNoTower(LengthPenalty):
        def __init__(self, dim: int) -> None:
            ConditionDisentangler.__init__(self)

    DISENTANGLERS.register_module(name='TestNoTower', module=NeedsNoTower, force=True)
    cfg = dict(type='DualEncoderRetriever', backbone=tiny_backbone_cfg(),
               disentangler=dict(type='TestNoTower'))
    with pytest.raises(TypeError, match='DualEncoderRetriever runs disentanglers that subclass '
                                        'TokenDisentangler; NeedsNoTower does not'):
        MODELS.build(cfg)


def test_the_contracts_are_abstract():
    with pytest.raises(TypeError, match='abstract'):
        ConditionDisentangler()
    with pytest.raises(TypeError, match='abstract'):
        TokenDisentangler()


def test_a_token_disentangler_keeps_no_dataset_correlation_by_default():
    """The runner estimates nothing before a phase for it, and a call to update one says so
    instead of passing silently."""

    class NoCorrelation(TokenDisentangler):
        loss_names = frozenset()

        def encode_image(self, patch_tokens, patch_mask):
            return patch_tokens

        encode_text = encode_image

        def pool(self, semantic, mask):
            return semantic.mean(1)

        def forward(self, patch_tokens, patch_mask, word_tokens, word_mask):
            return {}

    module = NoCorrelation()
    assert module.dataset_correlation() is None
    tokens, mask = torch.zeros(2, 3, 4), torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(TypeError, match='NoCorrelation keeps no dataset correlation to update'):
        module.update_correlation(tokens, mask, tokens, mask)
