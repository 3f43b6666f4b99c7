"""ConcatDataset: xmr datasets read as one, built from a config of scope ``xmr``."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import DefaultScope
from torch.utils.data import Dataset

from xmr.datasets.annotation import Annotation, MediaRecord, dump_annotation
from xmr.datasets.base import MediaDataset
from xmr.datasets.concat import ConcatDataset, annotation_files
from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.datasets.held_out import check_held_out, media_files
from xmr.datasets.language_batch_sampler import LanguageBatchSampler
from xmr.datasets.pairs import CaptionPairDataset
from xmr.datasets.retrieval import RetrievalDataset
from xmr.datasets.sample_keys import SampleIndex
from xmr.datasets.synthetic import SyntheticPairDataset, SyntheticRetrievalDataset
from xmr.registry import DATASETS


def pairs(languages, num_scenes=3, **options) -> dict:
    return dict(type='SyntheticPairDataset', num_scenes=num_scenes, languages=languages,
                **options)


class Drawn(MediaDataset):
    """Items whose media is a draw from the process's torch stream, or a skipped marker."""

    def __init__(self, size: int, skipped: int | None = None) -> None:
        self.size, self.skipped, self.checked = size, skipped, 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        if not 0 <= index < self.size:
            raise IndexError(index)
        if index == self.skipped:
            return SkippedMedia(int(index), 'x.jpg', 'empty')
        return dict(media=torch.rand(2) if self.with_media else None, index=int(index))

    def check_media_exist(self) -> None:
        self.checked += 1


def test_a_config_of_scope_xmr_builds_xmrs_concat_with_xmr_children():
    """MMEngine's ConcatDataset built its children with its root registry, where
    SyntheticPairDataset is unknown, and took only mmengine BaseDatasets."""
    cfg = dict(type='ConcatDataset', datasets=[pairs(['de']), pairs(['zh'], seed=1)])
    with DefaultScope.overwrite_default_scope('xmr'):
        built = MMENGINE_DATASETS.build(cfg)
    assert type(built) is ConcatDataset
    assert [type(child) for child in built.datasets] == [SyntheticPairDataset] * 2
    assert type(DATASETS.build(cfg)) is ConcatDataset


def test_items_are_the_childrens_in_order_with_the_wholes_index():
    first, second = SyntheticPairDataset(3, ['de']), SyntheticPairDataset(2, ['zh'], seed=1)
    whole = ConcatDataset([first, second])
    assert len(whole) == 5
    assert whole.locate(3) == (1, 0)
    assert whole.locate(-1) == (1, 1)
    for index, (child, local) in enumerate([(first, 0), (first, 1), (first, 2), (second, 0),
                                            (second, 1)]):
        item, expected = whole[index], child[local]
        assert item['index'] == index
        assert item['media_id'] == expected['media_id']
        assert item['target_text'] == expected['target_text']
        assert torch.equal(item['media'], expected['media'])
    assert whole[-1]['media_id'] == second[1]['media_id']
    assert whole[-1]['index'] == 4  # its index in the whole, as whole[4] names it
    with pytest.raises(IndexError, match=r'ConcatDataset index 5 is outside \[0, 5\)'):
        whole[5]


def test_languages_metainfo_and_item_languages_span_the_children():
    whole = ConcatDataset([pairs(['de', 'zh'], num_scenes=2), pairs(['zh', 'fr'], num_scenes=1),
                           pairs([], num_scenes=2)])
    assert whole.languages == ['de', 'zh', 'fr']
    # de zh de zh | zh fr | English pairs, a group of their own past the languages.
    assert whole.item_languages().tolist() == [0, 1, 0, 1, 1, 2, 3, 3]
    meta = whole.metainfo
    assert meta['languages'] == ['de', 'zh', 'fr']
    assert meta['media_type'] == 'image' and meta['source_lang'] == 'en'
    assert 'num_scenes' not in meta  # the children disagree
    assert [child['languages'] for child in meta['datasets']] == [['de', 'zh'], ['zh', 'fr'], []]


