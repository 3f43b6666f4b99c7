"""One language code for every language, whichever code a dataset, a model or a user gives.

xmr keys captions, modules, metrics and leaderboard columns by a **canonical code**: the ISO 639-1
code where the language has one (``sw``, ``ja``), else its ISO 639-3 code (``fil``, ``quz``,
``ace``), followed by ``-<Script>`` when the text is in another script than the language's usual
one (``zh-Hant``, ``ks-Deva``) or by ``-<REGION>`` for a regional variety (``pt-BR``).
:func:`normalize_language` maps the other forms onto it:

* FLORES-200 codes of NLLB, XTD200 and Flickr30k-200: ``swh_Latn`` -> ``sw``, ``zho_Hant`` ->
  ``zh-Hant``, ``kas_Deva`` -> ``ks-Deva``. The ISO 639-3 part alone works too (``swh``).
  A FLORES code of the standard variety of an ISO 639-1 macrolanguage maps to that code
  (``swh`` Swahili, ``zsm`` Malay, ``pes`` Persian, ``arb`` Arabic, ...); dialects and
  neighbours with their own ISO 639-3 code keep it (``arz`` Egyptian Arabic, ``prs`` Dari,
  ``yue`` Cantonese).
* Datasets' own codes: XTD10's ``jp``; ``zh-CN`` and ``zh-TW``; the withdrawn ISO codes ``iw``,
  ``in``, ``ji``.

A script subtag naming the language's usual script is dropped (``sr-Cyrl`` -> ``sr``,
``fil-Latn`` -> ``fil``): FLORES-200's script, or, for a language FLORES-200 lacks, CLDR's
likely one.

Varieties that are different ISO languages stay apart even where a tool pairs them: Crossmodal-
3600's ``fil`` (Filipino) is not FLORES' ``tgl_Latn`` (Tagalog), nor its ``quz`` (Cusco Quechua)
``quy_Latn`` (Ayacucho Quechua), nor its ``no`` (Norwegian) ``nob_Latn`` (``nb``) or ``nno_Latn``
(``nn``). :func:`release_code` goes back from a canonical code to the code a benchmark release
(and CLIP_benchmark) uses for it. A language none of these tables holds (Hawaiian ``haw``,
Santali in Ol Chiki) is made known by :func:`register_language`.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

__all__ = ['LanguageCodeError', 'FLORES200_TO_CANONICAL', 'ISO639_1', 'normalize_language',
           'normalize_languages', 'register_language', 'is_language_alias', 'flores_code',
           'release_code']

ISO639_1 = frozenset(
    'aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv '
    'cy da de dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr '
    'ht hu hy hz ia id ie ig ii ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw '
    'ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn no nr nv '
    'ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr '
    'ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi '
    'yo za zh zu'.split())

# The FLORES-200 languages of NLLB (XTD200 and Flickr30k-200 name their files by these codes).
FLORES200_TO_CANONICAL: dict[str, str] = {
    'ace_Arab': 'ace-Arab', 'ace_Latn': 'ace', 'acm_Arab': 'acm', 'acq_Arab': 'acq',
    'aeb_Arab': 'aeb', 'afr_Latn': 'af', 'ajp_Arab': 'ajp', 'aka_Latn': 'ak', 'amh_Ethi': 'am',
    'apc_Arab': 'apc', 'arb_Arab': 'ar', 'arb_Latn': 'ar-Latn', 'ars_Arab': 'ars',
    'ary_Arab': 'ary', 'arz_Arab': 'arz', 'asm_Beng': 'as', 'ast_Latn': 'ast', 'awa_Deva': 'awa',
    'ayr_Latn': 'ayr', 'azb_Arab': 'azb', 'azj_Latn': 'az', 'bak_Cyrl': 'ba', 'bam_Latn': 'bm',
    'ban_Latn': 'ban', 'bel_Cyrl': 'be', 'bem_Latn': 'bem', 'ben_Beng': 'bn', 'bho_Deva': 'bho',
    'bjn_Arab': 'bjn-Arab', 'bjn_Latn': 'bjn', 'bod_Tibt': 'bo', 'bos_Latn': 'bs',
    'bug_Latn': 'bug', 'bul_Cyrl': 'bg', 'cat_Latn': 'ca', 'ceb_Latn': 'ceb', 'ces_Latn': 'cs',
    'cjk_Latn': 'cjk', 'ckb_Arab': 'ckb', 'crh_Latn': 'crh', 'cym_Latn': 'cy', 'dan_Latn': 'da',
    'deu_Latn': 'de', 'dik_Latn': 'dik', 'dyu_Latn': 'dyu', 'dzo_Tibt': 'dz', 'ell_Grek': 'el',
    'eng_Latn': 'en', 'epo_Latn': 'eo', 'est_Latn': 'et', 'eus_Latn': 'eu', 'ewe_Latn': 'ee',
    'fao_Latn': 'fo', 'fij_Latn': 'fj', 'fin_Latn': 'fi', 'fon_Latn': 'fon', 'fra_Latn': 'fr',
    'fur_Latn': 'fur', 'fuv_Latn': 'fuv', 'gaz_Latn': 'om', 'gla_Latn': 'gd', 'gle_Latn': 'ga',
    'glg_Latn': 'gl', 'grn_Latn': 'gn', 'guj_Gujr': 'gu', 'hat_Latn': 'ht', 'hau_Latn': 'ha',
    'heb_Hebr': 'he', 'hin_Deva': 'hi', 'hne_Deva': 'hne', 'hrv_Latn': 'hr', 'hun_Latn': 'hu',
    'hye_Armn': 'hy', 'ibo_Latn': 'ig', 'ilo_Latn': 'ilo', 'ind_Latn': 'id', 'isl_Latn': 'is',
    'ita_Latn': 'it', 'jav_Latn': 'jv', 'jpn_Jpan': 'ja', 'kab_Latn': 'kab', 'kac_Latn': 'kac',
    'kam_Latn': 'kam', 'kan_Knda': 'kn', 'kas_Arab': 'ks', 'kas_Deva': 'ks-Deva',
    'kat_Geor': 'ka', 'kaz_Cyrl': 'kk', 'kbp_Latn': 'kbp', 'kea_Latn': 'kea', 'khk_Cyrl': 'mn',
    'khm_Khmr': 'km', 'kik_Latn': 'ki', 'kin_Latn': 'rw', 'kir_Cyrl': 'ky', 'kmb_Latn': 'kmb',
    'kmr_Latn': 'ku', 'knc_Arab': 'knc-Arab', 'knc_Latn': 'knc', 'kon_Latn': 'kg',
    'kor_Hang': 'ko', 'lao_Laoo': 'lo', 'lij_Latn': 'lij', 'lim_Latn': 'li', 'lin_Latn': 'ln',
    'lit_Latn': 'lt', 'lmo_Latn': 'lmo', 'ltg_Latn': 'ltg', 'ltz_Latn': 'lb', 'lua_Latn': 'lua',
    'lug_Latn': 'lg', 'luo_Latn': 'luo', 'lus_Latn': 'lus', 'lvs_Latn': 'lv', 'mag_Deva': 'mag',
    'mai_Deva': 'mai', 'mal_Mlym': 'ml', 'mar_Deva': 'mr', 'min_Arab': 'min-Arab',
    'min_Latn': 'min', 'mkd_Cyrl': 'mk', 'mlt_Latn': 'mt', 'mni_Beng': 'mni', 'mos_Latn': 'mos',
    'mri_Latn': 'mi', 'mya_Mymr': 'my', 'nld_Latn': 'nl', 'nno_Latn': 'nn', 'nob_Latn': 'nb',
    'npi_Deva': 'ne', 'nso_Latn': 'nso', 'nus_Latn': 'nus', 'nya_Latn': 'ny', 'oci_Latn': 'oc',
    'ory_Orya': 'or', 'pag_Latn': 'pag', 'pan_Guru': 'pa', 'pap_Latn': 'pap', 'pbt_Arab': 'ps',
    'pes_Arab': 'fa', 'plt_Latn': 'mg', 'pol_Latn': 'pl', 'por_Latn': 'pt', 'prs_Arab': 'prs',
    'quy_Latn': 'quy', 'ron_Latn': 'ro', 'run_Latn': 'rn', 'rus_Cyrl': 'ru', 'sag_Latn': 'sg',
    'san_Deva': 'sa', 'scn_Latn': 'scn', 'shn_Mymr': 'shn', 'sin_Sinh': 'si', 'slk_Latn': 'sk',
    'slv_Latn': 'sl', 'smo_Latn': 'sm', 'sna_Latn': 'sn', 'snd_Arab': 'sd', 'som_Latn': 'so',
    'sot_Latn': 'st', 'spa_Latn': 'es', 'als_Latn': 'sq', 'srd_Latn': 'sc', 'srp_Cyrl': 'sr',
    'ssw_Latn': 'ss', 'sun_Latn': 'su', 'swe_Latn': 'sv', 'swh_Latn': 'sw', 'szl_Latn': 'szl',
    'tam_Taml': 'ta', 'taq_Latn': 'taq', 'taq_Tfng': 'taq-Tfng', 'tat_Cyrl': 'tt',
    'tel_Telu': 'te', 'tgk_Cyrl': 'tg', 'tgl_Latn': 'tl', 'tha_Thai': 'th', 'tir_Ethi': 'ti',
    'tpi_Latn': 'tpi', 'tsn_Latn': 'tn', 'tso_Latn': 'ts', 'tuk_Latn': 'tk', 'tum_Latn': 'tum',
    'tur_Latn': 'tr', 'twi_Latn': 'tw', 'tzm_Tfng': 'tzm', 'uig_Arab': 'ug', 'ukr_Cyrl': 'uk',
    'umb_Latn': 'umb', 'urd_Arab': 'ur', 'uzn_Latn': 'uz', 'vec_Latn': 'vec', 'vie_Latn': 'vi',
    'war_Latn': 'war', 'wol_Latn': 'wo', 'xho_Latn': 'xh', 'ydd_Hebr': 'yi', 'yor_Latn': 'yo',
    'yue_Hant': 'yue', 'zho_Hans': 'zh', 'zho_Hant': 'zh-Hant', 'zsm_Latn': 'ms',
    'zul_Latn': 'zu',
}

# Codes of languages with neither an ISO 639-1 code nor a FLORES-200 entry that a benchmark uses.
_OTHER_CANONICAL = frozenset({'fil', 'quz'})

# Datasets' and tools' own codes, and ISO 639-3 codes of macrolanguages (``swa`` for ``swh``).
_DATASET_ALIASES = {
    'jp': 'ja', 'zh-cn': 'zh', 'zh-sg': 'zh', 'zh-hans': 'zh', 'zh-tw': 'zh-Hant',
    'zh-hk': 'zh-Hant', 'zh-mo': 'zh-Hant', 'iw': 'he', 'in': 'id', 'ji': 'yi', 'zho': 'zh',
    'swa': 'sw', 'msa': 'ms', 'fas': 'fa', 'ara': 'ar', 'aze': 'az', 'lav': 'lv',
    'mon': 'mn', 'nep': 'ne', 'ori': 'or', 'mlg': 'mg', 'uzb': 'uz', 'orm': 'om', 'sqi': 'sq',
    'yid': 'yi', 'pus': 'ps', 'kur': 'ku', 'nor': 'no', 'cmn': 'zh',
}

# ISO 639-3 codes of the ISO 639-1 languages FLORES-200 lacks, the macrolanguage's where the
# language is one (``que`` Quechua; FLORES' ``quy`` is Ayacucho Quechua, its own language).
# Bihari (``bh``) is a group of languages, with no ISO 639-3 code.
_ISO639_3_OF_ISO639_1 = {
    'aar': 'aa', 'abk': 'ab', 'ave': 'ae', 'arg': 'an', 'ava': 'av', 'aym': 'ay', 'bis': 'bi',
    'bre': 'br', 'che': 'ce', 'cha': 'ch', 'cos': 'co', 'cre': 'cr', 'chu': 'cu', 'chv': 'cv',
    'div': 'dv', 'ful': 'ff', 'fry': 'fy', 'glv': 'gv', 'hmo': 'ho', 'her': 'hz', 'ina': 'ia',
    'ile': 'ie', 'iii': 'ii', 'ipk': 'ik', 'ido': 'io', 'iku': 'iu', 'kua': 'kj', 'kal': 'kl',
    'kau': 'kr', 'kom': 'kv', 'cor': 'kw', 'lat': 'la', 'lub': 'lu', 'mah': 'mh', 'nau': 'na',
    'nde': 'nd', 'ndo': 'ng', 'nbl': 'nr', 'nav': 'nv', 'oji': 'oj', 'oss': 'os', 'pli': 'pi',
    'que': 'qu', 'roh': 'rm', 'sme': 'se', 'ton': 'to', 'tah': 'ty', 'ven': 've', 'vol': 'vo',
    'wln': 'wa', 'zha': 'za',
}

# ISO 3166-1 country codes that are no language code, given for the country's language by
# mistake ('cz' for Czech): named in the error with the language's code rather than accepted,
# since a country is no language (XTD10's 'jp' is accepted as the release's own code). Those
# that are language codes too stay those languages: 'kr' Kanuri, 'se' Northern Sami.
_COUNTRY_CODES = {
    'cz': ('Czechia', 'cs'), 'cn': ('China', 'zh'), 'gr': ('Greece', 'el'),
    'dk': ('Denmark', 'da'), 'ua': ('Ukraine', 'uk'), 'vn': ('Viet Nam', 'vi'),
    'il': ('Israel', 'he'), 'ir': ('Iran', 'fa'), 'rs': ('Serbia', 'sr'),
    'al': ('Albania', 'sq'), 'by': ('Belarus', 'be'), 'kz': ('Kazakhstan', 'kk'),
}

_EXACT_DATASET_CODES = frozenset({'jp', 'zh-CN', 'zh-SG', 'zh-Hans', 'zh-TW', 'zh-HK', 'zh-MO'})

_SUBTAG = re.compile(r'^([A-Za-z]{2,3})[-_]([A-Za-z]{4}|[A-Za-z]{2}|\d{3})$')


class LanguageCodeError(ValueError):
    """A language code that maps to no language xmr knows."""


def _build_aliases() -> dict[str, str]:
    """Lower-cased accepted form -> canonical code."""
    aliases = {code: code for code in ISO639_1 | _OTHER_CANONICAL}
    for flores, canonical in FLORES200_TO_CANONICAL.items():
        aliases[flores.lower()] = canonical
        aliases[canonical.lower()] = canonical
        # The ISO 639-3 part alone means the script without a subtag (kas -> ks, not ks-Deva).
        if '-' not in canonical:
            aliases.setdefault(flores.split('_')[0], canonical)
    aliases.update(_DATASET_ALIASES)
    aliases.update(_ISO639_3_OF_ISO639_1)
    return aliases


_ALIASES = _build_aliases()
_CANONICAL_TO_FLORES = {canonical: flores for flores, canonical in FLORES200_TO_CANONICAL.items()}


#: The likely script of CLDR's likely subtags (``fil`` -> ``fil-Latn-PH``) of each canonical
#: code FLORES-200 lacks; ``quz`` takes that of ``qu``, its CLDR alias. CLDR has none for
#: ``bh``, ``ie``, ``oj`` and ``pi``, which keep a script subtag given.
_CLDR_SCRIPTS = {lang: script for script, langs in {
    'Latn': 'aa an ay bi br ch co ff fil fy gv ho hz ia ik io kj kl kr kw la lu mh na nd ng no '
            'nr nv qu quz rm se to ty ve vo wa za',
    'Cyrl': 'ab av ce cu cv kv os', 'Cans': 'cr iu', 'Avst': 'ae', 'Thaa': 'dv', 'Yiii': 'ii',
}.items() for lang in langs.split()}


def _usual_script(lang: str) -> str | None:
    """The script ``lang`` is written in without a subtag: FLORES-200's (``sr`` -> ``Cyrl``),
    else CLDR's likely one (``fil`` -> ``Latn``)."""
    flores = _CANONICAL_TO_FLORES.get(lang)
    return flores.split('_')[1] if flores else _CLDR_SCRIPTS.get(lang)


