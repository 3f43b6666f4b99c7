"""Convert XTD10 (and PECTVLM's seeded few-shot split) to xmr annotations.

Usage and input layout: ``python tools/data/prepare_xtd10.py --help`` and docs/data.md.
"""
from xmr.datasets.converters.xtd10 import main
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main)
