import json
import re

import pytest

from xmr.datasets.annotation import (
    Annotation,
    AnnotationError,
    MediaRecord,
    dump_annotation,
    load_annotation,
)
from xmr.datasets.languages import (
    FLORES200_TO_CANONICAL,
    LanguageCodeError,
    flores_code,
    is_language_alias,
    normalize_language,
    normalize_languages,
    register_language,
    release_code,
)

XM3600_LANGUAGES = ('ar bn cs da de el en es fa fi fil fr he hi hr hu id it ja ko mi nl no pl pt '
                    'quz ro ru sv sw te th tr uk vi zh').split()


@pytest.mark.parametrize('code, canonical', [
    ('sw', 'sw'), ('swh_Latn', 'sw'), ('swh', 'sw'), ('swa', 'sw'), ('SW', 'sw'),
    ('jp', 'ja'), ('jpn_Jpan', 'ja'), ('zh-CN', 'zh'), ('zho_Hans', 'zh'), ('zh-TW', 'zh-Hant'),
    ('zho_Hant', 'zh-Hant'), ('zh-hant', 'zh-Hant'), ('kas_Deva', 'ks-Deva'), ('kas', 'ks'),
    ('pes_Arab', 'fa'), ('arz_Arab', 'arz'), ('tgl_Latn', 'tl'), ('fil', 'fil'),
    ('quy_Latn', 'quy'), ('quz', 'quz'), ('no', 'no'), ('nob_Latn', 'nb'), ('iw', 'he'),
    ('pt-br', 'pt-BR'), ('sr-latn', 'sr-Latn'), ('eng_Latn', 'en'),
    # POSIX locales' underscore, and a script subtag naming the usual script (FLORES's)
    ('zh_CN', 'zh'), ('zh_TW', 'zh-Hant'), ('pt_BR', 'pt-BR'), ('sr-Cyrl', 'sr'),
    ('de-Latn', 'de'), ('cmn', 'zh'),
    # a script and a region: the region counts where the script is the usual one
    ('zh-Hans-CN', 'zh'), ('zh-Hant-TW', 'zh-Hant'), ('pt-Latn-BR', 'pt-BR'),
    ('sr-Latn-RS', 'sr-Latn'),
    # ... unless the region stands for another script (zh-TW, zh-HK: traditional); CLDR's
    # zh_Hans_HK is simplified Chinese as written in Hong Kong
    ('zh-Hans-TW', 'zh'), ('zh_Hans_HK', 'zh'), ('zh-Hans-MO', 'zh'), ('cmn-Hans-TW', 'zh'),
])
def test_normalize_language(code, canonical):
    assert normalize_language(code) == canonical


@pytest.mark.parametrize('code, canonical', [
    # XM3600's Filipino and Cusco Quechua, which FLORES-200 lacks, in their usual script
    # (CLDR's likely subtags: fil-Latn-PH, qu-Latn-PE): the script is dropped, as tgl_Latn's.
    ('fil-Latn', 'fil'), ('fil_Latn', 'fil'), ('FIL-latn', 'fil'), ('quz-Latn', 'quz'),
    ('fil-Latn-PH', 'fil-PH'),  # the region counts, as in pt-Latn-BR
    # ISO 639-1 languages FLORES-200 lacks: Latin, Abkhaz (Cyrillic), Inuktitut (syllabics)
    ('la-Latn', 'la'), ('ab-Cyrl', 'ab'), ('iu-Cans', 'iu'), ('no-Latn', 'no'),
    # another script than the usual one stays
    ('fil-Tglg', 'fil-Tglg'), ('ab-Latn', 'ab-Latn'), ('iu-Latn', 'iu-Latn'),
])
def test_a_language_flores_lacks_drops_the_subtag_of_its_usual_script(code, canonical):
    assert normalize_language(code) == canonical


