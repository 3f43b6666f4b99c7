"""Evaluation media held out of training, on the real Multi30K and XTD10 releases."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from xmr.datasets.annotation import dump_annotation
from xmr.datasets.converters.multi30k import convert_multi30k
from xmr.datasets.converters.xtd10 import convert_xtd10
from xmr.datasets.few_shot import few_shot_splits
from xmr.datasets.held_out import check_held_out
from xmr.datasets.pairs import CaptionPairDataset
from xmr.datasets.retrieval import RetrievalDataset


@pytest.fixture
def multi30k(shared_data, tmp_path) -> Path:
    """The real Multi30K task-1 train/val/test annotations, written under ``tmp_path``."""
    root = shared_data / 'multi30k'
    if not (root / 'raw').is_dir():
        pytest.skip(f'Multi30K fixtures not found under {root}')
    for split, ann in convert_multi30k(root / 'raw', root / 'image_splits',
                                       splits=('train', 'val', 'test')).items():
        dump_annotation(ann, tmp_path / f'multi30k_{split}.json')
    return root


def _gallery(path: Path, data_root: str | Path = '.') -> RetrievalDataset:
    return RetrievalDataset(ann_file=str(path), data_root=str(data_root),
                            data_prefix=dict(media='flickr30k/images'), with_media=False,
                            test_mode=True)


def _pairs(path: Path, data_root: str | Path = '.') -> CaptionPairDataset:
    return CaptionPairDataset(ann_file=str(path), data_root=str(data_root),
                              data_prefix=dict(media='flickr30k/images'),
                              target_field='captions', with_media=False)


def test_multi30k_train_is_held_out_of_its_val_and_test(multi30k, tmp_path):
    check_held_out({'phase align dataset (train_dataloader)':
                    _pairs(tmp_path / 'multi30k_train.json')},
                   {'val dataset 0': _gallery(tmp_path / 'multi30k_val.json'),
                    'val dataset 1': _gallery(tmp_path / 'multi30k_test.json')})


def test_training_on_the_split_a_gallery_scores_is_refused_naming_both_and_examples(
        multi30k, tmp_path):
    """The test split named as training data too: 1,000 of 1,000 images shared."""
    first = (multi30k / 'image_splits' / 'test_2016_flickr.txt').read_text().split()[:5]
    train = tmp_path / 'multi30k_test.json'
    with pytest.raises(ValueError, match=re.escape(
            f'val dataset 1 ({tmp_path / "multi30k_test.json"}) shares 1000 of its 1000 media '
            f'files with phase align dataset (train_dataloader) ({train}), e.g. '
            f"{', '.join(first)}, ...: its retrieval scores would be on media the model "
            'trained on') + '.*train_cfg.allow_eval_overlap=True'):
        check_held_out({'phase align dataset (train_dataloader)': _pairs(train)},
                       {'val dataset 0': _gallery(tmp_path / 'multi30k_val.json'),
                        'val dataset 1': _gallery(tmp_path / 'multi30k_test.json')})


def test_one_file_reached_through_another_spelling_of_its_root_is_one_file(multi30k, tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match='shares 1014 of its 1014 media files'):
        check_held_out({'train': _pairs(tmp_path / 'multi30k_val.json', data_root='./x/..')},
                       {'val': _gallery(tmp_path / 'multi30k_val.json', data_root=tmp_path)})


def test_a_text_only_gallery_and_a_synthetic_training_set_read_no_media():
    from xmr.datasets.synthetic.dataset import SyntheticPairDataset

    # Neither has an annotation's media files: nothing to compare, nothing refused.
    check_held_out({'train': SyntheticPairDataset(num_scenes=2, languages=['de'])},
                   {'val': object()})


@pytest.fixture
def xtd10(shared_data, tmp_path) -> Path:
    """XTD10's real release and its seed-42 few-shot split, written under ``tmp_path``."""
    root = shared_data / 'xtd10'
    if not (root / 'test_image_names.txt').is_file():
        pytest.skip(f'XTD10 fixtures not found under {root}')
    ann = convert_xtd10(root)
    dump_annotation(ann, tmp_path / 'xtd10_test.json')
    for part in few_shot_splits(ann, 50, seed=42).values():
        dump_annotation(part, tmp_path / f'xtd10_{part.split}.json')
    return root


def test_the_xtd10_few_shot_split_is_held_out_but_the_whole_set_holds_its_training_images(
        xtd10, tmp_path):
    train = CaptionPairDataset(ann_file=str(tmp_path / 'xtd10_fewshot50_seed42_train.json'),
                               target_field='captions', with_media=False)
    check_held_out({'train': train}, {
        part: RetrievalDataset(ann_file=str(tmp_path / f'xtd10_fewshot50_seed42_{part}.json'),
                               with_media=False, test_mode=True) for part in ('val', 'test')})
    # The 1,000 images hold the 50 trained on; reported first in the whole set's file order.
    whole = RetrievalDataset(ann_file=str(tmp_path / 'xtd10_test.json'), with_media=False,
                             test_mode=True)
    trained = {record.media_path for record in train.records}
    first = [record.media_path for record in whole.records if record.media_path in trained][:5]
    with pytest.raises(ValueError, match=re.escape(
            f"shares 50 of its 1000 media files with train ({train.ann_file}), e.g. "
            f"{', '.join(first)}, ...")):
        check_held_out({'train': train}, {'full test': whole})
