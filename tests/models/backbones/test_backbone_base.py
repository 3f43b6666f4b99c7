"""xmr.models.backbones.base: the weights' fingerprint every backbone keys its caches by, the
check that a source tokenizer fits its text tower, a video's mean of normalised frames, and the
attention bias a tower keeps for the mask it was given last, and where a pre-norm block's
adapter sites act."""
import copy
import hashlib
import struct

import open_clip
import pytest
import torch
from open_clip.transformer import TextTransformer
from torch import nn

from tests.conftest import TINY_CLIP, tiny_backbone_cfg
from tests.models.backbones.mclip_helpers import TOKENIZER_FILE as XLMR_TOKENIZER
from xmr.engine.feature_cache import backbone_fingerprint
from xmr.models.adapters.base import AdapterSite
from xmr.models.backbones import OpenCLIPTextTower
from xmr.models.backbones.base import (
    TextBackbone,
    TowerShape,
    VisionLanguageBackbone,
    block_linear_shapes,
    check_tokenizer_fits,
    configured_tower_shape,
    position_ids,
    weights_fingerprint,
)
from xmr.models.language.tokenizers import OpenCLIPTokenizer
from xmr.registry import MODELS


def test_the_fingerprint_is_the_description_then_each_entry_by_name_and_float32_values():
    module = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2))
    with torch.no_grad():
        for index, parameter in enumerate(module.parameters()):
            parameter.copy_(torch.arange(parameter.numel()).reshape(parameter.shape) + index / 4)
    digest = hashlib.sha256(b'tiny-arch')
    for name in ['0.bias', '0.weight', '1.bias', '1.weight']:  # key order, not module order
        values = module.state_dict()[name].flatten().tolist()
        digest.update(name.encode() + struct.pack(f'<{len(values)}f', *values))
    assert weights_fingerprint('tiny-arch', module) == digest.hexdigest()[:16]
    assert weights_fingerprint('other-arch', module) != digest.hexdigest()[:16]


def test_a_backbone_without_its_own_fingerprint_is_keyed_by_its_class_and_weights():
    module = nn.Linear(3, 2)
    before = backbone_fingerprint(module)
    assert before == weights_fingerprint('Linear', module)
    with torch.no_grad():
        module.bias[0] += 1e-3
    assert backbone_fingerprint(module) != before


class _ActivationChosenByConfig(VisionLanguageBackbone):
    """A user's backbone whose image tower's activation is a setting, not a weight."""

    def __init__(self, activation: type[nn.Module]) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.visual = nn.Sequential(nn.Flatten(), nn.Linear(3, 4), activation())

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        return self.visual(images)


def test_a_users_backbone_is_keyed_by_its_modules_settings_as_well_as_its_weights():
    """Features of GELU are not reused for SiLU on the same weights; the same build keeps its
    key."""
    gelu, silu = _ActivationChosenByConfig(nn.GELU), _ActivationChosenByConfig(nn.SiLU)
    images = torch.randn(2, 3, 1, 1)
    assert not torch.allclose(gelu.encode_image(images), silu.encode_image(images))
    assert backbone_fingerprint(gelu) != backbone_fingerprint(silu)
    assert backbone_fingerprint(gelu) == backbone_fingerprint(_ActivationChosenByConfig(nn.GELU))


def test_a_caption_may_not_take_the_position_of_an_appended_class_token():
    # embed_cls: 12 caption positions, then the class token the tower writes into position 13.
    text = TextTransformer(context_length=12, vocab_size=49408, width=32, heads=2, layers=1,
                           embed_cls=True, pad_id=0)
    tower = OpenCLIPTextTower(text)
    check_tokenizer_fits(OpenCLIPTokenizer(max_length=12, pad_to=13), tower, 'CoCa')
    with pytest.raises(ValueError, match='tokenizer max_length 13 exceeds the text context '
                                         'length 12 of CoCa'):
        check_tokenizer_fits(OpenCLIPTokenizer(max_length=13, pad_to=13), tower, 'CoCa')


