"""Per-language adapter sets and the hooks through which a text tower calls them."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from xmr.models.adapters.base import (
    ADAPTERS_KEY,
    AdapterContext,
    AdapterPlacement,
    AdapterSite,
    BaseAdapter,
    check_tower_width,
)
from xmr.models.adapters.grouped import GroupedAdapter
from xmr.registry import ADAPTERS
from xmr.utils.cli import UserKeyError
from xmr.utils.listing import repeated


def _key(block_index: int, site: AdapterSite) -> str:
    # ModuleDict keys may not contain dots.
    return f'{block_index}:{site.value.replace(".", "_")}'


#: Key of a language's own tower weights (:class:`~xmr.models.language.tower_weights.TowerWeights`)
#: in its set; no site key has this form.
TOWER_WEIGHTS = 'tower_weights'


def check_blocks(adapter_type: str, blocks: Sequence[int] | None,
                 num_blocks: int) -> list[int]:
    """The block indices an adapter config places its block-site instances at.

    Args:
        adapter_type: the config's ``type``, for messages.
        blocks: the config's ``blocks``; ``None``: every block.
        num_blocks: blocks the branch runs, numbered ``0..num_blocks - 1``.

    Raises:
        ValueError: no list, an empty list, an index twice, or one outside
            ``0..num_blocks - 1``
            (``-1`` meant as Python's last block placed nothing: no adapter sits before the
            first block, where only ``input``-site adapters act, and those take no blocks).
    """
    if blocks is None:
        return list(range(num_blocks))
    if isinstance(blocks, str) or not isinstance(blocks, Sequence):
        raise ValueError(f'{ADAPTERS_KEY} ({adapter_type}): blocks={blocks!r} must be a list '
                         f'of block indices in 0..{num_blocks - 1}, e.g. '
                         f'blocks=[{num_blocks - 1}]')
    blocks = list(blocks)
    if not blocks:
        raise ValueError(f'{ADAPTERS_KEY} ({adapter_type}): blocks=[] places no adapter; leave '
                         f'blocks out for every block (0..{num_blocks - 1}) or drop the config')
    for index in blocks:
        if isinstance(index, bool) or not isinstance(index, int) or \
                not 0 <= index < num_blocks:
            raise ValueError(f'{ADAPTERS_KEY} ({adapter_type}): blocks={blocks!r}, an adapter '
                             f'placed at block {index!r}, but the branch runs {num_blocks} '
                             f'blocks, numbered 0..{num_blocks - 1} (the last is '
                             f'{num_blocks - 1}, not -1)')
    twice = repeated(blocks)
    if twice:
        raise ValueError(f'{ADAPTERS_KEY} ({adapter_type}): blocks lists {twice} more than '
                         'once; one site of a block holds one adapter')
    return blocks


def check_adapter_config(cfg: Mapping[str, Any], width: int, num_blocks: int) -> list[int]:
    """Check an adapter config against the tower it is placed on: its ``width``, if given, is
    the tower's (:func:`~xmr.models.adapters.base.check_tower_width`), its class takes its
    ``blocks`` (:meth:`~xmr.models.adapters.base.BaseAdapter.check_config`: a prompt takes
    none) and they are the branch's (:func:`check_blocks`).

    Returns:
        The block indices its block-site instances go to.
    """
    check_tower_width(f"{ADAPTERS_KEY} ({cfg['type']})", cfg, width)
    for kind in adapter_types(cfg) or ():
        if issubclass(kind, BaseAdapter):
            kind.check_config(cfg)
    return check_blocks(cfg['type'], cfg.get('blocks'), num_blocks)


def adapter_configs(adapters: dict | Sequence[dict] | None) -> list[dict]:
    """The adapter configs of ``LanguageAdapters``' ``adapters``: none, one or a list."""
    return [] if adapters is None else ([adapters] if isinstance(adapters, dict)
                                        else list(adapters))


def adapter_types(adapters: dict | Sequence[dict] | None) -> list[type] | None:
    """The classes ``adapters`` (as :func:`adapter_configs` reads it) builds, from the config
    alone; ``None`` where a type is no registered class (its build names it)."""
    found = [cfg.get('type') if isinstance(cfg, Mapping) else None
             for cfg in adapter_configs(adapters)]
    found = [ADAPTERS.get(kind) if isinstance(kind, str) and kind in ADAPTERS else kind
             for kind in found]
    return found if all(isinstance(kind, type) for kind in found) else None


