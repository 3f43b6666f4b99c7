"""What ``torch.compile`` made of a run: its graphs, breaks, recompilations and CUDA graph skips."""
from __future__ import annotations

#: Compilations torch keeps a record of (64 by default): one a frame, language and width.
_KEPT_RECORDS = 1_000_000


def reset_compile_counts() -> None:
    """Start the counts of :func:`compile_counts` afresh, every compilation from here kept."""
    from torch._dynamo import utils

    utils.counters.clear()
    utils.set_compilation_metrics_limit(_KEPT_RECORDS)
    utils.clear_compilation_metrics()


def compile_counts() -> dict[str, int]:
    """Graphs, graph breaks, recompilations and the graphs CUDA graphs skipped since
    :func:`reset_compile_counts` (each a reason a compiled step is slower than it could be).

    A recompilation is a compilation of a frame compiled before, whose guards failed (another
    width, another language): torch records its reason; its ``counters['recompiles']``, which
    an earlier count read, is filled by no torch this code runs on.
    """
    from torch._dynamo import utils

    counters = utils.counters
    return dict(graphs=counters['stats']['unique_graphs'],
                graph_breaks=sum(counters['graph_break'].values()),
                recompiles=sum(metrics.recompile_reason is not None
                               for metrics in utils.get_compilation_metrics()),
                cudagraph_skips=counters['inductor']['cudagraph_skips'])
