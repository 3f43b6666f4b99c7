"""The retrieval metric of xmr's validation and test loops."""
from __future__ import annotations

import collections
import logging
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from mmengine.dist import broadcast_object_list, is_distributed, is_main_process
from mmengine.evaluator import BaseMetric
from mmengine.logging import print_log
from torch import Tensor
from torch.nn import functional as F

from xmr.datasets.languages import normalize_language, normalize_languages
from xmr.evaluation.leaderboard import format_table
from xmr.evaluation.protocols import (
    DIRECTIONS,
    PROTOCOLS,
    LanguageGallery,
    MediaSearchers,
    Protocol,
    check_folds,
    check_i2t_mode,
    check_recall_ks,
    evaluate_protocol,
    protocol_galleries,
    ranked_galleries,
)
from xmr.evaluation.search import check_search_options
from xmr.evaluation.token_scoring import TOKEN_SCORING_MODES, TokenScoring, TokenSet
from xmr.models.losses.distributed import host_group
from xmr.registry import METRICS
from xmr.utils.cli import UserKeyError
from xmr.utils.counts import check_count, is_count
from xmr.utils.listing import first_few, repeated

__all__ = ['RetrievalMetric']

# Embeddings from a half-precision model, normalised then cast, keep norms within ~1e-3 of 1.
_NORM_TOLERANCE = 1e-2


