"""Load a trained retriever and embed text in any trained language, images and videos.

Every retriever xmr registers is served (:class:`~xmr.models.retrievers.base.BaseRetriever`: a
cross-lingual retriever, CDDS's dual encoder, a user's own), through the method evaluation calls,
``predict``: embeddings come out exactly as in evaluation, L2-normalised float32 on the CPU (a
cross-lingual retriever's text through the frozen tower, source language, or the target-language
branch, its media through the image tower, videos' frames encoded as images and mean-pooled; a
dual encoder's through its towers and, with CDDS, the pooled semantic components).
"""
from __future__ import annotations

import copy
import itertools
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.registry import DefaultScope
from mmengine.runner.checkpoint import load_state_dict
from mmengine.utils import ProgressBar
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from xmr.apis.encoding_parts import EncodingParts
from xmr.config_files import read_config_file
from xmr.datasets.corrupt_policy import SkippedMedia, check_policy, skip_or_raise
from xmr.datasets.frame_sampling import check_frame_count
from xmr.datasets.languages import normalize_language
from xmr.datasets.media_io import MediaReadError, read_image, read_video_frames
from xmr.datasets.video_containers import VIDEO_SUFFIXES
from xmr.engine.checkpoint import (
    CHECKPOINT_FIX,
    foreign_checkpoint_fix,
    keys_of_another_model,
    read_checkpoint,
    state_dict_mismatches,
)
from xmr.engine.data_languages import transform_size_problem
from xmr.engine.feature_cache.key import backbone_fingerprint, jsonable
from xmr.engine.hooks.checkpoint import refuse_other_facts
from xmr.engine.worker_signals import WORKER_IGNORED_SIGNALS, ignore_in_workers
from xmr.engine.wrappers import unwrap_model
from xmr.evaluation.token_scoring import TokenSet, TokenSetWriter
from xmr.models.backbones.base import VisionLanguageBackbone
from xmr.models.language.carried_vocabulary import read_vocabulary_from
from xmr.models.language.language_modules import module_file_problem
from xmr.models.retrievers.base import BaseRetriever
from xmr.registry import MODELS, TRANSFORMS, check_part_options
from xmr.run_config import config_file, import_custom_modules, merge_options
from xmr.utils.cli import UserKeyError, given_file
from xmr.utils.counts import is_count
from xmr.version import written_by

__all__ = ['VIDEO_SUFFIXES', 'CheckpointMismatchError', 'init_retriever',
           'load_trained_checkpoint', 'trained_languages', 'check_languages',
           'check_config_languages', 'check_texts',
           'encode_texts', 'encode_text_tokens',
           'encode_media', 'encode_readable_media', 'encode_media_in_parts', 'media_encoding',
           'EncodedGallery', 'encode_gallery', 'encode_gallery_in_parts', 'NoMediaReadError']

MediaInput = str | os.PathLike | Tensor


class CheckpointMismatchError(ValueError):
    """A checkpoint does not fit the model its config builds (backbone, languages, shapes)."""


def init_retriever(config: str | os.PathLike | Config, checkpoint: str | os.PathLike | None = None,
                   device: str | torch.device = 'cpu',
                   cfg_options: Mapping[str, Any] | None = None) -> BaseRetriever:
    """Build the model of a config, load a trained checkpoint into it and set it to eval mode.

    Args:
        config: config file (``xmr::<path>`` for a config xmr ships) or :class:`Config` (its
            ``model`` is built; ``custom_imports`` are imported first, as the tools import them).
        checkpoint: ``.pth`` written by training; ``None`` keeps the built weights.
        device: where the model runs.
        cfg_options: overrides merged into a copy of the config, as ``--cfg-options`` does.

    Returns:
        The model, with the config as ``model.cfg``.

    Raises:
        UserError: the config file is missing or a folder, or a module of its ``custom_imports``
            failed to import (naming the module and the cause, not only ``PYTHONPATH``).
        UnknownOptionError, ValueError, TypeError: a model option the config alone refuses
            (:func:`~xmr.registry.check_part_options`), before anything is built.
        TypeError: a model that is no retriever (no
            :class:`~xmr.models.retrievers.base.BaseRetriever`), before anything is built where
            the config names its class.
        UserError: a checkpoint missing, a folder or unreadable, before anything is built
            (:func:`~xmr.utils.cli.given_file`).
        CheckpointReadError: an empty, foreign or damaged checkpoint, as it is read.
        CheckpointMismatchError: when the checkpoint's backbone, languages or parameter shapes
            differ from the config's (the message names each mismatch).
    """
    cfg, where = _read_config(config, cfg_options)
    # xmr's registries whatever scope the caller's process is in (another library's runner,
    # an earlier run's): MMEngine looks a type up in the current default scope first.
    with DefaultScope.overwrite_default_scope('xmr'):
        # What the tools refuse as the config loads, before the backbone's weights load.
        check_part_options(MODELS, cfg.model, 'model')
        kind = _model_class(cfg.model)
        if kind is not None and not issubclass(kind, BaseRetriever):
            raise _not_served(kind, where)
        if checkpoint is not None:
            # Present before the build; read (and its records' CRC checked) once, after it.
            given_file(checkpoint, 'checkpoint', CHECKPOINT_FIX)
            read_vocabulary_from(cfg.model, checkpoint)
        model = MODELS.build(cfg.model)
    if not isinstance(model, BaseRetriever):  # built by a function, say
        raise _not_served(type(model), where)
    if checkpoint is not None:
        load_trained_checkpoint(model, checkpoint)
    model.cfg = cfg
    return model.to(device).eval()


