"""Convert MSCOCO (Karpathy splits, STAIR Captions ja, COCO-CN zh) to xmr annotations.

Usage and input layout: ``python tools/data/prepare_mscoco.py --help`` and docs/data.md.
"""
from xmr.datasets.converters.mscoco import main
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main)
