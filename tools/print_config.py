"""Print a config as a run sees it: its ``_base_`` files, ``--ablation`` rows and ``--cfg-options``
merged, its work dir resolved, and its model's options checked.

    python tools/print_config.py CONFIG [--ablation NAME ...] [--cfg-options KEY=VALUE ...]
        [--work-dir DIR]

Nothing is built and nothing is written; what ``tools/train.py`` would train is printed as
Python (the form of a dumped config, which ``tools/train.py`` reads back).
"""
from __future__ import annotations

import argparse

from xmr.run_config import add_config_arguments, load_run_config
from xmr.utils.cli import print_for_reader, run_tool


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Print a config merged as a run sees it')
    parser.add_argument('config', help='config file, or xmr::<path> for a config xmr ships')
    parser.add_argument('--work-dir', help='as tools/train.py takes it')
    add_config_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cfg = load_run_config(args.config, ablations=args.ablation, cfg_options=args.cfg_options,
                          work_dir=args.work_dir)
    print_for_reader(cfg.pretty_text)


if __name__ == '__main__':
    run_tool(main)
