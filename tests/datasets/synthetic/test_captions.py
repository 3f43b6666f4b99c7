"""The multilingual caption grammar, checked against captions written out by hand."""
import re

import numpy as np
import pytest

from xmr.datasets.synthetic.captions import CAPTION_LANGUAGES, CAPTION_STYLES, caption_scene
from xmr.datasets.synthetic.scenes import ObjectGroup, Scene, sample_scene

TWO_RED_CIRCLES_LEFT = ObjectGroup('red', 'circle', 'small', 2, 'left')
ONE_BLUE_SQUARE_RIGHT = ObjectGroup('blue', 'square', 'large', 1, 'right')
SCENE = Scene((TWO_RED_CIRCLES_LEFT, ONE_BLUE_SQUARE_RIGHT))

EXPECTED = {
    'en': {
        'existential':
            'There are two small red circles on the left and a large blue square on the right.',
        'location_first': 'On the left there are two small red circles, and on the right there '
                          'is a large blue square.',
        'quantity_first':
            'Two small red circles are on the left and one large blue square is on the right.',
        'clause_split': 'There are two small red circles. They are on the left. There is also '
                        'a large blue square. It is on the right.',
        'picture':
            'A picture of two small red circles on the left and a large blue square on the right.',
    },
    'de': {
        'existential':
            'Es gibt zwei kleine rote Kreise links und ein großes blaues Quadrat rechts.',
        'location_first': 'Links befinden sich zwei kleine rote Kreise und rechts befindet sich '
                          'ein großes blaues Quadrat.',
        'quantity_first':
            'Zwei kleine rote Kreise sind links und ein großes blaues Quadrat ist rechts.',
        'clause_split': 'Man sieht zwei kleine rote Kreise. Sie befinden sich links. Man sieht '
                        'außerdem ein großes blaues Quadrat. Es befindet sich rechts.',
        'picture':
            'Ein Bild mit zwei kleinen roten Kreisen links und einem großen blauen Quadrat rechts.',
    },
    'fr': {
        'existential':
            'Il y a deux petits cercles rouges à gauche et un grand carré bleu à droite.',
        'location_first': 'À gauche se trouvent deux petits cercles rouges et à droite se trouve '
                          'un grand carré bleu.',
        'quantity_first':
            'Deux petits cercles rouges sont à gauche et un grand carré bleu est à droite.',
        'clause_split': 'On voit deux petits cercles rouges. Ils sont à gauche. On voit aussi un '
                        'grand carré bleu. Il est à droite.',
        'picture':
            'Une image avec deux petits cercles rouges à gauche et un grand carré bleu à droite.',
    },
    'zh': {
        'existential': '画面左边有两个红色的小圆形，右边有一个蓝色的大正方形。',
        'location_first': '左边是两个红色小圆形，右边是一个蓝色大正方形。',
        'quantity_first': '两个红色的小圆形在左边，一个蓝色的大正方形在右边。',
        'clause_split': '图中有两个红色的小圆形。它们在左边。还有一个蓝色的大正方形。它在右边。',
        'picture': '一张图片，左边画着两个红色小圆形，右边画着一个蓝色大正方形。',
    },
    'ja': {
        'existential': '左に小さな赤い円が二つあり、右に大きな青い正方形が一つあります。',
        'location_first': '左側には小さな赤い円が二つ、右側には大きな青い正方形が一つあります。',
        'quantity_first': '2個の小さな赤い円が左にあり、1個の大きな青い正方形が右にあります。',
        'clause_split': '小さな赤い円が二つあります。どちらも左側にあります。'
                        'また、大きな青い正方形が一つあります。右側にあります。',
        'picture': '左に小さな赤い円が二つ、右に大きな青い正方形が一つある画像。',
    },
}


@pytest.mark.parametrize('lang', list(EXPECTED))
@pytest.mark.parametrize('style', CAPTION_STYLES)
def test_two_group_scene_in_every_language_and_style(lang, style):
    assert caption_scene(SCENE, lang, style) == EXPECTED[lang][style]


def test_mention_order_follows_the_scene():
    swapped = Scene((ONE_BLUE_SQUARE_RIGHT, TWO_RED_CIRCLES_LEFT))
    assert caption_scene(swapped, 'en', 'existential') == \
        'There is a large blue square on the right and two small red circles on the left.'


def single(colour, shape, size, count, position):
    return Scene((ObjectGroup(colour, shape, size, count, position),))


