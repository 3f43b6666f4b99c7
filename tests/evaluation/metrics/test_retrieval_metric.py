"""RetrievalMetric end to end on fake val_step outputs with hand-computed results."""
import math
import re

import pytest
import torch

import xmr.evaluation  # noqa: F401  (registers the metric)
from xmr.evaluation import RetrievalMetric
from xmr.evaluation.metrics import retrieval
from xmr.registry import METRICS

E0, E1, E2 = torch.eye(3)


def _unit(*values: float) -> torch.Tensor:
    vector = torch.tensor(values, dtype=torch.float32)
    return vector / vector.norm()


def _item(media_id: str, media: torch.Tensor, **captions: list[torch.Tensor]) -> dict:
    return {'media_id': media_id, 'media_embedding': media,
            'caption_embeddings': {lang: torch.stack(rows) if rows else torch.zeros(0, 3)
                                   for lang, rows in captions.items()}}


def _three_media(fr_on_media_2: bool = False) -> list[dict]:
    """en: perfect. de: media 0 has two captions. fr: media 2 has no caption."""
    fr_2 = {'fr': []} if fr_on_media_2 else {}
    return [
        _item('m0', E0, en=[E0], de=[E0, _unit(1, 1, 0)], fr=[E1]),
        _item('m1', E1, en=[E1], de=[_unit(0, 1, 2)], fr=[E1]),
        _item('m2', E2, en=[E2], de=[E2], **fr_2),
    ]


# de, worked out by hand (Ks 1 and 2):
#   t2i: E0 -> rank 1; (1,1,0) ties media 1 -> rank 2; (0,1,2) prefers media 2 -> rank 2;
#        E2 -> rank 1. R@1 50, R@2 100, MdR 1.5, MnR 1.5.
#   i2t: media 0 -> 1; media 1: own caption 0.447 < (1,1,0) caption 0.707 -> 2; media 2 -> 1.
#        R@1 66.67, R@2 100, MdR 1, MnR 4/3.
# fr, gallery = media 0 and 1 (media 2 has no fr caption):
#   t2i: caption of media 0 is E1 -> rank 2; caption of media 1 -> 1. R@1 50, R@2 100.
#   i2t: media 0 scores 0 on both captions (tie) -> 2; media 1 scores 1 on both -> 2. R@1 0.
EXPECTED = {
    'en/t2i_R@1': 100.0, 'en/t2i_R@2': 100.0, 'en/t2i_MdR': 1.0, 'en/t2i_MnR': 1.0,
    'en/i2t_R@1': 100.0, 'en/i2t_R@2': 100.0, 'en/i2t_MdR': 1.0, 'en/i2t_MnR': 1.0,
    'en/AR': 100.0, 'en/rSum': 400.0,
    'de/t2i_R@1': 50.0, 'de/t2i_R@2': 100.0, 'de/t2i_MdR': 1.5, 'de/t2i_MnR': 1.5,
    'de/i2t_R@1': 200 / 3, 'de/i2t_R@2': 100.0, 'de/i2t_MdR': 1.0, 'de/i2t_MnR': 4 / 3,
    'de/AR': (50 + 100 + 200 / 3 + 100) / 4, 'de/rSum': 50 + 100 + 200 / 3 + 100,
    'fr/t2i_R@1': 50.0, 'fr/t2i_R@2': 100.0, 'fr/t2i_MdR': 1.5, 'fr/t2i_MnR': 1.5,
    'fr/i2t_R@1': 0.0, 'fr/i2t_R@2': 100.0, 'fr/i2t_MdR': 2.0, 'fr/i2t_MnR': 2.0,
    'fr/AR': 62.5, 'fr/rSum': 250.0,
    'mAR': ((50 + 100 + 200 / 3 + 100) / 4 + 62.5) / 2,
    'rSum': 50 + 100 + 200 / 3 + 100 + 250,
}


def _run(metric: RetrievalMetric, samples: list[dict], batch_size: int = 2) -> dict:
    for start in range(0, len(samples), batch_size):
        metric.process({}, samples[start:start + batch_size])
    return metric.evaluate(len(metric.results))


def test_end_to_end_by_hand():
    result = _run(RetrievalMetric(recall_ks=(1, 2)), _three_media())
    assert result == pytest.approx(EXPECTED)
    assert list(result)[:2] == ['en/t2i_R@1', 'en/t2i_R@2']  # source language first


def test_the_metric_records_the_languages_its_summaries_are_over():
    """mAR and rSum above are over de and fr (en is reported beside them), mean_languages
    chooses others, and a run without summaries records none."""
    metric = RetrievalMetric(recall_ks=(1, 2))
    _run(metric, _three_media())
    assert metric.summarised_languages == ['de', 'fr']
    chosen = RetrievalMetric(recall_ks=(1, 2), mean_languages=['fr'])
    assert _run(chosen, _three_media())['mAR'] == pytest.approx(EXPECTED['fr/AR'])
    assert chosen.summarised_languages == ['fr']
    english = RetrievalMetric(recall_ks=(1, 2), languages=['en'])
    _run(english, _three_media())
    assert english.summarised_languages == []


def test_empty_caption_tensor_equals_absent_language():
    result = _run(RetrievalMetric(recall_ks=(1, 2)), _three_media(fr_on_media_2=True))
    assert result == pytest.approx(EXPECTED)


def test_duplicated_items_from_ddp_padding_are_dropped():
    samples = _three_media() + _three_media()[:1]
    assert _run(RetrievalMetric(recall_ks=(1, 2)), samples) == pytest.approx(EXPECTED)


def test_registered_and_built_from_config_with_prefix():
    metric = METRICS.build(dict(type='RetrievalMetric', recall_ks=(1, 2), prefix='multi30k'))
    result = _run(metric, _three_media())
    assert result == pytest.approx({f'multi30k/{k}': v for k, v in EXPECTED.items()})


def test_languages_and_mean_languages_select_keys():
    metric = RetrievalMetric(recall_ks=(1, 2), languages=('de', 'fr'), mean_languages=('fr',))
    result = _run(metric, _three_media())
    assert not any(key.startswith('en/') for key in result)
    assert result['mAR'] == pytest.approx(62.5)
    assert result['rSum'] == pytest.approx(250.0)


def test_source_language_counts_when_asked():
    metric = RetrievalMetric(recall_ks=(1, 2), mean_languages=('en', 'fr'))
    assert _run(metric, _three_media())['mAR'] == pytest.approx((100 + 62.5) / 2)


def test_a_language_the_dataset_lacks_is_refused_when_the_loop_hands_its_facts_over():
    """The loop sets dataset_meta when it is built: nothing of the gallery is encoded yet."""
    metric = RetrievalMetric(languages=('en', 'de', 'ko'), prefix='multi30k')
    with pytest.raises(ValueError, match=(
            r"^RetrievalMetric \(multi30k\): languages \['ko'\] were requested but multi30k "
            r"test has captions in \['en', 'de', 'fr', 'cs'\] only")):
        metric.dataset_meta = dict(dataset='multi30k', split='test',
                                   languages=['en', 'de', 'fr', 'cs'])
    metric.dataset_meta = dict(dataset='synthetic')  # facts without languages: checked later
    RetrievalMetric().dataset_meta = dict(languages=['en'])  # every language the data has


