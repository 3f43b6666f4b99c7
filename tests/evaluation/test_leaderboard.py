"""Leaderboard columns, Markdown/CSV tables and result files."""
from __future__ import annotations

import csv
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from xmr.evaluation.leaderboard import (
    EvaluationResult,
    caption_token_lines,
    column_legend,
    display_width,
    format_table,
    leaderboard_columns,
    leaderboard_markdown,
    leaderboard_table,
    load_result,
    mean_over_seeds,
    plain_metrics,
    save_result,
    write_csv,
)

MULTI_DATASET = {
    'multi30k/en/t2i_R@1': 60.0, 'multi30k/en/t2i_R@5': 80.0, 'multi30k/en/t2i_R@10': 90.0,
    'multi30k/en/AR': 80.0, 'multi30k/de/t2i_R@1': 30.0,
    'multi30k/de/AR': 50.0, 'multi30k/fr/AR': 45.5, 'multi30k/mAR': 47.75,
    'multi30k/rSum': 573.0,
    'msrvtt/en/t2i_R@1': 20.0, 'msrvtt/de/t2i_R@1': 10.0, 'msrvtt/de/t2i_MdR': 12.0,
    'msrvtt/t2v_R@1_sum': 10.0,
    'xtd/de/AR': 33.0, 'xtd/de/mean_R@1': 21.0, 'xtd/mAR': 33.0, 'xtd/mean_R@1': 21.0,
    'mAR': 42.0,
}


def test_format_table_pads_columns():
    assert format_table(['model', 'de'], [['a', '1.00'], ['longer', '-']]) == (
        '| model  | de   |\n'
        '|--------|------|\n'
        '| a      | 1.00 |\n'
        '| longer | -    |')


def test_format_table_pads_wide_and_combining_names_to_their_shown_width():
    """A Chinese row label shows two columns a character (多语言模型: 10, not len's 5); a
    combining accent and a zero-width joiner show none."""
    assert format_table(['model', 'zh'], [['多语言模型', '1.00'], ['en', '-']]) == (
        '| model      | zh   |\n'
        '|------------|------|\n'
        '| 多语言模型 | 1.00 |\n'
        '| en         | -    |')
    # a + combining acute (one column), a zero-width joiner (none).
    assert format_table(['m'], [['a\u0301\u200d']]) == '| m |\n|---|\n| a\u0301\u200d |'


def test_a_pipe_or_line_break_in_a_name_stays_inside_its_cell():
    """A model named 'a|b' (--name) split its row into one cell more than the header's."""
    assert format_table(['model', 'de'], [['a|b', '1.00'], ['c\nd', '-']]) == (
        '| model | de   |\n'
        '|-------|------|\n'
        '| a\\|b  | 1.00 |\n'
        '| c d   | -    |')


def test_format_table_pads_decomposed_hangul_as_the_syllables_it_shows():
    """Korean typed on macOS, or a model named by a file name there, is in jamo (NFD): '모델'
    is six code points that show as two syllables, four columns (the vowel and final jamo join
    the initial one, as combining marks do)."""
    decomposed = '\u1106\u1169\u1103\u1166\u11af'  # 모델 in jamo
    assert format_table(['model', 'ko'], [[decomposed, '1.00'], ['en', '-']]) == (
        '| model | ko   |\n'
        '|-------|------|\n'
        f'| {decomposed}  | 1.00 |\n'
        '| en    | -    |')


@pytest.mark.parametrize('syllable', [
    '\u1100\u1160',  # an initial and the vowel filler, the first vowel jamo
    '\u1100\ud7b0\ud7fb',  # an initial, a vowel and a final of Hangul Jamo Extended-B
    '\u1100\u1161\u11ff',  # the last final jamo of the Hangul Jamo block
])
def test_vowel_and_final_jamo_of_both_blocks_join_their_initial(syllable):
    # The initial is wide (2 columns); what joins it adds none.
    assert display_width(syllable) == 2


@pytest.mark.parametrize('text, width', [
    # A family, three wide emoji joined by ZWJs: one glyph, two columns (not 6).
    ('\U0001f468\u200d\U0001f469\u200d\U0001f467', 2),
    ('\U0001f44d\U0001f3fd', 2),  # thumbs up and a skin tone (both wide): one glyph (not 4)
    ('\u2764\ufe0f', 2),  # a heart (narrow) in emoji presentation, VS16 (not 1)
    ('1\ufe0f\u20e3', 2),  # keycap 1: digit, VS16, enclosing keycap (not 1)
    ('\U0001f3f3\ufe0f\u200d\U0001f308', 2),  # the rainbow flag (not 3)
    ('\U0001f1e9\U0001f1ea\U0001f1eb\U0001f1f7', 4),  # two flags: regional letters in pairs
    # हि न् दी: the vowel signs ि and ी (spacing marks, Mc) and the virama join their consonant
    ('\u0939\u093f\u0928\u094d\u0926\u0940', 3),
    # Khmer ភា សា ខ្ មែ រ: vowel signs ា and ែ (Mc), the coeng ្ (Mn) join theirs (not 8)
    ('\u1797\u17b6\u179f\u17b6\u1781\u17d2\u1798\u17c2\u179a', 5),
    ('\u4e2d\u6587', 4),  # 中文: East Asian wide
    ('e\u0301', 1),  # e and a combining acute
    ('\u0301x', 1),  # a mark with no base before it takes no column
])
def test_a_grapheme_cluster_takes_the_columns_of_its_first_character(text, width):
    """Widths worked by hand: a user-perceived character (base and what joins it) takes its
    base's columns, and two as an emoji sequence."""
    assert display_width(text) == width


def test_format_table_aligns_a_name_with_an_emoji_sequence():
    family = '\U0001f468\u200d\U0001f469\u200d\U0001f467'
    assert format_table(['model'], [[f'{family} ft'], ['en']]) == (
        '| model |\n'
        '|-------|\n'
        f'| {family} ft |\n'  # 2 + 3 columns, as 'model'
        '| en    |')


def test_columns_follow_each_datasets_headline():
    columns = leaderboard_columns(MULTI_DATASET)
    assert [(c.label, c.key) for c in columns] == [
        ('multi30k/en', 'multi30k/en/AR'), ('multi30k/de', 'multi30k/de/AR'),
        ('multi30k/fr', 'multi30k/fr/AR'), ('multi30k/mAR', 'multi30k/mAR'),
        # text->video: per-language R@1 and their sum (DASD Table 2)
        ('msrvtt/en', 'msrvtt/en/t2i_R@1'), ('msrvtt/de', 'msrvtt/de/t2i_R@1'),
        ('msrvtt/t2v_R@1_sum', 'msrvtt/t2v_R@1_sum'),
        # XTD10 few-shot reports mAR too; its published number is mean_R@1
        ('xtd/de', 'xtd/de/mean_R@1'), ('xtd/mean_R@1', 'xtd/mean_R@1'),
        ('mAR', 'mAR'),
    ]
    assert [c.kind for c in columns][-1] == 'overall'


def test_bare_single_dataset_keys():
    metrics = {'en/AR': 90.0, 'de/AR': 40.0, 'de/t2i_R@1': 20.0, 'mAR': 40.0, 'rSum': 240.0}
    assert [(c.label, c.kind) for c in leaderboard_columns(metrics)] == [
        ('en', 'language'), ('de', 'language'), ('mAR', 'summary')]


def test_table_unions_columns_and_marks_missing_values():
    first = EvaluationResult('static', {'de/AR': 40.0, 'mAR': 40.0})
    second = EvaluationResult('dasd', {'de/AR': 41.256, 'fr/AR': 39.0, 'mAR': 40.128})
    header, rows = leaderboard_table([first, second])
    assert header == ['model', 'de', 'fr', 'mAR']  # a later row's language before the summary
    assert rows == [['static', '40.00', '-', '40.00'], ['dasd', '41.26', '39.00', '40.13']]
    # Rows recording no languages are not said to average their columns.
    assert len(column_legend([first, second])) == 1
    first.extra['summary_languages'] = {'': ['de']}
    second.extra['summary_languages'] = {'': ['de', 'fr']}
    assert column_legend([first, second])[1] == (
        'mAR averages other languages per row: static over de; dasd over de, fr')


