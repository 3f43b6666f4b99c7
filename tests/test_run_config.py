"""xmr.run_config: the config a tool runs, and what it says when the config cannot load."""
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from xmr.registry import UnknownOptionError
from xmr.run_config import (
    _typo_of,
    check_cached_galleries,
    check_evaluation_keys,
    load_run_config,
)
from xmr.utils.cli import UserError, UserKeyError

DEMO = REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'


def on_demo(folder: Path, body: str) -> str:
    """A leaf config ``folder/leaf.py`` on the demo config: its ``_base_``, then ``body``."""
    leaf = folder / 'leaf.py'
    leaf.write_text(f"_base_ = ['{DEMO}']\n{body}\n")
    return str(leaf)


@pytest.mark.parametrize('module, source, message', [
    ('my_misspelt', 'from xmr.registry import ADAPTER\n',
     "custom_imports: my_misspelt failed to import: ImportError: cannot import name 'ADAPTER' "
     "from 'xmr.registry'"),
    ('my_absent', None,
     "custom_imports: my_absent failed to import: ModuleNotFoundError: No module named "
     "'my_absent': check its name, and that the folder holding it is on PYTHONPATH"),
    ('my_absent_package.tool', None,
     "custom_imports: my_absent_package.tool failed to import: ModuleNotFoundError: No module "
     "named 'my_absent_package': check its name, and that the folder"),
    # Not ImportErrors: MMEngine let them through, and the tools printed them naming no module.
    ('my_unnamed', 'layer = nn.Linear(2, 2)\n',
     "custom_imports: my_unnamed failed to import: NameError: name 'nn' is not defined: fix "
     'my_unnamed'),
    ('my_unparsed', 'def f(:\n    pass\n',
     'custom_imports: my_unparsed failed to import: SyntaxError: '),
])
def test_a_custom_import_that_fails_is_named_with_its_cause(tmp_path, monkeypatch, module,
                                                            source, message):
    if source is not None:
        (tmp_path / f'{module}.py').write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / 'config.py'
    config.write_text(f"custom_imports = dict(imports=['{module}'], "
                      'allow_failed_imports=False)\n')
    try:
        with pytest.raises(UserError) as refused:
            load_run_config(config)
    finally:
        sys.modules.pop(module, None)
    assert str(refused.value).startswith(f'{config}: {message}')
    assert 'sys.path' not in str(refused.value)


