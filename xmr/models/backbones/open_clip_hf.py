"""open_clip's ``HFTextEncoder`` (XLM-R, RoBERTa, BERT, mT5, NLLB text towers) as a
:class:`TextTower`.

open_clip wraps a Hugging Face encoder as a CLIP text tower: the encoder, one of its poolers
(``hf_pooler_type``) and a projection (``hf_proj_type``)::

    h = encoder(ids, mask = ids != pad_id)          # BERT, T5 or M2M100 layers
    r = proj(pool(h))                               # pool: masked mean | CLS | pooler(CLS)

BERT-style post-LN layers are the ones xmr already writes out for CCLM and M-CLIP
(:class:`~xmr.models.backbones.bert.BertTextTower`): :class:`OpenCLIPHFTextTower` reuses them
and adds open_clip's pooler and projection. T5's and M2M100's (NLLB's) encoders are pre-norm
with a final norm on every token: :class:`OpenCLIPT5TextTower` and
:class:`OpenCLIPM2M100TextTower` write out their attention and MLP branches into xmr's one
pre-norm block (:class:`~xmr.models.backbones.base.PreNormTextTower`) and share the pooling and
head of :class:`HFPreNormTextTower`. In every family each q/k/v, output and FFN projection and
each sub-layer output is an adapter site; padding keys are masked and the pooling reads real
tokens only, so dynamic padding and packed tokens give open_clip's outputs. As in open_clip,
the real tokens are those whose id is not the padding id (``TextTower.masks_pad_id``): a
caption's own ``<pad>`` is masked and not pooled, and RoBERTa's and M2M100's positions skip it.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.adapters.base import AdapterSite
from xmr.models.backbones.base import (
    PreNormTextTower,
    SiteHooks,
    TextTower,
    block_linear_shapes,
    linear_site,
    position_ids,
    with_qkv_delta,
)
from xmr.models.backbones.bert import BertTextTower
from xmr.models.language.packed_tokens import PackedTokens

__all__ = ['OpenCLIPHFTextTower', 'HFPreNormTextTower', 'OpenCLIPT5TextTower',
           'OpenCLIPM2M100TextTower', 'HF_BERT_MODEL_TYPES', 'HF_T5_MODEL_TYPES',
           'HF_M2M100_MODEL_TYPES', 'hf_text_tower']

#: Hugging Face ``model_type`` values whose layers are BERT's post-LN layers (their position
#: offset and context are :class:`~xmr.models.backbones.bert.BertTextTower`'s).
HF_BERT_MODEL_TYPES = ('bert', 'roberta', 'xlm-roberta')

#: Hugging Face ``model_type`` values of T5-style encoders.
HF_T5_MODEL_TYPES = ('mt5', 't5')
#: Hugging Face ``model_type`` values of M2M100 encoders (NLLB's).
HF_M2M100_MODEL_TYPES = ('m2m_100',)

#: open_clip pooler class -> the xmr pooling rule that reads the same token(s).
_POOLERS = {'MeanPooler': 'mean', 'ClsPooler': 'cls', 'ClsLastHiddenStatePooler': 'cls'}


def _describe(encoder: nn.Module, owner: str) -> str:
    """``'<owner>.text (HFTextEncoder of <hf_model_name>)'``, the subject of messages."""
    return (f'{owner}.text (HFTextEncoder of '
            f'{getattr(encoder.config, "_name_or_path", "") or "?"})')


def _pooling_and_projection(encoder: nn.Module, width: int,
                            where: str) -> tuple[str, nn.Module, int]:
    """open_clip's pooler as xmr's pooling rule, its projection module and the width ``E``
    it projects to (``D`` itself through an identity).

    Args:
        encoder: an ``open_clip.hf_model.HFTextEncoder``.
        width: the encoder's hidden width ``D``.
        where: the encoder's description for messages.

    Raises:
        TypeError: ``max_pooler``, or no projection although ``D`` differs from ``embed_dim``.
    """
    pooler_name = type(encoder.pooler).__name__
    if pooler_name not in _POOLERS:
        raise TypeError(
            f'{where}: text_cfg.hf_pooler_type gives {pooler_name} - xmr runs mean_pooler, '
            'cls_pooler and cls_last_hidden_state_pooler (open_clip\'s MaxPooler fills the '
            'real tokens, not the padding, with -inf, so it pools the padding)')
    if not hasattr(encoder, 'proj'):
        raise TypeError(f'{where}: text_cfg.hf_proj_type=None - open_clip builds no '
                        f'projection from the encoder width {width} to embed_dim '
                        f'{encoder.output_dim}; use \'linear\' or \'mlp\'')
    proj = encoder.proj
    return _POOLERS[pooler_name], proj, (width if isinstance(proj, nn.Identity)
                                         else encoder.output_dim)


class OpenCLIPHFTextTower(BertTextTower):
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
            missing (another ``model_type``, relative position embeddings, ``max_pooler``).
    """

    causal = False
    masks_pad_id = True

    def __init__(self, encoder: nn.Module, owner: str = 'CustomTextCLIP') -> None:
        config = encoder.config
        model_type = getattr(config, 'model_type', None)
        where = _describe(encoder, owner)
        if model_type not in HF_BERT_MODEL_TYPES:
            raise TypeError(
                f"{where}: text_cfg.hf_model_name has model_type {model_type!r} - this tower "
                f'writes out BERT-style post-LN layers ({sorted(HF_BERT_MODEL_TYPES)}); T5 '
                f'blocks ({list(HF_T5_MODEL_TYPES)}) and M2M100 layers '
                f'({list(HF_M2M100_MODEL_TYPES)}) have their own towers (hf_text_tower picks '
                'the tower of an encoder); an encoder with other blocks has no written-out '
                'block in xmr')
        position_type = getattr(config, 'position_embedding_type', 'absolute')
        if position_type != 'absolute':
            raise TypeError(f'{where}: config.position_embedding_type={position_type!r} - xmr '
                            'runs absolute position embeddings only')
        pooling, proj, embed_dim = _pooling_and_projection(encoder, config.hidden_size, where)
        transformer = encoder.transformer
        super().__init__(transformer, embed_dim=None)
        self.pooling = pooling
        self.pad_id = config.pad_token_id
        # ClsPooler reads pooler_output whenever the encoder was built with its pooler.
        self.hf_pooler = (transformer.pooler if type(encoder.pooler).__name__ == 'ClsPooler'
                          and encoder.pooler.use_pooler_output
                          and getattr(transformer, 'pooler', None) is not None else None)
        self.proj = proj
        self.embed_dim = embed_dim

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """``proj(pooler(x))`` (the pooler only for ``cls_pooler``); ``[..., D] -> [..., E]``.

        The encoder's pooler reads ``x[:, 0]`` of a sequence, so a token sequence
        ``[B, L, D]`` goes through its dense + tanh token by token.
        """
        if self.hf_pooler is not None:
            pooled = self.hf_pooler.activation(self.hf_pooler.dense(pooled))
        return self.proj(pooled)


