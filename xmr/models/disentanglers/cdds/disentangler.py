"""The CDDS disentangler: decouple, identify related semantics, sample, constrain (paper §3).

Training forward, for a paired batch of patch tokens ``X_I [B, P, D]`` and word tokens
``X_T [B, W, D]``:

1. one dual-path UNet per modality gives semantic ``S_I, S_T`` and modality ``M_I, M_T``;
2. the column correlation of ``S_I`` and ``S_T`` gives sparse sampling weights;
3. distribution sampling gives the x-semantic ``Ŝ_I`` (image tokens in the text semantics'
   distributions) and ``Ŝ_T`` (text tokens in the image semantics' distributions);
4. the losses ``α_s L_s + α_m L_m + α_f L_f + (1 − α_f) L_x`` (see ``xmr.models.losses.cdds``):
   ``L_s = ½ [L_s(S_I, Ŝ_T) + L_s(Ŝ_I, S_T)]``, the other three averaged over the modalities.

Inference uses the semantic components only (:meth:`CDDSDisentangler.encode_image`,
:meth:`~CDDSDisentangler.encode_text`), pooled into one embedding per image or caption by
:meth:`~CDDSDisentangler.embed_image` / :meth:`~CDDSDisentangler.embed_text`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from xmr.models.disentanglers.base import TokenDisentangler
from xmr.models.disentanglers.cdds.correlation import CDDSColumnCorrelation
from xmr.models.disentanglers.cdds.sampling import CDDSDistributionSampler
from xmr.models.disentanglers.cdds.unet import DualPathUNet, UNetOutput
from xmr.models.losses.cdds import (
    SEMANTIC_TEMPERATURE,
    check_pair_scoring,
    check_tokens,
    information_integrity_loss,
    modality_consistency_loss,
    semantic_consistency_loss,
    x_semantic_reconstruction_loss,
)
from xmr.models.pooling import masked_token_mean
from xmr.registry import DISENTANGLERS

if TYPE_CHECKING:
    from xmr.models.backbones.base import TextTower, TowerShape

#: How one embedding per sample is read from its semantic tokens.
POOLINGS = ('mean', 'first')


@DISENTANGLERS.register_module()
class CDDSDisentangler(TokenDisentangler):
    """Constrained decoupling and distribution sampling of patch and word embeddings.

    Args:
        dim: token width ``D`` of both modalities (512 in the paper, after the linear maps of
            the ViT/Swin and BERT embeddings).
        num_heads: attention heads of the UNets' transformer layers.
        num_encoder_layers: encoder layers of each UNet (paper: 2).
        num_decoder_layers: levels of each decoder (paper: 2).
        num_perturbations: ``K`` noisy bottleneck copies averaged in training.
        noise_std: noise strength relative to each bottleneck token's std.
        ffn_ratio: MLP width over the UNets' width.
        dropout: dropout of the transformer layers.
        hidden_dim: width the UNets' encoders lift the tokens to (``None``: ``dim``, no lift).
        correlation: extra arguments of :class:`CDDSColumnCorrelation` (``mode`` ``'batch'`` /
            ``'subset'`` / ``'dataset'``, ``weighting`` ``'mask'`` / ``'shrinkage'``,
            ``init_sparsity``, ``subset_ratio``, ``min_variance``);
            must be ``None`` without distribution sampling, which has no correlation.
        temperature: τ of the semantic consistency InfoNCE.
        scoring: image–caption score of ``L_s``, ``'patch_word'`` (paper) or ``'pooled'``.
        pooling: ``'mean'`` (masked mean of the semantic tokens) or ``'first'`` (the first
            token: a CLS token the backbone put first) for :meth:`embed_image` / ``embed_text``.
        alpha_s: weight of semantic consistency.
        alpha_m: weight of modality consistency.
        alpha_f: weight of information integrity; ``1 − alpha_f`` weighs the x-semantic
            reconstruction, so ``alpha_f`` is in ``[0, 1]``.
        use_semantic_consistency: keep ``L_s`` (paper Table 3 removes each constraint).
        use_modality_consistency: keep ``L_m``.
        use_information_integrity: keep ``L_f`` and ``L_x`` (both reconstruct the tokens).
        use_distribution_sampling: build x-semantic components; without it ``L_s`` contrasts
            ``S_I`` with ``S_T`` directly and there is no ``L_x``.
        learned_reconstruction_weights: reconstruct the tokens as ``w_s S + w_m M`` (and
            ``w_s Ŝ + w_m M``) with learnable scalars ``w_s``, ``w_m`` per modality, initialised
            to 1 (Eq. 14); ``False`` fixes them at 1.
    """

    #: ``correlation``'s options go to the column correlation, which is given the widths:
    #: checked as the config loads (:func:`~xmr.registry.check_part_options`).
    option_dicts: ClassVar[Mapping[str, tuple[Callable, tuple[str, ...]]]] = {
        'correlation': (CDDSColumnCorrelation, ('image_dim', 'text_dim'))}

    @classmethod
    def check_tower(cls, cfg: Mapping[str, Any], tower: TextTower | TowerShape) -> None:
        """A ``dim`` in the config is the width ``E`` of the backbone's tokens, which the dual
        encoder fills in otherwise (:meth:`TokenDisentangler.check_tower`).

        Raises:
            ValueError: naming the key, both widths and the fix.
        """
        dim = cfg.get('dim')
        if dim is not None and dim != tower.embed_dim:
            raise ValueError(f'model.disentangler.dim={dim!r} but the backbone gives tokens of '
                             f'width {tower.embed_dim} (its embed_dim); leave dim out (the '
                             "backbone's is filled in)")

    def __init__(self, dim: int, num_heads: int = 8, num_encoder_layers: int = 2,
                 num_decoder_layers: int = 2, num_perturbations: int = 4,
                 noise_std: float = 0.1, ffn_ratio: float = 4.0, dropout: float = 0.0,
                 correlation: dict[str, Any] | None = None,
                 temperature: float = SEMANTIC_TEMPERATURE, scoring: str = 'patch_word',
                 pooling: str = 'mean', alpha_s: float = 1.0,
                 alpha_m: float = 1.0, alpha_f: float = 0.5,
                 use_semantic_consistency: bool = True, use_modality_consistency: bool = True,
                 use_information_integrity: bool = True,
                 use_distribution_sampling: bool = True, hidden_dim: int | None = None,
                 learned_reconstruction_weights: bool = True) -> None:
        super().__init__()
        check_pair_scoring(temperature, scoring)
        if pooling not in POOLINGS:
            raise ValueError(f"pooling '{pooling}' is not one of {POOLINGS}")
        if alpha_s < 0 or alpha_m < 0:
            raise ValueError(f'alpha_s and alpha_m must be non-negative, got {alpha_s}, '
                             f'{alpha_m}')
        if not 0 <= alpha_f <= 1:
            raise ValueError(f'alpha_f must be in [0, 1] (1 − alpha_f weighs the x-semantic '
                             f'reconstruction), got {alpha_f}')
        if correlation is not None and not use_distribution_sampling:
            raise ValueError(f'use_distribution_sampling=False removes the column correlation '
                             f'that correlation={correlation} configures; set correlation=None '
                             'for the ablation, or keep distribution sampling')
        unet = dict(dim=dim, num_heads=num_heads, num_encoder_layers=num_encoder_layers,
                    num_decoder_layers=num_decoder_layers, num_perturbations=num_perturbations,
                    noise_std=noise_std, ffn_ratio=ffn_ratio, dropout=dropout,
                    hidden_dim=hidden_dim)
        self.image_unet = DualPathUNet(**unet)
        self.text_unet = DualPathUNet(**unet)
        self.use_distribution_sampling = use_distribution_sampling
        if use_distribution_sampling:
            self.correlation = CDDSColumnCorrelation(dim, dim, **(correlation or {}))
            self.sampler = CDDSDistributionSampler()
        self.temperature, self.scoring, self.pooling = temperature, scoring, pooling
        self.num_heads = num_heads
        self.alpha_s, self.alpha_m, self.alpha_f = alpha_s, alpha_m, alpha_f
        self.use_semantic_consistency = use_semantic_consistency
        self.use_modality_consistency = use_modality_consistency
        self.use_information_integrity = use_information_integrity
        if use_information_integrity and learned_reconstruction_weights:
            # [w_s, w_m] of each modality's reconstruction (its own UNet's two components).
            self.reconstruction_weights = nn.ParameterDict(
                {'image': nn.Parameter(torch.ones(2)), 'text': nn.Parameter(torch.ones(2))})
        else:
            self.reconstruction_weights = None

    @property
    def loss_names(self) -> set[str]:
        """Terms :meth:`forward` returns, without the ``loss_`` prefix of their keys."""
        names = set()
        if self.use_semantic_consistency:
            names.add('semantic_consistency')
        if self.use_modality_consistency:
            names.add('modality_consistency')
        if self.use_information_integrity:
            names.add('information_integrity')
            if self.use_distribution_sampling:
                names.add('x_semantic_reconstruction')
        return names

    # ----------------------------------------------------------------------------- inference
    def encode_image(self, patch_tokens: torch.Tensor, patch_mask: torch.Tensor) -> torch.Tensor:
        """Semantic components of patches: ``[B, P, D]``, ``[B, P]`` -> ``[B, P, D]``."""
        return self.image_unet(patch_tokens, patch_mask).semantic

    def encode_text(self, word_tokens: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
        """Semantic components of words: ``[B, W, D]``, ``[B, W]`` -> ``[B, W, D]``."""
        return self.text_unet(word_tokens, word_mask).semantic

    def settings(self) -> dict[str, Any]:
        """The UNets' attention ``num_heads`` and the semantic tokens' ``pooling``."""
        return dict(num_heads=self.num_heads, pooling=self.pooling)

    def pool(self, semantic: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """One embedding per sample from its semantic tokens: ``[B, N, D]`` -> ``[B, D]``."""
        if self.pooling == 'first':
            return semantic[:, 0]
        return masked_token_mean(semantic, mask)

    def embed_image(self, patch_tokens: torch.Tensor, patch_mask: torch.Tensor) -> torch.Tensor:
        """Global semantic embedding of each image, ``[B, D]`` (compare by cosine)."""
        return self.pool(self.encode_image(patch_tokens, patch_mask), patch_mask)

    def embed_text(self, word_tokens: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
        """Global semantic embedding of each caption, ``[B, D]`` (compare by cosine)."""
        return self.pool(self.encode_text(word_tokens, word_mask), word_mask)

    # ----------------------------------------------------------------------------- correlation
    def dataset_correlation(self) -> nn.Module | None:
        """The column correlation when distribution sampling estimates it over the dataset."""
        if self.use_distribution_sampling and self.correlation.mode == 'dataset':
            return self.correlation
        return None

    @torch.no_grad()
    def update_correlation(self, patch_tokens: torch.Tensor, patch_mask: torch.Tensor,
                           word_tokens: torch.Tensor, word_mask: torch.Tensor) -> None:
        """Add a batch's semantic components to the dataset-level correlation estimate."""
        if not self.use_distribution_sampling:
            raise RuntimeError('this CDDS disentangler has no distribution sampling, so no '
                               'correlation to update')
        self.correlation.update(self.encode_image(patch_tokens, patch_mask), patch_mask,
                                self.encode_text(word_tokens, word_mask), word_mask)

    # ----------------------------------------------------------------------------- training
    def forward(self, patch_tokens: torch.Tensor, patch_mask: torch.Tensor,
                word_tokens: torch.Tensor, word_mask: torch.Tensor) -> dict[str, Any]:
        """Components and weighted losses of a paired batch.

        Args:
            patch_tokens: ``[B, P, D]`` image patch embeddings.
            patch_mask: ``[B, P]`` bool, True on real patches.
            word_tokens: ``[B, W, D]`` word embeddings; caption ``b`` describes image ``b``.
            word_mask: ``[B, W]`` bool, True on real words.

        Returns:
            ``image_semantic``, ``image_modality`` ``[B, P, D]``; ``text_semantic``,
            ``text_modality`` ``[B, W, D]``; with distribution sampling also
            ``image_x_semantic`` ``[B, P, D]``, ``text_x_semantic`` ``[B, W, D]`` and
            ``correlation`` (:class:`CorrelationWeights`); and ``losses``: the weighted terms
            that are switched on, among ``loss_semantic_consistency``,
            ``loss_modality_consistency``, ``loss_information_integrity``,
            ``loss_x_semantic_reconstruction``.
        """
        check_tokens(patch_tokens, patch_mask, 'patch tokens')
        check_tokens(word_tokens, word_mask, 'word tokens')
        if patch_tokens.shape[0] != word_tokens.shape[0]:
            raise ValueError(f'CDDS needs paired batches, got {patch_tokens.shape[0]} images '
                             f'and {word_tokens.shape[0]} captions')
        image = self.image_unet(patch_tokens, patch_mask)
        text = self.text_unet(word_tokens, word_mask)
        outputs: dict[str, Any] = dict(
            image_semantic=image.semantic, image_modality=image.modality,
            text_semantic=text.semantic, text_modality=text.modality)
        if self.use_distribution_sampling:
            weights = self.correlation(image.semantic, patch_mask, text.semantic, word_mask)
            outputs.update(
                correlation=weights,
                image_x_semantic=self.sampler(image.semantic, patch_mask, text.semantic,
                                              word_mask, weights.image_from_text),
                text_x_semantic=self.sampler(text.semantic, word_mask, image.semantic,
                                             patch_mask, weights.text_from_image))
        # The tokens are the reconstructions' fixed target: with a trainable backbone, a target
        # that moved would let the towers shrink or flatten their tokens to be easy to rebuild.
        outputs['losses'] = self._losses(outputs, image, text, patch_tokens.detach(),
                                         patch_mask, word_tokens.detach(), word_mask)
        return outputs

    def _reconstruction_weight(self, modality: str) -> tuple[torch.Tensor | float, ...]:
        """``(w_s, w_m)`` of a modality's reconstructions (Eq. 14)."""
        if self.reconstruction_weights is None:
            return 1.0, 1.0
        return tuple(self.reconstruction_weights[modality])

    def _losses(self, outputs: dict[str, Any], image: UNetOutput, text: UNetOutput,
                patch_tokens: torch.Tensor, patch_mask: torch.Tensor,
                word_tokens: torch.Tensor, word_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        losses: dict[str, torch.Tensor] = {}
        if self.use_semantic_consistency:
            if self.use_distribution_sampling:
                consistency = (
                    semantic_consistency_loss(image.semantic, patch_mask,
                                              outputs['text_x_semantic'], word_mask,
                                              self.temperature, self.scoring)
                    + semantic_consistency_loss(outputs['image_x_semantic'], patch_mask,
                                                text.semantic, word_mask, self.temperature,
                                                self.scoring)) / 2
            else:
                consistency = semantic_consistency_loss(image.semantic, patch_mask,
                                                        text.semantic, word_mask,
                                                        self.temperature, self.scoring)
            losses['loss_semantic_consistency'] = self.alpha_s * consistency
        if self.use_modality_consistency:
            losses['loss_modality_consistency'] = self.alpha_m * (
                modality_consistency_loss(image.modality, patch_mask)
                + modality_consistency_loss(text.modality, word_mask)) / 2
        if self.use_information_integrity:
            (image_ws, image_wm), (text_ws, text_wm) = (self._reconstruction_weight(m)
                                                        for m in ('image', 'text'))
            losses['loss_information_integrity'] = self.alpha_f * (
                information_integrity_loss(image_ws * image.semantic, image_wm * image.modality,
                                           patch_tokens, patch_mask)
                + information_integrity_loss(text_ws * text.semantic, text_wm * text.modality,
                                             word_tokens, word_mask)) / 2
            if self.use_distribution_sampling:
                losses['loss_x_semantic_reconstruction'] = (1 - self.alpha_f) * (
                    x_semantic_reconstruction_loss(image_ws * outputs['image_x_semantic'],
                                                   image_wm * image.modality, patch_tokens,
                                                   patch_mask)
                    + x_semantic_reconstruction_loss(text_ws * outputs['text_x_semantic'],
                                                     text_wm * text.modality, word_tokens,
                                                     word_mask)) / 2
        return losses
