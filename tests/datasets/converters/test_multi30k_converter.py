"""Multi30K conversion on the real release files of ../shared/data/multi30k."""
from __future__ import annotations

import gzip
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests.datasets.converters.reruns import assert_a_rerun_keeps
from xmr.datasets.annotation import dump_annotation, load_annotation, text_pairs
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.multi30k import convert_multi30k, main
from xmr.datasets.converters.translations import (
    attach_translations,
    export_source_captions,
    main_attach,
)


@pytest.fixture
def multi30k(shared_data) -> Path:
    root = shared_data / 'multi30k'
    if not (root / 'raw').is_dir():
        pytest.skip(f'Multi30K fixtures not found under {root}')
    return root


def _raw_lines(path: Path) -> list[bytes]:
    """Independent reference: the file's lines as bytes."""
    return gzip.open(path, 'rb').read().split(b'\n')[:-1]


def _placeholder_images(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).touch()


def test_counts_per_split_and_language(multi30k, tmp_path):
    # The 29k train images are not created: train is converted without the media check.
    train = convert_multi30k(multi30k / 'raw', multi30k / 'image_splits', splits=['train'])
    images = tmp_path / 'flickr30k-images'
    names = {split: (multi30k / 'image_splits' / f'{split}.txt').read_text().split()
             for split in ('val', 'test_2016_flickr')}
    _placeholder_images(images, names['val'] + names['test_2016_flickr'])
    evaluation = convert_multi30k(multi30k / 'raw', multi30k / 'image_splits', images,
                                  splits=['val', 'test', 'test_5captions'])
    outputs = {**train, **evaluation}
    expected = {'train': 29000, 'val': 1014, 'test': 1000, 'test_5captions': 1000}
    assert {split: len(ann.items) for split, ann in outputs.items()} == expected
    for split in ('train', 'val', 'test'):
        assert outputs[split].languages == ['en', 'de', 'fr', 'cs']
        assert all(len(r.captions[lang]) == 1 for r in outputs[split].items
                   for lang in ('en', 'de', 'fr', 'cs'))
    five = outputs['test_5captions']
    assert five.languages == ['en', 'de', 'fr', 'cs']
    assert all(len(r.captions[lang]) == 5 for r in five.items for lang in ('en', 'de'))
    assert all(len(r.captions[lang]) == 1 for r in five.items for lang in ('fr', 'cs'))
    # Line i of the image list names item i, in every split.
    assert [r.media_path for r in outputs['test'].items] == names['test_2016_flickr']
    assert [r.media_path for r in five.items] == names['test_2016_flickr']
    assert outputs['test'].items[0].media_id == names['test_2016_flickr'][0].removesuffix('.jpg')
    # Task 2's k-th caption of image i is line i of test_2016.k.de.gz.
    third = _raw_lines(multi30k / 'raw' / 'test_2016.3.de.gz')
    assert [r.captions['de'][2].encode() for r in five.items] == third


def test_czech_caption_survives_the_round_trip_byte_for_byte(multi30k, tmp_path):
    outputs = convert_multi30k(multi30k / 'raw', multi30k / 'image_splits', splits=['test'])
    raw = _raw_lines(multi30k / 'raw' / 'test_2016_flickr.cs.gz')
    line = next(i for i, text in enumerate(raw) if 'ž'.encode() in text and 'ě'.encode() in text)
    main(['--raw-dir', str(multi30k / 'raw'), '--image-splits-dir',
          str(multi30k / 'image_splits'), '--skip-media-check', '--splits', 'test',
          '--out-dir', str(tmp_path)])
    loaded = load_annotation(tmp_path / 'multi30k_test.json')
    assert loaded.items[line].captions['cs'][0].encode('utf-8') == raw[line]
    assert loaded == outputs['test']


def test_missing_image_fails_with_its_path(multi30k, tmp_path):
    names = (multi30k / 'image_splits' / 'val.txt').read_text().split()
    _placeholder_images(tmp_path, names[:500] + names[501:])
    with pytest.raises(ConversionError, match=f'image file not found: {tmp_path / names[500]}$'):
        convert_multi30k(multi30k / 'raw', multi30k / 'image_splits', tmp_path, splits=['val'])


