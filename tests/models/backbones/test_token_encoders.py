"""Token-level encoders of the backbones (``encode_image_tokens`` / ``encode_text_tokens``)."""
import pytest
import torch

from tests.conftest import CORPUS, tiny_backbone_cfg
from tests.models.backbones.mclip_helpers import TOKENIZER_FILE, tiny_mclip_cfg
from xmr.models.backbones.base import TokenOutput, VisionLanguageBackbone
from xmr.registry import MODELS, TOKENIZERS

TEXTS = ['a red circle', 'two blue squares on the left of a big green triangle', 'x']


@pytest.fixture(scope='module')
def clip():
    torch.manual_seed(0)
    return MODELS.build(tiny_backbone_cfg()).eval()


def check_open_clip_image_tokens(out: TokenOutput, visual, images, pooled) -> None:
    """Class token then patches of an open_clip ViT, checked against a hand computation."""
    grid = visual.grid_size[0] * visual.grid_size[1]
    assert isinstance(out, TokenOutput)
    assert out.tokens.shape == (images.shape[0], 1 + grid, pooled.shape[1]) and out.mask.all()
    torch.testing.assert_close(out.pooled, pooled)
    # 'tok' pooling: the pooled embedding is the class token through ln_post and proj.
    torch.testing.assert_close(out.tokens[:, 0], pooled, rtol=1e-4, atol=1e-5)
    # A patch token is ln_post(last block output) @ proj, computed here by hand.
    hidden = visual.transformer(visual._embeds(images))
    torch.testing.assert_close(out.tokens[:, 1:], visual.ln_post(hidden[:, 1:]) @ visual.proj,
                               rtol=1e-4, atol=1e-5)


def test_open_clip_image_tokens_are_class_token_then_patches(clip):
    images = torch.randn(2, 3, 32, 32)
    check_open_clip_image_tokens(clip.encode_image_tokens(images), clip.clip.visual, images,
                                 clip.clip.encode_image(images))


@pytest.mark.skipif(not TOKENIZER_FILE.is_file(), reason=f'missing {TOKENIZER_FILE}')
def test_mclip_image_tokens_are_its_open_clip_towers():
    torch.manual_seed(0)
    backbone = MODELS.build(tiny_mclip_cfg()).eval()
    images = torch.randn(2, 3, 32, 32)
    check_open_clip_image_tokens(backbone.encode_image_tokens(images), backbone.visual, images,
                                 backbone.visual(images))
    text = backbone.tokenizer(['Ein Hund rennt.', 'a dog on the grass'])
    out = backbone.encode_text_tokens(text)
    # Mean pooling: the pooled embedding is the linear map of the masked mean of the tokens.
    weights = text['attention_mask'].unsqueeze(-1).float()
    torch.testing.assert_close(out.pooled, (out.tokens * weights).sum(1) / weights.sum(1),
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.pooled, backbone.encode_source_text(text))


def test_text_tokens_are_every_position_through_the_head(clip):
    tokens = clip.tokenizer(TEXTS)
    out = clip.encode_text_tokens(tokens)
    assert out.tokens.shape == (3, tokens['input_ids'].shape[1], 32)
    assert torch.equal(out.mask, tokens['attention_mask'])
    reference = clip.encode_source_text(tokens)
    torch.testing.assert_close(out.pooled, reference)
    torch.testing.assert_close(out.tokens[torch.arange(3), tokens['eos_index']], reference,
                               rtol=1e-4, atol=1e-5)


def test_video_tokens_are_the_frames_tokens_in_order(clip):
    frames = torch.randn(2, 3, 3, 32, 32)
    out = clip.encode_media_tokens(frames)
    per_frame = clip.encode_image_tokens(frames[1])
    assert out.tokens.shape == (2, 3 * 17, 32) and out.mask.shape == (2, 51)
    torch.testing.assert_close(out.tokens[1].view(3, 17, 32), per_frame.tokens)
    torch.testing.assert_close(out.pooled, clip.encode_video(frames))


def test_cclm_image_tokens_average_to_its_embedding():
    tokenizer = TOKENIZERS.build(dict(type='SentencePieceTokenizer', corpus=CORPUS * 20,
                                      vocab_size=48))
    torch.manual_seed(0)
    backbone = MODELS.build(dict(
        type='CCLMDualStream', image_size=64, window_size=4,
        vision=dict(embed_dim=16, depths=(1, 1), num_heads=(2, 4)),
        text=dict(hidden_size=32, num_layers=1, num_heads=4, intermediate_size=64,
                  vocab_size=64, max_position_embeddings=80),
        embed_dim=16, tokenizer=tokenizer)).eval()
    images = torch.randn(2, 3, 64, 64)
    out = backbone.encode_image_tokens(images)
    grid = backbone.vision.forward_features(images).shape[1:3]
    assert out.tokens.shape == (2, grid[0] * grid[1], 16)
    torch.testing.assert_close(out.pooled, backbone.encode_image(images))
    torch.testing.assert_close(out.tokens.mean(1), out.pooled, rtol=1e-4, atol=1e-5)
    # Row-major patches: timm's own NCHW maps of the last stage, read row by row.
    maps = backbone.vision.forward_intermediates(images, indices=1, norm=True,
                                                 output_fmt='NCHW', intermediates_only=True)[0]
    torch.testing.assert_close(out.tokens, backbone.vision_proj(maps.flatten(2).transpose(1, 2)),
                               rtol=1e-4, atol=1e-5)
    text = tokenizer(['ein roter Kreis', 'un cercle'])
    torch.testing.assert_close(backbone.encode_text_tokens(text).tokens[:, 0],
                               backbone.encode_source_text(text), rtol=1e-4, atol=1e-5)


def test_a_backbone_without_image_tokens_is_named():
    class PooledOnly(VisionLanguageBackbone):
        def encode_image(self, images):
            return images.flatten(1)

    with pytest.raises(TypeError, match='PooledOnly exposes no token-level image encoder'):
        PooledOnly().encode_image_tokens(torch.zeros(1, 3, 2, 2))