def test_a_registration_xmr_refuses_in_a_custom_import_is_raised_as_it_is(tmp_path, monkeypatch):
    """Its own message says what to rename; wrapped as 'failed to import' it said to fix the
    module."""
    (tmp_path / 'my_duplicate.py').write_text(
        'from torch import nn\nfrom xmr.registry import MODELS\n\n\n'
        '@MODELS.register_module()\nclass CrossLingualRetriever(nn.Module):\n    pass\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / 'config.py'
    config.write_text("custom_imports = dict(imports=['my_duplicate'], "
                      'allow_failed_imports=False)\n')
    try:
        with pytest.raises(UserKeyError) as refused:
            load_run_config(config)
    finally:
        sys.modules.pop('my_duplicate', None)
    assert "'CrossLingualRetriever' is already registered" in str(refused.value)
    assert 'failed to import' not in str(refused.value)


def test_the_custom_imports_an_option_or_a_row_gives_are_imported(tmp_path, monkeypatch):
    """MMEngine imports those of a config file as it loads it: given by --cfg-options, a module
    was never imported (its types unknown at the build, a misspelt one trained on)."""
    (tmp_path / 'my_given_module.py').write_text('')
    (tmp_path / 'my_own_module.py').write_text('')
    config = tmp_path / 'config.py'
    config.write_text(f"_base_ = ['{DEMO}']\ncustom_imports = dict(imports=['my_own_module'])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    option = 'custom_imports.imports'
    try:
        # The option replaces the file's list: the file's own module is imported all the same.
        load_run_config(config, cfg_options={option: ['my_given_module']})
        assert {'my_given_module', 'my_own_module'} <= set(sys.modules)
    finally:
        sys.modules.pop('my_given_module', None)
        sys.modules.pop('my_own_module', None)
    merged = f'{DEMO} with its --ablation rows and --cfg-options'
    with pytest.raises(UserError, match=(
            f"^{merged}: custom_imports: my_given_modul failed to import: ModuleNotFoundError: ")):
        load_run_config(DEMO, cfg_options={option: ['my_given_modul']})
    row = tmp_path / 'row.py'
    row.write_text("custom_imports = dict(imports=['my_row_modul'])\n")
    with pytest.raises(UserError, match=(  # MMEngine's own error listed sys.path
            f"^{merged}: custom_imports: my_row_modul failed to import: ModuleNotFoundError: ")):
        load_run_config(DEMO, ablations=[str(row)])


def test_a_misspelt_option_of_the_model_is_refused_when_the_config_loads(tmp_path):
    """The runner builds the model past xmr's registries; the loaded config is checked first."""
    with pytest.raises(UnknownOptionError, match=(
            r"^model CrossLingualRetriever: unknown option 'langauge_branch' \(did you mean "
            r"'language_branch'\?\); it takes backbone, language_branch, ")):
        load_run_config(DEMO, cfg_options={'model.langauge_branch.num_blocks': 1},
                        work_dir=str(tmp_path))
    assert load_run_config(DEMO, work_dir=str(tmp_path)).model.type == 'CrossLingualRetriever'


@pytest.mark.parametrize('option, value, message', [
    ('model.language_branch.adapters.bottlenek_dim', 64,
     r"model\.language_branch\.adapters\.bottlenek_dim: adapter StaticAdapter: unknown option "
     r"'bottlenek_dim'; it takes hidden, zero_init, width, blocks, sites$"),
    ('model.language_branch.tokenizer.max_lenght', 30,  # a typo of a key the dict holds
     r"model\.language_branch\.tokenizer\.max_lenght: tokenizer SentencePieceTokenizer: "
     r"unknown option 'max_lenght' \(did you mean 'max_length'\?\)"),
    ('model.language_branch.tokenizer.corpus.num_scene', 10,
     r"model\.language_branch\.tokenizer\.corpus\.num_scene: function "
     r"synthetic_caption_corpus: unknown option 'num_scene' \(did you mean 'num_scenes'\?\)"),
    ('model.losses.cl.knd', 'l1',
     r"model\.losses\.cl\.knd: model AlignmentLoss: unknown option 'knd' \(did you mean "
     r"'kind'\?\)"),
    ('model.language_branch.adapters.hidden', 'wide',
     r"model\.language_branch\.adapters\.hidden: adapter StaticAdapter: option "
     r"hidden='wide' must be a number \(its default is 256\)"),
])
def test_a_misspelt_option_of_a_part_inside_the_model_is_refused_naming_its_key(
        tmp_path, option, value, message):
    """The model builds its adapters, tokenizers and losses itself, after the runner has made
    its work dir; the loaded config is checked to any depth first."""
    with pytest.raises((UnknownOptionError, ValueError), match=f'^{message}'):
        load_run_config(DEMO, cfg_options={option: value}, work_dir=str(tmp_path))


def test_a_config_file_that_misspells_a_nested_option_is_refused_as_it_loads(tmp_path):
    config = tmp_path / 'dasd_typo.py'
    config.write_text(f"_base_ = ['{DEMO.parent / 'dasd_tiny-clip_synthetic.py'}']\n"
                      "model = dict(disentangler=dict(adapter=dict(hiddn=128)))\n")
    with pytest.raises(UnknownOptionError, match=(
            r"^model\.disentangler\.adapter\.hiddn: adapter StaticAdapter: unknown option "
            r"'hiddn' \(did you mean 'hidden'\?\)")):
        load_run_config(config, work_dir=str(tmp_path / 'work'))


def test_the_keys_a_parent_reads_before_it_builds_a_part_load_as_options(tmp_path):
    """The adapter set places an adapter by width, blocks and sites, and the retriever copies
    a disentangler per language; they never reach the part's constructor."""
    cfg = load_run_config(DEMO.parent / 'dasd_tiny-clip_synthetic.py', cfg_options={
        'model.language_branch.adapters.blocks': [0], 'model.language_branch.adapters.width': 64,
        'model.language_branch.adapters.sites': ['block.output'],
        'model.disentangler.per_language': True}, work_dir=str(tmp_path))
    assert cfg.model.language_branch.adapters.blocks == [0]
    assert cfg.model.disentangler.per_language is True


def test_a_config_xmr_ships_is_named_by_the_xmr_scheme(tmp_path):
    """``xmr train xmr::demo/...`` from a folder without configs/ (a user's own project)."""
    cfg = load_run_config('xmr::demo/static_tiny-clip_synthetic.py', work_dir=str(tmp_path))
    assert cfg.train_cfg.type == 'PhasedTrainLoop' and cfg.work_dir == str(tmp_path)
    with pytest.raises(FileNotFoundError, match="xmr ships no configs file 'demo/static.py'"):
        load_run_config('xmr::demo/static.py')
    with pytest.raises(UserError, match="or name a config xmr ships as 'xmr::demo/"):
        load_run_config(tmp_path / 'missing.py')


def test_an_option_past_the_end_of_a_list_names_the_list_and_its_length():
    with pytest.raises(UserError, match=(
            r'--cfg-options train_cfg.phases.3.iters: train_cfg.phases holds 3 items \(indices '
            r'0 to 2\): name one of them, or give the whole list')):
        load_run_config(DEMO, cfg_options={'train_cfg.phases.3.iters': 30})
    cfg = load_run_config(DEMO, cfg_options={'train_cfg.phases.2.iters': 30})
    assert cfg.train_cfg.phases[2].iters == 30


def test_an_option_replaces_a_list_item_that_is_no_dict():
    """MMEngine merges an option into a list's item only where the item is a dict
    (``train_cfg.phases.0.iters``), and failed on a string or number (``'str' object has no
    attribute 'copy'``)."""
    cfg = load_run_config(DEMO, cfg_options={'test_dataloader.dataset.languages.1': 'cs',
                                             'test_dataloader.dataset.languages.4': 'de',
                                             'train_cfg.phases.0.trainable.0': 'target',
                                             'optim_wrapper.optimizer.betas.1': 0.99})
    assert cfg.test_dataloader.dataset.languages == ['en', 'cs', 'fr', 'zh', 'de']
    assert cfg.val_dataloader.dataset.languages == ['en', 'de', 'fr', 'zh', 'ja']
    assert cfg.train_cfg.phases[0].trainable == ['target', 'losses.source_cm']
    assert cfg.train_cfg.phases[0].iters == 700
    assert cfg.optim_wrapper.optimizer.betas == (0.9, 0.99)


@pytest.mark.parametrize('key, where, value', [
    ('train_dataloader.batch_size.x', 'train_dataloader.batch_size', '128'),
    ('test_dataloader.dataset.languages.1.x', 'test_dataloader.dataset.languages.1', "'de'")])
def test_an_option_that_names_a_key_inside_a_plain_value_names_that_value(key, where, value):
    """MMEngine's merge failed with a TypeError of its own, shown as an unexpected error."""
    with pytest.raises(UserError, match=re.escape(
            f"--cfg-options {key}: {where} is {value}, which holds no key 'x': give {where} a "
            f'value of its own ({where}=...), or make it a dict ({where}._delete_=True '
            f'{key}=...)')):
        load_run_config(DEMO, cfg_options={key: 1})


def test_an_interval_in_epochs_in_place_of_iterations_is_set_as_configs_md_says():
    """docs/configs.md, "Schedules in epochs": the option on the demo's integer interval was
    told only to give the interval a value of its own, which an option cannot make a dict."""
    key = 'default_hooks.checkpoint.interval'
    with pytest.raises(UserError, match=re.escape(
            f"{key} is 500, which holds no key 'epochs': give {key} a value of its own "
            f'({key}=...), or make it a dict ({key}._delete_=True {key}.epochs=...)')):
        load_run_config(DEMO, cfg_options={f'{key}.epochs': 0.25})
    cfg = load_run_config(DEMO, cfg_options={f'{key}._delete_': True, f'{key}.epochs': 0.25})
    assert cfg.default_hooks.checkpoint.interval == {'epochs': 0.25}


def test_an_option_under_a_key_that_is_none_names_the_options_that_make_it_a_dict(tmp_path):
    """Its advice had been ``optim_wrapper.clip_grad=...``, which --cfg-options reads as text."""
    config = tmp_path / 'child.py'
    config.write_text(f"_base_ = ['{DEMO}']\noptim_wrapper = dict(clip_grad=None)\n")
    key = 'optim_wrapper.clip_grad.max_norm'
    with pytest.raises(UserError, match=re.escape(
            f"optim_wrapper.clip_grad is None, which holds no key 'max_norm': make it a dict "
            f'first (optim_wrapper.clip_grad._delete_=True {key}=...)')):
        load_run_config(config, cfg_options={key: 1.0})
    cfg = load_run_config(config, cfg_options={'optim_wrapper.clip_grad._delete_': True,
                                               key: 1.0})
    assert cfg.optim_wrapper.clip_grad == {'max_norm': 1.0}


@pytest.mark.parametrize('options', [
    {'model.disentangler': None, 'model.disentangler.depth': 2},
    {'model.disentangler.depth': 2, 'model.disentangler': None}])
def test_options_that_set_a_key_and_a_key_inside_it_are_refused_naming_both(options):
    """The merge failed with a TypeError in one order and dropped ``depth`` in the other."""
    with pytest.raises(UserError, match=re.escape(
            '--cfg-options model.disentangler: sets model.disentangler to None, and '
            'model.disentangler.depth sets a key inside it: give one of the two')):
        load_run_config(DEMO, cfg_options=options)


@pytest.mark.parametrize('index', ['-1', 'last'])
def test_an_option_that_names_a_list_item_by_no_index_names_the_list(index):
    with pytest.raises(UserError, match=(
            f'^--cfg-options train_cfg.phases.{index}.iters: train_cfg.phases is a list of 3 '
            r'items: name one by its index, 0 to 2$')):
        load_run_config(DEMO, cfg_options={f'train_cfg.phases.{index}.iters': 30})


@pytest.mark.parametrize('option, message', [
    ('default_hooks.checkpoint.max_keep_ckpt', "hook CheckpointHook: unknown option "
     "'max_keep_ckpt' \\(did you mean 'max_keep_ckpts'\\?\\); it takes backend_args, "
     'earlier_best, interval'),
    ('train_cfg.max_iter', "loop PhasedTrainLoop: unknown option 'max_iter'"),
    ('custom_hooks.3.metrik', "hook PhaseReportHook: unknown option 'metrik' \\(did you mean "
     "'metric'\\?\\)"),
    ('val_cfg.fp17', "loop ValLoop: unknown option 'fp17' \\(did you mean 'fp16'\\?\\)"),
    ('test_cfg.fp17', "loop TestLoop: unknown option 'fp17'"),
])
def test_a_misspelt_option_of_a_hook_or_loop_is_refused_when_the_config_loads(option,
                                                                            message):
    """MMEngine hands CheckpointHook's unknown options on to the first save, iterations in;
    the custom hooks and the validation and test loops are built as the runner starts."""
    assert load_run_config(DEMO).custom_hooks[3].type == 'PhaseReportHook'
    with pytest.raises(UnknownOptionError, match=message):
        load_run_config(DEMO, cfg_options={option: 3})
    load_run_config(DEMO, cfg_options={'default_hooks.checkpoint.max_keep_ckpts': 3,
                                       'default_hooks.checkpoint.save_optimizer': False})


def test_a_hook_without_an_option_it_must_have_is_refused_when_the_config_loads(tmp_path):
    """EarlyStoppingHook without its monitor failed as the runner built it, after making the
    work dir, with Python's 'missing 1 required positional argument' and no key."""
    hooks = "custom_hooks = [*_base_.custom_hooks, dict(type='EarlyStoppingHook'{})]"
    with pytest.raises(ValueError, match=(
            "^hook EarlyStoppingHook: option 'monitor' has no default: give it; it takes "
            'monitor, rule, ')):
        load_run_config(on_demo(tmp_path, hooks.format('')))
    load_run_config(on_demo(tmp_path, hooks.format(", monitor='mAR'")))


def test_a_hook_class_that_is_no_hook_is_refused_when_the_config_loads(tmp_path):
    """The runner failed on it as it registered the hooks ('NotAHook' object has no attribute
    'priority'), after making the work dir."""
    from xmr.registry import HOOKS

    @HOOKS.register_module()
    class NotAHook:
        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            pass

    leaf = on_demo(tmp_path, "custom_hooks = [*_base_.custom_hooks, dict(type='NotAHook')]")
    try:
        with pytest.raises(ValueError, match=r'^custom_hooks\.\d+: NotAHook is no '
                                             r'mmengine\.hooks\.Hook: a hook subclasses it'):
            load_run_config(leaf)
    finally:
        HOOKS.module_dict.pop('NotAHook')


@pytest.mark.parametrize('option', ['filename', 'meta', 'by_epoch_'])
def test_an_option_checkpoint_hook_passes_on_to_the_save_is_refused_when_the_config_loads(
        option):
    """MMEngine's CheckpointHook passes its other options to Runner.save_checkpoint after the
    save's every argument (filename, meta, ...): each would fail the first save, iterations in,
    as an argument given twice."""
    with pytest.raises(UnknownOptionError, match=f"hook CheckpointHook: unknown option "
                       f"'{option}'"):
        load_run_config(DEMO, cfg_options={f'default_hooks.checkpoint.{option}': 3})


def test_a_bad_phase_is_refused_when_the_config_loads():
    """Before the runner is built: its setup, hook table and logs come first otherwise."""
    with pytest.raises(ValueError, match="phase source_finetune: lr='fast' must be a positive"):
        load_run_config(DEMO, cfg_options={'train_cfg.phases.0.lr': 'fast'})


def test_custom_hooks_none_drops_the_bases_hooks(tmp_path):
    """MMEngine's default, and a child's way to drop its base's custom hooks."""
    child = tmp_path / 'child.py'
    child.write_text(f"_base_ = ['{DEMO}']\ncustom_hooks = None\n")
    assert load_run_config(child).custom_hooks is None


@pytest.mark.parametrize('option, message', [
    ('optim_wrapper.optimizer.lr', "optimizer AdamW: option lr='fast' must be a number "
     r'\(its default is 0.001\)'),
    ('default_hooks.checkpoint.interval', "hook CheckpointHook: option interval='fast' must be a "
     r'number \(its default is -1\)'),
])
def test_a_word_where_a_number_goes_is_refused_when_the_config_loads(option, message):
    """torch's optimiser and MMEngine's hooks would fail iterations in, naming no key."""
    with pytest.raises(ValueError, match=message):
        load_run_config(DEMO, cfg_options={option: 'fast'})


@pytest.mark.parametrize('value, wanted', [
    (1, r'a list or tuple \(its'),
    ('ln_final.*', r"a list or tuple \(\['ln_final\.\*'\] for one\)")])
def test_one_value_where_a_list_of_patterns_goes_is_refused_when_the_config_loads(tmp_path,
                                                                                 value, wanted):
    """tuned_weights defaults to no pattern: a number failed in the branch's build ('int' object
    is not iterable) after the runner had made the work dir; a word was read letter by letter."""
    with pytest.raises(ValueError, match=(
            rf'^model\.language_branch\.tuned_weights: model TargetLanguageBranch: option '
            rf'tuned_weights={re.escape(repr(value))} must be {wanted}')):
        load_run_config(DEMO, cfg_options={'model.language_branch.tuned_weights': value},
                        work_dir=str(tmp_path))


def test_auto_scale_lr_is_refused_under_the_phased_loop_that_would_overwrite_it():
    """MMEngine logged 'Scaling the original LR by 4.0'; the loop then set every iteration's
    lr from its phase, and the run trained at the unscaled rate."""
    scaled = {'auto_scale_lr.enable': True, 'auto_scale_lr.base_batch_size': 32}
    with pytest.raises(ValueError, match=r"auto_scale_lr=\{'enable': True, 'base_batch_size': "
                                         r"32\}: PhasedTrainLoop .* scale train_cfg\.phases\.N"
                                         r"\.lr"):
        load_run_config(DEMO, cfg_options=scaled)
    load_run_config(DEMO, cfg_options={**scaled, 'auto_scale_lr.enable': False})


def test_a_param_scheduler_is_refused_under_the_phased_loop_when_the_config_loads(tmp_path):
    """The loop refused it as it started, after the runner had made the work dir (a log
    folder, the config dump); MMEngine's own merge error advises _delete_=True, which led
    there."""
    leaf = on_demo(tmp_path, "param_scheduler = dict(_delete_=True, type='CosineAnnealingLR', "
                             'T_max=10)')
    with pytest.raises(ValueError, match=r"^param_scheduler=\{'type': 'CosineAnnealingLR', "
                                         r"'T_max': 10\}: PhasedTrainLoop sets .* give "
                                         r'param_scheduler = None'):
        load_run_config(leaf, work_dir=str(tmp_path / 'run'))
    assert not (tmp_path / 'run').exists()


def test_a_loss_the_retriever_does_not_compute_is_refused_when_the_config_loads(tmp_path):
    """It was refused as the retriever built its losses, after the runner had made the work
    dir, and said nothing of the way to a loss of another name."""
    with pytest.raises(UserKeyError, match=(
            r"^CrossLingualRetriever: unknown losses \['mycl'\]; it computes \['cl', 'cm', "
            r"'source_cm'\]: a loss of another name needs a retriever that computes it, a "
            r'subclass whose LOSSES names it')):
        load_run_config(DEMO, cfg_options={'model.losses.mycl.type': 'AlignmentLoss'},
                        work_dir=str(tmp_path / 'run'))
    assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize('option, value, message', [
    ('val_evaluator.protocol', 'foo', r"^val_evaluator: unknown protocol 'foo'; choose one of "),
    ('val_evaluator.recall_ks', [0, 5], r'^val_evaluator: recall_ks must be positive integers'),
    ('test_evaluator.source_language', 'xx', r'^test_evaluator: RetrievalMetric '
     r"source_language: unknown language code 'xx'"),
])
def test_a_metric_value_its_constructor_refuses_is_named_by_its_key_as_the_config_loads(
        tmp_path, option, value, message):
    """The evaluator built its metrics as the first validation or test began, after the runner
    had made the work dir (a source_language slipped past the language-code check, which reads
    keys ending in 'languages'); the message named no key."""
    with pytest.raises(ValueError, match=message):
        load_run_config(DEMO, cfg_options={option: value}, work_dir=str(tmp_path / 'run'))
    assert not (tmp_path / 'run').exists()


def test_a_misspelt_optimiser_constructor_is_refused_when_the_config_loads():
    """MMEngine looked it up as the runner built the optimiser, after making the work dir;
    every other registry's typo was refused as the config loaded."""
    with pytest.raises(UserKeyError, match=(
            r"^optim_wrapper\.constructor: 'PhasedOptimWrapperConstructr' is not a registered "
            r"type in the xmr 'optimizer wrapper constructor' registry\. Closest registered "
            r'names: PhasedOptimWrapperConstructor')):
        load_run_config(DEMO, cfg_options={
            'optim_wrapper.constructor': 'PhasedOptimWrapperConstructr'})


def test_a_seed_that_is_no_integer_is_refused_when_the_config_loads():
    with pytest.raises(ValueError, match=r"randomness.seed='abc' must be an integer from 0 to "
                       r'2\*\*32 - 1 \(or None'):
        load_run_config(DEMO, cfg_options={'randomness.seed': 'abc'})
    with pytest.raises(ValueError, match=r"randomness.seed=True must be an integer"):
        load_run_config(DEMO, cfg_options={'randomness.seed': True})  # a bool is no seed
    # NumPy's range: its error, as the runner seeded, named no key.
    for seed in (-1, 2**32):
        with pytest.raises(ValueError, match=rf'randomness.seed={seed} must be an integer'):
            load_run_config(DEMO, cfg_options={'randomness.seed': seed})
    assert load_run_config(DEMO, cfg_options={'randomness.seed': 7}).randomness.seed == 7
    assert load_run_config(DEMO, cfg_options={'randomness.seed': 2**32 - 1})


@pytest.mark.parametrize('option', ['drop_last', 'shuffle'])
def test_a_batch_samplers_loader_refuses_options_torch_takes_only_without_one(option):
    """torch refused them as the runner built the loader, naming neither loader nor option."""
    config = 'xmr::dasd/dasd_clip-vit-b32_multi30k_clft.py'
    assert load_run_config(config).train_dataloader.batch_sampler
    with pytest.raises(ValueError, match=(
            rf'^train_dataloader.{option}=True: its batch_sampler makes the batches, and torch '
            rf'takes no {option} beside one: drop it')):
        load_run_config(config, cfg_options={f'train_dataloader.{option}': True})
    load_run_config(config, cfg_options={f'train_dataloader.{option}': False})


@pytest.mark.parametrize('option, message', [
    ('train_dataloader.dataset.num_scene', "dataset SyntheticPairDataset: unknown option "
     "'num_scene' \\(did you mean 'num_scenes'\\?\\); it takes num_scenes, languages"),
    ('source_finetune_dataloader.dataset.seeds', "dataset SyntheticPairDataset: unknown option "
     "'seeds' \\(did you mean 'seed'\\?\\)"),
    ('val_evaluator.topk', "metric RetrievalMetric: unknown option 'topk'; it takes languages, "),
    ('test_evaluator.recall_k', "metric RetrievalMetric: unknown option 'recall_k' \\(did you "
     "mean 'recall_ks'\\?\\)"),
])
def test_a_misspelt_option_of_a_dataset_or_metric_is_refused_when_the_config_loads(option,
                                                                                 message):
    """The runner builds datasets and metrics as their loop starts, after the source
    finetune for a validation, with a bare TypeError."""
    with pytest.raises(UnknownOptionError, match=message):
        load_run_config(DEMO, cfg_options={option: 3})


def test_the_datasets_of_a_list_of_loaders_and_of_a_phase_are_checked(tmp_path):
    child = tmp_path / 'child.py'
    loader = "dict(batch_size=2, dataset=dict(type='SyntheticRetrievalDataset', split='val', {}))"
    child.write_text(f"_base_ = ['{DEMO}']\n"
                     f"val_dataloader = [{loader.format('num_scenes=4')}, "
                     f"{loader.format('num_scenes=4, captions=2')}]\n")
    with pytest.raises(UnknownOptionError, match="SyntheticRetrievalDataset: unknown option "
                       "'captions' \\(did you mean 'captions_per_image'\\?\\)"):
        load_run_config(child)
    child.write_text(f"_base_ = ['{DEMO}']\n"
                     f"train_cfg = dict(phases=[dict(_base_.train_cfg.phases[0], dataloader="
                     f"{loader.format('scenes=4')})])\n")
    with pytest.raises(UnknownOptionError, match="unknown option 'scenes'"):
        load_run_config(child)


def test_an_option_a_dataset_hands_on_to_its_base_is_checked_too():
    """CaptionPairDataset and RetrievalDataset pass ``**kwargs`` to MediaCaptionDataset."""
    from xmr.registry import DATASETS

    for dataset in ('CaptionPairDataset', 'RetrievalDataset'):
        DATASETS.check_options(dict(type=dataset, ann_file='a.json', data_root='data'))
        with pytest.raises(UnknownOptionError, match=f"dataset {dataset}: unknown option "
                           "'indices'; it takes ann_file, .*data_root, data_prefix"):
            DATASETS.check_options(dict(type=dataset, ann_file='a.json', indices=8))


def test_a_delete_left_in_a_list_item_is_named_when_the_config_loads(tmp_path):
    child = tmp_path / 'child.py'
    child.write_text(f"_base_ = ['{DEMO}']\nval_evaluator = dict(_delete_=True, "
                     "type='RetrievalMetric')\ntest_evaluator = [val_evaluator]\n")
    with pytest.raises(UnknownOptionError, match=(
            "^metric RetrievalMetric: _delete_ reached it: MMEngine applies it where a dict "
            "merges into its base's, and leaves it in a list's items; drop it there$")):
        load_run_config(child)


@pytest.mark.parametrize('option, value, message', [
    ('train_dataloader.batch_size', 0, r'^train_dataloader.batch_size=0 must be a positive '
     r'integer \(per process\)$'),
    ('source_finetune_dataloader.batch_size', 2.5, r'^source_finetune_dataloader.batch_size=2.5'),
    ('test_dataloader.batch_size', True, r'^test_dataloader.batch_size=True must be'),
    ('val_dataloader.num_workers', -1, r'^val_dataloader.num_workers=-1 must be an integer >= 0 '
     r'\(0: load in the main process\)$'),
    ('optim_wrapper.optimizer.lr', -2e-3, r"^optim_wrapper.optimizer.lr=-0.002 must be a number "
     r">= 0 \(a phase's own lr, train_cfg.phases.N.lr, replaces it"),
    # list index out of range; Invalid weight_decay value: -1
    ('optim_wrapper.optimizer.betas', [0.9], r"^optim_wrapper.optimizer: AdamW refuses its "
     r"options \{'lr': 0.002, 'betas': \[0.9\], .*\}: IndexError: list index out of range$"),
    ('optim_wrapper.optimizer.weight_decay', -1, r'^optim_wrapper.optimizer: AdamW refuses its '
     r"options .*'weight_decay': -1\}: ValueError: Invalid weight_decay value: -1$"),
])
def test_a_loader_count_or_learning_rate_torch_refuses_is_named_by_its_key(option, value,
                                                                           message):
    """torch's errors (batch_size=0, num_workers=-1, Invalid learning rate: -0.002) name
    neither loader nor key, and come as the runner builds the loader or optimiser."""
    with pytest.raises(ValueError, match=message):
        load_run_config(DEMO, cfg_options={option: value})


def test_the_optimiser_s_device_options_are_left_to_the_run_s_device():
    """Built on a CPU parameter as the config loads, fused=True would be refused wherever the
    run is to train on a GPU."""
    load_run_config(DEMO, cfg_options={'optim_wrapper.optimizer.fused': True})


def test_a_shipped_loader_given_no_workers_names_its_persistent_workers():
    """The shipped loaders keep persistent workers: ``num_workers=0`` alone (to debug in the
    main process) met torch's ``persistent_workers option needs num_workers > 0``, naming no
    loader, once the runner built it."""
    with pytest.raises(ValueError, match=(
            r'^text_train_dataloader.persistent_workers=True needs worker processes, and '
            r'text_train_dataloader.num_workers is 0: add '
            r'text_train_dataloader.persistent_workers=False$')):
        load_run_config(REPO / 'configs' / 'dasd' / 'dasd_clip-vit-b32_multi30k_clft.py',
                        cfg_options={'text_train_dataloader.num_workers': 0})


@pytest.mark.parametrize('option, value, fix', [('persistent_workers', True, False),
                                                ('prefetch_factor', 4, None)])
def test_an_option_of_workers_on_a_loader_without_workers_is_named_by_its_key(option, value,
                                                                              fix):
    with pytest.raises(ValueError, match=(
            rf'^val_dataloader.{option}={value} needs worker processes, and '
            rf'val_dataloader.num_workers is 0: add val_dataloader.{option}={fix}$')):
        load_run_config(DEMO, cfg_options={f'val_dataloader.{option}': value})


def test_the_batch_size_of_a_loader_in_a_list_or_a_phase_is_named_by_its_place(tmp_path):
    child = tmp_path / 'child.py'
    child.write_text(f"_base_ = ['{DEMO}']\n"
                     "val_dataloader = [_base_.val_dataloader, dict(_base_.val_dataloader, "
                     "batch_size=0)]\n")
    with pytest.raises(ValueError, match=r'^val_dataloader.1.batch_size=0 must be'):
        load_run_config(child)
    child.write_text(f"_base_ = ['{DEMO}']\ntrain_cfg = dict(phases=[dict("
                     "_base_.train_cfg.phases[0], dataloader=dict(_base_.train_dataloader, "
                     "batch_size=-1))])\n")
    with pytest.raises(ValueError, match=r'^train_cfg.phases.0.dataloader.batch_size=-1 must'):
        load_run_config(child)


@pytest.mark.parametrize('options, message', [
    ({'val_evaluator': None}, "^val_evaluator: is None while val_dataloader and val_cfg are "
     "set; the val loop needs all three: give val_evaluator = dict\\(type='RetrievalMetric'\\), "
     "or set all three to None$"),
    ({'test_cfg': None, 'test_evaluator': None}, "^test_evaluator, test_cfg: are None while "
     "test_dataloader is set; .* and test_cfg = dict\\(type='TestLoop'\\), or set all three"),
])
def test_a_validation_or_test_given_in_part_names_what_it_lacks(options, message):
    """MMEngine's runner printed the whole loader dict before the key at fault."""
    cfg = load_run_config(DEMO, cfg_options=options)  # tools that build no runner take it
    with pytest.raises(UserError, match=message):
        for split in ('val', 'test'):
            check_evaluation_keys(cfg, split)
    cfg = load_run_config(DEMO, cfg_options={'val_dataloader': None, 'val_evaluator': None,
                                             'val_cfg': None})
    check_evaluation_keys(cfg, 'val')


def test_an_option_for_a_misspelt_top_level_key_is_refused_and_a_new_key_is_taken():
    """MMEngine adds ``train_dataloder`` as a new key, which the runner never reads."""
    with pytest.raises(UserError, match=(
            r"^--cfg-options train_dataloder.batch_size: the config has no key 'train_dataloder' "
            r"\(did you mean 'train_dataloader'\?\), so nothing would read it: correct the key")):
        load_run_config(DEMO, cfg_options={'train_dataloder.batch_size': 8})
    with pytest.raises(UserError, match="no key 'val_evalutor' \\(did you mean 'val_evaluator'"):
        load_run_config(DEMO, cfg_options={'val_evalutor.languages': ['en']})
    with pytest.raises(UserError, match="no key 'modle' \\(did you mean 'model'"):
        load_run_config(DEMO, cfg_options={'modle.backbone.arch': 'ViT-B-32'})
    # Inside a dict of no type, whose options no type checks.
    with pytest.raises(UserError, match=(
            r"^--cfg-options env_cfg.cudnn_benchmrk: env_cfg has no key 'cudnn_benchmrk' "
            r"\(did you mean 'cudnn_benchmark'\?\)")):
        load_run_config(DEMO, cfg_options={'env_cfg.cudnn_benchmrk': True})
    assert load_run_config(DEMO, cfg_options={'cpu_threads': 2}).cpu_threads == 2
    # A new key 80% like one the config holds is no typo of it: an extra loader for a phase.
    extra = load_run_config(DEMO, cfg_options={'text_train_dataloader.batch_size': 4})
    assert extra.text_train_dataloader.batch_size == 4


def test_an_option_adding_a_top_level_value_nothing_reads_is_refused():
    """``lambda_align=0.1``, a variable of an older config, was added and read by nothing."""
    with pytest.raises(UserError, match=(
            r"^--cfg-options lambda_align: the config has no top-level key 'lambda_align', so "
            r"nothing reads the value 0.1 it would add: set the key where the value is used")):
        load_run_config(DEMO, cfg_options={'lambda_align': 0.1})
    # Read by the runner or by xmr: taken.
    cfg = load_run_config(DEMO, cfg_options={'experiment_name': 'e', 'cpu_threads': 1})
    assert (cfg.experiment_name, cfg.cpu_threads) == ('e', 1)


def test_a_misspelt_dataloader_option_is_refused_naming_the_loader():
    """torch's DataLoader refused it as the runner built it, naming no loader."""
    with pytest.raises(UnknownOptionError, match=(
            r"^source_finetune_dataloader: unknown option 'batch_szie' \(did you mean "
            r"'batch_size'\?\); a dataloader takes dataset, batch_size, ")):
        load_run_config(DEMO, cfg_options={'source_finetune_dataloader.batch_szie': 8})
    load_run_config(DEMO, cfg_options={'train_dataloader.num_batch_per_epoch': 8,
                                       'train_dataloader.pin_memory': True})


def test_a_base_that_names_no_file_is_named_with_the_config_that_lists_it(tmp_path):
    """MMEngine named the resolved path alone; a shipped config copied into a project keeps
    its relative bases, which xmr:: reaches."""
    copied = tmp_path / 'mine.py'
    copied.write_text((REPO / 'configs' / 'demo' / 'dasd_tiny-clip_synthetic.py').read_text())
    with pytest.raises(UserError, match=(
            f"^{copied}: _base_ './static_tiny-clip_synthetic.py' names no file "
            f"\\({tmp_path}/static_tiny-clip_synthetic.py\\): a config outside xmr's configs/ "
            "names xmr's as 'xmr::demo/static_tiny-clip_synthetic.py': _base_ = "
            "\\['xmr::demo/static_tiny-clip_synthetic.py', 'xmr::_base_/models/dasd_sdm.py'\\]$")):
        load_run_config(copied)
    (tmp_path / 'base_one.py').write_text('x = 1\n')
    copied.write_text("_base_ = ['./base_on.py']\n")
    with pytest.raises(UserError, match=(
            f"^{copied}: _base_ './base_on.py' names no file \\({tmp_path}/base_on.py\\) "
            "\\(did you mean 'base_one.py'\\?\\): correct it: a relative path starts at the "
            "folder of mine.py$")):
        load_run_config(copied)


def test_a_child_config_that_overlays_a_list_by_index_is_told_the_ways_that_work(tmp_path):
    """The ablation rows' form; MMEngine advised _delete_=True, which drops the base's list."""
    child = tmp_path / 'child.py'
    child.write_text(f"_base_ = ['{DEMO}']\ntrain_cfg = dict(phases={{'1': dict(lr=1e-4)}})\n")
    with pytest.raises(UserError, match=(
            f"^{child}: phases={{'1': ...}} overlays a list of its base by index, which only "
            "--ablation rows do; a child config replaces a list whole: restate the list with "
            r"each item \(dict\(_base_.<...>.phases\[1\], lr=...\)\), or change one key with "
            r"--cfg-options <...>.phases.1.lr=...$")):
        load_run_config(child)
    child.write_text(f"_base_ = ['{DEMO}']\ntrain_cfg = dict(phases=dict(lr=1e-4))\n")
    with pytest.raises(TypeError, match='is a dict in the child config'):  # MMEngine's own
        load_run_config(child)


def test_an_index_written_as_a_number_is_told_the_same_ways(tmp_path):
    """``phases={1: ...}`` (to make one's own loss trainable in a phase) got MMEngine's bare
    TypeError and its ``_delete_=True`` advice, the config file unnamed."""
    child = tmp_path / 'child.py'
    child.write_text(f"_base_ = ['{DEMO}']\n"
                     "train_cfg = dict(phases={1: dict(trainable=['target', 'losses.cl'])})\n")
    with pytest.raises(UserError, match=(
            f"^{child}: phases={{1: ...}} overlays a list of its base by index, which only "
            "--ablation rows do; a child config replaces a list whole: restate the list with "
            r"each item \(dict\(_base_.<...>.phases\[1\], lr=...\)\), or change one key with "
            r"--cfg-options <...>.phases.1.lr=...$")):
        load_run_config(child)


def test_a_learning_rate_that_is_not_a_number_is_refused_by_its_key():
    """``nan >= 0`` is false as ``-1 >= 0`` is: torch takes a NaN lr and every step is NaN."""
    with pytest.raises(ValueError, match=r'^optim_wrapper.optimizer.lr=nan must be a number >= 0'):
        load_run_config(DEMO, cfg_options={'optim_wrapper.optimizer.lr': float('nan')})


@pytest.mark.parametrize('word, keys, meant', [
    ('cudnn_benchmrk', ['cudnn_benchmark'], 'cudnn_benchmark'),  # a character dropped
    ('tpye', ['type'], 'type'),  # two swapped
    ('momentun', ['nesterov', 'momentum'], 'momentum'),  # one replaced
    ('num_workers_x', ['num_workers'], 'num_workers'),  # two added, but 22/24 alike
    ('tpe', ['type'], None),  # one edit, but of three characters, and 6/7 alike
    ('top', ['tip'], None),
    ('lrr', ['lr'], None),
])
def test_a_typo_is_one_edit_from_a_key_of_four_characters_or_nine_tenths_alike(word, keys,
                                                                               meant):
    assert _typo_of(word, keys) == meant


@pytest.mark.parametrize('child, message', [
    ("test_evaluator = dict(type='Evaluator', metrics=[dict(type='RetrievalMetric', "
     "recall_k=3)])", "^metric RetrievalMetric: unknown option 'recall_k'"),
    ('train_dataloader = dict(sampler=dict(shufle=False))',
     "^data sampler DefaultSampler: unknown option 'shufle' \\(did you mean 'shuffle'\\?\\)"),
])
def test_a_misspelt_option_of_an_evaluators_metric_or_a_loaders_sampler_is_refused(
        tmp_path, child, message):
    config = tmp_path / 'child.py'
    config.write_text(f"_base_ = ['{DEMO}']\n{child}\n")
    with pytest.raises(UnknownOptionError, match=message):
        load_run_config(config)


@pytest.mark.parametrize('option, message', [
    ("train_cfg.phases=[dict(name='a',iters=2)]",
     r"argument --cfg-options: \"train_cfg.phases=\[dict\(name='a',iters=2\)\]\": "
     r"--cfg-options reads plain values and lists or tuples of them .* set a dict's keys one "
     r'at a time \(train_cfg.phases.0.iters=2; KEY._delete_=True first'),
    # Kept as text by MMEngine: each passed the config's checks and failed in the runner.
    ('optim_wrapper.clip_grad=dict(max_norm=1.0)',
     r"'optim_wrapper.clip_grad=dict\(max_norm=1.0\)': --cfg-options reads plain values"),
    ("optim_wrapper.clip_grad={'max_norm':1.0}", r'not dict\(...\), \{...\} or other calls'),
    ('custom_hooks=[dict(type=EarlyStoppingHook)]', r'not dict\(...\), \{...\} or other calls'),
    ("model.x=({'a':1},2)", r'not dict\(...\), \{...\} or other calls'),  # inside a tuple
    ('train_cfg', r"argument --cfg-options: 'train_cfg' is no KEY=VALUE"),
    # An empty key was set, and the one line of its error was the whole config.
    ('=5', r"argument --cfg-options: '=5': its KEY has an empty part; write it as a.b.c"),
    ('train_cfg..val_interval=2', r"'train_cfg..val_interval=2': its KEY has an empty part"),
    ('model.language_branch.languages=[de,fr', r"'model.language_branch.languages=\[de,fr': its "
     r'brackets do not pair up'),
])
def test_a_config_option_mmengines_parser_cannot_read_is_refused_by_name(option, message,
                                                                        capsys):
    """MMEngine's parser recursed without end on dict(...) inside brackets, kept dict(k=v) and
    {k: v} as text, and failed on an item without '=' with Python's unpacking error, naming
    neither."""
    import argparse

    from xmr.run_config import add_config_arguments

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args(['--cfg-options', 'model.x=1', option])
    assert stopped.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert parser.parse_args(['--cfg-options', 'a.b=[de,fr]', 'c=(1,2)']).cfg_options == {
        'a.b': ['de', 'fr'], 'c': (1, 2)}
    # Spaces inside brackets are MMEngine's to drop (an item keeps none), beside a text's own.
    assert parser.parse_args(['--cfg-options', 'a=[ de ]', 'b=( 1 )', 'c=a photo of']
                             ).cfg_options == {'a': ['de'], 'b': (1,), 'c': 'a photo of'}


def test_a_config_option_keeps_the_spaces_of_a_plain_value():
    """MMEngine's parser deletes every space: a prompt's 'a photo of' became 'aphotoof' and
    work_dir=/tmp/my runs went to /tmp/myruns; lists keep MMEngine's reading."""
    import argparse

    from xmr.run_config import add_config_arguments

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    given = ['text=a photo of', "quoted='a photo of'", 'work_dir=/tmp/my runs', 'n= 5 ',
             'langs=[de, fr]', 'pair=de, fr', 'flag= True']
    assert parser.parse_args(['--cfg-options', *given]).cfg_options == {
        'text': 'a photo of', 'quoted': 'a photo of', 'work_dir': '/tmp/my runs', 'n': 5,
        'langs': ['de', 'fr'], 'pair': ['de', 'fr'], 'flag': True}


@pytest.mark.parametrize('option, value, message', [
    ('train_dataloader.sampler.shuffle', 'False', r"^data sampler DefaultSampler: option "
     r"shuffle='False' must be True or False \(its default is True\)$"),
    ('default_hooks.checkpoint.save_last', 'no', r"^hook CheckpointHook: option save_last='no' "
     r'must be True or False'),
    ('optim_wrapper.optimizer.betas', 0.9, r'^optimizer AdamW: option betas=0.9 must be a list '
     r'or tuple \(its default is \(0.9, 0.999\)\)$'),
    # Annotated a sequence of strings, with None or no default: refused once built.
    ('val_evaluator.languages', 'en', r"^metric RetrievalMetric: option languages='en' must be "
     r"a list or tuple \(\['en'\] for one\) \(its default is None\)$"),
    ('train_dataloader.dataset.languages', 'de', r"^dataset SyntheticPairDataset: option "
     r"languages='de' must be a list or tuple \(\['de'\] for one\) \(it has no default\)$"),
])
def test_a_value_of_another_kind_than_the_options_default_is_refused_when_the_config_loads(
        option, value, message):
    """A word is truthy (shuffle='False' shuffled), and torch's optimiser reads betas=0.9 at
    its build with "'float' object is not subscriptable", naming no key; a word where a list
    of languages goes was refused by the built metric or dataset, after the work dir."""
    with pytest.raises(ValueError, match=message):
        load_run_config(DEMO, cfg_options={option: value})


def test_a_misspelt_option_of_the_optimiser_wrapper_is_refused_when_the_config_loads():
    """Python's TypeError, as the runner built the wrapper, named no key."""
    with pytest.raises(UnknownOptionError, match="^optim_wrapper OptimWrapper: unknown option "
                       "'accumulative_count' \\(did you mean 'accumulative_counts'\\?\\)"):
        load_run_config(DEMO, cfg_options={'optim_wrapper.accumulative_count': 2})
    autocast = {'optim_wrapper.type': 'AutocastOptimWrapper', 'optim_wrapper.compiled_step': None,
                'optim_wrapper.accumulative_counts': 2}
    assert load_run_config(DEMO, cfg_options=autocast).optim_wrapper.accumulative_counts == 2
    with pytest.raises(UnknownOptionError, match="unknown option 'loss_scal' "):
        load_run_config(DEMO, cfg_options={**autocast, 'optim_wrapper.loss_scal': {}})


def test_a_misspelt_option_of_a_pectvlm_model_is_refused_when_the_config_loads(tmp_path):
    """TranslationAlignmentRetriever hands its ``**kwargs`` to CrossLingualRetriever, whose
    TypeError, as the runner built the model, named no key."""
    child = tmp_path / 'child.py'
    child.write_text("_base_ = ['xmr::pectvlm/lora-r1_mclip-xlmr-l14_xtd10-fewshot50_routine3_"
                     "de.py']\nmodel = dict(loss=dict(cm=dict(type='InfoNCELoss')))\n")
    with pytest.raises(UnknownOptionError, match="^model TranslationAlignmentRetriever: unknown "
                       "option 'loss' \\(did you mean 'losses'\\?\\); it takes routine, "):
        load_run_config(child)


def test_two_phases_of_one_name_are_refused_when_the_config_loads():
    with pytest.raises(ValueError, match=r"^train_cfg.phases.1 and train_cfg.phases.2 are both "
                                         r"named 'cross_lingual'"):
        load_run_config(DEMO, cfg_options={'train_cfg.phases.2.name': 'cross_lingual'})


def test_an_option_one_letter_from_type_is_the_types_to_judge():
    """'dtype' (AutocastOptimWrapper's) was refused as a typo of 'type'; the type's options
    tell a new key from a misspelt one."""
    cfg = load_run_config(DEMO, cfg_options={'optim_wrapper.type': 'AutocastOptimWrapper',
                                             'optim_wrapper.dtype': 'bfloat16'})
    assert cfg.optim_wrapper.dtype == 'bfloat16'
    with pytest.raises(UnknownOptionError, match="unknown option 'tpye' \\(did you mean "
                                                 "'type'\\?\\)"):
        load_run_config(DEMO, cfg_options={'optim_wrapper.tpye': 'AutocastOptimWrapper'})


@pytest.mark.parametrize('option, value, message', [
    ('default_hooks.logger.interval', 0, r'^default_hooks.logger.interval=0 must be a positive '
     r'integer \(iterations between two logs\)$'),
    ('default_hooks.checkpoint.rule', 'higher', r"^default_hooks.checkpoint.rule='higher': a "
     r"rule is 'greater'"),
    ('default_hooks.checkpoint.rule', ['greater', 'more'], r"rule=\['greater', 'more'\]: a rule"),
    ('default_hooks.checkpoint.interval', 0, r'^default_hooks.checkpoint.interval=0 must be a '
     r'positive integer \(iterations\), dict\(epochs=E\), or -1 for no periodic checkpoint '
     r'\(save_last still saves the last\): MMEngine reads any value below 1 as -1$'),
    ('default_hooks.checkpoint.interval', -5, r'^default_hooks.checkpoint.interval=-5 must be'),
    ('default_hooks.checkpoint.max_keep_ckpts', 0, r'^default_hooks.checkpoint.max_keep_ckpts=0 '
     r'must be a positive integer, or -1 for keep every checkpoint: MMEngine reads any value '
     r'below 1 as -1$'),
    ('default_hooks.checkpoint.save_begin', -1, r'save_begin=-1 must be an integer >= 0$'),
    ('default_hooks.checkpoint.by_epoch', True, r'^default_hooks.checkpoint.by_epoch=True, but '
     r'the train loop PhasedTrainLoop counts iterations .* set '
     r'default_hooks.checkpoint.by_epoch=False'),
])
def test_a_value_mmengines_logger_or_checkpoint_hook_refuses_or_ignores_is_named_by_its_key(
        option, value, message):
    """MMEngine refuses the first three as the runner builds the hooks, naming no key (a rule's
    as an unexpected KeyError); it reads an interval or max_keep_ckpts below 1 as 'never' and
    'no limit', and a loop of iterations never ends the epochs by_epoch checkpoints count."""
    with pytest.raises(ValueError, match=message):
        load_run_config(DEMO, cfg_options={option: value})


def test_the_values_mmengines_hooks_document_are_taken():
    cfg = load_run_config(DEMO, cfg_options={'default_hooks.checkpoint.interval': -1,
                                             'default_hooks.checkpoint.max_keep_ckpts': -1,
                                             'default_hooks.checkpoint.rule': None,
                                             'default_hooks.logger.interval': 1})
    assert cfg.default_hooks.checkpoint.interval == -1
    load_run_config(DEMO, cfg_options={'default_hooks.checkpoint.rule': ['less'],
                                       'default_hooks.checkpoint.save_begin': 0})


EPOCH_OPTIONS = {'default_hooks.checkpoint.interval._delete_': True,
                 'default_hooks.checkpoint.interval.epochs': 0.5,
                 'train_cfg.val_interval._delete_': True, 'train_cfg.val_interval.epochs': 1}


def test_counts_in_epochs_are_taken_where_the_phased_loop_resolves_them():
    cfg = load_run_config(DEMO, cfg_options=EPOCH_OPTIONS)
    assert cfg.default_hooks.checkpoint.interval == dict(epochs=0.5)
    assert cfg.train_cfg.val_interval == dict(epochs=1)


@pytest.mark.parametrize('key', ['default_hooks.checkpoint.interval', 'train_cfg.val_interval'])
def test_a_count_in_epochs_is_refused_as_the_config_loads_under_another_loop_or_malformed(key):
    with pytest.raises(ValueError, match=rf"^{key}={{'epochs': 0}}: a count in epochs is "
                                         r'dict\(epochs=E\), E a positive number'):
        load_run_config(DEMO, cfg_options={f'{key}._delete_': True, f'{key}.epochs': 0})
    # A new train_cfg holds no val_interval to delete; the runtime's checkpoint interval is 1000.
    options = {f'{key}.epochs': 1, **({f'{key}._delete_': True} if 'hooks' in key else {})}
    with pytest.raises(ValueError, match=rf"^{key}={{'epochs': 1}}: a count in epochs is "
                                         r'resolved by PhasedTrainLoop, and train_cfg\'s loop '
                                         r'is IterBasedTrainLoop; give iterations'):
        load_run_config(DEMO, cfg_options={'train_cfg._delete_': True,
                                           'train_cfg.type': 'IterBasedTrainLoop',
                                           'train_cfg.max_iters': 10, **options})


@pytest.mark.parametrize('option', ['resume=no', 'randomness.deterministic=off',
                                    'randomness.diff_rank_seed=none', 'env_cfg.cudnn_benchmark=0',
                                    'log_processor.by_epoch=no'])
def test_a_word_for_a_runner_flag_is_refused_when_the_config_loads(option):
    """--cfg-options reads True, False and None alone: resume=no was the text 'no', which
    tools/train.py read as resume=True (the work dir's latest checkpoint), and MMEngine's
    runner read deterministic=off as deterministic."""
    import argparse

    from xmr.run_config import add_config_arguments

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    options = parser.parse_args(['--cfg-options', option]).cfg_options
    key, _, word = option.partition('=')
    shown = repr(int(word)) if word.isdigit() else repr(word)
    with pytest.raises(ValueError, match=rf'^{re.escape(key)}={shown} must be True or False '
                       rf'\(.*\): --cfg-options {re.escape(key)}=False$'):
        load_run_config(DEMO, cfg_options=options)
    for taken in ('false', 'True', 'None'):
        load_run_config(DEMO, cfg_options=parser.parse_args(
            ['--cfg-options', f'{key}={taken}']).cfg_options)


CACHED_GALLERY = ("dict(type='CachedFeatureDataset', cache_dir='{cache}', dataset=dict("
                  "type='SyntheticRetrievalDataset', num_scenes=4, split='val', "
                  "image_size=32, languages=['de']))")


def cached_gallery_config(tmp_path, loaders: str) -> str:
    """The demo with ``loaders`` (its ``{gallery}`` a cached gallery), as config text."""
    return f"_base_ = ['{DEMO}']\n" + loaders.format(
        gallery=CACHED_GALLERY.format(cache=tmp_path / 'cache')) + '\n'


@pytest.mark.parametrize('split, loaders, key', [
    ('test', "test_dataloader = dict(dataset=dict(_delete_=True, **{gallery}))",
     'test_dataloader'),
    ('val', "val_dataloader = [_base_.val_dataloader, dict(_base_.val_dataloader, "
     "dataset={gallery})]", 'val_dataloader.1'),
])
def test_a_cached_gallery_without_the_hook_that_prepares_it_is_refused(tmp_path, split,
                                                                        loaders, key):
    """Found by its first item, the unprepared cache stopped training at its first validation,
    a whole phase in; any hook resolving to FeatureCacheHook (scoped, or in default_hooks)
    prepares it, and without the split's loop nothing reads it."""
    child = tmp_path / 'child.py'
    body = cached_gallery_config(tmp_path, loaders)
    child.write_text(body)
    with pytest.raises(ValueError, match=(
            f'^{re.escape(key)}.dataset is a CachedFeatureDataset, whose cache only '
            'FeatureCacheHook prepares before an evaluation, and the config has none: add '
            r"dict\(type='FeatureCacheHook'\) to custom_hooks$")):
        check_cached_galleries(load_run_config(child), split)
    for more in ("custom_hooks = [dict(type='xmr.FeatureCacheHook')]",
                 "default_hooks = dict(feature_cache=dict(type='FeatureCacheHook'))",
                 f'{split}_cfg = None'):
        child.write_text(body + more + '\n')
        check_cached_galleries(load_run_config(child), split)


@pytest.mark.parametrize('name, fix', [
    ('README.md', 'give the path of a .py config, such as '
                  'configs/demo/static_tiny-clip_synthetic.py'),
    ('iter_8.pth', 'give the config first, then the checkpoint: tools/test.py CONFIG CHECKPOINT'),
])
def test_a_file_that_is_no_config_is_named_with_the_fix(tmp_path, name, fix):
    """MMEngine's 'Only py/yml/yaml/json type are supported now!' named neither the file nor
    the fix (a checkpoint given before the config, say)."""
    (tmp_path / name).write_bytes(b'')
    with pytest.raises(UserError) as refused:
        load_run_config(tmp_path / name)
    assert str(refused.value) == (f'{tmp_path / name}: is no config file (a config is a .py, '
                                  f'.json, .yml, .yaml file): {fix}')


def test_every_launcher_option_says_what_it_is_in_the_help():
    """--local_rank stood in every tool's --help with no word on what it is or who gives it."""
    import argparse

    from xmr.run_config import add_launcher_arguments

    parser = argparse.ArgumentParser()
    add_launcher_arguments(parser, 'training')
    helps = {action.dest: action.help for action in parser._actions if action.dest != 'help'}
    assert helps['launcher'] == 'job launcher for distributed training'
    assert 'torch.distributed.launch passes' in helps['local_rank']


def test_the_annotation_files_of_the_splits_a_run_reads_are_checked_as_the_config_loads(
        tmp_path):
    """The runner builds a dataset after the model (minutes of pretrained weights), into a work
    dir it has written: a dataset not yet converted stopped the run there."""
    from mmengine.config import Config

    from xmr.run_config import check_annotation_files

    (tmp_path / 'annotations').mkdir()
    for name in ('train.json', 'val.json', 'test.json'):
        (tmp_path / 'annotations' / name).write_text('{}')

    def dataset(ann_file, data_root=str(tmp_path)):
        return dict(type='RetrievalDataset', data_root=data_root, ann_file=ann_file)

    cfg = Config(dict(
        train_dataloader=dict(dataset=dataset('annotations/train.json')),
        val_dataloader=[dict(dataset=dataset('annotations/val.json')),
                        dict(dataset=dataset(str(tmp_path / 'annotations' / 'val.json'),
                                             data_root='elsewhere'))],
        test_dataloader=dict(dataset=dataset('annotations/test.json')),
        train_cfg=dict(phases=[dict(name='a', dataloader=dict(dataset=dict(
            type='ConcatDataset', datasets=[dataset('annotations/train.json')])))])))
    check_annotation_files(cfg, ['train', 'val', 'test'])
    # A type that is no xmr annotation dataset reads its files its own way: not checked.
    cfg.train_dataloader.dataset.type = 'SyntheticRetrievalDataset'
    cfg.train_dataloader.dataset.ann_file = 'gone.json'
    check_annotation_files(cfg, ['train'])

    cfg.test_dataloader.dataset.ann_file = 'annotations/multi30k_test.json'
    check_annotation_files(cfg, ['train', 'val'])  # a run without a test reads no test file
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"annotation file not found: {tmp_path / 'annotations' / 'multi30k_test.json'} "
            '(test_dataloader.dataset.ann_file): check ann_file and data_root, or make it: '
            'multi30k_test.json is written by tools/data/prepare_multi30k.py')):
        check_annotation_files(cfg, ['test'])
    cfg.val_dataloader[1].dataset.ann_file = 'annotations/val.json'  # under 'elsewhere'
    with pytest.raises(FileNotFoundError, match=re.escape(
            'elsewhere/annotations/val.json (val_dataloader.1.dataset.ann_file)')):
        check_annotation_files(cfg, ['val'])
    cfg.train_cfg.phases[0].dataloader.dataset.datasets[0].ann_file = 'train2.json'
    with pytest.raises(FileNotFoundError, match=re.escape(
            '(train_cfg.phases.0.dataloader.dataset.datasets.0.ann_file)')):
        check_annotation_files(cfg, ['train'])