@METRICS.register_module()
class RetrievalMetric(BaseMetric):
    """Image/video–text retrieval in every language of an evaluation set, or cross-lingual
    text retrieval (``protocol='text_to_text'``).

    ``process`` receives the model's ``val_step`` output: one dict per gallery item,
    ``{'media_id': str, 'media_embedding': Tensor [E], 'caption_embeddings': {lang: Tensor
    [n, E]}}`` (L2-normalised; ``n`` may be 0 or the language absent; an optional int ``index``
    orders the media). A model that scores pairs from their tokens (CDDS) adds ``media_tokens``
    ``[P, D]`` and ``caption_tokens`` ``{lang: [[W, D], ...]}`` (real tokens only) and its score
    function ``token_score`` (:data:`~xmr.evaluation.token_scoring.TokenScore`), which
    ``scoring='tokens'`` or ``'tokens_rerank'`` ranks with. ``compute_metrics`` deduplicates
    media by ``media_id`` (keeping the first:
    a distributed sampler pads with repeated items), then scores each language under the
    protocol (see :mod:`xmr.evaluation.protocols` and ``docs/evaluation.md``). Under
    ``text_to_text`` the items need no ``media_embedding``: each item's first
    ``source_language`` caption is its gallery row, and every other language is scored against
    those rows.

    Output keys (recalls in percent), for every evaluated language ``lang``:
    ``{lang}/t2i_R@{k}``, ``{lang}/t2i_MdR``, ``{lang}/t2i_MnR``, the same with ``i2t``, and with
    both directions ``{lang}/AR`` (mean of the recalls = rSum / 6) and ``{lang}/rSum``. Summaries
    over ``mean_languages``: ``mAR`` (mean AR) and ``rSum`` (sum of rSum) with both directions;
    ``t2v_R@1_sum`` (``text_to_video``; ``t2i_R@1_sum`` for other text→media-only runs), the sum
    of text→media R@1 (DASD Table 2), and ``i2t_R@1_sum`` for media→text-only runs;
    ``mean_t2i_R@10`` (``xtd10_t2i_r10``, M-CLIP);
    ``{lang}/mean_R@1`` and ``mean_R@1`` (``xtd10_fewshot``, PECTVLM: the mean of the R@1 of both
    directions). ``text_to_text`` names its directions ``t2s`` (target→source captions) and
    ``s2t`` in place of ``t2i`` and ``i2t`` (``{lang}/t2s_R@1``, ...; ``t2s_R@1_sum``,
    ``s2t_R@1_sum``); AR, rSum and mAR keep their names, so ``save_best='mAR'`` selects on it.
    MMEngine puts ``prefix + '/'`` in front of every key. ``skipped_media``: the number of media
    files the dataset skipped as unreadable (``on_corrupt='skip'``), present only
    when some were: the recalls are then over a smaller gallery than the benchmark's. After
    ``compute_metrics``, ``summarised_languages`` lists the languages the summaries are over
    (empty without summaries), which ``tools/test.py`` records beside the metrics.

    Language codes may be given in any form :func:`~xmr.datasets.languages.normalize_language`
    accepts (``swh_Latn``, ``jp``); keys use the canonical codes (``sw``, ``ja``).

    Args:
        languages: languages to evaluate (at least one); ``None`` evaluates every language
            some item has a caption in, and refuses one the dataset states
            (``dataset_meta['languages']``) that no item has a caption in.
        source_language: the teacher's language, reported but left out of the default
            ``mean_languages``.
        mean_languages: languages averaged into the summaries; ``None`` = every evaluated language
            except ``source_language``.
        recall_ks: the K of R@K.
        protocol: a key of :data:`xmr.evaluation.protocols.PROTOCOLS`.
        i2t_mode: ``'standard'`` or ``'grouped'`` (the DASD authors' media→text ranking).
        directions: ``('t2i', 'i2t')`` or a part of it (``('t2s', 's2t')`` under
            ``text_to_text``); ``None`` takes the protocol's (``('t2i',)`` for
            ``text_to_video`` and ``xtd10_t2i_r10``).
        search: ``dict(index='flat' | 'ivf' | 'hnsw', chunk_size=None, **faiss options)``;
            ``'flat'`` = exact ranks (default), the others approximate recalls only.
        gallery_size: media count the set must have; ``None`` = the protocol's (5,000 for COCO,
            1,000 for XTD10).
        num_folds: folds of ``coco_1k_5fold``.
        folds: folds ``coco_1k_5fold`` averages; ``None`` = all, ``(0,)`` = the DASD code's.
        fewshot_shots: train/val size of the ``xtd10_fewshot`` split (test = the rest).
        fewshot_seed: generator seed of the ``xtd10_fewshot`` split.
        scoring: ``'embedding'`` (cosine of the embeddings, default), ``'tokens'`` (the model's
            token score on every query × gallery pair, in bounded blocks) or
            ``'tokens_rerank'`` (the token score re-orders the ``rerank_candidates`` best
            items by cosine; recalls only, exact up to R@``rerank_candidates``).
        rerank_candidates: shortlist length of ``'tokens_rerank'``.
        scoring_device: where token blocks are scored; ``None`` = CUDA when available.
        prefix: MMEngine's key prefix, e.g. the dataset name when several sets are evaluated.
    """

    # '' (not None) keeps MMEngine from warning about a missing prefix; keys stay bare.
    default_prefix = ''

    def __init__(self, languages: Sequence[str] | None = None, source_language: str = 'en',
                 mean_languages: Sequence[str] | None = None,
                 recall_ks: Sequence[int] = (1, 5, 10), protocol: str = 'standard',
                 i2t_mode: str = 'standard', directions: Sequence[str] | None = None,
                 search: Mapping[str, Any] | None = None, gallery_size: int | None = None,
                 num_folds: int = 5, folds: Sequence[int] | None = None,
                 fewshot_shots: int = 50, fewshot_seed: int = 42, scoring: str = 'embedding',
                 rerank_candidates: int = 100, scoring_device: str | None = None,
                 prefix: str | None = None) -> None:
        super().__init__(prefix=prefix)
        for option, value in dict(languages=languages, mean_languages=mean_languages,
                                  recall_ks=recall_ks, directions=directions,
                                  folds=folds).items():
            _check_listed(option, value)
        self.protocol = _checked_protocol(protocol)
        check_i2t_mode(i2t_mode)
        self.i2t_mode = i2t_mode
        # Stored as rankings (t2i / i2t); the keys use the protocol's names for them.
        self.directions = _ranking_directions(PROTOCOLS[protocol], directions)
        check_recall_ks(recall_ks)
        self.recall_ks = tuple(int(k) for k in recall_ks)
        self._check_protocol_needs()
        self.search = dict(search or {})
        check_search_options(self.search)
        self.languages = _requested_languages(languages)
        self.source_language = normalize_language(source_language,
                                                  'RetrievalMetric source_language')
        self.mean_languages = _canonical(mean_languages, 'RetrievalMetric mean_languages')
        self._check_language_roles()
        self.gallery_size = _checked_gallery_size(gallery_size)
        self.num_folds, self.folds = num_folds, tuple(folds) if folds is not None else None
        self.fewshot_shots, self.fewshot_seed = fewshot_shots, fewshot_seed
        self._check_split_options()
        self.scoring, self.rerank_candidates = scoring, rerank_candidates
        self.scoring_device = scoring_device
        self._check_scoring_options()

    @property
    def dataset_meta(self) -> dict | None:
        return self._dataset_meta

    @dataset_meta.setter
    def dataset_meta(self, dataset_meta: dict | None) -> None:
        """The dataset's facts, handed over when the evaluation loop is built: a requested
        language the dataset has no captions in, or a text gallery's source language, is
        refused then, not after its gallery is encoded."""
        self._dataset_meta = dataset_meta
        offered = (dataset_meta or {}).get('languages')
        if offered is None:
            return
        offered = [normalize_language(lang) for lang in offered]  # as the options are
        head, where = self._named_dataset()
        if PROTOCOLS[self.protocol].text_gallery and self.source_language not in offered:
            raise ValueError(f"{head}: protocol '{self.protocol}' ranks against the "
                             f"'{self.source_language}' captions (source_language), but "
                             f'{where} has captions in {offered} only; set '
                             "source_language to one of them or add it to the dataset's "
                             'languages')
        # Without languages, those evaluated are the dataset's: mean_languages must be of them.
        option, requested = (('languages', self.languages) if self.languages is not None
                             else ('mean_languages', self.mean_languages))
        missing = [lang for lang in requested or () if lang not in offered]
        if missing:
            raise ValueError(f'{head}: {option} {missing} were requested but {where} '
                             f"has captions in {offered} only; drop them from the metric's "
                             f"{option} or add them to the dataset's languages")

    @property
    def ranked_galleries(self) -> str:
        """What its protocol ranks where that is not the whole set with every caption
        (:func:`~xmr.evaluation.protocols.ranked_galleries`: ``'coco_1k_5fold: fold 0 of 5'``),
        which a result records beside its test set; ``''`` where it is."""
        return ranked_galleries(self.protocol, self.num_folds, self.folds, self.fewshot_shots,
                                self.fewshot_seed, self.source_language)

    def _named_dataset(self) -> tuple[str, str]:
        """How errors name the metric (``RetrievalMetric (multi30k)``) and its dataset
        (``multi30k test``) from ``dataset_meta``."""
        meta = self.dataset_meta or {}
        where = f"{meta.get('dataset', 'the dataset')} {meta.get('split', '')}".strip()
        return f"RetrievalMetric{f' ({self.prefix})' if self.prefix else ''}", where

    def process(self, data_batch: Any, data_samples: Sequence[Mapping[str, Any]]) -> None:
        """Keep each gallery item's embeddings as compact CPU float32 tensors.

        Args:
            data_batch: the batch; only its ``skipped_media`` paths are kept (counted).
            data_samples: the model's ``val_step`` output, one dict per gallery item.
        """
        if isinstance(data_batch, Mapping):
            self.results.extend({'skipped_media': str(path)}
                                for path in data_batch.get('skipped_media', ()))
        for sample in data_samples:
            self.results.append(_checked_item(
                sample, with_tokens=self.scoring != 'embedding',
                needs_media=not PROTOCOLS[self.protocol].text_gallery))

    def evaluate(self, size: int) -> dict:
        """Gather every rank's items on rank 0, score them there, and hand every rank the
        metrics.

        The items travel through the host's group (:func:`host_group`), not through files:
        MMEngine's default gathers them in ``.dist_test/`` under each process's working
        directory, which the nodes of a multi-node run do not share. All gathered items are
        kept: MMEngine would keep the first ``size`` (the dataset length), which drops a
        distributed sampler's padding only when each rank's results follow its samples one to
        one, and a batch's skipped-media markers come before its items, so a skipped padding
        item (the sampler pads with the first items of the dataset) would push a real item out
        of the gallery. :meth:`compute_metrics` drops the repeated media (and markers) of the
        padding itself, by ``media_id`` (and path).

        Args:
            size: the dataset length (not used to cut the results).
        """
        if not self.results:
            print_log(f'{type(self).__name__} got no results on this rank', logger='current',
                      level=logging.WARNING)
        parts = [self.results]
        if is_distributed():
            parts = [None] * dist.get_world_size() if is_main_process() else None
            dist.gather_object(self.results, parts, dst=0, group=host_group())
        metrics = [None]
        if is_main_process():
            scores = self.compute_metrics([item for part in parts for item in part])
            metrics = [{f'{self.prefix}/{key}' if self.prefix else key: value
                        for key, value in scores.items()}]
        broadcast_object_list(metrics)
        self.results.clear()
        return metrics[0]

    def compute_metrics(self, results: list) -> dict[str, float]:
        """Score every language under the protocol.

        Args:
            results: the items stored by :meth:`process`, gathered from all ranks.

        Returns:
            The metric dict (keys in the class docstring).
        """
        skipped = {item['skipped_media'] for item in results if 'skipped_media' in item}
        items = _unique_items([item for item in results if 'skipped_media' not in item])
        if not items:
            raise ValueError('RetrievalMetric got an empty gallery: ' + (
                f'each of its {len(skipped)} media was skipped as unreadable '
                f"(on_corrupt='skip': {first_few(skipped)}); repair or replace those files."
                if skipped else
                'the evaluation produced no media embeddings (is the dataset empty?).'))
        self._check_skipped_size(len(items), skipped)
        media = self._gallery_rows(items)
        languages = self._evaluated_languages(items)
        mean_languages = self.summary_languages(languages)
        galleries = protocol_galleries(
            self.protocol, len(items), gallery_size=self.gallery_size, num_folds=self.num_folds,
            folds=self.folds, shots=self.fewshot_shots, split_seed=self.fewshot_seed)
        token_scoring = self._token_scoring(items)
        # Padded once: every language's gallery holds the same media (stacked per language,
        # a COCO 5K set of ViT-B/16 tokens, 2 GB, was copied once for each).
        media_tokens = None if token_scoring is None else TokenSet.stack(
            [item['media_tokens'] for item in items], items[0]['media_tokens'].shape[1])
        media_searchers = MediaSearchers()
        per_language, gallery_sizes = {}, {}
        for lang in languages:
            gallery = _language_gallery(items, media, lang,
                                        PROTOCOLS[self.protocol].captions_per_media,
                                        media_tokens)
            try:
                scores = evaluate_protocol(gallery, galleries, directions=self.directions,
                                           recall_ks=self.recall_ks, i2t_mode=self.i2t_mode,
                                           search=self.search, token_scoring=token_scoring,
                                           media_searchers=media_searchers)
            except ValueError as error:
                raise ValueError(f"language '{lang}': {error}") from error
            if self.protocol == 'xtd10_fewshot':
                scores['mean_R@1'] = (scores['t2i_R@1'] + scores['i2t_R@1']) / 2
            per_language[lang] = self._named_keys(scores)
            gallery_sizes[lang] = int(gallery.caption_media.unique().numel())
        _warn_if_galleries_differ({lang: gallery_sizes[lang] for lang in mean_languages
                                  if lang in gallery_sizes})
        metrics = {f'{lang}/{key}': value
                   for lang, scores in per_language.items() for key, value in scores.items()}
        summaries = self._summaries(per_language, mean_languages)
        metrics.update(summaries)
        self.summarised_languages = list(mean_languages) if summaries else []
        if skipped:
            metrics['skipped_media'] = len(skipped)
        self._log_table(per_language)
        return metrics

    def _check_skipped_size(self, num_media: int, skipped: set[str]) -> None:
        """Refuse a gallery of a protocol's fixed size that lacks media the dataset skipped as
        unreadable, naming them: the size error alone (``pass gallery_size``) hid the cause,
        and another size scores a set no published number is of."""
        expected = (self.gallery_size if self.gallery_size is not None
                    else PROTOCOLS[self.protocol].gallery_size)
        if skipped and expected is not None and num_media != expected:
            raise ValueError(f"protocol '{self.protocol}' is defined on {expected} media; the "
                             f'evaluation set has {num_media} readable ones and {len(skipped)} '
                             f"skipped as unreadable (on_corrupt='skip': "
                             f'{first_few(skipped)}). Its numbers need every media: '
                             'repair or replace those files.')

    def _gallery_rows(self, items: list[dict[str, Any]]) -> Tensor:
        """``[M, E]``: the items' media embeddings, or for a text gallery each item's first
        source-language caption."""
        if PROTOCOLS[self.protocol].text_gallery:
            source = self.source_language
            lacking = [item['media_id'] for item in items
                       if item['caption_embeddings'].get(source, torch.zeros(0)).shape[0] == 0]
            if lacking:
                raise ValueError(f"protocol '{self.protocol}' ranks against each item's first "
                                 f"'{source}' caption, but items {lacking[:5]} have none; give "
                                 f"the dataset '{source}' captions (RetrievalDataset "
                                 'languages) or set source_language to the language they have.')
            rows = [item['caption_embeddings'][source][0] for item in items]
            what = f"'{source}' caption embeddings"
        else:
            rows = [item['media_embedding'] for item in items]
            what = 'media embeddings'
        widths = {row.shape[0] for row in rows}
        if len(widths) > 1:
            raise ValueError(f'{what} have different widths {sorted(widths)}; one model must '
                             'embed the whole evaluation set.')
        return torch.stack(rows)

    def _named_keys(self, scores: dict[str, float]) -> dict[str, float]:
        """``t2i_R@1`` -> the protocol's name of the direction (``t2s_R@1`` for text)."""
        spec = PROTOCOLS[self.protocol]
        named = {}
        for key, value in scores.items():
            direction, underscore, statistic = key.partition('_')
            if underscore and direction in DIRECTIONS:
                key = f'{spec.key_direction(direction)}_{statistic}'
            named[key] = value
        return named

    def _token_scoring(self, items: list[dict[str, Any]]) -> TokenScoring | None:
        if self.scoring == 'embedding':
            return None
        scores = {item['token_score'] for item in items}
        if len(scores) > 1:
            raise ValueError(f'the gallery items carry different token scores {scores}; one '
                             'model must embed the whole evaluation set.')
        return TokenScoring(scores.pop(), self.scoring, self.rerank_candidates,
                            self.scoring_device)

    def _check_language_roles(self) -> None:
        """Refuse, as the metric is built, ``mean_languages`` outside ``languages`` and the
        source language among the queries of a text gallery, whose rows are its captions (it
        was refused after the set was encoded)."""
        if PROTOCOLS[self.protocol].text_gallery:
            for option, codes in (('languages', self.languages),
                                  ('mean_languages', self.mean_languages)):
                if codes is not None and self.source_language in codes:
                    raise ValueError(f"protocol '{self.protocol}': the "
                                     f"'{self.source_language}' captions are its gallery, not "
                                     f'queries; leave the source language out of {option} '
                                     f'{list(codes)}.')
        if self.languages is not None and self.mean_languages is not None:
            outside = [lang for lang in self.mean_languages if lang not in self.languages]
            if outside:
                raise ValueError(f'mean_languages {outside} are not in languages '
                                 f'{list(self.languages)}.')

    def _check_split_options(self) -> None:
        """Refuse ``coco_1k_5fold`` folds and ``xtd10_fewshot`` shots that cannot split the
        gallery, before it is encoded."""
        if self.protocol == 'coco_1k_5fold':
            check_folds(self.num_folds, self.folds)
        if self.protocol == 'xtd10_fewshot':
            _check_fewshot_shots(self.fewshot_shots,
                                 self.gallery_size or PROTOCOLS[self.protocol].gallery_size)

    def _check_scoring_options(self) -> None:
        """Refuse a ``scoring`` mode, and the token options, that cannot rank this protocol's
        galleries as asked."""
        scoring = self.scoring
        if scoring not in ('embedding', *TOKEN_SCORING_MODES):
            raise ValueError(f"scoring must be 'embedding' or one of {TOKEN_SCORING_MODES}, got "
                             f"'{scoring}'.")
        if scoring != 'embedding' and PROTOCOLS[self.protocol].text_gallery:
            raise ValueError(f"scoring='{scoring}' scores media tokens against caption tokens; "
                             f"protocol '{self.protocol}' has no media: use "
                             "scoring='embedding'.")
        if scoring != 'embedding' and self.search:
            raise ValueError(f"scoring='{scoring}' ranks with the model's token score; search "
                             f'{self.search} applies to scoring=\'embedding\' only.')
        check_count(self.rerank_candidates, 'rerank_candidates')
        if scoring == 'tokens_rerank' and max(self.recall_ks) > self.rerank_candidates:
            raise ValueError(f'recall_ks {self.recall_ks} reach past rerank_candidates '
                             f'{self.rerank_candidates}: R@K is exact only for K up to the '
                             'shortlist (a positive outside it would count as a hit); raise '
                             'rerank_candidates.')
        if scoring != 'embedding':
            _check_scoring_device(self.scoring_device)

    def _check_protocol_needs(self) -> None:
        needs: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
            'text_to_video': (('t2i',), (1,)),
            'xtd10_t2i_r10': (('t2i',), (10,)),
            'xtd10_fewshot': (DIRECTIONS, (1,)),
        }
        if self.protocol not in needs:
            return
        directions, ks = needs[self.protocol]
        if not set(directions) <= set(self.directions) or not set(ks) <= set(self.recall_ks):
            raise ValueError(f"protocol '{self.protocol}' reports directions {directions} at "
                             f'R@{ks}; got directions={self.directions}, '
                             f'recall_ks={self.recall_ks}.')

    def _evaluated_languages(self, items: list[dict[str, Any]]) -> list[str]:
        seen = sorted({lang for item in items
                       for lang, captions in item['caption_embeddings'].items()
                       if captions.shape[0]})
        text_gallery = PROTOCOLS[self.protocol].text_gallery
        if self.languages is None:
            self._check_stated_languages_captioned(seen)
            # A text gallery is the source captions: they are not also queries.
            candidates = [lang for lang in seen
                          if not (text_gallery and lang == self.source_language)]
            if not candidates:
                raise ValueError('no item has any caption: nothing to evaluate.' if not seen
                                 else f"protocol '{self.protocol}' ranks target captions against "
                                 f"the '{self.source_language}' ones, and the items have no "
                                 f'other language; languages seen: {seen}.')
            # The source language leads so logs read "en, then the target languages".
            return sorted(candidates, key=lambda lang: (lang != self.source_language, lang))
        missing = [lang for lang in self.languages if lang not in seen]
        if missing:
            raise ValueError(f'languages {missing} were requested but no evaluated item has a '
                             f'caption in them; languages seen: {seen}.')
        return list(self.languages)

    def _check_stated_languages_captioned(self, seen: Sequence[str]) -> None:
        """Refuse, when the metric evaluates the dataset's languages (``languages=None``), one
        the dataset states (``dataset_meta['languages']``) that no evaluated item has a caption
        in: it was left out of the keys and of ``mAR`` without a word, so that Multi30K's mAR
        over de and fr read as the paper's over de, fr and cs."""
        stated = (self.dataset_meta or {}).get('languages')
        if stated is None:
            return
        stated = list(dict.fromkeys(normalize_language(lang) for lang in stated))
        missing = [lang for lang in stated if lang not in seen]
        if missing:
            head, where = self._named_dataset()
            raise ValueError(f'{head}: {where} has captions in {stated}, but no evaluated item '
                             f'has one in {missing}; the summaries would leave them out. Give '
                             "the items those captions, or evaluate the others alone (the "
                             f"metric's languages={[lang for lang in stated if lang in seen]}).")

    def summary_languages(self, languages: Sequence[str]) -> list[str]:
        """The languages the summaries (``mAR``, ``rSum``, ...) average or sum.

        Args:
            languages: the evaluated languages.

        Returns:
            ``mean_languages``, or every evaluated language except ``source_language``.
        """
        if self.mean_languages is None:
            return [lang for lang in languages if lang != self.source_language]
        missing = [lang for lang in self.mean_languages if lang not in languages]
        if missing:
            raise ValueError(f'mean_languages {missing} are not evaluated; evaluated languages: '
                             f'{list(languages)}.')
        return list(self.mean_languages)

    def _summaries(self, per_language: dict[str, dict[str, float]],
                   mean_languages: list[str]) -> dict[str, float]:
        if not mean_languages:
            return {}
        chosen = [per_language[lang] for lang in mean_languages]
        summaries: dict[str, float] = {}
        if set(self.directions) == set(DIRECTIONS):
            summaries['mAR'] = sum(s['AR'] for s in chosen) / len(chosen)
            summaries['rSum'] = sum(s['rSum'] for s in chosen)
        if self.protocol == 'text_to_video':
            summaries['t2v_R@1_sum'] = sum(s['t2i_R@1'] for s in chosen)
        elif len(self.directions) == 1 and 1 in self.recall_ks:
            # One direction has no AR: its R@1 summed is the run's summary, either way.
            key_name = PROTOCOLS[self.protocol].key_direction(self.directions[0])
            summaries[f'{key_name}_R@1_sum'] = sum(s[f'{key_name}_R@1'] for s in chosen)
        if self.protocol == 'xtd10_t2i_r10':
            summaries['mean_t2i_R@10'] = sum(s['t2i_R@10'] for s in chosen) / len(chosen)
        if self.protocol == 'xtd10_fewshot':
            summaries['mean_R@1'] = sum(s['mean_R@1'] for s in chosen) / len(chosen)
        return summaries

    def expected_keys(self) -> set[str] | None:
        """The keys :meth:`compute_metrics` may report, prefix included, known from the options
        and the dataset's languages before anything is evaluated; ``save_best`` and
        ``start_from_best`` are checked against them before training.

        A superset: ``MdR`` and ``MnR`` are in though an approximate search leaves them out,
        and every language the metric may evaluate is in (``skipped_media`` is not).

        Returns:
            The keys, or ``None`` when the languages are not known yet (``languages=None`` and
            no ``dataset_meta`` stating them).
        """
        languages = self.languages or (self.dataset_meta or {}).get('languages')
        if languages is None:
            return None
        languages = [normalize_language(lang) for lang in languages]
        if PROTOCOLS[self.protocol].text_gallery:  # the source captions are the gallery
            languages = [lang for lang in languages if lang != self.source_language]
        mean_languages = self.summary_languages(languages)
        spec = PROTOCOLS[self.protocol]
        statistics = [f'{spec.key_direction(direction)}_{statistic}'
                      for direction in self.directions
                      for statistic in (*(f'R@{k}' for k in self.recall_ks), 'MdR', 'MnR')]
        if set(self.directions) == set(DIRECTIONS):
            statistics += ['AR', 'rSum']
        if self.protocol == 'xtd10_fewshot':
            statistics.append('mean_R@1')
        # The summaries of zero scores: their names, as compute_metrics forms them.
        zeros = {lang: collections.defaultdict(float) for lang in mean_languages}
        keys = [*(f'{lang}/{statistic}' for lang in languages for statistic in statistics),
                *self._summaries(zeros, mean_languages)]
        head = f'{self.prefix}/' if self.prefix else ''
        return {head + key for key in keys}

    def _log_table(self, per_language: dict[str, dict[str, float]]) -> None:
        columns = list(next(iter(per_language.values())))
        rows = [[lang, *(f'{scores[c]:.2f}' for c in columns)]
                for lang, scores in per_language.items()]
        print_log(f'{self._table_heading()}:\n' + format_table(['lang', *columns], rows),
                  logger='current', level=logging.INFO)

    def _table_heading(self) -> str:
        """What the logged table scores: the metric's prefix (its keys' head) and the dataset,
        so that the tables of several galleries in one evaluation are told apart, then the
        protocol, e.g. ``Retrieval of coco_ja (mscoco test; coco_1k_5fold, i2t standard)``."""
        # The media->text ranking's mode means nothing where no medium queries captions.
        ranks_media = 'i2t' in self.directions and not PROTOCOLS[self.protocol].text_gallery
        ranking = self.protocol + (f', i2t {self.i2t_mode}' if ranks_media else '')
        meta = self.dataset_meta or {}
        dataset = ' '.join(str(meta[key]) for key in ('dataset', 'split') if meta.get(key))
        scored = f' of {self.prefix}' if self.prefix else ''
        return f"Retrieval{scored} ({f'{dataset}; ' if dataset else ''}{ranking})"


