"""The CCLM dual-stream backbone: its BERT text tower run block by block, and the backbone."""
import copy
import functools

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import (
    SHARED_DATA,
    UNCACHED_TOKENIZER,
    check_offline_tokenizer_error,
    randomise,
)
from xmr.models.adapters.base import AdapterSite
from xmr.models.backbones.bert import BertTextTower, build_bert
from xmr.models.backbones.cclm import CCLM_IMAGE_MEAN, CCLM_IMAGE_STD, CCLM_TEXT, CCLMDualStream
from xmr.models.language.tokenizers import TokenizerOutOfReach
from xmr.registry import MODELS, TOKENIZERS, TRANSFORMS

WIDTH, HEADS, FFN, LAYERS, EMBED_DIM = 32, 4, 64, 2, 16
TOKENIZER_FILE = SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json'
needs_tokenizer = pytest.mark.skipif(not TOKENIZER_FILE.is_file(),
                                     reason=f'real XLM-R tokenizer not found at {TOKENIZER_FILE}')


def tiny_bert():
    return build_bert(dict(CCLM_TEXT, vocab_size=100, hidden_size=WIDTH, num_layers=LAYERS,
                           num_heads=HEADS, intermediate_size=FFN, max_position_embeddings=24))


@pytest.fixture
def tower():
    tower = BertTextTower(tiny_bert(), EMBED_DIM)
    randomise(tower, scale=0.3)
    return tower.eval()


def batch():
    ids = torch.tensor([[0, 5, 17, 42, 9, 2], [0, 33, 2, 1, 1, 1]])
    mask = ids != 1
    mask[:, 0] = True
    return ids, mask, mask.sum(1) - 1


def hidden_states(tower, hooks=None):
    ids, mask, _ = batch()
    x = tower.add_positions(tower.embed_tokens(ids))
    return tower.encode_embeddings(x, mask, hooks=hooks), mask


def test_blocks_equal_transformers_bert_forward(tower):
    bert = tiny_bert().eval()
    bert.embeddings.load_state_dict(tower.embeddings.state_dict())
    for mine, theirs in zip(tower.layers, bert.encoder.layer):
        theirs.load_state_dict(mine.state_dict())
    ids, mask, _ = batch()
    with torch.no_grad():
        expected = bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        ours, _ = hidden_states(tower)
    # Padding queries differ by design (they attend to themselves); real tokens must match.
    torch.testing.assert_close(ours[mask], expected[mask], rtol=1e-4, atol=1e-5)


def test_without_a_projection_the_embedding_is_berts_cls_state(tower):
    bert = tiny_bert()
    plain = BertTextTower(bert, None)
    randomise(plain, scale=0.3)  # the tower uses bert's modules, so bert holds the same weights
    plain.eval()
    ids, mask, _ = batch()
    with torch.no_grad():
        expected = bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state[:, 0]
        ours = plain.head(plain.encode_embeddings(plain.add_positions(plain.embed_tokens(ids)),
                                                  mask)[:, 0])
    assert plain.text_proj is None and plain.embed_dim == WIDTH
    assert not any(name.startswith('text_proj') for name, _ in plain.named_parameters())
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-5)