def test_only_the_loaders_a_run_builds_need_their_annotation_files(tmp_path):
    """A base config's loaders that no phase reads (CDDS Flickr30K inherits Multi30K's
    ``text_train_dataloader``; MSCOCO's helper ``coco_test_dataloader`` and
    ``test1k_fold_dataloaders``) refused training over files it never opens."""
    from mmengine.config import Config

    from xmr.run_config import check_annotation_files

    (tmp_path / 'train.json').write_text('{}')

    def loader(name):
        return dict(dataset=dict(type='RetrievalDataset', data_root=str(tmp_path),
                                 ann_file=name))

    cfg = Config(dict(
        train_dataloader=loader('train.json'), text_train_dataloader=loader('text.json'),
        coco_test_dataloader=loader('test5k.json'),
        test1k_fold_dataloaders=[loader('fold0.json')],
        train_cfg=dict(phases=[dict(name='a')])))
    check_annotation_files(cfg, ['train', 'val'])
    cfg.train_cfg.phases.append(dict(name='b', dataloader='text_train_dataloader'))
    with pytest.raises(FileNotFoundError, match=re.escape(
            '(text_train_dataloader.dataset.ann_file)')):
        check_annotation_files(cfg, ['train'])
    cfg.train_cfg.phases.pop()
    cfg.custom_hooks = [dict(type='CDDSCorrelationHook', dataloader=loader('refresh.json'))]
    with pytest.raises(FileNotFoundError, match=re.escape(
            '(custom_hooks.0.dataloader.dataset.ann_file)')):
        check_annotation_files(cfg, ['train'])
    cfg.test_dataloader = [loader('train.json'), cfg.coco_test_dataloader]
    with pytest.raises(FileNotFoundError, match=re.escape(
            '(test_dataloader.1.dataset.ann_file)')):
        check_annotation_files(cfg, ['test'])


