"""configs/_base_/evaluation, and the evaluation part of MSCOCO's dataset configs: every file
loads and its val/test loops build on stand-in data."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from mmengine.config import Config
from mmengine.runner import Runner

from tests.conftest import tiny_retriever_cfg
from xmr.datasets import Annotation, MediaRecord, dump_annotation

BASES = Path(__file__).resolve().parents[2] / 'configs' / '_base_'
# MSCOCO's two-gallery evaluation (ja, zh) is shared by both of its settings' dataset configs.
CONFIGS = [*sorted((BASES / 'evaluation').glob('*.py')), BASES / 'datasets' / 'mscoco_eval.py']
LANGUAGES = ['en', 'de', 'fr', 'cs', 'es', 'it', 'ja', 'ko', 'pl', 'ru', 'tr', 'zh']
RUN_IDS = itertools.count()


def _loaders(value) -> list[dict]:
    return list(value) if isinstance(value, list) else [value]


def _stand_in(loader: dict, root: Path) -> dict:
    """The loader with its data root moved under ``root`` and a one-image annotation there."""
    dataset = dict(loader['dataset'], data_root=str(root / loader['dataset']['data_root']))
    ann_file = Path(dataset['data_root']) / dataset['ann_file']
    if not ann_file.exists():
        dump_annotation(Annotation(
            dataset='any', split='any', media_type='image', languages=LANGUAGES,
            items=[MediaRecord('m', 'm.jpg', {lang: ['x'] for lang in LANGUAGES})]), ann_file)
    return dict(loader, dataset=dataset, num_workers=0, persistent_workers=False)


def test_the_expected_files_exist():
    assert {path.stem for path in CONFIGS} == {'mscoco_eval', 'xtd10_zeroshot', 'cdds_flickr30k',
                                               'cdds_mscoco'}


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: p.stem)
def test_config_builds_its_evaluation_loops(path, tmp_path):
    cfg = Config.fromfile(path)
    parts = {}
    for mode in ('val', 'test'):
        loaders = [_stand_in(loader, tmp_path) for loader in _loaders(cfg[f'{mode}_dataloader'])]
        multi = cfg[f'{mode}_cfg']['type'].startswith('MultiDataset')
        parts.update({f'{mode}_dataloader': loaders if multi else loaders[0],
                      f'{mode}_evaluator': cfg[f'{mode}_evaluator'],
                      f'{mode}_cfg': cfg[f'{mode}_cfg']})
    runner = Runner(model=tiny_retriever_cfg(), work_dir=str(tmp_path / 'work'),
                    default_scope='xmr', experiment_name=f'eval_cfg_{next(RUN_IDS)}',
                    log_level='WARNING', **parts)
    for loop in (runner.val_loop, runner.test_loop):
        evaluators = getattr(loop, 'evaluators', None) or [loop.evaluator]
        prefixes = [metric.prefix for evaluator in evaluators for metric in evaluator.metrics]
        assert len(set(prefixes)) == len(prefixes)
    if path.stem.startswith('cdds_'):
        # CDDS scores by patch-word matching; the pooled cosine is reported beside it.
        assert runner.val_loop.evaluator.metrics[0].scoring == 'tokens'
        assert [m.scoring for m in runner.test_loop.evaluator.metrics][-1] == 'embedding'
    elif path.stem == 'mscoco_eval':
        assert [m.prefix for e in runner.val_loop.evaluators for m in e.metrics] == [
            'coco', 'cococn']
        assert runner.test_loop.evaluators[0].metrics[0].protocol == 'coco_1k_5fold'
    else:
        assert [(m.protocol, m.prefix) for m in runner.test_loop.evaluator.metrics] == [
            ('xtd10_t2i_r10', 'xtd10_mclip'), ('xtd10_fewshot', 'xtd10_pectvlm')]
        assert runner.test_loop.dataloader.dataset.ann_file.name == 'xtd10_test.json'
