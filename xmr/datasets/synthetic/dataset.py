"""Registered datasets of the synthetic image–caption set (no files: items are drawn on demand).

Random streams: every draw comes from ``np.random.default_rng([seed, split_id, index, tag])``
with a non-zero ``tag`` per purpose (the scene itself uses ``[seed, split_id, index]``).
NumPy's seed sequence pads short seeds with zeros, so a zero tag would replay the scene's
stream; the tags below are therefore 1 and up.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from xmr.datasets.base import MediaDataset
from xmr.datasets.synthetic.captions import (
    CAPTION_LANGUAGES,
    CAPTION_STYLES,
    caption_scene,
    check_languages,
)
from xmr.datasets.synthetic.scenes import (
    Scene,
    check_split,
    render_scene,
    scene_at,
    split_sizes,
)
from xmr.registry import DATASETS, FUNCTIONS

_RENDER_TAG = 1
_CAPTION_TAG = 2
# Draws allowed per requested gallery scene before the split is declared too small.
_MAX_DRAWS_PER_SCENE = 50


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'{name} must be a positive integer, got {value!r}')


def _check_seed(seed: int) -> None:
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f'seed must be a non-negative integer, got {seed!r}')


def _language_number(language: str) -> int:
    """A language's stream number, independent of which other languages a dataset asks for."""
    return 1 + CAPTION_LANGUAGES.index(language)


class _SyntheticImages(MediaDataset):
    """Shared validation, rendering and naming of the synthetic datasets."""

    def __init__(self, num_scenes: int, split: str, image_size: int, seed: int) -> None:
        _check_positive('num_scenes', num_scenes)
        _check_positive('image_size', image_size)
        if image_size < 16:
            raise ValueError(f'image_size must be at least 16 pixels, got {image_size}')
        _check_seed(seed)
        self.split_id = check_split(split)
        self.num_scenes = num_scenes
        self.split = split
        self.image_size = image_size
        self.seed = seed

    def _common_metainfo(self) -> dict[str, Any]:
        """The keys of ``MediaCaptionDataset.metainfo`` that apply, plus the generator's."""
        return {'dataset': 'synthetic', 'split': self.split, 'media_type': 'image',
                'source_lang': 'en', 'num_scenes': self.num_scenes,
                'image_size': self.image_size, 'seed': self.seed,
                'styles': list(CAPTION_STYLES)}

    def _rng(self, *stream: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.split_id, *stream])

    def _media(self, scene: Scene, stream_index: int) -> torch.Tensor | None:
        if not self.with_media:
            return None
        pixels = render_scene(scene, self.image_size, self._rng(stream_index, _RENDER_TAG))
        return torch.from_numpy(pixels)

    def _media_id(self, stream_index: int) -> str:
        return (f'synthetic_{self.split}_seed{self.seed}_px{self.image_size}_'
                f'{stream_index:06d}')

    def _check_index(self, index: int) -> None:
        if not 0 <= index < len(self):
            raise IndexError(f'{type(self).__name__} index {index} is outside [0, {len(self)})')


