"""BertAdam and the bert_cosine schedule against DASD's released optimiser, transcribed here."""
from __future__ import annotations

import math

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from tests.engine.test_loops import PHASES, make_cfg, train
from tests.engine.test_optim import tripled_sum_closure
from xmr.engine.bert_adam import BertAdam
from xmr.engine.phases import bert_cosine_factor, phase_lr_factor


class AuthorsBertAdam:
    """The update of ``optimization.py`` in HuiGuanLab/DASD, one tensor at a time, with its own
    ``warmup_cosine`` schedule over ``t_total`` steps counted per tensor."""

    def __init__(self, params, lr, betas, eps, weight_decay, max_grad_norm, warmup=-1,
                 t_total=-1):
        self.params, self.lr, self.warmup, self.t_total = params, lr, warmup, t_total
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay
        self.max_grad_norm = max_grad_norm
        self.state = {}

    def schedule(self, x: float) -> float:
        return x / self.warmup if x < self.warmup else 0.5 * (1.0 + math.cos(math.pi * x))

    @torch.no_grad()
    def step(self, grads) -> None:
        for p, grad in zip(self.params, grads):
            if grad is None:
                continue
            grad = grad.clone()
            state = self.state.setdefault(id(p), dict(step=0, next_m=torch.zeros_like(p),
                                                      next_v=torch.zeros_like(p)))
            if self.max_grad_norm > 0:  # clip_grad_norm_(p, ...) on the tensor alone
                holder = torch.nn.Parameter(torch.empty_like(p))
                holder.grad = grad
                torch.nn.utils.clip_grad_norm_(holder, self.max_grad_norm)
            state['next_m'].mul_(self.betas[0]).add_(grad, alpha=1 - self.betas[0])
            state['next_v'].mul_(self.betas[1]).addcmul_(grad, grad, value=1 - self.betas[1])
            update = state['next_m'] / (state['next_v'].sqrt() + self.eps)
            if self.weight_decay > 0.0:
                update += self.weight_decay * p
            lr = self.lr
            if self.t_total != -1:
                lr = self.lr * self.schedule(state['step'] / self.t_total)
            p.add_(-(lr * update))
            state['step'] += 1


def test_bert_cosine_worked_by_hand():
    # 100 steps, 10% warm-up: 0, 1/2 at step 5, then the cosine of the whole phase's progress.
    assert phase_lr_factor(0, 100, 0.1, 'bert_cosine') == 0.0
    assert phase_lr_factor(5, 100, 0.1, 'bert_cosine') == pytest.approx(0.5)
    assert phase_lr_factor(10, 100, 0.1, 'bert_cosine') == pytest.approx(0.975528, abs=1e-6)
    assert phase_lr_factor(50, 100, 0.1, 'bert_cosine') == pytest.approx(0.5)
    assert phase_lr_factor(99, 100, 0.1, 'bert_cosine') == pytest.approx(0.000247, abs=1e-6)
    assert bert_cosine_factor(1.0, 0.1, min_ratio=0.2) == pytest.approx(0.2)
    assert phase_lr_factor(0, 100, 0.0, 'bert_cosine') == 1.0


def test_first_step_worked_by_hand():
    # g = (3, 4) has norm 5: clipped to (0.6, 0.8). Without bias correction m = 0.1 g and
    # v = 0.02 g^2, so each entry moves by lr * 0.1 / sqrt(0.02) = 0.1 * 0.70711, whatever g.
    p = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    p.grad = torch.tensor([3.0, 4.0])
    BertAdam([p], lr=0.1, betas=(0.9, 0.98), eps=0.0, weight_decay=0.0).step()
    assert p.grad.tolist() == pytest.approx([0.6, 0.8])
    assert p.tolist() == pytest.approx([1 - 0.070711, -1 - 0.070711], abs=1e-6)


