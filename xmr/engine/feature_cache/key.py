"""What a feature cache is keyed by: the backbone, every item's caption and media id, the media
files and their preprocessing; and the one pass that indexes a dataset's items."""
from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import re
import types
from collections.abc import Sequence
from dataclasses import dataclass
from stat import S_ISREG
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from xmr.datasets.base import MediaCaptionDataset, MediaDataset
from xmr.datasets.concat import ConcatDataset, describe
from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.datasets.transforms import MediaTransform
from xmr.models.backbones.base import weights_fingerprint
from xmr.utils.cli import UserKeyError
from xmr.utils.listing import first_few

#: Feature kinds: ``source`` = ``r^S`` of ``source_text``, ``media`` = ``r^V`` of ``media_id``.
FEATURE_KINDS = ('source', 'media')
ITEM_KEY = {'source': 'source_text', 'media': 'media_id'}
#: The memory address a default ``repr`` writes (``<Lock object at 0x7f...>``).
_ADDRESS = re.compile(r' at 0x[0-9a-fA-F]+')


def text_hash(text: str) -> int:
    """Stable signed 64-bit hash of a string (Python's ``hash`` changes per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode('utf-8'), digest_size=8).digest(),
                          'little', signed=True)


def backbone_fingerprint(backbone: torch.nn.Module) -> str:
    """The backbone's ``fingerprint()`` (:meth:`TextBackbone.fingerprint
    <xmr.models.backbones.base.TextBackbone.fingerprint>`: module tree or architecture, and
    weights), or for a module that is not a backbone a hash of its class and weights; then the
    precision its weights are held in where it is not float32 (``'<hash> held in float16'``).

    The weights' hash reads every value as float32, so weights released in half precision
    (OpenAI's CLIP) hash alike in a float32 backbone and in one cast to float16, whose
    arithmetic gives other features. A float32 backbone's key is the hash alone, as before.
    """
    own = getattr(backbone, 'fingerprint', None)
    fingerprint = (str(own()) if callable(own)
                   else weights_fingerprint(type(backbone).__qualname__, backbone))
    held = sorted({str(tensor.dtype).removeprefix('torch.')
                   for tensor in backbone.state_dict().values()
                   if tensor.is_floating_point() and tensor.dtype != torch.float32})
    return f'{fingerprint} held in {", ".join(held)}' if held else fingerprint


def media_randomness(dataset: Dataset) -> str | None:
    """Why the dataset's media change from one epoch to the next, or ``None`` if they do not.

    A :class:`~xmr.datasets.transforms.MediaTransform` draws when training with a random crop or
    flip; a transform of one's own says whether it draws with ``draws_at_random``, and one
    that does not say is taken to draw while training: xmr cannot see into it, and a random
    one cached would serve one fixed draw every epoch.
    """
    if isinstance(dataset, ConcatDataset):
        # The whole changes where one child does; that child is named.
        for position, child in enumerate(dataset.datasets):
            reason = media_randomness(child)
            if reason is not None:
                return f'{describe(position, child)}: {reason}'
        return None
    transform = getattr(dataset, 'transform', None)
    training = getattr(transform, 'training', False) or (
        isinstance(dataset, MediaCaptionDataset) and not dataset.test_mode)
    if transform is not None and training:
        if not isinstance(transform, MediaTransform):
            return _declared_randomness(transform)
        if transform.random_resized_crop is not None:
            return 'its training transform takes random resized crops'
        if transform.hflip_prob > 0:
            return 'its training transform flips at random'
    if isinstance(dataset, MediaCaptionDataset) and not dataset.test_mode and \
            dataset.annotation.media_type == 'video':
        return ('its video frames are sampled at random offsets (test_mode=False; set '
                'test_mode=True for segment-centre frames)')
    return None


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _declared_randomness(transform: Any) -> str | None:
    """Why a training transform of one's own changes the media each epoch, from its
    ``draws_at_random``, or ``None`` when it says it draws nothing."""
    name = type(transform).__name__
    declared = getattr(transform, 'draws_at_random', None)
    if declared is None:
        return (f'its training transform {name} does not say whether it draws at random '
                f'(draws_at_random); give {name} draws_at_random = False to cache the media of '
                'a transform that draws nothing')
    return f'its training transform {name} draws at random' if declared else None


def media_pipeline(dataset: Dataset) -> dict[str, Any]:
    """What decides the pixels of a dataset's media, beyond the media id.

    Raises:
        ValueError: a setting of the transform is known only by its memory address
            (:func:`settings_identity`).
    """
    if isinstance(dataset, ConcatDataset):
        return {'datasets': [media_pipeline(child) for child in dataset.datasets]}
    where = f'the {type(dataset).__name__} ({type(getattr(dataset, "transform", None)).__name__})'
    pipeline: dict[str, Any] = {
        'transform': settings_identity(getattr(dataset, 'transform', None), 'transform', where)}
    if isinstance(dataset, MediaCaptionDataset):
        pipeline.update(num_frames=dataset.num_frames, test_mode=dataset.test_mode)
    return pipeline


def settings_identity(value: Any, name: str, where: str) -> Any:
    """What keys a cache to ``value`` (a transform) the same in every process: its ``repr``
    where its class writes one (``MediaTransform(size=(224, 224), ...)``); for an object
    whose class writes none, its class and its attributes' identities, each alike; for a
    function, a class or a method, its qualified name (a ``functools.partial``: its function's
    and its arguments' identities). The default ``repr`` names the object's memory
    address, which another process (the next run, every other DDP rank) does not share.

    Args:
        value: the transform, or one of its settings.
        name: its path, ``transform.resize``, for the error.
        where: the dataset and transform it belongs to, for the error.

    Raises:
        ValueError: a setting whose ``repr`` names a memory address and has no attributes to
            key it by (a lock, a file handle), naming it and the fix.
    """
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return f'{value.__module__}.{value.__qualname__}'
    if isinstance(value, types.MethodType):  # its object's settings: keyed where it is held
        return settings_identity(value.__func__, name, where)
    if isinstance(value, functools.partial):
        return {'partial': settings_identity(value.func, f'{name}.func', where),
                'args': settings_identity(value.args, f'{name}.args', where),
                'keywords': settings_identity(value.keywords, f'{name}.keywords', where)}
    if isinstance(value, (list, tuple)):
        return [settings_identity(item, f'{name}[{i}]', where) for i, item in enumerate(value)]
    if isinstance(value, dict):
        return {str(key): settings_identity(item, f'{name}[{key!r}]', where)
                for key, item in value.items()}
    if type(value).__repr__ is object.__repr__ and hasattr(value, '__dict__'):
        return {'class': f'{type(value).__module__}.{type(value).__qualname__}',
                **{key: settings_identity(item, f'{name}.{key}', where)
                   for key, item in sorted(vars(value).items())}}
    text = repr(value)
    if _ADDRESS.search(text):
        raise ValueError(
            f'{name} of {where} is known only by its memory address ({text}), which every '
            'process has its own of, so a feature cache of its media would be stale in the next '
            f'run and on every other rank: give {type(value).__name__} a __repr__ naming each '
            'setting that changes the pixels, or keep it out of the transform\'s attributes')
    return text


def item_digests(index: ItemIndex) -> dict[str, str]:
    """A digest of every item's caption / media id per kind (order and content)."""
    return {kind: hashlib.blake2b(hashes.tobytes(), digest_size=16).hexdigest()
            for kind, hashes in index.hashes.items()}


def media_files_identity(dataset: Dataset, identity: str
                         ) -> tuple[dict[str, str] | None, list[tuple[str, str]]]:
    """A digest of the identity of every media file, and each file's own, in record order.

    ``'stat'`` takes each file's size and modification time (one ``stat`` per file, which each
    phase start pays: 30,000 files in 0.25 s, 120,000 in 1.1 s on a local disk, where hashing
    their bytes reads every one, ~18 GB for 120,000 COCO-sized JPEGs); ``'content'`` its
    bytes' SHA-256 (for copies that reset modification times).

    Returns:
        The key's entry (``None`` for media not read from files) and one ``(media_path,
        identity)`` per record (``'<size>|<mtime_ns>'``, ``'sha256:<hex>'`` or ``'missing'``),
        which a cache keeps to name the files that changed.
    """
    if isinstance(dataset, ConcatDataset):
        # Each child's entry in order (a child without files: None), its files one after the
        # other's, as the whole's records are.
        entries, files = [], []
        for child in dataset.datasets:
            entry, child_files = media_files_identity(child, identity)
            entries.append(entry)
            files += child_files
        return (None if all(entry is None for entry in entries)
                else {'identity': identity, 'datasets': entries}), files
    if not isinstance(dataset, MediaCaptionDataset):
        return None, []
    digest = hashlib.blake2b(identity.encode(), digest_size=16)
    # Joined as text and stat'ed once: a Path per file and its is_file() before its stat() took
    # 1.9 s for 120,000 files.
    root, files = str(dataset.media_root), []
    for record in dataset.records:
        path = os.path.join(root, record.media_path)
        digest.update(f'{record.media_id}|{os.path.basename(path)}|'.encode())
        stat = _regular_file_stat(path)
        if stat is None:
            state = 'missing'
            digest.update(b'missing')
        elif identity == 'stat':
            state = f'{stat.st_size}|{stat.st_mtime_ns}'
            digest.update(state.encode())
        else:
            with open(path, 'rb') as handle:
                content = hashlib.file_digest(handle, 'sha256')
            state = f'sha256:{content.hexdigest()}'
            digest.update(content.digest())
        files.append((record.media_path, state))
    return {'identity': identity, 'digest': digest.hexdigest()}, files


def _regular_file_stat(path: str) -> os.stat_result | None:
    """The ``stat`` of a regular file (a link followed), or ``None`` where there is none, as
    ``Path.is_file`` tells: missing, a folder, a path through a file, a link loop."""
    try:
        stat = os.stat(path)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            return None
        raise
    return stat if S_ISREG(stat.st_mode) else None


def changed_media_files(built: Sequence[Sequence[str]], now: Sequence[Sequence[str]],
                        shown: int = 3) -> str:
    """The media files whose identity differs between two :func:`media_files_identity` lists:
    ``'a.jpg, b.jpg and 2 more'``, or ``''`` when none does."""
    before, after = dict(map(tuple, built)), dict(map(tuple, now))
    return first_few((path for path in {**before, **after} if before.get(path) != after.get(path)),
                     shown)


def tokenizer_identity(tokenizer: Any) -> dict[str, Any]:
    """What decides a caption's ids beyond the caption: the tokenizer's type, length, vocabulary
    size and padding id, and, for a tokenizer that may compose captions first (``HFTokenizer``'s
    ``compose``), whether it does: composed, a decomposed caption gets other ids; and a long
    caption's side cut when it is the left (right-cutting tokenizers keep the key they had); the
    language tokens an ``NLLBTokenizer`` reads languages with in place of their own, when it is
    given some; the text an ``HFTokenizer`` strips, lower-cases (a sentence-transformers
    teacher's ``do_lower_case``) or cleans before reading it, and the separator it writes as 0
    (``strip_sep_token``), when it does; and the pipeline an ``HFTokenizer`` encodes with
    (:meth:`~xmr.models.language.tokenizers.HFTokenizer.pipeline_digest`)."""
    identity = {'type': type(tokenizer).__qualname__,
                'max_length': getattr(tokenizer, 'max_length', None),
                'vocab_size': getattr(tokenizer, 'vocab_size', None),
                'pad_id': getattr(tokenizer, 'pad_id', None)}
    if hasattr(tokenizer, 'compose'):
        identity['compose'] = bool(tokenizer.compose)
    if getattr(tokenizer, 'truncation_side', 'right') != 'right':
        identity['truncation_side'] = tokenizer.truncation_side
    for flag in ('strip', 'lowercase', 'strip_sep_token'):
        if getattr(tokenizer, flag, False):
            identity[flag] = True
    if getattr(tokenizer, 'clean', None) is not None:
        identity['clean'] = tokenizer.clean
    if getattr(tokenizer, 'language_tokens', None):
        identity['language_tokens'] = dict(sorted(tokenizer.language_tokens.items()))
    if hasattr(tokenizer, 'pipeline_digest'):
        identity['pipeline'] = tokenizer.pipeline_digest()
    return identity


@dataclass
class ItemIndex:
    """Where each item of a dataset finds its cached features, per kind.

    Attributes:
        rows: ``rows[kind]`` ``[N]``: the feature row of each item.
        first_item: ``first_item[kind]`` ``{value: first item index}`` in row order.
        hashes: ``hashes[kind]`` ``[N]``: :func:`text_hash` of each item's caption / media id.
    """

    rows: dict[str, np.ndarray]
    first_item: dict[str, dict[str, int]]
    hashes: dict[str, np.ndarray]


def index_items(dataset: Dataset, kinds: Sequence[str]) -> ItemIndex:
    """Read every item once (captions and media ids only) into an :class:`ItemIndex`.

    Media are not decoded for this pass when the dataset can skip them (``with_media``); it
    still costs one ``__getitem__`` per item, so a phase start runs it once for the cache key
    and the build together.
    """
    rows = {kind: np.empty(len(dataset), dtype=np.int64) for kind in kinds}
    hashes = {kind: np.empty(len(dataset), dtype=np.int64) for kind in kinds}
    first_item: dict[str, dict[str, int]] = {kind: {} for kind in kinds}
    row_of: dict[str, dict[str, int]] = {kind: {} for kind in kinds}
    with media_decoding(dataset, False):
        for index in range(len(dataset)):
            item = dataset[index]
            if isinstance(item, SkippedMedia) or item is None:
                raise ValueError(f'dataset item {index} was skipped while only its captions '
                                 'were read; a feature cache needs every item')
            for kind in kinds:
                value = item.get(ITEM_KEY[kind])
                if not isinstance(value, str):
                    raise UserKeyError(f"dataset item {index} has no '{ITEM_KEY[kind]}' string; "
                                       f"the '{kind}' feature cache is keyed by it")
                if value not in row_of[kind]:
                    row_of[kind][value] = len(row_of[kind])
                    first_item[kind][value] = index
                rows[kind][index] = row_of[kind][value]
                hashes[kind][index] = text_hash(value)
    return ItemIndex(rows, first_item, hashes)


class media_decoding:
    """Temporarily switch a :class:`MediaDataset`'s media decoding on or off."""

    def __init__(self, dataset: Dataset, enabled: bool) -> None:
        self.dataset = dataset if isinstance(dataset, MediaDataset) else None
        self.enabled = enabled

    def __enter__(self) -> None:
        if self.dataset is not None:
            self.previous = self.dataset.with_media
            self.dataset.with_media = self.enabled

    def __exit__(self, *exc: object) -> None:
        if self.dataset is not None:
            self.dataset.with_media = self.previous