def test_a_mean_language_the_dataset_lacks_is_refused_when_the_loop_hands_its_facts_over():
    """Without languages, those evaluated are the dataset's: a mean language it lacks failed
    after the gallery was encoded (and, its keys unknown, after training to the first
    validation)."""
    metric = RetrievalMetric(mean_languages=('de', 'ko'))
    with pytest.raises(ValueError, match=re.escape(
            "RetrievalMetric: mean_languages ['ko'] were requested but multi30k val has captions "
            "in ['en', 'de', 'fr'] only; drop them from the metric's mean_languages or add them "
            "to the dataset's languages")):
        metric.dataset_meta = dict(dataset='multi30k', split='val', languages=['en', 'de', 'fr'])
    metric.dataset_meta = dict(languages=['en', 'de', 'ko'])
    assert metric.expected_keys() >= {'mAR', 'de/AR', 'ko/AR'}
    RetrievalMetric(mean_languages=['ja']).dataset_meta = dict(languages=['en', 'jp'])  # XTD10's


@pytest.mark.parametrize('gallery_size', ['3', 3.0, 0, True])
def test_a_gallery_size_that_is_no_media_count_is_refused_when_the_metric_is_built(gallery_size):
    """'3' was compared with the 3 media once they were encoded: 'defined on 3 media, the
    evaluation set has 3'."""
    with pytest.raises(ValueError, match=re.escape(
            f'gallery_size must be a positive integer (the media count) or None for the '
            f"protocol's own, got {gallery_size!r}")):
        RetrievalMetric(gallery_size=gallery_size)


def test_a_text_gallery_whose_source_language_the_dataset_lacks_is_refused_before_encoding():
    """It was found once every item was encoded (items [...] have no 'en' caption)."""
    metric = RetrievalMetric(protocol='text_to_text', prefix='pairs')
    with pytest.raises(ValueError, match=re.escape(
            "RetrievalMetric (pairs): protocol 'text_to_text' ranks against the 'en' captions "
            "(source_language), but multi30k val has captions in ['de', 'fr'] only; set "
            "source_language to one of them or add it to the dataset's languages")):
        metric.dataset_meta = dict(dataset='multi30k', split='val', languages=['de', 'fr'])
    metric.dataset_meta = dict(dataset='multi30k', split='val', languages=['en', 'de'])
    RetrievalMetric().dataset_meta = dict(languages=['de', 'fr'])  # images: no source needed

def test_unknown_language_lists_the_languages_seen():
    metric = RetrievalMetric(languages=('de', 'ja'))
    with pytest.raises(ValueError, match=r"\['ja'\].*\['de', 'en', 'fr'\]"):
        _run(metric, _three_media())


def test_mean_language_not_evaluated_is_an_error():
    with pytest.raises(ValueError, match='not in languages'):
        RetrievalMetric(languages=('de',), mean_languages=('fr',))
    metric = RetrievalMetric(mean_languages=('cs',))
    with pytest.raises(ValueError, match=r"\['cs'\] are not evaluated"):
        _run(metric, _three_media())


def test_empty_gallery_is_a_clear_error():
    with pytest.raises(ValueError, match='empty gallery'):
        RetrievalMetric().compute_metrics([])


def test_bad_samples_name_the_media():
    metric = RetrievalMetric()
    with pytest.raises(ValueError, match="media 'm0'.*not L2-normalised"):
        metric.process({}, [_item('m0', 2 * E0, en=[E0])])
    with pytest.raises(ValueError, match=r"media 'm1' caption_embeddings\['de'\] must be"):
        metric.process({}, [_item('m1', E1, de=[torch.ones(4) / 2])])
    with pytest.raises(KeyError, match='media_embedding'):
        metric.process({}, [{'media_id': 'm2', 'caption_embeddings': {}}])
    with pytest.raises(ValueError, match='NaN'):
        metric.process({}, [_item('m3', torch.full((3,), math.nan), en=[E0])])
    # A batch row kept as [1, E] would stack into a [M, 1, E] gallery at compute time.
    with pytest.raises(ValueError, match=r"media 'm4': media_embedding must be \[E\], got "
                                         r'\(1, 3\)'):
        metric.process({}, [_item('m4', E0[None], en=[E0])])


def test_stored_results_are_compact_cpu_copies():
    batch = torch.eye(3)
    metric = RetrievalMetric()
    metric.process({}, [_item('m0', batch[0], en=[E0])])
    stored = metric.results[0]['media_embedding']
    assert stored.untyped_storage().nbytes() == 3 * 4  # not the whole [3, 3] batch storage
    batch[0, 0] = 5.0
    assert stored[0] == 1.0


def test_text_to_video_reports_the_r1_sum():
    clips = [_item(f'v{i}', torch.eye(4)[i], en=[torch.eye(4)[i]], de=[torch.eye(4)[i]],
                   fr=[torch.eye(4)[i]]) for i in range(4)]
    clips[0]['caption_embeddings']['de'] = torch.eye(4)[1:2]  # rank 2
    clips[1]['caption_embeddings']['fr'] = _unit(0, 1, 0, 1)[None]  # ties clip 3 -> rank 2
    result = _run(RetrievalMetric(protocol='text_to_video'), clips)
    assert result['de/t2i_R@1'] == 75.0 and result['fr/t2i_R@1'] == 75.0
    assert result['t2v_R@1_sum'] == 150.0
    assert result['de/t2i_MdR'] == 1.0
    assert not any('i2t' in key for key in result) and 'mAR' not in result


def test_xtd10_t2i_r10_mean_over_languages():
    items = [_item(f'i{i}', torch.eye(12)[i], en=[torch.eye(12)[i]], de=[torch.eye(12)[i]])
             for i in range(12)]
    # Its own image scores 0 like 10 others: the ties put it last (rank 12).
    items[0]['caption_embeddings']['de'] = torch.eye(12)[11:12]
    # Six images score above its own: rank 7, within R@10, not R@5.
    items[1]['caption_embeddings']['de'] = _unit(0, 0.5, *[1] * 6, 0, 0, 0, 0)[None]
    metric = RetrievalMetric(protocol='xtd10_t2i_r10', gallery_size=12)
    result = _run(metric, items)
    assert result['de/t2i_R@10'] == pytest.approx(1100 / 12)
    assert result['de/t2i_R@5'] == pytest.approx(1000 / 12)
    assert result['mean_t2i_R@10'] == pytest.approx(1100 / 12)
    for item in items:  # French captions, all at rank 1: the mean of the two languages
        item['caption_embeddings']['fr'] = item['caption_embeddings']['en']
    result = _run(RetrievalMetric(protocol='xtd10_t2i_r10', gallery_size=12), items)
    assert result['fr/t2i_R@10'] == 100.0
    assert result['mean_t2i_R@10'] == pytest.approx((1100 / 12 + 100) / 2)
    with pytest.raises(ValueError, match='defined on 1000 media'):
        _run(RetrievalMetric(protocol='xtd10_t2i_r10'), items)