class HFPreNormTextTower(PreNormTextTower):
    """An open_clip ``HFTextEncoder`` over a pre-norm encoder (T5, M2M100), run block by block.

    Such an encoder ends in a norm acting on every token (T5's RMSNorm, M2M100's LayerNorm),
    which open_clip's pooler reads after: :meth:`token_states` applies it and :meth:`pool` pools
    its output, so ``mean_pooler`` averages normed tokens as open_clip does. The head is
    open_clip's projection module (``'linear'``, ``'mlp'`` or identity). Padding keys are masked
    (bidirectional, :meth:`TextTower.build_mask`).

    Args:
        encoder: an ``open_clip.hf_model.HFTextEncoder`` (used, not copied).
        width: the encoder's hidden width ``D``.
        inner_dim: width of the attention's q/k/v (``D`` unless the heads say otherwise).
        ff_dim: width of the FFN's hidden layer.
        final_norm: the encoder's last norm.
        where: the encoder's description for messages.

    Raises:
        TypeError: a pooler xmr does not run (``max_pooler``), or no projection.
    """

    causal = False
    masks_pad_id = True

    def __init__(self, encoder: nn.Module, width: int, inner_dim: int, ff_dim: int,
                 final_norm: nn.Module, where: str) -> None:
        super().__init__()
        self.pooling, self.proj, self.embed_dim = _pooling_and_projection(encoder, width, where)
        self.width = width
        self.inner_dim = inner_dim
        self.ff_dim = ff_dim
        self.final_norm = final_norm
        self.vocab_size = encoder.config.vocab_size
        self.pad_id = encoder.config.pad_token_id

    def token_states(self, x: torch.Tensor) -> torch.Tensor:
        """The encoder's final norm on every token, ``[B, L, D] -> [B, L, D]``."""
        return self.final_norm(x)

    def pool(self, x: torch.Tensor, attention_mask: torch.Tensor,
             eos_index: torch.Tensor) -> torch.Tensor:
        """Pool the final-normed tokens (open_clip pools ``last_hidden_state``, after the norm)."""
        return super().pool(self.token_states(x), attention_mask, eos_index)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """open_clip's projection, ``[..., D] -> [..., E]``."""
        return self.proj(pooled)

    def linear_shapes(self) -> dict[AdapterSite, tuple[int, int]]:
        """``(in_features, out_features)`` of the frozen projection at each linear site."""
        return block_linear_shapes(self.width, self.ff_dim, self.inner_dim)


