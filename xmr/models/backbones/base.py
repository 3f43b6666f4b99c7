"""The interface between frozen vision-language towers and everything else in xmr.

Nothing outside ``xmr/models/backbones`` reaches into open_clip, timm or transformers internals:
the target-language branch, the adapters and the disentanglers only see a :class:`TextTower`
(embed, positions, blocks run through adapter hooks, mask, pooling, final norm + projection) and
a backbone: a :class:`TextBackbone` (a text-only teacher: ``encode_source_text``,
``encode_text_tokens``) or a :class:`VisionLanguageBackbone`, which adds the image tower
(``encode_image``, ``encode_video``, and the token-level ``encode_image_tokens`` that token-level
methods such as CDDS read).
"""
from __future__ import annotations

import hashlib
import weakref
from abc import ABCMeta, abstractmethod
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.adapters.base import AdapterSite
from xmr.models.language.packed_tokens import PackedTokens
from xmr.models.language.tokenizers import (
    BaseTokenizer,
    TokenBatch,
    check_max_length,
    check_padding,
)
from xmr.models.pooling import masked_token_mean
from xmr.registry import MODELS
from xmr.utils.cli import UserError


class SiteHooks(Protocol):
    """What a text tower calls at each adapter site while running a block.

    ``x`` is ``[B, L, D]``, or ``[T, D]`` when the blocks run on packed tokens (see
    :meth:`TextTower.packing`); the hooks' owner decides whether to pack.
    """

    def residual(self, site: AdapterSite, block_index: int, x: torch.Tensor) -> torch.Tensor:
        """Return the hidden state to continue with (``x`` itself when no adapter sits there)."""

    def linear(self, site: AdapterSite, block_index: int,
               x_in: torch.Tensor) -> torch.Tensor | None:
        """Return a delta to add to the frozen projection's output, or ``None``."""


#: The values of :attr:`TextTower.pooling`, the rules :meth:`TextTower.pool` knows.
POOLINGS = ('eos', 'cls', 'last', 'mean')
#: :class:`TextTower` attributes that decide how the same ids and weights are read (attention,
#: pooling, which ids are masked or counted as positions, where blocks normalise).
READING_ATTRIBUTES = ('causal', 'pooling', 'pad_id', 'pad_masked', 'end_id', 'masks_pad_id',
                      'position_pad_id', 'post_norm')

#: Version of the code that turns a backbone's caption ids into ``r^S`` for the same weights
#: and ids, part of the key of a feature cache holding ``r^S`` (``encoding``): raised with a
#: change that alters a feature, so that a cache built before it is refused or rebuilt, not
#: read. (``r^V``'s encoding has not changed since caches began; a change would key it too.)
#: 2: a caption's own padding id is masked and left out of the positions, as open_clip and
#: Hugging Face read it (a cache without the field was built before).
ENCODING_VERSION = 2

#: Each tower's last :meth:`TextTower.attention_bias`: ``(its mask, held weakly; the mask's
#: version and the bias's dtype; the bias)``.
_LAST_BIAS: weakref.WeakKeyDictionary[nn.Module, tuple[weakref.ref, tuple, torch.Tensor]] = (
    weakref.WeakKeyDictionary())