@pytest.mark.parametrize('code, canonical', [
    # ISO 639-3 codes of ISO 639-1 languages FLORES-200 lacks; a macrolanguage's code is its
    # ISO 639-1 language, the individual languages FLORES holds stay apart
    ('lat', 'la'), ('bre', 'br'), ('chv', 'cv'), ('que', 'qu'), ('aym', 'ay'), ('ayr', 'ayr'),
    ('ful', 'ff'), ('fuv', 'fuv'), ('kau', 'kr'), ('knc', 'knc'), ('iku', 'iu'),
    ('zha', 'za'), ('lat-Latn', 'la'), ('chv_Cyrl', 'cv'), ('iku-Latn', 'iu-Latn'),
])
def test_iso_639_3_codes_of_iso_639_1_languages(code, canonical):
    assert normalize_language(code) == canonical


def test_every_iso_639_1_language_but_a_group_has_an_iso_639_3_code():
    from xmr.datasets.languages import _ALIASES, ISO639_1

    three_letter = {canonical for code, canonical in _ALIASES.items() if len(code) == 3}
    assert sorted(ISO639_1 - three_letter) == ['bh']  # Bihari: languages, no ISO 639-3 code


def test_every_canonical_code_is_its_own_canonical_code():
    for canonical in [*FLORES200_TO_CANONICAL.values(), *XM3600_LANGUAGES]:
        assert normalize_language(canonical) == canonical


def test_flores_codes_map_to_distinct_languages_and_back():
    canonical = list(FLORES200_TO_CANONICAL.values())
    assert len(set(canonical)) == len(canonical) == 203  # XTD200's 201, arb_Latn, min_Arab
    for flores in FLORES200_TO_CANONICAL:
        assert flores_code(FLORES200_TO_CANONICAL[flores]) == flores


def test_unknown_code_names_the_place_and_the_accepted_forms():
    with pytest.raises(LanguageCodeError, match=r"config: unknown language code 'swahili'.*"
                       r"ISO 639-1 \('sw'\).*FLORES-200 \('swh_Latn'\)"):
        normalize_language('swahili', 'config')
    with pytest.raises(LanguageCodeError, match="closest: 'sw'"):
        normalize_language('swx_Latn')
    # 'de' and 'deu' are both close to 'de ': the language is suggested once.
    with pytest.raises(LanguageCodeError, match=r"unknown language code 'de '; closest: 'de', "
                       r"'nd'\. "):
        normalize_language('de ')


@pytest.mark.parametrize('code, country, language', [
    ('cz', 'Czechia', 'cs'), ('CN', 'China', 'zh'), ('gr', 'Greece', 'el'),
    ('dk', 'Denmark', 'da'), ('ua', 'Ukraine', 'uk'), ('vn', 'Viet Nam', 'vi')])
def test_a_country_code_given_for_its_language_is_named_with_the_language_s_code(
        code, country, language):
    """Multi30K's Czech is 'cs'; 'cz' (Czechia's country code, in ISO 3166-1) is no language
    code and not close enough to 'cs' for the closest-code hint, which named nothing."""
    with pytest.raises(LanguageCodeError, match=rf"multi30k.json: languages: unknown language "
                       rf"code '{code}'; '{code}' is the country code of {country}, whose "
                       rf"language's code is '{language}'\. Accepted forms"):
        normalize_language(code, 'multi30k.json: languages')


def test_a_region_may_be_a_un_m49_area_code():
    """BCP 47 regions are two letters or three digits: 'es-419' is Latin American Spanish."""
    assert [normalize_language(code) for code in ('es-419', 'es_419', 'pt-BR')] == [
        'es-419', 'es-419', 'pt-BR']


@pytest.mark.parametrize('code', ['pt-BR-Latn', 'zh-CN-TW', 'en-US-419'])
def test_a_three_part_code_is_read_only_as_language_script_region(code):
    """The middle part of three is the script (zh-Hans-CN): a region there is no code xmr
    reads, not the region with the last part dropped."""
    with pytest.raises(LanguageCodeError, match=f'unknown language code {code!r}'):
        normalize_language(code)


def test_the_closest_codes_are_suggested_whatever_the_case_given():
    with pytest.raises(LanguageCodeError, match=r"unknown language code 'SWX_LATN'; closest: "
                       r"'sw'"):
        normalize_language('SWX_LATN')


