"""LanguageBatchSampler: one language per batch, planned from the seed and the epoch alone."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from mmengine.dataset import DefaultSampler
from mmengine.hooks import DistSamplerSeedHook, Hook
from mmengine.runner.loops import _InfiniteDataloaderIterator
from torch.utils.data import BatchSampler, DataLoader

from tests.engine.test_loops import PAIRS, PHASES, loader, make_cfg, train
from xmr.datasets.language_batch_sampler import GlobalBatchSampler, LanguageBatchSampler
from xmr.engine.resume import can_skip_at_sampler, skip_at_sampler
from xmr.registry import HOOKS


class Items:
    """A dataset of integers whose languages are given."""

    def __init__(self, languages) -> None:
        self.languages = np.asarray(languages)

    def __len__(self) -> int:
        return len(self.languages)

    def __getitem__(self, index: int) -> int:
        return index

    def item_languages(self) -> np.ndarray:
        return self.languages


def batches(languages, batch_size: int, epoch: int = 0, shuffle: bool = True, seed: int = 3):
    sampler = LanguageBatchSampler(DefaultSampler(Items(languages), shuffle=shuffle, seed=seed),
                                   batch_size)
    sampler.set_epoch(epoch)
    return list(sampler)


def test_the_batches_complete_in_order_along_the_pass_worked_by_hand():
    # Unshuffled: language 0 at 0, 2, 5; language 1 at 1, 3, 4. [0, 2] completes at position 2,
    # [1, 3] at 3; 5 and 4 are each language's incomplete remainder, dropped.
    assert batches([0, 1, 0, 1, 1, 0], 2, shuffle=False) == [[0, 2], [1, 3]]
    assert batches([1, 1, 0, 0, 0, 0], 2, shuffle=False) == [[0, 1], [2, 3], [4, 5]]
    # A batch's place is where its last item stands, not its first: [1, 2] completes at 2,
    # before [0, 3] (started earlier) completes at 3.
    assert batches([0, 1, 1, 0], 2, shuffle=False) == [[1, 2], [0, 3]]
    # A language's remainder is dropped even when it stands before other batches: item 2.
    assert batches([0, 0, 0, 1, 1, 1, 1], 2, shuffle=False) == [[0, 1], [3, 4], [5, 6]]


def test_a_pass_is_planned_as_8_bytes_an_item():
    """Lists of Python ints took about 40 bytes an item: 0.7 GB per rank for a pass of CC3M in
    five translations."""
    sampler = LanguageBatchSampler(DefaultSampler(Items([0, 1] * 50), seed=1), 4)
    plan = sampler.plan()
    assert plan.shape == (24, 4) and plan.nbytes == 24 * 4 * 8
    drawn = list(sampler)
    assert drawn == plan.tolist()


def test_with_one_language_the_batches_are_the_default_samplers_with_drop_last():
    for epoch in (0, 1):
        plain = DefaultSampler(Items([7] * 23), shuffle=True, seed=5)
        plain.set_epoch(epoch)
        assert batches([7] * 23, 4, epoch, seed=5) == list(BatchSampler(plain, 4, True))


def test_every_batch_holds_one_language_and_every_item_comes_once_a_pass():
    rng = np.random.default_rng(0)
    languages = rng.integers(0, 3, size=101)
    plan = batches(languages, 8)
    counts = np.bincount(languages)
    assert len(plan) == sum(counts // 8) == len(LanguageBatchSampler(
        DefaultSampler(Items(languages)), 8))
    assert all(len(set(languages[batch])) == 1 for batch in plan)
    drawn = [i for batch in plan for i in batch]
    assert len(drawn) == len(set(drawn))
    for language in range(3):  # what a pass leaves out is each language's remainder
        assert (languages[drawn] == language).sum() == counts[language] // 8 * 8
    assert len({languages[batch[0]] for batch in plan[:6]}) > 1  # the languages interleave


def test_the_plan_depends_on_the_seed_and_the_epoch_only():
    languages = np.arange(60) % 3
    assert batches(languages, 4, epoch=1) == batches(languages, 4, epoch=1)
    assert batches(languages, 4, epoch=1) != batches(languages, 4, epoch=2)
    assert batches(languages, 4, seed=3) != batches(languages, 4, seed=4)


def test_mmengine_loops_setting_the_wrapped_samplers_epoch_plan_that_pass(monkeypatch):
    """MMEngine's epoch and iteration loops set the epoch of ``batch_sampler.sampler`` (the
    dataloader's ``sampler`` is torch's ``SequentialSampler`` beside a batch sampler): a pass
    so begun is the one ``set_epoch`` on this sampler plans, not pass 0 again."""
    monkeypatch.setattr('time.sleep', lambda seconds: None)  # the iteration loop's pause
    languages = np.arange(48) % 2
    dataloader = DataLoader(Items(languages), batch_sampler=LanguageBatchSampler(
        DefaultSampler(Items(languages), shuffle=True, seed=3), 4), collate_fn=list)
    assert [list(b) for b in dataloader] == batches(languages, 4, epoch=0)
    runner = SimpleNamespace(epoch=2, train_loop=SimpleNamespace(dataloader=dataloader))
    DistSamplerSeedHook().before_train_epoch(runner)  # EpochBasedTrainLoop's, each epoch
    assert [list(b) for b in dataloader] == batches(languages, 4, epoch=2)
    assert batches(languages, 4, epoch=2) != batches(languages, 4, epoch=0)
    endless = _InfiniteDataloaderIterator(dataloader)  # IterBasedTrainLoop's: 2nd pass, epoch 1
    drawn = [list(next(endless)) for _ in range(2 * len(dataloader))]
    assert drawn[len(dataloader):] == batches(languages, 4, epoch=1)


@pytest.mark.parametrize('kept_epoch', [False, True])
def test_a_wrapped_sampler_without_set_epoch_leaves_the_pass_to_this_one(kept_epoch):
    """torch's samplers set no epoch: this sampler's ``set_epoch`` plans the pass, also where
    the wrapped one shows an ``epoch`` of its own that nothing sets."""
    languages = np.arange(48) % 2
    wrapped = SimpleNamespace(dataset=Items(languages), seed=3, shuffle=True,
                              **({'epoch': 0} if kept_epoch else {}))
    sampler = LanguageBatchSampler(wrapped, 4)
    sampler.set_epoch(2)
    assert sampler.epoch == 2
    assert [[int(index) for index in batch] for batch in sampler] == batches(languages, 4, 2)
    assert batches(languages, 4, 2) != batches(languages, 4, 0)


def test_under_ddp_every_step_reads_one_global_batch_of_one_language(monkeypatch):
    """The ranks' batches of a step are the slices, in rank order, of the batch one process
    with the global batch size reads: the gathered batch of a contrastive loss holds one
    language (batches of two languages dealt to two ranks would hold one image twice)."""
    languages = np.arange(70) % 3  # 24, 23, 23 items: 2 + 1 + 1 global batches of 3 x 4
    whole = batches(languages, 12)
    assert len(whole) == 4
    shares = []
    for rank in range(3):
        monkeypatch.setattr('xmr.datasets.language_batch_sampler.get_dist_info',
                            lambda rank=rank: (rank, 3))
        shares.append(batches(languages, 4))
        assert len(LanguageBatchSampler(DefaultSampler(Items(languages)), 4)) == 4
    assert [len(share) for share in shares] == [4, 4, 4]
    for step, batch in enumerate(whole):
        assert [i for share in shares for i in share[step]] == batch
        assert len(set(languages[batch])) == 1


def reference_global_batches(languages, global_batch: int, seed: int, epoch: int):
    """The plan written out as a walk along the pass's permutation: each item joins its
    language's open batch, which is emitted as it fills; what stays open at the end is
    dropped."""
    order = torch.randperm(len(languages), generator=torch.Generator().manual_seed(seed + epoch))
    open_batches, emitted = {}, []
    for index in order.tolist():
        batch = open_batches.setdefault(int(languages[index]), [])
        batch.append(index)
        if len(batch) == global_batch:
            emitted.append(open_batches.pop(int(languages[index])))
    return emitted


@pytest.mark.parametrize('world_size', [1, 2, 3, 4])
def test_every_world_size_shards_each_pass_disjointly_and_completely(monkeypatch, world_size):
    """Languages of 29, 17 and 11 items at 2 a rank leave tails of every length: each rank
    reads its slice of every global batch of the written-out plan, in rank order, so the ranks
    read disjoint items, together every item of a full global batch once, and a rank resumed
    mid-pass reads on where it stopped."""
    languages = np.repeat([0, 1, 2], [29, 17, 11])[np.random.default_rng(1).permutation(57)]
    expected = reference_global_batches(languages, 2 * world_size, seed=3, epoch=1)
    shares = []
    for rank in range(world_size):
        monkeypatch.setattr('xmr.datasets.language_batch_sampler.get_dist_info',
                            lambda rank=rank: (rank, world_size))
        shares.append(batches(languages, 2, epoch=1, seed=3))
        resumed = LanguageBatchSampler(DefaultSampler(Items(languages), seed=3), 2)
        resumed.set_epoch(1)
        resumed.start_at(2)  # a run resumed after two steps draws what the third step drew
        assert list(resumed) == shares[rank][2:]
    for rank, share in enumerate(shares):
        assert share == [batch[2 * rank:2 * rank + 2] for batch in expected]
    drawn = [i for share in shares for batch in share for i in batch]
    assert len(drawn) == len(set(drawn)) == sum(
        count // (2 * world_size) * 2 * world_size for count in (29, 17, 11))


def test_global_batches_mix_languages_and_shard_as_one_process_reads_them(monkeypatch):
    """Languages mixed, no item_languages() needed: under DDP the ranks' batches of a step are
    the slices of the batch one process with the global batch reads (DefaultSampler with
    drop_last), and an odd pass is dropped, not padded with its first items."""
    items = list(range(29))  # 2 global batches of 3 x 4, 5 items dropped (DefaultSampler: 1 padded)
    for epoch in (0, 1):
        plain = DefaultSampler(items, shuffle=True, seed=5)
        plain.set_epoch(epoch)
        whole = list(BatchSampler(plain, 12, True))
        shares = []
        for rank in range(3):
            monkeypatch.setattr('xmr.datasets.language_batch_sampler.get_dist_info',
                                lambda rank=rank: (rank, 3))
            sampler = GlobalBatchSampler(DefaultSampler(items, shuffle=True, seed=5), 4)
            sampler.set_epoch(epoch)
            shares.append(list(sampler))
            assert len(sampler) == 2
        assert [[i for share in shares for i in share[step]] for step in range(2)] == whole
    drawn = [i for share in shares for batch in share for i in batch]
    assert len(drawn) == len(set(drawn)) == 24
    with pytest.raises(ValueError, match=r'^GlobalBatchSampler: the dataset \(29 items\) fill '
                       r'no batch of 30 \(batch_size 10 x world size 3\), so they would never '
                       'train; lower batch_size or add items$'):
        GlobalBatchSampler(DefaultSampler(items), 10)


def test_a_pass_started_at_a_batch_skips_the_ones_before_and_the_next_pass_is_whole():
    sampler = LanguageBatchSampler(DefaultSampler(Items(np.arange(40) % 2), seed=1), 4)
    whole = list(sampler)
    sampler.start_at(3)
    assert list(sampler) == whole[3:]
    assert list(sampler) == whole
    # A resumed phase skips at this batch sampler: no skipped item is read. A loader with
    # workers calls iter() twice and draws from the second iterator.
    for workers in (0, 2):
        dataloader = DataLoader(sampler.sampler.dataset, batch_sampler=sampler,
                                collate_fn=list, num_workers=workers)
        assert can_skip_at_sampler(dataloader)
        skip_at_sampler(dataloader, 3)
        assert list(dataloader) == whole[3:]
        assert list(dataloader) == whole


def test_a_dataset_without_item_languages_is_refused_naming_it():
    with pytest.raises(ValueError, match='LanguageBatchSampler: list tells no item languages '
                       r'\(it has no item_languages\(\)\); train it with '
                       r"batch_sampler=dict\(type='GlobalBatchSampler'\)"):
        LanguageBatchSampler(DefaultSampler(list(range(4))), 2)
    with pytest.raises(ValueError, match='batch_size must be a positive int, got 0'):
        LanguageBatchSampler(DefaultSampler(Items([0, 1])), 0)


class NamedItems(Items):
    """Items whose languages are named, as ``CaptionPairDataset``'s ``target_langs``."""

    target_langs = ['de', 'am', 'km']


