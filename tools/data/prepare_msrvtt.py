"""Convert Multi-MSRVTT (1k-A test in nine languages, 7k/9k training lists) to xmr annotations.

Usage and input layout: ``python tools/data/prepare_msrvtt.py --help`` and docs/data.md.
"""
from xmr.datasets.converters.msrvtt import main
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main)
