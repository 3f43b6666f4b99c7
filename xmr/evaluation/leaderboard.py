"""Leaderboard tables of retrieval results, like the papers' per-language tables.

A result is the metric dict of one evaluation (one model or checkpoint). Its table columns are
found from the keys :class:`~xmr.evaluation.RetrievalMetric` writes: every dataset (metric
prefix) that reports a summary contributes one column per language, holding the per-language
statistic the summary is made of, then the summary itself:

===================  ======================  ==========================================
summary key          per-language column     table
===================  ======================  ==========================================
``mean_R@1``         ``{lang}/mean_R@1``     XTD10, PECTVLM convention
``mean_t2i_R@10``    ``{lang}/t2i_R@10``     XTD10, M-CLIP convention
``t2v_R@1_sum``      ``{lang}/t2i_R@1``      DASD Table 2 (Multi-MSRVTT)
``t2i_R@1_sum``      ``{lang}/t2i_R@1``      text→image R@1 only
``t2s_R@1_sum``      ``{lang}/t2s_R@1``      target→source text R@1 only (``text_to_text``)
``i2t_R@1_sum``      ``{lang}/i2t_R@1``      image→text R@1 only
``s2t_R@1_sum``      ``{lang}/s2t_R@1``      source→target text R@1 only (``text_to_text``)
``mAR``              ``{lang}/AR``           DASD Table 1 (Multi30K, MSCOCO); text_to_text
===================  ======================  ==========================================

A sum (``..._R@1_sum``) adds the per-language R@1 of the metric's target languages
(``RetrievalMetric.mean_languages``, by default every language but the source language ``en``),
as ``mAR`` averages them: the ``en`` column shown beside it is not in it (the legend names the
languages where the result records them).

A dataset reporting several summaries is shown by the first of this order (an XTD10 few-shot run
also reports ``mAR``; its published number is ``mean_R@1``). A dataset reporting no summary (a
metric scoring English alone, with no target language to average) shows its per-language
columns of the last statistic of this order it has, without a summary. A bare summary without
per-language keys of its own, such as the ``mAR`` across datasets of
:class:`~xmr.engine.eval_loops.MultiDatasetValLoop`, becomes a last column. In a table of
several results, each dataset's languages stand before its summary, and the legend says when its
rows average different languages; where rows summarise one dataset by different statistics
(``AR`` and ``t2i_R@1``), its language columns are titled by their full keys.

Results are saved as JSON (every metric, plus where it came from and which test sets it scored:
dataset, split, languages) and the table as CSV; :func:`load_result` reads a JSON back for
side-by-side comparisons, renaming language codes to the canonical ones (``jp`` -> ``ja``,
``swh_Latn`` -> ``sw``; ``xmr.datasets.languages``), and :func:`mean_over_seeds` makes the results
of one run's seeds one row of ``mean ± std``. Results of different test sets are never put
in one table: the Markdown has one table per test set. A row whose evaluation skipped unreadable
media (``on_corrupt='skip'``, the ``skipped_media`` metric) is marked ``*`` and the legend gives
the count (each metric's, where several report one: those of one test set report the same
media): its recalls are over a smaller gallery. A metric that ranked otherwise than the exact
standard protocol (the DASD code's grouped image→text, an approximate index, a re-ranked
shortlist; ``tools/test.py`` records it) gets a legend line saying so, and so do the languages of
the test set that no row reports (a row lacking one that another reports shows ``-``), the
languages whose captions the model's text context cut (CLIP's 77 tokens cut a tenth of XTD10's
Russian captions) and those whose tokens its vocabulary lacks (``tools/test.py`` counts both per
test set and language, as ``caption_token_counts``).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import unicodedata
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from xmr.ablations import ablation_suffix
from xmr.datasets.languages import is_language_alias, normalize_language
from xmr.fileio import atomic_write_text, atomic_write_texts
from xmr.json_files import load_json, lone_surrogate
from xmr.utils.counts import is_count
from xmr.utils.listing import repeated

__all__ = [
    'HEADLINES', 'LAYOUTS', 'RESULT_FORMAT', 'Headline', 'Column', 'EvaluationResult',
    'format_table', 'leaderboard_columns', 'leaderboard_table', 'leaderboard_markdown',
    'column_legend', 'mean_over_seeds', 'save_result', 'save_result_files', 'load_result',
    'write_csv', 'result_json', 'csv_text', 'plain_metrics', 'caption_token_lines',
]

RESULT_FORMAT = 'xmr-test-result'
RESULT_VERSION = 1
#: The metric ``RetrievalMetric`` reports when unreadable media were skipped.
SKIPPED_KEY = 'skipped_media'
#: Layouts of :func:`leaderboard_markdown`.
LAYOUTS = ('auto', 'wide', 'long')
#: Columns of values beyond which ``layout='auto'`` lays a table out long: DASD's and XTD10's
#: tables stay wide, Crossmodal-3600's 36 languages and XTD200's 201 go long.
WIDE_COLUMNS_AT_MOST = 24
#: The counts of each language of a test set's ``caption_token_counts``.
COUNTED = frozenset({'captions', 'context', 'cut', 'pieces', 'unknown'})
#: Languages of a test set a legend line names, the worst first: XTD200's 201 would make a
#: line of thousands of characters.
LANGUAGES_NAMED = 10
#: Share of a language's tokens unknown to the vocabulary from which the legend names it: below,
#: a covered language's rare characters (a symbol, an emoji).
UNKNOWN_SHARE_SHOWN = 0.01


class Headline(NamedTuple):
    """A summary key and the per-language statistic it summarises."""

    summary: str
    per_language: str
    meaning: str


HEADLINES: tuple[Headline, ...] = (
    Headline('mean_R@1', 'mean_R@1', 'mean of t2i and i2t R@1 (XTD10, PECTVLM)'),
    Headline('mean_t2i_R@10', 't2i_R@10', 'text→image R@10 (XTD10, M-CLIP)'),
    Headline('t2v_R@1_sum', 't2i_R@1', 'text→video R@1 summed over the target languages'),
    Headline('t2i_R@1_sum', 't2i_R@1', 'text→image R@1 summed over the target languages'),
    Headline('t2s_R@1_sum', 't2s_R@1',
             'target→source text R@1 summed over the target languages'),
    Headline('i2t_R@1_sum', 'i2t_R@1', 'image→text R@1 summed over the target languages'),
    Headline('s2t_R@1_sum', 's2t_R@1',
             'source→target text R@1 summed over the target languages'),
    Headline('mAR', 'AR', 'AR = mean of {recalls} both ways; mAR = mean AR'),
)


def display_width(text: str) -> int:
    """The terminal columns ``text`` takes, as a table pads it: the sum of its user-perceived
    characters' widths (grapheme clusters, :func:`_clusters`), as a terminal that draws a
    cluster in one cell advances (WezTerm, Ghostty, foot, Windows Terminal; the ``wcwidth``
    package agrees on emoji). A cluster takes its first character's columns: two for a wide or
    fullwidth (East Asian) one, two for an emoji sequence (a ZWJ family, a skin tone, a flag,
    a ``U+FE0F`` presentation such as a keycap), none for a mark with no base, one otherwise;
    what joins it (marks, Indic and Khmer vowel signs, ZWJ and what follows, Hangul vowel
    and final jamo) adds none. ``len`` counts a Chinese model name half as wide as it shows;
    a terminal that sums ``wcwidth(3)`` per code point (xterm, VTE) shows an emoji sequence
    and a spacing vowel sign (``Mc``) wider."""
    return sum(_cluster_width(cluster) for cluster in _clusters(text))


#: Zero-width joiner and emoji presentation selector (VS16).
_ZWJ, _VS16 = '\u200d', '\ufe0f'
#: Marks (nonspacing, enclosing, the spacing vowel signs) and format characters (ZWJ): they
#: join the character before them and take no column of their own.
_JOINING = ('Mn', 'Me', 'Mc', 'Cf')


def _clusters(text: str) -> Iterator[str]:
    """``text`` in grapheme clusters: a base and what joins it (:func:`_joins`), after UAX
    #29's extended clusters without its Indic conjunct rule (a virama ends its cluster)."""
    cluster = ''
    for char in text:
        if cluster and _joins(cluster, char):
            cluster += char
            continue
        if cluster:
            yield cluster
        cluster = char
    if cluster:
        yield cluster


