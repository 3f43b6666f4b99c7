"""The caption grammar of the synthetic set: English, German, French, Chinese and Japanese.

Every language writes a scene in the same five *styles*, so that one meaning appears in several
surface forms:

* ``existential``: "There are two small red circles on the left."
* ``location_first``: "On the left there are two small red circles."
* ``quantity_first``: "Two small red circles are on the left."
* ``clause_split``: "There are two small red circles. They are on the left."
* ``picture``: "A picture of two small red circles on the left."

Each language carries its own grammar rather than a word-for-word template: German declines
adjectives by gender, case and number ("ein kleiner roter Kreis", "einen kleinen roten Kreis",
"mit zwei kleinen roten Kreisen"), French agrees colour and size with the noun ("deux petites
croix blanches"), Chinese counts with the measure word 个 and 两 for two, Japanese counts with
つ or 個 and drops the subject of a second clause as a native writer would.
"""
from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Callable

from xmr.datasets.languages import normalize_languages
from xmr.datasets.synthetic.scenes import ObjectGroup, Scene

CAPTION_STYLES = ('existential', 'location_first', 'quantity_first', 'clause_split', 'picture')


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]


class CaptionGrammar(metaclass=ABCMeta):
    """Writes a scene in one language, one method per style.

    Every style method takes the scene's groups in mention order and returns the caption.
    """

    language: str

    def caption(self, scene: Scene, style: str) -> str:
        if style not in CAPTION_STYLES:
            raise ValueError(f'caption style {style!r} is not one of {CAPTION_STYLES}')
        writer: Callable[[tuple[ObjectGroup, ...]], str] = getattr(self, style)
        return writer(scene.groups)

    @staticmethod
    def verb(group: ObjectGroup, singular: str, plural: str) -> str:
        """The form of a verb that agrees in number with ``group``."""
        return singular if group.count == 1 else plural

    @abstractmethod
    def existential(self, groups: tuple[ObjectGroup, ...]) -> str:
        """The scene as the existence of its objects."""

    @abstractmethod
    def location_first(self, groups: tuple[ObjectGroup, ...]) -> str:
        """Each group introduced by its position."""

    @abstractmethod
    def quantity_first(self, groups: tuple[ObjectGroup, ...]) -> str:
        """Each group as a counted subject placed somewhere."""

    @abstractmethod
    def clause_split(self, groups: tuple[ObjectGroup, ...]) -> str:
        """What there is in one sentence, where it is in the next."""

    @abstractmethod
    def picture(self, groups: tuple[ObjectGroup, ...]) -> str:
        """A caption describing the picture as a whole."""


class EnglishGrammar(CaptionGrammar):
    language = 'en'
    PLURALS = {'circle': 'circles', 'square': 'squares', 'triangle': 'triangles',
               'cross': 'crosses'}
    NUMBERS = {2: 'two', 3: 'three'}
    PLACES = {'left': 'on the left', 'right': 'on the right', 'top': 'at the top',
              'bottom': 'at the bottom', 'centre': 'in the centre'}

    def noun_phrase(self, group: ObjectGroup, one: str = 'a') -> str:
        noun = group.shape if group.count == 1 else self.PLURALS[group.shape]
        number = one if group.count == 1 else self.NUMBERS[group.count]
        return f'{number} {group.size} {group.colour} {noun}'

    def be(self, group: ObjectGroup) -> str:
        return self.verb(group, 'is', 'are')

    def existential(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.noun_phrase(g)} {self.PLACES[g.position]}' for g in groups]
        # "There is/are" agrees with the first conjunct, as English does.
        return f'There {self.be(groups[0])} ' + ' and '.join(parts) + '.'

    def location_first(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.PLACES[g.position]} there {self.be(g)} {self.noun_phrase(g)}'
                 for g in groups]
        return _capitalise(', and '.join(parts)) + '.'

    def quantity_first(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.noun_phrase(g, one="one")} {self.be(g)} {self.PLACES[g.position]}'
                 for g in groups]
        return _capitalise(' and '.join(parts)) + '.'

    def clause_split(self, groups: tuple[ObjectGroup, ...]) -> str:
        sentences = []
        for index, group in enumerate(groups):
            also = ' also' if index else ''
            pronoun = 'It is' if group.count == 1 else 'They are'
            sentences.append(f'There {self.be(group)}{also} {self.noun_phrase(group)}. '
                             f'{pronoun} {self.PLACES[group.position]}.')
        return ' '.join(sentences)

    def picture(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.noun_phrase(g)} {self.PLACES[g.position]}' for g in groups]
        return 'A picture of ' + ' and '.join(parts) + '.'


