"""What a validation or test scores: each dataset, in the loop's order, with its caption counts."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from xmr.evaluation import RetrievalMetric, evaluated_sets
from xmr.models.data_preprocessor import RetrievalDataPreprocessor


class CaptionsOf:
    """A dataset exposing its captions (``captions_of``) and a metainfo, nothing else."""

    def __init__(self, name: str, captions: list[dict[str, list[str]]]) -> None:
        self.metainfo = dict(dataset=name, split='val', languages=list(captions[0]))
        self.captions = captions

    def __len__(self) -> int:
        return len(self.captions)

    def captions_of(self, index: int) -> dict[str, list[str]]:
        return self.captions[index]


class WhitespaceTokenizer:
    """A word per token plus start and end, ``max_length`` of them at most; ``?`` unknown."""

    max_length, unk_id = 5, 0

    def count(self, captions: list[str]) -> tuple[int, int, int]:
        lengths = [len(caption.split()) + 2 for caption in captions]
        unknown = sum(caption.split().count('?') for caption in captions)
        return sum(length > self.max_length for length in lengths), sum(lengths), unknown


def loader(dataset) -> SimpleNamespace:
    return SimpleNamespace(dataset=dataset)


def counting_model() -> SimpleNamespace:
    """A model whose preprocessor counts with :class:`WhitespaceTokenizer` in every language."""
    tokenizer = WhitespaceTokenizer()

    def count_dataset_caption_tokens(dataset, langs):
        counts = {}
        for lang in langs:
            captions = [text for index in range(len(dataset))
                        for text in dataset.captions_of(index)[lang]]
            cut, pieces, unknown = tokenizer.count(captions)
            counts[lang] = SimpleNamespace(captions=len(captions), context=tokenizer.max_length,
                                           cut=cut, pieces=pieces, unknown=unknown)
        return counts

    return SimpleNamespace(data_preprocessor=SimpleNamespace(
        count_dataset_caption_tokens=count_dataset_caption_tokens))


def test_each_dataset_of_a_multi_dataset_loop_is_recorded_in_order_with_its_counts():
    coco = CaptionsOf('coco', [{'en': ['a dog on grass'], 'ja': ['犬 ?']},
                               {'en': ['two cats'], 'ja': ['猫 が 二 匹 いる']}])
    multi30k = CaptionsOf('multi30k', [{'de': ['ein Hund']}])
    loop = SimpleNamespace(dataloaders=[loader(coco), loader(multi30k)],
                           evaluators=[None, None])
    assert evaluated_sets(loop, counting_model(), 'validation') == [
        dict(dataset='coco', split='val', languages=['en', 'ja'], media=2, galleries=[],
             caption_token_counts=dict(
            # 'a dog on grass': 6 tokens of 5, 'two cats': 4; '犬 ?': 4, one unknown, and
            # '猫 が 二 匹 いる': 7.
            en=dict(captions=2, context=5, cut=1, pieces=10, unknown=0),
            ja=dict(captions=2, context=5, cut=1, pieces=11, unknown=1))),
        dict(dataset='multi30k', split='val', languages=['de'], media=1, galleries=[],
             caption_token_counts=dict(
            de=dict(captions=1, context=5, cut=0, pieces=4, unknown=0)))]


@pytest.mark.parametrize('model', [
    # A user's own data preprocessor, which does not count: the counts explain recalls, they
    # are not needed to compute them.
    SimpleNamespace(data_preprocessor=SimpleNamespace()),
    # xmr's, of a dataset that exposes no captions (neither records nor captions_of).
    SimpleNamespace(data_preprocessor=RetrievalDataPreprocessor.__new__(
        RetrievalDataPreprocessor)),
])
def test_a_set_whose_captions_cannot_be_counted_is_recorded_without_counts(model):
    dataset = SimpleNamespace(metainfo=dict(dataset='own', split='test', languages=['de']))
    loop = SimpleNamespace(dataloader=loader(dataset), evaluator=None)
    assert evaluated_sets(loop, model, 'test') == [
        dict(dataset='own', split='test', languages=['de'], media=None, galleries=[],
             caption_token_counts={})]


class PlainDataset:
    """A user's dataset with no metainfo."""


def test_a_dataset_without_metainfo_is_named_by_its_type():
    loop = SimpleNamespace(dataloader=loader(PlainDataset()), evaluator=None)
    model = SimpleNamespace(data_preprocessor=SimpleNamespace())
    assert evaluated_sets(loop, model, 'test') == [
        dict(dataset='PlainDataset', split=None, languages=[], media=None, galleries=[],
             caption_token_counts={})]


def test_each_set_records_the_galleries_its_metrics_rank_where_not_the_whole_set():
    coco = CaptionsOf('coco', [{'en': ['a dog']}] * 5)
    evaluator = SimpleNamespace(metrics=[
        RetrievalMetric(protocol='coco_1k_5fold', folds=[3, 0], gallery_size=5, prefix='1k'),
        RetrievalMetric(protocol='coco_5k', gallery_size=5, prefix='5k'),
        RetrievalMetric(protocol='coco_1k_5fold', folds=[0, 3], gallery_size=5, prefix='again'),
        RetrievalMetric(protocol='text_to_text', prefix='text')])
    loop = SimpleNamespace(dataloader=loader(coco), evaluator=evaluator)
    model = SimpleNamespace(data_preprocessor=SimpleNamespace())
    [recorded] = evaluated_sets(loop, model, 'test')
    # The whole 5K gallery (coco_5k) is no gallery of its own; folds 0 and 3 are said once,
    # in order, whatever order each metric gave them in.
    assert recorded['media'] == 5 and recorded['galleries'] == [
        'coco_1k_5fold: folds 0, 3 of 5', "text_to_text: against each item's first en caption"]
