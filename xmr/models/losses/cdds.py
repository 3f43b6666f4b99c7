"""The loss terms of CDDS (constrained decoupling and distribution sampling, paper §3.4).

Four constraints train the dual-path UNets of a CDDS disentangler:

* semantic consistency ``L_s``: contrastive image–caption loss between the semantic components
  of one modality and the x-semantic components of the other, scored over patch–word pairs;
* modality consistency ``L_m``: the modality component of every sample follows its modality's
  distribution (KL between Gaussian column estimates);
* information integrity ``L_f``: semantic + modality components reconstruct the input tokens;
* x-semantic reconstruction ``L_x``: x-semantic + modality components reconstruct them too.

The disentangler weighs them as ``α_s L_s + α_m L_m + α_f L_f + (1 − α_f) L_x``.
:class:`CDDSDistributionSamplingLoss` is the paper's Table 4 plug-in: distribution sampling and
``L_s`` on the token outputs of a plain dual encoder, without any decoupling.

Token tensors are ``[B, N, D]`` with a ``[B, N]`` bool mask, True on real tokens. Every
function reads only the real tokens. ``docs/methods/cdds.md`` lists the choices made where the
paper is ambiguous.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.losses.contrastive import symmetric_cross_entropy
from xmr.models.losses.distributed import gather_with_grad
from xmr.models.losses.precision import in_fp32
from xmr.models.pooling import masked_token_mean
from xmr.registry import MODELS

#: Ways of scoring an image–caption pair from their token sets.
PAIR_SCORINGS = ('patch_word', 'pooled')
#: τ of ``L_s``: the paper gives none; xmr's fixed default (docs/methods/cdds.md).
SEMANTIC_TEMPERATURE = 0.05


def check_tokens(tokens: torch.Tensor, mask: torch.Tensor, name: str) -> None:
    """Raise a ``ValueError`` naming ``name`` unless ``tokens [B, N, D]`` fits ``mask [B, N]``.

    Every sample needs at least one real token: its statistics and attention are undefined
    otherwise. That is checked on a mask in host memory only: reading one back from a GPU would
    make the step wait for the device at each check, several a step. The towers' masks always
    hold their special tokens or patches, and an empty sample's NaN losses stop the loop.
    """
    if tokens.dim() != 3:
        raise ValueError(f'{name} must be [B, N, D], got shape {tuple(tokens.shape)}')
    if mask.dtype != torch.bool or tuple(mask.shape) != tuple(tokens.shape[:2]):
        raise ValueError(f'{name} mask must be a bool tensor of shape {tuple(tokens.shape[:2])}, '
                         f'got {mask.dtype} {tuple(mask.shape)}')
    if mask.device.type != 'cpu':
        return
    empty = (~mask.any(dim=1)).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f'{name}: samples {empty} have no real token in their mask')


def check_pair_scoring(temperature: float, scoring: str) -> None:
    """Refuse a semantic consistency setting (:func:`semantic_consistency_loss`'s ``τ`` and
    ``scoring``) that no batch can score; modules call it as they are built.

    Raises:
        ValueError: ``temperature`` <= 0, or ``scoring`` not one of :data:`PAIR_SCORINGS`.
    """
    if temperature <= 0:
        raise ValueError(f'temperature must be positive, got {temperature}')
    if scoring not in PAIR_SCORINGS:
        raise ValueError(f"scoring '{scoring}' is not one of {PAIR_SCORINGS}")


def patch_word_similarity(image_tokens: torch.Tensor, image_mask: torch.Tensor,
                          text_tokens: torch.Tensor, text_mask: torch.Tensor) -> torch.Tensor:
    """Image–caption scores from patch–word cosine similarities.

    ``s(I, T) = mean_{w ∈ T} max_{p ∈ I} cos(p, w)``: every word finds its best patch, the
    caption's score is the mean over its real words.

    Args:
        image_tokens: ``[B_i, P, D]`` patch tokens.
        image_mask: ``[B_i, P]`` bool.
        text_tokens: ``[B_t, W, D]`` word tokens.
        text_mask: ``[B_t, W]`` bool.

    Returns:
        ``[B_i, B_t]`` scores in ``[-1, 1]``.
    """
    # In fp32: fp16 rounds normalize's eps (1e-12) to 0, and CPU autocast (unlike CUDA's) runs
    # the norm in fp16, so a padded token (zero, as the UNets give) would be 0/0, NaN in the
    # scores and in every gradient. Autocast still runs the product in its dtype.
    image = F.normalize(image_tokens.float(), dim=-1)
    text = F.normalize(text_tokens.float(), dim=-1)
    return best_patch_mean(torch.einsum('ipd,twd->itwp', image, text), image_mask, text_mask)


@in_fp32
def best_patch_mean(cosine: torch.Tensor, image_mask: torch.Tensor,
                    text_mask: torch.Tensor) -> torch.Tensor:
    """``s(I, T) = mean_{w ∈ T} max_{p ∈ I} cos(p, w)`` from ``[B_i, B_t, W, P]`` cosines and the
    ``[B_i, P]``, ``[B_t, W]`` masks -> ``[B_i, B_t]``, in fp32
    (:func:`~xmr.models.losses.precision.in_fp32`)."""
    padding = ~image_mask[:, None, None, :]
    best_patch = cosine.masked_fill(padding, float('-inf')).amax(dim=-1)
    words = text_mask.to(best_patch.dtype)[None]
    return (best_patch * words).sum(-1) / words.sum(-1)


def pooled_similarity(image_tokens: torch.Tensor, image_mask: torch.Tensor,
                      text_tokens: torch.Tensor, text_mask: torch.Tensor) -> torch.Tensor:
    """Cosine of the masked token means, the score retrieval uses: ``[B_i, B_t]``."""
    image = F.normalize(masked_token_mean(image_tokens, image_mask), dim=-1)
    text = F.normalize(masked_token_mean(text_tokens, text_mask), dim=-1)
    return image @ text.t()


def semantic_consistency_loss(image_tokens: torch.Tensor, image_mask: torch.Tensor,
                              text_tokens: torch.Tensor, text_mask: torch.Tensor,
                              temperature: float = SEMANTIC_TEMPERATURE,
                              scoring: str = 'patch_word') -> torch.Tensor:
    """Semantic consistency ``L_s``: symmetric InfoNCE over the paired batch.

    Image ``b`` and caption ``b`` are the positive pair, every other caption (image) of the
    batch a negative: ``L = (CE(S/τ, I) + CE(Sᵀ/τ, I)) / 2``. CDDS calls it with the semantic
    components of one modality and the x-semantic components of the other, which share one
    value distribution.

    Under DDP the batch is the global one, as one process with it would see it: the four
    tensors are gathered from every rank with gradients
    (:func:`~xmr.models.losses.distributed.gather_with_grad`, as the batch-contrastive losses
    of the retrievers and DASD's SDM are), the tokens padded to the longest patch and word
    count of any rank with their masks ``False`` there, so every rank computes the global
    batch's loss and DDP's average of the gradients is that of one process. Every rank must
    call it alike (the same number of times a step).

    Args:
        image_tokens: ``[B, P, D]``.
        image_mask: ``[B, P]`` bool.
        text_tokens: ``[B, W, D]``, caption ``b`` describes image ``b``.
        text_mask: ``[B, W]`` bool.
        temperature: τ.
        scoring: ``'patch_word'`` (:func:`patch_word_similarity`, the paper's patch–word pairs)
            or ``'pooled'`` (:func:`pooled_similarity`).

    Returns:
        Scalar loss.
    """
    check_pair_scoring(temperature, scoring)
    if image_tokens.shape[0] != text_tokens.shape[0]:
        raise ValueError('semantic consistency needs paired batches, got '
                         f'{image_tokens.shape[0]} images and {text_tokens.shape[0]} captions')
    image_tokens, image_mask, text_tokens, text_mask = gather_with_grad(
        image_tokens, image_mask, text_tokens, text_mask)
    score = patch_word_similarity if scoring == 'patch_word' else pooled_similarity
    return symmetric_cross_entropy(score(image_tokens, image_mask, text_tokens, text_mask)
                                   / temperature)


def gaussian_kl(mean_p: torch.Tensor, var_p: torch.Tensor, mean_q: torch.Tensor,
                var_q: torch.Tensor) -> torch.Tensor:
    """``KL(N(μ_p, σ_p²) ‖ N(μ_q, σ_q²))``, elementwise with broadcasting.

    ``KL = ½ [log(σ_q²/σ_p²) + (σ_p² + (μ_p − μ_q)²) / σ_q² − 1]``.
    """
    return 0.5 * (torch.log(var_q / var_p) + (var_p + (mean_p - mean_q) ** 2) / var_q - 1.0)


@in_fp32
def modality_consistency_loss(modality_tokens: torch.Tensor, mask: torch.Tensor,
                              min_variance: float = 1e-6) -> torch.Tensor:
    """Modality consistency ``L_m``: every sample's modality component has the modality's law.

    Per feature column ``d``, a Gaussian is fitted to the values of one sample's real tokens
    ``N(μ_bd, σ_bd²)`` and one to all real tokens of the batch ``N(μ_d, σ_d²)``;
    ``L_m = mean_{b,d} KL(N(μ_bd, σ_bd²) ‖ N(μ_d, σ_d²))``. It is zero when all samples share
    the same per-column mean and variance, i.e. when the modality component carries nothing
    particular to a sample. In fp32 under autocast (:func:`~xmr.models.losses.precision.in_fp32`).

    Args:
        modality_tokens: ``[B, N, D]`` patch (or word) modality components.
        mask: ``[B, N]`` bool.
        min_variance: floor of the variances (a sample of one token has none).

    Returns:
        Scalar loss.
    """
    weights = mask.to(modality_tokens.dtype).unsqueeze(-1)
    count = weights.sum(1)
    sample_mean = (modality_tokens * weights).sum(1) / count
    sample_var = (((modality_tokens - sample_mean[:, None]) ** 2) * weights).sum(1) / count
    total = count.sum(0)
    pooled_mean = (modality_tokens * weights).sum((0, 1)) / total
    pooled_var = (((modality_tokens - pooled_mean) ** 2) * weights).sum((0, 1)) / total
    kl = gaussian_kl(sample_mean, sample_var.clamp(min=min_variance),
                     pooled_mean, pooled_var.clamp(min=min_variance))
    return kl.mean()


def masked_reconstruction_error(reconstruction: torch.Tensor, target: torch.Tensor,
                                mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the real tokens: ``[B, N, D]`` ×2, ``[B, N]`` -> scalar."""
    squared = ((reconstruction - target) ** 2).mean(-1)
    return (squared * mask.to(squared.dtype)).sum() / mask.sum()


@in_fp32
def information_integrity_loss(semantic: torch.Tensor, modality: torch.Tensor,
                               tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Information integrity ``L_f = ‖(S + M) − X‖²`` over real tokens (mean per element).

    The reconstruction operator is the sum: an embedding is its semantic plus its modality
    component, with no extra decoder that could hide information loss. In fp32 under autocast
    (:func:`~xmr.models.losses.precision.in_fp32`), as :func:`x_semantic_reconstruction_loss`.
    """
    return masked_reconstruction_error(semantic + modality, tokens, mask)


@in_fp32
def x_semantic_reconstruction_loss(x_semantic: torch.Tensor, modality: torch.Tensor,
                                   tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x-semantic reconstruction ``L_x = ‖(Ŝ + M) − X‖²`` over real tokens.

    The x-semantic component ``Ŝ`` (the tokens' semantics re-expressed in the other modality's
    value distributions) must, with the modality component, still give back the tokens: the
    sampling may move values between distributions but not lose what the tokens mean.
    """
    return masked_reconstruction_error(x_semantic + modality, tokens, mask)


@MODELS.register_module()
class CDDSSemanticConsistencyLoss(nn.Module):
    """Module form of :func:`semantic_consistency_loss`, times ``loss_weight``."""

    def __init__(self, temperature: float = SEMANTIC_TEMPERATURE, scoring: str = 'patch_word',
                 loss_weight: float = 1.0) -> None:
        super().__init__()
        check_pair_scoring(temperature, scoring)
        self.temperature, self.scoring, self.loss_weight = temperature, scoring, loss_weight

    def forward(self, image_tokens: torch.Tensor, image_mask: torch.Tensor,
                text_tokens: torch.Tensor, text_mask: torch.Tensor) -> torch.Tensor:
        """``[B, P, D]``, ``[B, P]``, ``[B, W, D]``, ``[B, W]`` -> scalar."""
        return self.loss_weight * semantic_consistency_loss(
            image_tokens, image_mask, text_tokens, text_mask, self.temperature, self.scoring)


@MODELS.register_module()
class CDDSModalityConsistencyLoss(nn.Module):
    """Module form of :func:`modality_consistency_loss`, times ``loss_weight``."""

    def __init__(self, min_variance: float = 1e-6, loss_weight: float = 1.0) -> None:
        super().__init__()
        self.min_variance, self.loss_weight = min_variance, loss_weight

    def forward(self, modality_tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[B, N, D]``, ``[B, N]`` -> scalar."""
        return self.loss_weight * modality_consistency_loss(modality_tokens, mask,
                                                            self.min_variance)


@MODELS.register_module()
class CDDSInformationIntegrityLoss(nn.Module):
    """Module form of :func:`information_integrity_loss`, times ``loss_weight``."""

    def __init__(self, loss_weight: float = 1.0) -> None:
        super().__init__()
        self.loss_weight = loss_weight

    def forward(self, semantic: torch.Tensor, modality: torch.Tensor, tokens: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """``[B, N, D]`` ×3, ``[B, N]`` -> scalar."""
        return self.loss_weight * information_integrity_loss(semantic, modality, tokens, mask)


@MODELS.register_module()
class CDDSXSemanticReconstructionLoss(nn.Module):
    """Module form of :func:`x_semantic_reconstruction_loss`, times ``loss_weight``."""

    def __init__(self, loss_weight: float = 1.0) -> None:
        super().__init__()
        self.loss_weight = loss_weight

    def forward(self, x_semantic: torch.Tensor, modality: torch.Tensor, tokens: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """``[B, N, D]`` ×3, ``[B, N]`` -> scalar."""
        return self.loss_weight * x_semantic_reconstruction_loss(x_semantic, modality, tokens,
                                                                 mask)


@MODELS.register_module()
class CDDSDistributionSamplingLoss(nn.Module):
    """Distribution sampling as a plug-in loss for a plain dual encoder (paper Table 4).

    The encoder's patch and word tokens are taken whole as the semantics: the column
    correlation picks, for each column, the related columns of the other modality; the sampler
    builds the x-semantic tokens; ``L_s`` contrasts each modality's tokens with the other's
    x-semantic tokens: ``L = ½ [L_s(X_I, X̂_T) + L_s(X̂_I, X_T)]``.

    The correlation and the sampler are built from the ``MODELS`` registry (types
    ``CDDSColumnCorrelation`` and ``CDDSDistributionSampler`` of
    ``xmr.models.disentanglers.cdds``), so that this module needs no import of the
    disentangler package.

    Args:
        dim: token width ``D`` of both modalities.
        correlation: extra arguments of the correlation (``mode``, ``weighting``, ``init_sparsity``,
            ``subset_ratio``, ...), or a full config with another ``type``.
        sampler: config of the sampler (default ``CDDSDistributionSampler``).
        temperature: τ of ``L_s``.
        scoring: pair scoring of ``L_s`` (see :func:`semantic_consistency_loss`).
        loss_weight: factor on the loss.
    """

    given_by_builder = ('dim',)  # the dual encoder's embedding width

    def __init__(self, dim: int, correlation: dict | None = None, sampler: dict | None = None,
                 temperature: float = SEMANTIC_TEMPERATURE, scoring: str = 'patch_word',
                 loss_weight: float = 1.0) -> None:
        super().__init__()
        correlation_cfg = dict(type='CDDSColumnCorrelation', image_dim=dim, text_dim=dim)
        correlation_cfg.update(correlation or {})
        self.correlation = MODELS.build(correlation_cfg)
        self.sampler = MODELS.build(sampler or dict(type='CDDSDistributionSampler'))
        self.consistency = CDDSSemanticConsistencyLoss(temperature, scoring, loss_weight)

    def forward(self, image_tokens: torch.Tensor, image_mask: torch.Tensor,
                text_tokens: torch.Tensor, text_mask: torch.Tensor) -> torch.Tensor:
        """``[B, P, D]``, ``[B, P]``, ``[B, W, D]``, ``[B, W]`` -> scalar."""
        check_tokens(image_tokens, image_mask, 'image tokens')
        check_tokens(text_tokens, text_mask, 'text tokens')
        weights = self.correlation(image_tokens, image_mask, text_tokens, text_mask)
        image_x = self.sampler(image_tokens, image_mask, text_tokens, text_mask,
                               weights.image_from_text)
        text_x = self.sampler(text_tokens, text_mask, image_tokens, image_mask,
                              weights.text_from_image)
        return (self.consistency(image_tokens, image_mask, text_x, text_mask)
                + self.consistency(image_x, image_mask, text_tokens, text_mask)) / 2