def test_an_option_setting_a_variable_the_config_copied_where_it_is_used_is_refused(tmp_path):
    """MMEngine's merge changed the variable alone: the keys kept the copies the config made as
    it loaded (a data_root in every dataset), and the run read the old data. Text no key
    repeats, and numbers, which meet their equals by chance (the decay's 0.05 is also the
    warm-up ratio), are set as asked."""
    base = tmp_path / 'base.py'
    base.write_text(f"_base_ = ['{DEMO}']\nnote = 'a run'\nscenes = 1000\nsplit = 'test'\n"
                    "decay = 0.05\noptim_wrapper = dict(optimizer=dict(weight_decay=decay))\n"
                    "test_dataloader = dict(dataset=dict(split=split))\n")
    with pytest.raises(UserError, match=re.escape(
            "--cfg-options split: split is a variable of the config, whose value 'test' was "
            'copied where the config uses it as it loaded (test_dataloader.dataset.split): '
            'changing split now changes none of them: set those keys instead '
            "(test_dataloader.dataset.split='val' ...)")):
        load_run_config(base, cfg_options={'split': 'val'})
    cfg = load_run_config(base, cfg_options={'note': 'another run', 'scenes': 5, 'decay': 0.1,
                                             'test_dataloader.dataset.split': 'val'})
    assert (cfg.note, cfg.scenes, cfg.decay, cfg.test_dataloader.dataset.split) == (
        'another run', 5, 0.1, 'val')
    # Set to the value it has (a script passing it always): nothing changes, nothing refused.
    assert load_run_config(base, cfg_options={'split': 'test'}).test_dataloader.dataset.split \
        == 'test'