class GermanGrammar(CaptionGrammar):
    language = 'de'
    # noun, gender, plural; the dative plural adds -n to these plurals.
    NOUNS = {'circle': ('Kreis', 'm', 'Kreise'), 'square': ('Quadrat', 'n', 'Quadrate'),
             'triangle': ('Dreieck', 'n', 'Dreiecke'), 'cross': ('Kreuz', 'n', 'Kreuze')}
    ADJECTIVES = {'small': 'klein', 'large': 'groß', 'red': 'rot', 'green': 'grün',
                  'blue': 'blau', 'yellow': 'gelb', 'purple': 'violett', 'white': 'weiß'}
    NUMBERS = {2: 'zwei', 3: 'drei'}
    # Indefinite article and the mixed adjective ending it takes, by case and gender.
    SINGULAR = {('nom', 'm'): ('ein', 'er'), ('nom', 'n'): ('ein', 'es'),
                ('acc', 'm'): ('einen', 'en'), ('acc', 'n'): ('ein', 'es'),
                ('dat', 'm'): ('einem', 'en'), ('dat', 'n'): ('einem', 'en')}
    # Plural without an article: strong endings.
    PLURAL_ENDINGS = {'nom': 'e', 'acc': 'e', 'dat': 'en'}
    PRONOUNS = {'m': 'er', 'n': 'es'}
    PLACES = {'left': 'links', 'right': 'rechts', 'top': 'oben', 'bottom': 'unten',
              'centre': 'in der Mitte'}

    def noun_phrase(self, group: ObjectGroup, case: str) -> str:
        noun, gender, plural = self.NOUNS[group.shape]
        size, colour = self.ADJECTIVES[group.size], self.ADJECTIVES[group.colour]
        if group.count == 1:
            article, ending = self.SINGULAR[(case, gender)]
            return f'{article} {size}{ending} {colour}{ending} {noun}'
        ending = self.PLURAL_ENDINGS[case]
        noun = plural + 'n' if case == 'dat' else plural
        return f'{self.NUMBERS[group.count]} {size}{ending} {colour}{ending} {noun}'

    def pronoun(self, group: ObjectGroup) -> str:
        return 'sie' if group.count > 1 else self.PRONOUNS[self.NOUNS[group.shape][1]]

    def existential(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.noun_phrase(g, "acc")} {self.PLACES[g.position]}' for g in groups]
        return 'Es gibt ' + ' und '.join(parts) + '.'

    def location_first(self, groups: tuple[ObjectGroup, ...]) -> str:
        # Verb second: the place takes the first slot, the subject follows the verb.
        parts = [f'{self.PLACES[g.position]} {self.verb(g, "befindet", "befinden")} sich '
                 f'{self.noun_phrase(g, "nom")}' for g in groups]
        return _capitalise(' und '.join(parts)) + '.'

    def quantity_first(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.noun_phrase(g, "nom")} {self.verb(g, "ist", "sind")} '
                 f'{self.PLACES[g.position]}' for g in groups]
        return _capitalise(' und '.join(parts)) + '.'

    def clause_split(self, groups: tuple[ObjectGroup, ...]) -> str:
        sentences = []
        for index, group in enumerate(groups):
            also = ' außerdem' if index else ''
            sentences.append(f'Man sieht{also} {self.noun_phrase(group, "acc")}. '
                             f'{_capitalise(self.pronoun(group))} '
                             f'{self.verb(group, "befindet", "befinden")} sich '
                             f'{self.PLACES[group.position]}.')
        return ' '.join(sentences)

    def picture(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.noun_phrase(g, "dat")} {self.PLACES[g.position]}' for g in groups]
        return 'Ein Bild mit ' + ' und '.join(parts) + '.'