def test_the_legend_names_a_shown_language_the_summary_leaves_out():
    """The metric reports English (the source language) beside the target languages but leaves
    it out of mAR and the sums: a reader averaging the row's columns gets another number
    ((90 + 60 + 50) / 3 = 66.67, not mAR 55 = (60 + 50) / 2; 30 + 20 + 10, not the sum 30), so
    the legend names the languages tools/test.py recorded for each summary."""
    def result(name, metrics, recorded):
        return EvaluationResult(name, metrics, extra={'summary_languages': recorded})

    row = result('run', {'en/AR': 90.0, 'de/AR': 60.0, 'fr/AR': 50.0, 'mAR': 55.0},
                 {'': ['de', 'fr']})
    assert column_legend([row])[1:] == ['mAR is over de, fr; en: reported, not averaged']
    video = result('run', {'v/en/t2i_R@1': 30.0, 'v/de/t2i_R@1': 20.0, 'v/fr/t2i_R@1': 10.0,
                           'v/t2v_R@1_sum': 30.0}, {'v': ['de', 'fr']})
    assert column_legend([video])[1:] == ['v/t2v_R@1_sum is over de, fr; en: reported, not summed']
    # A summary over every column it stands beside, or none recorded, needs no line.
    everything = result('run', {'de/AR': 60.0, 'fr/AR': 50.0, 'mAR': 55.0}, {'': ['de', 'fr']})
    assert column_legend([everything]) == ['all columns: AR = mean of the recalls both ways; '
                                           'mAR = mean AR']
    assert len(column_legend([EvaluationResult('old', row.metrics)])) == 1
    # Rows over other languages are named row by row, without the left-out English.
    other = result('other', {'en/AR': 80.0, 'de/AR': 40.0, 'mAR': 40.0}, {'': ['de']})
    assert column_legend([row, other])[1:] == [
        'mAR averages other languages per row: run over de, fr; other over de']
    # Two rows of one name (a checkpoint tested again with other options) keep a line each.
    again = result('run', other.metrics, {'': ['de']})
    assert column_legend([row, again])[1:] == [
        'mAR averages other languages per row: run over de, fr; run over de']
    # A row that records none is not said to average its English column.
    old = EvaluationResult('old', row.metrics)
    assert column_legend([old, row])[1:] == [
        'mAR averages other languages per row: old over languages it does not record; '
        'run over de, fr']


def test_only_a_language_code_or_a_recorded_one_makes_a_key_a_language_column():
    """Datasets come in the order of their first key. XTD10's PECTVLM summary is named as a
    per-language statistic; coming first, it opens its own dataset, not the bare keys' one
    before it. A code the result records as a language (Ainu's ``ain``, registered by the run)
    is one, so a dataset reporting it alone and no summary keeps its column."""
    metrics = {'xtd10_pectvlm/mean_R@1': 2.5, 'xtd10_pectvlm/de/mean_R@1': 2.5,
               'de/AR': 5.0, 'mAR': 5.0}
    assert [c.key for c in leaderboard_columns(metrics)] == [
        'xtd10_pectvlm/de/mean_R@1', 'xtd10_pectvlm/mean_R@1', 'de/AR', 'mAR']
    ainu = {'mine/ain/AR': 41.0}
    assert [(c.key, c.kind) for c in leaderboard_columns(ainu, ['ain'])] == [
        ('mine/ain/AR', 'language')]
    assert leaderboard_columns(ainu) == []


def test_the_summary_languages_survive_the_result_file(tmp_path):
    recorded = {'multi30k': ['de', 'fr'], 'msrvtt': ['de']}
    save_result(tmp_path / 'r.json', EvaluationResult('r', MULTI_DATASET,
                                                      extra={'summary_languages': recorded}))
    loaded = load_result(tmp_path / 'r.json')
    assert loaded.summary_languages == recorded
    assert column_legend([loaded])[1] == 'multi30k/mAR is over de, fr; en: reported, not averaged'


def test_a_language_registered_where_the_result_was_written_keeps_its_column_where_not(
        tmp_path):
    """'ain' (Ainu: in neither ISO 639-1 nor FLORES-200) was registered by the run's
    custom_imports; `xmr test --compare` imports none, and the result records the code."""
    metrics = {'en/AR': 48.0, 'sw/AR': 47.0, 'ain/AR': 41.0, 'ain/t2i_R@10': 50.0,
               'mAR': 44.0}
    save_result(tmp_path / 'r.json', EvaluationResult(
        'r', metrics, test_sets=[dict(dataset='mine', split='test',
                                      languages=['en', 'sw', 'ain'])],
        extra={'summary_languages': {'': ['sw', 'ain']}}))
    loaded = load_result(tmp_path / 'r.json')
    assert leaderboard_table([loaded]) == (['model', 'en', 'sw', 'ain', 'mAR'],
                                           [['r', '48.00', '47.00', '41.00', '44.00']])
    assert column_legend([loaded]) == [
        'all columns: AR = mean of R@10 both ways; mAR = mean AR',
        'mAR is over sw, ain; en: reported, not averaged']
    assert [c.key for c in leaderboard_columns(metrics)] == ['en/AR', 'sw/AR', 'mAR']
    # Each dataset's columns, where another dataset comes first.
    two = {'xtd/en/AR': 50.0, 'xtd/de/AR': 45.0, 'xtd/mAR': 45.0,
           **{f'mine/{key}': value for key, value in metrics.items()}}
    assert [c.key for c in leaderboard_columns(two, loaded.languages)] == [
        'xtd/en/AR', 'xtd/de/AR', 'xtd/mAR', 'mine/en/AR', 'mine/sw/AR', 'mine/ain/AR',
        'mine/mAR']


def test_a_metric_ranked_otherwise_than_the_papers_is_named_below_the_table(tmp_path):
    """Grouped image->text (the DASD code's: R@5/10 as high or higher) and approximate search
    give other numbers than the exact standard ranking: a row beside a paper's must say so."""
    grouped = EvaluationResult('dasd-code', {'m/de/AR': 60.0, 'm/mAR': 60.0},
                               extra={'rankings': {'m': "i2t_mode='grouped'"}})
    save_result(tmp_path / 'g.json', grouped)
    exact = EvaluationResult('xmr', {'m/de/AR': 58.0, 'm/mAR': 58.0})
    legend = leaderboard_markdown([exact, load_result(tmp_path / 'g.json')]).split('\n\n')[-1]
    assert legend.splitlines()[-1] == (
        "- dasd-code: m ranked with i2t_mode='grouped', not the exact standard ranking of the "
        "papers' tables")
    assert 'xmr:' not in legend


def test_overall_column_stays_last_when_a_later_result_adds_it():
    single = EvaluationResult('one', {'a/de/AR': 1.0, 'a/mAR': 1.0})
    multi = EvaluationResult('two', {'a/de/AR': 2.0, 'a/mAR': 2.0, 'b/ja/AR': 4.0, 'b/mAR': 4.0,
                               'mAR': 3.0})
    header, rows = leaderboard_table([single, multi])
    assert header == ['model', 'a/de', 'a/mAR', 'b/ja', 'b/mAR', 'mAR']
    assert rows[0] == ['one', '1.00', '1.00', '-', '-', '-']


def test_one_dataset_under_the_multi_dataset_loop_shares_the_summary_column_of_a_plain_run():
    """MultiDatasetTestLoop over the test set alone reports its cross-dataset mAR under the
    bare key a plain TestLoop's run summarises its languages by: the table had two columns
    titled mAR (the CSV a repeated header), each row's number in both, and the legend said the
    second row averaged languages it does not record."""
    plain = EvaluationResult('plain', {'en/AR': 7.5, 'de/AR': 0.7, 'fr/AR': 0.5, 'mAR': 0.6},
                             extra={'summary_languages': {'': ['de', 'fr']}})
    multi = EvaluationResult('multi', {'s/en/AR': 7.5, 's/de/AR': 0.7, 's/fr/AR': 0.5,
                                       's/mAR': 0.6, 'mAR': 0.6},
                             extra={'summary_languages': {'s': ['de', 'fr']}})
    header, rows = leaderboard_table([plain, multi])
    assert header == ['model', 'en', 'de', 'fr', 'mAR', 's/en', 's/de', 's/fr', 's/mAR']
    assert rows[1] == ['multi', '-', '-', '-', '0.60', '7.50', '0.70', '0.50', '0.60']
    legend = column_legend([plain, multi])
    assert 'mAR is over de, fr; en: reported, not averaged' in legend
    assert not any('does not record' in line for line in legend)


def test_rows_summarising_a_dataset_differently_get_columns_titled_by_their_statistic():
    """A run scoring both directions (AR, mAR) beside one scoring text->image alone (R@1 and
    its sum) on the same dataset: two columns titled 'm/de' would hold AR and R@1 under one
    legend line, and the CSV would repeat a header."""
    both = EvaluationResult('both', {'m/de/t2i_R@1': 30.0, 'm/de/AR': 50.0, 'm/mAR': 50.0})
    one_way = EvaluationResult('t2i', {'m/de/t2i_R@1': 20.0, 'm/t2i_R@1_sum': 20.0})
    assert leaderboard_table([both, one_way]) == (
        ['model', 'm/de/AR', 'm/de/t2i_R@1', 'm/mAR', 'm/t2i_R@1_sum'],
        [['both', '50.00', '30.00', '50.00', '-'], ['t2i', '-', '20.00', '-', '20.00']])
    assert column_legend([both, one_way]) == ['m: AR = mean of R@1 both ways; mAR = mean AR',
                                              'm: text→image R@1 summed over the target '
                                              'languages']