def _check_listed(option: str, value: Any) -> None:
    """Refuse one value where a list goes: ``--cfg-options test_evaluator.languages=de`` gives
    the string ``'de'``, which would be read letter by letter."""
    if value is not None and (isinstance(value, (str, bytes)) or not isinstance(value, Iterable)):
        raise ValueError(f'RetrievalMetric {option} must be a list, got {value!r}; write '
                        f'[{value!r}].')


def _checked_protocol(protocol: str) -> str:
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol '{protocol}'; choose one of {sorted(PROTOCOLS)}.")
    return protocol


def _ranking_directions(spec: Protocol, directions: Sequence[str] | None) -> tuple[str, ...]:
    """The rankings (``'t2i'`` / ``'i2t'``) of ``directions``, named in ``spec``'s terms;
    ``None`` takes the protocol's own."""
    if directions is None:
        return spec.directions
    if not directions:
        raise ValueError(f'directions must be a non-empty subset of {spec.direction_names}, '
                         f'got {directions}.')
    twice = repeated(directions)
    if twice:
        raise ValueError(f'directions {tuple(directions)} repeat '
                         f'{", ".join(map(repr, twice))}; give each direction once.')
    return tuple(spec.ranking_direction(d) for d in directions)


def _requested_languages(languages: Sequence[str] | None) -> tuple[str, ...] | None:
    """The canonical codes of ``languages``, at least one; ``None`` (the dataset's) stays."""
    if languages is not None and not len(languages):
        # Found only after the whole gallery was encoded, as a bare StopIteration.
        raise ValueError(f'RetrievalMetric languages {list(languages)} name no language to '
                         'evaluate; give some, or None for every language of the dataset.')
    return _canonical(languages, 'RetrievalMetric languages')


