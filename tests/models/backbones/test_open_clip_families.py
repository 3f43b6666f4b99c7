"""Every open_clip family's frozen source path equals open_clip, and the target branch trains on it.

Tolerance of every equality: float32 on CPU, ``atol=1e-5, rtol=1e-5`` (the written-out blocks
compute the same arithmetic as open_clip's; only the order of floating-point sums differs).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re
import shutil

import open_clip
import pytest
import torch
from open_clip.coca_model import MultimodalCfg
from open_clip.model import CLIPTextCfg

from tests.conftest import MIXED_BATCH
from tests.models.backbones.open_clip_families import (
    HF_ENCODER_STAND_INS,
    TEXTS,
    XLMR_TOKENIZER,
    XLMR_VOCAB,
    backbone_cfg,
    built_shrunk_cfg,
    clip_cfg,
    coca_cfg,
    gemma_snapshot,
    mobileclip_cfg,
    mt5_cfg,
    nllb_cfg,
    shrunk_cfg,
    siglip_cfg,
    siglip_t5_tokenizer_folder,
    xlmr_cfg,
    xlmr_tokenizer,
)
from xmr.models.backbones import OpenCLIPTextTower
from xmr.models.backbones.base import TowerShape, configured_tower_shape
from xmr.models.backbones.open_clip_hf import (
    OpenCLIPHFTextTower,
    OpenCLIPM2M100TextTower,
    hf_text_tower,
)
from xmr.models.language.tokenizers import NLLBTokenizer
from xmr.registry import MODELS

ATOL = RTOL = 1e-5


def _family(name: str, tmp_path) -> tuple[dict, dict | None]:
    """``(model_cfg, source tokenizer cfg)`` of a family; ``None``: the record's tokenizer."""
    xlmr = xlmr_tokenizer(clean='canonicalize')
    families = {
        'clip_causal_argmax': lambda: (clip_cfg(), None),
        'clip_causal_eos_id': lambda: (clip_cfg(pool_type='eos', eos_id=49407), None),
        # MetaCLIP 2 worldwide's text side: causal, 'eos' pooling of a Hugging Face </s>.
        'metaclip2_causal_eos_xlmr': lambda: (
            clip_cfg(pool_type='eos', eos_id=2, vocab_size=XLMR_VOCAB,
                     hf_tokenizer_name='xlm-roberta-base'), xlmr_tokenizer(clean='whitespace')),
        'clip_bidirectional_last': lambda: (clip_cfg(no_causal_mask=True, pool_type='last'),
                                            None),
        'clip_quickgelu_custom_blocks': lambda: (
            {**clip_cfg(qk_norm=True, scale_heads=True, scale_attn_inner=True, scale_attn=True,
                        scale_fc=True, ls_init_value=0.5), 'quick_gelu': True}, None),
        'siglip_last_proj_bias': lambda: (siglip_cfg(), xlmr),
        'siglip2_tanh_gelu': lambda: (siglip_cfg('ViT-B-16-SigLIP2'), xlmr),
        'siglip_final_ln_after_pool': lambda: (siglip_cfg(final_ln_after_pool=True), xlmr),
        'mobileclip_bidirectional_argmax': lambda: (mobileclip_cfg(), None),
        'bidirectional_first_pooling': lambda: (mobileclip_cfg(pool_type='first'), None),
        'causal_embed_cls': lambda: ({**clip_cfg(embed_cls=True), 'custom_text': True}, None),
        'bidirectional_embed_cls': lambda: (mobileclip_cfg(embed_cls=True), None),
        'coca': lambda: (coca_cfg(), None),
        'xlmr_mean_pooler_mlp': lambda: (xlmr_cfg(tmp_path / 'xlmr'), xlmr_tokenizer()),
        'xlmr_cls_pooler_linear': lambda: (
            xlmr_cfg(tmp_path / 'xlmr', 'cls_pooler', 'linear'), xlmr_tokenizer()),
        'xlmr_cls_hidden_state_no_proj': lambda: (
            xlmr_cfg(tmp_path / 'xlmr', 'cls_last_hidden_state_pooler', None), xlmr_tokenizer()),
        'roberta_mean_pooler_mlp': lambda: (
            xlmr_cfg(tmp_path / 'roberta', model_type='roberta'), xlmr_tokenizer()),
        'mt5_mean_pooler_mlp': lambda: (mt5_cfg(tmp_path / 'mt5'), xlmr_tokenizer()),
        'mt5_relu_ffn_mean_pooler_mlp': lambda: (
            mt5_cfg(tmp_path / 'mt5', feed_forward_proj='relu'), xlmr_tokenizer()),
        'mt5_cls_hidden_state_linear': lambda: (
            mt5_cfg(tmp_path / 'mt5', 'cls_last_hidden_state_pooler', 'linear'),
            xlmr_tokenizer()),
        'bert_cls_pooler_linear': lambda: (
            xlmr_cfg(tmp_path / 'bert', 'cls_pooler', 'linear', model_type='bert'),
            xlmr_tokenizer()),
        # NLLB-CLIP's own pooling and projection (cls_pooler, linear) and its SigLIP variant;
        # the record's tokenizer: NLLBTokenizer of the tiny NLLB vocabulary.
        'nllb_clip_cls_pooler_linear': lambda: (nllb_cfg(tmp_path / 'nllb'), None),
        'nllb_clip_sigmoid_timm_vit': lambda: (
            nllb_cfg(tmp_path / 'nllb', 'nllb-clip-base-siglip'), None),
        'nllb_mean_pooler_mlp_unscaled_embedding': lambda: (
            nllb_cfg(tmp_path / 'nllb', pooler='mean_pooler', proj='mlp',
                     scale_embedding=False), None),
    }
    uses_xlmr = any(key in name for key in ('siglip', 'xlmr', 'roberta', 'bert', 'mt5'))
    if uses_xlmr and not name.startswith('nllb') and not XLMR_TOKENIZER.is_file():
        pytest.skip(f'XLM-R tokenizer not found at {XLMR_TOKENIZER}')
    return families[name]()


FAMILIES = ['clip_causal_argmax', 'clip_causal_eos_id', 'clip_bidirectional_last',
            'clip_quickgelu_custom_blocks',
            'siglip_last_proj_bias', 'siglip2_tanh_gelu', 'siglip_final_ln_after_pool',
            'mobileclip_bidirectional_argmax', 'bidirectional_first_pooling',
            'causal_embed_cls', 'bidirectional_embed_cls', 'coca',
            'xlmr_mean_pooler_mlp', 'xlmr_cls_pooler_linear', 'xlmr_cls_hidden_state_no_proj',
            'roberta_mean_pooler_mlp', 'bert_cls_pooler_linear', 'mt5_mean_pooler_mlp',
            'mt5_relu_ffn_mean_pooler_mlp', 'mt5_cls_hidden_state_linear',
            'nllb_clip_cls_pooler_linear', 'nllb_clip_sigmoid_timm_vit',
            'nllb_mean_pooler_mlp_unscaled_embedding']
#: One language per caption of TEXTS: NLLB's tokenizer writes each caption's code, which
#: open_clip's encode_text then reads among the ids; the other tokenizers ignore them.
TEXT_LANGS = ['en', 'de', 'sw']


def _build(name: str, tmp_path):
    return _built(*_family(name, tmp_path))


def _built(model_cfg: dict, tokenizer: dict | None):
    """The backbone of ``model_cfg``, seeded, in eval mode, with no norm an identity."""
    torch.manual_seed(0)
    backbone = MODELS.build(backbone_cfg(model_cfg, tokenizer)).eval()
    # Random LayerNorm / LayerScale / bias / head-scale values, so that none of them is an
    # identity (open_clip starts scale_heads' head_scale [H, 1, 1] at ones).
    with torch.no_grad():
        for param_name, parameter in backbone.clip.named_parameters():
            if (parameter.dim() == 1 or param_name.endswith('head_scale')) \
                    and 'logit' not in param_name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    return backbone


def _open_clip_ids(backbone, tokens) -> torch.Tensor:
    """The ids open_clip's ``encode_text`` gets: the same tokens at the tower's full context
    (``CLIP.encode_text`` adds every position; padding is the tokenizer's own)."""
    ids = tokens['input_ids']
    tower = backbone.text_tower
    context = getattr(tower, 'context_length', ids.shape[1])
    if tower.reserved_positions:  # the slot the tower fills with its class token
        return ids[:, :-tower.reserved_positions]
    if isinstance(tower, OpenCLIPTextTower) and ids.shape[1] < context:
        pad = ids.new_full((ids.shape[0], context - ids.shape[1]), backbone.tokenizer.pad_id)
        ids = torch.cat([ids, pad], dim=1)
    return ids


@pytest.mark.parametrize('name', FAMILIES)
def test_the_tower_shape_the_config_gives_is_the_built_towers(name, tmp_path):
    """Read as the config loads; a Hugging Face encoder's (hf_model_name) from its folder,
    which was left to the build."""
    cfg = backbone_cfg(*_family(name, tmp_path))
    tower = MODELS.build(cfg).text_tower
    assert configured_tower_shape(cfg) == TowerShape(tower.width, tower.num_blocks,
                                                     tower.embed_dim, tower.fixed_context)


