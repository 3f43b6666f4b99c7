"""Retrieval evaluation data: one item per image or video with its captions per language."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from xmr.datasets.base import MediaCaptionDataset
from xmr.datasets.benchmark_sizes import check_split_size
from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.datasets.languages import normalize_languages
from xmr.registry import DATASETS

__all__ = ['RetrievalDataset']


@DATASETS.register_module()
class RetrievalDataset(MediaCaptionDataset):
    """Gallery media with their captions, for R@K in both directions.

    Item: ``dict(media=uint8 [3, S, S] | [T, 3, S, S], media_id=str,
    captions={lang: [str, ...]}, index=int)``, or a ``SkippedMedia`` marker for an unreadable
    file under ``on_corrupt='skip'``.

    Args:
        ann_file: annotation file (see :class:`MediaCaptionDataset` for the other arguments).
        languages: human caption languages to return (default: all of the file).
        translated_languages: languages whose queries are the file's machine translations of
            the source captions, for splits without human captions in them (Multi-MSRVTT's
            validation split); ``metainfo['translated_languages']`` lists them.
        back_translated_languages: languages whose captions' back-translations into the source
            language each item also carries as ``back_translations={lang: [...]}`` (aligned
            with ``captions[lang]``), for models that query with them (translate-test).
        test_mode: defaults to ``True``: segment-centre frames, no augmentation.
        check_benchmark_size: refuse an evaluation split of a named benchmark (MSR-VTT 1k-A,
            COCO's Karpathy val/test, XTD10, Multi30K, ...) holding another media count than
            the papers score (:func:`~xmr.datasets.benchmark_sizes.check_split_size`);
            ``False`` reads a deliberate subset.
    """

    #: Where ``**kwargs`` go: a misspelt option is refused when the config loads.
    forwards_options_to = (MediaCaptionDataset.__init__,)

    def __init__(self, ann_file: str | os.PathLike, languages: Sequence[str] | None = None,
                 translated_languages: Sequence[str] = (),
                 back_translated_languages: Sequence[str] = (), test_mode: bool = True,
                 check_benchmark_size: bool = True, **kwargs: Any) -> None:
        super().__init__(ann_file, test_mode=test_mode, **kwargs)
        ann = self.annotation
        if check_benchmark_size:
            check_split_size(ann, self.ann_file)
        self.languages = normalize_languages(
            ann.languages if languages is None else languages, 'RetrievalDataset languages')
        self.translated_languages = normalize_languages(translated_languages,
                                                        'RetrievalDataset translated_languages')
        missing = [lang for lang in self.languages if lang not in ann.languages]
        if missing:
            raise ValueError(f'{self.ann_file} has no {missing} captions; it has '
                             f'{ann.languages}')
        missing = [lang for lang in self.translated_languages
                   if lang not in ann.translation_langs]
        if missing:
            raise ValueError(f'{self.ann_file} has no {missing} translations; it has '
                             f'{ann.translation_langs}')
        self.back_translated_languages = normalize_languages(
            back_translated_languages, 'RetrievalDataset back_translated_languages')
        missing = [lang for lang in self.back_translated_languages
                   if lang not in ann.back_translation_langs]
        if missing:
            raise ValueError(f'{self.ann_file} has no {missing} back-translations; it has '
                             f'{ann.back_translation_langs}: attach them with '
                             f'tools/data/attach_back_translations.py {self.ann_file} '
                             '--back-translations LANG=FILE (docs/data.md)')
        both = set(self.languages) & set(self.translated_languages)
        if both:
            raise ValueError(f'{sorted(both)} asked for as human and as translated captions')
        if not self.languages and not self.translated_languages:
            raise ValueError(f'{self.ann_file}: no caption language selected')

    @property
    def metainfo(self) -> dict[str, Any]:
        return {**super().metainfo,
                'languages': self.languages + self.translated_languages,
                'translated_languages': list(self.translated_languages),
                'back_translated_languages': list(self.back_translated_languages)}

    def __len__(self) -> int:
        return len(self.records)

    def media_ids(self) -> list[str]:
        """``[N]`` each item's ``media_id``, in item order, read from the records without their
        media: what a :class:`~xmr.datasets.concat.ConcatDataset` of galleries compares, as
        scoring takes one item per media."""
        return [record.media_id for record in self.records]

    def captions_of(self, index: int) -> dict[str, list[str]]:
        """The queries of item ``index`` by language, as its item gives them: the human
        captions of :attr:`languages`, the machine translations of
        :attr:`translated_languages`."""
        record = self.records[index]
        captions = {lang: list(record.captions[lang]) for lang in self.languages}
        captions.update({lang: list(record.translations[lang])
                         for lang in self.translated_languages})
        return captions

    def __getitem__(self, index: int) -> dict[str, Any] | SkippedMedia:
        record = self.records[index]
        media = self.load_media(record, index)
        if isinstance(media, SkippedMedia):
            return media
        item = {'media': media, 'media_id': record.media_id, 'captions': self.captions_of(index),
                'index': int(index)}
        if self.back_translated_languages:
            item['back_translations'] = {lang: list(record.back_translations[lang])
                                         for lang in self.back_translated_languages}
        return item