def normalize_language(code: str, where: str = 'language code') -> str:
    """The canonical code of ``code`` (module docstring): ``jp`` -> ``ja``, ``swh_Latn`` -> ``sw``.

    Args:
        code: an ISO 639-1 or ISO 639-3 code, a FLORES-200 code, a dataset's own code, or one of
            these with a script (``-Hant``) or region (``-BR``) subtag; case is ignored.
        where: what holds the code (a file and key, a config option), named in the error.

    Raises:
        LanguageCodeError: naming ``where``, the code, the closest accepted codes and the forms
            accepted.
    """
    if not isinstance(code, str):
        raise LanguageCodeError(f'{where}: a language code must be a string, got {code!r}')
    # FLORES-200 codes are kept with their underscore (swh_latn); other forms may use one as
    # the subtag separator (zh_CN, the POSIX locale's spelling).
    canonical = _ALIASES.get(code.lower()) or _ALIASES.get(code.lower().replace('_', '-'))
    if canonical is not None:
        return canonical
    parts = re.split('[-_]', code)
    if len(parts) == 3 and len(parts[1]) == 4 and parts[0].lower() in _ALIASES:
        # A script and a region (zh-Hans-CN, pt-Latn-BR): the region counts where the script is
        # the language's usual one, as in the code without it; else the script does. A region
        # that stands for another script (zh-TW: traditional) yields to the script given.
        scripted = normalize_language(f'{parts[0]}-{parts[1]}', where)
        if '-' in scripted:
            return scripted
        regional = normalize_language(f'{scripted}-{parts[2]}', where)
        return scripted if len(regional.partition('-')[2]) == 4 else regional
    match = _SUBTAG.match(code)
    if match is not None and match.group(1).lower() in _ALIASES:
        base, subtag = _ALIASES[match.group(1).lower()], match.group(2)
        if '-' not in base:
            if len(subtag) == 4 and _usual_script(base) == subtag.title():
                return base  # sr-Cyrl is sr, as srp_Cyrl is
            return f'{base}-{subtag.title() if len(subtag) == 4 else subtag.upper()}'
    raise LanguageCodeError(
        f"{where}: unknown language code {code!r}{_hint(code)}. Accepted forms: ISO 639-1 "
        "('sw'), ISO 639-3 ('swh', 'fil'), FLORES-200 ('swh_Latn'), the datasets' own codes "
        "('jp', 'zh-CN'), each optionally with a script or region subtag ('zh-Hant', "
        "'pt-BR'), of the languages of ISO 639-1 and FLORES-200; make another known with "
        "xmr.datasets.languages.register_language in a module of the config's custom_imports "
        "(a data tool's --custom-imports; the language codes section of docs/data.md)")


