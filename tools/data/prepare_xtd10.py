"""Convert XTD10 (and PECTVLM's seeded few-shot split) to xmr annotations.

Usage and input layout: ``python tools/data/prepare_xtd10.py --help`` and docs/data.md.
"""
from xmr.datasets.converters.xtd10 import main

if __name__ == '__main__':
    main()
