"""The dual-path UNet of CDDS (paper §3.1): one modality's tokens -> semantic + modality parts.

::

    X ──► lift ──► E_1 ──► … ──► E_L = H           (shared encoder, levels H_0 = lift(X) … H_L)
                                  │
               K × (H + ε_k) ──► T_p ──► Z_k       (Gaussian-noise perturbations)
                                  │
            ┌─────────────────────┴─────────────────────┐
    semantic decoder D^s(Z_k; H_L, H_{L−1}, …)   modality decoder D^m(Z_k; H_L, H_{L−1}, …)
            └──────── mean over k ──────┬───── mean over k ─────┘
                                   out(·): S, M

The encoder first lifts the ``D``-wide tokens to a higher width ``D_h`` (``hidden_dim``; a
linear map), where the encoder, the perturbations and both decoders work; each decoder's output
is mapped back to ``D``, so that ``S + M`` can reconstruct the tokens. ``hidden_dim=None`` keeps
``D`` throughout (no lift, no output maps).

Every decoder level is a transformer layer followed by a linear that fuses its output with the
skip from the encoder level of the same depth, ``D_j = W_j [T_j(D_{j−1}) ; H_{L−j+1}]``, j = 1, 2, …
(concatenate, then project, as a UNet's up-path concatenates its skip). Averaging the decoders
over ``K`` perturbations of the bottleneck makes each component a smoothed estimate that does
not hinge on any small detail of the bottleneck. At inference the noise is off (``K = 1``, the
clean bottleneck) unless ``perturb_at_inference`` asks for the stochastic estimate.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from xmr.models.losses.cdds import check_tokens


class UNetOutput(NamedTuple):
    """Components of one modality's tokens, both ``[B, N, D]`` and zero on padding."""

    semantic: torch.Tensor
    modality: torch.Tensor


def transformer_layer(dim: int, num_heads: int, ffn_ratio: float,
                      dropout: float) -> nn.TransformerEncoderLayer:
    """A pre-norm transformer encoder layer (self-attention + GELU MLP) on ``[B, N, D]``."""
    return nn.TransformerEncoderLayer(dim, num_heads, dim_feedforward=round(dim * ffn_ratio),
                                      dropout=dropout, activation='gelu', batch_first=True,
                                      norm_first=True)


class PathDecoder(nn.Module):
    """One decoding path: per level a transformer layer, then a linear fusing the skip.

    Args:
        dim: width ``D_h`` the path works at.
        num_layers: levels of the path.
        num_heads: attention heads.
        ffn_ratio: MLP width over ``D_h``.
        dropout: dropout of the transformer layers.
        out_dim: width of the component it returns (the tokens' ``D``); ``None`` = ``dim``.
    """

    def __init__(self, dim: int, num_layers: int, num_heads: int, ffn_ratio: float,
                 dropout: float, out_dim: int | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            transformer_layer(dim, num_heads, ffn_ratio, dropout) for _ in range(num_layers))
        self.fuse = nn.ModuleList(nn.Linear(2 * dim, dim) for _ in range(num_layers))
        self.out = nn.Linear(dim, out_dim) if out_dim not in (None, dim) else nn.Identity()

    def forward(self, hidden: torch.Tensor, skips: list[torch.Tensor],
                padding_mask: torch.Tensor) -> torch.Tensor:
        """``D_j = W_j [T_j(D_{j−1}) ; skip_j]``.

        Args:
            hidden: ``[B, N, D_h]`` the perturbed bottleneck ``Z``.
            skips: one ``[B, N, D_h]`` encoder level per decoder level, deepest first.
            padding_mask: ``[B, N]`` bool, True on padding (PyTorch's key-padding convention).

        Returns:
            ``[B, N, D]`` (``out_dim``).
        """
        for layer, fuse, skip in zip(self.layers, self.fuse, skips, strict=True):
            hidden = layer(hidden, src_key_padding_mask=padding_mask)
            hidden = fuse(torch.cat([hidden, skip], dim=-1))
        return self.out(hidden)


