"""xmr's OptimWrapper: MMEngine's, with the clipped gradients' norm logged after the step's
losses are read rather than inside the step."""
from __future__ import annotations

import pytest
import torch
from mmengine.logging import MessageHub

from tests.engine.test_loops import make_cfg, train
from xmr.engine.optim_wrapper import OptimWrapper


def test_a_step_keeps_the_clipped_norm_until_it_is_logged():
    weight = torch.nn.Parameter(torch.zeros(2))
    wrapper = OptimWrapper(torch.optim.SGD([weight], lr=1.0), clip_grad=dict(max_norm=1.0))
    hub = wrapper.message_hub = MessageHub.get_instance('test_pending_norm')
    weight.grad = torch.tensor([3.0, 4.0])  # norm 5: scaled by 1 / (5 + 1e-6)
    wrapper.step()
    assert weight.detach().tolist() == pytest.approx([-0.6, -0.8], rel=1e-5)
    assert float(wrapper.pending_norm) == pytest.approx(5.0)
    assert 'train/grad_norm' not in hub.log_scalars
    wrapper.log_pending_norm()
    assert wrapper.pending_norm is None
    assert hub.get_scalar('train/grad_norm').current() == pytest.approx(5.0)
    # A dropped norm (an iteration with a non-finite loss) is not logged.
    weight.grad = torch.tensor([6.0, 8.0])
    wrapper.step()
    wrapper.log_pending_norm(log=False)
    assert wrapper.pending_norm is None
    assert list(hub.get_scalar('train/grad_norm').data[0]) == pytest.approx([5.0])


def test_a_run_logs_the_norms_mmengine_s_wrapper_logs(tmp_path):
    logged = {}
    for wrapper in ('OptimWrapper', 'mmengine.OptimWrapper'):
        torch.manual_seed(0)
        cfg = make_cfg(tmp_path / wrapper.replace('.', '_'))
        cfg.optim_wrapper.type = wrapper
        runner, records = train(cfg)
        assert type(runner.optim_wrapper).__module__.startswith(
            'xmr.' if wrapper == 'OptimWrapper' else 'mmengine.')
        norms = list(runner.message_hub.get_scalar('train/grad_norm').data[0])
        logged[wrapper] = norms, [record['losses']['loss'] for record in records]
    (norms, losses), (reference_norms, reference_losses) = logged.values()
    assert len(norms) == len(losses) > 0
    assert norms == pytest.approx(reference_norms, rel=1e-6)
    assert losses == pytest.approx(reference_losses, rel=1e-6)


def three_dasd_steps(compile: dict, compiled_autograd: dict | None,
                     device: torch.device | str = 'cpu'
                     ) -> tuple[torch.Tensor, list[torch.Tensor], int]:
    """DASD's losses, compiled with ``compile``, trained three steps on one batch through xmr's
    wrapper with ``compiled_autograd``: the losses ``[3]`` and the trained weights, on the CPU,
    and how many times compiled autograd traced the backward."""
    from torch._dynamo.utils import counters

    from tests.configs.test_dasd_configs import batch
    from tests.models.retrievers.test_compiled_losses import dasd

    langs = ['de', 'fr', 'cs', 'de']
    model = dasd(compile).to(device)
    trained = [p for p in model.parameters() if p.requires_grad]
    wrapper = OptimWrapper(torch.optim.AdamW(trained, lr=1e-2), clip_grad=dict(max_norm=1.0),
                           compiled_autograd=compiled_autograd)
    torch._dynamo.reset()
    counters.clear()
    losses = []
    for _ in range(3):
        torch.manual_seed(1)  # the discriminator's shuffled negatives
        losses.append(model.train_step(dict(batch(langs), lang=langs), wrapper)['loss'].detach())
    return (torch.stack(losses).cpu(), [p.detach().cpu() for p in trained],
            counters['compiled_autograd']['captures'])


def test_compiled_autograd_traces_the_backward_once_and_trains_as_autograd_s_engine():
    """DASD's compiled losses, three steps on one batch: the backward traced whole (compiled
    autograd) gives the losses and weights of autograd's engine, bit for bit under AOTAutograd's
    eager graphs, and is traced at the first step only."""
    from tests.models.retrievers.test_compiled_losses import TRACED

    engine_losses, engine_weights, untraced = three_dasd_steps(TRACED, None)
    losses, weights, captures = three_dasd_steps(TRACED, TRACED)
    assert (untraced, captures) == (0, 1)
    torch.testing.assert_close(losses, engine_losses, rtol=0, atol=0)
    assert engine_losses[2] != engine_losses[0]
    for mine, reference in zip(weights, engine_weights, strict=True):
        torch.testing.assert_close(mine, reference, rtol=0, atol=0)


def test_compiled_autograd_is_refused_where_it_cannot_trace(monkeypatch):
    from xmr.engine import optim_wrapper as module
    from xmr.engine.optim import HybridOptimizer

    weight, table = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3, 2))
    with pytest.raises(ValueError, match='must be a dict of torch.compile options'):
        OptimWrapper(torch.optim.SGD([weight], lr=1.0), compiled_autograd='reduce-overhead')
    hybrid = HybridOptimizer(torch.optim.AdamW([weight]), torch.optim.SparseAdam([table]))
    with pytest.raises(ValueError, match='sparse gradients of an embedding table'):
        OptimWrapper(hybrid, compiled_autograd=dict(backend='eager'))
    wrapper = OptimWrapper(torch.optim.SGD([weight], lr=1.0),
                           compiled_autograd=dict(backend='eager'))
    monkeypatch.setattr(module, 'is_distributed', lambda: True)
    with pytest.raises(RuntimeError, match='traces no DDP gradient hook'):
        wrapper.backward((weight * 2).sum())
    assert weight.grad is None
