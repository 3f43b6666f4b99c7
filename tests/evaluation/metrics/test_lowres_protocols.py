"""Crossmodal-3600's two conventions, the NLLB benchmarks' protocols, canonical codes in keys."""
import pytest
import torch

from xmr.evaluation import RetrievalMetric
from xmr.evaluation.protocols import PROTOCOLS


def _items():
    # Media A = e1, B = e2. A's first Swahili caption points nearer B, its second at A.
    first_of_a = torch.tensor([0.6, 0.8])
    return [
        {'media_id': 'a', 'index': 0, 'media_embedding': torch.tensor([1.0, 0.0]),
         'caption_embeddings': {'sw': torch.stack([first_of_a, torch.tensor([1.0, 0.0])])}},
        {'media_id': 'b', 'index': 1, 'media_embedding': torch.tensor([0.0, 1.0]),
         'caption_embeddings': {'sw': torch.tensor([[0.0, 1.0]])}},
    ]


@pytest.mark.parametrize('protocol, t2i_r1, i2t_r1', [
    # All captions: A's first caption ranks A second (0.6 < 0.8), the other two rank first.
    ('crossmodal3600', 100 * 2 / 3, 100.0),
    # First captions only (CLIP_benchmark): A's first caption and B's; i2t of A still finds its
    # own caption first (0.6 > 0 for B's), B's own caption scores 1.0 > 0.8.
    ('crossmodal3600_first_caption', 50.0, 100.0),
])
def test_crossmodal3600_all_and_first_caption(protocol, t2i_r1, i2t_r1):
    metric = RetrievalMetric(protocol=protocol, gallery_size=2, languages=['swh_Latn'])
    metrics = metric.compute_metrics(_items())
    assert metrics['sw/t2i_R@1'] == pytest.approx(t2i_r1)
    assert metrics['sw/i2t_R@1'] == pytest.approx(i2t_r1)
    assert 'sw/AR' in metrics and metrics['mAR'] == metrics['sw/AR']


def test_gallery_sizes_of_the_lowres_protocols():
    assert {name: (PROTOCOLS[name].gallery_size, PROTOCOLS[name].captions_per_media)
            for name in ('crossmodal3600', 'crossmodal3600_first_caption', 'xtd200',
                         'flickr30k_200')} == {
        'crossmodal3600': (3600, None), 'crossmodal3600_first_caption': (3600, 1),
        'xtd200': (1000, None), 'flickr30k_200': (1000, None)}
    with pytest.raises(ValueError, match="defined on 3600 media, the evaluation set has 2"):
        RetrievalMetric(protocol='crossmodal3600').compute_metrics(_items())


def test_metric_language_options_take_any_accepted_form():
    metric = RetrievalMetric(languages=['jp', 'swh_Latn'], mean_languages=['sw'],
                             source_language='eng_Latn')
    assert metric.languages == ('ja', 'sw') and metric.source_language == 'en'
    with pytest.raises(ValueError, match="RetrievalMetric languages: unknown language code "
                       "'swahili'"):
        RetrievalMetric(languages=['swahili'])
