"""What every adapter shares: where it sits in a text block, what it is called with.

A text tower runs its frozen blocks through :class:`SiteHooks`; the target-language branch
runs them once for a batch of several languages and answers those hooks with each language's
adapters on that language's rows (:attr:`AdapterContext.rows`). Two kinds of site exist:

* residual sites (``block.output``, ``attn.output``, ``mlp.output``): the adapter gets the hidden
  state ``[B, L, D]`` and returns its replacement (a static adapter: ``x + up(relu(down x))``);
* linear sites (``attn.qkv``, ``attn.out``, ``mlp.fc``, ``mlp.proj``): the adapter gets the input of
  that frozen projection ``[B, L, D_in]`` and returns a delta added to its output
  ``[B, L, D_out]`` (LoRA);
* the ``input`` site: called once per forward on the token embeddings ``[B, L, D]``, before the
  tower adds its positions (which then cover the whole, possibly longer, sequence); it may
  lengthen the sequence (prompts) and then updates ``ctx.attention_mask`` / ``ctx.eos_index``.

Blocks may run on packed tokens (``[T, D]``, the real tokens of the batch end to end, see
:class:`~xmr.models.language.packed_tokens.PackedTokens`) rather than ``[B, L, D]``: an adapter
class that sets ``accepts_packed_tokens = True`` is called so when ``ctx.packed`` is set. A
token-wise adapter needs nothing else; one that mixes tokens or reads a per-sample condition goes
through ``ctx.packed`` (``unpack`` to ``[B, L, ...]``, ``sample_index``). A language whose
adapters do not all accept packed tokens runs its padded batch.
"""
from __future__ import annotations

import inspect
from abc import ABCMeta, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from xmr.registry import with_defaults
from xmr.utils.cli import did_you_mean

if TYPE_CHECKING:
    from xmr.models.adapters.grouped import LanguageMembership
    from xmr.models.language.packed_tokens import PackedTokens


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

    @classmethod
    def _missing_(cls, value: object) -> None:
        """A site no block has: named with the nearest site and all of them."""
        sites = [site.value for site in cls]
        raise ValueError(f'adapter site {value!r} does not exist{did_you_mean(str(value), sites)}'
                         f"; the sites are {', '.join(sites)}")

    @property
    def is_linear(self) -> bool:
        return self in (AdapterSite.ATTN_QKV, AdapterSite.ATTN_OUT, AdapterSite.MLP_FC,
                        AdapterSite.MLP_PROJ)


@dataclass
class AdapterContext:
    """Per-forward information an adapter may read.

    Attributes:
        lang: language code of the samples at ``rows`` (a grouped call's: its languages joined
            by ``+``).
        block_index: index of the block whose site is being run; ``-1`` for the input site.
        condition: method-specific condition, e.g. DASD's per-block ``W^z``; ``None`` for static
            adapters. Whoever produces it documents its layout.
        attention_mask: ``[B, L]`` bool, True on real tokens; input-site adapters may replace it.
        eos_index: ``[B]`` position of the pooled token; input-site adapters may shift it.
        packed: where the real tokens are when the blocks run on packed tokens ``[T, D]``,
            ``None`` when they run on the padded ``[B, L, D]``.
        rows: the rows of the blocks' input that are ``lang``'s: its samples of ``[B, L, D]``,
            or its tokens of ``[T, D]``, contiguous (the branch sorts a batch by language, runs
            the frozen blocks once, and calls each language's adapters on its rows). Every
            other field describes these rows alone: ``condition``, ``attention_mask``,
            ``eos_index`` and ``packed`` have one entry per sample of ``rows``.
        membership: set for a call that serves every language of the batch at once
            (:class:`~xmr.models.adapters.grouped.GroupedAdapter`): each sample's language.
        extras: free slots for method-specific values.
    """

    lang: str
    block_index: int = -1
    condition: Any = None
    attention_mask: torch.Tensor | None = None
    eos_index: torch.Tensor | None = None
    packed: PackedTokens | None = None
    rows: slice = field(default_factory=lambda: slice(None))
    membership: LanguageMembership | None = None
    extras: dict[str, Any] = field(default_factory=dict)


