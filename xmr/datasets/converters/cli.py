"""What the converters' command lines share: converting, writing and reporting in one step."""
from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path

from xmr.datasets.annotation import (
    Annotation,
    AnnotationError,
    dump_annotations,
    text_pairs,
    written_header,
)
from xmr.datasets.benchmark_sizes import split_size_mismatch
from xmr.datasets.converters.errors import ConversionError
from xmr.fileio import input_written_over

__all__ = ['ATTACH_OUT_HELP', 'SKIP_SIZE_OPTION', 'add_media_options', 'add_out_dir', 'attach_out',
           'check_benchmark_sizes', 'checked_media_dir',
           'dump_converted', 'dump_into', 'refuse_other_file', 'refuse_other_files',
           'refuse_written_over', 'refuse_standing_text', 'write_converted']

#: ``--out``'s help in the attaching tools, whose check is :func:`attach_out`.
ATTACH_OUT_HELP = ('annotation file to write (default: ANN itself); a file standing there is '
                   "replaced only where it is an annotation of ANN's dataset and split a "
                   'converter wrote (an earlier run), never a checkpoint, a test result or any '
                   'other file')

#: The option that lets a converter write a benchmark split of another size than the papers'
#: (:func:`check_benchmark_sizes`).
SKIP_SIZE_OPTION = '--skip-benchmark-size-check'

#: How much of a file :func:`refuse_standing_text` reads to tell a binary file (a NUL byte).
_TEXT_PROBE_BYTES = 8192


def add_media_options(parser: argparse.ArgumentParser, media: str,
                      folder_help: str | None = None) -> None:
    """``--images-dir`` / ``--videos-dir`` (``media`` names the folder), ``--skip-media-check``,
    ``--text-only`` and ``--skip-benchmark-size-check``, the media options every converter
    shares (read back by :func:`checked_media_dir`; the last as ``check_benchmark_size`` of
    :func:`write_converted` / :func:`dump_into`).

    Args:
        parser: the converter's command line.
        media: ``'images'`` or ``'videos'``.
        folder_help: what the folder must hold, where the release lays its files out in a way
            of its own (``'COCO image folder with train2014/ and val2014/'``); default
            ``'<media> folder'``.
    """
    parser.add_argument(f'--{media}-dir', type=Path,
                        help=f'{folder_help or f"{media} folder"} (checked for every listed '
                        'file)')
    parser.add_argument('--skip-media-check', action='store_true',
                        help=f'do not check that the {media} exist (no --{media}-dir needed)')
    parser.add_argument('--text-only', action='store_true',
                        help="write text pairs alone (media_type 'text', no media_path): a "
                        'text-only teacher or the cross-lingual phase; needs no media')
    parser.add_argument(SKIP_SIZE_OPTION, action='store_true',
                        help="write a benchmark's evaluation split (MSR-VTT 1k-A, Karpathy COCO "
                        'and Flickr30K val/test, Multi30K, XTD10, Crossmodal-3600) whose media '
                        "count differs from the papers' (a deliberate subset); without it the "
                        'conversion is refused, naming the split and both counts')


def add_out_dir(parser: argparse.ArgumentParser) -> None:
    """``--out-dir``, where a converter writes ``<name>.json`` (checked by
    :func:`refuse_other_files`)."""
    parser.add_argument('--out-dir', type=Path, required=True,
                        help='folder to write the <name>.json annotations into; a file standing '
                        'at one is replaced only where it is an annotation of the dataset '
                        'written there (an earlier run), never a test result, a checkpoint or '
                        "another dataset's annotation")


def checked_media_dir(parser: argparse.ArgumentParser, args: argparse.Namespace,
                      media: str) -> Path | None:
    """The media folder to check, ``None`` when the conversion skips the check; an error when
    neither a folder nor a reason to skip it is given."""
    folder = getattr(args, f'{media}_dir')
    if args.skip_media_check or args.text_only:
        return None
    if folder is None:
        parser.error(f'give --{media}-dir, or --skip-media-check to convert without {media}, '
                     'or --text-only for text pairs alone')
    return folder


def refuse_written_over(outputs: Mapping[str, Path], inputs: Mapping[str, Path | None]) -> None:
    """Refuse, before anything is written, an output that is one of the run's inputs (the
    annotation file replaced by caption lines) or another of its outputs (``--export de=x.txt
    fr=x.txt`` wrote French over German and reported both), however the two are named.

    Args:
        outputs: what names each output (``'--export de'``) -> its path.
        inputs: what names each input (``'ANN'``) -> its path; ``None`` entries skipped.

    Raises:
        ConversionError: naming both and the fix.
    """
    named = {path: name for name, path in inputs.items() if path is not None}
    for name, path in outputs.items():
        other = input_written_over(path, named)
        if other is not None:
            raise ConversionError(f'{path} ({name}) is also {named[other]}: writing it would '
                                  'replace that; give another path')
        named[path] = name


