"""How a model's tokenizers read each language's captions: the languages its context cuts.

A frozen tower reads captions through a fixed context (CLIP's 77 tokens, SigLIP's 64), and a
vocabulary learned mostly from English spends several tokens where English spends one: with
CLIP's BPE, XTD10's Russian captions take 3.4 times the tokens of their English originals and a
tenth of them are cut at 77 tokens, which no English caption is. A language cut, or read as
unknown tokens, loses recall with no error. For each language of the config's model that its
``--split`` dataset has captions in, this tool prints the captions' tokens per caption (mean, 95th
percentile, longest; specials included), the same over the source language's where the model
has one (parallel captions: how much more of the context the same content takes), the context
and the share of captions longer than it, and the share of unknown tokens::

    python tools/caption_tokens.py configs/dasd/dasd_clip-vit-b32_multi30k_clft.py --split test

The captions are encoded as evaluation encodes them (the source prompt, a language token) with
the tokenizer the model reads each language with (a model querying with back-translations,
PECTVLM's routine 3 and translate-test: those); the config's model is built as
``tools/test.py`` builds it (its pretrained weights load) and no media is read. A config of
several test sets (a paper's, scored by ``MultiDatasetTestLoop``) gets a table per set.
``--out FILE`` also writes the figures as JSON, a row per set and language (``dataset``: the
set's index).
"""
from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from xmr.run_config import add_config_arguments, load_run_config
from xmr.utils.cli import GatherAction, UserError, given_output, int_at_least, run_tool

if TYPE_CHECKING:
    from xmr.models.language.caption_token_counts import CaptionTokenCounts

SPLITS = ('train', 'val', 'test')


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config', help="the model's config, whose dataset gives the captions")
    parser.add_argument('--split', choices=SPLITS, default='test',
                        help='the dataset of <split>_dataloader (default: test)')
    parser.add_argument('--langs', nargs='+', action=GatherAction,
                        help="languages to count (default: every language of the model)")
    parser.add_argument('--max-captions', type=int_at_least(1), default=None,
                        help="count each language's first N captions (default: all)")
    parser.add_argument('--out', type=Path, help='also write the figures to this JSON file')
    add_config_arguments(parser)
    return parser.parse_args(argv)


def print_counts(counts: Mapping[str, CaptionTokenCounts], langs: Sequence[str],
                 source: str | None, loader: str) -> None:
    """Print ``counts`` (a row per language with captions) of ``loader``'s dataset as a table,
    then name those of ``langs`` without any."""
    from xmr.models.language.caption_token_counts import caption_token_table

    if counts:
        print(caption_token_table(list(counts.values()), source))
    missing = [lang for lang in langs if lang not in counts]
    if missing:
        print(f'no {loader} captions in: {", ".join(missing)}')


def main(argv: Sequence[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    from xmr.apis import check_config_languages, init_retriever, trained_languages
    from xmr.datasets.dataset_captions import split_datasets
    from xmr.datasets.languages import normalize_languages
    from xmr.fileio import atomic_write_text

    cfg = load_run_config(args.config, ablations=args.ablation, cfg_options=args.cfg_options)
    langs = normalize_languages(args.langs, '--langs') if args.langs else None
    if langs:
        check_config_languages(cfg, langs, '--langs')
    if args.out is not None:
        given_output(args.out, '--out', 'give a file for the figures')
    # Built, and their annotations read, before the model: a paper's backbone loads for minutes.
    datasets = split_datasets(cfg, args.split, args.config)
    model = init_retriever(cfg)
    langs = langs or trained_languages(model)
    preprocessor = model.data_preprocessor
    counts = [preprocessor.count_dataset_caption_tokens(dataset, langs, args.max_captions)
              for dataset in datasets]
    if not any(counts):
        raise UserError(args.config, f'its {args.split} data has no captions in '
                        f'{", ".join(langs)}', 'give --split or --langs of languages it holds')
    rows = []
    for index, (dataset, per_lang) in enumerate(zip(datasets, counts)):
        loader = f'{args.split}_dataloader' + (f'[{index}]' if len(datasets) > 1 else '')
        if len(datasets) > 1:
            print(f'{loader}: {getattr(dataset, "metainfo", {}).get("dataset", "")}')
        print_counts(per_lang, langs, preprocessor.source_language, loader)
        rows += [dict(row._asdict(), cut_share=row.cut_share, unknown_share=row.unknown_share,
                      dataset=index) for row in per_lang.values()]
    if args.out is not None:
        import json

        atomic_write_text(args.out, json.dumps(rows, indent=2) + '\n')
        print(f'wrote {args.out}')
    return rows


if __name__ == '__main__':
    run_tool(main)
