"""Build the frozen-tower feature caches a config uses, before training.

    python tools/cache_features.py CONFIG [--checkpoint CKPT] [--overwrite] [--device cuda]
        [--work-dir DIR]

Every dataset of the config (``train_dataloader``, the phases' own dataloaders, validation and
test dataloaders, lists of them included) of type ``CachedFeatureDataset``, and the dataset of
every phase with ``cache_features`` (cached under the run's work directory), is built and its
cache computed with the config's model: missing caches are built, existing ones are checked (a
stale one, of other towers or data, is refused, or rebuilt where the dataset says
``rebuild_if_stale=True``, as a phase's ``cache_features`` does), ``--overwrite`` rebuilds
them. ``--checkpoint`` loads weights first, e.g. towers fine-tuned in the CL-FT setting's
``source_finetune`` phase, whose features differ from the pretrained ones. Training builds
missing caches itself on first use; this tool does it ahead of time, sparing the training job's
GPUs the build. Media are decoded in as many DataLoader workers as each cache's loader has (or
its own ``num_workers``, or ``--num-workers``). A build stopped (Ctrl-C, a scheduler's SIGTERM
or kill) keeps the rows it recorded, every 30 s; stopped by Ctrl-C or SIGTERM it names the
folder it keeps them in and exits after one line, with 143 for SIGTERM. The same command run
again goes on from them (``xmr.engine.feature_cache.progress``; on the demo, stopped after its
captions, the build ran 12.1 s against 23.0 s whole, into the same files byte for byte).

A ``cache_dir`` holding other files than a feature cache (no ``meta.json``: the data's own
folder) is refused, naming it and the loader it belongs to, before the model is built, as is
one ``cache_dir`` named by two loaders for caches of other content (dataset, dtype, kinds);
``--overwrite`` replaces a feature cache alone.

Launched on several processes (``--launcher pytorch`` under torchrun, as
``tools/dist_train.sh`` launches training, or ``slurm``), every process encodes its share of
each cache's rows as training's ranks do, and the caches are byte for byte the ones a single
process builds (docs/distributed.md)::

    torchrun --nproc_per_node=4 tools/cache_features.py CONFIG --launcher pytorch
"""
from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator
from typing import Any

from mmengine.config import Config

from xmr.run_config import (
    DEFAULT_WORK_DIR,
    add_config_arguments,
    add_launcher_arguments,
    load_run_config,
)
from xmr.utils.cli import given_device, given_folder, int_at_least, run_tool

LOADER_KEYS = ('train_dataloader', 'val_dataloader', 'test_dataloader')


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Build the feature caches of a config')
    parser.add_argument('config', help='config file')
    parser.add_argument('--checkpoint', help='weights to load into the model first')
    parser.add_argument('--overwrite', action='store_true',
                        help='rebuild existing caches (a folder holding no feature cache, no '
                        'meta.json, is refused, with or without it)')
    parser.add_argument('--work-dir', help="the run's work directory, where phases with "
                        'cache_features keep their caches (default: '
                        f'{DEFAULT_WORK_DIR}, as tools/train.py)')
    parser.add_argument('--device', default=None,
                        help="device of the towers (default: 'cuda' when available, else 'cpu')")
    parser.add_argument('--batch-size', type=int_at_least(1),
                        help="override each cache's batch_size")
    parser.add_argument('--num-workers', type=int_at_least(0),
                        help="override each cache's num_workers")
    add_config_arguments(parser)
    add_launcher_arguments(parser, 'building (each process its share of the rows)')
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def cached_dataset_cfgs(cfg: Config) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, dataset config)`` of every ``CachedFeatureDataset`` the config names,
    phases with ``cache_features`` included (their caches go under ``cfg.work_dir``); a
    ``num_workers`` the dataset leaves unset is its loader's, as in training."""
    from xmr.engine.loops import phase_loader_name, resolve_dataloader_key, with_feature_cache
    from xmr.engine.phases import Phase

    loaders: list[tuple[str, Any]] = [(key, cfg.get(key)) for key in LOADER_KEYS]
    for phase_cfg in (cfg.get('train_cfg') or {}).get('phases', []):
        phase = Phase(**phase_cfg)
        loader = phase.dataloader
        if isinstance(loader, str):
            # Named by its config key: the same loader as LOADER_KEYS or another top-level one.
            loader = resolve_dataloader_key(cfg, loader, phase.name)
        if phase.cache_features:
            loader = with_feature_cache(loader or cfg.train_dataloader, phase, cfg.work_dir,
                                        phase_loader_name(phase))
        loaders.append((f'train_cfg.phases[{phase.name}]', loader))
    for where, loader in loaders:
        for index, one in enumerate(loader if isinstance(loader, (list, tuple)) else [loader]):
            dataset = (one or {}).get('dataset')
            if isinstance(dataset, dict) and dataset.get('type') == 'CachedFeatureDataset':
                if dataset.get('num_workers') is None:
                    dataset = dict(dataset, num_workers=one.get('num_workers', 0))
                yield (f'{where}[{index}]' if isinstance(loader, (list, tuple)) else where,
                       dataset)


