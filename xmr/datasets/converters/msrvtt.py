"""Multi-MSRVTT (1k-A test in nine languages, 7k/9k training lists) to xmr annotations.

Raw files:

* the 1k-A (JSFusion) test CSV ``MSRVTT_JSFUSION_test.csv``: columns ``key, vid_key,
  video_id, sentence``, one English caption per video, 1,000 rows;
* per-language test JSONs (Multi-MSRVTT translations of the 1k-A captions), one file per
  language, in any of these shapes (``docs/data.md``): a list of ``{"video_id": ...,
  "caption" | "sentence" | "text": str or [str]}``, an object ``{"sentences": [that list]}``, or
  an object ``{video_id: str or [str]}``; a video may be named by its file,
  ``video7010.mp4``, as MCLIP4VLA's ``multilingual_test/test_{lang}.json`` key it; the test
  split keeps the first caption of each video, the one the 1k-A protocol ranks;
* ``MSRVTT_data.json`` (``sentences[*]`` with ``video_id``, ``sen_id``, ``caption``): the twenty
  English captions per video used for training;
* the training lists ``MSRVTT_train.7k.csv`` / ``MSRVTT_train.9k.csv`` (column ``video_id``).

Videos are found by id: ``<videos_dir>/<video_id>.<ext>``. Outputs: ``msrvtt_test1ka.json``,
``msrvtt_train{7k,9k}.json`` and, when both lists are given, ``msrvtt_val.json`` = the 9k list
minus the 7k list (1,990 videos disjoint from both 7k training and 1k-A test), the validation
split that picks checkpoints for models trained on 7k.
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import warnings
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from xmr.datasets.annotation import Annotation, MediaRecord
from xmr.datasets.converters.cli import (
    add_media_options,
    add_out_dir,
    checked_media_dir,
    write_converted,
)
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.json_captions import clean_caption, integer_id, read_json
from xmr.datasets.converters.raw_files import (
    check_media_exist,
    parse_lang_paths,
    read_lines,
    refuse_repeats,
    require_file,
)
from xmr.datasets.video_containers import VIDEO_SUFFIXES
from xmr.utils.cli import GatherAction, add_custom_imports

__all__ = ['read_csv_rows', 'read_test_json', 'read_msrvtt_sentences', 'convert_msrvtt',
           'msrvtt_outputs', 'main']

_CAPTION_KEYS = ('caption', 'sentence', 'text')


def read_csv_rows(path: str | os.PathLike, required: Sequence[str], what: str,
                  ) -> list[dict[str, str]]:
    """Rows of a CSV file with a header that holds ``required`` columns."""
    lines = read_lines(require_file(path, what), what=what)
    reader = csv.DictReader(io.StringIO('\n'.join(lines)))
    missing = [column for column in required if column not in (reader.fieldnames or [])]
    if missing:
        raise ConversionError(f'{what} {path} lacks the column(s) {missing}; header is '
                              f'{reader.fieldnames}')
    rows = list(reader)
    if not rows:
        raise ConversionError(f'{what} {path} holds its header and no row')
    for number, row in enumerate(rows, start=2):
        if any(not (row.get(column) or '').strip() for column in required):
            raise ConversionError(f'{what} {path} line {number} has an empty '
                                  f'{" or ".join(required)}')
    return rows


def _caption_list(value: Any, where: str) -> list[str]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ConversionError(f'{where}: no caption')
    return [clean_caption(text, where) for text in values]


def _video_id(name: Any) -> str:
    """The video id a test JSON names: ``video7010``, or ``video7010.mp4``, the video's file
    (a suffix of :data:`~xmr.datasets.video_containers.VIDEO_SUFFIXES`, any case), by which
    MCLIP4VLA's Multi-MSRVTT files key their captions."""
    stem, suffix = os.path.splitext(str(name))
    return stem if suffix.lower() in VIDEO_SUFFIXES else str(name)


