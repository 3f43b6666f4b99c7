"""CC3M / CC300K from UC2-style translated TSVs (tiny files written by the test)."""
from __future__ import annotations

import random
import re

import pytest

from tests.datasets.converters.reruns import assert_a_rerun_keeps
from xmr.datasets.annotation import Annotation, MediaRecord, dump_annotation, load_annotation
from xmr.datasets.converters.cc3m import convert_cc3m, main
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.translations import main_attach


def _write_tsvs(folder, rows_per_lang):
    folder.mkdir(exist_ok=True)
    for lang, rows in rows_per_lang.items():
        (folder / f'train_imageId2Ann_{lang}.tsv').write_text(
            ''.join('\t'.join(row) + '\n' for row in rows), encoding='utf-8')


def _uc2(folder, ids=range(1, 21)):
    rows = {lang: [] for lang in ('en', 'de', 'zh')}
    for i in ids:
        ok = {'en': True, 'de': i != 4, 'zh': i != 9}
        for lang, words in (('en', f'a photo {i}'), ('de', f'ein Foto {i}'), ('zh', f'照片{i}')):
            rows[lang].append((str(i), f'http://x/{i}.jpg', words if ok[lang] else '',
                               'success' if ok[lang] else 'fail'))
    _write_tsvs(folder, rows)


def test_failed_rows_drop_the_image_and_translations_align(tmp_path):
    _uc2(tmp_path)
    ann = convert_cc3m(tmp_path, languages=['en', 'de', 'zh'])
    ids = [r.media_id for r in ann.items]
    assert ids == [str(i) for i in range(1, 21) if i not in (4, 9)]
    record = ann.items[ids.index('12')]
    assert record.media_path == '00000012.jpg'
    assert record.captions == {'en': ['a photo 12']}
    assert record.translations == {'de': ['ein Foto 12'], 'zh': ['照片12']}
    assert ann.translation_langs == ['de', 'zh'] and ann.source_lang == 'en'


def test_seeded_subset_is_reproducible(tmp_path):
    _uc2(tmp_path)
    eligible = [str(i) for i in range(1, 21) if i not in (4, 9)]
    expected = sorted(random.Random(7).sample(eligible, 5), key=int)
    for _ in range(2):
        ann = convert_cc3m(tmp_path, languages=['en', 'de', 'zh'], subset_size=5, seed=7)
        assert [r.media_id for r in ann.items] == expected
    with pytest.raises(ConversionError, match='subset of 19 images asked for, but only 18'):
        convert_cc3m(tmp_path, languages=['en', 'de', 'zh'], subset_size=19)
    for size in (0, -3, 2.5, True):
        with pytest.raises(ConversionError, match=f'^subset_size={size!r}: give a whole number'):
            convert_cc3m(tmp_path, languages=['en', 'de', 'zh'], subset_size=size)


def test_a_missing_image_folder_says_to_check_it_or_leave_it_out(tmp_path):
    _uc2(tmp_path / 'uc2')
    with pytest.raises(SystemExit, match=(
            f'^error: image folder not found: {tmp_path / "images"}: check --images-dir, or '
            'leave it out to keep every image the TSVs list$')):
        main(['--uc2-dir', str(tmp_path / 'uc2'), '--languages', 'en', 'de', 'zh',
              '--images-dir', str(tmp_path / 'images'), '--out', str(tmp_path / 'cc.json')])
    main(['--uc2-dir', str(tmp_path / 'uc2'), '--languages', 'en', 'de', 'zh',
          '--out', str(tmp_path / 'cc.json')])
    assert (tmp_path / 'cc.json').is_file()


def test_images_without_a_file_are_left_out_with_a_warning(tmp_path):
    _uc2(tmp_path / 'uc2')
    images = tmp_path / 'images'
    images.mkdir()
    for i in (1, 2, 3):
        (images / f'{i:08d}.jpg').touch()
    # A crawl's link whose target is gone has no file either.
    (images / f'{5:08d}.jpg').symlink_to(images / 'gone.jpg')
    with pytest.warns(UserWarning, match='15 of 18 images have no file'):
        ann = convert_cc3m(tmp_path / 'uc2', ['en', 'de', 'zh'], images_dir=images)
    assert [r.media_id for r in ann.items] == ['1', '2', '3']


@pytest.mark.parametrize(('row', 'message'), [
    (('1', 'u', 'x', 'done'), r"line 2 has status 'done'"),
    (('1', 'u', 'x'), 'line 2 has 3 tab-separated fields'),
    (('one', 'u', 'x', 'success'), "line 2 has id 'one'"),
    (('\u00b2', 'u', 'x', 'success'), "line 2 has id '\u00b2'"),
    (('1', 'u', ' ', 'success'), 'line 2 is marked success but has no caption'),
])
def test_malformed_rows_name_file_and_line(tmp_path, row, message):
    _write_tsvs(tmp_path, {'en': [('2', 'u', 'fine', 'success'), row]})
    with pytest.raises(ConversionError, match=r'train_imageId2Ann_en\.tsv ' + message):
        convert_cc3m(tmp_path, languages=['en'])


