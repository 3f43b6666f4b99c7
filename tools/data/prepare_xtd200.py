"""Convert XTD200 to an xmr annotation.

Usage and input layout: ``python tools/data/prepare_xtd200.py --help`` and docs/data.md.
"""
from xmr.datasets.converters.flores_captions import main_xtd200

if __name__ == '__main__':
    main_xtd200()
