"""Crossmodal-3600, XTD200 and Flickr30k-200 converters on files in the releases' own layouts."""
from __future__ import annotations

import json
import re
import runpy
import sys
from pathlib import Path

import pytest

from xmr.datasets import load_annotation
from xmr.datasets.converters.crossmodal3600 import convert_crossmodal3600
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.flores_captions import convert_flores_captions
from xmr.datasets.converters.xtd10 import coco_image_path
from xmr.utils.cli import EXIT_ERROR

TOOLS = Path(__file__).resolve().parents[3] / 'tools' / 'data'
XM3600_ROWS = [
    {'image/key': '000411001ff7dd4f',
     'en': {'caption': ['A dog on a sofa.', 'A brown dog\nresting.'],
            'caption/tokenized': ['a dog on a sofa .', 'a brown dog resting .']},
     'sw': {'caption': ['Mbwa kwenye sofa.'], 'caption/tokenized': ['mbwa kwenye sofa .']},
     'fil': {'caption': ['Aso sa sopa.'], 'caption/tokenized': ['aso sa sopa .']}},
    {'image/key': '00cd3c8ab3fd8e8b',
     'en': {'caption': ['A red car.'], 'caption/tokenized': ['a red car .']},
     'sw': {'caption': ['Gari jekundu.', 'Gari barabarani.'],
            'caption/tokenized': ['gari jekundu .', 'gari barabarani .']},
     'fil': {'caption': ['Pulang kotse.'], 'caption/tokenized': ['pulang kotse .']}},
]


def write_xm3600(root: Path, rows=XM3600_ROWS) -> Path:
    (root / 'images').mkdir(parents=True, exist_ok=True)
    for row in rows:
        if 'image/key' in row:
            (root / 'images' / f"{row['image/key']}.jpg").write_bytes(b'')
    path = root / 'captions.jsonl'
    path.write_text(''.join(json.dumps(row, ensure_ascii=False) + '\n' for row in rows),
                    encoding='utf-8')
    return path


def test_crossmodal3600_keeps_every_caption_in_release_order(tmp_path):
    captions = write_xm3600(tmp_path)
    ann = convert_crossmodal3600(captions, tmp_path / 'images', ['en', 'swh_Latn', 'fil'])
    assert ann.dataset == 'crossmodal3600' and ann.languages == ['en', 'sw', 'fil']
    first, second = ann.items
    assert (first.media_id, first.media_path) == ('000411001ff7dd4f', '000411001ff7dd4f.jpg')
    assert first.captions == {'en': ['A dog on a sofa.', 'A brown dog resting.'],
                              'sw': ['Mbwa kwenye sofa.'], 'fil': ['Aso sa sopa.']}
    assert second.captions['sw'] == ['Gari jekundu.', 'Gari barabarani.']


@pytest.mark.parametrize('rows, languages, message', [
    ([{**XM3600_ROWS[0], 'sw': {'caption': []}}], ['sw'],
     r"line 1 \(image 000411001ff7dd4f\): no captions under \['sw'\]\['caption'\]"),
    ([{'en': {'caption': ['x']}}], ['en'], "line 1: expected an object with a string 'image/key'"),
    (XM3600_ROWS, ['swh_Latn', 'tgl_Latn'], r"Crossmodal-3600 has no captions in \['tl'\]"),
    (XM3600_ROWS, ['swahili'], "--languages: unknown language code 'swahili'"),
    ([*XM3600_ROWS, XM3600_ROWS[0]], ['en'],
     r"captions\.jsonl line 3 repeats image/key '000411001ff7dd4f' of line 1$"),
])
def test_crossmodal3600_errors_name_line_and_key(tmp_path, rows, languages, message):
    with pytest.raises(ConversionError, match=message):
        convert_crossmodal3600(write_xm3600(tmp_path, rows), None, languages)


@pytest.mark.parametrize('value, fault', [
    ('7' * 5000, 'an integer of 5000 digits, more than the 4300 Python reads: write it as a '
                 'string: line 1 column 11 (char 10)'),
    ('[' * 100_000 + ']' * 100_000, 'a value nesting arrays and objects 100001 levels deep'),
], ids=['integer too long', 'nested too deep'])
def test_crossmodal3600_a_line_python_cannot_read_is_named_with_its_column(tmp_path, value,
                                                                           fault):
    """A bare ValueError ('Exceeds the limit (4300 digits)') or RecursionError escaped,
    naming neither the file nor the line."""
    path = write_xm3600(tmp_path)
    path.write_text(path.read_text(encoding='utf-8') + f'{{"extra": {value}}}\n',
                    encoding='utf-8')
    with pytest.raises(ConversionError, match=re.escape(
            f'captions file {path} line 3 is not a JSON object: {fault}')):
        convert_crossmodal3600(path, None, ['en'])