def test_a_source_max_length_that_keeps_no_piece_of_a_caption_is_refused():
    """0 or below sliced nothing off: a long caption overflowed the context at its batch."""
    tower = OpenCLIPTextTower(TextTransformer(context_length=12, vocab_size=49408, width=32,
                                              heads=2, layers=1))
    for max_length in (0, -1, 2):
        with pytest.raises(ValueError, match=(
                f'^tokenizer.max_length={max_length} of the source tokenizer of ViT-T keeps no '
                'piece of a caption: a OpenCLIPTokenizer writes 1 start token.* >= 3$')):
            check_tokenizer_fits(OpenCLIPTokenizer(max_length=max_length), tower, 'ViT-T')
    check_tokenizer_fits(OpenCLIPTokenizer(max_length=3), tower, 'ViT-T')


def test_a_tokenizer_with_one_id_more_than_the_tower_embeds_is_refused():
    """CLIP's BPE emits ids 0..49407: a table of 49408 rows embeds them all, one row fewer
    leaves the last id (``<end_of_text>``, every caption's) without an embedding."""
    tokenizer = OpenCLIPTokenizer(max_length=12)
    assert tokenizer.vocab_size == 49408

    def tower(vocab_size):
        return OpenCLIPTextTower(TextTransformer(context_length=12, vocab_size=vocab_size,
                                                 width=8, heads=2, layers=1))

    check_tokenizer_fits(tokenizer, tower(49408), 'ViT-T')
    with pytest.raises(ValueError, match='^tokenizer emits 49408 ids but the text tower of ViT-T '
                                         'has 49407 embeddings$'):
        check_tokenizer_fits(tokenizer, tower(49407), 'ViT-T')


class _PixelsAsEmbedding(VisionLanguageBackbone):
    """Each ``[3, 1, 1]`` image's pixels are its embedding."""

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        return images.flatten(1)


def test_every_frame_embedding_is_normalised_before_the_mean_whatever_its_norm():
    frames = torch.tensor([[[0.003, 0.004, 0.0], [0.0, 0.0, 2.0]]]).view(1, 2, 3, 1, 1)
    torch.testing.assert_close(_PixelsAsEmbedding().encode_video(frames),
                               torch.tensor([[0.3, 0.4, 0.5]]))


def causal_tower() -> OpenCLIPTextTower:
    return OpenCLIPTextTower(TextTransformer(context_length=12, vocab_size=49408, width=32,
                                             heads=2, layers=1))


def test_the_attention_bias_is_the_masks_in_autocasts_dtype_and_float32_outside_it():
    tower = causal_tower()
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    # Causal, the padding key masked but to itself: written out for the first caption.
    allowed = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]).bool()
    expected = torch.zeros(4, 4).masked_fill(~allowed, float('-inf'))
    bias = tower.attention_bias(mask)
    assert bias.dtype == torch.float32 and torch.equal(bias[0, 0], expected)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        in_autocast = tower.attention_bias(mask)
    assert in_autocast.dtype == torch.bfloat16
    assert torch.equal(in_autocast.float(), tower.build_mask(mask))


def test_the_attention_bias_is_kept_for_its_mask_until_the_mask_changes():
    tower = causal_tower()
    mask = torch.ones(2, 5, dtype=torch.bool)
    bias = tower.attention_bias(mask)
    assert tower.attention_bias(mask) is bias
    twin = mask.clone()  # equal values, another tensor: built for it
    assert tower.attention_bias(twin) is not bias
    assert torch.equal(tower.attention_bias(twin), bias)
    mask[0, 3:] = False  # in place: its version moves
    changed = tower.attention_bias(mask)
    assert torch.equal(changed, tower.build_mask(mask)) and not torch.equal(changed, bias)
    with torch.inference_mode():
        assert torch.equal(tower.attention_bias(mask), changed)