def read_test_json(path: str | os.PathLike, lang: str) -> dict[str, list[str]]:
    """Captions per video id of one per-language test JSON (any accepted shape; a video named
    by its file, ``video7010.mp4``, is keyed by its id, ``video7010``).

    Raises:
        ConversionError: naming the file and the entry at fault, or a video an object names
            under two keys (``video7010`` and ``video7010.mp4``), whose captions would merge.
    """
    data = read_json(path, f'{lang} test JSON')
    what = f'{lang} test JSON {path}'
    captions: dict[str, list[str]] = defaultdict(list)
    if isinstance(data, dict) and isinstance(data.get('sentences'), list):
        data = data['sentences']
    if isinstance(data, list):
        for index, entry in enumerate(data):
            where = f'{what} entry {index}'
            key = next((k for k in _CAPTION_KEYS if isinstance(entry, dict) and k in entry), None)
            if key is None or 'video_id' not in entry:
                raise ConversionError(f'{where} needs "video_id" and one of {_CAPTION_KEYS}')
            captions[_video_id(entry['video_id'])].extend(_caption_list(entry[key], where))
    elif isinstance(data, dict):
        named: dict[str, str] = {}
        for name, value in data.items():
            video_id = _video_id(name)
            if named.setdefault(video_id, name) != name:
                raise ConversionError(f'{what} names video {video_id!r} twice: as '
                                      f'{named[video_id]!r} and as {name!r}')
            captions[video_id] = _caption_list(value, f'{what} video {name}')
    else:
        raise ConversionError(f'{what} is neither a list of captions nor an object by video id')
    return dict(captions)


def read_msrvtt_sentences(path: str | os.PathLike) -> dict[str, list[str]]:
    """English captions per video id of ``MSRVTT_data.json``, in ``sen_id`` order."""
    data = read_json(path, 'MSRVTT data file')
    if not isinstance(data, dict) or not isinstance(data.get('sentences'), list):
        raise ConversionError(f'MSRVTT data file {path} has no "sentences" list')
    rows = []
    for index, entry in enumerate(data['sentences']):
        where = f'MSRVTT data file {path} sentence {index}'
        if not isinstance(entry, dict) or 'video_id' not in entry or 'caption' not in entry:
            raise ConversionError(f'{where} lacks video_id or caption')
        video_id = entry['video_id']
        if not isinstance(video_id, str) or not video_id.strip():
            raise ConversionError(f'{where} has video_id {video_id!r}, not a video name '
                                  "(e.g. 'video7010')")
        rows.append((integer_id(entry.get('sen_id', index), where, 'sen_id'), video_id.strip(),
                     clean_caption(entry['caption'], where)))
    captions: dict[str, list[str]] = defaultdict(list)
    for _, video_id, caption in sorted(rows):
        captions[video_id].append(caption)
    return dict(captions)


def _file_extension(video_ext: str) -> str:
    """``video_ext`` without its leading dot: ``.mp4`` and ``mp4`` name the same files, where
    the dot kept would write ``<video_id>..mp4`` into the annotations."""
    ext = video_ext[1:] if video_ext.startswith('.') else video_ext
    if not ext or ext.startswith('.') or '/' in ext or '\\' in ext:
        raise ConversionError(f'video extension {video_ext!r} names no file extension; give '
                              'the one the video files end with, e.g. mp4')
    return ext


def _record(video_id: str, ext: str, captions: dict[str, list[str]]) -> MediaRecord:
    return MediaRecord(media_id=video_id, media_path=f'{video_id}.{ext}', captions=captions)


