"""The caption languages, media sizes and gallery sizes of a run's data, checked against the
model and its metrics before anything trains."""
from __future__ import annotations

import logging
from collections.abc import Mapping

import torch
from mmengine.logging import print_log
from torch.utils.data import Dataset

from xmr.datasets.pairs import CaptionPairDataset
from xmr.datasets.retrieval import RetrievalDataset
from xmr.engine.eval_loops import scored_loaders
from xmr.engine.feature_cache import source_dataset
from xmr.evaluation.protocols import PROTOCOLS


def caption_languages(dataset: Dataset) -> list[str] | None:
    """Languages of the captions a dataset hands the model.

    A :class:`CaptionPairDataset` hands its ``target_langs`` (its annotation's ``languages``
    may list more); other datasets state theirs as ``metainfo['languages']`` (pair datasets:
    the target languages; galleries: every caption language, the source one included). A
    :class:`CachedFeatureDataset` hands those of the dataset it wraps. Pairs of source
    captions alone (``source_only``, a synthetic ``languages=[]``) state ``[]``: no target
    language; a dataset that states none yields ``None``.
    """
    dataset = source_dataset(dataset)
    if isinstance(dataset, CaptionPairDataset):
        return list(dataset.target_langs)
    languages = (getattr(dataset, 'metainfo', None) or {}).get('languages')
    return None if languages is None else list(languages)


def check_data_languages(model: torch.nn.Module, datasets: Mapping[str, Dataset]) -> None:
    """Fail unless the model reads every caption language of every dataset, and every gallery
    carries the texts the model queries with (``check_gallery``: the back-translations of
    PECTVLM's translate-test and routine 3).

    Args:
        model: the retriever; a model without ``check_languages`` is not checked.
        datasets: ``{what the dataset is, for the message: dataset}``, e.g.
            ``{'phase cross_lingual dataset (train_dataloader)': ...}``.

    Raises:
        ValueError: naming the dataset, the languages without adapters and those the model
            reads, or the languages whose query texts the gallery lacks.
    """
    check = getattr(model, 'check_languages', None)
    if check is None:
        return
    check_gallery = getattr(model, 'check_gallery', None)
    for where, dataset in datasets.items():
        check(caption_languages(dataset) or [], where)
        gallery = source_dataset(dataset)
        if check_gallery is not None and isinstance(gallery, RetrievalDataset):
            check_gallery(gallery.metainfo, where)


def unfed_languages(model: torch.nn.Module, phase_datasets: Mapping[str, Dataset]) -> list[str]:
    """The model's languages other than its source one that no phase's dataset holds: their
    modules stay as initialised (or as their group's, for adapters grouped across languages),
    and the run ends without a word on them. ``[]`` where a dataset states no languages, or the
    model names none.

    Args:
        model: the retriever (``languages``, ``source_language``); one without a
            ``language_branch`` (a dual encoder, whose one text tower reads every language it
            trains on and others zero-shot) has no module of a language.
        phase_datasets: ``{what the dataset is: dataset}`` of the phases that will train.
    """
    if getattr(model, 'language_branch', None) is None:
        return []
    languages, source = getattr(model, 'languages', None), getattr(model, 'source_language', None)
    held = [caption_languages(dataset) for dataset in phase_datasets.values()]
    # A dataset that states no languages may hold any: nothing can be told. One of source
    # captions alone (a source finetune's) states [] and tells of no target language.
    if not languages or source is None or not held or None in held:
        return []
    fed = set().union(*held)
    return [lang for lang in languages if lang != source and lang not in fed]


def check_media_sizes(model: torch.nn.Module, datasets: Mapping[str, Dataset]) -> None:
    """Fail unless each dataset's media transform (or, for a dataset that renders its images,
    its ``image_size``) gives the size the image tower takes; warn where it resizes otherwise
    than the tower's weights were evaluated (:func:`transform_geometry_problem`).

    A transform of another size (``MediaTransform`` left at ViT-B-32's 224 px for a 336 px
    tower) failed inside the tower at its first batch, with two token counts: at the feature
    cache, or at the first validation, a phase in. One of the right size and another geometry
    (CLIP's short-side crop, which the ``_base_`` data configs name, for a 224 px SigLIP, CLIPA
    or DFN tower whose weights saw squashed images) ran without a word on other pixels than
    the published numbers'; a deliberate choice (an ablation) is warned of, not refused.
    Datasets without media, or whose transform states no ``size``, are not checked.

    Raises:
        ValueError: naming the dataset, both sizes and the fix.
    """
    for where, dataset in datasets.items():
        dataset = source_dataset(dataset)
        if not getattr(dataset, 'with_media', True):
            continue
        transform = getattr(dataset, 'transform', None)
        rendered = getattr(dataset, 'image_size', None)
        if getattr(transform, 'size', None) is None and isinstance(rendered, int):
            # A dataset that renders its images (the synthetic sets) at its image_size: the
            # tower failed at the first phase reading images, the phases before it trained.
            expected = _tower_size(model)
            if expected is not None and (rendered, rendered) != expected:
                raise ValueError(
                    f'{where}: renders {rendered}x{rendered} images, but the image tower of '
                    f'{type(model.backbone).__name__} takes {expected[0]}x{expected[1]}: set '
                    f"the dataset's image_size={expected[0]}")
            continue
        problem = transform_size_problem(model, transform, 'the dataset')
        if problem is not None:
            raise ValueError(f'{where}: its transform {problem}')
        problem = transform_geometry_problem(model, transform, 'the dataset')
        if problem is not None:
            print_log(f'{where}: its transform {problem}', logger='current',
                      level=logging.WARNING)


