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

CONFIGS = sorted((REPO / 'configs' / 'cdds').glob('*.py'))
DEMO = REPO / 'configs' / 'cdds' / 'cdds_tiny-clip_synthetic.py'
sys.path.insert(0, str(REPO / 'tools'))
import train as train_tool  # noqa: E402


def test_the_paper_settings_and_studies_have_configs():
    names = {path.stem for path in CONFIGS}
    for backbone in ('clip-vit-b32', 'vit-bert-b16'):
        for dataset in ('flickr30k', 'mscoco'):
            assert f'cdds_{backbone}_{dataset}' in names
    assert 'cdds_vit-mbert-b16_multi30k-mt' in names
    assert {'dual-encoder_vit-bert-b16_flickr30k', 'dual-encoder-ds_vit-bert-b16_flickr30k',
            'cdds_vit-bert-b16_flickr30k_corr-subset',
            'cdds_vit-bert-b16_flickr30k_corr-dataset'} <= names
    assert sum(name.startswith('cdds_vit-bert-b16_flickr30k_wo-') for name in names) == 4


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: p.stem)
def test_config_builds_its_model_and_the_model_accepts_its_phases(path: Path):
    """The real towers need downloads; a tiny CLIP stands in for them, the rest is as written."""
    cfg = Config.fromfile(path)
    model_cfg = cfg.model.to_dict()
    model_cfg['backbone'] = tiny_backbone_cfg()
    torch.manual_seed(0)
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


@pytest.mark.parametrize('path', [p for p in CONFIGS if p.stem.startswith('cdds_vit')
                                  or p.stem.startswith('cdds_clip')], ids=lambda p: p.stem)
def test_paper_config_trains_25_epochs_and_validates_every_epoch(path: Path):
    """The length is given in epochs (the loop counts the batches); the validation interval in
    iterations must be one epoch of the configured data at the configured batch."""
    cfg = Config.fromfile(path)
    assert [phase['epochs'] for phase in cfg.train_cfg.phases] == [25]
    assert cfg.train_cfg.val_interval == cfg.train_pairs // cfg.train_dataloader.batch_size


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
