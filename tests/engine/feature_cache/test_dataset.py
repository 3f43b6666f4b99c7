"""The dataset wrapper's cache key: what decides the features of its captions keys them; and the
datasets it refuses to cache."""
from __future__ import annotations

import json
import re

import pytest
import torch

from tests.conftest import tiny_backbone_cfg, tiny_dasd_cfg, tiny_retriever_cfg
from tests.engine.feature_cache.test_ranks import cached_pairs, five_images_ann
from tests.engine.test_feature_cache import TINY_TRANSFORM, ListDataset, pair_items
from tests.models.backbones.open_clip_families import backbone_cfg, nllb_cfg
from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.datasets.media_io import MediaReadError
from xmr.engine.feature_cache import CACHE_FORMAT, CachedFeatureDataset, StaleFeatureCacheError
from xmr.engine.feature_cache.key import media_decoding
from xmr.registry import MODELS


def retriever(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return MODELS.build(tiny_retriever_cfg(**overrides))


def test_a_prompted_model_refuses_a_cache_built_without_its_prompt(tiny_retriever, tmp_path):
    """The cache held r^S of the captions as they are, served for 'a photo of <caption>'."""
    dataset = ListDataset(pair_items())
    CachedFeatureDataset(dataset, tmp_path / 'cache', features=['source']).prepare(
        tiny_retriever)
    prompted = retriever(data_preprocessor=dict(source_prompt='a photo of'))
    assert prompted.backbone.fingerprint() == tiny_retriever.backbone.fingerprint()
    with pytest.raises(StaleFeatureCacheError, match=re.escape(
            "'source_prompt': None")):
        CachedFeatureDataset(dataset, tmp_path / 'cache', features=['source']).prepare(prompted)
    rebuilt = CachedFeatureDataset(dataset, tmp_path / 'cache', features=['source'],
                                   rebuild_if_stale=True)
    rebuilt.prepare(prompted)
    with torch.no_grad():
        prompted.eval()
        tokens = prompted.data_preprocessor(dict(source_text=[pair_items()[0]['source_text']]))
        live = prompted.encode_source(tokens['source_tokens'])[0].float()
    torch.testing.assert_close(rebuilt[0]['source_features'], live, rtol=1e-5, atol=1e-6)


def test_a_cache_of_captions_read_in_one_source_language_is_refused_in_another(tmp_path):
    """NLLB's tokenizer starts each caption with its language's token: a cache built with
    source_language='en' served its features to a model reading the captions as French."""
    backbone = backbone_cfg(nllb_cfg(tmp_path / 'nllb'))
    english, french = (retriever(backbone=backbone, source_language=language)
                       for language in ('en', 'fr'))
    assert english.backbone.fingerprint() == french.backbone.fingerprint()
    dataset = ListDataset(pair_items())
    CachedFeatureDataset(dataset, tmp_path / 'cache', features=['source']).prepare(english)
    with pytest.raises(StaleFeatureCacheError, match=re.escape("'source_language': 'en'")):
        CachedFeatureDataset(dataset, tmp_path / 'cache', features=['source']).prepare(french)


@pytest.mark.parametrize('features', [['source'], ['media'], None])
def test_an_empty_dataset_is_refused_naming_it_before_anything_is_built(tmp_path, features):
    """A cache of captions was built without its feature array, which its own check then called
    corrupt, at every rebuild; an empty dataset of media was said to have no readable media, one
    of unknown kinds to carry neither captions nor media."""
    dataset = ListDataset([])
    dataset.ann_file = 'data/empty.json'
    with pytest.raises(ValueError, match=re.escape(
            f'feature cache {tmp_path / "cache"}: the ListDataset read from data/empty.json is '
            'empty (0 items), so there is nothing to cache; give it items or leave its '
            'CachedFeatureDataset out')):
        CachedFeatureDataset(dataset, tmp_path / 'cache', features=features)
    assert not list(tmp_path.iterdir())


def test_a_media_the_cache_records_as_unreadable_stops_a_dataset_set_to_raise(tiny_retriever,
                                                                            tmp_path):
    """The cache served its marker whatever the dataset's on_corrupt: a dataset set to 'raise'
    since the build (with 'skip') read on past the file."""
    ann_file = five_images_ann(tmp_path)
    cached_pairs(ann_file, tmp_path / 'cache').prepare(tiny_retriever)  # grey left out
    strict = CachedFeatureDataset(dict(
        type='CaptionPairDataset', ann_file=str(ann_file), data_root=str(tmp_path),
        transform=TINY_TRANSFORM, on_corrupt='raise'), tmp_path / 'cache')
    strict.prepare(tiny_retriever)
    assert strict[0]['media_features'].shape == (32,)
    with media_decoding(strict.dataset, False):
        grey = next(index for index in range(len(strict))
                    if strict.dataset[index]['media_id'] == 'grey')
    with pytest.raises(MediaReadError, match=re.escape(
            f"{tmp_path / 'grey.png'}: not a decodable image") + '.*' + re.escape(
            f"(recorded by the feature cache {tmp_path / 'cache'}): replace the file")):
        strict[grey]


def test_a_cache_of_another_xmr_layout_is_refused_naming_its_format_or_rebuilt(tiny_retriever,
                                                                               tmp_path):
    """A meta of another layout need not state what this xmr verifies the files by (its
    feature kinds): a run-owned cache stopped the run with a bare ``KeyError: 'features'``
    rather than being rebuilt."""
    cache_dir = tmp_path / 'cache'
    cache_dir.mkdir()
    (cache_dir / 'meta.json').write_text(json.dumps(
        dict(key=dict(format=0, backbone='f00d'), counts=dict(items=6))))
    dataset = ListDataset(pair_items())
    with pytest.raises(StaleFeatureCacheError, match=re.escape(
            f'format: cache has 0, now {CACHE_FORMAT} (the layout of another xmr version; this '
            f'one reads format {CACHE_FORMAT})')):
        CachedFeatureDataset(dataset, cache_dir).prepare(tiny_retriever)
    owned = CachedFeatureDataset(dataset, cache_dir, rebuild_if_stale=True)
    assert owned.prepare(tiny_retriever) is True
    assert owned.cache.key['format'] == CACHE_FORMAT and owned[0]['source_features'].shape == (32,)


def test_a_model_that_reads_no_cached_features_is_refused_before_a_build(tmp_path):
    """A dual encoder's losses read the towers' tokens: its build stopped at the first batch on
    an ``AttributeError`` (no ``encode_source``), after the pass over the items."""
    torch.manual_seed(0)
    dual = MODELS.build(dict(type='DualEncoderRetriever', backbone=tiny_backbone_cfg()))
    cached = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache')
    with pytest.raises(TypeError, match=re.escape(
            f'feature cache {tmp_path / "cache"}: DualEncoderRetriever has no encode_source or '
            'encode_media, so it neither builds nor reads cached source, media features')):
        cached.prepare(dual)
    assert not (tmp_path / 'cache').exists()


def test_a_step_from_cached_features_has_the_live_step_s_losses_and_gradients(tmp_path):
    """DASD's phases from cached ``r^S`` / ``r^V`` (float32) train as from its live towers: the
    same losses (the SDM's shuffled negatives drawn alike) and every trainable gradient."""
    from xmr.datasets.collate import retrieval_collate
    from xmr.datasets.synthetic import SyntheticPairDataset

    torch.manual_seed(0)
    model = MODELS.build(tiny_dasd_cfg())
    scenes = dict(num_scenes=6, languages=['de', 'zh'], image_size=32)
    cached = CachedFeatureDataset(SyntheticPairDataset(**scenes), tmp_path / 'cache')
    cached.prepare(model)
    live = SyntheticPairDataset(**scenes)
    for phase, weights in (('cross_lingual', dict(cl=1.0, disentangler=1.0)),
                           ('cross_modal', dict(cm=1.0))):
        model.set_phase(phase, weights)
        steps = []
        for dataset in (cached, live):
            model.zero_grad(set_to_none=True)
            torch.manual_seed(1)
            data = model.data_preprocessor(
                retrieval_collate([dataset[i] for i in range(len(dataset))]), True)
            losses = model(mode='loss', **data)
            sum(losses.values()).backward()
            steps.append((losses, {name: p.grad for name, p in model.named_parameters()
                                   if p.grad is not None}))
        (cached_losses, cached_grads), (live_losses, live_grads) = steps
        torch.testing.assert_close(cached_losses, live_losses, rtol=1e-5, atol=1e-6)
        assert cached_grads.keys() == live_grads.keys() and live_grads
        torch.testing.assert_close(cached_grads, live_grads, rtol=1e-4, atol=1e-5)


def test_media_without_a_media_id_are_not_cached(tmp_path):
    """The cache keys each media by its id: items that carry media but no ``media_id`` have
    their captions cached alone, the image tower running on their media every step."""
    items = [{k: v for k, v in item.items() if k != 'media_id'} for item in pair_items()]
    assert CachedFeatureDataset(ListDataset(items), tmp_path / 'cache').kinds == ['source']


def test_a_rebuild_asked_for_replaces_a_current_cache_and_a_current_one_is_kept(
        tiny_retriever, tmp_path):
    """``--overwrite`` builds afresh what a cache that is there holds; a run-owned cache under
    the live key is read, not rebuilt at each phase start."""
    dataset = ListDataset(pair_items())
    assert CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever) is True
    owned = CachedFeatureDataset(dataset, tmp_path / 'cache', rebuild_if_stale=True)
    assert owned.prepare(tiny_retriever) is False
    first = (tmp_path / 'cache' / 'meta.json').stat().st_ino
    assert owned.prepare(tiny_retriever, rebuild=True) is True
    assert (tmp_path / 'cache' / 'meta.json').stat().st_ino != first
    assert owned[0]['source_features'].shape == (32,)