@pytest.mark.parametrize('code', [5, None, ['de']])
def test_a_code_that_is_no_string_is_named_with_where_it_was_found(code):
    with pytest.raises(LanguageCodeError, match=rf'ann\.json: languages: a language code must '
                       rf'be a string, got {re.escape(repr(code))}'):
        normalize_language(code, 'ann.json: languages')


def test_the_country_codes_named_are_no_language_codes_and_name_canonical_languages():
    from xmr.datasets.languages import _COUNTRY_CODES

    for code, (_, language) in _COUNTRY_CODES.items():
        with pytest.raises(LanguageCodeError, match='is the country code of'):
            normalize_language(code)
        assert normalize_language(language) == language


def test_country_codes_that_are_language_codes_stay_those_languages():
    # Kanuri's 'kr' (South Korea's country code), Northern Sami's 'se' (Sweden's): ISO 639-1.
    assert [normalize_language(code) for code in ('kr', 'se', 'ch', 'br')] == [
        'kr', 'se', 'ch', 'br']


@pytest.fixture
def own_languages(monkeypatch):
    """The registry of codes as it is, restored after the test."""
    import xmr.datasets.languages as languages

    monkeypatch.setattr(languages, '_ALIASES', dict(languages._ALIASES))


def test_a_language_outside_the_tables_is_known_once_registered(own_languages):
    with pytest.raises(LanguageCodeError, match=r"unknown language code 'haw'.*make another "
                       r'known with xmr\.datasets\.languages\.register_language'):
        normalize_language('haw')
    assert register_language('haw', ['haw_Latn', 'Hawaiian']) == 'haw'
    assert [normalize_language(c) for c in ('haw', 'HAW_Latn', 'hawaiian', 'haw-US')] == [
        'haw', 'haw', 'haw', 'haw-US']
    assert normalize_languages(['de', 'haw']) == ['de', 'haw']
    with pytest.raises(LanguageCodeError, match="'haw' and 'hawaiian' are both the language"):
        normalize_languages(['haw', 'hawaiian'])
    # Santali, which NLLB writes in Bengali script and XM3600-style data in Ol Chiki.
    assert register_language('sat-Olck', ['sat_Olck']) == 'sat-Olck'
    assert normalize_language('SAT_OLCK') == 'sat-Olck'
    # Again with the same aliases (a module imported twice): nothing changes.
    assert register_language('haw', ['haw_Latn']) == 'haw'
    # '-' and '_' alike, as in the built-in codes: one language, not two.
    assert normalize_language('haw-Latn') == 'haw'
    with pytest.raises(LanguageCodeError, match="'haw_Latn' and 'haw-Latn' are both the language"):
        normalize_languages(['haw_Latn', 'haw-Latn'])


@pytest.mark.parametrize('code, aliases, message', [
    ('deu', (), r"register_language\('deu'\): 'deu' already names the language 'de'"),
    ('lat', (), r"register_language\('lat'\): 'lat' already names the language 'la'"),
    ('haw', ['deu'], r"register_language\('haw'\): 'deu' already names the language 'de'"),
    ('Haw', (), r"'Haw' is no canonical code; give the ISO 639-3 code \('haw'\)"),
    ('sat_Olck', (), r"'sat_Olck' is no canonical code"),
    ('sat-OLCK', (), r"'sat-OLCK' is no canonical code"),
    ('haw', 'haw_Latn', r"aliases must be a list of codes, got the string 'haw_Latn'"),
    # an alias in another case than the one registered ('swh') is the same code
    ('haw', ['SWH'], r"register_language\('haw'\): 'SWH' already names the language 'sw'"),
    # read through their subtags, each names a language: Serbian, Kashmiri, Tanzania's Swahili
    ('sr-Cyrl', (), r"'sr-Cyrl' already names the language 'sr'"),
    ('ks-Arab', (), r"'ks-Arab' already names the language 'ks'"),
    ('haw', ['sw-TZ'], r"'sw-TZ' already names the language 'sw-TZ'"),
])
def test_registering_a_known_or_malformed_code_is_refused(own_languages, code, aliases,
                                                           message):
    with pytest.raises(LanguageCodeError, match=message):
        register_language(code, aliases)
    with pytest.raises(LanguageCodeError):
        normalize_language('haw')


