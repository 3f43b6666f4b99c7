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

    A batch-contrastive ``L_sc`` (``consistency_loss=dict(type='InfoNCELoss')``) contrasts each
    caption with the whole batch, as a shared module's does: the groups' ``f^sr`` (each from its
    language's module) are put back in batch order and one loss of the first language's module
    (all are built from one config) compares them with the batch's ``r^S``, the global batch
    under DDP (:meth:`SemanticsDisentangler.consistency`: one gather a step, whatever languages
    a process's batch holds). With one language a batch it is that language's module's loss of
    its batch. Such a loss may train no parameters of its own (a learnable temperature would be
    one per language, and the batch's loss could use only one of them): that is refused.

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
        #: A batch-contrastive L_sc is one loss over the whole batch, computed here.
        self.batch_consistency = bool(contrastive)
        if contrastive:
            loss = disentangler[contrastive[0]].consistency_loss
            trained = [name for name, parameter in loss.named_parameters()
                       if parameter.requires_grad]
            if trained:
                # One loss over a batch that mixes languages has no one language's copy to use.
                raise ValueError(
                    f'model.disentangler.consistency_loss ({type(loss).__name__}) trains '
                    f'{", ".join(trained)} of its own, one per language with '
                    'per_language=True, but a batch-contrastive L_sc is one loss over every '
                    "language's captions of the batch (each caption's negatives), which can "
                    "use only one: fix it (InfoNCELoss: learnable=False, a fixed temperature), "
                    'or set model.disentangler.per_language=False (one L_sc and its '
                    'parameters for all languages)')
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
            ``({block: W^z [B, d_u, d_u]}, {name: size-weighted mean of the groups' losses})``;
            a batch-contrastive ``sc`` is the loss of the whole batch instead.
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
        batch_consistency = self.batch_consistency and r_source is not None
        f_sr = None
        for lang in dict.fromkeys(langs):
            index = host_to_device(torch.tensor([i for i, code in enumerate(langs)
                                                 if code == lang]), embeddings.device)
            training = {} if r_source is None else dict(
                r_source=r_source[index],
                r_negative=None if r_negative is None else r_negative[index])
            if batch_consistency:
                # L_sc left to the whole batch's f^sr, below.
                group_condition, group_losses, found = self.per_language[lang].\
                    features_and_losses(embeddings[index], select_tokens(tokens, index),
                                        consistency=False, **training)
                if f_sr is None:
                    f_sr = found['sr'].new_empty((embeddings.shape[0], found['sr'].shape[1]))
                f_sr = f_sr.index_copy(0, index, found['sr'])
            else:
                group_condition, group_losses = self.per_language[lang](
                    embeddings[index], select_tokens(tokens, index), **training)
            for key, value in group_condition.items():
                if key not in condition:
                    condition[key] = value.new_empty((embeddings.shape[0], *value.shape[1:]))
                condition[key] = condition[key].index_copy(0, index, value)
            share = len(index) / embeddings.shape[0]
            for name, value in group_losses.items():
                losses[name] = losses.get(name, 0) + share * value
        if batch_consistency:
            module = next(iter(self.per_language.values()))
            sc = module.loss_weights['sc'] * module.consistency(
                f_sr, r_source.detach().to(embeddings.dtype))
            losses = {'sc': sc, **losses}  # the shared module's order
        return condition, losses
