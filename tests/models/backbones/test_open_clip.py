import open_clip
import pytest
import torch

from tests.conftest import (
    TINY_CLIP,
    UNCACHED_TOKENIZER,
    check_offline_tokenizer_error,
    randomise,
    tiny_backbone_cfg,
)
from xmr.models.adapters.base import AdapterSite
from xmr.models.backbones import OpenCLIPTextTower
from xmr.models.backbones.base import check_tokenizer_fits
from xmr.models.language.tokenizers import OpenCLIPTokenizer, TokenizerOutOfReach
from xmr.registry import MODELS
from xmr.utils.cli import UserError


@pytest.fixture
def backbone():
    """The tiny CLIP with random LayerNorms and biases: as built, each block's ln_1 equals its
    ln_2 and attention's output bias is zero, and swapping or dropping them showed nowhere."""
    torch.manual_seed(0)
    backbone = MODELS.build(tiny_backbone_cfg()).eval()
    randomise(backbone.clip)
    return backbone


TEXTS = ['a red circle', 'two blue squares on the left of a big green triangle', 'x']


def test_sited_blocks_equal_open_clip_encode_text(backbone):
    tokens = backbone.tokenizer(TEXTS)
    assert tokens['input_ids'].shape[1] == int(tokens['attention_mask'].sum(1).max())
    reference = backbone.clip.encode_text(
        open_clip.get_tokenizer('ViT-B-32')(TEXTS, context_length=32))
    torch.testing.assert_close(backbone.encode_source_text(tokens), reference,
                               rtol=1e-4, atol=1e-5)


def test_video_is_mean_of_normalised_frames(backbone):
    frames = torch.randn(2, 3, 3, 32, 32)
    per_frame = torch.nn.functional.normalize(backbone.encode_image(frames.flatten(0, 1)), dim=-1)
    expected = per_frame.view(2, 3, -1).mean(1)
    torch.testing.assert_close(backbone.encode_video(frames), expected)
    torch.testing.assert_close(backbone.encode_media(frames), expected)


def test_towers_frozen_by_default(backbone):
    assert not any(p.requires_grad for p in backbone.parameters())


class _AddOne:
    """Hooks that add ones at one site and count how often that site is reached."""

    def __init__(self, site, linear_shapes):
        self.site, self.linear_shapes, self.calls = site, linear_shapes, 0

    def residual(self, site, index, x):
        if site == self.site:
            self.calls += 1
            return x + 1.0
        return x

    def linear(self, site, index, x_in):
        if site == self.site:
            self.calls += 1
            return torch.ones(*x_in.shape[:-1], self.linear_shapes[site][1])
        return None


@pytest.mark.parametrize('site', [s for s in AdapterSite if s != AdapterSite.INPUT])
def test_every_site_is_reached_and_changes_the_output(backbone, site):
    tokens = backbone.tokenizer(TEXTS)
    tower = backbone.text_tower
    x = tower.add_positions(tower.embed_tokens(tokens['input_ids']))
    plain = tower.encode_embeddings(x, tokens['attention_mask'])
    hooks = _AddOne(site, tower.linear_shapes())
    hooked = tower.encode_embeddings(x, tokens['attention_mask'], hooks)
    assert hooks.calls == tower.num_blocks
    assert not torch.allclose(plain, hooked)


def test_a_padding_masked_tower_refuses_a_tokenizer_that_pads_with_another_id():
    """open_clip masks the keys whose id is the TextTransformer's own pad_id, here 3, not 0."""
    from open_clip.transformer import TextTransformer

    text = TextTransformer(context_length=16, vocab_size=49408, width=32, heads=2, layers=1,
                           no_causal_mask=True, use_pad_mask=True, pad_id=3, pool_type='first')
    with pytest.raises(ValueError, match='tokenizer pads with id 0 but the text tower of '
                                         'MobileCLIP masks id 3 as padding'):
        check_tokenizer_fits(OpenCLIPTokenizer(max_length=16), OpenCLIPTextTower(text),
                             'MobileCLIP')