def _checked_gallery_size(gallery_size: int | None) -> int | None:
    if gallery_size is not None and not is_count(gallery_size):
        # Compared with the media count only once the set was encoded, as a count it is not.
        raise ValueError(f'RetrievalMetric gallery_size must be a positive integer (the media '
                         f"count) or None for the protocol's own, got {gallery_size!r}.")
    return gallery_size


def _canonical(codes: Sequence[str] | None, where: str) -> tuple[str, ...] | None:
    return None if codes is None else tuple(normalize_languages(codes, where))


def _checked_item(sample: Mapping[str, Any], with_tokens: bool = False,
                  needs_media: bool = True) -> dict[str, Any]:
    if not isinstance(sample, Mapping):
        raise TypeError(f'RetrievalMetric expects one dict per gallery item from val_step, got '
                        f'{type(sample).__name__}.')
    for key in ('media_id', 'caption_embeddings'):
        if key not in sample:
            raise UserKeyError(f"val_step output lacks '{key}' (keys: {sorted(sample)}).")
    if needs_media and 'media_embedding' not in sample:
        raise UserKeyError(f"val_step output lacks 'media_embedding' (keys: {sorted(sample)}); a "
                           "text-only model or dataset is scored with protocol='text_to_text'.")
    media_id = str(sample['media_id'])
    item: dict[str, Any] = {'media_id': media_id}
    width = None
    if 'media_embedding' in sample:
        media = _compact(sample['media_embedding'], f"media '{media_id}' media_embedding")
        if media.dim() != 1:
            raise ValueError(f"media '{media_id}': media_embedding must be [E], got "
                             f'{tuple(media.shape)}.')
        _check_normalised(media[None], f"media '{media_id}' media_embedding")
        item['media_embedding'], width = media, media.shape[0]
    captions = {}
    for lang, embeddings in sample['caption_embeddings'].items():
        name = f"media '{media_id}' caption_embeddings['{lang}']"
        rows = _compact(embeddings, name)
        width = rows.shape[-1] if width is None else width
        if rows.dim() != 2 or rows.shape[1] != width:
            raise ValueError(f'{name} must be [n, {width}], got {tuple(rows.shape)}.')
        captions[lang] = rows
    # One pass over every language's rows while they pass (a pass per language took 13 of an
    # XTD200 item's 15 ms); where they fail, the language at fault is found and named.
    if captions and _normalisation_problem(torch.cat(list(captions.values()))) is not None:
        for lang, rows in captions.items():
            _check_normalised(rows, f"media '{media_id}' caption_embeddings['{lang}']")
    item['caption_embeddings'] = captions
    if with_tokens:
        item.update(_checked_tokens(sample, media_id, captions))
    if 'index' in sample:
        item['index'] = int(sample['index'])
    return item