@pytest.mark.parametrize('line, key, meant', [
    ('optim_wraper = dict(optimizer=dict(weight_decay=0.5))', 'optim_wraper', 'optim_wrapper'),
    ('randomnes = dict(seed=123)', 'randomnes', 'randomness'),
    ('default_hook = dict(checkpoint=dict(interval=50))', 'default_hook', 'default_hooks'),
    ("custom_hook = [dict(type='EMAHook')]", 'custom_hook', 'custom_hooks'),
    ('cpu_thread = 1', 'cpu_thread', 'cpu_threads')])
def test_a_top_level_key_one_edit_from_a_read_one_is_refused(tmp_path, line, key, meant):
    """Nothing read it, and the run kept the base's value (the decay, the seed, the hooks)."""
    leaf = tmp_path / 'leaf.py'
    leaf.write_text(f"_base_ = ['{DEMO}']\n{line}\n")
    message = (f"is read by nothing (did you mean '{meant}'?): {meant} keeps the value it has "
               'without it: correct the key')
    with pytest.raises(UserError, match=re.escape(f"{leaf}: the top-level key '{key}' {message}")):
        load_run_config(leaf)
    # Brought by a row, the row is named, not the config it was run with.
    row = tmp_path / 'row.py'
    row.write_text(f'{line}\n')
    with pytest.raises(UserError, match=re.escape(
            f"--ablation {row}: the top-level key '{key}' {message}")):
        load_run_config(DEMO, ablations=[str(row)])
    if meant not in load_run_config(DEMO):  # else the option's own check names it
        with pytest.raises(UserError, match=re.escape(
                f"--cfg-options {key}: the top-level key '{key}' {message}")):
            load_run_config(DEMO, cfg_options={key: 1})


