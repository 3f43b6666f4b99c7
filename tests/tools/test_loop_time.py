"""tools/benchmarks/loop_time.py: the training loop's time per iteration in DASD's cross-lingual
phase, as a run of the shipped schedule trains it."""
from __future__ import annotations

import argparse
import json
import tempfile
import types

import pytest

from tests.conftest import benchmark_script
from xmr.datasets.pairs import CaptionPairDataset
from xmr.engine import loops

READ_TO_HOST = loops.read_to_host

loop_time = benchmark_script('loop_time')


def test_one_off_iterations_are_the_warm_up_and_each_first_kind_of_batch_by_hand():
    """A language's first batch compiles even at a width another language met (the compiled
    step is guarded on both): counted as steady, one compile inflated the projection."""
    times = [5.0, 1.0, 0.1, 0.2, 0.3, 2.0, 0.1]
    data_times = [0.5, 0.01, 0.02, 0.9, 0.03, 0.9, 0.04]
    kinds = [('de', 32), ('de', 32), ('de', 32), ('de', 40), ('de', 40), ('fr', 32), None]
    figures = loop_time.iteration_summary(times, data_times, kinds, warmup=1, paper_iters=10)
    # One-off: iteration 0 (warm-up, de at 32), 3 (de at 40), 5 (fr at 32).
    assert figures['one_off'] == 3
    assert figures['one_off_s'] == pytest.approx(5.0 + 0.2 + 2.0)
    # Steady: 1.0, 0.1, 0.3, 0.1.
    assert figures['mean_ms'] == pytest.approx(375.0)
    assert figures['median_ms'] == pytest.approx(200.0)
    assert figures['data_median_ms'] == pytest.approx(25.0)  # 0.01, 0.02, 0.03, 0.04
    # The run's 8.7 s, then 3 more iterations at the steady 0.375 s.
    assert figures['paper_phase_min'] == pytest.approx((8.7 + 3 * 0.375) / 60)
    assert figures['first_ms'] == pytest.approx(5000.0)
    with pytest.raises(ValueError, match='all 2 iterations are one-off'):
        loop_time.iteration_summary([1.0, 1.0], [0.0, 0.0], [('de', 8), ('fr', 8)], warmup=0)


def test_the_steady_iterations_by_part_are_medians_with_the_rest_as_other_by_hand():
    times, data_times = [5.0, 1.0, 0.5, 0.7], [0.1, 0.2, 0.1, 0.3]
    parts = [dict(forward=4.0, wait=0.5), dict(forward=0.5, wait=0.1),
             dict(forward=0.2, wait=0.1, hooks=0.1), dict(forward=0.3, wait=0.05)]
    figures = loop_time.iteration_summary(times, data_times, [], warmup=1, parts=parts)
    # Steady: iterations 1-3; other = time - data - parts: 0.2, 0.0, 0.05.
    assert list(figures['parts_median_ms']) == ['data', 'hooks', 'forward', 'wait', 'other']
    assert figures['parts_median_ms'] == pytest.approx(dict(
        data=200.0, hooks=0.0, forward=300.0, wait=100.0, other=50.0))


def test_the_run_is_the_shipped_cross_lingual_phase_on_text_pairs(tmp_path):
    args = argparse.Namespace(arch='tiny', device='cpu', amp=True, compile='reduce-overhead',
                              compiled_autograd=True, compiled_step=True, iters=12,
                              batch_size=8, workers=2, scenes=40)
    cfg = loop_time.loop_cfg(args, tmp_path)
    phase, = cfg.train_cfg.phases
    assert (phase.name, phase.iters, phase.lr, phase.warmup_ratio, phase.schedule) == (
        'cross_lingual', 12, 2e-4, 0.1, 'cosine')
    assert phase.loss_weights == dict(cl=1.0, disentangler=1.0) and phase.cache_features
    assert phase.dataloader == 'text_train_dataloader'
    assert cfg.optim_wrapper.type == 'AutocastOptimWrapper'
    assert cfg.optim_wrapper.optimizer == dict(type='AdamW', lr=2e-4, betas=(0.9, 0.98),
                                               eps=1e-6, weight_decay=0.2)
    assert cfg.optim_wrapper.clip_grad == dict(max_norm=1.0)
    assert cfg.model.compile == dict(mode='reduce-overhead')
    assert cfg.optim_wrapper.compiled_autograd == dict(mode='reduce-overhead')
    assert cfg.optim_wrapper.compiled_step == dict(mode='default')  # CUDA graphs refused
    assert (cfg.text_train_dataloader.batch_size, cfg.text_train_dataloader.num_workers) == (8, 2)
    assert cfg.train_cfg.validate_at_phase_end is False
    dataset = CaptionPairDataset(**{k: v for k, v in cfg.text_train_dataloader.dataset.items()
                                    if k != 'type'})
    assert len(dataset) == 40 * 4
    item = dataset[5]  # scene 1 in French
    assert item['media'] is None and item['lang'] == 'fr'
    assert item['source_text'] and item['target_text'] != item['source_text']


