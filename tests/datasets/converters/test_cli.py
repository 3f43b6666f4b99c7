"""What the converters' command lines share: no output written over an input or another output."""
from __future__ import annotations

import pytest

from xmr.datasets.annotation import Annotation, MediaRecord, dump_annotation
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
