"""What a validation or a test scores: each dataset's name, split, languages and media count,
the galleries its metrics rank where not the whole set, and how the model reads each language's
captions (those its text context cuts, the tokens its vocabulary lacks), as a test result
records them and the phase report names them."""
from __future__ import annotations

import time
from collections.abc import Sized
from typing import Any

from mmengine.logging import print_log

__all__ = ['caption_token_counts', 'evaluated_sets']


def evaluated_sets(loop: Any, model: Any, split: str) -> list[dict]:
    """Dataset, split, languages and media count of every dataset ``loop`` scores (a
    ``ValLoop``, ``TestLoop`` or ``MultiDataset*Loop``), as a result's ``test_sets`` records
    them, with the galleries its metrics rank where not the whole set (:func:`_ranked_galleries`)
    and :func:`caption_token_counts` of each; logs how many captions were counted and the time,
    naming them ``split`` captions.

    Args:
        loop: the runner's validation or test loop.
        model: the unwrapped retriever whose tokenizers read the captions.
        split: what the log line calls the captions (``'test'``, ``'validation'``).
    """
    from xmr.engine.eval_loops import scored_loaders  # xmr.engine imports xmr.evaluation

    sets, started = [], time.perf_counter()
    for loader, evaluator in scored_loaders(loop):
        metainfo = getattr(loader.dataset, 'metainfo', None) or {}
        languages = list(metainfo.get('languages') or [])
        sets.append(dict(dataset=metainfo.get('dataset', type(loader.dataset).__name__),
                         split=metainfo.get('split'), languages=languages,
                         media=len(loader.dataset) if isinstance(loader.dataset, Sized) else None,
                         galleries=_ranked_galleries(evaluator),
                         caption_token_counts=caption_token_counts(model, loader.dataset,
                                                                   languages)))
    # A tokenizer reads some 5,000 to 10,000 captions a second on one core: a benchmark of
    # 200 languages waits for this before its test, and is told why.
    captions = sum(count['captions'] for test_set in sets
                   for count in test_set['caption_token_counts'].values())
    print_log(f'counted the tokens of the {captions:,} {split} captions, as the model reads each '
              f'language, in {time.perf_counter() - started:.1f} s', logger='current')
    return sets


def _ranked_galleries(evaluator: Any) -> list[str]:
    """What the metrics of ``evaluator`` rank where that is not the whole set with every
    caption (:attr:`RetrievalMetric.ranked_galleries <xmr.evaluation.RetrievalMetric>`,
    ``['coco_1k_5fold: fold 0 of 5']``), each once; empty where they all rank it whole."""
    described = (getattr(metric, 'ranked_galleries', '')
                 for metric in getattr(evaluator, 'metrics', []))
    return sorted({text for text in described if text})


def caption_token_counts(model: Any, dataset: Any, languages: list[str]) -> dict[str, dict]:
    """Per language of ``dataset``, how ``model``'s tokenizer for it reads all its captions,
    as evaluation encodes them: ``{lang: {'captions', 'context', 'cut', 'pieces', 'unknown'}}``
    (:class:`~xmr.models.language.caption_token_counts.CaptionTokenCounts`: ``cut`` the
    captions longer than the ``context``, ``unknown`` the ``pieces`` the vocabulary lacks).

    Empty for a dataset that exposes no captions, and for a model whose data preprocessor does
    not count (a user's own, not a :class:`~xmr.models.RetrievalDataPreprocessor`): the counts
    explain recalls, they are not needed to compute them.
    """
    from xmr.datasets.dataset_captions import NoCaptions

    count = getattr(model.data_preprocessor, 'count_dataset_caption_tokens', None)
    if count is None:
        return {}
    try:
        counts = count(dataset, languages)
    except NoCaptions:
        return {}
    return {lang: dict(captions=row.captions, context=row.context, cut=row.cut,
                       pieces=row.pieces, unknown=row.unknown) for lang, row in counts.items()}
