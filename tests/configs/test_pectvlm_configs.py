"""The PECTVLM and LoRA configs: each builds (a tiny random M-CLIP / CLIP stands in), runs its
phases and predicts with the routine's texts; one XTD10 few-shot config trains end to end on
annotation files written here, keeps the best checkpoint and moves only its language's module."""
from __future__ import annotations

import copy
import functools
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.runner import Runner
from PIL import Image

from tests.configs.test_dasd_configs import build as build_clip_config
from tests.configs.test_dasd_configs import run_phases
from tests.conftest import TINY_CLIP, phase_loss_keys
from tests.models.backbones.mclip_helpers import TINY_XLMR, TOKENIZER_FILE, needs_tokenizer
from xmr.ablations import apply_ablations
from xmr.datasets import Annotation, MediaRecord, dump_annotation
from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
from xmr.engine.runner import runner_name_in_process
from xmr.models.adapters import CompacterAdapter, HardPrompt, HoulsbyAdapter, LoRA, SoftPrompt
from xmr.models.retrievers.translation import ROUTINES
from xmr.registry import DATASETS, MODELS, TOKENIZERS
from xmr.run_config import load_run_config
from xmr.utils.cli import UserError

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
PECTVLM = sorted((CONFIGS / 'pectvlm').glob('*.py'))
TRAINED = [p for p in PECTVLM if 'zeroshot' not in p.stem]
ZERO_SHOT = [p for p in PECTVLM if 'zeroshot' in p.stem]
LORA_TWINS = sorted((CONFIGS / 'lora').glob('lora_clip-vit-b32_*.py'))
ROUTINE3_DE = 'lora-r1_mclip-xlmr-l14_xtd10-fewshot50_routine3_de.py'
ADAPTER_OF = {'lora': LoRA, 'houlsby': HoulsbyAdapter, 'compacter': CompacterAdapter,
              'soft-prompt': SoftPrompt, 'hard-prompt': HardPrompt, 'ft': None}
#: Both LayerNorms of each tiny XLM-R layer, and M-CLIP's head: what a language tunes beside its
#: module (run_cross.py: all of them; run_choose_pet_task1.py: the LayerNorms).
LAYER_NORMS = {f'layers.{i}.{sub}LayerNorm.{p}' for i in range(TINY_XLMR['num_hidden_layers'])
               for sub in ('attention.output.', 'output.') for p in ('weight', 'bias')}
HEAD = {'text_proj.weight', 'text_proj.bias'}


@TOKENIZERS.register_module(name='PECTVLMTestXLMRTokenizer', force=True)
@functools.cache
def xlmr_tokenizer():
    """The real XLM-R tokenizer, loaded once for every tiny model of this file; registered so
    that a runner's config can name it."""
    return TOKENIZERS.build(dict(type='HFTokenizer', tokenizer_file=str(TOKENIZER_FILE),
                                 max_length=32))


TINY_TOKENIZER = dict(type='PECTVLMTestXLMRTokenizer')


def tiny_mclip(cfg: Config) -> dict:
    """The config's model on a tiny random M-CLIP; routine, module and losses as configured."""
    model = copy.deepcopy(cfg.to_dict()['model'])
    model['backbone'] = dict(model['backbone'], text_encoder=TINY_XLMR, checkpoint=None,
                             embed_dim=TINY_CLIP['embed_dim'], image_arch=None,
                             image_pretrained=None, image_model_cfg=TINY_CLIP,
                             tokenizer=TINY_TOKENIZER)
    branch = model['language_branch']
    branch['tokenizer'] = TINY_TOKENIZER
    if (branch.get('adapters') or {}).get('type') == 'CompacterAdapter':
        # Width 32 / 16 leaves 2 hidden units, fewer than the n = 4 Kronecker summands.
        branch['adapters'] = dict(branch['adapters'], reduction_factor=4)
    return model


def expected_routine(stem: str) -> str:
    """The routine a config's file name announces."""
    for piece in ('routine1', 'routine2', 'routine3', 'translate-test'):
        if piece in stem:
            return piece.replace('-', '_')
    return 'target_only'


