"""Where DASD's disentangled features put captions: t-SNE map coloured by k-means cluster.

The paper's Figures 3 and 5: the semantic-agnostic features ``f^sa`` of captions in one language
should group captions by how they are written (sentence pattern, style), the semantic-related
``f^sr`` by what they say. The tool embeds ``N`` captions of one language with a trained DASD
model, takes ``f^sa`` or ``f^sr`` from its semantics disentangling module, clusters them with
k-means (in feature space), maps them to 2-D with t-SNE, and writes

* ``<out>/<lang>_f<feature>.png``: the t-SNE map, one colour per cluster;
* ``<out>/<lang>_f<feature>_clusters.txt``: per cluster, its size and the captions nearest
  its centre.

A map and listing of an earlier run there (another checkpoint's, of the same language and
feature) are kept unless ``--overwrite`` is given, and any other file there always.

Captions come from a text file (one per line) or from the config's val/test dataset::

    python tools/visualize_features.py configs/demo/dasd_tiny-clip_synthetic.py \\
        --checkpoint work_dirs/dasd_tiny-clip_synthetic/best_mAR_iter_3300.pth \\
        --lang de --feature sa --num-captions 500 --clusters 5 --out-dir work_dirs/features
"""
from __future__ import annotations

import argparse
import io
import re
from collections.abc import Mapping, Sequence
from itertools import islice
from pathlib import Path

import numpy as np

from xmr.run_config import add_config_arguments, load_run_config
from xmr.utils.cli import (
    UserError,
    given_device,
    given_file,
    given_folder,
    given_output,
    run_tool,
)