def _joins(cluster: str, char: str) -> bool:
    """Whether ``char`` continues ``cluster``: a mark (``Mn``, ``Me``, the spacing vowel signs
    ``Mc``) or format character (``Cf``: ZWJ), an emoji skin-tone modifier, a Hangul vowel or
    final jamo, whatever a ZWJ joins, a flag's second regional indicator."""
    return (unicodedata.category(char) in _JOINING or _joining_jamo(char)
            or '\U0001f3fb' <= char <= '\U0001f3ff' or cluster[-1] == _ZWJ
            or (len(cluster) == 1 and _regional(cluster) and _regional(char)))


def _cluster_width(cluster: str) -> int:
    first = cluster[0]
    if unicodedata.category(first) in _JOINING:
        return 0  # a mark or joiner with no base before it
    wide = (unicodedata.east_asian_width(first) in ('W', 'F') or _VS16 in cluster
            or (_regional(first) and len(cluster) > 1 and _regional(cluster[1])))
    return 2 if wide else 1


def _regional(char: str) -> bool:
    """A regional indicator letter: two of them are one flag."""
    return '\U0001f1e6' <= char <= '\U0001f1ff'


def _joining_jamo(char: str) -> bool:
    """A Hangul medial vowel or final consonant (Jungseong, Jongseong), in both jamo blocks."""
    return '\u1160' <= char <= '\u11ff' or '\ud7b0' <= char <= '\ud7ff'


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table whose columns are padded to a common width on a terminal
    (:func:`display_width`).

    Args:
        header: column titles.
        rows: the cells of each row, as many as ``header``.

    Returns:
        The table, one line per row, without a final newline.
    """
    header = [_markdown_cell(cell) for cell in header]
    rows = [[_markdown_cell(cell) for cell in row] for row in rows]
    widths = [max(display_width(cell) for cell in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return '| ' + ' | '.join(c + ' ' * (w - display_width(c))
                                 for c, w in zip(cells, widths)) + ' |'

    return '\n'.join([line(header), '|' + '|'.join('-' * (w + 2) for w in widths) + '|',
                      *(line(row) for row in rows)])


def _markdown_cell(cell: Any) -> str:
    """``cell`` as one Markdown table cell: a ``|`` in a model's name (``--name 'a|b'``) would
    end the cell and a line break the row, so the one is escaped and the other a space."""
    return ' '.join(str(cell).splitlines()).replace('|', '\\|')


@dataclass(frozen=True)
class Column:
    """One leaderboard column.

    Attributes:
        label: the column title (``multi30k/de``, ``multi30k/mAR``, ``mAR``).
        key: the metric key whose value the column shows.
        group: the metric prefix the column belongs to (``''`` for bare keys).
        headline: the summary that decided the column.
        kind: ``'language'``, ``'summary'`` (of its dataset) or ``'overall'`` (across
            datasets).
    """

    label: str
    key: str
    group: str
    headline: Headline
    kind: str


@dataclass
class EvaluationResult:
    """The metrics of one evaluated model, with where they came from.

    Attributes:
        name: row label (model or checkpoint).
        metrics: the metric dict of the evaluation.
        config: the config file evaluated, as given (relative to where ``tools/test.py`` ran):
            what a table shows.
        checkpoint: the checkpoint evaluated, as given.
        config_resolved: the config file's absolute path, symbolic links resolved: the file a
            result names read from anywhere else (``None`` in results written before xmr
            recorded it).
        checkpoint_resolved: the checkpoint's, likewise.
        test_sets: each evaluated set as ``{'dataset', 'split', 'languages'}`` (empty when not
            recorded, as in results written before xmr recorded them).
        extra: anything else to keep (command line, date).
        source: the result file it was read from (:func:`load_result`), which tells apart
            rows of one label and checkpoint (one checkpoint tested with other options into
            two ``--out`` files); ``None`` for a result made in this process. Neither written
            nor compared.
    """

    name: str
    metrics: dict[str, float]
    config: str | None = None
    checkpoint: str | None = None
    test_sets: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    config_resolved: str | None = None
    checkpoint_resolved: str | None = None
    # Where it was read, not what it holds: a result equals itself read from another place.
    source: str | None = field(default=None, compare=False)

    @property
    def skipped_by_metric(self) -> dict[str, int]:
        """Per metric prefix (``''`` for bare keys) that reports some, the media its gallery
        lacks as unreadable (``on_corrupt='skip'``): each metric of a test set reports the
        set's."""
        return {key.rpartition('/')[0]: int(value) for key, value in self.metrics.items()
                if key.rpartition('/')[2] == SKIPPED_KEY and value}

    @property
    def skipped_media(self) -> int:
        """The most media one of its galleries lacks as unreadable (0: none). Not a sum: the
        metrics of one test set (CDDS's token score and ``pooled/``) each report its skipped
        media, and their sum counted them once per metric."""
        return max(self.skipped_by_metric.values(), default=0)

    @property
    def summary_languages(self) -> dict[str, list[str]]:
        """Per metric prefix (``''`` for bare keys), the languages its summaries (``mAR``, the
        sums) are over, as ``tools/test.py`` records them under ``extra['summary_languages']``;
        empty when not recorded."""
        recorded = self.extra.get('summary_languages')
        return recorded if isinstance(recorded, dict) else {}

    @property
    def languages(self) -> frozenset[str]:
        """The language codes recorded beside its metrics (its test sets', its summaries'):
        a language registered where it was evaluated (``register_language``) is one in its
        columns wherever it is read, registered there or not."""
        recorded = [*(ts.get('languages') or [] for ts in self.test_sets),
                    *self.summary_languages.values()]
        return frozenset(code for codes in recorded if isinstance(codes, list)
                         for code in codes if isinstance(code, str))

    @property
    def seed_std(self) -> dict[str, float]:
        """Per metric, its standard deviation over the seeds this result averages
        (:func:`mean_over_seeds`); empty for the result of one run."""
        recorded = self.extra.get('seed_std')
        return recorded if isinstance(recorded, dict) else {}

    @property
    def rankings(self) -> dict[str, str]:
        """Per metric prefix, a ranking other than the exact standard one (``i2t_mode='grouped'``,
        an approximate search index, token re-ranking), as ``tools/test.py`` records it under
        ``extra['rankings']``; empty when every metric ranked exactly or none was recorded."""
        recorded = self.extra.get('rankings')
        return recorded if isinstance(recorded, dict) else {}

    def test_set_label(self) -> str:
        """``multi30k test (cs, de, en, fr), 1,000 media``, one per set, with the galleries its
        metrics rank where not the whole set (``coco test (en), 5,000 media, coco_1k_5fold: fold
        0 of 5``), or a note that none was recorded. Results written before xmr recorded the
        media count and galleries (2026-12-07) have neither."""
        if not self.test_sets:
            return 'test set not recorded'
        return '; '.join(map(_test_set_label, self.test_sets))


