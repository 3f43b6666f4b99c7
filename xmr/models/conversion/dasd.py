"""DASD's (HuiGuanLab/DASD) acquirers, SDM and parameter generator in xmr's names.

The authors' code (``clip/model.py``) computes, for the target caption padded to 77:

* dynamic adapter after block ``i``: ``x + c_proj2(ReLU(c_fc(x) @ W))`` with ``c_fc`` =
  ``acquirer.<lang>.mlp_beforez.c_fc`` (``W_down``), ``c_proj2`` = ``mlp_afterz.c_proj2``
  (``W_up``) and ``W = mlp_zi.c_fc1(z).reshape(32, 32)`` applied to row vectors. xmr applies
  ``W^z`` to column vectors, so ``W^z = Wᵀ``: the rows of each ``mlp_zi`` (weight and bias) are
  permuted by the 32x32 transpose;
* ``z = QuickGELU(zi_adapter_student.c_fc1([f^sr; f^sa]))`` (generator ``to_z``);
* ``f^sr = ln_mu(h)[EOS] @ sr_projection`` and ``f^sa = mean_77 ln_sigma(h)``, ``h`` the first
  two frozen blocks (its ``mlp_sr`` / ``mlp_sa`` are never called).

``AdvAgent`` (the two-logit discriminator, trained inside the forward), ``mlp_sr`` / ``mlp_sa``,
the acquirers' ``ln``, ``target_projection`` and ``sigma_projection`` take no part in ``r^T``
and are reported unused.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from xmr.models.conversion.authors import adapter_key, take

#: DASD acquirer layer -> xmr dynamic adapter layer.
LAYERS = {'mlp_beforez.c_fc': 'down', 'mlp_afterz.c_proj2': 'up'}


def transpose_rows(tensor: torch.Tensor, d_u: int) -> torch.Tensor:
    """Permute the ``d_u²`` rows so that ``reshape(d_u, d_u)`` of the result is the transpose.

    A tensor of another row count (a file of another ``d_u`` than the config's) is returned
    as it is: the shape check then refuses it naming ``d_u`` and both shapes, where the
    reshape failed with a bare ``RuntimeError`` (``shape '[64, 64, 512]' is invalid``).
    """
    if tensor.shape[0] != d_u * d_u:
        return tensor
    return tensor.reshape(d_u, d_u, *tensor.shape[1:]).transpose(0, 1).reshape(tensor.shape)


def map_dasd(state: Mapping[str, torch.Tensor], model: nn.Module,
             used: set) -> dict[str, torch.Tensor]:
    """``{xmr key: tensor}`` of the dynamic adapters, the SDM and the generator."""
    branch, generator = model.language_branch, model.disentangler.generator
    mapped = {adapter_key(lang, block, f'{xmr}.{kind}'):
              take(state, used, f'transformer.resblocks.{block}.acquirer.{lang}.{layer}.{kind}')
              for lang in branch.languages for block in range(branch.num_blocks)
              for layer, xmr in LAYERS.items() for kind in ('weight', 'bias')}
    for kind in ('weight', 'bias'):
        mapped[f'disentangler.sr_norm.{kind}'] = take(state, used, f'ln_mu.{kind}')
        mapped[f'disentangler.sa_norm.{kind}'] = take(state, used, f'ln_sigma.{kind}')
        mapped[f'disentangler.generator.to_z.0.{kind}'] = take(
            state, used, f'transformer.zi_adapter_student.c_fc1.{kind}')
        for block in generator.blocks:
            head = take(state, used, f'transformer.resblocks.{block}.mlp_zi.c_fc1.{kind}')
            mapped[f'disentangler.generator.heads.{block}.{kind}'] = (
                None if head is None else transpose_rows(head, generator.d_u))
    projection = take(state, used, 'sr_projection')
    mapped['disentangler.sr_projection.weight'] = None if projection is None else projection.T
    return mapped
