"""The text tower's own token embedding as the embedding block of the target branch."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from xmr.models.language.embedding import EmbeddingBlock
from xmr.models.unowned import hold_unowned
from xmr.registry import MODELS

if TYPE_CHECKING:
    from xmr.models.backbones.base import TextTower
    from xmr.models.language.tokenizers import BaseTokenizer


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


def check_tower_tokenizer(source: BaseTokenizer, target: BaseTokenizer) -> None:
    """Refuse a target tokenizer other than the tower's own (the source tokenizer's vocabulary)
    for :class:`TowerTokenEmbedding`: the tower's table would read its ids as other tokens.
    Tokenizers that cannot list their vocabulary are not compared.

    Raises:
        ValueError: naming both vocabularies' digests and sizes.
    """
    mine, theirs = target.vocabulary_digest(), source.vocabulary_digest()
    if mine is not None and theirs is not None and mine != theirs:
        raise ValueError(f'model.language_branch.tokenizer: TowerTokenEmbedding embeds with the '
                         f"text tower's own table, which reads the source tokenizer's ids "
                         f'(vocabulary {theirs}, {source.vocab_size} ids), and the target '
                         f'tokenizer has another vocabulary ({mine}, {target.vocab_size} ids); '
                         "give the branch the backbone's tokenizer, or its own table "
                         "(embedding=dict(type='TargetEmbedding'))")
