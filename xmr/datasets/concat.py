"""Several xmr datasets read as one: ``dataset=dict(type='ConcatDataset', datasets=[...])``.

MMEngine's ``ConcatDataset`` cannot serve here: it builds dict children with MMEngine's root
``DATASETS`` registry, where xmr's types (``CaptionPairDataset``, ``SyntheticPairDataset``) are
not registered, and it takes only ``mmengine.dataset.BaseDataset`` children, which xmr's
datasets (``torch.utils.data.Dataset``) are not. This one, registered in xmr's ``DATASETS``
under the same name, is the one a config of scope ``xmr`` builds: the child registry is
searched before its parent.
"""
from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from xmr.datasets.base import MediaDataset
from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.datasets.sample_keys import sample_draws
from xmr.registry import DATASETS
from xmr.utils.listing import counted, first_few

__all__ = ['ConcatDataset', 'annotation_files']


@DATASETS.register_module()
class ConcatDataset(MediaDataset):
    """The items of ``datasets``, one after the other: index ``i`` of the whole is index
    ``i - offset`` of the child that holds it.

    What xmr's samplers, hooks and checks read of a dataset is given across the children:
    ``metainfo`` (the keys every child agrees on, ``languages`` and each child's under
    ``datasets``), ``languages``, ``item_languages()`` (where every child has it),
    ``with_media`` (set on every child), ``check_media_exist()`` (every child's),
    ``on_corrupt`` (the children's, which must agree) and, of galleries (children with
    ``media_ids()``), ``media_ids()`` (where every child has it). An item's
    ``index`` is its index in the whole, and its random draws (augmentation, frame offsets)
    those of that index's sample key, so two children's item 0 do not draw alike.

    Args:
        datasets: the children, each a config built with xmr's ``DATASETS`` or a built
            dataset; at least one.

    Raises:
        ValueError: no child, two children whose items carry other keys (a batch mixing
            them would lose a key or fail at collate), naming both children and the keys, or
            two of other ``on_corrupt`` policies, or two galleries holding one media id
            (scoring takes one item per media), naming both, the ids and the fix.
        TypeError: a child that is not a sized ``torch.utils.data.Dataset``.
    """

    def __init__(self, datasets: Sequence[Mapping[str, Any] | Dataset]) -> None:
        if isinstance(datasets, (str, Mapping)) or not isinstance(datasets, Sequence) \
                or not datasets:
            raise ValueError('ConcatDataset datasets must be a non-empty list of dataset '
                             f'configs or datasets, got {datasets!r}')
        self.datasets = [DATASETS.build(dict(child)) if isinstance(child, Mapping) else child
                         for child in datasets]
        for position, child in enumerate(self.datasets):
            if not isinstance(child, Dataset) or not hasattr(child, '__len__'):
                raise TypeError(f'ConcatDataset datasets[{position}] must be a dataset with a '
                                f'length (a config dict or a torch Dataset), got '
                                f'{type(child).__name__}')
        #: ``[K]`` items in children ``0 .. k``.
        self.cumulative_sizes = np.cumsum([len(child) for child in self.datasets]).tolist()
        self.item_keys = _check_same_item_keys(self.datasets)
        self.on_corrupt = _shared_policy(self.datasets)
        _check_distinct_media(self.datasets)
        self.languages = _union(_child_languages(child) for child in self.datasets)
        if all(callable(getattr(child, 'item_languages', None)) for child in self.datasets):
            # An attribute only where every child tells its items' languages: the
            # LanguageBatchSampler and the feature cache look it up with getattr and name a
            # dataset without it.
            self.item_languages = self._item_languages
        if all(callable(getattr(child, 'media_ids', None)) for child in self.datasets):
            # Only a concat of galleries lists them, so that an outer ConcatDataset compares
            # it with its other galleries and never a pair dataset, whose media repeat.
            self.media_ids = self._media_ids

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def locate(self, index: int) -> tuple[int, int]:
        """``(child, index within the child)`` of the whole's ``index`` (negative counts from
        the end).

        Raises:
            IndexError: naming the index and the length.
        """
        whole = int(index) + (len(self) if index < 0 else 0)
        if not 0 <= whole < len(self):
            raise IndexError(f'ConcatDataset index {int(index)} is outside [0, {len(self)})')
        child = bisect.bisect_right(self.cumulative_sizes, whole)
        return child, whole - (self.cumulative_sizes[child - 1] if child else 0)

    def __getitem__(self, index: int) -> Any:
        child, local = self.locate(index)
        position = int(index) % len(self)  # a negative index counts from the end
        # The draws are keyed here by the whole's index; the child gets a plain int, which
        # keys nothing, so it draws from the streams seeded for the whole's index.
        with sample_draws(index):
            item = self.datasets[child][local]
        if isinstance(item, SkippedMedia):
            return item._replace(index=position)
        if isinstance(item, dict) and 'index' in item:
            item = {**item, 'index': position}
        return item

    @property
    def with_media(self) -> bool:  # type: ignore[override]
        """Whether any child decodes media; set, it is set on every child that can."""
        return any(getattr(child, 'with_media', False) for child in self.datasets)

    @with_media.setter
    def with_media(self, value: bool) -> None:
        for child in self.datasets:
            if isinstance(child, MediaDataset):
                child.with_media = value

    @property
    def metainfo(self) -> dict[str, Any]:
        """The keys of the children's ``metainfo`` whose values all agree (``media_type``,
        ``source_lang``), ``languages`` (:attr:`languages`) and ``datasets``: each child's
        ``metainfo``, in order."""
        metas = [dict(getattr(child, 'metainfo', None) or {}) for child in self.datasets]
        shared = {key: value for key, value in metas[0].items()
                  if all(key in meta and meta[key] == value for meta in metas[1:])}
        return {**shared, 'languages': list(self.languages), 'datasets': metas}

    def _item_languages(self) -> np.ndarray:
        """``[N]`` each item's language as a position in :attr:`languages`; ``-1`` (a
        ``CaptionPairDataset``'s source captions) stays ``-1``. A code that a child's
        languages do not name (English pairs of a ``SyntheticPairDataset(languages=[])``)
        gets a group of its own past :attr:`languages`, apart from every other child's."""
        groups, extra = [], len(self.languages)
        for child in self.datasets:
            names = _child_languages(child)
            codes = np.asarray(child.item_languages(), dtype=np.int64)
            mapped = np.full_like(codes, -1)
            for code in np.unique(codes):
                if code < 0:
                    continue
                if code < len(names):
                    mapped[codes == code] = self.languages.index(names[code])
                else:
                    mapped[codes == code], extra = extra, extra + 1
            groups.append(mapped)
        return np.concatenate(groups)

    def _media_ids(self) -> list[str]:
        """``[N]`` each item's ``media_id``, in item order: the children's, one after the
        other."""
        return [media_id for child in self.datasets for media_id in child.media_ids()]

    def check_media_exist(self) -> None:
        """Each child's ``check_media_exist()``, in order (a child without one passes)."""
        for child in self.datasets:
            check = getattr(child, 'check_media_exist', None)
            if check is not None:
                check()

    def __repr__(self) -> str:
        children = ', '.join(repr(child) for child in self.datasets)
        return f'ConcatDataset(items={len(self)}, datasets=[{children}])'