@pytest.mark.parametrize('order', ['summed_first', 'unsummed_first'])
def test_a_row_without_a_summary_shares_the_columns_of_the_sum_of_its_statistic(order):
    """A text->video run beside an English-only run of the same gallery (t2i_R@1, no sum): both
    report v/en/t2i_R@1, which the text->video sum's language columns show. With the English
    row first, its columns were read as the text->image sum's: every column was titled by its
    key and the legend had a second line for v, 'no summary reported' beside the sum."""
    video = EvaluationResult('video', {'v/en/t2i_R@1': 30.0, 'v/de/t2i_R@1': 20.0,
                                       'v/t2v_R@1_sum': 20.0},
                             extra={'summary_languages': {'v': ['de']}})
    english = EvaluationResult('en', {'v/en/t2i_R@1': 40.0})
    rows = [video, english] if order == 'summed_first' else [english, video]
    header, table = leaderboard_table(rows)
    assert header == ['model', 'v/en', 'v/de', 'v/t2v_R@1_sum']
    assert {row[0]: row[1:] for row in table} == {'video': ['30.00', '20.00', '20.00'],
                                                  'en': ['40.00', '-', '-']}
    assert column_legend(rows) == ['v: text→video R@1 summed over the target languages',
                                   'v/t2v_R@1_sum is over de; en: reported, not summed']


def test_bare_keys_beside_prefixed_ones_are_not_called_all_columns():
    """CDDS's configs score the token ranking under bare keys beside pooled/...: the legend
    said 'all columns' of the bare ones, then described the others."""
    result = EvaluationResult('cdds', {'en/AR': 5.0, 'mAR': 5.0, 'pooled/en/AR': 6.0,
                                       'pooled/mAR': 6.0})
    assert column_legend([result]) == [
        'columns without a prefix: AR = mean of the recalls both ways; mAR = mean AR',
        'pooled: AR = mean of the recalls both ways; mAR = mean AR']


def test_a_prefixed_pectvlm_summary_is_no_language_and_the_legend_names_its_recalls():
    """XTD10's PECTVLM metric reports ``mean_R@1`` per language and as its summary, and its
    ``mAR`` averages R@1 alone (``recall_ks=(1,)``)."""
    pectvlm = {'xtd10_pectvlm/de/t2i_R@1': 2.0, 'xtd10_pectvlm/de/i2t_R@1': 3.0,
               'xtd10_pectvlm/de/mean_R@1': 2.5, 'xtd10_pectvlm/de/AR': 2.5,
               'xtd10_pectvlm/mean_R@1': 2.5, 'xtd10_pectvlm/mAR': 2.5}
    result = EvaluationResult('pectvlm', pectvlm)
    assert leaderboard_table([result]) == (
        ['model', 'xtd10_pectvlm/de', 'xtd10_pectvlm/mean_R@1'], [['pectvlm', '2.50', '2.50']])
    assert column_legend([result]) == ['xtd10_pectvlm: mean of t2i and i2t R@1 (XTD10, PECTVLM)']
    ar_only = EvaluationResult('ar', {k: v for k, v in pectvlm.items() if 'mean_R@1' not in k})
    assert column_legend([ar_only]) == [
        'xtd10_pectvlm: AR = mean of R@1 both ways; mAR = mean AR']
    # A dataset whose name begins another's (coco, cococn) reads its own recalls alone.
    two = EvaluationResult('two', {'coco/ja/t2i_R@1': 1.0, 'coco/ja/AR': 1.0, 'coco/mAR': 1.0,
                                   'cococn/zh/t2i_R@5': 2.0, 'cococn/zh/AR': 2.0,
                                   'cococn/mAR': 2.0})
    assert column_legend([two]) == ['coco: AR = mean of R@1 both ways; mAR = mean AR',
                                    'cococn: AR = mean of R@5 both ways; mAR = mean AR']


def test_a_datasets_legend_names_its_own_recalls_not_a_nested_or_prefixed_datasets():
    """Bare keys beside pooled/... (CDDS's configs), and a dataset beside its sub-prefix: each
    legend's R@K are those its own language keys report; the bare keys' legend read R@1/5,
    taking pooled's R@5 as its own."""
    result = EvaluationResult('cdds', {'en/t2i_R@1': 5.0, 'en/AR': 5.0, 'mAR': 5.0,
                                       'pooled/en/t2i_R@5': 6.0, 'pooled/en/AR': 6.0,
                                       'pooled/mAR': 6.0})
    assert column_legend([result]) == [
        'columns without a prefix: AR = mean of R@1 both ways; mAR = mean AR',
        'pooled: AR = mean of R@5 both ways; mAR = mean AR']
    nested = EvaluationResult('n', {'a/en/t2i_R@1': 5.0, 'a/en/AR': 5.0, 'a/mAR': 5.0,
                                    'a/b/en/t2i_R@5': 6.0, 'a/b/en/AR': 6.0, 'a/b/mAR': 6.0})
    assert column_legend([nested]) == ['a: AR = mean of R@1 both ways; mAR = mean AR',
                                       'a/b: AR = mean of R@5 both ways; mAR = mean AR']


def test_a_long_table_is_the_wide_one_transposed_a_row_per_language():
    """``layout='long'`` sets each language and summary in a row and each result in a column,
    the legend unchanged."""
    results = [EvaluationResult('a', {'de/AR': 50.0, 'fr/AR': 40.0, 'mAR': 45.0}),
               EvaluationResult('b', {'de/AR': 60.0, 'mAR': 60.0})]
    wide = leaderboard_markdown(results, 'wide').split('\n\n')
    long = leaderboard_markdown(results, 'long').split('\n\n')
    assert wide[1] == ('| model | de    | fr    | mAR   |\n'
                       '|-------|-------|-------|-------|\n'
                       '| a     | 50.00 | 40.00 | 45.00 |\n'
                       '| b     | 60.00 | -     | 60.00 |')
    assert long[1] == ('| language | a     | b     |\n'
                       '|----------|-------|-------|\n'
                       '| de       | 50.00 | 60.00 |\n'
                       '| fr       | 40.00 | -     |\n'
                       '| mAR      | 45.00 | 60.00 |')
    assert long[0] == wide[0] and long[2] == wide[2]
    with pytest.raises(ValueError, match="layout must be one of auto, wide, long, got 'tall'"):
        leaderboard_markdown(results, 'tall')


def test_auto_lays_out_long_a_table_of_more_languages_than_a_terminal_shows():
    """XTD10's 11 languages stay a row per model; 24 value columns are the most kept wide, so
    XTD200's 201 languages (and a table one column past the bound) come out a row per
    language."""
    from xmr.evaluation.leaderboard import WIDE_COLUMNS_AT_MOST

    def header(languages: int) -> str:
        codes = [f'l{index:03d}' for index in range(languages)]
        metrics = {**{f'{code}/AR': 1.0 for code in codes}, 'mAR': 1.0}
        test_set = {'dataset': 'xtd200', 'split': 'test', 'languages': codes}
        return leaderboard_markdown([EvaluationResult('run', metrics, test_sets=[test_set])]
                                    ).split('\n\n')[1]

    assert header(WIDE_COLUMNS_AT_MOST - 1).startswith('| model ')
    assert header(WIDE_COLUMNS_AT_MOST).startswith('| language ')
    assert header(201).count('\n') == 201 + 1 + 1


def test_markdown_has_table_and_legend():
    text = leaderboard_markdown([EvaluationResult('run', MULTI_DATASET)])
    heading, table, legend = text.split('\n\n')
    assert heading == 'test set: test set not recorded'
    assert table.splitlines()[0].startswith('| model | multi30k/en')
    assert table.splitlines()[2].startswith('| run   | 80.00')
    assert legend.splitlines() == [
        '- multi30k: AR = mean of R@1/5/10 both ways; mAR = mean AR',
        '- msrvtt: text→video R@1 summed over the target languages',
        '- xtd: mean of t2i and i2t R@1 (XTD10, PECTVLM)',
        "- mAR: over the languages each dataset's summary averages; AR = mean of R@1/5/10 "
        'both ways; mAR = mean AR',
    ]
    assert column_legend([EvaluationResult('r', {'de/AR': 1.0, 'mAR': 1.0})]) == [
        'all columns: AR = mean of the recalls both ways; mAR = mean AR']  # no R@K reported
    with pytest.raises(ValueError, match=r"results of \['r'\] hold no retrieval metric"):
        leaderboard_markdown([EvaluationResult('r', {'de/t2i_MdR': 3.0})])


def test_result_round_trip_and_csv(tmp_path):
    result = EvaluationResult('static (best)', {'de/AR': 40.0, 'mAR': 40.0}, config='c.py',
                              checkpoint='best.pth', test_sets=[MULTI30K_TEST],
                              extra={'command': 'tools/test.py c.py best.pth'},
                              config_resolved='/runs/c.py', checkpoint_resolved='/runs/best.pth')
    save_result(tmp_path / 'r.json', result)
    assert load_result(tmp_path / 'r.json') == result
    # A result of before the absolute paths were recorded: the paths as given alone.
    earlier = json.loads((tmp_path / 'r.json').read_text())
    del earlier['config_resolved'], earlier['checkpoint_resolved']
    (tmp_path / 'earlier.json').write_text(json.dumps(earlier))
    assert load_result(tmp_path / 'earlier.json') == replace(
        result, config_resolved=None, checkpoint_resolved=None)
    assert json.loads((tmp_path / 'r.json').read_text())['skipped_media'] == 0
    write_csv(tmp_path / 'r.csv', [result, EvaluationResult('other', {'mAR': 1.5, 'de/AR': 1.5,
                                                                'fr/AR': 0.25})])
    with open(tmp_path / 'r.csv', newline='', encoding='utf-8') as handle:
        assert list(csv.reader(handle)) == [['model', 'de', 'fr', 'mAR'],
                                            ['static (best)', '40.0', '', '40.0'],
                                            ['other', '1.5', '0.25', '1.5']]


