"""xmr's ranks and statistics against references written from their definitions, not from xmr.

Two references: an ordering one (sort the gallery by decreasing score, tied negatives before the
positives, take the first positive's position), which xmr's counting rule must equal exactly,
ties included; and the DASD/MLA release's ``metrics.py`` (``compute_metrics`` for one caption
per media, ``tensor_text_to_video_metrics`` / ``tensor_video_to_text_sim`` for several), which
xmr's standard text→media and grouped media→text must equal wherever no scores tie.
"""
import numpy as np
import pytest
import torch

from xmr.evaluation.ranking import media_to_text_ranks, rank_summary, text_to_media_ranks


def _first_positive(scores: np.ndarray, positive: np.ndarray) -> int:
    """1-based position of the first positive when tied negatives go first."""
    order = sorted(range(len(scores)), key=lambda g: (-scores[g], bool(positive[g])))
    return next(pos for pos, g in enumerate(order, 1) if positive[g])


def _ordering_ranks(scores: np.ndarray, query_group, gallery_group) -> np.ndarray:
    return np.array([_first_positive(row, np.asarray(gallery_group) == group)
                     for row, group in zip(scores, query_group)])


def _grouped_ordering_ranks(scores: np.ndarray, caption_media: np.ndarray) -> np.ndarray:
    """Media query m: its captions' groups, each scored by its best caption, then ordered."""
    media = scores.shape[0]
    groups = np.array([[row[caption_media == g].max() for g in range(media)] for row in scores])
    return _ordering_ranks(groups, range(media), range(media))


def _random_case(rng: np.random.Generator, ties: bool):
    media = int(rng.integers(1, 9))
    caption_media = np.repeat(np.arange(media), rng.integers(1, 6, size=media))
    rng.shuffle(caption_media)
    shape = (len(caption_media), media)
    scores = rng.integers(0, 3, size=shape) / 2 if ties else rng.standard_normal(shape)
    return scores, caption_media


@pytest.mark.parametrize('ties', [True, False])
def test_ranks_equal_the_ordering_reference_with_and_without_ties(ties):
    rng = np.random.default_rng(1)
    for _ in range(300):
        scores, caption_media = _random_case(rng, ties)
        t2i = text_to_media_ranks(torch.tensor(scores), torch.tensor(caption_media))
        assert t2i.tolist() == _ordering_ranks(
            scores, caption_media, range(scores.shape[1])).tolist()
        i2t = media_to_text_ranks(torch.tensor(scores.T.copy()), torch.tensor(caption_media))
        assert i2t.tolist() == _ordering_ranks(
            scores.T, range(scores.shape[1]), caption_media).tolist()
        grouped = media_to_text_ranks(torch.tensor(scores.T.copy()), torch.tensor(caption_media),
                                      grouped=True)
        assert grouped.tolist() == _grouped_ordering_ranks(scores.T, caption_media).tolist()


def _dasd_compute_metrics(x: np.ndarray) -> dict:
    """DASD/MLA ``metrics.compute_metrics``: query i's positive is column i."""
    ind = np.where(np.sort(-x, axis=1) - np.diag(-x)[:, None] == 0)[1]
    return {'R@1': 100 * np.mean(ind == 0), 'R@5': 100 * np.mean(ind < 5),
            'R@10': 100 * np.mean(ind < 10), 'MdR': np.median(ind) + 1, 'MnR': np.mean(ind) + 1}


def _dasd_multi_sentence(sim: np.ndarray, captions_per_media: np.ndarray) -> tuple[dict, dict]:
    """DASD/MLA ``evaluate.py``'s multi-sentence path on ``sim [C, M]``, captions grouped by
    media in order: pad to ``[M, max captions, M]`` with -inf, then text→video by a double
    argsort and video→text by ``compute_metrics`` on each media's best caption."""
    ends = np.cumsum(captions_per_media)
    longest = captions_per_media.max()
    padded = np.stack([np.concatenate([sim[e - n:e], np.full((longest - n, sim.shape[1]),
                                                             -np.inf)])
                       for e, n in zip(ends, captions_per_media)])
    stacked = torch.tensor(padded).permute(1, 0, 2)
    ranks = torch.argsort(torch.argsort(stacked, dim=-1, descending=True), dim=-1)
    ranks = torch.diagonal(ranks, dim1=1, dim2=2).flatten()
    valid = ranks[torch.isfinite(torch.diagonal(torch.tensor(padded), dim1=0, dim2=2).flatten())]
    t2v = {f'R@{k}': float(100 * (valid < k).double().mean()) for k in (1, 5, 10)}
    t2v['MnR'] = float((valid + 1).double().mean())
    return t2v, _dasd_compute_metrics(padded.max(axis=1).T)


def test_standard_and_grouped_equal_the_dasd_release_without_ties():
    rng = np.random.default_rng(2)
    for _ in range(200):
        media = int(rng.integers(2, 30))
        square = rng.standard_normal((media, media))
        ours = rank_summary(text_to_media_ranks(torch.tensor(square), torch.arange(media)),
                            (1, 5, 10), 't')
        theirs = _dasd_compute_metrics(square)
        assert [ours[f't_{key}'] for key in theirs] == pytest.approx(list(theirs.values()))

        counts = rng.integers(1, 6, size=media)
        caption_media = torch.arange(media).repeat_interleave(torch.tensor(counts))
        sim = rng.standard_normal((int(counts.sum()), media))
        t2v, v2t = _dasd_multi_sentence(sim, counts)
        ours = rank_summary(text_to_media_ranks(torch.tensor(sim), caption_media), (1, 5, 10),
                            't')
        assert [ours[f't_{key}'] for key in t2v] == pytest.approx(list(t2v.values()))
        grouped = rank_summary(media_to_text_ranks(torch.tensor(sim.T.copy()), caption_media,
                                                   grouped=True), (1, 5, 10), 'v')
        assert [grouped[f'v_{key}'] for key in v2t] == pytest.approx(list(v2t.values()))
