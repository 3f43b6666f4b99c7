"""LAPS's prepared Flickr30K and MSCOCO files (``{split}_{ids,caps}.txt``, ``id_mapping.json``),
written by the test in the real layout from a Karpathy file, as LAPS's were made."""
from __future__ import annotations

import contextlib
import io
import json
import random
import re
from pathlib import Path

import pytest

from xmr.datasets import load_annotation
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.flickr30k import convert_flickr30k
from xmr.datasets.converters.laps import convert_laps, main, read_laps_split
from xmr.datasets.converters.mscoco import convert_mscoco

F30K_SPLITS = {'train': 29000, 'dev': 1014, 'test': 1000}
KARPATHY_SPLIT = {'train': 'train', 'dev': 'val', 'test': 'test', 'testall': 'test'}


def _write_lines(path: Path, lines) -> None:
    path.write_text(''.join(f'{line}\n' for line in lines), encoding='utf-8')


def _laps_split(folder: Path, split: str, images: list[tuple[int, list[str]]],
                per_caption: bool = True) -> None:
    """``{split}_ids.txt`` (each caption's image id, or each image's) and ``{split}_caps.txt``."""
    _write_lines(folder / f'{split}_ids.txt', [image_id for image_id, captions in images
                                               for _ in (captions if per_caption else [0])])
    _write_lines(folder / f'{split}_caps.txt', [c for _, captions in images for c in captions])


def _captions(image_id: int) -> list[str]:
    return [f'image {image_id} caption {k} , a dog .' for k in range(5)]


def _karpathy_entry(imgid: int, split: str, filename: str, cocoid: int | None = None) -> dict:
    entry = {'filename': filename, 'imgid': imgid, 'split': split,
             'sentences': [{'raw': caption, 'tokens': []}
                           for caption in _captions(cocoid if cocoid is not None else imgid)]}
    if cocoid is not None:
        entry.update(cocoid=cocoid, filepath=filename.split('_')[1])
    return entry


@pytest.fixture(scope='module')
def f30k(tmp_path_factory):
    """LAPS's ``data/f30k`` at its real sizes, ids being Karpathy's ``imgid`` (the splits
    interleaved as in Karpathy's file), and that Karpathy file."""
    root = tmp_path_factory.mktemp('f30k')
    labels = [split for split, size in F30K_SPLITS.items() for _ in range(size)]
    random.Random(0).shuffle(labels)
    names = {imgid: f'{1000000000 + 7 * imgid}.jpg' for imgid in range(len(labels))}
    for split in F30K_SPLITS:
        _laps_split(root, split, [(imgid, _captions(imgid))
                                  for imgid, label in enumerate(labels) if label == split])
    (root / 'id_mapping.json').write_text(json.dumps({str(k): v for k, v in names.items()}))
    (root / 'dataset_flickr30k.json').write_text(json.dumps({'images': [
        _karpathy_entry(imgid, KARPATHY_SPLIT[label], names[imgid])
        for imgid, label in enumerate(labels)]}))
    return root


def _coco_name(cocoid: int) -> str:
    return f'COCO_{"train" if cocoid % 3 else "val"}2014_{cocoid:012d}.jpg'


@pytest.fixture
def coco(tmp_path):
    """LAPS's ``data/coco`` (a small train and dev, the 5K test), its mapping's values bare
    COCO file names, and the Karpathy file with the same images."""
    splits = {'train': range(1, 41), 'dev': range(100, 150),
              'testall': [7 * n + 1000 for n in range(5000)]}
    for split, ids in splits.items():
        _laps_split(tmp_path, split, [(cocoid, _captions(cocoid)) for cocoid in ids])
    (tmp_path / 'id_mapping.json').write_text(json.dumps(
        {str(c): _coco_name(c) for ids in splits.values() for c in ids}))
    (tmp_path / 'dataset_coco.json').write_text(json.dumps({'images': [
        _karpathy_entry(n, 'restval' if split == 'train' and c > 30 else KARPATHY_SPLIT[split],
                        _coco_name(c), cocoid=c)
        for n, (split, c) in enumerate((s, c) for s, ids in splits.items() for c in ids)]}))
    return tmp_path