def test_crossmodal3600_script_checks_images_and_writes_nothing_on_failure(tmp_path, monkeypatch,
                                                                            capsys):
    captions = write_xm3600(tmp_path)
    (tmp_path / 'images' / '00cd3c8ab3fd8e8b.jpg').unlink()
    args = ['--captions', str(captions), '--images-dir', str(tmp_path / 'images'),
            '--out-dir', str(tmp_path / 'out'), '--languages', 'en', 'sw']
    assert re.search('image file not found: .*00cd3c8ab3fd8e8b.jpg',
                     _refused('prepare_crossmodal3600.py', args, monkeypatch, capsys))
    assert not (tmp_path / 'out').exists()
    (tmp_path / 'images' / '00cd3c8ab3fd8e8b.jpg').write_bytes(b'')
    # Two images of a benchmark scored on 3,600: refused at conversion, naming split and sizes.
    refused = _refused('prepare_crossmodal3600.py', args, monkeypatch, capsys)
    assert re.search(r"crossmodal3600 split 'test' holds 2 media, but the benchmark is scored "
                     'on 3600.*--skip-benchmark-size-check', refused)
    assert not (tmp_path / 'out' / 'crossmodal3600_test.json').exists()
    _run('prepare_crossmodal3600.py', [*args, '--skip-benchmark-size-check'], monkeypatch)
    ann = load_annotation(tmp_path / 'out' / 'crossmodal3600_test.json')
    assert ann.languages == ['en', 'sw'] and len(ann.items) == 2


def test_crossmodal3600_text_only_writes_text_pairs_without_images(tmp_path, monkeypatch):
    """--text-only (text pairs for a text-only teacher or the cross-lingual phase), which every
    other converter takes, was refused as an unknown argument."""
    captions = write_xm3600(tmp_path)
    _run('prepare_crossmodal3600.py', ['--captions', str(captions), '--text-only', '--out-dir',
                                       str(tmp_path / 'out'), '--languages', 'en', 'sw',
                                       '--skip-benchmark-size-check'], monkeypatch)
    ann = load_annotation(tmp_path / 'out' / 'crossmodal3600_test.json')
    assert ann.media_type == 'text' and [item.media_path for item in ann.items] == [None] * 2
    assert ann.items[0].captions == {'en': ['A dog on a sofa.', 'A brown dog resting.'],
                                     'sw': ['Mbwa kwenye sofa.']}


def write_flores_release(root: Path, image_list: str, names: list[str],
                         captions: dict[str, list[str]]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / image_list).write_text(''.join(f'{name}\n' for name in names), encoding='utf-8')
    for flores, lines in captions.items():
        # NLLB's files end with a newline; a CRLF file reads the same.
        (root / f'{flores}.txt').write_bytes(''.join(f'{line}\r\n' for line in lines).encode())
    return root


XTD200_CAPTIONS = {'eng_Latn': ['a cat on a desk', 'birds over water'],
                   'swh_Latn': ['paka juu ya dawati', 'ndege juu ya maji'],
                   'zho_Hant': ['桌上的貓', '水上的鳥'],
                   'kas_Deva': ['डेस्क पर बिल्ली', 'पानी पर पक्षी']}


def test_xtd200_reads_flores_files_into_canonical_codes(tmp_path):
    names = ['COCO_train2014_000000061844.jpg', 'COCO_val2014_000000000042.jpg']
    release = write_flores_release(tmp_path / 'xtd200', 'test_image_names.txt', names,
                                   XTD200_CAPTIONS)
    ann = convert_flores_captions('xtd200', release, ['en', 'sw', 'zho_Hant', 'kas_Deva'],
                                  media_path=coco_image_path)
    assert ann.languages == ['en', 'sw', 'zh-Hant', 'ks-Deva'] and ann.source_lang == 'en'
    assert [item.media_path for item in ann.items] == [
        'train2014/COCO_train2014_000000061844.jpg', 'val2014/COCO_val2014_000000000042.jpg']
    assert ann.items[1].media_id == 'COCO_val2014_000000000042'
    assert ann.items[1].captions == {'en': ['birds over water'], 'sw': ['ndege juu ya maji'],
                                     'zh-Hant': ['水上的鳥'], 'ks-Deva': ['पानी पर पक्षी']}