@pytest.mark.parametrize(('text', 'message'), [
    (b'{"format": "xmr-test-result",\n "metrics": {"mAR": ' + b'9' * 5000 + b'}}',
     'not a JSON file Python reads: an integer of 5000 digits, more than the 4300 Python reads: '
     'write it as a string: line 2 column 21 (char 50)'),
    (b'{"format": "xmr-test-result",\n "extra": ' + b'[' * 100_000 + b']' * 100_000 + b'}',
     'not a JSON file Python reads: a value nesting arrays and objects 100001 levels deep, '
     "deeper than Python's JSON reader follows: line 2 column "),
    (b'{"format": "xmr-test-result",\n "name": "caf\xe9"}',
     "not UTF-8: invalid bytes b'\\xe9' on line 2, byte 43; save it as UTF-8"),
    (b'{"format": "xmr-test-result", "version": 1, "name": "run \\ud83d"}',
     "['name'] holds '\\ud83d' at character 4, half of a UTF-16 surrogate pair, which no "
     'UTF-8 text can hold: repair that text, or test the checkpoint again (tools/test.py)'),
], ids=['integer too long', 'nested too deep', 'not UTF-8', 'half an emoji'])
def test_a_result_python_cannot_read_or_print_is_named_with_the_fault_and_its_place(
        tmp_path, text, message):
    """Each escaped naming no file: a bare ValueError ('Exceeds the limit (4300 digits)'), a
    RecursionError, and a UnicodeEncodeError as tools/test.py --compare printed the table."""
    path = tmp_path / 'result.json'
    path.write_bytes(text)
    with pytest.raises(ValueError) as error:
        load_result(path)
    assert str(error.value).startswith(f'{path}: {message}'
                                       if not message.startswith('[') else f'{path}{message}')
    if 'nesting' in message:  # the deepest bracket: the document is the first level
        assert str(error.value).endswith('follows: line 2 column 100010 (char 100039)')


def test_bad_result_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match='missing.json'):
        load_result(tmp_path / 'missing.json')
    (tmp_path / 'log.json').write_text(json.dumps({'mAR': 1.0}))
    with pytest.raises(ValueError, match=r'log\.json: not an xmr test result'):
        load_result(tmp_path / 'log.json')
    (tmp_path / 'broken.json').write_text('{')
    with pytest.raises(ValueError, match=r'broken\.json: not a JSON file'):
        load_result(tmp_path / 'broken.json')
    (tmp_path / 'text.json').write_text(json.dumps(
        {'format': 'xmr-test-result', 'version': 1, 'metrics': {'mAR': 'high'}}))
    with pytest.raises(ValueError, match=r'text\.json: metrics must map keys to numbers'):
        load_result(tmp_path / 'text.json')
    (tmp_path / 'later.json').write_text(json.dumps(
        {'format': 'xmr-test-result', 'version': 2, 'metrics': {'mAR': 50.0}}))
    with pytest.raises(ValueError, match=r'later\.json: result version 2 is not supported '
                       r'\(this xmr reads version 1\)'):
        load_result(tmp_path / 'later.json')


def test_loaded_results_use_canonical_language_codes(tmp_path):
    from xmr.evaluation import EvaluationResult, load_result, save_result

    save_result(tmp_path / 'old.json', EvaluationResult('old', {
        'xtd10/jp/t2i_R@10': 40.0, 'nllb/swh_Latn/AR': 5.0, 'nllb/mAR': 5.0, 'AR': 1.0}))
    assert load_result(tmp_path / 'old.json').metrics == {
        'xtd10/ja/t2i_R@10': 40.0, 'nllb/sw/AR': 5.0, 'nllb/mAR': 5.0, 'AR': 1.0}


def test_a_result_recorded_with_old_codes_shares_the_table_of_its_test_set(tmp_path):
    """A result whose test set and summary languages were recorded as XTD10's ``jp`` lines up
    with today's ``ja`` one: one table, and no legend line saying ``ja`` is left out."""
    from xmr.evaluation import EvaluationResult, load_result, save_result

    metrics = {'xtd10/de/t2i_R@10': 60.0, 'xtd10/mean_t2i_R@10': 55.0}
    save_result(tmp_path / 'old.json', EvaluationResult(
        'old', {**metrics, 'xtd10/jp/t2i_R@10': 50.0},
        test_sets=[{'dataset': 'xtd10', 'split': 'test', 'languages': ['de', 'jp']}],
        extra={'summary_languages': {'xtd10': ['de', 'jp']}}))
    save_result(tmp_path / 'new.json', EvaluationResult(
        'new', {**metrics, 'xtd10/ja/t2i_R@10': 50.0},
        test_sets=[{'dataset': 'xtd10', 'split': 'test', 'languages': ['de', 'ja']}],
        extra={'summary_languages': {'xtd10': ['de', 'ja']}}))
    old = load_result(tmp_path / 'old.json')
    assert old.test_sets == [{'dataset': 'xtd10', 'split': 'test', 'languages': ['de', 'ja']}]
    assert old.summary_languages == {'xtd10': ['de', 'ja']}
    assert leaderboard_markdown([load_result(tmp_path / 'new.json'), old]).split('\n\n') == [
        'test set: xtd10 test (de, ja)',
        '| model | xtd10/de | xtd10/ja | xtd10/mean_t2i_R@10 |\n'
        '|-------|----------|----------|---------------------|\n'
        '| new   | 60.00    | 50.00    | 55.00               |\n'
        '| old   | 60.00    | 50.00    | 55.00               |',
        '- xtd10: text→image R@10 (XTD10, M-CLIP)']


MULTI30K_TEST = {'dataset': 'multi30k', 'split': 'test', 'languages': ['en', 'de', 'fr']}


def test_results_of_other_test_sets_get_their_own_tables():
    coco = {'dataset': 'mscoco', 'split': 'test', 'languages': ['en', 'ja', 'zh']}
    results = [EvaluationResult('a', {'de/AR': 50.0, 'mAR': 50.0}, test_sets=[MULTI30K_TEST]),
               EvaluationResult('b', {'ja/AR': 20.0, 'mAR': 20.0}, test_sets=[coco]),
               EvaluationResult('c', {'de/AR': 60.0, 'mAR': 60.0}, test_sets=[MULTI30K_TEST]),
               EvaluationResult('d', {'de/AR': 70.0, 'mAR': 70.0},
                                test_sets=[dict(MULTI30K_TEST, split='val')])]
    blocks = leaderboard_markdown(results).split('\n\n')
    assert blocks[0::3] == ['test set: multi30k test (de, en, fr)',
                            'test set: mscoco test (en, ja, zh)',
                            'test set: multi30k val (de, en, fr)']
    assert [line.split('|')[1].strip() for line in blocks[1].splitlines()[2:]] == ['a', 'c']
    assert [cell.strip() for cell in blocks[4].splitlines()[0].split('|')[1:-1]] == [
        'model', 'ja', 'mAR']


def test_results_of_other_galleries_of_one_test_set_get_their_own_tables():
    """COCO's test split scored on its 5K gallery, on its 1K folds and on the 1K file: one
    dataset, split and languages, so one table, where the folds' recalls (far higher) stood
    beside the 5K gallery's as if one model beat the other."""
    coco = {'dataset': 'coco', 'split': 'test', 'languages': ['en', 'ja']}
    whole = dict(coco, media=5000, galleries=[])
    results = [EvaluationResult('5k', {'ja/AR': 30.0, 'mAR': 30.0}, test_sets=[whole]),
               EvaluationResult('1k', {'ja/AR': 50.0, 'mAR': 50.0}, test_sets=[dict(
                   whole, galleries=['coco_1k_5fold: mean over its 5 folds'])]),
               EvaluationResult('1k file', {'ja/AR': 51.0, 'mAR': 51.0},
                                test_sets=[dict(whole, media=1000)]),
               EvaluationResult('5k again', {'ja/AR': 31.0, 'mAR': 31.0}, test_sets=[whole]),
               EvaluationResult('old', {'ja/AR': 32.0, 'mAR': 32.0}, test_sets=[coco])]
    blocks = leaderboard_markdown(results).split('\n\n')
    assert blocks[0::3] == [
        'test set: coco test (en, ja), 5,000 media',
        'test set: coco test (en, ja), 5,000 media, coco_1k_5fold: mean over its 5 folds',
        'test set: coco test (en, ja), 1,000 media',
        # Written before xmr recorded them: neither is known, so it is told apart too.
        'test set: coco test (en, ja)']
    assert [[line.split('|')[1].strip() for line in block.splitlines()[2:]]
            for block in blocks[1::3]] == [['5k', '5k again'], ['1k'], ['1k file'], ['old']]


