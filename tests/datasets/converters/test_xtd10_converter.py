"""XTD10 conversion on the real caption files of ../shared/data/xtd10."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.datasets.converters.reruns import assert_a_rerun_keeps
from xmr.datasets.annotation import load_annotation
from xmr.datasets.converters.back_translations import main_attach_back
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.translations import main_attach
from xmr.datasets.converters.xtd10 import XTD10_LANGUAGES, convert_xtd10, main
from xmr.datasets.few_shot import few_shot_splits

RELEASE_CODES = ['en', 'de', 'fr', 'es', 'it', 'jp', 'ko', 'pl', 'ru', 'tr', 'zh']


@pytest.fixture
def xtd(shared_data, tmp_path) -> tuple[Path, Path]:
    """``(caption folder, image list)``; the list is generated when the fixtures lack it."""
    root = shared_data / 'xtd10'
    if not (root / 'test_1kcaptions_en.txt').is_file():
        pytest.skip(f'XTD10 fixtures not found under {root}')
    names = root / 'test_image_names.txt'
    if not names.is_file():
        names = tmp_path / 'test_image_names.txt'
        names.write_text(''.join(f'COCO_{"train" if i < 800 else "val"}2014_{i:012d}.jpg\n'
                                 for i in range(1000)))
    return root, names


def _raw_lines(path: Path) -> list[bytes]:
    """Independent reference: the lines' bytes, whatever the line ends."""
    return [line.removesuffix(b'\r') for line in path.read_bytes().splitlines(keepends=False)]


def _coco_placeholders(root: Path, names: list[str]) -> None:
    for name in names:
        folder = root / name.split('_')[1]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).touch()


def test_thousand_images_in_eleven_languages(xtd, tmp_path):
    root, names_file = xtd
    names = names_file.read_text().split()
    _coco_placeholders(tmp_path, names)
    ann = convert_xtd10(root, tmp_path, image_names=names_file)
    assert ann.languages == list(XTD10_LANGUAGES) and len(ann.languages) == 11
    assert len(ann.items) == 1000
    assert all(len(r.captions[lang]) == 1 for r in ann.items for lang in ann.languages)
    first = ann.items[0]
    assert first.media_path == f'{names[0].split("_")[1]}/{names[0]}'
    for lang, code in zip(XTD10_LANGUAGES, RELEASE_CODES):
        raw = _raw_lines(root / f'test_1kcaptions_{code}.txt')
        assert len(raw) == 1000, code
        assert [r.captions[lang][0].encode() for r in ann.items] == raw, code


def test_japanese_and_chinese_survive_the_round_trip(xtd, tmp_path):
    root, names_file = xtd
    main(['--xtd-dir', str(root), '--image-names', str(names_file), '--skip-media-check',
          '--out-dir', str(tmp_path)])
    loaded = load_annotation(tmp_path / 'xtd10_test.json')
    # zh lacks a final newline: its last caption is complete, with no stray byte.
    for lang, code, line in (('ja', 'jp', 1), ('zh', 'zh', 999), ('zh', 'zh', 0)):
        raw = _raw_lines(root / f'test_1kcaptions_{code}.txt')[line]
        assert loaded.items[line].captions[lang][0].encode('utf-8') == raw
    assert not any('\r' in r.captions[lang][0] for r in loaded.items for lang in loaded.languages)



def test_a_failed_write_leaves_no_output_of_the_run(xtd, tmp_path):
    """A folder where the few-shot val file goes: the test and train files are not written
    (refused before the release is read, by refuse_other_files; dump_annotations writes all or
    none too)."""
    root, names_file = xtd
    (tmp_path / 'xtd10_fewshot50_seed42_val.json').mkdir()
    with pytest.raises(SystemExit,
                       match='xtd10_fewshot50_seed42_val.json \\(--out-dir\\): is a folder'):
        main(['--xtd-dir', str(root), '--image-names', str(names_file), '--skip-media-check',
              '--out-dir', str(tmp_path), '--few-shot', '50'])
    assert [p.name for p in tmp_path.iterdir()] == ['xtd10_fewshot50_seed42_val.json']

