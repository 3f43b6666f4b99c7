"""Flickr30K from Karpathy's dataset_flickr30k.json (real key names, written by the test)."""
from __future__ import annotations

import contextlib
import io
import json
import random
import re

import pytest

from xmr.datasets import load_annotation
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.flickr30k import convert_flickr30k, main

SIZES = {'train': 29000, 'val': 1014, 'test': 1000}
TRAIN_CAPTIONS = 5 * SIZES['train']


def _entry(imgid: int, split: str, tokens: bool = True) -> dict:
    """One image as Karpathy's file writes it (Flickr ids are the file stems)."""
    return {'filename': f'{1000000000 + imgid}.jpg', 'imgid': imgid, 'split': split,
            'sentids': [5 * imgid + k for k in range(5)],
            'sentences': [{'tokens': ['image', str(imgid)] if tokens else [],
                           'raw': f'Image {imgid} caption {k}.', 'imgid': imgid,
                           'sentid': 5 * imgid + k} for k in range(5)]}


def _write(path, entries) -> None:
    path.write_text(json.dumps({'images': entries, 'dataset': 'flickr30k'}), encoding='utf-8')


@pytest.fixture(scope='module')
def flickr(tmp_path_factory):
    """A file of the real size, splits interleaved as in the real one, and de translations."""
    root = tmp_path_factory.mktemp('flickr30k')
    splits = [split for split, size in SIZES.items() for _ in range(size)]
    random.Random(0).shuffle(splits)
    # Tokens are left out of this large file: the converter reads only "raw".
    entries = [_entry(imgid, split, tokens=False) for imgid, split in enumerate(splits)]
    entries[0]['sentences'][2]['raw'] = '  A dog runs\r\n along   the beach. \n'
    _write(root / 'dataset_flickr30k.json', entries)
    (root / 'train.de.txt').write_text(''.join(f'Bild {n}\n' for n in range(TRAIN_CAPTIONS)),
                                       encoding='utf-8')
    return root, entries


@pytest.fixture(scope='module')
def converted(flickr, tmp_path_factory):
    """The command line's output folder and printout (one conversion for the module)."""
    root, _ = flickr
    out = tmp_path_factory.mktemp('annotations')
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(['--karpathy-json', str(root / 'dataset_flickr30k.json'), '--skip-media-check',
              '--out-dir', str(out), '--translations', f'de={root / "train.de.txt"}'])
    return out, printed.getvalue()


@pytest.fixture(scope='module')
def outputs(converted):
    out, _ = converted
    return {path.stem: load_annotation(path) for path in sorted(out.iterdir())}


def test_splits_keep_file_order_and_all_five_cleaned_captions(flickr, outputs):
    _, entries = flickr
    assert sorted(outputs) == ['flickr30k_test', 'flickr30k_train', 'flickr30k_val']
    for split, size in SIZES.items():
        ann = outputs[f'flickr30k_{split}']
        assert (ann.dataset, ann.split, ann.media_type) == ('flickr30k', split, 'image')
        assert ann.languages == ['en'] and ann.source_lang == 'en'
        expected = [entry for entry in entries if entry['split'] == split]
        assert len(ann.items) == size == len(expected)
        assert [r.media_id for r in ann.items] == [e['filename'][:-4] for e in expected]
        # The bare file name, as in Multi30K's files: one flickr30k-images/ folder for both.
        assert [r.media_path for r in ann.items] == [e['filename'] for e in expected]
    first = next(r for ann in outputs.values() for r in ann.items if r.media_id == '1000000000')
    assert first.captions == {'en': ['Image 0 caption 0.', 'Image 0 caption 1.',
                                     'A dog runs along   the beach.', 'Image 0 caption 3.',
                                     'Image 0 caption 4.']}
    test = outputs['flickr30k_test'].items[17]
    imgid = int(test.media_id) - 1000000000
    assert test.captions['en'] == [f'Image {imgid} caption {k}.' for k in range(5)]


