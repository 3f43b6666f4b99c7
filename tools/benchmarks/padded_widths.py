"""How many padded widths a run's batches come in: the CUDA graphs a compiled run records.

A compiled model (``CrossLingualRetriever(compile=...)``) records one CUDA graph per padded width
of its batches, and pads them to multiples of 8 tokens so that the widths are few
(docs/benchmarks.md, "A compiled step"). This script shuffles Multi30K's training captions into
batches as a run's sampler would (each target language's captions batched apart, as the shipped
``LanguageBatchSampler`` draws them, one language a batch; the compiled step is guarded on the
batch's language too, so each language's widths are its own graphs) and prints, for each target
language and for English, the widths the batches come in padded to their longest caption and
rounded up to a multiple, and the tokens per caption each runs; then the graphs the target
languages' batches make in all::

    python tools/benchmarks/padded_widths.py --batch-size 128 --multiple 8

The target tokenizer is XLM-R's (``../shared/data/tokenizers``), the one at hand offline; DASD's
own is mBERT's, whose pieces differ. English is CLIP's BPE.
"""
from __future__ import annotations

import argparse
import gzip
import random
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from xmr.utils.cli import int_at_least, run_tool

SHARED = Path(__file__).resolve().parents[2] / '..' / 'shared' / 'data'


def batch_widths(lengths: Sequence[int], batch_size: int, seed: int) -> list[int]:
    """The longest caption of each full batch of a shuffled pass over ``lengths``."""
    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    return [max(lengths[i] for i in order[start:start + batch_size])
            for start in range(0, len(order) - batch_size + 1, batch_size)]


def summary(name: str, lengths: Sequence[int], tokenizer, batch_size: int, seed: int) -> str:
    """A Markdown row: widths met padded to the longest and in steps of the tokenizer's
    ``pad_to_multiple_of``, and the mean tokens per caption of each."""
    widths = batch_widths(lengths, batch_size, seed)
    bucketed = [tokenizer.padded_length(width) for width in widths]
    spread = ', '.join(f'{width}: {count}' for width, count in sorted(Counter(bucketed).items()))
    return (f'| {name} | {len(widths)} | {statistics.fmean(lengths):.1f} | '
            f'{len(set(widths))} | {statistics.fmean(widths):.1f} | {len(set(bucketed))} | '
            f'{statistics.fmean(bucketed):.1f} | {spread} |')


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--multi30k', type=Path, default=SHARED / 'multi30k' / 'raw',
                        help='folder of train.{en,de,fr,cs}.gz')
    parser.add_argument('--tokenizer-file', type=Path,
                        default=SHARED / 'tokenizers' / 'xlm-roberta.tokenizer.json',
                        help='the target captions\' tokenizer (a tokenizers JSON file)')
    parser.add_argument('--languages', default='de,fr,cs',
                        help='target languages, each batched apart')
    parser.add_argument('--batch-size', type=int_at_least(1), default=128,
                        help='captions per batch')
    parser.add_argument('--multiple', type=int_at_least(1), default=8, help='pad_to_multiple_of')
    parser.add_argument('--seed', type=int, default=0, help="seed of the pass's shuffle")
    args = parser.parse_args(argv)

    from xmr.registry import TOKENIZERS

    def read(lang: str) -> list[str]:
        path = args.multi30k / f'train.{lang}.gz'
        if not path.is_file():
            raise FileNotFoundError(f'{path} not found: pass --multi30k, the folder of '
                                    "Multi30K's train.{lang}.gz files")
        with gzip.open(path, 'rt', encoding='utf-8') as lines:
            return lines.read().splitlines()

    def lengths(tokenizer, captions: list[str]) -> list[int]:
        return [len(tokenizer.truncate(tokenizer.encode(caption))) for caption in captions]

    languages = args.languages.split(',')
    captions = {lang: read(lang) for lang in [*languages, 'en']}
    target = TOKENIZERS.build(dict(type='HFTokenizer', tokenizer_file=str(args.tokenizer_file),
                                   max_length=77, pad_to_multiple_of=args.multiple))
    english = TOKENIZERS.build(dict(type='OpenCLIPTokenizer', pad_to_multiple_of=args.multiple))
    print(f'Multi30K train, batch {args.batch_size}, widths in steps of {args.multiple}, '
          f'seed {args.seed}\n')
    print('| captions | batches | tokens per caption | widths | mean width | widths, in steps '
          '| mean width, in steps | batches per width, in steps |')
    print('|---|---:|---:|---:|---:|---:|---:|---|')
    graphs = 0
    for lang in languages:
        own = lengths(target, captions[lang])
        print(summary(f'{lang} (XLM-R)', own, target, args.batch_size, args.seed))
        graphs += len({target.padded_length(width)
                       for width in batch_widths(own, args.batch_size, args.seed)})
    print(summary('en (CLIP)', lengths(english, captions['en']), english, args.batch_size,
                  args.seed))
    print(f'\nthe target batches make {graphs} graphs in all (one per language and width, in '
          'steps)')


if __name__ == '__main__':
    run_tool(main)