class OpenCLIPT5TextTower(HFPreNormTextTower):
    """An open_clip ``HFTextEncoder`` over mT5's (or T5's) encoder, run block by block.

    Each T5 block is written out on the frozen weights::

        x = x + o(attn(q, k, v of RMSNorm_1(x)))        # no 1/sqrt(d) scaling
        x = x + wo(act(wi_0 h) * wi_1 h), h = RMSNorm_2(x)   # gated (mT5); wo(act(wi h)) else

    with the relative position bias of block 0 added to every block's attention logits, as
    ``T5Stack`` shares it. Sites: ``attn.qkv`` (deltas of q, k, v), ``attn.out`` (``o``),
    ``mlp.fc`` (the linear input projection: ``wi_1`` of a gated FFN, ``wi`` otherwise),
    ``mlp.proj`` (``wo``), and the residual sites. The encoder's final RMSNorm acts on every
    token before pooling (:class:`HFPreNormTextTower`). Relative positions and masked padding
    keys make dynamic padding and packing exact.

    Args:
        encoder: an ``open_clip.hf_model.HFTextEncoder`` whose ``transformer`` is a ``T5Stack``.
        where: the encoder's description for messages.

    Raises:
        TypeError: a pooler xmr does not run (``max_pooler``), or no projection.
    """

    #: relative positions bound no length; the tokenizers' bound (T5's training length).
    context_length = 512

    def __init__(self, encoder: nn.Module, where: str) -> None:
        stack = encoder.transformer
        config = encoder.config
        super().__init__(encoder, config.d_model, config.num_heads * config.d_kv, config.d_ff,
                         stack.final_layer_norm, where)
        self.embed = stack.embed_tokens
        self.blocks = stack.block
        self.num_heads = config.num_heads
        self.head_dim = config.d_kv
        self.gated = bool(config.is_gated_act)
        self.num_blocks = len(self.blocks)

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed(input_ids)

    def token_table_module(self) -> nn.Module:
        return self.embed

    def block_module(self, index: int) -> nn.Module:
        # Block 0 also holds the relative position bias every block adds; a branch runs it.
        return self.blocks[index]

    def add_positions(self, x: torch.Tensor) -> torch.Tensor:
        """T5 has no absolute positions: ``x`` unchanged (the relative bias acts in attention).

        Raises:
            ValueError: a sequence longer than :attr:`context_length`.
        """
        self.checked_length(x)
        return x

    def _position_bias(self, length: int, device: torch.device) -> torch.Tensor:
        """``[1, H, L, L]`` relative position bias of block 0, shared by every block."""
        return self.blocks[0].layer[0].SelfAttention.compute_bias(length, length, device=device)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | PackedTokens | None) -> torch.Tensor:
        """``softmax(q k^T + position bias + mask) v`` per head, unscaled (T5).

        Args:
            q, k, v: ``[B, L, H * d_kv]``, or packed ``[T, H * d_kv]`` with
                :class:`PackedTokens` (unpacked for attention, packed again).
            mask: additive padding bias ``[B, 1, L, L]``, :class:`PackedTokens` or ``None``.

        Returns:
            The context in the layout of ``q``.
        """
        if isinstance(mask, PackedTokens):
            context = self._attend(mask.unpack(q), mask.unpack(k), mask.unpack(v), mask.bias)
            return mask.pack(context)
        batch, length, _ = q.shape
        q, k, v = (t.reshape(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
                   for t in (q, k, v))
        bias = self._position_bias(length, q.device).to(q.dtype)
        if mask is not None:
            bias = bias + mask.to(q.dtype)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0)
        return context.transpose(1, 2).reshape(batch, length, self.inner_dim)

    def attention_branch(self, index: int, x: torch.Tensor,
                         mask: torch.Tensor | PackedTokens | None,
                         hooks: SiteHooks | None) -> torch.Tensor:
        """``o(attn(q, k, v of RMSNorm_1 x))`` with the ``attn.qkv`` and ``attn.out`` sites."""
        attention_layer = self.blocks[index].layer[0]
        attention = attention_layer.SelfAttention
        h = attention_layer.layer_norm(x)
        q, k, v = with_qkv_delta(attention.q(h), attention.k(h), attention.v(h), h, hooks, index)
        return linear_site(self._attend(q, k, v, mask), attention.o, hooks, AdapterSite.ATTN_OUT,
                           index)

    def mlp_branch(self, index: int, x: torch.Tensor, hooks: SiteHooks | None) -> torch.Tensor:
        """``wo(act(wi_0 h) * wi_1 h)`` (gated) or ``wo(act(wi h))`` of ``h = RMSNorm_2 x``; the
        ``mlp.fc`` site is the linear input (``wi_1`` / ``wi``)."""
        ff_layer = self.blocks[index].layer[1]
        dense = ff_layer.DenseReluDense
        h = ff_layer.layer_norm(x)
        if self.gated:
            h = dense.act(dense.wi_0(h)) * linear_site(h, dense.wi_1, hooks,
                                                         AdapterSite.MLP_FC, index)
        else:
            h = dense.act(linear_site(h, dense.wi, hooks, AdapterSite.MLP_FC, index))
        return linear_site(h, dense.wo, hooks, AdapterSite.MLP_PROJ, index)


