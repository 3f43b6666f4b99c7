"""The static bottleneck adapter of MLA (DASD's "Traditional Adapter")."""
from __future__ import annotations

import torch
from torch import nn

from xmr.models.adapters.base import AdapterContext, AdapterPlacement, AdapterSite, BaseAdapter
from xmr.registry import ADAPTERS


@ADAPTERS.register_module()
class StaticAdapter(BaseAdapter):
    """``x + W_up ReLU(W_down x)`` after a frozen text block, one set per language.

    In the target branch (:class:`~xmr.models.adapters.language_adapters.LanguageAdapters`) on a
    post-LN tower (BERT, XLM-R: :attr:`~xmr.models.backbones.base.TextTower.post_norm`) the
    defaults are ``sites=['mlp.output']``, the FFN's output before ``LN(x + h)`` (Houlsby's
    and Pfeiffer's place), and ``zero_init=True``: after the block, outside any LayerNorm, the
    adapter drives the pooled embedding directly and collapses a short, high-rate cross-lingual
    phase to the teacher's mean embedding, and with PyTorch's initialisation it starts far from
    the identity (docs/methods/text_teacher.md has the measurements). A config's own ``sites``
    and ``zero_init`` win. DASD's SDM builds its stream adapters ``A^sr`` / ``A^sa`` itself, at
    ``block.output`` with PyTorch's initialisation.

    Args:
        placement: where the instance sits (:class:`AdapterPlacement`).
        hidden: bottleneck width (256 in MLA and DASD).
        zero_init: start ``W_up`` at zero so a fresh adapter is the identity; MLA keeps PyTorch's
            default initialisation, which is the default here too except on post-LN towers.
    """

    sites = (AdapterSite.BLOCK_OUTPUT, AdapterSite.ATTN_OUTPUT, AdapterSite.MLP_OUTPUT)
    post_norm_defaults = {'sites': [str(AdapterSite.MLP_OUTPUT)], 'zero_init': True}
    accepts_packed_tokens = True
    positive_options = ('hidden',)

    def __init__(self, placement: AdapterPlacement, hidden: int = 256,
                 zero_init: bool = False) -> None:
        super().__init__(placement)
        width = self.width
        hidden = self.positive_option('hidden', hidden)
        self.down = nn.Linear(width, hidden)
        self.up = nn.Linear(hidden, width)
        if zero_init:
            nn.init.zeros_(self.up.weight)
            nn.init.zeros_(self.up.bias)

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        """``[B, L, D] -> [B, L, D]``."""
        return x + self.up(torch.relu(self.down(x)))
