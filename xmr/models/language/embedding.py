"""The embedding block of the target-language branch."""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from xmr.models.weight_files import (
    CHECKPOINT_SUFFIXES,
    fetch_weights,
    read_weights,
    weights_file,
)
from xmr.registry import MODELS

#: Where Hugging Face checkpoints keep the input word embeddings: ``BertForPreTraining`` (mBERT's
#: released ``pytorch_model.bin``), ``BertModel`` / ``XLMRobertaModel`` saves, ``XLMRobertaFor*``.
WORD_EMBEDDING_KEYS = ('bert.embeddings.word_embeddings.weight',
                       'embeddings.word_embeddings.weight',
                       'roberta.embeddings.word_embeddings.weight')


class EmbeddingBlock(nn.Module):
    """Base of the target branch's embedding blocks: ids ``[B, L]`` -> ``[B, L, D]``, no positions.

    The branch builds the block with ``vocab_size``, ``width`` and ``padding_idx`` filled in
    from its tokenizer and tower.

    Attributes:
        reads_tower: the block embeds with the tower's own table, the branch passing its text
            tower as ``tower``: its ids are the tower's, which the branch and the disentangler
            then read as the tower's own forward does (a caption's own padding id masked, the
            positions the source path's: :meth:`~xmr.models.language.branch.
            TargetLanguageBranch.read`).
        given_by_builder: arguments the branch passes, which a config may not give: the
            config's load refuses them. A class that ``reads_tower`` has ``tower`` among them
            without saying so.
    """

    reads_tower: ClassVar[bool] = False
    given_by_builder: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.reads_tower and 'tower' not in cls.given_by_builder:
            cls.given_by_builder = (*cls.given_by_builder, 'tower')


@MODELS.register_module()
class TargetEmbedding(EmbeddingBlock):
    """Multilingual token ids -> word-embedding table -> ``W_e`` -> tower width.

    Positions are added afterwards by the text tower (CLIP's frozen positional embedding), so
    this block holds only what is trained: the table and ``W_e`` (DASD Sec. 3, "embedding block").

    Args:
        vocab_size: rows of the table (the target tokenizer's vocabulary).
        width: the text tower's width ``D``; must match the backbone.
        table_width: width of the table (768 for mBERT).
        pretrained: whose input word embeddings initialise the table: a local checkpoint file
            (mBERT's ``pytorch_model.bin`` or ``model.safetensors``) or a folder holding one,
            read without building the model; else a Hugging Face model name
            (``'bert-base-multilingual-cased'``, from the hub cache); ``None`` for a fresh table.
        padding_idx: id whose row gets no gradient (zero, unless ``pretrained`` gives it).
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
        weights, source = _word_embeddings(pretrained)
        if tuple(weights.shape) != (vocab_size, table_width):
            raise ValueError(f'word embeddings of {source} are {tuple(weights.shape)}, the '
                             f'configured table is ({vocab_size}, {table_width}); set vocab_size '
                             "to the target tokenizer's vocabulary and table_width to the "
                             "checkpoint's hidden size (mBERT: 119547 x 768), or give the "
                             "checkpoint of the tokenizer's model")
        with torch.no_grad():
            self.table.weight.copy_(weights)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` ids -> ``[B, L, D]`` embeddings (without positions)."""
        return self.proj(self.table(input_ids))


def _word_embeddings(pretrained: str) -> tuple[torch.Tensor, str]:
    """``([V, W] table, source)`` from a local checkpoint, or from the hub by model name."""
    if not Path(pretrained).exists() and not pretrained.endswith(CHECKPOINT_SUFFIXES):
        from transformers import AutoModel

        model = fetch_weights(
            lambda: AutoModel.from_pretrained(pretrained),
            f"the word embeddings of '{pretrained}' (a Hugging Face hub name)",
            "download its pytorch_model.bin or model.safetensors once and set the embedding's "
            'pretrained=<that file or its folder> (--cfg-options '
            'model.language_branch.embedding.pretrained=FILE)')
        return model.get_input_embeddings().weight.detach(), pretrained
    path = weights_file(pretrained, 'word-embedding checkpoint')
    state = read_weights(path, 'word-embedding checkpoint')
    found = [key for key in WORD_EMBEDDING_KEYS if key in state]
    if not found:
        raise ValueError(f'{path} has no word-embedding table: none of '
                         f'{list(WORD_EMBEDDING_KEYS)} among its {len(state)} keys (first: '
                         f'{list(state)[:5]}); give the pytorch_model.bin or model.safetensors '
                         'of the multilingual encoder (bert-base-multilingual-cased)')
    return state[found[0]], f'{path} ({found[0]})'
