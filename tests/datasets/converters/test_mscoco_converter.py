"""MSCOCO from Karpathy, STAIR Captions and COCO-CN files (tiny files written by the test)."""
from __future__ import annotations

import json

import pytest

from xmr.datasets import load_annotation
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.mscoco import convert_mscoco, main, read_stair


def _name(cocoid: int) -> str:
    return f'COCO_{"train" if cocoid < 100 else "val"}2014_{cocoid:012d}.jpg'


def _karpathy(path, splits, caption_counts=None):
    """Karpathy's ``dataset_coco.json`` layout, every key of its entries; five captions an
    image unless ``caption_counts`` (cocoid -> count) says otherwise."""
    images, sentid = [], 0
    for cocoid, split in splits:
        imgid, count = len(images), (caption_counts or {}).get(cocoid, 5)
        images.append({'filepath': _name(cocoid).split('_')[1], 'filename': _name(cocoid),
                       'cocoid': cocoid, 'split': split, 'imgid': imgid,
                       'sentids': list(range(sentid, sentid + count)),
                       'sentences': [{'raw': f'image {cocoid} caption {k}', 'tokens': [],
                                      'imgid': imgid, 'sentid': sentid + k}
                                     for k in range(count)]})
        sentid += count
    path.write_text(json.dumps({'images': images, 'dataset': 'coco'}), encoding='utf-8')


@pytest.fixture
def coco(tmp_path):
    splits = ([(i, 'train') for i in range(1, 5)] + [(i, 'restval') for i in range(5, 7)]
              + [(i, 'val') for i in range(100, 103)]
              + [(i, 'test') for i in range(1000, 6000)])
    _karpathy(tmp_path / 'dataset_coco.json', splits)
    stair = {'images': [], 'annotations': [
        {'id': n, 'image_id': cocoid, 'caption': f'画像{cocoid}の説明{k}'}
        for n, (cocoid, k) in enumerate((c, k) for c, _ in splits for k in range(5))]}
    stair['annotations'][0]['caption'] = '改行を\n含む説明 '
    half = len(stair['annotations']) // 2
    (tmp_path / 'stair_train.json').write_text(json.dumps(
        {'images': [], 'annotations': stair['annotations'][:half]}), encoding='utf-8')
    (tmp_path / 'stair_val.json').write_text(json.dumps(
        {'images': [], 'annotations': stair['annotations'][half:]}), encoding='utf-8')
    cn = tmp_path / 'coco-cn'
    cn.mkdir()
    (cn / 'coco-cn_train.txt').write_text(f'{_name(1)[:-4]}\n{_name(100)[:-4]}\n')
    (cn / 'coco-cn_val.txt').write_text(f'{_name(2)[:-4]}\n')
    (cn / 'coco-cn_test.txt').write_text(f'{_name(1000)[:-4]}\n{_name(1001)[:-4]}\n')
    (cn / 'imageid.human-written-caption.txt').write_text(''.join(
        f'{_name(c)[:-4]}#{k}\t图片{c}第{k}句\n'
        for c, count in ((1, 1), (100, 2), (2, 1), (1000, 2), (1001, 1)) for k in range(count)),
        encoding='utf-8')
    return tmp_path


def test_karpathy_splits_folds_and_languages(coco):
    outputs = convert_mscoco(coco / 'dataset_coco.json',
                             stair_jsons=[coco / 'stair_train.json', coco / 'stair_val.json'],
                             coco_cn_dir=coco / 'coco-cn')
    train = outputs['coco_train']
    assert [r.media_id for r in train.items] == [_name(i)[:-4] for i in range(1, 7)]
    assert train.items[0].media_path == f'train2014/{_name(1)}'
    # train2014 alone: Karpathy's 'train' label without restval.
    assert [r.media_id for r in outputs['coco_train2014'].items] == [
        _name(i)[:-4] for i in range(1, 5)]
    assert train.languages == ['en', 'ja'] and len(train.items[3].captions['en']) == 5
    # STAIR captions are matched by COCO id; line breaks are folded, ends stripped.
    assert train.items[0].captions['ja'][0] == '改行を 含む説明'
    assert train.items[1].captions['ja'][4] == '画像2の説明4'
    assert len(outputs['coco_val'].items) == 3 and len(outputs['coco_test5k'].items) == 5000
    for fold in range(5):
        ids = [r.media_id for r in outputs[f'coco_test1k_fold{fold}'].items]
        assert ids == [_name(1000 + fold * 1000 + i)[:-4] for i in range(1000)]
    test_cn = outputs['cococn_test']
    assert test_cn.languages == ['en', 'ja', 'zh']
    assert [r.captions['zh'] for r in test_cn.items] == [['图片1000第0句', '图片1000第1句'],
                                                         ['图片1001第0句']]
    assert [len(outputs[f'cococn_{s}'].items) for s in ('train', 'val', 'test')] == [2, 1, 2]


def test_missing_stair_coverage_and_missing_images_stop(coco, tmp_path):
    with pytest.raises(ConversionError, match='STAIR Captions lack .* images .*pass every STAIR'):
        convert_mscoco(coco / 'dataset_coco.json', stair_jsons=[coco / 'stair_train.json'])
    images = tmp_path / 'images'
    with pytest.raises(ConversionError, match=f'image folder not found: {images}'):
        convert_mscoco(coco / 'dataset_coco.json', images_dir=images)


