"""The DASD configs: every paper and ablation config builds (a tiny CLIP stands in for ViT-B/32)
and its switch removes what it says; the demo config trains end to end with a hand-counted
number of trainable parameters."""
from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner

from tests.conftest import CORPUS, phase_loss_keys
from xmr.ablations import apply_ablations
from xmr.datasets import Annotation, MediaRecord, dump_annotation
from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
from xmr.engine.optim import parameter_counts
from xmr.engine.pinned_batches import pinned_on_gpu
from xmr.models.adapters import DynamicAdapter, StaticAdapter
from xmr.models.disentanglers import PerLanguageDisentangler
from xmr.registry import HOOKS, MODELS, TOKENIZERS

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
PAPER = sorted((CONFIGS / 'dasd').glob('dasd_clip-vit-b32_*.py'))
ABLATIONS = sorted((CONFIGS / 'dasd' / 'ablations').glob('*.py'))
DEMO = CONFIGS / 'demo' / 'dasd_tiny-clip_synthetic.py'
MULTI30K = CONFIGS / 'dasd' / 'dasd_clip-vit-b32_multi30k_clft.py'
# The demo's ablation rows: every DASD ablation applies to the demo config as to the paper's.
DEMO_ROWS = [(), ('dasd/static-adapter',), ('dasd/features-sr',), ('dasd/features-sa',),
             ('dasd/no-adv',), ('dasd/no-sc',), ('dasd/no-sc', 'dasd/no-adv')]

# ViT-B/32's text tower has 12 blocks; the stand-in keeps the depth and shrinks the width.
TINY_CLIP_12 = dict(
    embed_dim=24,
    vision_cfg=dict(image_size=32, layers=1, width=16, patch_size=16, head_width=16),
    text_cfg=dict(context_length=32, vocab_size=49408, width=32, heads=2, layers=12),
)


@functools.cache
def clip_tokenizer(max_length: int = 32):
    # Loading CLIP's BPE vocabulary is most of a tiny model's build time; load it once per
    # context length (the backbone refuses a tokenizer cut at another length than its tower's).
    return TOKENIZERS.build(dict(type='OpenCLIPTokenizer', model_name='ViT-B-32',
                                 max_length=max_length))


def tiny_model(cfg: Config) -> dict:
    """The config's model with a tiny 12-block CLIP and tokenizer; every DASD option kept."""
    model = copy.deepcopy(cfg.to_dict()['model'])
    model['backbone'] = dict(type='OpenCLIPBackbone', arch=None, model_cfg=TINY_CLIP_12,
                             tokenizer=dict(type=clip_tokenizer))
    branch = model['language_branch']
    # A fixed padding (the authors' 77) stays fixed, at the tiny tower's context.
    fixed = {'pad_to': 32} if branch.get('tokenizer', {}).get('pad_to') else {}
    branch['tokenizer'] = dict(type='SentencePieceTokenizer', corpus=CORPUS * 20, vocab_size=48,
                               max_length=32, **fixed)
    branch['embedding'] = dict(type='TargetEmbedding', table_width=16)
    if model.get('disentangler'):
        model['disentangler']['adapter'] = dict(model['disentangler']['adapter'], hidden=8)
        model['disentangler']['generator'] = dict(model['disentangler']['generator'], d_z=16)
    return model


def batch(languages: list[str]) -> dict:
    size = 4
    return dict(media=torch.randint(0, 256, (size, 3, 32, 32), dtype=torch.uint8,
                                    generator=torch.Generator().manual_seed(0)),
                source_text=['a red circle', 'a blue square', 'two red circles', 'a cross'],
                target_text=['ein roter Kreis', 'un carré bleu', 'zwei rote Kreise', '一个十字'],
                lang=[languages[i % len(languages)] for i in range(size)],
                media_id=list('abcd'), index=list(range(size)))


@functools.cache
def build(path: Path, *ablations: str):
    """The config with its ablations and its tiny model, built once per test session (tests
    only run forwards)."""
    cfg = apply_ablations(Config.fromfile(path), ablations)
    torch.manual_seed(0)
    return cfg, MODELS.build(tiny_model(cfg))