def _checked_tokens(sample: Mapping[str, Any], media_id: str,
                    captions: Mapping[str, Tensor]) -> dict[str, Any]:
    missing = [key for key in ('media_tokens', 'caption_tokens', 'token_score')
               if key not in sample]
    if missing:
        raise UserKeyError(f"media '{media_id}': token scoring needs {missing} from val_step; the "
                           "model emits them with retrieval_score='patch_word' "
                           "(DualEncoderRetriever), or set the metric's scoring='embedding'.")
    if not callable(sample['token_score']):
        raise TypeError(f"media '{media_id}': token_score must be a function, got "
                        f"{type(sample['token_score']).__name__}.")
    media_tokens = _compact(sample['media_tokens'], f"media '{media_id}' media_tokens")
    caption_tokens = {}
    for lang, rows in captions.items():
        sequences = list(sample['caption_tokens'].get(lang, ()))
        if len(sequences) != rows.shape[0]:
            raise ValueError(f"media '{media_id}': {len(sequences)} caption token sequences in "
                             f"'{lang}' for {rows.shape[0]} caption embeddings.")
        caption_tokens[lang] = [_compact(seq, f"media '{media_id}' caption_tokens['{lang}']")
                                for seq in sequences]
    widths = {t.shape[-1] for t in [media_tokens, *sum(caption_tokens.values(), [])]}
    if media_tokens.dim() != 2 or len(widths) > 1 or any(
            t.dim() != 2 for seqs in caption_tokens.values() for t in seqs):
        raise ValueError(f"media '{media_id}': token sequences must be [L, D] of one width D, "
                         f'got widths {sorted(widths)}.')
    return dict(media_tokens=media_tokens, caption_tokens=caption_tokens,
                token_score=sample['token_score'])