def trained_pair(foreach: bool, steps: int = 4):
    """xmr's BertAdam and the authors' (constant rate) on the same parameters and gradients:
    a clipped matrix and an unclipped vector in a decayed group, a vector without decay and a
    tensor that never gets a gradient."""
    torch.manual_seed(0)
    shapes = [(4, 3), (3,), (5,), (2,)]
    params = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    reference = [p.detach().clone() for p in params]
    optimizer = BertAdam([dict(params=params[:2], weight_decay=0.2),
                          dict(params=params[2:], weight_decay=0.0)],
                         lr=0.05, betas=(0.9, 0.98), foreach=foreach)
    authors = [AuthorsBertAdam(reference[:2], 0.05, (0.9, 0.98), 1e-6, 0.2, 1.0),
               AuthorsBertAdam(reference[2:], 0.05, (0.9, 0.98), 1e-6, 0.0, 1.0)]
    for _ in range(steps):
        grads = [torch.randn(s) * (5.0 if i == 0 else 0.1) for i, s in enumerate(shapes)]
        grads[3] = None
        for p, g in zip(params, grads):
            p.grad = None if g is None else g.clone()
        optimizer.step()
        authors[0].step(grads[:2])
        authors[1].step(grads[2:])
    return params, reference


@pytest.mark.parametrize('foreach', [True, False])
def test_equals_the_authors_update_step_by_step(foreach):
    params, reference = trained_pair(foreach)
    for p, r in zip(params, reference):
        torch.testing.assert_close(p.detach(), r, rtol=1e-6, atol=1e-7)
    assert params[0].grad.norm() == pytest.approx(1.0)  # clipped in place, as clip_grad_norm_


@pytest.mark.parametrize('no_clip', [None, 0.0, -1])
def test_no_clip_leaves_the_gradient_as_it_is(no_clip):
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([3.0, 4.0])
    BertAdam([p], max_grad_norm=no_clip).step()
    assert p.grad.tolist() == [3.0, 4.0]


def test_a_tensor_learning_rate_updates_as_the_float_one():
    torch.manual_seed(0)
    grad = torch.randn(6)
    results = []
    for lr in (0.01, torch.tensor(0.01)):
        p = torch.nn.Parameter(torch.ones(6))
        p.grad = grad.clone()
        BertAdam([p], lr=lr).step()
        results.append(p.detach())
    torch.testing.assert_close(results[0], results[1])


def test_sparse_gradients_and_bad_values_are_refused():
    table = torch.nn.Embedding(5, 2, sparse=True)
    table(torch.tensor([1])).sum().backward()
    with pytest.raises(RuntimeError, match='dense gradients only.*sparse=False'):
        BertAdam(table.parameters()).step()
    with pytest.raises(ValueError, match=r'betas=\(0.9, 1.0\)'):
        BertAdam(table.parameters(), betas=(0.9, 1.0))


def test_a_phase_on_the_authors_optimiser_equals_their_bert_adam(tmp_path):
    """The phased loop with ``schedule='bert_cosine'`` and BertAdam without a global clip (the
    authors-optimizer ablation) moves the weights as the authors' BertAdam with its own
    ``warmup_cosine`` over the phase's steps, given the gradients the loop computed."""
    phase = dict(PHASES[1], iters=8, warmup_ratio=0.25, schedule='bert_cosine')
    cfg = make_cfg(tmp_path, phases=[phase])
    cfg.optim_wrapper.update(clip_grad=None, optimizer=dict(
        type='BertAdam', lr=1.0, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2,
        max_grad_norm=1.0))
    steps: list[tuple[list, list]] = []

    def record_before(optimizer, args, kwargs):
        params = [p for g in optimizer.param_groups for p in g['params']]
        steps.append(([p.detach().clone() for p in params],
                      [None if p.grad is None else p.grad.clone() for p in params]))

    handle = register_optimizer_step_pre_hook(record_before)
    try:
        runner, records = train(cfg)
    finally:
        handle.remove()
    optimizer = runner.optim_wrapper.optimizer
    assert isinstance(optimizer, BertAdam) and len(steps) == 8
    # 8 steps, warm-up 2: 0 at the first step (the reference loses it), then 1/8 / 0.25 of 4e-3.
    assert set(records[0]['lrs'].values()) == {0.0}
    assert list(records[1]['lrs'].values()) == pytest.approx([2e-3] * len(records[1]['lrs']))

    groups = [g for g in optimizer.param_groups for _ in g['params']]
    start = steps[0][0]
    reference = [p.clone() for p in start]
    authors = [AuthorsBertAdam([r], phase['lr'], (0.9, 0.98), 1e-6, group['weight_decay'], 1.0,
                               warmup=0.25, t_total=8)
               for r, group in zip(reference, groups)]
    for (_, grads), next_step in zip(steps, steps[1:] + [None]):
        for authors_optimizer, grad in zip(authors, grads):
            authors_optimizer.step([grad])
        after = ([p.detach() for g in optimizer.param_groups for p in g['params']]
                 if next_step is None else next_step[0])
        for r, a in zip(reference, after):
            torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-7)
    trained = [i for i, g in enumerate(steps[0][1]) if g is not None]
    assert trained and any(not torch.equal(start[i], reference[i]) for i in trained)