def test_a_language_too_small_for_one_batch_is_refused_naming_it_and_its_items(monkeypatch):
    # 'am' has 3 items and 'km' 1: neither fills a batch of 4, so neither would ever train.
    languages = [0] * 8 + [1] * 3 + [2]
    with pytest.raises(ValueError, match=r"language 'am' \(3 items\), language 'km' \(1 item\) "
                       r'fill no batch of 4 \(batch_size 4 x world size 1\), so they would never '
                       'train; lower batch_size'):
        LanguageBatchSampler(DefaultSampler(NamedItems(languages)), 4)
    assert len(LanguageBatchSampler(DefaultSampler(NamedItems(languages)), 1)) == 8 + 3 + 1
    with pytest.raises(ValueError, match=r'^LanguageBatchSampler: the source captions \(1 item\), '
                       r'language #5 \(1 item\) fill no batch of 2 \(batch_size 2'):
        LanguageBatchSampler(DefaultSampler(Items([-1, 5, 0, 0])), 2)
    # Under DDP the batch of one language is the global one: 8 items fill no 3 x 4.
    monkeypatch.setattr('xmr.datasets.language_batch_sampler.get_dist_info', lambda: (1, 4))
    with pytest.raises(ValueError, match=r"^LanguageBatchSampler: language 'de' \(8 items\), "
                       r"language 'am' .* fill no batch of 12 \(batch_size 3 x world size 4\)"):
        LanguageBatchSampler(DefaultSampler(NamedItems(languages)), 3)
    assert len(LanguageBatchSampler(DefaultSampler(NamedItems([0] * 8 + [1] * 4)), 1)) == 2 + 1


