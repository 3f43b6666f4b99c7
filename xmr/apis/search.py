"""Text-to-media search: a gallery index of media embeddings, queried in any trained language."""
from __future__ import annotations

import os
import re
import warnings
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from xmr.apis.inference import (
    EncodedGallery,
    MediaInput,
    NoMediaReadError,
    encode_gallery,
    encode_gallery_in_parts,
    encode_text_tokens,
    media_encoding,
    media_list,
)
from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.engine.checkpoint import CheckpointReadError, read_checkpoint
from xmr.evaluation.search import FaissSearcher
from xmr.evaluation.token_scoring import TokenScore, TokenSet, pairwise_token_scores
from xmr.fileio import atomic_torch_save, remove_stale_temporaries
from xmr.models.retrievers.base import BaseRetriever, unit_rows
from xmr.utils.counts import is_count
from xmr.version import provenance, written_by

#: What :meth:`MediaIndex.save` writes as the file's ``format``.
INDEX_FORMAT = 'xmr-media-index/2'
#: The formats :meth:`MediaIndex.load` reads: ``/1`` was written before galleries kept their
#: media's retrieval tokens (it holds none).
READABLE_FORMATS = ('xmr-media-index/1', INDEX_FORMAT)
#: The dtypes a gallery stores its media's retrieval tokens in (``token_dtype``): float32, as
#: evaluation scores them, or float16, in half the bytes (scored in float32 all the same). The
#: format stays ``/2``: a float16 file holds the same records, and the readers of ``/2`` before
#: it searched it alike (every token score is given float32 blocks).
TOKEN_DTYPES = (torch.float32, torch.float16)
#: What to do with an index file that cannot be searched: build it again from its media
#: (:func:`_rebuild`).
_REBUILD = ('build it again from its media: python tools/search.py CONFIG CHECKPOINT --media '
            'MEDIA... --index {index}, or MediaIndex.from_media(model, media).save() '
            '(docs/evaluation.md, "From the command line")')
#: The C++ function and source line that open a faiss error's message.
_FAISS_WHERE = re.compile(r'^Error in .*? at \S+?:\d+: ', re.DOTALL)
#: How much of a file :func:`written_as_media_index` reads: a saved index names its format
#: about 90 bytes in.
_FORMAT_PROBE_BYTES = 4096

__all__ = ['INDEX_FORMAT', 'READABLE_FORMATS', 'TOKEN_DTYPES', 'SearchHit', 'MediaIndex',
           'written_as_media_index']


@dataclass(frozen=True)
class SearchHit:
    """One retrieved media.

    Attributes:
        media_id: the id the gallery gave the media.
        score: the model's score of query and media: the cosine of their embeddings, or its
            token score (:attr:`MediaIndex.tokens`).
    """

    media_id: str
    score: float