def _read_config(config: str | os.PathLike | Config,
                 cfg_options: dict | None = None) -> tuple[Config, str | os.PathLike]:
    """A copy of ``config`` (a file, ``xmr::<path>``, or a :class:`Config`) with ``cfg_options``
    merged and its ``custom_imports`` imported, and what names it in messages.

    Raises:
        UserError: as :func:`init_retriever`.
        UserKeyError: a config without ``model``.
    """
    # A copy: merged into the caller's Config, the options would build its next model too.
    cfg = copy.deepcopy(config) if isinstance(config, Config) else read_config_file(
        config_file(config, 'config'))
    merge_options(cfg, cfg_options or {})
    where = getattr(cfg, 'filename', None) or config
    if 'model' not in cfg:
        raise UserKeyError(f'config {where} has no model')
    import_custom_modules(where, cfg)
    return cfg, where


def _model_class(model_cfg: Any) -> type | None:
    """The class a model config builds, looked up in the current scope; ``None`` where the
    config names no class (a builder function, no ``type``)."""
    kind = model_cfg.get('type') if isinstance(model_cfg, Mapping) else None
    kind = MODELS.get(kind) if isinstance(kind, str) else kind
    return kind if isinstance(kind, type) else None


def _not_served(kind: type, where: Any) -> TypeError:
    """The error of a config whose model the apis do not serve."""
    return TypeError(f'config {where}: its model is a {kind.__name__}, which is no retriever; '
                     'xmr.apis serves the models whose class derives from BaseRetriever '
                     '(xmr.models.retrievers.base; docs/custom_modules.md), whose predict embeds '
                     'a gallery batch')


def load_trained_checkpoint(model: torch.nn.Module, checkpoint: str | os.PathLike) -> dict:
    """Load every weight of a training checkpoint into ``model``, strictly.

    MMEngine's default ``load_from`` only warns on missing keys and shape mismatches; a test run
    would then score the built (random or pretrained-only) weights. Here any difference fails.

    Args:
        model: the model built from the config (a model wrapper is unwrapped).
        checkpoint: the ``.pth`` file (``state_dict`` of an MMEngine checkpoint, or a bare one).

    Returns:
        The checkpoint's ``meta`` (empty when absent).

    Raises:
        FileNotFoundError: if the file is missing.
        CheckpointReadError: (a ``ValueError``) an empty, truncated or foreign file, or one
            that pickles objects a weights-only ``torch.load`` refuses, named.
        CheckpointMismatchError: naming the checkpoint and every mismatch: backbone type,
            architecture, embedding width and languages (recorded by the retriever), then missing,
            unexpected or differently shaped parameters with the xmr that wrote the file
            (:func:`~xmr.version.written_by`) and the one reading it.
    """
    model = unwrap_model(model)
    path = Path(checkpoint)
    loaded = read_checkpoint(path)
    module_file = module_file_problem(path, loaded)
    if module_file is not None:
        raise CheckpointMismatchError(f'checkpoint {module_file}')
    state = loaded.get('state_dict', loaded) if isinstance(loaded, dict) else None
    if not isinstance(state, Mapping):
        raise CheckpointMismatchError(f'checkpoint {path} holds no state_dict')
    # Checkpoints of DDP-wrapped models prefix every key with 'module.'.
    state = {re.sub(r'^module\.', '', key): value for key, value in state.items()}
    foreign = keys_of_another_model(state, model.state_dict())
    if foreign is not None:
        # Strict loading would print, then raise, every key of both as missing or unexpected.
        raise CheckpointMismatchError(
            f"checkpoint {path} holds none of the model's weights ({foreign}): "
            f'{foreign_checkpoint_fix(path, state, model.state_dict())}')
    meta = dict(loaded.get('meta') or {})
    # The checks before any weight is copied: a failed strict load leaves the weights it
    # reached overwritten, and a caller that catches the error would hold a mixed model. A file
    # converted from the authors' first: its settings named against their code's, which the
    # facts (the SDM's depth, say) would only name against the converted file's.
    _check_authors_settings(path, model, meta)
    try:
        refuse_other_facts(model, state, f'checkpoint {path}',
                           "give the config the checkpoint was trained with, or set the config's "
                           "values to the checkpoint's (--cfg-options)")
    except ValueError as error:  # backbone, architecture, width, languages
        raise CheckpointMismatchError(str(error)) from error
    mismatches = state_dict_mismatches(model.state_dict(), state)
    if mismatches:
        # Another config, or keys that another xmr added or renamed.
        raise CheckpointMismatchError(f'checkpoint {path} does not match the config: '
                                      + '; '.join(mismatches)
                                      + f'\n(the checkpoint was {written_by(meta)})')
    load_state_dict(model, state, strict=True, logger=None)
    return meta