def test_a_summary_over_galleries_of_other_sizes_says_so(monkeypatch):
    """The standard protocol scores each language on the media it captions: fr on 2 of 3."""
    said = []
    monkeypatch.setattr(retrieval, 'print_log', lambda message, **_: said.append(message))
    result = _run(RetrievalMetric(recall_ks=(1, 2)), _three_media())
    assert result['mAR'] == pytest.approx(EXPECTED['mAR'])
    assert [m for m in said if 'galleries of different sizes' in m] == [
        'the summaries average languages scored on galleries of different sizes (media with a '
        'caption in each: de 3, fr 2); their recalls are not comparable']
    said.clear()
    # fr on every media: de and fr share the gallery, nothing to warn about.
    _run(RetrievalMetric(recall_ks=(1, 2)), _three_media(fr_on_media_2=True)[:2])
    assert not [m for m in said if 'galleries of different sizes' in m]


def test_xtd10_fewshot_scores_only_the_test_images():
    generator = torch.Generator().manual_seed(0)
    media = torch.randn(1000, 32, generator=generator)
    media = media / media.norm(dim=1, keepdim=True)
    split = xmr.evaluation.xtd10_fewshot_split()
    held_out = split.train + split.val
    partner = dict(zip(held_out, held_out[1:] + held_out[:1]))
    # Test images: caption = image (rank 1 both ways). Train/val images: caption = another
    # train/val image, which makes them miss at R@1 in both directions.
    items = [_item(str(i), media[i], de=[media[partner.get(i, i)]]) for i in range(1000)]
    standard = _run(RetrievalMetric(), items, batch_size=250)
    assert standard['de/t2i_R@1'] == pytest.approx(90.0)
    assert standard['de/i2t_R@1'] == pytest.approx(90.0)
    fewshot = _run(RetrievalMetric(protocol='xtd10_fewshot'), items, batch_size=250)
    assert fewshot['de/t2i_R@1'] == fewshot['de/i2t_R@1'] == 100.0
    assert fewshot['de/mean_R@1'] == fewshot['mean_R@1'] == 100.0
    # Test image j's caption is a copy of test image k: text->image misses j's caption (k
    # first); image->text misses j (its caption is k's) and k (its own caption ties with j's,
    # ties ranking last). mean_R@1 is the mean of the two directions.
    j, k = [i for i in range(1000) if i not in held_out][:2]
    items[j]['caption_embeddings']['de'] = media[k][None]
    fewshot = _run(RetrievalMetric(protocol='xtd10_fewshot'), items, batch_size=250)
    assert fewshot['de/t2i_R@1'] == pytest.approx(100 * 899 / 900)
    assert fewshot['de/i2t_R@1'] == pytest.approx(100 * 898 / 900)
    assert fewshot['de/mean_R@1'] == fewshot['mean_R@1'] == pytest.approx(100 * 898.5 / 900)


def test_coco_5fold_equals_mean_of_per_fold_runs_and_follows_index_order():
    generator = torch.Generator().manual_seed(1)
    media = torch.randn(10, 4, generator=generator)
    media = media / media.norm(dim=1, keepdim=True)
    captions = media.repeat_interleave(2, dim=0) + 0.8 * torch.randn(20, 4, generator=generator)
    captions = captions / captions.norm(dim=1, keepdim=True)
    items = [dict(_item(f'm{i}', media[i], ja=[captions[2 * i], captions[2 * i + 1]]), index=i)
             for i in range(10)]
    # Arriving rotated (as gathered from ranks), consecutive items straddle the folds: only
    # the items' index puts m0, m1 back into fold 0.
    folded = _run(RetrievalMetric(protocol='coco_1k_5fold', gallery_size=10),
                  items[3:] + items[:3])
    per_fold = [_run(RetrievalMetric(), items[2 * f:2 * f + 2]) for f in range(5)]
    for key in ('ja/t2i_R@1', 'ja/i2t_R@1', 'ja/t2i_MdR', 'ja/AR', 'mAR', 'rSum'):
        assert folded[key] == pytest.approx(sum(r[key] for r in per_fold) / 5)


def test_shared_media_id_across_dataset_items_is_an_error():
    items = _three_media()
    items[0]['index'], items[1]['index'] = 0, 1
    items[1]['media_id'] = 'm0'
    with pytest.raises(ValueError, match="share media_id 'm0'"):
        _run(RetrievalMetric(), items)


def test_grouped_mode_through_the_metric():
    # media 1's own caption is behind both captions of media 2: standard rank 3, grouped 2.
    items = [
        _item('a', E0, de=[E0, E0]),
        _item('b', _unit(0, 1, 1), de=[E1]),
        _item('c', E2, de=[_unit(0, 1, 3), _unit(0, 1, 2)]),
    ]
    standard = _run(RetrievalMetric(recall_ks=(1, 2)), items)
    grouped = _run(RetrievalMetric(recall_ks=(1, 2), i2t_mode='grouped'), items)
    assert standard['de/i2t_R@1'] == grouped['de/i2t_R@1']
    assert standard['de/i2t_R@2'] == pytest.approx(200 / 3)
    assert grouped['de/i2t_R@2'] == 100.0


def test_protocol_option_errors():
    with pytest.raises(ValueError, match='unknown protocol'):
        RetrievalMetric(protocol='coco')
    with pytest.raises(ValueError, match='R@\\(10,\\)'):
        RetrievalMetric(protocol='xtd10_t2i_r10', recall_ks=(1, 5))
    with pytest.raises(ValueError, match='directions'):
        RetrievalMetric(directions=('t2v',))
    with pytest.raises(ValueError, match='search index'):
        RetrievalMetric(search=dict(index='ann'))


@pytest.mark.parametrize('option, value', [
    ('languages', 'de'), ('mean_languages', 'de'), ('directions', 't2i'), ('recall_ks', 10),
    ('folds', 0)])
def test_one_value_where_a_list_goes_is_named_with_the_list_to_write(option, value):
    """``--cfg-options test_evaluator.languages=de`` gives the string 'de', which was read
    letter by letter ("unknown language code 'd'"); recall_ks=10 failed in iteration. A
    ValueError, as every other bad option of the metric: tools report it as the user's fault."""
    with pytest.raises(ValueError, match=rf'RetrievalMetric {option} must be a list, got '
                                        rf"{value!r}; write \[{value!r}\]"):
        RetrievalMetric(protocol='coco_1k_5fold', **{option: value})


@pytest.mark.parametrize('folds, num_folds, message', [
    ((), 5, r'folds \(\) name no fold'),
    ((5,), 5, r'fold 5 does not exist; folds are 0..4'),
    (None, 0, 'num_folds must be a positive integer, got 0'),
    ((0, 0, 1), 5, r'folds \(0, 0, 1\) repeat fold 0: the mean over folds would count it '
                   r'twice; give each fold once'),
])
def test_coco_folds_that_do_not_exist_are_refused_when_the_metric_is_built(folds, num_folds,
                                                                           message):
    """Not after the 5,000 images are encoded (an empty folds list ended in an IndexError). A
    repeated fold was averaged twice: (0, 0, 1) reported (2 * fold 0 + fold 1) / 3."""
    with pytest.raises(ValueError, match=message):
        RetrievalMetric(protocol='coco_1k_5fold', folds=folds, num_folds=num_folds)


@pytest.mark.parametrize('recall_ks, message', [
    ((1, 1, 5), r'recall_ks \(1, 1, 5\) repeat 1'),
    ((1.0, 5), r'recall_ks must be positive integers, got \(1.0, 5\)'),
])
def test_recall_ks_that_would_misname_or_miscount_a_recall_are_refused(recall_ks, message):
    """A repeated K counted twice in AR and rSum (AR = rSum / (2 * len(recall_ks))), and a float
    K named its key R@1.0, which neither the leaderboard nor CLIP_benchmark's export reads."""
    with pytest.raises(ValueError, match=message):
        RetrievalMetric(recall_ks=recall_ks)