@DATASETS.register_module()
class SyntheticPairDataset(_SyntheticImages):
    """Training pairs: a rendered scene with an English caption and a target-language caption.

    With ``languages=[]`` (English only, the source-finetune phase) item ``i`` is scene ``i``
    with an English caption and ``target_text=None``. With target languages, each scene is
    paired with each language: item ``i`` is scene ``i // len(languages)`` in language
    ``languages[i % len(languages)]``. Both captions describe the same scene, each in a style
    drawn per item; item ``i`` never changes, so a resumed run sees the same data.

    Args:
        num_scenes: scenes of the split to use (stream indices ``0 .. num_scenes - 1``).
        languages: target language codes among ``('en', 'de', 'fr', 'zh', 'ja')``.
        split: ``'train'``, ``'val'`` or ``'test'`` (disjoint scene semantics).
        image_size: side of the square images in pixels.
        seed: seed of the whole set.

    Items: ``dict(media=uint8 [3, H, W], media_id=str, source_text=str, target_text=str | None,
    lang=str, index=int)``.
    """

    def __init__(self, num_scenes: int, languages: list[str] | tuple[str, ...],
                 split: str = 'train', image_size: int = 32, seed: int = 0) -> None:
        super().__init__(num_scenes, split, image_size, seed)
        self.languages = check_languages(languages, 'SyntheticPairDataset languages')

    @property
    def metainfo(self) -> dict[str, Any]:
        """Facts about the data, read by MMEngine's runner into evaluators' ``dataset_meta``."""
        return {**self._common_metainfo(), 'languages': list(self.languages)}

    def __len__(self) -> int:
        return self.num_scenes * max(len(self.languages), 1)

    def item_languages(self) -> np.ndarray:
        """``[N]``: each item's position in :attr:`languages` (0 for English alone)."""
        return np.arange(len(self)) % max(len(self.languages), 1)

    def _item(self, index: int) -> tuple[int, Scene, dict[str, Any]]:
        """Item ``index``'s scene index, scene and texts (``source_text``, ``target_text``,
        ``lang``), no image rendered."""
        self._check_index(index)
        if self.languages:
            scene_index, language_slot = divmod(index, len(self.languages))
            lang = self.languages[language_slot]
        else:
            scene_index, lang = index, 'en'
        scene = scene_at(self.seed, self.split, scene_index)
        style_rng = self._rng(scene_index, _CAPTION_TAG, _language_number(lang))
        source_style, target_style = style_rng.integers(len(CAPTION_STYLES), size=2)
        target_text = (caption_scene(scene, lang, CAPTION_STYLES[target_style])
                       if self.languages else None)
        return scene_index, scene, dict(
            source_text=caption_scene(scene, 'en', CAPTION_STYLES[source_style]),
            target_text=target_text, lang=lang)

    def captions_of(self, index: int) -> dict[str, list[str]]:
        """Captions of item ``index``, no image rendered: its English caption and, with target
        languages, its target-language one (an English target follows the source caption)."""
        texts = self._item(index)[2]
        captions = {'en': [texts['source_text']]}
        if texts['target_text'] is not None:
            captions.setdefault(texts['lang'], []).append(texts['target_text'])
        return captions

    def __getitem__(self, index: int) -> dict[str, Any]:
        scene_index, scene, texts = self._item(index)
        return dict(media=self._media(scene, scene_index), media_id=self._media_id(scene_index),
                    **texts, index=int(index))