class _SkippingDataset(ListDataset):
    """Gives the dataset's own marker (or ``None``) for the items in ``skipped``."""

    def __init__(self, items: list[dict]) -> None:
        super().__init__(items)
        self.skipped: dict[int, SkippedMedia | None] = {}

    def __getitem__(self, index: int) -> dict | SkippedMedia | None:
        return self.skipped[index] if index in self.skipped else super().__getitem__(index)


def test_an_item_the_wrapped_dataset_skips_is_handed_on_as_it_gave_it(tiny_retriever,
                                                                       tmp_path):
    """A cache of captions alone leaves the media to the wrapped dataset: a file it could not
    read at that step gives its marker (or ``None``), which the collate drops, rather than an
    item."""
    dataset = _SkippingDataset(pair_items())
    cached = CachedFeatureDataset(dataset, tmp_path / 'cache', features=['source'])
    cached.prepare(tiny_retriever)
    marker = SkippedMedia(index=1, media_path='b.png', reason='not a decodable image')
    dataset.skipped.update({1: marker, 2: None})
    assert cached[1] is marker and cached[2] is None
    assert cached[0]['source_features'].shape == (32,)


@pytest.mark.parametrize('dtype', ['float64', 'bfloat16'])
def test_a_storage_precision_other_than_float32_or_float16_is_refused_before_anything(
        tmp_path, dtype):
    """A cache stores float32 or float16 alone: another precision is named with the choices
    when the dataset is made, not at its build."""
    with pytest.raises(ValueError, match=re.escape(
            f"CachedFeatureDataset dtype must be one of ('float32', 'float16'), got {dtype!r}")):
        CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache', dtype=dtype)
    assert not list(tmp_path.iterdir())


def test_items_of_neither_captions_nor_media_are_refused_naming_the_dataset(tmp_path):
    """Such items give the cache no feature kind: built, it held no feature array, which its
    own check then called corrupt."""
    items = [dict(target_text=item['target_text'], lang=item['lang'], index=item['index'])
             for item in pair_items()]
    with pytest.raises(ValueError, match=re.escape(
            'nothing to cache for ListDataset: its items carry neither source_text nor fixed '
            'media')):
        CachedFeatureDataset(ListDataset(items), tmp_path / 'cache')
    assert not list(tmp_path.iterdir())
