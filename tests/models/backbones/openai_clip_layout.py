"""OpenAI's released CLIP checkpoints, rebuilt in miniature: their key names, shapes and formats.

OpenAI publishes ``ViT-B-32.pt`` / ``ViT-B-16.pt`` / ``ViT-L-14.pt`` as TorchScript archives of
fp16 weights whose state dict also keeps ``input_resolution``, ``context_length`` and
``vocab_size``; code such as DASD's loads them from ``pretrained_model/clip/ViT-B-16.pt``. The
layout below is written from OpenAI's model definition (``clip/model.py``), not from open_clip,
so loading it into open_clip's CLIP checks that the two agree.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn


def _block(prefix: str, width: int) -> dict[str, tuple[int, ...]]:
    return {
        f'{prefix}.attn.in_proj_weight': (3 * width, width),
        f'{prefix}.attn.in_proj_bias': (3 * width,),
        f'{prefix}.attn.out_proj.weight': (width, width),
        f'{prefix}.attn.out_proj.bias': (width,),
        f'{prefix}.ln_1.weight': (width,), f'{prefix}.ln_1.bias': (width,),
        f'{prefix}.mlp.c_fc.weight': (4 * width, width), f'{prefix}.mlp.c_fc.bias': (4 * width,),
        f'{prefix}.mlp.c_proj.weight': (width, 4 * width), f'{prefix}.mlp.c_proj.bias': (width,),
        f'{prefix}.ln_2.weight': (width,), f'{prefix}.ln_2.bias': (width,),
    }


def openai_vit_clip_shapes(embed_dim: int, image_size: int, patch_size: int, vision_width: int,
                           vision_layers: int, context_length: int, vocab_size: int,
                           text_width: int, text_layers: int) -> dict[str, tuple[int, ...]]:
    """Key -> shape of OpenAI's ``CLIP`` with a ``VisionTransformer`` image tower."""
    grid = image_size // patch_size
    shapes = {
        'positional_embedding': (context_length, text_width),
        'text_projection': (text_width, embed_dim),
        'logit_scale': (),
        'visual.class_embedding': (vision_width,),
        'visual.positional_embedding': (grid * grid + 1, vision_width),
        'visual.proj': (vision_width, embed_dim),
        'visual.conv1.weight': (vision_width, 3, patch_size, patch_size),
        'visual.ln_pre.weight': (vision_width,), 'visual.ln_pre.bias': (vision_width,),
        'visual.ln_post.weight': (vision_width,), 'visual.ln_post.bias': (vision_width,),
        'token_embedding.weight': (vocab_size, text_width),
        'ln_final.weight': (text_width,), 'ln_final.bias': (text_width,),
    }
    for i in range(vision_layers):
        shapes.update(_block(f'visual.transformer.resblocks.{i}', vision_width))
    for i in range(text_layers):
        shapes.update(_block(f'transformer.resblocks.{i}', text_width))
    return shapes


def shapes_of_model_cfg(model_cfg: dict) -> dict[str, tuple[int, ...]]:
    """:func:`openai_vit_clip_shapes` for an open_clip model config of a ViT CLIP."""
    vision, text = model_cfg['vision_cfg'], model_cfg['text_cfg']
    return openai_vit_clip_shapes(
        model_cfg['embed_dim'], vision['image_size'], vision['patch_size'], vision['width'],
        vision['layers'], text.get('context_length', 77), text.get('vocab_size', 49408),
        text['width'], text['layers'])


def openai_state_dict(shapes: dict[str, tuple[int, ...]], device: str = 'cpu',
                      dtype: torch.dtype = torch.float16, seed: int = 0, scale: float = 0.05,
                      ) -> dict[str, torch.Tensor]:
    """Random ``N(0, scale²)`` tensors of those shapes (fp16 as OpenAI's); empty on ``meta``."""
    if device == 'meta':
        return {key: torch.empty(shape, device='meta', dtype=dtype)
                for key, shape in shapes.items()}
    generator = torch.Generator().manual_seed(seed)
    state = {key: (scale * torch.randn(shape, generator=generator)).to(dtype)
             for key, shape in shapes.items()}
    state['logit_scale'] = torch.tensor(4.6052, dtype=dtype)
    return state


class _Holder(nn.Module):
    """One level of the module tree of a TorchScript archive."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def save_openai_torchscript(state: dict[str, torch.Tensor], path: Path,
                            input_resolution: int, context_length: int,
                            vocab_size: int) -> None:
    """A TorchScript archive whose ``state_dict()`` is ``state`` plus OpenAI's three extras."""
    root = _Holder()
    for key, value in state.items():
        *parents, leaf = key.split('.')
        module = root
        for name in parents:
            if not hasattr(module, name):
                module.add_module(name, _Holder())
            module = getattr(module, name)
        module.register_parameter(leaf, nn.Parameter(value, requires_grad=False))
    for name, value in (('input_resolution', input_resolution),
                        ('context_length', context_length), ('vocab_size', vocab_size)):
        root.register_buffer(name, torch.tensor(value))
    with warnings.catch_warnings():  # the format is OpenAI's, deprecated or not
        warnings.simplefilter('ignore', FutureWarning)
        torch.jit.script(root).save(str(path))