def _test_set_label(test_set: Mapping[str, Any]) -> str:
    """One set's part of :meth:`EvaluationResult.test_set_label`."""
    # Sorted: the label groups results into tables, whatever order each listed its languages.
    parts = [f"{test_set.get('dataset')} {test_set.get('split')} "
             f"({', '.join(sorted(test_set.get('languages') or []))})"]
    if is_count(test_set.get('media')):
        parts.append(f"{test_set['media']:,} media")
    galleries = test_set.get('galleries')
    return ', '.join(parts + ([str(text) for text in galleries]
                              if isinstance(galleries, list) else []))


def leaderboard_columns(metrics: Mapping[str, Any], languages: Collection[str] = ()
                        ) -> list[Column]:
    """The table columns of one metric dict (see the module docstring for the rules).

    Args:
        metrics: ``{key: value}`` as returned by the validation or test loop.
        languages: codes that are languages besides those this process knows
            (:attr:`EvaluationResult.languages`).

    Returns:
        Per dataset (in key order): its per-language columns, then its summary; a bare
        cross-dataset summary last.
    """
    keys = [key for key, value in metrics.items() if _is_number(value)]
    statistics = {h.per_language for h in HEADLINES}
    groups: list[str] = []
    for key in keys:
        group, _, name = key.rpartition('/')
        parent, _, lang = group.rpartition('/')
        if name in statistics and _is_language(lang, languages):
            group = parent
        elif not any(name == h.summary for h in HEADLINES):
            continue
        if group not in groups:
            groups.append(group)
    columns: list[Column] = []
    overall: list[Column] = []
    for group in groups:
        chosen = _dataset_headline(metrics, keys, group, languages)
        if chosen is not None:
            headline, reported, summary_key = chosen
            columns.extend(Column(_join(group, lang), _join(group, lang, headline.per_language),
                                  group, headline, 'language') for lang in reported)
            if summary_key is not None:
                columns.append(Column(summary_key, summary_key, group, headline, 'summary'))
        elif group == '':
            overall.extend(Column(h.summary, h.summary, '', h, 'overall') for h in HEADLINES
                           if h.summary in metrics)
    return columns + overall


def _dataset_headline(metrics: Mapping[str, Any], keys: Sequence[str], group: str,
                      known: Collection[str]) -> tuple[Headline, list[str], str | None] | None:
    """The headline a dataset's columns follow, its languages and its summary key.

    The first headline whose summary and per-language statistic the dataset reports; for a
    dataset reporting no summary at all, the last headline whose statistic it reports (``AR``
    before the single recalls), with no summary column.
    """
    reported = [(headline, languages) for headline in HEADLINES
                if (languages := _languages(keys, group, headline.per_language, known))]
    for headline, languages in reported:
        if _join(group, headline.summary) in metrics:
            return headline, languages, _join(group, headline.summary)
    if reported and not any(_join(group, h.summary) in metrics for h in HEADLINES):
        headline, languages = reported[-1]
        return headline, languages, None
    return None


