"""Every configs/_base_/datasets file loads, names converter outputs and builds its datasets."""
from __future__ import annotations

from pathlib import Path

import pytest
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.runner import Runner

from xmr.datasets import Annotation, MediaRecord, dump_annotation

CONFIG_DIR = Path(__file__).resolve().parents[2] / 'configs' / '_base_' / 'datasets'
# The file-based benchmarks; synthetic.py (generated on the fly) is tested with the demo;
# The dataloader defaults (train_loaders.py, eval_loaders.py), the zero-shot training
# (cc300k_train.py) and a benchmark's evaluation (*_eval.py) are parts of the others; the
# Swahili XM3600 setting is built by its LoRA leaves
# (tests/configs/test_open_clip_family_configs.py).
PARTS = ('synthetic', 'train_loaders', 'eval_loaders', 'cc300k_train',
         'crossmodal3600_sw_multi30k-mt')
# Test-only benchmarks (no training or validation split), with their converters' outputs.
EVAL_ONLY = {'crossmodal3600': 'crossmodal3600_test.json', 'xtd200': 'xtd200_test.json',
             'flickr30k_200': 'flickr30k_200_test.json'}
CONFIGS = sorted(p for p in CONFIG_DIR.glob('*.py')
                 if p.stem not in (*PARTS, *EVAL_ONLY) and not p.stem.endswith('_eval'))
# File names the converters write (cc300k_train.json is prepare_cc3m.py's documented --out).
CONVERTER_OUTPUTS = {
    *(f'multi30k_{s}.json' for s in ('train', 'val', 'test', 'train_5captions', 'val_5captions',
                                   'test_5captions')),
    *(f'flickr30k_{s}.json' for s in ('train', 'val', 'test')),
    *(f'coco_{s}.json' for s in ('train', 'val', 'test5k')),
    *(f'coco_test1k_fold{k}.json' for k in range(5)),
    *(f'cococn_{s}.json' for s in ('train', 'val', 'test')),
    'xtd10_test.json', *(f'xtd10_fewshot50_seed42_{s}.json' for s in ('train', 'val', 'test')),
    *(f'msrvtt_{s}.json' for s in ('train7k', 'train9k', 'val', 'test1ka')),
    'cc300k_train.json',
}
LANGUAGES = ['en', 'de', 'fr', 'cs', 'es', 'it', 'ja', 'ko', 'pl', 'ru', 'tr', 'zh', 'vi', 'sw']


def _dataloaders(cfg: Config) -> dict[str, dict]:
    found = {}
    for key, value in cfg.items():
        if value is None:  # a loader the dataset cannot give (train_loaders.py)
            continue
        if key.endswith('_dataloader') and not isinstance(value, list):
            found[key] = value
        elif key.endswith(('_dataloaders', '_dataloader')):
            found.update({f'{key}[{i}]': loader for i, loader in enumerate(value)})
    return found


def test_every_benchmark_has_both_settings():
    names = {path.stem for path in CONFIGS}
    settings = {f'{benchmark}_{setting}' for benchmark in ('multi30k', 'mscoco', 'xtd10', 'msrvtt')
                for setting in ('clft', 'zeroshot')}
    # Plus English image-text retrieval (CDDS) on two of the benchmarks' images, and Multi30K's
    # text pairs alone (a text-only teacher, text_to_text evaluation).
    assert names == settings | {'flickr30k_en', 'mscoco_en', 'multi30k_text'}


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: p.stem)
def test_config_builds_its_datasets(path, tmp_path):
    cfg = Config.fromfile(path)
    loaders = _dataloaders(cfg)
    assert {'train_dataloader', 'val_dataloader', 'test_dataloader'} <= {
        name.split('[')[0] for name in loaders}
    for name, loader in loaders.items():
        assert loader['sampler']['type'] == 'DefaultSampler', name
        training = name.endswith('train_dataloader') or name == 'source_finetune_dataloader'
        assert loader['sampler']['shuffle'] == training, name
        # Evaluation scores every item; training batches one language at a time, dropping each
        # language's last partial batch (train_loaders.py).
        if training:
            assert loader['batch_sampler'] == dict(type='LanguageBatchSampler'), name
            assert 'drop_last' not in loader, name  # torch refuses it beside a batch sampler
        else:
            assert loader['drop_last'] is False and 'batch_sampler' not in loader, name
        dataset_cfg = dict(loader['dataset'])
        ann_file = Path(dataset_cfg['ann_file'])
        assert ann_file.name in CONVERTER_OUTPUTS, f'{name}: {ann_file}'
        root = tmp_path / dataset_cfg['data_root']
        if not (root / ann_file).exists():
            video = ann_file.name.startswith('msrvtt')
            dump_annotation(Annotation(
                dataset='any', split='any', media_type='video' if video else 'image',
                languages=LANGUAGES, source_lang='en', translation_langs=LANGUAGES[1:],
                items=[MediaRecord('m', 'm.mp4' if video else 'm.jpg',
                                   {lang: ['x'] for lang in LANGUAGES},
                                   {lang: ['y'] for lang in LANGUAGES[1:]})]), root / ann_file)
        dataset_cfg['data_root'] = str(root)
        # Built the way MMEngine's runner builds every dataloader (collate_fn included); with
        # one item a language, a training batch of one (LanguageBatchSampler refuses a language
        # too small for a batch).
        runner_cfg = dict(loader, dataset=dataset_cfg, num_workers=0, persistent_workers=False)
        if training:
            runner_cfg['batch_size'] = 1
        with DefaultScope.overwrite_default_scope('xmr'):
            dataloader = Runner.build_dataloader(runner_cfg)
        dataset = dataloader.dataset
        assert len(dataset) >= 1, name
        assert dataset.test_mode == (dataset_cfg['type'] == 'RetrievalDataset'), name
        assert dataloader.collate_fn([None])['batch_size'] == 0, name


@pytest.mark.parametrize('name', EVAL_ONLY)
def test_eval_only_benchmark_builds_its_test_set_and_metrics(name, tmp_path):
    from mmengine.evaluator import Evaluator

    cfg = Config.fromfile(CONFIG_DIR / f'{name}.py')
    # eval_loaders.py's defaults only: the benchmark gives no training or validation data.
    assert 'train_dataloader' not in cfg and 'dataset' not in cfg.val_dataloader
    loader = cfg.test_dataloader
    assert not loader['sampler']['shuffle'] and not loader['drop_last']
    dataset_cfg = dict(loader['dataset'], languages=['en', 'swh_Latn'])
    ann_file = Path(dataset_cfg['ann_file'])
    assert ann_file.name == EVAL_ONLY[name]
    root = tmp_path / dataset_cfg['data_root']
    # One image: not the benchmark's test split by name, whose size would be refused.
    dump_annotation(Annotation(dataset=name, split='sample', media_type='image',
                               languages=['en', 'sw'], source_lang='en',
                               items=[MediaRecord('m', 'm.jpg', {'en': ['x'], 'sw': ['y']})]),
                    root / ann_file)
    dataset_cfg['data_root'] = str(root)
    with DefaultScope.overwrite_default_scope('xmr'):
        dataloader = Runner.build_dataloader(dict(loader, dataset=dataset_cfg, num_workers=0,
                                                  persistent_workers=False))
        evaluator = Evaluator(cfg.test_evaluator)
    assert dataloader.dataset.metainfo['languages'] == ['en', 'sw']
    assert [metric.protocol for metric in evaluator.metrics] == (
        ['crossmodal3600', 'crossmodal3600_first_caption'] if name == 'crossmodal3600'
        else [name])
    assert cfg.test_cfg == dict(type='TestLoop')
