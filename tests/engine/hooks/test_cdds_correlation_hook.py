"""CDDSCorrelationHook: dataset-level statistics, when it recomputes them, untouched RNG."""
import logging
import os
import signal
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp
from mmengine.runner import Runner
from torch.utils.data import DataLoader

from tests.conftest import tiny_backbone_cfg
from tests.engine.test_distributed import free_port
from xmr.datasets.collate import retrieval_collate
from xmr.engine.hooks import CDDSCorrelationHook, PreemptionHook
from xmr.engine.resume import pass_indices
from xmr.models.disentanglers.cdds import column_statistics
from xmr.registry import DATASETS, HOOKS, MODELS


def model_with(mode: str = 'dataset'):
    torch.manual_seed(0)
    return MODELS.build(dict(
        type='DualEncoderRetriever', backbone=tiny_backbone_cfg(),
        disentangler=dict(type='CDDSDisentangler', num_heads=2, num_perturbations=2,
                          correlation=dict(mode=mode))))


def loader():
    dataset = DATASETS.build(dict(type='SyntheticPairDataset', num_scenes=12, languages=[],
                                  split='train', image_size=32, seed=0))
    return DataLoader(dataset, batch_size=5, shuffle=False, collate_fn=retrieval_collate)


def runner_for(model, iteration: int = 0):
    return SimpleNamespace(model=model, iter=iteration, seed=0, _randomness_cfg={}, hooks=[],
                           build_dataloader=Runner.build_dataloader,
                           train_loop=SimpleNamespace(dataloader=loader()),
                           logger=logging.getLogger('test_cdds_correlation_hook'))


def expected_statistics(model):
    """Column statistics of the semantic components of every batch, from scratch."""
    model.eval()
    image_sum, text_sum = 0, 0
    with torch.no_grad():
        for batch in loader():
            data = model.data_preprocessor(batch, False)
            image = model.backbone.encode_image_tokens(data['media'])
            text = model.backbone.encode_text_tokens(data['source_tokens'])
            image_sum = image_sum + column_statistics(
                model.disentangler.encode_image(image.tokens, image.mask), image.mask)
            text_sum = text_sum + column_statistics(
                model.disentangler.encode_text(text.tokens, text.mask), text.mask)
    return image_sum, text_sum


