"""xmr from a user's own project: packaged configs by ``xmr::``, the ``xmr`` command, own modules.

The project lives in a temporary folder outside the repository: its files are the code blocks of
docs/custom_modules.md as the page has them (an adapter, a disentangler and a backbone registered
through ``custom_imports``, configs inheriting a packaged config), and it trains and tests through
``python -m xmr`` (the installed ``xmr`` command runs the same code).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from tests.conftest import MIXED_BATCH, phase_loss_keys, tiny_branch_cfg
from xmr.console import LAUNCHERS, available, main
from xmr.packaged import config_path
from xmr.registry import MODELS

REPO = Path(__file__).resolve().parents[1]

#: The files docs/custom_modules.md writes out (a code block headed by its file's name) that run
#: on the bundled synthetic data; its teacher's config reads Multi30K (tests/test_text_teacher.py).
DOCS_FILES = ('my_project/adapters.py', 'my_project/disentanglers.py', 'my_project/hf_clip.py',
              'my_project/tiny_dual.py', 'my_config.py', 'my_disentangler_config.py',
              'my_clip_config.py', 'my_tiny_config.py')


def write_docs_project(folder: Path) -> None:
    """The docs' files, as the page has them, under ``folder`` (a package for each folder)."""
    sys.path.insert(0, str(REPO / 'tools' / 'benchmarks'))
    from text_teacher_adapters import docs_module

    for name in DOCS_FILES:
        path = folder / name
        path.parent.mkdir(exist_ok=True)
        if path.parent != folder:
            (path.parent / '__init__.py').touch()
        path.write_text(docs_module(f'# {name}'))