def _read_by(tower, run) -> set[str]:
    """Names of the tower's parameters ``run()``'s output is computed from (they get a
    gradient)."""
    weights = dict(tower.named_parameters())
    for weight in weights.values():
        weight.requires_grad_(True)
    run().float().sum().backward()
    read = {name for name, weight in weights.items() if weight.grad is not None}
    for weight in weights.values():
        weight.requires_grad_(False)
        weight.grad = None
    return read


@pytest.mark.parametrize('name', FAMILIES)
def test_the_token_table_and_blocks_a_tower_names_are_the_weights_it_reads_for_them(
        name, tmp_path):
    """What a branch with its own table or fewer blocks leaves out of its tuned_weights
    (unread_tower_weights): the tower's token table is all embed_tokens reads, block i reads
    all of its block_module(i) and nothing of a later block's (T5's later blocks read block
    0's relative position bias)."""
    backbone = _build(name, tmp_path)
    tower, tokens = backbone.text_tower, backbone.tokenizer(TEXTS, TEXT_LANGS)

    def names(module) -> set[str]:
        ids = {id(weight) for weight in module.parameters()}
        return {key for key, weight in tower.named_parameters() if id(weight) in ids}

    assert _read_by(tower, lambda: tower.embed_tokens(tokens['input_ids'])) == names(
        tower.token_table_module())
    with torch.no_grad():
        x, mask = tower.embed_source(tokens)
    for index in range(tower.num_blocks):
        read = _read_by(tower, lambda blocks=range(index, index + 1): tower.encode_embeddings(
            x, mask, blocks=blocks))
        assert names(tower.block_module(index)) <= read
        later = set().union(*(names(tower.block_module(j))
                              for j in range(index + 1, tower.num_blocks)))
        assert not read & later


