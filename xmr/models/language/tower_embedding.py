"""The text tower's own token embedding as the embedding block of the target branch."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from xmr.models.language.embedding import EmbeddingBlock
from xmr.models.unowned import hold_unowned
from xmr.registry import MODELS

if TYPE_CHECKING:
    from xmr.models.backbones.base import TextTower


@MODELS.register_module()
class TowerTokenEmbedding(EmbeddingBlock):
    """Embeds target tokens with the frozen tower's own table (no trainable parameters).

    For towers that already read every language, such as Multilingual-CLIP's XLM-R: the
    branch then differs from the plain tower only by the language's adapters (PECTVLM). The
    branch's tokenizer must be the tower's own.

    Args:
        tower: the text tower (filled in by the branch; held, not registered, so its weights
            appear once, under the backbone).
        vocab_size: ids the branch's tokenizer emits; must fit the tower's table when the tower
            names its ``vocab_size``.
        width: the tower width ``D``.
        padding_idx: unused (the tower's table has its own); accepted because the branch fills it.
    """

    reads_tower = True

    def __init__(self, tower: TextTower, vocab_size: int, width: int,
                 padding_idx: int | None = None) -> None:
        super().__init__()
        hold_unowned(self, 'tower', tower)
        if vocab_size > tower.vocab_size:
            raise ValueError(f'the tokenizer emits {vocab_size} ids but the tower embeds '
                             f'{tower.vocab_size}; TowerTokenEmbedding needs the tower\'s own '
                             'tokenizer')
        self.width = width

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` ids -> ``[B, L, D]`` (without positions)."""
        return self.tower.embed_tokens(input_ids)