FEATURES = ('sa', 'sr')
#: How each output begins: a PNG's signature, and the listing's title (:func:`main`). Only
#: files beginning so are an earlier run's, which ``--overwrite`` replaces.
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
LISTING_TITLE = re.compile(r'f\^s[ar] of \d+ \S+ captions, k-means k=\d+ ')


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config', help='config of a model with a SemanticsDisentangler')
    parser.add_argument('--checkpoint', help='trained weights (.pth); default: the built model')
    parser.add_argument('--lang', required=True, help='language of the captions (a target '
                        'language of the model)')
    parser.add_argument('--feature', choices=FEATURES, default='sa',
                        help='f^sa (semantic-agnostic, default) or f^sr (semantic-related)')
    source = parser.add_mutually_exclusive_group()
    source.add_argument('--captions', help='text file (optionally .gz), one caption a line')
    source.add_argument('--split', choices=('val', 'test'), default='test',
                        help="take the captions of --lang from the config's val/test dataset "
                        '(default: test)')
    parser.add_argument('--num-captions', type=int, default=500,
                        help='captions embedded (N; default: 500)')
    parser.add_argument('--clusters', type=int, default=5, help='k of k-means (default: 5)')
    parser.add_argument('--examples', type=int, default=8,
                        help='captions listed per cluster, nearest to its centre first '
                        '(default: 8)')
    parser.add_argument('--perplexity', type=float, default=30.0,
                        help='t-SNE perplexity (default: 30; at most (N - 1) / 3, as t-SNE '
                        'needs, for few captions)')
    parser.add_argument('--seed', type=int, default=0, help='seed of t-SNE and k-means')
    parser.add_argument('--batch-size', type=int, default=256,
                        help='captions per forward pass (default: 256)')
    parser.add_argument('--device', default='cpu', help="'cpu', 'cuda' or 'cuda:N' (default: cpu)")
    parser.add_argument('--out-dir', default='work_dirs/features',
                        help='where the map (.png) and its clusters (.txt) go (default: '
                        'work_dirs/features)')
    parser.add_argument('--overwrite', action='store_true',
                        help="replace the map and clusters of an earlier run in --out-dir (of "
                        "the same --lang and --feature); without it they are kept and the run "
                        'refused. Other files are never replaced')
    add_config_arguments(parser, named_by=None)
    args = parser.parse_args(argv)
    for name in ('num_captions', 'clusters', 'examples', 'batch_size'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be positive')
    if args.clusters > args.num_captions:
        parser.error(f'--clusters {args.clusters} exceeds --num-captions {args.num_captions}')
    # A map is of two points at least, and t-SNE's perplexity is positive.
    if args.num_captions < 2:
        parser.error(f'--num-captions must be at least 2 (a map of points), got '
                     f'{args.num_captions}')
    if not args.perplexity > 0:
        parser.error(f'--perplexity must be positive, got {args.perplexity}')
    from xmr.datasets.languages import LanguageCodeError, normalize_language

    try:
        # The model's languages are canonical codes: 'DE' or 'deu' would name none of them.
        args.lang = normalize_language(args.lang, '--lang')
    except LanguageCodeError as error:
        parser.error(str(error))
    return args


# ----------------------------------------------------------------------------- captions
def read_caption_file(path: str | Path, limit: int) -> list[str]:
    """The first ``limit`` non-empty lines of a UTF-8 text file (``.gz`` read transparently).

    Raises:
        UserError: ``<path> (--captions)``: missing, a folder or unreadable.
        ConversionError: (a ``ValueError``) a file that is not UTF-8, named with the line.
    """
    from xmr.datasets.converters.raw_files import iter_lines

    given_file(path, '--captions', 'give a text file, one caption a line')
    # Read only as far as the captions taken: the file may be a training set's millions.
    captions = (line.strip() for line in iter_lines(path, allow_empty_lines=True))
    return list(islice((caption for caption in captions if caption), limit))


def check_caption_count(captions: Sequence[str], args: argparse.Namespace) -> None:
    """Refuse fewer captions than ``--clusters`` or the 2 a map needs.

    Raises:
        ValueError: naming the count found and the flag.
    """
    if len(captions) < max(2, args.clusters):
        raise ValueError(f'{len(captions)} {args.lang} captions found, fewer than --clusters '
                         f'{args.clusters} or the 2 a map needs')


def config_captions(cfg, args: argparse.Namespace) -> list[str]:
    """The first ``--num-captions`` captions in ``--lang`` of the config's ``--split`` dataset.

    Raises:
        ValueError: the config has no single ``<split>_dataloader`` (none, or a list of them),
            or its dataset does not expose its captions.
    """
    from xmr.datasets.dataset_captions import NoCaptions, dataset_captions, split_dataset

    try:
        return dataset_captions(split_dataset(cfg, args.split, args.config), args.lang,
                                args.num_captions)
    except NoCaptions as error:
        raise ValueError(f'{error}; pass --captions FILE') from error


# ----------------------------------------------------------------------------- features
def language_disentangler(model, lang: str):
    """The :class:`SemanticsDisentangler` that reads ``model``'s captions in ``lang``: its own
    with ``per_language=True`` (each paper config's), else the one all languages share.

    Raises:
        ValueError: ``lang`` is not one of the model's target languages, the model has no
            semantics disentangling module, or it does not compute the asked feature (an
            ablated stream).
    """
    from xmr.models.disentanglers import PerLanguageDisentangler, SemanticsDisentangler

    if lang not in model.languages:
        raise ValueError(f"'{lang}' is not a target language of the model "
                         f'({model.languages}); f^sa / f^sr are computed on target captions')
    disentangler = getattr(model, 'disentangler', None)
    if isinstance(disentangler, PerLanguageDisentangler):
        disentangler = disentangler.per_language[lang]
    if not isinstance(disentangler, SemanticsDisentangler):
        raise ValueError(f'the model has no SemanticsDisentangler (got '
                         f'{type(disentangler).__name__}); f^sa / f^sr exist only in DASD models')
    return disentangler


def check_model(model, lang: str, feature: str) -> None:
    """Refuse a model that cannot give ``feature`` for captions in ``lang``
    (:func:`language_disentangler`, whose errors it raises, and:)

    Raises:
        ValueError: the disentangler does not compute ``feature`` (an ablated stream).
    """
    disentangler = language_disentangler(model, lang)
    if feature not in disentangler.features:
        raise ValueError(f"this model's disentangler computes only {list(disentangler.features)},"
                         f" not '{feature}'")


def extract_features(model, captions: Sequence[str], lang: str, feature: str,
                     batch_size: int = 256) -> np.ndarray:
    """``[N, dim]`` ``f^sa`` or ``f^sr`` of target-language captions (see :func:`check_model`)."""
    import torch  # here, not at the top, so that --help answers without loading it

    check_model(model, lang, feature)
    disentangler = language_disentangler(model, lang)
    device = next(model.parameters()).device
    chunks = []
    for start in range(0, len(captions), batch_size):
        chunk = list(captions[start:start + batch_size])
        tokens = model.language_branch.tokenize(chunk, [lang] * len(chunk))
        tokens = model.language_branch.read({k: v.to(device) for k, v in tokens.items()})
        with torch.no_grad():
            found = disentangler.extract(model.language_branch.embed(tokens), tokens)
        chunks.append(found[feature].float().cpu())
    return torch.cat(chunks).numpy()


def cluster(features: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """k-means in feature space: ``(labels [N], distance of each caption to its centre [N])``."""
    from sklearn.cluster import KMeans

    kmeans = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(features)
    centres = kmeans.cluster_centers_[kmeans.labels_]
    return kmeans.labels_, np.linalg.norm(features - centres, axis=1)


def tsne(features: np.ndarray, perplexity: float, seed: int) -> np.ndarray:
    """``[N, 2]`` t-SNE map (perplexity capped below ``N``, as t-SNE requires)."""
    from sklearn.manifold import TSNE

    perplexity = min(perplexity, max(1.0, (len(features) - 1) / 3))
    return TSNE(n_components=2, perplexity=perplexity, init='pca',
                random_state=seed).fit_transform(features)


# ----------------------------------------------------------------------------- outputs
def output_paths(out_dir: str | Path, lang: str, feature: str) -> dict[str, Path]:
    """The map (``png``) and its cluster listing (``text``) of ``lang``'s ``f^<feature>``."""
    folder, stem = Path(out_dir), f'{lang}_f{feature}'
    return dict(png=folder / f'{stem}.png', text=folder / f'{stem}_clusters.txt')


def check_outputs(written: Mapping[str, Path], overwrite: bool) -> None:
    """Refuse, before the model is built, to write over a file standing where an output goes:
    an earlier run's map or listing (another checkpoint's, say, whose figure would be lost)
    unless ``overwrite``, any other file always.

    Raises:
        UserError: ``<file> (--out-dir)``, what stands there, and the fix.
    """
    for kind, path in written.items():
        if not path.exists():
            continue
        where = f'{path} (--out-dir)'
        if not _earlier_output(path, kind):
            raise UserError(where, 'exists and is not a map or cluster listing this tool '
                            'wrote; it is left as it is', 'give another --out-dir')
        if not overwrite:
            raise UserError(where, 'holds the output of an earlier run; it is kept',
                            'pass --overwrite to replace it, or give another --out-dir')


def _earlier_output(path: Path, kind: str) -> bool:
    """Whether the file at ``path`` begins as this tool's ``kind`` of output does."""
    if path.is_dir():
        return False
    with open(path, 'rb') as handle:
        start = handle.read(256)
    if kind == 'png':
        return start.startswith(PNG_SIGNATURE)
    return LISTING_TITLE.match(start.decode('utf-8', errors='replace')) is not None


def cluster_report(captions: Sequence[str], labels: np.ndarray, distances: np.ndarray,
                   examples: int, title: str) -> str:
    """Text listing each cluster's size and its ``examples`` captions nearest the centre."""
    lines = [title, '']
    for label in range(int(labels.max()) + 1):
        members = np.flatnonzero(labels == label)
        members = members[np.argsort(distances[members], kind='stable')]
        lines.append(f'cluster {label} ({len(members)} captions)')
        lines.extend(f'  {captions[i]}' for i in members[:examples])
        lines.append('')
    return '\n'.join(lines)


def plot(points: np.ndarray, labels: np.ndarray, title: str, out: io.BytesIO) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 6))
    colours = plt.get_cmap('tab10' if labels.max() < 10 else 'tab20')
    for label in range(int(labels.max()) + 1):
        chosen = labels == label
        axes.scatter(points[chosen, 0], points[chosen, 1], s=10, color=colours(label % 20),
                     label=f'cluster {label} ({int(chosen.sum())})')
    axes.set_title(title)
    axes.set_xticks([])
    axes.set_yticks([])
    axes.legend(loc='best', fontsize='small', markerscale=2)
    figure.tight_layout()
    figure.savefig(out, format='png', dpi=150)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> dict[str, Path]:
    args = parse_args(argv)
    from xmr.apis import check_config_languages, init_retriever
    from xmr.engine.checkpoint import check_given_checkpoint
    from xmr.fileio import atomic_write_bytes, atomic_write_text

    cfg = load_run_config(args.config, ablations=args.ablation, cfg_options=args.cfg_options)
    # A language the config's model lacks, or its source language (read, but without f^sa /
    # f^sr), was refused only once the model stood.
    check_config_languages(cfg, args.lang, '--lang', with_modules=True)
    given_folder(args.out_dir, '--out-dir', 'give a folder (made if missing) for the map')
    written = output_paths(args.out_dir, args.lang, args.feature)
    check_outputs(written, args.overwrite)
    # Read before the model is built (a paper's backbone loads for minutes): a mistyped path,
    # a file not in UTF-8, a config of several test sets or too few captions were named once
    # it stood.
    if args.captions:
        captions = read_caption_file(args.captions, args.num_captions)
    else:
        captions = config_captions(cfg, args)
    check_caption_count(captions, args)
    if args.checkpoint is not None:
        # Whole, as tools/test.py checks its CHECKPOINT: a truncated copy was refused once the
        # backbone had loaded.
        check_given_checkpoint(args.checkpoint, '--checkpoint')
    device = given_device(args.device)
    for path in written.values():
        # Beneath a file, or in a folder not writable, the map was lost once drawn.
        given_output(path, '--out-dir', 'give a folder (made if missing) for the map')
    model = init_retriever(cfg, args.checkpoint, device=device)
    check_model(model, args.lang, args.feature)
    features = extract_features(model, captions, args.lang, args.feature, args.batch_size)
    labels, distances = cluster(features, args.clusters, args.seed)
    points = tsne(features, args.perplexity, args.seed)

    # Begins as LISTING_TITLE matches: the listing is known as this tool's by it.
    title = (f'f^{args.feature} of {len(captions)} {args.lang} captions, k-means k={args.clusters}'
             f' ({Path(args.config).stem})')
    image = io.BytesIO()
    plot(points, labels, title, image)
    report = cluster_report(captions, labels, distances, args.examples, title)
    # Both made before either is written, each written whole: an interrupted run leaves no cut
    # image over an earlier one.
    atomic_write_bytes(written['png'], image.getvalue())
    atomic_write_text(written['text'], report)
    for path in written.values():
        print(f'wrote {path}')
    return written


if __name__ == '__main__':
    run_tool(main)
