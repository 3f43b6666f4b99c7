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


def test_a_model_querying_with_back_translations_has_them_counted_for_its_targets():
    """Routine 3 and translate-test query a target language with its captions' back-
    translations: the counts before a test read those, through the target tokenizer in the
    source language, and the source language's own captions; another routine reads the
    captions."""
    from types import SimpleNamespace

    from tests.models.language.test_caption_token_counts import WordTokenizer
    from xmr.datasets.annotation import MediaRecord

    class LanguageTokenizer(WordTokenizer):
        """Writes the language it is told after its start token, 8 for en and the unknown id
        for any other, so that the unknown count shows which language it was told."""

        def encode_in(self, text, lang):
            return [1, 8 if lang == 'en' else self.unk, *self.encode(text)[1:]]

    dataset = SimpleNamespace(records=[MediaRecord(
        'a', 'a.jpg', {'en': ['red circle'], 'de': ['roter Kreis blau']},
        back_translations={'de': ['red circle', 'blue']})])
    preprocessor = TranslationDataPreprocessor()
    preprocessor.bind(WordTokenizer(max_length=3), LanguageTokenizer(max_length=4), None, None,
                      'en')
    native = preprocessor.count_dataset_caption_tokens(dataset, ['en', 'de'])
    assert (native['de'].captions, native['de'].unknown, native['de'].cut) == (1, 4, 1)
    preprocessor.queries_back_translated = True
    assert preprocessor.query_texts('de') == ('back_translations', 'en')
    assert preprocessor.query_texts('en') == ('captions', None)
    counts = preprocessor.count_dataset_caption_tokens(dataset, ['en', 'de'])
    assert (counts['en'].captions, counts['en'].mean_tokens, counts['en'].cut) == (1, 4, 1)
    assert (counts['de'].captions, counts['de'].unknown, counts['de'].max_tokens) == (2, 0, 5)
    assert counts['de'].cut == 1


def test_back_translation_owners_stay_on_the_host_as_caption_owners_do():
    """Only the tokens go to the device (the meta device stands in for a GPU); the owners
    order copies of the embeddings on the host."""
    preprocessor = TranslationDataPreprocessor().to('meta')
    preprocessor.bind(RecordingTokenizer('source'), RecordingTokenizer('target'), None, None,
                      'en')
    out = preprocessor(dict(back_translations=[{'de': ['a ring']}, {'de': ['a cat']}]), False)
    tokens, owner = out['back_translation_tokens']['de']
    assert tokens == [('target', 'a ring', 'en'), ('target', 'a cat', 'en')]
    assert owner.device.type == 'cpu' and owner.tolist() == [0, 1]
