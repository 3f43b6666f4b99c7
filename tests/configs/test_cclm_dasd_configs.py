"""The CCLM configs of configs/dasd: every loader a run reads gives CCLM's images and captions,
they build on a tiny CCLM checkpoint written with the real key names (see
tests/models/backbones/test_cclm_checkpoint.py), the DASD one trains a few steps on the bundled
synthetic data, the zero-shot one is CCLM unchanged, and a missing checkpoint fails."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config
from mmengine.runner import Runner

from tests.conftest import SHARED_DATA, phase_loss_keys
from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
from xmr.models.adapters import DynamicAdapter, StaticAdapter
from xmr.models.adapters.lora import LoRA
from xmr.registry import MODELS, TOKENIZERS

DASD = Path(__file__).resolve().parents[2] / 'configs' / 'dasd'
TOKENIZER_FILE = SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json'
pytestmark = pytest.mark.skipif(not TOKENIZER_FILE.is_file(),
                                reason=f'real XLM-R tokenizer not found at {TOKENIZER_FILE}')
IMAGE_SIZE = 64
LANGS = ['de', 'fr']


def cclm_checkpoint_helpers():
    """The tiny-checkpoint writer of the CCLM backbone tests (imported lazily: it reads the
    tokenizer path at import)."""
    from tests.models.backbones import test_cclm_checkpoint
    return test_cclm_checkpoint


@TOKENIZERS.register_module(name='LoadedXLMRTokenizer', force=True)
def xlmr_tokenizer():
    """The real XLM-R tokenizer, loaded once (shared with the tiny backbone config); registered
    so that a runner's config can name it."""
    return cclm_checkpoint_helpers().xlmr_tokenizer()


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp('cclm') / 'cclm_tiny.th'
    torch.save({'model': cclm_checkpoint_helpers().cclm_state_dict(IMAGE_SIZE, 4)}, path)
    return path


def tiny(cfg: Config, checkpoint: Path | str) -> dict:
    """The config's model on the tiny CCLM; DASD, adapters and losses as configured."""
    helpers = cclm_checkpoint_helpers()
    model = copy.deepcopy(cfg.to_dict()['model'])
    tokenizer = dict(type='LoadedXLMRTokenizer')
    tiny_backbone = helpers.backbone_cfg(IMAGE_SIZE, 4)
    model['backbone'] = dict(model['backbone'], **{
        k: v for k, v in tiny_backbone.items() if k not in ('type', 'tokenizer')},
        checkpoint=str(checkpoint), tokenizer=tokenizer)
    model['language_branch'].update(languages=LANGS, tokenizer=tokenizer)
    if model.get('disentangler'):
        model['disentangler']['adapter'] = dict(model['disentangler']['adapter'], hidden=8)
        model['disentangler']['generator'] = dict(model['disentangler']['generator'], d_z=16)
    return model


def test_the_checkpoint_is_a_config_field_and_a_missing_file_stops_the_build():
    cfg = Config.fromfile(DASD / 'cclm_multi30k.py')
    assert cfg.model.backbone.checkpoint == cfg.cclm_checkpoint == 'checkpoints/cclm_4m.th'
    assert cfg.model.backbone.image_size == 384
    with pytest.raises(FileNotFoundError, match='CCLM checkpoint checkpoints/cclm_4m.th'):
        MODELS.build(tiny(cfg, 'checkpoints/cclm_4m.th'))


CCLM_LEAVES = ['cclm_multi30k', 'dasd_cclm_mscoco', 'static-adapter_cclm_multi30k',
               'lora_cclm_multi30k', 'cclm_multi30k_zeroshot', 'cclm_mscoco_zeroshot']


def read_loaders(cfg: Config) -> dict[str, dict]:
    """The loaders a run of ``cfg`` reads media from: its phases' and its loops' (a list of
    loaders for the multi-dataset loops)."""
    keys = {phase.get('dataloader', 'train_dataloader')
            for phase in (cfg.get('train_cfg') or {}).get('phases', [])}
    keys |= {'val_dataloader', 'test_dataloader'}
    found = {}
    for key in sorted(keys):
        value = cfg.get(key)
        for index, loader in enumerate(value if isinstance(value, list) else [value]):
            if loader is not None and loader['dataset'].get('with_media', True):
                found[f'{key}[{index}]'] = loader
    return found


@pytest.mark.parametrize('name', CCLM_LEAVES)
def test_config_reads_as_cclms_retrieval_configs(name):
    """CCLM's Retrieval_{multi30k,coco}_*_ft.yaml (zengyan-97/CCLM): images at image_res 384,
    resized whole with bicubic interpolation (its test transform), captions cut at max_tokens
    40; the contrastive temperature is the checkpoint's own (InfoNCELoss(temperature=None))."""
    cfg = Config.fromfile(DASD / f'{name}.py')
    assert (cfg.model.backbone.image_size, cfg.model.backbone.tokenizer.max_length,
            cfg.model.language_branch.tokenizer.max_length) == (384, 40, 40)
    loaders = read_loaders(cfg)
    assert 'test_dataloader[0]' in loaders
    cclm_images = dict(type='MediaTransform', backbone=None, size=384, resize_mode='squash',
                       interpolation='bicubic')
    assert {key: loader['dataset']['transform'] for key, loader in loaders.items()} == (
        dict.fromkeys(loaders, cclm_images))
    if cfg.get('train_cfg'):
        assert cfg.model.losses.cm.temperature is None


@pytest.mark.parametrize('name,adapter,with_disentangler', [
    ('cclm_multi30k', DynamicAdapter, True), ('dasd_cclm_mscoco', DynamicAdapter, True),
    ('static-adapter_cclm_multi30k', StaticAdapter, False), ('lora_cclm_multi30k', LoRA, False)])