def texts(size: int, lang: str) -> dict:
    return dict(
        source_text=['a dog runs', 'two cats sleep', 'a red car', 'children play'][:size],
        target_text=['ein Hund rennt', 'zwei Katzen schlafen', 'ein rotes Auto',
                     'Kinder spielen'][:size],
        source_to_target_text=['ein Hund läuft', 'zwei Katzen ruhen', 'ein roter Wagen',
                               'Kinder toben'][:size],
        target_to_source_text=['a dog is running', 'two cats are sleeping', 'a red auto',
                               'kids are playing'][:size],
        lang=[lang] * size)


@needs_tokenizer
@pytest.mark.parametrize('path', TRAINED, ids=lambda p: p.stem)
def test_trained_config_builds_runs_its_phase_and_predicts(path):
    cfg = Config.fromfile(path)
    torch.manual_seed(0)
    model = MODELS.build(tiny_mclip(cfg))
    lang = model.languages[0]
    kind = next(k for k in ADAPTER_OF if path.stem.startswith(k))
    modules = model.language_branch.adapters.sets[lang]
    adapters = [a for key, a in modules.items()
                if not key.startswith('shared_') and key != 'tower_weights']
    tuned = ({name for name, _ in modules['tower_weights'].named_parameters()}
             if 'tower_weights' in modules else set())
    if kind == 'ft':
        assert not adapters
        assert tuned == {name for name, _ in model.backbone.text_tower.named_parameters()}
    else:
        assert adapters and all(isinstance(a, ADAPTER_OF[kind]) for a in adapters)
        # run_cross.py tunes LoRA's LayerNorms and head, run_XTD.py's prompts nothing else.
        expected = (set() if 'prompt' in kind else
                    LAYER_NORMS | HEAD if 'xtd10-fewshot' in path.stem else LAYER_NORMS)
        assert tuned == expected
    assert model.routine == expected_routine(path.stem)
    phase = cfg.train_cfg.phases[0]
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith(tuple(phase['trainable'])))
    assert all(n.startswith(f'language_branch.adapters.sets.{lang}.')
               for n, p in model.named_parameters() if p.requires_grad)
    data = model.data_preprocessor(dict(
        media=torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8), media_id=['a', 'b'],
        index=[0, 1], **texts(2, lang)), True)
    model.set_phase(phase['name'], phase['loss_weights'])
    losses = model(mode='loss', **data)
    assert set(losses) == phase_loss_keys(model, phase['loss_weights'])
    assert all(torch.isfinite(v) for v in losses.values())
    gallery = dict(media=torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8),
                   media_id=['a', 'b'], index=[0, 1],
                   captions=[{'en': ['a dog'], lang: ['ein Hund']},
                             {'en': ['a cat'], lang: ['eine Katze']}],
                   back_translations=[{lang: ['a dog']}, {lang: ['a cat']}])
    outputs = model(mode='predict', **model.data_preprocessor(gallery, False))
    assert outputs[0]['caption_embeddings'][lang].shape == (1, TINY_CLIP['embed_dim'])