class OpenCLIPM2M100TextTower(HFPreNormTextTower):
    """An open_clip ``HFTextEncoder`` over NLLB's M2M100 encoder (``nllb-clip-*``), run layer by
    layer.

    Each pre-LN encoder layer is written out on the frozen weights of transformers'
    ``M2M100EncoderLayer``::

        x = x + out_proj(attn(q, k, v of self_attn_layer_norm(x)))   # softmax(q k^T / sqrt(d))
        x = x + fc2(act(fc1(final_layer_norm(x))))                  # act: activation_function

    Sites: ``attn.qkv`` (deltas of ``q_proj``, ``k_proj``, ``v_proj``), ``attn.out``
    (``out_proj``), ``mlp.fc`` (``fc1``), ``mlp.proj`` (``fc2``), and the residual sites of
    :class:`~xmr.models.backbones.base.PreNormTextTower`. Tokens are embedded as M2M100 does:
    the table times ``sqrt(d_model)`` when ``config.scale_embedding``, plus the encoder's
    sinusoidal positions, which number real tokens from ``pad_id + 1`` (:meth:`add_positions`).
    The encoder's final ``layer_norm`` acts on every token before pooling
    (:class:`HFPreNormTextTower`); nllb-clip pools token 0 (``cls_pooler``: the encoder returns
    no pooler output, so open_clip reads ``last_hidden_state[:, 0]``, NLLB's language-code
    token, which the source tokenizer writes per caption: :class:`NLLBTokenizer`) into a
    ``Linear`` without bias. Dropout and LayerDrop act only while Hugging Face
    trains; the frozen tower runs as in ``eval()``. Masked padding keys and positions that
    count real tokens make dynamic padding and packing exact.

    Args:
        encoder: an ``open_clip.hf_model.HFTextEncoder`` whose ``transformer`` is an
            ``M2M100Encoder`` (open_clip keeps the encoder of the encoder-decoder model).
        where: the encoder's description for messages.

    Raises:
        TypeError: a pooler xmr does not run (``max_pooler``), or no projection.
    """

    reads_language_token = True

    def __init__(self, encoder: nn.Module, where: str) -> None:
        stack = encoder.transformer
        config = encoder.config
        super().__init__(encoder, config.d_model, config.d_model, config.encoder_ffn_dim,
                         stack.layer_norm, where)
        self.token_embedding = stack.embed_tokens
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.sinusoids = stack.embed_positions
        self.layers = stack.layers
        self.num_heads = config.encoder_attention_heads
        self.num_blocks = len(self.layers)
        #: M2M100 numbers the real tokens pad_id + 1, pad_id + 2, ... (fairseq's positions).
        self.position_offset = config.pad_token_id + 1
        self.position_pad_id = config.pad_token_id
        table_rows = self.sinusoids.weights.shape[0]
        self.context_length = min(config.max_position_embeddings,
                                  table_rows - self.position_offset)

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``[B, L] -> [B, L, D]``: the token table times ``embed_scale`` (no positions)."""
        return F.embedding(input_ids, self.token_embedding.weight) * self.embed_scale

    def token_table_module(self) -> nn.Module:
        return self.token_embedding

    def block_module(self, index: int) -> nn.Module:
        return self.layers[index]

    def add_positions(self, x: torch.Tensor,
                      attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Add M2M100's sinusoids to ``x`` ``[B, L, D]``, numbered from ``o = pad_id + 1``.

        Hugging Face derives the positions from the ids, ``cumsum(ids != pad_id) + pad_id`` on
        real tokens and ``pad_id`` (a zero row) on padding: given ``attention_mask`` (the tokens
        read as real, :meth:`token_mask`) the positions count those only
        (:func:`~xmr.models.backbones.base.position_ids`); without it, ``o .. o + L - 1``, the
        same rows on the real tokens of a right-padded caption.

        Raises:
            ValueError: a sequence longer than :attr:`context_length`.
        """
        length = self.checked_length(x)
        table = self.sinusoids.weights
        rows = position_ids(length, self.position_offset, attention_mask, table.device)
        return x + table[rows].to(x.dtype)

    def attention_branch(self, index: int, x: torch.Tensor,
                         mask: torch.Tensor | PackedTokens | None,
                         hooks: SiteHooks | None) -> torch.Tensor:
        """``out_proj(attn(q, k, v of self_attn_layer_norm x))`` with the ``attn.qkv`` and
        ``attn.out`` sites."""
        layer = self.layers[index]
        attention = layer.self_attn
        h = layer.self_attn_layer_norm(x)
        q, k, v = with_qkv_delta(attention.q_proj(h), attention.k_proj(h), attention.v_proj(h),
                                 h, hooks, index)
        return linear_site(self.attend(q, k, v, mask), attention.out_proj, hooks,
                           AdapterSite.ATTN_OUT, index)

    def mlp_branch(self, index: int, x: torch.Tensor, hooks: SiteHooks | None) -> torch.Tensor:
        """``fc2(act(fc1(final_layer_norm x)))`` with the ``mlp.fc`` and ``mlp.proj`` sites."""
        layer = self.layers[index]
        h = linear_site(layer.final_layer_norm(x), layer.fc1, hooks, AdapterSite.MLP_FC, index)
        return linear_site(layer.activation_fn(h), layer.fc2, hooks, AdapterSite.MLP_PROJ, index)


def hf_text_tower(encoder: nn.Module, owner: str = 'CustomTextCLIP') -> TextTower:
    """The :class:`TextTower` of an open_clip ``HFTextEncoder``: BERT-style layers
    (:class:`OpenCLIPHFTextTower`), T5 blocks (:class:`OpenCLIPT5TextTower`) or M2M100 layers
    (:class:`OpenCLIPM2M100TextTower`, NLLB).

    Raises:
        TypeError: another encoder, naming the class, the config field and what is missing.
    """
    model_type = getattr(encoder.config, 'model_type', None)
    if model_type in HF_T5_MODEL_TYPES:
        return OpenCLIPT5TextTower(encoder, _describe(encoder, owner))
    if model_type in HF_M2M100_MODEL_TYPES:
        return OpenCLIPM2M100TextTower(encoder, _describe(encoder, owner))
    return OpenCLIPHFTextTower(encoder, owner)