def test_a_language_of_the_test_set_no_row_reports_is_named_below_the_table():
    """A metric given languages=['en', 'de', 'fr'] on Multi30K (which has cs) gave a table with
    no cs column and a legend saying mAR is over de and fr: nothing showed that cs, a language of
    DASD's mAR, was not scored. A row without it beside one with it shows '-' already."""
    held = dict(MULTI30K_TEST, languages=['en', 'de', 'fr', 'cs'])
    partial = EvaluationResult('partial', {'en/AR': 90.0, 'de/AR': 60.0, 'fr/AR': 50.0,
                                           'mAR': 55.0}, test_sets=[held])
    legend = leaderboard_markdown([partial]).split('\n\n')[2].splitlines()
    assert '- cs: in the test set, no row reports it' in legend
    fewer = replace(partial, metrics={'en/AR': 90.0, 'de/AR': 60.0, 'mAR': 60.0})
    assert '- cs, fr: in the test set, no row reports them' in (
        leaderboard_markdown([fewer]).split('\n\n')[2].splitlines())
    full = replace(partial, name='full', metrics={**partial.metrics, 'cs/AR': 40.0})
    assert not any('no row reports' in line
                   for line in leaderboard_markdown([partial, full]).splitlines())


def test_skipped_media_mark_the_row_and_are_counted_in_the_legend():
    result = EvaluationResult('run', {'multi30k/de/AR': 50.0, 'multi30k/mAR': 50.0,
                                      'multi30k/skipped_media': 3.0, 'xtd/skipped_media': 1.0,
                                      'xtd/de/mean_R@1': 2.0, 'xtd/mean_R@1': 2.0})
    _, table, legend = leaderboard_markdown([result]).split('\n\n')
    assert table.splitlines()[2].startswith('| run * | 50.00')
    assert legend.splitlines()[-1] == (
        "- run *: unreadable media skipped (on_corrupt='skip'), per metric: multi30k 3, xtd 1; "
        'its recalls are over smaller galleries')
    one = EvaluationResult('run', {'de/AR': 50.0, 'mAR': 50.0, 'skipped_media': 2.0})
    assert leaderboard_markdown([one]).splitlines()[-1] == (
        "- run *: 2 unreadable media skipped (on_corrupt='skip'); its recalls are over a "
        'smaller gallery')


def _counts(cut: int, captions: int, context: int, unknown: int | None = None,
            pieces: int = 20000) -> dict[str, int | None]:
    return {'captions': captions, 'context': context, 'cut': cut, 'pieces': pieces,
            'unknown': unknown}


def test_languages_whose_captions_the_context_cut_are_named_below_the_table():
    """tools/test.py records per test set how many captions of each language were longer than
    the model's context: the legend gives each cut language's share, a language none of whose
    captions was cut goes unnamed, and a row without any cut gets no line."""
    xtd10 = {'dataset': 'xtd10', 'split': 'test', 'languages': ['en', 'ru', 'zh'],
             'caption_token_counts': {'en': _counts(0, 1000, 77), 'ru': _counts(101, 1000, 77),
                                      'zh': _counts(48, 1000, 77)}}
    metrics = {'ru/t2i_R@10': 30.0, 'zh/t2i_R@10': 40.0, 'mean_t2i_R@10': 35.0}
    legend = leaderboard_markdown([EvaluationResult('clip', metrics, test_sets=[xtd10])])
    assert legend.splitlines()[-1] == (
        "- clip: captions longer than the model's text context (77 tokens), encoded cut (their "
        'recalls are of truncated text): ru 10.1% (101 of 1,000), zh 4.8% (48 of 1,000); '
        'tools/caption_tokens.py counts them')
    uncut = {**xtd10, 'caption_token_counts': {lang: _counts(0, 1000, 77)
                                              for lang in ('en', 'ru')}}
    assert 'tools/caption_tokens.py' not in leaderboard_markdown(
        [EvaluationResult('xlmr', metrics, test_sets=[uncut])])


def test_languages_whose_tokens_the_vocabulary_lacks_are_named_below_the_table():
    """A language a hundredth or more of whose tokens are unknown is named with that share; a
    covered language's odd symbol (below a hundredth), a byte-level vocabulary, which has no
    unknown token (``None``), and captions read as no pieces at all (CCLM's emptied ones) are
    not."""
    counts = {'en': _counts(0, 1000, 40, unknown=199, pieces=20000),
              'ko': _counts(0, 1000, 40, unknown=9980, pieces=20000),
              'ru': _counts(0, 1000, 40, unknown=200, pieces=20000),
              'zh': _counts(0, 1000, 40, unknown=None),
              'ja': _counts(0, 2, 40, unknown=0, pieces=0)}
    test_set = {'dataset': 'xtd10', 'split': 'test', 'languages': list(counts),
                'caption_token_counts': counts}
    result = EvaluationResult('demo', {'ko/AR': 1.0, 'mAR': 1.0}, test_sets=[test_set])
    assert leaderboard_markdown([result]).splitlines()[-1] == (
        '- demo: tokens its vocabulary lacks, read as unknown (the words they stand for are '
        'lost): ko 49.9%, ru 1.0% of the tokens; tools/caption_tokens.py counts them')


def test_cut_captions_of_several_sets_and_contexts_say_which_is_which():
    """With several test sets each set is named before its languages; where the cut languages'
    tokenizers hold other contexts (a source tower's 77, a branch's 40), each says its own."""
    sets = [{'dataset': 'xtd10', 'split': 'test', 'languages': ['en', 'de'],
             'caption_token_counts': {'en': _counts(3, 1000, 77), 'de': _counts(177, 1000, 40)}},
            {'dataset': 'multi30k', 'split': 'test', 'languages': ['de'],
             'caption_token_counts': {'de': _counts(1, 3, 40)}}]
    result = EvaluationResult('demo', {'xtd10/de/AR': 50.0, 'xtd10/mAR': 50.0,
                                       'multi30k/de/AR': 40.0, 'multi30k/mAR': 40.0},
                              test_sets=sets)
    assert leaderboard_markdown([result]).splitlines()[-1] == (
        "- demo: captions longer than the model's text context, encoded cut (their recalls are "
        'of truncated text): xtd10: de 17.7% (177 of 1,000 over 40 tokens), en 0.3% (3 of '
        '1,000 over 77 tokens); multi30k: de 33.3% (1 of 3 over 40 tokens); '
        'tools/caption_tokens.py counts them')


def test_a_legend_line_names_a_set_s_worst_languages_first_and_counts_the_rest():
    """XTD200's 201 languages through CLIP's BPE would make a line of thousands of characters:
    the ten largest shares are named, largest first, then how many more languages have any."""
    codes = [f'l{index:02d}' for index in range(12)]
    counts = {code: _counts(index + 1, 100, 77) for index, code in enumerate(codes)}
    test_set = {'dataset': 'xtd200', 'split': 'test', 'languages': codes,
                'caption_token_counts': counts}
    result = EvaluationResult('clip', {'l00/AR': 1.0, 'mAR': 1.0}, test_sets=[test_set])
    assert leaderboard_markdown([result]).splitlines()[-1] == (
        "- clip: captions longer than the model's text context (77 tokens), encoded cut (their "
        'recalls are of truncated text): ' + ', '.join(
            f'l{index:02d} {index + 1}.0% ({index + 1} of 100)' for index in range(11, 1, -1))
        + ', and 2 more; tools/caption_tokens.py counts them')


def test_caption_token_counts_are_read_back_with_canonical_codes_and_bad_ones_named(tmp_path):
    """A result file's counts come back as saved, XTD10's ``jp`` read as ``ja``; counts that
    are no counts (hand-edited, more cut than held, more unknown than read) are refused naming
    the file."""
    test_set = {'dataset': 'xtd10', 'split': 'test', 'languages': ['jp'],
                'caption_token_counts': {'jp': _counts(5, 1000, 77, unknown=3)}}
    save_result(tmp_path / 'old.json', EvaluationResult('old', {'jp/AR': 1.0, 'mAR': 1.0},
                                                        test_sets=[test_set]))
    assert load_result(tmp_path / 'old.json').test_sets == [
        {**test_set, 'languages': ['ja'],
         'caption_token_counts': {'ja': _counts(5, 1000, 77, unknown=3)}}]
    for bad in ({'ja': _counts(6, 5, 77)}, {'ja': {'cut': 1}}, ['ja'],
                {'ja': _counts(1, 5, 0)}, {'ja': {**_counts(1, 5, 77), 'cut': 0.5}},
                {'ja': _counts(1, 5, 77, unknown=21, pieces=20)},
                {'ja': _counts(1, 5, 77, unknown=-1)}, {'ja': _counts(1, 5, 77, pieces=-1)}):
        save_result(tmp_path / 'bad.json', EvaluationResult(
            'bad', {'ja/AR': 1.0}, test_sets=[{**test_set, 'caption_token_counts': bad}]))
        with pytest.raises(ValueError, match=r"bad\.json: a test set's caption_token_counts "
                           r'must map each language to counts of captions, context, cut, '
                           r'pieces, unknown'):
            load_result(tmp_path / 'bad.json')


