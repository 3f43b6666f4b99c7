"""What every adapter shares: where it sits in a text block, what it is called with.

A text tower runs its frozen blocks through :class:`SiteHooks`; the target-language branch
answers those hooks with the adapters of the language being encoded. Two kinds of site exist:

* residual sites (``block.output``, ``attn.output``, ``mlp.output``): the adapter gets the hidden
  state ``[B, L, D]`` and returns its replacement (a static adapter: ``x + up(relu(down x))``);
* linear sites (``attn.qkv``, ``attn.out``, ``mlp.fc``, ``mlp.proj``): the adapter gets the input of
  that frozen projection ``[B, L, D_in]`` and returns a delta added to its output
  ``[B, L, D_out]`` (LoRA);
* the ``input`` site: called once per forward on the token embeddings ``[B, L, D]``, before the
  tower adds its positions (which then cover the whole, possibly longer, sequence); it may
  lengthen the sequence (prompts) and then updates ``ctx.attention_mask`` / ``ctx.eos_index``.

Blocks may run on packed tokens (``[T, D]``, the real tokens of the batch end to end, see
:class:`~xmr.models.language.packing.PackedTokens`) rather than ``[B, L, D]``: an adapter class
that sets ``accepts_packed_tokens = True`` is called so when ``ctx.packed`` is set. A token-wise
adapter needs nothing else; one that mixes tokens or reads a per-sample condition goes through
``ctx.packed`` (``unpack`` to ``[B, L, ...]``, ``sample_index``). A language whose adapters do not
all accept packed tokens runs its padded batch.
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

if TYPE_CHECKING:
    from xmr.models.language.packing import PackedTokens


class AdapterSite(StrEnum):
    """Places in a pre-norm transformer block where an adapter can act."""

    INPUT = 'input'
    ATTN_QKV = 'attn.qkv'
    ATTN_OUT = 'attn.out'
    ATTN_OUTPUT = 'attn.output'
    MLP_FC = 'mlp.fc'
    MLP_PROJ = 'mlp.proj'
    MLP_OUTPUT = 'mlp.output'
    BLOCK_OUTPUT = 'block.output'

    @property
    def is_linear(self) -> bool:
        return self in (AdapterSite.ATTN_QKV, AdapterSite.ATTN_OUT, AdapterSite.MLP_FC,
                        AdapterSite.MLP_PROJ)


@dataclass
class AdapterContext:
    """Per-forward information an adapter may read.

    Attributes:
        lang: language code of every sample in this forward (batches are split by language).
        block_index: index of the block whose site is being run; ``-1`` for the input site.
        condition: method-specific condition, e.g. DASD's per-block ``W^z``; ``None`` for static
            adapters. Whoever produces it documents its layout.
        attention_mask: ``[B, L]`` bool, True on real tokens; input-site adapters may replace it.
        eos_index: ``[B]`` position of the pooled token; input-site adapters may shift it.
        packed: where the real tokens are when the blocks run on packed tokens ``[T, D]``,
            ``None`` when they run on the padded ``[B, L, D]``.
        extras: free slots for method-specific values.
    """

    lang: str
    block_index: int = -1
    condition: Any = None
    attention_mask: torch.Tensor | None = None
    eos_index: torch.Tensor | None = None
    packed: PackedTokens | None = None
    extras: dict[str, Any] = field(default_factory=dict)


class BaseAdapter(nn.Module):
    """Base class of a trainable module placed in a frozen text tower.

    Subclasses declare ``sites``, the places they can occupy, and ``default_sites``, those they
    occupy unless a config names ``sites`` (default: the first). One instance is built per
    (language, block, site) with ``width`` = the tower width (``D``), ``site`` = the place it
    serves and ``block_index``; they are called as ``adapter(x, ctx)``.

    Args:
        width: hidden width ``D`` of the text tower.
        site: the site this instance serves (one of ``sites``).
        block_index: index of its block (``-1`` for the input site).
        in_features: input width of the frozen projection at a linear site (else ``width``).
        out_features: output width of the frozen projection at a linear site (else ``width``).

    Attributes:
        accepts_packed_tokens: ``forward`` is right on packed tokens ``[T, D]`` (see the module
            docstring); ``False`` (the safe default) keeps a language using this class on its
            padded batch.
    """

    sites: ClassVar[tuple[AdapterSite, ...]] = (AdapterSite.BLOCK_OUTPUT,)
    default_sites: ClassVar[tuple[AdapterSite, ...] | None] = None
    accepts_packed_tokens: ClassVar[bool] = False

    def __init__(self, width: int, site: AdapterSite | str | None = None,
                 block_index: int = -1, in_features: int | None = None,
                 out_features: int | None = None) -> None:
        super().__init__()
        site = AdapterSite(site) if site is not None else self.sites[0]
        if site not in self.sites:
            raise ValueError(f'{type(self).__name__} serves {[str(s) for s in self.sites]}, '
                             f'not {site!s}')
        self.width = width
        self.site = site
        self.block_index = block_index
        self.in_features = in_features or width
        self.out_features = out_features or width

    @classmethod
    def resolve_sites(cls, sites: Sequence[str] | None, cfg: dict) -> tuple[AdapterSite, ...]:
        """The sites an adapter config occupies: ``sites`` when the config names them, else
        ``default_sites`` (else the first of ``sites``).

        A class whose options decide its placement (LoRA's ``targets``) overrides this, so that
        options and sites can never disagree silently.

        Args:
            sites: the config's ``sites``, or ``None``.
            cfg: the rest of the adapter config (``type`` and the class's options).
        """
        if sites is not None:
            return tuple(AdapterSite(s) for s in sites)
        return tuple(cls.default_sites or cls.sites[:1])

    @classmethod
    def build_shared(cls, width: int, **options: Any) -> nn.Module | None:
        """Parameters shared by all instances one language builds from one config, or ``None``.

        The adapter set registers the returned module once per language and passes it to every
        instance as ``shared`` (Compacter's ``A_i``, shared across layers).

        Args:
            width: tower width ``D``.
            **options: the adapter config's options (without ``type``, ``sites``, ``blocks``).
        """
        return None

    def attach(self, tokenizer: Any, embedding: nn.Module) -> None:
        """Called once by the target-language branch after building, with its tokenizer and
        embedding block, for adapters that read them (hard prompts embed their text); no-op by
        default."""

    @abstractmethod
    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        """Residual sites: new hidden state ``[B, L, D]``; linear sites: output delta."""