@pytest.mark.parametrize('search, message', [
    (dict(index='ivf', n_probe=4), r"\['n_probe'\] do not apply to index 'ivf'.*'nprobe'"),
    (dict(index='flat', nprobe=4), r"\['nprobe'\] do not apply to index 'flat'"),
    (dict(index='hnsw', nlist=8), r"\['nlist'\] do not apply to index 'hnsw'"),
    (dict(index='ivf', nprobe=0), 'nprobe must be an integer >= 1, got 0'),
    (dict(index='hnsw', ef_search='64'), "ef_search must be an integer >= 1, got '64'"),
    (dict(index='ivf', chunk_size=0), 'chunk_size must be an integer >= 1, got 0'),
])
def test_search_options_are_refused_when_the_metric_is_built(search, message):
    """A misspelt or impossible option fails as the metric is built, not after the whole
    gallery is encoded (a validation during training would stop the run there)."""
    with pytest.raises(ValueError, match=message):
        RetrievalMetric(search=search)


def test_text_to_image_only_reports_the_t2i_r1_sum():
    result = _run(RetrievalMetric(recall_ks=(1, 2), directions=('t2i',)), _three_media())
    assert result['t2i_R@1_sum'] == pytest.approx(50.0 + 50.0)
    assert 'mAR' not in result and 'de/AR' not in result


def test_one_direction_without_r1_reports_its_recalls_and_no_r1_sum():
    # The sum is of R@1: with recall_ks=(2,) there is none to sum, and no key error either.
    result = _run(RetrievalMetric(recall_ks=(2,), directions=('t2i',)), _three_media())
    assert result['de/t2i_R@2'] == pytest.approx(100.0)
    assert not [key for key in result if key.endswith('_sum')]


@pytest.mark.parametrize('shots, gallery_size', [(500, None), (0, None), (50.0, None),
                                                 (5, 10)])
def test_few_shot_splits_leaving_no_test_images_are_refused_when_the_metric_is_built(
        shots, gallery_size):
    """Refused once the whole gallery was encoded, naming 'shots' (a float: a TypeError of
    slice indices)."""
    bound = 499 if gallery_size is None else 4
    with pytest.raises(ValueError, match=re.escape(
            f'fewshot_shots must be a whole number in [1, {bound}] so that the train, val and '
            f'test splits of the {gallery_size or 1000} media are non-empty, got {shots!r}.')):
        RetrievalMetric(protocol='xtd10_fewshot', fewshot_shots=shots, gallery_size=gallery_size)


def test_a_direction_given_twice_is_refused():
    """('t2i', 't2i') ranked twice and, being no single direction, reported no summary: the
    leaderboard had nothing to show."""
    with pytest.raises(ValueError, match=r"directions \('t2i', 't2i'\) repeat 't2i'"):
        RetrievalMetric(directions=('t2i', 't2i'))


def test_image_to_text_only_reports_the_i2t_r1_sum():
    """As a text->image run reports t2i_R@1_sum: without a summary an image->text run had no
    leaderboard column, and tools/test.py stopped after testing without writing its result."""
    result = _run(RetrievalMetric(recall_ks=(1, 2), directions=('i2t',)), _three_media())
    assert result['i2t_R@1_sum'] == pytest.approx(200 / 3 + 0.0)  # de + fr, worked out above
    assert 't2i_R@1_sum' not in result and 'mAR' not in result


def test_media_skipped_as_unreadable_are_counted_once_each():
    metric = RetrievalMetric(recall_ks=(1, 2))
    samples = _three_media()
    metric.process({'skipped_media': ['a/bad.jpg', 'a/gone.jpg']}, samples[:2])
    metric.process({'skipped_media': ['a/bad.jpg']}, samples[2:])  # DDP padding repeats one
    result = metric.evaluate(len(metric.results))
    assert result.pop('skipped_media') == 2
    assert result == pytest.approx(EXPECTED)


def test_a_fixed_size_protocol_missing_skipped_media_names_them_not_gallery_size():
    """One unreadable COCO image under on_corrupt='skip' left 4,999 media, and the error said
    to pass gallery_size, hiding the file at fault."""
    metric = RetrievalMetric(recall_ks=(1, 2), protocol='coco_5k', gallery_size=3)
    metric.process({'skipped_media': ['images/m3.jpg']}, _three_media()[:2])
    with pytest.raises(ValueError, match=re.escape(
            "protocol 'coco_5k' is defined on 3 media; the evaluation set has 2 readable ones "
            "and 1 skipped as unreadable (on_corrupt='skip': images/m3.jpg). Its numbers need "
            'every media: repair or replace those files.')):
        metric.evaluate(3)


def test_a_gallery_whose_every_media_was_skipped_names_them_not_an_empty_dataset():
    metric = RetrievalMetric(recall_ks=(1, 2))
    metric.process({'skipped_media': [f'v/{n}.mp4' for n in 'edcba']}, [])
    with pytest.raises(ValueError, match=re.escape(
            "empty gallery: each of its 5 media was skipped as unreadable (on_corrupt='skip': "
            'v/a.mp4, v/b.mp4, v/c.mp4 and 2 more); repair or replace those files.')):
        metric.evaluate(5)


def test_skipped_media_of_a_protocol_of_any_size_are_only_counted():
    metric = RetrievalMetric(recall_ks=(1, 2))
    metric.process({'skipped_media': ['images/m3.jpg']}, _three_media())
    assert metric.evaluate(4)['skipped_media'] == 1


@pytest.mark.parametrize('device, message', [
    ('gpu', "scoring_device 'gpu' is no torch device"),
    ('cuda:99', "scoring_device 'cuda:99': this machine has"),
    ('mps', "scoring_device 'mps': this machine has 0 'mps' devices")])
def test_a_scoring_device_torch_cannot_use_is_refused_when_the_metric_is_built(device, message):
    """It failed in compute_metrics, after the whole gallery's tokens were encoded."""
    with pytest.raises(ValueError, match=re.escape(message)):
        RetrievalMetric(scoring='tokens', scoring_device=device)


def test_a_scoring_device_is_taken_on_the_cpu_and_left_alone_where_tokens_are_not_scored():
    assert RetrievalMetric(scoring='tokens', scoring_device='cpu').scoring_device == 'cpu'
    assert RetrievalMetric(scoring_device='gpu').scoring == 'embedding'


def _text_item(media_id: str, **captions: list[torch.Tensor]) -> dict:
    return {'media_id': media_id,
            'caption_embeddings': {lang: torch.stack(rows) for lang, rows in captions.items()}}


def _parallel_texts() -> list[dict]:
    """Three items, no media: en captions E0, E1, E2; de captions translate them imperfectly."""
    return [_text_item('a', en=[E0], de=[_unit(1, 1, 0)]),
            _text_item('b', en=[E1], de=[_unit(0, 1, 2)]),
            _text_item('c', en=[E2], de=[E2])]