def test_an_in_place_change_of_the_mask_given_last_builds_its_bias_anew():
    tower = causal_tower()
    mask = torch.ones(2, 5, dtype=torch.bool)
    tower.attention_bias(mask)
    mask[0, 3:] = False  # the same tensor, its version moved
    # Causal, each padding key masked but to itself: written out for the first caption.
    allowed = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0],
                            [1, 1, 1, 1, 0], [1, 1, 1, 0, 1]]).bool()
    expected = torch.zeros(5, 5).masked_fill(~allowed, float('-inf'))
    assert torch.equal(tower.attention_bias(mask)[0, 0], expected)


def test_a_caption_of_exactly_the_context_length_fits_and_one_token_more_is_refused():
    tower = causal_tower()  # context_length 12
    assert tower.checked_length(torch.zeros(2, 12, 32)) == 12
    with pytest.raises(ValueError, match='^sequence of 13 tokens exceeds the text context '
                                         'length 12$'):
        tower.checked_length(torch.zeros(2, 13, 32))


def test_a_block_whose_attention_is_narrower_than_its_width_has_linear_shapes_to_match():
    """q/k/v of 4 features from width 8 (heads that say so): the output projection maps the 4
    back to the 8."""
    assert block_linear_shapes(8, 32, inner_dim=4) == {
        AdapterSite.ATTN_QKV: (8, 12), AdapterSite.ATTN_OUT: (4, 8),
        AdapterSite.MLP_FC: (8, 32), AdapterSite.MLP_PROJ: (32, 8)}


def test_positions_counted_over_real_tokens_skip_a_token_read_as_padding():
    """Hugging Face's RoBERTa / M2M100 numbering from ``first = pad_id + 1``: a token read as
    padding (mid-caption or trailing) takes ``pad_id`` and the next real token continues the
    count; without a mask the positions run by index."""
    mask = torch.tensor([[True, True, False, True, False], [True, True, True, True, True]])
    torch.testing.assert_close(position_ids(5, 2, mask),
                               torch.tensor([[2, 3, 1, 4, 1], [2, 3, 4, 5, 6]]))
    torch.testing.assert_close(position_ids(3, 2), torch.tensor([2, 3, 4]))


def _tiny_cclm() -> dict:
    from tests.models.backbones.test_cclm import tiny_cfg
    return tiny_cfg()


def _tiny_mclip() -> dict:
    from tests.models.backbones.mclip_helpers import tiny_mclip_cfg
    return tiny_mclip_cfg()


def _tiny_vit_bert() -> dict:
    from tests.models.backbones.test_vit_bert import tiny_cfg
    return tiny_cfg()


@pytest.mark.parametrize('config', [
    lambda: dict(type='OpenCLIPBackbone', arch=None, model_cfg=TINY_CLIP),
    lambda: dict(type='OpenCLIPBackbone', arch=None, model_cfg=dict(
        TINY_CLIP, text_cfg=dict(TINY_CLIP['text_cfg'], width=48, heads=4, layers=1))),
    _tiny_cclm, _tiny_mclip, _tiny_vit_bert], ids=['clip', 'clip-1-block', 'cclm', 'mclip',
                                                   'vit-bert'])
def test_the_tower_shape_a_backbone_config_gives_is_the_built_towers(config):
    """What the parts on the tower are checked against as the config loads."""
    if config in (_tiny_cclm, _tiny_mclip) and not XLMR_TOKENIZER.is_file():
        pytest.skip(f'XLM-R tokenizer fixture missing: {XLMR_TOKENIZER}')
    cfg = config()
    tower = MODELS.build(cfg).text_tower
    assert configured_tower_shape(cfg) == TowerShape(tower.width, tower.num_blocks,
                                                     tower.embed_dim, tower.fixed_context)