def test_a_negative_weight_decay_is_refused_naming_it():
    with pytest.raises(ValueError, match=r'BertAdam: weight_decay=-0.1 is out of range'):
        BertAdam([torch.nn.Parameter(torch.zeros(2))], weight_decay=-0.1)


def test_the_clip_divides_by_the_norm_plus_torch_s_1e_6():
    """As ``clip_grad_norm_`` in the reference: a norm of 1e-6 capped at 1e-6 is halved,
    ``1e-6 / (1e-6 + 1e-6)``, not left as it is."""
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([0.0, 1e-6])
    BertAdam([p], max_grad_norm=1e-6).step()
    assert p.grad.tolist() == pytest.approx([0.0, 5e-7], rel=1e-5)


def test_a_step_runs_its_closure_with_gradients_and_returns_its_loss():
    p = torch.nn.Parameter(torch.ones(2))
    optimizer = BertAdam([p], lr=0.1, max_grad_norm=None)
    assert float(optimizer.step(tripled_sum_closure(optimizer, p)).detach()) == 6.0
    assert p.grad.tolist() == [3.0, 3.0]


def test_a_sparse_gradient_beside_dense_ones_in_a_group_is_refused():
    """One sparse table among dense tensors is refused as a group of sparse tables is, not
    left to fail inside the multi-tensor ops."""
    table = torch.nn.Embedding(5, 2, sparse=True)
    dense = torch.nn.Parameter(torch.ones(2))
    table(torch.tensor([1])).sum().backward()
    dense.grad = torch.ones(2)
    with pytest.raises(RuntimeError, match='dense gradients only'):
        BertAdam([dense, table.weight]).step()


def test_a_zero_learning_rate_is_taken_and_moves_nothing():
    """``lr >= 0``, as the error says and torch's optimisers take: a rate of 0 builds, and its
    step leaves the weights where they were while the moments still gather the gradient."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    p.grad = torch.tensor([3.0, 4.0])
    optimizer = BertAdam([p], lr=0.0, max_grad_norm=None)
    optimizer.step()
    assert p.tolist() == [1.0, -2.0]
    assert optimizer.state[p]['exp_avg'].tolist() == pytest.approx([0.3, 0.4])


def test_bert_cosine_with_a_floor_scales_the_cosine_into_the_rest():
    """With ``min_ratio`` m the cosine spans ``[m, 1]``: at mid-phase ``m + (1 - m) / 2``
    (0.6 for m = 0.2), not ``m`` added to the whole cosine (0.7, above 1 early on)."""
    assert bert_cosine_factor(0.5, 0.1, min_ratio=0.2) == pytest.approx(0.6)
    assert bert_cosine_factor(0.1, 0.1, min_ratio=0.2) == pytest.approx(
        0.2 + 0.8 * 0.975528, abs=1e-6)
