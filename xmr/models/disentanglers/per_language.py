"""One condition disentangler per target language (DASD's #TP of 134M).

DASD's paper counts its trainable parameters (Table 1, #TP: 134M against MLA's 108M) as if the
semantics disentangling module, the parameter generator and the discriminator existed once per
target language: ``92,205,824 + 5 x (12 x 33,312 + 790,016 + 6,828,544 + 295,425)`` =
133,774,469 for five languages, where one module shared by all languages gives 102.1M. A
:class:`ConditionDisentangler` config with ``per_language=True`` builds this: the retriever
wraps one copy per language of its branch in :class:`PerLanguageDisentangler`, and each caption
goes through its own language's copy.
"""
from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Any

import torch

from xmr.models.adapters.language_adapters import LanguageModuleDict
from xmr.models.disentanglers.base import ConditionDisentangler
from xmr.models.disentanglers.discriminator import shuffled_negatives
from xmr.models.disentanglers.semantics import batch_contrastive
from xmr.models.host_to_device import host_to_device
from xmr.models.language.branch import select_tokens
from xmr.models.language.tokenizers import TokenBatch

__all__ = ['PerLanguageDisentangler']


class PerLanguageDisentangler(ConditionDisentangler):
    """A condition disentangler per language, each reading only its language's captions.

    The conditions of the language groups are put back in batch order; each loss is the mean
    of the groups' losses weighted by their sizes, i.e. the batch mean a shared module computes
    when its loss is a mean over captions. The mismatched source embeddings ``r^S−`` of an
    adversarial term are drawn from the whole batch (``r_negative``), as a shared module draws
    them, so a language with a single caption in the batch still has one; the wrapped module's
    ``forward`` takes them as ``r_negative`` (:class:`SemanticsDisentangler` does).

    Args:
        disentangler: one :class:`ConditionDisentangler` per language, ``{lang: module}``.
    """

    reads_languages = True

    def __init__(self, disentangler: dict[str, ConditionDisentangler]) -> None:
        super().__init__()
        if not disentangler:
            raise ValueError('PerLanguageDisentangler needs at least one language')
        contrastive = [lang for lang, module in disentangler.items()
                       if batch_contrastive(getattr(module, 'consistency_loss', None))]
        if contrastive:
            # Each language's module sees its group of the batch: under DDP the ranks' groups
            # differ, so a gather per group would pair one rank's with another's, or hang.
            loss = type(disentangler[contrastive[0]].consistency_loss).__name__
            raise ValueError(
                f'model.disentangler.consistency_loss ({loss}) is batch-contrastive: it '
                'contrasts each caption with the global batch, which a per-language module, '
                "seeing its language's captions of this process only, does not have: set "
                "model.disentangler.per_language=False, or a per-caption L_sc "
                "(dict(type='AlignmentLoss', kind='l1'), the paper's)")
        self.per_language = LanguageModuleDict(disentangler)

    @property
    def loss_names(self) -> Set[str]:
        return next(iter(self.per_language.values())).loss_names

    def settings(self) -> dict[str, Any]:
        """The languages' modules' (built from one config)."""
        return next(iter(self.per_language.values())).settings()

    # Its groups' sizes change with every batch's mix of languages: compiled code would be
    # made again for each; the module runs eagerly between the compiled parts of a step.
    @torch.compiler.disable
    def forward(self, embeddings: torch.Tensor, tokens: TokenBatch,
                r_source: torch.Tensor | None = None, langs: Sequence[str] | None = None
                ) -> tuple[dict[Any, torch.Tensor], dict[str, torch.Tensor]]:
        """Each language group through its own module.

        Args:
            embeddings: ``[B, L, D]`` target embeddings with positions.
            tokens: their :class:`TokenBatch`.
            r_source: ``[B, E]`` source embeddings (training), or ``None``.
            langs: the ``B`` captions' languages.

        Returns:
            ``({block: W^z [B, d_u, d_u]}, {name: size-weighted mean of the groups' losses})``.
        """
        if langs is None or len(langs) != embeddings.shape[0]:
            raise ValueError(f'a per-language disentangler needs the language of each of the '
                             f'{embeddings.shape[0]} captions, got {langs!r}')
        unknown = sorted(set(langs) - set(self.per_language))
        if unknown:
            raise ValueError(f'no disentangler for languages {unknown}; it has '
                             f'{list(self.per_language)}')
        condition: dict[Any, torch.Tensor] = {}
        losses: dict[str, torch.Tensor] = {}
        # Only a discriminator reads negatives: a batch of one caption trains the others.
        discriminated = any(getattr(module, 'discriminator', None) is not None
                            for module in self.per_language.values())
        r_negative = r_source[shuffled_negatives(embeddings.shape[0], device=embeddings.device)
                              ] if r_source is not None and discriminated else None
        for lang in dict.fromkeys(langs):
            index = host_to_device(torch.tensor([i for i, code in enumerate(langs)
                                                 if code == lang]), embeddings.device)
            training = {} if r_source is None else dict(
                r_source=r_source[index],
                r_negative=None if r_negative is None else r_negative[index])
            group_condition, group_losses = self.per_language[lang](
                embeddings[index], select_tokens(tokens, index), **training)
            for key, value in group_condition.items():
                if key not in condition:
                    condition[key] = value.new_empty((embeddings.shape[0], *value.shape[1:]))
                condition[key] = condition[key].index_copy(0, index, value)
            share = len(index) / embeddings.shape[0]
            for name, value in group_losses.items():
                losses[name] = losses.get(name, 0) + share * value
        return condition, losses
