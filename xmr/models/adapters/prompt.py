"""Prompts: vectors inserted after the start token of every caption, one set per language.

A prompt lengthens the sequence. It acts at the ``input`` site, on the token embeddings before
the tower adds its positions, so the positions cover the lengthened sequence exactly as if the
prompt had been part of the text; it marks the inserted tokens as real in
``ctx.attention_mask`` (they are attended to and, in mean-pooling towers, pooled) and moves
``ctx.eos_index`` past them. PECTVLM inserts its prompts after ``<s>`` in the same way.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from xmr.models.adapters.base import AdapterContext, AdapterPlacement, AdapterSite, BaseAdapter
from xmr.models.unowned import hold_unowned
from xmr.registry import ADAPTERS


def insert_after_start(x: torch.Tensor, prompt: torch.Tensor, ctx: AdapterContext,
                       start: int = 1) -> torch.Tensor:
    """Insert ``prompt`` after the first ``start`` tokens of every sequence (its start token)
    and update the mask and EOS index.

    Args:
        x: ``[B, L, D]`` token embeddings.
        prompt: ``[N, D]`` prompt vectors.
        ctx: its ``attention_mask`` ``[B, L]`` becomes ``[B, L + N]`` (prompt positions True)
            and its ``eos_index`` ``[B]`` grows by ``N``.
        start: tokens kept before the prompt: the tokenizer's
            :attr:`~xmr.models.language.tokenizers.BaseTokenizer.start_tokens`.

    Returns:
        ``[B, L + N, D]``.
    """
    if ctx.attention_mask is None or ctx.eos_index is None:
        raise ValueError('a prompt needs ctx.attention_mask and ctx.eos_index to extend')
    batch, num = x.shape[0], prompt.shape[0]
    expanded = prompt.to(x.dtype).unsqueeze(0).expand(batch, num, -1)
    mask = ctx.attention_mask
    ctx.attention_mask = torch.cat([mask[:, :start], mask.new_ones(batch, num), mask[:, start:]],
                                   dim=1)
    ctx.eos_index = ctx.eos_index + num
    return torch.cat([x[:, :start], expanded, x[:, start:]], dim=1)


@ADAPTERS.register_module()
class SoftPrompt(BaseAdapter):
    """``N`` trainable vectors inserted after the start token (prompt tuning); first, for a
    tokenizer that writes none (T5's).

    Args:
        placement: where the instance sits (:class:`AdapterPlacement`).
        num_tokens: ``N`` (PECTVLM: 4).
        init_std: standard deviation of their normal initialisation (PECTVLM: 0.02).
    """

    sites = (AdapterSite.INPUT,)
    positive_options = ('num_tokens',)

    def __init__(self, placement: AdapterPlacement, num_tokens: int = 4,
                 init_std: float = 0.02) -> None:
        super().__init__(placement)
        num_tokens = self.positive_option('num_tokens', num_tokens)
        self.prompt = nn.Parameter(torch.randn(num_tokens, self.width) * init_std)
        self.start = 1

    def attach(self, tokenizer: Any, embedding: nn.Module) -> None:
        """Read where the caption's pieces begin (the tokenizer's ``start_tokens``)."""
        self.start = tokenizer.start_tokens

    @property
    def num_tokens(self) -> int:
        return self.prompt.shape[0]

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        """``[B, L, D] -> [B, L + N, D]``; updates ``ctx.attention_mask`` and ``ctx.eos_index``."""
        return insert_after_start(x, self.prompt, ctx, self.start)


@ADAPTERS.register_module()
class HardPrompt(BaseAdapter):
    """A text prefix such as ``"a photo of"`` inserted after the start token (first, for a
    tokenizer that writes none: T5's).

    The text is tokenised with the branch's tokenizer (its specials dropped,
    :meth:`~xmr.models.language.tokenizers.BaseTokenizer.pieces`) and
    embedded with the branch's embedding block when the branch attaches (:meth:`attach`).
    Frozen (the default), the prefix is re-embedded at every forward: the caption is encoded
    exactly as ``"<prefix> <caption>"`` would be when the tokenizer splits them the same way.
    Trainable, those embeddings only initialise ``N`` prompt vectors (PECTVLM's hard prompt).

    Args:
        placement: where the instance sits (:class:`AdapterPlacement`).
        text: the prefix, in the source or the target language.
        trainable: learn the prompt vectors, initialised from the text.
    """

    sites = (AdapterSite.INPUT,)

    def __init__(self, placement: AdapterPlacement, text: str, trainable: bool = False) -> None:
        super().__init__(placement)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f'a hard prompt needs a non-empty text, got {text!r}')
        self.text = text
        self.trainable = trainable
        self.embedding: nn.Module | None = None

    def attach(self, tokenizer: Any, embedding: nn.Module) -> None:
        """Tokenise :attr:`text` and keep the embedding block (frozen) or copy its vectors."""
        ids = tokenizer.pieces(self.text)
        if not ids:
            raise ValueError(f'hard prompt {self.text!r} tokenises to no token between the '
                             'start and end specials')
        self.start = tokenizer.start_tokens
        ids = torch.tensor(ids, dtype=torch.long)
        if self.trainable:
            with torch.no_grad():
                self.prompt = nn.Parameter(embedding(ids).detach().clone())
        else:
            self.register_buffer('token_ids', ids, persistent=False)
            hold_unowned(self, 'embedding', embedding)

    @property
    def num_tokens(self) -> int:
        self._check_attached()
        return (self.prompt if self.trainable else self.token_ids).shape[0]

    def _check_attached(self) -> None:
        if not hasattr(self, 'prompt') and not hasattr(self, 'token_ids'):
            raise RuntimeError(f'hard prompt {self.text!r} was never attached to a branch; '
                               'build it through TargetLanguageBranch')

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        """``[B, L, D] -> [B, L + N, D]``; updates ``ctx.attention_mask`` and ``ctx.eos_index``."""
        self._check_attached()
        prompt = self.prompt if self.trainable else self.embedding(
            self.token_ids.to(x.device))
        return insert_after_start(x, prompt, ctx, self.start)

    def settings(self) -> dict[str, Any]:
        """A frozen prompt's ``text`` (embedded at every forward); a trainable one's only
        initialised its weights."""
        return {} if self.trainable else dict(text=self.text)

    def extra_repr(self) -> str:
        return f'text={self.text!r}, trainable={self.trainable}'