def run_phases(cfg: Config, model) -> None:
    """Every phase's trainable prefixes exist and its weighted losses all come out."""
    names = [name for name, _ in model.named_parameters()]
    data = model.data_preprocessor(batch(model.languages), True)
    groups = model.trainable_groups()
    for phase in cfg.train_cfg.phases:
        for prefix in (p for entry in phase['trainable'] for p in groups.get(entry, [entry])):
            assert any(n == prefix or n.startswith(prefix + '.') for n in names), prefix
        model.set_phase(phase['name'], phase['loss_weights'])
        losses = model(mode='loss', **data)
        assert set(losses) == phase_loss_keys(model, phase['loss_weights']), phase['name']
        assert all(torch.isfinite(v) for v in losses.values())


def language_sdm(model):
    """The SDM a caption of the model's first language goes through: the paper configs build
    one per language (``per_language=True``), an ablation may share one."""
    sdm = model.disentangler
    return sdm.per_language[model.languages[0]] if isinstance(sdm, PerLanguageDisentangler) \
        else sdm


def placed(model, adapter_type) -> dict[str, set[int]]:
    """Blocks holding an adapter of ``adapter_type``, per language."""
    return {lang: {a.block_index for a in adapters.values() if isinstance(a, adapter_type)}
            for lang, adapters in model.language_branch.adapters.sets.items()}


def test_the_paper_runs_have_configs():
    assert {p.stem for p in PAPER} == {
        f'dasd_clip-vit-b32_{run}' for run in (
            'multi30k_clft', 'multi30k_zeroshot', 'mscoco_clft', 'mscoco_zeroshot',
            'msrvtt_clft', 'msrvtt_zeroshot')}


@pytest.mark.parametrize('path', [p for p in PAPER if 'multi30k' in p.stem], ids=lambda p: p.stem)
def test_multi30k_is_scored_on_the_gallery_of_the_papers(path):
    """MLA's and DASD's Multi30K (DASD's multi30k_4lang_path.json): task 2's five de captions
    an image, task 1's fr and cs; task 1's one de caption gives recalls of another protocol."""
    cfg = Config.fromfile(path)
    assert cfg.val_dataloader.dataset.ann_file == 'annotations/multi30k_val_5captions.json'
    assert cfg.test_dataloader.dataset.ann_file == 'annotations/multi30k_test_5captions.json'


@pytest.mark.parametrize('path', PAPER, ids=lambda p: p.stem)
def test_paper_config_builds_and_runs_every_phase(path):
    cfg, model = build(path)
    assert placed(model, DynamicAdapter) == {lang: set(range(12)) for lang in model.languages}
    assert model.languages == list(cfg.target_langs)
    # The paper's #TP: an SDM, generator and discriminator per target language.
    assert list(model.disentangler.per_language) == model.languages
    assert sorted(language_sdm(model).generator.blocks) == list(range(12))
    phases = {p['name']: p for p in cfg.train_cfg.phases}
    assert phases['cross_lingual']['loss_weights'] == dict(cl=1.0, disentangler=1.0)
    assert phases['cross_modal']['loss_weights'] == dict(cm=1.0, disentangler=1.0)
    assert cfg.model.disentangler.loss_weights == dict(adv=1.0, sc=0.1)  # lambda_1, lambda_2
    assert (phases['cross_lingual']['iters'], phases['cross_lingual']['lr']) == (45000, 2e-4)
    assert (phases['cross_modal']['iters'], phases['cross_modal']['lr']) == (6000, 6e-6)
    assert ('source_finetune' in phases) == path.stem.endswith('_clft')
    if 'source_finetune' in phases:  # CL-FT's stage 0: 5 epochs of CLIP on English at 3e-6
        assert (phases['source_finetune']['epochs'], phases['source_finetune']['lr']) == (5, 3e-6)
    # Sec. 4.1's optimiser (REFERENCE.md): betas (0.9, 0.98), eps 1e-6, wd 0.2, clipping 1.0.
    optimizer = cfg.optim_wrapper.optimizer
    assert (optimizer.type, tuple(optimizer.betas), optimizer.eps, optimizer.weight_decay) == (
        'AdamW', (0.9, 0.98), 1e-6, 0.2)
    assert cfg.optim_wrapper.clip_grad == dict(max_norm=1.0)
    run_phases(cfg, model)