def test_variables_of_the_config_far_from_a_read_key_are_taken(tmp_path):
    leaf = tmp_path / 'leaf.py'
    leaf.write_text(f"_base_ = ['{DEMO}']\nzh_val_dataloader = None\nmodels = None\n"
                    "cpu_threads = 1\n")
    with pytest.raises(UserError, match="the top-level key 'models'"):
        load_run_config(leaf)
    leaf.write_text(f"_base_ = ['{DEMO}']\nzh_val_dataloader = None\ncpu_threads = 1\n")
    assert load_run_config(leaf).cpu_threads == 1
    # One edit from a runner key, yet read: named by a phase, or copied where it is used.
    leaf.write_text(
        f"_base_ = ['{DEMO}']\ntext_dataloader = _base_.train_dataloader\n"
        "train_cfg = dict(phases=[_base_.train_cfg.phases[0], dict(_base_.train_cfg.phases[1], "
        "dataloader='text_dataloader'), _base_.train_cfg.phases[2]])\n"
        "text_cfg = dict(width=32)\nnotes = dict(text=text_cfg)\n")
    cfg = load_run_config(leaf)
    assert cfg.train_cfg.phases[1].dataloader == 'text_dataloader' and cfg.text_cfg.width == 32


def test_the_optimisers_lr_as_an_option_is_refused_under_the_phased_loop():
    """The phases set every group's rate: the option's rate was read by nothing, while the
    dumped config recorded it. Outside the phased loop it is MMEngine's rate, and taken."""
    with pytest.raises(UserError, match=re.escape(
            "--cfg-options optim_wrapper.optimizer.lr: PhasedTrainLoop sets every group's "
            "learning rate from its phase's lr at every iteration and never reads the "
            "optimiser's (the phases': 0: source_finetune 0.002, 1: cross_lingual 0.002, 2: "
            "cross_modal 0.0001): set train_cfg.phases.N.lr=... instead")):
        load_run_config(DEMO, cfg_options={'optim_wrapper.optimizer.lr': 1e-7})
    cfg = load_run_config(DEMO, cfg_options={'train_cfg.phases.1.lr': 1e-3})
    assert cfg.train_cfg.phases[1].lr == 1e-3