def _check_authors_settings(path: Path, model: torch.nn.Module, meta: Mapping) -> None:
    """A file converted from the MLA / DASD authors' (``tools/convert/``) is run as their code
    runs it: a config whose settings without weights differ (activation, SDM depth, padding)
    loads its weights and computes something else, as the converter refuses.

    Raises:
        CheckpointMismatchError: naming each such setting.
    """
    from xmr.models.conversion.authors import AUTHORS_CONFIGS, settings_problem

    method = meta.get('method')
    if 'converted_from' not in meta or method not in AUTHORS_CONFIGS:
        return
    problem = settings_problem(unwrap_model(model), method)
    if problem is not None:
        raise CheckpointMismatchError(f"checkpoint {path}, converted from {method.upper()}'s "
                                      f"{meta['converted_from']}: the config's model {problem}")


def trained_languages(model: BaseRetriever) -> list[str]:
    """The languages the model embeds (its ``read_languages()``): a cross-lingual retriever's
    source language, then its target languages; a dual encoder's ``languages``."""
    return model.read_languages()


def check_languages(model: BaseRetriever, languages: str | Sequence[str],
                    where: str = 'query') -> None:
    """Fail unless the model reads every language (its ``check_languages``).

    Args:
        model: a retriever.
        languages: one code or several, in any spelling ``normalize_language`` reads (``DE``).
        where: what holds them, named in the error.

    Raises:
        LanguageCodeError: (a ``ValueError``) a code that names no language.
        ValueError: naming ``where``, the languages without adapters and those the model reads.
    """
    # One code alone would otherwise be checked letter by letter.
    languages = [languages] if isinstance(languages, str) else languages
    model.check_languages([normalize_language(lang, where) for lang in languages], where)


def check_config_languages(config: str | os.PathLike | Config, languages: str | Sequence[str],
                           where: str = 'query', with_modules: bool = False) -> None:
    """:func:`check_languages` from a config alone, before its model is built (a backbone's
    weights take seconds to minutes to load): the source language and the targets of its
    ``language_branch`` (a :class:`~xmr.models.retrievers.CrossLingualRetriever`), the
    ``languages`` of a :class:`~xmr.models.retrievers.DualEncoderRetriever`: what the model's
    class reads from its config (:meth:`BaseRetriever.configured_languages`). A model whose
    class cannot tell (a branch naming no languages, a retriever of one's own) is left to the
    built model's check.

    Args:
        config: a config as :func:`init_retriever` takes it: a file (``xmr::<path>`` for
            a config xmr ships), read and its ``custom_imports`` imported (a language they
            register is then known), or a :class:`Config` whose modules are imported.
        languages: one code or several, in any spelling ``normalize_language`` reads.
        where: what holds them, named in the error.
        with_modules: only languages with a trained module of their own, as an export, a
            merge or a disentangler's features need them: a cross-lingual model's source
            language is refused (:meth:`BaseRetriever.check_module_languages`).

    Raises:
        UserError: a config file that is missing, a folder or unreadable, or a module of its
            ``custom_imports`` that fails to import, as :func:`init_retriever` says it.
        LanguageCodeError: (a ``ValueError``) a code that names no language.
        ValueError: as :func:`check_languages` (and, ``with_modules``, for a language without a
            module), naming ``where`` and the trained languages, said to be the config's.
    """
    if not isinstance(config, Config):
        config, _ = _read_config(config)
    languages = [languages] if isinstance(languages, str) else languages
    codes = [normalize_language(lang, where) for lang in languages]
    model_cfg = config.get('model')
    with DefaultScope.overwrite_default_scope('xmr'):  # as init_retriever's build
        kind = _model_class(model_cfg)
    if kind is None or not issubclass(kind, BaseRetriever):
        return
    read = kind.configured_languages(model_cfg)
    if read is None:
        return
    try:
        kind.check_read(codes, read, where)
        if with_modules:
            kind.check_module_languages(codes, read, where)
    except ValueError as error:
        # Read from the config, not a checkpoint: a checkpoint of other languages is refused
        # as it loads.
        raise ValueError(f"{error} (the config's {kind.LANGUAGE_KEYS})") from None


@torch.no_grad()
def encode_texts(model: BaseRetriever, texts: str | Sequence[str], lang: str,
                 batch_size: int = 256) -> Tensor:
    """Embed captions or queries of one language.

    A model that queries with back-translations (PECTVLM's ``routine3`` and ``translate_test``)
    reads a target language's texts as its evaluation does: the queries machine-translated into
    the source language, tokenised as source-language text and encoded with that language's
    module. Give them so.

    Args:
        model: a trained retriever.
        texts: one text or several.
        lang: their language, the source language or a trained target language.
        batch_size: texts per forward pass.

    Returns:
        ``[N, E]`` L2-normalised float32 on the CPU.
    """
    return encode_text_tokens(model, texts, lang, batch_size, tokens=False)[0]