@pytest.mark.parametrize('cfg, shape', [
    # DESIGN: CLIP ViT-B's text tower has width 512 and 12 blocks, and projects to the 512-d
    # joint space; ViT-L/14's is 768 wide, and so is its joint space.
    (dict(type='OpenCLIPBackbone', arch='ViT-B-32'), TowerShape(512, 12, 512)),
    (dict(type='OpenCLIPBackbone', arch='ViT-L-14'), TowerShape(768, 12, 768)),
    # open_clip's SigLIP and SigLIP 2 B/16 configs: 768 wide, 12 bidirectional blocks pooled
    # at the last position ('last'): a fixed context.
    (dict(type='OpenCLIPBackbone', arch='ViT-B-16-SigLIP'), TowerShape(768, 12, 768, True)),
    (dict(type='OpenCLIPBackbone', arch='ViT-B-16-SigLIP2'), TowerShape(768, 12, 768, True)),
    # CCLM's 6 text-only layers of XLM-R large, text_proj to 256; M-CLIP's whole XLM-R large,
    # mapped to ViT-L/14's 768.
    (dict(type='CCLMDualStream', checkpoint='checkpoints/cclm_4m.th'), TowerShape(1024, 6, 256)),
    (dict(type='MultilingualCLIPBackbone'), TowerShape(1024, 24, 768)),
    # Only the hub's config knows these (the Hugging Face cache is empty here): their build
    # checks the parts.
    (dict(type='OpenCLIPBackbone', arch='xlm-roberta-base-ViT-B-32'), None),
    (dict(type='ViTBERTBackbone', text='xmr-tests/no-such-bert'), None),
    (dict(type='OpenCLIPBackbone', arch='ViT-B-32-nosuch'), None)])
def test_the_tower_shape_of_a_named_architecture_is_read_without_building_it(
        cfg, shape, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path))
    assert configured_tower_shape(cfg) == shape


class _BertTeacher(TextBackbone):
    """A user's text-only teacher: a tiny random BERT tower, no tokenizer needed here."""

    def __init__(self) -> None:
        from transformers import BertConfig, BertModel

        from xmr.models.backbones import BertTextTower

        super().__init__()
        torch.manual_seed(0)
        bert = BertModel(BertConfig(vocab_size=20, hidden_size=16, num_hidden_layers=1,
                                    num_attention_heads=2, intermediate_size=32),
                         add_pooling_layer=False)
        self.text_tower = BertTextTower(bert, embed_dim=None)


@pytest.mark.parametrize('name, other', [
    ('pooling', 'mean'), ('causal', True), ('pad_id', 7), ('pad_masked', False), ('end_id', 3),
    ('masks_pad_id', True), ('position_pad_id', 1), ('post_norm', False)])
def test_a_text_tower_switched_to_another_reading_is_keyed_anew(name, other):
    """A user's tower whose ``pooling`` (or any attribute of how it reads the same ids) is a
    plain attribute edited, the same weights, the same class: its cached ``r^S`` are not read
    back."""
    teacher = _BertTeacher()
    key, kept = backbone_fingerprint(teacher), getattr(teacher.text_tower, name)
    assert kept != other
    setattr(teacher.text_tower, name, other)
    assert backbone_fingerprint(teacher) != key
    setattr(teacher.text_tower, name, kept)
    assert backbone_fingerprint(teacher) == key


def _saved_bert(folder) -> str:
    """A tiny random BERT saved as a Hugging Face folder (config and weights)."""
    from transformers import BertConfig, BertModel

    from tests.models.backbones.test_vit_bert import TINY_BERT

    torch.manual_seed(0)
    BertModel(BertConfig(**TINY_BERT), add_pooling_layer=False).save_pretrained(folder)
    return str(folder)


def _saved_xlmr(folder) -> str:
    from transformers import XLMRobertaConfig

    from tests.models.backbones.mclip_helpers import TINY_XLMR
    XLMRobertaConfig(**TINY_XLMR).save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize('config', [
    lambda tmp: dict(_tiny_vit_bert(), text=_saved_bert(tmp), text_cfg=None),
    # text_cfg's fields over the folder's config, as the build reads them: one block of two.
    lambda tmp: dict(_tiny_vit_bert(), text=_saved_bert(tmp), text_cfg=dict(num_hidden_layers=1)),
    lambda tmp: dict(_tiny_mclip(), text_encoder=_saved_xlmr(tmp))], ids=[
        'vit-bert', 'vit-bert-1-block', 'mclip'])