@needs_tokenizer
@pytest.mark.parametrize('path', ZERO_SHOT, ids=lambda p: p.stem)
def test_zero_shot_config_is_mclip_with_at_most_a_frozen_prompt(path):
    cfg = Config.fromfile(path)
    assert cfg.get('train_dataloader') is None and cfg.get('train_cfg') is None
    torch.manual_seed(0)
    model = MODELS.build(tiny_mclip(cfg)).eval()  # as tools/test.py runs it
    assert not list(model.language_branch.parameters())
    tokens = xlmr_tokenizer()(['ein Hund rennt', 'un chat dort'])
    lang = model.languages[0]
    with torch.no_grad():
        plain = model.backbone.encode_source_text(tokens)
        encoded = model.encode_text(tokens, lang)
    prompt = cfg.model.language_branch.adapters
    if prompt is None:
        torch.testing.assert_close(encoded, plain)
    else:
        prefixed = xlmr_tokenizer()([f'{prompt.text} ein Hund rennt', f'{prompt.text} un chat '
                                                                       'dort'])
        with torch.no_grad():
            torch.testing.assert_close(encoded, model.backbone.encode_source_text(prefixed),
                                       atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('path', PECTVLM, ids=lambda p: p.stem)
def test_every_language_the_test_set_reads_has_its_module(path):
    """A gallery language without a module stops the test loop at its first caption."""
    cfg = Config.fromfile(path)
    read = set(cfg.test_dataloader.dataset.languages)
    assert read - {'en'} <= set(cfg.model.language_branch.languages)
    assert set(cfg.test_evaluator.languages) <= read


@needs_tokenizer
@pytest.mark.parametrize('path', ZERO_SHOT, ids=lambda p: p.stem)
def test_english_is_evaluated_with_the_prompt_where_the_paper_does(path):
    """The English-prompt configs read the English gallery after "a photo of" as well (the
    frozen tower on the prefixed captions); the others read English as it is."""
    cfg = Config.fromfile(path)
    torch.manual_seed(0)
    model = MODELS.build(tiny_mclip(cfg)).eval()
    english = ['a dog runs on the grass', 'two cats sleep']
    gallery = dict(media=torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8),
                   media_id=['a', 'b'], index=[0, 1],
                   captions=[{'en': [english[0]]}, {'en': [english[1]]}])
    outputs = model(mode='predict', **model.data_preprocessor(gallery, False))
    encoded = torch.cat([output['caption_embeddings']['en'] for output in outputs])
    prompt = (cfg.model.get('data_preprocessor') or {}).get('source_prompt')
    assert (prompt == 'a photo of') == path.stem.startswith('hard-prompt-en')
    read = [f'{prompt} {text}' for text in english] if prompt else english
    with torch.no_grad():
        expected = model.backbone.encode_source_text(xlmr_tokenizer()(read))
    torch.testing.assert_close(torch.nn.functional.normalize(encoded, dim=-1),
                               torch.nn.functional.normalize(expected, dim=-1),
                               atol=1e-5, rtol=1e-4)


def test_every_dasd_clip_config_has_its_lora_twin():
    # docs/methods/pectvlm.md promises a LoRA twin of each dasd/dasd_clip-vit-b32_<run>.py.
    runs = {p.stem.removeprefix('dasd_') for p in (CONFIGS / 'dasd').glob('dasd_clip-vit-b32_*.py')}
    assert {p.stem.removeprefix('lora_') for p in LORA_TWINS} == runs


@pytest.mark.parametrize('path', LORA_TWINS, ids=lambda p: p.stem)
def test_lora_twin_of_each_dasd_clip_config_builds_and_runs_its_phases(path):
    assert (CONFIGS / 'dasd' / path.name.replace('lora_', 'dasd_')).is_file()
    cfg, model = build_clip_config(path)
    assert model.disentangler is None
    for adapters in model.language_branch.adapters.sets.values():
        assert set(adapters) == {f'{b}:attn_qkv' for b in range(12)}
        assert all(isinstance(a, LoRA) and a.targets == ('q', 'v') and a.scale == 16.0
                   for a in adapters.values())
    assert all(not set(p['loss_weights']) & {'adv', 'sc'} for p in cfg.train_cfg.phases)
    run_phases(cfg, model)


@pytest.mark.parametrize('path', LORA_TWINS, ids=lambda p: p.stem)
def test_lora_twin_states_no_paper_figure_of_dasd(path):
    """tools/language_modules.py report prints a config's paper_figures beside its count: the
    DASD config's #TP (134M) is no figure of its LoRA twin, which is no paper's row."""
    assert Config.fromfile(CONFIGS / 'dasd' / path.name.replace('lora_', 'dasd_')).paper_figures
    assert Config.fromfile(path).get('paper_figures') is None


def _image(path: Path, value: int) -> None:
    Image.fromarray(np.full((8, 8, 3), value, dtype=np.uint8)).save(path)