def leaderboard_table(results: Sequence[EvaluationResult]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a leaderboard: one row per result, the union of their columns.

    Values are shown with two decimals, a row over seeds (:func:`mean_over_seeds`) as
    ``mean ± std``; a column a result lacks shows ``-``.
    """
    columns = _union_columns(results)
    header = ['model', *(column.label for column in columns)]
    rows = [[result.name + (' *' if result.skipped_media else ''),
             *(_cell(result.metrics.get(column.key), result.seed_std.get(column.key))
               for column in columns)]
            for result in results]
    return header, rows


def column_legend(results: Sequence[EvaluationResult]) -> list[str]:
    """One line per dataset saying which statistic its columns show, and which languages each
    row's summary averages where the rows differ or a language shown is left out of it."""
    lines, seen = [], set()
    columns = _union_columns(results)
    # Bare keys are every column only when no dataset has a prefix (CDDS's configs put the
    # token ranking's bare keys beside pooled/...).
    bare = 'all columns' if all(c.group == '' for c in columns) else 'columns without a prefix'
    for column in columns:
        if column.kind == 'overall':
            lines.append(f"{column.label}: over the languages each dataset's summary averages; "
                         f'{_meaning(column, results)}')
        elif (column.group, column.headline) not in seen:
            seen.add((column.group, column.headline))
            name = column.group or bare
            if any(c.kind == 'summary' and (c.group, c.headline) == (column.group,
                                                                     column.headline)
                   for c in columns):
                lines.append(f'{name}: {_meaning(column, results)}')
            else:
                lines.append(f'{name}: {column.headline.per_language} per language (no summary '
                             'reported)')
        if column.kind == 'summary':
            lines.extend(_summary_languages(column, columns, results))
    return lines


def _meaning(column: Column, results: Sequence[EvaluationResult]) -> str:
    """The headline's meaning, its ``{recalls}`` the ``R@K`` the rows of ``column``'s dataset
    report (``R@1/5/10``; ``R@1`` for PECTVLM's XTD10 ``mAR``); an ``'overall'`` column's are
    those of every dataset. Rows whose summaries average other recalls (a test run with
    ``recall_ks=[1, 5]`` beside one with the default) each get theirs, naming the rows."""
    summarised = [result for result in results if column.key in result.metrics] or results
    by_recalls: dict[str, list[str]] = {}
    for result in summarised:
        recalls = _recalls(column, result)
        if recalls is not None:  # a row reporting no R@K says nothing of its summary's
            by_recalls.setdefault(recalls, []).append(result.name)
    if len(by_recalls) <= 1:
        return column.headline.meaning.format(recalls=next(iter(by_recalls), 'the recalls'))
    return '; '.join(f"{column.headline.meaning.format(recalls=recalls)} ({', '.join(names)})"
                     for recalls, names in by_recalls.items())


def _recalls(column: Column, result: EvaluationResult) -> str | None:
    """``R@1/5/10``: the ``R@K`` that ``result`` reports in ``column``'s dataset (every
    dataset's for an ``'overall'`` column); ``None`` where it reports none."""
    # A language key is {group}/{lang}/{statistic}: matching the group whole keeps the bare
    # keys (group '') and a dataset 'a' from reading the recalls of 'pooled' or 'a/b'.
    ks = sorted({int(key.rpartition('@')[2]) for key in result.metrics
                 if _recall_k(key, result.languages) and (column.kind == 'overall'
                                        or '/'.join(key.split('/')[:-2]) == column.group)})
    return 'R@' + '/'.join(map(str, ks)) if ks else None


def _recall_k(key: str, known: Collection[str]) -> bool:
    """Whether ``key`` is a language's ``t2i_R@K`` (``t2s_R@K`` text to text: the K a dataset's
    AR averages)."""
    parts = key.split('/')
    direction, _, k = parts[-1].partition('_R@')
    return (len(parts) >= 2 and _is_language(parts[-2], known) and direction in ('t2i', 't2s')
            and k.isdigit())


def _summary_languages(summary: Column, columns: Sequence[Column],
                       results: Sequence[EvaluationResult]) -> list[str]:
    """A legend line naming the languages ``summary`` is made of, when they are not simply the
    language columns beside it (a source language is reported but left out) or the rows differ.

    Each row is its own entry, so that two rows of one name keep theirs; a row that records no
    languages (a result written before xmr recorded them) is said to be unknown, not counted as
    averaging every column."""
    rows = []  # (name, columns reported, columns averaged or None: not recorded)
    for result in results:
        if summary.key in result.metrics:
            reported = [c for c in columns if c.group == summary.group
                        and c.headline == summary.headline
                        and c.kind == 'language' and c.key in result.metrics]
            recorded = result.summary_languages.get(summary.group)
            if not reported:  # its value there is a cross-dataset summary of other columns
                continue
            rows.append((result.name, reported, None if recorded is None else
                         [c for c in reported if _language(c) in recorded]))
    if any(chosen is not None for _, _, chosen in rows) and len(
            {None if chosen is None else tuple(c.label for c in chosen)
             for _, _, chosen in rows}) > 1:
        return [f'{summary.label} averages other languages per row: ' + '; '.join(
            f'{name} over ' + ('languages it does not record' if chosen is None
                               else ', '.join(_language(c) for c in chosen))
            for name, _, chosen in rows)]
    if not rows or rows[0][2] is None:
        return []
    _, reported, chosen = rows[0]
    left_out = [c for c in reported if c not in chosen]
    if not left_out:
        return []
    verb = 'summed' if summary.headline.summary.endswith('_sum') else 'averaged'
    return [f'{summary.label} is over {", ".join(_language(c) for c in chosen)}; '
            f'{", ".join(_language(c) for c in left_out)}: reported, not {verb}']


def _language(column: Column) -> str:
    """The language of a ``'language'`` column: its key is ``{group}/{lang}/{statistic}``."""
    return column.key.split('/')[-2]


def leaderboard_markdown(results: Sequence[EvaluationResult], layout: str = 'auto') -> str:
    """The Markdown leaderboard, one table per test set, each followed by its legend.

    Each table is headed by its test set (dataset, split, languages); results that record
    different test sets, or none, never share a table.

    Args:
        results: the rows.
        layout: one of :data:`LAYOUTS`: ``'wide'``, a row per result and a column per language
            and summary, as the papers' tables; ``'long'``, the same transposed, a row per
            language and summary and a column per result, which a terminal shows for the 201
            languages of XTD200; ``'auto'``, long for a table of more than
            :data:`WIDE_COLUMNS_AT_MOST` columns of values, else wide.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if not results:
        raise ValueError('a leaderboard needs at least one result')
    groups: dict[str, list[EvaluationResult]] = {}
    for result in _told_apart(results):
        groups.setdefault(result.test_set_label(), []).append(result)
    return '\n\n'.join(f'test set: {label}\n\n{_markdown_table(group, layout)}'
                        for label, group in groups.items())


def _markdown_table(results: Sequence[EvaluationResult], layout: str) -> str:
    header, rows = leaderboard_table(results)
    if len(header) == 1:
        raise ValueError(f'the results of {[r.name for r in results]} hold no retrieval metric '
                         f'({", ".join(h.per_language for h in HEADLINES)} per language, or '
                         f'{", ".join(h.summary for h in HEADLINES)}); nothing to tabulate')
    if layout == 'long' or (layout == 'auto' and len(header) - 1 > WIDE_COLUMNS_AT_MOST):
        header, *rows = [list(column) for column in zip(header, *rows)]
        header[0] = 'language'  # and each summary, in the rows of the wide table's columns
    lines = column_legend(results) + _unreported_languages(results) + [
        _skipped_line(result) for result in results if result.skipped_media] + [
        line for result in results
        for line in caption_token_lines(result.name, result.test_sets)]
    if any(result.seed_std for result in results):
        lines.append('a row over seeds: mean ± sample standard deviation (n - 1) of each value '
                     'over the seeds it names')
    lines += [f'{result.name}: {prefix or "all columns"} ranked with {ranking}, not the exact '
              'standard ranking of the papers\' tables' for result in results
              for prefix, ranking in result.rankings.items()]
    legend = '\n'.join(f'- {line}' for line in lines)
    return f'{format_table(header, rows)}\n\n{legend}'


def _unreported_languages(results: Sequence[EvaluationResult]) -> list[str]:
    """A legend line naming the languages of the table's test set that no column shows (a
    metric's ``languages`` leaving one out, a text gallery's source language): no row shows
    ``-`` for them, and the heading alone listed them."""
    held = {code for result in results for test_set in result.test_sets
            for code in test_set.get('languages') or [] if isinstance(code, str)}
    shown = {_language(column) for column in _union_columns(results) if column.kind == 'language'}
    missing = sorted(held - shown)
    return [f"{', '.join(missing)}: in the test set, no row reports "
            f"{'it' if len(missing) == 1 else 'them'}"] if missing else []


def _skipped_line(result: EvaluationResult) -> str:
    """The legend line of a row whose galleries lack unreadable media: the count, or with
    several metrics each metric's (those of one test set report the same media)."""
    counts = result.skipped_by_metric
    if len(counts) == 1:
        return (f"{result.name} *: {result.skipped_media} unreadable media skipped "
                "(on_corrupt='skip'); its recalls are over a smaller gallery")
    each = ', '.join(f'{prefix or "unprefixed"} {count}' for prefix, count in counts.items())
    return (f"{result.name} *: unreadable media skipped (on_corrupt='skip'), per metric: "
            f'{each}; its recalls are over smaller galleries')


