"""Logs show what the optimiser did: loss windows across a resume, the phase's base_lr, DDP's
mean losses, and fp16's skipped steps."""
from __future__ import annotations

import copy
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp
from mmengine.hooks import Hook
from mmengine.logging import MessageHub

import xmr.engine.amp
from tests.conftest import tiny_retriever_cfg
from tests.engine.test_amp import BATCH, wrapper_for
from tests.engine.test_loops import PHASES, make_cfg, train
from xmr.registry import HOOKS, MODELS


@HOOKS.register_module(force=True)
class LogWindowHook(Hook):
    """Records, after each iteration, the logged loss windows and base_lr."""

    priority = 'VERY_LOW'

    def __init__(self) -> None:
        self.records: list[dict] = []

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        scalars = runner.message_hub.log_scalars
        self.records.append(dict(
            windows={k: list(v.data[0]) for k, v in scalars.items() if k.startswith('train/loss')},
            base_lr=runner.optim_wrapper.get_lr().get('base_lr')))


def logged(work_dir, **kwargs) -> list[dict]:
    cfg = make_cfg(work_dir, **kwargs)
    cfg.custom_hooks.append(dict(type='LogWindowHook'))
    runner, _ = train(cfg)
    return next(h for h in runner.hooks if isinstance(h, LogWindowHook)).records


def test_after_a_resume_the_loss_windows_and_base_lr_are_the_uninterrupted_runs(tmp_path):
    torch.manual_seed(0)
    uninterrupted = logged(tmp_path / 'once', checkpoint_interval=7)
    # base_lr is the phase's lr (4, 8 and 4 iterations), not the optimiser config's 1e-3.
    assert [r['base_lr'] for r in uninterrupted] == [[1e-3]] * 4 + [[4e-3]] * 8 + [[2e-4]] * 4
    # In a phase the total's window averages exactly the iterations its component's does.
    for record in uninterrupted[4:12]:
        assert len(record['windows']['train/loss']) == len(record['windows']['train/loss_cl'])

    torch.manual_seed(0)
    logged(tmp_path / 'twice', checkpoint_interval=7, stop_after=7)
    resumed = logged(tmp_path / 'twice', resume_from=tmp_path / 'twice' / 'iter_7.pth')
    for mine, reference in zip(resumed, uninterrupted[7:], strict=True):
        assert mine['base_lr'] == reference['base_lr']
        assert mine['windows'].keys() == reference['windows'].keys()
        for key, values in reference['windows'].items():
            assert mine['windows'][key] == values, key


def _parse_on_rank(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    # A forked child must not enter OpenMP: the parent's thread pool did not come with it, and
    # a parallel region waits for it forever (as DataLoader workers, run single-threaded).
    torch.set_num_threads(1)
    torch.distributed.init_process_group('gloo', rank=rank, world_size=2)
    model = MODELS.build(tiny_retriever_cfg())
    # Each rank's shard gives another L_CL; the log must show their mean, what DDP optimises.
    losses = {'loss_cl': torch.tensor(1.0 + 2 * rank, requires_grad=True),
              'loss_cm': torch.tensor(10.0 * rank)}
    loss, log_vars = model.parse_losses(losses)
    torch.save(dict(loss=float(loss), log={k: float(v) for k, v in log_vars.items()}),
               f'{out}/rank{rank}.pt')
    torch.distributed.destroy_process_group()


def test_ddp_logs_the_losses_averaged_over_the_ranks_and_backpropagates_its_own(tmp_path):
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    mp.start_processes(_parse_on_rank, args=(port, str(tmp_path)), nprocs=2, join=True,
                       start_method='fork')
    ranks = [torch.load(tmp_path / f'rank{rank}.pt') for rank in range(2)]
    for rank, result in enumerate(ranks):
        # loss_cl 1 and 3 -> 2; loss_cm 0 and 10 -> 5; the total 1 and 13 -> 7.
        assert result['log'] == pytest.approx({'loss': 7.0, 'loss_cl': 2.0, 'loss_cm': 5.0})
        assert result['loss'] == pytest.approx([1.0, 13.0][rank])


def test_a_skipped_fp16_step_logs_the_skip_and_no_infinite_grad_norm(tiny_retriever,
                                                                     monkeypatch):
    messages = []
    monkeypatch.setattr(xmr.engine.amp, 'print_log', lambda msg, **kwargs: messages.append(msg))
    hub = MessageHub.get_instance('fp16-skip')
    wrapper = wrapper_for(tiny_retriever, 'AutocastOptimWrapper', dtype='float16',
                          loss_scale=dict(init_scale=1024.0))
    wrapper.message_hub = hub
    for factor in (float('inf'), 1.0):
        with wrapper.optim_context(tiny_retriever):
            data = tiny_retriever.data_preprocessor(BATCH, True)
            loss = tiny_retriever(mode='loss', **data)['loss_cl']
        wrapper.update_params(loss * factor)
        wrapper.log_pending_norm()
    norms = hub.get_scalar('train/grad_norm').data[0]
    assert len(norms) == 1 and torch.isfinite(torch.tensor(norms)).all()
    # The other line is the autocast precision named at the first step.
    assert [m for m in messages if m.startswith('fp16:')] == [
        'fp16: optimiser step skipped (gradients overflowed at loss scale 1024); the loss scale is '
        'now 512']


def test_the_logged_lr_is_the_backbone_group_s_with_its_multiplier(tmp_path):
    """docs/getting_started.md: ``lr`` is the first parameter group's rate, the backbone's, so a
    phase's lr_mult for it shows; ``base_lr`` stays the phase's. By hand: source_finetune at
    1e-3 x 0.5 with 2 warm-up steps (1/2, 1, 1, 1); cross_modal at 2e-4, linear over 4 steps
    (1, 2/3, 1/3, 0)."""
    phases = copy.deepcopy(PHASES)
    phases[0]['lr_mult'] = dict(backbone=0.5)
    runner, _ = train(make_cfg(tmp_path, phases=phases))
    logged = list(runner.message_hub.get_scalar('train/lr').data[0])
    assert logged[:4] == pytest.approx([0.25e-3, 0.5e-3, 0.5e-3, 0.5e-3])
    assert logged[12:] == pytest.approx([2e-4, 2e-4 * 2 / 3, 2e-4 / 3, 0.0])