def test_german_declension_by_gender_case_and_number():
    circle = single('yellow', 'circle', 'large', 1, 'top')
    assert caption_scene(circle, 'de', 'existential') == 'Es gibt einen großen gelben Kreis oben.'
    assert caption_scene(circle, 'de', 'quantity_first') == 'Ein großer gelber Kreis ist oben.'
    assert caption_scene(circle, 'de', 'picture') == 'Ein Bild mit einem großen gelben Kreis oben.'
    assert caption_scene(circle, 'de', 'clause_split') == \
        'Man sieht einen großen gelben Kreis. Er befindet sich oben.'
    triangle = single('purple', 'triangle', 'small', 1, 'bottom')
    assert caption_scene(triangle, 'de', 'existential') == \
        'Es gibt ein kleines violettes Dreieck unten.'
    assert caption_scene(triangle, 'de', 'clause_split') == \
        'Man sieht ein kleines violettes Dreieck. Es befindet sich unten.'
    crosses = single('white', 'cross', 'small', 3, 'centre')
    assert caption_scene(crosses, 'de', 'picture') == \
        'Ein Bild mit drei kleinen weißen Kreuzen in der Mitte.'
    assert caption_scene(crosses, 'de', 'location_first') == \
        'In der Mitte befinden sich drei kleine weiße Kreuze.'


def test_french_agreement_of_size_and_colour():
    cross = single('white', 'cross', 'small', 1, 'top')
    assert caption_scene(cross, 'fr', 'existential') == 'Il y a une petite croix blanche en haut.'
    crosses = single('purple', 'cross', 'large', 3, 'bottom')
    assert caption_scene(crosses, 'fr', 'clause_split') == \
        'On voit trois grandes croix violettes. Elles sont en bas.'
    triangles = single('purple', 'triangle', 'large', 2, 'centre')
    assert caption_scene(triangles, 'fr', 'location_first') == \
        'Au centre se trouvent deux grands triangles violets.'
    assert caption_scene(single('green', 'cross', 'small', 2, 'left'), 'fr', 'picture') == \
        'Une image avec deux petites croix vertes à gauche.'


def test_chinese_numerals_before_the_measure_word():
    three = single('green', 'triangle', 'large', 3, 'centre')
    assert caption_scene(three, 'zh', 'quantity_first') == '三个绿色的大三角形在中间。'
    two = single('white', 'cross', 'small', 2, 'top')
    assert caption_scene(two, 'zh', 'clause_split') == '图中有两个白色的小十字。它们在上方。'
    rng = np.random.default_rng(1)
    for _ in range(50):
        for style in CAPTION_STYLES:
            assert '二个' not in caption_scene(sample_scene(rng), 'zh', style)


def test_japanese_counters():
    three = single('yellow', 'square', 'small', 3, 'bottom')
    assert caption_scene(three, 'ja', 'clause_split') == \
        '小さな黄色い正方形が三つあります。どれも下側にあります。'
    assert caption_scene(three, 'ja', 'quantity_first') == '3個の小さな黄色い正方形が下にあります。'
    one = single('purple', 'circle', 'large', 1, 'centre')
    assert caption_scene(one, 'ja', 'existential') == '中央に大きな紫の円が一つあります。'


# docs/data_synthetic.md, examples: top, three large white crosses.
THREE_WHITE_CROSSES_TOP = {
    'en': ('There are three large white crosses at the top.',
           'There are three large white crosses. They are at the top.'),
    'de': ('Es gibt drei große weiße Kreuze oben.',
           'Man sieht drei große weiße Kreuze. Sie befinden sich oben.'),
    'fr': ('Il y a trois grandes croix blanches en haut.',
           'On voit trois grandes croix blanches. Elles sont en haut.'),
    'zh': ('画面上方有三个白色的大十字。', '图中有三个白色的大十字。它们在上方。'),
    'ja': ('上に大きな白い十字が三つあります。',
           '大きな白い十字が三つあります。どれも上側にあります。'),
}


@pytest.mark.parametrize('lang', list(THREE_WHITE_CROSSES_TOP))
def test_the_documented_three_white_crosses_read_as_the_docs_print_them(lang):
    crosses = single('white', 'cross', 'large', 3, 'top')
    assert (caption_scene(crosses, lang, 'existential'),
            caption_scene(crosses, lang, 'clause_split')) == THREE_WHITE_CROSSES_TOP[lang]


def test_one_cross_is_feminine_in_french_and_neuter_in_german():
    cross = single('purple', 'cross', 'large', 1, 'right')
    assert caption_scene(cross, 'fr', 'clause_split') == \
        'On voit une grande croix violette. Elle est à droite.'
    assert caption_scene(cross, 'de', 'quantity_first') == 'Ein großes violettes Kreuz ist rechts.'
    assert caption_scene(cross, 'de', 'clause_split') == \
        'Man sieht ein großes violettes Kreuz. Es befindet sich rechts.'