def _annotation(root: Path, split: str, ids: list[str]) -> str:
    items = []
    for i, media_id in enumerate(ids):
        _image(root / f'{media_id}.png', 40 * i % 256)
        items.append(MediaRecord(
            media_id, f'{media_id}.png', {'en': [f'a photo number {i}'],
                                          'de': [f'ein Foto Nummer {i}']},
            {'de': [f'ein Bild Nummer {i}']}, {'de': [f'a picture number {i}']}))
    # Not XTD10's 1,000-image test split by name: its size would be refused.
    ann = Annotation(dataset='xtd10', split=f'tiny_{split}', media_type='image',
                     languages=['en', 'de'],
                     source_lang='en', translation_langs=['de'], back_translation_langs=['de'],
                     items=items)
    dump_annotation(ann, root / f'{split}.json')
    return f'{split}.json'


@needs_tokenizer
def test_xtd10_few_shot_config_trains_keeps_the_best_and_moves_only_its_module(tmp_path):
    cfg = Config.fromfile(CONFIGS / 'pectvlm' / ROUTINE3_DE)
    transform = dict(type='MediaTransform', backbone=None, size=32)
    splits = {'train': ['t0', 't1', 't2', 't3'], 'val': ['v0', 'v1', 'v2'],
              'test': ['s0', 's1', 's2']}
    loaders = {}
    for split, ids in splits.items():
        loader = copy.deepcopy(cfg.to_dict()[f'{split}_dataloader'])
        loader.update(num_workers=0, persistent_workers=False, batch_size=2)
        loader['dataset'].update(data_root=str(tmp_path), data_prefix=dict(media=''),
                                 ann_file=_annotation(tmp_path, split, ids), transform=transform)
        loaders[split] = loader
    phase = dict(cfg.train_cfg.phases[0], iters=4, epochs=None)
    run = Config(dict(
        default_scope='xmr', work_dir=str(tmp_path / 'work'), model=tiny_mclip(cfg),
        train_dataloader=loaders['train'], val_dataloader=loaders['val'],
        test_dataloader=loaders['test'],
        train_cfg=dict(cfg.train_cfg, val_interval=2, phases=[phase]),
        val_cfg=cfg.val_cfg, test_cfg=cfg.test_cfg, val_evaluator=cfg.val_evaluator,
        test_evaluator=cfg.test_evaluator, optim_wrapper=cfg.optim_wrapper,
        default_hooks=dict(cfg.default_hooks, logger=dict(type='LoggerHook', interval=100)),
        log_level='WARNING', randomness=dict(seed=0)))
    allow_mmengine_checkpoint_types()
    runner = Runner.from_cfg(run)
    before = {k: v.clone() for k, v in runner.model.state_dict().items()
              if isinstance(v, torch.Tensor)}
    runner.train()
    moved = {k for k, v in runner.model.state_dict().items()
             if k in before and not torch.equal(v, before[k])}
    assert moved and all(k.startswith('language_branch.adapters.sets.de.') for k in moved)
    assert list((tmp_path / 'work').glob('best_mAR_iter_*.pth'))
    metrics = runner.test()
    assert 0 <= metrics['mAR'] <= 100 and 'de/t2i_R@1' in metrics


@needs_tokenizer
@pytest.mark.parametrize('ablations, steps', [((), 200), (('pectvlm/authors-script-xtd10',), 500)])
def test_xtd10_few_shot_schedule_resolves_from_its_50_pairs(ablations, steps, tmp_path):
    """The paper's 40 epochs of 50 pairs at batch 10 (200 steps), or the authors' scripts' 50
    epochs at batch 5 (500 steps), resolved from the loader; validation every 5 steps."""
    cfg = apply_ablations(Config.fromfile(CONFIGS / 'pectvlm' / ROUTINE3_DE), ablations)
    loop = Runner.from_cfg(_few_shot_training(cfg, tmp_path)).train_loop
    assert [(p.name, p.start, p.end) for p in loop.phases] == [('pectvlm', 0, steps)]
    assert loop.val_interval == 5


