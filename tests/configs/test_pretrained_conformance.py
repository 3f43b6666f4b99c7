"""Every shipped config's frozen open_clip tower runs exactly as its pretrained tag records.

Each config under ``configs/`` (a config added later included) is resolved, and every open_clip
backbone in it is built by xmr as in a real run, except that open_clip's download is a stub
returning a weight file with OpenAI's real key names and shapes (empty ``meta`` tensors, so
ViT-L/14 costs nothing) and the model is built on the ``meta`` device. The built modules are
then compared with open_clip's records read here directly: the activation of every MLP, the
normalisation constants, the input size, the tokenizer and its context length, and the
datasets' image geometry.
"""
from __future__ import annotations

import json
from pathlib import Path

import open_clip
import pytest
import torch
from mmengine.config import Config
from open_clip.transformer import QuickGELU

from tests.conftest import REPO, SHARED_DATA
from tests.models.backbones.openai_clip_layout import openai_state_dict, shapes_of_model_cfg
from xmr.models.backbones.open_clip_pretrained import hf_tokenizer_name
from xmr.registry import MODELS, TRANSFORMS

# Leaf configs; ablations are overlays that name no backbone (tests/test_ablations.py).
CONFIGS = sorted(path for path in (REPO / 'configs').rglob('*.py')
                 if not {'_base_', 'ablations'} & set(path.parts))
#: Backbone type -> its (arch, pretrained, pretrained_cfg, model_cfg) arguments.
OPEN_CLIP_BACKBONES = {
    'OpenCLIPBackbone': ('arch', 'pretrained', 'pretrained_cfg', 'model_cfg'),
    'MultilingualCLIPBackbone': ('image_arch', 'image_pretrained', 'image_pretrained_cfg',
                                 'image_model_cfg'),
}
XLMR_TOKENIZER = SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json'
_BUILT: dict[str, torch.nn.Module] = {}


def _specs(node: object, type_name: str) -> list[dict]:
    if isinstance(node, dict):
        found = [node] if node.get('type') == type_name else []
        return found + [spec for value in node.values() for spec in _specs(value, type_name)]
    if isinstance(node, (list, tuple)):
        return [spec for value in node for spec in _specs(value, type_name)]
    return []


def _weights_stub(arch: str, tag: str, folder: Path, calls: list[str]):
    """open_clip's download, replaced: checks it is asked for the tag's weights."""
    def download(cfg, **kwargs):
        assert cfg == open_clip.get_pretrained_cfg(arch, tag)
        calls.append(f'{arch}/{tag}')
        path = folder / f'{arch}-{tag}.pt'
        torch.save(openai_state_dict(shapes_of_model_cfg(open_clip.get_model_config(arch)),
                                     device='meta'), path)
        return str(path)
    return download


def _mclip_release(spec: dict, folder: Path) -> dict:
    """The M-CLIP text release the config names, written with its real keys (empty tensors)."""
    from xmr.models.backbones.mclip import XLMR_LARGE

    if not XLMR_TOKENIZER.is_file():
        pytest.skip(f'XLM-R tokenizer fixture missing: {XLMR_TOKENIZER}')
    from transformers import XLMRobertaConfig, XLMRobertaModel

    with torch.device('meta'):
        xlmr = XLMRobertaModel(XLMRobertaConfig(**XLMR_LARGE), add_pooling_layer=False)
    release = {f'transformer.{k}': v for k, v in xlmr.state_dict().items()}
    release['LinearTransformation.weight'] = torch.empty(spec['embed_dim'], 1024, device='meta')
    release['LinearTransformation.bias'] = torch.empty(spec['embed_dim'], device='meta')
    path = folder / Path(spec['checkpoint']).name
    path.mkdir(exist_ok=True)
    torch.save(release, path / 'pytorch_model.bin')
    tokenizer = dict(type='HFTokenizer', tokenizer_file=str(XLMR_TOKENIZER),
                     max_length=spec['tokenizer']['max_length'])
    return {**spec, 'checkpoint': str(path), 'tokenizer': tokenizer}


