"""Tokenises the machine translations that PECTVLM's routines read, besides the usual texts."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xmr.models.data_preprocessor import RetrievalDataPreprocessor
from xmr.registry import MODELS

#: Batch keys of translated training texts -> the token keys they become.
TRANSLATED_TEXT_KEYS = {'source_to_target_text': 'source_to_target_tokens',
                        'target_to_source_text': 'target_to_source_tokens'}


@MODELS.register_module()
class TranslationDataPreprocessor(RetrievalDataPreprocessor):
    """:class:`RetrievalDataPreprocessor` plus the texts the target branch reads in any language.

    Every text below is encoded by the target branch with the sample's language module, so it
    is tokenised with the *target* tokenizer even when it is English:

    * ``source_to_target_text`` -> ``source_to_target_tokens`` (English MT'd into the target);
    * ``target_to_source_text`` -> ``target_to_source_tokens`` (the target caption MT'd into
      English);
    * ``source_text`` -> ``source_branch_tokens`` when ``source_through_branch`` (PECTVLM runs
      the original English through the adapted encoder too);
    * evaluation items' ``back_translations`` -> ``back_translation_tokens``
      ``{lang: (TokenBatch, owner)}``, laid out like ``caption_tokens``.

    Args:
        non_blocking, source_prompt: see :class:`RetrievalDataPreprocessor`.
        source_through_branch: also tokenise ``source_text`` for the branch (set by the model).
        queries_back_translated: the model queries a target language with its captions'
            back-translations (set by the model: routine 3, translate-test).
    """

    def __init__(self, non_blocking: bool = True, source_prompt: str | None = None,
                 source_through_branch: bool = False,
                 queries_back_translated: bool = False) -> None:
        super().__init__(non_blocking, source_prompt)
        self.source_through_branch = source_through_branch
        self.queries_back_translated = queries_back_translated

    def query_texts(self, lang: str) -> tuple[str, str | None]:
        """A target language's ``back_translations``, written in the source language, where
        the model queries with them; else its captions."""
        if self.queries_back_translated and lang != self.source_language:
            return 'back_translations', self.source_language
        return super().query_texts(lang)

    def tokenize(self, data: Mapping[str, Any]) -> dict[str, Any]:
        out = super().tokenize(data)
        texts = {key: data[key] for key in TRANSLATED_TEXT_KEYS if data.get(key) is not None}
        if self.source_through_branch and data.get('source_text') is not None:
            texts['source_branch_text'] = data['source_text']
        if texts:
            if self.target_tokenizer is None:
                raise RuntimeError('translated texts need the target tokenizer; the model has '
                                   'no target-language branch')
            for key, values in texts.items():
                token_key = TRANSLATED_TEXT_KEYS.get(key, 'source_branch_tokens')
                # The language the text is written in, for a tokenizer that writes it.
                langs = (data['lang'] if key == 'source_to_target_text'
                         else [self.source_language] * len(values))
                out[token_key] = self.target_tokenizer(values, langs)
        if data.get('back_translations') is not None:
            # Grouped per language exactly as captions are: owner[n] is caption n's batch row;
            # the texts are in the source language.
            out['back_translation_tokens'] = self.caption_tokens(
                data['back_translations'], text_language=self.source_language)
        return out