def test_few_shot_split_follows_the_seeded_permutation(xtd, tmp_path):
    root, names_file = xtd
    ann = convert_xtd10(root, image_names=names_file)
    parts = few_shot_splits(ann, 50, seed=42)
    order = torch.randperm(1000, generator=torch.Generator().manual_seed(42)).tolist()
    assert [r.media_id for r in parts['train'].items] == [ann.items[i].media_id
                                                          for i in order[:50]]
    # The command line's split, without --seed: the authors' 42.
    main(['--xtd-dir', str(root), '--image-names', str(names_file), '--skip-media-check',
          '--out-dir', str(tmp_path), '--few-shot', '50'])
    assert [r.media_id for r in load_annotation(
        tmp_path / 'xtd10_fewshot50_seed42_train.json').items] == [
            r.media_id for r in parts['train'].items]
    assert [len(parts[p].items) for p in ('train', 'val', 'test')] == [50, 50, 900]
    ids = [{r.media_id for r in parts[p].items} for p in ('train', 'val', 'test')]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert parts['test'].split == 'fewshot50_seed42_test'


def test_missing_image_fails_with_its_path(xtd, tmp_path):
    root, names_file = xtd
    names = names_file.read_text().split()
    _coco_placeholders(tmp_path, names[:7] + names[8:])
    missing = tmp_path / names[7].split('_')[1] / names[7]
    with pytest.raises(ConversionError, match=f'image file not found: {missing}$'):
        convert_xtd10(root, tmp_path, image_names=names_file)



def test_an_image_listed_twice_is_named_with_both_lines(xtd, tmp_path):
    root, names_file = xtd
    names = names_file.read_text().split()
    twice = tmp_path / 'names.txt'
    twice.write_text('\n'.join(names[:2] + names[:1] + names[3:]) + '\n')
    with pytest.raises(ConversionError, match=rf'image list {twice} names {names[0]} twice, on '
                                              r'lines 1 and 3$'):
        convert_xtd10(root, image_names=twice)

def test_short_caption_file_and_bad_names_are_named(xtd, tmp_path):
    root, names_file = xtd
    names = names_file.read_text().split()
    short = tmp_path / 'names.txt'
    short.write_text('\n'.join(names[:-1]))
    with pytest.raises(ConversionError, match=r'test_1kcaptions_en\.txt has 1000 lines but image '
                                              r'list .*names\.txt has 999'):
        convert_xtd10(root, image_names=short)
    short.write_text('\n'.join(['photo.jpg'] + names[1:]))
    with pytest.raises(ConversionError, match=r"names\.txt line 1: 'photo\.jpg' is not a COCO"):
        convert_xtd10(root, image_names=short)


def _release_layout(flat: Path, names_file: Path, repo: Path) -> None:
    """The files as the release's repository holds them: XTD10's own languages and the image
    list in XTD10/, MIC's de and fr in MIC/, STAIR's jp in STAIR/."""
    folders = {'de': 'MIC', 'fr': 'MIC', 'jp': 'STAIR'}
    for code in RELEASE_CODES:
        folder = repo / folders.get(code, 'XTD10')
        folder.mkdir(parents=True, exist_ok=True)
        name = f'test_1kcaptions_{code}.txt'
        (folder / name).write_bytes((flat / name).read_bytes())
    (repo / 'XTD10' / 'test_image_names.txt').write_bytes(names_file.read_bytes())


