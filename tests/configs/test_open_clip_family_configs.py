"""DASD on SigLIP 2 and LoRAs on the XLM-R and NLLB CLIPs: the full-size configs build (downloads
stubbed: no weights, meta device, tokenizer and encoder config from local files), and each
trains through tools/train.py with its model scaled down."""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from tests.conftest import REPO
from tests.models.backbones.open_clip_families import (
    XLMR_TOKENIZER,
    XLMR_VOCAB,
    nllb_cfg,
    nllb_tokenizer_folder,
    siglip_cfg,
    xlmr_cfg,
    xlmr_tokenizer,
)
from xmr.models.adapters import DynamicAdapter, LoRA
from xmr.models.backbones.bert import BertTextTower
from xmr.models.backbones.open_clip_hf import OpenCLIPM2M100TextTower
from xmr.models.losses import SigmoidLoss
from xmr.registry import MODELS, TRANSFORMS

sys.path.insert(0, str(REPO / 'tools'))
import train as train_tool  # noqa: E402

CONFIGS = REPO / 'configs'
SIGLIP2_B16 = CONFIGS / 'dasd' / 'dasd_siglip2-vit-b16-256_multi30k_clft.py'
SIGLIP2_SO400M = CONFIGS / 'dasd' / 'dasd_siglip2-so400m-16-256_multi30k_clft.py'
XLMR_LORA = CONFIGS / 'lora' / 'lora_xlm-roberta-base-vit-b32_xm3600_sw.py'
NLLB_LORA = CONFIGS / 'lora' / 'lora_nllb-clip-base_xm3600_sw.py'
# The branch reads the tower's own table: its tokenizer is the stub too (replacing the named one).
BRANCH_TOKENIZER = dict(_delete_=True, **xlmr_tokenizer(max_length=24))
pytestmark = pytest.mark.skipif(not XLMR_TOKENIZER.is_file(),
                                reason=f'XLM-R tokenizer (the stub tokenizer) missing: '
                                       f'{XLMR_TOKENIZER}')


def xlmr_base_folder(folder: Path) -> str:
    """xlm-roberta-base's encoder config (the hub's numbers), written where open_clip reads it."""
    from transformers import XLMRobertaConfig

    XLMRobertaConfig(vocab_size=XLMR_VOCAB, hidden_size=768, num_hidden_layers=12,
                     num_attention_heads=12, intermediate_size=3072,
                     max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
                     bos_token_id=0, eos_token_id=2).save_pretrained(folder)
    return str(folder)


def nllb_600m_folder(folder: Path) -> str:
    """nllb-200-distilled-600M's config (the hub's numbers), written where open_clip reads it."""
    from transformers import M2M100Config

    M2M100Config(vocab_size=256206, d_model=1024, encoder_layers=12, decoder_layers=12,
                 encoder_attention_heads=16, decoder_attention_heads=16, encoder_ffn_dim=4096,
                 decoder_ffn_dim=4096, max_position_embeddings=1024, activation_function='relu',
                 scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                 decoder_start_token_id=2).save_pretrained(folder)
    return str(folder)


def assert_media_follow_the_record(path: Path, model) -> None:
    """Every media transform of the config, and encode_media's default one, resizes as the
    backbone's pretrained record says."""
    record = model.backbone.record
    transforms = [loader['dataset']['transform'] for loader in (
        Config.fromfile(path).get(key) for key in ('train_dataloader', 'val_dataloader',
                                                  'test_dataloader', 'source_finetune_dataloader'))
        if loader is not None] + [model.backbone.media_transform()]
    for transform in transforms:
        built = TRANSFORMS.build(transform)
        assert built.size == record.image_size, transform
        assert (built.resize_mode, built.interpolation.value) == (
            record.resize_mode, record.interpolation), transform