def test_a_language_batch_sampler_batches_one_language_across_children():
    whole = ConcatDataset([pairs(['de', 'zh'], num_scenes=4), pairs(['zh'], num_scenes=4)])

    class Sampler:
        dataset, seed, shuffle = whole, 0, True

    batches = list(LanguageBatchSampler(Sampler(), batch_size=4))
    languages = whole.item_languages()
    assert sorted(index for batch in batches for index in batch) == list(range(12))
    assert all(len(set(languages[batch].tolist())) == 1 for batch in batches)
    assert sorted(whole[batch[0]]['lang'] for batch in batches) == ['de', 'zh', 'zh']


def test_children_whose_items_carry_other_keys_are_refused_naming_both():
    with pytest.raises(ValueError, match=(
            r"ConcatDataset: the items of datasets\[1\] \(SyntheticRetrievalDataset\) carry "
            r"keys \['captions', 'index', 'media', 'media_id'\], those of datasets\[0\] "
            r"\(SyntheticPairDataset\) \['index', 'lang', 'media', 'media_id', 'source_text', "
            r"'target_text'\]: .*Build the datasets alike")):
        ConcatDataset([pairs(['de']), dict(type='SyntheticRetrievalDataset', num_scenes=2)])


def test_the_key_check_decodes_no_media_and_leaves_with_media_as_it_was():
    child = SyntheticPairDataset(2, ['de'])
    seen = []
    original = type(child)._media
    type(child)._media = lambda self, *args: seen.append(self.with_media) or original(
        self, *args)
    try:
        whole = ConcatDataset([child])
    finally:
        type(child)._media = original
    assert seen == [False]
    assert whole.item_keys == ['index', 'lang', 'media', 'media_id', 'source_text',
                               'target_text']
    assert child.with_media and whole.with_media


def test_with_media_is_set_on_every_child():
    whole = ConcatDataset([Drawn(2), Drawn(3)])
    whole.with_media = False
    assert [child.with_media for child in whole.datasets] == [False, False]
    assert not whole.with_media and whole[3]['media'] is None
    whole.with_media = True
    assert whole[3]['media'] is not None


def test_draws_are_keyed_by_the_wholes_index_not_the_childs():
    """Keyed by the child's index, item 0 of each child drew the same augmentation."""
    whole = ConcatDataset([Drawn(2), Drawn(2)])
    first, again = whole[SampleIndex(0, 5, 1)], whole[SampleIndex(0, 5, 1)]
    other_child = whole[SampleIndex(2, 5, 1)]
    assert torch.equal(first['media'], again['media'])
    assert not torch.equal(first['media'], other_child['media'])


def test_a_skipped_item_names_the_wholes_index():
    whole = ConcatDataset([Drawn(2), Drawn(3, skipped=1)])
    assert whole[3] == whole[-2] == SkippedMedia(3, 'x.jpg', 'empty')


def test_children_of_other_corrupt_policies_are_refused_and_one_policy_is_the_wholes():
    """The feature cache raises or skips a recorded unreadable file by the dataset's one
    policy, which a whole of two policies would not have."""
    raising, skipping = Drawn(1), Drawn(1)
    raising.on_corrupt, skipping.on_corrupt = 'raise', 'skip'
    assert ConcatDataset([raising, Drawn(1), raising]).on_corrupt == 'raise'
    assert ConcatDataset([Drawn(1)]).on_corrupt is None
    with pytest.raises(ValueError, match=r"datasets\[2\] \(Drawn\) sets on_corrupt='skip', "
                       r"datasets\[0\] \(Drawn\) on_corrupt='raise': give every child the "
                       'same policy'):
        ConcatDataset([raising, Drawn(1), skipping])


def test_media_checks_reach_every_child():
    whole = ConcatDataset([Drawn(1), Drawn(1)])
    whole.check_media_exist()
    assert [child.checked for child in whole.datasets] == [1, 1]