def unexposed_site_message(adapter: str, site: AdapterSite,
                           linear_shapes: dict[AdapterSite, tuple[int, int]]) -> str:
    """Why ``adapter`` cannot sit at the linear ``site`` of a tower whose
    :meth:`~xmr.models.backbones.base.TextTower.linear_shapes` lacks it, and the two ways out."""
    offered = ', '.join(str(s) for s in linear_shapes) or 'none: residual sites only'
    return (f'adapter {adapter} at {site!s}: the text tower exposes no linear site {site!s} '
            f'(its linear sites: {offered}); a tower of your own offers its frozen projections '
            'by overriding TextTower.linear_shapes() (docs/custom_modules.md), else choose an '
            'adapter at a residual site (StaticAdapter, HoulsbyAdapter)')


class LanguageModuleDict(nn.ModuleDict):
    """A ``ModuleDict`` keyed by language codes, whatever the code.

    ``nn.Module.add_module`` refuses a name its class already has as an attribute, and Tongan's
    ISO 639-1 code ``to`` is ``Module.to``. Such a language is kept like any other (state-dict
    keys ``...sets.to.*``, ``modules['to']``); only attribute access (``modules.to``) still means
    the method.
    """

    def add_module(self, name: str, module: nn.Module | None) -> None:
        if name in self._modules or not hasattr(type(self), name):
            super().add_module(name, module)
        else:
            self._modules[name] = module


class LanguageAdapters(nn.Module):
    """The adapters of every target language, placed at the sites their classes declare.

    Args:
        languages: target language codes; each gets its own adapter instances.
        adapters: one adapter config or a list of them (e.g. LoRA and a Houlsby adapter).
            A config may carry ``blocks`` (the block indices it is placed in, ``0..N-1``;
            default all blocks; see :func:`check_blocks`)
            and ``sites`` (a subset of the class's sites; default: the class's
            ``resolve_sites``, i.e. its ``default_sites`` unless its options decide). When the
            class builds shared parameters (``build_shared``), each language registers them
            once as ``shared_<config index>``.
        width: tower width ``D``; a config that names another ``width`` is refused.
        num_blocks: number of blocks the branch runs.
        linear_shapes: ``(in, out)`` of the frozen projection at each linear site.
        post_norm: the tower's blocks normalise after the residual add
            (:attr:`~xmr.models.backbones.base.TextTower.post_norm`); each config then starts
            from its class's ``post_norm_defaults`` (keys the config gives win).
    """

    def __init__(self, languages: Sequence[str], adapters: dict | Sequence[dict] | None,
                 width: int, num_blocks: int,
                 linear_shapes: dict[AdapterSite, tuple[int, int]] | None = None,
                 post_norm: bool = False) -> None:
        super().__init__()
        self.languages = list(languages)
        self.width = width
        self.post_norm = post_norm
        configs = adapter_configs(adapters)
        linear_shapes = linear_shapes or {}
        self.sets = LanguageModuleDict()
        for lang in self.languages:
            placed = nn.ModuleDict()
            for position, cfg in enumerate(configs):
                for block_index, site, adapter in self._build(cfg, num_blocks, linear_shapes,
                                                              placed, position):
                    key = _key(block_index, site)
                    if key in placed:
                        raise ValueError(f'two adapter configs place an adapter at {site!s} of '
                                         f'block {block_index}; one site holds one adapter')
                    placed[key] = adapter
            self.sets[lang] = placed

    def settings(self) -> list[dict[str, Any]]:
        """Each distinct :meth:`~xmr.models.adapters.base.BaseAdapter.settings` of the adapters,
        once with its class's name and in a fixed order (``[{'scale': 16.0, 'type': 'LoRA'}]``):
        what a checkpoint or a language module file records of what they compute with beyond
        their weights."""
        found = {json.dumps(dict(type=type(adapter).__name__, **adapter.settings()),
                            sort_keys=True)
                 for placed in self.sets.values() for adapter in placed.values()
                 # Not the shared state a site's adapters read (a Compacter's rule) nor the
                 # tower weights: their settings are those of the adapters that read them.
                 if isinstance(adapter, BaseAdapter) and adapter.settings()}
        return [json.loads(setting) for setting in sorted(found)]

    def _build(self, cfg: dict, num_blocks: int,
               linear_shapes: dict[AdapterSite, tuple[int, int]], placed: nn.ModuleDict,
               position: int):
        adapter_cls = ADAPTERS.get(cfg['type'])
        if not (isinstance(adapter_cls, type) and issubclass(adapter_cls, BaseAdapter)):
            raise TypeError(f"adapter type {cfg['type']} must subclass xmr BaseAdapter")
        # On a post-LN tower the class's own defaults for it come first; the config still wins.
        cfg = {**(adapter_cls.post_norm_defaults if self.post_norm else {}), **cfg}
        blocks = check_adapter_config(cfg, self.width, num_blocks)
        cfg.pop('width', None)
        cfg.pop('blocks', None)
        sites = adapter_cls.placed_sites(cfg.pop('sites', None), cfg)
        options = {k: v for k, v in cfg.items() if k != 'type'}
        shared = adapter_cls.build_shared(self.width, **options)
        shared_args = {}
        if shared is not None:
            # Registered once here; the instances hold it without registering it again.
            placed[f'shared_{position}'] = shared
            shared_args['shared'] = shared
        for site in sites:
            site_blocks = [-1] if site == AdapterSite.INPUT else blocks
            for index in site_blocks:
                shape = {}
                if site.is_linear:
                    if site not in linear_shapes:
                        raise ValueError(unexposed_site_message(cfg['type'], site, linear_shapes))
                    shape = dict(zip(('in_features', 'out_features'), linear_shapes[site]))
                placement = AdapterPlacement(self.width, site, index, **shape)
                yield index, site, ADAPTERS.build(
                    cfg, default_args=dict(placement=placement, **shared_args))

    def add_tower_weights(self, lang: str, weights: nn.Module) -> None:
        """Make ``weights`` (``lang``'s own copies of tower weights,
        :class:`~xmr.models.language.tower_weights.TowerWeights`) part of its module."""
        self.check_language(lang)
        self.sets[lang][TOWER_WEIGHTS] = weights

    def tower_weights(self, lang: str) -> nn.Module | None:
        """``lang``'s own tower weights, or ``None`` when it runs the tower's."""
        self.check_language(lang)
        return self.sets[lang][TOWER_WEIGHTS] if TOWER_WEIGHTS in self.sets[lang] else None

    def condition_blocks(self) -> list[int]:
        """Blocks where an adapter of any language reads ``ctx.condition`` (sorted)."""
        return sorted({module.block_index for module in self.modules()
                       if isinstance(module, BaseAdapter) and module.reads_condition})

    def check_language(self, lang: str) -> None:
        if lang not in self.sets:
            raise UserKeyError(f"no adapters for language '{lang}'; configured languages: "
                               f'{self.languages}')

    def input_adapters(self, lang: str) -> list[BaseAdapter]:
        self.check_language(lang)
        placed = self.sets[lang]
        key = _key(-1, AdapterSite.INPUT)
        return [placed[key]] if key in placed else []

    def accepts_packed_tokens(self, lang: str) -> bool:
        """Whether every adapter ``lang`` places in the blocks takes packed tokens (input-site
        adapters act before the blocks, on the padded batch, so they do not count)."""
        self.check_language(lang)
        return all(module.accepts_packed_tokens for module in self.sets[lang].values()
                   if isinstance(module, BaseAdapter) and module.site != AdapterSite.INPUT)

    def groups_every_site(self, languages: Sequence[str]) -> bool:
        """Whether every site of these languages holds, in each of them, an adapter of one
        :class:`~xmr.models.adapters.grouped.GroupedAdapter` class (so no prompts, no shared
        parameters, no tower weights): a batch of them then runs in any order of samples."""
        sets = [self.sets[lang] for lang in languages]
        keys = dict.fromkeys(key for placed in sets for key in placed)
        return all(grouped_adapters(sets, key) is not None for key in keys)

    def hooks(self, *contexts: AdapterContext,
              grouped: AdapterContext | None = None) -> LanguageHooks:
        """Site hooks that run each context's language's adapters on its rows
        (:attr:`~xmr.models.adapters.base.AdapterContext.rows`); with ``grouped``, the context
        of the whole input (:attr:`~xmr.models.adapters.base.AdapterContext.membership`), sites
        whose adapters are all of one :class:`~xmr.models.adapters.grouped.GroupedAdapter`
        class run them in one call. Without ``contexts``, every site must be such a site
        (:meth:`groups_every_site`)."""
        for ctx in contexts:
            self.check_language(ctx.lang)
        return LanguageHooks(self.sets, contexts, grouped)


