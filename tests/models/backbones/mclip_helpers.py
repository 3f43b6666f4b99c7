"""A tiny random M-CLIP with the real XLM-R tokenizer, and M-CLIP's own formula as reference."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.conftest import SHARED_DATA, TINY_CLIP

TOKENIZER_FILE = SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json'
TINY_XLMR = dict(vocab_size=250002, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=40, type_vocab_size=1,
                 layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2)
#: Marks a test module that reads the XLM-R tokenizer of ../shared/data.
needs_tokenizer = pytest.mark.skipif(not TOKENIZER_FILE.is_file(),
                                     reason=f'XLM-R tokenizer fixture missing: {TOKENIZER_FILE}')
CAPTIONS = ['Ein Hund rennt über die Wiese.', 'a dog', '一只狗在草地上奔跑',
            'Un chien court dans un champ vert près de la rivière.']


def tokenizer_cfg(max_length: int = 38) -> dict:
    return dict(type='HFTokenizer', tokenizer_file=str(TOKENIZER_FILE), max_length=max_length)


def tiny_mclip_cfg(**overrides) -> dict:
    cfg = dict(type='MultilingualCLIPBackbone', text_encoder=TINY_XLMR, embed_dim=TINY_CLIP[
        'embed_dim'], image_arch=None, image_model_cfg=TINY_CLIP, tokenizer=tokenizer_cfg())
    cfg.update(overrides)
    return cfg


def tiny_mclip(**overrides) -> nn.Module:
    """The tiny M-CLIP backbone of :func:`tiny_mclip_cfg`, built with seed 0, in eval mode as
    the phase loop runs a frozen backbone (its XLM-R's dropout, 0.1, acts in training mode)."""
    from xmr.registry import MODELS

    torch.manual_seed(0)
    return MODELS.build(tiny_mclip_cfg(**overrides)).eval()


def mclip_reference(xlmr, linear, tokens) -> torch.Tensor:
    """M-CLIP's forward: ``Linear(Σ m h / Σ m)`` over a Hugging Face XLM-R pass."""
    mask = tokens['attention_mask'].long()
    hidden = xlmr(input_ids=tokens['input_ids'], attention_mask=mask)[0]
    pooled = (hidden * mask.unsqueeze(2)).sum(1) / mask.sum(1, keepdim=True)
    return linear(pooled)
