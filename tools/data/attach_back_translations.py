"""Export target-language captions for translation into the source language, or join the
translated files back (PECTVLM's translate-test and routine 3).

Usage: ``python tools/data/attach_back_translations.py ANN --export de=de.txt`` then
``python tools/data/attach_back_translations.py ANN --back-translations de=de2en.txt``;
the line format is in docs/data.md. ``--export`` keeps a file standing at a ``PATH`` unless
``--overwrite`` is given, which replaces a text file (an earlier export: nothing in a file of
lines tells it from a translation of one) and never an annotation or a binary file. The
back-translations are written over ANN, or to ``--out``, where a file standing is replaced only
when it is an annotation of ANN's dataset and split a converter wrote.
"""
from xmr.datasets.converters.back_translations import main_attach_back
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main_attach_back)