def test_the_tower_shape_of_a_text_encoder_in_a_folder_is_the_built_towers(config, tmp_path):
    """A Hugging Face folder's config is read as the config loads; it was left to the build."""
    if config(tmp_path).get('type') == 'MultilingualCLIPBackbone' and \
            not XLMR_TOKENIZER.is_file():
        pytest.skip(f'XLM-R tokenizer fixture missing: {XLMR_TOKENIZER}')
    cfg = config(tmp_path)
    tower = MODELS.build(cfg).text_tower
    assert configured_tower_shape(cfg) == TowerShape(tower.width, tower.num_blocks,
                                                     tower.embed_dim, tower.fixed_context)


def test_the_tower_shape_of_a_hub_name_is_read_from_the_cache_without_the_network(
        tmp_path, monkeypatch):
    """What ``from_pretrained`` finds in the Hugging Face cache; a name it lacks: ``None``."""
    from huggingface_hub import constants
    from transformers import BertConfig, XLMRobertaConfig

    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path))
    # Each backbone's own encoder: M-CLIP's tower runs XLM-R (RoBERTa's positions) only.
    for kind, option, config_cls in (('ViTBERTBackbone', 'text', BertConfig),
                                     ('MultilingualCLIPBackbone', 'text_encoder',
                                      XLMRobertaConfig)):
        snapshot = tmp_path / f'models--xmr-tests--tiny-{kind}' / 'snapshots' / ('0' * 40)
        config_cls(hidden_size=48, num_hidden_layers=3, num_attention_heads=4).save_pretrained(
            snapshot)
        (snapshot.parent.parent / 'refs').mkdir()
        (snapshot.parent.parent / 'refs' / 'main').write_text('0' * 40)
        cfg = dict(type=kind, embed_dim=16)
        assert configured_tower_shape(dict(cfg, **{option: f'xmr-tests/tiny-{kind}'})) == (
            TowerShape(48, 3, 16))
        assert configured_tower_shape(dict(cfg, **{option: 'xmr-tests/no-such'})) is None


@pytest.mark.parametrize('gives, got', [
    (lambda images: images.flatten(2).transpose(1, 2), r'shape \(2, 1, 3\)'),  # no pooling
    (lambda images: images.flatten(1).repeat(1, 2), r'shape \(2, 6\)'),  # no projection
    (lambda images: (images.flatten(1),), 'a tuple'),
])
def test_a_backbone_whose_encode_image_gives_no_b_by_e_embedding_is_named(gives, got):
    """A backbone of one's own that forgot its pooling failed later inside a loss, and one
    that forgot its projection gave the API embeddings of another width without a word."""
    backbone = _PixelsAsEmbedding()
    backbone.embed_dim = 3
    images = torch.rand(2, 3, 1, 1)
    assert torch.equal(backbone.encode_media(images), images.flatten(1))
    backbone.encode_image = gives
    with pytest.raises(ValueError, match=(
            rf'^_PixelsAsEmbedding.encode_image gave {got} for 2 media; the embedding space '
            r'takes \[B, E\] = \[2, 3\] \(embed_dim\): check its pooling and projection$')):
        backbone.encode_media(images)


SITE_TEXTS = ['a red circle', 'two blue squares on the left of a big green triangle', 'x']


class _LinearMapAt:
    """Hooks that act at one site of one block only, by a fixed matrix: a linear site's delta
    is ``x_in @ matrix``, a residual site's output is ``x @ matrix``."""

    def __init__(self, site: AdapterSite, index: int, matrix: torch.Tensor) -> None:
        self.site, self.index, self.matrix = site, index, matrix

    def residual(self, site, index, x):
        return x @ self.matrix if (site, index) == (self.site, self.index) else x

    def linear(self, site, index, x_in):
        return x_in @ self.matrix if (site, index) == (self.site, self.index) else None


