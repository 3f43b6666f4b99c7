"""The one annotation format of xmr for media-caption data in several languages.

A file is one JSON document (schema in ``docs/data.md``)::

    {"format": "xmr-media-captions", "version": 1,
     "dataset": "multi30k", "split": "train", "media_type": "image",
     "languages": ["en", "de"], "source_lang": "en", "translation_langs": ["de"],
     "items": [{"media_id": "1000092795", "media_path": "1000092795.jpg",
                "captions": {"en": ["Two young guys ..."], "de": ["Zwei junge ..."]},
                "translations": {"de": ["<machine translation of the en caption>"]}}]}

``translations[lang][k]`` is the machine translation of ``captions[source_lang][k]``: the training
pairs of the cross-lingual phases. Optional ``back_translations[lang][k]`` is the machine
translation of ``captions[lang][k]`` back into ``source_lang`` (PECTVLM's translate-test and
routine 3). Every item carries captions for every language of ``languages``, translations for
every language of ``translation_langs`` and back-translations for every language of
``back_translation_langs``, so a retrieval gallery never has holes. A ``"media_type": "text"``
file holds text pairs alone (a text-only teacher, the cross-lingual phase): its items carry no
``media_path``. :func:`load_annotation`
validates all of it and names the file, the item and the key at fault; :func:`dump_annotation`
writes through a temporary file and a rename, so a failed conversion never leaves a partial file
behind.
"""
from __future__ import annotations

import gc
import json
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from xmr.datasets.json_stream import DuplicateKeyError, read_object
from xmr.datasets.languages import LanguageCodeError, normalize_language, normalize_languages
from xmr.fileio import atomic_write_texts
from xmr.json_files import json_file_problem, loads_json

__all__ = [
    'ANNOTATION_FORMAT', 'ANNOTATION_VERSION', 'MEDIA_TYPES', 'AnnotationError', 'MediaRecord',
    'Annotation', 'load_annotation', 'dump_annotation',
    'dump_annotations', 'shows_nothing', 'text_pairs', 'written_header',
]

ANNOTATION_FORMAT = 'xmr-media-captions'
ANNOTATION_VERSION = 1
MEDIA_TYPES = ('image', 'video', 'text')
#: Objects a load must make for one full collection to end it (:func:`_collector_paused`): a
#: young-generation pass over fewer costs less than a walk of the whole heap.
FULL_COLLECTION_AFTER = 200_000
_HEADER_KEYS = ('format', 'version', 'dataset', 'split', 'media_type', 'languages', 'items')
_ITEM_KEYS = {'media_id', 'media_path', 'captions', 'translations', 'back_translations'}
_OPTIONAL_HEADER_KEYS = ('source_lang', 'translation_langs', 'back_translation_langs')


class AnnotationError(ValueError):
    """An annotation file, or the data meant to become one, breaks the schema."""


@dataclass
class MediaRecord:
    """One image or video with its captions.

    Attributes:
        media_id: unique id of the media inside its file (Flickr id, COCO file stem, video id).
        media_path: path of the file, relative to the dataset's media root (or absolute);
            ``None`` in a text-only annotation (``media_type='text'``).
        captions: language -> one or more human captions.
        translations: language -> machine translations, aligned one to one with
            ``captions[source_lang]``; empty for evaluation data.
        back_translations: language -> machine translations of ``captions[language]`` into
            ``source_lang``, aligned one to one with ``captions[language]``; usually empty.
    """

    media_id: str
    media_path: str | None
    captions: dict[str, list[str]]
    translations: dict[str, list[str]] = field(default_factory=dict)
    back_translations: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {'media_id': self.media_id}
        if self.media_path is not None:
            data['media_path'] = self.media_path
        data['captions'] = self.captions
        if self.translations:
            data['translations'] = self.translations
        if self.back_translations:
            data['back_translations'] = self.back_translations
        return data