def test_caption_file_one_line_short_names_file_and_both_counts(multi30k, tmp_path):
    raw = tmp_path / 'raw'
    shutil.copytree(multi30k / 'raw', raw, ignore=shutil.ignore_patterns('train.*', 'test*'))
    short = raw / 'val.cs.gz'
    lines = _raw_lines(multi30k / 'raw' / 'val.cs.gz')
    short.chmod(0o644)
    with gzip.open(short, 'wb') as handle:
        handle.write(b'\n'.join(lines[:-1]) + b'\n')
    with pytest.raises(ConversionError) as info:
        convert_multi30k(raw, multi30k / 'image_splits', splits=['val'])
    message = str(info.value)
    assert str(short) in message and 'has 1013 lines' in message
    assert str(multi30k / 'image_splits' / 'val.txt') in message and 'has 1014' in message


def test_command_line_stops_without_writing_anything(multi30k, tmp_path):
    raw = tmp_path / 'raw'
    shutil.copytree(multi30k / 'raw', raw, ignore=shutil.ignore_patterns('train.*'))
    (raw / 'test_2016.4.en.gz').unlink()
    out = tmp_path / 'out'
    with pytest.raises(SystemExit, match=r'error: en caption file not found in .*test_2016\.4'):
        main(['--raw-dir', str(raw), '--image-splits-dir', str(multi30k / 'image_splits'),
              '--skip-media-check', '--splits', 'val', 'test', 'test_5captions',
              '--out-dir', str(out)])
    assert not out.exists()


def test_a_raw_dir_of_task_1_alone_says_where_task_2_is_and_how_to_leave_it_out(multi30k,
                                                                                 tmp_path):
    # The release's data/task1/raw, as the documented command names it, lacks task 2's files.
    raw = tmp_path / 'task1' / 'raw'
    shutil.copytree(multi30k / 'raw', raw, ignore=shutil.ignore_patterns('test_2016.*'))
    with pytest.raises(ConversionError, match=(
            r"^en caption file not found in .*task1/raw: looked for test_2016\.1\.en\.gz, "
            r"test_2016\.1\.en; test_5captions is Multi30K task 2: put the release's "
            r"data/task2/raw/test_2016\.\*\.gz into --raw-dir, or leave the split out with "
            r"--splits train val test$")):
        convert_multi30k(raw, multi30k / 'image_splits', splits=['test_5captions'])


def test_text_only_export_needs_no_images_and_keeps_every_caption(multi30k, tmp_path):
    main(['--raw-dir', str(multi30k / 'raw'), '--image-splits-dir',
          str(multi30k / 'image_splits'), '--text-only', '--splits', 'val',
          '--languages', 'en', 'de', '--out-dir', str(tmp_path)])
    text = json.loads((tmp_path / 'multi30k_val.json').read_text(encoding='utf-8'))
    assert text['media_type'] == 'text'
    assert not any('media_path' in item for item in text['items'])
    loaded = load_annotation(tmp_path / 'multi30k_val.json')
    de = _raw_lines(multi30k / 'raw' / 'val.de.gz')
    assert [item.captions['de'][0].encode('utf-8') for item in loaded.items] == de
    image_list = (multi30k / 'image_splits' / 'val.txt').read_text().split()
    assert [item.media_id for item in loaded.items] == [Path(n).stem for n in image_list]



def test_languages_are_taken_in_any_form(multi30k, tmp_path):
    """--languages en DE and --translations deu=... are read as en, de (docs/data.md)."""
    texts = convert_multi30k(multi30k / 'raw', multi30k / 'image_splits', splits=['val'],
                             languages=['eng', 'DE'])['val']
    assert texts.languages == ['en', 'de'] and texts.source_lang == 'en'
    main(['--raw-dir', str(multi30k / 'raw'), '--image-splits-dir',
          str(multi30k / 'image_splits'), '--text-only', '--splits', 'train',
          '--languages', 'en', 'de', '--out-dir', str(tmp_path / 'out')])
    count = len(load_annotation(tmp_path / 'out' / 'multi30k_train.json').items)
    (tmp_path / 'fr.txt').write_text(''.join(f'fr {i}\n' for i in range(count)))
    main(['--raw-dir', str(multi30k / 'raw'), '--image-splits-dir',
          str(multi30k / 'image_splits'), '--text-only', '--splits', 'train',
          '--languages', 'en', 'de', '--translations', f'FRA={tmp_path / "fr.txt"}',
          '--out-dir', str(tmp_path / 'translated')])
    translated = load_annotation(tmp_path / 'translated' / 'multi30k_train.json')
    assert translated.translation_langs == ['fr']