def test_the_metrics_of_one_test_set_count_its_skipped_media_once(tmp_path):
    """CDDS's Flickr30K test scores one gallery twice (token score, pooled/): each metric
    reports its 2 skipped images, and the legend and the JSON said 4."""
    result = EvaluationResult('cdds', {'en/AR': 50.0, 'mAR': 50.0, 'skipped_media': 2.0,
                                       'pooled/en/AR': 40.0, 'pooled/mAR': 40.0,
                                       'pooled/skipped_media': 2.0},
                              test_sets=[{'dataset': 'flickr30k', 'split': 'test',
                                          'languages': ['en']}])
    assert result.skipped_media == 2
    assert leaderboard_markdown([result]).splitlines()[-1] == (
        "- cdds *: unreadable media skipped (on_corrupt='skip'), per metric: unprefixed 2, "
        'pooled 2; its recalls are over smaller galleries')
    save_result(tmp_path / 'r.json', result)
    assert json.loads((tmp_path / 'r.json').read_text())['skipped_media'] == 2


def test_a_text_to_text_result_is_tabulated_by_its_ar_per_language():
    metrics = {'multi30k/de/t2s_R@1': 80.0, 'multi30k/de/s2t_R@1': 82.0, 'multi30k/de/AR': 90.0,
               'multi30k/fr/AR': 70.0, 'multi30k/mAR': 80.0}
    assert [(c.label, c.key) for c in leaderboard_columns(metrics)] == [
        ('multi30k/de', 'multi30k/de/AR'), ('multi30k/fr', 'multi30k/fr/AR'),
        ('multi30k/mAR', 'multi30k/mAR')]
    one_way = {'de/t2s_R@1': 80.0, 'fr/t2s_R@1': 60.0, 't2s_R@1_sum': 140.0}
    assert [c.key for c in leaderboard_columns(one_way)] == ['de/t2s_R@1', 'fr/t2s_R@1',
                                                             't2s_R@1_sum']
    assert column_legend([EvaluationResult('run', metrics)]) == [
        'multi30k: AR = mean of R@1 both ways; mAR = mean AR']


def test_a_later_rows_language_stays_inside_its_dataset():
    first = EvaluationResult('one', {'multi30k/de/AR': 1.0, 'multi30k/mAR': 1.0,
                                     'coco/ja/AR': 2.0, 'coco/mAR': 2.0, 'mAR': 1.5})
    second = EvaluationResult('two', {'multi30k/de/AR': 3.0, 'multi30k/fr/AR': 5.0,
                                      'multi30k/mAR': 4.0, 'coco/ja/AR': 6.0, 'coco/mAR': 6.0,
                                      'mAR': 5.0})
    header, _ = leaderboard_table([first, second])
    assert header == ['model', 'multi30k/de', 'multi30k/fr', 'multi30k/mAR', 'coco/ja',
                      'coco/mAR', 'mAR']


def test_an_image_to_text_result_is_tabulated_by_its_r1_per_language():
    one_way = EvaluationResult('i2t', {'de/i2t_R@1': 60.0, 'de/i2t_R@5': 90.0,
                                       'fr/i2t_R@1': 20.0, 'i2t_R@1_sum': 80.0})
    assert leaderboard_table([one_way]) == (['model', 'de', 'fr', 'i2t_R@1_sum'],
                                            [['i2t', '60.00', '20.00', '80.00']])
    assert column_legend([one_way]) == ['all columns: image→text R@1 summed over the target '
                                        'languages']


def test_a_result_without_a_summary_shows_its_languages():
    """RetrievalMetric(languages=['en']) averages no target language: no mAR, AR per language."""
    english = EvaluationResult('en only', {'en/t2i_R@1': 80.0, 'en/i2t_R@1': 82.0,
                                           'en/AR': 90.0, 'rSum': 540.0})
    assert [(c.label, c.key, c.kind) for c in leaderboard_columns(english.metrics)] == [
        ('en', 'en/AR', 'language')]
    heading, table, legend = leaderboard_markdown([english]).split('\n\n')
    assert table.splitlines()[0].split('|')[1:3] == [' model   ', ' en    ']
    assert legend == '- all columns: AR per language (no summary reported)'


def test_saved_results_keep_numbers_as_floats_and_leave_out_flags_and_text(tmp_path):
    result = EvaluationResult('r', {'de/AR': 40, 'mAR': 40.5, 'converged': True,
                                    'note': 'fold 0 only'})
    save_result(tmp_path / 'r.json', result)
    saved = json.loads((tmp_path / 'r.json').read_text())['metrics']
    assert saved == {'de/AR': 40.0, 'mAR': 40.5}
    assert isinstance(saved['de/AR'], float)
    assert leaderboard_table([result]) == (['model', 'de', 'mAR'], [['r', '40.00', '40.50']])


def test_a_user_metrics_numpy_and_tensor_numbers_are_the_numbers_they_hold():
    """tools/test.py takes a metric's numpy scalar or one-element tensor as its number: left
    as it was, the table had no column for it and the result file no value."""
    metrics = {'de/AR': np.float32(40.5), 'fr/AR': torch.tensor([30.25]), 'en/AR': np.int64(7),
               'mAR': torch.tensor(35.375, dtype=torch.float64), 'ranks': torch.arange(3),
               'converged': np.bool_(True), 'note': 'fold 0'}
    plain = plain_metrics(metrics)
    assert plain == {'de/AR': 40.5, 'fr/AR': 30.25, 'en/AR': 7, 'mAR': 35.375}
    assert all(type(value) in (int, float) for value in plain.values())
    assert leaderboard_table([EvaluationResult('r', plain)])[1] == [
        ['r', '40.50', '30.25', '7.00', '35.38']]


def _seed_result(seed, de_ar, ablations=(), checkpoint='work/iter_900.pth'):
    return EvaluationResult(f'run seed {seed}', {'m30k/de/AR': de_ar, 'm30k/mAR': de_ar},
                            config='configs/dasd/dasd.py', checkpoint=checkpoint,
                            extra={'seed': seed, 'ablations': list(ablations)})


def test_the_seeds_of_one_run_are_one_row_of_mean_and_sample_std():
    runs = mean_over_seeds([_seed_result(2, 60.0), _seed_result(0, 10.0),
                            _seed_result(0, 15.0, ablations=['dasd/no-sc']),
                            _seed_result(1, 20.0)])
    assert [run.name for run in runs] == ['dasd (iter_900, seeds 0, 1, 2)',
                                          'dasd_no-sc (iter_900, seed 0)']
    # mean 30; deviations -20, -10, 30: sqrt((400 + 100 + 900) / 2) = sqrt(700)
    assert runs[0].metrics == {'m30k/de/AR': 30.0, 'm30k/mAR': 30.0}
    assert runs[0].seed_std['m30k/de/AR'] == pytest.approx(700 ** 0.5)
    assert runs[1].seed_std == {}
    header, rows = leaderboard_table(runs)
    assert rows == [['dasd (iter_900, seeds 0, 1, 2)', '30.00 ± 26.46', '30.00 ± 26.46'],
                    ['dasd_no-sc (iter_900, seed 0)', '15.00', '15.00']]
    assert any('mean ± sample standard deviation (n - 1)' in line
               for line in leaderboard_markdown(runs).splitlines())


def test_another_checkpoint_of_a_run_is_a_row_of_its_own():
    runs = mean_over_seeds([_seed_result(0, 10.0), _seed_result(1, 20.0),
                            _seed_result(0, 30.0, checkpoint='work/iter_450.pth')])
    assert [run.name for run in runs] == ['dasd (iter_900, seeds 0, 1)',
                                          'dasd (iter_450, seed 0)']


def _config_result(seed, de_ar, config, resolved=None):
    return replace(_seed_result(seed, de_ar), config=config, config_resolved=resolved)


def test_configs_of_one_name_in_other_folders_are_runs_of_their_own():
    """Grouped by the config's file name, the four seeds below were one row of 37.50 ± 27.54."""
    runs = mean_over_seeds([
        _config_result(0, 10.0, 'configs/lora/dasd.py', '/home/u/xmr/configs/lora/dasd.py'),
        _config_result(0, 50.0, 'configs/static/dasd.py', '/home/u/xmr/configs/static/dasd.py'),
        # The same file given from another folder: the run's second seed.
        _config_result(1, 20.0, '../xmr/configs/lora/dasd.py',
                       '/home/u/xmr/configs/lora/dasd.py'),
        _config_result(1, 70.0, 'configs/static/dasd.py', '/home/u/xmr/configs/static/dasd.py')])
    # Seeds 10, 20: mean 15, std sqrt((25 + 25) / 1); seeds 50, 70: mean 60, std sqrt(200).
    assert leaderboard_table(runs)[1] == [
        ['lora/dasd (iter_900, seeds 0, 1)', '15.00 ± 7.07', '15.00 ± 7.07'],
        ['static/dasd (iter_900, seeds 0, 1)', '60.00 ± 14.14', '60.00 ± 14.14']]


def test_results_that_record_no_resolved_config_are_grouped_by_the_path_given():
    runs = mean_over_seeds([_config_result(0, 10.0, 'a/dasd.py'),
                            _config_result(0, 50.0, 'b/x/dasd.py'),
                            _config_result(1, 20.0, './a/dasd.py'),
                            _config_result(0, 30.0, 'configs/other.py')])
    assert [(run.name, run.metrics['m30k/mAR']) for run in runs] == [
        ('a/dasd (iter_900, seeds 0, 1)', 15.0), ('x/dasd (iter_900, seed 0)', 50.0),
        ('other (iter_900, seed 0)', 30.0)]


