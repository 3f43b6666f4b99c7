"""tools/cache_features.py builds, checks and rebuilds the caches a config names."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from tests.conftest import (
    HELD_AT_THE_FIRST_MEDIA,
    REPO,
    terminated_while_held,
    tiny_retriever_cfg,
)
from tests.engine.test_distributed import free_port
from xmr.engine.feature_cache import StaleFeatureCacheError

sys.path.insert(0, str(REPO / 'tools'))
import cache_features  # noqa: E402


def write_config(tmp_path, seed: int = 0, batch_size: int = 64):
    pairs = dict(type='SyntheticPairDataset', num_scenes=3, languages=['de'], image_size=32)
    gallery = dict(type='SyntheticRetrievalDataset', num_scenes=3, languages=['en', 'de'],
                   image_size=32, split='val')
    cached = lambda name, dataset: dict(type='CachedFeatureDataset',  # noqa: E731
                                        cache_dir=str(tmp_path / name), dataset=dataset,
                                        batch_size=batch_size)
    cfg = Config(dict(
        model=tiny_retriever_cfg(),
        train_dataloader=dict(dataset=cached('pairs', pairs)),
        train_cfg=dict(type='PhasedTrainLoop', phases=[
            dict(name='cross_lingual', iters=1, lr=1.0, trainable=['language_branch'],
                 loss_weights=dict(cl=1.0), dataloader=dict(dataset=cached('pairs', pairs)))]),
        val_dataloader=[dict(dataset=cached('gallery', gallery)), dict(dataset=gallery)],
        randomness=dict(seed=seed)))
    path = tmp_path / 'cfg.py'
    cfg.dump(str(path))
    return path


def test_builds_each_named_cache_once_then_checks_it(tmp_path):
    config = write_config(tmp_path)
    done = cache_features.main([str(config), '--device', 'cpu'])
    assert [(d['where'], d['items']) for d in done] == [('train_dataloader', 3),
                                                         ('val_dataloader[0]', 3)]
    assert done[0]['source'] == 3 and done[1]['media'] == 3 and 'source' not in done[1]
    built = json.loads((tmp_path / 'pairs' / 'meta.json').read_text())
    torch.manual_seed(1)  # the config's seed decides the random towers, not the caller's
    cache_features.main([str(config), '--device', 'cpu'])  # same weights: checked, kept
    assert json.loads((tmp_path / 'pairs' / 'meta.json').read_text()) == built
    config = write_config(tmp_path, seed=1)
    with pytest.raises(StaleFeatureCacheError, match='backbone: cache has'):
        cache_features.main([str(config), '--device', 'cpu'])
    cache_features.main([str(config), '--device', 'cpu', '--overwrite'])
    assert json.loads((tmp_path / 'pairs' / 'meta.json').read_text())['key']['backbone'] != \
        built['key']['backbone']


def _tool_rank(rank: int, port: int, config: str, out_dir: str) -> None:
    """Rank ``rank`` of 2 as torchrun starts it: the tool builds the caches, then rebuilds them
    (``--overwrite``), recording the captions and media each call of a tower encodes."""
    from xmr.models.retrievers.cross_lingual import CrossLingualRetriever

    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE='2', LOCAL_RANK=str(rank))
    torch.cuda.is_available = lambda: False  # gloo on CPUs, on a machine with GPUs too
    encoded: list[list] = []
    for kind in ('source', 'media'):
        encode = getattr(CrossLingualRetriever, f'encode_{kind}')

        def counted(self, inputs, kind=kind, encode=encode):
            features = encode(self, inputs)
            encoded[-1].append([kind, len(features)])
            return features

        setattr(CrossLingualRetriever, f'encode_{kind}', counted)
    for extra in ([], ['--overwrite']):
        encoded.append([])
        cache_features.main([config, '--device', 'cpu', '--launcher', 'pytorch', *extra])
    Path(out_dir, f'rank{rank}.json').write_text(json.dumps(encoded), encoding='utf-8')


def test_torchrun_s_processes_build_each_its_share_byte_for_byte_one_process_s(tmp_path):
    """The tool took no --launcher (torchrun's processes failed at its arguments), and its
    processes started without one each built every cache alone, into the same folders."""
    sharded, single = tmp_path / 'sharded', tmp_path / 'single'
    for folder in (sharded, single):
        folder.mkdir()
    config = write_config(sharded, batch_size=2)
    torch.multiprocessing.start_processes(
        _tool_rank, args=(free_port(), str(config), str(tmp_path)), nprocs=2, join=True,
        start_method='fork')
    cache_features.main([str(write_config(single, batch_size=2)), '--device', 'cpu'])
    # 3 captions and 3 media a cache in batches of 2: rank 0 the first batch, rank 1 the second;
    # the same again for --overwrite.
    shares = [json.loads((tmp_path / f'rank{rank}.json').read_text()) for rank in (0, 1)]
    assert shares == [[[['source', 2], ['media', 2], ['media', 2]]] * 2,
                      [[['source', 1], ['media', 1], ['media', 1]]] * 2]
    for name in ('pairs', 'gallery'):
        files = sorted(path.name for path in (single / name).iterdir())
        assert files == sorted(path.name for path in (sharded / name).iterdir())
        for file in set(files) - {'meta.json'}:
            assert (single / name / file).read_bytes() == (sharded / name / file).read_bytes()
        metas = [json.loads((folder / name / 'meta.json').read_text())
                 for folder in (single, sharded)]
        assert [(meta['key'], meta['counts']) for meta in metas] == [
            (metas[0]['key'], metas[0]['counts'])] * 2


def test_a_cache_built_ahead_of_training_is_read_by_the_runners_model(tmp_path):
    """Random towers (the demo's) are built from the config's seed, as MMEngine's runner seeds
    before it builds the model: a cache built ahead of time is read by the run, not found
    stale and rebuilt (an explicit CachedFeatureDataset would refuse it)."""
    from mmengine.runner import Runner

    from xmr.registry import DATASETS

    config = write_config(tmp_path)
    torch.manual_seed(123)
    cache_features.main([str(config), '--device', 'cpu'])
    cfg = Config.fromfile(str(config))
    cfg.merge_from_dict(dict(work_dir=str(tmp_path / 'run'), default_scope='xmr',
                             val_dataloader=None,
                             optim_wrapper=dict(optimizer=dict(type='AdamW', lr=1e-3))))
    torch.manual_seed(456)
    runner = Runner.from_cfg(cfg)
    DATASETS.build(cfg.train_dataloader.dataset).prepare(runner.model)  # raises if stale


def test_a_config_without_caches_is_refused(tmp_path):
    path = tmp_path / 'plain.py'
    path.write_text("model = dict(type='CrossLingualRetriever')\n")
    with pytest.raises(ValueError, match='uses no CachedFeatureDataset'):
        cache_features.main([str(path)])


def test_a_phase_naming_its_dataloader_by_key_has_its_cache_built(tmp_path):
    texts = dict(type='CachedFeatureDataset', cache_dir=str(tmp_path / 'texts'),
                 dataset=dict(type='SyntheticPairDataset', num_scenes=2, languages=['fr'],
                              image_size=32))
    phase = dict(name='cross_lingual', iters=1, lr=1.0, trainable=['language_branch'],
                 loss_weights=dict(cl=1.0), dataloader='text_train_dataloader')
    cfg = Config(dict(model=tiny_retriever_cfg(), text_train_dataloader=dict(dataset=texts),
                      train_cfg=dict(type='PhasedTrainLoop', phases=[phase])))
    found = list(cache_features.cached_dataset_cfgs(cfg))
    assert [(where, dataset['cache_dir']) for where, dataset in found] == [
        ('train_cfg.phases[cross_lingual]', str(tmp_path / 'texts'))]
    phase['dataloader'] = 'text_dataloader'
    with pytest.raises(ValueError, match="dataloader 'text_dataloader' is no dataloader of the "
                                         r"config \(did you mean 'text_train_dataloader'\?\); "
                                         r"the config has \['text_train_dataloader'\]"):
        list(cache_features.cached_dataset_cfgs(Config(dict(
            text_train_dataloader=dict(dataset=texts),
            train_cfg=dict(type='PhasedTrainLoop', phases=[phase])))))


def test_phases_with_cache_features_are_built_under_the_work_dir(tmp_path):
    pairs = dict(type='SyntheticPairDataset', num_scenes=2, languages=['fr'], image_size=32)
    phases = [dict(name='cross_lingual', iters=1, lr=1.0, trainable=['language_branch'],
                   loss_weights=dict(cl=1.0), cache_features=dict(dtype='float16')),
              dict(name='cross_modal', iters=1, lr=1.0, trainable=['language_branch'],
                   loss_weights=dict(cm=1.0), cache_features=True,
                   dataloader=dict(dataset=dict(pairs, num_scenes=3)))]
    path = tmp_path / 'cfg.py'
    Config(dict(model=tiny_retriever_cfg(), train_dataloader=dict(dataset=pairs),
                train_cfg=dict(type='PhasedTrainLoop', phases=phases))).dump(str(path))
    torch.manual_seed(0)
    done = cache_features.main([str(path), '--device', 'cpu', '--work-dir',
                                str(tmp_path / 'run')])
    assert [(d['where'], d['cache_dir'], d['items']) for d in done] == [
        ('train_cfg.phases[cross_lingual]', str(tmp_path / 'run/feature_cache/train_dataloader'),
         2),
        ('train_cfg.phases[cross_modal]', str(tmp_path / 'run/feature_cache/cross_modal'), 3)]
    meta = json.loads((tmp_path / 'run/feature_cache/train_dataloader/meta.json').read_text())
    assert meta['key']['dtype'] == 'float16'


def test_a_checkpoint_with_numpy_logs_loads_through_the_safe_reader(tmp_path):
    """The backbone of the checkpoint (seed 1) is what the cache is keyed by, not the config's
    (seed 0); MMEngine's numpy logs in the file pass the weights-only load."""
    import numpy as np

    from xmr.registry import MODELS

    torch.manual_seed(1)
    trained = MODELS.build(tiny_retriever_cfg())
    torch.save({'state_dict': {f'module.{k}': v for k, v in trained.state_dict().items()},
                'message_hub': {'log': np.array([0.5]), 'step': np.int64(3)}},
               tmp_path / 'trained.pth')
    cache_features.main([str(write_config(tmp_path, seed=1)), '--device', 'cpu'])
    from_seed_1 = json.loads((tmp_path / 'pairs' / 'meta.json').read_text())['key']
    config = write_config(tmp_path)
    cache_features.main([str(config), '--device', 'cpu', '--checkpoint',
                         str(tmp_path / 'trained.pth')])  # checked against the seed-1 cache
    assert json.loads((tmp_path / 'pairs' / 'meta.json').read_text())['key'] == from_seed_1


def test_a_checkpoint_without_the_towers_weights_is_refused(tmp_path):
    """Loaded leniently, a checkpoint holding none of the towers (weights under another prefix,
    a language module) loaded nothing, and the cache was built from the config's towers."""
    from xmr.registry import MODELS

    state = MODELS.build(tiny_retriever_cfg()).state_dict()
    torch.save({'state_dict': {f'model.{key}': value for key, value in state.items()}},
               tmp_path / 'prefixed.pth')
    with pytest.raises(ValueError, match=r'prefixed\.pth \(--checkpoint\): its towers do not fit '
                                         r'those of the config: \d+ keys missing from the '
                                         r'checkpoint: backbone\.'):
        cache_features.main([str(write_config(tmp_path)), '--device', 'cpu', '--checkpoint',
                             str(tmp_path / 'prefixed.pth')])
    assert not (tmp_path / 'pairs').exists()


def test_a_checkpoint_of_other_towers_is_refused_naming_the_keys(tmp_path):
    """Loaded leniently, tower keys the config lacks were dropped (a deeper image tower cached
    as the config's shallower one), and other shapes failed as a raw RuntimeError."""
    from xmr.registry import MODELS

    state = MODELS.build(tiny_retriever_cfg()).state_dict()
    extra = dict(state, **{'backbone.clip.visual.extra': torch.zeros(2)})
    torch.save({'state_dict': extra}, tmp_path / 'extra.pth')
    with pytest.raises(ValueError, match=r'extra\.pth \(--checkpoint\): .*1 keys the model does '
                                         r'not have: backbone\.clip\.visual\.extra'):
        cache_features.main([str(write_config(tmp_path)), '--device', 'cpu', '--checkpoint',
                             str(tmp_path / 'extra.pth')])
    key = next(k for k in state if k.startswith('backbone.') and state[k].ndim == 2)
    reshaped = dict(state, **{key: torch.zeros(3, 3)})
    torch.save({'state_dict': reshaped}, tmp_path / 'reshaped.pth')
    with pytest.raises(ValueError, match=rf'1 keys of other shapes: {re.escape(key)} '
                                         r'\(checkpoint \[3, 3\]'):
        cache_features.main([str(write_config(tmp_path)), '--device', 'cpu', '--checkpoint',
                             str(tmp_path / 'reshaped.pth')])
    assert not (tmp_path / 'pairs').exists()


def test_a_cache_decodes_media_in_as_many_workers_as_its_loader_has_unless_told(tmp_path):
    pairs = dict(type='SyntheticPairDataset', num_scenes=2, languages=['fr'], image_size=32)
    own = dict(type='CachedFeatureDataset', cache_dir=str(tmp_path / 'own'), dataset=pairs,
               num_workers=1)
    phases = [dict(name='cross_lingual', iters=1, lr=1.0, trainable=['language_branch'],
                   loss_weights=dict(cl=1.0), cache_features=True),
              dict(name='cross_modal', iters=1, lr=1.0, trainable=['language_branch'],
                   loss_weights=dict(cm=1.0), dataloader=dict(dataset=own, num_workers=4))]
    cfg = Config(dict(model=tiny_retriever_cfg(), work_dir=str(tmp_path / 'run'),
                      train_dataloader=dict(dataset=pairs, num_workers=3),
                      train_cfg=dict(type='PhasedTrainLoop', phases=phases)))
    assert [(where, dataset['num_workers'])
            for where, dataset in cache_features.cached_dataset_cfgs(cfg)] == [
        ('train_cfg.phases[cross_lingual]', 3), ('train_cfg.phases[cross_modal]', 1)]


class BuildStarted(Exception):
    """Raised in place of the process's set-up, which comes before the model is built."""


@pytest.mark.parametrize('options, message', [
    (['--checkpoint', 'no_such.pth'], 'error: no_such.pth (--checkpoint): no such file: give a '
     '.pth written by tools/train.py'),
    (['--checkpoint', '.'], 'error: . (--checkpoint): is a folder, not a file: give a .pth '
     'written by tools/train.py (a relative path from the folder you run in), or leave '
     '--checkpoint out'),
    (['--device', 'gpu'], 'error: --device gpu: is no torch device: give cpu, cuda or cuda:N'),
    (['--device', 'cuda:64'], 'error: --device cuda:64: this machine has '),
    (['--batch-size', '0'], "argument --batch-size: '0' is no whole number >= 1"),
    (['--num-workers', 'two'], "argument --num-workers: 'two' is no whole number >= 0"),
    (['--work-dir', __file__], f'error: {__file__} (--work-dir): is a file, not a folder: give a '
     'folder (made if missing) for the caches'),
])
def test_a_bad_option_is_named_before_the_model_is_built(tmp_path, monkeypatch, capsys, options,
                                                         message):
    """A missing --checkpoint and a device without CUDA ('Found no NVIDIA driver', unexpected)
    were met once the model was built; --batch-size 0 divided by zero as the cache began, in
    the work dir it had made."""
    import xmr.engine.process
    from xmr.utils.cli import EXIT_ERROR, run_tool

    def started(*args, **kwargs):
        raise BuildStarted

    monkeypatch.setattr(xmr.engine.process, 'prepare_process', started)
    with pytest.raises(SystemExit) as exit_info:
        run_tool(cache_features.main, [str(write_config(tmp_path)), *options])
    assert exit_info.value.code == EXIT_ERROR
    assert message in capsys.readouterr().err


@pytest.mark.parametrize('overwrite', [[], ['--overwrite']])
def test_a_cache_dir_holding_other_files_is_refused_before_the_model_is_built(
        tmp_path, monkeypatch, capsys, overwrite):
    """The build refused it once the model was built (tens of seconds in, minutes for a large
    model): the data's own folder given as cache_dir."""
    import xmr.engine.process
    from xmr.utils.cli import EXIT_ERROR, run_tool

    def started(*args, **kwargs):
        raise BuildStarted

    config = write_config(tmp_path)
    (tmp_path / 'gallery').mkdir()
    (tmp_path / 'gallery' / 'annotation.json').write_text('{}')
    monkeypatch.setattr(xmr.engine.process, 'prepare_process', started)
    with pytest.raises(SystemExit) as exit_info:
        run_tool(cache_features.main, [str(config), *overwrite])
    assert exit_info.value.code == EXIT_ERROR
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'gallery'} exists and holds no feature cache (no meta.json): give "
        'the cache a new or empty folder (cache_dir of val_dataloader[0])\n')
    assert [path.name for path in (tmp_path / 'gallery').iterdir()] == ['annotation.json']