@DATASETS.register_module()
class SyntheticRetrievalDataset(_SyntheticImages):
    """An evaluation gallery: distinct scenes, each with captions in several languages.

    The gallery walks the split's scene stream and keeps a scene only when no earlier kept scene
    has the same description, so that every caption has exactly one correct image. A larger
    gallery of the same split and seed starts with the smaller one.

    Args:
        num_scenes: images in the gallery.
        languages: caption languages among ``('en', 'de', 'fr', 'zh', 'ja')``.
        split: ``'train'``, ``'val'`` or ``'test'``.
        image_size: side of the square images in pixels.
        seed: seed of the whole set.
        captions_per_image: captions per image and language, each in a different style
            (at most ``len(CAPTION_STYLES)`` = 5).

    Items: ``dict(media=uint8 [3, H, W], media_id=str, captions={lang: [str, ...]}, index=int)``.
    """

    def __init__(self, num_scenes: int,
                 languages: list[str] | tuple[str, ...] = ('en', 'de', 'fr', 'zh', 'ja'),
                 split: str = 'val', image_size: int = 32, seed: int = 0,
                 captions_per_image: int = 2) -> None:
        super().__init__(num_scenes, split, image_size, seed)
        self.languages = check_languages(languages, 'SyntheticRetrievalDataset languages')
        if not self.languages:
            raise ValueError('SyntheticRetrievalDataset languages must name at least one language')
        _check_positive('captions_per_image', captions_per_image)
        if captions_per_image > len(CAPTION_STYLES):
            raise ValueError(f'captions_per_image={captions_per_image} exceeds the '
                             f'{len(CAPTION_STYLES)} caption styles {CAPTION_STYLES}')
        available = split_sizes()[split]
        if num_scenes > available:
            raise ValueError(f'SyntheticRetrievalDataset num_scenes={num_scenes} exceeds the '
                             f'{available} distinct scenes of split {split!r}')
        self.captions_per_image = captions_per_image
        self.gallery = self._distinct_scenes()

    def _distinct_scenes(self) -> list[tuple[int, Scene]]:
        """``(stream index, scene)`` of the first ``num_scenes`` distinct scenes of the split."""
        seen: set[str] = set()
        gallery: list[tuple[int, Scene]] = []
        for stream_index in range(_MAX_DRAWS_PER_SCENE * self.num_scenes):
            scene = scene_at(self.seed, self.split, stream_index)
            if scene.description not in seen:
                seen.add(scene.description)
                gallery.append((stream_index, scene))
                if len(gallery) == self.num_scenes:
                    return gallery
        raise ValueError(
            f'SyntheticRetrievalDataset found only {len(gallery)} distinct scenes of split '
            f'{self.split!r} in {_MAX_DRAWS_PER_SCENE * self.num_scenes} draws; ask for fewer '
            f'than num_scenes={self.num_scenes} (the split holds {split_sizes()[self.split]})')

    @property
    def metainfo(self) -> dict[str, Any]:
        """Facts about the data, read by MMEngine's runner into evaluators' ``dataset_meta``."""
        return {**self._common_metainfo(), 'languages': list(self.languages),
                'translated_languages': [], 'captions_per_image': self.captions_per_image}

    def __len__(self) -> int:
        return self.num_scenes

    def media_ids(self) -> list[str]:
        """``[N]`` each item's ``media_id``, in item order, none rendered: what a
        ``ConcatDataset`` of galleries compares (two of one split and seed share their first
        scenes)."""
        return [self._media_id(stream_index) for stream_index, _ in self.gallery]

    def captions_of(self, index: int) -> dict[str, list[str]]:
        """Captions of gallery image ``index``: per language, distinct styles."""
        self._check_index(index)
        stream_index, scene = self.gallery[index]
        captions = {}
        for lang in self.languages:
            order = self._rng(stream_index, _CAPTION_TAG,
    _language_number(lang)).permutation(len(CAPTION_STYLES))
            captions[lang] = [caption_scene(scene, lang, CAPTION_STYLES[style])
                              for style in order[:self.captions_per_image]]
        return captions

    def __getitem__(self, index: int) -> dict[str, Any]:
        self._check_index(index)
        stream_index, scene = self.gallery[index]
        return dict(media=self._media(scene, stream_index),
                    media_id=self._media_id(stream_index),
                    captions=self.captions_of(index), index=int(index))


@FUNCTIONS.register_module()
def synthetic_caption_corpus(languages: list[str] | tuple[str, ...], num_scenes: int = 2000,
                             seed: int = 0) -> list[str]:
    """Captions of the first ``num_scenes`` training scenes in every language and style.

    The corpus a SentencePiece tokenizer for the target languages is trained on; it covers the
    whole vocabulary of the grammar once ``num_scenes`` is in the hundreds.

    Args:
        languages: language codes among ``('en', 'de', 'fr', 'zh', 'ja')``.
        num_scenes: training scenes to describe.
        seed: seed of the whole set.

    Returns:
        ``num_scenes * len(languages) * len(CAPTION_STYLES)`` captions, scene by scene.
    """
    languages = check_languages(languages, 'synthetic_caption_corpus languages')
    _check_positive('num_scenes', num_scenes)
    _check_seed(seed)
    corpus = []
    for scene_index in range(num_scenes):
        scene = scene_at(seed, 'train', scene_index)
        corpus.extend(caption_scene(scene, lang, style)
                      for lang in languages for style in CAPTION_STYLES)
    return corpus
