"""configs/cdds: every config fits its model, and the demo config learns on the bundled data."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from tests.conftest import REPO, tiny_backbone_cfg
from xmr.registry import HOOKS, MODELS
from xmr.run_config import load_run_config

CONFIGS = sorted((REPO / 'configs' / 'cdds').glob('*.py'))
DEMO = REPO / 'configs' / 'cdds' / 'cdds_tiny-clip_synthetic.py'
sys.path.insert(0, str(REPO / 'tools'))
import test as test_tool  # noqa: E402
import train as train_tool  # noqa: E402


def test_the_paper_settings_and_studies_have_configs():
    names = {path.stem for path in CONFIGS}
    for backbone in ('clip-vit-b32', 'vit-bert-b16'):
        for dataset in ('flickr30k', 'mscoco'):
            assert f'cdds_{backbone}_{dataset}' in names
    assert 'cdds_vit-mbert-b16_multi30k-mt' in names
    assert {'dual-encoder_vit-bert-b16_flickr30k', 'dual-encoder-ds_vit-bert-b16_flickr30k',
            'dual-encoder-vsepp_vit-bert-b16_flickr30k',
            'dual-encoder-vsepp-ds_vit-bert-b16_flickr30k',
            'cdds_vit-bert-b16_flickr30k_corr-subset',
            'cdds_vit-bert-b16_flickr30k_corr-dataset', 'cdds_clip-vit-b16_flickr30k',
            'cdds_clip-vit-l14_flickr30k', 'cdds_vit-bert-b16-384_flickr30k',
            'cdds_swin-bert-b_flickr30k', 'cdds_swin-bert-b-384_flickr30k',
            'cdds_vit-bert-b16_mscoco-train2014'} <= names
    table3 = {name.removeprefix('cdds_vit-bert-b16_flickr30k_wo-') for name in names
              if name.startswith('cdds_vit-bert-b16_flickr30k_wo-')}
    assert table3 == {'semantic-consistency', 'modality-consistency', 'information-integrity',
                      'noise', 'decoupling', 'distribution-sampling'}


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: p.stem)
def test_config_builds_its_model_and_the_model_accepts_its_phases(path: Path):
    """The real towers need downloads; a tiny CLIP stands in for them, the rest is as written."""
    cfg = Config.fromfile(path)
    model_cfg = cfg.model.to_dict()
    model_cfg['backbone'] = tiny_backbone_cfg()
    with torch.device('meta'):  # the parts' names, not the UNets' 176M drawn values
        model = MODELS.build(model_cfg)
    names = [name for name, _ in model.named_parameters()]
    for phase in cfg.train_cfg.phases:
        model.set_phase(phase.name, phase.loss_weights)
        for prefix in phase.trainable:
            assert any(n.startswith(prefix + '.') for n in names), (phase.name, prefix)
    for hook in cfg.get('custom_hooks', []):
        HOOKS.build(hook)
    if 'corr-dataset' in path.stem:
        assert model.dataset_correlations() == [model.disentangler.correlation]
        assert any(h.type == 'CDDSCorrelationHook' for h in cfg.custom_hooks)
    if path.stem.startswith('dual-encoder'):
        assert model.disentangler is None
    if 'mbert' in path.stem:
        assert model.train_text == 'target'
        assert cfg.train_dataloader.dataset.target_langs == ['de', 'fr', 'cs']


@pytest.mark.parametrize('stem', ['dual-encoder-vsepp_vit-bert-b16_flickr30k',
                                  'dual-encoder-vsepp-ds_vit-bert-b16_flickr30k'])
def test_vsepp_rows_take_the_hardest_negative_after_one_epoch_and_mask_as_laps(stem: str):
    """One epoch is one pass over Flickr30K's 145,000 training captions."""
    loss = MODELS.build(Config.fromfile(REPO / 'configs' / 'cdds' / f'{stem}.py').model.losses.itc)
    assert (loss.hardest_after_pairs, loss.mask_same_media, loss.margin) == (145000, True, 0.2)


VSEPP = 'dual-encoder-vsepp_vit-bert-b16_flickr30k'


@pytest.mark.parametrize('batch_size', [64, 128, 32])
def test_vsepp_switches_at_the_second_epoch_of_the_batch_size_given_on_the_command_line(
        batch_size: int):
    """An epoch is the full batches of 145,000 captions (LanguageBatchSampler drops the last
    incomplete one): 2,265 at 64, 1,132 at 128, 4,531 at 32. The last of them sums over the
    negatives and the first of the next epoch takes the hardest, as at the config's own 64."""
    cfg = load_run_config(REPO / 'configs' / 'cdds' / f'{VSEPP}.py',
                          cfg_options={'train_dataloader.batch_size': batch_size})
    loss = MODELS.build(cfg.model.losses.itc)
    epoch = 145000 // batch_size
    loss.pairs_seen.fill_((epoch - 1) * batch_size)  # the count before the epoch's last batch
    generator = torch.Generator().manual_seed(0)
    images, captions = (torch.randn(batch_size, 8, generator=generator) for _ in range(2))
    summed = MODELS.build(dict(type='VSEHingeLoss', hardest_after_pairs=None))(images, captions)
    hardest = MODELS.build(dict(type='VSEHingeLoss', hardest_after_pairs=0))(images, captions)
    torch.testing.assert_close(loss(images, captions), summed)
    torch.testing.assert_close(loss(images, captions), hardest)