class FrenchGrammar(CaptionGrammar):
    language = 'fr'
    # noun, gender, plural
    NOUNS = {'circle': ('cercle', 'm', 'cercles'), 'square': ('carré', 'm', 'carrés'),
             'triangle': ('triangle', 'm', 'triangles'), 'cross': ('croix', 'f', 'croix')}
    # masculine singular, feminine singular, masculine plural, feminine plural
    ADJECTIVES = {
        'small': ('petit', 'petite', 'petits', 'petites'),
        'large': ('grand', 'grande', 'grands', 'grandes'),
        'red': ('rouge', 'rouge', 'rouges', 'rouges'),
        'green': ('vert', 'verte', 'verts', 'vertes'),
        'blue': ('bleu', 'bleue', 'bleus', 'bleues'),
        'yellow': ('jaune', 'jaune', 'jaunes', 'jaunes'),
        'purple': ('violet', 'violette', 'violets', 'violettes'),
        'white': ('blanc', 'blanche', 'blancs', 'blanches'),
    }
    ARTICLES = {'m': 'un', 'f': 'une'}
    NUMBERS = {2: 'deux', 3: 'trois'}
    PRONOUNS = {('m', 1): 'il', ('f', 1): 'elle', ('m', 2): 'ils', ('f', 2): 'elles'}
    PLACES = {'left': 'à gauche', 'right': 'à droite', 'top': 'en haut', 'bottom': 'en bas',
              'centre': 'au centre'}

    def noun_phrase(self, group: ObjectGroup) -> str:
        noun, gender, plural = self.NOUNS[group.shape]
        form = (gender == 'f') + 2 * (group.count > 1)
        size, colour = self.ADJECTIVES[group.size][form], self.ADJECTIVES[group.colour][form]
        if group.count == 1:
            return f'{self.ARTICLES[gender]} {size} {noun} {colour}'
        # Size adjectives precede the noun, colours follow it.
        return f'{self.NUMBERS[group.count]} {size} {plural} {colour}'

    def pronoun(self, group: ObjectGroup) -> str:
        return self.PRONOUNS[(self.NOUNS[group.shape][1], min(group.count, 2))]

    def existential(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.noun_phrase(g)} {self.PLACES[g.position]}' for g in groups]
        return 'Il y a ' + ' et '.join(parts) + '.'

    def location_first(self, groups: tuple[ObjectGroup, ...]) -> str:
        # Stylistic inversion after a fronted place: "À gauche se trouvent deux cercles".
        parts = [f'{self.PLACES[g.position]} {self.verb(g, "se trouve", "se trouvent")} '
                 f'{self.noun_phrase(g)}' for g in groups]
        return _capitalise(' et '.join(parts)) + '.'

    def quantity_first(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.noun_phrase(g)} {self.verb(g, "est", "sont")} '
                 f'{self.PLACES[g.position]}' for g in groups]
        return _capitalise(' et '.join(parts)) + '.'

    def clause_split(self, groups: tuple[ObjectGroup, ...]) -> str:
        sentences = []
        for index, group in enumerate(groups):
            also = ' aussi' if index else ''
            sentences.append(f'On voit{also} {self.noun_phrase(group)}. '
                             f'{_capitalise(self.pronoun(group))} '
                             f'{self.verb(group, "est", "sont")} {self.PLACES[group.position]}.')
        return ' '.join(sentences)

    def picture(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.noun_phrase(g)} {self.PLACES[g.position]}' for g in groups]
        return 'Une image avec ' + ' et '.join(parts) + '.'


class ChineseGrammar(CaptionGrammar):
    language = 'zh'
    COLOURS = {'red': '红色', 'green': '绿色', 'blue': '蓝色', 'yellow': '黄色',
               'purple': '紫色', 'white': '白色'}
    SHAPES = {'circle': '圆形', 'square': '正方形', 'triangle': '三角形', 'cross': '十字'}
    SIZES = {'small': '小', 'large': '大'}
    # 两, not 二, counts before a measure word.
    NUMBERS = {1: '一', 2: '两', 3: '三'}
    PLACES = {'left': '左边', 'right': '右边', 'top': '上方', 'bottom': '下方', 'centre': '中间'}

    def noun_phrase(self, group: ObjectGroup, linked: bool = True) -> str:
        """``两个红色的小圆形`` (``linked``) or the terser ``两个红色小圆形``."""
        link = '的' if linked else ''
        return (f'{self.NUMBERS[group.count]}个{self.COLOURS[group.colour]}{link}'
                f'{self.SIZES[group.size]}{self.SHAPES[group.shape]}')

    def existential(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.PLACES[g.position]}有{self.noun_phrase(g)}' for g in groups]
        # 画面 ("the picture"), not 图中, which would stutter before 中间 (图中中间).
        return '画面' + '，'.join(parts) + '。'

    def location_first(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.PLACES[g.position]}是{self.noun_phrase(g, linked=False)}'
                 for g in groups]
        return '，'.join(parts) + '。'

    def quantity_first(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.noun_phrase(g)}在{self.PLACES[g.position]}' for g in groups]
        return '，'.join(parts) + '。'

    def clause_split(self, groups: tuple[ObjectGroup, ...]) -> str:
        sentences = []
        for index, group in enumerate(groups):
            opening = '还有' if index else '图中有'
            pronoun = '它' if group.count == 1 else '它们'
            sentences.append(f'{opening}{self.noun_phrase(group)}。'
                             f'{pronoun}在{self.PLACES[group.position]}。')
        return ''.join(sentences)

    def picture(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.PLACES[g.position]}画着{self.noun_phrase(g, linked=False)}'
                 for g in groups]
        return '一张图片，' + '，'.join(parts) + '。'