def _build(spec: dict, folder: Path, monkeypatch: pytest.MonkeyPatch) -> torch.nn.Module:
    key = json.dumps(spec, sort_keys=True, default=str)
    if key not in _BUILT:
        arch, tag = (spec.get(name) for name in OPEN_CLIP_BACKBONES[spec['type']][:2])
        calls: list[str] = []
        monkeypatch.setattr(open_clip.pretrained, 'download_pretrained',
                            _weights_stub(arch, tag, folder, calls))
        build_spec = _mclip_release(spec, folder) if spec.get('checkpoint') else spec
        with torch.device('meta'):
            _BUILT[key] = MODELS.build(build_spec)
        assert calls == ([f'{arch}/{tag}'] if tag else [])
    return _BUILT[key]


def _assert_follows_record(backbone: torch.nn.Module, spec: dict) -> dict:
    arch_key, tag_key, cfg_key, inline_key = OPEN_CLIP_BACKBONES[spec['type']]
    arch, tag = spec.get(arch_key), spec.get(cfg_key) or spec.get(tag_key)
    model_cfg = open_clip.get_model_config(arch) if arch else spec[inline_key]
    tag_cfg = open_clip.get_pretrained_cfg(arch, tag) if arch and tag else {}
    quick_gelu = tag_cfg.get('quick_gelu', False) if tag_cfg else model_cfg.get('quick_gelu',
                                                                                False)
    visual = backbone.clip.visual if hasattr(backbone, 'clip') else backbone.visual
    blocks = list(visual.transformer.resblocks)
    if hasattr(backbone, 'clip'):
        blocks += list(backbone.clip.transformer.resblocks)
    assert {type(block.mlp.gelu) for block in blocks} == {
        QuickGELU if quick_gelu else torch.nn.GELU}
    size = model_cfg['vision_cfg']['image_size']
    assert backbone.image_size == (size, size)
    assert backbone.image_mean == tuple(tag_cfg.get('mean', open_clip.OPENAI_DATASET_MEAN))
    assert backbone.image_std == tuple(tag_cfg.get('std', open_clip.OPENAI_DATASET_STD))
    geometry = dict(resize_mode=tag_cfg.get('resize_mode', 'shortest'),
                    interpolation=tag_cfg.get('interpolation', 'bicubic'))
    assert visual.preprocess_cfg['resize_mode'] == geometry['resize_mode']
    assert visual.preprocess_cfg['interpolation'] == geometry['interpolation']
    # encode_media's default transform: the same record, not CLIP's geometry for every tower.
    default = TRANSFORMS.build(backbone.media_transform())
    assert (default.size, default.resize_mode, default.interpolation.value) == (
        (size, size), geometry['resize_mode'], geometry['interpolation'])
    if spec['type'] == 'OpenCLIPBackbone':
        context = model_cfg['text_cfg'].get('context_length', 77)
        assert backbone.tokenizer.max_length == context == backbone.text_tower.context_length
        caption = 'A man rides a red bicycle past the old harbour.'
        reference = open_clip.get_tokenizer(arch or 'ViT-B-32')([caption], context)[0]
        assert backbone.tokenizer.encode(caption) == reference[reference != 0].tolist()
    return dict(size=(size, size), **geometry)


@pytest.mark.parametrize('config', CONFIGS, ids=[str(p.relative_to(REPO)) for p in CONFIGS])
def test_open_clip_towers_and_image_geometry_follow_the_tags_record(
        config, tmp_path_factory, monkeypatch):
    cfg = Config.fromfile(str(config)).to_dict()
    specs = [spec for name in OPEN_CLIP_BACKBONES for spec in _specs(cfg, name)]
    transforms = [t for t in _specs(cfg, 'MediaTransform') if t.get('backbone')]
    if not specs:  # leftover dataloaders of a base file: they must still resolve
        for transform in transforms:
            TRANSFORMS.build(transform)
        return
    if any(hf_tokenizer_name(spec.get('arch'), spec.get('model_cfg')) for spec in specs
           if spec['type'] == 'OpenCLIPBackbone'):
        pytest.skip('a Hugging Face-tokenised open_clip family (SigLIP, XLM-R and NLLB CLIPs): '
                    'built at full size with its geometry checked in '
                    'test_open_clip_family_configs.py')
    folder = tmp_path_factory.getbasetemp()
    geometries = [_assert_follows_record(_build(spec, folder, monkeypatch), spec)
                  for spec in specs]
    for transform in transforms:
        built = TRANSFORMS.build(transform)
        assert dict(size=built.size, resize_mode=built.resize_mode,
                    interpolation=built.interpolation.value) in geometries, transform