# text_to_text, worked out by hand (Ks 1 and 2); the gallery is each item's en caption:
#   t2s: de of a (1,1,0) ties en of a and b -> rank 2; de of b (0,1,2) prefers en of c -> 2;
#        de of c -> 1. R@1 100/3, R@2 100, MdR 2, MnR 5/3.
#   s2t: en of a: own de 0.707 beats b's 0, c's 0 -> 1; en of b: own de 0.447 < a's 0.707 -> 2;
#        en of c: own de 1 -> 1. R@1 200/3, R@2 100, MdR 1, MnR 4/3.
TEXT_EXPECTED = {
    'de/t2s_R@1': 100 / 3, 'de/t2s_R@2': 100.0, 'de/t2s_MdR': 2.0, 'de/t2s_MnR': 5 / 3,
    'de/s2t_R@1': 200 / 3, 'de/s2t_R@2': 100.0, 'de/s2t_MdR': 1.0, 'de/s2t_MnR': 4 / 3,
    'de/AR': (100 / 3 + 100 + 200 / 3 + 100) / 4, 'de/rSum': 100 / 3 + 100 + 200 / 3 + 100,
    'mAR': (100 / 3 + 100 + 200 / 3 + 100) / 4, 'rSum': 100 / 3 + 100 + 200 / 3 + 100,
}


def test_text_to_text_ranks_target_captions_against_source_captions_by_hand():
    result = _run(RetrievalMetric(recall_ks=(1, 2), protocol='text_to_text'), _parallel_texts())
    assert result == pytest.approx(TEXT_EXPECTED)


def test_text_to_text_ignores_media_and_reads_only_the_first_source_caption():
    items = _parallel_texts()
    items[0]['media_embedding'] = E2
    items[0]['caption_embeddings']['en'] = torch.stack([E0, E1])
    result = _run(RetrievalMetric(recall_ks=(1, 2), protocol='text_to_text'), items)
    assert result == pytest.approx(TEXT_EXPECTED)


def test_the_logged_table_names_the_i2t_mode_only_where_media_query_captions(monkeypatch):
    said = []
    monkeypatch.setattr(retrieval, 'print_log', lambda message, **_: said.append(message))
    _run(RetrievalMetric(recall_ks=(1, 2), protocol='text_to_text'), _parallel_texts())
    _run(RetrievalMetric(recall_ks=(1, 2), i2t_mode='grouped'), _three_media())
    _run(RetrievalMetric(recall_ks=(1, 2), directions=('t2i',)), _three_media())
    assert [m.splitlines()[0] for m in said if m.startswith('Retrieval')] == [
        'Retrieval (text_to_text):', 'Retrieval (standard, i2t grouped):', 'Retrieval (standard):']


def test_text_to_text_one_direction_reports_its_r1_sum():
    result = _run(RetrievalMetric(recall_ks=(1,), protocol='text_to_text', directions=('t2s',)),
                  _parallel_texts())
    assert result == pytest.approx({'de/t2s_R@1': 100 / 3, 'de/t2s_MdR': 2.0,
                                    'de/t2s_MnR': 5 / 3, 't2s_R@1_sum': 100 / 3})


def test_text_to_text_errors_name_the_fix():
    with pytest.raises(ValueError, match=r"names its directions \('t2s', 's2t'\), got 't2i'"):
        RetrievalMetric(protocol='text_to_text', directions=('t2i',))
    # Refused as the metric is built, not after the set is encoded.
    with pytest.raises(ValueError, match=re.escape(
            "'en' captions are its gallery, not queries; leave the source language out of "
            "languages ['en', 'de']")):
        RetrievalMetric(protocol='text_to_text', languages=('en', 'de'))
    with pytest.raises(ValueError, match=re.escape("out of mean_languages ['en']")):
        RetrievalMetric(protocol='text_to_text', mean_languages=('en',))
    items = _parallel_texts()
    del items[1]['caption_embeddings']['en']
    with pytest.raises(ValueError, match=r"items \['b'\] have none; give the dataset 'en'"):
        _run(RetrievalMetric(protocol='text_to_text'), items)
    with pytest.raises(KeyError, match="lacks 'media_embedding'.*protocol='text_to_text'"):
        _run(RetrievalMetric(), _parallel_texts())
    with pytest.raises(ValueError, match="protocol 'text_to_text' has no media"):
        RetrievalMetric(protocol='text_to_text', scoring='tokens')


def test_xtd10_fewshot_mean_r1_is_the_mean_over_languages():
    # 10 images, 2 shots: train and val hold 4 images, the test split the other 6.
    test_images = xmr.evaluation.xtd10_fewshot_split(10, shots=2).test
    j, k = test_images[:2]
    images = torch.eye(10)
    items = [_item(str(i), images[i], de=[images[i]], fr=[images[i]]) for i in range(10)]
    # fr: test images j and k carry each other's caption -> both miss in both directions.
    items[j]['caption_embeddings']['fr'] = images[k][None]
    items[k]['caption_embeddings']['fr'] = images[j][None]
    result = _run(RetrievalMetric(protocol='xtd10_fewshot', gallery_size=10, fewshot_shots=2),
                  items)
    assert result['de/mean_R@1'] == 100.0
    assert result['fr/t2i_R@1'] == result['fr/i2t_R@1'] == pytest.approx(400 / 6)
    assert result['fr/mean_R@1'] == pytest.approx(400 / 6)
    assert result['mean_R@1'] == pytest.approx((100 + 400 / 6) / 2)


def test_a_language_with_no_caption_rows_anywhere_is_not_evaluated():
    items = _three_media()
    for item in items:
        item['caption_embeddings']['zh'] = torch.zeros(0, 3)
    result = _run(RetrievalMetric(recall_ks=(1, 2)), items)
    assert result == pytest.approx(EXPECTED)


def test_a_language_the_dataset_states_but_no_item_captions_is_named_not_left_out_of_mar():
    """Multi30K stating cs with no cs caption among the items (a converter that wrote them
    empty, a subset of the split) scored mAR over de and fr alone, logged no cs row and said
    nothing: the number read as the paper's mean over de, fr and cs."""
    metric = RetrievalMetric(recall_ks=(1, 2), prefix='multi30k')
    metric.dataset_meta = dict(dataset='multi30k', split='test',
                               languages=['en', 'de', 'fr', 'cs'])
    with pytest.raises(ValueError, match=re.escape(
            "RetrievalMetric (multi30k): multi30k test has captions in ['en', 'de', 'fr', 'cs'], "
            "but no evaluated item has one in ['cs']")):
        _run(metric, _three_media())
    chosen = RetrievalMetric(recall_ks=(1, 2), languages=['en', 'de', 'fr'])
    chosen.dataset_meta = dict(dataset='multi30k', split='test',
                               languages=['en', 'de', 'fr', 'cs'])
    assert _run(chosen, _three_media()) == pytest.approx(EXPECTED)  # the fix the error names


def test_no_languages_to_evaluate_are_refused_when_the_metric_is_built():
    """languages=[] failed after the whole gallery was encoded, with a bare StopIteration."""
    with pytest.raises(ValueError, match=re.escape(
            'RetrievalMetric languages [] name no language to evaluate; give some, or None '
            'for every language of the dataset')):
        RetrievalMetric(languages=[])


