"""Shipped schedules in epochs: the iterations of the config's own batch size are those it
stated before (``train_pairs // 64``), and a batch size given on the command line keeps them
epochs (docs/configs.md, "Schedules in epochs")."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest
from mmengine.config import Config

from tests.conftest import REPO
from xmr.ablations import apply_ablations
from xmr.datasets.language_batch_sampler import LanguageBatchSampler
from xmr.engine.epoch_counts import is_epochs, resolve_count

sys.path.insert(0, str(REPO / 'tools'))
import train as train_tool  # noqa: E402

FLICKR30K, MSCOCO, TRAIN2014, MULTI30K = 145000, 566747, 414113, 29000
FLICKR30K_LEAVES = [
    'cdds_clip-vit-b16', 'cdds_clip-vit-b32', 'cdds_clip-vit-l14', 'cdds_swin-bert-b-384',
    'cdds_swin-bert-b', 'cdds_vit-bert-b16-384', 'cdds_vit-bert-b16',
    'cdds_vit-bert-b16_flickr30k_corr-dataset', 'cdds_vit-bert-b16_flickr30k_corr-subset',
    'cdds_vit-bert-b16_flickr30k_itc', 'cdds_vit-bert-b16_flickr30k_wo-decoupling',
    'cdds_vit-bert-b16_flickr30k_wo-distribution-sampling',
    'cdds_vit-bert-b16_flickr30k_wo-information-integrity',
    'cdds_vit-bert-b16_flickr30k_wo-modality-consistency',
    'cdds_vit-bert-b16_flickr30k_wo-noise', 'cdds_vit-bert-b16_flickr30k_wo-semantic-consistency',
    'dual-encoder-ds_vit-bert-b16', 'dual-encoder-vsepp-ds_vit-bert-b16',
    'dual-encoder-vsepp_vit-bert-b16', 'dual-encoder_vit-bert-b16']
MSCOCO_LEAVES = ['cdds_clip-vit-b16', 'cdds_clip-vit-b32', 'cdds_clip-vit-l14',
                 'cdds_swin-bert-b-384', 'cdds_swin-bert-b', 'cdds_vit-bert-b16-384',
                 'cdds_vit-bert-b16']


def _stem(name: str, dataset: str) -> str:
    return name if dataset in name else f'{name}_{dataset}'


# What each config stated in iterations before it stated epochs, at its own batch size:
# (config, ablations) -> (captions of each language it trains on, val_interval, checkpoint).
OLD_NUMBERS = {
    **{(f'cdds/{_stem(n, "flickr30k")}.py', ()): ([FLICKR30K], 2265, 2265)
       for n in FLICKR30K_LEAVES},
    **{(f'cdds/{n}_mscoco.py', ()): ([MSCOCO], 8855, 2213) for n in MSCOCO_LEAVES},
    ('cdds/cdds_vit-bert-b16_mscoco-train2014.py', ()): ([TRAIN2014], 6470, 1617),
    ('cdds/cdds_vit-mbert-b16_multi30k-mt.py', ()): ([MULTI30K] * 3, 1359, 1359),
    ('pectvlm/lora-r8_mclip-xlmr-l14_multi30k-full_de.py',
     ('pectvlm/authors-script-multi30k',)): ([MULTI30K], 4, 1000),
}
LEAVES = sorted(str(p.relative_to(REPO / 'configs')) for p in (REPO / 'configs').rglob('*.py')
                if '_base_' not in p.parts and 'ablations' not in p.parts)


def batches_per_epoch(captions: list[int], batch_size: int) -> int:
    """What the loop counts: one pass of LanguageBatchSampler over captions of each language."""
    languages = np.repeat(np.arange(len(captions)), captions)
    sampler = types.SimpleNamespace(
        dataset=types.SimpleNamespace(item_languages=lambda: languages), seed=0, shuffle=True)
    return len(LanguageBatchSampler(sampler, batch_size))


def schedule(cfg: Config, captions: list[int]) -> tuple[int, int, int]:
    """The phases' total, val_interval and checkpoint interval in iterations."""
    loader = cfg.train_dataloader
    assert loader.batch_sampler.type == 'LanguageBatchSampler'
    batches = range(batches_per_epoch(captions, loader.batch_size))
    phases = sum(phase['epochs'] * len(batches) for phase in cfg.train_cfg.phases)
    return (phases, resolve_count('val_interval', cfg.train_cfg.val_interval, batches),
            resolve_count('interval', cfg.default_hooks.checkpoint.interval, batches))