def test_config_builds_on_tiny_cclm(checkpoint, name, adapter, with_disentangler):
    cfg = Config.fromfile(DASD / f'{name}.py')
    model = MODELS.build(tiny(cfg, checkpoint))
    assert model.backbone.checkpoint_report.complete
    adapters = model.language_branch.adapters.sets['de']
    assert adapters and all(isinstance(a, adapter) for a in adapters.values())
    assert (model.disentangler is not None) == with_disentangler
    assert all(not p.requires_grad for p in model.backbone.parameters())
    data = model.data_preprocessor(dict(
        media=torch.randint(0, 256, (2, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=torch.uint8),
        source_text=['a red circle', 'a blue square'], target_text=['ein Kreis', 'un carré'],
        lang=LANGS, media_id=['a', 'b'], index=[0, 1]), True)
    for phase in cfg.train_cfg.phases:
        model.set_phase(phase['name'], phase['loss_weights'])
        losses = model(mode='loss', **data)
        assert set(losses) == phase_loss_keys(model, phase['loss_weights'])


@pytest.mark.parametrize('name', ['cclm_multi30k_zeroshot', 'cclm_mscoco_zeroshot'])
def test_zero_shot_config_is_cclm_itself_in_every_language(checkpoint, name):
    cfg = Config.fromfile(DASD / f'{name}.py')
    # Nothing of the training leaf it inherits is left for the runner to build.
    assert all(cfg.get(key) is None for key in ('train_cfg', 'train_dataloader', 'optim_wrapper',
                                                'val_dataloader', 'val_cfg'))
    model = MODELS.build(tiny(cfg, checkpoint))
    assert not any(model.language_branch.adapters.sets[lang] for lang in LANGS)
    assert model.disentangler is None
    assert not any(p.requires_grad for p in model.backbone.parameters())
    assert not list(model.language_branch.parameters())
    tokens = xlmr_tokenizer()(['Ein Hund läuft im Schnee.', 'Un chien court.'])
    with torch.no_grad():
        torch.testing.assert_close(model.encode_text(tokens, 'de'),
                                   model.backbone.encode_source_text(tokens))


def test_dasd_on_tiny_cclm_trains_a_few_steps_on_the_bundled_data(checkpoint, tmp_path):
    cfg = Config.fromfile(DASD / 'cclm_multi30k.py')
    pairs = dict(type='SyntheticPairDataset', num_scenes=24, languages=LANGS, split='train',
                 image_size=IMAGE_SIZE, seed=0)
    loader = dict(batch_size=4, num_workers=0, drop_last=True, dataset=pairs,
                  sampler=dict(type='DefaultSampler', shuffle=True),
                  collate_fn=dict(type='xmr.retrieval_collate'))
    gallery = dict(type='SyntheticRetrievalDataset', num_scenes=8, languages=['en', *LANGS],
                   split='val', image_size=IMAGE_SIZE, seed=0)
    phases = [dict(phase, iters=2, dataloader=loader) for phase in cfg.train_cfg.phases]
    run = Config(dict(
        default_scope='xmr', work_dir=str(tmp_path), model=tiny(cfg, checkpoint),
        train_dataloader=loader, train_cfg=dict(type='PhasedTrainLoop', phases=phases),
        val_dataloader=dict(loader, dataset=gallery, drop_last=False,
                            sampler=dict(type='DefaultSampler', shuffle=False)),
        val_evaluator=dict(type='RetrievalMetric', languages=['en', *LANGS]),
        val_cfg=dict(type='ValLoop'), optim_wrapper=cfg.optim_wrapper,
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=-1, save_last=False),
                           logger=dict(type='LoggerHook', interval=100)),
        log_level='WARNING', randomness=dict(seed=0)))
    allow_mmengine_checkpoint_types()
    runner = Runner.from_cfg(run)
    frozen = copy.deepcopy(runner.model.backbone.state_dict())
    trained = {k: v.clone() for k, v in runner.model.named_parameters()
               if k.startswith(('language_branch', 'disentangler'))}
    runner.train()
    model = runner.model
    assert all(torch.equal(v, model.backbone.state_dict()[k]) for k, v in frozen.items())
    params = dict(model.named_parameters())
    for prefix in ('language_branch.adapters', 'disentangler.generator',
                   'disentangler.sr_adapters', 'disentangler.discriminator'):
        assert any(not torch.equal(v, params[k]) for k, v in trained.items()
                   if k.startswith(prefix)), prefix
    assert 0 <= runner.message_hub.get_scalar('val/mAR').current() <= 100


def test_dasd_cross_modal_loss_runs_at_the_checkpoints_learnt_temperature(checkpoint):
    """CCLM learns its ``temp`` (0.07 is only where pre-training starts it); the tiny
    checkpoint holds 0.05, so ``L_CM`` is the symmetric InfoNCE at scale 1 / 0.05 = 20."""
    cfg = Config.fromfile(DASD / 'cclm_multi30k.py')
    model = MODELS.build(tiny(cfg, checkpoint))
    assert float(model.backbone.temperature) == pytest.approx(0.05)
    model.set_phase('cross_modal', dict(cm=1.0))
    tokens = xlmr_tokenizer()(['Ein Hund läuft im Schnee.', 'Un chien court.', 'Ein Kreis.'])
    langs = ['de', 'fr', 'de']
    media = torch.randn(3, model.backbone.embed_dim)
    loss = model.loss(target_tokens=tokens, langs=langs, media_features=media)['loss_cm']
    with torch.no_grad():
        target = model.encode_target(tokens, langs)[0]
    logits = 20.0 * F.normalize(target, dim=-1) @ F.normalize(media, dim=-1).t()
    labels = torch.arange(3)
    expected = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
    torch.testing.assert_close(loss.detach(), expected)
