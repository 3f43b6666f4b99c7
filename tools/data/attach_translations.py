"""Join machine-translated caption files (one line per source caption) to an xmr annotation.

Usage: ``python tools/data/attach_translations.py ANN --translations de=train.de.txt ...``;
the line format is in docs/data.md. The result is written over ANN, or to ``--out``, where a
file standing is replaced only when it is an annotation of ANN's dataset and split a converter
wrote.
"""
from xmr.datasets.converters.translations import main_attach
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main_attach)
