"""The configs and tools xmr ships: the fix a missing ``_base_`` is told."""
from __future__ import annotations

from xmr.packaged import missing_base


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