@needs_tokenizer
def test_a_routine_set_on_a_schedule_that_never_aligns_is_refused_as_the_loop_is_built(
        tmp_path):
    """``model.routine='routine3'`` over phases without an ``align`` weight would train
    translate-test under routine 3's name."""
    cfg = Config.fromfile(CONFIGS / 'pectvlm' / ROUTINE3_DE)
    cfg.merge_from_dict({'train_cfg.phases.0.loss_weights.align': 0})
    with pytest.raises(ValueError, match=r"routine 'routine3' aligns .* no phase of "
                                         r"\['pectvlm'\] weighs align"):
        Runner.from_cfg(_few_shot_training(cfg, tmp_path)).train_loop  # noqa: B018


def _few_shot_training(cfg: Config, root: Path) -> Config:
    """``cfg``'s model (on a tiny M-CLIP), training data (50 pairs in ``root``) and schedule."""
    loader = copy.deepcopy(cfg.to_dict()['train_dataloader'])
    loader.update(num_workers=0, persistent_workers=False)
    loader['dataset'].update(
        data_root=str(root), data_prefix=dict(media=''),
        ann_file=_annotation(root, 'train', [f't{i}' for i in range(50)]),
        transform=dict(type='MediaTransform', backbone=None, size=32))
    return Config(dict(default_scope='xmr', work_dir=str(root / 'work'), model=tiny_mclip(cfg),
                       train_dataloader=loader, train_cfg=cfg.train_cfg,
                       optim_wrapper=cfg.optim_wrapper, log_level='WARNING',
                       experiment_name=runner_name_in_process('xtd10_few_shot_schedule')))


@pytest.mark.parametrize('path', [p for p in PECTVLM if 'multi30k' in p.stem],
                         ids=lambda p: p.stem)
def test_multi30k_is_scored_on_task_1_as_its_authors(path):
    cfg = Config.fromfile(path)
    if 'zeroshot' not in path.stem:
        assert cfg.val_dataloader.dataset.ann_file == 'annotations/multi30k_val.json'
    assert cfg.test_dataloader.dataset.ann_file == 'annotations/multi30k_test.json'


def test_multi30k_full_schedule_is_the_papers_or_the_authors_script():
    cfg = Config.fromfile(CONFIGS / 'pectvlm' / 'lora-r8_mclip-xlmr-l14_multi30k-full_de.py')
    assert (cfg.train_dataloader.batch_size, cfg.train_cfg.phases[0]['epochs'],
            cfg.train_cfg.val_interval) == (48, 15, 300)
    cfg = apply_ablations(cfg, ['pectvlm/authors-script-multi30k'])
    assert (cfg.train_dataloader.batch_size, cfg.train_cfg.phases[0]['epochs'],
            cfg.train_cfg.val_interval) == (4, 50, 4)


def test_the_alignment_weight_is_swept_through_the_phase_and_held_by_no_number_variable():
    """lambda (text_loss_ratio), the setting PECTVLM grids (0.5 ... 0.003), is the phase's
    `align` weight. The configs held it in a number variable, `lambda_align`, that the routine
    configs copied into their phase as they loaded, and docs/methods/pectvlm.md said to sweep
    it there: a leaf's `lambda_align = 0.1` or `--cfg-options lambda_align=0.1` changed the
    variable alone (a number is no copy the option check can tell), and every run of the sweep
    trained at 0.5. Set where the page says, it is the weight the phase trains with; the dict
    of the weights that the configs share is a variable the check guards, naming that key."""
    page = (CONFIGS.parent / 'docs' / 'methods' / 'pectvlm.md').read_text(encoding='utf-8')
    option = 'train_cfg.phases.0.loss_weights.align'
    assert f'--cfg-options {option}=0.1' in page and 'lambda_align' not in page
    routines = [path for path in TRAINED
                if 'align' in Config.fromfile(path).train_cfg.phases[0].loss_weights]
    assert {path.stem.split('_')[-2] for path in routines} == {
        'routine1', 'routine2', 'routine3', 'routine3-contrastive'}
    for path in routines:
        whole = Config.fromfile(path).to_dict()
        weight = whole['train_cfg']['phases'][0]['loss_weights']['align']
        assert not [key for key, value in whole.items()
                    if isinstance(value, float) and value == weight], path.stem
        cfg = load_run_config(path, cfg_options={option: 0.1})
        assert cfg.train_cfg.phases[0].loss_weights == dict(cm=1.0, align=0.1)
        with pytest.raises(UserError, match=re.escape(
                f'set those keys instead ({option}=0.1')):
            load_run_config(path, cfg_options={'align_loss_weights.align': 0.1})


