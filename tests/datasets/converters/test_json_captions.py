"""clean_caption: a caption out of a JSON field becomes one line of the translation format."""
from __future__ import annotations

import pytest

from xmr.datasets.converters.json_captions import clean_caption


@pytest.mark.parametrize('line_break', ['\n', '\r\n', '\u2028', '\u2029', '\x85', '\x0b', '\x0c',
                                        '\x1c', '\x1d', '\x1e'])
def test_every_line_boundary_of_str_splitlines_is_folded_into_one_space(line_break):
    """Unicode's line and paragraph separators (U+2028, U+2029), NEL and the other boundaries
    that ``str.splitlines`` breaks at cut a caption in two for a translation tool that reads
    with it (``read().splitlines()``), and attaching its output then fails on the line count.
    Expected: folded as a newline is."""
    caption = f' a dog{line_break} running  on grass {line_break}'
    assert clean_caption(caption, 'captions.json image 1') == 'a dog running  on grass'
    assert len(clean_caption(caption, 'x').splitlines()) == 1
