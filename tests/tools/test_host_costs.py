"""tools/benchmarks/host_costs.py: the host's costs per trained tensor and per module."""
from __future__ import annotations

import pytest
import torch

from tests.conftest import benchmark_script

host_costs = benchmark_script('host_costs')


def test_a_call_is_timed_without_what_runs_before_it(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(host_costs.time, 'perf_counter', lambda: clock[0])
    durations = iter([0.001, 0.005, 0.003])

    def before():
        clock[0] += 100.0

    def call():
        clock[0] += next(durations)

    assert host_costs.host_ms(call, 3, torch.device('cpu'), before) == pytest.approx(3.0)


def test_a_shrunk_tensor_keeps_its_dimensions_at_most_four_long():
    assert host_costs.shrunk(torch.Size([512, 32])) == torch.Size([4, 4])
    assert host_costs.shrunk(torch.Size([3])) == torch.Size([3])


def test_the_tiny_dasd_model_s_trained_tensors_are_timed_one_by_one_and_as_one(capsys):
    results = host_costs.main(['--arch', 'tiny', '--reps', '2'])
    # Worked by hand for 2 blocks and 4 languages: the dynamic adapters 4 x 2 x 4 = 32; the
    # disentangler's two static adapters (4 each), its two norms (2 each) and projection (1);
    # the generator's shared layer and a head per block (2 + 2 x 2); the discriminator's three
    # linear layers (6); the table's projection (2). The table itself is left out.
    assert results['tensors'] == 32 + 13 + 6 + 6 + 2
    for key in ('own_shapes', 'one_tensor', 'shrunk', 'one_shrunk'):
        assert set(results[key]) == {'clip', 'step', 'zero_grad'}
        assert all(ms > 0 for ms in results[key].values())
    assert results['train_ms'] > 0 and results['check_ms'] > 0
    out = capsys.readouterr().out
    assert 'training mode, ' in out and out.count('\n| ') == 5


def test_the_compiled_step_takes_each_new_lr_without_compiling_again():
    import torch._dynamo

    torch._dynamo.reset()
    shapes = [torch.Size([4, 4])] * 3 + [torch.Size([3])]
    timed = host_costs.optimiser_part(shapes, 3, torch.device('cpu'), 'default')
    assert timed['step'] > 0
    assert timed['new_graphs'] == 0  # three calls, three lrs, the graphs of the warm-up


def test_compiled_autograd_traces_the_backward_into_the_leaves_once():
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    assert host_costs.backward_ms(8, 16, 2, torch.device('cpu'), 'default') > 0
    assert counters['compiled_autograd']['captures'] == 0  # the engine accumulates
    # Three calls to settle and two timed, one trace: the leaves' accumulation is in its graph.
    assert host_costs.backward_ms(8, 16, 2, torch.device('cpu'), 'default',
                                  compiled_autograd=True) > 0
    assert counters['compiled_autograd']['captures'] == 1


@pytest.mark.parametrize('argv, message', [
    (['--compile', 'defualt'], "argument --compile: invalid choice: 'defualt'"),
    (['--reps', '0'], "--reps: '0' is no whole number >= 1"),
    (['--threads', '0'], "--threads: '0' is no whole number >= 1"),
    (['--device', 'cuda'], '--device cuda: this machine has 0 CUDA device(s)'),
])
def test_options_that_would_fail_after_the_measurements_are_refused_first(monkeypatch, argv,
                                                                          message, capsys):
    """Each was taken: a mistyped mode failed in torch.compile once every eager figure was
    measured, ``--reps 0`` in the median of none once the model was built, ``--threads 0``
    left torch's own count without a word, and a missing GPU failed moving the model."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(host_costs, 'dasd_model',
                        lambda *args: pytest.fail('the model was built'))
    with pytest.raises(SystemExit):
        host_costs.main(['--arch', 'tiny', *argv])
    assert message in capsys.readouterr().err