#: The config key of a branch's adapter configs, as messages name it.
ADAPTERS_KEY = 'model.language_branch.adapters'


def check_tower_width(key: str, cfg: Any, width: int) -> None:
    """A ``width`` of ``cfg``, a config whose builder fills in the text tower's width ``D``
    (an adapter's, the embedding block's), is that width.

    Args:
        key: ``cfg``'s key in the config (``model.language_branch.embedding``).
        cfg: the config (anything but a dict is left alone).
        width: the tower's ``D``.

    Raises:
        ValueError: naming the key, both widths and the fix.
    """
    given = cfg.get('width') if isinstance(cfg, Mapping) else None
    if given is not None and given != width:
        raise ValueError(f'{key}: width {given} does not match the text tower width {width}; '
                         "leave width out (the tower's is filled in)")


@dataclass(frozen=True)
class AdapterPlacement:
    """Where one adapter instance sits in the text tower.

    The adapter set builds one per (language, block, site) and passes it as the adapter's first
    argument; an adapter reads its widths from it rather than from loose keyword arguments.

    Attributes:
        width: hidden width ``D`` of the text tower.
        site: the site the instance serves; ``None`` is the adapter class's first site.
        block_index: index of its block (``-1`` for the input site).
        in_features: input width of the frozen projection at a linear site (``None``: ``width``).
        out_features: output width of that projection (``None``: ``width``).
    """

    width: int
    site: AdapterSite | None = None
    block_index: int = -1
    in_features: int | None = None
    out_features: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.width, int) or self.width <= 0:
            raise ValueError(f'AdapterPlacement width must be a positive int, got {self.width!r}')
        if self.site is not None:
            object.__setattr__(self, 'site', AdapterSite(self.site))