class MediaIndex:
    """A searchable gallery: media embeddings behind a :class:`FaissSearcher`.

    Encode the gallery once, then query it with text in any language the model was trained on::

        model = init_retriever('configs/demo/static_tiny-clip_synthetic.py', 'best.pth')
        index = MediaIndex.from_media(model, ['a.jpg', 'b.jpg', 'clip.mp4'])
        hits = index.search(model, 'zwei rote Kreise', lang='de', k=2)[0]
        # [SearchHit(media_id='b', score=0.41), SearchHit(media_id='clip', score=0.17)]

    A model that scores a pair from its tokens (``model.token_score()``: CDDS's patch–word
    matching, ``DualEncoderRetriever(retrieval_score='patch_word')``) is searched as its
    evaluation ranks: the gallery keeps each media's retrieval tokens (:attr:`tokens`) and
    :meth:`search` re-ranks the pooled cosine's best ``candidates`` by the token score, or
    scores the whole gallery (``candidates=None``, evaluation's ``scoring='tokens'``).

    Args:
        embeddings: ``[G, E]`` media embeddings; L2-normalised here, so that scores are cosine
            similarities whatever their norms.
        media_ids: one unique id per row.
        index: ``'flat'`` (exact, default), ``'ivf'`` or ``'hnsw'`` (approximate, for large
            galleries).
        tokens: the media's retrieval tokens, ``G`` sequences in row order (a
            :class:`~xmr.evaluation.token_scoring.TokenSet`, or ``[L_g, D]`` tensors), for a
            model that scores by them; ``None``: ranked by the cosine of the embeddings.
        token_dtype: what the tokens are stored in (:data:`TOKEN_DTYPES`): ``torch.float32``
            (default, as evaluation scores them) or ``torch.float16``, half the bytes, each
            token score within ``2^-10`` of float32's (the blocks scored are upcast); unused
            without tokens.
        **search_options: further :class:`FaissSearcher` options (``nprobe``, ``ef_search``, ...).

    Attributes:
        tokens: the media's retrieval tokens (a :class:`~xmr.evaluation.token_scoring.TokenSet`
            of ``G`` sequences in :attr:`token_dtype`: ``P x D x 4`` bytes a media in float32,
            400 KB for ViT-B/16's 197 patches of 512, half in float16), or ``None``.
        encoded_by: what the embeddings depend on (:func:`~xmr.apis.media_encoding`), for an
            index :meth:`from_media` encoded: ``backbone`` (the model's backbone fingerprint:
            its weights; a language's adapters change nothing of the media embeddings),
            ``transform`` and ``num_frames``, and ``media_tokens`` (``True`` where the gallery
            keeps its media's tokens, ``False`` where it was built without them for a model
            that scores by them); ``None`` for embeddings given.
        skipped: the media the last :meth:`from_media` or :meth:`add_media` left out
            (``on_corrupt='skip'``), each a
            :class:`~xmr.datasets.corrupt_policy.SkippedMedia` (its position in the media
            given, file, reason); not saved.
    """

    encoded_by: dict[str, Any] | None = None
    skipped: Sequence[SkippedMedia] = ()
    #: The models :meth:`search` has found to be the gallery's encoder (:meth:`check_encoder`).
    _searched_by: weakref.WeakSet | None = None

    def __init__(self, embeddings: Tensor, media_ids: Sequence[str], index: str = 'flat',
                 tokens: TokenSet | Sequence[Tensor] | None = None,
                 token_dtype: torch.dtype = torch.float32, **search_options: Any) -> None:
        embeddings, media_ids = _checked_rows(embeddings, media_ids)
        tokens = _checked_tokens(tokens, media_ids, _checked_token_dtype(token_dtype))
        self.searcher = FaissSearcher(embeddings, index=index, ids=media_ids, **search_options)
        self.media_ids = media_ids
        self.tokens = tokens

    @classmethod
    def from_media(cls, model: BaseRetriever, media: MediaInput | Sequence[MediaInput],
                   media_ids: Sequence[str] | None = None, index: str = 'flat',
                   transform: Mapping[str, Any] | None = None, num_frames: int = 12,
                   batch_size: int = 32, on_corrupt: str = 'raise', progress: bool = False,
                   parts: str | os.PathLike | None = None, part_size: int = 256,
                   num_workers: int = 0, tokens: bool | None = None,
                   token_dtype: torch.dtype = torch.float32,
                   **search_options: Any) -> MediaIndex:
        """Encode media with the model (:func:`~xmr.apis.encode_media`) and index them.

        Args:
            model: a trained retriever.
            media: one image/video file, or several files or uint8 tensors.
            media_ids: an id per media; default: the file name without suffix, or the position
                for tensors.
            index: faiss index type.
            transform: media transform config (see :func:`~xmr.apis.encode_media`).
            num_frames: frames per video file.
            batch_size: media per forward pass.
            on_corrupt: ``'raise'`` stops on a file that cannot be read; ``'skip'`` warns and
                leaves it out of the index, listed in :attr:`skipped`
                (:func:`~xmr.apis.encode_readable_media`).
            progress: show the media read so far, the rate and the time left on stderr.
            parts: a folder where the embeddings are saved ``part_size`` media at a time while
                they are encoded; the same call run again after an interruption encodes only
                the media not saved there, and builds the index an uninterrupted call builds
                (:func:`~xmr.apis.encode_media_in_parts`). Remove it once the index is saved
                (:meth:`~xmr.apis.encoding_parts.EncodingParts.remove`).
            part_size: media per saved part.
            num_workers: processes decoding the files while the model encodes
                (:func:`~xmr.apis.encode_media`).
            tokens: keep the media's retrieval tokens, for :meth:`search` to rank by the
                model's token score; default: when the model scores by them
                (``model.token_score()``). ``False`` makes a gallery of ``E`` floats a media,
                ranked by the pooled cosine.
            token_dtype: what the tokens are stored in, ``torch.float32`` or ``torch.float16``
                (half the bytes; the class's ``token_dtype``). The model's float32 tokens are
                written, converted, into the gallery's set as they are encoded (the parts
                keep them as encoded): building holds the tokens once, in this dtype.
            **search_options: :class:`FaissSearcher` options.

        Raises:
            ValueError: ``tokens=True`` for a model that scores by embeddings alone, or another
                ``token_dtype``; before any media is encoded.
        """
        _checked_token_dtype(token_dtype)
        media = media_list(media)
        tokens = model.token_score() is not None if tokens is None else tokens
        encoded, read_ids = _encode(model, media, _media_ids(media, media_ids), transform,
                                    num_frames, batch_size, on_corrupt, progress, parts,
                                    part_size, num_workers, tokens, token_dtype)
        gallery = cls(encoded.embeddings, read_ids, index=index, tokens=encoded.tokens,
                      token_dtype=token_dtype, **search_options)
        gallery.skipped = encoded.skipped
        gallery.encoded_by = media_encoding(model, transform, num_frames, tokens)
        if not tokens and model.token_score() is not None:
            # Left out on purpose: its searches by the pooled cosine need no warning.
            gallery.encoded_by['media_tokens'] = False
        return gallery

    def add(self, embeddings: Tensor, media_ids: Sequence[str],
            tokens: TokenSet | Sequence[Tensor] | None = None) -> None:
        """Append media to the gallery: ``[N, E]`` ``embeddings`` (L2-normalised here) of
        media whose ids it does not hold yet, and their retrieval ``tokens`` (``N`` sequences)
        when the gallery keeps them (and only then), converted to its :attr:`token_dtype` (a
        model encodes in float32: a float16 gallery grown is one built so at once). An
        ``'ivf'`` index files them in the cells it was trained on: a gallery grown far beyond
        what it was built on is better built again."""
        embeddings, media_ids = _checked_rows(embeddings, media_ids)
        self._check_new(media_ids)
        if (tokens is None) != (self.tokens is None):
            raise ValueError('this gallery keeps its media\'s retrieval tokens: give the new '
                             'media\'s as tokens' if self.tokens is not None else
                             'this gallery keeps no retrieval tokens (it is ranked by the cosine '
                             'of the embeddings): add the embeddings alone, or build a gallery '
                             'with tokens (MediaIndex.from_media(..., tokens=True))')
        tokens = _checked_tokens(tokens, media_ids, self.token_dtype or torch.float32)
        self.searcher.add(embeddings, media_ids)
        self.media_ids += media_ids
        if tokens is not None:
            self.tokens = TokenSet.cat([self.tokens, tokens])

    def remove(self, media_ids: str | Sequence[str]) -> None:
        """Drop media from the gallery (their files deleted, say): one id or several; the
        others keep their order and are found as before (:meth:`FaissSearcher.keep`).

        Raises:
            ValueError: an id the gallery does not hold, or all of them (a gallery cannot be
                empty).
        """
        dropped = {media_ids} if isinstance(media_ids, str) else set(map(str, media_ids))
        unknown = sorted(dropped - set(self.media_ids))
        if unknown:
            raise ValueError(f'media {unknown[:10]} are not in the gallery')
        rows = [row for row, media_id in enumerate(self.media_ids) if media_id not in dropped]
        if not rows:
            raise ValueError(f'removing all {len(self)} media would leave the gallery empty: '
                             'build one of the media you have')
        self.searcher.keep(rows)
        self.media_ids = [self.media_ids[row] for row in rows]
        if self.tokens is not None:
            self.tokens = self.tokens.select(torch.tensor(rows))

    def add_media(self, model: BaseRetriever,
                  media: MediaInput | Sequence[MediaInput],
                  media_ids: Sequence[str] | None = None, batch_size: int = 32,
                  on_corrupt: str = 'raise', progress: bool = False,
                  parts: str | os.PathLike | None = None, part_size: int = 256,
                  num_workers: int = 0) -> None:
        """Encode media as the gallery's were (its :attr:`encoded_by`: the same backbone,
        transform and frames) and :meth:`add` them; those left out are in :attr:`skipped`
        (with ``on_corrupt='skip'``, new media none of which can be read add nothing).
        Arguments as :meth:`from_media`'s.

        Raises:
            ValueError: a gallery of embeddings given (nothing says how to encode alike), a
                model of another backbone, or media ids the gallery holds; all before any
                media is encoded.
        """
        if self.encoded_by is None:
            raise ValueError('this gallery was built from embeddings given, not encoded here: '
                             'encode the new media as its were, then MediaIndex.add them')
        self.check_encoder(model)
        media = media_list(media)
        new_ids = _media_ids(media, media_ids)
        self._check_new(new_ids, given=media_ids is not None)
        transform, num_frames = self.encoded_by['transform'], self.encoded_by['num_frames']
        try:
            encoded, read_ids = _encode(model, media, new_ids, transform, num_frames, batch_size,
                                        on_corrupt, progress, parts, part_size, num_workers,
                                        self.tokens is not None,
                                        self.token_dtype or torch.float32)
        except NoMediaReadError as error:
            self.skipped = error.skipped
            return
        self.skipped = encoded.skipped
        self.add(encoded.embeddings, read_ids, encoded.tokens)

    def _check_new(self, media_ids: Sequence[str], given: bool = True) -> None:
        """Refuse ids the gallery holds already; ``given=False``: ids made of the media (file
        stems, positions), which are to be given instead."""
        known = set(self.media_ids)
        present = [media_id for media_id in media_ids if media_id in known]
        if present:
            fix = ('add only new media, or build the gallery anew' if given else
                   'they are the ids made of the media (file names without suffix, positions '
                   'for tensors): pass media_ids, ids the gallery does not hold')
            raise ValueError(f'media {present[:10]} are in the gallery already: {fix}')

    def save(self, path: str | os.PathLike) -> Path:
        """Write the index to one file (atomically: an earlier file there stays whole until the
        new one is), for :meth:`load` to search again without encoding the gallery again: the
        faiss index as built, the media ids, their retrieval tokens where kept, :attr:`encoded_by`
        and the xmr that wrote it.

        Temporaries of earlier saves killed as they wrote are removed from its folder first.

        Returns:
            ``path``.
        """
        remove_stale_temporaries(Path(path).parent)
        tokens = (None if self.tokens is None
                  else dict(tokens=self.tokens.tokens, mask=self.tokens.mask))
        return atomic_torch_save(dict(format=INDEX_FORMAT, media_ids=self.media_ids,
                                      searcher=self.searcher.state_dict(), media_tokens=tokens,
                                      encoded_by=self.encoded_by, **provenance()), path)

    @classmethod
    def load(cls, path: str | os.PathLike,
             model: BaseRetriever | None = None) -> MediaIndex:
        """The index :meth:`save` wrote (an approximate one as it was built, not trained
        again), read weights-only.

        Every fault is named with the file and, for a file that cannot be searched, the
        command that builds it again (:func:`_rebuild`), before anything is searched.

        Args:
            path: the file.
            model: the retriever that will query it: refused unless its backbone is the one
                that encoded the gallery (:attr:`encoded_by`) and embeds in as many dimensions;
                a model trained on more languages since, on the same backbone, is accepted.

        Raises:
            FileNotFoundError: no such file (naming the folder when it is the folder that is
                missing), or a folder.
            CheckpointReadError: (a ``ValueError``) an empty, truncated or foreign file.
            ValueError: a file that is no media index, one of another format version (naming
                the xmr that wrote it), one whose faiss index does not deserialise or holds
                another row count than its ids, or a model that did not encode it.
        """
        path = Path(path)
        _check_index_exists(path)
        try:
            # Mapped: a gallery's media tokens (400 KB a ViT-B/16 image) are read from the
            # file as a search's candidates need them, not held in memory whole.
            state = read_checkpoint(path, 'media index', fix='give a file MediaIndex.save '
                                    'wrote (tools/search.py --index)', mmap=True)
        except CheckpointReadError as error:
            raise CheckpointReadError(f'{error}; or {_rebuild(path)}') from error
        _check_format(state, path)
        gallery = cls.__new__(cls)
        gallery.searcher = _read_searcher(state, path)
        gallery.media_ids, gallery.encoded_by = list(state['media_ids']), state['encoded_by']
        rows = gallery.searcher.gallery_size
        if rows != len(gallery.media_ids):  # its searches would name other media
            raise _damaged(path, f'its faiss index holds {rows} embeddings and it names '
                                 f'{len(gallery.media_ids)} media')
        tokens = state.get('media_tokens')
        gallery.tokens = None if tokens is None else TokenSet(tokens['tokens'], tokens['mask'])
        if gallery.tokens is not None and len(gallery.tokens) != rows:
            raise _damaged(path, f'it holds the tokens of {len(gallery.tokens)} media and '
                                 f'names {rows}')
        if model is not None:
            gallery.check_encoder(model, where=str(path))
        return gallery

    def _check_searched_by(self, model: BaseRetriever) -> None:
        """:meth:`check_encoder` at a model's first search: a fingerprint hashes the backbone's
        weights (seconds for a ViT-L), which its later searches leave as they were."""
        if self._searched_by is None:
            self._searched_by = weakref.WeakSet()
        if model not in self._searched_by:
            self.check_encoder(model)
            self._searched_by.add(model)

    def check_encoder(self, model: BaseRetriever, where: str = 'the index') -> None:
        """Refuse a ``model`` whose backbone did not encode the gallery: its queries would be
        scored against another model's media embeddings. An index of embeddings given (no
        :attr:`encoded_by`) passes if the model embeds in as many dimensions.

        Raises:
            ValueError: naming both widths, or both backbone fingerprints.
        """
        width = getattr(model.backbone, 'embed_dim', None)
        if width is not None and width != self.searcher.dim:
            # Checked first, and for an index of embeddings given too: its queries would stop
            # in faiss naming no index ('queries have dimension 512, the gallery 256').
            raise ValueError(f'{where}: its media embeddings have {self.searcher.dim} '
                             f'dimensions, the model embeds in {width}: encode the gallery with '
                             'this model (MediaIndex.from_media; tools/search.py --media ... '
                             '--index ... --overwrite), or query with the model that encoded it')
        if self.encoded_by is None:
            return
        now = media_encoding(model, self.encoded_by['transform'], self.encoded_by['num_frames'])
        fix = ('encode the gallery with this model (MediaIndex.from_media), or query with the '
               'model that encoded it')
        if now['backbone'] != self.encoded_by['backbone']:
            raise ValueError(f"{where}: its media were encoded by backbone "
                             f"{self.encoded_by['backbone']}, the model's is {now['backbone']} "
                             f'(other weights): {fix}')
        if now.get('media_head') != self.encoded_by.get('media_head'):
            raise ValueError(f'{where}: its media embeddings passed, after the backbone, through '
                             f"{self.encoded_by.get('media_head') or 'nothing'}, the model's "
                             f"through {now.get('media_head') or 'nothing'} (other weights or "
                             f'another model): {fix}')

    @property
    def token_dtype(self) -> torch.dtype | None:
        """What the media's retrieval tokens are stored in (saved and loaded as they are),
        ``None`` for a gallery without tokens."""
        return None if self.tokens is None else self.tokens.tokens.dtype

    def __len__(self) -> int:
        return self.searcher.gallery_size

    def __repr__(self) -> str:
        # A gallery shown in a notebook or a log says what it holds and which backbone's
        # queries it answers, not an object address.
        encoder = ('encoded_by=None' if self.encoded_by is None
                   else f"backbone={self.encoded_by['backbone']!r}")
        tokens = ('' if self.tokens is None else
                  f", with media tokens ({str(self.token_dtype).removeprefix('torch.')})")
        return (f'{type(self).__name__}({len(self)} media, {self.searcher.dim} dims, '
                f'index={self.searcher.index_type!r}{tokens}, {encoder})')

    def search(self, model: BaseRetriever, queries: str | Sequence[str], lang: str,
               k: int = 10, candidates: int | None = 100) -> list[list[SearchHit]]:
        """The ``k`` best media for each text query, as the model's evaluation ranks them.

        A model that scores by tokens (``model.token_score()``) searching a gallery that keeps
        them (:attr:`tokens`) ranks by its token score: the ``candidates`` media of highest
        pooled cosine (the faiss index's) re-ordered by it, as evaluation's
        ``scoring='tokens_rerank'`` does (a media outside them is not found), or with
        ``candidates=None`` the whole gallery scored, as ``scoring='tokens'`` does (every
        media's tokens meet every query's: ``G x P x W x D`` multiply-adds a query). Any other
        pair is ranked by the cosine of the embeddings, ``candidates`` unused
        (:meth:`ranks_by_tokens`); a gallery without tokens searched by a model that scores by
        them warns so, unless it was built without them on purpose (``from_media(tokens=False)``,
        recorded as ``encoded_by['media_tokens'] = False``).

        Args:
            model: the retriever that encoded the gallery.
            queries: one query or several, in ``lang``.
            lang: the queries' language; one the model was trained on.
            k: hits per query (at most the gallery size).
            candidates: media re-ranked by the token score per query (at least ``k`` are), or
                ``None`` for all.

        Returns:
            Per query, its hits in decreasing score order.

        Raises:
            ValueError: a model whose backbone did not encode the gallery (or another media
                head: :meth:`check_encoder`, at its first search), an untrained language
                (listing the trained ones), a bad ``k`` or ``candidates``, or a token score
                that is NaN.
        """
        self._check_searched_by(model)
        k = _checked_count(k, 'k')
        if candidates is not None:
            candidates = _checked_count(candidates, 'candidates')
        by_tokens = self.ranks_by_tokens(model)
        if model.token_score() is not None and not by_tokens and (
                self.encoded_by or {}).get('media_tokens') is not False:
            warnings.warn('this gallery keeps no media tokens (saved before xmr kept them, or '
                          'built of embeddings given): it is ranked by the pooled cosine, not by '
                          f'the token score {type(model).__name__} is evaluated with; build it '
                          'again from its media to rank as evaluation does (MediaIndex.from_media '
                          'keeps them; tools/search.py --media ... --index ... --overwrite)',
                          stacklevel=2)
        embeddings, query_tokens = encode_text_tokens(model, queries, lang, tokens=by_tokens)
        if not by_tokens:
            return self.search_embeddings(embeddings, k)
        device = next(model.parameters(), torch.empty(0)).device
        return self._ranked_by_tokens(model.token_score(), embeddings, query_tokens, k,
                                      candidates, device)

    def ranks_by_tokens(self, model: BaseRetriever) -> bool:
        """Whether :meth:`search` ranks ``model``'s queries by its token score: the model
        scores by tokens and the gallery keeps its media's; else by the pooled cosine."""
        return model.token_score() is not None and self.tokens is not None

    def _ranked_by_tokens(self, score: TokenScore, queries: Tensor, query_tokens: TokenSet,
                          k: int, candidates: int | None,
                          device: torch.device) -> list[list[SearchHit]]:
        """Each query's ``k`` best media by the token ``score``, among the ``candidates`` of
        highest cosine of its ``[Q, E]`` embedding (all media for ``None``), scored on
        ``device``."""
        if candidates is None:
            every = pairwise_token_scores(score, self.tokens, query_tokens, device=device).T
            scored = [(torch.arange(len(self)), scores) for scores in every]
        else:
            _, shortlists = self.searcher.search(_unit_rows(queries, 'queries'),
                                                 min(max(k, candidates), len(self)))
            # An approximate index may find fewer (-1 rows).
            scored = [(rows, pairwise_token_scores(score, self.tokens.select(rows),
                                                   query_tokens.select(slice(query, query + 1)),
                                                   device=device)[:, 0])
                      for query, rows in enumerate(row[row >= 0] for row in shortlists)]
        return [self._best(query, rows, scores, k) for query, (rows, scores) in enumerate(scored)]

    def _best(self, query: int, rows: Tensor, scores: Tensor, k: int) -> list[SearchHit]:
        """The ``k`` best of a query's ``[N]`` scored gallery ``rows``.

        Raises:
            ValueError: a NaN score, naming the query and the media.
        """
        if bool(scores.isnan().any()):
            raise ValueError(f'query {query}: the token score is NaN for media '
                             f'{[self.media_ids[row] for row in rows[scores.isnan()][:10]]}: a '
                             'NaN score has no rank; check the model and those media')
        # Stable: media of equal scores keep the pooled cosine's (or the gallery's) order.
        order = scores.sort(descending=True, stable=True).indices[:k]
        return [SearchHit(self.media_ids[rows[i]], float(scores[i])) for i in order.tolist()]

    def search_embeddings(self, queries: Tensor | Any, k: int = 10) -> list[list[SearchHit]]:
        """Like :meth:`search`, for ``[Q, E]`` query embeddings computed elsewhere (a tensor or
        an array; L2-normalised here), ranked by the cosine of the embeddings."""
        k = _checked_count(k, 'k')
        queries = torch.as_tensor(queries)
        if queries.dim() == 2 and queries.shape[1] != self.searcher.dim:
            raise ValueError(f'query embeddings have {queries.shape[1]} dimensions, the '
                             f"gallery's {self.searcher.dim}: encode the queries with the model "
                             'that encoded the gallery')
        broken = _non_finite_rows(queries)
        if broken:
            raise ValueError(f'query embeddings {broken[:10]} hold NaN or infinite values: they '
                             'would match nothing; check the model and the query texts')
        scores, ids = self.searcher.search_ids(_unit_rows(queries, 'queries'),
                                               min(k, len(self)))
        return [[SearchHit(media_id, float(score))
                 for media_id, score in zip(row_ids, row_scores.tolist()) if media_id is not None]
                for row_ids, row_scores in zip(ids, scores)]