@pytest.mark.parametrize('path', PAPER, ids=lambda p: p.stem)
def test_paper_config_holds_the_rest_of_dasds_recipe(path):
    """What test_paper_config_builds_and_runs_every_phase leaves out, as the resolved config
    states it (the ViT-B/16 twins equal these but for the arch). From the paper: batch 128 and a
    10% warm-up in every phase, L_CL = ||r^S - r^T||^2, L_CM an InfoNCE at tau 0.01, the SDM's
    k = 1 with A^sr/A^sa of hidden 256, d_z 512, d_u 32 after every block and L_sc as L1; from
    the released code (HuiGuanLab/DASD: expr/vitb32/*/config.json, train.py, clip/model.py, adv.py):
    the cosine after the warm-up (BertAdam's warmup_cosine), the source finetune's InfoNCE at the
    same fixed scale 100, mBERT cased cut at 77 tokens with its 768-wide table, and the
    discriminator's 256 -> 128 hidden layers."""
    cfg = Config.fromfile(path)
    loaders = [phase.get('dataloader', 'train_dataloader') for phase in cfg.train_cfg.phases]
    assert {loader: cfg[loader].batch_size for loader in loaders} == dict.fromkeys(loaders, 128)
    assert {(p['name'], p['warmup_ratio'], p['schedule']) for p in cfg.train_cfg.phases} == {
        (p['name'], 0.1, 'cosine') for p in cfg.train_cfg.phases}
    losses = cfg.model.losses
    assert (losses.cl.type, losses.cl.kind) == ('AlignmentLoss', 'mse')
    media_losses = ['cm', 'source_cm'] if path.stem.endswith('_clft') else ['cm']
    assert {name: (losses[name].type, losses[name].temperature) for name in media_losses} == (
        dict.fromkeys(media_losses, ('InfoNCELoss', 0.01)))
    assert (cfg.model.backbone.arch, cfg.model.backbone.pretrained) == ('ViT-B-32', 'openai')
    branch = cfg.model.language_branch
    assert (branch.tokenizer.name_or_path, branch.tokenizer.max_length) == (
        'bert-base-multilingual-cased', 77)
    assert (branch.embedding.table_width, branch.embedding.pretrained) == (
        768, 'bert-base-multilingual-cased')
    assert (branch.adapters.type, branch.adapters.hidden) == ('DynamicAdapter', 32)
    assert 'blocks' not in branch.adapters and 'num_blocks' not in branch
    sdm = cfg.model.disentangler
    assert (sdm.depth, sdm.adapter.hidden, sdm.features, sdm.consistency_loss.kind) == (
        1, 256, ['sr', 'sa'], 'l1')
    assert (sdm.generator.d_z, sdm.generator.d_u, tuple(sdm.discriminator.hidden)) == (
        512, 32, (256, 128))


