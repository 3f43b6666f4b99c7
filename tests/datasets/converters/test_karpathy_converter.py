"""The Karpathy split-file reader under a layout with a folder key, merged labels and a size."""
from __future__ import annotations

import json
import re

import pytest

from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.karpathy import KarpathyLayout, group_splits, read_karpathy

LAYOUT = KarpathyLayout(id_key='photoid', folder_key='folder',
                        splits={'train': ('train', 'restval'), 'test': ('test',)},
                        split_sizes={'test': 2}, sizes_required_by='the two-image protocol')


def _entry(photoid: int, split: str, folder: str = 'part1') -> dict:
    return {'folder': folder, 'filename': f'photo{photoid}.png', 'photoid': photoid,
            'split': split, 'sentences': [{'raw': f'photo {photoid} text {k}'} for k in range(2)]}


def _write(path, images) -> None:
    path.write_text(json.dumps({'images': images}), encoding='utf-8')


def test_images_in_file_order_grouped_by_output_split(tmp_path):
    path = tmp_path / 'dataset.json'
    _write(path, [_entry(7, 'test'), _entry(3, 'restval', 'part2'), _entry(5, 'train'),
                  _entry(9, 'test')])
    images = read_karpathy(path, LAYOUT)
    assert [(i.stem, i.media_path, i.image_id, i.split) for i in images] == [
        ('photo7', 'part1/photo7.png', 7, 'test'), ('photo3', 'part2/photo3.png', 3, 'restval'),
        ('photo5', 'part1/photo5.png', 5, 'train'), ('photo9', 'part1/photo9.png', 9, 'test')]
    assert images[1].captions == ['photo 3 text 0', 'photo 3 text 1']
    groups = group_splits(images, LAYOUT, path)
    assert {name: [i.stem for i in group] for name, group in groups.items()} == {
        'train': ['photo3', 'photo5'], 'test': ['photo7', 'photo9']}


def test_split_errors_name_the_labels_and_counts(tmp_path):
    path = tmp_path / 'dataset.json'
    _write(path, [_entry(1, 'test'), _entry(2, 'test')])
    with pytest.raises(ConversionError, match=r'dataset\.json has no train/restval images$'):
        group_splits(read_karpathy(path, LAYOUT), LAYOUT, path)
    _write(path, [_entry(1, 'train'), _entry(2, 'test')])
    with pytest.raises(ConversionError,
                       match=r'dataset\.json has 1 test images; the two-image protocol need 2$'):
        group_splits(read_karpathy(path, LAYOUT), LAYOUT, path)


@pytest.mark.parametrize('images,message', [
    ({'photos': []}, 'has no "images" list'),
    ({'images': []}, 'lists no images'),
    ({'images': [_entry(1, 'train'), 'photo2']}, 'image 1 is not an object'),
    ({'images': [{'filename': 'a.png', 'split': 'train'}]},
     r"image 0 lacks \['folder', 'photoid', 'sentences'\]"),
    ({'images': [_entry(1, 'train', folder='a/b')]},
     "image 0 has folder 'a/b', not a file or folder name"),
    ({'images': [{**_entry(1, 'train'), 'filename': 17}]},
     'image 0 has filename 17, not a file or folder name'),
    ({'images': [{**_entry(1, 'train'), 'photoid': 'one'}]},
     "image 0 has photoid 'one', not an integer"),
    ({'images': [_entry(1, 'train'), _entry(2, 'test'), _entry(1, 'test')]},
     r'image 2 lists part1/photo1\.png again \(first as image 0\)'),
    ({'images': [{**_entry(1, 'train'), 'sentences': [{'tokens': []}]}]},
     r'image 0 \(photo1\.png\) sentence 0 "raw": caption must be a string, got None'),
])
def test_bad_files_name_file_image_and_field(tmp_path, images, message):
    path = tmp_path / 'dataset.json'
    path.write_text(json.dumps(images), encoding='utf-8')
    with pytest.raises(ConversionError,
                       match=f'^Karpathy split file {re.escape(str(path))} {message}'):
        read_karpathy(path, LAYOUT)
