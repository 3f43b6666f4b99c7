"""Deterministic runs on CUDA: CUBLAS_WORKSPACE_CONFIG set (or a wrong one refused) by every tool
before anything can start CUDA."""
from __future__ import annotations

import importlib
import os
from collections.abc import Iterator

import mmengine.runner
import pytest
import torch
from mmengine.config import Config
from torch.utils._python_dispatch import TorchDispatchMode

from tests.conftest import REPO
from xmr.engine.determinism import CUBLAS_WORKSPACE_CONFIG, prepare_deterministic_cuda
from xmr.registry import MODELS
from xmr.utils.cli import UserError

DEMO = REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'
DETERMINISTIC = ['--cfg-options', 'randomness.deterministic=True']


@pytest.fixture
def unset(monkeypatch) -> None:
    """No CUBLAS_WORKSPACE_CONFIG for the test; the caller's restored after it."""
    monkeypatch.setenv(CUBLAS_WORKSPACE_CONFIG, '')
    monkeypatch.delenv(CUBLAS_WORKSPACE_CONFIG)


def config(deterministic: bool) -> Config:
    return Config(dict(randomness=dict(seed=0, deterministic=deterministic)))


@pytest.mark.parametrize('before, after', [(None, ':4096:8'), ('', ':4096:8'),
                                           (':16:8', ':16:8'), (':4096:8', ':4096:8')])
def test_a_deterministic_run_gets_a_deterministic_cublas_workspace(unset, monkeypatch, before,
                                                                  after):
    if before is not None:
        monkeypatch.setenv(CUBLAS_WORKSPACE_CONFIG, before)
    prepare_deterministic_cuda(config(deterministic=True))
    assert os.environ[CUBLAS_WORKSPACE_CONFIG] == after


def test_another_workspace_is_refused_naming_it_and_the_fixes(monkeypatch):
    monkeypatch.setenv(CUBLAS_WORKSPACE_CONFIG, ':4096:2')
    with pytest.raises(UserError, match=r'^CUBLAS_WORKSPACE_CONFIG=:4096:2: randomness\.'
                       r'deterministic=True needs .*: set CUBLAS_WORKSPACE_CONFIG to one of '
                       r':4096:8 or :16:8, unset it .*randomness\.deterministic=False$'):
        prepare_deterministic_cuda(config(deterministic=True))


@pytest.mark.parametrize('value', [None, ':4096:2'])
def test_a_run_that_is_not_deterministic_leaves_the_environment_alone(unset, monkeypatch, value):
    if value is not None:
        monkeypatch.setenv(CUBLAS_WORKSPACE_CONFIG, value)
    prepare_deterministic_cuda(config(deterministic=False))
    prepare_deterministic_cuda(Config(dict()))
    assert os.environ.get(CUBLAS_WORKSPACE_CONFIG) == value


def test_a_run_that_is_not_deterministic_leaves_an_earlier_runs_deterministic_mode():
    """tools/train.py's main called twice in one process: the second run, logged
    'deterministic: False', ran in the first's deterministic mode."""
    try:
        torch.use_deterministic_algorithms(True)  # as the earlier run's MMEngine runner left it
        torch.backends.cudnn.deterministic = True
        prepare_deterministic_cuda(config(deterministic=False))
        assert not torch.are_deterministic_algorithms_enabled()
        assert not torch.backends.cudnn.deterministic
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False


class CudaCouldStart(Exception):
    """Raised where a tool first builds what can start CUDA (the runner, the seeded model)."""


@pytest.mark.parametrize('tool, patched, argv', [
    ('train', 'Runner', lambda tmp: [str(DEMO), '--work-dir', str(tmp / 'work')]),
    ('test', 'Runner', lambda tmp: [str(DEMO), str(tmp / 'model.pth')]),
    ('cache_features', 'set_random_seed', lambda tmp: [str(DEMO), '--work-dir', str(tmp)]),
])
def test_each_tool_sets_the_workspace_before_anything_can_start_cuda(unset, monkeypatch, tmp_path,
                                                                      tool, patched, argv):
    """torch reads the variable at the process's first cuBLAS call: set after the runner (DDP's
    device, the model's move) it would come too late."""
    monkeypatch.syspath_prepend(str(REPO / 'tools'))
    torch.save({'state_dict': {}}, tmp_path / 'model.pth')

    def starting(*args, **kwargs):
        raise CudaCouldStart(os.environ.get(CUBLAS_WORKSPACE_CONFIG))

    if patched == 'Runner':
        monkeypatch.setattr(mmengine.runner.Runner, 'from_cfg', starting)
    else:
        monkeypatch.setattr(mmengine.runner, 'set_random_seed', starting)
    with pytest.raises(CudaCouldStart) as seen:
        importlib.import_module(tool).main([*argv(tmp_path), *DETERMINISTIC])
    assert seen.value.args == (':4096:8',)