def _merged(clip: torch.nn.Module, site: AdapterSite, index: int,
            matrix: torch.Tensor) -> torch.nn.Module:
    """A copy of ``clip`` whose text block ``index`` has the hooks' map folded into its weights:
    a linear site's delta ``x A`` into the projection's weight (``W + A^T``); a residual site's
    map ``h M`` of a branch output ``h = c W^T + b`` into the branch's last projection
    (``M^T W``, ``b M``)."""
    clip = copy.deepcopy(clip)
    block = clip.transformer.resblocks[index]
    weight, bias = {
        AdapterSite.ATTN_QKV: (block.attn.in_proj_weight, None),
        AdapterSite.ATTN_OUT: (block.attn.out_proj.weight, None),
        AdapterSite.MLP_FC: (block.mlp.c_fc.weight, None),
        AdapterSite.MLP_PROJ: (block.mlp.c_proj.weight, None),
        AdapterSite.ATTN_OUTPUT: (block.attn.out_proj.weight, block.attn.out_proj.bias),
        AdapterSite.MLP_OUTPUT: (block.mlp.c_proj.weight, block.mlp.c_proj.bias),
    }[site]
    with torch.no_grad():
        if bias is None:
            weight += matrix.T
        else:
            weight.copy_(matrix.T @ weight)
            bias.copy_(bias @ matrix)
    return clip


@pytest.mark.parametrize('packed', [True, False])
@pytest.mark.parametrize('site', [AdapterSite.ATTN_QKV, AdapterSite.ATTN_OUT, AdapterSite.MLP_FC,
                                  AdapterSite.MLP_PROJ, AdapterSite.ATTN_OUTPUT,
                                  AdapterSite.MLP_OUTPUT])
def test_a_linear_map_at_a_site_equals_open_clip_with_the_map_folded_into_its_weights(
        site, packed):
    """What an adapter at a site changes, checked against open_clip's own forward.

    A linear site adds ``delta(x_in)`` to the frozen projection's output, reading the
    projection's input; a residual site (``attn.output``, ``mlp.output``) maps the branch's
    output before the residual add. With a linear map both fold into block 1's weights, so
    open_clip's ``encode_text`` on the folded copy is the reference: a delta subtracted, read
    from the projection's output, or a residual site that maps the sum ``x + branch`` instead of
    the branch alone, all differ from it. Packed and padded blocks alike.
    """
    torch.manual_seed(0)
    backbone = MODELS.build(tiny_backbone_cfg()).eval()
    tower = backbone.text_tower
    tower.pack_tokens = packed
    widths = {**{s: shape for s, shape in tower.linear_shapes().items()},
              AdapterSite.ATTN_OUTPUT: (tower.width, tower.width),
              AdapterSite.MLP_OUTPUT: (tower.width, tower.width)}
    generator = torch.Generator().manual_seed(1)
    matrix = 0.3 * torch.randn(widths[site], generator=generator)
    if site in (AdapterSite.ATTN_OUTPUT, AdapterSite.MLP_OUTPUT):
        matrix += torch.eye(tower.width)
    tokens = backbone.tokenizer(SITE_TEXTS)
    x, mask = tower.embed_source(tokens)
    hidden = tower.encode_embeddings(x, mask, _LinearMapAt(site, 1, matrix),
                                     packed=tower.packing(mask))
    assert (tower.packing(mask) is not None) == packed
    sited = tower.head(tower.pool(hidden, mask, tokens['eos_index']))
    ids = open_clip.get_tokenizer('ViT-B-32')(SITE_TEXTS, context_length=32)
    reference = _merged(backbone.clip, site, 1, matrix).encode_text(ids)
    assert not torch.allclose(reference, backbone.clip.encode_text(ids), atol=1e-3)
    torch.testing.assert_close(sited, reference, rtol=1e-4, atol=1e-5)