@dataclass
class Annotation:
    """A validated annotation file in memory.

    Attributes:
        dataset: benchmark name (``multi30k``, ``mscoco``, ``xtd10``, ``cc3m``, ``msrvtt``, ...).
        split: split name (``train``, ``val``, ``test``, ``test1k_fold0``, ...).
        media_type: ``image``, ``video`` or ``text`` (text pairs, no media).
        languages: caption languages, present in every record.
        items: the records, in file order: a list, or in a dataset a
            :class:`~xmr.datasets.record_store.RecordStore` (read-only, a record decoded at
            each access).
        source_lang: language the translations were made from; required with translations.
        translation_langs: languages of the machine translations, present in every record.
        back_translation_langs: caption languages whose captions every record also carries
            machine-translated into ``source_lang``.
    """

    dataset: str
    split: str
    media_type: str
    languages: list[str]
    items: Sequence[MediaRecord]
    source_lang: str | None = None
    translation_langs: list[str] = field(default_factory=list)
    back_translation_langs: list[str] = field(default_factory=list)

    def validate(self, origin: str = '<memory>') -> None:
        """Check the whole annotation against the schema.

        Args:
            origin: the file (or converter) the data comes from, named in every error.

        Raises:
            AnnotationError: on the first violation, naming ``origin``, item and key.
        """
        _check_name(self.dataset, 'dataset', origin)
        _check_name(self.split, 'split', origin)
        if self.media_type not in MEDIA_TYPES:
            raise AnnotationError(f'{origin}: media_type must be one of {MEDIA_TYPES}, '
                                  f'got {self.media_type!r}')
        _check_languages(self.languages, 'languages', origin, allow_empty=False)
        _check_languages(self.translation_langs, 'translation_langs', origin, allow_empty=True)
        if self.translation_langs and self.source_lang is None:
            raise AnnotationError(f'{origin}: translation_langs is set but source_lang is '
                                  'missing; translations need the language they come from')
        if self.source_lang is not None and self.source_lang not in self.languages:
            raise AnnotationError(f'{origin}: source_lang {self.source_lang!r} is not one of '
                                  f'the caption languages {self.languages}')
        _check_languages(self.back_translation_langs, 'back_translation_langs', origin,
                         allow_empty=True)
        if self.back_translation_langs:
            if self.source_lang is None:
                raise AnnotationError(f'{origin}: back_translation_langs is set but source_lang '
                                      'is missing; back-translations need the language they '
                                      'go to')
            wrong = [lang for lang in self.back_translation_langs
                     if lang not in self.languages or lang == self.source_lang]
            if wrong:
                raise AnnotationError(f'{origin}: back_translation_langs {wrong} must be caption '
                                      f'languages other than the source {self.source_lang!r}')
        if not self.items:
            raise AnnotationError(f'{origin}: the file holds no items')
        seen: dict[str, int] = {}
        for position, record in enumerate(self.items):
            where = f'{origin}: item {position}'
            _check_record(record, self, where)
            if record.media_id in seen:
                raise AnnotationError(f'{where}: media_id {record.media_id!r} repeats item '
                                      f'{seen[record.media_id]}')
            seen[record.media_id] = position

    def to_json(self) -> dict[str, Any]:
        return {**self.header_json(), 'items': [record.to_json() for record in self.items]}

    def header_json(self) -> dict[str, Any]:
        """The file's fields other than ``items``."""
        data: dict[str, Any] = {
            'format': ANNOTATION_FORMAT, 'version': ANNOTATION_VERSION,
            'dataset': self.dataset, 'split': self.split, 'media_type': self.media_type,
            'languages': self.languages,
        }
        if self.source_lang is not None:
            data['source_lang'] = self.source_lang
        if self.translation_langs:
            data['translation_langs'] = self.translation_langs
        if self.back_translation_langs:
            data['back_translation_langs'] = self.back_translation_langs
        return data

    def source_captions(self) -> list[str]:
        """All ``captions[source_lang]`` in file order: the lines a translation file aligns with.

        Raises:
            AnnotationError: if the annotation names no ``source_lang``.
        """
        if self.source_lang is None:
            raise AnnotationError(f'{self.dataset}/{self.split}: no source_lang is set, so the '
                                  'annotation has no source captions to translate')
        return [text for record in self.items for text in record.captions[self.source_lang]]


def text_pairs(ann: Annotation) -> Annotation:
    """The same captions, translations and back-translations as a text-only annotation
    (``media_type='text'``, no ``media_path``): what a text-only teacher trains and is
    evaluated on without the media."""
    return replace(ann, media_type='text',
                   items=[replace(record, media_path=None) for record in ann.items])