def full_size_model(path: Path, tmp_path: Path):
    """The config's model as named, built on meta with the downloads stubbed."""
    import open_clip

    model = copy.deepcopy(Config.fromfile(path).to_dict()['model'])
    backbone = model['backbone']
    tag = backbone.pop('pretrained')
    options = dict(clean=backbone['tokenizer'].get('clean', 'whitespace'),
                   max_length=backbone['tokenizer']['max_length'])
    nllb = backbone['arch'].startswith('nllb')
    stub = (dict(type='NLLBTokenizer', tokenizer_file=str(
        nllb_tokenizer_folder(tmp_path / 'nllb_tokenizer') / 'tokenizer.json'), **options)
        if nllb else xlmr_tokenizer(**options))
    backbone.update(pretrained_cfg=tag, tokenizer=stub)
    model['language_branch']['tokenizer'] = dict(stub)
    if backbone['arch'].startswith('xlm-roberta') or nllb:
        model_cfg = copy.deepcopy(open_clip.get_model_config(backbone['arch']))
        model_cfg['text_cfg']['hf_model_name'] = (nllb_600m_folder(tmp_path / 'nllb') if nllb
                                                  else xlmr_base_folder(tmp_path / 'xlmr'))
        backbone.update(model_cfg=model_cfg, arch=None, pretrained_cfg=None)
    with torch.device('meta'):
        return MODELS.build(model)


@pytest.mark.parametrize('path, width, blocks', [(SIGLIP2_B16, 768, 12),
                                                 (SIGLIP2_SO400M, 1152, 27)],
                         ids=['b16', 'so400m'])
def test_dasd_siglip2_builds_at_full_size(path, width, blocks, tmp_path):
    model = full_size_model(path, tmp_path)
    tower = model.backbone.text_tower
    assert (tower.width, tower.num_blocks, tower.context_length) == (width, blocks, 64)
    assert tower.fixed_context and tower.pooling == 'last'
    assert model.backbone.image_size == (256, 256)
    assert model.language_branch.tokenizer.pad_to == 64
    adapters = model.language_branch.adapters.sets['de']
    assert {type(a) for a in adapters.values()} == {DynamicAdapter} and len(adapters) == blocks
    assert isinstance(model.losses['cm'], SigmoidLoss) and model.losses['cm'].logit_bias is None
    assert set(model.disentangler.generator.blocks) == set(range(blocks))
    assert_media_follow_the_record(path, model)


def test_xlmr_lora_builds_at_full_size(tmp_path):
    model = full_size_model(XLMR_LORA, tmp_path)
    tower = model.backbone.text_tower
    assert isinstance(tower, BertTextTower) and (tower.width, tower.num_blocks) == (768, 12)
    assert model.languages == ['sw'] and model.disentangler is None
    lora = model.language_branch.adapters.sets['sw']
    assert {type(a) for a in lora.values()} == {LoRA}
    # r = 1 on query and value of 12 layers: 12 x 2 x (768 + 768) parameters.
    assert sum(p.numel() for p in lora.parameters()) == 12 * 2 * 1536
    assert_media_follow_the_record(XLMR_LORA, model)


def test_nllb_lora_builds_at_full_size(tmp_path):
    model = full_size_model(NLLB_LORA, tmp_path)
    tower = model.backbone.text_tower
    assert isinstance(tower, OpenCLIPM2M100TextTower)
    assert (tower.width, tower.num_blocks, tower.embed_dim, tower.pooling) == (1024, 12, 512, 'cls')
    assert tower.context_length == 1024 and model.backbone.tokenizer.max_length == 77
    assert model.languages == ['sw'] and model.disentangler is None
    lora = model.language_branch.adapters.sets['sw']
    assert {type(a) for a in lora.values()} == {LoRA}
    # r = 1 on q_proj and v_proj of 12 layers: 12 x 2 x (1024 + 1024) parameters.
    assert sum(p.numel() for p in lora.parameters()) == 12 * 2 * 2048
    assert_media_follow_the_record(NLLB_LORA, model)


def synthetic(kind: str, languages: list[str], scenes: int, **extra) -> dict:
    dataset = dict(type=kind, num_scenes=scenes, languages=languages, image_size=32, seed=0,
                   split='train' if kind == 'SyntheticPairDataset' else 'val', **extra)
    return dict(_delete_=True, batch_size=8, num_workers=0, drop_last=kind ==
                'SyntheticPairDataset', sampler=dict(type='DefaultSampler',
                                                      shuffle=kind == 'SyntheticPairDataset'),
                collate_fn=dict(type='xmr.retrieval_collate'), dataset=dataset)


