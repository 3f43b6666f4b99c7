"""Common ground of xmr's datasets: annotation, paths, media decoding and the corrupt policy."""
from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from mmengine.logging import print_log
from torch.utils.data import Dataset

from xmr.datasets.annotation import Annotation, MediaRecord, load_annotation
from xmr.datasets.corrupt_policy import SkippedMedia, check_policy, skip_or_raise
from xmr.datasets.frame_sampling import check_frame_count
from xmr.datasets.media_files import missing_media, other_spelling_hint, shown_path
from xmr.datasets.media_io import (
    MediaReadError,
    check_decode_threads,
    check_image_decodes,
    check_image_file,
    check_truncated_images_refused,
    check_video_container,
    check_video_decodes,
    check_video_opens,
    read_image,
    read_video_frames,
)
from xmr.datasets.record_store import RecordStore
from xmr.datasets.sample_keys import sample_draws
from xmr.datasets.video_containers import unlike_its_name
from xmr.registry import TRANSFORMS

__all__ = ['MediaCaptionDataset', 'MediaDataset']

DEFAULT_TRANSFORM: dict[str, Any] = {'type': 'MediaTransform', 'backbone': 'ViT-B-32',
                                     'pretrained': 'openai'}


class MediaDataset(Dataset):
    """A dataset whose items carry decoded media that a caller can switch off.

    With ``with_media = False`` items keep their captions and ``media_id`` but carry
    ``media=None``: a feature cache indexes captions, and trains on cached media features,
    without decoding (or rendering) a single image.
    """

    with_media: bool = True