def test_embeddings_off_unit_norm_by_more_than_a_hundredth_are_refused():
    metric = RetrievalMetric()
    metric.process({}, [_item('m0', 1.005 * E0, en=[0.995 * E0])])  # within 0.01 of 1
    with pytest.raises(ValueError, match="media 'm1'.*off by 0.02"):
        metric.process({}, [_item('m1', 1.02 * E1, en=[E1])])
    with pytest.raises(ValueError, match=r"caption_embeddings\['en'\] is not L2-normalised"):
        metric.process({}, [_item('m2', E2, en=[0.98 * E2])])


@pytest.mark.parametrize('bad_row', [0.98 * E1, torch.tensor([math.nan, 0.0, 0.0])])
def test_among_two_hundred_languages_the_one_off_unit_norm_is_named(bad_row):
    """An item's rows are checked in one pass over all its languages (one per language took 13
    of an XTD200 item's 15 ms); a row that fails is still named by its language."""
    languages = [f'l{number:03d}' for number in range(200)]
    metric = RetrievalMetric()
    metric.process({}, [_item('m0', E0, **{lang: [E0, E1] for lang in languages})])
    captions = {lang: [E0, E1] for lang in languages}
    captions['l117'] = [E0, bad_row]
    with pytest.raises(ValueError, match=r"media 'm1' caption_embeddings\['l117'\] (is not L2-"
                       r'normalised|holds NaN)'):
        metric.process({}, [_item('m1', E1, **captions)])


def test_an_english_only_set_reports_no_summaries():
    items = [_item(f'm{i}', medium, en=[medium]) for i, medium in enumerate((E0, E1, E2))]
    result = _run(RetrievalMetric(recall_ks=(1, 2)), items)
    assert result['en/AR'] == 100.0
    assert not [key for key in result if '/' not in key]  # no mAR, rSum or R@1 sums


def test_two_ranks_keep_every_media_when_a_padding_item_was_skipped(monkeypatch):
    """Five items on two ranks, batches of three: MMEngine's DefaultSampler gives rank 0 items
    0, 2, 4 and rank 1 items 1, 3 and item 0 again as padding. Item 0 is unreadable, so each
    rank's batch holds its skipped-media marker first. Gathered on rank 0 (two gathered lists
    stand in for the ranks' gather), the gallery must still be items 1-4, as one process
    scores them: MMEngine's own gather would keep the first five of the interleaved lists and
    drop a real medium behind the markers."""
    generator = torch.Generator().manual_seed(0)
    unit = [torch.nn.functional.normalize(torch.randn(3, generator=generator), dim=0)
            for _ in range(10)]
    items = [_item(f'm{i}', unit[i], en=[unit[(i + 1) % 5]], de=[unit[5 + i]]) | {'index': i}
             for i in range(5)]
    rank_lists = []
    for own in ([2, 4], [1, 3]):
        rank = RetrievalMetric(recall_ks=(1, 2, 3))
        rank.process({'skipped_media': ['m0.jpg']}, [items[i] for i in own])
        rank_lists.append(rank.results)

    class TwoRanks:
        @staticmethod
        def get_world_size():
            return 2

        @staticmethod
        def gather_object(results, parts, dst, group):
            assert dst == 0 and results is metric.results
            parts[:] = rank_lists

    monkeypatch.setattr(retrieval, 'dist', TwoRanks)
    monkeypatch.setattr(retrieval, 'is_distributed', lambda: True)
    monkeypatch.setattr(retrieval, 'host_group', lambda: None)
    monkeypatch.setattr(retrieval, 'broadcast_object_list', lambda objects: None)
    metric = RetrievalMetric(recall_ks=(1, 2, 3))
    metric.results = list(rank_lists[0])
    distributed = metric.evaluate(5)
    monkeypatch.undo()
    single = RetrievalMetric(recall_ks=(1, 2, 3))
    single.process({'skipped_media': ['m0.jpg']}, items[1:])
    expected = single.evaluate(5)
    assert distributed == pytest.approx(expected)
    assert expected['skipped_media'] == 1
    # Independently of the metric: de t2i R@1 over the four media 1-4.
    media = torch.stack([unit[i] for i in range(1, 5)])
    captions = torch.stack([unit[5 + i] for i in range(1, 5)])
    scores = captions @ media.T
    hits = (scores.argmax(dim=1) == torch.arange(4)).double().mean().item() * 100
    assert distributed['de/t2i_R@1'] == pytest.approx(hits)


def test_items_sharing_a_media_id_with_other_captions_are_an_error_without_an_index():
    """A model whose val_step gives no index, on a dataset listing one item per caption: the
    second caption of media m0 would leave the gallery unseen (de R@1 over one caption where
    the set has two). A padded repeat of the same item, embedded a little differently on
    another rank, is still dropped quietly."""
    samples = _three_media()
    second_caption = _item('m0', E0, en=[E1])
    with pytest.raises(ValueError, match="two items share media_id 'm0' with other captions"):
        _run(RetrievalMetric(recall_ks=(1, 2)), samples + [second_caption])
    # Moved by 1e-2 per element, as bf16 autocast through a tower's blocks in another batch
    # may move it: still at a cosine of 0.9998 or more from the first.
    noise = torch.tensor([1e-2, -1e-2, 1e-2])
    repeat = dict(samples[0], caption_embeddings={
        lang: torch.nn.functional.normalize(rows + noise, dim=-1)
        for lang, rows in samples[0]['caption_embeddings'].items()})
    assert _run(RetrievalMetric(recall_ks=(1, 2)), samples + [repeat]) == pytest.approx(EXPECTED)
    # Another caption close to the first (cosine 0.89) is still another caption.
    near = _item('m0', E0, en=[E0], de=[E0, _unit(1, 1, 0)], fr=[_unit(0.5, 1, 0)])
    with pytest.raises(ValueError, match="two items share media_id 'm0' with other captions"):
        _run(RetrievalMetric(recall_ks=(1, 2)), samples + [near])


def test_a_repeat_without_an_index_must_caption_the_same_languages():
    """m0's captions again with a language more, one less, or one language's captions under
    another are other captions of m0, not its padded repeat; a language listed with no caption
    is no language of the item."""
    samples = _three_media()
    m0 = dict(en=[E0], de=[E0, _unit(1, 1, 0)], fr=[E1])
    other_languages = [_item('m0', E0, **m0, it=[E2]),
                       _item('m0', E0, en=m0['en'], de=m0['de']),
                       _item('m0', E0, en=m0['en'], de=m0['de'], it=m0['fr'])]
    for repeat in other_languages:
        with pytest.raises(ValueError, match="two items share media_id 'm0' with other captions"):
            _run(RetrievalMetric(recall_ks=(1, 2)), samples + [repeat])
    repeat = _item('m0', E0, **m0, it=[])
    assert _run(RetrievalMetric(recall_ks=(1, 2)), samples + [repeat]) == pytest.approx(EXPECTED)


def test_a_padded_repeat_of_an_indexed_item_is_dropped_whatever_its_embeddings():
    """With a dataset index, the repeat is known to be the same item: its embeddings (another
    batch, another rank, bf16) are not compared."""
    samples = [dict(item, index=i) for i, item in enumerate(_three_media())]
    repeat = dict(samples[0], caption_embeddings={
        lang: -rows for lang, rows in samples[0]['caption_embeddings'].items()})
    assert _run(RetrievalMetric(recall_ks=(1, 2)), samples + [repeat]) == pytest.approx(EXPECTED)


