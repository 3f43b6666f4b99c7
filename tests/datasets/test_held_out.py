"""Evaluation media held out of training, on the real Multi30K and XTD10 releases."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from xmr.datasets.annotation import Annotation, MediaRecord, dump_annotation
from xmr.datasets.converters.multi30k import convert_multi30k
from xmr.datasets.converters.xtd10 import convert_xtd10
from xmr.datasets.few_shot import few_shot_splits
from xmr.datasets.held_out import check_held_out, check_test_held_out
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


def _test_config(tmp_path: Path, train_file: str | None, **train_cfg) -> dict:
    """A config testing on Multi30K test, training (when ``train_file``) on ``train_file``."""
    cfg = dict(test_dataloader=dict(dataset=dict(
        type='RetrievalDataset', ann_file='multi30k_test.json', data_root=str(tmp_path),
        data_prefix=dict(media='flickr30k/images'), with_media=False, test_mode=True)))
    if train_file is not None:
        cfg['train_dataloader'] = dict(dataset=dict(
            type='CaptionPairDataset', ann_file=train_file, data_root=str(tmp_path),
            data_prefix=dict(media='flickr30k/images'), target_field='captions',
            with_media=False))
        cfg['train_cfg'] = dict(type='PhasedTrainLoop', phases=[dict(iters=1)], **train_cfg)
    return cfg


def _test_datasets(cfg: dict) -> list:
    from xmr.registry import DATASETS

    return [DATASETS.build(cfg['test_dataloader']['dataset'])]


def test_a_test_split_the_config_trains_on_is_refused_naming_the_split_and_both_files(
        multi30k, tmp_path):
    cfg = _test_config(tmp_path, 'multi30k_test.json')
    first = (multi30k / 'image_splits' / 'test_2016_flickr.txt').read_text().split()[:5]
    with pytest.raises(ValueError) as error:
        check_test_held_out(cfg, _test_datasets(cfg))
    message = str(error.value)
    assert message.startswith(
        f'test dataset 0 (RetrievalDataset) ({tmp_path / "multi30k_test.json"}) shares 1000 of '
        'its 1000 media files with training dataset train_dataloader.dataset '
        f'({tmp_path / "multi30k_test.json"}), e.g. {", ".join(first)}, ...: ')
    assert message.endswith('allowed by train_cfg.allow_eval_overlap=True')
    assert 'validation' not in message


def test_the_test_galleries_are_built_from_the_config_when_not_given(multi30k, tmp_path):
    """``tools/train.py --test`` checks before training, with no test loop built: each item of
    a list of test loaders is built, numbered as the test loop numbers it."""
    cfg = _test_config(tmp_path, 'multi30k_test.json')
    val = dict(cfg['test_dataloader']['dataset'], ann_file='multi30k_val.json')
    cfg['test_dataloader'] = [dict(dataset=val), cfg['test_dataloader']]
    with pytest.raises(ValueError, match=re.escape(
            f'test dataset 1 (RetrievalDataset) ({tmp_path / "multi30k_test.json"}) shares 1000 '
            'of its 1000 media files with training dataset train_dataloader.dataset')):
        check_test_held_out(cfg)


def test_the_test_check_is_held_out_by_the_opt_out_and_a_disjoint_train_split(multi30k,
                                                                              tmp_path):
    refused = _test_config(tmp_path, 'multi30k_test.json', allow_eval_overlap=True)
    check_test_held_out(refused, _test_datasets(refused))
    disjoint = _test_config(tmp_path, 'multi30k_train.json')
    check_test_held_out(disjoint, _test_datasets(disjoint))


def test_a_config_without_training_data_is_not_checked(multi30k, tmp_path, monkeypatch):
    from xmr.registry import DATASETS

    cfg = _test_config(tmp_path, None)
    datasets = _test_datasets(cfg)
    built = []
    monkeypatch.setattr(DATASETS, 'build', lambda part: built.append(part))
    check_test_held_out(cfg, datasets)
    # A training split whose annotation file is not on this machine is not read either.
    absent = _test_config(tmp_path, 'multi30k_gone.json')
    check_test_held_out(absent, datasets)
    # Nor are the test galleries built, for a check not made.
    check_test_held_out(absent)
    check_test_held_out(_test_config(tmp_path, 'multi30k_test.json', allow_eval_overlap=True))
    assert built == []


def _written_gallery(tmp_path: Path, name: str, media_paths: list[str]) -> RetrievalDataset:
    """An image gallery of ``media_paths`` in that order, each with one English caption."""
    items = [MediaRecord(f'{index}', path, {'en': [f'caption {index}']})
             for index, path in enumerate(media_paths)]
    dump_annotation(Annotation(dataset='demo', split=name, media_type='image',
                               languages=['en'], items=items), tmp_path / f'{name}.json')
    return RetrievalDataset(ann_file=str(tmp_path / f'{name}.json'), data_root=str(tmp_path),
                            with_media=False, test_mode=True)


def test_shared_files_are_named_in_the_gallerys_order_and_found_in_any_training_set(tmp_path):
    """The second of two training sets holds five of the gallery's files, one spelt
    ``./e.jpg``, another ``x/../c.jpg``: all five are named, in the gallery's (unsorted) order,
    with no '...' (five is every one of them); a training set without media files is
    passed over."""
    from xmr.datasets.synthetic.dataset import SyntheticPairDataset

    gallery = _written_gallery(tmp_path, 'val', ['e.jpg', 'b.jpg', 'd.jpg', 'c.jpg', 'a.jpg',
                                                 'f.jpg'])
    training = {'synthetic': SyntheticPairDataset(num_scenes=2, languages=['de']),
                'disjoint': _written_gallery(tmp_path, 'other', ['g.jpg']),
                'overlapping': _written_gallery(tmp_path, 'train', ['a.jpg', 'x/../c.jpg',
                                                                    'b.jpg', './e.jpg',
                                                                    'd.jpg'])}
    with pytest.raises(ValueError, match=re.escape(
            f"val ({tmp_path / 'val.json'}) shares 5 of its 6 media files with overlapping "
            f"({tmp_path / 'train.json'}), e.g. e.jpg, b.jpg, d.jpg, c.jpg, a.jpg: its")):
        check_held_out(training, {'val': gallery})