PAPER_CONFIGS = [p for p in CONFIGS if p.stem.startswith(('cdds_vit', 'cdds_clip', 'cdds_swin'))]


@pytest.mark.parametrize('path', PAPER_CONFIGS, ids=lambda p: p.stem)
def test_paper_config_trains_25_epochs_and_validates_every_epoch(path: Path):
    """The length and the validation interval are given in epochs (the loop counts the
    batches; their iterations: tests/configs/test_epoch_schedules.py)."""
    cfg = Config.fromfile(path)
    assert [phase['epochs'] for phase in cfg.train_cfg.phases] == [25]
    assert cfg.train_cfg.val_interval == dict(epochs=1)


@pytest.mark.parametrize('path', PAPER_CONFIGS, ids=lambda p: p.stem)
def test_paper_configs_train_eq15_alone_and_retrieve_by_patch_word_matching(path: Path):
    """Eq. 15 has no global InfoNCE: only the _itc variant adds one; only the w/o-decoupling
    row, which has no UNets, trains the distribution-sampling term on the raw tokens."""
    cfg = Config.fromfile(path)
    weights = cfg.train_cfg.phases[0].loss_weights
    expected = {'_itc': {'disentangler': 1.0, 'itc': 1.0},
                '_wo-decoupling': {'distribution_sampling': 1.0}}
    variant = next((key for key in expected if path.stem.endswith(key)), None)
    assert weights == expected.get(variant, {'disentangler': 1.0})
    assert set(cfg.model.losses) == {'_itc': {'itc'}, '_wo-decoupling':
                                     {'distribution_sampling'}}.get(variant, set())
    assert cfg.model.retrieval_score == 'patch_word'
    evaluators = cfg.val_evaluator if isinstance(cfg.val_evaluator, list) else \
        [cfg.val_evaluator]
    assert [e.scoring for e in evaluators] == ['tokens']
    assert 'embedding' in [e.scoring for e in cfg.test_evaluator]


def test_table3_rows_remove_exactly_their_part():
    build = lambda name: MODELS.build(dict(  # noqa: E731
        Config.fromfile(REPO / 'configs' / 'cdds' / f'{name}.py').model.to_dict(),
        backbone=tiny_backbone_cfg()))
    full = build('cdds_vit-bert-b16_flickr30k')
    unet = full.disentangler.image_unet
    assert (unet.num_perturbations, unet.noise_std) == (4, 0.1)
    no_noise = build('cdds_vit-bert-b16_flickr30k_wo-noise')
    assert (no_noise.disentangler.text_unet.num_perturbations,
            no_noise.disentangler.text_unet.noise_std) == (1, 0.0)
    assert no_noise.disentangler.loss_names == full.disentangler.loss_names
    no_decoupling = build('cdds_vit-bert-b16_flickr30k_wo-decoupling')
    assert no_decoupling.disentangler is None
    assert no_decoupling.loss_names() == {'distribution_sampling'}


def test_an_ablation_with_a_switch_it_removes_fails_at_build_naming_both():
    cfg = Config.fromfile(REPO / 'configs' / 'cdds' /
                          'cdds_vit-bert-b16_flickr30k_corr-dataset.py')
    cfg.merge_from_dict({'model.disentangler.use_distribution_sampling': False})
    with pytest.raises(ValueError, match=r"use_distribution_sampling=False removes the column "
                                         r"correlation that correlation=\{'mode': 'dataset'"):
        MODELS.build(dict(cfg.model.to_dict(), backbone=tiny_backbone_cfg()))


@pytest.mark.parametrize('dataset', ['flickr30k', 'mscoco'])
@pytest.mark.parametrize('name, vision, size', [
    ('cdds_vit-bert-b16-384', 'vit_base_patch16_384.orig_in21k_ft_in1k', 384),
    ('cdds_swin-bert-b', 'swin_base_patch4_window7_224.ms_in22k_ft_in1k', 224),
    ('cdds_swin-bert-b-384', 'swin_base_patch4_window12_384.ms_in22k_ft_in1k', 384),
])
def test_paper_image_towers_read_images_at_their_size(name, vision, size, dataset):
    cfg = Config.fromfile(REPO / 'configs' / 'cdds' / f'{name}_{dataset}.py')
    main = Config.fromfile(REPO / 'configs' / 'cdds' / f'cdds_vit-bert-b16_{dataset}.py')
    assert cfg.model.backbone.vision == vision
    for loader in (cfg.train_dataloader, cfg.val_dataloader, cfg.test_dataloader):
        assert loader.dataset.transform.size == size
    assert cfg.train_dataloader.dataset.ann_file == main.train_dataloader.dataset.ann_file
    assert cfg.test_evaluator == main.test_evaluator


