"""The command line of ``tools/convert/mla_to_xmr.py`` and ``tools/convert/dasd_to_xmr.py``.

Outside ``xmr.models``, whose package loads torch and every model: ``--help`` answers at once,
and the conversion (:mod:`xmr.models.conversion`) is imported once the arguments are read.
"""
from __future__ import annotations

import argparse

from xmr.run_config import ConfigOptionsAction, config_file
from xmr.utils.cli import UserError, as_typed

#: The releases converted, by the name their tool gives.
METHODS = {'mla': 'MLA (AIM3-RUC/MLA)', 'dasd': 'DASD (HuiGuanLab/DASD)'}


def main(method: str, argv: list[str] | None = None) -> None:
    """Parse ``CHECKPOINT CONFIG --out FILE [--cfg-options ...]``, convert, report the keys.

    Raises:
        SystemExit: ``error: <file>: <what is wrong>: <fix>`` (exit status 2), nothing written.
    """
    parser = argparse.ArgumentParser(description=f'Convert a released {METHODS[method]} '
                                     'checkpoint into an xmr checkpoint that tools/test.py '
                                     'evaluates')
    parser.add_argument('checkpoint', help="the authors' model file (pytorch_model.bin.<step>)")
    parser.add_argument('config', help="xmr config of the model it becomes (xmr::<path>: one "
                        'xmr ships)')
    parser.add_argument('--out', required=True, help='xmr checkpoint to write (.pth)')
    parser.add_argument('--overwrite', action='store_true',
                        help='replace an earlier conversion at --out')
    parser.add_argument('--clip-checkpoint', metavar='FILE',
                        help="CLIP's weights from FILE instead of CHECKPOINT's, as MLA's "
                        'inference.sh CLIP_CKPT ACQ_CKPT: the English fine-tuned CLIP '
                        '(finetune-en-m30k/pytorch_model.bin.4) with the acquirers of '
                        'CHECKPOINT (LE/pytorch_model.bin.1 or finetune-all-m30k)')
    parser.add_argument('--cfg-options', nargs='+', action=ConfigOptionsAction,
                        help='override config keys, e.g. model.language_branch.languages=[ja]')
    args = parser.parse_args(argv)
    try:
        config = config_file(args.config)
    except UserError as error:
        parser.exit(2, f'error: {as_typed(str(error))}\n')
    from xmr.models.conversion.authors import ConversionError, convert_authors_checkpoint
    from xmr.models.conversion.dasd import map_dasd
    from xmr.models.conversion.mla import map_mla
    from xmr.utils.listing import first_few

    mapping = {'mla': map_mla, 'dasd': map_dasd}[method]
    try:
        report = convert_authors_checkpoint(method, args.checkpoint, config, args.out,
                                            mapping, args.cfg_options,
                                            args.clip_checkpoint, args.overwrite)
    except (ConversionError, FileNotFoundError) as error:
        parser.exit(2, f'error: {as_typed(str(error))}\n')
    print(f'{args.out}: {len(report.used)} keys used; {len(report.unused)} unused: '
          f'{first_few(report.unused) or "none"}; 0 missing; {len(report.kept)} kept from the '
          f'config: {first_few(report.kept) or "none"}')
    if report.languages_left:  # among hundreds of unused keys, a dropped language goes unseen
        print(f'{args.out}: the file\'s acquirers of {", ".join(report.languages_left)} are left '
              'out, the config does not name them: add them to '
              'model.language_branch.languages (--cfg-options) to convert them too')