def test_the_table_holds_shipped_configs():
    assert {config for config, _ in OLD_NUMBERS} <= set(LEAVES)


@pytest.mark.parametrize('config', LEAVES)
def test_every_shipped_config_resolves_to_the_iterations_it_stated(config):
    """A config in epochs gives its old iterations at its own batch size; the others state
    iterations, none in epochs."""
    cfg = Config.fromfile(REPO / 'configs' / config)
    rows = [(ablations, old) for (name, ablations), old in OLD_NUMBERS.items() if name == config]
    if not rows:
        counts = [(cfg.get('train_cfg') or {}).get('val_interval'),
                  cfg.default_hooks.checkpoint.interval]
        assert not any(is_epochs(count) for count in counts)
    for ablations, (captions, val_interval, checkpoint) in rows:
        cfg = apply_ablations(cfg, ablations)
        assert schedule(cfg, captions)[1:] == (val_interval, checkpoint)


@pytest.mark.parametrize('config, captions, batch_size, expected', [
    # Flickr30K's 145,000 captions: 4,531 batches at 32, 1,132 at 128 (not 2,265).
    ('cdds/cdds_vit-bert-b16_flickr30k.py', [FLICKR30K], 32, (25 * 4531, 4531, 4531)),
    ('cdds/cdds_vit-bert-b16_flickr30k.py', [FLICKR30K], 128, (25 * 1132, 1132, 1132)),
    # MSCOCO's 566,747: 17,710 at 32 (a quarter: 4,427.5), 4,427 at 128 (1,106.75).
    ('cdds/cdds_clip-vit-b32_mscoco.py', [MSCOCO], 32, (25 * 17710, 17710, 4427)),
    ('cdds/cdds_clip-vit-b32_mscoco.py', [MSCOCO], 128, (25 * 4427, 4427, 1106)),
    # 3 x 29,000: each language's full batches, 3 x 906 at 32 and 3 x 226 at 128 (87,000 // 128
    # would be 679).
    ('cdds/cdds_vit-mbert-b16_multi30k-mt.py', [MULTI30K] * 3, 32, (25 * 2718, 2718, 2718)),
    ('cdds/cdds_vit-mbert-b16_multi30k-mt.py', [MULTI30K] * 3, 128, (25 * 678, 678, 678)),
])
def test_a_batch_size_on_the_command_line_keeps_the_schedule_in_epochs(
        tmp_path: Path, config, captions, batch_size, expected):
    args = train_tool.parse_args([str(REPO / 'configs' / config), '--work-dir', str(tmp_path),
                                  '--cfg-options', f'train_dataloader.batch_size={batch_size}'])
    assert schedule(train_tool.build_config(args), captions) == expected


def test_the_authors_multi30k_script_validates_every_4_iterations_at_any_batch_size(
        tmp_path: Path):
    """run_choose_pet_task1.py validates at every multiple of --eval_steps (4), and nowhere
    else: not once an epoch, as the overlay did."""
    config = REPO / 'configs' / 'pectvlm' / 'lora-r8_mclip-xlmr-l14_multi30k-full_de.py'
    args = train_tool.parse_args([str(config), '--work-dir', str(tmp_path), '--ablation',
                                  'pectvlm/authors-script-multi30k', '--cfg-options',
                                  'train_dataloader.batch_size=8'])
    assert schedule(train_tool.build_config(args), [MULTI30K]) == (50 * 3625, 4, 1000)
