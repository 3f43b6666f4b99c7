"""PECTVLM's seeded few-shot protocols on an xmr annotation file.

Usage: ``python tools/data/few_shot_split.py data/xtd10/annotations/xtd10_test.json
--protocol split --shots 50 --seed 42 --out-dir data/xtd10/annotations`` (XTD10: 50 train,
50 val, 900 test images) or ``... multi30k_train.json --protocol subsample --shots 100
--out-dir data/multi30k/annotations`` (a seeded 100-image Multi30K training subset).
"""
from xmr.datasets.few_shot import main
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main)