def _hint(code: str) -> str:
    """What the error of an unknown ``code`` suggests: the language of a country code
    (:data:`_COUNTRY_CODES`), else the closest accepted codes, else nothing."""
    if code.lower() in _COUNTRY_CODES:
        country, language = _COUNTRY_CODES[code.lower()]
        return (f"; {code!r} is the country code of {country}, whose language's code is "
                f'{language!r}')
    close = difflib.get_close_matches(code.lower(), _ALIASES, n=3, cutoff=0.6)
    # Several accepted forms of one language may be close ('de', 'deu'): name it once.
    languages = dict.fromkeys(_ALIASES[c] for c in close)
    return f"; closest: {', '.join(map(repr, languages))}" if languages else ''


def normalize_languages(codes: Sequence[str], where: str = 'languages') -> list[str]:
    """:func:`normalize_language` of each code; two codes of one language are an error.

    Raises:
        LanguageCodeError: naming ``where`` and the codes at fault, or ``codes`` given as one
            string.
    """
    if isinstance(codes, str):  # `--cfg-options ...languages=de` gives a string, not a list
        raise LanguageCodeError(f'{where}={codes!r} is one string: give a list of codes, '
                                f'[{codes!r}] (--cfg-options KEY=[{codes}])')
    canonical = [normalize_language(code, where) for code in codes]
    for position, lang in enumerate(canonical):
        first = canonical.index(lang)
        if first != position:
            raise LanguageCodeError(f'{where}: {codes[first]!r} and {codes[position]!r} are both '
                                    f'the language {lang!r}; list it once')
    return canonical