# ----------------------------------------------------------------- capacity (the paper's 0.16%)
XLMR_LARGE_TEXT = 558_840_832 + 1024 * 768 + 768  # XLM-R large without its pooler, + the head
PAPER_CAPACITY = [
    # Multi30K (run_choose_pet_task1.py): LoRA r = 8 on q/v + both LayerNorms of the 24 layers.
    ('lora-r8_mclip-xlmr-l14_multi30k-full_de', 24 * 2 * 2 * 1024 * 8 + 24 * 2 * 2 * 1024),
    # XTD10 few-shot (run_cross.py): LoRA r = 1 on q/v + the LayerNorms + the head.
    ('lora-r1_mclip-xlmr-l14_xtd10-fewshot50_routine3_de',
     24 * 2 * 2 * 1024 + 24 * 2 * 2 * 1024 + 1024 * 768 + 768),
    ('ft_mclip-xlmr-l14_multi30k-full_de', XLMR_LARGE_TEXT),
    # Multi30K's other PEFT modules, two per layer (after 'attention.output.dense' and
    # 'output.dense') + both LayerNorms, as OpenDelta builds them: an AdapterLayer of
    # bottleneck 24 (down 1024 -> 24 and up 24 -> 1024, with biases) ...
    ('houlsby-24_mclip-xlmr-l14_multi30k-full_de',
     24 * 2 * ((1024 * 24 + 24) + (24 * 1024 + 1024)) + 24 * 2 * 2 * 1024),
    # ... and a Compacter of reduction 16 (1024 -> 64 -> 1024) whose two PHMLinear layers
    # (hypercomplex_linear.py: n = 4, rank 1, shared_phm_rule=False) each hold their own rule
    # (n, n, n), W_left (n, in / n, 1), W_right (n, 1, out / n) and a bias.
    ('compacter-16_mclip-xlmr-l14_multi30k-full_de',
     24 * 2 * ((4 ** 3 + 4 * 256 + 4 * 16 + 64) + (4 ** 3 + 4 * 16 + 4 * 256 + 1024))
     + 24 * 2 * 2 * 1024),
    # XTD10 few-shot with a prompt (run_XTD.py): the 4 or 20 vectors alone.
    ('soft-prompt_mclip-xlmr-l14_xtd10-fewshot50_routine3_de', 4 * 1024),
    ('soft-prompt-20_mclip-xlmr-l14_xtd10-fewshot50_routine3_de', 20 * 1024),
]


@needs_tokenizer
@pytest.mark.parametrize('stem, per_language', PAPER_CAPACITY, ids=[p[0] for p in PAPER_CAPACITY])
def test_paper_configs_add_the_counted_parameters_per_language(stem, per_language):
    """On the full-size XLM-R large (built on the meta device: shapes without memory), a
    language's module is its PEFT module and its own tower weights; LoRA r = 8 with the
    LayerNorms is the 0.16% of the text encoder the paper reports."""
    from xmr.models.language.language_modules import language_parameter_report

    cfg = Config.fromfile(CONFIGS / 'pectvlm' / f'{stem}.py')
    model_cfg = copy.deepcopy(cfg.to_dict()['model'])
    model_cfg['backbone'] = dict(model_cfg['backbone'], checkpoint=None, image_arch=None,
                                 image_pretrained=None, tokenizer=TINY_TOKENIZER,
                                 image_model_cfg=dict(TINY_CLIP, embed_dim=768))
    model_cfg['language_branch']['tokenizer'] = TINY_TOKENIZER
    with torch.device('meta'):
        model = MODELS.build(model_cfg)
    share = language_parameter_report(model)['de']
    assert sum(p.numel() for p in model.backbone.text_tower.parameters()) == XLMR_LARGE_TEXT
    assert share.parameters == per_language
    assert share.of_text_encoder == per_language / XLMR_LARGE_TEXT
    if stem.startswith('lora-r8'):
        assert round(100 * share.of_text_encoder, 2) == 100 * cfg.paper_figures.language_share


