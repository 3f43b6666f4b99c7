"""Per-language modules of a trained model: export them, merge them, report their size.

``python tools/language_modules.py report CONFIG`` prints, for every target language of the
config's model, the parameters its module adds and their share of the frozen text encoder and of
the whole backbone (PECTVLM's Table 5 column).

``python tools/language_modules.py export CONFIG CHECKPOINT --langs de fr --out-dir DIR`` writes
``DIR/<lang>.pth``: only that language's module (a small file).

``python tools/language_modules.py merge CONFIG --modules de=de.pth fr=fr.pth --out FILE`` builds
the config's model (its frozen towers as configured), loads each module file into its language
and writes a checkpoint that ``tools/test.py`` and ``xmr.apis.init_retriever`` load.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from xmr.utils.cli import run_tool


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Export, merge or size the per-language '
                                     'modules of an xmr model (docs/methods/pectvlm.md)')
    commands = parser.add_subparsers(dest='command', required=True)
    report = commands.add_parser('report', help='parameters each language adds')
    report.add_argument('config')
    export = commands.add_parser('export', help='write one file per language module')
    export.add_argument('config')
    export.add_argument('checkpoint', help='checkpoint written by training')
    export.add_argument('--langs', nargs='+', help='languages (default: all of the model)')
    export.add_argument('--out-dir', type=Path, required=True)
    merge = commands.add_parser('merge', help='load module files into one model checkpoint')
    merge.add_argument('config')
    merge.add_argument('--modules', nargs='+', required=True, metavar='LANG=PATH',
                       help='module file per language of the model')
    merge.add_argument('--out', type=Path, required=True)
    return parser.parse_args(argv)


def _pairs(values: list[str]) -> dict[str, Path]:
    pairs = {}
    for value in values:
        lang, sep, path = value.partition('=')
        if not sep or not lang or not path:
            raise SystemExit(f'error: --modules expects LANG=PATH, got {value!r}')
        pairs[lang] = Path(path)
    return pairs


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from xmr.apis import init_retriever
    from xmr.models.language.module_io import (
        language_parameter_report,
        load_language_module,
        save_language_module,
    )

    try:
        model = init_retriever(args.config, getattr(args, 'checkpoint', None))
        if args.command == 'report':
            rows = language_parameter_report(model)
            print('| language | parameters | of text encoder | of backbone |')
            print('|---|---:|---:|---:|')
            for lang, share in rows.items():
                print(f'| {lang} | {share.parameters:,} | {100 * share.of_text_encoder:.4f}% | '
                      f'{100 * share.of_backbone:.4f}% |')
        elif args.command == 'export':
            for lang in args.langs or model.languages:
                path = save_language_module(model, lang, args.out_dir / f'{lang}.pth')
                print(f'{path}: {lang} module, {path.stat().st_size:,} bytes')
        else:
            for lang, path in _pairs(args.modules).items():
                load_language_module(model, path, lang)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            torch.save(dict(state_dict=model.state_dict(),
                            meta=dict(language_modules={k: str(v) for k, v in
                                                        _pairs(args.modules).items()})),
                       args.out)
            print(f'{args.out}: {", ".join(_pairs(args.modules))} modules merged')
    except (FileNotFoundError, KeyError, ValueError) as error:
        raise SystemExit(f'error: {error}') from error


if __name__ == '__main__':
    run_tool(main)
