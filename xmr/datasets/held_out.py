"""Whether evaluation media are held out of training.

A run whose validation or test gallery holds images or videos it trains on (the same split
named twice, or a "val" file cut from the training split) reports retrieval figures no paper's
are comparable with, and (validation) selects its checkpoint on them; nothing else in a run
says so. Training checks its validation galleries before the first step
(``PhasedTrainLoop``); a test, of a config that trains, checks its test galleries
(:func:`check_test_held_out`, ``tools/test.py``; ``tools/train.py --test`` before training
as well).
"""
from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ['EXAMPLES_SHOWN', 'check_held_out', 'check_test_held_out', 'media_files']

#: How many shared media files an error names.
EXAMPLES_SHOWN = 5


def media_files(dataset: Any) -> Iterator[tuple[str, str]] | None:
    """The media files a dataset reads, in record order, each as (normalised absolute path,
    path as its annotation gives it); ``None`` for a dataset that reads no annotation's media
    (a text-only annotation, a synthetic set that renders its images).

    Paths are compared after joining the dataset's media root, so two configs that reach one
    file through other ``data_root`` / ``data_prefix`` spellings (``data/x``, ``./data/x``)
    meet; links are not followed (a ``stat`` per file would cost minutes on CC3M). A text-only
    read of an image annotation (``with_media=False``) still counts: its captions describe
    those media. A :class:`~xmr.datasets.concat.ConcatDataset` reads its children's, in order."""
    children = _concat_children(dataset)
    if children is not None:
        found = [files for child in children if (files := media_files(child)) is not None]
        return itertools.chain.from_iterable(found) if found else None
    annotation = getattr(dataset, 'annotation', None)
    media_root = getattr(dataset, 'media_root', None)
    if annotation is None or media_root is None or annotation.media_type == 'text':
        return None
    root = os.path.abspath(media_root)
    return ((os.path.normpath(os.path.join(root, record.media_path)), record.media_path)
            for record in annotation.items if record.media_path is not None)


def check_held_out(training: Mapping[str, Any], evaluation: Mapping[str, Any]) -> None:
    """Refuse evaluation datasets that share media files with a training dataset.

    The evaluation sets' paths are held in memory, the training sets' streamed past them: a
    training set of millions of images costs one pass over its records, no copy.

    Args:
        training: ``{what the dataset is, for the message: dataset}`` of the data trained on.
        evaluation: the same of the data scored (validation or test galleries), each named
            with its split (``val dataset 0``, ``test dataset 0``).

    Raises:
        ValueError: naming both datasets and their annotation files, how many of the
            evaluation dataset's media files the training one holds, the first
            :data:`EXAMPLES_SHOWN` of them (in the evaluation file's order), and the fix.
    """
    scored = {where: (dataset, dict(files)) for where, dataset in evaluation.items()
              if (files := media_files(dataset)) is not None}
    if not scored:
        return
    wanted = set().union(*(files for _, files in scored.values()))
    for train_where, train_dataset in training.items():
        trained = media_files(train_dataset)
        if trained is None:
            continue
        hits = {path for path, _ in trained if path in wanted}
        for where, (dataset, files) in scored.items():
            shared = [shown for path, shown in files.items() if path in hits]
            if shared:
                raise ValueError(
                    f'{where}{_read_from(dataset)} shares {len(shared)} of its {len(files)} '
                    f'media files with {train_where}{_read_from(train_dataset)}, e.g. '
                    f'{_examples(shared)}: its retrieval scores would be on media the model '
                    'trained on. Point the two at disjoint splits; a deliberate overlap (a '
                    'debugging run) is allowed by train_cfg.allow_eval_overlap=True')


def check_test_held_out(cfg: Mapping[str, Any],
                        test_datasets: Sequence[Any] | None = None) -> None:
    """Refuse test galleries that share media files with the data the config trains on.

    The same check as training's of its validation galleries (:func:`check_held_out`, the same
    opt-out ``train_cfg.allow_eval_overlap``), for the test loaders, which MMEngine builds only
    when a test runs. The training datasets are built from ``cfg`` (the train loader, the
    phases' own, a hook's), those whose annotation file is on this machine
    (:func:`~xmr.run_config.present_train_datasets`): a checkpoint tested where its training
    data is not has nothing to compare with. A config without training data (a zero-shot
    evaluation) is not checked.

    Args:
        cfg: the run's config.
        test_datasets: the test loop's datasets, in ``test_dataloader`` order; ``None``: built
            from ``cfg``'s ``test_dataloader`` (``tools/train.py --test``, before training),
            and only where the check is made (no opt-out, training data present).

    Raises:
        ValueError: as :func:`check_held_out`, naming ``test dataset <i>``.
    """
    from xmr.engine.feature_cache.dataset import source_dataset
    from xmr.registry import DATASETS
    from xmr.run_config import loader_datasets, present_train_datasets

    if (cfg.get('train_cfg') or {}).get('allow_eval_overlap'):
        return
    training = present_train_datasets(cfg)
    if not training:
        return
    if test_datasets is None:
        test_datasets = [DATASETS.build(dict(dataset))
                         for dataset in loader_datasets(cfg, 'test')]
    scored = {f'test dataset {index} ({type(source_dataset(dataset)).__name__})':
              source_dataset(dataset) for index, dataset in enumerate(test_datasets)}
    if not any(media_files(dataset) is not None for dataset in scored.values()):
        return
    check_held_out({f'training dataset {key}': DATASETS.build(dict(dataset))
                    for key, dataset in training.items()}, scored)


def _concat_children(dataset: Any) -> list[Any] | None:
    """A ConcatDataset's children, else ``None``; imported only for a dataset built, so that
    this module's importers need not load torch."""
    if type(dataset).__name__ != 'ConcatDataset':
        return None
    from xmr.datasets.concat import ConcatDataset
    return list(dataset.datasets) if isinstance(dataset, ConcatDataset) else None


def _read_from(dataset: Any) -> str:
    """`` (<annotation file>)``, a ConcatDataset's children's files in order, or nothing."""
    from xmr.datasets.concat import annotation_files  # a dataset built: torch is loaded
    files = annotation_files(dataset)
    return f" ({', '.join(files)})" if files else ''


def _examples(paths: list[str]) -> str:
    shown = ', '.join(paths[:EXAMPLES_SHOWN])
    return shown + (', ...' if len(paths) > EXAMPLES_SHOWN else '')