def test_a_tiny_run_on_the_cpu_times_every_iteration(tmp_path, capsys, monkeypatch):
    """Without --work-dir, in a temporary folder that the run removes (each run left its
    text pairs, tokenizer, logs and feature cache behind)."""
    # The run's folder alone: tempfile.tempdir would put the DataLoader workers' sockets under
    # tmp_path too, whose path can pass AF_UNIX's 107 bytes (the workers then hang).
    monkeypatch.setattr(loop_time, 'tempfile', types.SimpleNamespace(
        mkdtemp=lambda **kwargs: tempfile.mkdtemp(**kwargs, dir=tmp_path)))
    out = tmp_path / 'figures.json'
    figures = loop_time.main(['--arch', 'tiny', '--device', 'cpu', '--iters', '12',
                              '--warmup', '2', '--batch-size', '8', '--scenes', '40',
                              '--out', str(out)])
    assert list(tmp_path.iterdir()) == [out]
    assert json.loads(out.read_text()) == json.loads(json.dumps(figures))
    assert set(loop_time.FIGURE_KEYS) <= figures.keys()  # what tells an earlier run's --out
    assert figures['iterations'] == 12 and figures['one_off'] == 2
    assert figures['target_widths'] and figures['compile'] == 'eager'
    assert 0 < figures['median_ms'] < figures['first_ms']
    parts = figures['parts_median_ms']
    assert {'data', 'hooks', 'preprocess', 'forward', 'backward', 'clip', 'optimizer',
            'zero_grad', 'wait', 'other'} <= set(parts)
    assert parts['forward'] > 0 and parts['backward'] > 0 and parts['wait'] > 0
    assert sum(parts.values()) == pytest.approx(figures['median_ms'], rel=0.5)
    out = capsys.readouterr().out
    assert "the paper's 45000-step phase projected at batch 8 (the paper's is 128): " in out
    assert 'the others by part on the host, median ms: data ' in out
    assert loops.read_to_host is READ_TO_HOST  # the loop's read restored after the run


@pytest.mark.parametrize('argv, message', [
    (['--compiled-step'], '--compiled-step compiles in the mode of --compile'),
    (['--compile', 'default', '--workers', '0'], '--compile needs --workers >= 1'),
])
def test_options_that_would_mislead_the_figures_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        loop_time.main(['--arch', 'tiny', '--device', 'cpu', *argv])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize('argv, message', [
    (['--iters', '5'], '--iters 5 leaves no steady iteration after the first 10 (--warmup): '
     'give --iters above 10'),
    (['--iters', '0', '--warmup', '0'], "--iters: '0' is no whole number >= 1"),
    (['--batch-size', '0'], "--batch-size: '0' is no whole number >= 1"),
    (['--workers', '-1'], "--workers: '-1' is no whole number >= 0"),
    (['--scenes', '0'], "--scenes: '0' is no whole number >= 1"),
])
def test_counts_that_leave_no_figure_are_refused_before_the_run(monkeypatch, argv, message,
                                                                  capsys):
    """``--iters 5`` (the default warm-up 10) trained its iterations, then failed as they were
    all one-off; a count below its least was taken as well."""
    monkeypatch.setattr(loop_time, 'measure', lambda *args: pytest.fail('the run started'))
    with pytest.raises(SystemExit):
        loop_time.main(['--arch', 'tiny', '--device', 'cpu', *argv])
    assert message in capsys.readouterr().err


def test_the_default_cuda_device_without_a_gpu_is_refused_naming_the_cpu_option(monkeypatch,
                                                                                  capsys):
    """``--device`` defaults to ``cuda``: on a machine without one the run used to build the
    model and fail in torch's peak-memory reset ("invalid argument")."""
    monkeypatch.setattr(loop_time.torch.cuda, 'is_available', lambda: False)
    with pytest.raises(SystemExit):
        loop_time.main(['--arch', 'tiny', '--iters', '12'])
    assert ('--device cuda: torch sees no CUDA device here; on a CPU give --device cpu'
            in capsys.readouterr().err)


def test_a_batch_s_kind_is_its_languages_and_target_width():
    import torch

    hook = loop_time.TargetWidths()
    for langs, width in ((['fr'] * 2, 48), (['de'] * 2, 48), (['de', 'fr'], 16)):
        hook.before_train_iter(None, 0, dict(lang=langs, tokens=dict(target_tokens=dict(
            input_ids=torch.zeros(2, width, dtype=torch.long)))))
    hook.before_train_iter(None, 0, dict(lang=['de']))  # untokenised: unknown
    assert hook.kinds == [('fr', 48), ('de', 48), ('de fr', 16), None]
    assert hook.widths == [16, 48]


def test_out_keeps_a_file_that_holds_no_earlier_figures_and_those_without_overwrite(
        tmp_path, capsys):
    """--out wrote over any file, once the minutes of the run had passed: a checkpoint, a
    benchmark's rows, an earlier run's figures."""
    checkpoint, earlier = tmp_path / 'iter_3000.pth', tmp_path / 'figures.json'
    checkpoint.write_bytes(b'PK\x03\x04')
    earlier.write_text(json.dumps({key: 1 for key in loop_time.FIGURE_KEYS}))
    kept = {path: path.read_bytes() for path in (checkpoint, earlier)}
    for path, said in ((checkpoint, f"{checkpoint} (--out): exists and is not an earlier run's "
                                    'figures'),
                       (earlier, f"{earlier} (--out): holds an earlier run's figures; it is "
                                 'kept: pass --overwrite to replace it')):
        with pytest.raises(SystemExit):
            loop_time.main(['--arch', 'tiny', '--device', 'cpu', '--out', str(path)])
        assert said in capsys.readouterr().err
    assert {path: path.read_bytes() for path in kept} == kept
