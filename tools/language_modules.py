"""Per-language modules of a trained model: export them, merge them, report their size.

``python tools/language_modules.py report CONFIG`` prints, for every target language of the
config's model, the parameters its module adds (with its own disentangler where the model has
one per language) and their share of the frozen text encoder and of the whole backbone
(PECTVLM's Table 5 column), then the trainable parameters the languages share (embedding block,
a shared disentangler) and the total, DASD's #TP. A paper config states the paper's own figures
(``paper_figures = dict(source=..., language_share=0.0016, trainable_parameters=134e6)``); the
report prints them beside xmr's counts.

Every command takes ``--ablation`` and ``--cfg-options`` as ``tools/train.py`` does: the #TP of
a paper's ablation row, or of more languages than the config holds. The papers state no #TP of
an ablation row, so an ``--ablation`` that changes the parameters counted (``dasd/du-16``,
``dasd/static-adapter``) drops the config's paper column, saying so, unless the ablation file
states its own ``paper_figures``; one that keeps them (``dasd/sc-mse``) keeps the column.

``python tools/language_modules.py export CONFIG CHECKPOINT --langs de fr --out-dir DIR`` writes
``DIR/<lang>.pth``: only that language's module (a small file), with its base: CHECKPOINT and a
fingerprint of the shared weights (towers, shared embedding, disentangler) it was trained with.

``python tools/language_modules.py merge CONFIG [--base CHECKPOINT] --modules de=de.pth fr=fr.pth
--out FILE`` builds the config's model (from ``--base`` when given), loads each module file into
its language (``LANG=PATH`` names the language it is loaded into, which may be another than
the file's) and writes a checkpoint that ``tools/test.py`` and ``xmr.apis.init_retriever`` load;
it names each language of the model given no module, whose weights stay ``--base``'s (or the
config's untrained ones).
A module whose shared weights differ from the model's is refused, naming the base to give, and
so is an ``--out`` that is ``--base`` or a module file.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from xmr.run_config import add_config_arguments, load_run_config
from xmr.utils.cli import (
    GatherAction,
    UserError,
    given_file,
    given_folder,
    given_output,
    run_tool,
)

CONFIG_HELP = "the model's config, which names its languages"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Export, merge or size the per-language '
                                     'modules of an xmr model (docs/methods/pectvlm.md)')
    commands = parser.add_subparsers(dest='command', required=True)
    report = commands.add_parser('report', help='parameters each language adds')
    report.add_argument('config', help=CONFIG_HELP)
    export = commands.add_parser('export', help='write one file per language module')
    export.add_argument('config', help=CONFIG_HELP)
    export.add_argument('checkpoint', help='checkpoint written by training')
    export.add_argument('--langs', nargs='+', action=GatherAction,
                        help='languages (default: all of the model)')
    export.add_argument('--out-dir', type=Path, required=True,
                        help='folder to write <lang>.pth into')
    export.add_argument('--overwrite', action='store_true',
                        help="replace a module file in --out-dir (an earlier export's)")
    merge = commands.add_parser('merge', help='load module files into one model checkpoint')
    merge.add_argument('config', help=CONFIG_HELP)
    merge.add_argument('--base', help='checkpoint whose shared weights (towers, shared embedding, '
                       'disentangler) the modules were trained with (default: the config\'s '
                       'built model, right only when those stayed as built)')
    merge.add_argument('--modules', nargs='+', action=GatherAction, required=True,
                       metavar='LANG=PATH',
                       help='module file per language of the model; a file of another '
                       "language loads into LANG as given (es=pt.pth: Portuguese's module "
                       'serving Spanish)')
    merge.add_argument('--out', type=Path, required=True,
                       help='the merged checkpoint to write (a new file, unless --overwrite)')
    merge.add_argument('--overwrite', action='store_true',
                       help='replace the file at --out (an earlier merge)')
    for command in (report, export, merge):
        add_config_arguments(command, "model.language_branch.languages=['de','fr','cs']",
                             named_by=None)
    return parser.parse_args(argv)


def _pairs(values: list[str]) -> dict[str, Path]:
    from xmr.datasets.languages import normalize_language

    pairs, given = {}, {}
    for value in values:
        lang, sep, path = value.partition('=')
        if not sep or not lang or not path:
            raise UserError(value, 'not a --modules value', 'give LANG=PATH, e.g. de=de.pth')
        canonical = normalize_language(lang, f'--modules {value}')
        if canonical in pairs:
            raise UserError(value, f'--modules names the language {canonical!r} twice '
                            f'({given[canonical]})', 'give one module file a language')
        pairs[canonical], given[canonical] = Path(path), value
    return pairs


def _check_merge_out(args: argparse.Namespace, modules: dict[str, Path]) -> None:
    """Refuse, before the model is built, an ``--out`` that cannot be written (a folder, a
    file where a folder above it goes: :func:`~xmr.utils.cli.given_output`), the config,
    ``--base`` or a module file, or any file there without ``--overwrite``: the merged weights
    alone would replace the config, a module or a training checkpoint (its optimizer and
    schedule, what a resume needs).

    Raises:
        UserError: naming ``--out`` and what stands there.
    """
    from xmr.engine.checkpoint import meta_records
    from xmr.fileio import input_written_over

    out = args.out
    given_output(out, '--out', 'name the merged checkpoint file (.pth)')
    given = input_written_over(out, [args.config, args.base, *modules.values()])
    if given is not None:
        raise UserError(out, f'--out is an input of the merge ({given})',
                        'write the merged checkpoint to another file')
    if out.exists() and not args.overwrite:
        raise UserError(f'--out {out}', 'exists and is kept (a training checkpoint there would '
                        'lose what a resume needs)', 'pass --overwrite to replace it, or write '
                        'the merged checkpoint to another file')
    if out.exists() and not meta_records(out, 'language_modules'):
        raise UserError(f'--out {out}', 'exists and is no earlier merge (its meta records no '
                        'language_modules); it is left as it is, --overwrite replacing an '
                        'earlier merge alone', 'write the merged checkpoint to another file')


def _check_module_files(modules: dict[str, Path]) -> None:
    """Refuse, before the model is built (a paper's backbone loads for minutes), a module file
    that is missing, a folder or unreadable: it was named only once the model stood, and the
    modules before it had been loaded.

    Raises:
        UserError: ``<path> (--modules LANG=...)``, what is wrong, and the fix.
    """
    for lang, path in modules.items():
        given_file(path, f'--modules {lang}=...', 'give a module file tools/language_modules.py '
                   'export wrote')


def print_parameter_report(model, paper: dict) -> None:
    """The report's table, with a ``paper`` column when the config states the paper's figures."""
    from xmr.models.language.language_modules import (
        language_parameter_report,
        shared_parameter_count,
    )

    share, trainable = paper.get('language_share'), paper.get('trainable_parameters')
    rows = [['language', 'parameters', 'of text encoder', 'of backbone', 'paper'],
            ['---', '---:', '---:', '---:', '---:']]
    shares = language_parameter_report(model)
    for lang, row in shares.items():
        rows.append([lang, f'{row.parameters:,}', f'{100 * row.of_text_encoder:.4f}%',
                     f'{100 * row.of_backbone:.4f}%',
                     '' if share is None else f'{100 * share:.2f}%'])
    shared = shared_parameter_count(model)
    rows.append(['shared by the languages', f'{shared:,}', '', '', ''])
    total = shared + sum(row.parameters for row in shares.values())
    rows.append(['#TP (all trainable)', f'{total:,}', '', '',
                 '' if trainable is None else f'{trainable / 1e6:.0f}M'])
    stated = share is not None or trainable is not None
    for row in rows:
        print('| ' + ' | '.join(row if stated else row[:-1]) + ' |')
    if stated:
        print(f"paper: {paper.get('source', 'the paper')}")


def _parameter_counts(model) -> tuple[dict[str, int], int]:
    """``({lang: parameters}, shared)``: what the report's count column shows."""
    from xmr.models.language.language_modules import (
        language_parameter_report,
        shared_parameter_count,
    )

    languages = {lang: row.parameters for lang, row in language_parameter_report(model).items()}
    return languages, shared_parameter_count(model)


def _check_export_out(args: argparse.Namespace, path: Path) -> None:
    """Refuse a module file to write that is the config or the checkpoint exported (a training
    checkpoint named ``de.pth`` in ``--out-dir`` became ``de``'s module), or any other file
    standing there but an earlier module, which only ``--overwrite`` replaces.

    Raises:
        UserError: naming the file, what it is (or why it cannot be written: a file where a
            folder above it goes), and the fix.
    """
    from xmr.engine.checkpoint import CheckpointReadError, read_checkpoint
    from xmr.fileio import input_written_over
    from xmr.models.language.language_modules import MODULE_FORMAT

    where, fix = f'{path} (--out-dir)', 'export into another --out-dir'
    given_output(path, '--out-dir', fix)
    given = input_written_over(path, [args.config, args.checkpoint])
    if given is not None:
        raise UserError(where, f'is an input of the export ({given})', fix)
    if not path.exists():
        return
    try:
        payload = read_checkpoint(path, what='language module')
    except (CheckpointReadError, OSError) as error:
        raise UserError(where, f'exists and is no language module ({error}); it is left as it '
                        'is', fix) from error
    if not (isinstance(payload, dict) and payload.get('format') == MODULE_FORMAT):
        raise UserError(where, 'exists and is no language module; it is left as it is', fix)
    if not args.overwrite:
        raise UserError(where, f"holds the {payload.get('lang')} module of an earlier export; "
                        'it is kept', f'pass --overwrite to replace it, or {fix}')


def _figures_of_the_model_reported(model, args: argparse.Namespace) -> tuple[dict, str | None]:
    """The run config's ``paper_figures`` and ``None``, or ``{}`` and the reason where they are
    the config's own and its ``--ablation`` rows change the parameters counted: they are the
    figures of another model than the one reported."""
    from xmr.apis import init_retriever

    paper = model.cfg.get('paper_figures') or {}
    if not paper or not args.ablation:
        return paper, None
    dropped = (f"no paper column: the config's paper figures ({paper.get('source', 'the paper')})"
               f" are of its model without --ablation {' '.join(map(str, args.ablation))}, which")
    try:
        config = load_run_config(args.config, cfg_options=args.cfg_options)
        if config.get('paper_figures') != model.cfg.get('paper_figures'):
            return paper, None  # the ablation states the figures of its own row
        # The model without the rows is built only where they change its config (a
        # schedule's row does not): a paper's backbone is large.
        if (config.to_dict()['model'] == model.cfg.to_dict()['model']
                or _parameter_counts(init_retriever(config)) == _parameter_counts(model)):
            return paper, None
    except (KeyError, ValueError, TypeError, UserError) as error:
        # Options of the ablated model's parts alone: the paper's is another model.
        return {}, f'{dropped} --cfg-options do not fit ({error})'
    return {}, f'{dropped} changes the parameters counted'


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from xmr.apis import check_config_languages, init_retriever
    from xmr.datasets.languages import normalize_languages
    from xmr.engine.checkpoint import check_given_checkpoint
    from xmr.models.language.language_modules import (
        check_module_finite,
        load_language_module,
        save_language_module,
        save_merged_checkpoint,
    )

    checkpoint = args.base if args.command == 'merge' else getattr(args, 'checkpoint', None)
    cfg = load_run_config(args.config, ablations=args.ablation,
                          cfg_options=args.cfg_options)
    # The languages asked for are checked against the config's, as the files are, before the
    # model is built: a language it lacks was refused once the backbone had loaded.
    if args.command == 'merge':
        modules = _pairs(args.modules)
        check_config_languages(cfg, list(modules), '--modules', with_modules=True)
        _check_merge_out(args, modules)
        _check_module_files(modules)
    elif args.command == 'export':
        # The model's languages are canonical codes ('DE' would name none of them); the
        # file names follow them.
        langs = normalize_languages(args.langs, '--langs') if args.langs else None
        if langs:
            check_config_languages(cfg, langs, '--langs', with_modules=True)
        given_folder(args.out_dir, '--out-dir',
                     'name a folder (made if missing) for the module files')
    if checkpoint is not None:
        # Whole, before the model is built, as tools/test.py checks its CHECKPOINT: a truncated
        # copy was refused once the backbone had loaded, named as the API's '(checkpoint)'.
        check_given_checkpoint(checkpoint, '--base' if args.command == 'merge' else 'CHECKPOINT')
    model = init_retriever(cfg, checkpoint)
    if args.command == 'report':
        paper, dropped = _figures_of_the_model_reported(model, args)
        print_parameter_report(model, paper)
        if dropped:
            print(dropped)
    elif args.command == 'export':
        langs = langs or model.languages
        # All checked before the first file is written: a run that fails on a later one
        # would leave the earlier files as if the export had been done.
        for lang in langs:
            model.language_branch.adapters.check_language(lang)
            check_module_finite(model, lang)
        for lang in langs:
            _check_export_out(args, args.out_dir / f'{lang}.pth')
        for lang in langs:
            path = save_language_module(model, lang, args.out_dir / f'{lang}.pth',
                                        base_checkpoint=args.checkpoint)
            print(f'{path}: {lang} module, {path.stat().st_size:,} bytes')
    else:
        for lang, path in modules.items():
            load_language_module(model, path, lang)
        save_merged_checkpoint(model, args.out, dict(
            base=args.base, language_modules={k: str(v) for k, v in modules.items()}))
        print(f'{args.out}: {", ".join(modules)} modules merged')
        # The merged file holds every language of the config: tools/test.py scores them all.
        kept = (f'kept from {args.base}' if args.base
                else 'kept as the config builds it (untrained)')
        for lang in model.languages:
            if lang not in modules:
                print(f'{lang}: no module given, {kept}')


if __name__ == '__main__':
    run_tool(main)
