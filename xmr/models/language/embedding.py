"""The embedding block of the target-language branch."""
from __future__ import annotations

import torch
from torch import nn

from xmr.registry import MODELS


@MODELS.register_module()
class TargetEmbedding(nn.Module):
    """Multilingual token ids -> word-embedding table -> ``W_e`` -> tower width.

    Positions are added afterwards by the text tower (CLIP's frozen positional embedding), so
    this block holds only what is trained: the table and ``W_e`` (DASD Sec. 3, "embedding block").

    Args:
        vocab_size: rows of the table (the target tokenizer's vocabulary).
        width: the text tower's width ``D``; must match the backbone.
        table_width: width of the table (768 for mBERT).
        pretrained: a Hugging Face model name or folder whose input word embeddings initialise
            the table (e.g. ``'bert-base-multilingual-cased'``); ``None`` for a fresh table.
        padding_idx: id whose row stays zero.
        sparse: emit sparse gradients for the table (only the rows in the batch are updated;
            pair with ``SparseAdam``).
    """

    def __init__(self, vocab_size: int, width: int, table_width: int = 768,
                 pretrained: str | None = None, padding_idx: int | None = None,
                 sparse: bool = False) -> None:
        super().__init__()
        self.width = width
        self.table = nn.Embedding(vocab_size, table_width, padding_idx=padding_idx,
                                  sparse=sparse)
        nn.init.normal_(self.table.weight, std=0.02)
        if padding_idx is not None:
            with torch.no_grad():
                self.table.weight[padding_idx].zero_()
        if pretrained is not None:
            self._load_table(pretrained, vocab_size, table_width)
        self.proj = nn.Linear(table_width, width)

    def _load_table(self, pretrained: str, vocab_size: int, table_width: int) -> None:
        from transformers import AutoModel

        weights = AutoModel.from_pretrained(pretrained).get_input_embeddings().weight.detach()
        if tuple(weights.shape) != (vocab_size, table_width):
            raise ValueError(f'word embeddings of {pretrained} are {tuple(weights.shape)}, the '
                             f'configured table is ({vocab_size}, {table_width})')
        with torch.no_grad():
            self.table.weight.copy_(weights)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` ids -> ``[B, L, D]`` embeddings (without positions)."""
        return self.proj(self.table(input_ids))