def test_clft_source_finetune_runs_five_epochs_of_the_english_captions(tmp_path):
    """The phases name their loaders by key, the source finetune's 5 epochs become iterations
    of the config's own source_finetune_dataloader, every English caption of task 2's five an
    image (DASD's get_m30k), here 6 images' 30, and the alignment phases cache their
    features."""
    cfg = Config.fromfile(CONFIGS / 'dasd' / 'dasd_clip-vit-b32_multi30k_clft.py')
    cfg.model = tiny_model(cfg)
    # The runner prints its config: the tokenizer by name, not the cached function.
    cfg.model.backbone.tokenizer = dict(type='OpenCLIPTokenizer', model_name='ViT-B-32',
                                        max_length=32)
    translations = {lang: ['x'] for lang in cfg.target_langs}
    dump_annotation(Annotation(
        dataset='multi30k', split='train', media_type='image', languages=['en'],
        source_lang='en', translation_langs=list(cfg.target_langs),
        items=[MediaRecord(f'm{i}', f'm{i}.jpg', {'en': ['a caption']}, translations)
               for i in range(29)]),
        tmp_path / cfg.train_dataloader.dataset.ann_file)
    assert cfg.source_finetune_dataloader.dataset.ann_file.endswith('train_5captions.json')
    dump_annotation(Annotation(
        dataset='multi30k', split='train_5captions', media_type='image', languages=['en'],
        source_lang='en', items=[MediaRecord(f'm{i}', f'm{i}.jpg', {'en': ['a caption'] * 5})
                                 for i in range(6)]),
        tmp_path / cfg.source_finetune_dataloader.dataset.ann_file)
    for key in ('train_dataloader', 'text_train_dataloader', 'source_finetune_dataloader'):
        cfg[key].update(batch_size=4, num_workers=0, persistent_workers=False)
        cfg[key].dataset.data_root = str(tmp_path)
    cfg.update(work_dir=str(tmp_path / 'work'), log_level='WARNING')
    loop = Runner.from_cfg(cfg).train_loop
    # 30 captions at batch 4, drop_last: 7 batches per epoch, 35 iterations in 5 epochs.
    assert [(p.name, p.start, p.end) for p in loop.phases] == [
        ('source_finetune', 0, 35), ('cross_lingual', 35, 45035), ('cross_modal', 45035, 51035)]
    assert loop.phases[0].dataloader == pinned_on_gpu(cfg.source_finetune_dataloader)
    # The alignment phases read the frozen towers' features from caches in the work dir.
    cached = loop.phases[1].dataloader
    assert cached == pinned_on_gpu(dict(cfg.text_train_dataloader, dataset=dict(
        type='CachedFeatureDataset', dataset=cfg.text_train_dataloader.dataset,
        cache_dir=str(tmp_path / 'work' / 'feature_cache' / 'text_train_dataloader'),
        rebuild_if_stale=True)))
    assert loop.phases[2].dataloader['dataset']['dataset'] == cfg.train_dataloader.dataset


def ablated(name: str):
    """The Multi30K DASD config with the ablation ``name``, and its tiny model."""
    return build(MULTI30K, f'dasd/{name}')


@pytest.mark.parametrize('path', ABLATIONS, ids=lambda p: p.stem)
def test_ablation_builds_and_runs_every_phase(path):
    cfg, model = ablated(path.stem)
    if model.disentangler is not None:
        generated = set(language_sdm(model).generator.blocks)
        assert all(blocks == generated for blocks in placed(model, DynamicAdapter).values())
    run_phases(cfg, model)


def test_static_adapter_ablation_has_no_generated_matrix():
    _, model = ablated('static-adapter')
    assert model.disentangler is None
    assert not placed(model, DynamicAdapter)['de']
    assert placed(model, StaticAdapter)['de'] == set(range(12))
    assert all(a.down.out_features == 32 for a in model.language_branch.adapters.sets['de']
               .values())


def test_feature_ablations_drop_the_other_stream():
    _, only_sr = ablated('features-sr')
    _, only_sa = ablated('features-sa')
    _, full = build(PAPER[0])
    assert not hasattr(language_sdm(only_sr), 'sa_adapters')
    assert language_sdm(only_sr).discriminator is None
    assert not hasattr(language_sdm(only_sa), 'sr_adapters')
    assert language_sdm(only_sa).consistency_loss is None
    width, embed_dim = 32, 24
    assert language_sdm(full).generator.to_z[0].in_features == width + embed_dim
    assert language_sdm(only_sr).generator.to_z[0].in_features == embed_dim
    assert language_sdm(only_sa).generator.to_z[0].in_features == width


