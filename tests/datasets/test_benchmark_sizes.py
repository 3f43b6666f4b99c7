"""A benchmark's evaluation split of another size than the papers score is refused as it loads,
from files the converters write out of releases in their own formats."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from xmr.datasets.annotation import dump_annotation
from xmr.datasets.converters.mscoco import convert_mscoco
from xmr.datasets.converters.msrvtt import convert_msrvtt
from xmr.datasets.converters.multi30k import convert_multi30k
from xmr.datasets.converters.xtd10 import convert_xtd10
from xmr.datasets.retrieval import RetrievalDataset


def _gallery(path: Path, **options) -> RetrievalDataset:
    return RetrievalDataset(ann_file=str(path), with_media=False, **options)


def _refusal(path: Path, name: str, found: int, expected: int) -> str:
    return re.escape(f'{path}: {name} holds {found} media, but the benchmark is scored on '
                     f'{expected}, so its figures would not be comparable')


@pytest.mark.parametrize('videos', [1000, 999])
def test_msrvtt_1ka_test_must_hold_1000_videos(tmp_path, videos):
    """MSRVTT_JSFUSION_test.csv (key, vid_key, video_id, sentence) cut short by one row."""
    csv = tmp_path / 'MSRVTT_JSFUSION_test.csv'
    csv.write_text('key,vid_key,video_id,sentence\n' + ''.join(
        f'ret{i},msr{7010 + i},video{7010 + i},a clip number {i}\n' for i in range(videos)))
    path = tmp_path / 'msrvtt_test1ka.json'
    dump_annotation(convert_msrvtt(csv)['msrvtt_test1ka'], path)
    if videos == 1000:
        assert len(_gallery(path)) == 1000
        return
    with pytest.raises(ValueError, match=_refusal(path, 'msrvtt test1ka', 999, 1000)):
        _gallery(path)
    # A deliberate subset is read when asked for.
    assert len(_gallery(path, check_benchmark_size=False)) == 999


def _karpathy(path: Path, val_images: int) -> None:
    """A Karpathy ``dataset_coco.json`` of 5,000 test, ``val_images`` val and 2 train images,
    five captions each."""
    def image(cocoid: int, split: str) -> dict:
        folder = 'train2014' if split == 'train' else 'val2014'
        return dict(cocoid=cocoid, filepath=folder, split=split,
                    filename=f'COCO_{folder}_{cocoid:012d}.jpg',
                    sentences=[dict(raw=f'image {cocoid} caption {k}') for k in range(5)])
    splits = ['test'] * 5000 + ['val'] * val_images + ['train'] * 2
    path.write_text(json.dumps(dict(images=[image(i, split) for i, split in enumerate(splits)])))


@pytest.mark.parametrize('val_images', [5000, 4998])
def test_coco_karpathy_val_and_test_must_hold_5000_images(tmp_path, val_images):
    _karpathy(tmp_path / 'dataset_coco.json', val_images)
    outputs = convert_mscoco(tmp_path / 'dataset_coco.json')
    for name in ('coco_val', 'coco_test5k', 'coco_test1k_fold0'):
        dump_annotation(outputs[name], tmp_path / f'{name}.json')
    assert len(_gallery(tmp_path / 'coco_test5k.json')) == 5000
    assert len(_gallery(tmp_path / 'coco_test1k_fold0.json')) == 1000
    if val_images == 5000:
        assert len(_gallery(tmp_path / 'coco_val.json')) == 5000
    else:
        with pytest.raises(ValueError, match=_refusal(tmp_path / 'coco_val.json',
                                                      'mscoco val', 4998, 5000)):
            _gallery(tmp_path / 'coco_val.json')
    # A fold file cut by hand.
    cut = outputs['coco_test1k_fold0']
    dump_annotation(replace(cut, items=cut.items[:-1]), tmp_path / 'cut.json')
    with pytest.raises(ValueError, match=_refusal(tmp_path / 'cut.json',
                                                  'mscoco test1k_fold0', 999, 1000)):
        _gallery(tmp_path / 'cut.json')


def test_real_multi30k_and_xtd10_splits_pass_and_a_truncated_copy_is_refused(shared_data,
                                                                               tmp_path):
    multi30k, xtd10 = shared_data / 'multi30k', shared_data / 'xtd10'
    if not (multi30k / 'raw').is_dir() or not (xtd10 / 'test_image_names.txt').is_file():
        pytest.skip(f'Multi30K or XTD10 fixtures not found under {shared_data}')
    annotations = {f'multi30k_{split}': ann for split, ann in convert_multi30k(
        multi30k / 'raw', multi30k / 'image_splits',
        splits=('val', 'test', 'test_5captions')).items()}
    annotations['xtd10_test'] = convert_xtd10(xtd10)
    sizes = {'multi30k_val': 1014, 'multi30k_test': 1000, 'multi30k_test_5captions': 1000,
             'xtd10_test': 1000}
    for name, ann in annotations.items():
        dump_annotation(ann, tmp_path / f'{name}.json')
        assert len(_gallery(tmp_path / f'{name}.json')) == sizes[name]
        # The file cut at its last record, as an interrupted copy leaves one.
        dump_annotation(replace(ann, items=ann.items[:-1]), tmp_path / f'cut_{name}.json')
        with pytest.raises(ValueError, match=_refusal(
                tmp_path / f'cut_{name}.json', f'{ann.dataset} {ann.split}', sizes[name] - 1,
                sizes[name])):
            _gallery(tmp_path / f'cut_{name}.json')


def test_a_few_shot_part_or_a_dataset_of_ones_own_has_no_fixed_size(tmp_path):
    from xmr.datasets.annotation import Annotation, MediaRecord
    from xmr.datasets.few_shot import few_shot_splits

    ann = Annotation(dataset='xtd10', split='test', media_type='image', languages=['en'],
                     source_lang='en', items=[MediaRecord(f'{i}', f'{i}.jpg', {'en': ['a']})
                                              for i in range(10)])
    dump_annotation(few_shot_splits(ann, 2)['test'], tmp_path / 'part.json')
    assert len(_gallery(tmp_path / 'part.json')) == 6
    dump_annotation(replace(ann, dataset='mine'), tmp_path / 'mine.json')
    assert len(_gallery(tmp_path / 'mine.json')) == 10