def _test_split(test_csv: Path, test_jsons: Mapping[str, str | os.PathLike],
                ext: str) -> Annotation:
    if 'en' in test_jsons:
        raise ConversionError('English test captions come from the test CSV; drop en from the '
                              'per-language test JSONs')
    rows = read_csv_rows(test_csv, ('video_id', 'sentence'), 'test CSV')
    order = [row['video_id'].strip() for row in rows]
    refuse_repeats(order, f'test CSV {test_csv}', 'video', first_line=2)
    english = {video_id: [clean_caption(row['sentence'], f'test CSV {test_csv} line {number}')]
               for number, (video_id, row) in enumerate(zip(order, rows), start=2)}
    per_lang = {lang: read_test_json(path, lang) for lang, path in test_jsons.items()}
    for lang, table in per_lang.items():
        missing = [video_id for video_id in order if video_id not in table]
        if missing:
            raise ConversionError(f'{lang} test JSON {test_jsons[lang]} has no caption for '
                                  f'{len(missing)} of the {len(order)} test videos of {test_csv} '
                                  f'(first: {missing[0]})')
        extra = set(table) - set(english)
        if extra:
            warnings.warn(f'{lang} test JSON {test_jsons[lang]} also captions {len(extra)} '
                          f'videos outside {test_csv}; they are ignored')
        _warn_extra_captions(table, order, f'{lang} test JSON {test_jsons[lang]}')
    records = [_record(video_id, ext, {'en': english[video_id],
                                       **{lang: per_lang[lang][video_id][:1]
                                          for lang in per_lang}})
               for video_id in order]
    return Annotation(dataset='msrvtt', split='test1ka', media_type='video',
                      languages=['en', *per_lang], items=records, source_lang='en')


def _warn_extra_captions(table: Mapping[str, list[str]], order: Sequence[str],
                         origin: str) -> None:
    """Warn how many captions beyond each test video's first ``origin`` gives: the 1k-A test
    ranks one caption a video in every language (the CSV's English one; MCLIP4VLA reads the
    first of its test JSONs' lists), so only the first is kept."""
    longer = [video_id for video_id in order if len(table[video_id]) > 1]
    if longer:
        dropped = sum(len(table[video_id]) - 1 for video_id in longer)
        warnings.warn(f'{origin}: {dropped} captions of {len(longer)} of the {len(order)} test '
                      'videos dropped; the 1k-A protocol ranks the first of each (first: '
                      f'{longer[0]}, {len(table[longer[0]])} captions)', stacklevel=4)


def _train_split(name: str, video_ids: Sequence[str], english: Mapping[str, list[str]],
                 origin: str, ext: str) -> Annotation:
    missing = [video_id for video_id in video_ids if video_id not in english]
    if missing:
        raise ConversionError(f'{origin}: {len(missing)} videos have no caption in the MSRVTT '
                              f'data file (first: {missing[0]})')
    return Annotation(dataset='msrvtt', split=name, media_type='video', languages=['en'],
                      items=[_record(v, ext, {'en': english[v]}) for v in video_ids],
                      source_lang='en')