def test_all_languages_of_a_folder_without_caption_files_names_the_folder(tmp_path):
    """``--languages all`` in the wrong folder (the release's ``data/`` rather than
    ``data/xtd200/``, or captions renamed) found no file: the annotation was refused for its
    empty language list, naming neither the folder nor the files looked for."""
    release = write_flores_release(tmp_path / 'xtd200', 'test_image_names.txt',
                                   ['COCO_val2014_000000000042.jpg'], {})
    (release / 'swahili.txt').write_text('paka\n', encoding='utf-8')
    with pytest.raises(ConversionError, match=r'--languages all: no FLORES-200 caption file '
                                              r'\(<flores code>.txt, such as swh_Latn.txt\) in '
                                              r'.*xtd200'):
        convert_flores_captions('xtd200', release, ['all'])
    with pytest.raises(ConversionError, match=r"--languages \['all', 'en'\]: 'all' takes every "
                                              'caption file of the folder; give it alone'):
        convert_flores_captions('xtd200', release, ['all', 'en'])


def test_flickr30k_200_script_and_its_errors(tmp_path, monkeypatch, capsys):
    release = write_flores_release(tmp_path / 'f200', 'filenames.txt',
                                   ['1007129816.jpg', '101362133.jpg'],
                                   {'swh_Latn': ['Mwanamume.', 'Mbwa.'], 'eng_Latn': ['A man.']})
    (tmp_path / 'images').mkdir()
    for name in ('1007129816.jpg', '101362133.jpg'):
        (tmp_path / 'images' / name).write_bytes(b'')
    args = ['--captions-dir', str(release), '--images-dir', str(tmp_path / 'images'),
            '--out-dir', str(tmp_path / 'out'), '--languages']
    assert re.search(r'eng_Latn.txt has 1 lines but image list .*filenames.txt has 2',
                     _refused('prepare_flickr30k_200.py', [*args, 'sw', 'en'], monkeypatch,
                              capsys))
    assert re.search(r"'quz' \('quz'\) is not a FLORES-200 language",
                     _refused('prepare_flickr30k_200.py', [*args, 'quz'], monkeypatch,
                              capsys))
    assert re.search('caption file not found: .*ace_Arab.txt',
                     _refused('prepare_flickr30k_200.py', [*args, 'ace_Arab'], monkeypatch,
                              capsys))
    assert not (tmp_path / 'out').exists()
    (release / 'eng_Latn.txt').write_text('A man.\nA dog.\n', encoding='utf-8')
    _run('prepare_flickr30k_200.py', [*args, 'all'], monkeypatch)
    assert load_annotation(tmp_path / 'out' / 'flickr30k_200_test.json').languages == ['en', 'sw']
    _run('prepare_flickr30k_200.py', [*args, 'swh_Latn'], monkeypatch)
    ann = load_annotation(tmp_path / 'out' / 'flickr30k_200_test.json')
    assert ann.dataset == 'flickr30k_200' and ann.languages == ['sw']
    assert [(i.media_id, i.media_path, i.captions['sw']) for i in ann.items] == [
        ('1007129816', '1007129816.jpg', ['Mwanamume.']), ('101362133', '101362133.jpg',
                                                           ['Mbwa.'])]


@pytest.mark.parametrize('script, image_list', [('prepare_xtd200.py', 'test_image_names.txt'),
                                                 ('prepare_flickr30k_200.py', 'filenames.txt')])
def test_flores_text_only_writes_text_pairs_without_images(tmp_path, monkeypatch, script,
                                                           image_list):
    """--text-only (text pairs for a text-only teacher or the cross-lingual phase), which every
    other converter takes, was refused as an unknown argument."""
    names = ['COCO_val2014_000000000042.jpg', 'COCO_val2014_000000000073.jpg']
    release = write_flores_release(tmp_path / 'release', image_list, names, XTD200_CAPTIONS)
    _run(script, ['--captions-dir', str(release), '--text-only', '--out-dir',
                  str(tmp_path / 'out'), '--languages', 'en', 'swh_Latn'], monkeypatch)
    ann = load_annotation(next((tmp_path / 'out').iterdir()))
    assert ann.media_type == 'text' and [item.media_path for item in ann.items] == [None] * 2
    assert ann.items[1].captions == {'en': ['birds over water'], 'sw': ['ndege juu ya maji']}


def _run(script: str, args: list[str], monkeypatch) -> None:
    monkeypatch.setattr(sys, 'argv', [str(TOOLS / script), *args])
    runpy.run_path(str(TOOLS / script), run_name='__main__')


def _refused(script: str, args: list[str], monkeypatch, capsys) -> str:
    """The one error line a refused run prints (exit status 2)."""
    with pytest.raises(SystemExit) as exit_info:
        _run(script, args, monkeypatch)
    assert exit_info.value.code == EXIT_ERROR
    return capsys.readouterr().err
