"""Pinned batches on a GPU machine: the loops' loaders pin unless their config says otherwise."""
from __future__ import annotations

from types import SimpleNamespace

import torch
from mmengine.runner import Runner
from torch.utils.data import DataLoader

from tests.conftest import tiny_retriever_cfg
from tests.engine.test_eval_loops import base_cfg, eval_loader, synthetic
from tests.engine.test_loops import make_cfg
from xmr.engine import eval_loops, loops
from xmr.engine.hooks import CDDSCorrelationHook, cdds_correlation
from xmr.engine.pinned_batches import pinned_on_gpu
from xmr.registry import MODELS


def test_a_loader_config_pins_where_a_gpu_is_present_unless_it_says(monkeypatch):
    cfg = dict(batch_size=2)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    assert pinned_on_gpu(cfg) == dict(batch_size=2, pin_memory=True)
    assert pinned_on_gpu(dict(cfg, pin_memory=False))['pin_memory'] is False
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    assert pinned_on_gpu(cfg)['pin_memory'] is False
    assert cfg == dict(batch_size=2)


def pin_always(cfg):
    return {**cfg, 'pin_memory': True}


def test_the_loops_build_their_loaders_through_it(tmp_path, monkeypatch):
    monkeypatch.setattr(loops, 'pinned_on_gpu', pin_always)
    monkeypatch.setattr(eval_loops, 'pinned_on_gpu', pin_always)
    train_loop = Runner.from_cfg(make_cfg(tmp_path / 'train')).train_loop
    assert train_loop.dataloader.pin_memory
    assert train_loop.phases[0].dataloader['pin_memory']  # source_finetune's own dataloader
    test_loop = Runner(**base_cfg(
        tmp_path / 'test', test_dataloader=[eval_loader(synthetic('test', ['en', 'de']))],
        test_evaluator=[dict(type='RetrievalMetric', prefix='synth')],
        test_cfg=dict(type='MultiDatasetTestLoop'))).test_loop
    assert test_loop.dataloaders[0].pin_memory


def test_the_one_dataset_loops_pin_their_loader_too(tmp_path, monkeypatch):
    """ValLoop and TestLoop evaluate most shipped configs (Multi30K, MSRVTT, XTD10)."""
    monkeypatch.setattr(eval_loops, 'pinned_on_gpu', pin_always)
    runner = Runner(**base_cfg(
        tmp_path, val_dataloader=eval_loader(synthetic('val', ['en', 'de'])),
        val_evaluator=dict(type='RetrievalMetric'), val_cfg=dict(type='ValLoop'),
        test_dataloader=eval_loader(synthetic('test', ['en', 'de'])),
        test_evaluator=dict(type='RetrievalMetric'), test_cfg=dict(type='TestLoop')))
    assert runner.val_loop.dataloader.pin_memory
    assert runner.test_loop.dataloader.pin_memory


def test_the_cdds_hook_builds_its_own_loader_through_it(monkeypatch):
    monkeypatch.setattr(cdds_correlation, 'pinned_on_gpu', pin_always)
    built, loader = [], DataLoader(range(2))
    runner = SimpleNamespace(seed=0, _randomness_cfg={}, hooks=[],
                             build_dataloader=lambda cfg, seed: built.append(cfg) or loader)
    CDDSCorrelationHook(dataloader=dict(batch_size=2))._loader(runner)
    assert built == [dict(batch_size=2, pin_memory=True)]


def test_batches_reach_the_device_without_blocking_by_default():
    model = MODELS.build(tiny_retriever_cfg())
    assert model.data_preprocessor._non_blocking
