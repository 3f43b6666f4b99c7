"""compile_counts: what torch.compile made of a run, its recompilations counted."""
import torch

from xmr.engine.compile_counts import compile_counts, reset_compile_counts


def test_recompilations_are_the_compilations_a_failed_guard_made_again():
    """A counter torch never fills gave 0 whatever was compiled again."""
    torch._dynamo.reset()
    reset_compile_counts()

    @torch.compile(backend='eager', dynamic=False)
    def scaled(x, scale):
        return x * scale

    scaled(torch.ones(3), 2.0)
    scaled(torch.ones(3), 2.0)  # the same guards: no compilation
    scaled(torch.ones(3), 3.0)  # another constant: compiled again
    scaled(torch.ones(5), 3.0)  # another shape: compiled again
    counts = compile_counts()
    assert (counts['graphs'], counts['recompiles'], counts['graph_breaks']) == (3, 2, 0)
    reset_compile_counts()
    assert compile_counts()['recompiles'] == 0


def test_recompilations_past_torchs_64_kept_records_are_all_counted():
    """torch keeps 64 compilation records by default: a run's 100th recompilation read as its
    64th, and a benchmark's count stopped there."""
    from types import SimpleNamespace

    from torch._dynamo import utils

    reset_compile_counts()
    for _ in range(100):  # the records torch appends, one a compilation
        utils._compilation_metrics.append(SimpleNamespace(recompile_reason='size mismatch'))
    try:
        assert compile_counts()['recompiles'] == 100
    finally:
        reset_compile_counts()
