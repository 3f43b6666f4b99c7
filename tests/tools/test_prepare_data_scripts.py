"""The tools/data scripts run end to end on the real fixtures and stop cleanly on bad input."""
from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from xmr.datasets import Annotation, MediaRecord, dump_annotation, load_annotation

TOOLS = Path(__file__).resolve().parents[2] / 'tools' / 'data'


def _run(script: str, args: list[str], monkeypatch) -> None:
    monkeypatch.setattr(sys, 'argv', [str(TOOLS / script), *args])
    runpy.run_path(str(TOOLS / script), run_name='__main__')


def test_every_converter_has_a_script():
    names = {path.stem for path in TOOLS.glob('*.py')}
    assert {f'prepare_{name}' for name in ('multi30k', 'mscoco', 'flickr30k', 'xtd10', 'cc3m',
                                           'msrvtt', 'crossmodal3600', 'xtd200',
                                           'flickr30k_200', 'laps')} <= names
    assert {'attach_translations', 'export_source_captions'} <= names


def test_xtd10_script_writes_test_and_few_shot_files(shared_data, tmp_path, monkeypatch):
    xtd = shared_data / 'xtd10'
    if not (xtd / 'test_1kcaptions_en.txt').is_file():
        pytest.skip(f'XTD10 fixtures not found under {xtd}')
    names = xtd / 'test_image_names.txt'
    if not names.is_file():
        names = tmp_path / 'names.txt'
        names.write_text(''.join(f'COCO_val2014_{i:012d}.jpg\n' for i in range(1000)))
    _run('prepare_xtd10.py', ['--xtd-dir', str(xtd), '--image-names', str(names),
                              '--skip-media-check', '--few-shot', '50',
                              '--out-dir', str(tmp_path / 'out')], monkeypatch)
    written = sorted(path.name for path in (tmp_path / 'out').iterdir())
    assert written == ['xtd10_fewshot50_seed42_test.json', 'xtd10_fewshot50_seed42_train.json',
                       'xtd10_fewshot50_seed42_val.json', 'xtd10_test.json']
    test_part = tmp_path / 'out' / 'xtd10_fewshot50_seed42_test.json'
    assert len(load_annotation(test_part).items) == 900


def test_multi30k_script_translations_and_a_bad_file(shared_data, tmp_path, monkeypatch,
                                                     capsys):
    root = shared_data / 'multi30k'
    if not (root / 'raw').is_dir():
        pytest.skip(f'Multi30K fixtures not found under {root}')
    out = tmp_path / 'out'
    _run('prepare_multi30k.py', ['--raw-dir', str(root / 'raw'), '--image-splits-dir',
                                 str(root / 'image_splits'), '--skip-media-check',
                                 '--splits', 'val', '--out-dir', str(out)], monkeypatch)
    _run('export_source_captions.py', [str(out / 'multi30k_val.json'), str(tmp_path / 'en.txt')],
         monkeypatch)
    english = (tmp_path / 'en.txt').read_text(encoding='utf-8').splitlines()
    assert len(english) == 1014
    (tmp_path / 'mt.de.txt').write_text('\n'.join(f'<de> {line}' for line in english),
                                        encoding='utf-8')
    _run('attach_translations.py', [str(out / 'multi30k_val.json'), '--translations',
                                    f'de={tmp_path / "mt.de.txt"}'], monkeypatch)
    ann = load_annotation(out / 'multi30k_val.json')
    assert ann.items[7].translations['de'] == [f'<de> {ann.items[7].captions["en"][0]}']
    (tmp_path / 'short.txt').write_text('\n'.join(english[:-1]), encoding='utf-8')
    before = (out / 'multi30k_val.json').read_bytes()
    with pytest.raises(SystemExit, match='2'):
        _run('attach_translations.py', [str(out / 'multi30k_val.json'), '--translations',
                                        f'fr={tmp_path / "short.txt"}'], monkeypatch)
    assert re.search(r'^error: .*short\.txt has 1013 lines but multi30k/val has 1014',
                     capsys.readouterr().err)
    assert (out / 'multi30k_val.json').read_bytes() == before