def test_two_codes_of_one_language_are_refused():
    assert normalize_languages(['jp', 'de']) == ['ja', 'de']
    with pytest.raises(LanguageCodeError, match="'ja' and 'jp' are both the language 'ja'"):
        normalize_languages(['ja', 'jp'])


def test_one_code_given_as_a_string_is_told_to_be_a_list():
    """``--cfg-options model.language_branch.languages=de`` gives the string 'de', which was
    read letter by letter (unknown language code 'd')."""
    with pytest.raises(LanguageCodeError, match=(
            r"^TargetLanguageBranch languages='de' is one string: give a list of codes, "
            r"\['de'\] \(--cfg-options KEY=\[de\]\)$")):
        normalize_languages('de', 'TargetLanguageBranch languages')


def test_release_codes_and_aliases():
    assert release_code('xtd10', 'ja') == 'jp'
    assert release_code('xtd200', 'sw') == 'swh_Latn'
    assert release_code('flickr30k_200', 'zh-Hant') == 'zho_Hant'
    assert release_code('crossmodal3600', 'sw') == 'sw'
    with pytest.raises(LanguageCodeError, match="'quz'.*not a FLORES-200 language"):
        flores_code('quz')
    assert is_language_alias('jp') and is_language_alias('swh_Latn')
    assert not is_language_alias('AR') and not is_language_alias('ja')


def test_annotation_files_are_read_with_canonical_codes(tmp_path):
    path = tmp_path / 'xtd.json'
    path.write_text(json.dumps({
        'format': 'xmr-media-captions', 'version': 1, 'dataset': 'd', 'split': 'test',
        'media_type': 'image', 'languages': ['en', 'jp'], 'source_lang': 'en',
        'translation_langs': ['swh_Latn'],
        'items': [{'media_id': 'a', 'media_path': 'a.jpg',
                   'captions': {'en': ['a cat'], 'jp': ['猫']},
                   'translations': {'swh_Latn': ['paka']}}]}), encoding='utf-8')
    ann = load_annotation(path)
    assert ann.languages == ['en', 'ja'] and ann.translation_langs == ['sw']
    assert ann.items[0].captions == {'en': ['a cat'], 'ja': ['猫']}
    assert ann.items[0].translations == {'sw': ['paka']}



def test_the_source_language_and_back_translations_of_a_file_are_read_with_canonical_codes(
        tmp_path):
    path = tmp_path / 'xtd.json'
    path.write_text(json.dumps({
        'format': 'xmr-media-captions', 'version': 1, 'dataset': 'd', 'split': 'test',
        'media_type': 'image', 'languages': ['ces', 'jp'], 'source_lang': 'ces',
        'translation_langs': ['en'], 'back_translation_langs': ['jp'],
        'items': [{'media_id': 'a', 'media_path': 'a.jpg',
                   'captions': {'ces': ['kočka'], 'jp': ['猫']},
                   'translations': {'en': ['a cat']},
                   'back_translations': {'jp': ['ネコ']}}]}), encoding='utf-8')
    ann = load_annotation(path)
    assert ann.source_lang == 'cs' and ann.back_translation_langs == ['ja']
    assert ann.items[0].back_translations == {'ja': ['ネコ']}

def test_annotations_are_written_with_canonical_codes_only(tmp_path):
    ann = Annotation('d', 'test', 'image', ['jp'], [MediaRecord('a', 'a.jpg', {'jp': ['猫']})])
    with pytest.raises(AnnotationError, match="languages holds 'jp'; write its canonical code "
                       "'ja'"):
        dump_annotation(ann, tmp_path / 'out.json')
    assert not (tmp_path / 'out.json').exists()