def test_command_line_writes_the_subset(tmp_path, capsys):
    _uc2(tmp_path / 'uc2')
    out = tmp_path / 'cc300k_train.json'
    main(['--uc2-dir', str(tmp_path / 'uc2'), '--languages', 'en', 'de', 'zh',
          '--subset-size', '3', '--out', str(out)])
    assert out.is_file()
    with pytest.raises(SystemExit):
        main(['--uc2-dir', str(tmp_path / 'uc2'), '--subset-size', '0', '--out', str(out)])
    assert "--subset-size: '0' is no whole number >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit, match='UC2 TSV not found'):
        main(['--uc2-dir', str(tmp_path / 'uc2'), '--languages', 'en', 'ja',
              '--out', str(tmp_path / 'never.json')])
    assert not (tmp_path / 'never.json').exists()


def test_converting_again_keeps_a_file_that_translations_were_attached_to(tmp_path):
    """prepare_cc3m.py writes through the converters' dump_converted: a language attached in
    place since the first run is not replaced by a second."""
    _uc2(tmp_path / 'uc2')
    out = tmp_path / 'cc300k_train.json'
    convert = ['--uc2-dir', str(tmp_path / 'uc2'), '--languages', 'en', 'de', '--out', str(out)]
    main(convert)
    captions = sum(len(item.captions['en']) for item in load_annotation(out).items)
    (tmp_path / 'fr.txt').write_text(''.join(f'une photo {i}\n' for i in range(captions)))
    main_attach([str(out), '--translations', f'fr={tmp_path / "fr.txt"}'])
    assert_a_rerun_keeps(out, lambda: main(convert), 'translation_langs', ['fr'])


def test_out_replaces_an_earlier_conversion_alone_never_a_tsv_or_another_file(tmp_path):
    """--out naming its own English TSV, a test result or another dataset's annotation was
    written over by the annotation."""
    _uc2(tmp_path / 'uc2')
    convert = ['--uc2-dir', str(tmp_path / 'uc2'), '--languages', 'en', 'de', '--out']
    tsv = tmp_path / 'uc2' / 'train_imageId2Ann_en.tsv'
    result = tmp_path / 'result.json'
    result.write_text('{"metrics": {"mAR": 50.0}}')
    other = tmp_path / 'multi30k_train.json'
    dump_annotation(Annotation(dataset='multi30k', split='train', media_type='image',
                               languages=['en'], items=[MediaRecord('1', '1.jpg',
                                                                    {'en': ['a dog']})]), other)
    kept = {path: path.read_bytes() for path in (tsv, result, other)}
    with pytest.raises(SystemExit, match=re.escape(
            f'{tmp_path}/uc2/../uc2/train_imageId2Ann_en.tsv (--out) is also --uc2-dir en TSV: '
            'writing it would replace that; give another path')):
        main([*convert, str(tmp_path / 'uc2' / '..' / 'uc2' / tsv.name)])
    for path in (result, other):
        with pytest.raises(SystemExit, match=re.escape(
                f'{path} (--out): exists and is no cc3m annotation a converter wrote; it is kept '
                '(a converter replaces its own earlier output alone): give --out another file')):
            main([*convert, str(path)])
    assert {path: path.read_bytes() for path in kept} == kept
    out = tmp_path / 'cc300k_train.json'
    main([*convert, str(out)])
    main([*convert, str(out)])  # its own earlier output: replaced
    assert load_annotation(out).translation_langs == ['de']


def test_captions_must_be_as_many_in_every_language_of_an_image_kept(tmp_path):
    """Image 3 is unaligned in de but has no zh row (not kept, no error); image 4 is kept and
    unaligned: the error names it; with 4 aligned, its two captions are kept in order."""
    def rows(captions):
        return [(str(i), f'http://x/{i}.jpg', text, 'success') for i, text in captions]

    tsvs = {'en': rows([(1, 'a'), (3, 'b'), (3, 'c'), (4, 'd'), (4, 'e'), (5, 'f')]),
            'de': rows([(1, 'A'), (3, 'B'), (4, 'D'), (5, 'F')]),
            'zh': rows([(1, '甲'), (4, '丁'), (4, '戊'), (5, '己')])}
    _write_tsvs(tmp_path, tsvs)
    with pytest.raises(ConversionError, match=r'train_imageId2Ann_de.tsv has 1 captions for id 4 '
                       'but the en file has 2; translations must align'):
        convert_cc3m(tmp_path, languages=['en', 'de', 'zh'])
    tsvs['de'].insert(3, ('4', 'http://x/4.jpg', 'E', 'success'))
    _write_tsvs(tmp_path, tsvs)
    ann = convert_cc3m(tmp_path, languages=['en', 'de', 'zh'])
    assert [(r.media_id, r.captions['en'], r.translations['de'], r.translations['zh'])
            for r in ann.items] == [('1', ['a'], ['A'], ['甲']),
                                    ('4', ['d', 'e'], ['D', 'E'], ['丁', '戊']),
                                    ('5', ['f'], ['F'], ['己'])]