@torch.no_grad()
def encode_text_tokens(model: BaseRetriever, texts: str | Sequence[str], lang: str,
                       batch_size: int = 256,
                       tokens: bool = True) -> tuple[Tensor, TokenSet | None]:
    """:func:`encode_texts`, and with ``tokens`` each text's retrieval tokens (``predict``'s
    ``caption_tokens``), for a model that scores pairs from them (its ``token_score()``).

    Returns:
        ``[N, E]`` embeddings and, with ``tokens``, a set of ``N`` token sequences.

    Raises:
        ValueError: ``tokens`` for a model that scores by embeddings alone.
    """
    texts = [texts] if isinstance(texts, str) else list(texts)
    lang = normalize_language(lang, 'encode_texts lang')
    check_languages(model, [lang])
    if not texts:
        raise ValueError('no texts to encode')
    check_texts(texts)
    _check_batch_size(batch_size)
    _check_token_scoring(model, tokens)
    embeddings, sequences = None, []
    # The evaluation's query texts: its captions, or their back-translations.
    field = model.data_preprocessor.query_texts(lang)[0]
    group = 'caption_tokens' if field == 'captions' else 'back_translation_tokens'
    with _evaluating(model):
        for start in range(0, len(texts), batch_size):
            # One gallery item without media holding the texts as its captions, embedded by
            # predict as evaluation embeds captions (a back-translating model's from their
            # back_translation_tokens, which it reads in the captions' place).
            batch = model.data_preprocessor({field: [{lang: texts[start:start + batch_size]}],
                                             'media_id': ['queries']})
            batch.setdefault('caption_tokens', batch[group])
            item = model.predict(**batch)[0]
            rows = item['caption_embeddings'][lang]
            # Filled in place: batches joined at the end held every embedding twice at once.
            if embeddings is None:
                embeddings = rows.new_empty((len(texts), rows.shape[1]), device='cpu')
            embeddings[start:start + rows.shape[0]] = rows
            if tokens:
                sequences += _emitted_tokens(model, item, 'caption_tokens')[lang]
    return embeddings, _token_set(sequences) if tokens else None


@contextmanager
def _evaluating(model: torch.nn.Module) -> Iterator[None]:
    """Run ``model`` in eval mode, as evaluation does, and give each module its own mode back
    after.

    A model straight from training is in training mode (its frozen backbone in eval): LoRA's
    and a Hugging Face encoder's dropout then acted on the embeddings, which differed from the
    evaluation's and from one call to the next.
    """
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def check_texts(texts: Sequence[Any]) -> None:
    """Refuse a text that is blank or no string, or holds a lone surrogate, by its position:
    what :func:`encode_texts` would refuse once its model is built (a tool checks first).

    Raises:
        ValueError: naming the texts at fault.
    """
    empty = [i for i, text in enumerate(texts) if not isinstance(text, str) or not text.strip()]
    if empty:
        raise ValueError(f'texts {empty[:10]} are empty or not strings')
    for i, text in enumerate(texts):
        _check_encodable(text, f'text {i}')


def _check_encodable(text: str, where: str) -> None:
    """Refuse a lone surrogate (undecodable input smuggled into a str) naming where it sits."""
    try:
        text.encode('utf-8')
    except UnicodeEncodeError as error:
        raise ValueError(f'{where} ({text!r}) holds a lone surrogate '
                         f'{text[error.start]!r} at character {error.start}, which is no '
                         'Unicode text: read the input as UTF-8 (errors="replace" keeps the '
                         'rest)') from error


def media_list(media: MediaInput | Sequence[MediaInput]) -> list[MediaInput]:
    """The media as a list: one file path or one tensor given alone is one media (a str would
    otherwise be read as its characters, each a file name; a video's ``[T, 3, H, W]`` frames
    as ``T`` images; a name in ``bytes`` as its byte values).

    Raises:
        TypeError: a media that is neither a path nor a tensor (a PIL image, ``bytes``),
            naming its place.
    """
    items = [media] if isinstance(media, (str, bytes, os.PathLike, Tensor)) else list(
        media if isinstance(media, Iterable) else [media])
    for index, item in enumerate(items):
        if not isinstance(item, (str, os.PathLike, Tensor)):
            raise TypeError(f'media {index} is a {type(item).__name__}: give a file path or a '
                            'uint8 tensor [3, H, W] (an image; a PIL image as '
                            'torchvision.transforms.functional.pil_to_tensor gives it) or '
                            '[T, 3, H, W] (video frames)')
    return items


def encode_media(model: BaseRetriever, media: MediaInput | Sequence[MediaInput],
                 transform: Mapping[str, Any] | None = None, num_frames: int = 12,
                 batch_size: int = 32, num_workers: int = 0) -> Tensor:
    """Embed images and videos, given as files or as decoded uint8 tensors.

    Args:
        model: a trained retriever.
        media: one media or several: file paths (a suffix in :data:`VIDEO_SUFFIXES` reads a
            video), or uint8 tensors ``[3, H, W]`` (image) / ``[T, 3, H, W]`` (video frames).
        transform: ``TRANSFORMS`` config of the resize + crop; default: the backbone's own
            (:meth:`~xmr.models.backbones.base.VisionLanguageBackbone.media_transform`: an
            open_clip tower's size, resize mode and interpolation from its weights' record, as
            ``create_model_and_transforms`` preprocesses; CCLM's whole-image ``squash``).
        num_frames: frames sampled per video file, uniformly, segment centres (evaluation).
        batch_size: media per forward pass; images and videos go in separate batches.
        num_workers: processes decoding and resizing the files while the model encodes
            (a DataLoader's workers, in input order); 0: decoded in this process, in turn.

    Returns:
        ``[N, E]`` L2-normalised float32 on the CPU, in input order.

    Raises:
        MediaReadError: a file that cannot be read (:func:`encode_readable_media` leaves such
            files out).
    """
    return encode_readable_media(model, media, transform, num_frames, batch_size,
                                 on_corrupt='raise', num_workers=num_workers)[0]


