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
