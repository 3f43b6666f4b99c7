"""Find images and videos for text queries in any language the model was trained on.

``python tools/search.py CONFIG CHECKPOINT --media PATH [PATH ...] --lang de --query TEXT ...``
encodes the media (a folder: every image and video below it, by suffix, in path order) as
``xmr.apis.MediaIndex.from_media`` does and prints, per query, the ``--k`` best media with their
cosine scores. A file that cannot be read stops the search, or with ``--on-corrupt skip`` is
named and left out. ``--index FILE`` with ``--media`` saves the gallery's index there
(``MediaIndex.save``), so that later searches, ``--index FILE`` without ``--media``, encode only
their queries; the saved index refuses a model whose backbone did not encode it
(``MediaIndex.load``), and serves one trained on more languages since. ``--out FILE.json`` writes
the hits.

Everything given is checked before the model is built: the media (missing paths, a folder
without media), an index that ``--media`` would write over (unless ``--overwrite``), the index to
read, the query file.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from xmr.run_config import add_config_arguments, load_run_config
from xmr.utils.cli import UserError, given_file, print_for_reader, run_tool

#: The image files a folder given to ``--media`` is searched for (a file given by its path
#: is read whatever its suffix, as Pillow can).
IMAGE_SUFFIXES = ('.bmp', '.gif', '.jpeg', '.jpg', '.png', '.tif', '.tiff', '.webp')


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Search images and videos with text queries '
                                     'in any trained language (docs/evaluation.md)')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint written by training')
    parser.add_argument('--media', nargs='+', metavar='PATH',
                        help='image and video files, or folders searched for them (recursively)')
    parser.add_argument('--index', type=Path, metavar='FILE',
                        help='with --media: save the gallery index here; without: search the '
                        'index saved here')
    parser.add_argument('--overwrite', action='store_true',
                        help='let --media replace an index saved at --index')
    parser.add_argument('--query', nargs='+', default=[], metavar='TEXT', help='query texts')
    parser.add_argument('--queries', type=Path, metavar='FILE',
                        help='a UTF-8 text file of queries, one a line')
    parser.add_argument('--lang', help="the queries' language (one the model was trained on)")
    parser.add_argument('--k', type=int, default=10, help='hits per query (default: 10)')
    parser.add_argument('--index-type', choices=['flat', 'ivf', 'hnsw'], default='flat',
                        help="faiss index of a new gallery: 'flat' (exact, default), 'ivf' or "
                        "'hnsw' (approximate, for large galleries)")
    parser.add_argument('--num-frames', type=int, default=12, help='frames per video (default: 12)')
    parser.add_argument('--on-corrupt', choices=['raise', 'skip'], default='raise',
                        help="a media file that cannot be read: 'raise' stops (default), 'skip' "
                        'warns and leaves it out of the gallery')
    parser.add_argument('--batch-size', type=int, default=32, help='media per forward pass')
    parser.add_argument('--device', default='cpu', help="where the model runs ('cpu', 'cuda')")
    parser.add_argument('--out', type=Path, metavar='FILE.json', help='write the hits as JSON')
    add_config_arguments(parser, named_by=None)
    args = parser.parse_args(argv)
    if args.media is None and args.index is None:
        parser.error('give --media to search (and --index to save their index), or --index '
                     'to search a saved one')
    if not (args.query or args.queries) and (args.media is None or args.index is None):
        parser.error('give --query TEXT ... or --queries FILE (or --media and --index to only '
                     'save an index)')
    if (args.query or args.queries) and args.lang is None:
        parser.error("give the queries' language: --lang")
    if args.media is None and args.overwrite:
        parser.error('--overwrite lets --media replace a saved index: give --media')
    for flag, value in (('--k', args.k), ('--num-frames', args.num_frames),
                        ('--batch-size', args.batch_size)):
        if value < 1:
            parser.error(f'{flag} must be at least 1, got {value}')
    return args


def media_files(paths: list[str]) -> list[Path]:
    """The files of ``paths``: a file as given, a folder's images and videos below it (by
    suffix, any case: :data:`IMAGE_SUFFIXES`,
    :data:`~xmr.datasets.video_containers.VIDEO_SUFFIXES`) in path order.

    Raises:
        UserError: a path that does not exist, or a folder holding no media.
    """
    from xmr.datasets.video_containers import VIDEO_SUFFIXES

    suffixes = set(IMAGE_SUFFIXES) | set(VIDEO_SUFFIXES)
    files = []
    for given in map(Path, paths):
        if given.is_dir():
            found = sorted(path for path in given.rglob('*')
                           if path.suffix.lower() in suffixes and path.is_file())
            if not found:
                raise UserError(f'{given} (--media)', 'holds no image or video file',
                                'give a folder of media, or the files')
            files += found
        elif given.is_file():
            files.append(given)
        else:
            raise UserError(f'{given} (--media)', 'no such file or folder')
    return files


def read_queries(args: argparse.Namespace) -> list[str]:
    """``--query`` then the lines of ``--queries`` (blank lines left out).

    Raises:
        UserError: a query file that is missing, not UTF-8, or holds no query.
    """
    queries = list(args.query)
    if args.queries is None:
        return queries
    where = f'{args.queries} (--queries)'
    given_file(args.queries, '--queries', 'give a text file of queries, one a line')
    try:
        text = args.queries.read_text(encoding='utf-8')
    except UnicodeDecodeError as error:
        raise UserError(where, f'is not UTF-8 text (byte {error.start})',
                        'save it as UTF-8') from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise UserError(where, 'holds no query', 'write one query a line')
    return queries + lines


def check_index_path(args: argparse.Namespace) -> None:
    """The index to read exists; the one to write replaces nothing unless ``--overwrite``."""
    if args.index is None:
        return
    if args.media is None:
        given_file(args.index, '--index', 'give the index a search with --media --index saved')
    elif args.index.exists() and not args.overwrite:
        raise UserError(f'{args.index} (--index)', 'exists and is kept', 'pass --overwrite to '
                        'replace it, or give --index another path')


def hits_table(query: str, lang: str, hits: list[Any]) -> str:
    """A query's hits as a Markdown table (rank, score, media)."""
    rows = [f'| {rank} | {hit.score:.4f} | {hit.media_id} |' for rank, hit in enumerate(hits, 1)]
    return '\n'.join([f'query ({lang}): {query}', '', '| rank | score | media |',
                      '|---:|---:|---|', *rows, ''])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from mmengine.logging import print_log

    from xmr.apis import MediaIndex, init_retriever
    from xmr.fileio import atomic_write_text

    queries = read_queries(args)
    files = media_files(args.media) if args.media is not None else None
    check_index_path(args)
    given_file(args.checkpoint, 'CHECKPOINT', 'give a .pth written by tools/train.py')
    cfg = load_run_config(args.config, ablations=args.ablation, cfg_options=args.cfg_options)
    model = init_retriever(cfg, args.checkpoint, device=args.device)
    if files is None:
        index = MediaIndex.load(args.index, model=model)
    else:
        index = MediaIndex.from_media(model, files, media_ids=[str(path) for path in files],
                                      index=args.index_type, num_frames=args.num_frames,
                                      batch_size=args.batch_size, on_corrupt=args.on_corrupt,
                                      progress=True)
        if index.skipped:
            print_log(f'{len(index.skipped)} of the {len(files)} media cannot be read and are '
                      "left out (--on-corrupt skip; named above)", logger='current',
                      level=logging.WARNING)
        if args.index is not None:
            index.save(args.index)
            print_for_reader(f'index of {len(index)} media: {args.index}\n')
    if not queries:
        return
    hits = index.search(model, queries, lang=args.lang, k=args.k)
    print_for_reader('\n'.join(hits_table(query, args.lang, row)
                               for query, row in zip(queries, hits)))
    if args.out is not None:
        atomic_write_text(args.out, json.dumps(dict(
            lang=args.lang, k=args.k, index=None if args.index is None else str(args.index),
            results=[dict(query=query, hits=[dict(media=hit.media_id, score=hit.score)
                                             for hit in row])
                     for query, row in zip(queries, hits)],
            skipped=[dict(media=marker.media_path, reason=marker.reason)
                     for marker in index.skipped]), ensure_ascii=False, indent=1) + '\n')
        print_for_reader(f'hits: {args.out}')


if __name__ == '__main__':
    run_tool(main)