@torch.no_grad()
def encode_readable_media(model: BaseRetriever,
                          media: MediaInput | Sequence[MediaInput],
                          transform: Mapping[str, Any] | None = None, num_frames: int = 12,
                          batch_size: int = 32, on_corrupt: str = 'skip',
                          progress: bool = False,
                          num_workers: int = 0) -> tuple[Tensor, list[SkippedMedia]]:
    """:func:`encode_media` of the files that can be read: with ``on_corrupt='skip'`` a file
    that cannot be read (missing, empty, cut short, undecodable) is warned of
    (:class:`~xmr.datasets.corrupt_policy.MediaSkippedWarning`) and left out; ``'raise'``
    stops on it. ``progress`` shows the media read so far, the rate and the time left on
    stderr (MMEngine's ``ProgressBar``, after each batch).

    Returns:
        ``[R, E]`` embeddings of the ``R`` media read, in input order, and a
        :class:`~xmr.datasets.corrupt_policy.SkippedMedia` (``index``: its position in
        ``media``) for each left out.

    Raises:
        NoMediaReadError: with ``'skip'``, when no media can be read (a
            :class:`~xmr.datasets.media_io.MediaReadError` holding the markers of all).
    """
    gallery = encode_gallery(model, media, transform, num_frames, batch_size, on_corrupt,
                             progress, num_workers)
    return gallery.embeddings, gallery.skipped


@dataclass
class EncodedGallery:
    """Media encoded for a gallery.

    Attributes:
        embeddings: ``[R, E]`` embeddings of the ``R`` media read, in input order.
        tokens: their retrieval tokens (``R`` sequences, ``predict``'s ``media_tokens``) for an
            encoding that keeps them, else ``None``.
        skipped: a :class:`~xmr.datasets.corrupt_policy.SkippedMedia` for each media left out.
    """

    embeddings: Tensor
    tokens: TokenSet | None
    skipped: list[SkippedMedia]


@torch.no_grad()
def encode_gallery(model: BaseRetriever, media: MediaInput | Sequence[MediaInput],
                   transform: Mapping[str, Any] | None = None, num_frames: int = 12,
                   batch_size: int = 32, on_corrupt: str = 'skip', progress: bool = False,
                   num_workers: int = 0, tokens: bool = False,
                   token_dtype: torch.dtype = torch.float32) -> EncodedGallery:
    """:func:`encode_readable_media`, and with ``tokens`` each media's retrieval tokens, for
    a model that scores pairs from them (its ``token_score()``), in ``token_dtype``: each
    media's written, converted, into the gallery's padded set as it is encoded
    (:class:`~xmr.evaluation.token_scoring.TokenSetWriter`), so that the tokens are held once,
    a float16 gallery's never in float32.

    Raises:
        ValueError: ``tokens`` for a model that scores by embeddings alone.
    """
    media = media_list(media)
    resize = _media_resize(model, media, transform, num_frames, batch_size, on_corrupt,
                           num_workers)
    _check_token_scoring(model, tokens)
    bar = ProgressBar(len(media), file=sys.stderr) if progress else None
    pairs = list(enumerate(media))
    read_tokens = TokenSetWriter(len(media), token_dtype) if tokens else None
    with _evaluating(model), _DecodedMedia(pairs, resize, num_frames).decoded(
            num_workers) as decoded:
        embeddings, skipped = _encode_readable(model, pairs, decoded, batch_size, on_corrupt,
                                               bar, read_tokens)
    if bar is not None:
        sys.stderr.write('\n')
    embeddings = _some_read(embeddings, skipped)
    unread = {marker.index for marker in skipped}
    return EncodedGallery(embeddings, None if read_tokens is None else read_tokens.finish(
        [row for row in range(len(media)) if row not in unread]), skipped)


@torch.no_grad()
def encode_media_in_parts(model: BaseRetriever, media: Sequence[MediaInput],
                          media_ids: Sequence[str], parts: str | os.PathLike,
                          part_size: int = 256, transform: Mapping[str, Any] | None = None,
                          num_frames: int = 12, batch_size: int = 32, on_corrupt: str = 'skip',
                          progress: bool = False,
                          num_workers: int = 0) -> tuple[Tensor, list[SkippedMedia]]:
    """:func:`encode_readable_media`, its embeddings saved ``part_size`` media at a time in the
    folder ``parts`` (:class:`~xmr.apis.encoding_parts.EncodingParts`). The media whose
    embeddings the folder already holds, by id, are not encoded again: an interrupted encoding
    run again goes on where it stopped, and returns what one uninterrupted encoding returns.
    Media that cannot be read are not saved: a later run tries them again.

    Args:
        media_ids: one unique id per media, what the saved embeddings are known by.
        parts: the folder; remove it (:meth:`EncodingParts.remove`) once what was built of the
            embeddings is saved.
        part_size: media per part; an interruption loses at most the part being encoded.

    Returns:
        As :func:`encode_readable_media`.

    Raises:
        ValueError: a folder whose parts were encoded otherwise (another backbone, transform
            or number of frames), naming the part and the value.
    """
    gallery = encode_gallery_in_parts(model, media, media_ids, parts, part_size, transform,
                                      num_frames, batch_size, on_corrupt, progress, num_workers)
    return gallery.embeddings, gallery.skipped


