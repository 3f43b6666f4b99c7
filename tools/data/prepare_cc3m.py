"""Convert Conceptual Captions with UC2's translations (CC3M or its seeded CC300K subset).

Usage and input layout: ``python tools/data/prepare_cc3m.py --help`` and docs/data.md.
"""
from xmr.datasets.converters.cc3m import main
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main)