class AtenOps(TorchDispatchMode):
    """The aten ops run inside it, forward and backward, each with what decides whether CUDA
    has a deterministic kernel for it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.seen.add(self.form(func, args, kwargs))
        return func(*args, **kwargs)

    @staticmethod
    def form(func, args: tuple, kwargs: dict) -> str:
        """The op's name, with the argument that makes its CUDA kernel nondeterministic."""
        name = func.overloadpacket.__name__
        if name in ('median', 'nanmedian'):
            return str(func).removeprefix('aten.')  # .dim returns indices: no kernel
        if name == 'bincount' and (args[1:2] or [kwargs.get('weights')])[0] is not None:
            return 'bincount(weights)'
        if name.startswith('scatter_reduce'):
            return f'{name}({args[4] if len(args) > 4 else kwargs["reduce"]})'
        if name == '_embedding_bag' and (args[4] if len(args) > 4 else kwargs.get('mode')) == 2:
            return '_embedding_bag(max)'
        return name


#: The aten ops (and forms) with no deterministic CUDA kernel, which raise under
#: ``torch.use_deterministic_algorithms(True)``: torch 2.14's list in its docstring, by the names
#: the dispatcher gives them (a ``_backward`` op is the gradient of a layer; ``(...)``, the form
#: that raises).
NO_DETERMINISTIC_CUDA_KERNEL = {
    'avg_pool3d_backward', '_adaptive_avg_pool2d_backward', '_adaptive_avg_pool3d_backward',
    'adaptive_max_pool2d_backward', 'fractional_max_pool2d_backward',
    'fractional_max_pool3d_backward', 'max_unpool2d', 'max_unpool3d',
    'upsample_linear1d_backward', 'upsample_bilinear2d_backward', 'upsample_bicubic2d_backward',
    'upsample_trilinear3d_backward', '_upsample_bilinear2d_aa_backward',
    '_upsample_bicubic2d_aa_backward', 'reflection_pad1d_backward', 'reflection_pad2d_backward',
    'reflection_pad3d_backward', 'nll_loss2d_forward', '_ctc_loss_backward',
    '_embedding_bag(max)', 'put', 'put_', 'histc', 'bincount(weights)', 'median.dim',
    'nanmedian.dim', 'grid_sampler_2d_backward',
    'grid_sampler_3d_backward', 'scatter_reduce(prod)', 'scatter_reduce_(prod)',
}


def dasd_steps() -> Iterator[tuple[torch.nn.Module, dict]]:
    """DASD's paper schedule (source finetune, cross-lingual, cross-modal; per-language SDMs
    and the discriminator) on the tiny CLIP."""
    from tests.configs.test_dasd_configs import MULTI30K, batch, build

    cfg, model = build(MULTI30K)
    data = model.data_preprocessor(batch(model.languages), True)
    for phase in cfg.train_cfg.phases:
        model.set_phase(phase['name'], phase['loss_weights'])
        yield model, data


def dual_encoder_steps() -> Iterator[tuple[torch.nn.Module, dict]]:
    """CDDS's paper row, the VSE++ row with distribution sampling, and a SigLIP loss, on the
    tiny CLIP: every phase."""
    from tests.conftest import tiny_backbone_cfg
    from tests.models.retrievers.test_dual_encoder import BATCH
    from xmr.datasets import retrieval_collate

    rows = [Config.fromfile(REPO / 'configs' / 'cdds' / f'{stem}.py') for stem in (
        'cdds_vit-bert-b16_flickr30k', 'dual-encoder-vsepp-ds_vit-bert-b16_flickr30k')]
    sigmoid = dict(itc=dict(type='SigmoidLoss', logit_scale=10.0, logit_bias=-10.0))
    models = [(dict(row.model.to_dict(), backbone=tiny_backbone_cfg()), row.train_cfg.phases)
              for row in rows]
    models.append((dict(type='DualEncoderRetriever', backbone=tiny_backbone_cfg(),
                        losses=sigmoid), [dict(name='itc', loss_weights=dict(itc=1.0))]))
    # Rows 0 and 2 caption one image: LAPS's mask of the VSE++ row has a pair to leave out.
    batch = retrieval_collate([dict(media=BATCH['media'][row], media_id=media, lang='de',
                                    source_text=BATCH['source_text'][row])
                               for row, media in enumerate('abad')])
    for model_cfg, phases in models:
        torch.manual_seed(0)
        model = MODELS.build(model_cfg)
        data = model.data_preprocessor(batch, True)
        for phase in phases:
            model.set_phase(phase['name'], phase['loss_weights'])
            yield model, data


@pytest.mark.parametrize('steps', [dasd_steps, dual_encoder_steps])
def test_no_training_step_uses_an_op_without_a_deterministic_cuda_kernel(steps):
    """A CPU run does not raise where CUDA would: the ops are recorded in deterministic mode and
    held to torch's list. Every parameter trains, so that every op's backward runs."""
    ops = AtenOps()
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for model, data in steps():
            for parameter in model.parameters():
                parameter.requires_grad_(True)
            with ops:
                losses = model(mode='loss', **data)
                sum(losses.values()).backward()
            model.zero_grad()
    finally:
        torch.use_deterministic_algorithms(previous)
    assert {'convolution_backward', 'embedding_dense_backward'} <= ops.seen  # backward recorded
    assert not ops.seen & NO_DETERMINISTIC_CUDA_KERNEL