def test_the_release_folders_convert_from_its_xtd10_folder_or_its_root(xtd, tmp_path):
    flat, names_file = xtd
    repo = tmp_path / 'Cross-lingual-Test-Dataset-XTD10'
    _release_layout(flat, names_file, repo)
    expected = convert_xtd10(flat, image_names=names_file)
    for xtd_dir in (repo / 'XTD10', repo):  # the documented --xtd-dir, and the repository
        ann = convert_xtd10(xtd_dir)
        assert ann.languages == list(XTD10_LANGUAGES)
        assert [r.captions for r in ann.items] == [r.captions for r in expected.items]
    (repo / 'STAIR' / 'test_1kcaptions_jp.txt').unlink()
    with pytest.raises(ConversionError, match=r"ja caption file test_1kcaptions_jp\.txt not "
                       r"found in .*XTD10, nor in the release's XTD10/, MIC/ or STAIR/ folders "
                       r"beside or inside it$"):
        convert_xtd10(repo / 'XTD10')


def test_a_language_file_copied_under_another_name_is_not_attached(xtd, tmp_path):
    """PECTVLM ships XTD10's Korean translations as a byte-for-byte copy of its Italian ones
    (``translated_from_en/ko.txt`` = ``it.txt``); on the real Italian captions, given under
    both names, the second is refused naming both files and the annotation is kept."""
    root, names_file = xtd
    main(['--xtd-dir', str(root), '--image-names', str(names_file), '--skip-media-check',
          '--out-dir', str(tmp_path), '--languages', 'en', 'it', 'ko'])
    ann_path = tmp_path / 'xtd10_test.json'
    before = ann_path.read_bytes()
    italian = root / 'test_1kcaptions_it.txt'
    korean = tmp_path / 'ko.txt'
    korean.write_bytes(italian.read_bytes())
    with pytest.raises(SystemExit, match=rf'ko translation file {re.escape(str(korean))} repeats '
                                         rf'the it translation file {re.escape(str(italian))}'):
        main_attach([str(ann_path), '--translations', f'it={italian}', f'ko={korean}'])
    assert ann_path.read_bytes() == before
    with pytest.raises(SystemExit, match='ko back-translation file .* repeats the ko captions'):
        main_attach_back([str(ann_path), '--back-translations',
                          f'ko={root / "test_1kcaptions_ko.txt"}'])


def test_release_code_jp_is_read_as_ja_whichever_code_is_asked_for(tmp_path):
    from xmr.datasets.converters.xtd10 import convert_xtd10

    (tmp_path / 'test_image_names.txt').write_text('COCO_val2014_000000000042.jpg\n')
    (tmp_path / 'test_1kcaptions_en.txt').write_text('a cat\n')
    (tmp_path / 'test_1kcaptions_jp.txt').write_text('猫\n', encoding='utf-8')
    for asked in (['en', 'ja'], ['en', 'jp'], ['eng_Latn', 'jpn_Jpan']):
        ann = convert_xtd10(tmp_path, languages=asked)
        assert ann.languages == ['en', 'ja'] and ann.items[0].captions['ja'] == ['猫']


def test_without_english_the_annotation_names_no_source_language(xtd):
    root, names_file = xtd
    ann = convert_xtd10(root, languages=['de', 'ja'], image_names=names_file)
    assert ann.languages == ['de', 'ja'] and ann.source_lang is None
    ann.validate()
    assert convert_xtd10(root, languages=['de', 'en'], image_names=names_file).source_lang == 'en'


def test_converting_again_keeps_a_file_that_back_translations_were_attached_to(xtd, tmp_path):
    """prepare_xtd10.py writes through the converters' dump_converted: back-translations
    attached in place since the first run are not replaced by a second."""
    root, names_file = xtd
    convert = ['--xtd-dir', str(root), '--image-names', str(names_file), '--skip-media-check',
               '--out-dir', str(tmp_path), '--languages', 'en', 'de']
    main(convert)
    ann = tmp_path / 'xtd10_test.json'
    (tmp_path / 'de2en.txt').write_text(''.join(f'a photo {i}\n' for i in range(1000)))
    main_attach_back([str(ann), '--back-translations', f'de={tmp_path / "de2en.txt"}'])
    assert_a_rerun_keeps(ann, lambda: main(convert), 'back_translation_langs', ['de'])
