"""Convert a released MLA checkpoint into an xmr checkpoint (docs/methods/).

``python tools/convert/mla_to_xmr.py CHECKPOINT CONFIG --out FILE.pth`` then
``python tools/test.py CONFIG FILE.pth``; ``--clip-checkpoint CLIP`` takes CLIP from a second
file, as their ``inference.sh CLIP_CKPT ACQ_CKPT`` (the fine-tuned results). Prints the keys
used, unused and kept; a file of another architecture, method or language set is refused
(exit 2) and nothing is written.
"""
from functools import partial

from xmr.conversion_cli import main
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(partial(main, 'mla'))