def test_one_cache_dir_named_for_two_datasets_is_refused_before_the_model_is_built(
        tmp_path, monkeypatch):
    """The tool built the first loader's cache and skipped the second's as built: the run
    found it stale at the second's first use (a test gallery, once the training ended). Two
    loaders of one dataset share their cache, whatever their build options."""
    import xmr.engine.process

    def started(*args, **kwargs):
        raise BuildStarted

    monkeypatch.setattr(xmr.engine.process, 'prepare_process', started)
    cfg = Config.fromfile(write_config(tmp_path))
    gallery = cfg.val_dataloader[0]
    cfg.test_dataloader = dict(dataset=dict(gallery.dataset, batch_size=1, num_workers=0))
    cfg.dump(str(tmp_path / 'shared.py'))
    with pytest.raises(BuildStarted):
        cache_features.main([str(tmp_path / 'shared.py'), '--device', 'cpu'])
    cfg.test_dataloader = dict(dataset=dict(
        gallery.dataset, dtype='float16', dataset=dict(gallery.dataset.dataset, split='test')))
    cfg.dump(str(tmp_path / 'other.py'))
    with pytest.raises(ValueError, match=re.escape(
            f"cache_dir {tmp_path / 'gallery'} is named by val_dataloader[0] and "
            'test_dataloader, whose CachedFeatureDatasets differ in dataset, dtype: one folder '
            'holds one cache; give each its own cache_dir')):
        cache_features.main([str(tmp_path / 'other.py'), '--device', 'cpu'])


def test_sigterm_ends_a_build_as_ctrl_c_does_naming_the_rows_it_kept(tmp_path):
    """SIGTERM (a scheduler's stop) killed the build silently (exit -15): nothing said where
    the rows encoded so far were kept, nor that the next build goes on from them."""
    config = write_config(tmp_path)
    said = terminated_while_held(HELD_AT_THE_FIRST_MEDIA, REPO / 'tools' / 'cache_features.py',
                                 [str(config), '--device', 'cpu'], tmp_path / 'ready')
    kept = [path.name for path in tmp_path.glob('pairs.partial-*')]
    assert len(kept) == 1, said
    assert (f"{tmp_path / 'pairs'}: stopped; the rows encoded so far are kept in {kept[0]}, "
            'and the next build of this cache') in said
    assert not (tmp_path / 'pairs').exists()