# ------------------------------------------------ the translations each routine reads, and no more
def _bare_annotation(root: Path, languages: list[str], back_translated: bool) -> str:
    """Two images with one human caption per language, translations of English into each target
    language, and back-translations into English only where ``back_translated``."""
    targets = [lang for lang in languages if lang != 'en']
    items = [MediaRecord(f'm{i}', f'm{i}.png',
                         {lang: [f'{lang} caption {i}'] for lang in languages},
                         {lang: [f'en caption {i} in {lang}'] for lang in targets},
                         {lang: [f'{lang} caption {i} in en'] for lang in targets}
                         if back_translated else {})
             for i in range(2)]
    ann = Annotation(dataset='xtd10', split='tiny_test', media_type='image', languages=languages,
                     source_lang='en', translation_langs=targets,
                     back_translation_langs=targets if back_translated else [], items=items)
    name = f"{'with' if back_translated else 'without'}_back_translations.json"
    dump_annotation(ann, root / name)
    return name


def _build_dataset(dataset: dict, root: Path, back_translated: bool):
    languages = dataset.get('languages') or ['en', *dataset['target_langs']]
    return DATASETS.build(dict(dataset, data_root=str(root), with_media=False,
                               ann_file=_bare_annotation(root, languages, back_translated)))


def queries_with_back_translations(cfg: Config) -> bool:
    return ROUTINES[cfg.model.routine].query == 'target_to_source'


@pytest.mark.parametrize('path', PECTVLM, ids=lambda p: p.stem)
def test_evaluation_data_needs_back_translations_only_where_the_routine_queries_with_them(
        path, tmp_path):
    """Baseline 1 and routines 1-2 query with the target captions: their galleries run on data
    without back-translations. Translate-test and routine 3 query with the captions' MT into
    English: data without them is refused as the dataset is built, naming the file and the tool
    that attaches them."""
    cfg = Config.fromfile(path)
    reads = queries_with_back_translations(cfg)
    loaders = [cfg.get(key) for key in ('val_dataloader', 'test_dataloader')]
    for dataset in [loader.to_dict()['dataset'] for loader in loaders if loader is not None]:
        targets = [lang for lang in dataset['languages'] if lang != 'en']
        assert list(dataset.get('back_translated_languages', [])) == (targets if reads else [])
        if reads:
            assert set(_build_dataset(dataset, tmp_path, True)[0]['back_translations']) == \
                set(targets)
            with pytest.raises(ValueError, match=r'without_back_translations\.json has no .*'
                                                 r'back-translations.*attach_back_translations'):
                _build_dataset(dataset, tmp_path, False)
        else:
            assert 'back_translations' not in _build_dataset(dataset, tmp_path, False)[0]


@pytest.mark.parametrize('path', TRAINED, ids=lambda p: p.stem)
def test_training_pairs_carry_exactly_the_translations_the_routine_reads(path, tmp_path):
    """A training pair carries the English MT into the target only for routine 2 (its alignment
    partner) and the target caption's MT into English only for translate-test and routine 3
    (their queries); the other routines train on data without back-translations."""
    cfg = Config.fromfile(path)
    spec = ROUTINES[cfg.model.routine]
    dataset = cfg.train_dataloader.to_dict()['dataset']
    assert set(dataset.get('translated_texts', [])) == (
        {spec.query, spec.partner} & {'source_to_target', 'target_to_source'})
    reads = queries_with_back_translations(cfg)
    assert ('target_to_source_text' in _build_dataset(dataset, tmp_path, True)[0]) == reads
    if reads:
        with pytest.raises(ValueError, match=r'without_back_translations\.json has no '
                                             r'back_translations.*attach_back_translations\.py'):
            _build_dataset(dataset, tmp_path, False)
    else:
        _build_dataset(dataset, tmp_path, False)