def test_before_train_fills_the_estimate_over_the_whole_loader():
    model = model_with().train()
    hook = HOOKS.build(dict(type='CDDSCorrelationHook'))
    torch.manual_seed(3)
    hook.before_train(runner_for(model))
    after_hook = torch.rand(3)
    assert model.training, 'the hook must hand the model back in train mode'
    correlation = model.disentangler.correlation
    assert correlation.num_accumulated_tokens == (12 * 17, int(correlation.text_statistics[0, 0]))
    image, text = expected_statistics(model)
    torch.testing.assert_close(correlation.image_statistics, image, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(correlation.text_statistics, text, rtol=1e-5, atol=1e-5)
    torch.manual_seed(3)
    assert torch.equal(after_hook, torch.rand(3)), 'the hook disturbed the RNG stream'


def test_recomputes_once_per_pass_over_the_data_and_keeps_a_resumed_estimate():
    model = model_with()
    hook = CDDSCorrelationHook()
    runner = runner_for(model)
    hook.before_train(runner)
    statistics = model.disentangler.correlation.image_statistics
    statistics.mul_(2)
    marked = statistics.clone()
    for iteration in (1, 2, 4):
        runner.iter = iteration
        hook.before_train_iter(runner, iteration)
        assert torch.equal(statistics, marked), f'refreshed at iteration {iteration}'
    runner.iter = 3  # three batches of 5, 5 and 2 items per pass
    hook.before_train_iter(runner, 3)
    assert not torch.equal(statistics, marked)
    statistics.mul_(2)
    marked = statistics.clone()
    hook.before_train(runner_for(model, iteration=7))
    assert torch.equal(statistics, marked), 'a resumed estimate was recomputed'


def test_the_first_iteration_does_not_repeat_the_pass_before_training():
    model = model_with()
    hook = CDDSCorrelationHook(interval=1)
    runner = runner_for(model)
    hook.before_train(runner)
    statistics = model.disentangler.correlation.image_statistics
    statistics.mul_(2)
    marked = statistics.clone()
    hook.before_train_iter(runner, 0)
    assert torch.equal(statistics, marked), 'recomputed at iteration 0'
    runner.iter = 1
    hook.before_train_iter(runner, 1)
    assert not torch.equal(statistics, marked)


def test_a_run_from_iteration_0_recomputes_the_estimate_its_loaded_weights_carry():
    """Weights loaded without resuming (load_from) carry another run's statistics, of its
    data: only a resumed run keeps them."""
    model = model_with()
    CDDSCorrelationHook().before_train(runner_for(model))
    correlation = model.disentangler.correlation
    correlation.image_statistics.mul_(2)
    CDDSCorrelationHook().before_train(runner_for(model, iteration=0))
    torch.testing.assert_close(correlation.image_statistics, expected_statistics(model)[0],
                               rtol=1e-5, atol=1e-5)


def test_max_batches_and_a_single_pass():
    model = model_with()
    hook = CDDSCorrelationHook(interval=0, max_batches=1)
    runner = runner_for(model)
    hook.before_train(runner)
    assert model.disentangler.correlation.num_accumulated_tokens[0] == 5 * 17
    statistics = model.disentangler.correlation.image_statistics.clone()
    runner.iter = 3
    hook.before_train_iter(runner, 3)
    assert torch.equal(model.disentangler.correlation.image_statistics, statistics)


def test_a_pass_over_persistent_workers_leaves_the_training_pass_where_it_was():
    """A loader with persistent workers hands every ``iter()`` its one iterator, restarted: a
    pass over the train loop's loader itself would restart the pass training is in, which
    would then skip the batches the hook read (the shipped loaders keep their workers)."""
    data = DataLoader(loader().dataset, batch_size=2, shuffle=False, num_workers=1,
                      persistent_workers=True, collate_fn=retrieval_collate)
    expected = [batch['media_id'] for batch in data]
    runner = runner_for(model_with())
    runner.train_loop.dataloader = data
    training = iter(data)
    first = next(training)['media_id']
    CDDSCorrelationHook(max_batches=2).refresh(runner)
    assert [first, *(batch['media_id'] for batch in training)] == expected


class _SignalledInWorkers(torch.utils.data.Dataset):
    """A scheduler's SIGTERM, sent to every process of the job, reaching a loader worker."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        if torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGTERM)
        return self.dataset[index]


def test_a_refresh_s_workers_outlive_a_preemption_signal_as_training_s_do():
    """The refresh's loader copied the train loader's worker init before the loop made it
    ignore the signals (or had none, from a config of its own): a SIGTERM during a refresh
    killed its workers, and the run failed with no checkpoint."""
    data = DataLoader(_SignalledInWorkers(loader().dataset), batch_size=5, num_workers=1,
                      collate_fn=retrieval_collate)
    runner = runner_for(model_with())
    runner.train_loop.dataloader = data
    runner.hooks = [PreemptionHook()]
    CDDSCorrelationHook().refresh(runner)
    torch.testing.assert_close(runner.model.disentangler.correlation.image_statistics,
                               expected_statistics(runner.model)[0])


def test_a_model_without_dataset_correlation_is_refused():
    with pytest.raises(ValueError, match="no correlation in mode 'dataset'"):
        CDDSCorrelationHook().before_train(runner_for(model_with('batch')))
    with pytest.raises(ValueError, match='max_batches must be positive'):
        CDDSCorrelationHook(max_batches=0)
    with pytest.raises(ValueError, match='interval must be non-negative or None, got -1'):
        CDDSCorrelationHook(interval=-1)


def test_a_refresh_hands_a_model_in_eval_mode_back_in_eval_mode():
    model = model_with().eval()
    CDDSCorrelationHook().refresh(runner_for(model))
    assert not model.training and model.disentangler.correlation.num_accumulated_tokens[0] > 0


def test_the_refresh_s_loader_reads_its_items_as_the_train_loader_sets_them_up():
    """Pinned memory, the workers' set-up and their timeout are the train loader's."""
    def set_up(worker_id):
        pass

    train = DataLoader(loader().dataset, batch_size=5, collate_fn=retrieval_collate,
                       num_workers=1, pin_memory=True, timeout=7, worker_init_fn=set_up)
    runner = runner_for(model_with())
    runner.train_loop.dataloader = train
    own = CDDSCorrelationHook()._loader(runner)
    assert (own.pin_memory, own.timeout, own.worker_init_fn, own.num_workers,
            own.collate_fn) == (True, 7, set_up, 1, retrieval_collate)


# 11 items on 2 ranks: MMEngine's DefaultSampler pads the pass to 12 with the first item again,
# which ends rank 1's shard; batches of 2 leave rank 1's last batch that item alone.
PADDED_LOADER = dict(
    batch_size=2, num_workers=0, sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='xmr.retrieval_collate'),
    dataset=dict(type='xmr.SyntheticPairDataset', num_scenes=11, languages=[], split='train',
                 image_size=32, seed=0))


def refreshed_statistics(source: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The statistics one refresh leaves, over ``PADDED_LOADER`` as the hook's own dataloader
    (``'own'``) or as the train loop's (``'train'``, its indices keyed by pass as the loop
    keys them)."""
    model = model_with()
    runner = runner_for(model)
    hook = CDDSCorrelationHook(dataloader=PADDED_LOADER if source == 'own' else None)
    if source == 'train':
        runner.train_loop.dataloader = Runner.build_dataloader(PADDED_LOADER, seed=0)
        pass_indices(runner.train_loop.dataloader)
    hook.refresh(runner)
    correlation = model.disentangler.correlation
    return correlation.image_statistics.clone(), correlation.text_statistics.clone()


def _refresh_worker(rank: int, port: int, out_dir: str, source: str) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE='2', LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    torch.distributed.init_process_group('gloo', rank=rank, world_size=2,
                                         timeout=timedelta(seconds=120))
    torch.save(refreshed_statistics(source), Path(out_dir) / f'rank{rank}.pt')
    torch.distributed.destroy_process_group()


@pytest.mark.parametrize('source', ['own', 'train'])
def test_two_gloo_processes_refresh_the_statistics_of_one_process(tmp_path, monkeypatch,
                                                                  source):
    """Summed over 2 ranks, the statistics are those of one process reading the 11 items: the
    sampler's pad (item 0 again) is not counted twice."""
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    mp.start_processes(_refresh_worker, args=(free_port(), str(tmp_path), source), nprocs=2,
                       join=True, start_method='fork')
    image, text = refreshed_statistics(source)
    assert int(image[0, 0]) == 11 * 17
    for rank in range(2):
        ranks_image, ranks_text = torch.load(tmp_path / f'rank{rank}.pt')
        assert int(ranks_image[0, 0]) == 11 * 17, f'rank {rank} counted the pad'
        torch.testing.assert_close(ranks_image, image, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(ranks_text, text, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('own', [False, True])
def test_every_rank_refreshes_at_the_same_iterations(monkeypatch, own):
    """9 items on 2 ranks in batches of 2: training's padded shards are 3 batches on both
    ranks, the hook's shards without the pad 3 and 2 (5 and 4 items). The ranks refresh once
    per pass over the training data, at the same iterations (their statistics' sum is a
    collective), with the hook's own loader too."""
    nine = dict(PADDED_LOADER, dataset=dict(PADDED_LOADER['dataset'], num_scenes=9))
    refreshed = {rank: [] for rank in range(2)}
    for rank, iterations in refreshed.items():
        monkeypatch.setattr('mmengine.dataset.sampler.get_dist_info', lambda r=rank: (r, 2))
        runner = runner_for(model_with())
        runner.train_loop.dataloader = Runner.build_dataloader(nine, seed=0)
        hook = CDDSCorrelationHook(dataloader=nine if own else None)
        monkeypatch.setattr(hook, 'refresh', lambda runner, at=iterations: at.append(runner.iter))
        for runner.iter in range(1, 7):
            hook.before_train_iter(runner, runner.iter)
    assert refreshed == {0: [3, 6], 1: [3, 6]}


def test_a_train_loader_of_language_batches_is_read_item_by_item():
    """The shipped configs batch one language at a time (``LanguageBatchSampler``), dropping
    each pass's incomplete batch: 5 batches of the 11 items. The refresh reads the sampler
    beneath, every item once, and leaves the batch sampler's pass alone."""
    runner = runner_for(model_with())
    runner.train_loop.dataloader = Runner.build_dataloader(
        dict(PADDED_LOADER, batch_sampler=dict(type='xmr.LanguageBatchSampler')), seed=0)
    batches = runner.train_loop.dataloader.batch_sampler
    batches.start_at(2)
    CDDSCorrelationHook().refresh(runner)
    assert runner.model.disentangler.correlation.num_accumulated_tokens[0] == 11 * 17
    assert len(list(batches)) == 3, 'the refresh consumed the resumed pass\'s start'