#: The float32 CPU copy of each tensor of the val_step items, kept while the tensor lives: an
#: evaluator's metrics all process the same items, and each held a copy of its own (COCO's
#: two token metrics: 2.3x the media tokens, 12.7 GiB for 5K images of ViT-B/16 tokens).
_COPIES: dict[int, tuple[int, Tensor]] = {}


def _compact(tensor: Any, name: str) -> Tensor:
    """A float32 CPU copy of ``tensor``, one for every metric processing it (a new one once
    the tensor is changed in place: a buffer a model fills again for each batch)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f'{name} must be a torch.Tensor, got {type(tensor).__name__}.')
    version, copy = _COPIES.get(id(tensor), (None, None))
    if copy is None or version != tensor._version:
        if copy is None:
            weakref.finalize(tensor, _COPIES.pop, id(tensor), None)  # its id is free once gone
        # clone(): a row view of a batch tensor would pickle (and gather) the whole batch.
        copy = tensor.detach().to('cpu', torch.float32).clone()
        _COPIES[id(tensor)] = (tensor._version, copy)
    return copy


def _normalisation_problem(rows: Tensor) -> str | None:
    """What keeps ``[n, E]`` rows from being unit embeddings; ``None`` when nothing does."""
    if rows.shape[0] == 0:
        return None
    if not bool(torch.isfinite(rows).all()):
        return 'holds NaN or inf values.'
    worst = float((rows.norm(dim=1) - 1).abs().max())
    if worst > _NORM_TOLERANCE:
        return (f'is not L2-normalised (a norm is off by {worst:.3g}); the model must return '
                'unit embeddings so that scores are cosines.')
    return None


def _check_normalised(rows: Tensor, name: str) -> None:
    problem = _normalisation_problem(rows)
    if problem is not None:
        raise ValueError(f'{name} {problem}')


def _check_scoring_device(device: str | None) -> None:
    """Refuse, as the metric is built, a ``scoring_device`` torch cannot score on here: a
    misspelt one (``'gpu'``) or one this machine lacks (``'cuda'`` without a GPU) failed only in
    ``compute_metrics``, after the whole gallery was encoded, naming no option."""
    if device is None:
        return
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"RetrievalMetric scoring_device {device!r} is no torch device "
                         f"({error}); give e.g. 'cuda', 'cuda:1' or 'cpu', or None for CUDA "
                         'when available.') from error
    if parsed.type == 'cpu':
        return
    # Counted without initialising the accelerator (no context on a GPU the run does not use).
    accelerator = torch.accelerator.current_accelerator()
    count = (torch.accelerator.device_count()
             if accelerator is not None and accelerator.type == parsed.type else 0)
    if (parsed.index or 0) >= count:
        raise ValueError(f"RetrievalMetric scoring_device {device!r}: this machine has {count} "
                         f"'{parsed.type}' device{'' if count == 1 else 's'}; give one it has, "
                         "'cpu', or None for CUDA when available.")


def _check_fewshot_shots(shots: Any, gallery_size: int) -> None:
    """Refuse, as the metric is built, ``fewshot_shots`` that leave no test split of the
    ``gallery_size`` media (train and val take ``shots`` each), naming the option."""
    if not is_count(shots) or 2 * shots >= gallery_size:
        raise ValueError(f'fewshot_shots must be a whole number in [1, {(gallery_size - 1) // 2}]'
                         f' so that the train, val and test splits of the {gallery_size} media '
                         f'are non-empty, got {shots!r}.')


def _warn_if_galleries_differ(gallery_sizes: Mapping[str, int]) -> None:
    """A summary over languages whose galleries hold other media (a language captioning part
    of the set is scored on that part) averages recalls of different tasks: say so."""
    if len(set(gallery_sizes.values())) > 1:
        sizes = ', '.join(f'{lang} {size}' for lang, size in gallery_sizes.items())
        print_log(f'the summaries average languages scored on galleries of different sizes '
                  f'(media with a caption in each: {sizes}); their recalls are not comparable',
                  logger='current', level=logging.WARNING)


def _unique_items(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One item per ``media_id``, the first; a repeat must be the same item (a distributed
    sampler's padding), else its captions would be dropped from the gallery unseen."""
    first: dict[str, dict[str, Any]] = {}
    for item in results:
        kept = first.setdefault(item['media_id'], item)
        if kept is item:
            continue
        if 'index' in kept and 'index' in item:
            if kept['index'] != item['index']:
                raise ValueError(f"dataset items {kept['index']} and {item['index']} share "
                                 f"media_id '{item['media_id']}'; one item per media is "
                                 'expected, with all its captions.')
        elif not _same_captions(kept, item):
            raise ValueError(f"two items share media_id '{item['media_id']}' with other "
                             'captions; one item per media is expected, with all its captions '
                             '(a repeat is kept only as padding of the same item).')
    items = list(first.values())
    if items and all('index' in item for item in items):
        items.sort(key=lambda item: item['index'])
    return items


