"""DDP with phased freezing, and distributed runs on CPU machines.

PyTorch's ``DistributedDataParallel`` decides once, when it wraps the model, which parameters it
synchronises: those that require grad at that moment. MMEngine's runner wraps the model when it
is built, before any phase has set ``requires_grad``; a parameter that a later phase unfreezes
(the towers in ``source_finetune``) would then train on each rank's own gradients and drift
apart silently, and every frozen parameter kept in the buckets would be all-reduced as zeros
each step. :func:`rewrap_for_phase` therefore wraps the model afresh at the start of every
phase, after the phase has frozen and unfrozen its parameters, so the wrapper holds exactly the
parameters the phase trains. ``find_unused_parameters`` defaults to ``True``: a batch without
a language leaves that language's adapters without a gradient.

MMEngine's ``pytorch`` launcher calls ``torch.cuda.set_device`` even for gloo, and its default
wrapper passes a GPU index as ``device_ids``; :func:`setup_cpu_distributed` starts the gloo
process group itself and configures a CPU wrapper, so ``tools/dist_train.sh`` also runs on CPUs.
"""
from __future__ import annotations

import gc
import inspect
import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from mmengine.dist import init_dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler

from xmr.engine.optim import sparse_parameter_names
from xmr.engine.wrappers import unwrap_model
from xmr.registry import MODEL_WRAPPERS
from xmr.utils.cli import UserError

__all__ = ['RANK_VARIABLES', 'launcher_rank', 'padded_repeats', 'phase_wrapper_cfg',
           'rewrap_for_phase', 'setup_cpu_distributed', 'shared_seed', 'start_distributed',
           'unpadded_shard_size']


def phase_wrapper_cfg(cfg: dict | None, on_cuda: bool) -> dict[str, Any]:
    """The model-wrapper config a phase is wrapped with.

    Args:
        cfg: the run's ``model_wrapper_cfg`` (or ``None``); its keys win.
        on_cuda: the model lives on a GPU (``device_ids`` = the local rank) or not (``None``).
    """
    wrapper = dict(type='MMDistributedDataParallel', find_unused_parameters=True,
                   device_ids=[int(os.environ.get('LOCAL_RANK', 0))] if on_cuda else None)
    # xmr's buffers (normalisation statistics, fixed temperatures) never change: sync them once
    # at wrap time, not before every forward. Newer torch renamed the option; a config that
    # sets it by either name decides (given both, DDP ignores the old name's value).
    cfg = dict(cfg or {})
    if not {'forward_sync_buffers', 'broadcast_buffers'} & cfg.keys():
        parameters = inspect.signature(DistributedDataParallel.__init__).parameters
        wrapper['forward_sync_buffers' if 'forward_sync_buffers' in parameters
                else 'broadcast_buffers'] = False
    wrapper.update(cfg)
    return wrapper


def rewrap_for_phase(runner) -> None:
    """Wrap ``runner.model`` afresh over the parameters the current phase trains.

    Does nothing outside distributed runs. Call it after the phase has set ``requires_grad``.

    Raises:
        ValueError: when a trained embedding has sparse gradients on a backend without sparse
            all-reduce (NCCL): use the dense embedding update for multi-GPU runs.
    """
    if not getattr(runner, 'distributed', False):
        return
    module = unwrap_model(runner.model)
    trained_sparse = [name for name, p in module.named_parameters()
                      if name in sparse_parameter_names(module) and p.requires_grad]
    backend = dist.get_backend()
    if trained_sparse and backend != 'gloo':
        raise ValueError(f'{trained_sparse[0]} has sparse gradients, which the {backend} '
                         'backend cannot all-reduce; build the embedding with sparse=False '
                         'for multi-GPU runs')
    on_cuda = next(module.parameters()).is_cuda
    runner.model = None
    gc.collect()  # the previous wrapper's reducer must release its gradient hooks first
    runner.model = MODEL_WRAPPERS.build(
        phase_wrapper_cfg(runner.cfg.get('model_wrapper_cfg'), on_cuda),
        default_args=dict(module=module))


#: Where each launcher tells a process its global rank before MMEngine sets ``RANK`` from it.
RANK_VARIABLES = {'pytorch': 'RANK', 'slurm': 'SLURM_PROCID', 'mpi': 'OMPI_COMM_WORLD_RANK'}
#: The commands that start processes with each launcher's variables set.
LAUNCH_COMMANDS = {
    'pytorch': 'tools/dist_train.sh CONFIG NUM_PROCESSES (torchrun; tools/dist_test.sh to test)',
    'slurm': 'tools/slurm_train.sh PARTITION JOB_NAME CONFIG (srun; tools/slurm_test.sh to test)',
    'mpi': 'mpirun -np N python tools/train.py CONFIG --launcher mpi (tools/test.py CONFIG '
           'CHECKPOINT to test)'}


def launcher_rank(launcher: str) -> int:
    """This process's global rank as its launcher tells it, before any process group exists
    (0 without a launcher): srun and mpirun do not set ``RANK``, which MMEngine sets only when
    the runner starts the group."""
    return int(os.environ.get(RANK_VARIABLES.get(launcher, 'RANK'), '0'))


