"""The adversary of DASD's semantics disentangling: a pair discriminator behind gradient reversal.

The discriminator ``F`` tells a matching pair ``(f^sa, r^S)`` from a mismatched one
``(f^sa, r^S−)``; the semantics disentangling module wants ``f^sa`` to carry no trace of the
caption's meaning, so it plays against ``F``:

    ``L_d = −log F(f^sa, r^S) − log(1 − F(f^sa, r^S−))``, ``F`` minimises ``L_d``, the SDM
    minimises ``L_adv = −L_d``.

Mechanism (one, in one optimiser step): ``f^sa`` enters ``F`` through :func:`reverse_gradient`,
the identity forward whose backward negates the gradient. The model returns ``L_d`` itself
(weighted by λ1) as its ``adv`` loss; back-propagating it gives ``F`` the gradient of
``λ1 L_d`` and everything upstream of ``f^sa`` the gradient of ``λ1 L_adv = −λ1 L_d``, both
applied by the phase's optimiser at the phase's learning rate.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


class _ReverseGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return -grad


def reverse_gradient(x: torch.Tensor) -> torch.Tensor:
    """Identity forward, negated gradient backward (gradient reversal)."""
    return _ReverseGradient.apply(x)


def shuffled_negatives(batch: int, generator: torch.Generator | None = None,
                       device: torch.device | str | None = None) -> torch.Tensor:
    """A random permutation of ``0..B-1`` without fixed points: row ``i`` pairs with another row.

    A random order is walked as a cycle (each sample takes the next one's partner), so no
    row is ever its own negative. Two rows holding one English sentence can still meet, as
    in the paper's shuffle and the authors' ``torch.flip``: docs/methods/dasd.md measures how
    rarely. The order is drawn on ``device``, from its random stream:
    one drawn on the host and copied over would make the host wait for the device each step,
    and a CUDA graph could not hold it.

    Raises:
        ValueError: fewer than two samples, where no mismatched pair exists.
    """
    if batch < 2:
        raise ValueError(f'the discriminator needs mismatched pairs, so batches of at least two '
                         f'captions; got {batch}: give train_dataloader a batch_size of at least 2 '
                         'and drop_last=True (an epoch may end on a batch of one), or train '
                         'without L_adv (the disentangler\'s use_adversarial=False)')
    order = torch.randperm(batch, generator=generator, device=device)
    negatives = torch.empty_like(order)
    negatives[order] = order.roll(-1)
    return negatives


class PairDiscriminator(nn.Module):
    """``F(a, b) = σ(MLP([a; b]))``: is ``b`` the source embedding of the caption behind ``a``?

    The authors' MLP: ``Linear → Tanh → Linear → Tanh → Linear`` with hidden widths 256 and 128.
    One logit per pair (the paper's probability ``F``) rather than the authors' two-class output.

    Args:
        in_features: ``dim(a) + dim(b)`` (``D + E`` for ``(f^sa, r^S)``).
        hidden: widths of the hidden layers.
    """

    def __init__(self, in_features: int, hidden: Sequence[int] = (256, 128)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for size in hidden:
            layers += [nn.Linear(width, size), nn.Tanh()]
            width = size
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)
        self.in_features = in_features

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``[B, Da]``, ``[B, Db]`` -> ``[B]`` logits of ``F``."""
        if a.shape[-1] + b.shape[-1] != self.in_features:
            raise ValueError(f'discriminator built for {self.in_features} input features, got '
                             f'{a.shape[-1]} + {b.shape[-1]}')
        return self.mlp(torch.cat([a, b], dim=-1)).squeeze(-1)

    def loss(self, agnostic: torch.Tensor, source: torch.Tensor,
             negative_source: torch.Tensor) -> torch.Tensor:
        """``L_d``, averaged over the batch.

        Args:
            agnostic: ``[B, D]`` ``f^sa`` (pass it through :func:`reverse_gradient` to train
                its producer against ``F``).
            source: ``[B, E]`` ``r^S`` of the same captions.
            negative_source: ``[B, E]`` a mismatched ``r^S−`` for each sample (another
                caption's, e.g. ``source[shuffled_negatives(B)]``).

        Returns:
            ``mean_b [−log F(f^sa_b, r^S_b) − log(1 − F(f^sa_b, r^S−_b))]``.
        """
        positive = self(agnostic, source)
        negative = self(agnostic, negative_source)
        return (F.binary_cross_entropy_with_logits(positive, torch.ones_like(positive))
                + F.binary_cross_entropy_with_logits(negative, torch.zeros_like(negative)))