def test_a_language_code_past_the_named_languages_is_refused_by_its_number():
    # NamedItems names 3 languages (codes 0-2): code 3 has no name, so it is told by number.
    with pytest.raises(ValueError, match=r"^LanguageBatchSampler: language #3 \(1 item\) fill no "
                       r'batch of 2'):
        LanguageBatchSampler(DefaultSampler(NamedItems([0, 0, 3])), 2)


@HOOKS.register_module(force=True)
class BatchLanguagesHook(Hook):
    """Records each iteration's item indices and languages."""

    def __init__(self) -> None:
        self.batches: list[tuple[list[int], set[str]]] = []

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        self.batches.append((list(data_batch['index']), set(data_batch['lang'])))


def grouped_run(work_dir, workers: int = 0, **options):
    cfg = make_cfg(work_dir, phases=copy.deepcopy(PHASES[1:]), **options)
    grouped = loader(PAIRS)
    grouped.pop('drop_last')
    cfg.train_dataloader = dict(grouped, batch_sampler=dict(type='LanguageBatchSampler'),
                                num_workers=workers)
    cfg.custom_hooks.append(dict(type='BatchLanguagesHook'))
    torch.manual_seed(0)
    runner, records = train(cfg)
    seen = next(h for h in runner.hooks if isinstance(h, BatchLanguagesHook)).batches
    return seen, records


