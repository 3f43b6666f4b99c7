"""The configs and tools xmr ships: the fix a missing ``_base_`` is told."""
from __future__ import annotations

from pathlib import Path

import pytest

from xmr import packaged
from xmr.packaged import config_path, missing_base, packaged_root, tool_path


def test_a_base_shipped_in_two_folders_is_named_by_the_folders_its_path_ends_with(tmp_path):
    # xtd10_zeroshot.py is both a dataset and an evaluation base of configs/_base_/.
    config = tmp_path / 'project' / 'mine.py'
    error = missing_base('../_base_/datasets/xtd10_zeroshot.py', str(config))
    assert error.fix == ("a config outside xmr's configs/ names xmr's as "
                         "'xmr::_base_/datasets/xtd10_zeroshot.py'")


def test_a_copied_config_is_told_the_xmr_name_of_each_relative_base(tmp_path):
    """MMEngine stops at the first base that names no file: one fix a run, four runs for the
    demo's four bases."""
    (tmp_path / 'own.py').write_text('x = 1\n')
    config = tmp_path / 'mine.py'
    config.write_text("_base_ = ['../_base_/datasets/synthetic.py', './own.py',\n"
                      "          '../_base_/default_runtime.py']\n")
    error = missing_base('../_base_/datasets/synthetic.py', str(config))
    assert error.fix == ("a config outside xmr's configs/ names xmr's as "
                         "'xmr::_base_/datasets/synthetic.py': _base_ = "
                         "['xmr::_base_/datasets/synthetic.py', './own.py', "
                         "'xmr::_base_/default_runtime.py']")


def test_a_packaged_config_or_tool_is_looked_up_in_its_own_folder():
    assert config_path('xmr::_base_/default_runtime.py') == (
        packaged_root() / 'configs' / '_base_' / 'default_runtime.py')
    assert tool_path('convert/dasd_to_xmr.py') == (
        packaged_root() / 'tools' / 'convert' / 'dasd_to_xmr.py')


def test_a_packaged_name_of_no_file_is_refused_naming_the_folder_and_an_example():
    with pytest.raises(FileNotFoundError) as error:
        config_path('demo')  # a folder
    assert str(error.value) == (
        f"xmr ships no configs file 'demo' (looked in {packaged_root() / 'configs'}); name one "
        "relative to that folder, e.g. 'xmr::demo/static_tiny-clip_synthetic.py'")
    with pytest.raises(FileNotFoundError) as error:
        tool_path('trian.py')
    assert str(error.value) == (
        f"xmr ships no tools file 'trian.py' (looked in {packaged_root() / 'tools'}); name one "
        "relative to that folder, e.g. 'train.py'")


def test_a_copied_config_with_one_shipped_base_is_told_its_xmr_name_alone(tmp_path):
    """A run finds the only base to rewrite: no list to copy."""
    (tmp_path / 'default_runtime.py').write_text('x = 1\n')  # its own, of a shipped name
    config = tmp_path / 'mine.py'
    config.write_text("_base_ = ['xmr::_base_/models/dasd_sdm.py', './default_runtime.py',\n"
                      "          '../_base_/datasets/synthetic.py']\n")
    error = missing_base('../_base_/datasets/synthetic.py', str(config))
    assert error.fix == ("a config outside xmr's configs/ names xmr's as "
                         "'xmr::_base_/datasets/synthetic.py'")


def test_a_base_shipped_in_two_folders_its_path_does_not_end_with_is_told_to_be_corrected(
        tmp_path):
    error = missing_base('./xtd10_zeroshot.py', str(tmp_path / 'mine.py'))
    assert str(error) == (
        f"{tmp_path / 'mine.py'}: _base_ './xtd10_zeroshot.py' names no file "
        f"({tmp_path / 'xtd10_zeroshot.py'}): correct it: a relative path starts at the folder "
        'of mine.py')


def test_an_absolute_base_that_names_no_file_is_told_to_be_corrected(tmp_path):
    error = missing_base(str(tmp_path / 'bases' / 'mine_base.py'), str(tmp_path / 'mine.py'))
    assert str(error) == (f"{tmp_path / 'mine.py'}: _base_ '{tmp_path / 'bases' / 'mine_base.py'}'"
                          ' names no file: correct it')


def test_a_base_one_letter_from_a_file_beside_it_is_told_that_file_not_the_shipped_one(
        tmp_path):
    (tmp_path / 'synthetics.py').write_text('x = 1\n')
    error = missing_base('./synthetic.py', str(tmp_path / 'mine.py'))
    assert str(error) == (
        f"{tmp_path / 'mine.py'}: _base_ './synthetic.py' names no file "
        f"({tmp_path / 'synthetic.py'}) (did you mean 'synthetics.py'?): correct it: a relative "
        'path starts at the folder of mine.py')


def test_the_packaged_files_lie_in_the_mim_folder_of_the_package():
    """A wheel has no checkout around it: its configs and tools are copied in xmr/.mim."""
    assert packaged_root() == Path(packaged.__file__).resolve().parent / '.mim'


def test_a_base_path_ends_with_the_shipped_folders_only_at_a_folder_boundary(tmp_path):
    """``my_base_/datasets`` is no ``_base_/datasets``: of the two shipped, none is meant."""
    error = missing_base('../my_base_/datasets/xtd10_zeroshot.py', str(tmp_path / 'mine.py'))
    assert error.fix == 'correct it: a relative path starts at the folder of mine.py'