@pytest.mark.parametrize('name', FAMILIES)
def test_source_path_and_image_equal_open_clip(name, tmp_path):
    backbone = _build(name, tmp_path)
    tokens = backbone.tokenizer(TEXTS, TEXT_LANGS)
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = backbone.clip.encode_text(_open_clip_ids(backbone, tokens), normalize=False)
        torch.testing.assert_close(backbone.encode_source_text(tokens), expected,
                                   atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(backbone.encode_text_tokens(tokens).pooled, expected,
                                   atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(backbone.encode_image(images),
                                   backbone.clip.encode_image(images, normalize=False),
                                   atol=ATOL, rtol=RTOL)
    assert expected.shape == (len(TEXTS), backbone.embed_dim)


@pytest.mark.parametrize('name, end', [('clip_causal_argmax', '<end_of_text>'),
                                       ('clip_causal_eos_id', '<end_of_text>'),
                                       ('metaclip2_causal_eos_xlmr', '</s>')])
def test_a_caption_spelling_the_end_token_is_pooled_where_open_clip_pools_it(name, end,
                                                                            tmp_path):
    """A caption that writes the end token has two; open_clip's ``argmax`` and ``eos`` pool the
    first, a causal tower's state before the rest of the caption."""
    backbone = _build(name, tmp_path)
    texts = [f'a dog {end} on the grass', f'{end} two cats', 'a dog on the grass']
    tokens = backbone.tokenizer(texts)
    with torch.no_grad():
        expected = backbone.clip.encode_text(_open_clip_ids(backbone, tokens), normalize=False)
        torch.testing.assert_close(backbone.encode_source_text(tokens), expected,
                                   atol=ATOL, rtol=RTOL)
    # The first caption is pooled before 'on the grass', the third after it.
    assert not torch.allclose(expected[0], expected[2], atol=1e-3)


#: Captions that write the padding token, in the pieces of each family's tokenizer.
SPELLED_PAD = {'xlmr': ['a dog <pad> on the grass', '<pad> two cats', 'a dog on the grass'],
               'nllb': ['a dog <pad> on grass', 'x <pad> y', 'a dog on grass']}


@pytest.mark.parametrize('packed', [True, False])
@pytest.mark.parametrize('name', ['xlmr_mean_pooler_mlp', 'xlmr_cls_pooler_linear',
                                  'roberta_mean_pooler_mlp', 'bert_cls_pooler_linear',
                                  'mt5_mean_pooler_mlp', 'nllb_clip_cls_pooler_linear',
                                  'nllb_mean_pooler_mlp_unscaled_embedding'])
def test_a_caption_spelling_the_pad_token_is_read_as_open_clip_reads_it(name, packed,
                                                                       tmp_path):
    """open_clip's ``HFTextEncoder`` masks every id equal to the padding id, a caption's own
    ``<pad>`` too, and RoBERTa's and M2M100's positions do not count it: the source path, padded
    or packed, gives open_clip's ``encode_text`` on the same ids, and reports that token as not
    real."""
    backbone = _build(name, tmp_path)
    backbone.text_tower.pack_tokens = packed
    texts = SPELLED_PAD['nllb' if name.startswith('nllb') else 'xlmr']
    tokens = backbone.tokenizer(texts, TEXT_LANGS)
    pad_id = backbone.tokenizer.pad_id
    spelled = tokens['attention_mask'] & (tokens['input_ids'] == pad_id)
    assert spelled[:2].any(1).all() and not spelled[2].any()
    with torch.no_grad():
        expected = backbone.clip.encode_text(tokens['input_ids'], normalize=False)
        torch.testing.assert_close(backbone.encode_source_text(tokens), expected,
                                   atol=ATOL, rtol=RTOL)
        out = backbone.encode_text_tokens(tokens)
    torch.testing.assert_close(out.pooled, expected, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(out.mask, tokens['attention_mask'] & ~spelled)


@pytest.mark.parametrize('name', ['siglip2_tanh_gelu', 'coca', 'xlmr_cls_pooler_linear',
                                  'mt5_mean_pooler_mlp', 'nllb_clip_cls_pooler_linear'])
def test_source_path_equals_the_model_open_clips_own_factory_builds(name, tmp_path):
    """The reference built by open_clip itself (``create_model('local-dir:...')`` of the same
    config, Hugging Face encoders from their config), not by xmr, on xmr's weights: the same
    text and image embeddings from the same captions."""
    import json

    import open_clip

    backbone = _build(name, tmp_path)
    model_cfg, _ = _family(name, tmp_path)
    folder = tmp_path / 'open_clip_model'
    folder.mkdir()
    (folder / 'open_clip_config.json').write_text(json.dumps(dict(model_cfg=model_cfg)))
    reference = open_clip.create_model(f'local-dir:{folder}', pretrained_text=False).eval()
    assert type(reference) is type(backbone.clip)
    reference.load_state_dict(backbone.clip.state_dict())
    tokens = backbone.tokenizer(TEXTS, TEXT_LANGS)
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(
            backbone.encode_source_text(tokens),
            reference.encode_text(_open_clip_ids(backbone, tokens), normalize=False),
            atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(backbone.encode_image(images),
                                   reference.encode_image(images, normalize=False),
                                   atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize('name', ['mt5_mean_pooler_mlp',
                                  'nllb_mean_pooler_mlp_unscaled_embedding'])
def test_pre_norm_towers_tokens_are_the_encoders_final_normed_states_projected(name, tmp_path):
    """T5's and M2M100's final norm acts on every token: each token output is Hugging Face's
    ``last_hidden_state`` (after that norm) through open_clip's projection."""
    backbone = _build(name, tmp_path)
    tokens = backbone.tokenizer(TEXTS, TEXT_LANGS)
    mask = tokens['attention_mask']
    encoder = backbone.clip.text
    with torch.no_grad():
        hidden = encoder.transformer(input_ids=tokens['input_ids'],
                                     attention_mask=mask.long()).last_hidden_state
        out = backbone.encode_text_tokens(tokens)
        torch.testing.assert_close(out.tokens[mask], encoder.proj(hidden)[mask], atol=ATOL,
                                   rtol=RTOL)


def test_a_t5_tower_refuses_a_caption_longer_than_t5s_512_tokens(tmp_path):
    tower = _build('mt5_mean_pooler_mlp', tmp_path).text_tower
    assert tower.add_positions(torch.zeros(1, 512, 32)).shape == (1, 512, 32)
    with pytest.raises(ValueError, match='sequence of 513 tokens exceeds the text context '
                                         'length 512'):
        tower.add_positions(torch.zeros(1, 513, 32))


def test_each_family_gets_its_tower_and_context(tmp_path):
    siglip = _build('siglip_last_proj_bias', tmp_path)
    tower = siglip.text_tower
    assert isinstance(tower, OpenCLIPTextTower)
    assert (tower.causal, tower.pooling, tower.fixed_context) == (False, 'last', True)
    assert tower.context_length == 64 and siglip.tokenizer.pad_to == 64
    assert siglip.tokenizer(TEXTS)['input_ids'].shape == (3, 64)
    assert tower.blocks[0].ln_1.eps == 1e-6
    assert isinstance(tower.text_projection, torch.nn.Linear)
    assert tower.text_projection.bias is not None
    siglip2 = _build('siglip2_tanh_gelu', tmp_path)
    assert siglip2.text_tower.blocks[0].mlp.gelu.approximate == 'tanh'
    clip = _build('clip_causal_argmax', tmp_path)
    assert (clip.text_tower.causal, clip.text_tower.fixed_context) == (True, False)
    assert clip.tokenizer.pad_to is None  # dynamic padding: exact for a causal EOS tower
    xlmr = _build('xlmr_mean_pooler_mlp', tmp_path)
    assert isinstance(xlmr.text_tower, OpenCLIPHFTextTower)
    assert xlmr.text_tower.pooling == 'mean' and xlmr.text_tower.context_length == 38
    nllb = _build('nllb_clip_cls_pooler_linear', tmp_path)
    tower = nllb.text_tower
    assert isinstance(tower, OpenCLIPM2M100TextTower) and tower.reads_language_token
    # Token 0 (the language code), 40 positions from pad_id + 1 = 2 of the 42-row table.
    assert (tower.pooling, tower.context_length, tower.pad_id, tower.fixed_context) == (
        'cls', 40, 1, False)
    assert isinstance(nllb.tokenizer, NLLBTokenizer) and nllb.tokenizer.max_length == 32
    assert nllb.tokenizer.pad_to is None  # dynamic padding: exact for a padding-masked tower
    assert tower.embed_scale == 32 ** 0.5
    assert isinstance(tower.layers[0].activation_fn, torch.nn.ReLU)


def test_siglip_output_depends_on_padding_so_its_length_is_fixed(tmp_path):
    """The reason for the fixed context: open_clip's own output changes with the padding."""
    backbone = _build('siglip_last_proj_bias', tmp_path)
    tower = backbone.text_tower
    tokens = backbone.tokenizer(TEXTS)
    ids = tokens['input_ids']
    shorter = ids[:, :int(tokens['attention_mask'].sum(1).max()) + 1]
    with torch.no_grad():
        text = backbone.clip.text
        full, short = text(ids), text(shorter)
    assert not torch.allclose(full, short, atol=1e-3)
    assert tower.packing(tokens['attention_mask']) is None
    with pytest.raises(ValueError, match='must be its full context of 64 tokens, not 12: set '
                                         "the tokenizer's pad_to=64"):
        x = tower.add_positions(tower.embed_tokens(shorter[:, :12]))
        tower.encode_embeddings(x, tokens['attention_mask'][:, :12])


def test_padding_masked_bidirectional_tower_is_exact_with_dynamic_padding_and_packing():
    """``use_pad_mask`` towers mask padding keys: dynamic padding and packing give open_clip's
    outputs (here ``'first'`` and ``'eos'`` pooling of a bidirectional TextTransformer)."""
    from open_clip.transformer import TextTransformer

    for pool_type in ('first', 'eos'):
        torch.manual_seed(0)
        text = TextTransformer(context_length=16, vocab_size=50, width=32, heads=2, layers=2,
                               output_dim=8, no_causal_mask=True, use_pad_mask=True, pad_id=0,
                               eos_id=2, pool_type=pool_type, proj_bias=True).eval()
        tower = OpenCLIPTextTower(text)
        assert not tower.fixed_context
        lengths = [5, 9, 3]
        ids = torch.zeros(3, 16, dtype=torch.long)
        for row, length in enumerate(lengths):
            ids[row, :length - 1] = torch.randint(3, 50, (length - 1,))
            ids[row, length - 1] = 2
        mask = ids != 0
        eos = torch.tensor(lengths) - 1
        with torch.no_grad():
            expected = text(ids)
            for packed in (True, False):
                tower.pack_tokens = packed
                width = max(lengths)
                tokens = dict(input_ids=ids[:, :width], attention_mask=mask[:, :width],
                              eos_index=eos)
                torch.testing.assert_close(tower(tokens), expected, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize('correct_cls_mask', [False, True])
@pytest.mark.parametrize('causal', [False, True])
def test_appended_class_token_equals_open_clip(causal, correct_cls_mask):
    """``embed_cls``: the class token is written into the last of ``C + 1`` positions, the
    padding mask is open_clip's (shifted by one unless ``correct_cls_mask``)."""
    from open_clip.transformer import TextTransformer

    torch.manual_seed(0)
    text = TextTransformer(context_length=12, vocab_size=50, width=32, heads=2, layers=2,
                           output_dim=8, embed_cls=True, no_causal_mask=not causal, pad_id=0,
                           correct_cls_mask=correct_cls_mask).eval()
    tower = OpenCLIPTextTower(text)
    assert (tower.context_length, tower.max_tokens, tower.pooling) == (13, 12, 'last')
    assert tower.fixed_context and tower.packing(torch.ones(1, 13, dtype=torch.bool)) is None
    ids = torch.zeros(3, 12, dtype=torch.long)
    lengths = torch.tensor([5, 12, 3])
    for row, length in enumerate(lengths.tolist()):
        ids[row, :length] = torch.randint(1, 50, (length,))
    slot = torch.zeros(3, 1, dtype=torch.long)  # the tokenizer pads one more position
    tokens = dict(input_ids=torch.cat([ids, slot], 1),
                  attention_mask=torch.cat([ids, slot], 1) != 0, eos_index=lengths - 1)
    with torch.no_grad():
        torch.testing.assert_close(tower(tokens), text(ids), atol=ATOL, rtol=RTOL)


#: Captions with CLIP's BPE piece ``!`` (id 0, the padding id; ``!</w>`` is 256), which only a
#: punctuation run that BPE does not merge leaves: ``ok!~`` is ``ok</w> ! ~</w>``.
SPELLED_CLIP_PAD = ['ok!~ a dog', 'a dog x!$ on the grass', 'a dog on the grass']


def test_coca_masks_a_captions_own_pad_id_as_open_clip_does(tmp_path):
    """CoCa's open_clip mask is ``text != pad_id`` (0): CLIP's ``!`` piece inside a caption is
    masked (at the legacy mask's shifted position) as CoCa was trained."""
    backbone = _build('coca', tmp_path)
    tokens = backbone.tokenizer(SPELLED_CLIP_PAD)
    ids = _open_clip_ids(backbone, tokens)
    assert ((ids == 0) & tokens['attention_mask'][:, :-1]).any(1).tolist() == [True, True, False]
    with torch.no_grad():
        expected = backbone.clip.encode_text(ids, normalize=False)
        torch.testing.assert_close(backbone.encode_source_text(tokens), expected,
                                   atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(backbone.encode_text_tokens(tokens).pooled, expected,
                                   atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize('packed', [True, False])
def test_a_padding_masked_tower_masks_a_captions_own_pad_id_padded_and_packed(packed):
    """``use_pad_mask``: open_clip masks every key whose id is ``pad_id``, one inside a caption
    too; dynamically padded, packed or not, the tower gives open_clip's output."""
    from open_clip.transformer import TextTransformer

    torch.manual_seed(0)
    text = TextTransformer(context_length=16, vocab_size=50, width=32, heads=2, layers=2,
                           output_dim=8, no_causal_mask=True, use_pad_mask=True, pad_id=0,
                           eos_id=2, pool_type='eos', proj_bias=True).eval()
    tower = OpenCLIPTextTower(text)
    tower.pack_tokens = packed
    lengths = [6, 9, 4]
    ids = torch.zeros(3, 16, dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, :length - 1] = torch.randint(3, 50, (length - 1,))
        ids[row, length - 1] = 2
    ids[0, 2] = ids[1, 1] = ids[1, 4] = 0  # the pad id inside two captions
    positions = torch.arange(16)
    mask = positions < torch.tensor(lengths)[:, None]
    width = max(lengths)
    tokens = dict(input_ids=ids[:, :width], attention_mask=mask[:, :width],
                  eos_index=torch.tensor(lengths) - 1)
    with torch.no_grad():
        torch.testing.assert_close(tower(tokens), text(ids), atol=ATOL, rtol=RTOL)


def test_padding_masked_tower_pooling_the_last_padding_position_equals_open_clip():
    """``use_pad_mask`` with ``'last'`` pooling pools a padding query, which attends to the
    real keys only, as in open_clip: a fixed context, no packing."""
    from open_clip.transformer import TextTransformer

    torch.manual_seed(0)
    text = TextTransformer(context_length=16, vocab_size=50, width=32, heads=2, layers=2,
                           output_dim=8, no_causal_mask=True, use_pad_mask=True, pad_id=0,
                           pool_type='last', proj_bias=True).eval()
    tower = OpenCLIPTextTower(text)
    assert tower.fixed_context and tower.pad_masked
    ids = torch.zeros(3, 16, dtype=torch.long)
    lengths = torch.tensor([5, 16, 3])
    for row, length in enumerate(lengths.tolist()):
        ids[row, :length] = torch.randint(1, 50, (length,))
    tokens = dict(input_ids=ids, attention_mask=ids != 0, eos_index=lengths - 1)
    assert tower.packing(tokens['attention_mask']) is None
    with torch.no_grad():
        torch.testing.assert_close(tower(tokens), text(ids), atol=ATOL, rtol=RTOL)


ADAPTERS = {
    'static': dict(type='StaticAdapter', hidden=8),
    'lora': dict(type='LoRA', r=2, alpha=4, targets=['q', 'v', 'fc']),
    'houlsby': dict(type='HoulsbyAdapter', hidden=4),
    'compacter': dict(type='CompacterAdapter', reduction_factor=4, phm_dim=4),
    'soft_prompt': dict(type='SoftPrompt', num_tokens=3),
    'hard_prompt': dict(type='HardPrompt', text='a photo of', trainable=True),
}


def _branch_tokenizer(name: str, tmp_path) -> dict:
    """The tower's own tokenizer, so that the branch embeds with the tower's table."""
    if name.startswith('nllb'):  # the tiny NLLB tokenizer _family wrote
        return dict(type='NLLBTokenizer', tokenizer_file=str(tmp_path / 'nllb' /
                                                              'tokenizer.json'), max_length=24)
    if any(key in name for key in ('siglip', 'xlmr', 'mt5')):
        return xlmr_tokenizer(max_length=24)
    return dict(type='OpenCLIPTokenizer', model_name='ViT-B-32', max_length=24)


@pytest.mark.parametrize('adapter', sorted(ADAPTERS))
@pytest.mark.parametrize('name', ['clip_causal_argmax', 'clip_quickgelu_custom_blocks',
                                  'siglip_last_proj_bias', 'bidirectional_first_pooling',
                                  'coca', 'xlmr_mean_pooler_mlp', 'mt5_mean_pooler_mlp',
                                  'nllb_clip_cls_pooler_linear'])
def test_target_branch_attaches_and_trains_only_its_adapters(name, adapter, tmp_path):
    backbone = _build(name, tmp_path)
    branch = MODELS.build(
        dict(type='TargetLanguageBranch', languages=['de', 'sw'],
             tokenizer=_branch_tokenizer(name, tmp_path),
             embedding=dict(type='TowerTokenEmbedding'), adapters=ADAPTERS[adapter]),
        default_args=dict(tower=backbone.text_tower))
    tower = backbone.text_tower
    if tower.fixed_context:  # prompts and caption together fill the context exactly
        prompt = sum(m.num_tokens for m in branch.adapters.input_adapters('de'))
        assert branch.tokenizer.pad_to == tower.context_length - prompt
    frozen = {k: v.clone() for k, v in backbone.state_dict().items()}
    trainable = [p for p in branch.parameters() if p.requires_grad]
    assert trainable
    optimizer = torch.optim.Adam(trainable, lr=1e-2)
    langs = ['de', 'sw', 'de']
    tokens = branch.tokenize(['ein roter Kreis', 'mraba mbili za bluu', 'drei Dreiecke'], langs)
    target = torch.randn(3, backbone.embed_dim, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = branch(tokens, langs)
    for _ in range(2):
        optimizer.zero_grad()
        loss = (branch(tokens, langs) - target).pow(2).mean()
        loss.backward()
        assert all(p.grad is None for p in backbone.parameters())
        grads = {n: p.grad for n, p in branch.named_parameters() if p.grad is not None}
        assert grads and all(n.startswith('adapters.') for n in grads)
        assert any(bool(g.abs().sum() > 0) for g in grads.values())
        optimizer.step()
    with torch.no_grad():
        assert not torch.allclose(branch(tokens, langs), before)
    # Exactly unchanged; NaN counts as equal to NaN: open_clip leaves CoCa's decoder projection
    # uninitialised (torch.empty), and what memory held may be NaN.
    for key, value in backbone.state_dict().items():
        torch.testing.assert_close(value, frozen[key], rtol=0, atol=0, equal_nan=True, msg=key)


def _identity_branch(name: str, backbone, tmp_path):
    """A target branch on the tower's own table and tokenizer whose LoRA starts as the
    identity (``B = 0``): the frozen tower itself."""
    return MODELS.build(
        dict(type='TargetLanguageBranch', languages=['de'],
             tokenizer=_branch_tokenizer(name, tmp_path),
             embedding=dict(type='TowerTokenEmbedding'),
             adapters=dict(type='LoRA', r=2, alpha=4, targets=['q', 'v'])),
        default_args=dict(tower=backbone.text_tower)).eval()


@pytest.mark.parametrize('packed', [True, False])
@pytest.mark.parametrize('name', ['xlmr_mean_pooler_mlp', 'xlmr_cls_pooler_linear',
                                  'mt5_mean_pooler_mlp', 'nllb_clip_cls_pooler_linear',
                                  'coca'])
def test_the_branch_on_the_towers_own_ids_reads_a_spelled_pad_token_as_open_clip(name, packed,
                                                                                 tmp_path):
    """``TowerTokenEmbedding`` with the tower's tokenizer: the branch reads the ids as the
    source path does, a caption's own padding id (``<pad>``, CLIP's ``!`` piece on CoCa)
    masked and, on XLM-R and NLLB, left out of the positions; with identity adapters it gives
    open_clip's ``encode_text``, padded or packed (before: 0.03-0.62 off on those captions)."""
    backbone = _build(name, tmp_path)
    backbone.text_tower.pack_tokens = packed
    branch = _identity_branch(name, backbone, tmp_path)
    texts = (SPELLED_CLIP_PAD if name == 'coca'
             else SPELLED_PAD['nllb' if name.startswith('nllb') else 'xlmr'])
    langs = ['de'] * len(texts)
    tokens = branch.tokenize(texts, langs)
    assert torch.equal(tokens['input_ids'], backbone.tokenizer(texts, langs)['input_ids'])
    spelled = tokens['attention_mask'] & (tokens['input_ids'] == branch.tokenizer.pad_id)
    assert spelled.any(1).tolist() == [True, True, False]
    with torch.no_grad():
        expected = backbone.clip.encode_text(_open_clip_ids(backbone, tokens), normalize=False)
        torch.testing.assert_close(branch(tokens, langs), expected, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize('name', ['xlmr_mean_pooler_mlp', 'xlmr_cls_pooler_linear'])
def test_the_sdm_reads_a_spelled_pad_token_as_the_towers_hugging_face_encoder(name, tmp_path):
    """The SDM through the retriever, on every block without stream adapters: its streams are
    the Hugging Face encoder's hidden states under open_clip's mask (``ids != pad_id``), so
    ``f^sa`` is their mean over that mask through ``LN^sa`` and ``f^sr`` the tower's pooled
    token of them through ``LN^sr`` and ``W_p^sr`` (before: the spelled ``<pad>`` was attended
    to, averaged and counted in the positions)."""
    model_cfg, tokenizer = _family(name, tmp_path)
    torch.manual_seed(0)
    model = MODELS.build(dict(
        type='CrossLingualRetriever', backbone=backbone_cfg(model_cfg, tokenizer),
        language_branch=dict(type='TargetLanguageBranch', languages=['de'],
                             tokenizer=_branch_tokenizer(name, tmp_path),
                             embedding=dict(type='TowerTokenEmbedding'),
                             adapters=dict(type='DynamicAdapter', hidden=4)),
        disentangler=dict(type='SemanticsDisentangler', depth=2, stream_adapters=False,
                          generator=dict(d_z=16, d_u=4)))).eval()
    sdm, tokenizer = model.disentangler, model.language_branch.tokenizer
    seen = []
    sdm.register_forward_hook(lambda module, args, output: seen.append(args))
    tokens = tokenizer(SPELLED_PAD['xlmr'])
    spelled = tokens['attention_mask'] & (tokens['input_ids'] == tokenizer.pad_id)
    assert spelled.any(1).tolist() == [True, True, False]
    with torch.no_grad():
        model.encode_text(tokens, 'de')
        found = sdm.extract(*seen[0])
        ids = seen[0][1]['input_ids']
        real = (ids != tokenizer.pad_id).long()
        hidden = model.backbone.clip.text.transformer(input_ids=ids,
                                                      attention_mask=real).last_hidden_state
        mean = (sdm.sa_norm(hidden) * real[..., None]).sum(1) / real.sum(1, keepdim=True)
        pooled = ((hidden * real[..., None]).sum(1) / real.sum(1, keepdim=True)
                  if model.backbone.text_tower.pooling == 'mean' else hidden[:, 0])
    torch.testing.assert_close(found['sa'], mean, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(found['sr'], sdm.sr_projection(sdm.sr_norm(pooled)), atol=ATOL,
                               rtol=RTOL)


def test_towers_xmr_cannot_run_are_refused_naming_class_field_and_what_is_missing(tmp_path):
    with pytest.raises(TypeError, match=r"CustomTextCLIP.text \(TextTransformer\): "
                                        r"text_cfg.pool_type='none' - open_clip then returns "
                                        r'every token'):
        MODELS.build(backbone_cfg(mobileclip_cfg(pool_type='none')))
    with pytest.raises(TypeError, match=r'CLIP: text_cfg.scaled_cosine_attn=True - open_clip.s '
                                        r'own Attention cannot run it'):
        MODELS.build(backbone_cfg(clip_cfg(scaled_cosine_attn=True)))
    from open_clip.transformer import AttentionalPooler, TextTransformer

    text = TextTransformer(context_length=8, vocab_size=20, width=32, heads=2, layers=1)
    text.attn_pool = AttentionalPooler(32, 32, n_head=2, n_queries=1)
    with pytest.raises(TypeError, match=r'TextTransformer: attentional pooler \(attn_pool\) - '
                                        'xmr has no written-out attentional pooler'):
        OpenCLIPTextTower(text)
    if not XLMR_TOKENIZER.is_file():
        pytest.skip(f'XLM-R tokenizer not found at {XLMR_TOKENIZER}')
    mt5 = MODELS.build(backbone_cfg(mt5_cfg(tmp_path / 'mt5'), xlmr_tokenizer()))
    with pytest.raises(TypeError, match=r"CustomTextCLIP.text \(HFTextEncoder of .*mt5\): "
                                        r"text_cfg.hf_model_name has model_type 'mt5' - this "
                                        r'tower writes out BERT-style post-LN layers .*; T5 '
                                        r"blocks .* and M2M100 layers \(\['m2m_100'\]\) have "
                                        r'their own towers'):
        OpenCLIPHFTextTower(mt5.clip.text)
    with pytest.raises(TypeError, match=r'text_cfg.hf_proj_type=None - open_clip builds no '
                                        r'projection from the encoder width 16 to embed_dim 32'):
        MODELS.build(backbone_cfg(xlmr_cfg(tmp_path / 'narrow', proj=None, width=16)))
    with pytest.raises(TypeError, match='text_cfg.hf_pooler_type gives MaxPooler - xmr runs '
                                        'mean_pooler'):
        MODELS.build(backbone_cfg(xlmr_cfg(tmp_path / 'xlmr', 'max_pooler')))


def test_a_hugging_face_tower_refusal_names_the_model_that_owns_it(tmp_path):
    """``coca_roberta-ViT-B-32`` (a CoCa over RoBERTa, shrunk) with ``max_pooler`` is refused as
    ``CoCa.text``, the class open_clip built, not the ``CustomTextCLIP`` of the other Hugging Face
    towers."""
    if not XLMR_TOKENIZER.is_file():
        pytest.skip(f'XLM-R tokenizer not found at {XLMR_TOKENIZER}')
    cfg, tokenizer = shrunk_cfg('coca_roberta-ViT-B-32')
    cfg['text_cfg']['hf_pooler_type'] = 'max_pooler'
    model_cfg, tokenizer_cfg = built_shrunk_cfg(cfg, tokenizer, tmp_path)
    with pytest.raises(TypeError, match=r'^CoCa\.text \(HFTextEncoder of .+\): '
                                        r'text_cfg\.hf_pooler_type gives MaxPooler - '):
        MODELS.build(backbone_cfg(model_cfg, tokenizer_cfg))


def test_relative_position_embeddings_are_refused_naming_the_clips_text_tower(tmp_path):
    """A BERT-style encoder whose config asks for relative positions (transformers 4 runs them)
    is refused as the CLIP's text tower, by the encoder's name, ``?`` where it has none."""
    backbone = _build('xlmr_mean_pooler_mlp', tmp_path)
    encoder = backbone.clip.text
    encoder.config.position_embedding_type = 'relative_key'
    with pytest.raises(TypeError, match=r"^CustomTextCLIP\.text \(HFTextEncoder of .+xlmr\): "
                                        r"config\.position_embedding_type='relative_key' - xmr "
                                        r'runs absolute position embeddings only$'):
        hf_text_tower(encoder)
    encoder.config._name_or_path = ''
    with pytest.raises(TypeError, match=r'^CustomTextCLIP\.text \(HFTextEncoder of \?\): '):
        hf_text_tower(encoder)


def test_a_projected_towers_embedding_width_is_the_clips_not_the_encoders(tmp_path):
    """An XLM-R encoder of width 16 projected (``'mlp'``) to the CLIP's ``embed_dim`` 32: the
    tower's ``E`` is 32, as the config reads it, and its output is open_clip's."""
    if not XLMR_TOKENIZER.is_file():
        pytest.skip(f'XLM-R tokenizer not found at {XLMR_TOKENIZER}')
    cfg = backbone_cfg(xlmr_cfg(tmp_path / 'narrow', width=16), xlmr_tokenizer())
    backbone = _built(cfg['model_cfg'], cfg['tokenizer'])
    tower = backbone.text_tower
    assert (tower.width, tower.embed_dim, backbone.embed_dim) == (16, 32, 32)
    assert configured_tower_shape(cfg) == TowerShape(16, 2, 32, False)
    tokens = backbone.tokenizer(TEXTS)
    with torch.no_grad():
        torch.testing.assert_close(backbone.encode_source_text(tokens),
                                   backbone.clip.encode_text(tokens['input_ids'],
                                                             normalize=False),
                                   atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize('pooler', ['cls_last_hidden_state_pooler', 'cls_pooler_without_output'])
def test_a_token_0_pooler_on_an_encoder_with_its_pooler_reads_the_hidden_state_as_open_clip(
        pooler, tmp_path):
    """open_clip's ``ClsPooler`` reads the encoder's ``pooler_output`` (``tanh(W x_CLS + b)``)
    only with ``use_pooler_output``, ``ClsLastHiddenStatePooler`` never: on an XLM-R encoder
    built with its pooler (``cls_pooler``) either reads token 0 of the last hidden state, and so
    does the tower."""
    from open_clip.hf_model import ClsLastHiddenStatePooler, ClsPooler

    backbone = _build('xlmr_cls_pooler_linear', tmp_path)
    encoder = backbone.clip.text
    assert encoder.transformer.pooler is not None
    encoder.pooler = (ClsLastHiddenStatePooler() if pooler == 'cls_last_hidden_state_pooler'
                      else ClsPooler(use_pooler_output=False))
    tower = hf_text_tower(encoder)
    tokens = backbone.tokenizer(TEXTS)
    with torch.no_grad():
        expected = encoder(tokens['input_ids'])
        torch.testing.assert_close(tower(tokens), expected, atol=ATOL, rtol=RTOL)
        # The pooler output, which the backbone's own tower reads, is another embedding.
        assert not torch.allclose(backbone.encode_source_text(tokens), expected, atol=1e-3)


def test_an_m2m100_towers_context_is_the_positions_its_sinusoid_table_holds(tmp_path):
    """M2M100's table has ``max_position_embeddings + 2`` rows (42) and numbers real tokens
    from ``pad_id + 1``: with padding id 3 (NLLB's is 1), 38 tokens reach its last row, 41, and
    give open_clip's output; 39 are refused by name, not read past the table."""
    from open_clip.hf_model import HFTextEncoder
    from transformers import M2M100Config

    M2M100Config(vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1,
                 encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
                 decoder_ffn_dim=48, max_position_embeddings=40, pad_token_id=3, bos_token_id=0,
                 eos_token_id=2, decoder_start_token_id=2).save_pretrained(tmp_path)
    torch.manual_seed(0)
    encoder = HFTextEncoder(str(tmp_path), output_dim=32, pooler_type='mean_pooler',
                            proj_type='linear', pretrained=False).eval()
    tower = hf_text_tower(encoder)
    assert tower.sinusoids.weights.shape[0] == 42 and tower.context_length == 38
    ids = torch.randint(4, 64, (2, 38), generator=torch.Generator().manual_seed(0))
    ids[1, 20:] = 3
    mask = ids != 3
    tokens = dict(input_ids=ids, attention_mask=mask, eos_index=mask.sum(1) - 1)
    with torch.no_grad():
        torch.testing.assert_close(tower(tokens), encoder(ids), atol=ATOL, rtol=RTOL)
    with pytest.raises(ValueError, match='sequence of 39 tokens exceeds the text context '
                                         'length 38'):
        tower.add_positions(torch.zeros(1, 39, 32))


def test_an_eos_pooled_tower_refuses_a_tokenizer_that_ends_captions_with_another_id(tmp_path):
    """MetaCLIP 2's tower pools the first ``text_cfg.eos_id`` (2, XLM-V's ``</s>``) in the ids.
    A tokenizer of another vocabulary that fits its table (T5's, ending in ``</s>`` = 1) was
    pooled at its own end token, where open_clip pools position 0 or a ``<unk>`` (2): the
    embeddings differed by 2.2 without a word. It is refused as the backbone builds; the
    tower's own end id builds (the ``metaclip2_causal_eos_xlmr`` family)."""
    folder = siglip_t5_tokenizer_folder(tmp_path / 't5')
    model_cfg = clip_cfg(pool_type='eos', eos_id=2, vocab_size=64,
                         hf_tokenizer_name='google/mt5-base')
    t5 = dict(type='HFTokenizer', tokenizer_file=str(folder / 'tokenizer.json'))
    with pytest.raises(ValueError, match=r'tokenizer end id 1 but the text tower of custom pools '
                                         r'the first id 2 \(text_cfg.eos_id\)'):
        MODELS.build(backbone_cfg(model_cfg, t5))
    assert MODELS.build(backbone_cfg({**model_cfg, 'text_cfg': {
        **model_cfg['text_cfg'], 'eos_id': 1}}, t5)).text_tower.end_id == 1


@pytest.mark.slow
def test_tokenizers_that_do_not_fit_the_tower_name_both_numbers(tmp_path):
    if not XLMR_TOKENIZER.is_file():
        pytest.skip(f'XLM-R tokenizer not found at {XLMR_TOKENIZER}')
    with pytest.raises(ValueError, match='tokenizer emits 250002 ids but the text tower of '
                                         'custom has 32000 embeddings'):
        MODELS.build(backbone_cfg(siglip_cfg(vocab_size=32000), xlmr_tokenizer()))
    with pytest.raises(ValueError, match='tokenizer max_length 100 exceeds the text context '
                                         'length 64 of custom'):
        MODELS.build(backbone_cfg(siglip_cfg(), xlmr_tokenizer(max_length=100, pad_to=100)))
    with pytest.raises(ValueError, match='tokenizer pad_to=70 but the text tower of custom '
                                         'pools a fixed position of its 64-token context'):
        MODELS.build(backbone_cfg(siglip_cfg(), xlmr_tokenizer(max_length=64, pad_to=70)))
    with pytest.raises(ValueError, match='tokenizer max_length 77 exceeds the text context '
                                         'length 38 of custom'):
        MODELS.build(backbone_cfg(xlmr_cfg(tmp_path / 'xlmr'), xlmr_tokenizer(max_length=77)))
    with pytest.raises(ValueError, match='tokenizer pads with id 0 but the text tower of custom '
                                         'masks id 1 as padding'):
        MODELS.build(backbone_cfg(xlmr_cfg(tmp_path / 'xlmr'), dict(
            type='OpenCLIPTokenizer', model_name='ViT-B-32', max_length=32)))
    backbone = MODELS.build(backbone_cfg(siglip_cfg(), xlmr_tokenizer()))

    def branch(tokenizer, adapters=None):
        return MODELS.build(dict(type='TargetLanguageBranch', languages=['de', 'sw'],
                                 tokenizer=tokenizer, embedding=dict(type='TowerTokenEmbedding'),
                                 adapters=adapters if adapters is not None else []),
                            default_args=dict(tower=backbone.text_tower))

    with pytest.raises(ValueError, match='target tokenizer pad_to=32 but the text tower pools a '
                                         'fixed position of its 64-token context'):
        branch(xlmr_tokenizer(max_length=32, pad_to=32))
    with pytest.raises(ValueError, match='target tokenizer pad_to=64 but the text tower pools a '
                                         'fixed position of its 64-token context less 3 prompt '
                                         'tokens .*: set tokenizer.pad_to=61'):
        branch(xlmr_tokenizer(max_length=32, pad_to=64), dict(type='SoftPrompt', num_tokens=3))
    with pytest.raises(ValueError, match='target tokenizer max_length 63 does not fit the '
                                         '64-token context less 3 prompt tokens; set '
                                         'tokenizer.max_length <= 61'):
        branch(xlmr_tokenizer(max_length=63), dict(type='SoftPrompt', num_tokens=3))


def test_a_target_tokenizer_leaves_room_for_the_class_token_coca_appends(tmp_path):
    """CoCa's tower writes its class token into the last of its 32 positions: a caption of
    29 ids beside a 3-token prompt would lose its end token to it."""
    tower = _build('coca', tmp_path).text_tower
    assert (tower.context_length, tower.reserved_positions) == (32, 1)

    def branch(max_length, **options):
        given = options if max_length is None else dict(options, max_length=max_length)
        return MODELS.build(dict(
            type='TargetLanguageBranch', languages=['de'],
            tokenizer=dict(type='OpenCLIPTokenizer', model_name='ViT-B-32', **given),
            adapters=[dict(type='SoftPrompt', num_tokens=3)]), default_args=dict(tower=tower))

    with pytest.raises(ValueError, match=re.escape(
            'target tokenizer max_length 29 does not fit the 32-token context less 3 prompt '
            'tokens and 1 position(s) the tower fills itself; set tokenizer.max_length <= 28')):
        branch(29)
    assert branch(28).tokenizer.max_length == 28
    # Left out, max_length is what fits: the context less the prompt tokens and the class token.
    assert branch(None).tokenizer.max_length == 28
    assert branch(None, pad_to=29).tokenizer.max_length == 28


@pytest.mark.parametrize('family', ['xlmr', 'nllb'])
def test_a_source_tokenizer_longer_than_the_records_context_is_refused(family, tmp_path):
    """open_clip cuts these towers' captions to text_cfg.context_length (32 here) while their
    encoder's positions go further (38 and 40 here, XLM-R's 512 in full): max_length 36 fits
    the encoder and not what its CLIP was trained on."""
    if family == 'xlmr' and not XLMR_TOKENIZER.is_file():
        pytest.skip(f'XLM-R tokenizer not found at {XLMR_TOKENIZER}')
    if family == 'xlmr':
        model_cfg, tokenizer = xlmr_cfg(tmp_path / 'xlmr'), xlmr_tokenizer
    else:
        model_cfg = nllb_cfg(tmp_path / 'nllb')
        tokenizer = functools.partial(dict, type='NLLBTokenizer',
                                      name_or_path=str(tmp_path / 'nllb'))
    backbone = MODELS.build(backbone_cfg(model_cfg, tokenizer()))
    assert backbone.text_tower.context_length > 36 and backbone.tokenizer.max_length == 32
    assert MODELS.build(backbone_cfg(model_cfg, tokenizer(max_length=24))).tokenizer.max_length \
        == 24  # a shorter context is the config's choice
    with pytest.raises(ValueError, match=(
            r"^tokenizer\.max_length=36 exceeds the context_length 32 of custom's record \(custom "
            r"defaults; open_clip's text_cfg\.context_length: .*; set max_length <= 32, or leave "
            r'it out for 32$')):
        MODELS.build(backbone_cfg(model_cfg, tokenizer(max_length=36)))


def test_nllb_is_exact_with_dynamic_padding_and_packing(tmp_path):
    """Padding keys masked, positions counted over real tokens: a dynamically padded batch, run
    packed or padded, gives open_clip's output on the same captions padded to the context."""
    backbone = _build('nllb_mean_pooler_mlp_unscaled_embedding', tmp_path)
    tokens = backbone.tokenizer(['A red circle!', 'x'], ['en', 'de'])  # 16 and 4 ids
    assert tokens['input_ids'].shape[1] == 16 and not bool(tokens['attention_mask'].all())
    padded = torch.nn.functional.pad(tokens['input_ids'], (0, 32 - tokens['input_ids'].shape[1]),
                                     value=backbone.tokenizer.pad_id)
    with torch.no_grad():
        expected = backbone.clip.encode_text(padded, normalize=False)
        for packed in (True, False):
            backbone.text_tower.pack_tokens = packed
            torch.testing.assert_close(backbone.encode_source_text(tokens), expected,
                                       atol=ATOL, rtol=RTOL)


def test_mixed_language_batch_gets_each_captions_code_through_the_retriever(tmp_path):
    """The data preprocessor hands each caption's language to the tokenizers: target captions
    of four languages in one batch, English source captions and evaluation captions each begin
    with their own FLORES-200 code (ids of the tiny NLLB vocabulary, open_clip_families)."""
    model_cfg, _ = _family('nllb_clip_cls_pooler_linear', tmp_path)
    model = MODELS.build(dict(
        type='CrossLingualRetriever', backbone=backbone_cfg(model_cfg),
        language_branch=dict(type='TargetLanguageBranch', languages=['de', 'sw', 'fr'],
                             tokenizer=_branch_tokenizer('nllb', tmp_path),
                             embedding=dict(type='TowerTokenEmbedding'),
                             adapters=dict(type='LoRA', r=2, alpha=4, targets=['q', 'v']))))
    deu, eng, fra, swh, eos = 102, 107, 117, 228, 2
    batch = dict(source_text=['a red circle', 'a square', 'two circles', 'a triangle'],
                 target_text=['ein Kreis', 'mraba', 'zwei Kreise', 'un triangle'],
                 lang=['de', 'sw', 'de', 'fr'])
    data = model.data_preprocessor(batch, True)
    target, source = data['target_tokens'], data['source_tokens']
    assert target['input_ids'][:, 0].tolist() == [deu, swh, deu, fra]
    assert source['input_ids'][:, 0].tolist() == [eng] * 4
    rows = torch.arange(4)
    assert target['input_ids'][rows, target['eos_index']].tolist() == [eos] * 4
    # 'mraba': swh_Latn, '▁' 4, m 17, r 22, a 5, b 6, a 5, </s>; padded with 1.
    assert target['input_ids'][1].tolist()[:9] == [swh, 4, 17, 22, 5, 6, 5, eos, 1]
    evaluation = model.data_preprocessor(dict(captions=[{'en': ['a circle'], 'sw': ['duara']},
                                                        {'en': ['a square'], 'de': ['Quadrat']}]))
    assert {lang: ids['input_ids'][:, 0].tolist()
            for lang, (ids, _) in evaluation['caption_tokens'].items()} == {
        'en': [eng, eng], 'sw': [swh], 'de': [deu]}
    # The tower pools the language token: the code changes the source embedding.
    with torch.no_grad():
        english = model.encode_source(model.backbone.tokenizer(['a circle'], ['en']))
        german = model.encode_source(model.backbone.tokenizer(['a circle'], ['de']))
    assert not torch.allclose(english, german)


def test_nllb_tower_refuses_a_source_tokenizer_without_language_tokens(tmp_path):
    model_cfg, _ = _family('nllb_clip_cls_pooler_linear', tmp_path)
    plain = dict(type='HFTokenizer', tokenizer_file=str(tmp_path / 'nllb' / 'tokenizer.json'),
                 max_length=32)
    with pytest.raises(ValueError, match=r'the text tower of custom reads each caption after '
                                         r'its language-code token \(NLLB\), which a '
                                         r'HFTokenizer does not write; use '
                                         r"tokenizer=dict\(type='NLLBTokenizer'"):
        MODELS.build(backbone_cfg(model_cfg, plain))


def test_full_size_siglip2_builds_on_meta_with_its_record():
    """``arch='ViT-B-16-SigLIP2'`` as named (no download: meta device, tokenizer file)."""
    if not XLMR_TOKENIZER.is_file():
        pytest.skip(f'XLM-R tokenizer not found at {XLMR_TOKENIZER}')
    with torch.device('meta'):
        backbone = MODELS.build(dict(type='OpenCLIPBackbone', arch='ViT-B-16-SigLIP2',
                                     pretrained_cfg='webli',
                                     tokenizer=xlmr_tokenizer(clean='canonicalize')))
    tower = backbone.text_tower
    assert type(backbone.clip).__name__ == 'CustomTextCLIP'
    assert (tower.width, tower.num_blocks, tower.embed_dim, tower.context_length) == (
        768, 12, 768, 64)
    assert (tower.causal, tower.pooling, tower.fixed_context) == (False, 'last', True)
    assert tower.blocks[0].mlp.gelu.approximate == 'tanh' and tower.ln_final.eps == 1e-6
    assert backbone.tokenizer.pad_to == 64 and backbone.image_mean == (0.5, 0.5, 0.5)


def test_siglip_i18n_equals_open_clip_and_refuses_to_guess_the_padding_it_attends_to(tmp_path):
    """``ViT-B-16-SigLIP-i18n-256``'s text tower (its own config scaled down: a T5 vocabulary
    that open_clip pads with ``</s>`` = 1, ``canonicalize`` cleaning, the last of 64 tokens)
    attends to its padding. From its snapshot's ``tokenizer.json`` (``tokenizer_config.json``
    beside it), or from a lone copy with ``pad_id=1``, the ids (an empty caption, one cut at
    64) and ``encode_source_text`` equal open_clip's ``HFTokenizer`` and ``encode_text``; the
    lone copy alone, whose pad id would be a guess (``<pad>`` = 0: up to 2.4 off on this tower),
    is refused as the backbone builds."""
    import shutil

    from open_clip.tokenizer import HFTokenizer as OpenCLIPHFTokenizer

    folder = siglip_t5_tokenizer_folder(tmp_path / 'snapshot')
    lone = tmp_path / 'lone' / 'tokenizer.json'
    lone.parent.mkdir()
    shutil.copy(folder / 'tokenizer.json', lone)
    model_cfg = siglip_cfg('ViT-B-16-SigLIP-i18n-256', vocab_size=64)
    texts = [*TEXTS, '', 'ein roter Kreis ' * 40]
    expected_ids = OpenCLIPHFTokenizer(str(folder), context_length=64,
                                       clean='canonicalize')(texts)
    assert expected_ids[3, 1:].eq(1).all()  # the empty caption: </s>, then </s> padding
    for tokenizer in (dict(type='HFTokenizer', tokenizer_file=str(folder / 'tokenizer.json')),
                      dict(type='HFTokenizer', tokenizer_file=str(lone), pad_id=1)):
        torch.manual_seed(0)
        backbone = MODELS.build(backbone_cfg(model_cfg, tokenizer)).eval()
        tokens = backbone.tokenizer(texts)
        assert torch.equal(tokens['input_ids'], expected_ids)
        with torch.no_grad():
            torch.testing.assert_close(
                backbone.encode_source_text(tokens),
                backbone.clip.encode_text(expected_ids, normalize=False), atol=ATOL, rtol=RTOL)
    with pytest.raises(ValueError, match=r'tokenizer\.pad_id: the text tower of .* attends to '
                                         r'its padding, and the source tokenizer guessed its '
                                         r'pad id \(0\)'):
        MODELS.build(backbone_cfg(model_cfg, dict(type='HFTokenizer', tokenizer_file=str(lone))))


def test_a_branch_on_the_i18n_towers_table_refuses_to_guess_the_padding_it_attends_to(
        tmp_path):
    """The target branch on SigLIP i18n's own table reads its tokenizer's padding through the
    frozen tower as the source path does: from a lone ``tokenizer.json`` with ``pad_id=1`` an
    identity branch gives open_clip's ``encode_text``; without it the guessed ``<pad>`` = 0 is
    refused as the branch builds, naming the branch's key (before: built, 2.4 off)."""
    import shutil

    folder = siglip_t5_tokenizer_folder(tmp_path / 'snapshot')
    lone = tmp_path / 'lone' / 'tokenizer.json'
    lone.parent.mkdir()
    shutil.copy(folder / 'tokenizer.json', lone)
    torch.manual_seed(0)
    backbone = MODELS.build(backbone_cfg(
        siglip_cfg('ViT-B-16-SigLIP-i18n-256', vocab_size=64),
        dict(type='HFTokenizer', tokenizer_file=str(folder / 'tokenizer.json')))).eval()

    def branch(**options):
        return MODELS.build(
            dict(type='TargetLanguageBranch', languages=['de'],
                 tokenizer=dict(type='HFTokenizer', tokenizer_file=str(lone), max_length=64,
                                clean='canonicalize', **options),
                 embedding=dict(type='TowerTokenEmbedding'),
                 adapters=dict(type='LoRA', r=2, alpha=4, targets=['q', 'v'])),
            default_args=dict(tower=backbone.text_tower)).eval()

    named = branch(pad_id=1)
    langs = ['de'] * len(TEXTS)
    with torch.no_grad():
        torch.testing.assert_close(
            named(named.tokenize(TEXTS, langs), langs),
            backbone.clip.encode_text(backbone.tokenizer(TEXTS)['input_ids'], normalize=False),
            atol=ATOL, rtol=RTOL)
    with pytest.raises(ValueError, match=(
            r"^model\.language_branch\.tokenizer\.pad_id: the text tower of the target-language "
            r'branch attends to its padding, and the target tokenizer guessed its pad id \(0\): '
            r'.* set model\.language_branch\.tokenizer\.pad_id to the id open_clip pads with')):
        branch()


DASD_BATCH = dict(MIXED_BATCH, lang=['de', 'sw', 'de', 'sw'],
                  target_text=['ein roter Kreis', 'mraba wa bluu', 'zwei rote Kreise',
                               'pembetatu kijani'])


@pytest.mark.parametrize('name', ['clip_causal_argmax', 'siglip_last_proj_bias',
                                  'xlmr_mean_pooler_mlp', 'mt5_mean_pooler_mlp',
                                  'nllb_clip_cls_pooler_linear'])
def test_dasd_dynamic_adapters_with_the_sdm_train_on_each_family(name, tmp_path):
    """DASD end to end in the retriever: SDM on the first block, dynamic adapters after every
    block; both phases' losses train the branch's adapters and the SDM, nothing of the
    backbone."""
    model_cfg, tokenizer = _family(name, tmp_path)
    torch.manual_seed(0)
    model = MODELS.build(dict(
        type='CrossLingualRetriever', backbone=backbone_cfg(model_cfg, tokenizer),
        language_branch=dict(
            type='TargetLanguageBranch', languages=['de', 'sw'],
            tokenizer=_branch_tokenizer(name, tmp_path),
            embedding=dict(type='TowerTokenEmbedding'),
            adapters=dict(type='DynamicAdapter', hidden=4)),
        disentangler=dict(type='SemanticsDisentangler',
                          adapter=dict(type='StaticAdapter', hidden=8),
                          generator=dict(d_z=16, d_u=4))))
    frozen = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=1e-3)
    for phase, weights in (('cross_lingual', dict(cl=1.0, disentangler=1.0)),
                           ('cross_modal', dict(cm=1.0, disentangler=1.0))):
        model.set_phase(phase, weights)
        data = model.data_preprocessor(DASD_BATCH, True)
        optimizer.zero_grad()
        losses = model(mode='loss', **data)
        assert {'loss_sc', 'loss_adv'} <= set(losses)
        sum(losses.values()).backward()
        grads = {n for n, p in model.named_parameters() if p.grad is not None}
        assert not any(n.startswith('backbone.') for n in grads)
        assert any(n.startswith('language_branch.adapters.') for n in grads)
        assert any(n.startswith('disentangler.') for n in grads)
        optimizer.step()
    assert all(torch.equal(frozen[k], v) for k, v in model.backbone.state_dict().items())


def test_a_siglip2_tower_refuses_a_tokenizer_padded_on_the_left(tmp_path):
    """SigLIP 2's tower reads its padding (the last of 64 positions): a Gemma snapshot whose
    ``tokenizer_config.json`` leaves ``padding_side`` to ``GemmaTokenizer``'s default
    (``'left'``, where open_clip would pad) is refused as the backbone builds, naming the file;
    set to ``'right'``, the same file builds."""
    for padding_side in (None, 'right'):
        folder = gemma_snapshot(tmp_path / str(padding_side), TEXTS, '$A <eos>',
                                padding_side=padding_side, add_bos_token=False,
                                add_eos_token=True)
        cfg = backbone_cfg(siglip_cfg('ViT-B-16-SigLIP2', vocab_size=1500),
                           dict(type='HFTokenizer', tokenizer_file=str(folder / 'tokenizer.json')))
        if padding_side is None:
            with pytest.raises(ValueError, match=r'tokenizer padding side: .* pads on the left '
                                                 r'\(.*None/tokenizer_config\.json padding_side'):
                MODELS.build(cfg)
        else:
            assert MODELS.build(cfg).tokenizer.left_padded_by is None


def test_where_the_text_tower_s_files_are_read_is_no_checkpoint_setting(tmp_path):
    """docs/backbones.md's offline route names a folder of this machine: a checkpoint trained
    with the encoder's config in one folder loads where it is in another; its pooling is a
    setting still."""
    if not XLMR_TOKENIZER.is_file():
        pytest.skip(f'XLM-R tokenizer not found at {XLMR_TOKENIZER}')
    first = xlmr_cfg(tmp_path / 'machine_a' / 'xlmr')
    shutil.copytree(tmp_path / 'machine_a' / 'xlmr', tmp_path / 'machine_b')
    moved = dict(first, text_cfg=dict(first['text_cfg'], hf_model_name=str(tmp_path / 'machine_b')))
    pooled = xlmr_cfg(tmp_path / 'machine_a' / 'xlmr', pooler='cls_pooler')
    a, b, c = (MODELS.build(backbone_cfg(cfg, xlmr_tokenizer())) for cfg in (first, moved, pooled))
    assert a.fingerprint_settings() != b.fingerprint_settings()
    assert a.checkpoint_settings() == b.checkpoint_settings()
    assert a.checkpoint_settings() != c.checkpoint_settings()


def _structure(arch: str) -> str | None:
    """The key of ``arch``'s shrunk structure (:func:`shrunk_cfg`): its config with the fields
    open_clip's ``CLIPTextCfg`` / ``MultimodalCfg`` fill in written out (``MobileCLIP2-B``'s
    ``no_causal_mask: false`` is the default), less the Hugging Face tokenizer's name, which the
    stand-in tokenizer replaces; ``None``: a Hugging Face encoder without a stand-in."""
    shrunk = shrunk_cfg(arch)
    if shrunk is None:
        return None
    cfg, tokenizer = shrunk
    text = dataclasses.asdict(CLIPTextCfg(**cfg['text_cfg']))
    del text['hf_tokenizer_name']
    key = dict(cfg, text_cfg=text, tokenizer=tokenizer)
    if 'multimodal_cfg' in cfg:
        key['multimodal_cfg'] = dataclasses.asdict(MultimodalCfg(**cfg['multimodal_cfg']))
    return json.dumps(key, sort_keys=True)


#: Every architecture open_clip lists, with its structure's key, those of one structure next to
#: each other, so that a worker runs each structure once (:func:`_walk_verdict`).
ARCHITECTURES = {arch: _structure(arch) for arch in open_clip.list_models()}
STRUCTURES: dict[str | None, list[str]] = {}
for _arch, _key in ARCHITECTURES.items():
    STRUCTURES.setdefault(_key, []).append(_arch)
del _arch, _key
#: The field of each refusal docs/backbones.md lists ("Refused towers"), in the message
#: ``<model class>.<module>: <field> - <what is missing>``.
DOCUMENTED_REFUSALS = ("text_cfg.pool_type='none'", 'text_cfg.scaled_cosine_attn=True',
                       'attentional pooler (attn_pool)', 'text_cfg.hf_proj_type=None',
                       'text_cfg.hf_pooler_type gives MaxPooler')
_VERDICTS: dict[str, str] = {}


def _run_or_refused(model_cfg: dict, tokenizer: dict | None, archs: list[str]) -> str:
    """``'exact (<model class>, <xmr tower>)'`` where xmr's source path equals open_clip's
    ``encode_text`` on the same weights and ids (``atol=rtol=1e-5``; a difference fails, naming
    ``archs``), ``'refused: <message>'`` where building the backbone raises a ``TypeError``."""
    try:
        backbone = _built(model_cfg, tokenizer)
    except TypeError as error:
        return f'refused: {error}'
    tokens = backbone.tokenizer(TEXTS, TEXT_LANGS)
    with torch.no_grad():
        expected = backbone.clip.encode_text(_open_clip_ids(backbone, tokens), normalize=False)
        for got in (backbone.encode_source_text(tokens),
                    backbone.encode_text_tokens(tokens).pooled):
            torch.testing.assert_close(got, expected, atol=ATOL, rtol=RTOL,
                                       msg=lambda message: f'{", ".join(archs)}: {message}')
    return f'exact ({type(backbone.clip).__name__}, {type(backbone.text_tower).__name__})'


def _exact_or_documented(verdict: str) -> bool:
    """Whether a :func:`_run_or_refused` verdict is a run or a refusal the docs list."""
    return verdict.startswith('exact') or any(f': {field} - ' in verdict
                                              for field in DOCUMENTED_REFUSALS)


def _walk_verdict(arch: str, tmp_path_factory) -> str:
    """:func:`_run_or_refused` of ``arch``'s structure, run once per structure and worker."""
    key = ARCHITECTURES[arch]
    if key not in _VERDICTS:
        cfg, tokenizer = shrunk_cfg(arch)
        if tokenizer == 'xlm-roberta' and not XLMR_TOKENIZER.is_file():
            pytest.skip(f'XLM-R tokenizer not found at {XLMR_TOKENIZER}')
        model_cfg, tokenizer_cfg = built_shrunk_cfg(cfg, tokenizer,
                                                    tmp_path_factory.mktemp('walk'))
        _VERDICTS[key] = _run_or_refused(model_cfg, tokenizer_cfg, STRUCTURES[key])
    return _VERDICTS[key]


@pytest.mark.parametrize('arch', [arch for archs in STRUCTURES.values() for arch in archs])
def test_every_open_clip_architecture_is_run_exactly_or_refused_by_name(arch, tmp_path_factory):
    """Each architecture of ``open_clip.list_models()``, from its own config with only its
    sizes shrunk (:func:`shrunk_cfg`: every text field, the model class, a tiny image tower;
    a Hugging Face encoder as a tiny one of its model type), is run as open_clip's own
    ``encode_text`` runs it (``atol=rtol=1e-5``) or refused as docs/backbones.md lists. An
    architecture whose Hugging Face encoder has no stand-in is skipped, naming it."""
    if ARCHITECTURES[arch] is None:
        name = open_clip.get_model_config(arch)['text_cfg']['hf_model_name']
        pytest.skip(f'{arch}: its text tower is the Hugging Face model {name!r}, which cannot be '
                    f'built offline and has no tiny stand-in in HF_ENCODER_STAND_INS '
                    f'({sorted(HF_ENCODER_STAND_INS)})')
    verdict = _walk_verdict(arch, tmp_path_factory)
    assert _exact_or_documented(verdict), (
        f'{", ".join(STRUCTURES[ARCHITECTURES[arch]])}: {verdict} (no refusal docs/backbones.md '
        'lists)')


def test_the_walk_takes_a_documented_refusal_and_fails_any_other():
    """:func:`_run_or_refused`'s refusals: MobileCLIP-S1's shrunk config with
    ``pool_type='none'`` is one the docs list; a ``TypeError`` of no documented field (open_clip's
    own, for a ``text_cfg`` field it does not know) is not, and fails the walk."""
    cfg, _ = shrunk_cfg('MobileCLIP-S1')
    cfg['text_cfg']['pool_type'] = 'none'
    verdict = _run_or_refused(cfg, None, ['MobileCLIP-S1'])
    assert verdict.startswith("refused: CustomTextCLIP.text (TextTransformer): "
                              "text_cfg.pool_type='none' - ") and _exact_or_documented(verdict)
    cfg['text_cfg'].update(pool_type='argmax', rope=True)
    verdict = _run_or_refused(cfg, None, ['MobileCLIP-S1'])
    assert verdict.startswith('refused: ') and not _exact_or_documented(verdict)
