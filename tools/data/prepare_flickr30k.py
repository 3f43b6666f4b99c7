"""Convert Flickr30K (Karpathy's splits, five English captions per image) to xmr annotations.

Usage and input layout: ``python tools/data/prepare_flickr30k.py --help`` and docs/data.md.
"""
from xmr.datasets.converters.flickr30k import main
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main)