def test_training_reads_one_language_a_batch_and_a_resumed_run_the_same_batches(tmp_path):
    """40 scenes in de and zh at batch 8: 10 batches a pass; resumed at iteration 5 (mid-pass,
    skipped at the sampler, with and without loader workers) and 10 (the second phase), the
    runs read what the uninterrupted one read and compute its losses."""
    seen, records = grouped_run(tmp_path / 'whole', checkpoint_interval=5)
    assert len(seen) == 12
    assert all(len(languages) == 1 for _, languages in seen)
    assert set().union(*(languages for _, languages in seen[:8])) == {'de', 'zh'}
    for resume_at, workers in ((5, 0), (10, 0), (5, 2)):  # workers: torch calls iter() twice
        resumed, resumed_records = grouped_run(
            tmp_path / f'from_{resume_at}_{workers}', workers,
            resume_from=tmp_path / 'whole' / f'iter_{resume_at}.pth')
        assert resumed == seen[resume_at:]
        for mine, reference in zip(resumed_records, records[resume_at:]):
            assert mine['losses'] == reference['losses']


def test_each_index_carries_the_seed_and_epoch_of_its_pass():
    """The key of every item's random draws (``sample_draws``), as PassIndices gives torch's
    batches."""
    keys = {(index.seed, index.epoch) for batch in batches([0, 1] * 6, 2, epoch=2, seed=5)
            for index in batch}
    assert keys == {(5, 2)}