def convert_msrvtt(test_csv: str | os.PathLike,
                   test_jsons: Mapping[str, str | os.PathLike] | None = None,
                   data_json: str | os.PathLike | None = None,
                   train_lists: Mapping[str, str | os.PathLike] | None = None,
                   videos_dir: str | os.PathLike | None = None,
                   video_ext: str = 'mp4') -> dict[str, Annotation]:
    """Build the Multi-MSRVTT annotations.

    Args:
        test_csv: the 1k-A test CSV.
        test_jsons: language -> per-language test JSON.
        data_json: ``MSRVTT_data.json`` (needed with ``train_lists``).
        train_lists: list name (``7k``, ``9k``) -> training list CSV.
        videos_dir: video folder; when given, every video must exist.
        video_ext: extension of the video files, with or without its dot.

    Returns:
        Output name (``msrvtt_test1ka``, ``msrvtt_train7k``, ``msrvtt_val``, ...) -> annotation.
    """
    if data_json is not None and not train_lists:
        raise ConversionError(f'the MSRVTT data file {data_json} gives the captions of training '
                              'lists, and none is given; pass them (--train-list 7k=... '
                              '9k=...) or drop the data file')
    video_ext = _file_extension(video_ext)
    outputs = {'msrvtt_test1ka': _test_split(Path(test_csv), test_jsons or {}, video_ext)}
    if train_lists:
        if data_json is None:
            raise ConversionError('training lists need the MSRVTT data file (--data-json) for '
                                  'their captions')
        english = read_msrvtt_sentences(data_json)
        test_ids = {record.media_id for record in outputs['msrvtt_test1ka'].items}
        lists: dict[str, list[str]] = {}
        for name, path in train_lists.items():
            rows = read_csv_rows(path, ('video_id',), f'{name} training list')
            lists[name] = [row['video_id'].strip() for row in rows]
            refuse_repeats(lists[name], f'{name} training list {path}', 'video', first_line=2)
            leaked = [video_id for video_id in lists[name] if video_id in test_ids]
            if leaked:
                raise ConversionError(f'{name} training list {path} holds {len(leaked)} 1k-A test '
                                      f'videos (first: {leaked[0]})')
            outputs[f'msrvtt_train{name}'] = _train_split(
                f'train{name}', lists[name], english, f'{name} training list {path}', video_ext)
        if {'7k', '9k'} <= set(lists):
            seven = set(lists['7k'])
            held_out = [video_id for video_id in lists['9k'] if video_id not in seven]
            if not held_out:
                raise ConversionError(f'the 9k list {train_lists["9k"]} adds no video to the 7k '
                                      f'list {train_lists["7k"]}; no validation split is left')
            outputs['msrvtt_val'] = _train_split('val', held_out, english,
                                                 'validation split (9k minus 7k)', video_ext)
    if videos_dir is not None:
        check_media_exist(videos_dir, sorted({r.media_path for ann in outputs.values()
                                              for r in ann.items}), what='video')
    return outputs


def msrvtt_outputs(train_lists: Collection[str]) -> dict[str, str]:
    """Output name -> dataset of every file :func:`convert_msrvtt` writes with training lists
    of these names (``msrvtt_val`` where the 7k and 9k lists are both given)."""
    val = ['msrvtt_val'] if {'7k', '9k'} <= set(train_lists) else []
    return dict.fromkeys(['msrvtt_test1ka', *(f'msrvtt_train{name}' for name in train_lists),
                          *val], 'msrvtt')


def main(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/prepare_msrvtt.py``."""
    parser = argparse.ArgumentParser(description='Convert Multi-MSRVTT to xmr annotations '
                                     '(docs/data.md).')
    parser.add_argument('--test-csv', type=Path, required=True, help='MSRVTT_JSFUSION_test.csv')
    parser.add_argument('--test-json', nargs='+', action=GatherAction, metavar='LANG=PATH',
                        help='per-language test captions')
    parser.add_argument('--data-json', type=Path, help='MSRVTT_data.json (training captions)')
    parser.add_argument('--train-list', nargs='+', action=GatherAction, metavar='NAME=PATH',
                        help='training lists, e.g. 7k=MSRVTT_train.7k.csv 9k=MSRVTT_train.9k.csv')
    add_media_options(parser, 'videos', 'folder of the <video_id>.<--video-ext> files')
    parser.add_argument('--video-ext', default='mp4',
                        help="the videos' file extension, with or without its dot: each is "
                        'found as <videos-dir>/<video_id>.<ext> (default: mp4)')
    add_out_dir(parser)
    add_custom_imports(parser)
    args = parser.parse_args(argv)
    videos_dir = checked_media_dir(parser, args, 'videos')

    def train_lists() -> dict[str, Path]:
        return parse_lang_paths(args.train_list, '--train-list', key_name='NAME')

    write_converted(lambda: convert_msrvtt(
        args.test_csv, parse_lang_paths(args.test_json, '--test-json'), args.data_json,
        train_lists(), videos_dir, args.video_ext),
        args.out_dir, 'videos', lambda: msrvtt_outputs(train_lists()), text_only=args.text_only,
        check_benchmark_size=not args.skip_benchmark_size_check)