class BaseAdapter(nn.Module, metaclass=ABCMeta):
    """Base class of a trainable module placed in a frozen text tower.

    What a new adapter needs (docs/custom_modules.md):

    1. ``sites``: the places it can occupy (``default_sites``: those it occupies unless a config
       names ``sites``; default the first);
    2. ``__init__(self, placement, **options)`` calling ``super().__init__(placement)``, which
       sets ``width``, ``site``, ``block_index``, ``in_features`` and ``out_features``;
    3. ``forward(x, ctx)``: residual sites return the new hidden state, linear sites the delta;
    4. ``accepts_packed_tokens`` when ``forward`` is right on packed tokens ``[T, D]``;
    5. registration in ``ADAPTERS``.

    Advanced hooks, for adapters whose options decide their placement or that share or read
    more than their own weights: :meth:`resolve_sites`, :meth:`build_shared`, :meth:`attach`.

    Args:
        placement: where this instance sits (built by the adapter set).

    Attributes:
        accepts_packed_tokens: ``forward`` is right on packed tokens ``[T, D]`` (see the module
            docstring); ``False`` (the safe default) keeps a language using this class on its
            padded batch.
        reads_condition: ``forward`` reads ``ctx.condition`` at its block, so the disentangler
            produces a condition for exactly the blocks such adapters occupy (DASD's generator).
        post_norm_defaults: config keys (``sites`` and options) the class defaults to on a
            post-LN tower (:attr:`~xmr.models.backbones.base.TextTower.post_norm`: BERT, XLM-R),
            where ``block.output`` lies after the block's LayerNorm; a config's own keys win.
        builder_options: config keys the adapter set reads and removes before it builds each
            instance (where to place it), so that the config's load takes them as options.
        given_by_builder: arguments the adapter set passes to each instance (its
            ``placement``), which a config may not give: the config's load refuses them.
        positive_options: options that must be positive integers (bottleneck widths, ranks,
            token counts, divisors), which ``__init__`` checks with :meth:`positive_option`;
            declared, they are refused as the config loads too (:meth:`check_config`).
    """

    sites: ClassVar[tuple[AdapterSite, ...]] = (AdapterSite.BLOCK_OUTPUT,)
    default_sites: ClassVar[tuple[AdapterSite, ...] | None] = None
    post_norm_defaults: ClassVar[dict[str, Any]] = {}
    accepts_packed_tokens: ClassVar[bool] = False
    reads_condition: ClassVar[bool] = False
    builder_options: ClassVar[tuple[str, ...]] = ('width', 'blocks', 'sites')
    given_by_builder: ClassVar[tuple[str, ...]] = ('placement',)
    positive_options: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def positive_option(cls, option: str, value: Any, where: str | None = None) -> int:
        """``value`` of the config option ``option`` (a bottleneck width, a rank, a token
        count, a divisor), which must be a positive integer: torch builds a 0-wide layer, and
        the adapter trains a bias alone; a float or a string fails inside torch, naming neither.

        Args:
            where: what the message names the adapter by (default ``adapter <class>``; the
                config's key as it loads).

        Raises:
            ValueError: naming the adapter, the option and the value.
        """
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f'{where or f"adapter {cls.__name__}"}: {option}={value!r} must '
                             'be a positive integer')
        return value

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse, as the class is defined (a config's ``custom_imports`` imports it), an
        ``__init__`` that takes no ``placement`` keyword or a ``forward`` that takes no ``ctx``
        after ``x``: the adapter set passes both, and the build, or the first batch through the
        adapter after a whole earlier phase had trained, failed on them with Python's
        message."""
        super().__init_subclass__(**kwargs)
        init = inspect.signature(cls.__init__).parameters
        if 'placement' not in init and not any(
                p.kind is inspect.Parameter.VAR_KEYWORD for p in init.values()):
            raise TypeError(f'adapter {cls.__qualname__}: __init__ takes no placement; the '
                            'adapter set builds each instance with placement=AdapterPlacement: '
                            'def __init__(self, placement, **options), calling '
                            'super().__init__(placement)')
        forward = list(inspect.signature(cls.forward).parameters.values())[1:]
        positional = [p for p in forward if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                       inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        if len(positional) < 2 and not any(
                p.kind is inspect.Parameter.VAR_POSITIONAL for p in forward):
            raise TypeError(f'adapter {cls.__qualname__}: forward takes '
                            f'{[p.name for p in forward]}; the tower calls it with the hidden '
                            'states and the call context: def forward(self, x, ctx)')

    def __init__(self, placement: AdapterPlacement) -> None:
        super().__init__()
        name = type(self).__name__
        if not isinstance(placement, AdapterPlacement):
            raise TypeError(f'{name} takes an AdapterPlacement as its first argument (the '
                            f'adapter set passes one), got {placement!r}; build one directly '
                            f'with {name}(AdapterPlacement(width=...), ...)')
        site = placement.site or self.sites[0]
        if site not in self.sites:
            raise ValueError(f'{name} serves {[str(s) for s in self.sites]}, not {site!s}')
        self.placement = placement
        self.width = placement.width
        self.site = site
        self.block_index = placement.block_index
        self.in_features = placement.in_features or placement.width
        self.out_features = placement.out_features or placement.width

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """Refuse what places the adapter nowhere it can act, as the config loads
        (:func:`~xmr.registry.check_part_options`) and as the adapter set builds it, before
        the indices are checked against the branch's blocks: ``sites`` given as one string
        (read letter by letter: sites ``'m'``, ``'l'``, ...), sites that
        :meth:`placed_sites` refuses, ``positive_options`` that are no positive integers, and
        ``blocks`` in the config of an adapter whose sites are the input site alone (a prompt
        acts once, before the blocks).

        Raises:
            ValueError: naming the key, the type, ``sites``, ``blocks`` or the option that
                places it, and the fix.
        """
        if isinstance(cfg.get('sites'), str):
            raise ValueError(f"{ADAPTERS_KEY} ({cfg['type']}): sites={cfg['sites']!r} must be a "
                             f"list of sites ([{cfg['sites']!r}] for one)")
        options = with_defaults(cls, cfg)
        # An option a subclass passes on in **kwargs, left out of the config, has no value here.
        for option in (name for name in cls.positive_options if name in options):
            cls.positive_option(option, options[option], f'{ADAPTERS_KEY} ({cls.__name__})')
        sites = cls.placed_sites(cfg.get('sites'), dict(cfg))
        if cfg.get('blocks') is None or set(sites) != {AdapterSite.INPUT}:
            return
        raise ValueError(f"{ADAPTERS_KEY} ({cfg['type']}): blocks={cfg['blocks']!r} does not "
                         f'apply to {cls.__name__}, which acts once, at the input site, before '
                         'the blocks (a shallow prompt): drop blocks (xmr has no deep, '
                         'per-block prompts)')

    @classmethod
    def resolve_sites(cls, sites: Sequence[str] | None, cfg: dict) -> tuple[AdapterSite, ...]:
        """Advanced hook: the sites an adapter config occupies.

        ``sites`` when the config names them, else ``default_sites`` (else the first of
        ``sites``).

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
    def placed_sites(cls, sites: Sequence[str] | None, cfg: dict) -> tuple[AdapterSite, ...]:
        """The sites a config places the adapter at (:meth:`resolve_sites`), each one the class
        serves (:attr:`sites`).

        Raises:
            ValueError: a site no block has, one the class does not serve, one listed twice,
                or options that place it nowhere (LoRA's unknown ``targets``), named with the
                config's key and type.
        """
        where = f'{ADAPTERS_KEY} ({cls.__name__})'
        try:
            placed = cls.resolve_sites(sites, cfg)
        except ValueError as error:
            raise ValueError(f'{where}: {error}') from None
        twice = [str(s) for s in dict.fromkeys(placed) if placed.count(s) > 1]
        if twice:
            raise ValueError(f'{where}: sites={[str(s) for s in placed]} lists {twice} more than '
                             'once; one site of a block holds one adapter')
        for site in placed:
            if site not in cls.sites:
                raise ValueError(f'{where}: sites={[str(s) for s in placed]}: {cls.__name__} '
                                 f'cannot sit at {site!s}; its sites are '
                                 f'{[str(s) for s in cls.sites]}')
        return placed

    @classmethod
    def build_shared(cls, width: int, **options: Any) -> nn.Module | None:
        """Advanced hook: parameters shared by the instances one language builds from one config.

        ``None`` (the default) when there are none.

        The adapter set registers the returned module once per language and passes it to every
        instance as ``shared`` (Compacter's ``A_i``, shared across layers).

        Args:
            width: tower width ``D``.
            **options: the adapter config's options (without ``type``, ``sites``, ``blocks``).
        """
        return None

    def settings(self) -> dict[str, Any]:
        """What the adapter computes with that none of its weights holds (JSON values), ``{}``
        by default: LoRA's scale ``alpha / r``, an activation's name, a frozen prompt's text.

        A checkpoint records them (``adapter_settings`` among the retriever's checkpoint
        facts) and is refused by a config of other values: its weights load there and compute
        other features.
        """
        return {}

    def attach(self, tokenizer: Any, embedding: nn.Module) -> None:
        """Advanced hook, called once by the target-language branch after building.

        It passes the branch's tokenizer and embedding block, for adapters that read them (hard
        prompts embed their text); no-op by default.
        """

    @abstractmethod
    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        """Residual sites: new hidden state ``[B, L, D]``; linear sites: output delta."""
