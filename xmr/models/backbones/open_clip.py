"""open_clip models (CLIP, CustomTextCLIP: SigLIP, SigLIP 2, MobileCLIP, XLM-R, mT5 and NLLB
CLIPs) as frozen :class:`VisionLanguageBackbone`s."""
from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.adapters.base import AdapterSite
from xmr.models.backbones.base import (
    PreNormTextTower,
    SiteHooks,
    TextTower,
    TokenOutput,
    TowerShape,
    VisionLanguageBackbone,
    block_linear_shapes,
    check_tokenizer_fits,
    offline_hf_config,
    weights_fingerprint,
    with_linear_delta,
)
from xmr.models.backbones.open_clip_hf import hf_text_tower
from xmr.models.backbones.open_clip_pretrained import (
    TRAINED_TOKENIZER_FIELDS,
    apply_image_record,
    arch_embed_dim,
    arch_text_cfg,
    build_open_clip,
    check_model_cfg,
    check_record_context,
    check_record_tokenizer,
    check_trained_tokenizer,
    hf_tokenizer_name,
    record_tokenizer_cfg,
    resolve_pretrained,
    settled_tokenizer_cfg,
    text_tokenizer_cfg,
)
from xmr.models.language.packed_tokens import PackedTokens
from xmr.models.language.tokenizers import build_tokenizer
from xmr.registry import MODELS, with_defaults

#: open_clip ``pool_type`` -> the :class:`TextTower` pooling rule that selects the same token.
_POOLING = {'argmax': 'eos', 'eos': 'eos', 'first': 'cls', 'last': 'last'}


def _text_transformer_class():
    import open_clip

    return open_clip.transformer.TextTransformer


def _has_fixed_context(pool_type: str, class_token: bool, causal: bool,
                       pad_masked: bool) -> bool:
    """Whether a ``TextTransformer``'s pooled token depends on its padding
    (:attr:`TextTower.fixed_context`). It does not only when it is a real token that sees no
    padding: masked padding keys, or a causal mask with the padding after it. ``'last'``
    pooling reads the last position, padding or not, and an appended class token's position
    moves with the length."""
    return pool_type == 'last' or class_token or not (causal or pad_masked)


def _refuse(owner: str, field: str, what: str) -> TypeError:
    return TypeError(f'{owner}: {field} - {what}')


def _check_pooling(owner: str, text: nn.Module, pool_type: str) -> None:
    """Refuse a pooling that gives no one embedding per caption xmr can reproduce."""
    if getattr(text, 'attn_pool', None) is not None:
        raise _refuse(owner, 'attentional pooler (attn_pool)', 'xmr has no written-out '
                      'attentional pooler for text towers; set pool_type instead')
    if pool_type not in _POOLING:
        raise _refuse(owner, f'text_cfg.pool_type={pool_type!r}', 'open_clip then returns '
                      'every token ([B, L, E]), not one embedding per caption, which '
                      f'retrieval needs; use one of {sorted(_POOLING)}')


def _projected_width(projection: nn.Module | torch.Tensor | None, width: int) -> int:
    """``E``: the width after the text projection, a matrix ``[D, E]``, a ``Linear`` or none."""
    if projection is None:
        return width
    if isinstance(projection, nn.Linear):
        return projection.out_features
    return projection.shape[1]