def test_an_option_setting_a_list_or_dict_variable_or_a_key_inside_one_is_refused(tmp_path):
    """target_langs=[de] left the model and the loaders on the config's languages, and
    data_prefix.media=images every loader on its folder: lists and dicts are copied too."""
    base = tmp_path / 'base.py'
    base.write_text(f"_base_ = ['{DEMO}']\nlangs = ['de', 'fr']\nprefix = dict(media='img')\n"
                    "empty = []\nrun = dict(languages=langs, data_prefix=prefix, none=empty, "
                    "tags=['x'])\n")
    with pytest.raises(UserError, match=re.escape(
            "--cfg-options langs: langs is a variable of the config, whose value ['de', 'fr'] "
            'was copied where the config uses it as it loaded (run.languages): changing langs '
            "now changes none of them: set those keys instead (run.languages=['de'] ...)")):
        load_run_config(base, cfg_options={'langs': ['de']})
    with pytest.raises(UserError, match=re.escape(
            "--cfg-options prefix.media: prefix is a variable of the config, whose value "
            "{'media': 'img'} was copied where the config uses it as it loaded "
            '(run.data_prefix): changing prefix.media now changes none of them: set those keys '
            "instead (run.data_prefix.media='images' ...)")):
        load_run_config(base, cfg_options={'prefix.media': 'images'})
    # Unchanged values, empty lists (which meet their equals by chance) and keys inside the
    # copies themselves are set as asked.
    cfg = load_run_config(base, cfg_options={
        'langs': ['de', 'fr'], 'prefix.media': 'img', 'empty': ['x'],
        'run.languages': ['de'], 'run.data_prefix.media': 'images'})
    assert (cfg.empty, cfg.run.languages, cfg.run.data_prefix.media) == (['x'], ['de'], 'images')


