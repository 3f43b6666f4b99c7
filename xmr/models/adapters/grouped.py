"""One call for every language's adapter at a site: the languages' weights side by side.

The branch runs the frozen blocks once for a mixed-language batch, and by default each site
then calls each language's adapter on that language's rows
(:class:`~xmr.models.adapters.language_adapters.LanguageHooks`): at ``G`` languages, ``G``
small products, activations and additions per site where the blocks run one of each. On a GPU
the step is bound by the host's launching of those kernels, not by their arithmetic. An
adapter class whose arithmetic allows it computes all ``G`` languages at once instead
(:class:`GroupedAdapter`): the weights of the languages stand side by side, ``[G·k, D]``, one
product computes every language's bottleneck for every row, and a one-hot of each row's
language (:class:`LanguageMembership`) keeps the row's own. It does ``G`` times the adapter's
arithmetic in a few kernels: cheap for narrow bottlenecks (DASD's ``d_u = 32``), not for wide
ones, which is why the form is an opt-in of the class.

The shapes of a grouped call depend on the batch size and length alone, not on how many
captions each language has.
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from xmr.models.adapters.base import AdapterContext, BaseAdapter
from xmr.models.host_to_device import host_to_device

if TYPE_CHECKING:
    from xmr.models.language.packed_tokens import PackedTokens


def spread(x: torch.Tensor, one_hot: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``x`` placed in its row's language's block of ``G`` blocks, zeros in the others.

    Args:
        x: ``[..., k, ...]`` with ``k`` at ``dim``.
        one_hot: ``[..., G]`` broadcastable against ``x`` without ``dim``: the row's language.

    Returns:
        ``[..., G·k, ...]``: block ``g`` of ``dim`` is ``x`` where the row is language ``g``.
    """
    dim = dim % x.dim()
    blocks = x.unsqueeze(dim) * one_hot.reshape(one_hot.shape + (1,) * (x.dim() - dim))
    return blocks.flatten(dim, dim + 1)


class LanguageMembership:
    """The language of each sample of a grouped call, as a one-hot over the call's languages.

    Its tensor is the index of each sample's language (``columns``, on the device); the
    one-hot is made from it on the device. Made before a compiled step, a membership is what
    the compiled code reads of the batch's languages: their tuple, the same for every batch
    that holds them all when ``order`` fixes it, and a tensor, so a new mix of languages in the
    next batch is new data, not new code.

    Args:
        langs: the language of each sample, in the order of the rows.
        device: where the rows are.
        order: the languages in the order the call's adapters come in (a branch's configured
            languages); those of ``langs`` keep this order. ``None``: the order of their first
            sample.
    """

    def __init__(self, langs: Sequence[str], device: torch.device,
                 order: Sequence[str] | None = None) -> None:
        present = dict.fromkeys(langs)
        self.languages = tuple(present) if order is None else tuple(
            lang for lang in order if lang in present)
        columns = torch.tensor([self.languages.index(lang) for lang in langs])
        self.columns = host_to_device(columns, device)                               # [B]
        self._rows: dict[tuple[torch.dtype, bool], torch.Tensor] = {}

    def __len__(self) -> int:
        return self.columns.shape[0]

    def one_hot(self) -> torch.Tensor:
        """``[B, G]`` float, 1 where sample ``b`` is ``languages[g]``, on the device."""
        groups = torch.arange(len(self.languages), device=self.columns.device)
        return (self.columns.unsqueeze(1) == groups).float()

    def rows(self, dtype: torch.dtype, packed: PackedTokens | None) -> torch.Tensor:
        """The one-hot of the rows an adapter sees, in ``dtype``: ``[B, 1, G]`` for the padded
        ``[B, L, D]`` (one per sample, broadcast over its tokens), ``[T, G]`` for packed tokens.
        Made once per call of the branch (compiled code merges the repeats itself)."""
        key = (dtype, packed is None)
        if key in self._rows:
            return self._rows[key]
        one_hot = self.one_hot().to(dtype)
        rows = one_hot.unsqueeze(1) if packed is None else one_hot.index_select(
            0, packed.sample_index)
        if not torch.compiler.is_compiling():
            self._rows[key] = rows
        return rows


class GroupedAdapter(BaseAdapter):
    """An adapter class that computes every language's instance at a site in one call.

    When every language of a mixed-language batch holds an instance of the same such class at
    a site, :class:`~xmr.models.adapters.language_adapters.LanguageHooks` calls
    :meth:`forward_grouped` once on the whole input rather than each language's ``forward`` on
    its rows. The two must agree (up to the order of floating-point sums), in outputs and in
    each language's gradients.
    """

    @classmethod
    @abstractmethod
    def forward_grouped(cls, adapters: Sequence[GroupedAdapter], x: torch.Tensor,
                        ctx: AdapterContext) -> torch.Tensor:
        """Every language's adapter on its own rows, in one call.

        Args:
            adapters: one instance per language, in the order of ``ctx.membership.languages``.
            x: the whole input of the site, ``[B, L, D]`` or packed ``[T, D]``.
            ctx: the call's context: ``condition``, ``attention_mask``, ``eos_index`` and
                ``packed`` cover the whole batch, ``membership`` says each sample's language.

        Returns:
            What ``forward`` returns at the site, for every row.
        """
