"""Find images and videos for text queries in any language the model was trained on.

``python tools/search.py CONFIG CHECKPOINT --media PATH [PATH ...] --lang de --query TEXT ...``
encodes the media (a folder: every image and video below it, by suffix, in path order) as
``xmr.apis.MediaIndex.from_media`` does and prints, per query, the ``--k`` best media with their
scores (cosines, or the model's token scores, below). A file that cannot be read stops the
search, or with ``--on-corrupt skip`` is named and left out. ``--index FILE`` with ``--media``
saves the gallery's index there (``MediaIndex.save``), so that later searches, ``--index FILE``
without ``--media``, encode only their queries; the saved index refuses a model whose backbone
did not encode it (``MediaIndex.load``), and serves one trained on more languages since.
``--update`` adds to it the media it lacks, ``--prune`` drops those whose files are gone.
``--out FILE.json`` writes the hits (replacing only an earlier search's, with ``--overwrite``).
``--index-option NAME=N`` sets the faiss options of a new ``--index-type`` index, and those a
saved one searches with (``nprobe``, ``ef_search``) for this run.

A model that scores a media and a caption from their tokens (``model.token_score()``: CDDS's
``DualEncoderRetriever(retrieval_score='patch_word')``) ranks as its evaluation does: the index
keeps each media's retrieval tokens, and ``--candidates N`` (default 100) re-ranks each query's
``N`` best by pooled cosine by the token score (evaluation's ``scoring='tokens_rerank'``), or
``--candidates all`` scores the whole gallery (``scoring='tokens'``); any other model, or a
gallery without tokens, ranks by the pooled cosine, and ``--candidates`` is unused.
``--no-media-tokens`` builds a new index without them (``E`` floats a media, not ``P x D``
more), ranked by the pooled cosine; ``--update`` encodes as the saved index did.
``--token-dtype float16`` stores a new index's tokens in half the bytes (``float32`` by
default, as evaluation scores them; scored in float32 either way, each score within 2^-10 of
float32's); ``--update`` stores new media's tokens as the saved index does, and refuses another
``--token-dtype``; an interrupted build's saved parts keep the model's float32 tokens, so it
goes on under either. ``--out`` records the ranking as ``scoring`` (``'embedding'``,
``'tokens'`` or ``'tokens_rerank'`` with its shortlist, ``rerank_candidates``) and, ranked by
tokens, their ``token_dtype``.

While an index is built, the embeddings are saved every ``--save-every`` media in
``FILE.parts`` (``xmr.apis.encode_media_in_parts``): an interrupted run, run again as it was,
encodes only what it had not saved. The folder is removed once the index is. A run stopped by
Ctrl-C or by SIGTERM (a scheduler's stop) says where the media encoded so far are saved and
which of ``--index`` and ``--out`` it did not write (a file there is as it was), gives back
the index's lock, and exits as killed by SIGINT, or with 143 for SIGTERM.

Everything given is checked before the model is built: the media (missing paths, a folder
without media), an index that ``--media`` would write over (unless ``--overwrite`` or
``--update``; ``--overwrite`` replaces an index an earlier search saved, whole or damaged since,
never a checkpoint or another file), the index to read, the query file, the ``--device``,
whether ``--index`` and ``--out`` can be written, and what stands at ``--out``; the queries'
``--lang`` once the config is read (its custom imports may register a language), against the
languages its model trains, before the model is built.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from xmr.run_config import add_config_arguments, load_run_config
from xmr.utils.cli import (
    GatherAction,
    Terminated,
    UserError,
    argument_text,
    given_device,
    given_file,
    given_json_output,
    given_output,
    print_for_reader,
    run_tool,
)

#: The keys that every JSON ``--out`` has written holds, by which an earlier search's hits are
#: told apart from any other file standing there (``scoring`` came later: files written before
#: it lack it).
HITS_KEYS = {'lang', 'k', 'index', 'results', 'skipped'}

#: The media re-ranked by the token score per query when ``--candidates`` is not given.
CANDIDATES = 100

#: The image files a folder given to ``--media`` is searched for (a file given by its path
#: is read whatever its suffix, as Pillow can).
IMAGE_SUFFIXES = ('.bmp', '.gif', '.jpeg', '.jpg', '.png', '.tif', '.tiff', '.webp')

#: What ``--token-dtype`` takes: the names of ``xmr.apis.search.TOKEN_DTYPES``.
TOKEN_DTYPES = ('float32', 'float16')

#: The options of the media's encoding, read only with ``--media``, and their defaults.
MEDIA_ENCODING = {'batch_size': 32, 'num_workers': 0, 'on_corrupt': 'raise', 'save_every': 256}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Search images and videos with text queries '
                                     'in any trained language (docs/evaluation.md)')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint written by training')
    parser.add_argument('--media', nargs='+', action=GatherAction, metavar='PATH',
                        help='image and video files, or folders searched for them (recursively)')
    parser.add_argument('--index', type=Path, metavar='FILE',
                        help='with --media: save the gallery index here; without: search the '
                        'index saved here')
    parser.add_argument('--overwrite', action='store_true',
                        help='let --media replace an index saved at --index (one this tool '
                        'wrote, whole or damaged: never a checkpoint or another file), and '
                        '--out the hits of an earlier search (with --update: those alone)')
    parser.add_argument('--update', action='store_true',
                        help='with --media and --index: add to the saved index the media it '
                        'lacks (by path), encoded as its own were; build it if there is none')
    parser.add_argument('--prune', action='store_true',
                        help='drop from the saved index the media whose files are gone (with '
                        '--media: --update too)')
    parser.add_argument('--save-every', type=int, metavar='N',
                        help='while an --index is built: save the embeddings every N media in '
                        'INDEX.parts, where a run interrupted goes on (Ctrl-C, or SIGTERM: exit '
                        '143, the index lock given back; default: 256)')
    parser.add_argument('--query', nargs='+', action=GatherAction,
                        default=[], metavar='TEXT', help='query texts')
    parser.add_argument('--queries', type=Path, metavar='FILE',
                        help='a UTF-8 text file of queries, one a line')
    parser.add_argument('--lang', help="the queries' language (one the model was trained on)")
    parser.add_argument('--k', type=int, default=10, help='hits per query (default: 10)')
    parser.add_argument('--candidates', type=candidate_count, metavar='N|all',
                        help='a model that scores by tokens (CDDS: retrieval_score='
                        "'patch_word'), searching an index that keeps them: the token score "
                        "re-ranks each query's N best by pooled cosine (default: "
                        f"{CANDIDATES}; at least --k), or with 'all' the whole gallery (exact, "
                        'slower); unused by any other model or index')
    parser.add_argument('--index-type', choices=['flat', 'ivf', 'hnsw'],
                        help="faiss index of a new gallery: 'flat' (exact, default), 'ivf' or "
                        "'hnsw' (approximate, for large galleries)")
    parser.add_argument('--index-option', nargs='+', action=GatherAction, type=index_option,
                        default=[], metavar='NAME=N',
                        help="faiss options (docs/evaluation.md): any index's chunk_size "
                        "(queries per faiss call); a new 'ivf' index's nlist, nprobe, "
                        "train_size, seed; a new 'hnsw' index's hnsw_m, ef_construction, "
                        'ef_search; a saved index takes chunk_size, nprobe or ef_search (kept '
                        'if this run saves it)')
    parser.add_argument('--no-media-tokens', action='store_true', default=None,
                        help="build the index without the media's retrieval tokens (a model "
                        'that scores by tokens keeps P x D floats a media: for a gallery too '
                        'large for them); it is ranked by the pooled cosine (--update: as the '
                        'saved index was built)')
    parser.add_argument('--token-dtype', choices=TOKEN_DTYPES,
                        help="what a new index stores its media's retrieval tokens in: float32 "
                        '(default, as evaluation scores them) or float16 (half the bytes, each '
                        'token score within 2^-10 of float32\'s); --update: the index\'s own, '
                        'another refused')
    parser.add_argument('--num-frames', type=int,
                        help="frames per video (default: 12; --update: the index's own)")
    parser.add_argument('--on-corrupt', choices=['raise', 'skip'],
                        help="a media file that cannot be read: 'raise' stops (default), 'skip' "
                        'warns and leaves it out of the gallery')
    parser.add_argument('--batch-size', type=int,
                        help='media per forward pass (default: 32)')
    parser.add_argument('--num-workers', type=int, metavar='N',
                        help='processes decoding the media while the model encodes (default: '
                        '0, decoded in turn; with --device cuda decoding is what takes the time)')
    parser.add_argument('--device', default='cpu',
                        help="where the model runs ('cpu', 'cuda', 'cuda:N'; default: cpu)")
    parser.add_argument('--out', type=Path, metavar='FILE.json', help='write the hits as JSON')
    add_config_arguments(parser, named_by=None)
    args = parser.parse_args(argv)
    if args.media is None and args.index is None:
        parser.error('give --media to search (and --index to save their index), or --index '
                     'to search a saved one')
    if not (args.query or args.queries or args.prune) and (args.media is None
                                                           or args.index is None):
        parser.error('give --query TEXT ... or --queries FILE (or --media and --index to only '
                     'save an index)')
    if (args.query or args.queries) and args.lang is None:
        parser.error("give the queries' language: --lang")
    if args.overwrite and args.media is None and args.out is None:
        parser.error('--overwrite lets --media replace a saved index, or --out the hits of an '
                     'earlier search: give --media or --out')
    if args.update and (args.media is None or args.index is None):
        parser.error('--update adds --media to the index saved at --index: give both')
    if args.prune and (args.index is None or args.media is not None and not args.update):
        parser.error('--prune drops media from the index saved at --index: give --index, and '
                     'with --media, --update')
    if args.out is not None and not (args.query or args.queries):
        parser.error('--out writes the hits of queries: give --query TEXT ... or --queries FILE')
    if args.candidates is not None and not (args.query or args.queries):
        parser.error('--candidates: read only as the hits of queries are ranked: give --query '
                     'TEXT ... or --queries FILE')
    # Read as --media are encoded alone: a saved index searches as it was built, and the
    # queries are encoded as texts. Given without --media, each was dropped without a word.
    unread = [f'--{name.replace("_", "-")}' for name in ('index_type', 'num_frames',
                                                         'no_media_tokens', 'token_dtype',
                                                         *MEDIA_ENCODING)
              if getattr(args, name) is not None]
    if args.media is None and unread:
        parser.error(f'{", ".join(unread)}: read only as --media are encoded into an index (a '
                     'saved index searches as it was built; the queries are encoded as texts): '
                     'give --media')
    if args.no_media_tokens and args.token_dtype is not None:
        parser.error("--token-dtype: the dtype of the media's tokens, which --no-media-tokens "
                     'leaves out: give one or the other')
    if args.save_every is not None and args.index is None:
        parser.error("--save-every saves an --index's embeddings as they are encoded: give "
                     '--index')
    if args.update and args.overwrite and args.out is None:
        parser.error('give --update (add the new media to the saved index) or --overwrite '
                     '(build it anew), not both')
    for flag, value in (('--k', args.k), ('--num-frames', args.num_frames),
                        ('--batch-size', args.batch_size), ('--save-every', args.save_every)):
        if value is not None and value < 1:
            parser.error(f'{flag} must be at least 1, got {value}')
    if args.num_workers is not None and args.num_workers < 0:
        parser.error(f'--num-workers must be at least 0, got {args.num_workers}')
    for name, default in MEDIA_ENCODING.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    args.index_option = dict(args.index_option)
    return args


def candidate_count(text: str) -> int | str:
    """One ``--candidates``: a count of media, or ``'all'``."""
    if text == 'all':
        return text
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is no count of media: give a whole number of "
                                         "at least 1, or 'all'")
    return count


def index_option(text: str) -> tuple[str, int]:
    """One ``--index-option``: ``NAME=N``, every faiss option being a count."""
    name, _, value = text.partition('=')
    try:
        return name, int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is no NAME=N (nlist=1024)') from None


def media_files(paths: list[str]) -> list[Path]:
    """The files of ``paths``, absolute: a file as given, a folder's images and videos below it
    (by suffix, any case: :data:`IMAGE_SUFFIXES`,
    :data:`~xmr.datasets.video_containers.VIDEO_SUFFIXES`) in path order; a file met again (a
    folder and a file in it, folders that overlap, a link to a folder given beside it) is the
    one media, named as first met. Absolute, since they name the media in a saved index:
    ``--update`` run from another folder knows them again.

    Raises:
        UserError: a path that does not exist, or a folder holding no media.
    """
    from xmr.datasets.video_containers import VIDEO_SUFFIXES

    suffixes = set(IMAGE_SUFFIXES) | set(VIDEO_SUFFIXES)
    files = []
    for given in paths:
        # abspath, not resolve: a link to a folder of photos keeps the name it was given by.
        path = Path(os.path.abspath(given))
        if path.is_dir():
            found = sorted(file for file in files_below(path)
                           if file.suffix.lower() in suffixes and file.is_file())
            if not found:
                raise UserError(f'{given} (--media)', 'holds no image or video file',
                                'give a folder of media, or the files')
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise UserError(f'{given} (--media)', 'no such file or folder')
    first_names: dict[str, Path] = {}
    for file, real in zip(files, real_paths(files)):
        first_names.setdefault(real, file)
    return list(first_names.values())


def real_paths(paths: Iterable[str | os.PathLike]) -> list[str]:
    """``os.path.realpath`` of each path, each folder resolved once: a gallery's files share
    few folders, and ``realpath`` of each file took ~8 ``lstat`` calls (2.5 min for 1M files
    at every ``--update``), where a file that is no link takes one here."""
    folders: dict[str, str] = {}
    resolved = []
    for path in map(os.fspath, paths):
        head, name = os.path.split(path)
        if head not in folders:
            folders[head] = os.path.realpath(head)
        joined = os.path.join(folders[head], name)
        resolved.append(os.path.realpath(joined) if os.path.islink(joined) else joined)
    return resolved


def files_below(folder: Path) -> Iterator[Path]:
    """Every file below ``folder``, through linked folders too (``Path.rglob`` passes them
    by), each folder once (a link back up would loop)."""
    visited = set()
    for root, folders, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in visited:
            folders.clear()
            continue
        visited.add(real)
        yield from (Path(root) / name for name in names)


def read_queries(args: argparse.Namespace) -> list[str]:
    """``--query`` then the lines of ``--queries`` (blank lines left out): lines end at
    ``\n`` only, as xmr's caption files do (``str.splitlines`` also splits at U+2028, U+0085
    and form feeds, which text from the web and MT systems holds inside a query), and a byte
    order mark (Notepad's) is no part of the first query.

    Raises:
        UserError: a ``--query`` that is blank or not UTF-8, a query file that is missing,
            not UTF-8, or holds no query.
    """
    from xmr.apis.inference import check_texts

    queries = []
    for query in args.query:
        try:
            queries.append(argument_text(query, 'strict'))
            check_texts(queries[-1:])
        except ValueError:
            raise UserError(f'--query {query!r}', 'is blank or not UTF-8 text',
                            'give the words to search for, in UTF-8') from None
    if args.queries is None:
        return queries
    where = f'{args.queries} (--queries)'
    given_file(args.queries, '--queries', 'give a text file of queries, one a line',
               stream_ok=True)
    try:
        text = args.queries.read_text(encoding='utf-8-sig')
    except UnicodeDecodeError as error:
        raise UserError(where, f'is not UTF-8 text (byte {error.start})',
                        'save it as UTF-8') from None
    lines = [line.strip() for line in text.split('\n') if line.strip()]
    if not lines:
        raise UserError(where, 'holds no query', 'write one query a line')
    return queries + lines


def check_index_path(args: argparse.Namespace) -> None:
    """The index to read exists; the one to write replaces nothing unless ``--overwrite``, and
    then an index alone (:func:`~xmr.apis.search.written_as_media_index`), and can be written,
    as can ``--out`` (:func:`check_out_path`): checked before any media is encoded."""
    from xmr.apis.search import written_as_media_index

    if args.out is not None:
        check_out_path(args)
    if args.index is None:
        return
    if args.media is None:
        given_file(args.index, '--index', 'give the index a search with --media --index saved')
        return
    given_output(args.index, '--index', 'give --index the path of the index file to write')
    refuse_input(args.index, '--index', args)
    if args.index.exists() and not (args.overwrite or args.update):
        raise UserError(f'{args.index} (--index)', 'exists and is kept', 'pass --update to add '
                        'the media it lacks, --overwrite to replace it, or give --index another '
                        'path')
    # --update loads the index, and refuses a file that is none; --overwrite replaces it.
    if args.index.exists() and not args.update and not written_as_media_index(args.index):
        raise UserError(f'{args.index} (--index)', 'exists and is no media index (a checkpoint, '
                        'another file: its first bytes name no xmr-media-index format); it is '
                        'left as it is, --overwrite replacing an earlier index alone (one cut '
                        'short or damaged too)', 'give --index another path')


def check_out_path(args: argparse.Namespace) -> None:
    """``--out`` is a ``.json`` path that is no input of this search, and replaces only an
    earlier search's hits, with ``--overwrite`` (:func:`~xmr.utils.cli.given_json_output`).

    Raises:
        UserError: naming ``--out``, what stands there, and the fix.
    """
    where = f'{args.out} (--out)'
    if args.out.suffix != '.json' and not args.out.is_dir():
        raise UserError(where, 'the hits are written as JSON', 'give --out a path ending in .json')
    refuse_input(args.out, '--out', args)
    given_json_output(args.out, '--out', "an earlier search's hits", HITS_KEYS, args.overwrite)


def refuse_input(path: Path, key: str, args: argparse.Namespace) -> None:
    """Refuse an output of this search (``key``) that is one of its inputs, however named: the
    checkpoint, the config, the query file, or for ``--out`` the index (with ``--overwrite``
    the checkpoint was replaced by the index built from it).

    Raises:
        UserError: naming both.
    """
    from xmr.fileio import input_written_over

    inputs = {'--index': args.index, '--queries': args.queries, 'the config': args.config,
              'the checkpoint': args.checkpoint}
    inputs.pop(key, None)
    given = input_written_over(path, inputs.values())
    if given is not None:
        name = next(name for name, input_path in inputs.items() if input_path is given)
        raise UserError(f'{path} ({key})', f'is also {name} ({given}) of this search',
                        f'give {key} another path')


def parts_folder(index: Path) -> Path:
    """Where the embeddings of the index being built are saved as they are encoded."""
    return index.with_name(index.name + '.parts')


def hits_table(query: str, lang: str, hits: list[Any]) -> str:
    """A query's hits as a Markdown table (rank, score, media), as the leaderboard's are
    written (a ``|`` in a file name escaped)."""
    from xmr.evaluation.leaderboard import format_table

    rows = [(rank, f'{hit.score:.4f}', hit.media_id) for rank, hit in enumerate(hits, 1)]
    return '\n'.join([f'query ({lang}): {query}', '',
                      format_table(('rank', 'score', 'media'), rows), ''])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logs_to_stderr()  # stdout holds the hits: `xmr search ... > hits.md`
    given_device(args.device)
    queries = read_queries(args)
    files = media_files(args.media) if args.media is not None else None
    check_index_path(args)
    writes_index = args.index is not None and (files is not None or args.prune)
    written: list[Path] = []
    with index_lock(args.index if writes_index else None):
        try:
            search(args, queries, files, written)
        except (KeyboardInterrupt, Terminated):  # SIGTERM: run_tool's sigterm_interrupts
            say_not_written([(args.index if writes_index else None, '--index'),
                             (args.out, '--out')], written)
            raise


def logs_to_stderr() -> None:
    """Send the log's terminal lines (MMEngine's logger writes them to stdout) to stderr, where
    the encoding's progress and the skipped media's warnings go."""
    from mmengine.logging import MMLogger

    for handler in MMLogger.get_current_instance().handlers:
        if type(handler) is logging.StreamHandler:  # not its log file's
            # Not setStream, which flushes the stream it replaces (each line was flushed as it
            # was logged): one closed since (a notebook's, a test's capture) would raise.
            handler.stream = sys.stderr


def say_not_written(outputs: list[tuple[Path | None, str]], written: list[Path]) -> None:
    """Log, as a run stops (Ctrl-C, SIGTERM), each of its outputs (path, flag; ``None``: not
    asked for) it had not written: a file standing there is as it was."""
    from mmengine.logging import print_log

    for path, flag in outputs:
        if path is not None and path not in written:
            print_log(f'stopped: {path} ({flag}) is not written'
                      + ('; the file there is as it was' if path.exists() else ''),
                      logger='current', level=logging.WARNING)


@contextmanager
def index_lock(index: Path | None) -> Iterator[None]:
    """Hold ``.<index name>.lock`` beside ``index`` while this run reads and writes it (none
    for ``None``): two runs adding media to one index (``--update``) each saved the index they
    had loaded, and the first one's additions were lost.

    Raises:
        UserError: another running tools/search.py holds it, naming it and the lock file.
    """
    if index is None:
        yield
        return
    from mmengine.logging import print_log

    from xmr.engine.work_dir import release_lock, take_lock

    path = str(index.with_name(f'.{index.name}.lock'))
    index.parent.mkdir(parents=True, exist_ok=True)
    taken_over = take_lock(path, str(index), lambda holder, fix: UserError(
        f'{index} (--index)', f'another tools/search.py ({holder}) is writing this index (lock '
        f'file {path})', f'wait for it, or give --index another path{fix}'))
    if taken_over is not None:
        print_log(taken_over, logger='current', level=logging.WARNING)
    try:
        yield
    finally:
        release_lock(path)


def search(args: argparse.Namespace, queries: list[str], files: list[Path] | None,
           written: list[Path] | None = None) -> None:
    """Load, prune, build or update the index as the options say, then search it; each file
    saved is added to ``written``."""
    written = [] if written is None else written
    from xmr.apis import MediaIndex, check_languages, init_retriever
    from xmr.apis.inference import check_config_languages
    from xmr.fileio import atomic_write_text

    saved = (MediaIndex.load(args.index) if args.index is not None and args.index.exists()
             and (files is None or args.update) else None)
    if saved is not None and (args.update or args.prune):
        check_named_by_paths(args.index, saved)
    if saved is not None and files is not None:
        check_same_encoding(args, saved)
    check_index_options(args, saved)
    if saved is not None and args.prune and prune(args.index, saved, save=files is None):
        written.append(args.index)
    if files is None and not queries:
        return  # pruned: no model needed
    given_file(args.checkpoint, 'CHECKPOINT', 'give a .pth written by tools/train.py')
    cfg = load_run_config(args.config, ablations=args.ablation, cfg_options=args.cfg_options)
    if queries:
        # From the config, before the backbone's weights load; the built model checks again.
        check_config_languages(cfg, args.lang, where='--lang')
    model = init_retriever(cfg, args.checkpoint, device=args.device)
    if queries:
        check_languages(model, args.lang, where='--lang')
    if saved is not None:
        saved.check_encoder(model, where=str(args.index))
    index = saved if files is None else build_index(args, model, files, saved)
    if files is not None and args.index is not None:
        written.append(args.index)
    if not queries:
        return
    # None: the whole gallery, as MediaIndex.search takes it.
    candidates = None if args.candidates == 'all' else args.candidates or CANDIDATES
    if model.token_score() is None:
        from mmengine.logging import print_log

        for flag, value in (('--candidates', args.candidates),
                            ('--token-dtype', args.token_dtype)):
            if value is not None:
                print_log(f'{flag} {value}: unused: {type(model).__name__} ranks by the cosine '
                          'of the embeddings (its token_score() is None)', logger='current',
                          level=logging.WARNING)
    hits = index.search(model, queries, lang=args.lang, k=args.k, candidates=candidates)
    print_for_reader('\n'.join(hits_table(query, args.lang, row)
                               for query, row in zip(queries, hits)))
    if args.out is not None:
        atomic_write_text(args.out, json_text(dict(
            lang=args.lang, k=args.k, **ranking(model, index, args.k, candidates),
            index=None if args.index is None else str(args.index),
            results=[dict(query=query, hits=[dict(media=hit.media_id, score=hit.score)
                                             for hit in row])
                     for query, row in zip(queries, hits)],
            skipped=[dict(media=marker.media_path, reason=marker.reason)
                     for marker in index.skipped])))
        written.append(args.out)
        print_for_reader(f'hits: {args.out}')


def ranking(model: Any, index: Any, k: int, candidates: int | None) -> dict[str, Any]:
    """How ``index.search`` ranked the hits, in the terms of evaluation's ``RetrievalMetric``:
    ``scoring`` (``'embedding'``: the pooled cosine; ``'tokens'``: the model's token score of
    the whole gallery; ``'tokens_rerank'``: of each query's shortlist by pooled cosine, whose
    length is ``rerank_candidates``), and the ``token_dtype`` the media's tokens are stored in
    (``'float32'`` or ``'float16'``) where they rank."""
    if not index.ranks_by_tokens(model):
        return dict(scoring='embedding')
    stored = dict(token_dtype=dtype_name(index.token_dtype))
    if candidates is None:
        return dict(scoring='tokens', **stored)
    return dict(scoring='tokens_rerank', rerank_candidates=max(k, candidates), **stored)


def dtype_name(dtype: Any) -> str:
    """A torch dtype as ``--token-dtype`` names it (``torch.float16`` -> ``'float16'``)."""
    return str(dtype).removeprefix('torch.')


def json_text(value: Any) -> str:
    """``value`` as UTF-8 JSON text, the queries and paths as written. A file name that is no
    UTF-8 reaches Python with lone surrogates, which UTF-8 cannot write: they are written as
    JSON's escapes (``\\udce9``), which ``json.load`` reads back as the name
    (``os.fsencode`` gives its bytes)."""
    text = json.dumps(value, ensure_ascii=False, indent=1) + '\n'
    # json.dumps escaped every backslash of the text: the only ones added here are the escapes.
    return text.encode('utf-8', 'backslashreplace').decode('utf-8')


def build_index(args: argparse.Namespace, model: Any, files: list[Path], saved: Any) -> Any:
    """The index of ``files`` (``--update``: the ``saved`` index, with those it lacks added),
    saved at ``--index`` when given, its embeddings saved as they are encoded until it is."""
    import torch
    from mmengine.logging import print_log

    from xmr.apis import MediaIndex
    from xmr.apis.encoding_parts import EncodingParts

    parts = None if args.index is None else parts_folder(args.index)
    encoding = dict(batch_size=args.batch_size, on_corrupt=args.on_corrupt, progress=True,
                    parts=parts, part_size=args.save_every, num_workers=args.num_workers)
    try:
        if saved is not None:
            index = saved
            known = set(real_paths(index.media_ids))
            new = [path for path, real in zip(files, real_paths(files)) if real not in known]
            print_for_reader(f'{args.index}: {len(known)} media indexed, {len(new)} of the '
                             f'{len(files)} given to add\n')
            if new:
                index.add_media(model, new, media_ids=[str(path) for path in new], **encoding)
        else:
            index = MediaIndex.from_media(model, files, media_ids=[str(path) for path in files],
                                          index=args.index_type or 'flat',
                                          num_frames=args.num_frames or 12,
                                          tokens=False if args.no_media_tokens else None,
                                          token_dtype=getattr(torch, args.token_dtype
                                                              or TOKEN_DTYPES[0]),
                                          **encoding, **args.index_option)
    except BaseException as error:
        # A refusal (parts encoded otherwise, ids given twice) is not gone past by running the
        # same command again.
        if (parts is not None and not isinstance(error, ValueError)
                and any(parts.glob('part-*.pt'))):
            sys.stderr.write('\n')  # ends the progress bar's line
            print_log(f'the media encoded so far are saved in {parts}: run the same command '
                      'again to go on from there', logger='current', level=logging.WARNING)
        raise
    if index.skipped:
        print_log(f'{len(index.skipped)} of the media given cannot be read and are left out '
                  '(--on-corrupt skip; named above)', logger='current', level=logging.WARNING)
    if args.index is not None:
        index.save(args.index)
        EncodingParts(parts, index.encoded_by).remove()
        print_for_reader(f'index of {len(index)} media: {args.index}\n')
    return index


def prune(path: Path, index: Any, save: bool) -> bool:
    """Drop from ``index`` the media whose files are gone, and ``save`` it at ``path``.

    Returns:
        Whether it was saved (some media were dropped).

    Raises:
        UserError: when none of its files is there (a disk not mounted, rather than a gallery
            deleted whole).
    """
    gone = [media_id for media_id in index.media_ids if not Path(media_id).exists()]
    if len(gone) == len(index):
        raise UserError(f'{path} (--prune)', f'none of its {len(index)} media files is there, '
                        f'the first {gone[0]}', 'check that their disk is mounted; pass '
                        '--overwrite with --media to build a new index')
    if gone:
        index.remove(gone)
        if save:
            index.save(path)
    print_for_reader(f'{path}: {len(gone)} media whose files are gone dropped, '
                     f'{len(index)} kept\n')
    return bool(gone) and save


def check_index_options(args: argparse.Namespace, index: Any) -> None:
    """``--index-option`` as the index takes it: all its type's options for a new one
    (``--index-type``), and for the saved ``index``, those it searches with, set on it."""
    from xmr.evaluation.search import check_search_options

    where = '--index-option' if index is None else f'{args.index} (--index-option)'
    try:
        if index is None:
            check_search_options(dict(index=args.index_type or 'flat', **args.index_option))
        else:
            index.searcher.tune(**args.index_option)
    except ValueError as error:
        raise UserError(where, str(error).rstrip('.'), 'see docs/evaluation.md for the options '
                        'of each index type') from None


def check_named_by_paths(path: Path, index: Any) -> None:
    """``--update`` and ``--prune`` know the media by their absolute paths: an index whose
    ids are other names would have each media added twice, or pruned in error."""
    other = next((media_id for media_id in index.media_ids if not os.path.isabs(media_id)), None)
    if other is not None:
        raise UserError(f'{path} (--update, --prune)', f"names its media by ids that are no "
                        f"absolute paths, such as '{other}' (MediaIndex.from_media's own ids, "
                        'or a tools/search.py before absolute paths)', 'build it anew: --media '
                        '... --overwrite')


def check_same_encoding(args: argparse.Namespace, index: Any) -> None:
    """``--update`` encodes as the index's media were: an ``--index-type``, ``--num-frames``
    or ``--token-dtype`` given must be the saved index's (the saved dtype wins: a gallery of
    two dtypes would rank its media by scores of two precisions), and ``--no-media-tokens``
    that of an index without tokens."""
    if index.encoded_by is None:
        raise UserError(f'{args.index} (--update)', 'holds embeddings given to MediaIndex, not '
                        'encoded by it: nothing says how to encode new media alike',
                        'pass --overwrite to build it from the media')
    saved = dict(index_type=index.searcher.index_type,
                 num_frames=index.encoded_by['num_frames'])
    for flag, name in (('--index-type', 'index_type'), ('--num-frames', 'num_frames')):
        given = getattr(args, name)
        if given is not None and given != saved[name]:
            raise UserError(f'{args.index} (--update)', f'was built with {flag} {saved[name]}, '
                            f'not {given}', f'leave out {flag}, or pass --overwrite to build '
                            'it anew')
    if args.no_media_tokens and index.tokens is not None:
        raise UserError(f'{args.index} (--update)', "keeps its media's tokens (built without "
                        '--no-media-tokens)', 'leave out --no-media-tokens, or pass --overwrite '
                        'to build it anew without them')
    if args.token_dtype is None:
        return
    if index.tokens is None:
        raise UserError(f'{args.index} (--update)', 'keeps no media tokens, to store in '
                        f'{args.token_dtype}', 'leave out --token-dtype')
    if args.token_dtype != dtype_name(index.token_dtype):
        raise UserError(f'{args.index} (--update)', 'stores its media tokens in '
                        f'{dtype_name(index.token_dtype)}, not {args.token_dtype}', 'leave out '
                        "--token-dtype (new media are stored as the index's), or pass "
                        '--overwrite to build it anew')


if __name__ == '__main__':
    run_tool(main)
