"""tools/benchmarks/padded_widths.py: the widths a run's batches come in, padded and bucketed."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA, benchmark_script

padded_widths = benchmark_script('padded_widths')
TOKENIZER = SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json'


def test_each_full_batch_is_as_wide_as_its_longest_caption():
    lengths = [3, 9, 4, 7, 5]
    assert padded_widths.batch_widths(lengths, 5, seed=0) == [9]
    assert sorted(padded_widths.batch_widths(lengths, 1, seed=0)) == sorted(lengths)
    # The fifth caption's partial batch is dropped, as a loader's drop_last does.
    assert len(padded_widths.batch_widths(lengths, 2, seed=1)) == 2


def write_captions(folder: Path, lang: str, captions: list[str]) -> None:
    with gzip.open(folder / f'train.{lang}.gz', 'wt', encoding='utf-8') as out:
        out.write('\n'.join(captions) + '\n')


def test_the_table_counts_widths_before_and_after_the_rounding(tmp_path, capsys):
    if not TOKENIZER.is_file():
        pytest.skip(f'XLM-R tokenizer not found at {TOKENIZER}')
    # CLIP's BPE: 'a' + ' a' * (n - 1) is n + 2 tokens. Batches of 2 in a shuffled order.
    write_captions(tmp_path, 'en', ['a' + ' a' * (n - 1) for n in (1, 2, 3, 10)])
    write_captions(tmp_path, 'de', ['ein Hund', 'zwei Hunde'])
    padded_widths.main(['--multi30k', str(tmp_path), '--languages', 'de', '--batch-size', '2',
                        '--multiple', '4', '--tokenizer-file', str(TOKENIZER)])
    rows = [line.split('|')[1:-1] for line in capsys.readouterr().out.splitlines()
            if line.startswith('| en') or line.startswith('| de')]
    german, english = ([cell.strip() for cell in row] for row in rows)
    assert german[:2] == ['de (XLM-R)', '1']
    # English: two batches, one holding the 12-token caption (width 12, already a multiple of
    # 4), the other two of the 3-, 4- and 5-token ones (width 4 or 5 -> 4 or 8).
    assert english[:4] == ['en (CLIP)', '2', '6.0', '2']
    assert english[5] == '2' and '12: 1' in english[7]


def test_a_missing_caption_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r'train\.de\.gz not found: pass --multi30k'):
        padded_widths.main(['--multi30k', str(tmp_path), '--languages', 'de'])


@pytest.mark.parametrize('option', ['--batch-size', '--multiple'])
def test_a_count_below_one_is_refused_before_the_captions_are_read(tmp_path, capsys, option):
    """``--batch-size 0`` failed once every caption was tokenised (range() of step 0)."""
    with pytest.raises(SystemExit):
        padded_widths.main(['--multi30k', str(tmp_path), option, '0'])
    assert f"{option}: '0' is no whole number >= 1" in capsys.readouterr().err