def written_as_media_index(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file :meth:`MediaIndex.save` wrote, of any format version, whole
    or cut short or damaged since (or empty, holding nothing): what ``tools/search.py --index
    ... --overwrite`` may replace, where a checkpoint or any other file is kept.

    Its first bytes are read, not the file: torch's archive stores the pickle first and
    uncompressed, and an index's pickle opens with its ``format`` (``xmr-media-index/...``), so
    a file damaged past them still tells, where loading it fails. A file cut short before them
    does not.
    """
    with open(path, 'rb') as file:
        head = file.read(_FORMAT_PROBE_BYTES)
    return not head or f'{INDEX_FORMAT.rpartition("/")[0]}/'.encode() in head


def _rebuild(path: str | os.PathLike) -> str:
    """How to build the index ``path`` again (:data:`_REBUILD`): over it, where ``tools/search.py
    --overwrite`` replaces it (:func:`written_as_media_index`), else at another path, the file
    being kept."""
    if written_as_media_index(path):
        return _REBUILD.format(index=f'{path} --overwrite')
    return (_REBUILD.format(index='ANOTHER.idx') + f' ({path} itself is kept: its first bytes '
            'name no media index)')


def _checked_count(value: Any, name: str) -> int:
    """``value``, a positive whole number.

    Raises:
        ValueError: anything else, naming ``name``.
    """
    if not is_count(value):
        raise ValueError(f'{name} must be a positive whole number, got {value!r}')
    return int(value)


def _checked_token_dtype(dtype: Any) -> torch.dtype:
    """``dtype``, one of :data:`TOKEN_DTYPES`.

    Raises:
        ValueError: anything else, naming it.
    """
    if dtype not in TOKEN_DTYPES:
        raise ValueError(f'token_dtype must be torch.float32 or torch.float16, got {dtype!r}')
    return dtype


def _checked_tokens(tokens: TokenSet | Sequence[Tensor] | None, media_ids: Sequence[str],
                    dtype: torch.dtype) -> TokenSet | None:
    """Retrieval tokens as a set of ``dtype`` (``[L_n, D]`` sequences padded into one), one
    per media.

    Raises:
        ValueError: another count of sequences than of ``media_ids``, or tokens that float16
            cannot hold (:func:`_check_finite_tokens`).
    """
    if tokens is None:
        return None
    if not isinstance(tokens, TokenSet):
        tokens = (TokenSet.stack(list(tokens), tokens[0].shape[-1], dtype=dtype) if len(tokens)
                  else tokens)
    if len(tokens) != len(media_ids):
        raise ValueError(f'tokens hold {len(tokens)} token sequences for {len(media_ids)} '
                         'media: give one per media, in their order')
    tokens = tokens.to(dtype)
    if dtype == torch.float16:
        _check_finite_tokens(tokens, media_ids)
    return tokens


def _check_finite_tokens(tokens: TokenSet, media_ids: Sequence[str],
                         rows_at_once: int = 1024) -> None:
    """Refuse float16 tokens that rounding made infinite (float32 values beyond +-65504): their
    media would score NaN against every query, found only by a search. Checked
    ``rows_at_once`` media at a time, so that the check holds no gallery-sized mask.

    Raises:
        ValueError: naming the media.
    """
    broken = [row for start in range(0, len(tokens), rows_at_once)
              for row in (start + tokens.tokens[start:start + rows_at_once].isinf()
                          .flatten(1).any(dim=1).nonzero().flatten()).tolist()]
    if broken:
        raise ValueError(f'the retrieval tokens of media {[media_ids[row] for row in broken[:10]]}'
                         " hold values beyond float16's range (+-65504), or infinite ones: they "
                         'would score NaN; store the tokens in float32 '
                         '(token_dtype=torch.float32)')


def _check_index_exists(path: Path) -> None:
    """Refuse a missing index file, naming the folder when that is what is missing, with the
    commands that write one.

    Raises:
        FileNotFoundError: no such file.
    """
    if path.exists():
        return
    folder = path.parent
    where = (f'no media index there: the folder {folder} does not exist'
             if not folder.is_dir() else 'no media index there')
    raise FileNotFoundError(f'{path}: {where}; give the file MediaIndex.save or tools/search.py '
                            '--index wrote, or build one: python tools/search.py CONFIG '
                            f'CHECKPOINT --media MEDIA... --index {path} (docs/evaluation.md)')


def _check_format(state: Any, path: Path) -> None:
    """Refuse a file that is no media index, or one of another format version.

    Raises:
        ValueError: naming what the file holds, or the xmr that wrote it.
    """
    found = state.get('format') if isinstance(state, Mapping) else None
    if found in READABLE_FORMATS:
        return
    family = INDEX_FORMAT.rpartition('/')[0]
    if isinstance(found, str) and found.startswith(f'{family}/'):
        raise ValueError(f'{path}: a media index of format {found!r} ({written_by(state)}), '
                         f"which reads {' and '.join(map(repr, READABLE_FORMATS))}: search it "
                         'with the xmr that wrote it, '
                         f'or {_rebuild(path)}')
    described = (f'format {found!r}' if isinstance(state, Mapping) and 'format' in state
                 else f'a {type(state).__name__} without a format')
    raise ValueError(f'{path}: is not a media index ({described}, not {INDEX_FORMAT!r}); '
                     'MediaIndex.save writes one')


def _read_searcher(state: Mapping[str, Any], path: Path) -> FaissSearcher:
    """The searcher of a media index file, its faiss index deserialised.

    Raises:
        ValueError: faiss cannot read the index (a damaged file), naming the file and why.
    """
    try:
        return FaissSearcher.from_state_dict(state['searcher'])
    except RuntimeError as error:
        # faiss names its C++ function and source line, and no file: 'Error in void
        # faiss::read_xb_vector(...) at .../index_read.cpp:276: Error: ...'; its reason is kept.
        reason = _FAISS_WHERE.sub('', str(error).strip()) or 'no reason given'
        raise _damaged(path, f'faiss cannot read its index ({reason})') from error


def _damaged(path: Path, damage: str) -> ValueError:
    """The error of a media index file whose content :meth:`MediaIndex.save` did not write."""
    return ValueError(f'{path}: a damaged media index: {damage}; {_rebuild(path)}')


def _media_ids(media: Sequence[MediaInput], media_ids: Sequence[str] | None) -> list[str]:
    """One unique id per media: those given, or the file names without suffix (positions
    for tensors).

    Raises:
        ValueError: another count than the media's, or an id twice, naming both media.
    """
    if media_ids is None:
        ids = [str(position) if isinstance(item, Tensor) else Path(item).stem
               for position, item in enumerate(media)]
        made = ' (the file name without its suffix): pass media_ids, one per media'
    elif len(media_ids) != len(media):
        raise ValueError(f'{len(media_ids)} media_ids for {len(media)} media')
    else:
        ids, made = [str(media_id) for media_id in media_ids], ' in media_ids: give each its own'
    repeat = _first_repeat(ids)
    if repeat is not None:
        first, second = repeat
        raise ValueError(f'media {first} ({_shown(media[first])}) and {second} '
                         f"({_shown(media[second])}) would both be called '{ids[first]}'{made}")
    return ids


def _shown(item: MediaInput) -> str:
    """A media as an error names it: a file by its path, a tensor by its shape."""
    return f'a tensor {tuple(item.shape)}' if isinstance(item, Tensor) else str(item)


def _encode(model: BaseRetriever, media: list[MediaInput], media_ids: list[str],
            transform: Mapping[str, Any] | None, num_frames: int, batch_size: int,
            on_corrupt: str, progress: bool, parts: str | os.PathLike | None, part_size: int,
            num_workers: int, tokens: bool,
            token_dtype: torch.dtype) -> tuple[EncodedGallery, list[str]]:
    """The media read encoded, and their ids (:meth:`MediaIndex.from_media`'s arguments, the
    ids made: :func:`_media_ids`)."""
    if parts is None:
        encoded = encode_gallery(model, media, transform, num_frames, batch_size, on_corrupt,
                                 progress, num_workers, tokens, token_dtype)
    else:
        encoded = encode_gallery_in_parts(model, media, media_ids, parts, part_size, transform,
                                          num_frames, batch_size, on_corrupt, progress,
                                          num_workers, tokens, token_dtype)
    left_out = {marker.index for marker in encoded.skipped}
    return encoded, [media_id for position, media_id in enumerate(media_ids)
                     if position not in left_out]


def _checked_rows(embeddings: Tensor | Any,
                  media_ids: Sequence[str]) -> tuple[Tensor, list[str]]:
    """L2-normalised ``[N, E]`` embeddings of media with unique ids, all finite."""
    media_ids = [str(media_id) for media_id in media_ids]
    repeat = _first_repeat(media_ids)
    if repeat is not None:
        raise ValueError(f"media_ids {repeat[0]} and {repeat[1]} are both "
                         f"'{media_ids[repeat[0]]}'; every gallery item needs its own id")
    embeddings = _unit_rows(embeddings, 'embeddings')
    # Another shape, or another count than media_ids, is named by FaissSearcher.
    broken = (_non_finite_rows(embeddings)
              if embeddings.dim() == 2 and len(embeddings) == len(media_ids) else [])
    if broken:
        # A flat or HNSW index takes such a row and never returns it (the media would
        # silently vanish); IVF's training fails on it naming no media.
        raise ValueError(f'embeddings of media {[media_ids[row] for row in broken[:10]]} '
                         'hold NaN or infinite values: they would never be found; check the '
                         'model and those media')
    return embeddings, media_ids


def _first_repeat(ids: Sequence[str]) -> tuple[int, int] | None:
    """The positions of the first id met twice, or ``None``."""
    first: dict[str, int] = {}
    for position, media_id in enumerate(ids):
        if first.setdefault(media_id, position) != position:
            return first[media_id], position
    return None


def _non_finite_rows(vectors: Tensor) -> list[int]:
    """The rows of ``[N, E]`` vectors holding a NaN or an infinity."""
    return (~torch.isfinite(vectors).all(dim=-1)).nonzero().flatten().tolist()


def _unit_rows(vectors: Tensor | Any, name: str) -> Tensor:
    """:func:`~xmr.models.retrievers.base.unit_rows` of floating-point vectors (an array too)."""
    vectors = torch.as_tensor(vectors)
    if not vectors.is_floating_point():
        raise ValueError(f'{name} must be floating-point vectors, got {vectors.dtype}')
    return unit_rows(vectors)