def caption_token_lines(name: str, test_sets: Sequence[dict[str, Any]]) -> list[str]:
    """The legend lines, each beginning with ``name`` (a result's, ``validation``), of
    ``test_sets`` (a result's, :func:`~xmr.evaluation.evaluated_sets.evaluated_sets`) that hold
    captions longer than the model's text context, or tokens its vocabulary lacks, as each set's
    ``caption_token_counts`` counts them: the languages with any captions cut, and those with a
    share of unknown tokens of :data:`UNKNOWN_SHARE_SHOWN` or more, each set's worst first
    (:func:`_worst_first`); none where no language is either."""
    counts = [test_set.get('caption_token_counts') or {} for test_set in test_sets]
    contexts = {count['context'] for per_lang in counts for count in per_lang.values()
                if count['cut']}
    # One context is said once; tokenizers of other contexts (a source tower's 77, a target
    # branch's 64) each say theirs.
    each = '' if len(contexts) == 1 else ' over {context} tokens'

    def cut(count: dict[str, Any]) -> tuple[float, str] | None:
        return (count['cut'] / count['captions'], f" ({count['cut']:,} of "
                f"{count['captions']:,}{each.format(**count)})") if count['cut'] else None

    def unknown(count: dict[str, Any]) -> tuple[float, str] | None:
        share = count['unknown'] / count['pieces'] if count['unknown'] else 0.0
        return (share, '') if share >= UNKNOWN_SHARE_SHOWN else None

    lines = []
    if cut_shares := _worst_first(test_sets, counts, cut):
        context = f' ({contexts.pop()} tokens)' if len(contexts) == 1 else ''
        lines.append(f"{name}: captions longer than the model's text context{context}, "
                     f'encoded cut (their recalls are of truncated text): {cut_shares}')
    if unknown_shares := _worst_first(test_sets, counts, unknown):
        lines.append(f'{name}: tokens its vocabulary lacks, read as unknown (the words '
                     f'they stand for are lost): {unknown_shares} of the tokens')
    return [f'{line}; tools/caption_tokens.py counts them' for line in lines]