class TextTower(nn.Module, metaclass=ABCMeta):
    """A frozen transformer text encoder seen block by block.

    Attributes:
        width: hidden width ``D``.
        embed_dim: output width ``E`` after the projection.
        num_blocks: number of transformer blocks.
        context_length: longest sequence the positional table covers.
        causal: whether blocks attend causally (CLIP) or bidirectionally (BERT).
        pooling: ``'eos'`` (token at ``eos_index``), ``'cls'`` (token 0), ``'last'`` (the last
            position, padding or not: fixed-context towers such as SigLIP's) or ``'mean'``
            (masked).
        num_heads: attention heads per block.
        pack_tokens: run blocks on the real tokens only (:class:`PackedTokens`) when a batch
            has padding; the outputs are those of the padded batch. ``'auto'`` (the default)
            packs on the CPU only: there the padding's arithmetic is the cost, while on a GPU
            at caption lengths the step is bound by kernel launches and packing adds launches
            and host syncs (docs/benchmarks.md). ``True`` packs everywhere, ``False`` runs
            padded batches as they are (the authors' code; ``tools/benchmark.py``'s recompute
            path).
        fixed_context: the pooled token's output depends on the padding (a bidirectional tower
            that attends to its padding, or ``'last'`` pooling), so every sequence must be
            exactly ``context_length`` tokens: tokenizers pad to it and nothing is packed
            (docs/backbones.md).
        reserved_positions: trailing positions the tower writes itself (open_clip's appended
            class token, ``embed_cls``): captions hold at most :attr:`max_tokens` tokens.
        vocab_size: rows of the tower's token table, the ids a tokenizer may emit.
        pad_id: the id the tower itself treats as padding (open_clip's pad mask), or ``None``
            when only the attention mask marks padding.
        pad_masked: whether the tower masks its padding keys; ``None``: a bidirectional tower
            does, a causal one does not.
        end_id: the id whose first position the tower pools (open_clip's ``text_cfg.eos_id``
            of an ``'eos'``-pooled tower, MetaCLIP 2's); its source tokenizer must end captions
            with it. ``None``: the tokenizer's own end token.
        masks_pad_id: the tower's own forward derives its key mask from the ids, ``ids !=
            pad_id`` (open_clip's ``HFTextEncoder``; a ``TextTransformer`` with
            ``use_pad_mask`` or ``embed_cls``), so a token of the caption whose id is
            :attr:`pad_id` (a spelled ``<pad>``, CLIP's ``!`` piece) is masked and never pooled,
            as padding is (:meth:`token_mask`).
        position_pad_id: the id the tower's positions do not count, or ``None`` for positions
            by index: Hugging Face's RoBERTa and M2M100 derive position ids from the ids,
            whatever the attention mask, and a token with this id (their padding id) takes the
            padding position without advancing the count (:func:`position_ids`); such a
            tower's :meth:`add_positions` takes the mask of the counted tokens.
        reads_language_token: the tower was trained on captions that begin with their
            language's code token (NLLB), so its source tokenizer must write one
            (:attr:`~xmr.models.language.tokenizers.BaseTokenizer.writes_language_token`).
        post_norm: blocks normalise after the residual add, ``x = LN(x + f(x))`` (BERT,
            XLM-R), rather than before the sub-layer (CLIP). A residual adapter at
            ``block.output`` then adds to the normalised state that the next block reads as
            its residual, and none of its output is normalised before pooling; adapters
            declare their defaults on such a tower (``post_norm_defaults``).
    """

    pack_tokens: bool | str = 'auto'
    fixed_context: bool = False
    #: trailing positions of the context the tower fills itself (an appended class token).
    reserved_positions: int = 0
    width: int
    embed_dim: int
    num_blocks: int
    context_length: int
    causal: bool
    pooling: str
    num_heads: int
    vocab_size: int
    pad_id: int | None = None
    pad_masked: bool | None = None
    end_id: int | None = None
    masks_pad_id: bool = False
    position_pad_id: int | None = None
    reads_language_token: bool = False
    post_norm: bool = False

    @property
    def max_tokens(self) -> int:
        """Most tokens a caption may have (specials included): the context less the
        :attr:`reserved_positions`."""
        return self.context_length - self.reserved_positions

    def extra_repr(self) -> str:
        """The plain attributes that change the features without changing a weight
        (:data:`READING_ATTRIBUTES`): they are in the module tree a feature cache is keyed by
        (:meth:`TextBackbone.fingerprint`), so that a tower switched from ``'mean'`` to
        ``'cls'`` pooling, or to causal attention, does not read back the other's features."""
        return ', '.join(f'{name}={getattr(self, name)!r}' for name in READING_ATTRIBUTES)

    def checked_length(self, x: torch.Tensor) -> int:
        """``L`` of ``x`` ``[B, L, D]``, which :meth:`add_positions` gives positions to.

        Raises:
            ValueError: ``L`` exceeds :attr:`context_length`, the positions the tower has.
        """
        length = x.shape[1]
        if length > self.context_length:
            raise ValueError(f'sequence of {length} tokens exceeds the text context length '
                             f'{self.context_length}')
        return length

    @abstractmethod
    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The tower's own token embedding, ``[B, L] -> [B, L, D]`` (no positions)."""

    @abstractmethod
    def add_positions(self, x: torch.Tensor) -> torch.Tensor:
        """Add the positional embedding of positions ``0..L-1`` to ``x`` ``[B, L, D]``.

        A tower with a :attr:`position_pad_id` also takes ``attention_mask`` ``[B, L]``, the
        tokens it counts, and numbers those only.
        """

    def token_mask(self, tokens: TokenBatch) -> torch.Tensor:
        """``[B, L]`` bool: the tokens the tower reads as real, the tokenizer's mask less, where
        :attr:`masks_pad_id`, every token whose id is :attr:`pad_id`, as the tower's own forward
        masks them (``ids != pad_id``)."""
        mask = tokens['attention_mask']
        return mask & (tokens['input_ids'] != self.pad_id) if self.masks_pad_id else mask

    def read_tokens(self, tokens: TokenBatch) -> TokenBatch:
        """``tokens`` ``[B, L]`` of the tower's vocabulary as its own forward reads them: the
        ``attention_mask`` its :meth:`token_mask`. ``tokens`` itself where the tower masks no
        id, so that its mask stays the one tensor every pass of a step builds its attention
        bias from once (:meth:`attention_bias`); reading twice gives the same batch."""
        if not self.masks_pad_id:
            return tokens
        return TokenBatch(**{**tokens, 'attention_mask': self.token_mask(tokens)})

    def add_token_positions(self, x: torch.Tensor, tokens: TokenBatch) -> torch.Tensor:
        """``x`` ``[B, L, D]``, the embeddings of ``tokens``' ids, plus the tower's positions.

        By index, or, where the tower has a :attr:`position_pad_id`, counting the tokenizer's
        real tokens with another id (:func:`position_ids`), also in a tower that attends to a
        token with that id (M-CLIP's Hugging Face pass takes the tokenizer's mask). The same
        rows for ``tokens`` as given or as :meth:`read_tokens` gives them: the key mask drops
        only ids the positions skip.
        """
        if self.position_pad_id is None:
            return self.add_positions(x)
        counted = tokens['attention_mask'] & (tokens['input_ids'] != self.position_pad_id)
        return self.add_positions(x, counted)

    def embed_source(self, tokens: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Source tokens -> ``([B, L, D]`` embeddings with positions
        (:meth:`add_token_positions`), ``[B, L]`` :meth:`token_mask`), the input of the
        tower's own forward."""
        x = self.add_token_positions(self.embed_tokens(tokens['input_ids']), tokens)
        return x, self.token_mask(tokens)

    @abstractmethod
    def run_block(self, index: int, x: torch.Tensor, mask: torch.Tensor | PackedTokens | None,
                  hooks: SiteHooks | None = None) -> torch.Tensor:
        """Run block ``index`` on ``x``: ``[B, L, D]`` with the bias from :meth:`build_mask`,
        or packed ``[T, D]`` with the batch's :class:`PackedTokens` (attention through
        :meth:`attend`)."""

    def token_table_module(self) -> nn.Module | None:
        """The module whose weights :meth:`embed_tokens` reads (the tower's token table), or
        ``None`` where the tower does not name it. A target branch with its own table never
        reads it, so its ``tuned_weights`` copy none of it
        (:func:`~xmr.models.language.tower_weights.unread_tower_weights`)."""
        return None

    def block_module(self, index: int) -> nn.Module | None:
        """The module holding block ``index``'s weights (what :meth:`run_block` runs), or
        ``None`` where the tower does not name it: a branch running fewer blocks
        (``num_blocks``) never reads the later ones, and its ``tuned_weights`` copy none of
        them."""
        return None

    def token_states(self, x: torch.Tensor) -> torch.Tensor:
        """What the tower does to every token between its last block and pooling, ``[B, L, D]
        -> [B, L, D]``: nothing by default (T5's final RMSNorm acts here, see
        :meth:`VisionLanguageBackbone.encode_text_tokens`)."""
        return x

    @abstractmethod
    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """Final norm and projection of pooled tokens, ``[B, D] -> [B, E]``.

        Token-wise, so ``[B, L, D] -> [B, L, E]`` projects every token into the joint space
        (:meth:`VisionLanguageBackbone.encode_text_tokens`).
        """

    def linear_shapes(self) -> dict[AdapterSite, tuple[int, int]]:
        """``(in_features, out_features)`` of the frozen projection at each linear adapter site.

        Empty by default: a tower that does not expose its projections offers residual sites
        only, and a LoRA-style adapter placed on it is refused naming the site.
        """
        return {}

    def build_mask(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """Additive attention bias ``[B, 1, L, L]`` from a ``[B, L]`` bool mask of real tokens.

        Padding keys are masked for every tower; causal towers also mask future keys.
        """
        batch, length = attention_mask.shape
        allowed = attention_mask[:, None, None, :].expand(batch, 1, length, length)
        if self.causal:
            causal = torch.ones(length, length, dtype=torch.bool,
                                device=attention_mask.device).tril()
            allowed = allowed & causal
        # A query on a padding position would see no key at all; let it see itself so that
        # softmax stays finite (its output is never pooled).
        eye = torch.eye(length, dtype=torch.bool, device=attention_mask.device)
        allowed = allowed | eye
        bias = torch.zeros(allowed.shape, dtype=torch.float32, device=attention_mask.device)
        return bias.masked_fill(~allowed, float('-inf'))

    def packing(self, attention_mask: torch.Tensor) -> PackedTokens | None:
        """The :class:`PackedTokens` of a batch, or ``None`` when packing is off, the batch
        has no padding (then packing would only copy) or the code is being compiled (packed
        shapes depend on the data, which compiled code cannot follow without recompiling)."""
        pack = (attention_mask.device.type == 'cpu' if self.pack_tokens == 'auto'
                else self.pack_tokens)
        if not pack or torch.compiler.is_compiling() or bool(attention_mask.all()):
            return None
        return PackedTokens(attention_mask, self.attention_bias(attention_mask))

    def attention_bias(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """:meth:`build_mask` of ``attention_mask`` ``[B, L]``, ``[B, 1, L, L]`` in the dtype
        attention computes in: autocast's where it is on for the mask's device, else float32.

        Its values (0 and ``-inf``) are exact in any dtype, and in autocast's they need no cast
        in each block's attention (a kernel each on a GPU). A DASD step reads one batch's mask
        four times (the SDM's two streams, the adversarial pass, the branch): the bias of the
        mask given last is kept (the mask held weakly, an in-place change of it seen by its
        version), so the step builds it once. Compiled code and inference mode build it at
        every call (a compiled graph merges the repeats; an inference tensor has no version).
        """
        device = attention_mask.device.type
        dtype = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                 else torch.float32)
        if (torch.compiler.is_compiling() or torch.is_inference_mode_enabled()
                or attention_mask.is_inference()):
            return self.build_mask(attention_mask).to(dtype)
        key = (attention_mask._version, dtype)
        last = _LAST_BIAS.get(self)
        if last is not None and last[0]() is attention_mask and last[1] == key:
            return last[2]
        bias = self.build_mask(attention_mask).to(dtype)
        _LAST_BIAS[self] = (weakref.ref(attention_mask), key, bias)
        return bias

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | PackedTokens | None, dropout: float = 0.0) -> torch.Tensor:
        """Multi-head ``softmax(q k^T / sqrt(d) + bias) v``, heads split from the last dim.

        Args:
            q, k, v: ``[B, L, D]``, or ``[T, D]`` packed tokens when ``mask`` is a
                :class:`PackedTokens` (they are unpacked for attention and the context packed
                again, so that padding never enters a real token's sum).
            mask: additive bias ``[B, 1, L, L]``, :class:`PackedTokens`, or ``None``.
            dropout: probability of dropping an attention weight (a trained tower's).

        Returns:
            The context, in the layout of ``q``.
        """
        if isinstance(mask, PackedTokens):
            context = self.attend(mask.unpack(q), mask.unpack(k), mask.unpack(v), mask.bias,
                                  dropout)
            return mask.pack(context)
        batch, length, width = q.shape
        q, k, v = (t.reshape(batch, length, self.num_heads, width // self.num_heads)
                   .transpose(1, 2) for t in (q, k, v))
        bias = mask.to(q.dtype) if mask is not None else None
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout)
        return context.transpose(1, 2).reshape(batch, length, width)

    def pool(self, x: torch.Tensor, attention_mask: torch.Tensor,
             eos_index: torch.Tensor) -> torch.Tensor:
        """Pool ``[B, L, D]`` into ``[B, D]`` by this tower's rule."""
        if self.pooling == 'eos':
            return x[torch.arange(x.shape[0], device=x.device), eos_index]
        if self.pooling == 'cls':
            return x[:, 0]
        if self.pooling == 'last':
            return x[:, -1]
        if self.pooling == 'mean':
            return masked_token_mean(x, attention_mask)
        raise ValueError(f"unknown pooling '{self.pooling}' (one of {', '.join(POOLINGS)})")

    def encode_embeddings(self, x: torch.Tensor, attention_mask: torch.Tensor,
                          hooks: SiteHooks | None = None, blocks: range | None = None,
                          packed: PackedTokens | None = None) -> torch.Tensor:
        """Run blocks on already embedded (and positioned) tokens; return hidden states.

        Args:
            x: ``[B, L, D]`` embeddings with positions added.
            attention_mask: ``[B, L]`` bool, True on real tokens.
            hooks: adapter hooks, or ``None`` for the plain frozen tower.
            blocks: which blocks to run (default all, in order).
            packed: :meth:`packing` of ``attention_mask`` to run the blocks on the real tokens
                only (the hooks then see ``[T, D]``), or ``None`` to run the padded batch.

        Returns:
            ``[B, L, D]`` hidden states after the last block run (zeros on padding when
            packed).
        """
        mask = packed if packed is not None else self.attention_bias(attention_mask)
        if packed is not None:
            x = packed.pack(x)
        for index in (blocks if blocks is not None else range(self.num_blocks)):
            x = self.run_block(index, x, mask, hooks)
        return packed.unpack(x) if packed is not None else x

    def forward(self, tokens: TokenBatch) -> torch.Tensor:
        """Encode source-language tokens with the plain tower: ``r = head(pool(blocks(x)))``.

        Returns:
            ``[B, E]`` unnormalised text embeddings.
        """
        x, mask = self.embed_source(tokens)
        x = self.encode_embeddings(x, mask, packed=self.packing(mask))
        return self.head(self.pool(x, mask, tokens['eos_index']))


class PreNormTextTower(TextTower):
    """A tower of pre-norm residual blocks, whose residual skeleton and its adapter sites live
    here once::

        x = x + site_attn(attention_branch(x))     # the branch applies its own norm first
        x = x + site_mlp(mlp_branch(x))
        x = site_block(x)

    open_clip's ``TextTransformer`` blocks, T5's and M2M100's (NLLB's) encoder layers differ
    only inside the two branches (fused or separate q/k/v, T5's unscaled attention with its
    position bias, gated or plain FFN, LayerScale); each family writes out its branches with
    the linear sites (``attn.qkv``, ``attn.out``, ``mlp.fc``, ``mlp.proj``) and this class adds
    the residual sites (``attn.output``, ``mlp.output``, ``block.output``) at the same places for
    every family.
    """

    @abstractmethod
    def attention_branch(self, index: int, x: torch.Tensor,
                         mask: torch.Tensor | PackedTokens | None,
                         hooks: SiteHooks | None) -> torch.Tensor:
        """Block ``index``'s attention branch on ``x`` ``[B, L, D]`` (or packed ``[T, D]``), norm
        included, up to the residual add; ``x``'s shape."""

    @abstractmethod
    def mlp_branch(self, index: int, x: torch.Tensor, hooks: SiteHooks | None) -> torch.Tensor:
        """Block ``index``'s feed-forward branch on ``x``, norm included, up to the residual
        add; ``x``'s shape."""

    def run_block(self, index: int, x: torch.Tensor, mask: torch.Tensor | PackedTokens | None,
                  hooks: SiteHooks | None = None) -> torch.Tensor:
        """One pre-norm block with its residual sites.

        Args:
            index: block index.
            x: ``[B, L, D]`` hidden states, or ``[T, D]`` packed tokens.
            mask: additive attention bias ``[B, 1, L, L]`` from :meth:`build_mask`, or the
                batch's :class:`PackedTokens` when ``x`` is packed.
            hooks: adapter hooks or ``None``.

        Returns:
            ``x``'s shape.
        """
        x = x + residual_site(self.attention_branch(index, x, mask, hooks), hooks,
                              AdapterSite.ATTN_OUTPUT, index)
        x = x + residual_site(self.mlp_branch(index, x, hooks), hooks, AdapterSite.MLP_OUTPUT,
                              index)
        return residual_site(x, hooks, AdapterSite.BLOCK_OUTPUT, index)


def position_ids(length: int, first: int, attention_mask: torch.Tensor | None = None,
                 device: torch.device | None = None) -> torch.Tensor:
    """Rows of a position table for ``L`` tokens numbered from ``first``.

    Without a mask, ``[L]``: ``first .. first + L - 1``. With the ``[B, L]`` mask of the tokens
    read as real, ``[B, L]``: ``first - 1 + cumsum(mask) * mask``, Hugging Face's
    ``create_position_ids_from_input_ids`` (RoBERTa, M2M100: ``first = pad_id + 1``), where a
    token read as padding takes row ``first - 1`` and does not advance the count. The two agree
    on the real tokens of a right-padded caption.
    """
    if attention_mask is None:
        return torch.arange(first, first + length, device=device)
    real = attention_mask.long()
    return real.cumsum(1) * real + (first - 1)


def residual_site(x: torch.Tensor, hooks: SiteHooks | None, site: AdapterSite,
                  index: int) -> torch.Tensor:
    """``x`` ``[B, L, D]`` (or packed ``[T, D]``) through the adapters at a residual site
    (``attn.output``, ``mlp.output``, ``block.output``); ``x`` itself without one."""
    return x if hooks is None else hooks.residual(site, index, x)


def with_linear_delta(out: torch.Tensor, x: torch.Tensor, hooks: SiteHooks | None,
                      site: AdapterSite, index: int) -> torch.Tensor:
    """A frozen projection's output ``out`` plus the adapters' delta at its linear site (LoRA,
    Compacter), which reads the projection's input ``x``; ``out`` itself without one."""
    if hooks is not None:
        delta = hooks.linear(site, index, x)
        if delta is not None:
            return out + delta
    return out


def linear_site(x: torch.Tensor, layer: nn.Linear, hooks: SiteHooks | None, site: AdapterSite,
                index: int) -> torch.Tensor:
    """A frozen ``nn.Linear`` at an adapter site: ``layer(x)`` plus the site's delta."""
    return with_linear_delta(layer(x), x, hooks, site, index)


def with_qkv_delta(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor,
                   hooks: SiteHooks | None, index: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Separate query / key / value projections of ``x`` plus the ``attn.qkv`` site's delta,
    ``[..., 3 D]`` split into the three."""
    if hooks is not None:
        delta = hooks.linear(AdapterSite.ATTN_QKV, index, x)
        if delta is not None:
            dq, dk, dv = delta.chunk(3, dim=-1)
            return q + dq, k + dk, v + dv
    return q, k, v


def block_linear_shapes(width: int, ff_dim: int, inner_dim: int | None = None
                        ) -> dict[AdapterSite, tuple[int, int]]:
    """``(in_features, out_features)`` of a transformer block's frozen projections at each
    linear site: the :meth:`TextTower.linear_shapes` of a tower that exposes them.

    Args:
        width: the hidden width ``D``.
        ff_dim: width of the FFN's hidden layer.
        inner_dim: width of the attention's q/k/v (``D`` unless the heads say otherwise).
    """
    inner_dim = width if inner_dim is None else inner_dim
    return {
        AdapterSite.ATTN_QKV: (width, 3 * inner_dim),
        AdapterSite.ATTN_OUT: (inner_dim, width),
        AdapterSite.MLP_FC: (width, ff_dim),
        AdapterSite.MLP_PROJ: (ff_dim, width),
    }


def check_tokenizer_fits(tokenizer: BaseTokenizer, tower: TextTower, owner: str) -> None:
    """Refuse a source tokenizer whose ids, length or padding do not fit the text tower.

    Args:
        tokenizer: the backbone's source tokenizer.
        tower: its text tower.
        owner: the model named in the message (``'ViT-B-32'``, ``'CCLM'``, ...).

    Raises:
        UserError: a tower short of its interface (:func:`check_tower_interface`).
        ValueError: a ``max_length`` that keeps no piece of a caption
            (:func:`~xmr.models.language.tokenizers.check_max_length`), more ids than the tower
            embeds, a ``max_length`` beyond its context, a
            fixed-context tower fed without ``pad_to`` = its context (each names both
            numbers); a padding the tower would not read as trained (:func:`check_padding`);
            a tokenizer whose end id is not the one the tower pools (``end_id``); a tower
            that reads a language token fed by a tokenizer that writes none.
    """
    check_tower_interface(tower, owner)
    if tower.reads_language_token and not tokenizer.writes_language_token:
        raise ValueError(f'the text tower of {owner} reads each caption after its language-code '
                         f'token (NLLB), which a {type(tokenizer).__name__} does not write; use '
                         "tokenizer=dict(type='NLLBTokenizer', ...)")
    check_max_length(tokenizer, f'the source tokenizer of {owner}')
    if tower.end_id is not None and tokenizer.end_id != tower.end_id:
        raise ValueError(f'tokenizer end id {tokenizer.end_id} but the text tower of {owner} '
                         f'pools the first id {tower.end_id} (text_cfg.eos_id), which open_clip '
                         'looks for in the ids: a tokenizer of another vocabulary; give the '
                         'one the tower was trained with')
    if tokenizer.vocab_size > tower.vocab_size:
        raise ValueError(f'tokenizer emits {tokenizer.vocab_size} ids but the text tower of '
                         f'{owner} has {tower.vocab_size} embeddings')
    if tokenizer.max_length > tower.max_tokens:
        raise ValueError(f'tokenizer max_length {tokenizer.max_length} exceeds the text context '
                         f'length {tower.max_tokens} of {owner}')
    if tower.fixed_context and tokenizer.pad_to != tower.context_length:
        raise ValueError(f'tokenizer pad_to={tokenizer.pad_to} but the text tower of {owner} '
                         f'pools a fixed position of its {tower.context_length}-token context: '
                         f'set pad_to={tower.context_length} (docs/backbones.md)')
    check_padding(tokenizer, tower, owner)


def unset_attributes(obj: object, interface: type) -> list[str]:
    """The attributes that ``interface`` and its bases in this module annotate and ``obj``
    does not set (a class default counts as set), in declaration order."""
    declared = dict.fromkeys(name for cls in reversed(interface.__mro__)
                             if cls.__module__ == __name__
                             for name in vars(cls).get('__annotations__', {}))
    return [name for name in declared if not hasattr(obj, name)]


def check_interface(obj: object, interface: type, owner: str) -> None:
    """Refuse ``obj`` (a user's tower or backbone) without an attribute ``interface`` declares.

    Raises:
        UserError: naming ``owner``, the attributes unset and where to set them; met at their
            first use otherwise, as an ``AttributeError`` mid-build or mid-run.
    """
    missing = unset_attributes(obj, interface)
    if missing:
        raise UserError(owner, f'{type(obj).__name__} sets no {", ".join(missing)}',
                        f'set them in its class or __init__, as every {interface.__name__} '
                        "does (docs/custom_modules.md, 'The interface of a backbone')")


def check_tower_interface(tower: TextTower, owner: str) -> None:
    """Refuse a text tower without the attributes :class:`TextTower` lists or with a
    :attr:`~TextTower.pooling` :meth:`TextTower.pool` does not know.

    Raises:
        UserError: an attribute unset (:func:`check_interface`), or an unknown pooling, naming
            it and the known ones.
    """
    where = f'the text tower of {owner}'
    check_interface(tower, TextTower, where)
    if tower.pooling not in POOLINGS:
        raise UserError(where, f"{type(tower).__name__} pools by '{tower.pooling}'",
                        f'set its pooling to one of {", ".join(POOLINGS)}')


def weights_fingerprint(description: str, module: nn.Module) -> str:
    """A short SHA-256 of ``description`` and every state-dict entry of ``module``.

    What keys a feature cache to exactly these frozen weights: ``description`` carries what
    changes the features without changing a weight (the architecture's settings, an
    activation such as QuickGELU), then each entry, in key order, its name and its values as
    float32 bytes.

    Returns:
        The digest's first 16 hex digits.
    """
    digest = hashlib.sha256(description.encode())
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


class TokenOutput(NamedTuple):
    """Token-level output of a tower, in the joint space.

    Attributes:
        tokens: ``[B, N, E]`` every output token (image: prefix tokens such as CLS first, then
            the patches; text: every position, specials included) through the tower's final
            norm and projection.
        mask: ``[B, N]`` bool, True on real tokens.
        pooled: ``[B, E]`` the tower's own embedding of the same pass (what ``encode_image`` /
            ``encode_source_text`` return).
    """

    tokens: torch.Tensor
    mask: torch.Tensor
    pooled: torch.Tensor


class TowerShape(NamedTuple):
    """A text tower's width ``D``, number of blocks and output width ``E`` (after its
    projection: the backbone's joint space) as a backbone's config gives them, before the tower
    is built (:meth:`TextBackbone.text_tower_shape`), and whether it has a fixed context
    (:attr:`TextTower.fixed_context`: every caption padded to the context, whatever the
    tokenizer's config says). The checks of the parts placed on the tower read these
    attributes of this or of the built :class:`TextTower` alike."""

    width: int
    num_blocks: int
    embed_dim: int
    fixed_context: bool = False


def configured_tower_shape(cfg: Any) -> TowerShape | None:
    """The :class:`TowerShape` of the text tower a backbone config (``MODELS``) builds, or
    ``None`` where its class cannot tell from the config alone."""
    if not isinstance(cfg, Mapping):
        return None
    kind = cfg.get('type')
    kind = MODELS.get(kind) if isinstance(kind, str) else kind
    shape = getattr(kind, 'text_tower_shape', None)
    return None if shape is None else shape(cfg)


def offline_hf_config(config_class: Any, name: str, **overrides: Any) -> Any | None:
    """The Hugging Face config of ``name`` (a folder or a hub name) with ``overrides``, read
    without the network, from the folder or the Hugging Face cache (``local_files_only``), for
    a backbone's :meth:`TextBackbone.text_tower_shape`; ``None`` where neither holds it (the
    build fetches it, or says what is missing)."""
    try:
        return config_class.from_pretrained(name, local_files_only=True, **overrides)
    except OSError:
        return None


class TextBackbone(nn.Module, metaclass=ABCMeta):
    """A frozen source-language text encoder: a text tower and its tokenizer.

    The teacher of a text-only model (a sentence encoder such as all-MiniLM-L6-v2): the target
    branch learns to reproduce ``r^S`` in new languages, and text-to-text retrieval
    (``RetrievalMetric(protocol='text_to_text')``) evaluates it. Nothing about media is needed;
    :class:`VisionLanguageBackbone` adds the image tower.

    Attributes:
        text_tower: the :class:`TextTower` the target branch reuses block by block.
        tokenizer: tokenizer of the source language (the tower's own).
        embed_dim: width ``E`` of the embedding space.
        arch: the architecture's name where the backbone has one (a checkpoint fact).
    """

    text_tower: TextTower
    tokenizer: BaseTokenizer
    embed_dim: int
    arch: str | None = None

    @classmethod
    def text_tower_shape(cls, cfg: Mapping[str, Any]) -> TowerShape | None:
        """The width, depth and output width of the text tower this class builds from ``cfg`` (its
        ``MODELS`` config), read from the config alone, so that the parts placed on the tower
        are checked as the config loads (:meth:`~xmr.models.retrievers.CrossLingualRetriever.
        check_config`); ``None`` where only the build knows them (a hub model's config, a
        checkpoint), the default."""
        return None

    def encode_source_text(self, tokens: TokenBatch) -> torch.Tensor:
        """Source-language tokens -> ``[B, E]`` unnormalised embeddings ``r^S``."""
        return self.text_tower(tokens)

    def encode_text_tokens(self, tokens: TokenBatch) -> TokenOutput:
        """Source-language tokens -> :class:`TokenOutput`: every position through the head.

        One pass of the plain tower; ``pooled`` equals :meth:`encode_source_text`.
        """
        tower = self.text_tower
        x, mask = tower.embed_source(tokens)
        hidden = tower.encode_embeddings(x, mask, packed=tower.packing(mask))
        return TokenOutput(tower.head(tower.token_states(hidden)), mask,
                           tower.head(tower.pool(hidden, mask, tokens['eos_index'])))

    def fingerprint(self) -> str:
        """What keys the feature caches of this backbone (``r^S``, ``r^V``): a hash of its
        :meth:`fingerprint_settings`, its module tree and its weights (:func:`weights_fingerprint`).

        The module tree (``repr``: each submodule's class and settings, such as an activation's
        class or a norm's ``eps``) carries what changes the features without changing a weight,
        so features cached under one activation are not read back under another.
        """
        return weights_fingerprint(
            f'{type(self).__qualname__}\n{self.fingerprint_settings()}\n{self!r}', self)

    def fingerprint_settings(self) -> str:
        """Settings that change the features and that no module shows (a pooling rule or an
        image size kept in a plain attribute), for :meth:`fingerprint`; a backbone with some
        overrides this (:class:`~xmr.models.backbones.cclm.CCLMDualStream` gives its image and
        window sizes)."""
        return ''

    def checkpoint_settings(self) -> str:
        """The settings a checkpoint of a model on this backbone must have been trained under:
        :meth:`fingerprint_settings`, less what names where files are read on this machine."""
        return self.fingerprint_settings()

    def freeze(self) -> None:
        """Freeze every weight; a phase that fine-tunes the towers unfreezes them itself."""
        for parameter in self.parameters():
            parameter.requires_grad_(False)


class VisionLanguageBackbone(TextBackbone):
    """A frozen dual-encoder: an image tower besides the source text tower and its tokenizer.

    Attributes:
        image_mean / image_std: per-channel normalisation of the image tower, in ``[0, 1]`` units.
        image_size: input resolution ``(H, W)``.
        image_resize_mode / image_interpolation / image_fill_color: how the weights' authors
            brought media to ``image_size`` in evaluation (``MediaTransform``'s
            ``resize_mode``, ``interpolation``, ``fill_color``); CLIP's short-side resize and
            centre crop unless a backbone's weights say otherwise.
    """

    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    image_size: tuple[int, int]
    image_resize_mode: str = 'shortest'
    image_interpolation: str = 'bicubic'
    image_fill_color: int = 0

    def media_transform(self) -> dict[str, Any]:
        """The ``MediaTransform`` config that brings uint8 media to this tower's input as its
        weights were evaluated (the data preprocessor then normalises with ``image_mean`` /
        ``image_std``): the default transform of :func:`~xmr.apis.encode_media`."""
        return dict(type='MediaTransform', backbone=None, size=tuple(self.image_size),
                    resize_mode=self.image_resize_mode, interpolation=self.image_interpolation,
                    fill_color=self.image_fill_color)

    @abstractmethod
    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """``[B, 3, H, W]`` normalised images -> ``[B, E]`` unnormalised embeddings ``r^V``."""

    def encode_video(self, frames: torch.Tensor) -> torch.Tensor:
        """``[B, T, 3, H, W]`` frames -> ``[B, E]``: frames encoded as images, then mean-pooled.

        The CLIP4Clip mean-pooling recipe of the DASD paper: each frame embedding is
        L2-normalised before the mean so that no frame dominates by norm.
        """
        batch, num_frames = frames.shape[:2]
        per_frame = self.encode_image(frames.flatten(0, 1)).view(batch, num_frames, -1)
        per_frame = per_frame / per_frame.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        return per_frame.mean(dim=1)

    def encode_media(self, media: torch.Tensor) -> torch.Tensor:
        """Images ``[B, 3, H, W]`` or videos ``[B, T, 3, H, W]`` -> ``[B, E]``.

        Raises:
            ValueError: :meth:`encode_image` gave no ``[B, E]`` tensor (a backbone of one's own
                that forgot its pooling or projection), naming the backbone; torch failed later
                inside a loss, and an API encoding returned embeddings of another width.
        """
        embedded = self.encode_video(media) if media.dim() == 5 else self.encode_image(media)
        wanted = (media.shape[0], self.embed_dim)
        if not isinstance(embedded, torch.Tensor) or tuple(embedded.shape) != wanted:
            got = (f'shape {tuple(embedded.shape)}' if isinstance(embedded, torch.Tensor)
                   else f'a {type(embedded).__name__}')
            raise ValueError(f'{type(self).__name__}.encode_image gave {got} for {wanted[0]} '
                             f'media; the embedding space takes [B, E] = {list(wanted)} '
                             '(embed_dim): check its pooling and projection')
        return embedded

    def encode_image_tokens(self, images: torch.Tensor) -> TokenOutput:
        """``[B, 3, H, W]`` normalised images -> :class:`TokenOutput` (``[B, N, E]`` tokens).

        Backbones that token-level methods (CDDS) run on override this; the default names the
        backbone that cannot.
        """
        raise TypeError(f'{type(self).__name__} exposes no token-level image encoder '
                        '(encode_image_tokens); token-level methods such as CDDS need one')

    def encode_media_tokens(self, media: torch.Tensor) -> TokenOutput:
        """Images ``[B, 3, H, W]`` or videos ``[B, T, 3, H, W]`` -> :class:`TokenOutput`.

        A video's tokens are its frames' tokens one after the other (``N = T · N_frame``); its
        pooled embedding is :meth:`encode_video`'s mean of L2-normalised frame embeddings.
        """
        if media.dim() != 5:
            return self.encode_image_tokens(media)
        batch, num_frames = media.shape[:2]
        frames = self.encode_image_tokens(media.flatten(0, 1))
        pooled = frames.pooled.view(batch, num_frames, -1)
        pooled = pooled / pooled.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        return TokenOutput(frames.tokens.reshape(batch, -1, frames.tokens.shape[-1]),
                           frames.mask.reshape(batch, -1), pooled.mean(dim=1))

    def pair_logits(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The ``(scale, bias)`` the backbone was pretrained to score an image-text pair with,
        ``logit = scale · cos(r^V, r^T) + bias`` (``bias`` ``None`` when it learnt none); losses
        that train with the backbone's own objective read them (:class:`SigmoidLoss`).

        Raises:
            TypeError: for a backbone that does not record them.
        """
        raise TypeError(f'{type(self).__name__} records no pretrained logit scale or bias; give '
                        'the loss its own (e.g. SigmoidLoss(logit_scale=..., logit_bias=...))')