def describe(position: int, dataset: Any) -> str:
    """``datasets[i] (Type, ann_file)``: a child as a message names it; a ConcatDataset
    child by its children's annotation files, in order."""
    files = ', '.join(annotation_files(dataset))
    return f'datasets[{position}] ({type(dataset).__name__}' + (f', {files})' if files else ')')


def annotation_files(dataset: Any) -> list[str]:
    """The annotation files ``dataset`` reads: its ``ann_file``, a ConcatDataset's children's
    in order (nested ones' included), or none."""
    if isinstance(dataset, ConcatDataset):
        return [path for child in dataset.datasets for path in annotation_files(child)]
    ann_file = getattr(dataset, 'ann_file', None)
    return [] if ann_file is None else [str(ann_file)]


def _check_same_item_keys(datasets: Sequence[Dataset]) -> list[str] | None:
    """The keys of every child's items, read from each non-empty child's first item without
    its media (``with_media`` off: no decode); ``None`` where no child could be read so
    (a child that is not a :class:`MediaDataset`, whose items :func:`retrieval_collate` still
    checks batch by batch).

    Raises:
        ValueError: naming the first two children whose keys differ and the keys each has.
    """
    seen: tuple[int, Any, list[str]] | None = None
    for position, child in enumerate(datasets):
        if not isinstance(child, MediaDataset) or len(child) == 0:
            continue
        previous = child.with_media
        child.with_media = False
        try:
            item = child[0]
        finally:
            child.with_media = previous
        if not isinstance(item, Mapping):
            continue
        keys = sorted(item)
        if seen is None:
            seen = (position, child, keys)
        elif keys != seen[2]:
            first, first_child, first_keys = seen
            raise ValueError(
                f'ConcatDataset: the items of {describe(position, child)} carry keys {keys}, '
                f'those of {describe(first, first_child)} {first_keys}: a batch mixing them '
                'would lose or lack a key. Build the datasets alike (the same type for '
                'training pairs or galleries, the same translated_texts and '
                'back_translated_languages), or concatenate only those that are')
    return None if seen is None else seen[2]