def test_item_languages_only_where_every_child_tells_them():
    class Untold(Dataset):
        """Pairs, without item_languages()."""

        def __init__(self) -> None:
            self.inner = SyntheticPairDataset(2, ['de'])

        def __len__(self) -> int:
            return len(self.inner)

        def __getitem__(self, index: int) -> dict:
            return self.inner[index]

    whole = ConcatDataset([pairs(['de']), Untold()])
    assert whole[3]['index'] == 3
    assert getattr(whole, 'item_languages', None) is None
    with pytest.raises(ValueError, match='ConcatDataset tells no item languages'):
        LanguageBatchSampler(type('S', (), {'dataset': whole})(), batch_size=1)


@pytest.mark.parametrize('datasets, error, message', [
    ([], ValueError, 'non-empty list'),
    ('ab', ValueError, 'non-empty list'),  # a name, not a list of datasets
    (dict(type='SyntheticPairDataset'), ValueError, 'non-empty list'),
    ([pairs(['de']), [1, 2]], TypeError, r'datasets\[1\] must be a dataset .* got list'),
])
def test_what_is_no_list_of_datasets_is_refused(datasets, error, message):
    with pytest.raises(error, match=message):
        ConcatDataset(datasets)


def test_a_plain_torch_dataset_is_taken_as_it_is():
    class Plain(Dataset):
        def __len__(self) -> int:
            return 2

        def __getitem__(self, index: int) -> dict:
            return {'value': index, 'index': index}

    whole = ConcatDataset([Plain(), Plain()])
    assert whole.item_keys is None
    assert whole[3] == {'value': 1, 'index': 3}
    assert np.array_equal(whole.cumulative_sizes, [2, 4])


def _annotation(path, names) -> str:
    dump_annotation(Annotation(
        dataset='demo', split=path.stem, media_type='image', languages=['en'], source_lang='en',
        translation_langs=['de'],
        items=[MediaRecord(name, f'{name}.png', {'en': [f'a {name} dog']},
                           {'de': [f'ein {name} Hund']}) for name in names]), path)
    return str(path)


def test_a_concat_training_set_is_checked_for_held_out_media_through_its_children(tmp_path):
    """Read as a dataset of no annotation, a ConcatDataset's media were never compared with
    the galleries: a gallery of its second child's images passed."""
    options = dict(data_root=str(tmp_path), with_media=False,
                   transform=dict(type='MediaTransform', backbone=None, size=32))
    train = ConcatDataset([
        CaptionPairDataset(_annotation(tmp_path / 'a.json', ['red']), **options),
        SyntheticPairDataset(2, ['de']),
        CaptionPairDataset(_annotation(tmp_path / 'b.json', ['blue', 'green']), **options)])
    assert [shown for _, shown in media_files(train)] == ['red.png', 'blue.png', 'green.png']
    assert media_files(ConcatDataset([SyntheticPairDataset(2, ['de'])])) is None
    gallery = RetrievalDataset(_annotation(tmp_path / 'val.json', ['green', 'white']),
                               test_mode=True, **options)
    with pytest.raises(ValueError, match=r'val dataset 0 \(.*val.json\) shares 1 of its 2 media '
                       r'files with train dataset \(.*a.json, .*b.json\), e.g. green.png'):
        check_held_out({'train dataset': train}, {'val dataset 0': gallery})