@torch.no_grad()
def encode_gallery_in_parts(model: BaseRetriever, media: Sequence[MediaInput],
                            media_ids: Sequence[str], parts: str | os.PathLike,
                            part_size: int = 256, transform: Mapping[str, Any] | None = None,
                            num_frames: int = 12, batch_size: int = 32,
                            on_corrupt: str = 'skip', progress: bool = False,
                            num_workers: int = 0, tokens: bool = False,
                            token_dtype: torch.dtype = torch.float32) -> EncodedGallery:
    """:func:`encode_media_in_parts`, and with ``tokens`` each media's retrieval tokens, saved
    in the parts beside its embedding (:func:`encode_gallery`); parts saved without them are
    refused as encoded otherwise. The parts keep the model's float32 tokens, whatever
    ``token_dtype`` a run returns them in, and are read back a part at a time into the
    gallery's set, so that its tokens are held once (and a float16 gallery's never in
    float32): a build resumed under another dtype returns what an uninterrupted one does."""
    media = media_list(media)
    resize = _media_resize(model, media, transform, num_frames, batch_size, on_corrupt,
                           num_workers)
    _check_token_scoring(model, tokens)
    if not is_count(part_size):
        raise ValueError(f'part_size must be a positive int, got {part_size!r}')
    if len(media_ids) != len(media) or len(set(media_ids)) != len(media_ids):
        raise ValueError(f'media_ids must be {len(media)} unique ids, one per media, got '
                         f'{len(media_ids)} ({len(set(media_ids))} unique)')
    other = next((i for i, media_id in enumerate(media_ids) if not isinstance(media_id, str)),
                 None)
    if other is not None:  # saved, it would be refused by the weights-only read of a resume
        raise ValueError(f'media_ids[{other}] is a {type(media_ids[other]).__name__} '
                         f'({media_ids[other]!r}): the parts keep ids as str; give str ids')
    folder = EncodingParts(parts, media_encoding(model, transform, num_frames, tokens))
    # Embeddings alone: the tokens are read back from the parts at the end, into one set.
    saved = {media_id: embedding for ids, embeddings, _ in folder.parts()
             for media_id, embedding in zip(ids, embeddings)}
    todo = [position for position, media_id in enumerate(media_ids) if media_id not in saved]
    if len(todo) < len(media):
        print_log(f'{parts}: {len(media) - len(todo)} of the {len(media)} media were encoded '
                  f'before and are taken from there; {len(todo)} to encode', logger='current')
    bar = ProgressBar(len(todo), file=sys.stderr) if progress and todo else None
    skipped: list[SkippedMedia] = []
    pairs = [(position, media[position]) for position in todo]
    # One pass of decoding for all the parts: a loader's workers start once.
    with _evaluating(model), _DecodedMedia(pairs, resize, num_frames).decoded(
            num_workers) as decoded:
        for start in range(0, len(todo), part_size):
            part = pairs[start:start + part_size]
            part_tokens: dict[int, Tensor] | None = {} if tokens else None
            embeddings, left_out = _encode_readable(
                model, part, itertools.islice(decoded, len(part)), batch_size, on_corrupt, bar,
                part_tokens)
            skipped += left_out
            if embeddings is not None:
                unread = {marker.index for marker in left_out}
                read_ids = [media_ids[position] for position, _ in part if position not in unread]
                sequences = (None if part_tokens is None
                             else [part_tokens[row] for row in sorted(part_tokens)])
                folder.write(read_ids, embeddings, sequences)
                saved.update(zip(read_ids, embeddings))
    if bar is not None:
        sys.stderr.write('\n')
    unread = {marker.index for marker in skipped}
    kept = [media_id for position, media_id in enumerate(media_ids) if position not in unread]
    embeddings = _some_read(torch.stack([saved[media_id] for media_id in kept]) if kept
                            else None, skipped)
    return EncodedGallery(embeddings, _tokens_from_parts(folder, kept, token_dtype) if tokens
                          else None, skipped)


def media_encoding(model: BaseRetriever, transform: Mapping[str, Any] | None,
                   num_frames: int, tokens: bool = False) -> dict[str, Any]:
    """What a model's media embeddings depend on: ``backbone`` (its fingerprint: the weights;
    a language's adapters change nothing of them), ``media_head`` where the embedding passes
    through trained modules after the backbone (the model's ``media_head()``, CDDS's
    disentangler: their fingerprints by name), ``transform`` and ``num_frames``; and
    ``media_tokens: True`` for an encoding that keeps the media's retrieval tokens."""
    encoded_by = dict(backbone=backbone_fingerprint(model.backbone))
    head = model.media_head()
    if head:  # absent, not empty: a cross-lingual gallery keeps the record it had
        encoded_by['media_head'] = {name: backbone_fingerprint(module)
                                    for name, module in head.items()}
    if tokens:  # absent otherwise, as in the records written before tokens were kept
        encoded_by['media_tokens'] = True
    return dict(encoded_by, transform=jsonable(transform), num_frames=num_frames)


def _check_token_scoring(model: BaseRetriever, tokens: bool) -> None:
    """Refuse to keep the tokens of a model that scores by embeddings alone."""
    if tokens and model.token_score() is None:
        raise ValueError(f'{type(model).__name__} scores media and captions by the cosine of '
                         'their embeddings (its token_score() is None): it has no retrieval '
                         'tokens to keep; encode without tokens (a DualEncoderRetriever keeps '
                         "them with retrieval_score='patch_word')")


def _token_set(sequences: list[Tensor], dtype: torch.dtype = torch.float32) -> TokenSet:
    """The ``[L_n, D]`` token sequences of captions or of a gallery's media as one padded set
    of ``dtype``."""
    return TokenSet.stack(sequences, sequences[0].shape[-1], dtype=dtype)