def test_loss_ablations_remove_their_loss():
    _, no_sc = ablated('no-sc')
    _, no_adv = ablated('no-adv')
    assert language_sdm(no_sc).loss_names == {'adv'}
    assert language_sdm(no_adv).loss_names == {'sc'}
    assert language_sdm(no_adv).discriminator is None
    for name, kind in (('sc-mse', 'mse'), ('sc-smooth-l1', 'smooth_l1')):
        assert language_sdm(ablated(name)[1]).consistency_loss.kind == kind
    assert language_sdm(build(PAPER[0])[1]).consistency_loss.kind == 'l1'


@pytest.mark.parametrize('blocks', [1, 3, 6, 9, 11])
def test_branch_depth_ablation_runs_only_those_blocks(blocks):
    _, model = ablated(f'branch-{blocks}-blocks')
    assert model.language_branch.num_blocks == blocks
    assert placed(model, DynamicAdapter)['de'] == set(range(blocks))


@pytest.mark.parametrize('removed', [0, 5, 11])
def test_removed_dynamic_adapter_is_gone_from_branch_and_generator(removed):
    _, model = ablated(f'no-da-block-{removed}')
    kept = set(range(12)) - {removed}
    assert placed(model, DynamicAdapter) == {lang: kept for lang in model.languages}
    assert set(language_sdm(model).generator.blocks) == kept


@pytest.mark.parametrize('depth', [0, 2, 12])
def test_sdm_depth_ablation_runs_that_many_frozen_blocks(depth, monkeypatch):
    _, model = ablated(f'sdm-depth-{depth}')
    sdm = language_sdm(model)
    assert len(sdm.sr_adapters) == len(sdm.sa_adapters) == max(depth, 1)
    tower = model.backbone.text_tower
    calls = []
    run_block = tower.run_block
    monkeypatch.setattr(tower, 'run_block',
                        lambda index, *args, **kwargs: calls.append(index)
                        or run_block(index, *args, **kwargs))
    tokens = model.language_branch.tokenize(['ein roter Kreis', 'un carré bleu'])
    sdm.extract(model.language_branch.embed(tokens), tokens)
    assert calls == list(range(depth)) * 2


@pytest.mark.parametrize('d_u', [16, 64])
def test_bottleneck_ablation_sets_adapter_and_generator(d_u):
    _, model = ablated(f'du-{d_u}')
    assert {a.hidden for a in model.language_branch.adapters.sets['fr'].values()} == {d_u}
    matrices, _ = language_sdm(model)(*(lambda t: (model.language_branch.embed(t), t))(
        model.language_branch.tokenize(['ein roter Kreis'])))
    assert {tuple(m.shape) for m in matrices.values()} == {(1, d_u, d_u)}


# ------------------------------------------------------------------------------------ demo
@pytest.mark.parametrize('ablations', DEMO_ROWS, ids=lambda row: '+'.join(row) or 'dasd')
def test_demo_row_builds_and_runs_every_phase(ablations):
    cfg = apply_ablations(Config.fromfile(DEMO), ablations)
    cfg.model.language_branch.tokenizer.corpus.num_scenes = 100
    cfg.model.backbone.tokenizer = dict(
        type=clip_tokenizer, max_length=cfg.model.backbone.model_cfg.text_cfg.context_length)
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    base = Config.fromfile(CONFIGS / 'demo' / 'static_tiny-clip_synthetic.py')
    assert [(p['name'], p['iters'], p['lr']) for p in cfg.train_cfg.phases] == [
        (p['name'], p['iters'], p['lr']) for p in base.train_cfg.phases]
    run_phases(cfg, model)