class DualPathUNet(nn.Module):
    """Decouples ``[B, N, D]`` tokens of one modality into semantic and modality components.

    Args:
        dim: token width ``D``.
        num_heads: attention heads of every transformer layer.
        num_encoder_layers: ``L``, encoder layers (the paper uses 2).
        num_decoder_layers: levels of each decoder (the paper uses 2); at most ``L + 1``, the
            deepest taking the skip from ``H_L`` and the ``(L+1)``-th from the input itself.
        num_perturbations: ``K``, noisy copies of the bottleneck averaged in training.
        noise_std: std of the noise relative to each bottleneck token's own std:
            ``H + noise_std · std(H_n) · ε``, ``ε ~ N(0, I)``, so the perturbation has the same
            strength whatever the scale of the backbone's embeddings.
        ffn_ratio: MLP width over ``D_h`` in the transformer layers.
        dropout: dropout of the transformer layers.
        perturb_at_inference: keep the ``K`` noisy passes in eval mode too.
        hidden_dim: ``D_h >= D``, the width the encoder lifts the tokens to; ``None`` = ``D``.
    """

    def __init__(self, dim: int, num_heads: int = 8, num_encoder_layers: int = 2,
                 num_decoder_layers: int = 2, num_perturbations: int = 4,
                 noise_std: float = 0.1, ffn_ratio: float = 4.0, dropout: float = 0.0,
                 perturb_at_inference: bool = False, hidden_dim: int | None = None) -> None:
        super().__init__()
        width = hidden_dim or dim
        if width < dim:
            raise ValueError(f'hidden_dim {hidden_dim} must lift the tokens: at least their '
                             f'width {dim}')
        if width % num_heads:
            raise ValueError(f'width {width} is not divisible by num_heads {num_heads}')
        if num_encoder_layers < 1 or num_decoder_layers < 1:
            raise ValueError('the UNet needs at least one encoder and one decoder layer, got '
                             f'{num_encoder_layers} and {num_decoder_layers}')
        if num_decoder_layers > num_encoder_layers + 1:
            raise ValueError(f'num_decoder_layers {num_decoder_layers} has no encoder level to '
                             f'skip from: at most num_encoder_layers + 1 = '
                             f'{num_encoder_layers + 1}')
        if num_perturbations < 1:
            raise ValueError(f'num_perturbations must be at least 1, got {num_perturbations}')
        if noise_std < 0:
            raise ValueError(f'noise_std must be non-negative, got {noise_std}')
        self.dim, self.hidden_dim = dim, width
        self.num_perturbations, self.noise_std = num_perturbations, noise_std
        self.perturb_at_inference = perturb_at_inference
        self.lift = nn.Linear(dim, width) if width != dim else nn.Identity()
        self.encoder = nn.ModuleList(
            transformer_layer(width, num_heads, ffn_ratio, dropout)
            for _ in range(num_encoder_layers))
        self.perturbation = transformer_layer(width, num_heads, ffn_ratio, dropout)
        self.semantic_decoder = PathDecoder(width, num_decoder_layers, num_heads, ffn_ratio,
                                            dropout, out_dim=dim)
        self.modality_decoder = PathDecoder(width, num_decoder_layers, num_heads, ffn_ratio,
                                            dropout, out_dim=dim)

    def encode_levels(self, tokens: torch.Tensor,
                      padding_mask: torch.Tensor) -> list[torch.Tensor]:
        """``[B, N, D]`` -> levels ``[H_0 = lift(X), H_1, …, H_L]``, each ``[B, N, D_h]``."""
        levels = [self.lift(tokens)]
        for layer in self.encoder:
            levels.append(layer(levels[-1], src_key_padding_mask=padding_mask))
        return levels

    @property
    def perturbs(self) -> bool:
        """Whether this forward draws the ``K`` noisy copies."""
        return self.training or self.perturb_at_inference

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> UNetOutput:
        """Semantic and modality components of a batch of tokens.

        Args:
            tokens: ``[B, N, D]``.
            mask: ``[B, N]`` bool, True on real tokens; every sample needs one.

        Returns:
            :class:`UNetOutput` with ``[B, N, D]`` components, zero on padding.
        """
        check_tokens(tokens, mask, 'UNet input')
        if tokens.shape[-1] != self.dim:
            raise ValueError(f'UNet built for width {self.dim}, got tokens of width '
                             f'{tokens.shape[-1]}')
        padding = ~mask
        levels = self.encode_levels(tokens, padding)
        copies = self.num_perturbations if self.perturbs else 1
        bottleneck = levels[-1].repeat(copies, 1, 1)
        if self.perturbs:
            scale = self.noise_std * bottleneck.detach().std(dim=-1, keepdim=True)
            bottleneck = bottleneck + scale * torch.randn_like(bottleneck)
        repeated_padding = padding.repeat(copies, 1)
        perturbed = self.perturbation(bottleneck, src_key_padding_mask=repeated_padding)
        depth = len(self.semantic_decoder.layers)
        skips = [levels[-1 - j].repeat(copies, 1, 1) for j in range(depth)]
        batch_shape = (copies, *tokens.shape)
        semantic = self.semantic_decoder(perturbed, skips, repeated_padding)
        modality = self.modality_decoder(perturbed, skips, repeated_padding)
        keep = mask.unsqueeze(-1).to(tokens.dtype)
        return UNetOutput(semantic.reshape(batch_shape).mean(0) * keep,
                          modality.reshape(batch_shape).mean(0) * keep)