_REGISTERED_CODE = re.compile(r'^[a-z]{2,3}(-[A-Z][a-z]{3})?$')


def register_language(code: str, aliases: Sequence[str] = ()) -> str:
    """Make ``code`` a language xmr knows, one that ISO 639-1 and FLORES-200 leave out.

    From then on ``code`` is a canonical code like any other (captions, adapters, metric keys,
    leaderboard columns), and each alias, in any case, maps onto it. Call it from a module the
    config's ``custom_imports`` names, so that the tools know the language before they read a
    code; registering it again with the same aliases changes nothing.

    Args:
        code: its canonical code: the ISO 639-3 code (``haw``), with a script subtag where the
            text is not in the usual script (``sat-Olck``).
        aliases: the other codes its data and models use (``sat_Olck``, ``hawaiian``).

    Returns:
        ``code``.

    Raises:
        LanguageCodeError: ``code`` is not of that form, or it or an alias already names
            another language (naming it).
    """
    if not isinstance(code, str) or not _REGISTERED_CODE.match(code):
        raise LanguageCodeError(f'register_language: {code!r} is no canonical code; give the '
                                "ISO 639-3 code ('haw'), with a script subtag where the text is "
                                "not in the language's usual script ('sat-Olck')")
    if isinstance(aliases, str):
        raise LanguageCodeError(f'register_language({code!r}): aliases must be a list of codes, '
                                f'got the string {aliases!r}; write [{aliases!r}]')
    spellings = {spelling: _spelt_alike(spelling) for spelling in (code, *aliases)}
    for spelling, variants in spellings.items():
        for variant in variants:
            try:  # as a code is read: through its subtags too (sr-Cyrl is sr)
                known = normalize_language(variant)
            except LanguageCodeError:
                continue
            if known != code:
                raise LanguageCodeError(f'register_language({code!r}): {spelling!r} already '
                                        f'names the language {known!r}; register another code')
    _ALIASES.update(dict.fromkeys(set().union(*spellings.values()), code))
    return code


