"""MMEngine metrics of xmr."""
from xmr.evaluation.metrics.retrieval import RetrievalMetric

__all__ = ['RetrievalMetric']