def grouped_adapters(sets: Sequence[nn.ModuleDict], key: str) -> list[GroupedAdapter] | None:
    """The adapters at ``key`` of every set when they are all of one
    :class:`~xmr.models.adapters.grouped.GroupedAdapter` class; else ``None``."""
    adapters = [placed[key] if key in placed else None for placed in sets]
    kind = type(adapters[0])
    if not issubclass(kind, GroupedAdapter) or any(type(a) is not kind for a in adapters):
        return None
    return adapters


def join_rows(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """The languages' rows, in order, as one tensor (the one part itself, uncopied)."""
    return parts[0] if len(parts) == 1 else torch.cat(list(parts))


def checked_output(output: Any, rows: torch.Tensor, shape: Sequence[int], adapter: BaseAdapter,
                   lang: str) -> torch.Tensor:
    """An adapter's output, if it is a tensor of the ``shape`` its site continues with (the
    rows at a residual site, their projection's ``[..., out_features]`` at a linear one), in
    the dtype of its input ``rows`` or autocast's.

    Raises:
        ValueError: naming the adapter, its site, block and language, what it returned and
            what the site needs (torch's own error, steps later, named none of them).
    """
    device = rows.device.type
    dtypes = {rows.dtype, *([torch.get_autocast_dtype(device)]
                            if torch.is_autocast_enabled(device) else [])}
    if (isinstance(output, torch.Tensor) and tuple(output.shape) == tuple(shape)
            and output.dtype in dtypes):
        return output
    got = (f'shape {tuple(output.shape)} {output.dtype}' if isinstance(output, torch.Tensor)
           else type(output).__name__)
    kind = 'delta of the projection' if adapter.site.is_linear else 'rows'
    wanted = ' or '.join(sorted(str(dtype) for dtype in dtypes))
    raise ValueError(f'{ADAPTERS_KEY}: {type(adapter).__name__} at {adapter.site!s} of block '
                     f'{adapter.block_index} ({lang}) returned {got}; the site continues with '
                     f'its {kind}, shape {tuple(shape)} {wanted}: check its forward')


class LanguageHooks:
    """:class:`~xmr.models.backbones.base.SiteHooks` answered by each language's adapters on its
    own rows of the blocks' input.

    The rows of the languages are contiguous and in order, so each language reads a view of
    the hidden states and one concatenation gathers the results; a single language is called on
    the whole input. Where every language holds an adapter of one
    :class:`~xmr.models.adapters.grouped.GroupedAdapter` class, that class's
    ``forward_grouped`` serves them all in one call, given ``grouped``.

    Args:
        sets: every language's placed adapters (:attr:`LanguageAdapters.sets`).
        contexts: each language's context, in the order of their rows.
        grouped: the context of a grouped call (the whole input, with ``membership``), or
            ``None`` to call each language's adapters on its rows.
    """

    def __init__(self, sets: Mapping[str, nn.ModuleDict], contexts: Sequence[AdapterContext],
                 grouped: AdapterContext | None = None) -> None:
        self.routes = [(sets[ctx.lang], ctx) for ctx in contexts]
        self.grouped = grouped
        self.grouped_sets = ([] if grouped is None
                             else [sets[lang] for lang in grouped.membership.languages])

    def _grouped_call(self, site: AdapterSite, block_index: int, x: torch.Tensor
                      ) -> torch.Tensor | None:
        """The site's grouped call on ``x`` when one class serves every language; else ``None``.
        A grouped context of one language (a compiled evaluation's) makes a grouped call too:
        without routes, nothing else would run its adapters."""
        if not self.grouped_sets:
            return None
        adapters = grouped_adapters(self.grouped_sets, _key(block_index, site))
        if adapters is None:
            return None
        self.grouped.block_index = block_index
        width = adapters[0].out_features if site.is_linear else x.shape[-1]
        return checked_output(type(adapters[0]).forward_grouped(adapters, x, self.grouped), x,
                              (*x.shape[:-1], width), adapters[0], self.grouped.lang)

    def _calls(self, site: AdapterSite, block_index: int, x: torch.Tensor
               ) -> list[tuple[BaseAdapter | None, torch.Tensor, AdapterContext]]:
        """``(adapter or None, its rows of x, context)`` of each language at one site."""
        key = _key(block_index, site)
        calls = []
        for placed, ctx in self.routes:
            ctx.block_index = block_index
            rows = x if len(self.routes) == 1 else x[ctx.rows]
            calls.append((placed[key] if key in placed else None, rows, ctx))
        return calls

    def residual(self, site: AdapterSite, block_index: int, x: torch.Tensor) -> torch.Tensor:
        grouped = self._grouped_call(site, block_index, x)
        if grouped is not None:
            return grouped
        calls = self._calls(site, block_index, x)
        if all(adapter is None for adapter, _, _ in calls):
            return x
        return join_rows([rows if adapter is None else
                          checked_output(adapter(rows, ctx), rows, rows.shape, adapter,
                                         ctx.lang)
                          for adapter, rows, ctx in calls])

    def linear(self, site: AdapterSite, block_index: int,
               x_in: torch.Tensor) -> torch.Tensor | None:
        grouped = self._grouped_call(site, block_index, x_in)
        if grouped is not None:
            return grouped
        calls = self._calls(site, block_index, x_in)
        deltas = [None if adapter is None else checked_output(
                      adapter(rows, ctx), rows, (*rows.shape[:-1], adapter.out_features),
                      adapter, ctx.lang)
                  for adapter, rows, ctx in calls]
        given = next((delta for delta in deltas if delta is not None), None)
        if given is None or len(deltas) == 1:
            return given
        # A language without an adapter here adds nothing to its rows of the projection.
        return join_rows([given.new_zeros(rows.shape[:-1] + given.shape[-1:]) if delta is None
                          else delta for delta, (_, rows, _) in zip(deltas, calls)])
