"""Convert XTD200 to an xmr annotation.

Usage and input layout: ``python tools/data/prepare_xtd200.py --help`` and docs/data.md.
"""
from xmr.datasets.converters.flores_captions import main_xtd200
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main_xtd200)
