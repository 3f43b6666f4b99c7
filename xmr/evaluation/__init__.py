"""Retrieval evaluation: ranks, protocols, faiss search, the MMEngine metric and leaderboards.

``import xmr.evaluation`` registers :class:`RetrievalMetric` in ``xmr.registry.METRICS``.
"""
from xmr.evaluation.clip_benchmark import (
    ScoredDataset,
    clip_benchmark_files,
    clip_benchmark_records,
    clip_benchmark_texts,
    comparable_entries,
    scored_datasets,
    write_clip_benchmark,
)
from xmr.evaluation.evaluated_sets import evaluated_sets
from xmr.evaluation.leaderboard import (
    EvaluationResult,
    format_table,
    leaderboard_columns,
    leaderboard_markdown,
    leaderboard_table,
    load_result,
    plain_metrics,
    save_result,
    save_result_files,
    write_csv,
)
from xmr.evaluation.metrics import RetrievalMetric
from xmr.evaluation.protocols import (
    PROTOCOLS,
    FewShotSplit,
    LanguageGallery,
    Protocol,
    coco_1k_folds,
    evaluate_language,
    evaluate_protocol,
    protocol_galleries,
    xtd10_fewshot_split,
)
from xmr.evaluation.ranking import (
    average_recall,
    grouped_ranks_from_scores,
    media_to_text_ranks,
    ranks_from_scores,
    ranks_from_topk,
    recall_at_k,
    recall_sum,
    text_to_media_ranks,
)
from xmr.evaluation.search import FaissSearcher, exact_ranks

__all__ = [
    'RetrievalMetric', 'PROTOCOLS', 'Protocol', 'FewShotSplit', 'LanguageGallery',
    'coco_1k_folds', 'evaluate_language', 'evaluate_protocol', 'protocol_galleries',
    'xtd10_fewshot_split', 'average_recall', 'grouped_ranks_from_scores', 'media_to_text_ranks',
    'ranks_from_scores', 'ranks_from_topk', 'recall_at_k', 'recall_sum', 'text_to_media_ranks',
    'FaissSearcher', 'exact_ranks', 'EvaluationResult', 'format_table', 'leaderboard_columns',
    'leaderboard_markdown', 'leaderboard_table', 'load_result', 'plain_metrics', 'save_result',
    'save_result_files', 'write_csv', 'ScoredDataset', 'clip_benchmark_files',
    'clip_benchmark_records', 'clip_benchmark_texts', 'comparable_entries', 'scored_datasets',
    'write_clip_benchmark', 'evaluated_sets',
]