@HOOKS.register_module(force=True)
class PhaseParameterCounts(Hook):
    """Records, at the first iteration of each phase, the trainable parameters per group."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, tuple[int, int]]] = {}

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        phase = runner.train_loop.current_phase.name
        self.counts.setdefault(phase, parameter_counts(runner.model))


def small_demo(path: Path, work_dir: Path) -> Config:
    cfg = Config.fromfile(path)
    scenes = dict(num_scenes=48)
    for phase, iters in zip(cfg.train_cfg.phases, (3, 4, 3)):
        phase['iters'] = iters
    for loader in (cfg.train_dataloader, cfg.source_finetune_dataloader):
        loader.update(batch_size=8)
        loader.dataset.update(scenes)
    for loader in (cfg.val_dataloader, cfg.test_dataloader):
        loader.update(batch_size=16)
        loader.dataset.update(num_scenes=12)
    cfg.model.language_branch.tokenizer.corpus.num_scenes = 100
    cfg.work_dir = str(work_dir)
    cfg.log_level = 'WARNING'
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=-1, save_last=False)
    cfg.custom_hooks = [*cfg.custom_hooks, dict(type='PhaseParameterCounts')]
    return cfg


def test_demo_dasd_trains_end_to_end_with_the_hand_counted_parameters(tmp_path):
    allow_mmengine_checkpoint_types()
    runner = Runner.from_cfg(small_demo(DEMO, tmp_path))
    model = runner.model
    generator_before = copy.deepcopy(model.disentangler.generator.state_dict())
    runner.train()
    counts = next(h for h in runner.hooks if isinstance(h, PhaseParameterCounts)).counts

    # The demo: tiny CLIP text width 64, embed 64, 2 blocks; 4 languages; table width 64;
    # dynamic adapters d_u 32; SDM k=1 with adapters of hidden 256, generator d_z 64.
    vocab, width, langs, blocks, d_u, hidden, d_z = (model.language_branch.tokenizer.vocab_size,
                                                     64, 4, 2, 32, 256, 64)
    embedding = vocab * 64 + (64 * width + width)
    adapters = langs * blocks * ((width * d_u + d_u) + (d_u * width + width))
    bottleneck = (width * hidden + hidden) + (hidden * width + width)
    sdm = (2 * bottleneck + 2 * (2 * width)                  # A^sr, A^sa, both LayerNorms
           + width * width                                   # W_p^sr (E = 64, no bias)
           + (2 * width * d_z + d_z) + blocks * (d_z * d_u * d_u + d_u * d_u)  # generator
           + (2 * width * 256 + 256) + (256 * 128 + 128) + (128 + 1))          # discriminator
    for phase in ('cross_lingual', 'cross_modal'):
        assert counts[phase]['language_branch.embedding'][0] == embedding
        assert counts[phase]['language_branch.adapters'][0] == adapters
        assert counts[phase]['disentangler'][0] == sdm
        assert counts[phase]['backbone'][0] == 0
    assert counts['source_finetune']['disentangler'][0] == 0

    moved = model.disentangler.generator.state_dict()
    assert any(not torch.equal(moved[k], generator_before[k]) for k in moved)
    report = json.loads((tmp_path / 'phase_report.json').read_text())
    assert report, 'validation ran after every phase'


# ------------------------------------------------------------------------------ #TP (Table 1)
def mbert_sized_tokenizer(folder: Path) -> str:
    """A tokenizer file with mBERT's vocabulary size (119,547), standing in for the hub's."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]']
    vocab = {token: i for i, token in enumerate(specials + [f'w{i}' for i in range(119547 - 4)])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token='[UNK]'))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = folder / 'mbert_sized.json'
    tokenizer.save(str(path))
    return str(path)