def _check_name(value: Any, key: str, origin: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise AnnotationError(f'{origin}: {key} must be a non-empty string, got {value!r}')
    if '\x00' in value:  # no file name can hold one: opening it fails naming no item
        raise AnnotationError(f'{origin}: {key} {value!r} holds a NUL character at character '
                              f"{value.index(chr(0))}; repair the file's {key}")
    if not value.isascii():
        _check_encodable(value, f'{origin}: {key} {value!r}')


def _check_languages(value: Any, key: str, origin: str, allow_empty: bool) -> None:
    if not isinstance(value, list) or (not value and not allow_empty):
        raise AnnotationError(f'{origin}: {key} must be a {"" if allow_empty else "non-empty "}'
                              f'list of language codes, got {value!r}')
    for code in value:
        try:
            canonical = normalize_language(code, f'{origin}: {key}')
        except LanguageCodeError as error:
            raise AnnotationError(str(error)) from error
        if canonical != code:
            raise AnnotationError(f'{origin}: {key} holds {code!r}; write its canonical code '
                                  f'{canonical!r} (docs/data.md, language codes)')
    if len(set(value)) != len(value):
        raise AnnotationError(f'{origin}: {key} lists a language twice: {value}')


def _check_texts(value: Any, where: str) -> None:
    if not isinstance(value, list) or not value:
        raise AnnotationError(f'{where} must be a non-empty list of strings, got {value!r}')
    for k, text in enumerate(value):
        if not isinstance(text, str) or shows_nothing(text):
            raise AnnotationError(f'{where}[{k}] must be a non-empty string, got {text!r}')
        if not text.isascii():
            _check_encodable(text, f'{where}[{k}]')


#: Unicode categories of characters that show nothing and that tokenizers drop: format
#: characters (zero-width space and joiners, a byte order mark, direction marks, a soft hyphen)
#: and control characters.
_INVISIBLE = frozenset({'Cf', 'Cc'})


def shows_nothing(text: str) -> bool:
    """Whether ``text`` is whitespace and invisible characters (:data:`_INVISIBLE`) alone, a
    caption the tokenizers make empty: a lone byte order mark or zero-width space (U+200B)
    that a translation tool left for a line it could not translate. The annotation refuses
    such a text; the converters refuse it as they read it, naming the file and line."""
    # A text opening with a letter or digit shows something: the check of every character
    # is left for the rest.
    return not text.strip() or (not text[0].isalnum() and all(
        char.isspace() or unicodedata.category(char) in _INVISIBLE for char in text))


def _check_encodable(text: str, where: str) -> None:
    """Refuse a lone UTF-16 surrogate, which a JSON ``\\ud83d`` escape decodes to: half a
    character, no text. Tokenizers refuse it, mid-training, without naming the caption, and no
    UTF-8 file can hold it. Python also lists a file name's bytes that are not UTF-8 (a Latin-1
    'caf\\xe9.jpg') as such surrogates (surrogateescape)."""
    try:
        text.encode('utf-8')
    except UnicodeEncodeError as error:
        raise AnnotationError(f'{where} holds {text[error.start]!r} at character {error.start}, '
                              'half of a UTF-16 surrogate pair (a character such as an emoji cut '
                              'in two where the file was written), or a byte of a file name that '
                              'is not UTF-8 as Python lists it: repair the text (rename such a '
                              'file to UTF-8)') from None


def _check_record(record: MediaRecord, ann: Annotation, where: str) -> None:
    _check_name(record.media_id, 'media_id', where)
    if ann.media_type == 'text':
        if record.media_path is not None:
            raise AnnotationError(f'{where}: media_path {record.media_path!r} in a text-only '
                                  "annotation (media_type 'text'); remove it, or set the "
                                  "file's media_type to 'image' or 'video'")
    elif record.media_path is None:
        raise AnnotationError(f"{where} lacks ['media_path'], which an annotation of "
                              f'{ann.media_type}s needs')
    else:
        _check_name(record.media_path, 'media_path', where)
    where = f'{where} (media_id {record.media_id!r})'
    _check_texts_by_language(record.captions, 'captions', ann.languages, where)
    _check_texts_by_language(record.translations, 'translations', ann.translation_langs, where)
    _check_texts_by_language(record.back_translations, 'back_translations',
                             ann.back_translation_langs, where)
    for lang in ann.translation_langs:
        _check_one_per_caption(record, 'translations', lang, ann.source_lang, where,
                               'source caption needs exactly one translation')
    for lang in ann.back_translation_langs:
        _check_one_per_caption(record, 'back_translations', lang, lang, where,
                               'caption needs exactly one back-translation')


def _check_texts_by_language(value: Any, key: str, languages: list[str], where: str) -> None:
    if not isinstance(value, dict) or set(value) != set(languages):
        found = sorted(value) if isinstance(value, dict) else value
        raise AnnotationError(f'{where}: {key} must have exactly the languages {languages}, '
                              f'found {found}')
    for lang, texts in value.items():
        _check_texts(texts, f'{where}: {key}[{lang!r}]')


def _check_one_per_caption(record: MediaRecord, key: str, lang: str, caption_lang: str,
                           where: str, rule: str) -> None:
    texts, captions = getattr(record, key)[lang], record.captions[caption_lang]
    if len(texts) != len(captions):
        raise AnnotationError(f'{where}: {key}[{lang!r}] has {len(texts)} entries but '
                              f'captions[{caption_lang!r}] has {len(captions)}; each {rule}')


def _record_from_json(data: Any, where: str) -> MediaRecord:
    """The record of an item's JSON, its texts' language keys renamed to canonical codes
    (``jp`` -> ``ja``). Its content is left for :meth:`Annotation.validate`, which knows the
    header (``media_path`` is required unless the media type is ``text``)."""
    if not isinstance(data, dict):
        raise AnnotationError(f'{where} must be an object, got {type(data).__name__}')
    missing = {'media_id', 'captions'} - set(data)
    if missing:
        raise AnnotationError(f'{where} lacks {sorted(missing)}')
    unknown = set(data) - _ITEM_KEYS
    if unknown:
        raise AnnotationError(f'{where} has unknown keys {sorted(unknown)}; allowed: '
                              f'{sorted(_ITEM_KEYS)}')
    texts = {key: data.get(key, {}) for key in ('captions', 'translations', 'back_translations')}
    for key, value in texts.items():
        if isinstance(value, dict):
            texts[key] = _renamed_texts(value, f'{where} (media_id {data["media_id"]!r}): {key}')
    return MediaRecord(media_id=data['media_id'], media_path=data.get('media_path'), **texts)


def _records(values: Iterable[Any], origin: str) -> Iterator[MediaRecord]:
    for position, value in enumerate(values):
        yield _record_from_json(value, f'{origin}: item {position}')


def _records_until_error(values: Iterable[Any], origin: str,
                         failures: list[AnnotationError]) -> Iterator[MediaRecord]:
    """:func:`_records` up to the first item at fault, whose error goes to ``failures``: it is
    raised once the header, which may follow the items, has been checked."""
    try:
        yield from _records(values, origin)
    except AnnotationError as error:
        failures.append(error)


def _check_header(data: Mapping[str, Any], origin: str) -> None:
    if data.get('format') != ANNOTATION_FORMAT:
        raise AnnotationError(f'{origin}: format must be {ANNOTATION_FORMAT!r}, got '
                              f'{data.get("format")!r}; convert the raw release with '
                              'tools/data/prepare_<dataset>.py')
    if data.get('version') != ANNOTATION_VERSION:
        raise AnnotationError(f'{origin}: version {data.get("version")!r} is not supported '
                              f'(this xmr reads version {ANNOTATION_VERSION})')
    missing = [key for key in _HEADER_KEYS if key not in data]
    if missing:
        raise AnnotationError(f'{origin}: header lacks {missing}')
    # A misspelt optional key ('translation_lang') would leave its field empty, unsaid.
    unknown = set(data) - {*_HEADER_KEYS, *_OPTIONAL_HEADER_KEYS}
    if unknown:
        raise AnnotationError(f'{origin}: header has unknown keys {sorted(unknown)}; allowed: '
                              f'{sorted({*_HEADER_KEYS, *_OPTIONAL_HEADER_KEYS})}')
    if not isinstance(data['items'], list):
        raise AnnotationError(f'{origin}: items must be a list')


def _annotation(top: Any, streamed: Sequence[MediaRecord] | None, origin: str,
                failures: Sequence[AnnotationError] = ()) -> Annotation:
    """The validated annotation of a file's top-level value, its codes made canonical.

    Args:
        top: the top-level value's keys but the items array (``None``: no JSON object).
        streamed: the records of the items array, built as it was decoded; ``None`` when the
            file holds no items array, which the header check then names.
        origin: the file, named in every error.
        failures: the error of the first item at fault as the array was decoded, raised once
            the header is checked (a file of another format is named so first).
    """
    if not isinstance(top, dict):
        raise AnnotationError(f'{origin}: the top level must be a JSON object')
    # A streamed items array is a list; any other items value stays in the header.
    _check_header(top if streamed is None else {**top, 'items': []}, origin)
    if failures:
        raise failures[0]
    ann = Annotation(dataset=top['dataset'], split=top['split'], media_type=top['media_type'],
                     languages=top['languages'], items=streamed,
                     source_lang=top.get('source_lang'),
                     translation_langs=top.get('translation_langs', []),
                     back_translation_langs=top.get('back_translation_langs', []))
    _canonical_header(ann, origin)
    ann.validate(origin)
    return ann


def _canonical_header(ann: Annotation, origin: str) -> None:
    """Rename the header's language codes to their canonical forms (``jp`` -> ``ja``), in place.

    Codes that are no language, or lists that are no lists, are left for ``validate`` to name.
    """
    try:
        renamed = {key: _renamed(getattr(ann, key), f'{origin}: {key}')
                   for key in ('languages', 'translation_langs', 'back_translation_langs')}
        if isinstance(ann.source_lang, str):
            ann.source_lang = normalize_language(ann.source_lang, f'{origin}: source_lang')
    except LanguageCodeError as error:
        raise AnnotationError(str(error)) from error
    for key, codes in renamed.items():
        setattr(ann, key, codes)


def _renamed_texts(texts: dict, where: str) -> dict:
    """``texts`` keyed by canonical codes; two keys of one language (``ja`` and ``jp``) are an
    error, where a dict would silently keep the last one's texts."""
    renamed: dict = {}
    first: dict = {}
    for lang, value in texts.items():
        canonical = _renamed_key(lang)
        if canonical in renamed:
            raise AnnotationError(f'{where} has {first[canonical]!r} and {lang!r}, both the '
                                  f'language {canonical!r}; merge their texts under one key')
        renamed[canonical], first[canonical] = value, lang
    return renamed


def _renamed(codes: Any, where: str) -> Any:
    if not isinstance(codes, list) or not all(isinstance(code, str) for code in codes):
        return codes
    return normalize_languages(codes, where)


def _renamed_key(code: Any) -> Any:
    try:
        return normalize_language(code)
    except LanguageCodeError:
        return code


#: The tool that writes an annotation file, by the file's name (docs/data.md, "Converters"),
#: first match first: a missing file is named with the command that makes it.
ANNOTATION_WRITERS = (
    (r'multi30k_train_\d+shot', 'tools/data/few_shot_split.py --protocol subsample'),
    # The training captions machine-translated into one language, a copy of the converter's.
    (r'multi30k_train_[a-z]{2,3}\.json$', 'tools/data/attach_translations.py '
     'multi30k_train.json --translations LANG=LANG.txt --out <this file>, LANG.txt the '
     'machine translation, line by line, of what tools/data/export_source_captions.py exports '
     "of prepare_multi30k.py's multi30k_train.json"),
    (r'multi30k_', 'tools/data/prepare_multi30k.py'),
    (r'flickr30k_200_', 'tools/data/prepare_flickr30k_200.py'),
    (r'flickr30k_', "tools/data/prepare_flickr30k.py, or from LAPS's files by "
                    'tools/data/prepare_laps.py'),
    (r'coco_', "tools/data/prepare_mscoco.py, or from LAPS's files by tools/data/prepare_laps.py"),
    (r'cococn_', 'tools/data/prepare_mscoco.py'),
    (r'xtd10_', 'tools/data/prepare_xtd10.py'),
    (r'xtd200_', 'tools/data/prepare_xtd200.py'),
    (r'(cc300k|cc3m)_', 'tools/data/prepare_cc3m.py'),
    (r'msrvtt_', 'tools/data/prepare_msrvtt.py'),
    (r'crossmodal3600_', 'tools/data/prepare_crossmodal3600.py'),
)


def missing_annotation(path: Path, key: str | None = None) -> FileNotFoundError:
    """The error of an annotation file ``path`` that does not exist (given as the config's
    ``key``, where known), naming the converter that writes it."""
    tool = annotation_writer(path)
    make = (f'{path.name} is written by {tool}' if tool is not None
            else 'a raw release is converted by tools/data/prepare_<dataset>.py')
    named = path if key is None else f'{path} ({key})'
    if not path.is_absolute():
        # A config's paths follow the working directory, not the config's folder.
        named = f'{named}, relative to the working directory {Path.cwd()}'
    return FileNotFoundError(f'annotation file not found: {named}: check ann_file and '
                             f'data_root, or make it: {make} (docs/data.md, Converters)')


def annotation_writer(path: str | os.PathLike) -> str | None:
    """The tool (and its options) that writes the annotation file ``path`` by its name, or the
    tools where several write it (:data:`ANNOTATION_WRITERS`); ``None`` for a name no converter
    writes."""
    name = Path(path).name
    return next((tool for pattern, tool in ANNOTATION_WRITERS if re.match(pattern, name)), None)


def load_annotation(path: str | os.PathLike,
                    items: Callable[[Iterator[MediaRecord]], Sequence[MediaRecord]] = list
                    ) -> Annotation:
    """Read and validate an annotation file.

    The file is read a chunk at a time and its items are decoded one at a time and handed to
    ``items`` as records: with :class:`~xmr.datasets.record_store.RecordStore` (what a dataset
    asks for), neither the file's text nor its records exist as Python objects all at once.

    Args:
        path: the JSON file written by a converter.
        items: builds the annotation's items from its records, in file order.

    Returns:
        The validated annotation.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        AnnotationError: if it is not valid JSON or breaks the schema.
    """
    path = Path(path)
    if not path.is_file():
        raise missing_annotation(path)
    origin, failures = str(path), []
    # utf-8-sig: a byte order mark (Windows editors write one) is no JSON error.
    with _collector_paused(), path.open(encoding='utf-8-sig') as file:
        try:
            header, records = read_object(
                file, 'items', lambda values: items(_records_until_error(values, origin, failures)))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise AnnotationError(json_file_problem(path, err)) from err
        except DuplicateKeyError as err:
            raise AnnotationError(f'{path}: {err}') from err
        return _annotation(header, records, origin, failures)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Keep Python's cyclic garbage collector off while an annotation is built, then, after a
    large one, collect once.

    Parsing allocates millions of dicts, lists and records, none in a reference cycle. With the
    collector on, every 25% of growth triggers a collection that walks everything built so far;
    switched back on after the load, it would walk the new objects once per generation they
    are promoted through. One full collection at the end walks them once and files them with
    the old objects. It walks the whole heap, though (0.4 s after torch and transformers are
    imported), so a load that made fewer than :data:`FULL_COLLECTION_AFTER` objects leaves
    them to the collector's young generations. The collector's previous state is restored.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            # gc's count of the youngest generation: objects made since its last pass, which
            # the paused collector did not run.
            if gc.get_count()[0] >= FULL_COLLECTION_AFTER:
                gc.collect()
            gc.enable()


def dump_annotation(ann: Annotation, path: str | os.PathLike) -> None:
    """Validate ``ann`` and write it to ``path`` atomically (UTF-8, non-ASCII kept as is)."""
    dump_annotations({path: ann})


def dump_annotations(outputs: Mapping[str | os.PathLike, Annotation]) -> list[Path]:
    """Validate every annotation, then write them all or none
    (:func:`~xmr.fileio.atomic_write_texts`): a failure leaves the files as they were."""
    for path, ann in outputs.items():
        ann.validate(f'annotation for {path}')
    return atomic_write_texts({path: _annotation_lines(ann) for path, ann in outputs.items()})


#: What ends the header's line of a written annotation and opens its items.
_ITEMS_OPEN = ', "items": ['


def written_header(path: str | os.PathLike) -> dict[str, Any]:
    """The header fields of an annotation file :func:`dump_annotations` wrote (its first line,
    before the items), without reading the items; empty for a file it did not write or that
    does not exist."""
    try:
        with Path(path).open(encoding='utf-8-sig') as file:
            header, found, _ = file.readline().partition(_ITEMS_OPEN)
        # A JSON text that ends in its closing brace is an object.
        return loads_json(header + '}') if found else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}


def _annotation_lines(ann: Annotation) -> Iterator[str]:
    """The text of ``ann``'s file as it is written: the header's fields, then one item a line.

    Each line is made by json's C encoder. ``json.dumps(indent=...)`` runs its pure-Python
    encoder, which holds a string for every token of the file until it joins them: writing
    CC300K's 2.4M captions took 5.7 s and 1.1 GB on top of the annotation's 1 GB. The lines go
    to the file as they are made: the whole text, made before the write, held 4.4 times the
    file (its lines, their join, and the join copied into the header's line).
    """
    header = json.dumps(ann.header_json(), ensure_ascii=False)
    yield f'{header[:-1]}{_ITEMS_OPEN}\n'
    for number, record in enumerate(ann.items):
        yield (',\n' if number else '') + json.dumps(record.to_json(), ensure_ascii=False)
    yield '\n]}\n'
