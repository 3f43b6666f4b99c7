"""tools/benchmarks/annotation_memory.py: a dataset's annotation memory and its workers' copies."""
from __future__ import annotations

import re
import sys

import pytest

from tests.conftest import benchmark_script

annotation_memory = benchmark_script('annotation_memory')

pytestmark = pytest.mark.skipif(not sys.platform.startswith('linux'),
                                reason='reads /proc, Linux only')


def test_the_synthetic_annotation_has_the_size_asked_for(tmp_path):
    from xmr.datasets import load_annotation

    annotation_memory.write_annotation(tmp_path / 'a.json', items=7, translations=3)
    ann = load_annotation(tmp_path / 'a.json')
    assert len(ann.items) == 7 and ann.translation_langs == ['de', 'fr', 'cs']
    assert ann.media_type == 'text' and ann.items[6].media_id == '00000006'


@pytest.mark.slow
def test_each_mode_is_measured_in_its_own_process(capsys):
    """Each mode's row counts the dataset's items (records times translations), and a packed
    dataset's workers copy no page of it (whole MiB)."""
    annotation_memory.main(['--items', '3000', '--translations', '2', '--workers', '2'])
    rows = {row[0]: row for row in re.findall(
        r'^\| (packed|objects) \| ([\d,]+) \| [\d.]+ \([\d.]+\) \| \d+ \| \d+ \| (.+) \|$',
        capsys.readouterr().out, flags=re.M)}
    assert set(rows) == {'packed', 'objects'}
    assert rows['packed'][1] == rows['objects'][1] == '6,000'
    assert rows['packed'][2] == '0, 0'


def test_bad_arguments_are_refused_naming_the_value():
    with pytest.raises(ValueError, match=r"--modes \['lists'\] unknown"):
        annotation_memory.main(['--modes', 'packed,lists'])
    with pytest.raises(ValueError, match='--translations 12 must be 0 to 9'):
        annotation_memory.main(['--translations', '12'])


def test_a_missing_annotation_is_refused_before_any_row(tmp_path, capsys):
    with pytest.raises(SystemExit):
        annotation_memory.main(['--ann-file', str(tmp_path / 'missing.json')])
    assert 'missing.json (--ann-file): no such file' in capsys.readouterr().err


def test_a_row_that_fails_says_why_from_its_process(tmp_path):
    """A row's process failed with its error captured and dropped: the run said only that the
    command returned exit status 1."""
    ann_file = tmp_path / 'images.json'
    ann_file.write_text('{"items": []}')
    with pytest.raises(RuntimeError, match=r'(?s)annotation_memory row packed failed:.*'
                                           r'images.json: format must be'):
        annotation_memory.main(['--ann-file', str(ann_file), '--modes', 'packed'])
