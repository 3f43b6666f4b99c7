"""Ablation overlays: one file a paper row, applied to any config of its method, combined in
order, and refused where two rows cannot be combined."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from mmengine.config import Config

from xmr.ablations import (
    ablation_path,
    ablation_suffix,
    apply_ablations,
    list_items_replaced,
)
from xmr.run_config import load_run_config

CONFIGS = Path(__file__).resolve().parents[1] / 'configs'
DASD_CONFIGS = ['dasd/dasd_clip-vit-b32_multi30k_clft.py', 'dasd/dasd_clip-vit-b32_mscoco_clft.py',
                'dasd/dasd_clip-vit-b32_msrvtt_clft.py', 'dasd/cclm_multi30k.py',
                'demo/dasd_tiny-clip_synthetic.py']


def load(name: str) -> Config:
    return Config.fromfile(str(CONFIGS / name))


@pytest.mark.parametrize('name', DASD_CONFIGS)
def test_one_ablation_file_serves_every_dasd_config(name):
    plain = load(name).to_dict()
    ablated = apply_ablations(load(name), ['dasd/no-sc']).to_dict()
    # Exactly the row's switch differs, whatever the dataset, backbone or schedule.
    expected = copy.deepcopy(plain)
    expected['model']['disentangler']['use_consistency_loss'] = False
    assert ablated == expected


def test_rows_combine_in_order():
    cfg = apply_ablations(load(DASD_CONFIGS[1]), ['dasd/no-sc', 'dasd/no-adv', 'dasd/du-16'])
    sdm = cfg.model.disentangler
    assert (sdm.use_consistency_loss, sdm.use_adversarial) == (False, False)
    assert sdm.generator.d_u == cfg.model.language_branch.adapters.hidden == 16


def test_delete_replaces_a_module_whole():
    cfg = apply_ablations(load(DASD_CONFIGS[0]), ['dasd/static-adapter'])
    assert cfg.model.language_branch.adapters == dict(type='StaticAdapter', hidden=32)
    assert cfg.model.disentangler is None


@pytest.mark.parametrize('rows', [['dasd/static-adapter', 'dasd/no-sc'],
                                  ['dasd/no-sc', 'dasd/static-adapter']])
def test_a_row_configuring_what_another_removes_names_both(rows):
    with pytest.raises(ValueError) as error:
        apply_ablations(load(DASD_CONFIGS[0]), rows)
    message = str(error.value)
    assert all(f"ablation '{row}'" in message for row in rows)
    assert 'model.disentangler' in message


def test_a_row_configuring_what_the_config_lacks_names_the_config():
    lora = 'lora/lora_clip-vit-b32_multi30k_clft.py'
    with pytest.raises(ValueError, match=f"ablation 'dasd/no-adv' configures "
                       f'model.disentangler.use_adversarial, but the config .*{lora}'):
        apply_ablations(load(lora), ['dasd/no-adv'])
    static = 'demo/static_tiny-clip_synthetic.py'  # no disentangler key at all
    with pytest.raises(ValueError, match=f"ablation 'dasd/no-sc' configures "
                       f'model.disentangler.use_consistency_loss, but the config .*{static} has '
                       'no model.disentangler: the row applies to configs that have one'):
        apply_ablations(load(static), ['dasd/no-sc'])


def test_own_file_named_relative_to_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / 'shallower.py').write_text('model = dict(disentangler=dict(depth=0))\n')
    monkeypatch.chdir(tmp_path)
    assert ablation_path('shallower.py') == Path('shallower.py')
    assert apply_ablations(load(DASD_CONFIGS[0]), ['shallower.py']).model.disentangler.depth == 0


def test_own_file_and_setting_a_key_that_is_none(tmp_path):
    own = tmp_path / 'from-checkpoint.py'
    own.write_text("load_from = 'weights.pth'\nmodel = dict(disentangler=dict(depth=3))\n")
    cfg = load(DASD_CONFIGS[0])
    assert cfg.load_from is None
    cfg = apply_ablations(cfg, [str(own)])
    assert (cfg.load_from, cfg.model.disentangler.depth) == ('weights.pth', 3)


def test_unknown_or_empty_ablation(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"'dasd/no-such'.*dasd/no-sc"):
        ablation_path('dasd/no-such')
    with pytest.raises(FileNotFoundError, match=(  # the method is part of the name
            r"^ablation 'no-sc' names no method \(did you mean 'dasd/no-sc'\?\); name a "
            r"shipped ablation as '<method>/<row>' \(dasd/align-on-cc300k, ")):
        ablation_path('no-sc')
    with pytest.raises(FileNotFoundError, match=r"'dasd/no-sd': no file .*/configs/dasd/"
                       r"ablations/no-sd.py \(did you mean 'dasd/no-sc'\?\); name a shipped"):
        ablation_path('dasd/no-sd')
    for name in ('dasd/', 'dasd'):  # 'dasd/' said it named no method
        with pytest.raises(FileNotFoundError, match=(
                rf"^ablation '{name}' names no row of method 'dasd'; name one as 'dasd/<row>' "
                r"\(dasd/align-on-cc300k, .*dasd/no-sc, .*\)$")) as error:
            ablation_path(name)
        assert 'pectvlm/' not in str(error.value)  # its own rows, not every method's
    with pytest.raises(FileNotFoundError, match=r"^ablation 'dsad/' names no row, and 'dsad' is "
                       r"no method with shipped ablations \(did you mean 'dasd'\?\); name a "):
        ablation_path('dsad/')
    empty = tmp_path / 'empty.py'
    empty.write_text('# nothing\n')
    with pytest.raises(ValueError, match=f"^ablation '{empty}' changes nothing"):
        apply_ablations(load(DASD_CONFIGS[0]), [str(empty)])


def test_a_row_with_a_base_is_refused(tmp_path):
    """Merged as MMEngine merges a child, the row's base replaced the config it was run with
    (a static-adapter config ran as DASD under the static config's name)."""
    row = tmp_path / 'rowbase.py'
    row.write_text(f"_base_ = ['{CONFIGS / DASD_CONFIGS[-1]}']\n")
    with pytest.raises(ValueError, match=f"^ablation '{row}' has a _base_: "):
        apply_ablations(load('demo/static_tiny-clip_synthetic.py'), [str(row)])
    row.write_text("model = dict(language_branch=dict(adapters=dict(hidden=8)))\n"
                   "_base__note = 'a variable, not a base'\n")
    cfg = apply_ablations(load('demo/static_tiny-clip_synthetic.py'), [str(row)])
    assert cfg.model.language_branch.adapters.hidden == 8


def test_the_run_config_applies_ablations_before_options_and_names_the_work_dir():
    cfg = load_run_config(CONFIGS / DASD_CONFIGS[1], ablations=['dasd/no-sc', 'dasd/no-adv'],
                          cfg_options={'model.disentangler.use_consistency_loss': True})
    assert cfg.model.disentangler.use_consistency_loss is True
    assert cfg.model.disentangler.use_adversarial is False
    assert cfg.work_dir == 'work_dirs/dasd_clip-vit-b32_mscoco_clft_no-sc_no-adv'
    assert ablation_suffix([]) == ''


@pytest.mark.parametrize('name, row, root, ann_file', [
    ('dasd/dasd_clip-vit-b32_multi30k_clft.py', 'dasd/align-on-cc300k', 'data/cc3m',
     'annotations/cc300k_train.json'),
    ('dasd/dasd_clip-vit-b32_mscoco_zeroshot.py', 'dasd/align-on-cc3m', 'data/cc3m',
     'annotations/cc3m_train.json'),
    ('dasd/dasd_clip-vit-b32_multi30k_zeroshot.py', 'dasd/align-on-mscoco-mt', 'data/mscoco',
     'annotations/coco_train.json'),
])
def test_data_rows_move_the_alignment_phases_only(name, row, root, ann_file):
    plain = load(name)
    cfg = apply_ablations(load(name), [row])
    for key in ('train_dataloader', 'text_train_dataloader'):
        dataset = cfg[key].dataset
        assert (dataset.data_root, dataset.ann_file) == (root, ann_file)
        # What the loader reads of the data (languages, media or not, preprocessing) stays.
        for field in ('target_langs', 'with_media', 'transform'):
            assert dataset.get(field) == plain[key].dataset.get(field), (key, field)
    for key in ('source_finetune_dataloader', 'val_dataloader', 'test_dataloader'):
        assert cfg.get(key) == plain.get(key)


@pytest.mark.parametrize('name', ['dasd/dasd_clip-vit-b32_multi30k_clft.py',
                                  'dasd/dasd_clip-vit-b32_multi30k_zeroshot.py'])
def test_every_item_of_a_list_whatever_its_length(name):
    plain = load(name).to_dict()
    ablated = apply_ablations(load(name), ['dasd/authors-optimizer']).to_dict()
    expected = copy.deepcopy(plain)
    for phase in expected['train_cfg']['phases']:
        phase['schedule'] = 'bert_cosine'
    expected['optim_wrapper']['optimizer'].update(type='BertAdam', max_grad_norm=1.0)
    expected['optim_wrapper']['clip_grad'] = None
    assert ablated == expected
    assert len(ablated['train_cfg']['phases']) == (3 if name.endswith('clft.py') else 2)


@pytest.mark.parametrize('overlay, message', [
    ("model = dict(backbone={'*': dict(arch='x')})", r"model\.backbone\.\* .*the config has dict"),
    ("train_cfg = dict(phases={'*': dict(lr=1.0), '0': dict(lr=2.0)})",
     r"train_cfg\.phases\.\* \(every item\) beside \['0'\]: give one or the other"),
])
def test_every_item_needs_a_list_and_no_index_beside_it(tmp_path, overlay, message):
    row = tmp_path / 'row.py'
    row.write_text(overlay + '\n')
    with pytest.raises(ValueError, match=message):
        apply_ablations(load(DASD_CONFIGS[0]), [str(row)])


def test_every_item_of_an_empty_list_is_refused_as_changing_nothing(tmp_path):
    """A row over an empty list changed nothing and passed, the run named after it."""
    row = tmp_path / 'row.py'
    row.write_text("test_dataloader = dict(dataset=dict(languages={'*': 'fr'}))\n")
    config = tmp_path / 'config.py'
    config.write_text('test_dataloader = dict(dataset=dict(languages=[]))\n')
    with pytest.raises(ValueError, match=(
            r"^ablation '.*row\.py' sets test_dataloader\.dataset\.languages\.\* \(every item\), "
            r'but test_dataloader\.dataset\.languages is an empty list in the config: the row '
            r'would change nothing there$')):
        apply_ablations(Config.fromfile(str(config)), [str(row)])


def test_an_index_past_the_end_of_a_list_is_a_part_the_config_lacks(tmp_path):
    row = tmp_path / 'row.py'
    row.write_text("train_cfg = dict(phases={'3': dict(lr=1.0)})\n")  # phases 0, 1 and 2
    with pytest.raises(ValueError, match=r'configures train_cfg\.phases\.3\.lr, but the config '
                       r'.* has no train_cfg\.phases\.3:'):
        apply_ablations(load(DASD_CONFIGS[0]), [str(row)])


def test_an_index_written_as_a_number_is_the_item_s(tmp_path):
    """phases={1: ...} reached MMEngine's merge, which failed on 'int' object has no attribute
    'isdigit', naming neither the file nor the key."""
    row = tmp_path / 'row.py'
    row.write_text("train_cfg = dict(phases={1: dict(lr=1e-4)})\n"
                   "test_dataloader = dict(dataset=dict(languages={1: 'fr'}))\n")
    cfg = apply_ablations(load('demo/static_tiny-clip_synthetic.py'), [str(row)])
    assert [phase.lr for phase in cfg.train_cfg.phases][1] == 1e-4
    assert cfg.test_dataloader.dataset.languages == ['en', 'fr', 'fr', 'zh', 'ja']


def test_a_row_may_add_a_module_the_config_lacks_when_it_gives_its_type(tmp_path):
    row = tmp_path / 'with-sdm.py'
    row.write_text("model = dict(disentangler=dict(type='SemanticsDisentangler', depth=0))\n")
    cfg = apply_ablations(load('demo/static_tiny-clip_synthetic.py'), [str(row)])
    assert cfg.model.disentangler == dict(type='SemanticsDisentangler', depth=0)


def test_the_work_dir_suffix_names_each_row_without_its_folder_or_extension(tmp_path):
    assert ablation_suffix(['dasd/no-sc', str(tmp_path / 'shallower.py')]) == '_no-sc_shallower'


def test_a_row_replaces_list_items_that_are_no_dicts(tmp_path):
    """MMEngine merges an index into a list's item only where both are dicts, and failed on
    another ('str' object has no attribute 'copy')."""
    row = tmp_path / 'row.py'
    row.write_text("test_dataloader = dict(dataset=dict(languages={'1': 'fr'}))\n"
                   "train_cfg = dict(phases={'*': dict(trainable={'0': 'target'})})\n")
    cfg = apply_ablations(load('demo/static_tiny-clip_synthetic.py'), [str(row)])
    assert cfg.test_dataloader.dataset.languages == ['en', 'fr', 'fr', 'zh', 'ja']
    assert cfg.val_dataloader.dataset.languages == ['en', 'de', 'fr', 'zh', 'ja']
    assert [phase.trainable for phase in cfg.train_cfg.phases] == [
        ['target', 'losses.source_cm'], ['target'], ['target']]
    assert [phase.iters for phase in cfg.train_cfg.phases] == [700, 700, 200]


@pytest.mark.parametrize('rows, key', [
    (['dasd/du-16', 'dasd/du-64'], 'model.language_branch.adapters.hidden to 16'),
    (['dasd/no-da-block-3', 'dasd/no-da-block-4'], 'model.language_branch.adapters.blocks'),
    (['dasd/sc-mse', 'dasd/sc-smooth-l1'], "consistency_loss.kind to 'mse'"),
    (['dasd/du-16', 'dasd/static-adapter'], 'replaces model.language_branch.adapters whole')])
def test_rows_setting_one_key_differently_cannot_be_combined(rows, key):
    with pytest.raises(ValueError, match='only the last would take effect') as error:
        apply_ablations(load(DASD_CONFIGS[0]), rows)
    assert key in str(error.value)
    assert all(f"ablation '{row}'" in str(error.value) for row in rows)


def test_rows_setting_one_key_alike_combine(tmp_path):
    (tmp_path / 'small.py').write_text('model = dict(language_branch=dict(adapters=dict('
                                       'hidden=16)))\n')
    cfg = apply_ablations(load(DASD_CONFIGS[0]), ['dasd/du-16', str(tmp_path / 'small.py')])
    assert cfg.model.disentangler.generator.d_u == cfg.model.language_branch.adapters.hidden == 16
    # Beneath a part an earlier row replaced whole, a later row changes its options.
    cfg = apply_ablations(load(DASD_CONFIGS[0]),
                          ['dasd/static-adapter', str(tmp_path / 'small.py')])
    assert cfg.model.language_branch.adapters == dict(type='StaticAdapter', hidden=16)


def test_a_row_giving_a_copied_config_variable_another_value_is_refused(tmp_path):
    """The demo copied ``target_langs`` into its training loader and model as it loaded: a row
    changing the variable would train every language under the row's name."""
    row = tmp_path / 'de-only.py'
    row.write_text("target_langs = ['de']\n")
    with pytest.raises(ValueError, match=r"ablation '.*de-only.py' sets target_langs, a variable "
                       r'of the config whose value was copied .*\(model.*, train_dataloader\.'
                       r'dataset\.languages\): the row would change none'):
        apply_ablations(load('demo/static_tiny-clip_synthetic.py'), [str(row)])
    # The value it already has, a variable nothing copied, and a new one are taken.
    row.write_text("target_langs = ['de', 'fr', 'zh', 'ja']\nimage_size = 64\nnote = 'x'\n")
    cfg = apply_ablations(load('demo/static_tiny-clip_synthetic.py'), [str(row)])
    assert (cfg.image_size, cfg.note) == (64, 'x')


def test_a_row_merging_into_a_copied_dict_variable_is_refused_only_where_it_changes_it(
        tmp_path):
    base = tmp_path / 'base.py'
    base.write_text("data_prefix = dict(media='images', ann='ann')\n"
                    "loader = dict(dataset=dict(data_prefix=data_prefix))\n")
    row = tmp_path / 'row.py'
    row.write_text("data_prefix = dict(media='images')\n")
    assert apply_ablations(Config.fromfile(str(base)), [str(row)]).data_prefix.ann == 'ann'
    row.write_text("data_prefix = dict(media='frames')\n")
    with pytest.raises(ValueError, match=r'sets data_prefix, .*\(loader\.dataset\.data_prefix\)'):
        apply_ablations(Config.fromfile(str(base)), [str(row)])


@pytest.mark.parametrize('none_first', [False, True])
def test_rows_setting_one_key_to_none_and_to_a_value_cannot_be_combined(tmp_path, none_first):
    """``blocks=None`` (every block) and Table 10's row's list: whichever came last was taken
    without a word, while the run was named after both."""
    every_block = tmp_path / 'every-block.py'
    every_block.write_text('model = dict(language_branch=dict(adapters=dict(blocks=None)))\n')
    rows = ['dasd/no-da-block-3', str(every_block)]
    rows = rows[::-1] if none_first else rows
    message = ('sets model.language_branch.adapters.blocks to None, and .* only the last would '
               'take effect' if none_first else
               'removes model.language_branch.adapters.blocks \\(None\\), but ablation '
               "'dasd/no-da-block-3' configures model.language_branch.adapters.blocks")
    with pytest.raises(ValueError, match=message) as error:
        apply_ablations(load(DASD_CONFIGS[0]), rows)
    assert all(f"ablation '{row}'" in str(error.value) for row in rows)
    # A key the config itself sets to None is an override a row may make.
    (tmp_path / 'base.py').write_text('model = dict(head=None, neck=dict(type="X"))\n')
    (tmp_path / 'head.py').write_text('model = dict(head=3)\n')
    assert apply_ablations(Config.fromfile(str(tmp_path / 'base.py')),
                           [str(tmp_path / 'head.py')]).model.head == 3


def test_a_row_changing_a_variable_a_runner_key_copied_whole_is_refused(tmp_path):
    """PECTVLM's configs set ``test_evaluator = target_evaluator``: a row giving
    ``target_evaluator`` other languages changed the variable alone, and the run evaluated the
    old ones. Two variables equal to each other (aliases) are no copies."""
    base = tmp_path / 'base.py'
    base.write_text("target_evaluator = dict(type='RetrievalMetric', languages=['en', 'de'])\n"
                    'test_evaluator = target_evaluator\n'
                    "langs = ['de']\nlanguages = langs\n")
    row = tmp_path / 'fr.py'
    row.write_text("target_evaluator = dict(languages=['en', 'fr'])\n")
    with pytest.raises(ValueError, match=r"sets target_evaluator, .* as it loaded "
                       r'\(test_evaluator\): the row would change none'):
        apply_ablations(Config.fromfile(str(base)), [str(row)])
    row.write_text("langs = ['fr']\n")
    assert apply_ablations(Config.fromfile(str(base)), [str(row)]).langs == ['fr']


def test_a_row_configuring_a_part_the_config_removes_names_the_config(tmp_path):
    """Merged beneath the config's ``None``, the row's options would make a typeless part."""
    base = tmp_path / 'base.py'
    base.write_text('model = dict(type="X", teacher=None)\n')
    (tmp_path / 'row.py').write_text('model = dict(teacher=dict(depth=3))\n')
    with pytest.raises(ValueError, match=re.escape(
            f"ablation '{tmp_path / 'row.py'}' configures model.teacher.depth, but the config "
            f'{base} removes model.teacher (None): the two cannot be combined')):
        apply_ablations(Config.fromfile(str(base)), [str(tmp_path / 'row.py')])


@pytest.mark.parametrize('overlay, config, expected', [
    # a list of dicts and names: the dict item merged into the old one, the name replaced
    ({'pipeline': {'0': dict(size=256), '1': 'C'}},
     {'pipeline': [dict(type='A', size=224, crop=True), 'B']},
     {'pipeline': [dict(type='A', size=256, crop=True), 'C']}),
    # a tuple stays a tuple (betas)
    ({'betas': {'1': 0.99}}, {'betas': (0.9, 0.98)}, {'betas': (0.9, 0.99)}),
    # an item that is no dict, overlaid by a dict: replaced by it
    ({'hooks': {'0': dict(type='A')}}, {'hooks': [None]}, {'hooks': [dict(type='A')]}),
    # an index past the end: left for the caller's error
    ({'langs': {'5': 'fr'}}, {'langs': ['en']}, {'langs': {'5': 'fr'}}),
    # a list inside a tuple's dict item
    ({'parts': {'0': {'sizes': {'1': 9}}}}, {'parts': (dict(sizes=[1, 2]),)},
     {'parts': {'0': {'sizes': [1, 9]}}}),
])
def test_list_items_are_replaced_where_mmengine_would_not_merge_them(overlay, config, expected):
    replaced = list_items_replaced(overlay, config)
    assert replaced == expected
    assert type(next(iter(replaced.values()))) is type(next(iter(expected.values())))