def test_custom_imports_given_as_one_name_import_that_module(tmp_path, monkeypatch):
    """MMEngine takes ``imports='my_module'`` as a list of one; read letter by letter it would
    import ``m``, ``y``, ..."""
    (tmp_path / 'my_single_module.py').write_text('IMPORTED = True\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / 'config.py'
    config.write_text(f"_base_ = ['{DEMO}']\n"
                      "custom_imports = dict(imports='my_single_module', "
                      'allow_failed_imports=False)\n')
    try:
        load_run_config(config, work_dir=str(tmp_path / 'work'))
        assert sys.modules['my_single_module'].IMPORTED
    finally:
        sys.modules.pop('my_single_module', None)


def test_a_list_overlaid_on_every_item_is_told_to_restate_or_index_one(tmp_path):
    """``{'*': ...}`` is an ablation row's form for every item; the ways out name an index."""
    child = tmp_path / 'child.py'
    child.write_text(f"_base_ = ['{DEMO}']\ntrain_cfg = dict(phases={{'*': dict(lr=1e-4)}})\n")
    with pytest.raises(UserError, match=(
            f"^{child}: phases={{'\\*': ...}} overlays a list of its base by index, .* "
            r"\(dict\(_base_.<...>.phases\[0\], lr=...\)\), or change one key with "
            r"--cfg-options <...>.phases.0.lr=...$")):
        load_run_config(child)


def test_a_phase_naming_no_dataloader_of_the_config_is_refused_as_the_config_loads(tmp_path):
    """The loop resolves it once the runner trains, after the work dir (its log folder and the
    config's dump) is written."""
    with pytest.raises(ValueError, match=(
            "^phase cross_lingual: dataloader 'text_dataloder' is no dataloader of the config")):
        load_run_config(DEMO, cfg_options={'train_cfg.phases.1.dataloader': 'text_dataloder'},
                        work_dir=str(tmp_path / 'work'))
    assert not (tmp_path / 'work').exists()


def test_a_list_of_loaders_a_config_keeps_aside_has_its_options_checked():
    """``test1k_fold_dataloaders`` (MSCOCO's five 1K folds) are built by the tools that read
    them: a misspelt option failed there, naming no loader."""
    from mmengine.config import Config

    from xmr.run_config import check_run_values

    with pytest.raises(UnknownOptionError, match=(
            r"^test1k_fold_dataloaders\.1: unknown option 'batch_szie' \(did you mean "
            r"'batch_size'\?\)")):
        check_run_values(Config(dict(test1k_fold_dataloaders=[
            dict(batch_size=2), dict(batch_szie=2)])))


def test_an_annotation_file_that_is_a_folder_is_refused_as_missing(tmp_path):
    """A folder (a data_root given twice, an ann_file naming the annotations folder) failed
    only once the runner built the dataset."""
    from mmengine.config import Config

    from xmr.run_config import check_annotation_files

    (tmp_path / 'annotations').mkdir()
    cfg = Config(dict(train_dataloader=dict(dataset=dict(
        type='RetrievalDataset', data_root=str(tmp_path), ann_file='annotations'))))
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"annotation file not found: {tmp_path / 'annotations'} "
            '(train_dataloader.dataset.ann_file)')):
        check_annotation_files(cfg, ['train'])


def test_a_checkpoint_hook_left_counting_epochs_under_a_loop_of_iterations_is_refused():
    """MMEngine's ``CheckpointHook`` counts epochs unless told otherwise: under a loop of
    iterations it saved no checkpoint before the last."""
    from mmengine.config import Config

    from xmr.run_config import check_run_values

    cfg = Config(dict(train_cfg=dict(type='IterBasedTrainLoop', max_iters=10),
                      default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=5))))
    with pytest.raises(ValueError, match=(
            r'^default_hooks\.checkpoint\.by_epoch=True, but the train loop IterBasedTrainLoop '
            'counts iterations')):
        check_run_values(cfg)
    cfg.default_hooks.checkpoint.by_epoch = False
    check_run_values(cfg)


def test_an_option_past_a_lists_end_is_refused_whatever_typo_comes_before_it():
    """The typo's error waits for the config's checks; the index's is at once, and was never
    reached once the walk stopped at the first typo."""
    with pytest.raises(UserError, match=(
            r'^--cfg-options train_cfg\.phases\.5\.iters: train_cfg\.phases holds 3 items')):
        load_run_config(DEMO, cfg_options={'train_dataloder.batch_size': 2,
                                           'train_cfg.phases.5.iters': 2})


def test_short_and_private_top_level_variables_are_no_typos_of_the_runners_keys(tmp_path):
    """``cg`` is one edit from the runner's ``cfg`` and ``_model`` from ``model``, but a key of
    three characters or fewer is too short to be a typo, and a leading underscore marks a
    variable of the config's own."""
    config = tmp_path / 'child.py'
    config.write_text(f"_base_ = ['{DEMO}']\ncg = 2\n_model = 'unused'\n")
    cfg = load_run_config(config, work_dir=str(tmp_path / 'work'))
    assert (cfg.cg, cfg._model) == (2, 'unused')
    config.write_text(f"_base_ = ['{DEMO}']\nmodle = 'unused'\n")
    with pytest.raises(UserError, match=r"the top-level key 'modle' .* \(did you mean 'model'"):
        load_run_config(config, work_dir=str(tmp_path / 'work'))


def test_a_long_variable_is_shown_cut_in_the_refusal_of_an_option_setting_it(tmp_path):
    """A variable may hold a whole list of languages: its value is shown to 60 characters."""
    base = tmp_path / 'base.py'
    languages = ['de', 'fr', 'cs', 'zh', 'ja', 'ko', 'ru', 'pl', 'tr', 'it', 'es', 'en', 'vi']
    base.write_text(f"_base_ = ['{DEMO}']\nlangs = {languages!r}\n"
                    'test_dataloader = dict(dataset=dict(languages=langs))\n')
    with pytest.raises(UserError, match=re.escape(
            f'--cfg-options langs: langs is a variable of the config, whose value '
            f'{repr(languages)[:57]}... was copied where the config uses it as it loaded '
            '(test_dataloader.dataset.languages)')):
        load_run_config(base, cfg_options={'langs': ['de']})


def test_options_are_nested_by_key_parts_not_by_their_letters(tmp_path):
    """``interval`` and ``interval_exp_name`` are two keys of MMEngine's logger hook; neither
    sets a key inside the other."""
    cfg = load_run_config(DEMO, cfg_options={'default_hooks.logger.interval': 10,
                                             'default_hooks.logger.interval_exp_name': 100},
                          work_dir=str(tmp_path / 'work'))
    assert (cfg.default_hooks.logger.interval, cfg.default_hooks.logger.interval_exp_name) == (
        10, 100)
    with pytest.raises(UserError, match=(
            r'^--cfg-options default_hooks\.logger: sets default_hooks\.logger to None, and '
            r'default_hooks\.logger\.interval sets a key inside it: give one of the two')):
        load_run_config(DEMO, cfg_options={'default_hooks.logger': None,
                                           'default_hooks.logger.interval': 10})


def test_a_new_top_level_dict_is_taken_as_a_loader_a_phase_may_name(tmp_path):
    """Unlike a new value, which nothing reads: a phase may name the loader by its key, from
    the API's options or a script's later ones."""
    cfg = load_run_config(DEMO, cfg_options={'caption_loader': dict(batch_size=2)},
                          work_dir=str(tmp_path / 'work'))
    assert cfg.caption_loader == dict(batch_size=2)
    with pytest.raises(UserError, match=r"^--cfg-options caption_size: the config has no "
                                        r"top-level key 'caption_size', so nothing reads"):
        load_run_config(DEMO, cfg_options={'caption_size': 2})


def test_the_optimisers_rate_is_an_option_of_a_loop_that_reads_it(tmp_path):
    """Only the phased loop sets every group's rate from its phase and never reads the
    optimiser's."""
    config = tmp_path / 'iterations.py'
    config.write_text(f"_base_ = ['{DEMO}']\n"
                      "train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=4)\n")
    cfg = load_run_config(config, cfg_options={'optim_wrapper.optimizer.lr': 0.5},
                          work_dir=str(tmp_path / 'work'))
    assert cfg.optim_wrapper.optimizer.lr == 0.5
    with pytest.raises(UserError, match=r'^--cfg-options optim_wrapper\.optimizer\.lr: '
                                        "PhasedTrainLoop sets every group's learning rate"):
        load_run_config(DEMO, cfg_options={'optim_wrapper.optimizer.lr': 0.5})


def test_an_unknown_language_code_is_refused_as_the_config_loads_naming_its_key(
        tmp_path, monkeypatch):
    """The dataset refused it as the runner built it, after the work dir and its log were made,
    naming the dataset's class, not the key."""
    leaf = tmp_path / 'leaf.py'
    leaf.write_text(f"_base_ = ['{DEMO}']\n"
                    "train_dataloader = dict(dataset=dict(languages=['en', 'xx']))\n")
    with pytest.raises(ValueError, match=(
            r"^train_dataloader\.dataset\.languages: unknown language code 'xx'")):
        load_run_config(leaf)
    with pytest.raises(ValueError, match=r"^val_evaluator\.languages: 'de' and 'deu' are both "):
        load_run_config(DEMO, cfg_options={'val_evaluator.languages': ['en', 'de', 'deu']})
    # Registered by a module of the config's custom_imports, a code is known by then.
    import xmr.datasets.languages as languages
    monkeypatch.setattr(languages, '_ALIASES', dict(languages._ALIASES))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, 'my_hawaiian', raising=False)
    (tmp_path / 'my_hawaiian.py').write_text(
        "from xmr.datasets.languages import register_language\nregister_language('haw')\n")
    leaf.write_text(f"_base_ = ['{DEMO}']\ncustom_imports = dict(imports=['my_hawaiian'])\n"
                    "train_dataloader = dict(dataset=dict(languages=['en', 'haw']))\n")
    try:
        assert load_run_config(leaf).train_dataloader.dataset.languages == ['en', 'haw']
    finally:
        sys.modules.pop('my_hawaiian', None)


def test_a_model_that_is_no_dict_is_refused_as_the_config_loads():
    """MMEngine's runner said 'model should be a nn.Module object or dict, but got None', once
    it had made the work dir."""
    with pytest.raises(ValueError, match=r"^model=None: the runner builds the model from a dict "):
        load_run_config(DEMO, cfg_options={'model': None})