def _worst_first(test_sets: Sequence[dict[str, Any]], counts: Sequence[dict[str, Any]],
                 share_of: Callable[[dict[str, Any]], tuple[float, str] | None]) -> str:
    """Each test set's languages to which ``share_of`` gives a share (and a note after it),
    ``ru 10.1% (101 of 1,000)``, the largest share first, the set named where there are
    several; past :data:`LANGUAGES_NAMED` of a set, how many more. Empty where none has one."""
    named = []
    for test_set, per_lang in zip(test_sets, counts):
        shares = [(found, lang) for lang, count in per_lang.items()
                  if (found := share_of(count)) is not None]
        if not shares:
            continue
        shares.sort(key=lambda item: -item[0][0])
        text = ', '.join(f'{lang} {100 * share:.1f}%{note}'
                         for (share, note), lang in shares[:LANGUAGES_NAMED])
        if len(shares) > LANGUAGES_NAMED:
            text += f', and {len(shares) - LANGUAGES_NAMED} more'
        named.append(f"{test_set.get('dataset')}: {text}" if len(test_sets) > 1 else text)
    return '; '.join(named)


def mean_over_seeds(results: Sequence[EvaluationResult]) -> list[EvaluationResult]:
    """One result per run whose seeds alone differ, as a paper's table reports ``mean ± std``:
    each metric's mean over the run's seeds, and its sample standard deviation (``n - 1``) in
    :attr:`EvaluationResult.seed_std` (none for a run of one seed).

    The results of one run record the same config file (:func:`_config_file`: two configs of
    one name in other folders are two runs), ``--ablation`` rows, checkpoint name
    (``iter_3000``) and test sets, and each its ``seed`` (``tools/test.py`` records them all);
    runs keep the order they are first met in ``results``. A row is labelled by its config's
    name, with as many of its folders as tell it from another config of that name
    (``lora/dasd``, ``static/dasd``).

    Raises:
        ValueError: a result that records no seed, two results of one seed in a run, or seeds of
            a run reporting different metrics, averaging other languages or ranking otherwise,
            naming the results.
    """
    runs: dict[tuple, list[EvaluationResult]] = {}
    for result in results:
        if not isinstance(result.extra.get('seed'), int):
            raise ValueError(f'{result.name}: the result records no seed (seed: '
                             f"{result.extra.get('seed')!r}), so it cannot be averaged with "
                             'other seeds; test its checkpoint again with tools/test.py')
        key = (_config_file(result), tuple(result.extra.get('ablations') or ()),
               Path(result.checkpoint or '').stem, result.test_set_label())
        runs.setdefault(key, []).append(result)
    labels = _config_labels([_config_file(result) for result in results])
    return [_seed_mean(seeds, labels[_config_file(seeds[0])]) for seeds in runs.values()]


def _config_file(result: EvaluationResult) -> str:
    """The config file ``result`` was tested with: its resolved path, or for a result written
    before xmr recorded that, the path as given (its name alone, when none was recorded)."""
    return result.config_resolved or os.path.normpath(result.config or result.name)


def _config_labels(files: Sequence[str]) -> dict[str, str]:
    """Per config file, its name without ``.py``, with as many of its folders as tell it from
    the other ``files`` of that name (``lora/dasd``, ``static/dasd``)."""
    stems = {file: str(Path(file).with_suffix('')) for file in files}
    tails = _shortest_tails(list(stems.values()))
    return {file: tails[stem] for file, stem in stems.items()}


def _shortest_tails(paths: Sequence[str]) -> dict[str, str]:
    """Per path, its last parts, as few as tell it from the other ``paths``
    (``a/run/x``, ``b/run/y`` -> ``x``, ``y``; ``a/run``, ``b/run`` -> ``a/run``, ``b/run``)."""
    parts = {path: Path(path).parts for path in paths}
    tails = {}
    for path, own in parts.items():
        depth = next((depth for depth in range(1, len(own) + 1)
                      if [other[-depth:] for other in parts.values()].count(own[-depth:]) == 1),
                     len(own))
        tails[path] = '/'.join(own[-depth:]).removeprefix('/')
    return tails


def _told_apart(results: Sequence[EvaluationResult]) -> list[EvaluationResult]:
    """``results``, each name that rows of other checkpoint folders share followed by as many
    of its checkpoint's folders as tell them apart (``dasd (iter_3000, seed 0) [run_a]``): two
    work dirs of one config name their checkpoints alike. Rows of one name and folder (one
    checkpoint tested with other ``--cfg-options`` into two ``--out`` files) are told apart by
    their result files, the new result of this test as ``this test``
    (``dasd (iter_3000, seed 0) [grouped_test.json]``)."""
    folders = {id(result): os.path.dirname(result.checkpoint_resolved or result.checkpoint or '')
               for result in results}
    told = []
    for result in results:
        namesakes = [other for other in results if other.name == result.name]
        tails = _shortest_tails([folders[id(other)] for other in namesakes])
        parts = [tails[folders[id(result)]]] if len(tails) > 1 else []
        twins = [other for other in namesakes if folders[id(other)] == folders[id(result)]]
        files = _shortest_tails([other.source or '' for other in twins])
        if len(files) > 1:  # the same file given twice is one result shown twice
            parts.append(files[result.source] if result.source else 'this test')
        told.append(replace(result, name=f'{result.name} [{", ".join(parts)}]') if parts
                    else result)
    return told


def _seed_mean(seeds: Sequence[EvaluationResult], label: str) -> EvaluationResult:
    """The result of one run averaged over its ``seeds`` (:func:`mean_over_seeds`), its row
    labelled with its config's ``label``."""
    first = seeds[0]
    numbers = [result.extra['seed'] for result in seeds]
    twice = repeated(numbers)
    if twice:
        runs = [result for result in seeds if result.extra['seed'] == twice[0]]
        raise ValueError(f'seed {twice[0]} of {first.name} is in {len(runs)} results, of '
                         + ', '.join(result.checkpoint or result.name for result in runs)
                         + ': --over-seeds averages results of one config, checkpoint name and '
                         'test as seeds of one run; compare each seed once')
    for result in seeds[1:]:
        if result.metrics.keys() != first.metrics.keys():
            other = sorted(result.metrics.keys() ^ first.metrics.keys())
            raise ValueError(f'{first.name} and {result.name}, seeds of one run, report other '
                             f"metrics ({', '.join(other[:4])}): average seeds of one test")
        if _scoring(result) != _scoring(first):
            raise ValueError(f'{first.name} and {result.name}, seeds of one run, were scored '
                             f'otherwise (languages averaged and rankings: {_scoring(first)} and '
                             f'{_scoring(result)}): average seeds of one test')
    count = len(seeds)
    mean = {key: math.fsum(r.metrics[key] for r in seeds) / count for key in first.metrics}
    std = {} if count == 1 else {
        key: math.sqrt(math.fsum((r.metrics[key] - mean[key]) ** 2 for r in seeds) / (count - 1))
        for key in first.metrics}
    name = (f"{label}{ablation_suffix(first.extra.get('ablations') or ())} "
            f"({Path(first.checkpoint or '').stem}, seed{'s' * (count > 1)} "
            f"{', '.join(map(str, sorted(numbers)))})")
    extra = {**first.extra, 'seeds': sorted(numbers), 'seed_std': std}
    del extra['seed']
    return replace(first, name=name, metrics=mean, extra=extra)


