"""open_clip CLIP as a frozen :class:`VisionLanguageBackbone`."""
from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.adapters.base import AdapterSite
from xmr.models.backbones.base import SiteHooks, TextTower, TokenOutput, VisionLanguageBackbone
from xmr.models.backbones.open_clip_pretrained import (
    build_open_clip,
    check_record_tokenizer,
    record_tokenizer_cfg,
)
from xmr.models.language.packed_tokens import PackedTokens
from xmr.registry import MODELS, TOKENIZERS


class OpenCLIPTextTower(TextTower):
    """open_clip's causal text transformer, run block by block with adapter sites.

    The residual block is written out on the frozen weights rather than called, because
    ``nn.MultiheadAttention`` reads ``in_proj_weight``/``out_proj`` directly: a wrapped projection
    would be silently ignored (DESIGN pitfalls). Written out, every site is reachable.

    Args:
        clip: an ``open_clip.CLIP`` whose text tower is used (not copied).
    """

    causal = True
    pooling = 'eos'

    def __init__(self, clip: nn.Module) -> None:
        super().__init__()
        self.token_embedding = clip.token_embedding
        self.positional_embedding = clip.positional_embedding
        self.blocks = clip.transformer.resblocks
        self.ln_final = clip.ln_final
        self.text_projection = clip.text_projection
        self.width = clip.transformer.width
        self.num_blocks = len(self.blocks)
        self.context_length = clip.positional_embedding.shape[0]
        self.embed_dim = (clip.text_projection.out_features
                          if isinstance(clip.text_projection, nn.Linear)
                          else clip.text_projection.shape[1])
        self.num_heads = self.blocks[0].attn.num_heads

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.token_embedding(input_ids)

    def add_positions(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        if length > self.context_length:
            raise ValueError(f'sequence of {length} tokens exceeds the text context length '
                             f'{self.context_length}')
        return x + self.positional_embedding[:length].to(x.dtype)

    @staticmethod
    def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                hooks: SiteHooks | None, site: AdapterSite, index: int) -> torch.Tensor:
        out = F.linear(x, weight, bias)
        if hooks is not None:
            delta = hooks.linear(site, index, x)
            if delta is not None:
                out = out + delta
        return out

    def run_block(self, index: int, x: torch.Tensor, mask: torch.Tensor | PackedTokens | None,
                  hooks: SiteHooks | None = None) -> torch.Tensor:
        """One pre-LN block: ``x + attn(ln_1 x)`` then ``x + mlp(ln_2 x)``, with sites.

        Args:
            index: block index.
            x: ``[B, L, D]`` hidden states, or ``[T, D]`` packed tokens.
            mask: additive attention bias ``[B, 1, L, L]`` from :meth:`build_mask`, or the
                batch's :class:`PackedTokens` when ``x`` is packed.
            hooks: adapter hooks or ``None``.

        Returns:
            ``x``'s shape.
        """
        block = self.blocks[index]
        attn = block.attn

        qkv = self._linear(block.ln_1(x), attn.in_proj_weight, attn.in_proj_bias, hooks,
                           AdapterSite.ATTN_QKV, index)
        context = self.attend(*qkv.chunk(3, dim=-1), mask)
        h = block.ls_1(self._linear(context, attn.out_proj.weight, attn.out_proj.bias, hooks,
                                    AdapterSite.ATTN_OUT, index))
        if hooks is not None:
            h = hooks.residual(AdapterSite.ATTN_OUTPUT, index, h)
        x = x + h

        mlp = block.mlp
        h = self._linear(block.ln_2(x), mlp.c_fc.weight, mlp.c_fc.bias, hooks,
                         AdapterSite.MLP_FC, index)
        h = self._linear(mlp.gelu(h), mlp.c_proj.weight, mlp.c_proj.bias, hooks,
                         AdapterSite.MLP_PROJ, index)
        h = block.ls_2(h)
        if hooks is not None:
            h = hooks.residual(AdapterSite.MLP_OUTPUT, index, h)
        x = x + h
        if hooks is not None:
            x = hooks.residual(AdapterSite.BLOCK_OUTPUT, index, x)
        return x

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        pooled = self.ln_final(pooled)
        if isinstance(self.text_projection, nn.Linear):
            return self.text_projection(pooled)
        return pooled @ self.text_projection

    def linear_shapes(self) -> dict[AdapterSite, tuple[int, int]]:
        """``(in_features, out_features)`` of the frozen projection at each linear site."""
        mlp = self.blocks[0].mlp
        return {
            AdapterSite.ATTN_QKV: (self.width, 3 * self.width),
            AdapterSite.ATTN_OUT: (self.width, self.width),
            AdapterSite.MLP_FC: (self.width, mlp.c_fc.out_features),
            AdapterSite.MLP_PROJ: (mlp.c_fc.out_features, self.width),
        }


