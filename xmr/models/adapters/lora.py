"""LoRA: a trainable low-rank update of frozen projections (Hu et al., 2022).

The frozen projection ``h = W x + b`` becomes ``h = W x + b + (α / r) B A dropout(x)`` with
``A ∈ R^{r×d_in}`` (Kaiming-uniform) and ``B ∈ R^{d_out×r}`` (zeros), so a fresh LoRA leaves
the tower's output unchanged. It sits at the *linear* sites of a text block, which every xmr
tower runs on written-out weights: wrapping ``nn.MultiheadAttention.out_proj`` would be silently
ignored, because MHA reads the weight directly (DESIGN pitfalls).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.adapters.base import AdapterContext, AdapterPlacement, AdapterSite, BaseAdapter
from xmr.registry import ADAPTERS

#: Target name -> the site whose output it updates. ``attn.qkv`` produces ``[q; k; v]``: q, k
#: and v update its thirds, in that order; the others a site's whole output.
LORA_TARGETS: dict[str, AdapterSite] = {
    'q': AdapterSite.ATTN_QKV,
    'k': AdapterSite.ATTN_QKV,
    'v': AdapterSite.ATTN_QKV,
    'out': AdapterSite.ATTN_OUT,
    'fc': AdapterSite.MLP_FC,
    'proj': AdapterSite.MLP_PROJ,
}


def check_targets(targets: Sequence[str]) -> tuple[str, ...]:
    """Validate LoRA target names (``q k v out fc proj``) and return them in canonical order."""
    if isinstance(targets, str) or not targets:
        raise ValueError(f'LoRA targets must be a non-empty list of {list(LORA_TARGETS)}, got '
                         f'{targets!r}')
    unknown = [t for t in targets if t not in LORA_TARGETS]
    if unknown:
        raise ValueError(f'unknown LoRA targets {unknown}; choose from {list(LORA_TARGETS)} '
                         '(attention q/k/v/out, MLP fc/proj)')
    return tuple(t for t in LORA_TARGETS if t in targets)


@ADAPTERS.register_module()
class LoRA(BaseAdapter):
    """Low-rank update of the frozen projections named by ``targets``, per language.

    ``ΔW = (α / r) · B A`` (LoRA Eq. 3); the instance at ``attn.qkv`` holds one ``(A, B)`` pair
    per targeted projection among q, k, v and leaves the others' thirds of the output at zero.
    The sites follow from ``targets`` (a config's ``sites`` must agree with them).

    Args:
        placement: where the instance sits (:class:`AdapterPlacement`).
        r: rank.
        alpha: scale numerator, nonzero; the update is multiplied by ``alpha / r`` (default
            ``r``: scale 1). PECTVLM: ``r = 1``, ``alpha = 16``.
        dropout: dropout on the input of the low-rank path.
        targets: projections to update: ``q``, ``k``, ``v``, ``out`` (attention), ``fc``,
            ``proj`` (MLP). Default ``('q', 'v')``, the LoRA paper's and PECTVLM's choice.
    """

    sites = (AdapterSite.ATTN_QKV, AdapterSite.ATTN_OUT, AdapterSite.MLP_FC,
             AdapterSite.MLP_PROJ)
    default_targets = ('q', 'v')
    accepts_packed_tokens = True
    positive_options = ('r',)

    def __init__(self, placement: AdapterPlacement, r: int = 8, alpha: float | None = None,
                 dropout: float = 0.0, targets: Sequence[str] = default_targets) -> None:
        super().__init__(placement)
        r = self.positive_option('r', r)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f'LoRA dropout must be in [0, 1), got {dropout}')
        if alpha == 0:
            raise ValueError('LoRA alpha=0 scales the update to zero, so training never changes '
                             'the model: give a nonzero alpha (leave it out for r, scale 1)')
        self.r = r
        self.alpha = float(r if alpha is None else alpha)
        self.scale = self.alpha / r
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()
        self.targets = tuple(t for t in check_targets(targets) if LORA_TARGETS[t] == self.site)
        if not self.targets:
            raise ValueError(f'LoRA placed at {self.site!s} but its targets '
                             f'{list(targets)} name no projection there')
        parts = 3 if self.site == AdapterSite.ATTN_QKV else 1
        if self.out_features % parts:
            raise ValueError(f'{self.site!s} output width {self.out_features} does not split '
                             'into q, k and v')
        self.part_width = self.out_features // parts
        self.lora_A = nn.ParameterDict()
        self.lora_B = nn.ParameterDict()
        for target in self.targets:
            a = torch.empty(r, self.in_features)
            # nn.Linear's own initialisation, as in the LoRA reference implementation.
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))
            self.lora_A[target] = nn.Parameter(a)
            self.lora_B[target] = nn.Parameter(torch.zeros(self.part_width, r))

    @classmethod
    def resolve_sites(cls, sites: Sequence[str] | None, cfg: dict) -> tuple[AdapterSite, ...]:
        """The sites of ``targets``; a config's ``sites``, when given, must be exactly those."""
        targets = check_targets(cfg.get('targets', cls.default_targets))
        derived = tuple(dict.fromkeys(LORA_TARGETS[t] for t in targets))
        if sites is not None and {AdapterSite(s) for s in sites} != set(derived):
            raise ValueError(f'LoRA targets {list(targets)} sit at {[str(s) for s in derived]}, '
                             f'but the config names sites {list(sites)}; drop sites (they '
                             'follow from targets)')
        return derived

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        """``[B, L, d_in]`` input of the frozen projection -> ``[B, L, d_out]`` delta.

        Each target draws its own dropout mask, ``(α / r) B_t A_t dropout_t(x)``: q, k and v
        are separate projections in the LoRA paper and in peft, which wraps each with its own
        dropout, so one mask shared by the thirds of ``attn.qkv`` would correlate their noise.
        """
        updates = {t: self.scale * F.linear(F.linear(self.dropout(x), self.lora_A[t]),
                                            self.lora_B[t])
                   for t in self.targets}
        if self.site != AdapterSite.ATTN_QKV:
            return updates[self.targets[0]]
        zeros = None
        parts = []
        for name in ('q', 'k', 'v'):
            if name in updates:
                parts.append(updates[name])
            else:
                if zeros is None:
                    zeros = x.new_zeros(*x.shape[:-1], self.part_width)
                parts.append(zeros)
        return torch.cat(parts, dim=-1)

    def settings(self) -> dict[str, Any]:
        """``scale``: the update's factor ``alpha / r`` (``r`` itself is in the weights'
        shapes, which name it when it differs)."""
        return dict(scale=self.scale)

    def extra_repr(self) -> str:
        return f'site={self.site!s}, targets={list(self.targets)}, r={self.r}, scale={self.scale}'
