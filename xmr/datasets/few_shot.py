"""PECTVLM's seeded few-shot protocols.

Both draw one permutation with ``torch.randperm(count, generator=Generator().manual_seed(seed))``
(seed 42 in PECTVLM) over the items of an annotation, in file order:

* **split** (XTD10): one evaluation set becomes train = ``perm[:n]``, val = ``perm[n:2n]``,
  test = ``perm[2n:]`` (900 test images at ``n = 50``; the XTD10 converter writes them with
  ``--few-shot``), splits ``fewshot<n>_seed<seed>_{train,val,test}`` of a ``test`` split (XTD10's
  evaluation set), ``<split>_fewshot<n>_seed<seed>_{train,val,test}`` of another;
* **subsample** (Multi30K): a training split keeps ``perm[:n]`` (split
  ``<split>_<n>shot_seed<seed>``); its official val and test splits stay whole.

The split names carry everything that decides the draw, the split drawn from, ``n`` and the seed:
what is keyed on a split (output file names, feature caches, evaluation rows) keeps two draws
apart.
Records keep every caption, translation and back-translation; items stay in permutation order,
as the authors index them.
"""
from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from xmr.datasets.annotation import Annotation, AnnotationError, load_annotation
from xmr.datasets.converters.errors import ConversionError
from xmr.utils.cli import add_custom_imports

__all__ = ['FEW_SHOT_PARTS', 'PROTOCOLS', 'few_shot_split_name', 'few_shot_splits',
           'is_few_shot_split', 'main', 'seeded_permutation', 'subsample', 'subsample_split_name']

PROTOCOLS = ('split', 'subsample')
#: The parts of :func:`few_shot_splits`, in order.
FEW_SHOT_PARTS = ('train', 'val', 'test')
#: The split names :func:`few_shot_splits` and :func:`subsample` write, and those they wrote
#: before the names carried the seed (still subsets).
_FEW_SHOT_SPLIT = re.compile(r'(^|_)fewshot\d+(_seed\d+)?_(train|val|test)$|_\d+shot(_seed\d+)?$')


def is_few_shot_split(split: str) -> bool:
    """Whether ``split`` is a part this module cut from a whole split (``fewshot50_seed42_test``,
    ``train_100shot``): a subset, whose scores are not the whole set's."""
    return _FEW_SHOT_SPLIT.search(split) is not None


def seeded_permutation(count: int, seed: int = 42) -> list[int]:
    """``torch.randperm(count)`` from a generator seeded with ``seed``, as a list."""
    import torch  # here, so that the converters importing this module start without it

    return torch.randperm(count, generator=torch.Generator().manual_seed(seed)).tolist()


def few_shot_split_name(shots: int, part: str, seed: int = 42, source: str = 'test') -> str:
    """The split of a part (:data:`FEW_SHOT_PARTS`) of :func:`few_shot_splits` drawn with
    ``seed`` from the split ``source``: ``fewshot50_seed42_test`` of XTD10's ``test``,
    ``val_fewshot50_seed42_test`` of a ``val`` split (whose draw would else take the name, and
    the files, of the test split's)."""
    name = f'fewshot{shots}_seed{seed}_{part}'
    return name if source == 'test' else f'{source}_{name}'


def subsample_split_name(split: str, shots: int, seed: int = 42) -> str:
    """The split :func:`subsample` makes of ``split``, e.g. ``train_100shot_seed42``."""
    return f'{split}_{shots}shot_seed{seed}'


def few_shot_splits(ann: Annotation, shots: int, seed: int = 42) -> dict[str, Annotation]:
    """PECTVLM's few-shot split of ``ann``: train/val of ``shots`` images each, the rest test.

    Raises:
        ConversionError: if ``2 * shots`` leaves no test images.
    """
    count = len(ann.items)
    if shots <= 0 or 2 * shots >= count:
        raise ConversionError(f'few-shot size {shots} must be positive and leave test images '
                              f'out of {count}')
    order = seeded_permutation(count, seed)
    parts = dict(zip(FEW_SHOT_PARTS, (order[:shots], order[shots:2 * shots], order[2 * shots:])))
    return {part: replace(ann, split=few_shot_split_name(shots, part, seed, ann.split),
                          items=[ann.items[i] for i in indices])
            for part, indices in parts.items()}


def subsample(ann: Annotation, shots: int, seed: int = 42) -> Annotation:
    """The first ``shots`` records of a seeded permutation of ``ann`` (split
    :func:`subsample_split_name`).

    Raises:
        ConversionError: if ``shots`` is not in ``1..len(ann.items)``.
    """
    count = len(ann.items)
    if not 0 < shots <= count:
        raise ConversionError(f'{ann.dataset}/{ann.split}: cannot keep {shots} of {count} items')
    order = seeded_permutation(count, seed)[:shots]
    return replace(ann, split=subsample_split_name(ann.split, shots, seed),
                   items=[ann.items[i] for i in order])


def main(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/few_shot_split.py``."""
    from xmr.datasets.converters.cli import add_out_dir, dump_into

    parser = argparse.ArgumentParser(description="PECTVLM's seeded few-shot protocols on an xmr "
                                     'annotation file (docs/methods/pectvlm.md).')
    parser.add_argument('ann', type=Path, help='annotation file')
    parser.add_argument('--protocol', choices=PROTOCOLS, required=True,
                        help='split: n train / n val / rest test (XTD10); subsample: keep n '
                        'items of a training split (Multi30K)')
    parser.add_argument('--shots', type=int, required=True, metavar='N',
                        help='n of the protocol')
    parser.add_argument('--seed', type=int, default=42, help="seed of the draw (PECTVLM's: 42)")
    add_out_dir(parser)
    add_custom_imports(parser)
    args = parser.parse_args(argv)

    try:
        ann = load_annotation(args.ann)
        parts = (list(few_shot_splits(ann, args.shots, args.seed).values())
                 if args.protocol == 'split' else [subsample(ann, args.shots, args.seed)])
        outputs = {f'{part.dataset}_{part.split}': part for part in parts}
        # Another file named so, or an output that holds translations attached since, is
        # refused.
        written = dump_into(args.out_dir, outputs)
    except (ConversionError, AnnotationError, FileNotFoundError) as err:
        raise SystemExit(f'error: {err}') from err
    for path, part in zip(written, outputs.values()):
        print(f'{path}: {len(part.items)} items')