def _tower_size(model: torch.nn.Module) -> tuple[int, int] | None:
    """``(height, width)`` the image tower takes (its ``image_size``), ``None`` where it
    states none (a text-only backbone)."""
    expected = getattr(getattr(model, 'backbone', None), 'image_size', None)
    if expected is None:
        return None
    return (expected, expected) if isinstance(expected, int) else tuple(expected)


def transform_size_problem(model: torch.nn.Module, transform: object,
                           receiver: str) -> str | None:
    """What is wrong with a media transform of another size than the image tower takes.

    Args:
        model: the model; its ``backbone.image_size`` is the size the tower takes.
        transform: the transform; its ``size`` is the size it gives.
        receiver: what the fix gives the right transform to (``'the dataset'``).

    Returns:
        ``gives AxB media, but the image tower of X takes CxD: give <receiver> ...``, or
        ``None`` when the sizes agree or either is not stated (a text-only backbone).
    """
    backbone = getattr(model, 'backbone', None)
    expected = _tower_size(model)
    size = getattr(transform, 'size', None)
    if expected is None or size is None:
        return None
    if tuple(size) == expected:
        return None
    return (f'gives {size[0]}x{size[1]} media, but the image tower of {type(backbone).__name__} '
            f"takes {expected[0]}x{expected[1]}: give {receiver} the backbone's transform "
            f'(MediaTransform with its backbone and pretrained, or '
            f'{_own_geometry(backbone, expected)})')


def transform_geometry_problem(model: torch.nn.Module, transform: object,
                               receiver: str) -> str | None:
    """How a media transform of the tower's size resizes otherwise than the tower's weights
    were evaluated (its backbone's ``media_transform()``): ``resize_mode`` and, for
    ``'longest'``, ``fill_color``, unless the transform crops at random instead (training with
    ``random_resized_crop``); ``interpolation`` always.

    Args:
        model: the model; its ``backbone.media_transform()`` is the geometry of its weights.
        transform: the transform (``MediaTransform``'s attributes).
        receiver: what the fix gives the right transform to (``'the dataset'``).

    Returns:
        ``resizes with resize_mode='shortest', but the weights of the image tower of X were
        evaluated with resize_mode='squash': give <receiver> ...``, or ``None`` when they
        agree or either states no geometry (a transform or backbone of one's own).
    """
    backbone = getattr(model, 'backbone', None)
    own = getattr(backbone, 'media_transform', None)
    expected = _tower_size(model)
    if own is None or expected is None or getattr(transform, 'resize_mode', None) is None:
        return None
    record = own()
    keys = []
    if not (getattr(transform, 'training', False)
            and getattr(transform, 'random_resized_crop', None) is not None):
        keys += ['resize_mode', 'fill_color'] if record['resize_mode'] == 'longest' \
            else ['resize_mode']
    keys.append('interpolation')
    given = {key: getattr(transform, key, None) for key in keys}
    # MediaTransform holds torchvision's InterpolationMode, whose value is the record's name.
    given['interpolation'] = getattr(given['interpolation'], 'value', given['interpolation'])
    departs = [key for key in keys if given[key] is not None and given[key] != record[key]]
    if not departs:
        return None
    ours = ', '.join(f'{key}={given[key]!r}' for key in departs)
    theirs = ', '.join(f'{key}={record[key]!r}' for key in departs)
    return (f'resizes with {ours}, but the weights of the image tower of '
            f'{type(backbone).__name__} were evaluated with {theirs}: give {receiver} the '
            "backbone's transform (MediaTransform with its backbone and pretrained, or "
            f'{_own_geometry(backbone, expected)}) to score as they were scored')


def _own_geometry(backbone: object, expected: tuple[int, int]) -> str:
    """The ``MediaTransform`` arguments of the backbone's own geometry, as a config writes them.

    ``size=`` alone gave CLIP's short-side crop, not the ``squash`` of a SigLIP 2 or CCLM tower;
    a backbone stating no geometry (no ``media_transform``) is given its size.
    """
    own = getattr(backbone, 'media_transform', None)
    if own is None:
        return f'size={expected[0]}'
    cfg = {key: value for key, value in own().items() if key != 'type'}
    height, width = cfg['size']
    cfg['size'] = height if height == width else (height, width)
    return ', '.join(f'{key}={value!r}' for key, value in cfg.items())


def check_gallery_sizes(loop, split: str = 'val') -> None:
    """Each gallery of a validation or test loop has the media count its metrics' protocol is
    defined on (``xtd10_t2i_r10``: 1,000), checked before training or testing: the metric
    finds it once the whole gallery is encoded, at the first validation a phase in.

    Args:
        loop: the runner's ``val_loop`` or ``test_loop``.
        split: ``'val'`` or ``'test'``, for the message.

    Raises:
        ValueError: naming the gallery, its size, the protocol and the fix.
    """
    for index, (loader, evaluator) in enumerate(scored_loaders(loop)):
        dataset = source_dataset(loader.dataset)
        if not isinstance(dataset, RetrievalDataset):
            continue
        for metric in getattr(evaluator, 'metrics', []):
            protocol = PROTOCOLS.get(getattr(metric, 'protocol', None))
            given = getattr(metric, 'gallery_size', None)
            expected = given or (protocol.gallery_size if protocol is not None else None)
            if expected is None or len(dataset) == expected:
                continue
            fixed = (f'gallery_size={given}' if given else
                     f"protocol '{protocol.name}' is defined on {expected}")
            raise ValueError(f'{split} dataset {index} ({dataset.ann_file}) holds {len(dataset)} '
                             f"media, but its metric's {fixed}: give the metric a protocol "
                             f'for any size (standard), or gallery_size={len(dataset)} to '
                             'score it on this one')
