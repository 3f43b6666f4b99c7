"""An image–text dual encoder trained on its towers' token outputs, with or without CDDS.

Where :class:`~xmr.models.retrievers.cross_lingual.CrossLingualRetriever` teaches a frozen
model new languages through a branch, this model aligns the two towers themselves (CDDS's
setting, paper §3): a backbone gives patch and word tokens in one joint width
(:meth:`encode_image_tokens`,
:meth:`encode_text_tokens` of :class:`~xmr.models.backbones.base.VisionLanguageBackbone`), and

* **plain** (no disentangler): the towers' own pooled embeddings are the retrieval embeddings,
  trained with ``itc`` (InfoNCE); ``distribution_sampling`` adds CDDS's distribution sampling
  on the raw tokens as a plug-in loss (paper Table 4);
* **CDDS** (a token-level disentangler, :class:`~xmr.models.disentanglers.cdds.CDDSDisentangler`):
  its losses train the decoupling; retrieval embeddings are the pooled *semantic* components
  only (paper §3.5), which ``itc`` may also contrast; ``tower_itc`` contrasts the towers' own
  embeddings beneath (to pretrain towers from scratch).

Text is read by the backbone's own text tower. The captions it trains on are the pairs'
source captions (``train_text='source'``) or their target-language captions
(``train_text='target'``): with a multilingual tower (mBERT, CCLM's XLM-R) the second is the
cross-lingual setting, a dual encoder that reads the target languages directly
(``docs/methods/cdds.md``). ``predict`` emits what :class:`~xmr.evaluation.RetrievalMetric`
reads, as the cross-lingual retriever does.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from xmr.datasets.languages import normalize_language, normalize_languages
from xmr.models.backbones.base import (
    TokenOutput,
    VisionLanguageBackbone,
    configured_tower_shape,
)
from xmr.models.disentanglers.base import (
    TokenDisentangler,
    build_disentangler,
    disentangler_class,
)
from xmr.models.language.tokenizers import TokenBatch
from xmr.models.losses.cdds import patch_word_similarity
from xmr.models.retrievers.base import (
    DISENTANGLER_SCALE,
    BaseRetriever,
    gallery_batch,
    unit_rows,
)
from xmr.registry import MODELS, with_defaults
from xmr.utils.cli import UserKeyError

if TYPE_CHECKING:
    from xmr.evaluation.token_scoring import TokenScore

#: Which captions of a training pair the text tower reads.
TRAIN_TEXTS = ('source', 'target')
#: How retrieval scores a pair: the cosine of the retrieval embeddings, or the patch–word
#: matching of the retrieval tokens (CDDS §3.5), which ``predict`` then hands to the metric.
RETRIEVAL_SCORES = ('pooled', 'patch_word')


@MODELS.register_module()
class DualEncoderRetriever(BaseRetriever):
    """Image–text dual encoder on token outputs, optionally decoupled by CDDS.

    Args:
        backbone: ``MODELS`` config of a backbone with token-level encoders
            (``OpenCLIPBackbone``, ``ViTBERTBackbone``, ``CCLMDualStream``).
        disentangler: ``DISENTANGLERS`` config of a token-level disentangler (``dim`` defaults
            to the backbone's ``embed_dim``), or ``None`` for the plain dual encoder.
        losses: ``{name: MODELS config}`` for ``itc`` (an :class:`InfoNCELoss` on the
            retrieval embeddings), ``tower_itc`` (an :class:`InfoNCELoss` on the towers' own
            pooled embeddings, e.g. to pretrain towers from scratch before CDDS; the same as
            ``itc`` without a disentangler) and ``distribution_sampling`` (a
            ``CDDSDistributionSamplingLoss``, ``dim`` filled in);
            default ``itc`` alone, InfoNCE with a learned temperature from 0.05. A phase's
            ``loss_weights`` choose among these and ``disentangler``, one weight on all the
            disentangler's (already α-weighted) terms; the disentangler's own switches remove
            single terms (CDDS Table 3).
        languages: caption languages the text tower reads; ``predict`` refuses others.
        source_language: language of the pairs' source captions.
        train_text: ``'source'`` or ``'target'`` captions of each training pair.
        retrieval_score: ``'pooled'`` (the cosine of the retrieval embeddings) or
            ``'patch_word'`` (``predict`` also emits each item's retrieval tokens, the semantic
            components with CDDS, and :func:`~xmr.models.losses.cdds.patch_word_similarity`,
            for ``RetrievalMetric(scoring='tokens' | 'tokens_rerank')``).
        data_preprocessor: config of the preprocessor (default ``RetrievalDataPreprocessor``).
        init_cfg: MMEngine init config.
    """

    LOSSES = {
        'itc': 'symmetric InfoNCE between the retrieval embeddings of images and captions',
        'tower_itc': "symmetric InfoNCE between the towers' own pooled embeddings",
        'distribution_sampling': 'CDDS distribution sampling on the raw token outputs (Table 4)',
    }

    def __init__(self, backbone: dict, disentangler: dict | None = None,
                 losses: Mapping[str, dict] | None = None,
                 languages: Sequence[str] = ('en',), source_language: str = 'en',
                 train_text: str = 'source', retrieval_score: str = 'pooled',
                 data_preprocessor: dict | None = None, init_cfg: dict | None = None) -> None:
        super().__init__(data_preprocessor, init_cfg)
        # Before the backbone, whose weights may take minutes to load.
        self.check_config(dict(backbone=backbone, disentangler=disentangler, languages=languages,
                               source_language=source_language, train_text=train_text,
                               retrieval_score=retrieval_score))
        languages = normalize_languages(languages, 'DualEncoderRetriever languages')
        source_language = normalize_language(source_language,
                                             'DualEncoderRetriever source_language')
        self.backbone = self.build_backbone(backbone)
        if not isinstance(self.backbone, VisionLanguageBackbone):
            raise TypeError(f'{type(self.backbone).__name__} is not a VisionLanguageBackbone, '
                            'whose token-level encoders the dual encoder reads')
        self.languages = languages
        self.source_language, self.train_text = source_language, train_text
        self.retrieval_score = retrieval_score
        if disentangler is not None:
            disentangler_class(disentangler, TokenDisentangler, type(self).__name__).check_tower(
                disentangler, self.backbone.text_tower)
            self.disentangler = build_disentangler(disentangler, TokenDisentangler,
                                                   type(self).__name__,
                                                   dim=self.backbone.embed_dim)
        self.build_losses(
            losses if losses is not None
            else dict(itc=dict(type='InfoNCELoss', temperature=0.05, learnable=True)),
            default_args=dict(distribution_sampling=dict(dim=self.backbone.embed_dim)))
        self.data_preprocessor.bind(self.backbone.tokenizer, self.backbone.tokenizer,
                                    self.backbone.image_mean, self.backbone.image_std,
                                    source_language)
        self.set_phase('train', dict.fromkeys(sorted(self.loss_names()), 1.0))

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """Refuse, from the config alone, what ``__init__`` would: at the config's load
        (:func:`~xmr.registry.check_part_options`), before the runner makes the work dir, and in
        ``__init__`` before the backbone is built.

        Args:
            cfg: the model's config; ``backbone``, ``disentangler``, ``languages``,
                ``source_language``, ``train_text`` and ``retrieval_score`` are read (defaults
                where left out).

        Raises:
            ValueError: an unknown ``train_text`` or ``retrieval_score``, no ``languages``, or
                ``train_text='source'`` with the source language not among them (in any form:
                ``eng`` is ``en``); a disentangler option that does not fit the tokens, where
                the backbone's config tells their width (CDDS's ``dim``:
                :meth:`TokenDisentangler.check_tower`).
            TypeError: a disentangler that is no :class:`TokenDisentangler` (DASD's SDM).
            LanguageCodeError: a code no form of which is known, named by its option.
        """
        super().check_config(cfg)
        options = with_defaults(cls, cfg)
        train_text, score = options['train_text'], options['retrieval_score']
        if train_text not in TRAIN_TEXTS:
            raise ValueError(f"train_text '{train_text}' is not one of {TRAIN_TEXTS}")
        if score not in RETRIEVAL_SCORES:
            raise ValueError(f"retrieval_score '{score}' is not one of {RETRIEVAL_SCORES}")
        if not options['languages']:
            raise ValueError('the dual encoder needs at least one caption language')
        # Canonical both, as the datasets' codes are: 'eng' must match 'en'.
        languages = normalize_languages(options['languages'], 'DualEncoderRetriever languages')
        source = normalize_language(options['source_language'],
                                    'DualEncoderRetriever source_language')
        if train_text == 'source' and source not in languages:
            raise ValueError(f"train_text='source' reads {source} captions, which are "
                             f'not among languages {list(languages)}')
        disentangler = options['disentangler']
        if disentangler is not None:
            kind = disentangler_class(disentangler, TokenDisentangler, cls.__name__)
            tower = configured_tower_shape(options.get('backbone'))
            if tower is not None:
                kind.check_tower(disentangler, tower)

    @classmethod
    def configured_languages(cls, cfg: Mapping[str, Any]) -> list[str]:
        """The config's ``languages`` (default ``('en',)``), as the built model reads them."""
        return normalize_languages(with_defaults(cls, cfg)['languages'],
                                   'DualEncoderRetriever languages')

    # ----------------------------------------------------------------------------- encoders
    def encode_media_tokens(self, media: torch.Tensor) -> TokenOutput:
        """Images ``[B, 3, H, W]`` or videos ``[B, T, 3, H, W]`` -> tokens ``[B, N, E]``."""
        with self.frozen_tower():
            return self.backbone.encode_media_tokens(media)

    def encode_text_tokens(self, tokens: TokenBatch) -> TokenOutput:
        """Tokenised captions -> word tokens ``[B, L, E]`` (every position, mask of reals)."""
        with self.frozen_tower():
            return self.backbone.encode_text_tokens(tokens)

    def retrieval_tokens(self, out: TokenOutput, modality: str) -> tuple[torch.Tensor,
                                                                          torch.Tensor]:
        """The tokens retrieval matches and the embedding it compares, from a tower's output.

        Args:
            out: a tower's :class:`TokenOutput` (tokens ``[B, N, E]``).
            modality: ``'image'`` or ``'text'``.

        Returns:
            ``tokens [B, N, E]`` (semantic components with CDDS, else the tower's tokens) and
            ``embedding [B, E]`` (their pooling with CDDS, else the tower's own embedding).
        """
        if self.disentangler is None:
            return out.tokens, out.pooled
        encode = self.disentangler.encode_image if modality == 'image' \
            else self.disentangler.encode_text
        semantic = encode(out.tokens, out.mask)
        return semantic, self.disentangler.pool(semantic, out.mask)

    def media_head(self) -> dict[str, nn.Module]:
        """The disentangler, when there is one: CDDS's retrieval embedding of a media pools its
        semantic components."""
        return {} if self.disentangler is None else {'disentangler': self.disentangler}

    def token_score(self) -> TokenScore | None:
        """:func:`~xmr.models.losses.cdds.patch_word_similarity` with
        ``retrieval_score='patch_word'``, else ``None`` (the pooled cosine)."""
        return patch_word_similarity if self.retrieval_score == 'patch_word' else None

    # ----------------------------------------------------------------------------- modes
    def training_text(self, source_tokens: TokenBatch | None, target_tokens: TokenBatch | None,
                      langs: Sequence[str] | None) -> TokenBatch:
        """The captions of a training batch that ``train_text`` selects, checked."""
        if self.train_text == 'source':
            if source_tokens is None:
                raise ValueError("train_text='source' needs 'source_text' in every batch")
            return source_tokens
        if target_tokens is None:
            raise ValueError("train_text='target' needs a 'target_text' for every item; the "
                             'dataset gave none (source-only items?)')
        self.check_languages(sorted(set(langs or ())), 'training captions')
        return target_tokens

    def loss(self, media: torch.Tensor | None = None, source_tokens: TokenBatch | None = None,
             target_tokens: TokenBatch | None = None, langs: Sequence[str] | None = None,
             media_keys: torch.Tensor | None = None, **_: Any) -> dict[str, torch.Tensor]:
        """The current phase's weighted losses, ``{'loss_<name>': scalar}``.

        Args:
            media: ``[B, 3, H, W]`` images (or ``[B, T, 3, H, W]`` videos).
            source_tokens / target_tokens: the pairs' captions; ``train_text`` picks one.
            langs: language of each target caption.
            media_keys: int64 ``[B]``, one per medium, for losses that mask the other captions
                of a medium (:meth:`pair_loss`).
        """
        if media is None:
            raise ValueError("the dual encoder needs 'media' in every training batch")
        weights = self.loss_weights
        image = self.encode_media_tokens(media)
        text = self.encode_text_tokens(self.training_text(source_tokens, target_tokens, langs))
        losses: dict[str, torch.Tensor] = {}
        image_embedding, text_embedding = image.pooled, text.pooled
        if self.disentangler is not None and DISENTANGLER_SCALE in weights:
            out = self.disentangler(image.tokens, image.mask, text.tokens, text.mask)
            losses.update(self.disentangler_losses(out['losses']))
            image_embedding = self.disentangler.pool(out['image_semantic'], image.mask)
            text_embedding = self.disentangler.pool(out['text_semantic'], text.mask)
        elif self.disentangler is not None and 'itc' in weights:
            # The semantic components alone: no sampling, no terms the phase does not weigh.
            image_embedding = self.retrieval_tokens(image, 'image')[1]
            text_embedding = self.retrieval_tokens(text, 'text')[1]
        if 'itc' in weights:
            losses['loss_itc'] = self.pair_loss('itc', image_embedding, text_embedding,
                                                 media_keys)
        if 'tower_itc' in weights:
            losses['loss_tower_itc'] = self.pair_loss('tower_itc', image.pooled, text.pooled,
                                                       media_keys)
        if 'distribution_sampling' in weights:
            losses['loss_distribution_sampling'] = weights['distribution_sampling'] * \
                self.losses['distribution_sampling'](image.tokens, image.mask, text.tokens,
                                                     text.mask)
        return losses

    @torch.no_grad()
    def predict(self, media: torch.Tensor | None = None,
                caption_tokens: Mapping[str, tuple[TokenBatch, torch.Tensor]] | None = None,
                media_ids: Sequence[str] | None = None, indices: Sequence[int] | None = None,
                **_: Any) -> list[dict[str, Any]]:
        """Embed a gallery batch and its captions in every language.

        A batch without media (the queries ``xmr.apis.encode_texts`` embeds) gives items
        without ``media_embedding`` (and ``media_tokens``), as the cross-lingual retriever's.

        Returns:
            One dict per item: ``media_id``, its dataset ``index`` when given,
            ``media_embedding`` ``[E]`` (when the batch has media) and ``caption_embeddings``
            ``{lang: [n, E]}``, all L2-normalised float32 on CPU; with
            ``retrieval_score='patch_word'`` also ``media_tokens`` ``[P, E]`` and
            ``caption_tokens`` ``{lang: [[W, E], ...]}`` (the real retrieval tokens, float32 on
            CPU) and ``token_score``.
        """
        image = None if media is None else self.encode_media_tokens(media)
        image_tokens, image_embeddings = (None, None) if image is None else \
            self.retrieval_tokens(image, 'image')
        with_tokens = self.retrieval_score == 'patch_word'
        captions, words = {}, {}
        for lang, (tokens, owner) in (caption_tokens or {}).items():
            if lang not in self.languages:
                raise UserKeyError(f"the model does not read language '{lang}'; languages: "
                                   f'{self.languages}')
            text = self.encode_text_tokens(tokens)
            word_tokens, caption_embeddings = self.retrieval_tokens(text, 'text')
            captions[lang] = (unit_rows(caption_embeddings), owner)
            if with_tokens:
                words[lang] = (word_tokens, text.mask, owner.cpu())
        outputs = gallery_batch(None if image is None else unit_rows(image_embeddings),
                                captions, media_ids, indices)
        if with_tokens:
            for out in outputs:
                out.update(caption_tokens={}, token_score=self.token_score())
            if image is not None:
                for out, sequence in zip(outputs, _real_tokens(image_tokens, image.mask)):
                    out['media_tokens'] = sequence
            for lang, (word_tokens, mask, owner) in words.items():
                sequences = _real_tokens(word_tokens, mask)
                for row, out in enumerate(outputs):
                    out['caption_tokens'][lang] = [sequences[i]
                                                   for i in (owner == row).nonzero().flatten()]
        return outputs

    # ----------------------------------------------------------------------------- correlation
    def dataset_correlations(self) -> list[nn.Module]:
        """The column correlations whose statistics come from the dataset (paper Table 5)."""
        found = []
        if self.disentangler is not None and self.disentangler.dataset_correlation() is not None:
            found.append(self.disentangler.dataset_correlation())
        plug_in = self.losses['distribution_sampling'] \
            if 'distribution_sampling' in self.losses else None
        if plug_in is not None and plug_in.correlation.mode == 'dataset':
            found.append(plug_in.correlation)
        return found

    @torch.no_grad()
    def accumulate_correlation(self, media: torch.Tensor | None = None,
                               source_tokens: TokenBatch | None = None,
                               target_tokens: TokenBatch | None = None,
                               langs: Sequence[str] | None = None, **_: Any) -> None:
        """Add a preprocessed training batch to every dataset-level correlation estimate.

        The disentangler's correlation reads the semantic components, the plug-in loss's the
        raw tokens: what each one correlates in training.
        """
        if media is None:
            raise ValueError("accumulating the correlation needs 'media' in every batch")
        image = self.encode_media_tokens(media)
        text = self.encode_text_tokens(self.training_text(source_tokens, target_tokens, langs))
        for correlation in self.dataset_correlations():
            if self.disentangler is not None and \
                    correlation is self.disentangler.dataset_correlation():
                self.disentangler.update_correlation(image.tokens, image.mask, text.tokens,
                                                     text.mask)
            else:
                correlation.update(image.tokens, image.mask, text.tokens, text.mask)


def _real_tokens(tokens: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """Each sample's real tokens, ``[B, N, E]`` -> ``B`` tensors ``[N_b, E]`` (float32, CPU)."""
    tokens, mask = tokens.float().cpu(), mask.cpu()
    return [tokens[b][mask[b]] for b in range(tokens.shape[0])]
