"""A run trains on a ConcatDataset of xmr datasets named in its config."""
from __future__ import annotations

from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner

from tests.conftest import tiny_retriever_cfg
from xmr.datasets.concat import ConcatDataset


class BatchLanguages(Hook):
    """Records each training batch's languages and indices."""

    def __init__(self) -> None:
        self.batches: list[tuple[list[str], list[int]]] = []

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self.batches.append((list(data_batch['lang']), list(data_batch['index'])))


def test_a_phased_run_trains_on_a_concat_of_synthetic_pairs_one_language_a_batch(tmp_path):
    seen = BatchLanguages()
    cfg = Config(dict(
        default_scope='xmr',
        work_dir=str(tmp_path),
        model=tiny_retriever_cfg(),
        train_dataloader=dict(
            batch_size=4, num_workers=0,
            sampler=dict(type='DefaultSampler', shuffle=True),
            batch_sampler=dict(type='LanguageBatchSampler'),
            collate_fn=dict(type='xmr.retrieval_collate'),
            dataset=dict(type='ConcatDataset', datasets=[
                dict(type='SyntheticPairDataset', num_scenes=4, languages=['de'],
                     image_size=32, seed=0),
                dict(type='SyntheticPairDataset', num_scenes=4, languages=['zh'],
                     image_size=32, seed=1)])),
        train_cfg=dict(type='PhasedTrainLoop', val_interval=0, phases=[
            dict(name='cross_lingual', iters=2, lr=1e-2, warmup_ratio=0.0,
                 schedule='constant', trainable=['language_branch.embedding'],
                 loss_weights=dict(cl=1.0)),
            dict(name='cross_modal', iters=2, lr=1e-2, warmup_ratio=0.0, schedule='constant',
                 trainable=['language_branch.adapters'], loss_weights=dict(cm=1.0),
                 cache_features=True)]),
        optim_wrapper=dict(type='OptimWrapper', constructor='PhasedOptimWrapperConstructor',
                           optimizer=dict(type='AdamW', lr=1e-2)),
        default_hooks=dict(checkpoint=None, logger=dict(type='LoggerHook', interval=100)),
        randomness=dict(seed=0),
        log_level='WARNING'))
    runner = Runner.from_cfg(cfg)
    runner.register_hook(seen)
    runner.train()

    assert isinstance(runner.train_dataloader.dataset, ConcatDataset)
    assert runner.iter == 4
    assert len(seen.batches) == 4
    for languages, indices in seen.batches:
        # One language a batch; German items are the first child's (0-3), Chinese the second's.
        assert len(set(languages)) == 1
        assert all((index < 4) == (languages[0] == 'de') for index in indices)
    assert {languages[0] for languages, _ in seen.batches} == {'de', 'zh'}
    # The cached phase read the concat's media features from a cache built over both children.
    assert any((tmp_path / 'feature_cache').rglob('*.npy'))
