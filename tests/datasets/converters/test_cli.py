"""What the converters' command lines share: no output written over an input or another output."""
from __future__ import annotations

import argparse
import re

import pytest

from xmr.datasets.annotation import Annotation, MediaRecord, dump_annotation
from xmr.datasets.converters import (
    crossmodal3600,
    flickr30k,
    flores_captions,
    laps,
    mscoco,
    msrvtt,
    multi30k,
    xtd10,
)
from xmr.datasets.converters.back_translations import main_attach_back
from xmr.datasets.converters.translations import main_attach, main_export


@pytest.mark.parametrize('main, argv, refused', [
    (main_export, ['ann.json', './ann.json'], r'ann.json \(OUT\) is also ANN'),
    (main_attach_back, ['ann.json', '--export', 'de=ann.json'],
     r'ann.json \(--export de\) is also ANN'),
    (main_attach_back, ['ann.json', '--export', 'de=x.txt', 'fr=sub/../x.txt'],
     r'sub/../x.txt \(--export fr\) is also --export de'),
    (main_attach_back, ['ann.json', '--back-translations', 'de=x.txt', '--out', 'x.txt'],
     r'x.txt \(--out\) is also --back-translations de'),
    (main_attach, ['ann.json', '--translations', 'de=x.txt', '--out', 'x.txt'],
     r'x.txt \(--out\) is also --translations de'),
    (main_attach, ['x.txt', '--translations', 'de=x.txt'],
     r'x.txt \(--out\) is also --translations de'),
])
def test_an_output_that_is_an_input_or_another_output_is_refused_before_writing(
        tmp_path, monkeypatch, main, argv, refused):
    """``export_source_captions.py ann.json ann.json`` replaced the annotation with caption
    lines; ``--export de=x.txt fr=x.txt`` wrote French over German and reported both."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'sub').mkdir()
    dump_annotation(Annotation(
        dataset='demo', split='train', media_type='image', languages=['en', 'de', 'fr'],
        source_lang='en', items=[MediaRecord('a', 'a.jpg', {'en': ['a dog'], 'de': ['ein Hund'],
                                                            'fr': ['un chien']})]),
        tmp_path / 'ann.json')
    (tmp_path / 'x.txt').write_text('a line\n', encoding='utf-8')
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir() if path.is_file()}
    with pytest.raises(SystemExit, match=refused + ': writing it would replace that; give '
                       'another path'):
        main(argv)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()
            if path.is_file()} == before


@pytest.mark.parametrize('main, argv, name', [
    (multi30k.main, ['--raw-dir', 'none', '--image-splits-dir', 'none'], 'multi30k_test_5captions'),
    (mscoco.main, ['--karpathy-json', 'none.json', '--coco-cn-dir', 'none'], 'cococn_val'),
    (mscoco.main, ['--karpathy-json', 'none.json'], 'coco_test1k_fold4'),
    (flickr30k.main, ['--karpathy-json', 'none.json'], 'flickr30k_val'),
    (laps.main, ['--laps-dir', 'none', '--dataset', 'coco'], 'coco_test1k_fold0'),
    (laps.main, ['--laps-dir', 'none', '--dataset', 'f30k'], 'flickr30k_train'),
    (msrvtt.main, ['--test-csv', 'none.csv', '--data-json', 'none.json', '--train-list',
                   '7k=none.csv', '9k=none.csv'], 'msrvtt_train9k'),
    (msrvtt.main, ['--test-csv', 'none.csv'], 'msrvtt_test1ka'),
    (xtd10.main, ['--xtd-dir', 'none', '--few-shot', '50'], 'xtd10_fewshot50_seed42_test'),
    (crossmodal3600.main, ['--captions', 'none.jsonl'], 'crossmodal3600_test'),
    (flores_captions.main_xtd200, ['--captions-dir', 'none', '--languages', 'sw'],
     'xtd200_test'),
    (flores_captions.main_flickr30k_200, ['--captions-dir', 'none', '--languages', 'sw'],
     'flickr30k_200_test'),
])
def test_an_out_dir_converter_replaces_its_own_earlier_output_alone(tmp_path, monkeypatch, main,
                                                                     argv, name):
    """Every --out-dir converter wrote over any file at <out-dir>/<name>.json (a test result
    here); it is refused (write_converted, refuse_other_files) before an input is read: none of
    them exists."""
    monkeypatch.chdir(tmp_path)
    result = tmp_path / 'out' / f'{name}.json'
    result.parent.mkdir()
    result.write_text('{"metrics": {"mAR": 50.0}}')
    with pytest.raises(SystemExit, match=re.escape(
            f'error: out/{name}.json (--out-dir): exists and is no ') + r'\S+ annotation a '
            r'converter wrote; it is kept \(a converter replaces its own earlier output alone\): '
            'move it away, or give --out-dir another folder$'):
        main([*argv, '--skip-media-check', '--out-dir', 'out'])
    assert result.read_text() == '{"metrics": {"mAR": 50.0}}'


class _Parsed(BaseException):
    """Stops a command at its parse: a BaseException, which the converters' error line lets
    through."""


@pytest.mark.parametrize('main, media, folder', [
    (msrvtt.main, 'videos', '<video_id>.<--video-ext>'),
    (mscoco.main, 'images', 'train2014/ and val2014/'),
    (flickr30k.main, 'images', 'flickr30k-images/'),
    (flores_captions.main_xtd200, 'images', '--flat-images the folder of the release tarball'),
    (flores_captions.main_flickr30k_200, 'images', 'flickr30k-images/'),
    (crossmodal3600.main, 'images', '<image key>.jpg'),
])
def test_the_converter_takes_the_shared_media_options_each_with_help(monkeypatch, main, media,
                                                                      folder):
    """These converters added --skip-media-check (and MSRVTT --video-ext) without help, and no
    --text-only: text pairs for a text-only teacher, as every other converter writes. The
    media folder's help keeps what the release's folder must hold."""
    parsers = []

    def first_parse(self, args=None, namespace=None):
        parsers.append(self)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, 'parse_args', first_parse)
    with pytest.raises(_Parsed):
        main([])
    helps = {(action.option_strings or [action.dest])[0]: action.help
             for action in parsers[0]._actions}
    assert [option for option, text in helps.items() if not text] == []
    assert {f'--{media}-dir', '--skip-media-check', '--text-only'} <= set(helps)
    assert folder in helps[f'--{media}-dir']
    assert helps[f'--{media}-dir'].endswith('(checked for every listed file)')


def test_dump_into_refuses_a_benchmark_split_of_another_size(tmp_path):
    """A converter given a truncated release learns it at conversion, not at the first run:
    the split, the size read and the size expected are named, nothing is written; the opt-out
    (--skip-benchmark-size-check) writes it."""
    import pytest as _pytest

    from xmr.datasets.annotation import Annotation as _Annotation
    from xmr.datasets.annotation import MediaRecord as _Record
    from xmr.datasets.converters.cli import dump_into as _dump_into
    from xmr.datasets.converters.errors import ConversionError as _ConversionError

    ann = _Annotation(dataset='xtd10', split='test', media_type='image', languages=['en'],
                      items=[_Record(media_id=str(i), media_path=f'{i}.jpg',
                                     captions={'en': [f'caption {i}']}) for i in range(3)])
    with _pytest.raises(_ConversionError, match=r"xtd10_test\.json: xtd10 split 'test' holds 3 "
                        r'media, but the benchmark is scored on 1000.*--skip-benchmark-size'):
        _dump_into(tmp_path, {'xtd10_test': ann})
    assert not (tmp_path / 'xtd10_test.json').exists()
    assert _dump_into(tmp_path, {'xtd10_test': ann}, check_benchmark_size=False) == [
        tmp_path / 'xtd10_test.json']