def test_translations_attach_to_train(coco, tmp_path):
    lines = tmp_path / 'train.zh.txt'
    lines.write_text(''.join(f'译文{i}\n' for i in range(30)), encoding='utf-8')
    outputs = convert_mscoco(coco / 'dataset_coco.json', train_translations={'zh': lines})
    assert outputs['coco_train'].items[1].translations['zh'] == [f'译文{i}' for i in range(5, 10)]


def test_command_line_refuses_a_short_test_split(tmp_path):
    _karpathy(tmp_path / 'dataset_coco.json', [(1, 'train'), (100, 'val'), (1000, 'test')])
    with pytest.raises(SystemExit, match='has 1 test images; the 1K/5K protocols need 5000'):
        main(['--karpathy-json', str(tmp_path / 'dataset_coco.json'), '--skip-media-check',
              '--out-dir', str(tmp_path / 'out')])
    assert not (tmp_path / 'out').exists()


def test_a_deliberate_subset_of_the_test_split_is_written_without_folds(tmp_path):
    """--skip-benchmark-size-check was refused by the Karpathy layout's own check; the 1K
    folds, cut from 5,000 images, are left out, and a warning says so."""
    _karpathy(tmp_path / 'dataset_coco.json', [(1, 'train'), (100, 'val'), (1000, 'test')])
    with pytest.warns(UserWarning, match='the test5k split holds 1 images, not the 5,000 the 1K '
                                         'protocol folds'):
        main(['--karpathy-json', str(tmp_path / 'dataset_coco.json'), '--skip-media-check',
              '--out-dir', str(tmp_path / 'out'), '--skip-benchmark-size-check'])
    assert sorted(path.name for path in (tmp_path / 'out').iterdir()) == [
        'coco_test5k.json', 'coco_train.json', 'coco_train2014.json', 'coco_val.json']


def test_text_only_writes_text_pairs_without_images(coco):
    """--text-only (text pairs for a text-only teacher or the cross-lingual phase), which every
    other converter takes, was refused as an unknown argument (by every Karpathy command)."""
    main(['--karpathy-json', str(coco / 'dataset_coco.json'), '--stair-json',
          str(coco / 'stair_train.json'), str(coco / 'stair_val.json'), '--text-only',
          '--out-dir', str(coco / 'out'), '--skip-benchmark-size-check'])
    train = load_annotation(coco / 'out' / 'coco_train.json')
    assert train.media_type == 'text' and all(r.media_path is None for r in train.items)
    assert train.items[1].captions == {'en': [f'image 2 caption {k}' for k in range(5)],
                                       'ja': [f'画像2の説明{k}' for k in range(5)]}
    assert load_annotation(coco / 'out' / 'coco_test5k.json').media_type == 'text'


def test_evaluation_splits_keep_the_first_five_captions_of_an_image(coco):
    """The 1K/5K protocols rank 25,000 test captions (five an image, as VSE++'s data): an image
    with six or seven keeps its first five in file order; train keeps every caption."""
    splits = ([(1, 'train'), (2, 'restval'), (100, 'val')]
              + [(i, 'test') for i in range(1000, 6000)])
    _karpathy(coco / 'dataset_coco.json', splits,
              caption_counts={1: 7, 100: 6, 1000: 6, 4500: 7, 5999: 3})
    with pytest.warns(UserWarning) as caught:
        outputs = convert_mscoco(coco / 'dataset_coco.json')
    assert [str(w.message) for w in caught] == [
        f'Karpathy split file {coco / "dataset_coco.json"}: 1 captions of 1 val images dropped; '
        'the 1K/5K protocols rank the first 5 of each image, in file order (first: '
        f'val2014/{_name(100)}, 6 captions)',
        f'Karpathy split file {coco / "dataset_coco.json"}: 3 captions of 2 test images dropped; '
        'the 1K/5K protocols rank the first 5 of each image, in file order (first: '
        f'val2014/{_name(1000)}, 6 captions)']
    test = outputs['coco_test5k'].items
    # 4,999 images of five and one of three: 24,998 captions, not the file's 25,001.
    assert sum(len(r.captions['en']) for r in test) == 24998
    assert test[0].captions['en'] == [f'image 1000 caption {k}' for k in range(5)]
    assert test[3500].captions['en'] == [f'image 4500 caption {k}' for k in range(5)]
    assert test[4999].captions['en'] == [f'image 5999 caption {k}' for k in range(3)]
    assert [sum(len(r.captions['en']) for r in outputs[f'coco_test1k_fold{fold}'].items)
            for fold in range(5)] == [5000, 5000, 5000, 5000, 4998]
    assert outputs['coco_val'].items[0].captions['en'] == [
        f'image 100 caption {k}' for k in range(5)]
    assert len(outputs['coco_train'].items[0].captions['en']) == 7
    assert len(outputs['coco_train2014'].items[0].captions['en']) == 7


def test_a_stair_annotation_whose_image_id_is_no_integer_names_its_file_and_index(tmp_path):
    path = tmp_path / 'stair.json'
    path.write_text(json.dumps({'annotations': [{'image_id': 1, 'caption': 'a'},
                                                {'image_id': None, 'caption': 'b'}]}))
    with pytest.raises(ConversionError, match=f'^STAIR Captions file {path} annotation 1 has '
                                              'image_id None, not an integer$'):
        read_stair([path])
