"""Training pairs: a source caption, its target-language counterpart and the media."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from xmr.datasets.base import MediaCaptionDataset
from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.datasets.languages import normalize_languages
from xmr.registry import DATASETS

__all__ = ['CaptionPairDataset', 'TARGET_FIELDS', 'TRANSLATED_TEXTS']

TARGET_FIELDS = ('translations', 'captions')
#: Machine translations an item can carry besides its two texts (PECTVLM's routines):
#: ``source_to_target`` (the source caption translated into ``lang``) and ``target_to_source``
#: (the target caption translated back into the source language).
TRANSLATED_TEXTS = ('source_to_target', 'target_to_source')


@DATASETS.register_module()
class CaptionPairDataset(MediaCaptionDataset):
    """One item per (media, source caption, target language).

    Item: ``dict(media=uint8 [3, S, S] | [T, 3, S, S] | None, media_id=str, source_text=str,
    target_text=str | None, lang=str, index=int)``; ``lang`` is the item's target language, or
    the source language with ``target_text=None`` when ``source_only``. Items are ordered by
    record, then source caption, then target language.

    Args:
        ann_file: annotation file (see :class:`MediaCaptionDataset` for the other arguments).
        target_langs: target languages (default: every language of ``target_field`` other than
            the source).
        target_field: ``translations`` pairs each source caption with its machine translation
            (MT training data); ``captions`` pairs the ``k``-th source caption with the ``k``-th
            caption of the target language, which is right only where those are human
            translations of the source captions: Multi30K task 1, XTD10's de, fr, es, it, ko,
            pl, ru, tr and zh (every record must have equal counts). XTD10's ja (STAIR
            Captions) and the five de captions of Multi30K task 2 were written for the image,
            not from the English: the pair is two descriptions of one image, and an alignment
            of the two texts aligns different sentences.
        source_only: one item per source caption with ``target_text=None`` (English CLIP
            fine-tuning).
        translated_texts: machine translations each item also carries, from
            :data:`TRANSLATED_TEXTS`: ``source_to_target`` adds ``source_to_target_text``
            (``translations[lang][k]``), ``target_to_source`` adds ``target_to_source_text``
            (``back_translations[lang][k]``, with ``target_field='captions'``).
    """

    #: Where ``**kwargs`` go: a misspelt option is refused when the config loads.
    forwards_options_to = (MediaCaptionDataset.__init__,)

    def __init__(self, ann_file: str | os.PathLike, target_langs: Sequence[str] | None = None,
                 target_field: str = 'translations', source_only: bool = False,
                 translated_texts: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(ann_file, **kwargs)
        ann = self.annotation
        if ann.source_lang is None:
            raise ValueError(f'{self.ann_file} names no source_lang; training pairs need one')
        if target_field not in TARGET_FIELDS:
            raise ValueError(f'target_field must be one of {TARGET_FIELDS}, got {target_field!r}')
        self.source_lang = ann.source_lang
        self.target_field = target_field
        self.source_only = source_only
        available = (ann.translation_langs if target_field == 'translations'
                     else [lang for lang in ann.languages if lang != ann.source_lang])
        if source_only:
            if target_langs:
                raise ValueError('source_only items have no target language; drop target_langs')
            self.target_langs: list[str] = []
        else:
            self.target_langs = normalize_languages(
                available if target_langs is None else target_langs,
                'CaptionPairDataset target_langs')
            if not self.target_langs and available:
                raise ValueError(f'{self.ann_file}: target_langs is empty; name some of '
                                 f'{available}, or set source_only=True for items of source '
                                 'captions alone')
            missing = [lang for lang in self.target_langs if lang not in available]
            if missing or not self.target_langs:
                fix = ('attach them with tools/data/attach_translations.py (docs/data.md), or '
                       "pair parallel human captions with target_field='captions'"
                       if target_field == 'translations' else 'drop them from target_langs')
                raise ValueError(f'{self.ann_file} has no {target_field} in {missing or "any"} '
                                 f'language; it has {available}: {fix}')
        self.translated_texts = self._check_translated_texts(translated_texts)
        self._record, self._caption, self._lang = self._build_index()

    def _check_translated_texts(self, translated_texts: Sequence[str]) -> tuple[str, ...]:
        ann = self.annotation
        if isinstance(translated_texts, str):
            raise ValueError(f'translated_texts={translated_texts!r} is one string: give a list, '
                             f'[{translated_texts!r}]')
        unknown = [t for t in translated_texts if t not in TRANSLATED_TEXTS]
        if unknown:
            raise ValueError(f'translated_texts {unknown} unknown; choose from {TRANSLATED_TEXTS}')
        if translated_texts and self.source_only:
            raise ValueError('source_only items have no target language to translate; drop '
                             'translated_texts')
        needs = {'source_to_target': ('translations', ann.translation_langs,
                                      'tools/data/attach_translations.py', '--translations'),
                 'target_to_source': ('back_translations', ann.back_translation_langs,
                                      'tools/data/attach_back_translations.py',
                                      '--back-translations')}
        for kind in translated_texts:
            field, available, tool, option = needs[kind]
            missing = [lang for lang in self.target_langs if lang not in available]
            if missing:
                raise ValueError(f'{self.ann_file} has no {field} in {missing} for '
                                 f'translated_texts={kind!r}; it has {list(available)}: '
                                 f'attach them with {tool} {self.ann_file} '
                                 f'{option} LANG=FILE (docs/data.md)')
        if 'target_to_source' in translated_texts and self.target_field != 'captions':
            raise ValueError("translated_texts='target_to_source' back-translates human target "
                             "captions; it needs target_field='captions'")
        return tuple(translated_texts)

    def _build_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # One pass: each read of a packed record decodes it.
        counts = np.empty(len(self.records), dtype=np.int64)
        parallel = self.target_langs if self.target_field == 'captions' else []
        for r, record in enumerate(self.records):
            counts[r] = len(record.captions[self.source_lang])
            for lang in parallel:
                if len(record.captions[lang]) != counts[r]:
                    raise ValueError(
                        f'{self.ann_file}: item {r} ({record.media_id}) has {counts[r]} '
                        f'{self.source_lang} and {len(record.captions[lang])} {lang} '
                        "captions; target_field='captions' needs parallel captions")
        per_caption = max(1, len(self.target_langs))
        # Flat int arrays keep the index small for millions of pairs and cheap to share with
        # forked DataLoader workers.
        record_of_caption = np.repeat(np.arange(len(counts)), counts)
        caption_of_caption = np.arange(int(counts.sum())) - np.repeat(
            np.cumsum(counts) - counts, counts)
        lang_index = (np.tile(np.arange(per_caption), len(record_of_caption))
                      if self.target_langs else np.full(len(record_of_caption), -1))
        return (np.repeat(record_of_caption, per_caption),
                np.repeat(caption_of_caption, per_caption).astype(np.int32),
                lang_index.astype(np.int16))

    def __len__(self) -> int:
        return len(self._record)

    def item_languages(self) -> np.ndarray:
        """``[N]`` int16: each item's position in :attr:`target_langs` (-1 under
        ``source_only``), read without loading an item (``LanguageBatchSampler``)."""
        return self._lang

    def __getitem__(self, index: int) -> dict[str, Any] | SkippedMedia:
        record = self.records[int(self._record[index])]
        caption = int(self._caption[index])
        media = self.load_media(record, index)
        if isinstance(media, SkippedMedia):
            return media
        source_text = record.captions[self.source_lang][caption]
        if self.source_only:
            lang, target_text = self.source_lang, None
        else:
            lang = self.target_langs[int(self._lang[index])]
            table = (record.translations if self.target_field == 'translations'
                     else record.captions)
            target_text = table[lang][caption]
        item = {'media': media, 'media_id': record.media_id, 'source_text': source_text,
                'target_text': target_text, 'lang': lang, 'index': int(index)}
        if 'source_to_target' in self.translated_texts:
            item['source_to_target_text'] = record.translations[lang][caption]
        if 'target_to_source' in self.translated_texts:
            item['target_to_source_text'] = record.back_translations[lang][caption]
        return item