def _tokens_from_parts(folder: EncodingParts, media_ids: Sequence[str],
                       dtype: torch.dtype) -> TokenSet:
    """The retrieval tokens of ``media_ids`` read back from the parts, one part at a time, into
    one set of ``dtype`` (:class:`~xmr.evaluation.token_scoring.TokenSetWriter`): the gallery's
    tokens are held once, and the parts keep the model's float32."""
    rows = {media_id: row for row, media_id in enumerate(media_ids)}
    writer = TokenSetWriter(len(rows), dtype)
    for ids, _, sequences in folder.parts():
        for media_id, sequence in zip(ids, sequences):
            if media_id in rows:  # a part may hold media of an earlier, larger gallery
                writer[rows[media_id]] = sequence
    return writer.finish(range(len(rows)))


def _media_resize(model: BaseRetriever, media: Sequence[MediaInput],
                  transform: Mapping[str, Any] | None, num_frames: int, batch_size: int,
                  on_corrupt: str, num_workers: int) -> Any:
    """The checked arguments of a media encoding, and its built resize transform."""
    if not isinstance(model.backbone, VisionLanguageBackbone):
        raise TypeError(f'{type(model.backbone).__name__} is a text-only backbone: the model '
                        'embeds no media; search its texts with encode_texts')
    if not media:
        raise ValueError('no media to encode')
    _check_batch_size(batch_size)
    check_frame_count(num_frames, 'num_frames')
    check_policy(on_corrupt)
    if not is_count(num_workers, least=0):
        raise ValueError(f'num_workers must be an int >= 0, got {num_workers!r}')
    with DefaultScope.overwrite_default_scope('xmr'):  # as init_retriever's build
        resize = TRANSFORMS.build(dict(transform) if transform is not None
                                  else model.backbone.media_transform())
    if getattr(resize, 'training', False):
        raise ValueError('encode_media transform: training=True crops and flips each media at '
                         'random; give training=False (the default) to embed a gallery')
    # Media of another size fail inside the tower, on two token counts that name nothing.
    problem = transform_size_problem(model, resize, 'it')
    if problem is not None:
        raise ValueError(f'encode_media transform: it {problem}, or pass transform=None (the '
                         "backbone's own)")
    return resize


def _encode_readable(model: BaseRetriever, media: Sequence[tuple[int, MediaInput]],
                     decoded: Iterable[Tensor | tuple[str, str]], batch_size: int,
                     on_corrupt: str, bar: ProgressBar | None,
                     tokens: dict[int, Tensor] | TokenSetWriter | None = None
                     ) -> tuple[Tensor | None, list[SkippedMedia]]:
    """Embed ``(position, media)`` pairs, the position naming a media in messages, a batch at a
    time as they are ``decoded`` (:meth:`_DecodedMedia.decoded`, in the same order), images
    and videos apart; ``bar`` advances by the media read; ``tokens``, when given, receives
    each media read's retrieval tokens by its row in ``media``.

    Returns:
        ``[R, E]`` embeddings of the ``R`` media read, in order (``None`` when none is), and
        the markers of those left out.
    """
    embeddings: Tensor | None = None
    skipped: list[SkippedMedia] = []
    unread: set[int] = set()
    started = bar.completed if bar is not None else 0
    # Encoded a batch at a time as they are decoded: decoding the whole gallery first held
    # every decoded media at once (3 x 224 x 224 bytes an image, 17 GB for COCO's 113k).
    # By shape: images, and videos of each frame count (tensors given may differ in it).
    pending: dict[tuple[int, ...], list[tuple[int, Tensor]]] = {}
    for row, item in enumerate(decoded):
        if not isinstance(item, Tensor):
            error = MediaReadError(*item, _LEAVE_OUT_FIX)
            skipped.append(skip_or_raise(error, on_corrupt, media[row][0]))
            unread.add(row)
            continue
        batch = pending.setdefault(tuple(item.shape), [])
        batch.append((row, item))
        if len(batch) == batch_size:
            embeddings = _encode_batch(model, batch, embeddings, len(media), tokens)
            batch.clear()
            if bar is not None:
                bar.update(started + row + 1 - bar.completed)
    for batch in pending.values():
        if batch:
            embeddings = _encode_batch(model, batch, embeddings, len(media), tokens)
    if bar is not None and bar.completed < started + len(media):
        bar.update(started + len(media) - bar.completed)
    if embeddings is not None and unread:
        embeddings = embeddings[[row for row in range(len(media)) if row not in unread]]
    return embeddings, skipped


#: The advice of a media file given to the search functions that cannot be read (a
#: dataset's names an option; the caller here holds a list).
_LEAVE_OUT_FIX = 'replace the file, or leave it out of the media'


