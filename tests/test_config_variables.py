"""A config's variables and the copies an option or an ablation row setting one leaves stale."""
from __future__ import annotations

from xmr.config_variables import nested_values, stale_copies, value_at, variable_copies


def test_value_at_walks_dicts_and_list_items_and_is_none_past_the_config():
    node = {'run': {'loaders': [{'root': 'a'}, {'root': 'b'}]}}
    assert value_at(node, 'run.loaders.1.root') == 'b'
    assert value_at(node, 'run.loaders.0') == {'root': 'a'}
    assert value_at(node, 'run.loaders.2') is None
    assert value_at(node, 'run.loaders.x') is None
    assert value_at(node, 'run.other') is None
    assert value_at(node, 'run.loaders.1.root.deeper') is None


def test_nested_values_name_list_items_by_index():
    assert list(nested_values({'a': [{'b': 1}], 'c': 2})) == [
        ('a', [{'b': 1}]), ('a.0', {'b': 1}), ('a.0.b', 1), ('c', 2)]


def test_a_copy_inside_a_list_of_loaders_is_found():
    whole = {'root': 'data/x', 'test_dataloader': [{'dataset': {'data_root': 'data/x'}}]}
    assert variable_copies(whole, 'root') == ['test_dataloader.0.dataset.data_root']
    assert stale_copies(whole, 'root', 'data/y') == ['test_dataloader.0.dataset.data_root']


def test_a_key_under_another_variable_whose_name_begins_alike_is_a_copy():
    whole = {'lang': 'de', 'lang_cfg': {'code': 'de'}}
    assert variable_copies(whole, 'lang') == ['lang_cfg.code']


def test_a_runner_key_holding_a_copy_is_one_and_the_key_itself_is_not():
    evaluator = {'type': 'RetrievalMetric'}
    whole = {'evaluator': evaluator, 'val_evaluator': evaluator, 'test_evaluator': evaluator}
    assert variable_copies(whole, 'evaluator') == ['val_evaluator', 'test_evaluator']
    assert variable_copies(whole, 'val_evaluator') == ['test_evaluator']
    assert stale_copies(whole, 'evaluator.type', 'Other') == ['val_evaluator', 'test_evaluator']


def test_setting_a_key_the_runner_reads_leaves_no_stale_copy():
    """``val_evaluator = test_evaluator``: the runner reads each, an option sets the one named."""
    evaluator = {'type': 'RetrievalMetric'}
    whole = {'val_evaluator': evaluator, 'test_evaluator': evaluator}
    assert stale_copies(whole, 'test_evaluator.type', 'Other') == []


def test_a_merge_is_refused_where_any_of_its_keys_changes_or_adds_one():
    whole = {'prefix': {'media': 'img', 'ann': 'a.json'},
             'loader': {'data_prefix': {'media': 'img', 'ann': 'a.json'}}}
    assert stale_copies(whole, 'prefix', {'media': 'img', 'ann': 'b.json'}) == [
        'loader.data_prefix']
    assert stale_copies(whole, 'prefix', {'extra': 1}) == ['loader.data_prefix']
    assert stale_copies(whole, 'prefix', {'media': 'img'}) == []


def test_a_list_item_set_to_the_value_it_holds_changes_nothing():
    whole = {'langs': ['de', 'fr'], 'model': {'languages': ['de', 'fr']}}
    assert stale_copies(whole, 'langs.1', 'fr') == []
    assert stale_copies(whole, 'langs.1', 'es') == ['model.languages']


def test_a_merge_that_deletes_is_refused_only_where_the_replacement_differs():
    """``_delete_=True`` replaces the dict with the merge's other keys: the same keys and
    values change nothing; leaving one out drops it, a change."""
    whole = {'prefix': {'media': 'img', 'ann': 'a.json'},
             'loader': {'data_prefix': {'media': 'img', 'ann': 'a.json'}}}
    same = {'_delete_': True, 'media': 'img', 'ann': 'a.json'}
    assert stale_copies(whole, 'prefix', same) == []
    assert stale_copies(whole, 'prefix', {'_delete_': True, 'media': 'img'}) == [
        'loader.data_prefix']
