"""What a resumed run gives the samplers built before it resumed."""
from __future__ import annotations

from mmengine.dataset import DefaultSampler
from torch.utils.data import DataLoader

from tests.datasets.test_language_batch_sampler import Items
from xmr.datasets.language_batch_sampler import LanguageBatchSampler
from xmr.engine.resume import reseed_samplers


def test_samplers_built_with_the_run_s_seed_take_the_checkpoint_s_and_own_seeds_stay():
    """A sampler given a seed of its own in its config kept it in the run that wrote the
    checkpoint, so its passes, resumed, are those of that seed, not the checkpoint's."""
    items = Items([0, 1] * 8)
    run_seeded = DataLoader(items, sampler=DefaultSampler(items, seed=5), batch_size=2)
    own = DataLoader(items, sampler=DefaultSampler(items, seed=123), batch_size=2)
    batched = DataLoader(items, batch_sampler=LanguageBatchSampler(
        DefaultSampler(items, seed=5), 2))
    for loader in (run_seeded, own, batched):
        reseed_samplers(loader, built_with=5, seed=9)
    assert run_seeded.sampler.seed == 9 and own.sampler.seed == 123
    assert batched.batch_sampler.seed == batched.batch_sampler.sampler.seed == 9
