"""Builders shared by the PEFT adapter tests: a tiny CLIP, a branch on its own tokenizer."""
from __future__ import annotations

import torch

from tests.conftest import tiny_backbone_cfg
from xmr.registry import MODELS

CAPTIONS = ['a red circle on the left', 'two blue squares', 'a green triangle']


def clip_branch_cfg(adapters, languages=('de', 'zh')) -> dict:
    """A branch reading the tiny CLIP's own BPE tokens through the tower's own embedding.

    With no adapters it is the frozen tower itself, which makes it the reference the tests
    compare adapted outputs with.
    """
    return dict(type='TargetLanguageBranch', languages=list(languages),
                tokenizer=dict(type='OpenCLIPTokenizer', model_name='ViT-B-32', max_length=24),
                embedding=dict(type='TowerTokenEmbedding'), adapters=adapters)


def build_clip_branch(adapters, languages=('de', 'zh'), seed: int = 0):
    """``(backbone, branch)``: a frozen tiny CLIP and a branch with ``adapters``."""

    torch.manual_seed(seed)
    backbone = MODELS.build(tiny_backbone_cfg())
    branch = MODELS.build(clip_branch_cfg(adapters, languages),
                          default_args=dict(tower=backbone.text_tower))
    return backbone, branch


def frozen_tower_output(backbone, tokens) -> torch.Tensor:
    """``[B, E]`` of the plain frozen tower: the branch's output when no adapter acts."""
    return backbone.encode_source_text(tokens)


def lora_delta(lora, target: str) -> torch.Tensor:
    """``(α / r) B A`` of one LoRA target, ``[out, in]``: the update the LoRA paper merges into
    the frozen weight, from the adapter's parameters (the merged-weight tests' reference)."""
    return lora.alpha / lora.r * lora.lora_B[target] @ lora.lora_A[target]
