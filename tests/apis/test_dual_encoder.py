"""xmr.apis serve CDDS's DualEncoderRetriever as they serve the cross-lingual retriever: loaded,
its texts and media embedded as its own encoders embed them, searched, its galleries saved."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config

from tests.apis.conftest import random_images
from tests.conftest import tiny_backbone_cfg
from xmr.apis import (
    MediaIndex,
    encode_media,
    encode_texts,
    init_retriever,
    trained_languages,
)
from xmr.datasets.media_io import read_image
from xmr.datasets.transforms import MediaTransform
from xmr.registry import MODELS

TINY = dict(type='MediaTransform', backbone=None, size=32)
CDDS = dict(type='CDDSDisentangler', num_heads=2, num_perturbations=2)
QUERIES = {'en': ['a red circle', 'two blue squares on the left', 'a green triangle'],
           'de': ['ein roter Kreis', 'zwei blaue Quadrate']}


def dual_encoder_cfg(**overrides) -> dict:
    return {'type': 'DualEncoderRetriever', 'backbone': tiny_backbone_cfg(), 'disentangler': CDDS,
            'languages': ['en', 'de'], **overrides}


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """A config file, a checkpoint of a CDDS dual encoder whose disentangler moved away from
    its init, and that model."""
    root = tmp_path_factory.mktemp('dual')
    torch.manual_seed(0)
    model = MODELS.build(dual_encoder_cfg())
    with torch.no_grad():
        for parameter in model.disentangler.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    torch.save({'state_dict': model.state_dict()}, root / 'cdds.pth')
    Config(dict(model=dual_encoder_cfg())).dump(root / 'cdds.py')
    return str(root / 'cdds.py'), root / 'cdds.pth', model.eval()


@pytest.fixture
def image_files(tmp_path):
    return random_images(tmp_path, ('beach', 'forest', 'city', 'desert'))


@torch.no_grad()
def by_hand_texts(model, texts, lang):
    """``[N, E]``: the texts through the text tower's tokens, CDDS's semantic components of
    them, pooled over the real tokens, L2-normalised."""
    tokens = model.backbone.tokenizer.evaluation_batch(texts, [lang] * len(texts))
    out = model.backbone.encode_text_tokens(tokens)
    semantic = model.disentangler.encode_text(out.tokens, out.mask)
    return F.normalize(model.disentangler.pool(semantic, out.mask), dim=-1)


@torch.no_grad()
def by_hand_media(model, files):
    """``[N, E]``: each image resized, normalised, through the image tower's tokens and CDDS's
    semantic components, pooled, L2-normalised."""
    resize = MediaTransform(backbone=None, size=32)
    media = model.data_preprocessor.normalize_media(
        torch.stack([resize(read_image(path)) for path in files]))
    out = model.backbone.encode_media_tokens(media)
    semantic = model.disentangler.encode_image(out.tokens, out.mask)
    return F.normalize(model.disentangler.pool(semantic, out.mask), dim=-1)


def test_a_dual_encoder_is_loaded_and_embeds_as_its_own_encoders(trained, image_files):
    """It was refused (TypeError: xmr.apis serves CrossLingualRetriever models)."""
    config, checkpoint, reference = trained
    torch.manual_seed(1)  # a different init, overwritten by the checkpoint
    model = init_retriever(config, checkpoint)
    assert type(model).__name__ == 'DualEncoderRetriever' and not model.training
    assert trained_languages(model) == ['en', 'de']
    for lang, texts in QUERIES.items():
        torch.testing.assert_close(encode_texts(model, texts, lang),
                                   by_hand_texts(reference, texts, lang), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(encode_media(model, image_files, transform=TINY),
                               by_hand_media(reference, image_files), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"query: the model does not read \['fr'\]; it reads "
                                         r"\['en', 'de'\]"):
        encode_texts(model, 'un cercle rouge', 'fr')


def test_a_dual_encoder_s_search_ranks_by_its_own_embeddings(trained, image_files):
    _, _, model = trained
    index = MediaIndex.from_media(model, image_files, transform=TINY)
    gallery = by_hand_media(model, image_files)
    for lang, texts in QUERIES.items():
        best = (by_hand_texts(model, texts, lang) @ gallery.T).topk(3, dim=1)
        hits = index.search(model, texts, lang=lang, k=3)
        for row, query_hits in enumerate(hits):
            assert [hit.media_id for hit in query_hits] == [
                index.media_ids[i] for i in best.indices[row].tolist()]
            assert [hit.score for hit in query_hits] == pytest.approx(
                best.values[row].tolist(), abs=1e-5)


def test_a_plain_dual_encoder_embeds_with_its_towers_own_embeddings(image_files):
    torch.manual_seed(0)
    model = MODELS.build(dual_encoder_cfg(disentangler=None)).eval()
    texts = QUERIES['de']
    with torch.no_grad():
        tokens = model.backbone.tokenizer.evaluation_batch(texts, ['de'] * len(texts))
        expected = F.normalize(model.backbone.encode_text_tokens(tokens).pooled, dim=-1)
    torch.testing.assert_close(encode_texts(model, texts, 'de'), expected, rtol=1e-5,
                               atol=1e-6)
    # A video's frames: the towers' pooled embedding of the clip.
    frames = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        media = model.data_preprocessor.normalize_media(frames[None])
        expected = F.normalize(model.backbone.encode_media_tokens(media).pooled, dim=-1)
    torch.testing.assert_close(encode_media(model, frames, transform=TINY), expected,
                               rtol=1e-5, atol=1e-6)


def test_a_saved_gallery_refuses_a_dual_encoder_of_another_disentangler(trained, image_files,
                                                                         tmp_path):
    """The media embeddings pass through the disentangler: a model of the same backbone and
    other disentangler weights would score its queries against another model's gallery."""
    _, _, model = trained
    index = MediaIndex.from_media(model, image_files, transform=TINY)
    assert set(index.encoded_by['media_head']) == {'disentangler'}
    index.save(tmp_path / 'gallery.idx')
    assert MediaIndex.load(tmp_path / 'gallery.idx', model=model).media_ids == index.media_ids
    torch.manual_seed(2)
    other = MODELS.build(dual_encoder_cfg()).eval()
    other.backbone.load_state_dict(model.backbone.state_dict())
    with pytest.raises(ValueError, match=re.escape(
            f"{tmp_path / 'gallery.idx'}: its media embeddings passed, after the backbone, "
            f"through {index.encoded_by['media_head']}, the model's through ")):
        MediaIndex.load(tmp_path / 'gallery.idx', model=other)
    plain = MODELS.build(dual_encoder_cfg(disentangler=None)).eval()
    plain.backbone.load_state_dict(model.backbone.state_dict())
    with pytest.raises(ValueError, match="the model's through nothing"):
        MediaIndex.load(tmp_path / 'gallery.idx', model=plain)
