"""Two processes that build one cache folder at once (a sweep's jobs sharing a cache_dir):
each finishes, whichever renames its folder into place last."""
from __future__ import annotations

import json
from pathlib import Path

from tests.engine.test_feature_cache import ListDataset, pair_items
from xmr.engine.feature_cache import CachedFeatureDataset


def another_process_installs_first(monkeypatch, cache: Path, other: Path) -> None:
    """Rename ``other`` (another process's finished cache) to ``cache`` just before this
    process renames its own build folder there: the moment the two renames meet."""
    rename = Path.rename

    def meeting(self, target):
        if self.name.startswith(f'{cache.name}.partial-') and other.exists():
            rename(other, cache)
        return rename(self, target)

    monkeypatch.setattr(Path, 'rename', meeting)


def test_a_build_finishing_as_another_process_installs_the_same_cache_installs_its_own(
        tiny_retriever, tmp_path, monkeypatch):
    """The rename onto the folder the other process had just put there failed (ENOTEMPTY), and
    the build, finished, removed its folder and stopped its run."""
    dataset = ListDataset(pair_items())
    CachedFeatureDataset(dataset, tmp_path / 'other').prepare(tiny_retriever)
    built = json.loads((tmp_path / 'other' / 'meta.json').read_text())
    another_process_installs_first(monkeypatch, tmp_path / 'cache', tmp_path / 'other')
    cached = CachedFeatureDataset(dataset, tmp_path / 'cache')
    assert cached.prepare(tiny_retriever) is True
    assert json.loads((tmp_path / 'cache' / 'meta.json').read_text())['key'] == built['key']
    assert [path.name for path in tmp_path.iterdir()] == ['cache']
    assert cached[0]['source_features'].shape == (32,)