def refuse_other_file(path: Path, option: str, dataset: str,
                      elsewhere: str | None = None, split: str | None = None) -> None:
    """Refuse, before converting, a file at ``path`` that is no ``dataset`` annotation a
    converter wrote (:func:`~xmr.datasets.annotation.written_header`): a converter replaces its
    own earlier output alone, where ``--out`` naming a user's file (a test result, the
    annotation of another dataset) replaced it.

    Args:
        path: the file to write.
        option: what named it (``'--out'``), for the message.
        dataset: the ``dataset`` field the converter writes (``'cc3m'``).
        elsewhere: how the command writes elsewhere, for the message (default: give
            ``option`` another file).
        split: the ``split`` field written, where the command knows it: an annotation of
            another split of the dataset (the test set's, for a train annotation's output) is
            refused too.

    Raises:
        ConversionError: naming the path, the option and the fix; nothing is written.
    """
    elsewhere = elsewhere or f'give {option} another file'
    if path.is_dir():
        raise ConversionError(f'{path} ({option}): is a folder, not a file; it is kept: '
                              f'{elsewhere}')
    if not path.exists():
        return
    header = written_header(path)
    if header.get('dataset') != dataset:
        raise ConversionError(f'{path} ({option}): exists and is no {dataset} annotation a '
                              'converter wrote; it is kept (a converter replaces its own '
                              f'earlier output alone): {elsewhere}')
    if split is not None and header.get('split', split) != split:
        raise ConversionError(f"{path} ({option}): holds the {dataset} {header['split']!r} "
                              f'annotation, and this writes {split!r}; it is kept: {elsewhere}')


