"""TranslationDataPreprocessor: which tokenizer reads each translated text, in which language."""

from xmr.models.translation_data_preprocessor import TranslationDataPreprocessor


class RecordingTokenizer:
    """A tokenizer that returns what it read: ``(its name, text, language)`` per caption."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, texts, langs=None):
        return [(self.name, text, lang) for text, lang in zip(texts, langs)]

    evaluation_batch = __call__


def test_translated_texts_go_to_the_target_tokenizer_in_the_language_they_are_written_in():
    """English MT'd into the target is in the sample's language; the target caption MT'd into
    English, the original English read by the branch and the back-translations are English."""
    preprocessor = TranslationDataPreprocessor(source_through_branch=True)
    preprocessor.bind(RecordingTokenizer('source'), RecordingTokenizer('target'), None, None,
                      'en')
    out = preprocessor.tokenize(dict(
        source_text=['a red circle', 'a cat'], target_text=['ein roter Kreis', '一只猫'],
        lang=['de', 'zh'], source_to_target_text=['ein rotes Rund', '一只小猫'],
        target_to_source_text=['one red round', 'one cat'],
        back_translations=[{'de': ['a red ring']}, {'zh': ['a kitten', 'one cat']}]))
    assert out['source_tokens'] == [('source', 'a red circle', 'en'), ('source', 'a cat', 'en')]
    assert out['source_to_target_tokens'] == [('target', 'ein rotes Rund', 'de'),
                                              ('target', '一只小猫', 'zh')]
    assert out['target_to_source_tokens'] == [('target', 'one red round', 'en'),
                                              ('target', 'one cat', 'en')]
    assert out['source_branch_tokens'] == [('target', 'a red circle', 'en'),
                                           ('target', 'a cat', 'en')]
    back = out['back_translation_tokens']
    assert back['de'][0] == [('target', 'a red ring', 'en')]
    assert back['zh'][0] == [('target', 'a kitten', 'en'), ('target', 'one cat', 'en')]
    assert back['zh'][1].tolist() == [1, 1] and back['de'][1].tolist() == [0]