def setup_cpu_distributed(cfg: Any, launcher: str) -> None:
    """Start a gloo process group for a ``pytorch``-launched run on a machine without CUDA,
    with the config's ``env_cfg.dist_cfg.timeout`` (seconds) as MMEngine would give it.

    With CUDA, or without a launcher, nothing changes (MMEngine starts NCCL as configured).

    Raises:
        UserError: ``launcher`` names a launcher that did not start this process (its rank
            variable is unset), with the commands that do; or it is ``'none'`` where torchrun
            started this process as one of several (``WORLD_SIZE``); or the configured
            timeout is not a positive number of seconds.
    """
    world = os.environ.get('WORLD_SIZE', '1')
    if launcher == 'none' and world.isdigit() and int(world) > 1:
        # Each process would run alone, all in one work dir: the second refused by the
        # first's lock as 'another training run', or a test writing its result twice.
        raise UserError('--launcher none',
                        f'torchrun started this process as rank {os.environ.get("RANK", "?")} '
                        f'of {world}, and without a launcher each process runs alone',
                        'add --launcher pytorch (tools/dist_train.sh CONFIG NUM_PROCESSES and '
                        'tools/dist_test.sh pass it), or start one process without torchrun')
    if launcher != 'none' and RANK_VARIABLES.get(launcher, 'RANK') not in os.environ:
        raise UserError(f'--launcher {launcher}',
                        f'{RANK_VARIABLES.get(launcher, "RANK")} is not set: no {launcher} '
                        'launcher started this process',
                        f'start it with {LAUNCH_COMMANDS.get(launcher, LAUNCH_COMMANDS["pytorch"])}'
                        ', or drop --launcher for one process')
    if launcher == 'none' or torch.cuda.is_available():
        return
    if launcher != 'pytorch':
        raise ValueError(f"distributed CPU runs use the 'pytorch' launcher (torchrun), got "
                         f"'{launcher}'")
    # Config.setdefault stores a copy of a new dict: a backend written into the dict it
    # returns was lost where the config had no env_cfg.dist_cfg.
    cfg.merge_from_dict({'env_cfg.dist_cfg.backend': 'gloo'})
    cfg.model_wrapper_cfg = phase_wrapper_cfg(cfg.get('model_wrapper_cfg'), on_cuda=False)
    if not dist.is_initialized():
        # MMEngine's key, which it hands the groups it starts; gloo's default is 30 minutes.
        timeout = cfg.env_cfg.dist_cfg.get('timeout')
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise UserError(f'env_cfg.dist_cfg.timeout={timeout!r}', 'not a number of seconds',
                            'give a positive number, e.g. timeout=3600')
        dist.init_process_group(
            'gloo', rank=int(os.environ['RANK']), world_size=int(os.environ['WORLD_SIZE']),
            **({} if timeout is None else dict(timeout=timedelta(seconds=timeout))))


def start_distributed(cfg: Any, launcher: str) -> None:
    """Start the process group of a tool that builds no runner (``tools/cache_features.py``)
    as the runner starts its own: gloo on a machine without CUDA (:func:`setup_cpu_distributed`,
    which also refuses a launcher that did not start the process), else MMEngine's
    ``init_dist`` with the config's ``env_cfg.dist_cfg`` (NCCL unless it names another), which
    puts each process on the GPU of its local rank. Nothing without a launcher."""
    setup_cpu_distributed(cfg, launcher)
    if launcher != 'none' and not dist.is_initialized():
        init_dist(launcher, **(cfg.get('env_cfg') or {}).get('dist_cfg', {}))


def shared_seed(runner) -> int:
    """The run's seed as every rank has it, for the samplers of the dataloaders xmr builds.

    Under ``randomness.diff_rank_seed`` the runner's seed is the rank's own (MMEngine adds the
    rank): a sampler seeded with it would cut each rank's shard from another permutation, the
    ranks reading the same items and missing others. The loaders' workers are seeded per rank
    anyway (MMEngine's ``worker_init_fn``), and a resumed run gets the same permutation back.
    """
    seed = runner.seed
    if runner._randomness_cfg.get('diff_rank_seed', False):
        seed -= dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    return seed


def unpadded_shard_size(sampler: Any) -> int:
    """Items of this rank's shard of a pass of ``sampler`` that are no padding.

    MMEngine's ``DefaultSampler`` (``round_up``) pads a pass of ``N`` items with its first
    items to ``world_size x ceil(N / world_size)`` positions and gives rank ``r`` positions
    ``r, r + world_size, ...``: those from ``N`` on are the pad, at the end of the shard.
    Another sampler pads nothing: its whole length.
    """
    if not getattr(sampler, 'round_up', False):
        return len(sampler)
    return len(range(sampler.rank, len(sampler.dataset), sampler.world_size))


def padded_repeats(loader: Any) -> int:
    """Items each pass of a training ``loader`` reads twice across the ranks.

    MMEngine's ``DefaultSampler`` (``round_up``) pads a pass of ``N`` items to
    ``world_size x ceil(N / world_size)`` with its first items, and shards it rank by rank. The
    pad is the last item of the ranks past ``N mod world_size``: it reaches a batch unless
    ``drop_last`` drops every rank's incomplete last batch, which holds it. Batch samplers of
    one's own (``LanguageBatchSampler``, ``GlobalBatchSampler``) cut global batches and pad
    nothing.

    Returns:
        The number of repeated items a pass trains on; 0 on one process.
    """
    sampler = getattr(loader, 'sampler', None)
    if type(getattr(loader, 'batch_sampler', None)) is not BatchSampler or not getattr(
            sampler, 'round_up', False) or getattr(sampler, 'world_size', 1) < 2:
        return 0
    padded = sampler.total_size - len(sampler.dataset)
    batch = loader.batch_sampler
    reaches_a_batch = not batch.drop_last or sampler.num_samples % batch.batch_size == 0
    return padded if reaches_a_batch else 0