@pytest.fixture(scope='module')
def converted(f30k, tmp_path_factory):
    out = tmp_path_factory.mktemp('annotations')
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(['--laps-dir', str(f30k), '--dataset', 'f30k', '--skip-media-check',
              '--out-dir', str(out)])
    return out, printed.getvalue()


def test_f30k_converts_to_the_annotations_of_the_karpathy_file_it_was_made_from(f30k,
                                                                                 converted):
    out, printed = converted
    written = {path.stem: load_annotation(path) for path in sorted(out.iterdir())}
    assert written == convert_flickr30k(f30k / 'dataset_flickr30k.json')
    assert [len(written[f'flickr30k_{s}'].items) for s in ('train', 'val', 'test')] == [
        29000, 1014, 1000]
    assert printed.splitlines() == [f'{out / name}.json: {size} images, languages en'
                                    for name, size in (('flickr30k_train', 29000),
                                                       ('flickr30k_val', 1014),
                                                       ('flickr30k_test', 1000))]


def test_coco_testall_is_the_5k_test_and_its_consecutive_1k_folds(coco):
    laps = convert_laps(coco, 'coco')
    karpathy = convert_mscoco(coco / 'dataset_coco.json')
    assert sorted(laps) == ['coco_test1k_fold0', 'coco_test1k_fold1', 'coco_test1k_fold2',
                            'coco_test1k_fold3', 'coco_test1k_fold4', 'coco_test5k',
                            'coco_train', 'coco_val']
    assert {name: karpathy[name] for name in laps} == laps
    fold3 = laps['coco_test1k_fold3'].items
    assert [r.media_id for r in fold3[:2]] == [_coco_name(7 * 3000 + 1000)[:-4],
                                               _coco_name(7 * 3001 + 1000)[:-4]]
    assert fold3[0].media_path == 'train2014/' + _coco_name(22000)


def test_one_id_per_image_reads_as_one_per_caption(coco):
    """LAPS's loader reads either (``im_div = 5`` when the counts differ)."""
    per_caption = convert_laps(coco, 'coco')
    _laps_split(coco, 'dev', [(c, _captions(c)) for c in range(100, 150)], per_caption=False)
    assert len((coco / 'dev_ids.txt').read_text().splitlines()) == 50
    assert convert_laps(coco, 'coco') == per_caption
    assert [image.lines for image in read_laps_split(coco, 'dev', 5)[:2]] == [(1, 1), (2, 2)]


def test_the_image_check_names_a_missing_file_under_its_coco_folder(coco):
    images = coco / 'images'
    for cocoid in [*range(1, 41), *range(100, 150), *(7 * n + 1000 for n in range(5000))]:
        folder = images / _coco_name(cocoid).split('_')[1]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / _coco_name(cocoid)).touch()
    convert_laps(coco, 'coco', images_dir=images)
    (images / 'val2014' / _coco_name(1014)).unlink()
    with pytest.raises(ConversionError, match=re.escape(
            f'image file not found: {images / "val2014" / _coco_name(1014)}')):
        convert_laps(coco, 'coco', images_dir=images)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding='utf-8').splitlines()