def test_flickr30k_script_reaches_the_converter(tmp_path, monkeypatch, capsys):
    entries = [{'filename': f'{n}.jpg', 'imgid': n, 'split': split, 'sentids': [n],
                'sentences': [{'raw': f'caption {n}', 'sentid': n, 'imgid': n}]}
               for n, split in enumerate(('train', 'val', 'test'))]
    (tmp_path / 'dataset_flickr30k.json').write_text(json.dumps({'images': entries}))
    with pytest.raises(SystemExit, match='2'):
        _run('prepare_flickr30k.py', ['--karpathy-json', str(tmp_path / 'dataset_flickr30k.json'),
                                      '--skip-media-check', '--out-dir', str(tmp_path / 'out')],
             monkeypatch)
    assert "has 1 train images; Karpathy's Flickr30K splits need 29000" in capsys.readouterr().err
    assert not (tmp_path / 'out').exists()


def test_an_output_path_that_cannot_be_made_is_one_error_line(tmp_path, monkeypatch, capsys):
    ann = Annotation(dataset='demo', split='train', media_type='image', languages=['en'],
                     source_lang='en', items=[MediaRecord('a', 'a.jpg', {'en': ['a dog']})])
    dump_annotation(ann, tmp_path / 'ann.json')
    (tmp_path / 'taken').write_text('a file where the output folder should go')
    with pytest.raises(SystemExit, match='2'):
        _run('export_source_captions.py', [str(tmp_path / 'ann.json'),
                                           str(tmp_path / 'taken' / 'en.txt')], monkeypatch)
    err = capsys.readouterr().err
    assert err.startswith(f'error: {tmp_path / "taken"}') and 'Traceback' not in err, err


@pytest.mark.parametrize('script', sorted(path.name for path in TOOLS.glob('*.py')))
def test_every_data_tool_takes_the_modules_that_register_a_language(script, monkeypatch,
                                                                    capsys):
    """The data tools read no config, whose custom_imports would register the user's languages."""
    with pytest.raises(SystemExit, match='0'):
        _run(script, ['--help'], monkeypatch)
    assert '--custom-imports MODULE [MODULE ...]' in capsys.readouterr().out


def test_a_language_registered_by_custom_imports_is_one_the_data_tools_read(tmp_path,
                                                                           monkeypatch, capsys):
    """'ain' (Ainu) is in neither ISO 639-1 nor FLORES-200. The tool runs in a process of its
    own: the registration would outlive the test in this one."""
    (tmp_path / 'my_langs.py').write_text('from xmr.datasets.languages import register_language'
                                          "\nregister_language('ain', ['ain_Latn'])\n")
    ann = Annotation(dataset='demo', split='train', media_type='image', languages=['en'],
                     source_lang='en', items=[MediaRecord('a', 'a.jpg', {'en': ['a dog']})])
    dump_annotation(ann, tmp_path / 'ann.json')
    (tmp_path / 'ain.txt').write_text('seta\n', encoding='utf-8')
    command = [sys.executable, '-m', 'xmr', 'data', 'attach_translations',
               str(tmp_path / 'ann.json'), '--translations', f"ain_Latn={tmp_path / 'ain.txt'}",
               '--out', str(tmp_path / 'out.json')]
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(tmp_path), *sys.path])}
    refused = subprocess.run(command, env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and "unknown language code 'ain_Latn'" in refused.stderr
    assert "a data tool's --custom-imports" in refused.stderr
    subprocess.run([*command, '--custom-imports', 'my_langs'], env=env, check=True,
                   capture_output=True)
    written = json.loads((tmp_path / 'out.json').read_text(encoding='utf-8'))
    assert written['items'][0]['translations'] == {'ain': ['seta']}  # unknown in this process
    with pytest.raises(SystemExit, match='2'):
        _run('export_source_captions.py', [str(tmp_path / 'ann.json'), str(tmp_path / 'en.txt'),
                                           '--custom-imports', 'my_absent_langs'], monkeypatch)
    assert capsys.readouterr().err == (
        "error: --custom-imports: my_absent_langs failed to import: ModuleNotFoundError: No "
        "module named 'my_absent_langs': check its name, and that the folder holding it is on "
        'PYTHONPATH\n')
    assert not (tmp_path / 'en.txt').exists()
    with pytest.raises(SystemExit, match='2'):
        _run('export_source_captions.py', ['--custom-imports', 'json', str(tmp_path / 'ann.json'),
                                           str(tmp_path / 'en.txt')], monkeypatch)
    assert capsys.readouterr().err == (
        f"error: --custom-imports: {tmp_path / 'ann.json'} is a file, not a module: give the flag "
        'after the other arguments\n')
