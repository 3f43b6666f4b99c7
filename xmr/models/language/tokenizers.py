"""Tokenizers that turn captions into padded id batches, registered in ``TOKENIZERS``.

Every tokenizer pads to the longest caption of the batch (never to the context length, unless
asked: ``pad_to``, ``pad_to_multiple_of``) and reports where the pooled end-of-sequence token
sits, since only open_clip's own vocabulary lets ``argmax`` find it (DESIGN pitfalls).
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import operator
import re
import unicodedata
import zipfile
from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

import torch
from mmengine.logging import print_log

from xmr.datasets.languages import (
    FLORES200_TO_CANONICAL,
    LanguageCodeError,
    flores_code,
    normalize_language,
)
from xmr.fileio import atomic_write_bytes
from xmr.models.weight_files import fetch_weights
from xmr.registry import FUNCTIONS, TOKENIZERS
from xmr.utils.recent import RecentResults

if TYPE_CHECKING:
    from xmr.models.backbones.base import TextTower

#: Share of unknown tokens among a language's tokens in a batch above which it is reported:
#: a language the vocabulary never saw comes out about half unknowns (SentencePiece keeps the
#: word-start piece of each unknown word), a covered one's rare characters far below this.
UNKNOWN_SHARE_WARNING = 0.25
#: Share of a corpus's captions longer than ``max_length`` under a vocabulary just learned from it
#: above which :class:`SentencePieceTokenizer` warns.
TRUNCATED_SHARE_WARNING = 0.25


class TokenBatch(TypedDict):
    """A tokenised batch.

    Keys:
        input_ids: ``[B, L]`` int64, ``L`` = longest caption in the batch (with specials).
        attention_mask: ``[B, L]`` bool, True on real tokens.
        eos_index: ``[B]`` int64 position of the caption's first end token (pooled by EOS
            towers): open_clip's ``argmax`` and ``eos`` pooling take the first position of the
            end id, which is a literal one (``</s>``, ``<end_of_text>`` written in the caption,
            which the tokenizer reads as the special token) before the appended one.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    eos_index: torch.Tensor


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int,
              pad_to: int | None = None, end_id: int | None = None,
              start_tokens: int = 0) -> TokenBatch:
    """Right-pad id lists into a :class:`TokenBatch`; the EOS is the first ``end_id``.

    Args:
        sequences: token ids of each caption, specials included.
        pad_id: id written after each caption's end.
        pad_to: pad every batch to this fixed length instead of its longest caption (the
            authors' code pads to 77; xmr's default is ``None``, dynamic padding).
        end_id: the tokenizer's end token; ``eos_index`` is its first position among the real
            tokens, as open_clip's ``text_global_pool`` finds it (``(text == eos_id).argmax``;
            ``argmax`` of CLIP's ids, whose end id is the largest). ``None``, or a caption
            without it: the last real token.
        start_tokens: the specials each caption begins with, never its end token: XLM-R's
            ``<s>`` is id 0, the id ``strip_sep_token`` writes over its ``</s>``.
    """
    if not sequences:
        raise ValueError('cannot tokenise an empty batch of captions')
    lengths = torch.tensor([len(seq) for seq in sequences], dtype=torch.long)
    if int(lengths.min()) == 0:
        raise ValueError('a caption tokenised to zero tokens')
    longest = int(lengths.max())
    if pad_to is not None and longest > pad_to:
        raise ValueError(f'a caption of {longest} tokens does not fit pad_to={pad_to}')
    width = longest if pad_to is None else pad_to
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        input_ids[row, :len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
    attention_mask = torch.arange(input_ids.shape[1])[None, :] < lengths[:, None]
    return TokenBatch(input_ids=input_ids, attention_mask=attention_mask,
                      eos_index=first_end_index(input_ids, attention_mask, end_id,
                                                start_tokens))


def first_end_index(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    end_id: int | None, start_tokens: int = 0) -> torch.Tensor:
    """``[B]`` first real position of ``end_id`` in ``input_ids`` ``[B, L]`` after the first
    ``start_tokens``, else the last real position (``attention_mask`` ``[B, L]``, True on real
    tokens)."""
    last = attention_mask.sum(1) - 1
    if end_id is None:
        return last
    after_start = torch.arange(input_ids.shape[1], device=input_ids.device) >= start_tokens
    ends = (input_ids == end_id) & attention_mask & after_start
    return torch.where(ends.any(1), ends.int().argmax(1), last)


class BaseTokenizer(metaclass=ABCMeta):
    """Caption strings -> :class:`TokenBatch`.

    Args:
        max_length: longest sequence kept, specials included; longer captions are cut to their
            first ``max_length`` ids with their end tokens (:meth:`end_count`) kept
            last, counted in :attr:`truncated` and reported once (a warning with the first
            one's length) per process.
        pad_to: pad every batch to this length (at least ``max_length``) instead of its longest
            caption; ``None`` (default) pads dynamically.
        pad_to_multiple_of: pad every batch to its longest caption rounded up to a multiple of
            this (at most ``max_length``), so that batches come in a few widths: a compiled
            step records one CUDA graph per width (docs/benchmarks.md, "A compiled step").
            ``None`` (default) or 1 pads to the longest caption.

    Attributes:
        writes_language_token: the ids of a caption depend on its language (NLLB's language-code
            token, :class:`NLLBTokenizer`); callers pass each caption's language (``langs``).
        start_tokens: how many specials :meth:`encode` writes before a caption's pieces: 1
            (``<s>``, ``[CLS]``, CLIP's start token, NLLB's language code), 0 for T5's
            tokenizers (SigLIP's, mT5's), which write only an end token.
        truncation_side: ``'right'`` keeps a long caption's first pieces, ``'left'`` its last
            ones (a Hugging Face tokenizer's own setting, :class:`HFTokenizer`).
        end_id: the end token's id, whose first position in a caption is its ``eos_index``
            (:func:`pad_batch`); ``None``: the last real token.
        pad_id_guessed: :attr:`pad_id` is a guess that neither the config nor the tokenizer's
            files name (a lone ``tokenizer.json``, :class:`HFTokenizer`).
        left_padded_by: where the tokenizer's own files pad on the left, as open_clip's
            ``HFTokenizer`` then pads them (``'<dir>/tokenizer_config.json padding_side'``,
            or its ``tokenizer_class``'s default); ``None``: they pad on the right. xmr pads
            every caption on the right, so a tower that reads its padding refuses such a
            tokenizer (:func:`~xmr.models.backbones.base.check_tokenizer_fits`).
    """

    writes_language_token: bool = False
    pad_id_guessed: bool = False
    end_id: int | None = None
    start_tokens: int = 1
    truncation_side: str = 'right'
    left_padded_by: str | None = None

    def __init__(self, max_length: int = 77, pad_to: int | None = None,
                 pad_to_multiple_of: int | None = None) -> None:
        if pad_to is not None and pad_to < max_length:
            raise ValueError(f'pad_to={pad_to} is shorter than max_length={max_length}: a long '
                             'caption would not fit')
        if pad_to_multiple_of is not None and (pad_to_multiple_of < 1 or pad_to is not None):
            raise ValueError(f'pad_to_multiple_of={pad_to_multiple_of} with pad_to={pad_to}: '
                             'give a multiple of at least 1 without pad_to (a fixed-context '
                             "tower, SigLIP's, sets pad_to to its context itself)")
        self.max_length = max_length
        self.pad_to = pad_to
        self.pad_to_multiple_of = pad_to_multiple_of
        self.truncated = 0
        self._unknown_reported: set[str | None] = set()

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can emit."""

    @property
    @abstractmethod
    def pad_id(self) -> int:
        """Id used for padding."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """One caption -> ids with the begin and end specials, untruncated."""

    @property
    def unk_id(self) -> int | None:
        """Id of the unknown token; ``None`` for a tokenizer without one (byte-level BPE)."""
        return None

    def vocabulary(self) -> Mapping[str, int] | bytes | None:
        """What the ids mean: token -> id, or the tokenizer model's bytes; ``None`` when the
        tokenizer cannot say (its checkpoints then do not record it)."""
        return None

    def vocabulary_digest(self) -> str | None:
        """A short SHA-256 of :meth:`vocabulary`, computed once. A checkpoint records it: the
        target embedding table's rows mean these ids, and another vocabulary of the same size
        (a SentencePiece model learned from another corpus) would read them as other tokens."""
        if not hasattr(self, '_vocabulary_digest'):
            self._vocabulary_digest = vocabulary_digest(self.vocabulary())
        return self._vocabulary_digest

    def end_count(self, ids: list[int]) -> int:
        """How many of ``ids``' last ids are end tokens that truncation keeps last: 1 (every
        tokenizer of xmr writes one); a Hugging Face tokenizer's are what its post-processor
        appends, none or several (mBART's ``</s> en_XX``)."""
        return 1

    def pieces(self, text: str) -> list[int]:
        """The ids of ``text`` without the specials :meth:`encode` writes around them: the
        :attr:`start_tokens` before, the end tokens (:meth:`end_count`) after."""
        ids = self.encode(text)
        return ids[self.start_tokens:len(ids) - self.end_count(ids)]

    def truncate(self, ids: list[int]) -> list[int]:
        """The first ``max_length`` ids; the end tokens (:meth:`end_count`) stay last, as
        Hugging Face's and open_clip's truncation keep them. With :attr:`truncation_side`
        ``'left'``: the :attr:`start_tokens`, then the last ids."""
        if len(ids) <= self.max_length:
            return ids
        end = self.end_count(ids)
        if not self.truncated:
            kept = ('it has no end token to keep' if not end else 'its end token kept'
                    if end == 1 else f'its {end} end tokens kept')
            print_log(f'{type(self).__name__}: a caption of {len(ids)} tokens is longer than '
                      f'max_length={self.max_length} and is truncated ({kept}); '
                      'later ones are counted in tokenizer.truncated, not reported again',
                      logger='current', level=logging.WARNING)
        self.truncated += 1
        if self.truncation_side == 'left':
            return ids[:self.start_tokens] + ids[len(ids) - self.max_length + self.start_tokens:]
        return ids[:self.max_length - end] + ids[len(ids) - end:]

    def padded_length(self, longest: int) -> int | None:
        """The width of a batch whose longest caption has ``longest`` tokens (specials included):
        ``pad_to``, else ``longest`` rounded up to a multiple of ``pad_to_multiple_of`` and at
        most ``max_length``; ``None``: ``longest`` itself."""
        if self.pad_to is not None or self.pad_to_multiple_of is None:
            return self.pad_to
        multiple = self.pad_to_multiple_of
        # Truncation keeps captions within max_length, which need not be a multiple.
        return min(-(-longest // multiple) * multiple, self.max_length)

    def encode_in(self, text: str, lang: str | None) -> list[int]:
        """One caption in language ``lang`` -> ids with specials, untruncated; only a tokenizer
        that :attr:`writes_language_token` reads ``lang``."""
        return self.encode(text)

    def __call__(self, texts: Sequence[str], langs: Sequence[str] | None = None) -> TokenBatch:
        """Tokenise and pad a batch.

        Args:
            texts: ``B`` captions.
            langs: the language of each caption (any code :mod:`xmr.datasets.languages`
                accepts), read by a tokenizer that :attr:`writes_language_token`; ``None``: its
                default language.

        Raises:
            TypeError: ``texts`` or ``langs`` a single string (it would be read as one
                caption, or one language, per character), or a caption that is no string
                (an annotation's missing caption: ``None``, NaN), named with its index.
            ValueError: ``langs`` of another length than ``texts``.
        """
        return self._batch(texts, langs, self.encode_in)

    def evaluation_batch(self, texts: Sequence[str],
                         langs: Sequence[str] | None = None) -> TokenBatch:
        """Tokenise an evaluation set's captions, every one of which its protocol ranks.

        As a call, except in a tokenizer whose cleaning can leave nothing of a caption
        (:class:`~xmr.models.language.cclm_tokenizer.CCLMTokenizer`): it refuses such a
        training caption, and encodes such an evaluation caption as the empty text
        (:meth:`evaluation_ids`).
        """
        return self._batch(texts, langs, self.evaluation_ids)

    def evaluation_ids(self, text: str, lang: str | None) -> list[int]:
        """One evaluation caption's ids with specials, untruncated: :meth:`encode_in`'s, except
        in a tokenizer whose cleaning can leave nothing of a caption, which encodes that one as
        the empty text."""
        return self.encode_in(text, lang)

    def _batch(self, texts: Sequence[str], langs: Sequence[str] | None,
               encode_in: Callable[[str, str | None], list[int]]) -> TokenBatch:
        """:meth:`__call__` with ``encode_in(text, lang)`` giving each caption's ids."""
        for name, given in (('texts', texts), ('langs', langs)):
            if isinstance(given, str):
                raise TypeError(f'{type(self).__name__}: {name}={given[:40]!r} is one string; '
                                f'pass a list of strings, one per caption ({name}=[...])')
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f'{type(self).__name__}: texts[{index}] is {text!r} '
                                f'({type(text).__name__}), not a string; a caption missing '
                                'from its annotation file?')
        if langs is None:
            langs = [None] * len(texts)
        elif len(langs) != len(texts):
            raise ValueError(f'{len(texts)} captions but {len(langs)} languages (langs gives '
                             'one language per caption)')
        sequences = [self.truncate(encode_in(text, lang)) for text, lang in zip(texts, langs)]
        if self.unk_id is not None:
            self._report_unknown(sequences, langs)
        return pad_batch(sequences, self.pad_id,
                         self.padded_length(max(map(len, sequences), default=0)), self.end_id,
                         self.start_tokens)

    def _report_unknown(self, sequences: Sequence[list[int]],
                        langs: Sequence[str | None]) -> None:
        """Warn, once per language and process, when more than
        :data:`UNKNOWN_SHARE_WARNING` of a language's tokens in a batch are :attr:`unk_id`: a
        vocabulary that never saw the language (a SentencePiece model learned from a corpus
        without it) reads its captions as strings of unknowns."""
        counts: dict[str | None, list[int]] = {}
        for ids, lang in zip(sequences, langs):
            unknown_and_all = counts.setdefault(lang, [0, 0])
            unknown_and_all[0] += ids.count(self.unk_id)
            unknown_and_all[1] += len(ids) - self.start_tokens - self.end_count(ids)
        for lang, (unknown, total) in counts.items():
            if lang in self._unknown_reported or unknown <= UNKNOWN_SHARE_WARNING * total:
                continue
            self._unknown_reported.add(lang)
            captions = f"the '{lang}' captions" if lang else 'the captions'
            print_log(f'{type(self).__name__}: {unknown} of the {total} tokens of {captions} in a '
                      'batch are unknown to its vocabulary, which does not cover the language; '
                      'give a tokenizer (and text tower) whose vocabulary does (for a '
                      'SentencePieceTokenizer, a model learned from a corpus holding the '
                      "language's captions)", logger='current',
                      level=logging.WARNING)


def check_max_length(tokenizer: BaseTokenizer, whose: str) -> None:
    """Refuse a ``max_length`` that keeps no piece of a caption: one of 0 or below slices
    nothing off (a caption's whole length then overflows the text tower's context at the
    first long batch, naming no key), one that its specials fill keeps every caption as the
    same few ids.

    Args:
        tokenizer: the tokenizer a model was built with.
        whose: the tokenizer's place, named in the message (``'the target language
            branch'``).

    Raises:
        ValueError: naming ``tokenizer.max_length``, its value and the least that keeps a piece.
    """
    least = tokenizer.start_tokens + 2
    length = tokenizer.max_length
    if isinstance(length, bool) or not isinstance(length, int) or length < least:
        raise ValueError(f'tokenizer.max_length={length!r} of {whose} keeps no piece of a '
                         f'caption: a {type(tokenizer).__name__} writes {tokenizer.start_tokens} '
                         'start token(s) and an end token; set tokenizer.max_length to an '
                         f'integer >= {least}')


def check_padding(tokenizer: BaseTokenizer, tower: TextTower, owner: str,
                  key: str = 'tokenizer', role: str = 'source') -> None:
    """Refuse a tokenizer of the tower's vocabulary whose padding the tower would read
    otherwise than it was trained: the source tokenizer
    (:func:`~xmr.models.backbones.base.check_tokenizer_fits`) and a target branch's on the
    tower's own table (:class:`~xmr.models.language.tower_embedding.TowerTokenEmbedding`).

    Args:
        tokenizer: the tokenizer.
        tower: the text tower its ids go to.
        owner: whose tower the message names (``'ViT-B-32'``, ``'the target-language
            branch'``).
        key: the tokenizer's config key, as the message names it.
        role: ``'source'`` or ``'target'``, as the message names the tokenizer.

    Raises:
        ValueError: a guessed padding id (``pad_id_guessed``) or padding on the left
            (``left_padded_by``) for a fixed-context tower that attends to its padding
            (SigLIP's), or a padding id other than the one the tower masks (both numbers
            named).
    """
    masks_padding = tower.pad_masked if tower.pad_masked is not None else not tower.causal
    if tower.fixed_context and not masks_padding and tokenizer.pad_id_guessed:
        raise ValueError(f'{key}.pad_id: the text tower of {owner} attends to its padding, '
                         f'and the {role} tokenizer guessed its pad id ({tokenizer.pad_id}): '
                         'its tokenizer_file names no pad token (no tokenizer_config.json '
                         "beside it); put the snapshot's tokenizer_config.json beside it, or "
                         f"set {key}.pad_id to the id open_clip pads with (SigLIP's T5 "
                         "vocabularies: 1, </s>; SigLIP 2's Gemma: 0, <pad>)")
    if tower.fixed_context and not masks_padding and tokenizer.left_padded_by:
        raise ValueError(f'{key} padding side: the text tower of {owner} attends to its '
                         f'padding, and the {role} tokenizer pads on the left '
                         f'({tokenizer.left_padded_by}), as open_clip then pads its captions; '
                         'xmr pads every caption on the right, which puts other tokens at the '
                         "position the tower pools: set \"padding_side\": \"right\" in that "
                         'tokenizer_config.json if the tower was trained so (big_vision pads '
                         'at the end)')
    if masks_padding and tower.pad_id is not None and tokenizer.pad_id != tower.pad_id:
        raise ValueError(f'{key} pads with id {tokenizer.pad_id} but the text tower of '
                         f'{owner} masks id {tower.pad_id} as padding')


@functools.lru_cache(maxsize=8)
def _open_clip_tokenizer(model_name: str) -> Any:
    """open_clip's tokenizer of ``model_name``, built once per process: reading CLIP's 48,894
    BPE merges takes 0.13 s, and a run builds its model more than once (training, its test, a
    gallery). The :class:`OpenCLIPTokenizer` built on it share it; open_clip's encoding changes
    nothing in it but its memo of the words it has split."""
    import open_clip

    return open_clip.get_tokenizer(model_name)


@TOKENIZERS.register_module()
class OpenCLIPTokenizer(BaseTokenizer):
    """open_clip's tokenizer of an architecture (CLIP's BPE ships with open_clip: no download).

    Args:
        model_name: open_clip architecture name, e.g. ``'ViT-B-32'``.
        max_length: context length (77 for CLIP).
        pad_to: fixed padded length (see :class:`BaseTokenizer`); ``None`` pads dynamically.
        pad_to_multiple_of: padded lengths in steps of this (see :class:`BaseTokenizer`).

    Raises:
        ValueError: an architecture open_clip does not know, or one whose tokenizer is a
            Hugging Face one (SigLIP, XLM-R CLIPs: :class:`HFTokenizer`).
    """

    def __init__(self, model_name: str = 'ViT-B-32', max_length: int = 77,
                 pad_to: int | None = None, pad_to_multiple_of: int | None = None) -> None:
        super().__init__(max_length, pad_to, pad_to_multiple_of)
        # Imported here: that module imports this one.
        from xmr.models.backbones.open_clip_pretrained import hf_tokenizer_name

        # From the config, before open_clip's tokenizer: offline it would fail to download a
        # Hugging Face tokenizer, and it reads an unknown name as CLIP's.
        hf_name = hf_tokenizer_name(model_name, None)
        if hf_name:
            raise ValueError(f"OpenCLIPTokenizer: open_clip's tokenizer of '{model_name}' is the "
                             f"Hugging Face tokenizer '{hf_name}', not CLIP's BPE; use "
                             f"HFTokenizer (name_or_path='{hf_name}', or tokenizer_file=...)")
        self.model_name = model_name
        self._tokenizer = _open_clip_tokenizer(model_name)
        inner = getattr(self._tokenizer, 'tokenizer', self._tokenizer)
        self._encode_body = inner.encode if hasattr(inner, 'encode') else None
        self._token_ids = getattr(inner, 'encoder', None)
        self._sot = getattr(self._tokenizer, 'sot_token_id', None)
        self._eot = getattr(self._tokenizer, 'eot_token_id', None)
        self._vocab = getattr(self._tokenizer, 'vocab_size', None) or len(
            getattr(inner, 'encoder', {})) or 49408
        if self._sot is None or self._eot is None or self._encode_body is None:
            raise ValueError(f"open_clip tokenizer of '{model_name}' is not a BPE tokenizer with "
                             'start/end tokens; use HFTokenizer for this architecture')
        # A caption's own '<end_of_text>' is this id too, and open_clip's argmax pools it.
        self.end_id = self._eot

    @property
    def vocab_size(self) -> int:
        return self._vocab

    @property
    def pad_id(self) -> int:
        return 0

    def encode(self, text: str) -> list[int]:
        return [self._sot, *self._encode_body(text), self._eot]

    def vocabulary(self) -> Mapping[str, int] | None:
        return self._token_ids


def vocabulary_digest(vocabulary: Mapping[str, int] | bytes | None) -> str | None:
    """The first 16 hex digits of the SHA-256 of ``vocabulary``: a model's bytes as they are,
    a token -> id mapping as the JSON list of its ``[token, id]`` pairs sorted by token;
    ``None`` for ``None``."""
    if vocabulary is None:
        return None
    # By the token alone: tokens are unique, so this is the pairs' own order (which every
    # checkpoint's digest was computed in), found in half the time.
    data = vocabulary if isinstance(vocabulary, bytes) else json.dumps(
        sorted(vocabulary.items(), key=operator.itemgetter(0)), ensure_ascii=False).encode()
    return hashlib.sha256(data).hexdigest()[:16]


class _Loaded(NamedTuple):
    """What :class:`HFTokenizer` reads of a loaded Hugging Face tokenizer."""

    encode: Callable[[str, bool], list[int]]  # (caption, with specials) -> ids
    size: int
    pad_id: int | None  # None: a lone tokenizer.json that names no pad token
    token_ids: dict[str, int]
    sep_id: int | None
    unk_id: int | None  # what it writes for a piece its vocabulary lacks; None: nothing
    backend: Any  # its ``tokenizers.Tokenizer``, if it has one
    truncation_side: str  # 'right' or 'left'
    left_padded_by: str | None  # what says the tokenizer pads on the left; None: right
    file: tuple[str, tuple[int, int, int]] | None  # the tokenizer.json of token_ids; None: hub's


class _TokenizerFile(NamedTuple):
    """A ``tokenizer.json`` as read: what xmr needs of it, its own settings taken first."""

    backend: Any  # its ``tokenizers.Tokenizer``, padding and truncation off
    vocab: dict[str, int]  # token -> id, special and added tokens included
    padding: dict[str, Any] | None  # the file's padding settings
    truncation_side: str | None  # the file's truncation direction; None: it truncates none
    unk_id: int | None
    key: tuple[str, tuple[int, int, int]]  # the path and version it was read at


#: The vocabulary digests of the latest ``tokenizer.json`` files read, by path and version: the
#: tokenizers built from one file share its vocabulary, a second to digest for XLM-R's 250k.
FILE_VOCABULARY_DIGESTS: RecentResults[str | None] = RecentResults(8)


@functools.lru_cache(maxsize=8)
def _read_tokenizer_file(path: str, version: tuple[int, int, int]) -> _TokenizerFile:
    """The ``tokenizer.json`` at ``path``, parsed once per process while its ``version``
    (inode, modification time, size) stays the same: XLM-R's or Gemma's 250k pieces take a
    second to parse and copy, and a run builds its tokenizers more than once. The tokenizers
    built from it share the returned backend and vocabulary and change neither."""
    from tokenizers import Tokenizer

    fast = Tokenizer.from_file(path)
    padding, truncation = fast.padding, fast.truncation
    fast.no_padding()
    fast.no_truncation()
    return _TokenizerFile(fast, fast.get_vocab(), padding,
                          None if truncation is None else truncation['direction'],
                          _file_unk_id(fast), (path, version))


def _open_tokenizer_file(path: Path) -> _TokenizerFile:
    """:func:`_read_tokenizer_file` of ``path``, a missing or foreign file named."""
    if path.is_dir():
        raise FileNotFoundError(f'tokenizer_file {path} is a folder: pass it as name_or_path, '
                                'or the tokenizer.json inside it as tokenizer_file')
    if not path.is_file():
        raise FileNotFoundError(f'tokenizer_file {path} does not exist')
    stat = path.stat()
    try:
        return _read_tokenizer_file(str(path.resolve()),
                                    (stat.st_ino, stat.st_mtime_ns, stat.st_size))
    except Exception as error:  # tokenizers raises a bare Exception naming no file
        raise ValueError(f'tokenizer_file {path} is not a `tokenizers` JSON file '
                         f'(tokenizer.json): {error}; pass the tokenizer.json of a Hugging Face '
                         'snapshot, not its tokenizer_config.json (a SentencePiece .model is '
                         "SentencePieceTokenizer's model_file)") from error


def _load_file(path: Path) -> _Loaded:
    """A ``tokenizers`` JSON file, read without the hub, its padding and truncation off."""
    read = _open_tokenizer_file(path)
    config_path = path.with_name('tokenizer_config.json')
    config = (json.loads(config_path.read_text(encoding='utf-8')) if config_path.is_file()
              else {})

    encode = functools.partial(_backend_encode, read.backend)
    _check_bos_eos_flags(config, config_path, path, encode, read.vocab)
    # Hugging Face truncates as the snapshot's config says, else as the file's settings do.
    truncation_side = config.get('truncation_side') or read.truncation_side or 'right'
    sep_id = next((read.vocab[t] for t in ('[SEP]', '</s>') if t in read.vocab), None)
    return _Loaded(encode, read.backend.get_vocab_size(),
                   _file_pad_id(config, read.padding, read.vocab), read.vocab, sep_id,
                   read.unk_id, read.backend, truncation_side,
                   _left_padded_by(config, config_path), read.key)


# Functions of the module, bound with functools.partial: a tokenizer goes to spawned dataloader
# workers by pickle (TokenizingCollate), which takes no function defined in another.
def _backend_encode(backend: Any, text: str, specials: bool) -> list[int]:
    """The ids a ``tokenizers.Tokenizer`` gives ``text``, with its specials or without."""
    return backend.encode(text, add_special_tokens=specials).ids


def _transformers_encode(hf: Any, text: str, specials: bool) -> list[int]:
    """The ids a transformers tokenizer gives ``text``, with its specials or without."""
    return hf(text, add_special_tokens=specials, verbose=False)['input_ids']


class TokenizerOutOfReach(FileNotFoundError):
    """A Hugging Face tokenizer by name that no local folder and no Hugging Face cache holds,
    the hub out of reach (offline); :func:`build_tokenizer` names the config key that gave it.
    """


def build_tokenizer(cfg: Mapping[str, Any], key: str) -> BaseTokenizer:
    """``TOKENIZERS.build(cfg)``, the tokenizer a config gives at ``key``
    (``'model.backbone.tokenizer'``, its default filled in where it gives none).

    Raises:
        TokenizerOutOfReach: ``<key>: <the tokenizer's own message>``: the tokenizer only
            knows its arguments, not the config key at fault (transformers' error the cause).
    """
    try:
        return TOKENIZERS.build(cfg)
    except TokenizerOutOfReach as error:
        raise TokenizerOutOfReach(f'{key}: {error}') from error.__cause__


def _load_hub(name_or_path: str, kind: str) -> _Loaded:
    """A hub name or local folder, through ``AutoTokenizer``, encoding with its
    ``tokenizer.json`` where it has one; ``kind`` (the tokenizer's class) names it when it
    cannot be fetched."""
    from transformers import AutoTokenizer

    hf = fetch_weights(
        lambda: AutoTokenizer.from_pretrained(name_or_path),
        f"{kind}(name_or_path='{name_or_path}'): the Hugging Face tokenizer",
        'give name_or_path a local folder holding its tokenizer files, or '
        'tokenizer_file=<its tokenizer.json> in its place, or fetch the folder once on a '
        f"machine with network (hf download {name_or_path} --include '*.json' --include "
        "'*.model' --include '*.txt' --local-dir <folder>); on a machine without network, "
        'HF_HUB_OFFLINE=1 fails here at once instead of retrying the hub (docs/backbones.md)',
        raised=TokenizerOutOfReach)

    tokenizer_json = _hub_file(name_or_path, 'tokenizer.json')
    # The snapshot's own pipeline, as transformers 4 ran it when the towers were trained:
    # transformers 5 rebuilds some classes' pre-tokenizers (XLM-R's splits on whitespace first,
    # dropping a caption's trailing space, newline or U+200F that the file writes as a '▁').
    file_backend = (None if tokenizer_json is None
                    else _open_tokenizer_file(tokenizer_json).backend)
    # No tokenizer.json (a SentencePiece model alone): as its class reads it.
    encode = (functools.partial(_transformers_encode, hf) if file_backend is None
              else functools.partial(_backend_encode, file_backend))
    config_path = _hub_file(name_or_path, 'tokenizer_config.json')
    config = ({} if config_path is None
              else json.loads(config_path.read_text(encoding='utf-8')))
    vocab = hf.get_vocab()
    _check_bos_eos_flags(config, config_path, tokenizer_json, encode, vocab)
    # No pad token named: None, so that HFTokenizer guesses as for a lone file and says so
    # (XLM-R's id 0 is <s>, the first token of every caption).
    return _Loaded(encode, len(hf), hf.pad_token_id, vocab, hf.sep_token_id, hf.unk_token_id,
                   file_backend or getattr(hf, 'backend_tokenizer', None), hf.truncation_side,
                   _left_padded_by(config, config_path), None)


def _hub_file(name_or_path: str, filename: str) -> Path | None:
    """``filename`` of a local tokenizer folder or of a hub snapshot in the local cache (where
    ``AutoTokenizer`` has just read it); ``None`` when there is none."""
    from transformers.utils.hub import cached_file

    found = cached_file(name_or_path, filename, local_files_only=True,
                        _raise_exceptions_for_missing_entries=False,
                        _raise_exceptions_for_connection_errors=False)
    return None if found is None else Path(found)


def _special_token(config: Mapping[str, Any], config_path: Path | None,
                   field: str) -> str | None:
    """The text of special token ``field`` (``'eos_token'``) as ``tokenizer_config.json``
    names it, else as the ``special_tokens_map.json`` beside it does (older snapshots keep
    their specials there); ``None`` where neither names it."""
    token = config.get(field)
    beside = None if config_path is None else config_path.with_name('special_tokens_map.json')
    if token is None and beside is not None and beside.is_file():
        token = json.loads(beside.read_text(encoding='utf-8')).get(field)
    return token.get('content') if isinstance(token, dict) else token


def _check_bos_eos_flags(config: Mapping[str, Any], config_path: Path | None,
                         tokenizer_json: Path | None,
                         encode: Callable[[str, bool], list[int]],
                         vocab: Mapping[str, int]) -> None:
    """Refuse a ``tokenizer_config.json`` whose ``add_bos_token`` / ``add_eos_token`` contradict
    what its ``tokenizer.json``'s post-processor writes around a caption.

    transformers 4 rebuilt the post-processor from these fields (a ``<bos>`` first, an
    ``<eos>`` last, as the fields say); transformers 5 (5.23, and open_clip's ``HFTokenizer``
    with it) keeps the ``tokenizer.json``'s (huggingface/transformers#42563). Where the two
    disagree (a LLaMA-style snapshot whose file writes ``<s>`` alone and whose config asks for
    ``</s>`` too), every caption gets other ids depending on the library version, and neither
    the file nor xmr can tell which ones the text tower was trained on.

    Raises:
        ValueError: naming ``config_path``, the field, its value, what the file writes and the
            fix; also a field set true whose token (``bos_token``, ``eos_token``, named by
            the config or the ``special_tokens_map.json`` beside it) the vocabulary lacks. A
            token neither names is not compared.
    """
    full = list(encode('x', True))
    for field, token_field, position in (('add_bos_token', 'bos_token', 0),
                                         ('add_eos_token', 'eos_token', -1)):
        token = _special_token(config, config_path, token_field)
        if field not in config or token is None:  # no field, or no token to compare with
            continue
        if config[field] and token not in vocab:
            raise ValueError(f'{config_path}: {field}=true, but its {token_field} {token!r} is '
                             'no token of the vocabulary; name one it holds or drop the field')
        writes = token in vocab and bool(full) and full[position] == vocab[token]
        if writes != bool(config[field]):
            where = 'first' if position == 0 else 'last'
            raise ValueError(
                f'{config_path}: {field}={str(config[field]).lower()}, but the post-processor '
                f'of {tokenizer_json or "its tokenizer"} writes {"a" if writes else "no"} '
                f'{token!r} {where} (ids of "x": {full}). transformers 4 wrote what the field '
                'says, transformers 5 and open_clip with it write what the file says, so the '
                'text tower may have been trained on either; make them agree with how it was '
                f'trained: drop {field} from tokenizer_config.json to keep the file\'s ids, or '
                "set the tokenizer.json's post_processor to what the field asks")


def _left_padded_by(config: Mapping[str, Any], config_path: Path | None) -> str | None:
    """What makes ``AutoTokenizer`` pad on the left: the config's ``padding_side``, else the
    default of its ``tokenizer_class`` (Gemma's and LLaMA's are ``'left'``); ``None``: right."""
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    named = f'{config_path or "tokenizer_config.json"} padding_side'
    if 'padding_side' in config:
        return f"{named}='left'" if config['padding_side'] == 'left' else None
    kind = config.get('tokenizer_class')
    cls = tokenizer_class_from_name(kind) if kind else None
    if getattr(cls, 'padding_side', 'right') == 'left':
        return f"{named} (unset: {kind}'s default, 'left')"
    return None


def _clean_function(clean: str | None) -> Callable[[str], str] | None:
    """open_clip's text cleaning named ``clean``, ``None`` for none."""
    if clean is None:
        return None
    from open_clip.tokenizer import get_clean_fn

    cleaners = ('whitespace', 'lower', 'canonicalize')
    if clean not in cleaners:
        raise ValueError(f'HFTokenizer clean={clean!r}: one of {cleaners} or None')
    return get_clean_fn(clean)


def _file_pad_id(config: Mapping[str, Any], padding: Mapping[str, Any] | None,
                 vocab: Mapping[str, int]) -> int | None:
    """The padding id a ``tokenizer.json`` names: its snapshot's ``tokenizer_config.json``
    (``pad_token``; ``config``, empty without one), else the file's ``padding`` settings;
    ``None`` when neither says (:func:`_guessed_pad_id`). ``vocab``: the file's."""
    pad = config.get('pad_token')
    pad = pad.get('content') if isinstance(pad, dict) else pad
    if pad in vocab:
        return vocab[pad]
    return None if padding is None else int(padding['pad_id'])


def _guessed_pad_id(token_ids: Mapping[str, int]) -> int:
    """The first of the usual pad tokens a vocabulary holds, else 0: a guess, right for Gemma
    (SigLIP 2) and XLM-R, wrong for SigLIP's T5 vocabularies, which open_clip pads with
    ``</s>`` = 1."""
    return next((token_ids[t] for t in ('<pad>', '[PAD]', '<|pad|>') if t in token_ids), 0)


#: The head of a ``tokenizers`` Unigram model's JSON state, its ``unk_id`` (``null``: none).
_UNIGRAM_UNK_ID = re.compile(rb'\{"type":"Unigram","unk_id":(null|\d+),')


def _file_unk_id(fast: Any) -> int | None:
    """The id a ``tokenizers`` model writes for a piece its vocabulary lacks (XLM-R's ``<unk>``,
    mBERT's ``[UNK]``); ``None`` for one that writes none (byte-level BPE)."""
    from tokenizers.models import Unigram

    model = fast.model
    if isinstance(model, Unigram):  # SentencePiece's (XLM-R, NLLB, T5): only its state says
        state = model.__getstate__()
        # The field precedes the vocabulary, whose JSON takes XLM-R's 0.3 s to parse.
        head = _UNIGRAM_UNK_ID.match(state)
        if head is not None:
            return None if head[1] == b'null' else int(head[1])
        return json.loads(state).get('unk_id')
    token = getattr(model, 'unk_token', None)
    return None if token is None else fast.token_to_id(token)


def _composes_first(normalizer: Any) -> bool:
    """Whether a ``tokenizers`` normalizer (or one inside its ``Sequence``) is a port of one
    whose reference composes a caption (NFC) before its own rules, which the port misses on
    decomposed (NFD) text, as macOS file names and some keyboards write it.

    ``Precompiled`` is SentencePiece's NFKC charsmap (XLM-R, NLLB): SentencePiece matches it
    longest first, ``tokenizers`` shortest first and drops the rest, so NFD 'ộ' becomes 'ọ'
    and NFD Hangul stays in jamo (huggingface/tokenizers#2116, #2334). ``BertNormalizer`` is
    BERT's (mBERT), whose Python ``BasicTokenizer`` NFC-normalises first and ``tokenizers``
    does not, so NFD captions come out ``[UNK]``.
    """
    from tokenizers import normalizers

    if isinstance(normalizer, normalizers.Sequence):
        return any(_composes_first(normalizer[i]) for i in range(len(normalizer)))
    return isinstance(normalizer, (normalizers.Precompiled, normalizers.BertNormalizer))


@TOKENIZERS.register_module()
class HFTokenizer(BaseTokenizer):
    """A Hugging Face tokenizer: a hub name / local folder, or a ``tokenizer.json`` file.

    Args:
        name_or_path: hub name or folder for ``AutoTokenizer.from_pretrained`` (e.g.
            ``'bert-base-multilingual-cased'``); its captions are encoded by the snapshot's
            ``tokenizer.json`` where it has one, as with ``tokenizer_file``.
        tokenizer_file: a ``tokenizers`` JSON file, loaded without the hub; its specials
            are its post-processor's, as ``AutoTokenizer`` of transformers 5 writes them
            (a ``tokenizer_config.json`` beside it that contradicts them with
            ``add_bos_token`` / ``add_eos_token`` is refused, on both routes:
            :func:`_check_bos_eos_flags`).
        max_length: longest sequence kept.
        lowercase: lower-case captions first (CCLM's retrieval recipe).
        pad_to: fixed padded length (see :class:`BaseTokenizer`); ``None`` pads dynamically.
        pad_to_multiple_of: padded lengths in steps of this (see :class:`BaseTokenizer`).
        clean: open_clip's text cleaning applied first (``'whitespace'``, ``'lower'`` or
            ``'canonicalize'``: lower case, punctuation removed, as SigLIP's tokenizer does), or
            ``None`` for the caption as it is.
        strip_sep_token: write id 0 in place of the separator token, as open_clip's tokenizer
            of the CLIPA models does (``tokenizer_kwargs.strip_sep_token``).
        strip: strip each caption's leading and trailing whitespace before anything else, as
            sentence-transformers' ``Transformer`` module does (with a SentencePiece vocabulary
            a trailing space or newline is one more token).
        pad_id: the padding id, where the tokenizer's own files do not say it. A
            ``tokenizer_file`` takes it from the ``tokenizer_config.json`` beside it (a Hugging
            Face snapshot's), else from its padding settings, else guesses the first of
            ``<pad>``, ``[PAD]``, ``<|pad|>`` (0 without): SigLIP's T5 vocabulary has ``<pad>``
            = 0 but its towers were trained padding with ``</s>`` = 1. A guess
            (:attr:`pad_id_guessed`) is refused by a text tower whose output depends on its
            padding (SigLIP's).

    Raises:
        TokenizerOutOfReach: a ``name_or_path`` that no local folder and no Hugging Face cache
            holds, the hub out of reach, naming it and the local routes (transformers' error
            its cause); :func:`build_tokenizer` puts the config key in front.
    """

    def __init__(self, name_or_path: str | None = None, tokenizer_file: str | None = None,
                 max_length: int = 77, lowercase: bool = False,
                 pad_to: int | None = None, clean: str | None = None,
                 strip_sep_token: bool = False, pad_to_multiple_of: int | None = None,
                 pad_id: int | None = None, strip: bool = False) -> None:
        super().__init__(max_length, pad_to, pad_to_multiple_of)
        if (name_or_path is None) == (tokenizer_file is None):
            raise ValueError('HFTokenizer needs exactly one of name_or_path or tokenizer_file')
        self.strip = strip
        self.strip_sep_token = strip_sep_token
        self.lowercase = lowercase
        self.clean = clean
        self._clean_fn = _clean_function(clean)
        loaded = (_load_file(Path(tokenizer_file)) if tokenizer_file is not None
                  else _load_hub(name_or_path, type(self).__name__))
        self._encode_fn = loaded.encode
        self._backend = loaded.backend
        self._file = loaded.file
        self._vocab = loaded.size
        #: the padding id is a guess (:func:`_guessed_pad_id`): neither ``pad_id`` nor the
        #: tokenizer's files name it; a tower whose output depends on it refuses the guess
        #: (:func:`~xmr.models.backbones.base.check_tokenizer_fits`).
        named = loaded.pad_id if pad_id is None else pad_id
        self.pad_id_guessed = named is None
        self._pad_id = _guessed_pad_id(loaded.token_ids) if named is None else named
        self._unk_id = loaded.unk_id
        #: captions are NFC-normalised first (:func:`_composes_first`): canonically equivalent
        #: captions then get the ids the reference tokenizer gives them.
        self.compose = loaded.backend is not None and _composes_first(loaded.backend.normalizer)
        #: token -> id, special and added tokens included.
        self.token_ids: dict[str, int] = loaded.token_ids
        self._strip_id: int | None = None
        if strip_sep_token:
            if loaded.sep_id is None:
                raise ValueError('HFTokenizer strip_sep_token=True but the tokenizer has no '
                                 'separator token ([SEP] or </s>)')
            self._strip_id = loaded.sep_id
        #: the ids the post-processor appends after a caption's pieces, which truncation keeps
        #: (none: it cuts such captions to their first ``max_length`` ids). Read from the
        #: tokenizer, not from a caption's last ids: a caption may end in a special token of
        #: its own (``<unk>`` for an unknown character) that is no end token.
        self.end_ids: list[int] = self._appended_ids()
        self.end_id: int | None = self.end_ids[-1] if self.end_ids else None
        self.start_tokens = self._prepended_count()
        self.truncation_side = loaded.truncation_side
        self.left_padded_by = loaded.left_padded_by

    @property
    def vocab_size(self) -> int:
        return self._vocab

    @property
    def pad_id(self) -> int:
        return self._pad_id

    @property
    def unk_id(self) -> int | None:
        return self._unk_id

    def vocabulary(self) -> Mapping[str, int]:
        return self.token_ids

    def vocabulary_digest(self) -> str | None:
        """The base's digest, computed once for every tokenizer read from the same
        ``tokenizer.json`` (:data:`FILE_VOCABULARY_DIGESTS`), unless a subclass lists another
        vocabulary than the file's."""
        if self._file is None or type(self).vocabulary is not HFTokenizer.vocabulary:
            return super().vocabulary_digest()
        return FILE_VOCABULARY_DIGESTS.get(self._file, super().vocabulary_digest)

    def pipeline_digest(self) -> str | None:
        """A short SHA-256 of the ``tokenizers`` pipeline that encodes the captions (its
        normaliser, pre-tokeniser, model and vocabulary, post-processor and added tokens),
        computed once; :meth:`vocabulary_digest` for a tokenizer without one. A feature cache's
        key holds it: another snapshot's file, or a library's rebuilt pipeline (transformers
        5's XLM-R, before xmr read the snapshot's own), gives some captions other ids."""
        if not hasattr(self, '_pipeline_digest'):
            self._pipeline_digest = (
                self.vocabulary_digest() if self._backend is None
                else hashlib.sha256(self._backend.to_str().encode()).hexdigest()[:16])
        return self._pipeline_digest

    def _appended_ids(self) -> list[int]:
        """The ids the post-processor writes after a caption's pieces (``</s>``; mBART's
        ``</s> en_XX``), as :meth:`encode` writes them."""
        pieces = list(self._encode_fn('x', False))
        full = list(self._encode_fn('x', True))
        appended = full[self._prepended_count() + len(pieces):]
        # strip_sep_token writes 0 over the separator: still an end token of the caption.
        return [0 if i == self._strip_id else i for i in appended]

    def _prepended_count(self) -> int:
        """How many ids the post-processor writes before a caption's pieces (0 for T5's)."""
        pieces = list(self._encode_fn('x', False))
        full = list(self._encode_fn('x', True))
        return next((start for start in range(len(full) - len(pieces) + 1)
                     if full[start:start + len(pieces)] == pieces), 0)

    def end_count(self, ids: list[int]) -> int:
        count = len(self.end_ids)
        return count if count and ids[-count:] == self.end_ids else 0

    def _prepare(self, text: str) -> str:
        """The caption as the tokenizer reads it: stripped, composed (:attr:`compose`), cleaned,
        lower-cased when asked."""
        if self.strip:
            text = text.strip()
        if self.compose:
            text = unicodedata.normalize('NFC', text)
        if self._clean_fn is not None:
            text = self._clean_fn(text)
        return text.lower() if self.lowercase else text

    def encode(self, text: str) -> list[int]:
        ids = list(self._encode_fn(self._prepare(text), True))
        if self._strip_id is not None:
            ids = [0 if i == self._strip_id else i for i in ids]
        return ids


@TOKENIZERS.register_module()
class NLLBTokenizer(HFTokenizer):
    """NLLB's tokenizer, each caption coded with its own language: ``[lang] pieces </s>``.

    NLLB (and open_clip's ``nllb-clip-*`` text towers) read a caption after the FLORES-200 code
    of its language (``deu_Latn``), a special token of the vocabulary; Hugging Face's
    ``NllbTokenizer`` and open_clip's ``HFTokenizer`` fix one ``src_lang`` per tokenizer.
    xmr's batches mix languages, so the code is written per caption from the ``langs`` the
    caller passes (:meth:`BaseTokenizer.__call__`), each mapped to FLORES-200 through
    :func:`xmr.datasets.languages.flores_code` (``de``, ``deu``, ``deu_Latn`` all give
    ``deu_Latn``). The pieces are the tokenizer's own, without its specials.

    Args:
        name_or_path: hub name or folder of an NLLB tokenizer
            (``'facebook/nllb-200-distilled-600M'``).
        tokenizer_file: the same tokenizer as a ``tokenizers`` JSON file (offline).
        max_length: longest sequence kept, both specials included (the language token and the
            end token survive truncation).
        pad_to: fixed padded length (see :class:`BaseTokenizer`); ``None`` pads dynamically.
        pad_to_multiple_of: padded lengths in steps of this (see :class:`BaseTokenizer`).
        clean: open_clip's text cleaning (``'whitespace'``, as open_clip's tokenizer of the
            nllb-clip models), or ``None``.
        language: the language of captions tokenised without ``langs`` (single captions such as
            a hard prompt's text, whose language token is dropped); ``'en'`` as NLLB's own
            default ``src_lang`` (``eng_Latn``).
        language_tokens: the FLORES-200 token to read a language with in place of its own,
            keyed by any accepted code: a language without one, as nllb-clip's evaluation of
            Crossmodal-3600 reads ``{'fil': 'tgl_Latn', 'quz': 'quy_Latn', 'no': 'nno_Latn'}``
            (the data keeps each language's own code, docs/data.md).

    Raises:
        ValueError: a tokenizer without ``</s>`` or without FLORES-200 language-code tokens, or
            a ``language_tokens`` value that is none of its language-code tokens.
        LanguageCodeError: a ``language`` NLLB has no token for (:meth:`language_id`), or an
            unknown code among the ``language_tokens`` keys.
    """

    writes_language_token = True

    def __init__(self, name_or_path: str | None = None, tokenizer_file: str | None = None,
                 max_length: int = 77, pad_to: int | None = None,
                 clean: str | None = 'whitespace', language: str = 'en',
                 pad_to_multiple_of: int | None = None,
                 language_tokens: Mapping[str, str] | None = None) -> None:
        super().__init__(name_or_path=name_or_path, tokenizer_file=tokenizer_file,
                         max_length=max_length, pad_to=pad_to, clean=clean,
                         pad_to_multiple_of=pad_to_multiple_of)
        source = name_or_path or tokenizer_file
        if '</s>' not in self.token_ids:
            raise ValueError(f'NLLBTokenizer: {source} has no </s> token; not an NLLB tokenizer')
        self.eos_id = self.token_ids['</s>']
        # It writes its own </s> (encode_in), whatever the file's post-processor appends.
        self.end_ids, self.end_id = [self.eos_id], self.eos_id
        #: FLORES-200 codes the vocabulary holds a token for.
        self.flores_codes = sorted(code for code in FLORES200_TO_CANONICAL
                                   if code in self.token_ids)
        if not self.flores_codes:
            raise ValueError(f'NLLBTokenizer: {source} has no FLORES-200 language-code token '
                             "(such as 'eng_Latn'); not an NLLB tokenizer, use HFTokenizer")
        #: canonical code -> the FLORES-200 token it is read with in place of its own.
        self.language_tokens = {
            normalize_language(lang, 'NLLBTokenizer language_tokens'): token
            for lang, token in (language_tokens or {}).items()}
        for lang, token in self.language_tokens.items():
            if token not in self.flores_codes:
                raise ValueError(f'NLLBTokenizer language_tokens: {lang!r} -> {token!r} is no '
                                 f'language-code token of {source}; give a FLORES-200 code it '
                                 f'holds (such as {self.flores_codes[0]!r})')
        self.language = language
        self.language_id(language)
        self.start_tokens = 1  # its language code (encode_in), whatever the file's post-processor

    def language_id(self, lang: str) -> int:
        """The id of ``lang``'s language-code token: ``'de'`` -> the id of ``deu_Latn``.

        Raises:
            LanguageCodeError: a code :func:`~xmr.datasets.languages.flores_code` cannot map
                (naming the accepted forms, and :attr:`language_tokens` for a known language),
                or a FLORES-200 language this vocabulary has no token for.
        """
        code = self.language_tokens.get(normalize_language(lang))
        if code is not None:
            return self.token_ids[code]
        try:
            code = flores_code(lang)
        except LanguageCodeError as error:
            raise LanguageCodeError(
                f"{error}; NLLBTokenizer(language_tokens={{{normalize_language(lang)!r}: "
                "'<FLORES-200 code>'}) reads it with another language's token") from error
        if code not in self.token_ids:
            raise LanguageCodeError(
                f"NLLBTokenizer: language {lang!r} is FLORES-200 {code!r}, which this NLLB "
                f'vocabulary has no token for; it codes {len(self.flores_codes)} of the '
                'languages in xmr.datasets.languages.FLORES200_TO_CANONICAL '
                f'({", ".join(self.flores_codes[:5])}, ...)')
        return self.token_ids[code]

    def encode(self, text: str) -> list[int]:
        """``[language] pieces </s>`` in the default :attr:`language`."""
        return self.encode_in(text, None)

    def encode_in(self, text: str, lang: str | None) -> list[int]:
        """``[lang] pieces </s>``; ``lang`` ``None`` is the default :attr:`language`."""
        pieces = self._encode_fn(self._prepare(text), False)
        return [self.language_id(self.language if lang is None else lang), *pieces, self.eos_id]


#: The SentencePiece models :class:`SentencePieceTokenizer` trains.
SENTENCEPIECE_MODEL_TYPES = ('unigram', 'bpe')


#: SentencePiece models learned in this process, by :func:`_learning_key`: a model built again
#: from its config (in a notebook, a sweep of one process, the tests' many builds) learns the
#: same bytes from the same corpus (one thread, input unshuffled), in 4 s for the demo's 40,000
#: captions. A test of a checkpoint reads the model the checkpoint carries instead.
LEARNED_MODELS: RecentResults[bytes] = RecentResults(4)


def _learning_key(lines: list[str], settings: tuple) -> str:
    """A SHA-256 of the captions (each with its length, so no two corpora share one) and the
    training ``settings``."""
    digest = hashlib.sha256(repr(settings).encode())
    for line in lines:
        data = line.encode('utf-8', 'surrogatepass')
        digest.update(len(data).to_bytes(8, 'little'))
        digest.update(data)
    return digest.hexdigest()


@TOKENIZERS.register_module()
class SentencePieceTokenizer(BaseTokenizer):
    """A SentencePiece tokenizer (unigram or BPE), loaded from a model file or trained on a
    corpus.

    Every caption is ``BOS ... EOS``, padded with the pad id. The ids are the model's own: one
    trained here has 0 = pad, 1 = unk, 2 = BOS, 3 = EOS; a model file trained elsewhere must
    define a pad, a BOS and an EOS piece (SentencePiece's defaults define no pad).

    Args:
        model_file: a trained ``.model`` file, or an xmr checkpoint, which carries the model its
            tokenizer learned (:mod:`~xmr.models.language.carried_vocabulary`); when missing
            and ``corpus`` is given, the model is trained and written there.
        corpus: captions to train on: a list of strings, a UTF-8 text file (one caption a
            line, as ``export_source_captions`` writes them: ``\\n`` or ``\\r\\n`` ends a line,
            a byte order mark is dropped, blank lines are skipped), or a ``FUNCTIONS`` config
            returning a list of strings.
        vocab_size: pieces to learn when training.
        max_length: longest sequence kept.
        character_coverage: SentencePiece's coverage (keep near 1 for CJK).
        pad_to: fixed padded length (see :class:`BaseTokenizer`); ``None`` pads dynamically.
        pad_to_multiple_of: padded lengths in steps of this (see :class:`BaseTokenizer`).
        model_type: the model trained on ``corpus``: ``'unigram'`` (SentencePiece's default,
            pieces scored by their likelihood, fewer kept where the corpus supports fewer) or
            ``'bpe'`` (merges of the most frequent pairs, as many as ``vocab_size`` asks for:
            the pieces of RoBERTa-style and GPT-style vocabularies). A model file carries its
            own type, whatever this says.

    Raises:
        ValueError: ``model_type`` of another name, naming the two SentencePiece trains.
    """

    def __init__(self, model_file: str | None = None,
                 corpus: Sequence[str] | str | dict | None = None, vocab_size: int = 1000,
                 max_length: int = 77, character_coverage: float = 0.9999,
                 pad_to: int | None = None, pad_to_multiple_of: int | None = None,
                 model_type: str = 'unigram') -> None:
        super().__init__(max_length, pad_to, pad_to_multiple_of)
        import sentencepiece as spm

        if model_type not in SENTENCEPIECE_MODEL_TYPES:
            raise ValueError(f'SentencePieceTokenizer model_type={model_type!r}: xmr trains '
                             f"{' or '.join(map(repr, SENTENCEPIECE_MODEL_TYPES))}")

        path = Path(model_file) if model_file else None
        lines = None
        if path is not None and path.is_file():
            proto = self._model_bytes(path)
        elif corpus is not None:
            lines = self._corpus_lines(corpus)
            settings = (vocab_size, character_coverage, model_type)
            proto = LEARNED_MODELS.get(_learning_key(lines, settings),
                                       lambda: self._train(lines, *settings))
            if path is not None:  # each process of a sweep through its own temporary file
                atomic_write_bytes(path, proto)
        else:
            raise FileNotFoundError(
                f'SentencePiece model_file {model_file} does not exist and no corpus was given '
                'to train one')
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=proto)
        except RuntimeError as error:  # its message names no file
            raise ValueError(f'SentencePiece model_file {model_file} is not a SentencePiece '
                             f'model ({error}); a tokenizer.json is HFTokenizer\'s '
                             'tokenizer_file') from error
        self._check_specials(model_file)
        if lines is not None:
            self._report_training(lines, spm.__version__, vocab_size)

    @staticmethod
    def _model_bytes(path: Path) -> bytes:
        """The model of a ``.model`` file, or the one an xmr checkpoint (a torch zip) carries."""
        if not zipfile.is_zipfile(path):
            return path.read_bytes()
        from xmr.models.language.carried_vocabulary import carried_model

        proto = carried_model(path)
        if proto is None:
            raise ValueError(f'SentencePiece model_file {path}: a checkpoint that carries no '
                             'SentencePiece model (written before checkpoints carried the '
                             'vocabulary their tokenizer learned, or of another tokenizer); '
                             'give the .model file, or the corpus it was learned from')
        return proto

    def _report_training(self, lines: list[str], version: str, asked: int) -> None:
        """Log how many of the corpus's captions the learned vocabulary cannot fit in
        ``max_length``; a warning when more than :data:`TRUNCATED_SHARE_WARNING` of them.

        The vocabulary depends on SentencePiece's version: on the synthetic corpus (Latin and CJK
        captions, 400 pieces) 0.2.2 spends it on long CJK phrases and cuts German and French
        captions into characters, 95% of them then longer than 40 tokens (0.2.3: 7%).
        """
        lengths = [len(self.encode(line)) for line in lines]
        share = sum(length > self.max_length for length in lengths) / len(lengths)
        message = (f'SentencePieceTokenizer: sentencepiece {version} learned {self.vocab_size} '
                   f'pieces from {len(lines)} captions; {share:.0%} of them are longer than '
                   f'max_length={self.max_length} tokens')
        if share > TRUNCATED_SHARE_WARNING and self.vocab_size < asked:
            # Trained without a hard limit, SentencePiece keeps no more pieces than the corpus
            # supports (a small corpus of few distinct words: 60 of 200 on 1,900 captions).
            print_log(f'{message} and will be truncated: raise max_length, or give a larger, '
                      f'more varied corpus (only {self.vocab_size} of the vocab_size={asked} '
                      'pieces asked for were learned from it, so a larger vocab_size adds none)',
                      logger='current', level=logging.WARNING)
        elif share > TRUNCATED_SHARE_WARNING:
            print_log(f'{message} and will be truncated: raise vocab_size or max_length '
                      '(or, on a corpus of several scripts, check the sentencepiece version: '
                      'setup.py asks for >=0.2.3)', logger='current', level=logging.WARNING)
        else:
            print_log(message, logger='current')

    def _check_specials(self, model_file: str | None) -> None:
        """Raise a ``ValueError`` naming the file and the special pieces its model lacks."""
        missing = [name for name, index in (('pad_id', self._sp.pad_id()),
                                            ('bos_id', self._sp.bos_id()),
                                            ('eos_id', self._sp.eos_id())) if index < 0]
        if missing:
            raise ValueError(f'SentencePiece model {model_file}: it defines no {", ".join(missing)}'
                             ', which SentencePieceTokenizer writes around and after every '
                             'caption; train it with them set (xmr trains with pad_id=0 '
                             'unk_id=1 bos_id=2 eos_id=3) or give a corpus to train one here')

    @staticmethod
    def _corpus_lines(corpus: Sequence[str] | str | dict) -> list[str]:
        if isinstance(corpus, dict):
            corpus = FUNCTIONS.build(corpus)
        if isinstance(corpus, str):
            from xmr.datasets.converters.raw_files import iter_lines

            source = Path(corpus)
            if not source.is_file():
                raise FileNotFoundError(f'SentencePiece corpus file {source} does not exist')
            # Lines as xmr writes and reads caption files: str.splitlines would also cut a
            # caption at a U+2028 or NEL inside it, and keep a byte order mark.
            return [line for line in iter_lines(source, 'SentencePiece corpus file',
                                                allow_empty_lines=True) if line]
        return [line for line in corpus if line]

    @staticmethod
    def _train(lines: list[str], vocab_size: int, character_coverage: float,
               model_type: str) -> bytes:
        import sentencepiece as spm

        # SentencePiece learns the characters of its normalised text (NFKC): decomposed Hangul
        # composes into syllables, full-width Latin folds into ASCII; its word boundary '▁'
        # stands for the spaces and is one of the 5 specials.
        normalizer = spm.SentencePieceNormalizer(rule_name='nmt_nfkc')
        characters = len({c for line in lines for c in normalizer.normalize(line)} - {'\u2581'})
        if vocab_size < characters + 5:
            raise ValueError(f'SentencePiece vocab_size {vocab_size} is smaller than the '
                             f'{characters} distinct characters of the corpus plus 5 specials '
                             "(counted after SentencePiece's NFKC normalisation, as it learns "
                             'them); raise vocab_size to at least '
                             f'{characters + 5}')
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
            character_coverage=character_coverage, model_type=model_type, pad_id=0, unk_id=1,
            bos_id=2, eos_id=3, hard_vocab_limit=False, num_threads=1, minloglevel=2,
            input_sentence_size=0, shuffle_input_sentence=False, seed_sentencepiece_size=100000)
        return model.getvalue()

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    @property
    def pad_id(self) -> int:
        return self._sp.pad_id()

    @property
    def unk_id(self) -> int:
        return self._sp.unk_id()

    @property
    def end_id(self) -> int:
        return self._sp.eos_id()

    def encode(self, text: str) -> list[int]:
        return [self._sp.bos_id(), *self._sp.encode(text), self._sp.eos_id()]

    def vocabulary(self) -> bytes:
        return self._sp.serialized_model_proto()