def test_a_text_transformer_pooling_its_eos_id_refuses_a_tokenizer_ending_with_another():
    """A ``CustomTextCLIP``'s ``TextTransformer`` with ``pool_type='eos'`` pools the first
    ``eos_id`` (here 2) open_clip finds in the ids; CLIP's BPE ends captions with 49407, which
    it would never find. The tower reads the id from the ``TextTransformer`` itself (a
    ``CLIP``'s is ``text_eos_id``), and the fit check names both ids."""
    from open_clip.transformer import TextTransformer

    text = TextTransformer(context_length=12, vocab_size=49408, width=8, heads=2, layers=1,
                           pool_type='eos', eos_id=2)
    tower = OpenCLIPTextTower(text)
    assert (tower.pooling, tower.end_id) == ('eos', 2)
    with pytest.raises(ValueError, match=r'^tokenizer end id 49407 but the text tower of ViT-T '
                                         r'pools the first id 2 \(text_cfg.eos_id\)'):
        check_tokenizer_fits(OpenCLIPTokenizer(max_length=12), tower, 'ViT-T')
    text.eos_id = 49407
    check_tokenizer_fits(OpenCLIPTokenizer(max_length=12), OpenCLIPTextTower(text), 'ViT-T')


def test_local_checkpoint_file_loads(tmp_path):
    torch.manual_seed(1)
    source = open_clip.CLIP(**TINY_CLIP)
    path = tmp_path / 'tiny.pt'
    torch.save({'state_dict': source.state_dict()}, path)
    torch.manual_seed(2)
    loaded = MODELS.build(tiny_backbone_cfg(pretrained=str(path)))
    images = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(loaded.encode_image(images), source.eval().encode_image(images))


def test_bad_names_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="unknown open_clip architecture 'ViT-B-33'.*ViT-B-32"):
        MODELS.build(dict(type='OpenCLIPBackbone', arch='ViT-B-33'))
    with pytest.raises(UserError, match=r'missing.pt \(pretrained\): no such file'):
        MODELS.build(tiny_backbone_cfg(pretrained=str(tmp_path / 'missing.pt')))
    with pytest.raises(ValueError, match="'nonsense' is neither a file nor an open_clip tag"):
        MODELS.build(dict(type='OpenCLIPBackbone', arch='RN50', pretrained='nonsense'))


def test_an_uncached_hugging_face_tokenizer_offline_names_the_key_and_the_local_routes(
        offline_hub, shared_data):
    from tests.models.backbones.open_clip_families import (
        XLMR_VOCAB,
        backbone_cfg,
        clip_cfg,
        xlmr_tokenizer,
    )

    model_cfg = clip_cfg(pool_type='eos', eos_id=2, vocab_size=XLMR_VOCAB,
                         hf_tokenizer_name=UNCACHED_TOKENIZER)
    with pytest.raises(TokenizerOutOfReach) as raised:
        MODELS.build(backbone_cfg(model_cfg))
    check_offline_tokenizer_error(raised, 'model.backbone.tokenizer: ')
    local = MODELS.build(backbone_cfg(model_cfg, xlmr_tokenizer(clean='whitespace')))
    assert local.tokenizer.vocab_size == XLMR_VOCAB


def test_unreachable_pretrained_tag_names_the_tag_and_the_offline_route(monkeypatch):
    def offline_download(cfg, **kwargs):  # what the hub client raises without network
        raise OSError('We could not connect to huggingface.co')

    monkeypatch.setattr(open_clip.pretrained, 'download_pretrained', offline_download)
    with pytest.raises(FileNotFoundError) as error:
        MODELS.build(dict(type='OpenCLIPBackbone', arch='ViT-B-32', pretrained='openai'))
    assert str(error.value) == (
        "the 'openai' weights of ViT-B-32 (hf-hub:timm/vit_base_patch32_clip_224.openai) could "
        'not be fetched (We could not connect to huggingface.co); download them once and set '
        "pretrained=<local file> with pretrained_cfg='openai' (--cfg-options "
        'model.backbone.pretrained=FILE model.backbone.pretrained_cfg=openai; '
        'docs/pretrained_weights.md)')