def test_an_approximate_search_builds_the_media_index_once_for_the_languages_sharing_it(
        monkeypatch):
    """en and de rank against all 30 media, fr against the 20 it captions: the media index is
    built for en, kept for de and rebuilt for fr (one index per language before); the captions'
    indexes are each language's own. IVF with one cell searches exactly, so the recalls are the
    full matrix's."""
    from xmr.evaluation import protocols
    built = []

    class CountedSearcher(protocols.FaissSearcher):
        def __init__(self, gallery, **options):
            built.append(gallery.shape[0])
            super().__init__(gallery, **options)

    monkeypatch.setattr(protocols, 'FaissSearcher', CountedSearcher)
    generator = torch.Generator().manual_seed(0)
    unit = torch.nn.functional.normalize
    media = unit(torch.randn(30, 8, generator=generator), dim=-1)
    captions = {lang: unit(media + 0.5 * torch.randn(30, 8, generator=generator), dim=-1)
                for lang in ('en', 'de', 'fr')}
    samples = [{'media_id': str(m), 'media_embedding': media[m], 'index': m,
                'caption_embeddings': {lang: rows[m:m + 1] for lang, rows in captions.items()
                                       if lang != 'fr' or m < 20}} for m in range(30)]
    metric = RetrievalMetric(search=dict(index='ivf', nlist=1), recall_ks=(1, 5))
    result = metric.compute_metrics(samples)
    assert built == [30, 30, 30, 20, 20]
    for lang, count in (('en', 30), ('de', 30), ('fr', 20)):
        scores = captions[lang][:count] @ media[:count].T
        own = scores.diagonal()
        t2i_ranks = 1 + (scores > own[:, None]).sum(dim=1)
        i2t_ranks = 1 + (scores.T > own[:, None]).sum(dim=1)
        for k in (1, 5):
            assert result[f'{lang}/t2i_R@{k}'] == pytest.approx(
                100 * (t2i_ranks <= k).double().mean().item())
            assert result[f'{lang}/i2t_R@{k}'] == pytest.approx(
                100 * (i2t_ranks <= k).double().mean().item())


def test_the_keys_expected_before_evaluation_are_those_the_metric_reports():
    """save_best and start_from_best are checked against these before training: the keys
    worked out by hand above, with a prefix when there is one."""
    assert RetrievalMetric(recall_ks=(1, 2), languages=['en', 'de', 'fr']).expected_keys() == \
        set(EXPECTED)
    assert RetrievalMetric(recall_ks=(1, 2), protocol='text_to_text',
                           languages=['de']).expected_keys() == set(TEXT_EXPECTED)
    prefixed = RetrievalMetric(recall_ks=(1, 2), prefix='m30k')
    prefixed.dataset_meta = dict(languages=['en', 'de', 'fr'])  # as the loop hands it over
    assert prefixed.expected_keys() == {f'm30k/{key}' for key in EXPECTED}
    # The dataset's languages hold the source, whose captions are a text gallery, not queries:
    # 'en/AR' was expected, so save_best='en/AR' passed the check and was never reported.
    text = RetrievalMetric(recall_ks=(1, 2), protocol='text_to_text')
    text.dataset_meta = dict(languages=['en', 'de'])
    assert text.expected_keys() == set(TEXT_EXPECTED)


@pytest.mark.parametrize('options', [dict(directions=('t2i',)), dict(directions=('i2t',)),
                                     dict(recall_ks=(2,), directions=('t2i',)),
                                     dict(mean_languages=['fr'])])
def test_the_keys_expected_before_evaluation_hold_every_key_reported(options):
    metric = RetrievalMetric(**{'recall_ks': (1, 2), **options})
    metric.dataset_meta = dict(languages=['en', 'de', 'fr'])
    assert set(_run(metric, _three_media())) <= metric.expected_keys()


def test_no_keys_are_expected_while_the_languages_are_unknown():
    assert RetrievalMetric().expected_keys() is None


def test_the_keys_expected_of_one_direction_hold_no_ar_and_of_xtd10_fewshot_its_mean_r1():
    """One direction reports no AR nor rSum (save_best='mAR' is then refused before training,
    not at the first validation); xtd10_fewshot adds each language's and the mean's R@1."""
    one = RetrievalMetric(recall_ks=(1,), directions=('t2i',), languages=['en', 'de'])
    assert one.expected_keys() == {f'{lang}/t2i_{statistic}' for lang in ('en', 'de')
                                   for statistic in ('R@1', 'MdR', 'MnR')} | {'t2i_R@1_sum'}
    fewshot = RetrievalMetric(recall_ks=(1,), protocol='xtd10_fewshot', languages=['en', 'de'])
    per_language = [f'{direction}_{statistic}' for direction in ('t2i', 'i2t')
                    for statistic in ('R@1', 'MdR', 'MnR')] + ['AR', 'rSum', 'mean_R@1']
    # The summaries average the target languages: 'de', the source 'en' left out.
    assert fewshot.expected_keys() == {f'{lang}/{key}' for lang in ('en', 'de')
                                       for key in per_language} | {'mAR', 'rSum', 'mean_R@1'}


def test_a_second_evaluation_scores_the_items_processed_since_the_first():
    """Each validation round evaluates the same metric: ``evaluate`` must empty its results,
    else the next round's items repeat the first round's media ids, the first (stale)
    embeddings are kept and the new checkpoint is scored as the old one."""
    metric = RetrievalMetric(recall_ks=(1, 2))
    assert _run(metric, _three_media()) == pytest.approx(EXPECTED)
    assert metric.results == []
    # Round two: every German caption is its own media's embedding -> all ranks are 1.
    perfect = [_item(f'm{i}', medium, en=[medium], de=[medium])
               for i, medium in enumerate((E0, E1, E2))]
    second = _run(metric, perfect)
    assert second['de/t2i_R@1'] == second['de/i2t_R@1'] == 100.0
    assert 'fr/AR' not in second


def test_a_run_without_summaries_records_no_summarised_languages():
    """One direction without R@1 has no summary key (no AR, no R@1 sum): the languages
    ``tools/test.py`` records beside the metrics must then be none, not de and fr."""
    metric = RetrievalMetric(recall_ks=(2,), directions=('t2i',))
    result = _run(metric, _three_media())
    assert not [key for key in result if '/' not in key]
    assert result['de/t2i_R@2'] == 100.0
    assert metric.summarised_languages == []


def test_media_embeddings_of_different_widths_are_refused_naming_them():
    """Two models' embeddings in one gallery are refused as such, not as a stack error."""
    items = [_item('m0', E0, en=[E0]),
             {'media_id': 'm1', 'media_embedding': torch.tensor([0.0, 1.0, 0.0, 0.0]),
              'caption_embeddings': {'en': torch.tensor([[0.0, 1.0, 0.0, 0.0]])}}]
    with pytest.raises(ValueError,
                       match=re.escape('media embeddings have different widths [3, 4]')):
        _run(RetrievalMetric(), items)