@pytest.mark.parametrize('results, message', [
    ([_seed_result(0, 10.0, checkpoint='a/iter_900.pth'),
      _seed_result(0, 12.0, checkpoint='b/iter_900.pth')],
     r'^seed 0 of run seed 0 is in 2 results, of a/iter_900.pth, b/iter_900.pth: --over-seeds '
     r'averages results of one config, checkpoint name and test as seeds of one run; compare '
     r'each seed once$'),
    ([_seed_result(0, 10.0), EvaluationResult('old', {'m30k/mAR': 1.0})],
     r'^old: the result records no seed \(seed: None\)'),
    ([_seed_result(0, 10.0), EvaluationResult('run seed 1', {'m30k/mAR': 1.0},
                                              config='configs/dasd/dasd.py',
                                              checkpoint='work/iter_900.pth',
                                              extra={'seed': 1})],
     r'^run seed 0 and run seed 1, seeds of one run, report other metrics \(m30k/de/AR\)'),
    ([_seed_result(0, 10.0), replace(_seed_result(1, 12.0), extra={
        'seed': 1, 'ablations': [], 'summary_languages': {'m30k': ['de']}})],
     r'^run seed 0 and run seed 1, seeds of one run, were scored otherwise \(languages '
     r"averaged and rankings: \(\{\}, \{\}\) and \(\{'m30k': \['de'\]\}, \{\}\)\)"),
    ([_seed_result(0, 10.0), replace(_seed_result(1, 12.0), extra={
        'seed': 1, 'ablations': [], 'rankings': {'m30k': "i2t_mode='grouped'"}})],
     r'^run seed 0 and run seed 1, seeds of one run, were scored otherwise'),
])
def test_results_that_cannot_be_averaged_over_seeds_are_refused_by_name(results, message):
    with pytest.raises(ValueError, match=message):
        mean_over_seeds(results)


def test_rows_of_one_checkpoint_are_told_apart_by_their_result_files(tmp_path):
    """One checkpoint tested twice with other --cfg-options (grouped image->text), into two
    --out files, and compared: two rows of one label, and the legend's grouped-ranking line
    named that label, so neither said which row ranked otherwise."""
    def result(name='dasd (iter_9, seed 0)', **extra):
        return EvaluationResult(name, {'de/AR': 1.0, 'mAR': 1.0},
                                checkpoint='work_dirs/run/iter_9.pth', extra=extra)

    save_result(tmp_path / 'exact.json', result())
    (tmp_path / 'other').mkdir()
    save_result(tmp_path / 'other' / 'grouped.json', result(rankings={'': "i2t_mode='grouped'"}))
    rows = [load_result(tmp_path / 'exact.json'), load_result(tmp_path / 'other' / 'grouped.json'),
            result(), load_result(tmp_path / 'exact.json')]
    table = leaderboard_markdown(rows)
    assert [line.split('|')[1].strip() for line in table.splitlines()[4:8]] == [
        'dasd (iter_9, seed 0) [exact.json]', 'dasd (iter_9, seed 0) [grouped.json]',
        'dasd (iter_9, seed 0) [this test]', 'dasd (iter_9, seed 0) [exact.json]']
    assert ("- dasd (iter_9, seed 0) [grouped.json]: all columns ranked with "
            "i2t_mode='grouped'") in table
    # One file given twice is one result, shown twice alike.
    assert '[' not in leaderboard_markdown(rows[:1] * 2).splitlines()[4]


def test_a_sum_says_it_is_over_the_target_languages_where_the_result_records_none():
    """A result written before the summed languages were recorded showed 'text→video R@1,
    summed' beside an en column: the sum, 30 = de 20 + fr 10, is not the columns' 60."""
    old = EvaluationResult('old', {'v/en/t2i_R@1': 30.0, 'v/de/t2i_R@1': 20.0,
                                   'v/fr/t2i_R@1': 10.0, 'v/t2v_R@1_sum': 30.0})
    assert column_legend([old]) == ['v: text→video R@1 summed over the target languages']


def test_rows_of_one_name_are_told_apart_by_their_checkpoint_s_folders():
    """Two work dirs of one config name their checkpoints alike: their rows were labelled
    alike."""
    def result(checkpoint, name='dasd (iter_9, seed 0)'):
        return EvaluationResult(name, {'de/AR': 1.0, 'mAR': 1.0}, checkpoint=checkpoint)

    table = leaderboard_markdown([
        result('work_dirs/lr_high/run/iter_9.pth'), result('work_dirs/lr_low/run/iter_9.pth'),
        result('work_dirs/x/iter_9.pth', name='other (iter_9, seed 0)'),
        result('work_dirs/x/iter_9.pth', name='same (iter_9, seed 0)'),
        result('work_dirs/x/iter_9.pth', name='same (iter_9, seed 0)')])
    assert [line.split('|')[1].strip() for line in table.splitlines()[4:9]] == [
        'dasd (iter_9, seed 0) [lr_high/run]', 'dasd (iter_9, seed 0) [lr_low/run]',
        'other (iter_9, seed 0)', 'same (iter_9, seed 0)', 'same (iter_9, seed 0)']


def test_a_recall_of_zero_is_a_value_in_the_table_and_the_csv_not_a_missing_one(tmp_path):
    """A language the model cannot retrieve at all scores R@1 = 0: the table shows 0.00 and the
    CSV 0.0, where a language the row lacks shows '-' and an empty cell."""
    zero = EvaluationResult('untrained', {'de/AR': 0.0, 'fr/AR': 10.0, 'mAR': 5.0})
    partial = EvaluationResult('partial', {'de/AR': 20.0, 'mAR': 20.0})
    assert leaderboard_table([zero, partial])[1] == [['untrained', '0.00', '10.00', '5.00'],
                                                     ['partial', '20.00', '-', '20.00']]
    write_csv(tmp_path / 'r.csv', [zero, partial])
    with open(tmp_path / 'r.csv', newline='', encoding='utf-8') as handle:
        assert list(csv.reader(handle))[1:] == [['untrained', '0.0', '10.0', '5.0'],
                                                ['partial', '20.0', '', '20.0']]


def test_seeds_that_agree_show_a_deviation_of_zero_beside_their_mean():
    """Two seeds scoring 40 and 40 are a row over seeds whose deviation is 0: '40.00 ± 0.00',
    not '40.00', which reads as the row of one seed."""
    runs = mean_over_seeds([_seed_result(0, 40.0), _seed_result(1, 40.0)])
    assert leaderboard_table(runs)[1] == [
        ['dasd (iter_900, seeds 0, 1)', '40.00 ± 0.00', '40.00 ± 0.00']]


def test_a_row_over_seeds_records_its_seeds_in_order_and_no_single_seed():
    """The averaged result lists the seeds it is over (sorted, as its label) and drops the
    first seed's ``seed``: kept, the row would read as that one seed's result, and be averaged
    again as that seed."""
    run, = mean_over_seeds([_seed_result(2, 30.0), _seed_result(0, 10.0), _seed_result(1, 20.0)])
    assert run.extra['seeds'] == [0, 1, 2]
    assert 'seed' not in run.extra
    with pytest.raises(ValueError, match=r'records no seed \(seed: None\)'):
        mean_over_seeds([run])


def test_seeds_of_one_checkpoint_on_other_test_sets_are_runs_of_their_own():
    """Multi30K's test and val splits report the same keys: grouped by config and checkpoint
    alone, seed 0 on test (10) and seed 1 on val (30) were one row of 20.00 ± 14.14."""
    test = {'dataset': 'multi30k', 'split': 'test', 'languages': ['de']}
    runs = mean_over_seeds([replace(_seed_result(0, 10.0), test_sets=[test]),
                            replace(_seed_result(1, 30.0), test_sets=[dict(test, split='val')]),
                            replace(_seed_result(1, 20.0), test_sets=[test])])
    # test: seeds 10 and 20, mean 15, std sqrt((25 + 25) / 1) = 7.07; val: 30 alone.
    assert [(run.name, run.metrics['m30k/mAR']) for run in runs] == [
        ('dasd (iter_900, seeds 0, 1)', 15.0), ('dasd (iter_900, seed 1)', 30.0)]
    assert runs[0].seed_std['m30k/mAR'] == pytest.approx(50 ** 0.5)


def test_seeds_of_one_checkpoint_on_other_galleries_of_one_test_set_are_runs_of_their_own():
    test = {'dataset': 'coco', 'split': 'test', 'languages': ['de'], 'media': 5000}
    fold_zero = dict(test, galleries=['coco_1k_5fold: fold 0 of 5'])
    runs = mean_over_seeds([replace(_seed_result(0, 10.0), test_sets=[test]),
                            replace(_seed_result(1, 40.0), test_sets=[fold_zero]),
                            replace(_seed_result(1, 20.0), test_sets=[test]),
                            replace(_seed_result(0, 30.0), test_sets=[fold_zero])])
    assert [(run.name, run.metrics['m30k/mAR']) for run in runs] == [
        ('dasd (iter_900, seeds 0, 1)', 15.0), ('dasd (iter_900, seeds 0, 1)', 35.0)]