def _scoring(result: EvaluationResult) -> tuple[dict[str, list[str]], dict[str, str]]:
    """What a result's summaries average, per prefix, and its rankings other than exact."""
    return ({prefix: sorted(langs) for prefix, langs in result.summary_languages.items()},
            result.rankings)


def csv_text(results: Sequence[EvaluationResult]) -> str:
    """The leaderboard as CSV text with full-precision values (empty where missing)."""
    columns = _union_columns(results)
    text = io.StringIO(newline='')
    writer = csv.writer(text)
    writer.writerow(['model', *(column.label for column in columns)])
    for result in results:
        writer.writerow([result.name, *(_csv_value(result.metrics.get(column.key))
                                        for column in columns)])
    return text.getvalue()


def write_csv(path: str | os.PathLike, results: Sequence[EvaluationResult]) -> None:
    """Write the leaderboard as CSV (:func:`csv_text`), atomically."""
    atomic_write_text(path, csv_text(results))


def result_json(result: EvaluationResult) -> str:
    """One result as JSON text (format ``xmr-test-result``), readable by :func:`load_result`."""
    data = {'format': RESULT_FORMAT, 'version': RESULT_VERSION, 'name': result.name,
            'config': result.config, 'checkpoint': result.checkpoint,
            'config_resolved': result.config_resolved,
            'checkpoint_resolved': result.checkpoint_resolved,
            'test_sets': result.test_sets, SKIPPED_KEY: result.skipped_media,
            'metrics': {key: float(value) for key, value in result.metrics.items()
                        if _is_number(value)},
            **result.extra}
    return json.dumps(data, indent=2, ensure_ascii=False) + '\n'


def save_result(path: str | os.PathLike, result: EvaluationResult) -> None:
    """Write one result as JSON (:func:`result_json`), atomically."""
    atomic_write_text(path, result_json(result))


def save_result_files(json_path: str | os.PathLike, result: EvaluationResult,
                      more: Mapping[Path, str] | None = None) -> list[Path]:
    """Write a result's JSON, its one-row CSV table beside it (``.csv``) and ``more`` files
    (its CLIP_benchmark export), all or none (:func:`~xmr.fileio.atomic_write_texts`).

    Every text is made before any file is written, and the JSON, which ``tools/test.py``
    checks before replacing anything, is renamed into place last: a kill leaves the earlier
    result whole, never a new JSON beside the old table; one between the renames leaves the
    new table beside it (or alone), which the same test run again with ``--overwrite``
    replaces. Partial files of killed writes (``.<name>.<host>-<pid>.tmp``) in the result's
    folders are removed first.

    Returns:
        The paths written, the JSON last.
    """
    json_path = Path(json_path)
    texts = {json_path.with_suffix('.csv'): csv_text([result]), **(more or {}),
             json_path: result_json(result)}
    return atomic_write_texts(texts)


def load_result(path: str | os.PathLike) -> EvaluationResult:
    """Read a result written by :func:`save_result` (``tools/test.py``).

    Raises:
        FileNotFoundError: the file does not exist, naming it and the fix.
        ValueError: naming the file when it is not such a result: not UTF-8, no JSON that
            Python reads (:class:`~xmr.json_files.JSONFileError`, naming the line and column), a
            text holding half a character (a lone surrogate), or not a result's fields.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'{path}: no such result file: give a result JSON '
                                'tools/test.py wrote (<checkpoint>_test.json, or its --out)')
    data = load_json(path)
    if not isinstance(data, dict) or data.get('format') != RESULT_FORMAT:
        raise ValueError(f"{path}: not an xmr test result (format must be '{RESULT_FORMAT}'; "
                         'write one with tools/test.py)')
    if data.get('version') != RESULT_VERSION:
        raise ValueError(f"{path}: result version {data.get('version')!r} is not supported "
                         f'(this xmr reads version {RESULT_VERSION})')
    surrogate = lone_surrogate(data, str(path))
    if surrogate is not None:
        # Its name or command would stop the table's printing with a UnicodeEncodeError
        # naming no file.
        raise ValueError(f'{surrogate}, which no UTF-8 text can hold: repair that text, or '
                         'test the checkpoint again (tools/test.py)')
    metrics = data.get('metrics')
    if not isinstance(metrics, dict) or not all(_is_number(v) for v in metrics.values()):
        raise ValueError(f'{path}: metrics must map keys to numbers')
    test_sets = data.get('test_sets') or []
    if not isinstance(test_sets, list) or not all(isinstance(ts, dict) for ts in test_sets):
        raise ValueError(f'{path}: test_sets must be a list of {{dataset, split, languages}}')
    known = {'format', 'version', 'name', 'config', 'checkpoint', 'config_resolved',
             'checkpoint_resolved', 'metrics', 'test_sets', SKIPPED_KEY}
    metrics = {_canonical_key(key): value for key, value in metrics.items()}
    # The languages recorded beside the metrics are renamed with them: a test set recorded with
    # 'jp' is XTD10's 'ja' one, and shares its table.
    test_sets = [{**ts, 'languages': _canonical_codes(ts['languages'])} if 'languages' in ts
                 else ts for ts in test_sets]
    test_sets = [{**ts, 'caption_token_counts': _read_caption_token_counts(
        ts['caption_token_counts'], path)} if 'caption_token_counts' in ts else ts
        for ts in test_sets]
    extra = {k: v for k, v in data.items() if k not in known}
    if isinstance(extra.get('summary_languages'), dict):
        extra['summary_languages'] = {prefix: _canonical_codes(langs) for prefix, langs
                                      in extra['summary_languages'].items()}
    return EvaluationResult(name=str(data.get('name') or path.stem), metrics=metrics,
                            config=data.get('config'), checkpoint=data.get('checkpoint'),
                            test_sets=test_sets, extra=extra,
                            config_resolved=data.get('config_resolved'),
                            checkpoint_resolved=data.get('checkpoint_resolved'),
                            source=str(path))


def _read_caption_token_counts(recorded: Any, path: Path) -> dict[str, dict[str, Any]]:
    """A test set's ``caption_token_counts`` as :func:`load_result` reads it from ``path``: each
    language's ``captions``, ``context``, ``cut``, ``pieces`` and ``unknown`` (``None``: a
    vocabulary without an unknown token), its code canonical (``jp`` -> ``ja``).

    Raises:
        ValueError: naming the file, where the record is not such counts.
    """
    def counts(value: Any) -> bool:
        return (isinstance(value, dict) and value.keys() == COUNTED
                and is_count(value['captions']) and is_count(value['context'])
                and is_count(value['pieces'], least=0) and is_count(value['cut'], least=0)
                and value['cut'] <= value['captions'] and (value['unknown'] is None or (
                    is_count(value['unknown'], least=0) and value['unknown'] <= value['pieces'])))

    if not isinstance(recorded, dict) or not all(counts(v) for v in recorded.values()):
        raise ValueError(f"{path}: a test set's caption_token_counts must map each language to "
                         f"counts of {', '.join(sorted(COUNTED))} (cut <= captions, unknown <= "
                         f'pieces or null), got {recorded!r:.200}')
    return {_canonical_codes([lang])[0]: value for lang, value in recorded.items()}


def _canonical_key(key: str) -> str:
    """``xtd10/jp/t2i_R@10`` -> ``xtd10/ja/t2i_R@10``: results written before (or outside) xmr's
    canonical codes line up with today's columns."""
    return '/'.join(normalize_language(part) if is_language_alias(part) else part
                    for part in key.split('/'))