def tiny_run(path: Path, tmp_path: Path, model: dict, langs: list[str]) -> Path:
    """Train ``path`` with ``model`` merged in and the synthetic set as data, two steps a phase."""
    config = tmp_path / 'tiny.py'
    evaluation = synthetic('SyntheticRetrievalDataset', ['en', *langs], 16,
                           captions_per_image=1)
    loaders = dict(train_dataloader=synthetic('SyntheticPairDataset', langs, 64),
                   test_dataloader=evaluation)
    cfg = Config.fromfile(path)
    if 'text_train_dataloader' in cfg:
        loaders['text_train_dataloader'] = synthetic('SyntheticPairDataset', langs, 64)
    if 'source_finetune_dataloader' in cfg:
        loaders['source_finetune_dataloader'] = synthetic('SyntheticPairDataset', [], 64)
    if cfg.get('val_dataloader') is not None:
        loaders['val_dataloader'] = evaluation
    lines = [f'_base_ = [{str(path)!r}]', f'model = {model!r}',
             *(f'{key} = {value!r}' for key, value in loaders.items()),
             f"test_evaluator = dict(_delete_=True, type='RetrievalMetric', "
             f"languages={['en', *langs]!r})"]
    if cfg.get('val_dataloader') is not None:
        lines.append('val_evaluator = test_evaluator')
    config.write_text('\n'.join(lines) + '\n')
    phases = Config.fromfile(config).train_cfg.phases
    short = [option for index, phase in enumerate(phases) for option in (
        [f'train_cfg.phases.{index}.epochs=1'] if phase.get('epochs') else
        [f'train_cfg.phases.{index}.iters=2'])]
    work_dir = tmp_path / 'work'
    train_tool.main([str(config), '--work-dir', str(work_dir), '--cfg-options', *short,
                     'train_cfg.val_interval=0'])
    return work_dir


@pytest.mark.slow
def test_dasd_siglip2_trains_through_the_tool(tmp_path):
    model = dict(backbone=dict(_delete_=True, type='OpenCLIPBackbone', arch=None,
                               model_cfg={**siglip_cfg('ViT-B-16-SigLIP2'),
                                          'init_logit_bias': -3.0},
                               tokenizer=xlmr_tokenizer(clean='canonicalize')),
                 language_branch=dict(languages=['de', 'fr'], tokenizer=BRANCH_TOKENIZER),
                 disentangler=dict(adapter=dict(hidden=8), generator=dict(d_z=16)))
    work_dir = tiny_run(SIGLIP2_B16, tmp_path, model, ['de', 'fr'])
    report = json.loads((work_dir / 'phase_report.json').read_text())
    assert [c['column'] for c in report] == [
        'source_finetune end', 'cross_lingual end', 'cross_modal end']
    assert {'de/AR', 'fr/AR', 'mAR'} <= set(report[-1]['metrics'])


@pytest.mark.slow
def test_xlmr_lora_trains_through_the_tool(tmp_path):
    model = dict(backbone=dict(_delete_=True, type='OpenCLIPBackbone', arch=None,
                               model_cfg=xlmr_cfg(tmp_path / 'xlmr'),
                               tokenizer=xlmr_tokenizer()),
                 language_branch=dict(languages=['de'], tokenizer=BRANCH_TOKENIZER))
    work_dir = tiny_run(XLMR_LORA, tmp_path, model, ['de'])
    checkpoints = sorted(p.name for p in work_dir.glob('iter_*.pth'))
    assert checkpoints == ['iter_4.pth']


@pytest.mark.slow
def test_nllb_lora_trains_through_the_tool(tmp_path):
    branch_tokenizer = dict(_delete_=True, type='NLLBTokenizer', max_length=24,
                            tokenizer_file=str(tmp_path / 'nllb' / 'tokenizer.json'))
    model = dict(backbone=dict(_delete_=True, type='OpenCLIPBackbone', arch=None,
                               model_cfg=nllb_cfg(tmp_path / 'nllb')),
                 language_branch=dict(languages=['de'], tokenizer=branch_tokenizer))
    work_dir = tiny_run(NLLB_LORA, tmp_path, model, ['de'])
    checkpoints = sorted(p.name for p in work_dir.glob('iter_*.pth'))
    assert checkpoints == ['iter_4.pth']