def test_a_concat_gallery_is_checked_for_held_out_media_through_its_children(tmp_path):
    """A validation (or test) gallery of two annotations: the second child's image the
    training pairs hold is found, named by the whole's place among the galleries."""
    options = dict(data_root=str(tmp_path), with_media=False,
                   transform=dict(type='MediaTransform', backbone=None, size=32))
    train = CaptionPairDataset(_annotation(tmp_path / 'train.json', ['red', 'blue']), **options)
    galleries = [RetrievalDataset(_annotation(tmp_path / f'{name}.json', names), test_mode=True,
                                  **options)
                 for name, names in (('val_a', ['white']), ('val_b', ['black', 'blue']))]
    concat = ConcatDataset(galleries)
    with pytest.raises(ValueError, match=r'val dataset 0 \(.*val_a.json, .*val_b.json\) shares '
                       r'1 of its 3 media files with train dataset \(.*train.json\), e.g. '
                       r'blue.png'):
        check_held_out({'train dataset': train}, {'val dataset 0': concat})
    check_held_out({'train dataset': train}, {'val dataset 0': ConcatDataset(galleries[:1])})


def _gallery(path, names) -> RetrievalDataset:
    return RetrievalDataset(_annotation(path, names), data_root=str(path.parent),
                            with_media=False,
                            transform=dict(type='MediaTransform', backbone=None, size=32))


def test_galleries_sharing_media_are_refused_as_built_naming_both_the_ids_and_the_fix(tmp_path):
    """Two galleries of one split's images (its German and its French captions) were
    encoded whole, to be refused only at scoring, as items sharing a media_id."""
    german = _gallery(tmp_path / 'test_de.json', ['red', 'blue', 'green', 'white', 'black'])
    french = _gallery(tmp_path / 'test_fr.json', ['brown', 'white', 'red', 'black', 'blue'])
    with pytest.raises(ValueError, match=(
            r'ConcatDataset: datasets\[1\] \(RetrievalDataset, .*test_fr.json\) holds 4 media '
            r'ids of datasets\[0\] \(RetrievalDataset, .*test_de.json\): black, blue, red and 1 '
            r'more; .*one item per media.*one gallery with all the languages \(one '
            r'RetrievalDataset or SyntheticRetrievalDataset, languages=\[\.\.\.\]\), or leave '
            r'the repeated media out of one child')):
        ConcatDataset([german, french])


def test_galleries_built_from_configs_are_refused_before_any_item_is_encoded(tmp_path):
    config = dict(type='RetrievalDataset', data_root=str(tmp_path), with_media=False,
                  transform=dict(type='MediaTransform', backbone=None, size=32))
    files = [_annotation(tmp_path / f'{name}.json', names)
             for name, names in (('a', ['red']), ('b', ['blue']), ('c', ['blue']))]
    with pytest.raises(ValueError, match=r'datasets\[2\] .*c.json\) holds 1 media id of '
                       r'datasets\[1\] .*b.json\): blue;'):
        DATASETS.build(dict(type='ConcatDataset',
                            datasets=[dict(config, ann_file=file) for file in files]))


def test_distinct_galleries_are_one_gallery_listing_its_media_ids_in_item_order(tmp_path):
    whole = ConcatDataset([_gallery(tmp_path / 'a.json', ['red', 'blue']),
                           SyntheticRetrievalDataset(2, ['de']),
                           _gallery(tmp_path / 'b.json', ['green'])])
    listed = whole.media_ids()
    assert listed == [whole[index]['media_id'] for index in range(len(whole))]
    assert listed[:2] == ['red', 'blue'] and listed[-1] == 'green'
    assert listed[2:4] == [child['media_id'] for child in whole.datasets[1]]


def test_a_nested_concat_of_galleries_is_compared_as_one_child_named_by_its_files(tmp_path):
    inner = ConcatDataset([_gallery(tmp_path / 'a.json', ['red']),
                           _gallery(tmp_path / 'b.json', ['blue'])])
    whole = ConcatDataset([inner, _gallery(tmp_path / 'c.json', ['green'])])
    assert whole.media_ids() == ['red', 'blue', 'green']
    with pytest.raises(ValueError, match=r'datasets\[1\] \(RetrievalDataset, .*d.json\) holds '
                       r'1 media id of datasets\[0\] \(ConcatDataset, .*a.json, .*b.json\): '
                       r'blue;'):
        ConcatDataset([inner, _gallery(tmp_path / 'd.json', ['blue', 'white'])])