def _spelt_alike(spelling: str) -> set[str]:
    """``spelling`` in lower case with ``-`` and ``_`` alike, as built-in codes are read
    (``haw_Latn``, ``haw-Latn``)."""
    lower = spelling.lower()
    return {lower, lower.replace('_', '-'), lower.replace('-', '_')}


def is_language_alias(code: str) -> bool:
    """Whether ``code`` is a FLORES-200 or dataset code, spelt exactly so (``jp``, ``swh_Latn``).

    Case matters here, unlike in :func:`normalize_language`, so that words which merely look like
    codes (the ``AR`` of a metric key) are never taken for one.
    """
    return code in FLORES200_TO_CANONICAL or code in _EXACT_DATASET_CODES


def flores_code(lang: str) -> str:
    """The FLORES-200 code of a language: ``sw`` -> ``swh_Latn``, ``zh-Hant`` -> ``zho_Hant``.

    Raises:
        LanguageCodeError: an unknown code, or a language that is not one of FLORES-200's
            (naming the forms accepted).
    """
    canonical = normalize_language(lang)
    if canonical not in _CANONICAL_TO_FLORES:
        raise LanguageCodeError(
            f'{lang!r} ({canonical!r}) is not a FLORES-200 language; XTD200, Flickr30k-200 and '
            'NLLB hold the languages of xmr.datasets.languages.FLORES200_TO_CANONICAL, given as '
            "ISO 639-1 ('sw'), ISO 639-3 ('swh') or FLORES-200 ('swh_Latn') codes, with a "
            "script subtag where FLORES has one ('zh-Hant', 'ks-Deva')")
    return _CANONICAL_TO_FLORES[canonical]


# Benchmarks whose releases (and CLIP_benchmark) name languages otherwise than xmr.
_RELEASE_CODES = {'xtd10': {'ja': 'jp'}}
_FLORES_RELEASES = ('xtd200', 'flickr30k_200')


def release_code(dataset: str, lang: str) -> str:
    """The code the release of ``dataset`` (and CLIP_benchmark) uses for the canonical ``lang``.

    ``('xtd10', 'ja')`` -> ``'jp'``, ``('xtd200', 'sw')`` -> ``'swh_Latn'``; Crossmodal-3600
    and the other datasets use the canonical codes.
    """
    if dataset in _FLORES_RELEASES:
        return flores_code(lang)
    return _RELEASE_CODES.get(dataset, {}).get(lang, lang)