def open_clip_image_tokens(visual: nn.Module, images: torch.Tensor, arch: str) -> TokenOutput:
    """An open_clip ``VisionTransformer``'s class token then patches in the joint space.

    ``forward_intermediates`` on the last block with its final norm gives the class token and
    the patches apart; both go through ``ln_post`` and ``proj`` as the pooled token does, so
    with ``'tok'`` pooling token 0 is the tower's own image embedding.

    Args:
        visual: the image tower of an open_clip CLIP.
        images: ``[B, 3, H, W]`` normalised images.
        arch: architecture name for the error of a tower without token outputs.

    Returns:
        :class:`TokenOutput` with ``[B, 1 + P, E]`` tokens, all real, and the pooled ``[B, E]``.
    """
    import open_clip

    if not isinstance(visual, open_clip.transformer.VisionTransformer) or \
            visual.attn_pool is not None or visual.proj is None:
        raise TypeError(f'token-level image encoding needs an open_clip VisionTransformer '
                        f'without attentional pooling; {arch} has {type(visual).__name__}')
    out = visual.forward_intermediates(images, indices=1, normalize_intermediates=True,
                                       output_fmt='NLC', output_extra_tokens=True)
    tokens = torch.cat([out['image_intermediates_prefix'][0],
                        out['image_intermediates'][0]], dim=1) @ visual.proj
    mask = torch.ones(tokens.shape[:2], dtype=torch.bool, device=tokens.device)
    return TokenOutput(tokens, mask, out['image_features'])


@MODELS.register_module()
class OpenCLIPBackbone(VisionLanguageBackbone):
    """A frozen open_clip CLIP: image tower, English text tower and CLIP's BPE tokenizer.

    The model runs with its weights' pretrained record (:class:`PretrainedRecord`: QuickGELU,
    image size, mean/std, resize, tokenizer and context length); ``self.record`` holds it.

    Args:
        arch: any open_clip architecture name (``'ViT-B-32'``, ``'ViT-L-14'``, ...), or ``None``
            when ``model_cfg`` gives the architecture inline.
        pretrained: an open_clip pretrained tag (``'openai'``, ``'laion2b_s34b_b79k'``), a local
            checkpoint file (state dict, safetensors, or OpenAI's TorchScript ``ViT-B-32.pt``),
            or ``None`` for random weights (tests, demo pre-training).
        pretrained_cfg: the settings a local file was trained with: a tag of ``arch``
            (``'openai'`` for OpenAI's files) or a dict of
            :data:`~xmr.models.backbones.open_clip_pretrained.RECORD_FIELDS`. Required with a
            file and ``arch``; a tag carries its own.
        model_cfg: an open_clip model config dict (``embed_dim``, ``vision_cfg``, ``text_cfg``)
            for architectures open_clip does not name, e.g. the demo's tiny CLIP.
        tokenizer: tokenizer config of the source language; an ``OpenCLIPTokenizer`` takes
            ``model_name`` and ``max_length`` from the record, and may not contradict them.
        freeze: freeze every weight (phases that fine-tune the towers unfreeze them).
    """

    def __init__(self, arch: str | None = 'ViT-B-32', pretrained: str | None = None,
                 pretrained_cfg: str | dict | None = None, model_cfg: dict | None = None,
                 tokenizer: dict | None = None, freeze: bool = True) -> None:
        super().__init__()
        self.clip, self.record = build_open_clip(arch, pretrained, pretrained_cfg, model_cfg)
        self.arch = self.record.arch
        self.pretrained = pretrained

        self.text_tower = OpenCLIPTextTower(self.clip)
        self.embed_dim = self.text_tower.embed_dim
        self.image_size = self.record.image_size
        self.image_mean = self.record.mean
        self.image_std = self.record.std
        self.tokenizer = TOKENIZERS.build(record_tokenizer_cfg(self.record, tokenizer))
        check_record_tokenizer(self.record, self.tokenizer)
        if self.tokenizer.vocab_size > self.clip.vocab_size:
            raise ValueError(f'tokenizer emits {self.tokenizer.vocab_size} ids but the text '
                             f'tower has {self.clip.vocab_size} embeddings')
        if freeze:
            self.freeze()

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        return self.clip.encode_image(images)

    def encode_image_tokens(self, images: torch.Tensor) -> TokenOutput:
        """``[B, 3, H, W]`` -> class token then patches, ``[B, 1 + P, E]`` (see
        :func:`open_clip_image_tokens`)."""
        return open_clip_image_tokens(self.clip.visual, images, self.arch)

    @property
    def logit_scale(self) -> nn.Parameter:
        return self.clip.logit_scale

    def fingerprint(self) -> str:
        """Record + weights hash: keys feature caches to exactly these frozen weights."""
        # The record is part of the key: QuickGELU or another mean changes every feature.
        digest = hashlib.sha256(repr(sorted(self.record.settings().items())).encode())
        for name, tensor in sorted(self.clip.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().float().cpu().numpy().tobytes())
        return digest.hexdigest()[:16]