@pytest.mark.parametrize('code, language', [('jp', 'ja'), ('zh-CN', 'zh'), ('DE', 'de')])
def test_a_language_code_of_any_accepted_form_writes_its_language(code, language):
    for style in CAPTION_STYLES:
        assert caption_scene(SCENE, code, style) == EXPECTED[language][style]

# Words each language must use for a group's attributes, written independently of the grammar.
COLOUR_WORDS = {
    'en': {'red': 'red', 'green': 'green', 'blue': 'blue', 'yellow': 'yellow',
           'purple': 'purple', 'white': 'white'},
    'de': {'red': 'rot', 'green': 'grün', 'blue': 'blau', 'yellow': 'gelb',
           'purple': 'violett', 'white': 'weiß'},
    'fr': {'red': 'rouge', 'green': 'vert', 'blue': 'bleu', 'yellow': 'jaune',
           'purple': 'violet', 'white': 'blanc|blanche'},
    'zh': {'red': '红色', 'green': '绿色', 'blue': '蓝色', 'yellow': '黄色',
           'purple': '紫色', 'white': '白色'},
    'ja': {'red': '赤い', 'green': '緑の', 'blue': '青い', 'yellow': '黄色い',
           'purple': '紫の', 'white': '白い'},
}
COUNT_WORDS = {
    'en': {1: 'a|one', 2: 'two', 3: 'three'},
    'de': {1: 'ein|einen|einem', 2: 'zwei', 3: 'drei'},
    'fr': {1: 'un|une', 2: 'deux', 3: 'trois'},
    'zh': {1: '一个', 2: '两个', 3: '三个'},
    'ja': {1: '一つ|1個', 2: '二つ|2個', 3: '三つ|3個'},
}
PLACE_WORDS = {
    'en': {'left': 'left', 'right': 'right', 'top': 'top', 'bottom': 'bottom',
           'centre': 'centre'},
    'de': {'left': 'links', 'right': 'rechts', 'top': 'oben', 'bottom': 'unten',
           'centre': 'Mitte'},
    'fr': {'left': 'gauche', 'right': 'droite', 'top': 'haut', 'bottom': 'bas',
           'centre': 'centre'},
    'zh': {'left': '左边', 'right': '右边', 'top': '上方', 'bottom': '下方', 'centre': '中间'},
    'ja': {'left': '左', 'right': '右', 'top': '上', 'bottom': '下', 'centre': '中央'},
}


def mentions(caption: str, alternatives: str, lang: str, inflected: bool = False) -> bool:
    # Latin-script words must start a word; ``inflected`` stems may take endings ("rote").
    if lang in ('zh', 'ja'):
        return any(word in caption for word in alternatives.split('|'))
    end = '' if inflected else r'\b'
    return re.search(rf'\b({alternatives}){end}', caption, flags=re.IGNORECASE) is not None


def test_captions_mention_every_group_attribute():
    rng = np.random.default_rng(5)
    for _ in range(60):
        scene = sample_scene(rng)
        for lang in CAPTION_LANGUAGES:
            for style in CAPTION_STYLES:
                caption = caption_scene(scene, lang, style)
                for group in scene.groups:
                    assert mentions(caption, COLOUR_WORDS[lang][group.colour], lang,
                                    inflected=True), caption
                    assert mentions(caption, COUNT_WORDS[lang][group.count], lang), caption
                    assert mentions(caption, PLACE_WORDS[lang][group.position], lang), caption


def test_cjk_captions_are_written_in_cjk_script():
    cjk = re.compile(r'[\u3040-\u30ff\u4e00-\u9fff]')
    rng = np.random.default_rng(2)
    for _ in range(30):
        scene = sample_scene(rng)
        for lang in ('zh', 'ja'):
            for style in CAPTION_STYLES:
                caption = caption_scene(scene, lang, style)
                assert len(cjk.findall(caption)) > len(caption) // 2, caption
                assert not re.search('[A-Za-z]', caption), caption


def test_styles_give_distinct_captions():
    for lang in CAPTION_LANGUAGES:
        assert len({caption_scene(SCENE, lang, style) for style in CAPTION_STYLES}) == 5


def test_unknown_language_or_style_is_named():
    with pytest.raises(ValueError, match="'ko'"):
        caption_scene(SCENE, 'ko', 'existential')
    with pytest.raises(ValueError, match='poem'):
        caption_scene(SCENE, 'en', 'poem')