def test_translations_attach_to_train_five_lines_per_image(outputs):
    train = outputs['flickr30k_train']
    assert train.translation_langs == ['de']
    assert train.items[3].translations == {'de': [f'Bild {n}' for n in range(15, 20)]}
    assert train.items[-1].translations['de'][-1] == f'Bild {TRAIN_CAPTIONS - 1}'
    for split in ('val', 'test'):
        ann = outputs[f'flickr30k_{split}']
        assert not ann.translation_langs and not any(r.translations for r in ann.items)


def test_media_check_names_the_first_missing_image(flickr, tmp_path):
    root, entries = flickr
    images = tmp_path / 'flickr30k-images'
    images.mkdir()
    (images / entries[0]['filename']).touch()
    with pytest.raises(ConversionError, match=(
            f'image file not found: {re.escape(str(images / entries[1]["filename"]))} '
            'and 31012 more$')):
        convert_flickr30k(root / 'dataset_flickr30k.json', images_dir=images)


def test_a_split_of_another_size_stops_naming_it_and_both_counts(flickr, tmp_path):
    _, entries = flickr
    val = next(index for index, entry in enumerate(entries) if entry['split'] == 'val')
    _write(tmp_path / 'dataset_flickr30k.json', entries[:val] + entries[val + 1:])
    with pytest.raises(ConversionError, match=(
            "dataset_flickr30k.json has 1013 val images; Karpathy's Flickr30K splits need "
            '1014$')):
        convert_flickr30k(tmp_path / 'dataset_flickr30k.json')
    # A deliberate subset (--skip-benchmark-size-check) is converted.
    subset = convert_flickr30k(tmp_path / 'dataset_flickr30k.json', check_benchmark_size=False)
    assert len(subset['flickr30k_val'].items) == 1013


def _bad_entry(change):
    entries = [_entry(0, 'train'), _entry(1, 'val'), _entry(2, 'test')]
    change(entries[1])
    return entries


@pytest.mark.parametrize('change,message', [
    (lambda e: e.pop('imgid'), r"image 1 lacks \['imgid'\]"),
    (lambda e: e.pop('filename'), r"image 1 lacks \['filename'\]"),
    (lambda e: e.update(split='restval'),
     r"image 1 has split 'restval', expected one of \['test', 'train', 'val'\]"),
    (lambda e: e.update(sentences=[]), 'image 1 has no sentences'),
    (lambda e: e['sentences'][3].update(raw=' \n '),
     r'image 1 \(1000000001\.jpg\) sentence 3 "raw": caption is empty'),
    (lambda e: e.update(filename='flickr30k-images/1000000001.jpg'),
     "image 1 has filename 'flickr30k-images/1000000001.jpg', not a file or folder name"),
])
def test_bad_entries_stop_naming_file_image_and_field(tmp_path, change, message):
    path = tmp_path / 'dataset_flickr30k.json'
    _write(path, _bad_entry(change))
    with pytest.raises(ConversionError, match=f'Karpathy split file {re.escape(str(path))} '
                                              f'{message}'):
        convert_flickr30k(path)


def test_command_line_lists_what_it_wrote(converted):
    out, printed = converted
    assert printed.splitlines() == [f'{out / "flickr30k_train.json"}: 29000 images, languages en',
                                    f'{out / "flickr30k_val.json"}: 1014 images, languages en',
                                    f'{out / "flickr30k_test.json"}: 1000 images, languages en']


def test_command_line_stops_on_a_short_split_before_writing(tmp_path):
    path = tmp_path / 'dataset_flickr30k.json'
    _write(path, [_entry(0, 'train'), _entry(1, 'val'), _entry(2, 'test')])
    with pytest.raises(SystemExit, match='has 1 train images; Karpathy\'s Flickr30K splits need '
                                         '29000'):
        main(['--karpathy-json', str(path), '--skip-media-check', '--out-dir',
              str(tmp_path / 'out')])
    assert not (tmp_path / 'out').exists()
    with pytest.raises(SystemExit) as exit_info:
        main(['--karpathy-json', str(path), '--out-dir', str(tmp_path / 'out')])
    assert exit_info.value.code == 2
