"""Turns a collated batch into model inputs: normalised media and tokenised captions."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from mmengine.model import BaseDataPreprocessor

from xmr.models.language.caption_token_counts import CaptionTokenCounts, count_caption_tokens
from xmr.models.language.tokenizers import BaseTokenizer, TokenBatch
from xmr.registry import MODELS

#: Keys of captions grouped per language, ``{lang: (TokenBatch, owner [N])}``.
CAPTION_GROUPS = ('caption_tokens', 'back_translation_tokens')
#: Keys of per-row Python values (language codes, media ids, dataset indices), which stay on
#: the host as they are.
HOST_LISTS = ('langs', 'media_ids', 'indices')


@MODELS.register_module()
class RetrievalDataPreprocessor(BaseDataPreprocessor):
    """Normalise uint8 media and tokenise every text of the batch, padded to its longest caption.

    The retriever binds the tokenizers and the image statistics of its backbone, so a config
    only names the type.

    Output keys (those present in the batch): ``media`` (float ``[B, 3, H, W]`` or
    ``[B, T, 3, H, W]``), ``source_tokens``, ``target_tokens`` (:class:`TokenBatch`), ``langs``,
    ``media_ids``, ``media_keys`` (int64 ``[B]``, one per medium: ``retrieval_collate``'s),
    ``indices``, ``caption_tokens`` (``{lang: (TokenBatch, owner [N])}`` with
    ``owner[n]`` the batch row of caption ``n``; the owners stay on the host, where only the
    copies of the embeddings are ordered by them), and any cached features the batch carries.
    ``langs``, ``media_ids`` and ``indices`` are the batch's own lists.
    A batch with ``source_features`` gets no ``source_tokens``: the features stand for them.

    Args:
        non_blocking: copy batches to the device without blocking the host (from the pinned
            memory the loops' loaders use on a GPU machine: :mod:`xmr.engine.pinned_batches`).
        source_prompt: text written before every source-language caption (``'a photo of'``:
            PECTVLM's English prompt, with which it also evaluates English); ``None`` reads
            the captions as they are.
    """

    def __init__(self, non_blocking: bool = True, source_prompt: str | None = None) -> None:
        super().__init__(non_blocking)
        self.source_prompt = source_prompt
        self.source_tokenizer: BaseTokenizer | None = None
        self.target_tokenizer: BaseTokenizer | None = None
        self.source_language = 'en'
        self.reads_media = True
        self.register_buffer('mean', torch.zeros(3, 1, 1), persistent=False)
        self.register_buffer('std', torch.ones(3, 1, 1), persistent=False)

    def bind(self, source_tokenizer: BaseTokenizer, target_tokenizer: BaseTokenizer | None,
             mean: Sequence[float] | None, std: Sequence[float] | None,
             source_language: str = 'en') -> None:
        """Take the model's tokenizers and its image statistics (``None`` for a text-only
        backbone, whose batches must carry no media)."""
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.source_language = source_language
        self.reads_media = mean is not None and std is not None
        if self.reads_media:
            self.mean.copy_(torch.tensor(mean, dtype=torch.float32).view(3, 1, 1))
            self.std.copy_(torch.tensor(std, dtype=torch.float32).view(3, 1, 1))

    def normalize_media(self, media: torch.Tensor) -> torch.Tensor:
        """uint8 ``[..., 3, H, W]`` in 0..255 -> float, normalised with the backbone's stats.

        Raises:
            ValueError: media for a model bound without image statistics (a text-only backbone),
                or media of another dtype: a float image from a dataset of one's own may be in
                0..1 or 0..255, and the second trained silently on values 255 times too large.
        """
        if not self.reads_media:
            raise ValueError('the batch carries media but the model has a text-only backbone; '
                             "give its datasets a text-only annotation (media_type 'text') or "
                             'with_media=False')
        if media.dtype != torch.uint8:
            raise ValueError(f"the batch's media are {media.dtype}, not uint8 [..., 3, H, W] in "
                             "0..255 as datasets give them (docs/data.md); leave the dataset's "
                             'images as read_image decodes them, the model scales them')
        media = media.to(self.mean.device, non_blocking=self._non_blocking)
        media = media.float().div_(255.0)
        # In the statistics' dtype, the model's: fp32 media would meet a bf16 model's weights.
        return ((media - self.mean) / self.std).to(self.mean.dtype)

    def _tokenizer_for(self, lang: str) -> BaseTokenizer:
        """The source tokenizer for the source language, the target one for any other."""
        tokenizer = (self.source_tokenizer if lang == self.source_language
                     else self.target_tokenizer)
        if tokenizer is None:
            raise RuntimeError(f"no tokenizer bound for language '{lang}': the model has no "
                               'target-language branch')
        return tokenizer

    def _prompted(self, texts: Sequence[str], lang: str) -> list[str]:
        """``texts`` of language ``lang``, after the source prompt when they are the source's."""
        if self.source_prompt is None or lang != self.source_language:
            return list(texts)
        return [f'{self.source_prompt} {text}' for text in texts]

    def caption_tokens(self, captions: Sequence[dict[str, Sequence[str]]],
                       text_language: str | None = None
                       ) -> dict[str, tuple[TokenBatch, torch.Tensor]]:
        """Evaluation captions grouped per language: ``{lang: (TokenBatch, owner [N])}`` with
        ``owner[n]`` the batch row of caption ``n``; each group is its tokenizer's
        :meth:`~xmr.models.language.tokenizers.BaseTokenizer.evaluation_batch` (every caption
        kept, as the protocols count them).

        Args:
            captions: per batch row, ``{lang: [caption, ...]}``.
            text_language: the language the texts are written in when it is not the key's
                (back-translations into English, read with the key language's modules); a
                tokenizer that writes a language token codes it.
        """
        grouped = {}
        for lang in dict.fromkeys(code for item in captions for code in item):
            texts, owner = [], []
            for row, item in enumerate(captions):
                for text in item.get(lang, []):
                    texts.append(text)
                    owner.append(row)
            if texts:
                tokens = self._tokenizer_for(lang).evaluation_batch(
                    self._prompted(texts, lang), [text_language or lang] * len(texts))
                grouped[lang] = (tokens, torch.tensor(owner, dtype=torch.long))
        return grouped

    def count_caption_tokens(self, texts: Sequence[str], lang: str,
                             text_language: str | None = None) -> CaptionTokenCounts:
        """How the model reads captions ``texts`` in ``lang``: its tokenizer for the language,
        after the source prompt where it has one (:func:`count_caption_tokens`);
        ``text_language`` as in :meth:`caption_tokens`."""
        return count_caption_tokens(self._tokenizer_for(lang), self._prompted(texts, lang), lang,
                                    text_language)

    def count_dataset_caption_tokens(self, dataset: Any, langs: Sequence[str],
                                     limit: int | None = None) -> dict[str, CaptionTokenCounts]:
        """How the model reads ``dataset``'s captions in each of ``langs`` that it holds any in
        (:meth:`count_caption_tokens`; each language's first ``limit``, ``None``: all), read
        from its annotations without loading media
        (:func:`~xmr.datasets.dataset_captions.dataset_captions`): the texts it queries the
        language with (:meth:`query_texts`).

        Raises:
            NoCaptions: a dataset that exposes no captions.
        """
        from xmr.datasets.dataset_captions import dataset_captions

        counts = {}
        for lang in langs:
            field, text_language = self.query_texts(lang)
            captions = dataset_captions(dataset, lang, limit, field)
            if captions:
                counts[lang] = self.count_caption_tokens(captions, lang, text_language)
        return counts

    def query_texts(self, lang: str) -> tuple[str, str | None]:
        """Which texts of an evaluation item the model embeds as ``lang``'s captions: the
        item's field (``'captions'``) and the language they are written in where it is not
        ``lang`` (``None``)."""
        return 'captions', None

    def tokenize(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The batch's texts as tokens, on the host: ``source_tokens``, ``target_tokens`` with
        ``langs``, ``caption_tokens`` (those the batch has texts for).

        The training and evaluation loops have dataloader workers run it
        (:func:`~xmr.engine.worker_tokens.tokenize_in_workers`); :meth:`forward` takes their
        result from the batch's ``tokens``, and calls it itself for a batch without.
        """
        out: dict[str, Any] = {}
        # Cached features replace the frozen source tower, so their captions go untokenised
        # (CLIP's BPE costs about 0.1 ms a caption on the host).
        if 'source_text' in data and data.get('source_features') is None:
            sources = data['source_text']
            out['source_tokens'] = self._tokenizer_for(self.source_language)(
                self._prompted(sources, self.source_language),
                [self.source_language] * len(sources))
        targets = data.get('target_text')
        if targets is not None and all(t is not None for t in targets):
            # Each caption its own language: a tokenizer may write it (NLLB's language token).
            out['target_tokens'] = self._tokenizer_for(data['lang'][0])(targets, data['lang'])
            out['langs'] = list(data['lang'])
        if 'captions' in data:
            out['caption_tokens'] = self.caption_tokens(data['captions'])
        return out

    def forward(self, data: dict, training: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if data.get('media') is not None:
            out['media'] = self.normalize_media(data['media'])
        out.update(data['tokens'] if 'tokens' in data else self.tokenize(data))
        for key in ('media_id', 'index'):
            if key in data:
                out[key + 's' if key == 'media_id' else 'indices'] = data[key]
        for key, value in data.items():
            if key.endswith('_features') or key == 'media_keys':
                out[key] = value
        groups = {key: out.pop(key) for key in CAPTION_GROUPS if key in out}
        # MMEngine's cast_data visits each element of a list: 0.2 ms of the host's time a step
        # for these three lists at batch 128, which hold no tensor.
        host = {key: out.pop(key) for key in HOST_LISTS if key in out}
        out = dict(self.cast_data(out), **host)
        for key, captions in groups.items():
            # Read on the device, an owner would make the host wait for it (gallery_batch).
            out[key] = {lang: (self.cast_data(tokens), owner)
                        for lang, (tokens, owner) in captions.items()}
        return out