#: The options of a ``CachedFeatureDataset`` that decide what its cache holds (the others
#: decide how it is built or when).
CONTENT_OPTIONS = ('dataset', 'dtype', 'features', 'media_identity', 'cache_media_when_random')


def refuse_shared_cache_dirs(found: list[tuple[str, dict[str, Any]]]) -> None:
    """Refuse one ``cache_dir`` named for caches of different content (another dataset, dtype
    or kinds): the tool built the first and skipped the others as built, and the run refused
    the cache as stale at the other's first use (a test gallery, after the training).

    Raises:
        ValueError: naming the folder, both loaders, the options that differ and the fix.
    """
    first: dict[str, tuple[str, dict[str, Any]]] = {}
    for where, dataset_cfg in found:
        content = {option: dataset_cfg.get(option) for option in CONTENT_OPTIONS}
        where_first, content_first = first.setdefault(str(dataset_cfg['cache_dir']),
                                                      (where, content))
        differing = [option for option in CONTENT_OPTIONS
                     if content[option] != content_first[option]]
        if differing:
            raise ValueError(
                f'cache_dir {dataset_cfg["cache_dir"]} is named by {where_first} and {where}, '
                f'whose CachedFeatureDatasets differ in {", ".join(differing)}: one folder holds '
                'one cache; give each its own cache_dir')


def check_checkpoint_option(checkpoint: str | None) -> None:
    """``--checkpoint``, checked before the model is built (tens of seconds in).

    Raises:
        UserError: missing, a folder or unreadable, naming it and the fix.
        CheckpointReadError: an empty, foreign, truncated or damaged file.
    """
    from xmr.engine.checkpoint import CHECKPOINT_FIX, check_given_checkpoint

    if checkpoint is None:
        return
    check_given_checkpoint(checkpoint, '--checkpoint', f'{CHECKPOINT_FIX}, or leave '
                           '--checkpoint out for the weights the config builds')


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    from mmengine.dist import is_main_process
    from mmengine.runner import set_random_seed

    from xmr.apis import read_checkpoint
    from xmr.engine.checkpoint import state_dict_mismatches
    from xmr.engine.feature_cache import refuse_other_folder
    from xmr.engine.process import prepare_process
    from xmr.registry import DATASETS, MODELS

    cfg = load_run_config(args.config, ablations=args.ablation, cfg_options=args.cfg_options,
                          work_dir=args.work_dir)
    check_checkpoint_option(args.checkpoint)
    given_folder(cfg.work_dir, '--work-dir', 'give a folder (made if missing) for the caches')
    device = given_device(args.device)
    found = list(cached_dataset_cfgs(cfg))
    if not found:
        raise ValueError(f'{args.config} uses no CachedFeatureDataset; wrap a dataset in one '
                         '(docs/benchmarks.md, "Feature cache")')
    # A cache_dir holding other files is refused by the build, once the model is built (tens
    # of seconds, minutes for a large one): here, before it.
    for where, dataset_cfg in found:
        refuse_other_folder(dataset_cfg['cache_dir'], f'cache_dir of {where}')
    refuse_shared_cache_dirs(found)
    prepare_process(cfg, args.launcher, start_group=True)
    # Seeded as the runner seeds before it builds the model, so that towers built from random
    # weights (the demo's) are those training builds, and its phases read the caches.
    randomness = cfg.get('randomness') or {}
    if randomness.get('seed') is not None:
        set_random_seed(randomness['seed'], deterministic=randomness.get('deterministic', False))
    model = MODELS.build(cfg.model).to(device)
    if args.checkpoint:
        loaded = read_checkpoint(args.checkpoint)
        state = loaded.get('state_dict', loaded)
        # The towers' weights alone are what the cache needs (another branch's languages may
        # differ), strictly: DDP prefixes dropped, and every tower key and shape the config's.
        towers = {key: value for key, value in ((re.sub(r'^module\.', '', key), value)
                                                for key, value in state.items())
                  if key.startswith('backbone.')}
        mismatches = state_dict_mismatches(
            {k: v for k, v in model.state_dict().items() if k.startswith('backbone.')}, towers)
        if mismatches:
            # The cache would hold features of other towers than the checkpoint's.
            raise ValueError(f'checkpoint {args.checkpoint} (--checkpoint): its towers do not '
                             'fit those of the config: ' + '; '.join(mismatches)
                             + "; give a checkpoint tools/train.py wrote for this config's model")
        model.load_state_dict(towers, strict=False)
    done: dict[str, dict[str, Any]] = {}
    for where, dataset_cfg in found:
        dataset_cfg = dict(dataset_cfg)
        for key, value in (('batch_size', args.batch_size), ('num_workers', args.num_workers)):
            if value is not None:
                dataset_cfg[key] = value
        cache_dir = str(dataset_cfg['cache_dir'])
        if cache_dir in done:
            continue
        dataset = DATASETS.build(dataset_cfg)
        dataset.prepare(model, rebuild=args.overwrite)
        meta = dataset.cache.meta
        done[cache_dir] = dict(where=where, cache_dir=cache_dir, **meta['counts'],
                               seconds=meta['seconds'])
        if is_main_process():
            print(f'{where}: {cache_dir} {meta["counts"]} ({meta["seconds"]} s to build)')
    return list(done.values())


if __name__ == '__main__':
    run_tool(main)