def _canonical_codes(codes: Any) -> Any:
    """A recorded list of language codes with :func:`_canonical_key`'s renaming (``jp`` ->
    ``ja``); anything else as it is."""
    if not isinstance(codes, list):
        return codes
    return [normalize_language(code) if isinstance(code, str) and is_language_alias(code)
            else code for code in codes]


def _union_columns(results: Sequence[EvaluationResult]) -> list[Column]:
    """Every result's columns: datasets in the order first met, each its languages (first met
    first) then its summary, even when only a later result has a language; cross-dataset
    summaries last."""
    datasets: dict[str, dict[str, Column]] = {}
    overall: dict[str, Column] = {}
    for result in results:
        for column in leaderboard_columns(result.metrics, result.languages):
            found = overall if column.kind == 'overall' else datasets.setdefault(column.group, {})
            found.setdefault(column.key, column)
    columns = []
    for found in datasets.values():
        # A row without a summary takes the last headline of its statistic (t2i_R@1: the
        # text->image sum); another row's summary of that statistic (the text->video sum) is
        # the one its language columns show, whichever row comes first.
        summarised: dict[str, Headline] = {}
        for column in found.values():
            if column.kind == 'summary':
                summarised.setdefault(column.headline.per_language, column.headline)
        found = {key: replace(column, headline=summarised.get(column.headline.per_language,
                                                              column.headline))
                 if column.kind == 'language' else column for key, column in found.items()}
        # Rows summarising a dataset by other statistics (AR here, text->image R@1 there)
        # would show two columns titled by the language alone: each is titled by its key.
        mixed = len({column.headline for column in found.values()}) > 1
        columns.extend(replace(column, label=column.key)
                       if mixed and column.kind == 'language' else column
                       for column in sorted(found.values(), key=lambda c: c.kind == 'summary'))
    # One dataset tested by MultiDatasetTestLoop reports its cross-dataset summary under the
    # key a plain TestLoop's run of that dataset summarises its languages by: one key, one
    # column (the two are the same statistic then).
    return columns + [column for key, column in overall.items() if key not in datasets.get('', {})]


def _languages(keys: Sequence[str], group: str, statistic: str, known: Collection[str]
               ) -> list[str]:
    depth = group.count('/') + 1 if group else 0
    languages = []
    for key in keys:
        parts = key.split('/')
        if (len(parts) == depth + 2 and parts[-1] == statistic
                and '/'.join(parts[:depth]) == group and _is_language(parts[-2], known)):
            languages.append(parts[-2])
    return languages


def _is_language(part: str, known: Collection[str]) -> bool:
    """Whether a key's part is a canonical language code (``de``, ``zh-Hant``) or one of
    ``known``: the summary ``xtd10_pectvlm/mean_R@1`` is named as the statistic ``de/mean_R@1``
    is, and its prefix is no language."""
    if part in known:
        return True
    try:
        return normalize_language(part) == part
    except ValueError:
        return False


def _join(*parts: str) -> str:
    return '/'.join(part for part in parts if part)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def plain_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric metrics as Python numbers, in order; others (a text) left out.

    A metric of the user's own may report a numpy scalar or a one-element tensor, as MMEngine's
    logger accepts: the tables and the JSON files take it as the number it holds, where it would
    otherwise fail to be written (JSON) or be left out of the table as no number.
    """
    plain = {}
    for key, value in metrics.items():
        if hasattr(value, 'item') and not isinstance(value, (int, float)):
            try:
                value = value.item()
            except (ValueError, RuntimeError):  # more than one element: no single number
                continue
        if _is_number(value):
            plain[key] = value
    return plain


def _cell(value: float | None, std: float | None = None) -> str:
    if value is None:
        return '-'
    shown = f'{value:.2f}' if math.isfinite(value) else str(value)
    return shown if std is None else f'{shown} ± {std:.2f}'


def _csv_value(value: float | None) -> str:
    return '' if value is None else repr(float(value))
