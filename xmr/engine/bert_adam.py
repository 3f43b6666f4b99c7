"""BERT's Adam, the optimiser DASD's released code trains with (``optimization.py``)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.optim import Optimizer

from xmr.engine.optim import closure_loss
from xmr.registry import OPTIMIZERS


@OPTIMIZERS.register_module()
class BertAdam(Optimizer):
    """Adam as BERT's reference code (``pytorch-pretrained-bert``) and DASD's released code
    update, for runs that reproduce the authors' training (``--ablation dasd/authors-optimizer``).

    For each tensor ``p`` with gradient ``g``, at the group's learning rate ``lr`` (which the
    phased loop sets every iteration; the authors' schedule is ``schedule='bert_cosine'``)::

        g <- g min(1, max_grad_norm / (||g||_2 + 1e-6))      each tensor clipped on its own
        m <- b1 m + (1 - b1) g
        v <- b2 v + (1 - b2) g^2
        p <- p - lr (m / (sqrt(v) + eps) + weight_decay p)

    It differs from :class:`torch.optim.AdamW` in two ways: no bias correction (the first
    steps move by about ``(1 - b1) / sqrt(1 - b2)`` of Adam's), and a clip per tensor (the
    optimiser wrapper's ``clip_grad`` clips the global norm; the authors' fp16 path clips only
    here). The decay is AdamW's, ``lr wd p``.

    Args:
        params: parameters or parameter groups.
        lr: learning rate.
        betas: ``(b1, b2)``; DASD's code: ``(0.9, 0.98)``.
        eps: DASD's code: ``1e-6``.
        weight_decay: DASD's code: ``0.2`` (the constructor gives biases and norms ``0``).
        max_grad_norm: cap on each tensor's gradient norm; ``None`` or ``<= 0`` clips nothing
            (the reference's ``-1``).
        foreach: update a group's tensors together with torch's multi-tensor ops; ``False``
            runs the same arithmetic one tensor at a time, as the reference code does.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01,
                 max_grad_norm: float | None = 1.0, foreach: bool = True) -> None:
        for name, value, inside in (('lr', lr, lr >= 0), ('eps', eps, eps >= 0),
                                    ('betas', betas, all(0 <= b < 1 for b in betas)),
                                    ('weight_decay', weight_decay, weight_decay >= 0)):
            if not inside:
                raise ValueError(f'BertAdam: {name}={value!r} is out of range (lr, eps and '
                                 'weight_decay >= 0; each of betas in [0, 1))')
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, max_grad_norm=max_grad_norm,
                                      foreach=foreach))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = closure_loss(closure)
        for group in self.param_groups:
            params = [p for p in group['params'] if p.grad is not None]
            if not params:
                continue
            if any(p.grad.is_sparse for p in params):
                raise RuntimeError('BertAdam takes dense gradients only; build the embedding '
                                   'table with sparse=False (the constructor gives sparse tables '
                                   'to paramwise_cfg.sparse_optimizer otherwise)')
            for parameter in params:
                if not self.state[parameter]:
                    self.state[parameter].update(exp_avg=torch.zeros_like(parameter),
                                                 exp_avg_sq=torch.zeros_like(parameter))
            for chunk in [params] if group['foreach'] else [[p] for p in params]:
                self._update(chunk, group)
        return loss

    def _update(self, params: Sequence[torch.Tensor], group: dict) -> None:
        """One update of ``params`` (the equations of the class docstring, in their order)."""
        grads = [p.grad for p in params]
        exp_avgs = [self.state[p]['exp_avg'] for p in params]
        exp_avg_sqs = [self.state[p]['exp_avg_sq'] for p in params]
        (beta1, beta2), max_norm = group['betas'], group['max_grad_norm']
        if max_norm is not None and max_norm > 0:
            norms = torch.stack(torch._foreach_norm(grads))
            torch._foreach_mul_(grads, (max_norm / (norms + 1e-6)).clamp(max=1.0).unbind())
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        denominators = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_add_(denominators, group['eps'])
        updates = torch._foreach_div(exp_avgs, denominators)
        if group['weight_decay'] > 0:
            torch._foreach_add_(updates, params, alpha=group['weight_decay'])
        # The reference multiplies the update by lr, then subtracts; a tensor lr (a compiled
        # step's) takes the same path.
        torch._foreach_mul_(updates, group['lr'])
        torch._foreach_sub_(params, updates)