def test_training_pairs_sharing_media_are_taken(tmp_path):
    """Pair datasets hold one item per caption: a media repeats in one child, and two
    languages' pairs of one image set share every media."""
    options = dict(data_root=str(tmp_path), with_media=False,
                   transform=dict(type='MediaTransform', backbone=None, size=32))
    whole = ConcatDataset([
        CaptionPairDataset(_annotation(tmp_path / 'a.json', ['red', 'blue']), **options),
        CaptionPairDataset(_annotation(tmp_path / 'b.json', ['blue']), **options)])
    assert [whole[index]['media_id'] for index in range(len(whole))].count('blue') == 2
    assert getattr(whole, 'media_ids', None) is None
    synthetic = ConcatDataset([pairs(['de']), pairs(['zh'])])
    assert synthetic[0]['media_id'] == synthetic[3]['media_id']
    assert getattr(synthetic, 'media_ids', None) is None


def test_synthetic_galleries_of_one_split_and_seed_are_refused():
    """Their scenes are the split's first: the French gallery repeats the German one's
    images, which scoring refused once both were encoded."""
    with pytest.raises(ValueError, match=(
            r'datasets\[1\] \(SyntheticRetrievalDataset\) holds 2 media ids of datasets\[0\] '
            r'\(SyntheticRetrievalDataset\): synthetic_val_seed0_px32_000000, '
            r'synthetic_val_seed0_px32_000001;')):
        ConcatDataset([SyntheticRetrievalDataset(3, ['de']), SyntheticRetrievalDataset(2, ['fr'])])
    other_seed = ConcatDataset([SyntheticRetrievalDataset(3, ['de']),
                                SyntheticRetrievalDataset(2, ['fr'], seed=1)])
    assert len(set(other_seed.media_ids())) == 5


class Told(Drawn):
    """Items of the given language codes, with ``media_ids()`` where ``ids`` are given and
    the given ``languages`` attribute and ``metainfo``."""

    def __init__(self, codes, languages=None, metainfo=None, ids=None) -> None:
        super().__init__(len(codes))
        self.codes, self.metainfo, self.ids = codes, metainfo or {}, ids
        if languages is not None:
            self.languages = languages
        if ids is not None:
            self.media_ids = lambda: list(self.ids)

    def item_languages(self) -> np.ndarray:
        return np.asarray(self.codes)


def test_source_captions_keep_minus_one_and_languages_may_come_from_metainfo_alone():
    """-1 (a source caption) is no position in any child's languages: it stays -1 rather than
    naming a child's last language; a child naming its languages in ``metainfo`` alone is
    read by them."""
    whole = ConcatDataset([Told([-1, 0, -1], languages=['de']),
                           Told([0, 0], metainfo={'languages': ['ja']})])
    assert whole.languages == ['de', 'ja']
    assert whole.item_languages().tolist() == [-1, 0, -1, 1, 1]


def test_the_english_pairs_of_each_child_are_a_group_of_their_own():
    """Two children of English pairs (``languages=[]``): one group each, past the languages,
    so a language batch never mixes the two children's unnamed codes."""
    whole = ConcatDataset([pairs(['de'], num_scenes=1), pairs([], num_scenes=1),
                           pairs([], num_scenes=2)])
    assert whole.item_languages().tolist() == [0, 1, 2, 2]


def test_a_caption_pair_child_is_read_by_its_target_languages_not_its_annotations(tmp_path):
    """A CaptionPairDataset's codes index its ``target_langs``; its ``metainfo`` lists the
    annotation's languages (here the source, English), which would name every pair English."""
    path = tmp_path / 'a.json'
    dump_annotation(Annotation(
        dataset='demo', split='a', media_type='image', languages=['en'], source_lang='en',
        translation_langs=['de', 'fr'],
        items=[MediaRecord(name, f'{name}.png', {'en': [f'a {name} dog']},
                           {'de': [f'ein {name} Hund'], 'fr': [f'un chien {name}']})
               for name in ('red', 'blue')]), path)
    options = dict(data_root=str(tmp_path), with_media=False,
                   transform=dict(type='MediaTransform', backbone=None, size=32))
    whole = ConcatDataset([CaptionPairDataset(str(path), target_langs=['fr'], **options),
                           CaptionPairDataset(str(path), target_langs=['de', 'fr'], **options)])
    assert whole.languages == ['fr', 'de']
    codes = whole.item_languages().tolist()
    assert codes == [0, 0, 1, 0, 1, 0]
    assert [whole.languages[code] for code in codes] == [
        whole[index]['lang'] for index in range(len(whole))]