def refuse_other_files(out_dir: Path, outputs: Mapping[str, str]) -> None:
    """:func:`refuse_other_file` for each ``<out_dir>/<name>.json`` an ``--out-dir`` converter
    writes: a file standing there is replaced only where it is an annotation of the dataset
    the converter writes under that name (an earlier run), where a test result or another
    dataset's annotation named so was replaced.

    Args:
        out_dir: the ``--out-dir``.
        outputs: output name (``'multi30k_train'``) -> the ``dataset`` field written there.

    Raises:
        ConversionError: naming the path, ``--out-dir`` and the fix; nothing is written.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise ConversionError(f'{out_dir} (--out-dir): is a file, not a folder; give --out-dir '
                              'the folder to write the annotations into')
    for name, dataset in outputs.items():
        refuse_other_file(out_dir / f'{name}.json', '--out-dir', dataset,
                          'move it away, or give --out-dir another folder')


def attach_out(out: Path | None, ann_path: Path, ann: Annotation) -> Path:
    """The file an attaching tool (``attach_translations.py``, ``attach_back_translations.py``)
    writes: ``--out``, or the annotation it read. An ``--out`` standing there must be an
    annotation of ``ann``'s dataset and split a converter wrote (:func:`refuse_other_file`): a
    training checkpoint, a test result or the dataset's test annotation given as ``--out`` was
    replaced by the annotation.

    Args:
        out: the tool's ``--out`` (``None``: write over ``ann_path``).
        ann_path: the annotation file read.
        ann: what it holds.

    Raises:
        ConversionError: naming ``--out`` and the fix; nothing is written.
    """
    if out is None or input_written_over(out, [ann_path]) is not None:
        # The file read is the one written: it held an annotation, however it was written.
        return ann_path if out is None else out
    refuse_other_file(out, '--out', ann.dataset, split=ann.split)
    return out


def refuse_standing_text(outputs: Mapping[str, Path], overwrite: bool) -> None:
    """Refuse, before anything is written, a file standing where a tool writes caption lines
    (``export_source_captions.py OUT``, ``attach_back_translations.py --export``) unless
    ``overwrite`` is given: a translation file (hours of a MT system) given as the export's
    path was replaced by the captions to translate.

    Nothing in a file of lines tells an earlier export from a translation of it (their line
    counts are the same), so ``overwrite`` is the user's word that the file is an earlier export;
    even then a file that cannot be one is kept: an annotation a converter wrote, or a binary
    file (a NUL byte in its first 8 KiB: a checkpoint, an image).

    Args:
        outputs: what names each output (``'OUT'``, ``'--export de'``) -> its path.
        overwrite: the tool's ``--overwrite``.

    Raises:
        ConversionError: naming the path, what named it and the fix; nothing is written.
    """
    for name, path in outputs.items():
        if path.is_dir():
            raise ConversionError(f'{path} ({name}): is a folder, not a file; give the text '
                                  'file to write')
        if not path.exists():
            continue
        if not overwrite:
            raise ConversionError(f'{path} ({name}): exists and is kept: pass --overwrite to '
                                  'replace it (an earlier export, not a translation of one), or '
                                  'give another path')
        with path.open('rb') as file:
            binary = b'\0' in file.read(_TEXT_PROBE_BYTES)
        other = ('a binary file' if binary else
                 'an annotation a converter wrote' if written_header(path) else None)
        if other is not None:
            raise ConversionError(f'{path} ({name}): exists and is {other}, no export of caption '
                                  'lines; it is left as it is, --overwrite replacing an earlier '
                                  'export alone: give another path')


def write_converted(convert: Callable[[], Mapping[str, Annotation]], out_dir: Path,
                    unit: str, outputs: Callable[[], Mapping[str, str]],
                    text_only: bool = False, check_benchmark_size: bool = True) -> None:
    """Run a conversion, write each annotation to ``<out_dir>/<name>.json``, report each file.

    A file standing at an output's path is replaced only where it is an annotation of the
    dataset written there (:func:`refuse_other_files`), checked before ``convert`` reads any
    input, and again for the names it returned.

    Args:
        convert: the conversion; returns output name -> annotation.
        out_dir: where the files go (written atomically, all or none).
        unit: what an item is, for the report line (``'images'``, ``'videos'``).
        outputs: output name -> dataset of every file the run may write, from the command line
            alone (no input read).
        text_only: write each output as text pairs (:func:`~xmr.datasets.annotation.text_pairs`).
        check_benchmark_size: refuse a benchmark split of another size
            (:func:`check_benchmark_sizes`); ``not args.skip_benchmark_size_check``.

    Raises:
        SystemExit: on a bad input or a file standing at an output that is no earlier one, with
            the message naming it; nothing is written then.
    """
    try:
        refuse_other_files(out_dir, outputs())
        converted = convert()
        if text_only:
            converted = {name: text_pairs(ann) for name, ann in converted.items()}
            unit = 'text items'
        written = dump_into(out_dir, converted, check_benchmark_size)
    except (ConversionError, AnnotationError) as err:
        raise SystemExit(f'error: {err}') from err
    for path, ann in zip(written, converted.values()):
        print(f'{path}: {len(ann.items)} {unit}, languages {", ".join(ann.languages)}')


def check_benchmark_sizes(outputs: Mapping[Path, Annotation]) -> None:
    """Refuse, before anything is written, an annotation of a benchmark's evaluation split
    whose media count is not the one the papers score
    (:data:`~xmr.datasets.benchmark_sizes.BENCHMARK_SPLIT_SIZES`, which the datasets check on
    reading too): a truncated download or another release is found at conversion, not by the
    first run that reads the file.

    Raises:
        ConversionError: naming the file, the dataset and split, the count read and the one
            expected, and :data:`SKIP_SIZE_OPTION`.
    """
    for path, ann in outputs.items():
        expected = split_size_mismatch(ann)
        if expected is not None:
            raise ConversionError(
                f'{path}: {ann.dataset} split {ann.split!r} holds {len(ann.items)} media, but the '
                f'benchmark is scored on {expected}: the release read is likely truncated or '
                'another one (convert the whole release, docs/data.md); nothing is written. A '
                f'deliberate subset is written with {SKIP_SIZE_OPTION} (and read with the '
                "dataset's check_benchmark_size=False)")


def dump_into(out_dir: Path, outputs: Mapping[str, Annotation],
              check_benchmark_size: bool = True) -> list[Path]:
    """Write an ``--out-dir`` command's annotations to ``<out_dir>/<name>.json`` by
    :func:`dump_converted`, once :func:`refuse_other_files` has passed each path for the dataset
    written there (a name a declaration checked before the conversion left out among them).

    Args:
        out_dir: the ``--out-dir``.
        outputs: output name -> annotation.
        check_benchmark_size: refuse a benchmark split of another size
            (:func:`check_benchmark_sizes`).

    Returns:
        The paths written.

    Raises:
        ConversionError: naming the path at fault and the fix; nothing is written.
    """
    refuse_other_files(out_dir, {name: ann.dataset for name, ann in outputs.items()})
    paths = {out_dir / f'{name}.json': ann for name, ann in outputs.items()}
    if check_benchmark_size:
        check_benchmark_sizes(paths)
    return dump_converted(paths)


def dump_converted(outputs: Mapping[Path, Annotation],
                   elsewhere: str = 'give --out-dir another folder') -> list[Path]:
    """Write a conversion's annotations, all or none, unless one would replace a file holding
    machine translations or back-translations attached since (tools/data/attach_*.py), which a
    converter does not make: re-running it into the same folder lost them without a word.

    Args:
        elsewhere: how the command writes elsewhere, for the message.

    Raises:
        ConversionError: naming the file, the languages and the fix; nothing is written.
    """
    for path, ann in outputs.items():
        attached = written_header(path)
        lost = {key: [lang for lang in attached.get(key, []) if lang not in getattr(ann, key)]
                for key in ('translation_langs', 'back_translation_langs')}
        if any(lost.values()):
            named = '; '.join(f'{key} {langs}' for key, langs in lost.items() if langs)
            raise ConversionError(f'{path}: holds texts attached after its conversion ({named}) '
                                  'that the new file would not have; it is kept: move it away '
                                  f'first (and attach them again to the new file), or {elsewhere}')
    return dump_annotations(outputs)
