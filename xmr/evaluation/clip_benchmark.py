"""Test results in CLIP_benchmark's JSON layout, to sit beside open_clip's published numbers.

CLIP_benchmark (LAION-AI/CLIP_benchmark, ``clip_benchmark eval``) writes one file per model,
dataset and language, named ``{dataset}_{pretrained}_{model}_{language}_{task}.json``::

    {"dataset": "crossmodal3600", "model": "...", "pretrained": "...",
     "task": "zeroshot_retrieval",
     "metrics": {"image_retrieval_recall@1": 0.023, "text_retrieval_recall@1": 0.031, ...},
     "language": "sw"}

``image_retrieval_recall@k`` is text→image (xmr's ``t2i_R@k``) and ``text_retrieval_recall@k``
image→text (``i2t_R@k``), both as fractions where xmr reports percent. Datasets and languages
carry CLIP_benchmark's names (``flickr30k-200``, ``swh_Latn``; XTD10 is
``multilingual_mscoco_captions``, its Japanese ``jp``). Only results whose protocol ranks what
CLIP_benchmark ranks are written: every media of the set (not a few-shot test split), and for
Crossmodal-3600 the first caption of each image (``crossmodal3600_first_caption``).
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from xmr.datasets.few_shot import is_few_shot_split
from xmr.datasets.languages import release_code
from xmr.evaluation.protocols import PROTOCOLS
from xmr.fileio import atomic_write_texts
from xmr.json_files import JSONFileError, load_json

__all__ = ['CLIP_BENCHMARK_DATASETS', 'COMPARABLE_PROTOCOLS', 'ScoredDataset',
           'scored_datasets', 'comparable_entries', 'clip_benchmark_records',
           'clip_benchmark_filename',
           'clip_benchmark_texts', 'write_clip_benchmark', 'clip_benchmark_files']

# xmr dataset name -> CLIP_benchmark's; other datasets keep their name.
CLIP_BENCHMARK_DATASETS = {'flickr30k_200': 'flickr30k-200', 'mscoco': 'mscoco_captions',
                           'xtd10': 'multilingual_mscoco_captions'}
# Protocols that rank the whole evaluation set, as CLIP_benchmark does.
COMPARABLE_PROTOCOLS = ('standard', 'coco_5k', 'text_to_video', 'xtd10_t2i_r10', 'xtd200',
                        'flickr30k_200', 'crossmodal3600_first_caption')
_TASK = 'zeroshot_retrieval'
#: The fields of a CLIP_benchmark result file, all of which :func:`write_clip_benchmark` writes.
_RECORD_FIELDS = frozenset({'dataset', 'model', 'pretrained', 'task', 'metrics', 'language'})
_RECALL = re.compile(r'^(t2i|i2t)_R@(\d+)$')
_CB_NAMES = {'t2i': 'image_retrieval_recall', 'i2t': 'text_retrieval_recall'}


class ScoredDataset(NamedTuple):
    """One test metric: its key prefix, the dataset it scored, its protocol, ``ranking``:
    ``'exact'``, or the option that ranks otherwise than CLIP_benchmark (the DASD code's grouped
    image→text, an approximate index, token re-ranking of a shortlist), the ``languages`` it
    scores (``None``: each of the dataset's) and the dataset's ``split`` (``''``: unknown)."""

    prefix: str
    dataset: str
    protocol: str
    ranking: str = 'exact'
    languages: tuple[str, ...] | None = None
    split: str = ''


def scored_datasets(test_loop: Any) -> list[ScoredDataset]:
    """Every retrieval metric of a ``TestLoop`` or ``MultiDatasetTestLoop`` with its dataset."""
    from xmr.engine.eval_loops import scored_loaders  # xmr.engine imports xmr.evaluation

    scored = []
    for loader, evaluator in scored_loaders(test_loop):
        metainfo = getattr(loader.dataset, 'metainfo', None) or {}
        dataset = str(metainfo.get('dataset') or type(loader.dataset).__name__)
        split = str(metainfo.get('split') or '')
        scored.extend(ScoredDataset(metric.prefix or '', dataset, metric.protocol,
                                    _ranking(metric), _languages(metric), split)
                      for metric in evaluator.metrics if hasattr(metric, 'protocol'))
    return scored


def _ranking(metric: Any) -> str:
    """``'exact'``, or the metric option whose recalls CLIP_benchmark's exact top-k does not
    give: grouped image→text ranks caption groups (R@5/10 as high or higher), an approximate
    index or a re-ranked shortlist may miss positives."""
    if getattr(metric, 'i2t_mode', 'standard') != 'standard':
        return f"i2t_mode='{metric.i2t_mode}'"
    index = (getattr(metric, 'search', None) or {}).get('index', 'flat')
    if index != 'flat':
        return f"search index '{index}'"
    if getattr(metric, 'scoring', 'embedding') == 'tokens_rerank':
        return "scoring='tokens_rerank'"
    return 'exact'


def _languages(metric: Any) -> tuple[str, ...] | None:
    languages = getattr(metric, 'languages', None)
    return None if languages is None else tuple(languages)


def _comparable(scored: ScoredDataset) -> bool:
    # A few-shot test split (XTD10's 900 images) is a part of the set CLIP_benchmark ranks.
    if (scored.protocol not in COMPARABLE_PROTOCOLS or scored.ranking != 'exact'
            or is_few_shot_split(scored.split)):
        return False
    return scored.dataset != 'crossmodal3600' or PROTOCOLS[scored.protocol].captions_per_media == 1


def clip_benchmark_records(metrics: Mapping[str, float], scored: Sequence[ScoredDataset],
                           model: str, pretrained: str) -> list[dict[str, Any]]:
    """One CLIP_benchmark result per comparable dataset and language of a test run.

    Args:
        metrics: the test loop's metric dict (recalls in percent).
        scored: the metrics that produced it (:func:`scored_datasets`).
        model: the ``model`` field (xmr: the config or ``--name``).
        pretrained: the ``pretrained`` field (xmr: the checkpoint).

    Raises:
        ValueError: when no metric is comparable (naming each and why), or two would write the
            same file.
    """
    records, owners = [], {}
    for entry in comparable_entries(scored):
        for lang, recalls in _recalls(metrics, entry.prefix).items():
            record = {'dataset': _benchmark_dataset(entry.dataset),
                      'model': model, 'pretrained': pretrained, 'task': _TASK,
                      'metrics': recalls, 'language': release_code(entry.dataset, lang)}
            name = clip_benchmark_filename(record)
            if name in owners:
                raise ValueError(f"test metrics '{owners[name]}' and '{entry.prefix}' both give "
                                 f'{name}; keep one metric per dataset and language')
            owners[name] = entry.prefix
            records.append(record)
    return records


def _benchmark_dataset(dataset: str) -> str:
    """CLIP_benchmark's name of the xmr ``dataset`` (``'xtd10'`` ->
    ``'multilingual_mscoco_captions'``); a dataset it does not know keeps its name."""
    return CLIP_BENCHMARK_DATASETS.get(dataset, dataset)


def comparable_entries(scored: Sequence[ScoredDataset]) -> list[ScoredDataset]:
    """The metrics whose results CLIP_benchmark's files can hold, checked before a test: two of
    one dataset that score a language alike would write one file twice.

    Raises:
        ValueError: when none is comparable (naming each and why), or two would write one file
            (a metric of the dataset's every language, ``languages=None``, meets any other).
    """
    comparable = [entry for entry in scored if _comparable(entry)]
    if not comparable:
        listed = ', '.join(f'{s.prefix or "<no prefix>"} ({s.dataset}, {s.protocol}'
                           + ('' if s.ranking == 'exact' else f', {s.ranking}')
                           + (f', split {s.split}' if is_few_shot_split(s.split) else '') + ')'
                           for s in scored)
        raise ValueError(f'no test metric is comparable with CLIP_benchmark: {listed}. It ranks '
                         f'the whole set ({", ".join(COMPARABLE_PROTOCOLS)}; not a few-shot '
                         'split of it), Crossmodal-3600 '
                         "with the first caption only (protocol='crossmodal3600_first_caption'), "
                         "exactly, image->text by any caption (i2t_mode='standard')")
    for position, entry in enumerate(comparable):
        for other in comparable[:position]:
            shared = (None if entry.languages is None or other.languages is None
                      else sorted(set(entry.languages) & set(other.languages)))
            named = _benchmark_dataset(entry.dataset)
            if named == _benchmark_dataset(other.dataset) and shared != []:
                scores = 'the languages' if shared is None else f'language {shared[0]}'
                of = (entry.dataset if entry.dataset == other.dataset else
                      f'{other.dataset} and {entry.dataset} (both {named} to CLIP_benchmark)')
                raise ValueError(f"test metrics '{other.prefix}' and '{entry.prefix}' both "
                                 f'score {scores} of {of}, which CLIP_benchmark keeps in one '
                                 'file; keep one metric per dataset and language (their '
                                 'languages)')
    return comparable


def _recalls(metrics: Mapping[str, float], prefix: str) -> dict[str, dict[str, float]]:
    head = f'{prefix}/' if prefix else ''
    found: dict[str, dict[tuple[int, str], float]] = {}
    for key, value in metrics.items():
        if not key.startswith(head) or key[len(head):].count('/') != 1:
            continue
        lang, statistic = key[len(head):].split('/')
        match = _RECALL.match(statistic)
        if match is not None:
            direction, k = match.groups()
            found.setdefault(lang, {})[(int(k), direction)] = float(value) / 100
    # CLIP_benchmark's order: for each k, image retrieval then text retrieval.
    return {lang: {f'{_CB_NAMES[direction]}@{k}': value
                   for (k, direction), value in sorted(
                       values.items(), key=lambda item: (item[0][0], item[0][1] != 't2i'))}
            for lang, values in found.items()}


def clip_benchmark_filename(record: Mapping[str, Any]) -> str:
    """CLIP_benchmark's default ``{dataset}_{pretrained}_{model}_{language}_{task}.json``.

    As there, a ``pretrained`` checkpoint file gives its base name and ``/`` becomes ``_``.
    """
    pretrained = os.path.basename(record['pretrained'])
    fields = [record['dataset'], pretrained, record['model'], record['language'], record['task']]
    return '_'.join(str(field).replace('/', '_') for field in fields) + '.json'


def clip_benchmark_texts(records: Sequence[Mapping[str, Any]],
                         out_dir: str | os.PathLike) -> dict[Path, str]:
    """Each record's file in ``out_dir`` and its JSON text."""
    return {Path(out_dir) / clip_benchmark_filename(record):
            json.dumps(record, ensure_ascii=False) + '\n' for record in records}


def write_clip_benchmark(records: Sequence[Mapping[str, Any]],
                         out_dir: str | os.PathLike) -> list[Path]:
    """Write each record as its own file in ``out_dir``, all or none; return the paths."""
    return atomic_write_texts(clip_benchmark_texts(records, out_dir))


def clip_benchmark_files(folder: str | os.PathLike) -> list[Path]:
    """The CLIP_benchmark result files in ``folder``: JSON objects with every field
    :func:`write_clip_benchmark` writes; other files are not theirs.

    Args:
        folder: an export folder (``<result>_clip_benchmark/`` of ``tools/test.py``); it may
            not exist.

    Returns:
        The files, sorted; empty when the folder does not exist.
    """
    files = []
    for path in sorted(Path(folder).glob('*.json')):
        try:
            record = load_json(path)
        except (OSError, JSONFileError):  # a number too long, too deep: not ours either
            continue
        if isinstance(record, dict) and _RECORD_FIELDS <= record.keys():
            files.append(path)
    return files