class MediaCaptionDataset(MediaDataset):
    """Base of the datasets that read an xmr annotation file (``docs/data.md``).

    Args:
        ann_file: annotation file, relative to ``data_root`` unless absolute.
        data_root: root of the dataset's files.
        data_prefix: ``dict(media=folder)``: media root relative to ``data_root`` (unless
            absolute); every ``media_path`` of the annotation is relative to it.
        transform: config of the media transform (default: ``MediaTransform`` of open_clip
            ``ViT-B-32``/``openai``); its ``training`` flag is set to ``not test_mode``.
        num_frames: frames sampled per video (``T``; DASD uses 12).
        test_mode: evaluation behaviour: segment-centre frames, no augmentation.
        on_corrupt: ``raise`` or ``skip`` for unreadable media (``corrupt_policy``).
        decode_threads: decord threads per video (0: decord chooses).
        with_media: decode media; ``False`` gives ``media=None`` for text-only phases.
        check_containers: :meth:`check_media_exist` reads each image's size (a ``stat``: an
            empty file is unreadable) and each video's container sizes (a file open and a few
            bytes per top-level box) besides listing the folders; ``False`` for a set so large
            that even this is too slow.
        check_decode: :meth:`check_media_exist` decodes every file whole, as a read would (an
            image cut short is found only so, and damage inside a whole video): opt in where
            a damaged file must be found before training rather than at its batch; it costs
            a full read of the set (``docs/data.md``).
    """

    def __init__(self, ann_file: str | os.PathLike, data_root: str | os.PathLike = '',
                 data_prefix: dict[str, str] | None = None,
                 transform: dict[str, Any] | None = None, num_frames: int = 12,
                 test_mode: bool = False, on_corrupt: str = 'raise', decode_threads: int = 1,
                 with_media: bool = True, check_containers: bool = True,
                 check_decode: bool = False) -> None:
        self.data_root = Path(data_root)
        self.ann_file = self._under_root(ann_file)
        self.annotation: Annotation = load_annotation(self.ann_file, items=RecordStore)
        prefix = dict(data_prefix or {})
        unknown = set(prefix) - {'media'}
        if unknown:
            raise ValueError(f'data_prefix takes only "media", got {sorted(unknown)}')
        self.media_root = self._under_root(prefix.get('media', ''))
        # Checked here, not at the first read, which would stop the first batch.
        self.num_frames = check_frame_count(num_frames, f'{self.ann_file}: num_frames')
        self.test_mode = test_mode
        self.on_corrupt = check_policy(on_corrupt)
        self.decode_threads = check_decode_threads(decode_threads,
                                                   f'{self.ann_file}: decode_threads')
        # A text-only annotation has nothing to decode.
        self.with_media = with_media and self.annotation.media_type != 'text'
        self.check_containers = check_containers
        self.check_decode = check_decode
        transform_cfg = dict(DEFAULT_TRANSFORM if transform is None else transform)
        transform_cfg.setdefault('type', 'MediaTransform')
        transform_cfg['training'] = not test_mode
        self.transform = TRANSFORMS.build(transform_cfg)

    def _under_root(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        return path if path.is_absolute() else self.data_root / path

    @property
    def records(self) -> Sequence[MediaRecord]:
        """The annotation's records, in file order, packed in a :class:`RecordStore` (each read
        decodes one record)."""
        return self.annotation.items

    @property
    def metainfo(self) -> dict[str, Any]:
        """Facts about the data, read by MMEngine's runner into evaluators' ``dataset_meta``."""
        ann = self.annotation
        return {'dataset': ann.dataset, 'split': ann.split, 'media_type': ann.media_type,
                'languages': list(ann.languages), 'source_lang': ann.source_lang,
                'translation_langs': list(ann.translation_langs),
                'ann_file': str(self.ann_file)}

    def check_media_exist(self) -> None:
        """Refuse an annotation whose media files are missing, empty, or are videos whose
        containers say they cannot be whole (cut short: :func:`check_video_container`), or,
        with ``check_decode``, that do not decode whole, with
        ``on_corrupt='raise'``; ``'skip'`` warns with the same report. Missing files are found
        with one listing per folder and given by count and the first; every damaged file is
        named with what is wrong. A dataset without media passes. The training loop calls it
        before the first step: found only when read, such a file would stop training at a
        random iteration.

        Raises:
            FileNotFoundError: naming the annotation, the first missing file and the count,
                and every damaged file.
            MediaReadError: naming the annotation and every damaged file, none missing.
            RuntimeError: for images, if Pillow is set to read images cut short
                (:func:`check_truncated_images_refused`), whatever the policy.
        """
        if not self.with_media:
            return
        if self.annotation.media_type == 'image':
            check_truncated_images_refused()
        missing = missing_media(self.media_root, (r.media_path for r in self.records))
        damaged = self._damaged_media(set(missing))
        found = [f'{len(missing)} of its {len(self.records)} media files are missing, the '
                 f'first {shown_path(missing[0])}{other_spelling_hint(missing[0])}: check '
                 'data_root and data_prefix'] if missing else []
        found += [f'{len(damaged)} of its {len(self.records)} {self.annotation.media_type}s '
                  'cannot be read whole:'
                  + ''.join(f'\n  {path}: {reason}' for path, reason in damaged)
                  + '\nreplace them'] if damaged else []
        if not found:
            return
        if self.on_corrupt == 'raise':
            fix = "or set on_corrupt='skip' to leave them out"
            if missing:
                raise FileNotFoundError(f"{self.ann_file}: {'; '.join(found)}, {fix}")
            raise MediaReadError(self.ann_file, found[0], fix)
        print_log(f"{self.ann_file}: {'; '.join(found)}; they are skipped (on_corrupt='skip')",
                  logger='current', level=logging.WARNING)

    def _damaged_media(self, missing: set[Path]) -> list[tuple[Path, str]]:
        """Each present file that cannot be read whole, with the reason, in annotation order:
        an empty image (a ``stat``: :func:`check_image_file`), a video whose container says it
        cannot be whole or whose first bytes are not the container its name says and decord
        cannot open (:func:`_check_video`); with ``check_decode``, any file that does not
        decode whole (:func:`check_image_decodes`, :func:`check_video_decodes`); none with
        ``check_containers=False`` alone."""
        video = self.annotation.media_type == 'video'
        if self.check_decode:
            check = check_video_decodes if video else check_image_decodes
        elif self.check_containers:
            check = _check_video if video else check_image_file
        else:
            return []
        # Joined as text, a Path only for a failure: building 300k Paths costs several times
        # the stats.
        root, damaged = str(self.media_root), []
        for record in self.records:
            path = os.path.join(root, record.media_path)
            try:
                check(path)
            except MediaReadError as err:
                if Path(path) not in missing:
                    damaged.append((Path(path), err.reason))
        return damaged

    def media_path(self, record: MediaRecord) -> Path:
        """Full path of a record's media file."""
        return self.media_root / record.media_path

    def load_media(self, record: MediaRecord, index: int) -> torch.Tensor | SkippedMedia | None:
        """Decode and transform one record's media; its random draws (frame offsets,
        augmentation) are those of ``index``'s sample key
        (:func:`~xmr.datasets.sample_keys.sample_draws`).

        Returns:
            uint8 ``[3, S, S]`` (image) or ``[T, 3, S, S]`` (video); ``None`` without media;
            a :class:`SkippedMedia` marker when unreadable under ``on_corrupt='skip'``.

        Raises:
            MediaReadError: when unreadable under ``on_corrupt='raise'``.
        """
        if not self.with_media:
            return None
        path = self.media_path(record)
        with sample_draws(index):
            try:
                if self.annotation.media_type == 'video':
                    media, _ = read_video_frames(path, self.num_frames,
                                                 random_offset=not self.test_mode,
                                                 num_threads=self.decode_threads)
                else:
                    media = read_image(path)
            except MediaReadError as err:
                return skip_or_raise(err, self.on_corrupt, index)
            return self.transform(media)

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(ann_file={str(self.ann_file)!r}, items={len(self)}, '
                f'media_type={self.annotation.media_type!r}, test_mode={self.test_mode}, '
                f'on_corrupt={self.on_corrupt!r})')


def _check_video(path: str | os.PathLike) -> None:
    """Raise :class:`MediaReadError` if ``path``'s container says it cannot be whole, or its
    first bytes are not the container its name says and decord cannot open it."""
    check_video_container(path)
    if unlike_its_name(path):
        check_video_opens(path)
