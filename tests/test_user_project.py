"""xmr from a user's own project: packaged configs by ``xmr::``, the ``xmr`` command, own modules.

The project lives in a temporary folder outside the repository: its adapter, disentangler and
backbone are registered through ``custom_imports``, its config inherits a packaged config, and it
trains and tests through ``python -m xmr`` (the installed ``xmr`` command runs the same code).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from tests.conftest import MIXED_BATCH, phase_loss_keys, tiny_branch_cfg
from xmr.console import available, main
from xmr.packaged import config_path
from xmr.registry import MODELS

REPO = Path(__file__).resolve().parents[1]
HF_CLIP_HEADER = '# my_project/hf_clip.py'

MODULES = '''
import torch
from torch import nn

from xmr.models.adapters import AdapterPlacement, BaseAdapter
from xmr.models.backbones.open_clip import OpenCLIPBackbone
from xmr.models.disentanglers import ConditionDisentangler
from xmr.registry import ADAPTERS, DISENTANGLERS, MODELS


@ADAPTERS.register_module()
class GatedAdapter(BaseAdapter):
    accepts_packed_tokens = True

    def __init__(self, placement: AdapterPlacement, hidden: int = 8) -> None:
        super().__init__(placement)
        self.down = nn.Linear(self.width, hidden)
        self.up = nn.Linear(hidden, self.width)
        self.gate = nn.Parameter(torch.zeros(()))

    def forward(self, x, ctx):
        return x + torch.tanh(self.gate) * self.up(torch.relu(self.down(x)))


@DISENTANGLERS.register_module()
class GateRegulariser(ConditionDisentangler):
    def __init__(self, tower, condition_blocks) -> None:
        super().__init__()
        self.gate = nn.Linear(tower.width, 1)

    @property
    def loss_names(self):
        return frozenset({'gate'})

    def forward(self, embeddings, tokens, r_source=None):
        losses = {} if r_source is None else {'gate': self.gate(embeddings).pow(2).mean()}
        return None, losses


@MODELS.register_module()
class MyCLIP(OpenCLIPBackbone):
    """The user's backbone: the same tiny CLIP, registered from their own code."""
'''

CONFIG = '''
_base_ = ['xmr::demo/static_tiny-clip_synthetic.py']
custom_imports = dict(imports=['my_project.modules'], allow_failed_imports=False)
model = dict(
    backbone=dict(type='MyCLIP'),
    language_branch=dict(adapters=dict(_delete_=True, type='GatedAdapter', hidden=8)),
    disentangler=dict(type='GateRegulariser'))
'''

SHORT = ['train_cfg.phases.0.iters=2', 'train_cfg.phases.1.iters=2', 'train_cfg.phases.2.iters=2',
         'source_finetune_dataloader.batch_size=8',
         'source_finetune_dataloader.dataset.num_scenes=16',
         'train_dataloader.batch_size=8', 'train_dataloader.dataset.num_scenes=16',
         'val_dataloader.dataset.num_scenes=20', 'test_dataloader.dataset.num_scenes=20',
         'model.language_branch.tokenizer.corpus.num_scenes=100',
         'model.language_branch.tokenizer.vocab_size=200', 'default_hooks.logger.interval=1']


def test_a_packaged_config_is_named_with_the_xmr_scheme(tmp_path):
    (tmp_path / 'mine.py').write_text("_base_ = ['xmr::demo/static_tiny-clip_synthetic.py']\n"
                                      "randomness = dict(seed=7)\n")
    cfg = Config.fromfile(tmp_path / 'mine.py')
    packaged = Config.fromfile(REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py')
    assert cfg.randomness.seed == 7
    assert cfg.train_cfg.to_dict() == packaged.train_cfg.to_dict()
    assert config_path('xmr::demo/static_tiny-clip_synthetic.py').samefile(
        REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py')
    (tmp_path / 'typo.py').write_text("_base_ = ['xmr::demo/static-tiny.py']\n")
    with pytest.raises(FileNotFoundError, match="xmr ships no configs file 'demo/static-tiny.py'"):
        Config.fromfile(tmp_path / 'typo.py')


def test_the_command_lists_the_tools_and_refuses_an_unknown_one(capsys):
    installed = subprocess.run([Path(sys.executable).parent / 'xmr', '--help'],
                               capture_output=True, text=True)  # the console script pip made
    assert installed.returncode == 0 and '\n  train\n' in installed.stdout
    assert {'train', 'test', 'benchmark', 'data prepare_multi30k',
            'convert dasd_to_xmr'} <= set(available())
    with pytest.raises(SystemExit) as exit_status:
        main(['trian'])
    assert exit_status.value.code == 2
    assert capsys.readouterr().err.startswith(
        "error: xmr trian: no such command: did you mean 'xmr train'? run one of ")
    with pytest.raises(SystemExit):
        main(['data'])
    assert capsys.readouterr().err.startswith(
        'error: xmr data: name one of its tools: data attach_back_translations, ')
    with pytest.raises(SystemExit) as exit_status:
        main(['convert', '--help'])
    assert exit_status.value.code == 0
    assert capsys.readouterr().out == ('usage: xmr convert TOOL [ARGS...]\ncommands:\n'
                                       '  convert dasd_to_xmr\n  convert mla_to_xmr\n')


@pytest.mark.parametrize('command', [[], ['train']])
def test_help_into_a_closed_pipe_is_quiet(command):
    """`xmr --help | head -1`, with the reader gone before the listing is written."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        listing = subprocess.run([Path(sys.executable).parent / 'xmr', *command, '--help'],
                                 stdout=writer, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(writer)
    assert (listing.returncode, listing.stderr) == (0, '')


# The command's arguments follow `-c`: `main()` reads them from sys.argv as the installed one does.
HELP_IN_A_FRESH_PROCESS = '''
import sys
from xmr.console import main
try:
    main()