@pytest.mark.parametrize('options, reported', [
    (dict(protocol='text_to_video', recall_ks=(5, 10)), r"\('t2i',\) at R@\(1,\)"),
    (dict(protocol='xtd10_fewshot', directions=('t2i',)), r"\('t2i', 'i2t'\) at R@\(1,\)"),
    (dict(protocol='xtd10_fewshot', recall_ks=(5,)), r"\('t2i', 'i2t'\) at R@\(1,\)"),
])
def test_a_protocol_missing_the_recalls_its_summary_reads_is_refused_when_built(options,
                                                                                 reported):
    """text_to_video sums text->video R@1 and xtd10_fewshot averages the R@1 of both
    directions: without them the summary failed as a KeyError after the set was encoded."""
    with pytest.raises(ValueError, match=f"protocol '{options['protocol']}' reports directions "
                       + reported):
        RetrievalMetric(**options)


def test_text_to_video_reports_its_r1_sum_under_its_own_name_only():
    """One direction at R@1 is summarised once: ``t2v_R@1_sum``, not also ``t2i_R@1_sum``."""
    clips = [_item(f'v{i}', torch.eye(4)[i], en=[torch.eye(4)[i]], de=[torch.eye(4)[i]])
             for i in range(4)]
    result = _run(RetrievalMetric(protocol='text_to_video'), clips)
    assert {key: value for key, value in result.items() if '/' not in key} == {
        't2v_R@1_sum': 100.0}


def test_the_keys_expected_of_a_dataset_stating_other_codes_use_the_canonical_ones():
    """The reported keys use canonical codes (``ja``, not the dataset's ``jp``): so must the
    keys save_best is checked against, else save_best='ja/t2i_R@1' is refused before training."""
    metric = RetrievalMetric(recall_ks=(1,), directions=('t2i',))
    metric.dataset_meta = dict(languages=['eng_Latn', 'jp'])
    assert metric.expected_keys() == {f'{lang}/t2i_{statistic}' for lang in ('en', 'ja')
                                      for statistic in ('R@1', 'MdR', 'MnR')} | {'t2i_R@1_sum'}


def test_a_repeat_without_an_index_differing_in_one_of_a_languages_captions_is_an_error():
    """Every caption row must match, not one per language: m0 again with its first German
    caption and another second one is another item of m0, whose second caption would be
    dropped from the gallery unseen."""
    samples = _three_media()
    other_second = _item('m0', E0, en=[E0], de=[E0, E2], fr=[E1])
    with pytest.raises(ValueError, match="two items share media_id 'm0' with other captions"):
        _run(RetrievalMetric(recall_ks=(1, 2)), samples + [other_second])


def test_a_repeat_without_an_index_holding_a_caption_twice_is_an_error():
    """Two items of m0, the second with its caption written twice (sets repeat caption texts):
    as many rows per language are needed, the cosines of one row against two (broadcast) are
    no proof of the same item."""
    samples = _three_media()
    twice = _item('m0', E0, en=[E0, E0], de=[E0, _unit(1, 1, 0)], fr=[E1])
    with pytest.raises(ValueError, match="two items share media_id 'm0' with other captions"):
        _run(RetrievalMetric(recall_ks=(1, 2)), samples + [twice])


def test_no_directions_are_refused_when_the_metric_is_built():
    """directions=[] would rank nothing and report no recall at all."""
    with pytest.raises(ValueError, match=re.escape(
            "directions must be a non-empty subset of ('t2i', 'i2t'), got []")):
        RetrievalMetric(directions=[])


def test_a_dataset_stating_its_languages_in_other_codes_is_evaluated_as_captioned():
    """The stated languages (NLLB codes here) are the items' languages in canonical form: each
    is captioned, so none is refused as missing and the numbers are those worked out above."""
    metric = RetrievalMetric(recall_ks=(1, 2))
    metric.dataset_meta = dict(languages=['eng_Latn', 'deu_Latn', 'fra_Latn'])
    assert _run(metric, _three_media()) == pytest.approx(EXPECTED)


def test_mean_languages_in_other_codes_select_their_canonical_languages():
    """mean_languages=['fra_Latn'] averages the fr scores (keys and summaries use canonical
    codes), as mean_languages=['fr'] does."""
    metric = RetrievalMetric(recall_ks=(1, 2), mean_languages=['fra_Latn'])
    result = _run(metric, _three_media())
    assert result['mAR'] == pytest.approx(EXPECTED['fr/AR'])
    assert result['rSum'] == pytest.approx(EXPECTED['fr/rSum'])
    assert metric.summarised_languages == ['fr']


def test_a_media_without_any_caption_row_is_kept_out_of_every_language_gallery():
    """An item whose languages all hold zero caption rows is processed (there is nothing to
    check the norm of) and, captioned in no language, changes no number worked out above."""
    uncaptioned = _item('m3', _unit(1, 1, 1), de=[], fr=[])
    assert _run(RetrievalMetric(recall_ks=(1, 2)), _three_media() + [uncaptioned]) == \
        pytest.approx(EXPECTED)


def test_the_keys_expected_of_chosen_languages_are_theirs_not_the_datasets():
    """languages=['de'] on a set stating en, de and fr reports de alone: the keys save_best is
    checked against must not hold en or fr (save_best='fr/AR' would pass, then never come)."""
    metric = RetrievalMetric(recall_ks=(1, 2), languages=['de'])
    metric.dataset_meta = dict(languages=['en', 'de', 'fr'])
    de_keys = {key for key in EXPECTED if key.startswith('de/')}
    assert metric.expected_keys() == de_keys | {'mAR', 'rSum'}
    assert set(_run(metric, _three_media())) == de_keys | {'mAR', 'rSum'}


def test_a_caption_tensor_of_one_row_without_its_row_dimension_is_refused():
    """caption_embeddings[lang] is [n, E]: a bare [E] vector is refused as the item is
    processed, naming the media and the language."""
    with pytest.raises(ValueError, match=re.escape(
            "media 'm0' caption_embeddings['en'] must be [n, 3], got (3,)")):
        RetrievalMetric().process({}, [{'media_id': 'm0', 'media_embedding': E0,
                                        'caption_embeddings': {'en': E0}}])


def test_xtd10_fewshot_splits_the_media_in_index_order_whatever_their_arrival():
    """The seeded split names media by position in the dataset: items gathered out of order
    (reversed here) are put back in ``index`` order first, so the same test images are scored
    (reversed, test positions 3 and 7 would hold train/val images 6 and 2)."""
    split = xmr.evaluation.xtd10_fewshot_split(10, shots=2)
    held_out = split.train + split.val
    partner = dict(zip(held_out, held_out[1:] + held_out[:1]))
    images = torch.eye(10)
    # Test images: caption = image (rank 1). Train/val images: caption = another one of them.
    items = [dict(_item(str(i), images[i], fr=[images[partner.get(i, i)]]), index=i)
             for i in range(10)]
    result = _run(RetrievalMetric(protocol='xtd10_fewshot', gallery_size=10, fewshot_shots=2),
                  items[::-1])
    assert result['fr/t2i_R@1'] == result['fr/i2t_R@1'] == 100.0


def test_a_text_gallery_whose_items_hold_only_source_captions_names_the_missing_targets():
    """text_to_text with en captions alone has no query language: said as such, not as an
    empty table."""
    items = [_text_item(name, en=[row]) for name, row in zip('abc', (E0, E1, E2))]
    with pytest.raises(ValueError, match=re.escape(
            "protocol 'text_to_text' ranks target captions against the 'en' ones, and the items "
            "have no other language; languages seen: ['en']")):
        _run(RetrievalMetric(protocol='text_to_text'), items)