def test_with_media_is_on_where_any_child_decodes_media():
    text_only, decoding = Drawn(1), Drawn(1)
    text_only.with_media = False
    assert ConcatDataset([text_only, decoding]).with_media
    assert not ConcatDataset([text_only]).with_media


def test_a_metainfo_key_one_child_lacks_is_not_shared_even_when_none():
    whole = ConcatDataset([Told([0], metainfo={'media_type': 'image', 'frames': None}),
                           Told([0], metainfo={'media_type': 'image'})])
    meta = whole.metainfo
    assert meta['media_type'] == 'image' and 'frames' not in meta


def test_an_empty_child_is_taken_and_its_keys_not_read():
    """It has no first item to read keys from."""
    whole = ConcatDataset([Drawn(0), Drawn(2)])
    assert len(whole) == 2 and whole[0]['index'] == 0
    assert whole.item_keys == ['index', 'media']


def test_a_child_whose_items_are_no_mapping_tells_no_keys():
    class Tupled(Drawn):
        def __getitem__(self, index: int):
            return index, 'caption'

    whole = ConcatDataset([Tupled(2), Tupled(1)])
    assert whole.item_keys is None
    assert whole[2] == (0, 'caption')


def test_an_item_without_an_index_is_given_none():
    class Unindexed(Dataset):
        def __len__(self) -> int:
            return 2

        def __getitem__(self, index: int) -> dict:
            return {'value': index}

    assert ConcatDataset([Unindexed(), Unindexed()])[3] == {'value': 1}


def test_media_ids_only_where_every_child_is_a_gallery_and_a_plain_list_is_no_gallery():
    """A media_ids attribute that is no method (a list) is not called."""
    mixed = ConcatDataset([Told([0], ids=['red']), Drawn(1)])
    assert getattr(mixed, 'media_ids', None) is None

    class Listed(Drawn):
        media_ids = ['red']

    listed = ConcatDataset([Listed(1), Listed(1)])  # the same list twice: no repeat refused
    assert getattr(listed, 'media_ids', None) is None


def test_a_gallery_repeating_two_earlier_ones_names_the_first_holder_and_only_its_ids(tmp_path):
    """The third gallery holds media of the first and of the second: the message names the
    holder of its first repeated id (the first gallery, two items before) and counts only
    that gallery's ids."""
    galleries = [_gallery(tmp_path / 'a.json', ['red', 'green']),
                 _gallery(tmp_path / 'b.json', ['blue']),
                 _gallery(tmp_path / 'c.json', ['green', 'blue', 'red'])]
    with pytest.raises(ValueError, match=r'datasets\[2\] \(RetrievalDataset, .*c.json\) holds 2 '
                       r'media ids of datasets\[0\] \(RetrievalDataset, .*a.json\): green, '
                       r'red;'):
        ConcatDataset(galleries)


def test_annotation_files_of_nested_concats_are_every_leafs_in_order(tmp_path):
    inner = ConcatDataset([_gallery(tmp_path / 'a.json', ['red']),
                           _gallery(tmp_path / 'b.json', ['blue'])])
    whole = ConcatDataset([inner, _gallery(tmp_path / 'c.json', ['green'])])
    assert [path.rsplit('/', 1)[-1] for path in annotation_files(whole)] == [
        'a.json', 'b.json', 'c.json']