@pytest.mark.parametrize('dataset', ['flickr30k', 'mscoco'])
@pytest.mark.parametrize('arch', ['ViT-B-16', 'ViT-L-14'])
def test_clip_towers_read_images_as_clip_does(arch, dataset):
    tag = arch.lower().replace('-', '')[3:]
    cfg = Config.fromfile(REPO / 'configs' / 'cdds' / f'cdds_clip-vit-{tag}_{dataset}.py')
    main = Config.fromfile(REPO / 'configs' / 'cdds' / f'cdds_clip-vit-b32_{dataset}.py')
    assert cfg.model.backbone.arch == arch
    for loader in (cfg.train_dataloader, cfg.val_dataloader, cfg.test_dataloader):
        assert (loader.dataset.transform.backbone, loader.dataset.transform.pretrained) == (
            arch, 'openai')
    assert cfg.train_dataloader.dataset.ann_file == main.train_dataloader.dataset.ann_file


def test_mscoco_trains_on_train2014_alone_or_on_train_and_restval():
    alone = Config.fromfile(REPO / 'configs' / 'cdds' / 'cdds_vit-bert-b16_mscoco-train2014.py')
    both = Config.fromfile(REPO / 'configs' / 'cdds' / 'cdds_vit-bert-b16_mscoco.py')
    assert alone.train_dataloader.dataset.ann_file == 'annotations/coco_train2014.json'
    assert both.train_dataloader.dataset.ann_file == 'annotations/coco_train.json'
    assert alone.train_cfg.val_interval == both.train_cfg.val_interval == dict(epochs=1)
    assert alone.test_evaluator == both.test_evaluator


@pytest.mark.slow
def test_demo_config_trains_and_improves_r1_over_its_start(tmp_path: Path):
    """Shortened phases and smaller UNets (1 + 1 layers, one perturbation) keep it to seconds."""
    short = [
        'train_cfg.phases.0.iters=60', 'train_cfg.phases.1.iters=60',
        'train_cfg.phases.1.lr=2e-3', 'train_cfg.phases.1.schedule=constant',
        'train_dataloader.batch_size=32', 'train_dataloader.dataset.num_scenes=2000',
        'val_dataloader.dataset.num_scenes=50', 'val_dataloader.dataset.captions_per_image=1',
        'model.disentangler.num_encoder_layers=1', 'model.disentangler.num_decoder_layers=1',
        'model.disentangler.num_perturbations=1', 'model.disentangler.ffn_ratio=1.0',
    ]
    train_tool.main([str(DEMO), '--work-dir', str(tmp_path), '--cfg-options', *short])

    report = json.loads((tmp_path / 'phase_report.json').read_text())
    assert [c['column'] for c in report] == ['towers start', 'towers end', 'cdds end']
    start, before_cdds, end = (column['metrics'] for column in report)
    recall_at_1 = lambda m: m['en/t2i_R@1'] + m['en/i2t_R@1']  # noqa: E731
    # Retrieval reads the semantic components, so CDDS's own phase must make the difference.
    assert recall_at_1(end) >= recall_at_1(before_cdds) + 10, (before_cdds, end)
    assert recall_at_1(end) >= recall_at_1(start) + 10, (start, end)

    # tools/test.py on the trained checkpoint: the test galleries' languages are checked and
    # both scorings come out (patch-word, bare keys; the pooled cosine beside it).
    test_tool.main([str(DEMO), str(tmp_path / 'iter_120.pth'), '--work-dir', str(tmp_path / 'test'),
                    '--out', str(tmp_path / 'test.json'), '--cfg-options',
                    'test_dataloader.dataset.num_scenes=50', *short[-4:]])
    metrics = json.loads((tmp_path / 'test.json').read_text())['metrics']
    assert {'en/t2i_R@1', 'pooled/en/t2i_R@1'} <= set(metrics)


def test_the_cross_lingual_config_reads_multi30k_not_the_english_only_flickr30k_files():
    """It inherited flickr30k_{train,val}.json from its English base: 145,000 English pairs a
    language instead of Multi30K's 29,000 translations, and a validation asking de/fr/cs of
    English-only captions."""
    cfg = Config.fromfile(str(REPO / 'configs' / 'cdds' / 'cdds_vit-mbert-b16_multi30k-mt.py'))
    assert [cfg[f'{split}_dataloader'].dataset.ann_file for split in ('train', 'val', 'test')] == [
        f'annotations/multi30k_{split}.json' for split in ('train', 'val', 'test')]