@pytest.mark.parametrize('damage, message', [
    # A caption dropped: the ids have one line more than the captions.
    (lambda d: _write_lines(d / 'testall_caps.txt', _lines(d / 'testall_caps.txt')[:-1]),
     'LAPS id file {d}/testall_ids.txt line 25000 (image 35993) has no caption: '
     '{d}/testall_caps.txt has 24999 lines and {d}/testall_ids.txt 25000: one id per caption '
     '(24999), or one per image and 5 captions each, is the LAPS layout'),
    (lambda d: _write_lines(d / 'testall_caps.txt', [*_lines(d / 'testall_caps.txt'), 'extra']),
     'LAPS caption file {d}/testall_caps.txt line 25001 has no image id: '
     '{d}/testall_caps.txt has 25001 lines and {d}/testall_ids.txt 25000'),
    (lambda d: _write_lines(d / 'testall_ids.txt', [*_lines(d / 'testall_ids.txt')[:12],
                                                    '1O14', *_lines(d / 'testall_ids.txt')[13:]]),
     "LAPS id file {d}/testall_ids.txt line 13: '1O14' is not an image id (an integer)"),
    # Image 1007's first caption given to image 1000: six captions, where five are ranked.
    (lambda d: _write_lines(d / 'testall_ids.txt', ['1000'] * 6
                            + _lines(d / 'testall_ids.txt')[6:]),
     'LAPS id file {d}/testall_ids.txt lines 1-6 give image 1000 6 captions; the evaluation '
     'protocols rank 5 an image'),
    # Image 149's lines naming image 100, whose captions are on lines 1-5.
    (lambda d: _write_lines(d / 'dev_ids.txt', [*_lines(d / 'dev_ids.txt')[:245], *['100'] * 5]),
     'LAPS id file {d}/dev_ids.txt line 246 names image 100 again, apart from its captions on '
     "line 1: an image's captions must be on consecutive lines"),
    (lambda d: (d / 'id_mapping.json').write_text(json.dumps(
        {k: v for k, v in json.loads((d / 'id_mapping.json').read_text()).items()
         if k != '1014'})),
     'LAPS id file {d}/testall_ids.txt line 11: image 1014 has no file in '
     '{d}/id_mapping.json (found None)'),
    (lambda d: _laps_split(d, 'testall', [(7 * n + 1000, _captions(0)) for n in range(4999)]),
     'LAPS id file {d}/testall_ids.txt names 4999 images; the coco testall protocol needs 5000'),
    (lambda d: (d / 'dev_caps.txt').unlink(),
     'LAPS folder {d} has dev_ids.txt but not dev_caps.txt'),
    (lambda d: (d / 'testall_ids.txt').rename(d / 'test_ids.txt'),
     'LAPS folder {d} has testall_caps.txt but not testall_ids.txt'),
    (lambda d: [(d / f'testall_{kind}.txt').unlink() for kind in ('ids', 'caps')],
     'LAPS folder {d} has no testall_ids.txt and testall_caps.txt: check --laps-dir and '
     '--dataset'),
])
def test_a_bad_file_stops_the_tool_naming_it_and_writing_nothing(coco, damage, message,
                                                                 tmp_path_factory):
    damage(coco)
    out = tmp_path_factory.mktemp('out')
    with pytest.raises(SystemExit) as info:
        main(['--laps-dir', str(coco), '--dataset', 'coco', '--skip-media-check',
              '--out-dir', str(out)])
    assert str(info.value).startswith('error: ' + message.format(d=coco))
    assert not list(out.iterdir())


def test_translations_join_the_train_split(coco):
    _write_lines(coco / 'train.ja', [f'訳 {n}' for n in range(200)])
    ann = convert_laps(coco, 'coco', train_translations={'ja': coco / 'train.ja'})['coco_train']
    assert ann.items[1].translations == {'ja': [f'訳 {n}' for n in range(5, 10)]}


def test_a_deliberate_subset_of_the_5k_test_is_written_without_folds(coco, tmp_path):
    """--skip-benchmark-size-check, which every converter's help offers for a deliberate subset,
    was refused by LAPS's own size check."""
    _laps_split(coco, 'testall', [(7 * n + 1000, _captions(0)) for n in range(4999)])
    out = tmp_path / 'out'
    with pytest.warns(UserWarning, match='the test5k split holds 4,999 images, not the 5,000 '
                                         'the 1K protocol folds: no coco_test1k_fold'):
        main(['--laps-dir', str(coco), '--dataset', 'coco', '--skip-media-check', '--out-dir',
              str(out), '--skip-benchmark-size-check'])
    assert len(load_annotation(out / 'coco_test5k.json').items) == 4999
    assert not list(out.glob('coco_test1k_fold*.json'))