#: Cosine similarity above which two embeddings of a caption are one caption embedded twice:
#: a padded repeat is embedded in another batch, on another rank, under bf16 autocast too.
_SAME_CAPTION_COSINE = 0.99


def _same_captions(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether two items without a dataset index hold the same captions: as many per language,
    each row's embedding pointing where the other's does (:data:`_SAME_CAPTION_COSINE`)."""
    def rows(item: dict[str, Any]) -> dict[str, Tensor]:
        return {lang: r.float() for lang, r in item['caption_embeddings'].items() if r.shape[0]}

    ours, theirs = rows(first), rows(second)
    return ours.keys() == theirs.keys() and all(
        ours[lang].shape == theirs[lang].shape and bool(
            (F.cosine_similarity(ours[lang], theirs[lang], dim=-1)
             > _SAME_CAPTION_COSINE).all())
        for lang in ours)


def _language_gallery(items: list[dict[str, Any]], media: Tensor, lang: str,
                      captions_per_media: int | None,
                      media_tokens: TokenSet | None = None) -> LanguageGallery:
    """The gallery of ``lang``'s captions over every media, with their token sets where the
    media's (``media_tokens``, one set for every language) are given."""
    # One empty block for every item without the language, and views sliced only where the
    # protocol cuts captions: a new tensor per item took a third of this at 200 languages.
    empty = media.new_zeros(0, media.shape[1])
    rows = [item['caption_embeddings'].get(lang, empty) for item in items]
    if captions_per_media is not None:
        rows = [captions[:captions_per_media] for captions in rows]
    owners = torch.repeat_interleave(torch.arange(len(items)),
                                     torch.tensor([r.shape[0] for r in rows]))
    if media_tokens is None:
        return LanguageGallery(media, torch.cat(rows), owners)
    return LanguageGallery(
        media, torch.cat(rows), owners, media_tokens,
        TokenSet.stack([seq for item in items
                        for seq in list(item['caption_tokens'].get(lang, ()))[:captions_per_media]],
                       media_tokens.tokens.shape[-1]))
