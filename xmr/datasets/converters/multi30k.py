"""Multi30K (task 1 and task 2 captions) to xmr annotations.

Raw release layout (github.com/multi30k/dataset, ``data/task1`` and ``data/task2``)::

    <raw_dir>/{train,val,test_2016_flickr}.{en,de,fr,cs}.gz   task 1: one caption per image
    <raw_dir>/{train,val,test_2016}.{1..5}.{en,de}.gz         task 2: five captions per image
    <image_splits_dir>/{train,val,test_2016_flickr}.txt       Flickr30K file name per line

Line ``i`` of every caption file of a split describes the image on line ``i`` of its image list;
task 2's files follow task 1's lists (its own ``image_splits/{train,val,test_2016}_images.txt``
are the same files). Outputs (``docs/data.md``): ``multi30k_{train,val,test}.json`` (task 1,
``test`` = test_2016_flickr) and ``multi30k_{train,val,test}_5captions.json``: task 2's five en
and five de captions an image with task 1's fr and cs caption, the gallery the multilingual
retrieval papers (M3P, UC2, MLA, DASD) score Multi30K on, and the 145,000 English captions
DASD's source finetune reads.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from xmr.datasets.annotation import Annotation, MediaRecord
from xmr.datasets.converters.cli import (
    add_media_options,
    add_out_dir,
    checked_media_dir,
    write_converted,
)
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.raw_files import (
    canonical_languages,
    check_media_exist,
    find_first,
    parse_lang_paths,
    read_lines,
    require_same_length,
)
from xmr.datasets.converters.translations import attach_translations
from xmr.utils.cli import GatherAction, add_custom_imports

__all__ = ['MULTI30K_SPLITS', 'TASK2_LANGUAGES', 'TASK2_SPLITS', 'convert_multi30k', 'main']

# Output split name -> name of the release's task 1 files.
MULTI30K_SPLITS = {'train': 'train', 'val': 'val', 'test': 'test_2016_flickr'}
#: Task 2 output split -> (the task 1 split whose images and other languages it takes, the stem
#: of task 2's caption files ``<stem>.<k>.<lang>.gz``).
TASK2_SPLITS = {'train_5captions': ('train', 'train'), 'val_5captions': ('val', 'val'),
                'test_5captions': ('test', 'test_2016')}
TASK2_LANGUAGES = ('en', 'de')
TASK2_CAPTIONS = 5


def _read_image_list(image_splits_dir: Path, release_split: str) -> tuple[Path, list[str]]:
    path = find_first(image_splits_dir, [f'{release_split}.txt'], 'image list')
    names = read_lines(path, what='image list')
    seen: set[str] = set()
    for number, name in enumerate(names, start=1):
        if name != name.strip() or '/' in name:
            raise ConversionError(f'image list {path} line {number} is not a file name: '
                                  f'{name!r}')
        if name in seen:
            raise ConversionError(f'image list {path} names {name} twice (line {number})')
        seen.add(name)
    return path, names


def _caption_file(raw_dir: Path, stem: str, lang: str) -> Path:
    return find_first(raw_dir, [f'{stem}.{lang}.gz', f'{stem}.{lang}'], f'{lang} caption file')


def _caption_files(raw_dir: Path, split: str,
                   languages: Sequence[str]) -> tuple[str, dict[str, list[Path]]]:
    """The task 1 split an output split takes its images from, and each language's caption
    files: task 1's one, or for a :data:`TASK2_SPLITS` split task 2's five of each of
    :data:`TASK2_LANGUAGES` beside task 1's one of every other language of ``languages``.

    Raises:
        ConversionError: naming the missing file, and for task 2's where the release keeps it.
    """
    if split not in TASK2_SPLITS:
        stem = MULTI30K_SPLITS[split]
        return split, {lang: [_caption_file(raw_dir, stem, lang)] for lang in languages}
    task1, stem = TASK2_SPLITS[split]
    try:
        files = {lang: [_caption_file(raw_dir, f'{stem}.{k}', lang)
                        for k in range(1, TASK2_CAPTIONS + 1)] for lang in TASK2_LANGUAGES}
    except ConversionError as error:
        # The release keeps task 2 in its own folder, which the documented command does not
        # name.
        raise ConversionError(f"{error}; {split} is Multi30K task 2: put the release's "
                              f'data/task2/raw/{stem}.*.gz into --raw-dir, or leave the split '
                              'out with --splits train val test') from None
    others = [lang for lang in languages if lang not in TASK2_LANGUAGES]
    return task1, {**files, **_caption_files(raw_dir, task1, others)[1]}


def _split(raw_dir: Path, image_splits_dir: Path, split: str,
           languages: Sequence[str]) -> Annotation:
    """One output split: task 1's (a caption per image in each of ``languages``, source first)
    or a :data:`TASK2_SPLITS` one (five per image in each of :data:`TASK2_LANGUAGES`, one in
    each other language of ``languages``)."""
    task1, files = _caption_files(raw_dir, split, languages)
    list_path, names = _read_image_list(image_splits_dir, MULTI30K_SPLITS[task1])
    languages = list(files)
    captions = {path: read_lines(path) for paths in files.values() for path in paths}
    require_same_length((list_path, len(names)), captions)
    records = [
        MediaRecord(media_id=Path(name).stem, media_path=name,
                    captions={lang: [captions[path][i] for path in paths]
                              for lang, paths in files.items()})
        for i, name in enumerate(names)]
    return Annotation(dataset='multi30k', split=split, media_type='image',
                      languages=list(languages), items=records, source_lang=languages[0])


def convert_multi30k(raw_dir: str | os.PathLike, image_splits_dir: str | os.PathLike,
                     images_dir: str | os.PathLike | None = None,
                     splits: Sequence[str] = ('train', 'val', 'test', *TASK2_SPLITS),
                     languages: Sequence[str] = ('en', 'de', 'fr', 'cs'),
                     train_translations: Mapping[str, str | os.PathLike] | None = None,
                     ) -> dict[str, Annotation]:
    """Build the Multi30K annotations from the raw release.

    Args:
        raw_dir: folder with the task 1 (and task 2) caption files.
        image_splits_dir: folder with ``{train,val,test_2016_flickr}.txt``.
        images_dir: Flickr30K image folder; when given, every listed image must exist in it.
        splits: outputs to build: ``train``, ``val``, ``test`` (task 1) and
            ``train_5captions``, ``val_5captions``, ``test_5captions`` (task 2).
        languages: task 1 languages; the first is the source language of translations.
        train_translations: target language -> machine-translation file for the train split
            (plain format of :mod:`xmr.datasets.converters.translations`).

    Returns:
        Output split name -> annotation (nothing is written).

    Raises:
        ConversionError: naming the file at fault and what is wrong.
    """
    raw_dir, image_splits_dir = Path(raw_dir), Path(image_splits_dir)
    # The release names its files by the canonical codes (train.de.gz).
    languages = canonical_languages(languages, '--languages')
    known = (*MULTI30K_SPLITS, *TASK2_SPLITS)
    for split in splits:
        if split not in known:
            raise ConversionError(f'unknown Multi30K split {split!r}; choose from {known}')
    if train_translations and 'train' not in splits:
        raise ConversionError('train translations given but the train split is not converted')
    outputs: dict[str, Annotation] = {}
    for split in splits:
        ann = _split(raw_dir, image_splits_dir, split, languages)
        if images_dir is not None:
            check_media_exist(images_dir, (record.media_path for record in ann.items))
        if split == 'train' and train_translations:
            ann = attach_translations(ann, train_translations)
        outputs[split] = ann
    return outputs


def main(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/prepare_multi30k.py``."""
    parser = argparse.ArgumentParser(description='Convert the Multi30K release to xmr '
                                     'annotations (docs/data.md).')
    parser.add_argument('--raw-dir', type=Path, required=True,
                        help='folder with {split}.{lang}.gz and task 2\'s '
                        '{train,val,test_2016}.{k}.{en,de}.gz')
    parser.add_argument('--image-splits-dir', type=Path, required=True,
                        help='folder with {train,val,test_2016_flickr}.txt')
    add_media_options(parser, 'images')
    add_out_dir(parser)
    parser.add_argument('--splits', nargs='+', action=GatherAction,
                        default=['train', 'val', 'test', *TASK2_SPLITS],
                        help='outputs to write (default: all): '
                        f"{', '.join(MULTI30K_SPLITS)} (task 1: a caption per image in each "
                        f"of --languages) and {', '.join(TASK2_SPLITS)} (task 2: five "
                        f"{' and '.join(TASK2_LANGUAGES)} captions per image, as MLA and DASD "
                        "score Multi30K, and task 1's caption in each other of --languages)")
    parser.add_argument('--languages', nargs='+', action=GatherAction,
                        default=['en', 'de', 'fr', 'cs'],
                        help='task 1 languages, the first the source of --translations '
                        '(default: en de fr cs)')
    parser.add_argument('--translations', nargs='+', action=GatherAction, metavar='LANG=PATH',
                        help='machine translations of the train split, one line per caption')
    add_custom_imports(parser)
    args = parser.parse_args(argv)
    images_dir = checked_media_dir(parser, args, 'images')

    names = {split: f'multi30k_{split}' for split in args.splits}

    def convert() -> dict[str, Annotation]:
        outputs = convert_multi30k(
            args.raw_dir, args.image_splits_dir, images_dir, args.splits, args.languages,
            parse_lang_paths(args.translations, '--translations'))
        return {names[split]: ann for split, ann in outputs.items()}

    write_converted(convert, args.out_dir, 'images',
                    lambda: dict.fromkeys(names.values(), 'multi30k'), text_only=args.text_only,
                    check_benchmark_size=not args.skip_benchmark_size_check)