@pytest.mark.parametrize('per_language', [True, False])
def test_paper_model_has_dasds_trainable_parameter_count(per_language, tmp_path, capsys,
                                                         monkeypatch):
    """DASD's #TP for its five target languages, counted on the full-size model of the paper
    configs: 92,205,824 shared + 5 x (12 x 33,312 + 790,016 + 6,828,544 + 295,425) = 133.77M
    with an SDM per language; 102.1M with one shared SDM."""
    import runpy
    import sys

    config = tmp_path / 'paper_model.py'
    config.write_text(
        f"_base_ = ['{CONFIGS / '_base_' / 'models' / 'dasd_clip-vit-b32.py'}']\n"
        "model = dict(backbone=dict(pretrained=None), language_branch=dict(\n"
        f"    tokenizer=dict(_delete_=True, type='HFTokenizer',\n"
        f"                   tokenizer_file='{mbert_sized_tokenizer(tmp_path)}', max_length=77),\n"
        "    embedding=dict(pretrained=None)),\n"
        f"    disentangler=dict(per_language={per_language}))\n")
    tool = CONFIGS.parent / 'tools' / 'language_modules.py'
    monkeypatch.setattr(sys, 'argv', [str(tool), 'report', str(config)])
    runpy.run_path(str(tool), run_name='__main__')
    report = capsys.readouterr().out
    shared_table = 119547 * 768 + 768 * 512 + 512
    adapters = 12 * (512 * 32 + 32 + 32 * 512 + 512)
    sdm = 2 * (512 * 256 + 256 + 256 * 512 + 512) + 2 * 2 * 512 + 512 * 512
    generator = (1024 * 512 + 512) + 12 * (512 * 1024 + 1024)
    discriminator = (1024 * 256 + 256) + (256 * 128 + 128) + (128 + 1)
    assert (shared_table, adapters, sdm, generator, discriminator) == (
        92205824, 12 * 33312, 790016, 6828544, 295425)
    per_lang = adapters + (sdm + generator + discriminator) * per_language
    shared = shared_table + (sdm + generator + discriminator) * (not per_language)
    for lang in ('de', 'fr', 'cs', 'zh', 'ja'):
        assert f'| {lang} | {per_lang:,} |' in report
    assert f'| shared by the languages | {shared:,} |' in report
    total = shared + 5 * per_lang
    assert f'| #TP (all trainable) | {total:,} |  |  | 134M |' in report
    assert 'paper: DASD (Cai et al., AAAI 2025), Table 1' in report
    assert total == (133774469 if per_language else 102118529)


@pytest.mark.parametrize('path', PAPER, ids=lambda p: p.stem)
def test_each_paper_config_has_its_vit_b16_twin(path):
    twin = path.with_name(path.name.replace('clip-vit-b32', 'clip-vit-b16'))
    b32, b16 = Config.fromfile(path).to_dict(), Config.fromfile(twin).to_dict()
    assert b16['model']['backbone'].pop('arch') == 'ViT-B-16'
    assert b32['model']['backbone'].pop('arch') == 'ViT-B-32'
    assert b16 == b32


def test_dasd_page_row_15_states_the_sdm_per_language_of_the_paper_configs():
    """docs/methods/dasd.md, "Where the authors' code differs", row 15: xmr's column said one
    SDM shared by all languages, while the paper configs build one per target language."""
    page = CONFIGS.parent / 'docs' / 'methods' / 'dasd.md'
    row = next(line for line in page.read_text(encoding='utf-8').splitlines()
               if line.startswith('| 15 |'))
    xmr_column = row.strip().strip('|').split('|')[3]
    assert all(Config.fromfile(path).model.disentangler.per_language for path in PAPER)
    assert 'per_language=True' in xmr_column


def test_dasd_page_row_23_states_where_cross_modal_is_validated_in_the_multi30k_run():
    """docs/methods/dasd.md, row 23: the step of cross_modal at which the Multi30K CL-FT run's
    val_interval falls, from the config: 5 epochs of task 2's 145,000 English captions at batch
    128 (1,132 full batches each: 5,660 iterations), then cross_lingual's 45,000, validation
    every 5,000 global iterations. The page said the 3,870th step, left from a source finetune
    of 1,130 iterations (task 1's 29,000 captions)."""
    cfg = Config.fromfile(MULTI30K)
    source, cross_lingual, cross_modal = cfg.train_cfg.phases
    batch = cfg[source.dataloader].batch_size
    start = source.epochs * (145000 // batch) + cross_lingual.iters
    interval = cfg.train_cfg.val_interval
    steps = [it - start for it in range(interval, start + cross_modal.iters + 1, interval)
             if it > start]
    assert (start, steps) == (50660, [4340])
    page = CONFIGS.parent / 'docs' / 'methods' / 'dasd.md'
    row = next(line for line in page.read_text(encoding='utf-8').splitlines()
               if line.startswith('| 23 |'))
    assert f'(Multi30K CL-FT: at its {steps[0]:,}th step and its last)' in row