class JapaneseGrammar(CaptionGrammar):
    language = 'ja'
    COLOURS = {'red': '赤い', 'green': '緑の', 'blue': '青い', 'yellow': '黄色い',
               'purple': '紫の', 'white': '白い'}
    SHAPES = {'circle': '円', 'square': '正方形', 'triangle': '三角形', 'cross': '十字'}
    SIZES = {'small': '小さな', 'large': '大きな'}
    # The native counter つ, and 個 with digits in the quantity-first style.
    COUNTERS = {1: '一つ', 2: '二つ', 3: '三つ'}
    PLACES = {'left': '左', 'right': '右', 'top': '上', 'bottom': '下', 'centre': '中央'}
    SIDES = {'left': '左側', 'right': '右側', 'top': '上側', 'bottom': '下側', 'centre': '中央'}
    # "Both" / "all of them" opening the second clause of clause_split.
    ALL_OF = {1: '', 2: 'どちらも', 3: 'どれも'}

    def noun(self, group: ObjectGroup) -> str:
        return f'{self.SIZES[group.size]}{self.COLOURS[group.colour]}{self.SHAPES[group.shape]}'

    def existential(self, groups: tuple[ObjectGroup, ...]) -> str:
        # Non-final clauses end in the continuative あり、the last one in あります。
        parts = [f'{self.PLACES[g.position]}に{self.noun(g)}が{self.COUNTERS[g.count]}'
                 for g in groups]
        return 'あり、'.join(parts) + 'あります。'

    def location_first(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.SIDES[g.position]}には{self.noun(g)}が{self.COUNTERS[g.count]}'
                 for g in groups]
        return '、'.join(parts) + 'あります。'

    def quantity_first(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{g.count}個の{self.noun(g)}が{self.PLACES[g.position]}に' for g in groups]
        return 'あり、'.join(parts) + 'あります。'

    def clause_split(self, groups: tuple[ObjectGroup, ...]) -> str:
        sentences = []
        for index, group in enumerate(groups):
            also = 'また、' if index else ''
            sentences.append(f'{also}{self.noun(group)}が{self.COUNTERS[group.count]}あります。'
                             f'{self.ALL_OF[group.count]}{self.SIDES[group.position]}にあります。')
        return ''.join(sentences)

    def picture(self, groups: tuple[ObjectGroup, ...]) -> str:
        parts = [f'{self.PLACES[g.position]}に{self.noun(g)}が{self.COUNTERS[g.count]}'
                 for g in groups]
        return '、'.join(parts) + 'ある画像。'


GRAMMARS: dict[str, CaptionGrammar] = {
    grammar.language: grammar for grammar in (
        EnglishGrammar(), GermanGrammar(), FrenchGrammar(), ChineseGrammar(), JapaneseGrammar())
}
CAPTION_LANGUAGES = tuple(GRAMMARS)


def check_languages(languages: tuple[str, ...] | list[str], owner: str) -> tuple[str, ...]:
    """The canonical codes of ``languages`` (``jp`` -> ``ja``, ``zh-CN`` -> ``zh``: any form
    :func:`~xmr.datasets.languages.normalize_language` accepts, as for every other dataset),
    each one of :data:`CAPTION_LANGUAGES`; the error names ``owner`` (the caller's argument).

    Raises:
        TypeError: ``languages`` is one string.
        ValueError: a code of no language, two codes of one language, or a language the
            grammars do not write.
    """
    if isinstance(languages, str):
        raise TypeError(f'{owner} must be a list of language codes, got the string {languages!r}')
    canonical = normalize_languages(languages, owner)
    unknown = [lang for lang in canonical if lang not in GRAMMARS]
    if unknown:
        raise ValueError(f'{owner} has unknown languages {unknown}; the synthetic captions '
                         f'exist in {CAPTION_LANGUAGES}')
    return tuple(canonical)


def caption_scene(scene: Scene, language: str, style: str) -> str:
    """Write ``scene`` in ``language`` (``'en'``, ``'de'``, ``'fr'``, ``'zh'``, ``'ja'``) in
    ``style`` (one of ``CAPTION_STYLES``)."""
    (language,) = check_languages([language], 'language')
    return GRAMMARS[language].caption(scene, style)