class _DecodedMedia(Dataset):
    """The media of ``(position, media)`` pairs decoded and resized, uint8 ``[3, S, S]`` or
    ``[T, 3, S, S]``; a file that cannot be read gives ``(path, reason)`` (a
    :class:`MediaReadError` sent back from a worker would lose its fields)."""

    def __init__(self, media: Sequence[tuple[int, MediaInput]], resize: Any,
                 num_frames: int) -> None:
        self.media, self.resize, self.num_frames = media, resize, num_frames

    def __len__(self) -> int:
        return len(self.media)

    def __getitem__(self, row: int) -> Tensor | tuple[str, str]:
        position, item = self.media[row]
        try:
            return self.resize(_decode(item, self.num_frames, position))
        except MediaReadError as error:
            return error.path, error.reason

    @contextmanager
    def decoded(self, num_workers: int) -> Iterator[Iterator[Tensor | tuple[str, str]]]:
        """Every media in order: decoded here as it is asked for (``num_workers=0``), or
        ahead by that many worker processes, which leave Ctrl-C and SIGTERM to this one and
        are shut down as the ``with`` block ends, however it ends."""
        if num_workers == 0 or not self.media:
            yield (self[row] for row in range(len(self)))
            return
        loader = DataLoader(self, batch_size=None, num_workers=num_workers)
        ignore_in_workers(loader, WORKER_IGNORED_SIGNALS)
        batches = iter(loader)
        try:
            yield batches
        finally:
            # An error raised mid-way keeps the iterator alive in its traceback, and workers
            # that ignore SIGTERM then held the process at its exit for ever.
            batches._shutdown_workers()


class NoMediaReadError(MediaReadError):
    """None of the media given to an encoding that skips unreadable files can be read.

    Attributes:
        skipped: a :class:`~xmr.datasets.corrupt_policy.SkippedMedia` for each.
    """

    def __init__(self, skipped: Sequence[SkippedMedia]) -> None:
        self.skipped = list(skipped)
        first = self.skipped[0]
        super().__init__(first.media_path, f'none of the {len(self.skipped)} media can be '
                         f'read, this one: {first.reason}', 'give media that can be read')

    def __reduce__(self) -> tuple:
        return type(self), (self.skipped,)


def _some_read(embeddings: Tensor | None, skipped: Sequence[SkippedMedia]) -> Tensor:
    """``embeddings``, unless no media could be read."""
    if embeddings is None:
        raise NoMediaReadError(skipped)
    return embeddings


def _check_batch_size(batch_size: Any) -> None:
    """Refuse a ``batch_size`` that is not a positive int, naming it.

    A float batch is never full (``len(batch) == 2.5``): the media would all be decoded into
    one batch, the whole gallery held at once.
    """
    if not is_count(batch_size):
        raise ValueError(f'batch_size must be a positive int, got {batch_size!r}')


def _encode_batch(model: BaseRetriever, batch: Sequence[tuple[int, Tensor]],
                  embeddings: Tensor | None, total: int,
                  tokens: dict[int, Tensor] | TokenSetWriter | None = None) -> Tensor:
    """Embed one batch of decoded media into its rows of ``embeddings`` (and their retrieval
    tokens into ``tokens``, by row, when given).

    Args:
        model: the retriever.
        batch: ``(row, media)`` pairs of one shape, media uint8 ``[3, S, S]`` or
            ``[T, 3, S, S]``.
        embeddings: ``[total, E]`` float32 rows by input position, filled in place; ``None``
            before the first batch, which allocates them (its output gives ``E``).
        total: the number of media.

    Returns:
        ``embeddings``, with the batch's rows written.
    """
    stacked = model.data_preprocessor.normalize_media(torch.stack([m for _, m in batch]))
    outputs = model.predict(media=stacked)
    rows = torch.stack([item['media_embedding'] for item in outputs])
    if tokens is not None:
        for (position, _), item in zip(batch, outputs):
            tokens[position] = _emitted_tokens(model, item, 'media_tokens')
    # Filled in place: rows stacked at the end held every embedding twice at once.
    if embeddings is None:
        embeddings = rows.new_empty((total, rows.shape[1]), device='cpu')
    embeddings[torch.tensor([position for position, _ in batch])] = rows.cpu()
    return embeddings


def _emitted_tokens(model: BaseRetriever, item: Mapping[str, Any], key: str) -> Any:
    """``item[key]``, the retrieval tokens ``predict`` emits for a model that scores by them.

    Raises:
        ValueError: a model whose ``token_score()`` is set and whose ``predict`` emits none.
    """
    if key not in item:
        raise ValueError(f'{type(model).__name__}.token_score() scores pairs from their tokens, '
                         f'but its predict emits no {key}: emit them (as evaluation\'s token '
                         'scoring reads them), or return None from token_score()')
    return item[key]


def _decode(item: MediaInput, num_frames: int, position: int) -> Tensor:
    """A media as uint8 ``[3, H, W]`` (image) or ``[T, 3, H, W]`` (video frames).

    Raises:
        ValueError: a tensor of another dtype or shape, named by ``position``.
        MediaReadError: a missing or undecodable file, named with ``position``.
    """
    if isinstance(item, Tensor):
        if item.dtype != torch.uint8 or item.dim() not in (3, 4) or item.shape[-3] != 3:
            raise ValueError(f'media[{position}]: a tensor must be uint8 [3, H, W] or '
                             f'[T, 3, H, W], got {item.dtype} {tuple(item.shape)}')
        return item
    path = Path(item)
    try:
        if path.suffix.lower() in VIDEO_SUFFIXES:
            return read_video_frames(path, num_frames, random_offset=False)[0]
        return read_image(path)
    except MediaReadError as error:
        # Its own advice names a dataset option; the caller here holds a list, not a dataset.
        raise MediaReadError(error.path, f'{error.reason} (media[{position}])',
                             _LEAVE_OUT_FIX) from error