def test_a_bare_summary_over_no_language_keys_of_its_own_is_the_last_column():
    """The cross-dataset mAR of MultiDatasetValLoop beside bare keys of another statistic (an
    English-only text->image metric's en/t2i_R@1, no AR): the mAR is a last column, as the
    module says, not lost to a bare dataset shown by its R@1 without a summary."""
    metrics = {'x/de/AR': 40.0, 'x/mAR': 40.0, 'en/t2i_R@1': 80.0, 'mAR': 40.0}
    assert [(c.key, c.kind) for c in leaderboard_columns(metrics)] == [
        ('x/de/AR', 'language'), ('x/mAR', 'summary'), ('mAR', 'overall')]
    # A dataset reporting a summary and no language of it adds nothing, not a second mAR.
    assert [c.key for c in leaderboard_columns({'a/mAR': 1.0, 'mAR': 1.0})] == ['mAR']


def test_the_cross_dataset_summary_stays_last_when_a_later_result_adds_a_dataset():
    first = EvaluationResult('one', {'a/de/AR': 1.0, 'a/mAR': 1.0, 'mAR': 1.0})
    second = EvaluationResult('two', {'a/de/AR': 2.0, 'a/mAR': 2.0, 'b/ja/AR': 4.0,
                                      'b/mAR': 4.0, 'mAR': 3.0})
    assert leaderboard_table([first, second]) == (
        ['model', 'a/de', 'a/mAR', 'b/ja', 'b/mAR', 'mAR'],
        [['one', '1.00', '1.00', '-', '-', '1.00'], ['two', '2.00', '2.00', '4.00', '4.00',
                                                     '3.00']])


def test_a_text_under_a_language_key_is_no_column():
    """A metric of the user's may report a note under a per-language key: it has no number to
    show, so no column (formatting it as one stopped the table)."""
    metrics = {'de/AR': 'n/a', 'fr/AR': 50.0, 'mAR': 50.0}
    assert [c.key for c in leaderboard_columns(metrics)] == ['fr/AR', 'mAR']
    assert leaderboard_table([EvaluationResult('r', metrics)]) == (
        ['model', 'fr', 'mAR'], [['r', '50.00', '50.00']])


def test_only_the_cut_languages_contexts_count_and_large_counts_are_grouped():
    """DASD's source language is read by the source tower (77 tokens), the targets by the branch
    (64): with only target captions cut, the one context that cut is named once, and the counts
    are written with thousands separators (1,234 of 10,000 = 12.3%)."""
    counts = {'en': _counts(0, 10000, 77), 'de': _counts(1234, 10000, 64)}
    test_set = {'dataset': 'm', 'split': 'test', 'languages': ['en', 'de'],
                'caption_token_counts': counts}
    assert caption_token_lines('run', [test_set]) == [
        "run: captions longer than the model's text context (64 tokens), encoded cut (their "
        'recalls are of truncated text): de 12.3% (1,234 of 10,000); tools/caption_tokens.py '
        'counts them']


def test_a_metric_reporting_no_skipped_media_is_not_counted():
    """A metric recording 0 skipped media skipped none: the legend counts the one that did, as
    the count of a single metric."""
    result = EvaluationResult('run', {'de/AR': 50.0, 'mAR': 50.0, 'skipped_media': 0.0,
                                      'pooled/de/AR': 40.0, 'pooled/mAR': 40.0,
                                      'pooled/skipped_media': 3.0})
    assert result.skipped_by_metric == {'pooled': 3}
    assert leaderboard_markdown([result]).splitlines()[-1] == (
        "- run *: 3 unreadable media skipped (on_corrupt='skip'); its recalls are over a "
        'smaller gallery')


def test_a_user_metrics_array_of_several_numbers_is_left_out():
    """A numpy array of per-query ranks holds no single number (``item`` raises ValueError, as
    a tensor's raises RuntimeError): it is left out, not an error stopping the table."""
    assert plain_metrics({'ranks': np.arange(3), 'de/AR': np.float64(40.0)}) == {'de/AR': 40.0}


def test_a_leaderboard_of_no_result_is_refused():
    with pytest.raises(ValueError, match='a leaderboard needs at least one result'):
        leaderboard_markdown([])


def test_a_result_whose_test_sets_are_not_a_list_of_sets_is_refused(tmp_path):
    """A hand-edited test_sets ('multi30k') would be read as a list of letters and stop the
    table's heading."""
    (tmp_path / 'bad.json').write_text(json.dumps(
        {'format': 'xmr-test-result', 'version': 1, 'metrics': {'de/AR': 1.0, 'mAR': 1.0},
         'test_sets': 'multi30k'}))
    with pytest.raises(ValueError, match=r'bad\.json: test_sets must be a list of '
                       r'\{dataset, split, languages\}'):
        load_result(tmp_path / 'bad.json')


def test_a_result_without_a_name_is_labelled_by_its_file(tmp_path):
    (tmp_path / 'lora_iter_9_test.json').write_text(json.dumps(
        {'format': 'xmr-test-result', 'version': 1, 'metrics': {'de/AR': 1.0, 'mAR': 1.0}}))
    assert load_result(tmp_path / 'lora_iter_9_test.json').name == 'lora_iter_9_test'


def test_a_summarys_legend_counts_the_languages_of_its_own_statistic_alone():
    """Rows scoring one dataset by AR and by text->image R@1: mAR's legend names the AR columns
    it is over and the AR column it leaves out, not the R@1 column of the same language."""
    both = EvaluationResult('both', {'m/en/AR': 90.0, 'm/de/t2i_R@1': 30.0, 'm/de/AR': 50.0,
                                     'm/mAR': 50.0}, extra={'summary_languages': {'m': ['de']}})
    one_way = EvaluationResult('t2i', {'m/en/t2i_R@1': 70.0, 'm/de/t2i_R@1': 20.0,
                                       'm/t2i_R@1_sum': 20.0},
                               extra={'summary_languages': {'m': ['de']}})
    assert column_legend([both, one_way]) == [
        'm: AR = mean of R@1 both ways; mAR = mean AR',
        'm: text→image R@1 summed over the target languages',
        'm/mAR is over de; en: reported, not averaged',
        'm/t2i_R@1_sum is over de; en: reported, not summed']


def test_counts_of_a_language_every_caption_of_which_is_cut_or_unknown_are_read_back(tmp_path):
    """The bounds are inclusive: all 5 captions cut and all 20 tokens unknown (a script the
    vocabulary lacks altogether) are counts a result holds; a count of another field is not."""
    test_set = {'dataset': 'xtd10', 'split': 'test', 'languages': ['th'],
                'caption_token_counts': {'th': _counts(5, 5, 77, unknown=20, pieces=20)}}
    save_result(tmp_path / 'all.json', EvaluationResult('all', {'th/AR': 1.0, 'mAR': 1.0},
                                                        test_sets=[test_set]))
    loaded = load_result(tmp_path / 'all.json')
    assert loaded.test_sets == [test_set]
    assert caption_token_lines('all', loaded.test_sets) == [
        "all: captions longer than the model's text context (77 tokens), encoded cut (their "
        'recalls are of truncated text): th 100.0% (5 of 5); tools/caption_tokens.py counts them',
        'all: tokens its vocabulary lacks, read as unknown (the words they stand for are lost): '
        'th 100.0% of the tokens; tools/caption_tokens.py counts them']
    more = {'th': {**_counts(1, 5, 77), 'long': 1}}
    save_result(tmp_path / 'more.json', EvaluationResult(
        'more', {'th/AR': 1.0}, test_sets=[{**test_set, 'caption_token_counts': more}]))
    with pytest.raises(ValueError, match=r"more\.json: a test set's caption_token_counts"):
        load_result(tmp_path / 'more.json')


def test_rows_whose_summaries_average_other_recalls_each_name_theirs():
    """A run tested with recall_ks=[1, 5] beside one with the default: both rows were said to
    average R@1/5/10, which made one AR of two recalls and one of three look comparable."""
    default = EvaluationResult('default', {
        'm/de/t2i_R@1': 10.0, 'm/de/t2i_R@5': 20.0, 'm/de/t2i_R@10': 30.0, 'm/de/AR': 20.0,
        'm/mAR': 20.0})
    short = EvaluationResult('short', {'m/de/t2i_R@1': 10.0, 'm/de/t2i_R@5': 20.0,
                                       'm/de/AR': 15.0, 'm/mAR': 15.0})
    assert column_legend([default, short]) == [
        'm: AR = mean of R@1/5/10 both ways; mAR = mean AR (default); AR = mean of R@1/5 both '
        'ways; mAR = mean AR (short)']
    assert column_legend([default, default]) == [
        'm: AR = mean of R@1/5/10 both ways; mAR = mean AR']
    # A row reporting its summary without its recalls says nothing of them.
    bare = EvaluationResult('bare', {'m/de/AR': 15.0, 'm/mAR': 15.0})
    assert column_legend([default, bare]) == column_legend([default])
