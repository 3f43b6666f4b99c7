"""PECTVLM's translation-based alignment on top of the cross-lingual retriever.

Each routine trains a language's modules with the image–text contrastive loss on one text of the
pair and, in routines 1-3, adds ``λ · align(query, partner)`` between that text and a
translation (PECTVLM Sec. 3):

========================  ======================================  ==========================
routine                   image–text loss and test-time queries    aligned with
========================  ======================================  ==========================
``target_only`` (base 1)   native target caption                    —
``routine1``               native target caption                    original English caption
``routine2``               native target caption                    English MT'd into target
``translate_test`` (b. 2)  target caption MT'd into English         —
``routine3``               target caption MT'd into English         original English caption
========================  ======================================  ==========================

Every text runs through the target branch with the sample's language module; the original
English does too by default (the authors' code), or through the frozen tower
(``english_encoder='frozen'``). Routines 3 and translate-test also *query* with the English
translation at test time, so their evaluation data must carry ``back_translations``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from xmr.models.language.tokenizers import TokenBatch
from xmr.models.retrievers.base import feature_rows
from xmr.models.retrievers.cross_lingual import CrossLingualRetriever
from xmr.models.translation_data_preprocessor import TranslationDataPreprocessor
from xmr.registry import MODELS


@dataclass(frozen=True)
class Routine:
    """Which text a routine queries with and which it aligns that text to.

    Attributes:
        query: ``target`` (native target caption) or ``target_to_source`` (its MT into English).
        partner: ``source`` (original English), ``source_to_target`` (English MT'd into the
            target) or ``None`` (a baseline without alignment).
    """

    query: str
    partner: str | None


ROUTINES = {
    'target_only': Routine('target', None),
    'routine1': Routine('target', 'source'),
    'routine2': Routine('target', 'source_to_target'),
    'translate_test': Routine('target_to_source', None),
    'routine3': Routine('target_to_source', 'source'),
}
ENGLISH_ENCODERS = ('branch', 'frozen')


@MODELS.register_module()
class TranslationAlignmentRetriever(CrossLingualRetriever):
    """A :class:`CrossLingualRetriever` trained by one of PECTVLM's routines.

    Losses (phase weights): ``cm``, the image–text InfoNCE of the query text (τ = 0.01, scale
    100), and ``align``, the translation alignment weighted by ``λ`` (PECTVLM's
    ``text_loss_ratio``; default :class:`~xmr.models.losses.TranslationAlignmentLoss` with
    MSE). Only these two are built: the cross-lingual ``source_cm`` and ``cl`` are not this
    method's.

    Args:
        routine: one of :data:`ROUTINES`.
        english_encoder: how the original English of routines 1 and 3 is encoded: ``branch``
            (the target branch with the sample's language module, gradients flowing: the
            authors' code) or ``frozen`` (the frozen tower, a fixed teacher).
        **kwargs: :class:`CrossLingualRetriever` arguments (a ``language_branch`` is required,
            a ``disentangler`` is not supported; ``losses`` configures ``cm`` and ``align``).
            The data preprocessor is a
            :class:`~xmr.models.translation_data_preprocessor.TranslationDataPreprocessor`.
    """

    LOSSES = {
        'cm': 'InfoNCE between the query text and the media',
        'align': "λ · align(query, partner): PECTVLM's translation alignment",
    }
    DEFAULT_LOSSES = {
        'cm': dict(type='InfoNCELoss', temperature=0.01),
        'align': dict(type='TranslationAlignmentLoss', kind='mse'),
    }
    #: Where ``**kwargs`` go: a misspelt option is refused when the config loads, not by
    #: Python as the runner builds the model.
    forwards_options_to = (CrossLingualRetriever.__init__,)
    #: ``data_preprocessor`` without a ``type``: the options of the preprocessor that
    #: tokenises the translations.
    option_dicts: ClassVar[Mapping[str, tuple[Callable, tuple[str, ...]]]] = {
        **CrossLingualRetriever.option_dicts,
        'data_preprocessor': (TranslationDataPreprocessor, ())}

    def __init__(self, routine: str, english_encoder: str = 'branch', **kwargs: Any) -> None:
        if routine not in ROUTINES:
            raise ValueError(f"unknown routine '{routine}'; choose from {list(ROUTINES)}")
        if english_encoder not in ENGLISH_ENCODERS:
            raise ValueError(f"english_encoder '{english_encoder}' is not one of "
                             f'{ENGLISH_ENCODERS}')
        if kwargs.get('disentangler') is not None:
            raise ValueError('TranslationAlignmentRetriever takes no disentangler')
        if kwargs.get('language_branch') is None:
            raise ValueError('TranslationAlignmentRetriever needs a language_branch: the '
                             'per-language modules are what it trains')
        super().__init__(**kwargs)
        if not isinstance(self.data_preprocessor, TranslationDataPreprocessor):
            raise TypeError(f'TranslationAlignmentRetriever reads the translated texts a '
                            f'TranslationDataPreprocessor tokenises; got '
                            f'{type(self.data_preprocessor).__name__}')
        self.routine = routine
        self.spec = ROUTINES[routine]
        self.english_encoder = english_encoder
        self.data_preprocessor.source_through_branch = (
            self.spec.partner == 'source' and english_encoder == 'branch')
        self.data_preprocessor.queries_back_translated = self.spec.query == 'target_to_source'
        self.loss_weights = {'cm': 1.0}

    def check_phase(self, name: str, loss_weights: Mapping[str, float]) -> dict[str, float]:
        """The phase's weights; ``align`` needs a routine with a translation partner."""
        if loss_weights.get('align') and self.spec.partner is None:
            raise ValueError(f"phase {name}: routine '{self.routine}' is a baseline without "
                             "translation alignment; drop the 'align' weight")
        return super().check_phase(name, loss_weights)

    def check_schedule(self, loss_weights: Mapping[str, Mapping[str, float]]) -> None:
        """Refuse a schedule in which a routine with a translation partner never aligns.

        ``PhasedTrainLoop`` calls this once with every phase's weights (``{phase: weights}``).
        Without it, ``model.routine='routine1'`` set on a baseline's config trained the
        baseline under routine 1's name, and its checkpoint said routine 1.

        Raises:
            ValueError: no phase weighs ``align``.
        """
        if self.spec.partner is not None and not any(
                weights.get('align') for weights in loss_weights.values()):
            raise ValueError(f"routine '{self.routine}' aligns its queries with their "
                             f"'{self.spec.partner}' translations, but no phase of "
                             f'{sorted(loss_weights)} weighs align; give a phase '
                             'loss_weights=dict(cm=1.0, align=λ) (configs/pectvlm/_base_/'
                             "recipe.py: align_loss_weights) or train the baseline "
                             "routine='target_only'")

    # ----------------------------------------------------------------------------- texts
    def _tokens(self, batch: Mapping[str, Any], kind: str) -> TokenBatch:
        key = {'target': 'target_tokens', 'target_to_source': 'target_to_source_tokens',
               'source_to_target': 'source_to_target_tokens',
               'source': 'source_branch_tokens'}[kind]
        tokens = batch.get(key)
        if tokens is None:
            dataset_option = {
                'target_to_source_tokens': "translated_texts=['target_to_source']",
                'source_to_target_tokens': "translated_texts=['source_to_target']",
            }.get(key, 'the texts of CaptionPairDataset')
            raise ValueError(f"routine '{self.routine}' reads {key} in every training batch; "
                             f'give the dataset {dataset_option} and the model the '
                             'TranslationDataPreprocessor')
        return tokens

    def encode_partner(self, batch: Mapping[str, Any], langs: Sequence[str]) -> torch.Tensor:
        """``[B, E]`` embeddings of the routine's alignment partner texts."""
        if self.spec.partner == 'source' and self.english_encoder == 'frozen':
            # Cached features are the frozen tower's r^S of these very captions.
            features = feature_rows(batch.get('source_features'))
            if features is not None:
                return features
            tokens = batch.get('source_tokens')
            if tokens is None:
                raise ValueError(f"routine '{self.routine}' needs source_text in every batch")
            return self.encode_source(tokens)
        return self.encode_target(self._tokens(batch, self.spec.partner), langs)[0]

    # ----------------------------------------------------------------------------- modes
    def loss(self, media: torch.Tensor | None = None, langs: Sequence[str] | None = None,
             media_features: torch.Tensor | None = None,
             **batch: Any) -> dict[str, torch.Tensor]:
        """``{'loss_cm': w · InfoNCE(r_query, r_V), 'loss_align': λ · align(r_query, r_partner)}``.

        ``media_features`` (``[B, E]``, from the feature cache) replace the image tower.
        Contrastive terms see the whole global batch under DDP (``gather_with_grad``).
        """
        if langs is None:
            raise ValueError("this phase's losses need 'lang' in every batch")
        weights = self.loss_weights
        r_query = self.encode_target(self._tokens(batch, self.spec.query), langs)[0]
        losses: dict[str, torch.Tensor] = {}
        if 'cm' in weights:
            r_media = feature_rows(media_features)
            if r_media is None:
                r_media = self.encode_media(self._require(media, 'media'))
            losses['loss_cm'] = self.pair_loss('cm', r_query, r_media, batch.get('media_keys'))
        if 'align' in weights:
            losses['loss_align'] = self.pair_loss('align', r_query,
                                                  self.encode_partner(batch, langs),
                                                  batch.get('media_keys'))
        return losses

    @torch.no_grad()
    def predict(self, caption_tokens: Mapping[str, tuple[TokenBatch, torch.Tensor]] | None = None,
                back_translation_tokens: Mapping[str, tuple[TokenBatch, torch.Tensor]]
                | None = None, **batch: Any) -> list[dict[str, Any]]:
        """Embed a gallery batch; target languages query with the routine's text.

        Routines querying with ``target_to_source`` replace each target language's captions by
        their back-translations (still encoded with that language's module); the source
        language keeps its own captions through the frozen tower.

        Raises:
            ValueError: a target language without back-translations under such a routine.
        """
        if self.spec.query == 'target_to_source' and caption_tokens:
            back = dict(back_translation_tokens or {})
            queries = {}
            for lang, value in caption_tokens.items():
                if lang == self.source_language:
                    queries[lang] = value
                elif lang in back:
                    queries[lang] = back[lang]
                else:
                    raise self._no_back_translations([lang], 'evaluation batch')
            caption_tokens = queries
        return super().predict(caption_tokens=caption_tokens, **batch)

    def check_gallery(self, metainfo: Mapping[str, Any], where: str) -> None:
        """Fail unless a gallery carries the back-translations the routine queries with.

        Checked before training and testing: :meth:`predict` finds them missing only at the
        first validation, ``val_interval`` steps into training.

        Args:
            metainfo: the gallery's ``metainfo`` (``languages``, ``back_translated_languages``).
            where: what the gallery is (``'val dataset 0 (RetrievalDataset)'``), for the message.

        Raises:
            ValueError: naming ``where``, the target languages without back-translations and
                the dataset option that adds them.
        """
        if self.spec.query != 'target_to_source':
            return
        given = set(metainfo.get('back_translated_languages') or ())
        missing = [lang for lang in metainfo.get('languages') or ()
                   if lang != self.source_language and lang not in given]
        if missing:
            raise self._no_back_translations(missing, where)

    def _no_back_translations(self, langs: Sequence[str], where: str) -> ValueError:
        named = ', '.join(repr(lang) for lang in langs)
        return ValueError(
            f"{where}: routine '{self.routine}' queries {langs} with their captions "
            'machine-translated into the source language; give the evaluation dataset '
            f'back_translated_languages=[..., {named}] (attached to its file with '
            'tools/data/attach_back_translations.py, docs/data.md)')

    def checkpoint_facts(self) -> dict[str, Any]:
        """The parent's checkpoint facts plus the routine (its test-time queries differ)."""
        return dict(super().checkpoint_facts(), routine=self.routine)