def test_text_pairs_take_translations_like_any_annotation(multi30k, tmp_path):
    ann = text_pairs(convert_multi30k(multi30k / 'raw', multi30k / 'image_splits',
                                      splits=['val'], languages=['en', 'de'])['val'])
    count = export_source_captions(ann, tmp_path / 'en.txt')
    (tmp_path / 'fr.txt').write_text(''.join(f'fr {i}\n' for i in range(count)))
    translated = attach_translations(ann, {'fr': tmp_path / 'fr.txt'})
    translated.validate('translated')
    assert translated.media_type == 'text' and translated.items[3].translations == {
        'fr': ['fr 3']}


def test_without_images_the_command_line_names_the_three_ways(multi30k, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(['--raw-dir', str(multi30k / 'raw'), '--image-splits-dir',
              str(multi30k / 'image_splits'), '--out-dir', str(tmp_path)])
    assert ('give --images-dir, or --skip-media-check to convert without images, or '
            '--text-only for text pairs alone') in capsys.readouterr().err


def test_the_first_language_asked_for_is_the_source(multi30k):
    val = convert_multi30k(multi30k / 'raw', multi30k / 'image_splits', splits=['val'],
                           languages=['de', 'en'])['val']
    assert val.languages == ['de', 'en'] and val.source_lang == 'de'
    first_german = _raw_lines(multi30k / 'raw' / 'val.de.gz')[0].decode()
    assert val.items[0].captions['de'] == [first_german]


def test_a_missing_image_folder_names_the_options_that_convert_without_it(multi30k, tmp_path,
                                                                          capsys):
    """A user with the captions and not yet the images is told the way on, and it works."""
    args = ['--raw-dir', str(multi30k / 'raw'), '--image-splits-dir',
            str(multi30k / 'image_splits'), '--images-dir', str(tmp_path / 'flickr30k-images'),
            '--out-dir', str(tmp_path / 'out'), '--splits', 'val']
    with pytest.raises(SystemExit, match=(
            f'^error: image folder not found: {tmp_path / "flickr30k-images"}: check '
            '--images-dir, or pass --skip-media-check to convert without the images$')):
        main(args)
    main([*args, '--skip-media-check'])
    assert len(load_annotation(tmp_path / 'out' / 'multi30k_val.json').items) == 1014


def test_converting_again_keeps_a_file_that_translations_were_attached_to(multi30k, tmp_path,
                                                                          capsys):
    """docs/data.md attaches translations in place; the converter run again into the same
    folder replaced the file, and the attached languages were gone without a word."""
    convert = ['--raw-dir', str(multi30k / 'raw'), '--image-splits-dir',
               str(multi30k / 'image_splits'), '--text-only', '--splits', 'val',
               '--languages', 'en', 'de', '--out-dir', str(tmp_path)]
    main(convert)
    ann = tmp_path / 'multi30k_val.json'
    count = export_source_captions(load_annotation(ann), tmp_path / 'en.txt')
    (tmp_path / 'es.txt').write_text(''.join(f'es {i}\n' for i in range(count)))
    main_attach([str(ann), '--translations', f'es={tmp_path / "es.txt"}'])
    assert_a_rerun_keeps(ann, lambda: main(convert), 'translation_langs', ['es'])
    main(convert[:-1] + [str(tmp_path / 'other')])  # another folder: written
    ann.rename(tmp_path / 'moved.json')
    main(convert)  # the place is free again
    assert load_annotation(ann).translation_langs == []



def test_out_dir_replaces_an_earlier_multi30k_annotation_alone(multi30k, tmp_path):
    """A checkpoint, a test result or another dataset's annotation at <out-dir>/<name>.json
    was written over; each is refused before the release is read (a --raw-dir that does not
    exist is not reached), naming the path and the fix."""
    convert = ['--image-splits-dir', str(multi30k / 'image_splits'), '--skip-media-check',
               '--out-dir', str(tmp_path), '--splits']
    main(['--raw-dir', str(multi30k / 'raw'), *convert, 'test'])
    other = tmp_path / 'multi30k_test.json'
    dump_annotation(replace(load_annotation(other), dataset='xtd10'), other)
    result = tmp_path / 'multi30k_val.json'
    result.write_text('{"metrics": {"mAR": 50.0}}')
    checkpoint = tmp_path / 'multi30k_train.json'
    checkpoint.write_bytes(b'PK\x03\x04\x00\x00\x08\x00')
    kept = {path: path.read_bytes() for path in (checkpoint, result, other)}
    for path, split in ((checkpoint, 'train'), (result, 'val'), (other, 'test')):
        for raw in (tmp_path / 'no_raw', multi30k / 'raw'):
            with pytest.raises(SystemExit, match=re.escape(
                    f'error: {path} (--out-dir): exists and is no multi30k annotation a '
                    'converter wrote; it is kept (a converter replaces its own earlier output '
                    'alone): move it away, or give --out-dir another folder')):
                main(['--raw-dir', str(raw), *convert, split])
    assert {path: path.read_bytes() for path in kept} == kept
    # An earlier run's own output is replaced, as before.
    for path in kept:
        path.unlink()
    main(['--raw-dir', str(multi30k / 'raw'), *convert, 'val', 'test'])
    main(['--raw-dir', str(multi30k / 'raw'), *convert, 'val', 'test'])
    assert len(load_annotation(result).items) == 1014


def test_task_2_galleries_hold_the_protocol_of_the_multilingual_papers(multi30k, tmp_path):
    """M3P, UC2, MLA and DASD (DASD's multi30k_4lang_path.json) score Multi30K on one gallery:
    en and de with task 2's five captions an image, fr and cs with task 1's one. The
    5-caption file held en and de alone, and no val split had task 2's captions."""
    test = convert_multi30k(multi30k / 'raw', multi30k / 'image_splits',
                            splits=['test_5captions'])['test_5captions']
    for lang in ('fr', 'cs'):
        task1 = _raw_lines(multi30k / 'raw' / f'test_2016_flickr.{lang}.gz')
        assert [r.captions[lang] for r in test.items] == [[line.decode()] for line in task1]
    assert test.items[0].captions['en'][3] == 'A man in an orange hat starring at something.'


@pytest.mark.parametrize(('split', 'stem'), [('val_5captions', 'val'),
                                             ('train_5captions', 'train')])
def test_task_2_train_and_val_hold_five_en_and_de_captions_beside_task_1(multi30k, tmp_path,
                                                                        split, stem):
    """Task 2's val files (the release's data/task2/raw/val.{k}.{en,de}.gz) give the papers'
    validation gallery, its train files the 145,000 English captions DASD's source finetune
    reads; fr and cs come from task 1, image by image."""
    names = (multi30k / 'image_splits' / f'{stem}.txt').read_text().split()
    raw = tmp_path / 'raw'
    shutil.copytree(multi30k / 'raw', raw, ignore=shutil.ignore_patterns('test*'))
    for k in range(1, 6):
        for lang in ('en', 'de'):
            with gzip.open(raw / f'{stem}.{k}.{lang}.gz', 'wt', encoding='utf-8') as handle:
                handle.write(''.join(f'{lang} {k} of image {i}\n' for i in range(len(names))))
    ann = convert_multi30k(raw, multi30k / 'image_splits', splits=[split])[split]
    assert (ann.split, ann.languages, ann.source_lang) == (split, ['en', 'de', 'fr', 'cs'], 'en')
    assert [r.media_path for r in ann.items] == names
    assert sum(len(r.captions['en']) for r in ann.items) == 5 * len(names)
    assert ann.items[7].captions['de'] == [f'de {k} of image 7' for k in range(1, 6)]
    assert ann.items[7].captions['cs'] == [
        _raw_lines(multi30k / 'raw' / f'{stem}.cs.gz')[7].decode()]
    with pytest.raises(ConversionError, match=(
            rf"{split} is Multi30K task 2: put the release's data/task2/raw/{stem}\.\*\.gz "
            r"into --raw-dir")):
        convert_multi30k(multi30k / 'raw', multi30k / 'image_splits', splits=[split])
