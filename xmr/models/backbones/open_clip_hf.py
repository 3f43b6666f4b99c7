"""open_clip's ``HFTextEncoder`` (XLM-R, RoBERTa, BERT text towers) as a :class:`TextTower`.

open_clip wraps a Hugging Face encoder as a CLIP text tower: the encoder, one of its poolers
(``hf_pooler_type``) and a projection (``hf_proj_type``)::

    h = encoder(ids, mask = ids != pad_id)          # post-LN BERT layers
    r = proj(pool(h))                               # pool: masked mean | CLS | pooler(CLS)

The layers are BERT's post-LN layers, which xmr already writes out for CCLM and M-CLIP
(:class:`~xmr.models.backbones.cclm.CCLMTextTower`): this tower reuses them, so every q/k/v,
output and FFN projection and each sub-layer output is an adapter site, and adds open_clip's
pooler and projection. Padding keys are masked and the pooling reads real tokens only, so
dynamic padding and packed tokens give open_clip's outputs.
"""
from __future__ import annotations

import torch
from torch import nn

from xmr.models.backbones.cclm import CCLMTextTower

__all__ = ['OpenCLIPHFTextTower', 'HF_BERT_MODEL_TYPES']

#: Hugging Face ``model_type`` values whose layers are BERT's post-LN layers, with the first
#: position id of a sequence as a function of the padding id (RoBERTa counts after it).
HF_BERT_MODEL_TYPES = {'bert': lambda pad_id: 0, 'roberta': lambda pad_id: pad_id + 1,
                       'xlm-roberta': lambda pad_id: pad_id + 1}

#: open_clip pooler class -> the xmr pooling rule that reads the same token(s).
_POOLERS = {'MeanPooler': 'mean', 'ClsPooler': 'cls', 'ClsLastHiddenStatePooler': 'cls'}


class OpenCLIPHFTextTower(CCLMTextTower):
    """An open_clip ``HFTextEncoder`` with BERT-style layers, run layer by layer.

    Pooling follows open_clip's pooler: ``mean_pooler`` is the masked mean of the real tokens,
    ``cls_last_hidden_state_pooler`` token 0, and ``cls_pooler`` token 0 through the encoder's
    own pooler (``tanh(W x_CLS + b)``) when the encoder has one (open_clip then reads
    ``pooler_output``), else token 0. The head is that pooler (if any) then open_clip's
    projection module (``'linear'``, ``'mlp'`` or identity), unchanged; there is no final norm
    (post-LN layers).

    Args:
        encoder: an ``open_clip.hf_model.HFTextEncoder`` (used, not copied).
        owner: name of the model class for messages.

    Raises:
        TypeError: an encoder xmr cannot run, naming the class, the config field and what is
            missing (another ``model_type`` such as mT5 or NLLB's M2M100, relative position
            embeddings, ``max_pooler``).
    """

    causal = False

    def __init__(self, encoder: nn.Module, owner: str = 'CustomTextCLIP') -> None:
        config = encoder.config
        model_type = getattr(config, 'model_type', None)
        where = f'{owner}.text (HFTextEncoder of {getattr(config, "_name_or_path", "") or "?"})'
        if model_type not in HF_BERT_MODEL_TYPES:
            raise TypeError(
                f"{where}: text_cfg.hf_model_name has model_type {model_type!r} - xmr writes out "
                f'BERT-style post-LN layers only ({sorted(HF_BERT_MODEL_TYPES)}); an encoder '
                "with other blocks (mT5's T5 blocks, NLLB's M2M100 layers) has no written-out "
                'block in xmr')
        position_type = getattr(config, 'position_embedding_type', 'absolute')
        if position_type != 'absolute':
            raise TypeError(f'{where}: config.position_embedding_type={position_type!r} - xmr '
                            'runs absolute position embeddings only')
        pooler_name = type(encoder.pooler).__name__
        if pooler_name not in _POOLERS:
            raise TypeError(
                f'{where}: text_cfg.hf_pooler_type gives {pooler_name} - xmr runs mean_pooler, '
                'cls_pooler and cls_last_hidden_state_pooler (open_clip\'s MaxPooler fills the '
                'real tokens, not the padding, with -inf, so it pools the padding)')
        if not hasattr(encoder, 'proj'):
            raise TypeError(f'{where}: text_cfg.hf_proj_type=None - open_clip builds no '
                            f'projection from the encoder width {config.hidden_size} to '
                            f'embed_dim {encoder.output_dim}; use \'linear\' or \'mlp\'')
        transformer = encoder.transformer
        super().__init__(transformer, embed_dim=None)
        self.pooling = _POOLERS[pooler_name]
        self.position_offset = HF_BERT_MODEL_TYPES[model_type](config.pad_token_id)
        self.context_length = config.max_position_embeddings - self.position_offset
        self.pad_id = config.pad_token_id
        self.vocab_size = config.vocab_size
        # ClsPooler reads pooler_output whenever the encoder was built with its pooler.
        self.hf_pooler = (transformer.pooler if pooler_name == 'ClsPooler'
                          and encoder.pooler.use_pooler_output
                          and getattr(transformer, 'pooler', None) is not None else None)
        self.proj = encoder.proj
        self.embed_dim = encoder.output_dim if not isinstance(self.proj, nn.Identity) \
            else self.width

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """``proj(pooler(x))`` (the pooler only for ``cls_pooler``); ``[..., D] -> [..., E]``.

        The encoder's pooler reads ``x[:, 0]`` of a sequence, so a token sequence
        ``[B, L, D]`` goes through its dense + tanh token by token.
        """
        if self.hf_pooler is not None:
            pooled = self.hf_pooler.activation(self.hf_pooler.dense(pooled))
        return self.proj(pooled)