def xmr_command(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``PYTHONPATH=. xmr ARGS`` in ``folder``, as the docs run it."""
    env = dict(os.environ, PYTHONPATH=str(folder), OMP_NUM_THREADS='1')
    return subprocess.run([sys.executable, '-m', 'xmr', *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)


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


@pytest.mark.parametrize('command', [[]] + [name.split() for name in available()
                                             if name not in LAUNCHERS])
def test_help_answers_without_loading_torch(command):
    shown = subprocess.run([sys.executable, '-c', HELP_IN_A_FRESH_PROCESS, *command, '--help'],
                           capture_output=True, text=True, timeout=120)
    assert shown.stdout.startswith(f'usage: {" ".join(["xmr", *command])} ')  # as typed
    if command:
        assert '  --debug               show the traceback of a failure' in shown.stdout
    assert shown.stdout.splitlines()[-1] == 'torch not loaded'


@pytest.mark.slow
def test_the_docs_adapter_and_disentangler_train_and_test_through_the_command(tmp_path):
    write_docs_project(tmp_path)
    train = xmr_command(tmp_path, 'train', 'my_disentangler_config.py', '--work-dir', 'run',
                        '--cfg-options', *SHORT)
    assert train.returncode == 0, train.stderr[-3000:]
    log = train.stdout + train.stderr
    assert "losses {'cl': 1.0, 'disentangler': 1.0}, trainable ['language_branch', " \
           "'disentangler']" in log
    assert 'loss_gate' in log
    checkpoint = tmp_path / 'run' / 'iter_6.pth'
    assert "type='GatedAdapter'" in log
    test = xmr_command(tmp_path, 'test', 'my_disentangler_config.py', str(checkpoint),
                       '--cfg-options', *SHORT)
    assert test.returncode == 0, test.stderr[-3000:]
    assert '| mAR' in test.stdout or 'mAR' in test.stdout


def save_tiny_clip(folder: Path, image_size: int, patch_size: int) -> None:
    """A tiny random transformers ``CLIPModel`` (text tower of width 32, 2 blocks) in ``folder``."""
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    CLIPModel(CLIPConfig(
        text_config=dict(vocab_size=49408, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=77,
                         eos_token_id=49407),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=image_size, patch_size=patch_size),
        projection_dim=24)).save_pretrained(folder)


@pytest.fixture(scope='module')
def docs_project(tmp_path_factory):
    """The docs' files in a user's project, whose modules this process imports too."""
    import importlib

    project = tmp_path_factory.mktemp('user_project')
    write_docs_project(project)
    sys.path.insert(0, str(project))
    importlib.import_module('my_project.hf_clip')
    importlib.import_module('my_project.tiny_dual')
    return project


@pytest.fixture(scope='module')
def hf_clip_folder(docs_project):
    """A tiny random CLIP at 32 px for the docs' vision-language backbone (``HFCLIP``)."""
    save_tiny_clip(docs_project / 'tiny-clip', image_size=32, patch_size=8)
    return docs_project / 'tiny-clip'


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


@pytest.mark.slow
def test_the_docs_clip_config_trains_and_tests_through_the_command(docs_project):
    """my_clip_config.py as it stands: its folder holds a tiny random CLIP at 224 px, the
    input size the config sets the data to."""
    save_tiny_clip(docs_project / 'clip-vit-base-patch32', image_size=224, patch_size=32)
    train = xmr_command(docs_project, 'train', 'my_clip_config.py', '--work-dir', 'clip_run',
                        '--test', '--cfg-options', *SHORT)
    assert train.returncode == 0, train.stderr[-3000:]
    assert ("losses {'cl': 1.0} (not run: disentangler=1; the model has no disentangler for "
            "'disentangler' to scale), trainable ['language_branch']") in (
        train.stdout + train.stderr)
    assert (docs_project / 'clip_run' / 'iter_6_test.json').is_file()


@pytest.mark.slow
def test_the_docs_tiny_dual_encoder_trains_and_tests_through_the_command(docs_project):
    """Its own tokenizer and tower, nothing of open_clip: feature caches, packed tokens and the
    evaluation hooks of the demo's schedule run on it."""
    train = xmr_command(docs_project, 'train', 'my_tiny_config.py', '--work-dir', 'tiny_run',
                        '--test', '--cfg-options', *SHORT)
    assert train.returncode == 0, train.stderr[-3000:]
    assert 'feature cache' in train.stdout + train.stderr
    assert (docs_project / 'tiny_run' / 'iter_6_test.json').is_file()


def test_the_docs_own_tower_embeds_packed_tokens_as_padded_ones_and_a_caption_alone(
        docs_project):
    backbone = MODELS.build(dict(type='TinyDualEncoder'))
    captions = ['a red circle', 'two blue squares on the left of a dog']
    tokens = backbone.tokenizer(captions)
    assert not tokens['attention_mask'].all()
    with torch.no_grad():
        backbone.text_tower.pack_tokens = False
        padded = backbone.encode_source_text(tokens)
        backbone.text_tower.pack_tokens = True
        torch.testing.assert_close(backbone.encode_source_text(tokens), padded)
        alone = backbone.encode_source_text(backbone.tokenizer(captions[:1]))
    torch.testing.assert_close(padded[:1], alone)


@pytest.mark.parametrize('backbone', ['HFCLIP', 'TinyDualEncoder'])
@pytest.mark.parametrize('method', ['static', 'lora', 'dasd'])
def test_each_method_trains_on_the_docs_own_backbones_and_leaves_them_frozen(
        hf_clip_folder, backbone, method):
    adapters = dict(static=dict(type='StaticAdapter', hidden=8),
                    lora=dict(type='LoRA', r=2, alpha=4, targets=['q', 'v', 'fc']),
                    dasd=dict(type='DynamicAdapter', hidden=4))[method]
    disentangler = dict(disentangler=dict(
        type='SemanticsDisentangler', adapter=dict(type='StaticAdapter', hidden=8),
        generator=dict(d_z=16, d_u=4))) if method == 'dasd' else {}
    torch.manual_seed(0)
    model = MODELS.build(dict(type='CrossLingualRetriever',
                              backbone=dict(type=backbone, **(
                                  dict(folder=str(hf_clip_folder)) if backbone == 'HFCLIP'
                                  else {})),
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