def test_positions_start_at_zero(tower):
    length = 5
    embeddings = tower.embeddings
    expected = F.layer_norm(
        embeddings.token_type_embeddings.weight[0] + embeddings.position_embeddings.weight[:length],
        (WIDTH,), embeddings.LayerNorm.weight, embeddings.LayerNorm.bias, eps=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(tower.add_positions(torch.zeros(1, length, WIDTH))[0],
                                   expected)


def test_sequence_longer_than_position_table_is_refused(tower):
    with pytest.raises(ValueError, match='exceeds the text context length 24'):
        tower.add_positions(torch.zeros(1, 25, WIDTH))


def test_tower_interface_values(tower):
    assert (tower.causal, tower.pooling, tower.width, tower.num_blocks) == (False, 'cls', WIDTH,
                                                                            LAYERS)
    assert tower.linear_shapes() == {AdapterSite.ATTN_QKV: (WIDTH, 3 * WIDTH),
                                     AdapterSite.ATTN_OUT: (WIDTH, WIDTH),
                                     AdapterSite.MLP_FC: (WIDTH, FFN),
                                     AdapterSite.MLP_PROJ: (FFN, WIDTH)}
    pooled = torch.randn(3, WIDTH)
    torch.testing.assert_close(tower.head(pooled), pooled @ tower.text_proj.weight.T
                               + tower.text_proj.bias)


class OneSite:
    """Hooks acting at one site of one block: a linear delta ``x_in A^T`` or doubling."""

    def __init__(self, site, block, delta_weight=None):
        self.site, self.block, self.delta_weight, self.calls = site, block, delta_weight, 0

    def residual(self, site, index, x):
        if (site, index) == (self.site, self.block):
            self.calls += 1
            return 2 * x
        return x

    def linear(self, site, index, x_in):
        if (site, index) == (self.site, self.block):
            self.calls += 1
            return x_in @ self.delta_weight.T
        return None


def _grow(weight, delta):
    with torch.no_grad():
        weight += delta


def _double(*tensors):
    with torch.no_grad():
        for tensor in tensors:
            tensor *= 2


LINEAR_WEIGHTS = {
    AdapterSite.ATTN_OUT: (lambda layer: [layer.attention.output.dense.weight], (WIDTH, WIDTH)),
    AdapterSite.MLP_FC: (lambda layer: [layer.intermediate.dense.weight], (FFN, WIDTH)),
    AdapterSite.MLP_PROJ: (lambda layer: [layer.output.dense.weight], (WIDTH, FFN)),
    AdapterSite.ATTN_QKV: (lambda layer: [layer.attention.self.query.weight,
                                          layer.attention.self.key.weight,
                                          layer.attention.self.value.weight], (3 * WIDTH, WIDTH)),
}

RESIDUAL_EQUIVALENTS = {
    # Doubling a sub-layer's output before its residual add = doubling its last projection;
    # doubling the block output after the post-LN LayerNorm = doubling that LayerNorm's affine.
    AdapterSite.ATTN_OUTPUT: lambda layer: [layer.attention.output.dense.weight,
                                            layer.attention.output.dense.bias],
    AdapterSite.MLP_OUTPUT: lambda layer: [layer.output.dense.weight, layer.output.dense.bias],
    AdapterSite.BLOCK_OUTPUT: lambda layer: [layer.output.LayerNorm.weight,
                                             layer.output.LayerNorm.bias],
}


@pytest.mark.parametrize('site', list(LINEAR_WEIGHTS))
def test_linear_site_delta_equals_adding_to_the_frozen_weight(tower, site):
    weights_of, shape = LINEAR_WEIGHTS[site]
    delta = 0.2 * torch.randn(shape, generator=torch.Generator().manual_seed(3))
    hooks = OneSite(site, block=1, delta_weight=delta)
    edited = copy.deepcopy(tower)
    for weight, part in zip(weights_of(edited.layers[1]), delta.chunk(len(weights_of(
            edited.layers[1])), dim=0)):
        _grow(weight, part)
    with torch.no_grad():
        hooked, mask = hidden_states(tower, hooks)
        expected, _ = hidden_states(edited)
        plain, _ = hidden_states(tower)
    assert hooks.calls == 1
    torch.testing.assert_close(hooked[mask], expected[mask], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(hooked[mask], plain[mask], atol=1e-3)


@pytest.mark.parametrize('site', list(RESIDUAL_EQUIVALENTS))
def test_residual_site_sits_before_the_residual_add_and_norm(tower, site):
    hooks = OneSite(site, block=0)
    edited = copy.deepcopy(tower)
    _double(*RESIDUAL_EQUIVALENTS[site](edited.layers[0]))
    with torch.no_grad():
        hooked, mask = hidden_states(tower, hooks)
        expected, _ = hidden_states(edited)
        plain, _ = hidden_states(tower)
    assert hooks.calls == 1
    torch.testing.assert_close(hooked[mask], expected[mask], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(hooked[mask], plain[mask], atol=1e-3)


def test_hooks_returning_no_delta_leave_the_tower_unchanged(tower):
    class Silent:
        def residual(self, site, index, x):
            return x

        def linear(self, site, index, x_in):
            return None

    with torch.no_grad():
        torch.testing.assert_close(hidden_states(tower, Silent())[0], hidden_states(tower)[0])


# ------------------------------------------------------------------ the backbone
@functools.cache
def xlmr_tokenizer():
    return TOKENIZERS.build(dict(type='CCLMTokenizer', tokenizer_file=str(TOKENIZER_FILE)))


def tiny_cfg(text=None, **overrides):
    cfg = dict(type='CCLMDualStream', image_size=64, window_size=4,
               vision=dict(embed_dim=16, depths=(1, 1), num_heads=(2, 4)),
               text=dict(hidden_size=WIDTH, num_layers=LAYERS, num_heads=HEADS,
                         intermediate_size=FFN, max_position_embeddings=48, **(text or {})),
               embed_dim=EMBED_DIM, tokenizer=xlmr_tokenizer())
    cfg.update(overrides)
    return cfg


@needs_tokenizer
def test_backbone_is_registered_frozen_and_uses_cclm_preprocessing():
    backbone = MODELS.build(tiny_cfg())
    assert isinstance(backbone, CCLMDualStream)
    assert not any(p.requires_grad for p in backbone.parameters())
    assert backbone.image_mean == CCLM_IMAGE_MEAN and backbone.image_std == CCLM_IMAGE_STD
    assert backbone.image_size == (64, 64) and backbone.embed_dim == EMBED_DIM
    assert float(backbone.temperature) == pytest.approx(0.07)
    scale, bias = backbone.pair_logits()  # what a SigmoidLoss / the checkpoint's temp read
    assert float(scale) == pytest.approx(1 / 0.07) and bias is None
    assert backbone.tokenizer.max_length == 40 and backbone.tokenizer.pad_id == 1


@needs_tokenizer
def test_image_feature_is_projection_of_mean_final_token():
    backbone = MODELS.build(tiny_cfg()).eval()
    images = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        tokens = backbone.vision.forward_features(images)
        expected = backbone.vision_proj(tokens.mean(dim=(1, 2)))
        torch.testing.assert_close(backbone.encode_image(images), expected)
        frames = torch.randn(2, 3, 3, 64, 64)
        per_frame = F.normalize(backbone.encode_image(frames.flatten(0, 1)), dim=-1)
        torch.testing.assert_close(backbone.encode_media(frames),
                                   per_frame.view(2, 3, -1).mean(1))


@needs_tokenizer
def test_window_defaults_to_a_32nd_of_the_image():
    assert MODELS.build(tiny_cfg(image_size=224, window_size=None)).window_size == 7


@needs_tokenizer
def test_bad_options_are_refused():
    with pytest.raises(KeyError, match=r"unknown CCLM text option\(s\) \['layers'\]"):
        MODELS.build(tiny_cfg(text=dict(layers=2)))
    with pytest.raises(ValueError, match="unknown bias_interpolation 'nearest'"):
        MODELS.build(tiny_cfg(bias_interpolation='nearest'))
    with pytest.raises(ValueError, match='tokenizer emits 250002 ids'):
        MODELS.build(tiny_cfg(text=dict(vocab_size=1000)))


@needs_tokenizer
def test_fingerprint_follows_the_weights():
    backbone = MODELS.build(tiny_cfg())
    before = backbone.fingerprint()
    assert backbone.fingerprint() == before
    with torch.no_grad():
        backbone.vision_proj.bias += 1
    assert backbone.fingerprint() != before


@needs_tokenizer
def test_fingerprint_follows_a_setting_that_changes_features_but_no_weight():
    """r^S cached under GELU was read back under ReLU: the fingerprint hashed the image
    settings and the weights only."""
    def built(**text):
        torch.manual_seed(0)
        return MODELS.build(tiny_cfg(text=text))

    gelu, relu, eps = built(hidden_act='gelu'), built(hidden_act='relu'), built(layer_norm_eps=0.1)
    assert all(torch.equal(gelu.state_dict()[k], v) for k, v in relu.state_dict().items())
    assert len({gelu.fingerprint(), relu.fingerprint(), eps.fingerprint()}) == 3
    assert built(hidden_act='gelu').fingerprint() == gelu.fingerprint()


@needs_tokenizer
def test_target_branch_and_static_adapters_run_on_the_cclm_tower():
    retriever = MODELS.build(dict(
        type='CrossLingualRetriever', backbone=tiny_cfg(),
        language_branch=dict(type='TargetLanguageBranch', languages=['de'],
                             tokenizer=dict(type='CCLMTokenizer',
                                            tokenizer_file=str(TOKENIZER_FILE)),
                             embedding=dict(type='TargetEmbedding', table_width=8),
                             adapters=dict(type='StaticAdapter', hidden=4, zero_init=True))))
    branch, tower = retriever.language_branch, retriever.backbone.text_tower
    tokens = branch.tokenize(['ein Hund läuft am Strand', 'zwei Kinder'])
    embeddings = branch.embed(tokens)
    # Zero-initialised adapters are the identity: the branch is the frozen tower on its inputs.
    expected = tower.head(tower.pool(tower.encode_embeddings(
        embeddings, tokens['attention_mask']), tokens['attention_mask'], tokens['eos_index']))
    torch.testing.assert_close(branch.encode(embeddings, tokens, ['de', 'de']), expected)
    source = retriever.backbone.tokenizer(['a dog runs on the beach', 'two children'])
    losses = retriever.loss(source_tokens=source, target_tokens=tokens, langs=['de', 'de'])
    losses['loss_cl'].backward()
    assert branch.embedding.proj.weight.grad is not None
    assert all(p.grad is None for p in retriever.backbone.parameters())


@needs_tokenizer
def test_the_default_media_transform_is_cclm_s_test_transform(tmp_path):
    """encode_media's default (``media_transform()``) resized the short side and centre-cropped
    a wide image, cutting its sides off; CCLM's ``test_transform`` (``dataset/__init__.py``)
    resizes the whole image to ``image_res`` x ``image_res``, bicubic, and so does it now
    (tensor and PIL bicubic resampling differ by a couple of grey levels)."""
    import numpy as np
    from PIL import Image
    from torchvision import transforms

    from xmr.datasets.media_io import read_image

    backbone = MODELS.build(tiny_cfg())
    y, x = np.mgrid[0:120, 0:200]
    pixels = np.stack([x * 255 // 200, y * 255 // 120, (3 * x + y) % 256], -1).astype(np.uint8)
    Image.fromarray(pixels).save(tmp_path / 'wide.png')
    ours = TRANSFORMS.build(backbone.media_transform())(read_image(tmp_path / 'wide.png'))
    authors = transforms.Compose([
        transforms.Resize((64, 64), interpolation=transforms.InterpolationMode.BICUBIC),
        transforms.ToTensor()])(Image.open(tmp_path / 'wide.png'))
    assert (ours.float() - 255 * authors).abs().max() <= 3


@needs_tokenizer
def test_an_uncached_hugging_face_tokenizer_offline_names_the_key_and_the_local_routes(
        offline_hub):
    with pytest.raises(TokenizerOutOfReach) as raised:
        MODELS.build(tiny_cfg(tokenizer=dict(type='CCLMTokenizer',
                                             name_or_path=UNCACHED_TOKENIZER)))
    check_offline_tokenizer_error(raised, 'model.backbone.tokenizer: ', 'CCLMTokenizer')
    # XLM-R's tokenizer.json loads offline, given as a config (tiny_cfg's is built).
    local = dict(type='CCLMTokenizer', tokenizer_file=str(TOKENIZER_FILE))
    assert MODELS.build(tiny_cfg(tokenizer=local)).tokenizer.vocab_size == 250002