def _shared_policy(datasets: Sequence[Dataset]) -> str | None:
    """The ``on_corrupt`` every child that has one sets (``None`` where none has one): what
    the feature cache reads to raise or skip a file it recorded as unreadable, which one
    policy of the whole could not do for children of two.

    Raises:
        ValueError: naming two children whose policies differ.
    """
    policies = [(position, child, child.on_corrupt) for position, child in enumerate(datasets)
                if getattr(child, 'on_corrupt', None) is not None]
    for position, child, policy in policies[1:]:
        first, first_child, first_policy = policies[0]
        if policy != first_policy:
            raise ValueError(
                f"ConcatDataset: {describe(position, child)} sets on_corrupt={policy!r}, "
                f"{describe(first, first_child)} on_corrupt={first_policy!r}: give every "
                'child the same policy')
    return policies[0][2] if policies else None


def _check_distinct_media(datasets: Sequence[Dataset]) -> None:
    """Refuse two galleries (children with ``media_ids()``) holding one media id: scoring
    takes one item per media, with all its captions, and would refuse the repeat only after
    the whole gallery was encoded. Pair datasets, which repeat a media (one pair per
    caption), list none and are not compared. One pass, a dict of every gallery id.

    Raises:
        ValueError: naming the first child holding an earlier child's ids, that earlier
            child, how many ids the two share, the first few, and the fix.
    """
    holder: dict[str, int] = {}
    for position, child in enumerate(datasets):
        if not callable(getattr(child, 'media_ids', None)):
            continue
        ids = child.media_ids()
        repeated = [media_id for media_id in ids if media_id in holder]
        if repeated:
            first = holder[repeated[0]]
            shared = [media_id for media_id in repeated if holder[media_id] == first]
            raise ValueError(
                f'ConcatDataset: {describe(position, child)} holds '
                f'{counted(len(shared), "media id")} of {describe(first, datasets[first])}: '
                f'{first_few(shared)}; an evaluation gallery holds one item per media, with '
                'all its captions. Read the captions of one set of media as one gallery with '
                'all the languages (one RetrievalDataset or SyntheticRetrievalDataset, '
                'languages=[...]), or leave the repeated media out of one child')
        holder.update(dict.fromkeys(ids, position))


def _child_languages(dataset: Any) -> list[str]:
    """The languages a child's ``item_languages()`` codes index and its captions are read in:
    its ``target_langs`` (a ``CaptionPairDataset``, whose ``metainfo`` may list more), its
    ``languages``, or its ``metainfo['languages']``, as the ``LanguageBatchSampler`` names
    them."""
    names = getattr(dataset, 'target_langs', None) or getattr(dataset, 'languages', None)
    if names is None:
        names = (getattr(dataset, 'metainfo', None) or {}).get('languages') or []
    return list(names)


def _union(lists: Any) -> list[str]:
    """The items of ``lists`` in order of first appearance, each once."""
    return list(dict.fromkeys(item for names in lists for item in names))