class OpenCLIPTextTower(PreNormTextTower):
    """open_clip's ``TextTransformer`` (as ``CLIP``'s text attributes or ``CustomTextCLIP.text``),
    run block by block with adapter sites.

    The residual block is written out on the frozen weights rather than called, because
    ``nn.MultiheadAttention`` reads ``in_proj_weight``/``out_proj`` directly: a wrapped projection
    would be silently ignored (DESIGN pitfalls). Written out, every site is reachable. Both of
    open_clip's block kinds run: ``ResidualAttentionBlock`` and ``CustomResidualAttentionBlock``
    (``qk_norm``, ``scale_heads``, ``scale_attn_inner``, ``scale_attn``, ``scale_fc``;
    ``scaled_cosine_attn`` is refused: open_clip's own text attention cannot run it). The
    activation and the norms (their ``eps``) are the blocks' own modules, so GELU, QuickGELU or
    tanh-GELU and SigLIP's ``eps=1e-6`` follow the model.

    What the tower reads from the model (the text config field in brackets):

    * mask: causal when the model keeps a causal ``attn_mask`` (``no_causal_mask``); padding keys
      masked only when the model masks them (``use_pad_mask`` of a bidirectional
      ``TextTransformer``), and then, as open_clip, every key whose id is ``pad_id``
      (:attr:`masks_pad_id`); otherwise every position, padding included, is attended to, as
      open_clip does;
    * pooling (``pool_type``): ``'argmax'`` and ``'eos'`` pool the caption's first end token
      (``eos_index``; open_clip's argmax finds it only with its own BPE vocabulary, its
      ``'eos'`` pools the first ``eos_id``, :attr:`end_id`, which the source tokenizer's end
      token must be), ``'first'`` token 0, ``'last'`` the last position of the sequence;
    * head: ``ln_final`` then the projection, a matrix, a ``Linear`` with bias (``proj_bias``), or
      none (``proj_type='none'``: ``E = D``). Pooling selects one token and LayerNorm acts per
      token, so norm-then-pool and pool-then-norm (``final_ln_after_pool``) are the same.

    A tower whose pooled token depends on the padding (``'last'`` pooling; a bidirectional tower
    without padding mask) has a fixed context: :attr:`fixed_context` is set, every sequence must
    be exactly :attr:`context_length` tokens, and packing is off (docs/backbones.md).

    ``embed_cls`` (CoCa-style): open_clip appends a class token after the ``C`` caption
    positions, masks the padding keys (``text != pad_id``, shifted by one position unless
    ``correct_cls_mask``, as open_clip does) and pools the class token. Here the context is
    ``C + 1`` positions, the tokenizer pads to ``C + 1`` with captions of at most ``C`` tokens
    (:attr:`max_tokens`), and :meth:`add_positions` writes the class token into the last
    position, so masks and hidden states keep one layout ``[B, C + 1]`` everywhere.

    Args:
        clip: an ``open_clip.CLIP`` (its text attributes are used, not copied), an
            ``open_clip.CustomTextCLIP`` whose ``text`` is a ``TextTransformer``, or a
            ``TextTransformer`` itself.

    Raises:
        TypeError: a tower xmr cannot run, naming the class, the config field and what is
            missing (``pool_type='none'``, an attentional pooler, ``scaled_cosine_attn``, a
            block type that is neither of open_clip's).
    """

    causal = True
    pooling = 'eos'

    def __init__(self, clip: nn.Module) -> None:
        super().__init__()
        text, owner, pool_type = self._read_masks(clip)
        _check_pooling(owner, text, pool_type)
        self.pool_type = pool_type
        self.pooling = _POOLING[pool_type]
        self.token_embedding = text.token_embedding
        self.positional_embedding = text.positional_embedding
        self.blocks = text.transformer.resblocks
        self.ln_final = text.ln_final
        self.text_projection = text.text_projection
        self.causal = text.attn_mask is not None
        self.width = text.transformer.width
        self.num_blocks = len(self.blocks)
        self.context_length = text.positional_embedding.shape[0]
        self.vocab_size = text.token_embedding.num_embeddings
        self.embed_dim = _projected_width(self.text_projection, self.width)
        self.custom_blocks = self._check_blocks(owner)
        self.num_heads = self.blocks[0].attn.num_heads
        self.fixed_context = _has_fixed_context(pool_type, self.cls_emb is not None,
                                                self.causal, self.pad_masked)

    def _read_masks(self, clip: nn.Module) -> tuple[nn.Module, str, str]:
        """Set the masking the model's text tower trains with (padding mask, padding id, class
        token); return the tower, its name for errors and its pooling (``pool_type``)."""
        text_cls = _text_transformer_class()
        owner = type(clip).__name__
        text = clip.text if isinstance(getattr(clip, 'text', None), text_cls) else clip
        if isinstance(text, text_cls):
            owner = f'{owner}.text (TextTransformer)' if text is not clip else owner
            pool_type = text.pool_type
            self.pad_masked = bool(getattr(text, 'use_pad_mask', False))
            self.pad_id = int(getattr(text, 'pad_id', 0))
            self.cls_emb = getattr(text, 'cls_emb', None)
            self.correct_cls_mask = bool(getattr(text, 'correct_cls_mask', False))
            if self.cls_emb is not None:
                # open_clip: the class token overrides pool_type and brings a padding mask.
                pool_type, self.pad_masked, self.reserved_positions = 'last', True, 1
            self.end_id = int(text.eos_id) if pool_type == 'eos' else None
        elif all(hasattr(clip, name) for name in ('transformer', 'token_embedding',
                                                  'positional_embedding', 'ln_final')):
            pool_type = getattr(clip, 'text_pool_type', 'argmax')
            self.pad_masked = False  # CLIP.encode_text applies its causal mask only
            self.pad_id = 0
            self.cls_emb = None
            self.end_id = int(clip.text_eos_id) if pool_type == 'eos' else None
        else:
            raise _refuse(owner, 'text tower', 'not an open_clip TextTransformer nor a CLIP with '
                          'its text attributes (transformer, token_embedding, '
                          'positional_embedding, ln_final)')
        return text, owner, pool_type

    @property
    def masks_pad_id(self) -> bool:
        """A padding-masked tower (``use_pad_mask``, ``embed_cls``) masks the keys whose id is
        :attr:`pad_id`, as open_clip builds its mask from the ids (``text != pad_id``): with
        CLIP's BPE id 0 is also the piece ``!``, which CoCa was trained with masked."""
        return self.pad_masked

    def _check_blocks(self, owner: str) -> bool:
        from open_clip.transformer import CustomResidualAttentionBlock, ResidualAttentionBlock

        kinds = {type(block) for block in self.blocks}
        if kinds == {ResidualAttentionBlock}:
            if any(hasattr(block, 'ln_1_kv') for block in self.blocks):
                raise _refuse(owner, 'transformer.resblocks', 'cross-attention blocks '
                              '(is_cross_attention) are not a text encoder')
            return False
        if kinds == {CustomResidualAttentionBlock}:
            if any(block.attn.logit_scale is not None for block in self.blocks):
                raise _refuse(owner, 'text_cfg.scaled_cosine_attn=True', "open_clip's own "
                              'Attention cannot run it on text (torch.bmm on [B, H, L, d] '
                              'heads fails), so there is no computation to reproduce')
            return True
        names = sorted(kind.__name__ for kind in kinds)
        raise _refuse(owner, 'text_cfg.block_type', f'blocks of type {names}; xmr writes out '
                      "open_clip's ResidualAttentionBlock and CustomResidualAttentionBlock")

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.token_embedding(input_ids)

    def token_table_module(self) -> nn.Module:
        return self.token_embedding

    def block_module(self, index: int) -> nn.Module:
        return self.blocks[index]

    def add_positions(self, x: torch.Tensor) -> torch.Tensor:
        """Add positions ``0..L-1`` to ``x`` ``[B, L, D]``; with ``embed_cls`` the last
        position (the slot the tokenizer padded for it) becomes the class token first."""
        length = self.checked_length(x)
        if self.cls_emb is not None:
            cls = self.cls_emb.to(x.dtype).expand(x.shape[0], 1, -1)
            x = torch.cat([x[:, :-1], cls], dim=1)
        return x + self.positional_embedding[:length].to(x.dtype)

    def encode_embeddings(self, x: torch.Tensor, attention_mask: torch.Tensor,
                          hooks: SiteHooks | None = None, blocks: range | None = None,
                          packed: PackedTokens | None = None) -> torch.Tensor:
        """:meth:`TextTower.encode_embeddings`; a fixed-context tower needs ``L`` = its context.

        Raises:
            ValueError: a fixed-context tower given another length (both numbers named).
        """
        length = x.shape[-2]
        if self.fixed_context and length != self.context_length:
            raise ValueError(
                f'this text tower (pool_type={self.pool_type!r}, causal={self.causal}, padding '
                f'masked={self.pad_masked}) pools a position whose output depends on the '
                f'padding, so every sequence must be its full context of {self.context_length} '
                f'tokens, not {length}: set the tokenizer\'s pad_to={self.context_length} '
                '(docs/backbones.md)')
        return super().encode_embeddings(x, attention_mask, hooks, blocks, packed)

    def build_mask(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """Additive bias ``[B, 1, L, L]`` from a ``[B, L]`` bool mask of real tokens: open_clip's
        own mask for this tower.

        A padding-masked tower (``use_pad_mask``, ``embed_cls``) masks exactly the padding keys,
        for every query, padding queries included, since a fixed-context tower may pool a
        padding position; with ``embed_cls`` the class token's key is valid and, unless
        ``correct_cls_mask``, the key mask is shifted by one position as open_clip builds it.
        A fixed-context tower without padding mask (SigLIP) attends to everything but the
        future keys of a causal mask. Other towers take :meth:`TextTower.build_mask`.
        """
        if self.pad_masked:
            batch, length = attention_mask.shape
            valid = attention_mask
            if self.cls_emb is not None:
                real, cls = attention_mask[:, :-1], attention_mask.new_ones(batch, 1)
                valid = torch.cat([real, cls] if self.correct_cls_mask else [cls, real], dim=1)
            allowed = valid[:, None, None, :].expand(batch, 1, length, length)
            if self.causal:
                allowed = allowed & torch.ones(length, length, dtype=torch.bool,
                                               device=allowed.device).tril()
            bias = torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device)
            return bias.masked_fill(~allowed, float('-inf'))
        if self.fixed_context:
            attention_mask = torch.ones_like(attention_mask)
        return super().build_mask(attention_mask)

    def packing(self, attention_mask: torch.Tensor) -> PackedTokens | None:
        """``None`` for a fixed-context tower (its padding tokens are computed on), else the
        batch's :class:`PackedTokens`."""
        if self.fixed_context:
            return None
        return super().packing(attention_mask)

    @staticmethod
    def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                hooks: SiteHooks | None, site: AdapterSite, index: int) -> torch.Tensor:
        return with_linear_delta(F.linear(x, weight, bias), x, hooks, site, index)

    def _custom_attend(self, attn: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       mask: torch.Tensor | PackedTokens | None) -> torch.Tensor:
        """open_clip ``Attention``: q/k LayerNorm per head, then the per-head scale.

        Args:
            attn: the block's ``open_clip.transformer.Attention``.
            q, k, v: ``[B, L, D]``, or ``[T, D]`` with :class:`PackedTokens`.
            mask: as in :meth:`attend`.

        Returns:
            The context in the layout of ``q``, before ``ln_inner`` and ``out_proj``.
        """
        if isinstance(mask, PackedTokens):
            context = self._custom_attend(attn, mask.unpack(q), mask.unpack(k), mask.unpack(v),
                                          mask.bias)
            return mask.pack(context)
        batch, length, width = q.shape
        q, k, v = (t.reshape(batch, length, self.num_heads, width // self.num_heads)
                   .transpose(1, 2) for t in (q, k, v))
        bias = mask.to(q.dtype) if mask is not None else None
        context = F.scaled_dot_product_attention(attn.ln_q(q), attn.ln_k(k), v, attn_mask=bias)
        if attn.head_scale is not None:
            context = context * attn.head_scale
        return context.transpose(1, 2).reshape(batch, length, width)

    def attention_branch(self, index: int, x: torch.Tensor,
                         mask: torch.Tensor | PackedTokens | None,
                         hooks: SiteHooks | None) -> torch.Tensor:
        """``ls_1(out_proj(attn(ln_1 x)))`` with the fused ``attn.qkv`` site; a custom block's
        q/k norms, head scale, ``ln_inner`` and ``ln_attn`` at their places."""
        block = self.blocks[index]
        attn = block.attn
        qkv = self._linear(block.ln_1(x), attn.in_proj_weight, attn.in_proj_bias, hooks,
                           AdapterSite.ATTN_QKV, index)
        if self.custom_blocks:
            context = attn.ln_inner(self._custom_attend(attn, *qkv.chunk(3, dim=-1), mask))
        else:
            context = self.attend(*qkv.chunk(3, dim=-1), mask)
        h = self._linear(context, attn.out_proj.weight, attn.out_proj.bias, hooks,
                         AdapterSite.ATTN_OUT, index)
        if self.custom_blocks:
            h = block.ln_attn(h)
        return block.ls_1(h)

    def mlp_branch(self, index: int, x: torch.Tensor, hooks: SiteHooks | None) -> torch.Tensor:
        """``ls_2(c_proj(act(c_fc(ln_2 x))))`` (a custom block's ``mlp.ln`` after the
        activation)."""
        block = self.blocks[index]
        mlp = block.mlp
        h = self._linear(block.ln_2(x), mlp.c_fc.weight, mlp.c_fc.bias, hooks,
                         AdapterSite.MLP_FC, index)
        h = mlp.gelu(h)
        if self.custom_blocks:
            h = mlp.ln(h)
        h = self._linear(h, mlp.c_proj.weight, mlp.c_proj.bias, hooks,
                         AdapterSite.MLP_PROJ, index)
        return block.ls_2(h)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """``ln_final`` then the projection (matrix, ``Linear`` with bias, or none)."""
        pooled = self.ln_final(pooled)
        if self.text_projection is None:
            return pooled
        if isinstance(self.text_projection, nn.Linear):
            return self.text_projection(pooled)
        return pooled @ self.text_projection

    def linear_shapes(self) -> dict[AdapterSite, tuple[int, int]]:
        """``(in_features, out_features)`` of the frozen projection at each linear site."""
        return block_linear_shapes(self.width, self.blocks[0].mlp.c_fc.out_features)


def open_clip_text_tower(model: nn.Module) -> TextTower:
    """The :class:`TextTower` of an open_clip model's text side.

    ``CLIP`` and a ``CustomTextCLIP`` with a ``TextTransformer`` (SigLIP, SigLIP 2, MobileCLIP)
    give an :class:`OpenCLIPTextTower`; a ``CustomTextCLIP`` with an ``HFTextEncoder`` the tower
    of its blocks (:func:`~xmr.models.backbones.open_clip_hf.hf_text_tower`: XLM-R, RoBERTa,
    BERT, mT5, NLLB).

    Raises:
        TypeError: a text tower xmr cannot run, naming the model class, the config field and
            what is missing.
    """
    from open_clip.hf_model import HFTextEncoder

    text = getattr(model, 'text', None)
    if isinstance(text, HFTextEncoder):
        return hf_text_tower(text, type(model).__name__)
    if text is not None and not isinstance(text, _text_transformer_class()):
        raise TypeError(f'{type(model).__name__}.text is a {type(text).__name__}: '
                        'text_cfg names a tower that is neither open_clip\'s TextTransformer '
                        'nor an HFTextEncoder, and xmr has no written-out blocks for it')
    return OpenCLIPTextTower(model)


def open_clip_image_tokens(visual: nn.Module, images: torch.Tensor, arch: str) -> TokenOutput:
    """An open_clip ``VisionTransformer``'s class token then patches in the joint space.

    ``forward_intermediates`` on the last block with its final norm gives the class token and
    the patches apart; both go through ``ln_post`` and ``proj`` as the pooled token does, so
    with ``'tok'`` pooling token 0 is the tower's own image embedding.

    Args:
        visual: the image tower of an open_clip CLIP.
        images: ``[B, 3, H, W]`` normalised images.
        arch: architecture name for the error of a tower without token outputs.

    Returns:
        :class:`TokenOutput` with ``[B, 1 + P, E]`` tokens, all real, and the pooled ``[B, E]``.
    """
    import open_clip

    if not isinstance(visual, open_clip.transformer.VisionTransformer) or \
            visual.attn_pool is not None or visual.proj is None:
        raise TypeError(f'token-level image encoding needs an open_clip VisionTransformer '
                        f'without attentional pooling; {arch} has {type(visual).__name__}')
    out = visual.forward_intermediates(images, indices=1, normalize_intermediates=True,
                                       output_fmt='NLC', output_extra_tokens=True)
    tokens = torch.cat([out['image_intermediates_prefix'][0],
                        out['image_intermediates'][0]], dim=1) @ visual.proj
    mask = torch.ones(tokens.shape[:2], dtype=torch.bool, device=tokens.device)
    return TokenOutput(tokens, mask, out['image_features'])


@MODELS.register_module()
class OpenCLIPBackbone(VisionLanguageBackbone):
    """A frozen open_clip CLIP: image tower, English text tower and CLIP's BPE tokenizer.

    The model runs with its weights' pretrained record (:class:`PretrainedRecord`: QuickGELU,
    image size, mean/std, resize, tokenizer and context length); ``self.record`` holds it.

    Args:
        arch: any open_clip architecture name (``'ViT-B-32'``, ``'ViT-L-14'``, ...), or ``None``
            when ``model_cfg`` gives the architecture inline.
        pretrained: an open_clip pretrained tag (``'openai'``, ``'laion2b_s34b_b79k'``), a local
            checkpoint file (state dict, safetensors, or OpenAI's TorchScript ``ViT-B-32.pt``),
            or ``None`` for random weights (tests, demo pre-training).
        pretrained_cfg: the settings a local file was trained with: a tag of ``arch``
            (``'openai'`` for OpenAI's files) or a dict of
            :data:`~xmr.models.backbones.open_clip_pretrained.RECORD_FIELDS`. Required with a
            file and ``arch``; a tag carries its own.
        model_cfg: an open_clip model config dict (``embed_dim``, ``vision_cfg``, ``text_cfg``)
            for architectures open_clip does not name, e.g. the demo's tiny CLIP.
        tokenizer: tokenizer config of the source language; an ``OpenCLIPTokenizer`` takes
            ``model_name`` and ``max_length`` from the record, and may not contradict them; a
            Hugging Face tokenizer takes ``max_length`` from it too, and may not exceed it.
        freeze: freeze every weight (phases that fine-tune the towers unfreeze them).
    """

    def __init__(self, arch: str | None = 'ViT-B-32', pretrained: str | None = None,
                 pretrained_cfg: str | dict | None = None, model_cfg: dict | None = None,
                 tokenizer: dict | None = None, freeze: bool = True) -> None:
        super().__init__()
        self.clip, self.record = build_open_clip(arch, pretrained, pretrained_cfg, model_cfg)
        self.arch = self.record.arch
        self.model_cfg = None if model_cfg is None else copy.deepcopy(dict(model_cfg))
        self.pretrained = pretrained

        self.text_tower = open_clip_text_tower(self.clip)
        self.embed_dim = self.text_tower.embed_dim
        apply_image_record(self, self.record)
        bpe = hf_tokenizer_name(arch, model_cfg) is None
        if bpe:  # CLIP's BPE: open_clip's own tokenizer, from the record
            tokenizer_cfg = record_tokenizer_cfg(self.record, tokenizer)
        else:
            trained = text_tokenizer_cfg(arch, model_cfg, self.text_tower.reads_language_token)
            tokenizer_cfg = settled_tokenizer_cfg(
                tokenizer, trained, TRAINED_TOKENIZER_FIELDS,
                f"open_clip tokenizes for {arch or 'this architecture'} with")
            if tokenizer_cfg.get('type') in ('HFTokenizer', 'NLLBTokenizer'):
                tokenizer_cfg.setdefault('max_length', self.record.context_length)
        if self.text_tower.fixed_context:
            tokenizer_cfg.setdefault('pad_to', self.text_tower.context_length)
        self.tokenizer = build_tokenizer(tokenizer_cfg, 'model.backbone.tokenizer')
        if bpe:
            check_record_tokenizer(self.record, self.tokenizer)
        check_tokenizer_fits(self.tokenizer, self.text_tower, self.arch)
        if not bpe:
            check_trained_tokenizer(self.tokenizer, trained, self.arch)
            check_record_context(self.tokenizer, self.record)
        if freeze:
            self.freeze()

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """Refuse as the config loads (:func:`~xmr.registry.check_part_options`), before the
        runner writes its work dir and log, what the build would refuse tens of seconds later
        about the weights: an unknown architecture or tag, a local ``pretrained`` file that is
        missing, unreadable or without its ``pretrained_cfg``, a ``pretrained_cfg`` that
        contradicts the tag or the architecture (:func:`resolve_pretrained`, which reads no
        weights).

        And what open_clip's build of a ``model_cfg`` would refuse (:func:`check_model_cfg`).

        Raises:
            ValueError: naming the field, the value and the names or fix (:func:`record_for`).
            UserError: naming the path and ``pretrained``
                (:func:`~xmr.models.backbones.open_clip_pretrained.check_pretrained_file`).
        """
        options = with_defaults(cls, cfg)
        if isinstance(options['model_cfg'], Mapping):
            check_model_cfg(options['model_cfg'])
        resolve_pretrained(options['arch'], options['pretrained'], options['pretrained_cfg'],
                           options['model_cfg'])

    @classmethod
    def text_tower_shape(cls, cfg: Mapping[str, Any]) -> TowerShape | None:
        """``width`` and ``layers`` of the architecture's ``text_cfg`` (``model_cfg``'s, else
        ``open_clip.get_model_config(arch)``'s) with open_clip's defaults, and its ``embed_dim``,
        which the text projection maps to (``width`` without one), and whether the tower has a
        fixed context (its ``pool_type``, ``embed_cls`` and ``no_causal_mask``, as
        :class:`OpenCLIPTextTower` reads them built); for a Hugging Face text encoder
        (``hf_model_name``, never a fixed context), ``hidden_size`` and ``num_hidden_layers``
        of its config as its folder or the Hugging Face cache holds it
        (:func:`offline_hf_config`). ``None``
        for an encoder neither holds and for an architecture open_clip does not name (the
        build says so)."""
        from open_clip.model import CLIPTextCfg
        from transformers import AutoConfig

        options = with_defaults(cls, cfg)
        try:
            text = arch_text_cfg(options['arch'], options['model_cfg'])
        except ValueError:
            return None
        embed_dim = arch_embed_dim(options['arch'], options['model_cfg'])
        if text.get('hf_model_name'):
            config = offline_hf_config(AutoConfig, text['hf_model_name'])
            return None if config is None else TowerShape(
                config.hidden_size, config.num_hidden_layers, embed_dim)
        try:
            text = CLIPTextCfg(**text)
        except TypeError:  # an option it does not take: check_config names it
            return None
        # open_clip builds no projection with proj_type='none': the tokens stay D wide. Its
        # configs mask the padding keys of a class-token tower only (use_pad_mask is no
        # text_cfg field), and a class token overrides the pooling.
        fixed_context = _has_fixed_context(text.pool_type, text.embed_cls,
                                           not text.no_causal_mask, text.embed_cls)
        return TowerShape(text.width, text.layers,
                          text.width if text.proj_type == 'none' else embed_dim, fixed_context)

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        # Unnormalised for every model class (CoCa normalises unless told not to).
        return self.clip.encode_image(images, normalize=False)

    def encode_image_tokens(self, images: torch.Tensor) -> TokenOutput:
        """``[B, 3, H, W]`` -> class token then patches, ``[B, 1 + P, E]`` (see
        :func:`open_clip_image_tokens`)."""
        return open_clip_image_tokens(self.clip.visual, images, self.arch)

    def pair_logits(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """open_clip's learnt ``(exp(logit_scale), logit_bias)``; the bias is ``None`` for models
        trained with InfoNCE (only SigLIP-style models learn one)."""
        bias = getattr(self.clip, 'logit_bias', None)  # open_clip sets it on sigmoid models only
        return self.clip.logit_scale.exp(), bias

    def fingerprint(self) -> str:
        """:meth:`fingerprint_settings` + the CLIP's weights hash: keys feature caches to
        exactly these frozen weights, run as these settings run them. Unlike the base's, no
        module tree: the record names the activation, and the key stays the one open_clip
        caches and saved indexes were made under."""
        return weights_fingerprint(self.fingerprint_settings(), self.clip)

    def fingerprint_settings(self) -> str:
        # The record: QuickGELU or another mean changes every feature. An architecture's name
        # stands for its open_clip config; an inline model_cfg has no name, and its poolings
        # (text_cfg/vision_cfg pool_type, hf_pooler_type) hold no weight.
        return self._settings(self.model_cfg)

    def checkpoint_settings(self) -> str:
        # Where the text tower's Hugging Face config and tokenizer are read (a hub name, a
        # folder of this machine) is no setting: a checkpoint is tested on other machines.
        text_cfg = (self.model_cfg or {}).get('text_cfg') or {}
        located = {key: None for key in ('hf_model_name', 'hf_tokenizer_name') if key in text_cfg}
        return self._settings(self.model_cfg if not located else
                              {**self.model_cfg, 'text_cfg': {**text_cfg, **located}})

    def _settings(self, model_cfg: dict | None) -> str:
        settings = repr(sorted(self.record.settings().items()))
        if model_cfg is not None:
            settings += '\n' + json.dumps(model_cfg, sort_keys=True, default=repr)
        return settings
