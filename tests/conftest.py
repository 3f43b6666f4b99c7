"""Shared fixtures: a tiny random CLIP and the path of the real data fixtures."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO / '..' / 'shared' / 'data').resolve()

TINY_CLIP = dict(
    embed_dim=32,
    vision_cfg=dict(image_size=32, layers=2, width=32, patch_size=8, head_width=16),
    text_cfg=dict(context_length=32, vocab_size=49408, width=32, heads=2, layers=3),
)

CORPUS = ['ein roter Kreis', 'zwei blaue Quadrate links', 'un cercle rouge à gauche',
          '一个红色的圆', '两个蓝色的正方形在左边', 'drei grüne Dreiecke oben']


def tiny_backbone_cfg(**overrides) -> dict:
    return dict(type='OpenCLIPBackbone', arch=None, model_cfg=TINY_CLIP, **overrides)


def tiny_branch_cfg(languages=('de', 'zh'), adapters=None, **overrides) -> dict:
    return dict(type='TargetLanguageBranch', languages=list(languages),
                tokenizer=dict(type='SentencePieceTokenizer', corpus=CORPUS * 20, vocab_size=48,
                               max_length=32),
                embedding=dict(type='TargetEmbedding', table_width=24),
                adapters=adapters if adapters is not None else dict(type='StaticAdapter',
                                                                    hidden=8),
                **overrides)


def tiny_retriever_cfg(**overrides) -> dict:
    cfg = dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
               language_branch=tiny_branch_cfg())
    cfg.update(overrides)
    return cfg


@pytest.fixture
def tiny_retriever():
    import xmr  # noqa: F401
    from xmr.registry import MODELS

    torch.manual_seed(0)
    return MODELS.build(tiny_retriever_cfg())


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f'real data fixtures not found at {SHARED_DATA}')
    return SHARED_DATA


def phase_loss_keys(model, loss_weights: dict) -> set[str]:
    """The ``loss_<name>`` keys a retriever returns for a phase's weights: the retriever's own
    losses, and every loss of its disentangler when the phase scales them (``disentangler``)."""
    keys = {f'loss_{k}' for k, weight in loss_weights.items() if weight and k != 'disentangler'}
    if loss_weights.get('disentangler') and getattr(model, 'disentangler', None) is not None:
        keys |= {f'loss_{k}' for k in model.disentangler.loss_names}
    return keys