except SystemExit:
    pass
print('torch loaded' if 'torch' in sys.modules else 'torch not loaded')
'''


@pytest.mark.parametrize('command', [[]] + [name.split() for name in available()])
def test_help_answers_without_loading_torch(command):
    shown = subprocess.run([sys.executable, '-c', HELP_IN_A_FRESH_PROCESS, *command, '--help'],
                           capture_output=True, text=True, timeout=120)
    assert shown.stdout.startswith(f'usage: {" ".join(["xmr", *command])} ')  # as typed
    if command:
        assert '  --debug               show the traceback of a failure' in shown.stdout
    assert shown.stdout.splitlines()[-1] == 'torch not loaded'


@pytest.mark.slow
def test_a_users_project_trains_and_tests_through_the_command(tmp_path):
    project = tmp_path / 'my_project'
    project.mkdir()
    (project / '__init__.py').write_text('')
    (project / 'modules.py').write_text(textwrap.dedent(MODULES))
    (tmp_path / 'my_config.py').write_text(textwrap.dedent(CONFIG))
    env = dict(os.environ, PYTHONPATH=str(tmp_path), OMP_NUM_THREADS='1')

    def xmr_command(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, '-m', 'xmr', *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)

    train = xmr_command('train', 'my_config.py', '--work-dir', 'run', '--cfg-options', *SHORT)
    assert train.returncode == 0, train.stderr[-3000:]
    log = train.stdout + train.stderr
    assert "losses {'cl': 1.0, 'disentangler': 1.0}, trainable ['language_branch', " \
           "'disentangler']" in log
    assert 'loss_gate' in log
    checkpoint = tmp_path / 'run' / 'iter_6.pth'
    assert checkpoint.is_file()
    test = xmr_command('test', 'my_config.py', str(checkpoint), '--cfg-options', *SHORT)
    assert test.returncode == 0, test.stderr[-3000:]
    assert '| mAR' in test.stdout or 'mAR' in test.stdout


@pytest.fixture(scope='module')
def hf_clip_folder(tmp_path_factory):
    """The docs' own vision-language backbone (docs/custom_modules.md, ``HFCLIP``) imported from
    a user's project, and a tiny random transformers ``CLIPModel`` saved in a folder for it."""
    import importlib

    from transformers import CLIPConfig, CLIPModel

    sys.path.insert(0, str(REPO / 'tools' / 'benchmarks'))
    from text_teacher_adapters import docs_module

    project = tmp_path_factory.mktemp('user_project')
    (project / 'my_project').mkdir()
    (project / 'my_project' / '__init__.py').write_text('')
    (project / 'my_project' / 'hf_clip.py').write_text(docs_module(HF_CLIP_HEADER))
    sys.path.insert(0, str(project))
    importlib.import_module('my_project.hf_clip')
    torch.manual_seed(0)
    CLIPModel(CLIPConfig(
        text_config=dict(vocab_size=49408, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=32,
                         eos_token_id=49407),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=32, patch_size=8),
        projection_dim=24)).save_pretrained(project / 'tiny-clip')
    return project / 'tiny-clip'


def test_the_docs_own_clip_embeds_as_transformers_does(hf_clip_folder):
    backbone = MODELS.build(dict(type='HFCLIP', folder=str(hf_clip_folder)))
    clip = backbone.clip
    tokens = backbone.tokenizer(['a red circle', 'two blue squares on the left of a dog'])
    assert not tokens['attention_mask'].all()  # padding: the tower packs the real tokens
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        text = clip.text_model(input_ids=tokens['input_ids'],
                               attention_mask=tokens['attention_mask'].long())
        image = clip.vision_model(pixel_values=images)
        torch.testing.assert_close(backbone.encode_source_text(tokens),
                                   clip.text_projection(text.pooler_output))
        torch.testing.assert_close(backbone.encode_image(images),
                                   clip.visual_projection(image.pooler_output))


@pytest.mark.parametrize('method', ['static', 'lora', 'dasd'])
def test_each_method_trains_on_the_docs_own_clip_and_leaves_it_frozen(hf_clip_folder, method):
    adapters = dict(static=dict(type='StaticAdapter', hidden=8),
                    lora=dict(type='LoRA', r=2, alpha=4, targets=['q', 'v', 'fc']),
                    dasd=dict(type='DynamicAdapter', hidden=4))[method]
    disentangler = dict(disentangler=dict(
        type='SemanticsDisentangler', adapter=dict(type='StaticAdapter', hidden=8),
        generator=dict(d_z=16, d_u=4))) if method == 'dasd' else {}
    torch.manual_seed(0)
    model = MODELS.build(dict(type='CrossLingualRetriever',
                              backbone=dict(type='HFCLIP', folder=str(hf_clip_folder)),
                              language_branch=tiny_branch_cfg(adapters=adapters), **disentangler))
    frozen = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for phase, weights in (('cross_lingual', dict(cl=1.0, disentangler=1.0)),
                           ('cross_modal', dict(cm=1.0, disentangler=1.0))):
        model.set_phase(phase, weights)
        optimizer.zero_grad()
        losses = model(mode='loss', **model.data_preprocessor(MIXED_BATCH, True))
        assert set(losses) == phase_loss_keys(model, weights)
        sum(losses.values()).backward()
        adapted = {n for n, p in model.language_branch.adapters.named_parameters()
                   if p.grad is not None and p.grad.abs().sum() > 0}
        assert adapted and all(p.grad is None for p in model.backbone.parameters())
        optimizer.step()
    assert all(torch.equal(v, frozen[k]) for k, v in model.backbone.state_dict().items())
