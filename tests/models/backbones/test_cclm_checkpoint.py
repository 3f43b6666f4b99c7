"""Conversion of CCLM checkpoints: a tiny checkpoint with CCLM's real key names and structure.

The reference forwards below are written from the raw checkpoint tensors with Microsoft's Swin
and CCLM's BERT semantics, independently of timm and transformers, so an output match means
every weight landed in the right place.
"""
import functools
import math
import re

import pytest
import torch
import torch.nn.functional as F

import xmr.models.backbones.cclm  # noqa: F401  (registers CCLMDualStream, CCLMTokenizer)
from tests.conftest import SHARED_DATA
from tests.zip_records import damage_record
from xmr.models.backbones.cclm_checkpoint import convert_cclm_state_dict, read_cclm_checkpoint
from xmr.models.backbones.relative_position import resize_relative_position_bias
from xmr.registry import MODELS, TOKENIZERS

TOKENIZER_FILE = SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json'
pytestmark = pytest.mark.skipif(not TOKENIZER_FILE.is_file(),
                                reason=f'real XLM-R tokenizer not found at {TOKENIZER_FILE}')


@functools.cache
def xlmr_tokenizer():
    """The real XLM-R tokenizer, read once: loading its 250k pieces is the slow part."""
    return TOKENIZERS.build(dict(type='CCLMTokenizer', tokenizer_file=str(TOKENIZER_FILE)))
VOCAB = 250002
PATCH, EMBED, DEPTHS, HEADS = 4, 16, (2, 2), (2, 4)
WIDTH, TEXT_HEADS, FFN, POSITIONS, TEXT_LAYERS, FUSION_LAYERS = 32, 4, 64, 48, 2, 2
VISION_WIDTH = EMBED * 2 ** (len(DEPTHS) - 1)
EMBED_DIM = 16
CAPTIONS = ['A man, riding a horse!', 'two dogs play in the snow', 'Ein Hund.']


def backbone_cfg(image_size=64, window_size=4, num_layers=TEXT_LAYERS, **overrides):
    return dict(type='CCLMDualStream', image_size=image_size, window_size=window_size,
                vision=dict(embed_dim=EMBED, depths=DEPTHS, num_heads=HEADS, patch_size=PATCH),
                text=dict(hidden_size=WIDTH, num_layers=num_layers, num_heads=TEXT_HEADS,
                          intermediate_size=FFN, max_position_embeddings=POSITIONS),
                embed_dim=EMBED_DIM, tokenizer=xlmr_tokenizer(), **overrides)


def cclm_state_dict(image_size=64, window_size=4, text_prefix='text_encoder.bert.', seed=0):
    """A CCLM state dict with the authors' names: Microsoft Swin, BERT with fusion layers."""
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.2):
        return torch.randn(*shape, generator=generator) * scale

    def norm(prefix, dim):
        state[f'{prefix}.weight'] = 1 + rand(dim, scale=0.1)
        state[f'{prefix}.bias'] = rand(dim, scale=0.1)

    def linear(prefix, out_dim, in_dim, bias=True):
        state[f'{prefix}.weight'] = rand(out_dim, in_dim)
        if bias:
            state[f'{prefix}.bias'] = rand(out_dim, scale=0.05)

    state = {}
    state['vision_encoder.patch_embed.proj.weight'] = rand(EMBED, 3, PATCH, PATCH)
    state['vision_encoder.patch_embed.proj.bias'] = rand(EMBED)
    norm('vision_encoder.patch_embed.norm', EMBED)
    resolution = image_size // PATCH
    for stage, (depth, heads) in enumerate(zip(DEPTHS, HEADS)):
        dim = EMBED * 2 ** stage
        window = min(window_size, resolution)
        for index in range(depth):
            block = f'vision_encoder.layers.{stage}.blocks.{index}'
            norm(f'{block}.norm1', dim)
            linear(f'{block}.attn.qkv', 3 * dim, dim)
            linear(f'{block}.attn.proj', dim, dim)
            state[f'{block}.attn.relative_position_bias_table'] = rand((2 * window - 1) ** 2,
                                                                      heads)
            state[f'{block}.attn.relative_position_index'] = torch.zeros(
                window ** 2, window ** 2, dtype=torch.long)
            if index % 2 == 1 and resolution > window:
                state[f'{block}.attn_mask'] = torch.zeros(
                    (resolution // window) ** 2, window ** 2, window ** 2)
            norm(f'{block}.norm2', dim)
            linear(f'{block}.mlp.fc1', 4 * dim, dim)
            linear(f'{block}.mlp.fc2', dim, 4 * dim)
        if stage < len(DEPTHS) - 1:
            norm(f'vision_encoder.layers.{stage}.downsample.norm', 4 * dim)
            linear(f'vision_encoder.layers.{stage}.downsample.reduction', 2 * dim, 4 * dim,
                   bias=False)
            resolution //= 2
    norm('vision_encoder.norm', VISION_WIDTH)

    text = text_prefix
    state[f'{text}embeddings.word_embeddings.weight'] = rand(VOCAB, WIDTH, scale=1.0)
    state[f'{text}embeddings.position_embeddings.weight'] = rand(POSITIONS, WIDTH, scale=1.0)
    state[f'{text}embeddings.token_type_embeddings.weight'] = rand(1, WIDTH, scale=1.0)
    state[f'{text}embeddings.position_ids'] = torch.arange(POSITIONS)[None]
    norm(f'{text}embeddings.LayerNorm', WIDTH)
    for index in range(TEXT_LAYERS + FUSION_LAYERS):
        layer = f'{text}encoder.layer.{index}'
        for name in ('query', 'key', 'value'):
            linear(f'{layer}.attention.self.{name}', WIDTH, WIDTH)
        linear(f'{layer}.attention.output.dense', WIDTH, WIDTH)
        norm(f'{layer}.attention.output.LayerNorm', WIDTH)
        if index >= TEXT_LAYERS:
            linear(f'{layer}.crossattention.self.query', WIDTH, WIDTH)
            linear(f'{layer}.crossattention.self.key', WIDTH, VISION_WIDTH)
            linear(f'{layer}.crossattention.self.value', WIDTH, VISION_WIDTH)
            linear(f'{layer}.crossattention.output.dense', WIDTH, WIDTH)
            norm(f'{layer}.crossattention.output.LayerNorm', WIDTH)
        linear(f'{layer}.intermediate.dense', FFN, WIDTH)
        linear(f'{layer}.output.dense', WIDTH, FFN)
        norm(f'{layer}.output.LayerNorm', WIDTH)
    if text_prefix.endswith('bert.'):
        linear('text_encoder.cls.predictions.transform.dense', WIDTH, WIDTH)
        state['text_encoder.cls.predictions.bias'] = rand(VOCAB)
    linear('vision_proj', EMBED_DIM, VISION_WIDTH)
    linear('text_proj', EMBED_DIM, WIDTH)
    state['temp'] = torch.tensor(0.05)
    linear('itm_head.0', 2 * WIDTH, WIDTH)
    linear('itm_head.3', 2, 2 * WIDTH)
    linear('bbox_head.0', 2 * WIDTH, WIDTH)
    linear('bbox_head.3', 4, 2 * WIDTH)
    return state


# ------------------------------------------------------------------ reference forwards
def _layer_norm(x, state, prefix, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], state[f'{prefix}.weight'], state[f'{prefix}.bias'], eps)


def _linear(x, state, prefix):
    return F.linear(x, state[f'{prefix}.weight'], state.get(f'{prefix}.bias'))


def _window_bias(table, window):
    """``[heads, N, N]``: bias between tokens (h1, w1) and (h2, w2) of one window."""
    cells = [(h, w) for h in range(window) for w in range(window)]
    rows = torch.tensor([[(h1 - h2 + window - 1) * (2 * window - 1) + (w1 - w2 + window - 1)
                          for h2, w2 in cells] for h1, w1 in cells])
    return table[rows].permute(2, 0, 1)


def _region_mask(size, window, shift):
    """``[num_windows, N, N]``: -100 between tokens from different regions of the rolled grid."""
    def band(i):
        return 0 if i < size - window else (1 if i < size - shift else 2)

    labels = torch.tensor([[3 * band(h) + band(w) for w in range(size)] for h in range(size)])
    windows = labels.view(size // window, window, size // window, window)
    windows = windows.permute(0, 2, 1, 3).reshape(-1, window * window)
    different = windows[:, :, None] != windows[:, None, :]
    return different.float() * -100.0


def _swin_block(state, prefix, x, size, heads, window, shifted):
    batch, _, dim = x.shape
    window = min(window, size)
    shift = window // 2 if shifted and size > window else 0
    tokens = window * window
    shortcut = x
    grid = _layer_norm(x, state, f'{prefix}.norm1').view(batch, size, size, dim)
    if shift:
        grid = torch.roll(grid, (-shift, -shift), (1, 2))
    windows = grid.view(batch, size // window, window, size // window, window, dim)
    windows = windows.permute(0, 1, 3, 2, 4, 5).reshape(-1, tokens, dim)
    qkv = _linear(windows, state, f'{prefix}.attn.qkv').view(-1, tokens, 3, heads, dim // heads)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)
    scores = (q * (dim // heads) ** -0.5) @ k.transpose(-2, -1)
    scores = scores + _window_bias(state[f'{prefix}.attn.relative_position_bias_table'], window)
    if shift:
        count = (size // window) ** 2
        scores = (scores.view(batch, count, heads, tokens, tokens)
                  + _region_mask(size, window, shift)[None, :, None]).view(-1, heads, tokens,
                                                                            tokens)
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(-1, tokens, dim)
    out = _linear(out, state, f'{prefix}.attn.proj')
    out = out.view(batch, size // window, size // window, window, window, dim)
    out = out.permute(0, 1, 3, 2, 4, 5).reshape(batch, size, size, dim)
    if shift:
        out = torch.roll(out, (shift, shift), (1, 2))
    x = shortcut + out.reshape(batch, size * size, dim)
    hidden = F.gelu(_linear(_layer_norm(x, state, f'{prefix}.norm2'), state, f'{prefix}.mlp.fc1'))
    return x + _linear(hidden, state, f'{prefix}.mlp.fc2')


def reference_image_features(state, images, window):
    """Microsoft's Swin + CCLM's average-pooled first token + ``vision_proj``."""
    x = F.conv2d(images, state['vision_encoder.patch_embed.proj.weight'],
                 state['vision_encoder.patch_embed.proj.bias'], stride=PATCH)
    size = x.shape[-1]
    x = _layer_norm(x.flatten(2).transpose(1, 2), state, 'vision_encoder.patch_embed.norm')
    for stage, (depth, heads) in enumerate(zip(DEPTHS, HEADS)):
        for index in range(depth):
            x = _swin_block(state, f'vision_encoder.layers.{stage}.blocks.{index}', x, size,
                            heads, window, shifted=index % 2 == 1)
        if stage < len(DEPTHS) - 1:
            grid = x.view(x.shape[0], size, size, -1)
            merged = torch.cat([grid[:, 0::2, 0::2], grid[:, 1::2, 0::2], grid[:, 0::2, 1::2],
                                grid[:, 1::2, 1::2]], dim=-1).flatten(1, 2)
            prefix = f'vision_encoder.layers.{stage}.downsample'
            x = _linear(_layer_norm(merged, state, f'{prefix}.norm'), state,
                        f'{prefix}.reduction')
            size //= 2
    x = _layer_norm(x, state, 'vision_encoder.norm')
    return _linear(x.mean(1), state, 'vision_proj')


def reference_text_features(state, tokens, prefix='text_encoder.bert.', layers=TEXT_LAYERS):
    """CCLM's BERT text mode (positions from 0, mask -10000) on layers ``0..layers - 1`` +
    ``text_proj``."""
    ids, mask = tokens['input_ids'], tokens['attention_mask']
    length = ids.shape[1]
    x = (state[f'{prefix}embeddings.word_embeddings.weight'][ids]
         + state[f'{prefix}embeddings.token_type_embeddings.weight'][0]
         + state[f'{prefix}embeddings.position_embeddings.weight'][:length])
    x = _layer_norm(x, state, f'{prefix}embeddings.LayerNorm')
    bias = (~mask)[:, None, None, :].float() * -10000.0
    head_dim = WIDTH // TEXT_HEADS
    for index in range(layers):
        layer = f'{prefix}encoder.layer.{index}'

        q, k, v = (_linear(x, state, f'{layer}.attention.self.{name}')
                   .view(*x.shape[:2], TEXT_HEADS, head_dim).transpose(1, 2)
                   for name in ('query', 'key', 'value'))
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim) + bias
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
        h = _linear(context, state, f'{layer}.attention.output.dense')
        x = _layer_norm(h + x, state, f'{layer}.attention.output.LayerNorm')
        h = _linear(F.gelu(_linear(x, state, f'{layer}.intermediate.dense')), state,
                    f'{layer}.output.dense')
        x = _layer_norm(h + x, state, f'{layer}.output.LayerNorm')
    return _linear(x[:, 0], state, 'text_proj')


# ------------------------------------------------------------------ tests
@pytest.fixture(scope='module')
def state():
    return cclm_state_dict()


@pytest.fixture(scope='module')
def checkpoint_file(tmp_path_factory, state):
    path = tmp_path_factory.mktemp('cclm') / 'cclm_4m_epoch_29.th'
    torch.save({'model': state, 'epoch': 29, 'config': {'image_res': 64}}, path)
    return path


@pytest.fixture(scope='module')
def loaded(checkpoint_file):
    return MODELS.build(backbone_cfg(checkpoint=str(checkpoint_file))).eval()


def test_image_features_match_reference_from_raw_tensors(loaded, state):
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(loaded.encode_image(images),
                                   reference_image_features(state, images, window=4),
                                   rtol=1e-4, atol=1e-5)


def test_patch_merging_moves_from_end_of_stage_to_start_of_next(loaded, state):
    torch.testing.assert_close(loaded.vision.layers[1].downsample.reduction.weight,
                               state['vision_encoder.layers.0.downsample.reduction.weight'])


def test_text_features_match_reference_from_raw_tensors(loaded, state):
    tokens = loaded.tokenizer(CAPTIONS)
    assert not tokens['attention_mask'].all(), 'the batch should contain padding'
    with torch.no_grad():
        torch.testing.assert_close(loaded.encode_source_text(tokens),
                                   reference_text_features(state, tokens),
                                   rtol=1e-4, atol=1e-5)


def test_report_accounts_for_every_key(loaded, state):
    report = loaded.checkpoint_report
    assert report.complete and not report.resized
    assert set(report.used) | set(report.dropped) == set(state)
    assert not set(report.used) & set(report.dropped)
    assert set(report.used.values()) == set(loaded.state_dict())
    assert report.used['text_encoder.bert.encoder.layer.1.output.dense.weight'] == \
        'text_tower.layers.1.output.dense.weight'
    assert report.used['vision_encoder.layers.0.downsample.norm.bias'] == \
        'vision.layers.1.downsample.norm.bias'
    reasons = report.dropped
    assert 'fusion' in reasons['text_encoder.bert.encoder.layer.2.attention.self.query.weight']
    assert 'fusion' in reasons['text_encoder.bert.encoder.layer.3.crossattention.self.key.bias']
    assert 'matching' in reasons['itm_head.0.weight']
    assert 'box' in reasons['bbox_head.3.bias']
    assert 'masked-language' in reasons['text_encoder.cls.predictions.bias']
    assert 'buffer' in reasons['vision_encoder.layers.1.blocks.1.attn_mask']
    assert 'buffer' in reasons['vision_encoder.layers.0.blocks.0.attn.relative_position_index']
    assert 'buffer' in reasons['text_encoder.bert.embeddings.position_ids']
    assert float(loaded.temperature) == pytest.approx(0.05)
    summary = report.summary()
    assert f'{len(report.used)} keys used' in summary and '0 missing' in summary


def test_fusion_layers_do_not_change_the_features(state):
    images = torch.randn(1, 3, 64, 64)
    changed = dict(state)
    for key in state:
        if '.encoder.layer.2.' in key or '.encoder.layer.3.' in key or key.startswith('itm_'):
            changed[key] = state[key] + 1.0
    tokens = xlmr_tokenizer()(CAPTIONS)
    outputs = []
    for weights in (state, changed):
        backbone = MODELS.build(backbone_cfg(checkpoint=weights)).eval()
        with torch.no_grad():
            outputs.append((backbone.encode_source_text(tokens), backbone.encode_image(images)))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=0)


def test_keeping_a_fusion_layer_is_refused(state):
    with pytest.raises(ValueError, match=r'text layers 2\.\.2 are fusion layers'):
        MODELS.build(backbone_cfg(checkpoint=state, num_layers=3))


def test_retrieval_finetune_names_without_bert_prefix_load_the_same(state):
    renamed = cclm_state_dict(text_prefix='text_encoder.')
    backbone = MODELS.build(backbone_cfg(checkpoint={'model': renamed})).eval()
    tokens = backbone.tokenizer(CAPTIONS)
    with torch.no_grad():
        torch.testing.assert_close(backbone.encode_source_text(tokens),
                                   reference_text_features(renamed, tokens, 'text_encoder.'),
                                   rtol=1e-4, atol=1e-5)
    assert backbone.checkpoint_report.complete


@pytest.mark.parametrize('mode', ['bicubic', 'geometric'])
def test_window_7_checkpoint_resized_to_window_12_at_384(mode):
    state = cclm_state_dict(image_size=224, window_size=7, seed=2)
    backbone = MODELS.build(backbone_cfg(image_size=384, window_size=None, checkpoint=state,
                                         bias_interpolation=mode))
    assert backbone.window_size == 12
    report = backbone.checkpoint_report
    tables = [key for key in state if key.endswith('relative_position_bias_table')]
    assert report.complete and set(report.resized) == set(tables)
    assert set(report.resized.values()) == {(7, 12)}
    for key in tables:
        stage, block = int(key.split('.')[2]), int(key.split('.')[4])
        loaded = backbone.vision.layers[stage].blocks[block].attn.relative_position_bias_table
        assert loaded.shape == (23 * 23, HEADS[stage])
        torch.testing.assert_close(loaded, resize_relative_position_bias(state[key], 12, mode))
    with torch.no_grad():
        assert backbone.encode_image(torch.randn(1, 3, 384, 384)).shape == (1, EMBED_DIM)


def test_missing_weight_is_refused_unless_not_strict(state):
    incomplete = {k: v for k, v in state.items() if k != 'vision_encoder.norm.weight'}
    with pytest.raises(ValueError, match=r'missing: vision\.norm\.weight(.|\n)*strict=False '
                                         r'would load it with the missing weights left as '
                                         r'initialised \(random\)'):
        MODELS.build(backbone_cfg(checkpoint=incomplete))
    backbone = MODELS.build(backbone_cfg(checkpoint=incomplete, strict=False))
    assert backbone.checkpoint_report.missing == ['vision.norm.weight']


def test_unexplained_key_is_refused(state):
    extra = dict(state, **{'vision_encoder.absolute_pos_embed': torch.zeros(1, 256, EMBED)})
    with pytest.raises(ValueError, match=r'unexpected: vision_encoder\.absolute_pos_embed'):
        MODELS.build(backbone_cfg(checkpoint=extra))


def test_shape_mismatch_names_the_key(state):
    cfg = backbone_cfg(checkpoint=state)
    cfg['text']['intermediate_size'] = 2 * FFN
    with pytest.raises(ValueError, match=r'layer\.0\.intermediate\.dense\.weight has shape '
                                         r'\(64, 32\).*\(128, 32\)'):
        MODELS.build(cfg)


def test_read_accepts_bare_state_dict(tmp_path, state):
    path = tmp_path / 'bare.pth'
    small = {k: v for k, v in state.items() if 'word_embeddings' not in k and 'cls.' not in k}
    torch.save(small, path)
    assert read_cclm_checkpoint(path).keys() == small.keys()


def test_files_that_are_not_cclm_checkpoints_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match='does not exist'):
        read_cclm_checkpoint(tmp_path / 'absent.th')
    clip_like = tmp_path / 'open_clip.pt'
    torch.save({'state_dict': {'visual.conv1.weight': torch.zeros(1)}}, clip_like)
    with pytest.raises(ValueError, match=r'open_clip\.pt is not a CCLM checkpoint.*'
                                         r"top-level names found: \['state_dict'\]"):
        read_cclm_checkpoint(clip_like)
    tensor_file = tmp_path / 'tensor.pt'
    torch.save(torch.zeros(3), tensor_file)
    with pytest.raises(ValueError, match='expected a state dict.*got Tensor'):
        read_cclm_checkpoint(tensor_file)
    with pytest.raises(ValueError, match='is not a CCLM checkpoint'):
        convert_cclm_state_dict({'text_encoder.x': torch.zeros(1)}, {}, 2)


def test_a_checkpoint_pickling_objects_names_the_backbone_setting_that_reads_it(tmp_path,
                                                                                state):
    """A fine-tuning's file that pickles its arguments (an ``argparse.Namespace``) beside the
    weights: the safe loader refuses it, naming the backbone's setting a user trusting the
    file gives in the config."""
    import argparse

    path = tmp_path / 'finetuned.th'
    torch.save({'model': state, 'args': argparse.Namespace(lr=1e-4)}, path)
    with pytest.raises(ValueError, match=rf'{re.escape(str(path))} pickles objects that the '
                                         r'safe loader refuses \(argparse\.Namespace\); if you '
                                         r'trust the file, set checkpoint_weights_only=False on '
                                         r'the CCLMDualStream backbone'):
        read_cclm_checkpoint(path)
    assert read_cclm_checkpoint(path, weights_only=False).keys() == state.keys()


@pytest.mark.parametrize('start', [
    b'version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 1563413913\n',
    b'<!DOCTYPE html><html><body>Sign in'], ids=['git-lfs-pointer', 'login-page'])
def test_a_file_that_is_no_torch_file_is_never_sent_to_weights_only_false(tmp_path, start):
    """torch's safe loader stops on any such bytes with its advice to load unsafely; the
    backbone's setting that does so would not read them either."""
    path = tmp_path / 'cclm_4m_epoch_29.th'
    path.write_bytes(start)
    with pytest.raises(ValueError) as refused:
        read_cclm_checkpoint(path)
    message = str(refused.value)
    assert message.startswith(f'{path} ({len(start)} bytes) is not a readable CCLM checkpoint: ')
    assert 'weights_only' not in message
    assert ("'git lfs pull'" in message) == start.startswith(b'version')


def test_truncated_or_damaged_files_are_refused_naming_them(tmp_path, checkpoint_file):
    """A cut-off download names the file; a damaged tensor, which torch.load would read as other
    numbers without a word, names its record."""
    truncated = tmp_path / 'cclm_4m.th'
    truncated.write_bytes(checkpoint_file.read_bytes()[:4096])
    with pytest.raises(ValueError, match=rf'{re.escape(str(truncated))} \(4096 bytes\) is not a '
                                         r'readable CCLM checkpoint: .*download the file again'):
        read_cclm_checkpoint(truncated)
    damaged = tmp_path / 'damaged.th'
    damaged.write_bytes(checkpoint_file.read_bytes())
    record = damage_record(damaged, '/data/')
    with pytest.raises(ValueError, match=rf'{re.escape(str(damaged))}: truncated or corrupt '
                                         rf'CCLM checkpoint \(its record {re.escape(record)} '
                                         r'is damaged'):
        read_cclm_checkpoint(damaged)


def test_backbone_with_an_absent_checkpoint_fails_before_building_anything(tmp_path):
    from xmr.models.backbones.cclm import CCLMDualStream

    # The default tokenizer would need the hub; the missing file must be reported first.
    with pytest.raises(FileNotFoundError, match=r'absent\.th does not exist.*checkpoint=PATH'):
        CCLMDualStream(checkpoint=str(tmp_path / 'absent.th'))


def test_a_checkpoint_read_through_another_tokenizer_than_cclms_is_refused(checkpoint_file):
    """XLM-R's own tokenizer without CCLM's caption cleaning (lower case, punctuation removed)
    gives the trained tower other ids for the same caption ('A man, riding' is not 'a man
    riding'); with random weights any tokenizer goes."""
    plain = TOKENIZERS.build(dict(type='HFTokenizer', tokenizer_file=str(TOKENIZER_FILE),
                                  max_length=40))
    assert plain(['A man, riding!'])['input_ids'].tolist() != \
        xlmr_tokenizer()(['A man, riding!'])['input_ids'].tolist()
    with pytest.raises(ValueError, match=r"tokenizer.type: the config builds a HFTokenizer, but "
                                         r"CCLM's text tower was trained on captions cleaned by "
                                         r"its pre_caption .*; use 'CCLMTokenizer'"):
        MODELS.build(dict(backbone_cfg(checkpoint=str(checkpoint_file)), tokenizer=plain))
    MODELS.build(dict(backbone_cfg(), tokenizer=plain))


def test_a_text_tower_shallower_than_the_checkpoints_text_layers_keeps_the_first_ones(state):
    """A config keeping fewer text layers than precede the fusion layers loads layers 0..n-1
    and drops the rest, each with its reason: the report is complete (a strict build loads it)
    and the features are those of the first layer alone, computed from the raw tensors."""
    backbone = MODELS.build(backbone_cfg(checkpoint=state, num_layers=1)).eval()
    report = backbone.checkpoint_report
    assert report.complete
    assert report.dropped['text_encoder.bert.encoder.layer.1.output.dense.weight'] == \
        'text layer beyond the 1 configured'
    assert 'fusion' in report.dropped['text_encoder.bert.encoder.layer.2.output.dense.weight']
    tokens = backbone.tokenizer(CAPTIONS)
    with torch.no_grad():
        torch.testing.assert_close(backbone.encode_source_text(tokens),
                                   reference_text_features(state, tokens, layers=1),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('key, shape, reason', [
    ('text_encoder.bert.embeddings.token_type_ids', (1, POSITIONS), 'index buffer'),
    ('text_encoder.bert.pooler.dense.weight', (WIDTH, WIDTH), 'BERT pooler'),
    ('vision_encoder.head.weight', (10, VISION_WIDTH), 'image-classification head'),
])
def test_keys_the_dual_stream_model_does_not_need_are_dropped_with_their_reason(key, shape,
                                                                              reason, state):
    """Saves that also hold BERT's ``token_type_ids`` buffer, its pooler or a Swin
    classification head: those keys are explained (dropped, with why), not unexpected, so a
    strict build still loads the file."""
    extra = dict(state, **{key: torch.zeros(shape)})
    backbone = MODELS.build(backbone_cfg(checkpoint=extra))
    report = backbone.checkpoint_report
    assert report.complete
    assert reason in report.dropped[key]


def test_a_state_dict_with_an_entry_that_is_no_tensor_is_refused_naming_it(state):
    """A value that is no tensor (a step count saved in the state dict) is named before any
    conversion, not met as an ``AttributeError`` on its ``.shape``."""
    with pytest.raises(ValueError, match=r"is not a CCLM checkpoint: \['global_step'\] are not "
                                         r'tensors'):
        convert_cclm_state_dict(dict(state, global_step=29), {}, TEXT_LAYERS)


def test_a_text_encoder_without_fusion_layers_loads_its_text_layers(state):
    """A save whose text encoder has no cross-attention layer (no fusion part): its layers
    load as text layers, the ones beyond the configured count dropped with their reason."""
    text_only = {k: v for k, v in state.items()
                 if not re.search(r'\.encoder\.layer\.[23]\.', k)}
    backbone = MODELS.build(backbone_cfg(checkpoint=text_only, num_layers=1)).eval()
    report = backbone.checkpoint_report
    assert report.complete
    assert report.dropped['text_encoder.bert.encoder.layer.1.output.dense.weight'] == \
        'text layer beyond the 1 configured'
    tokens = backbone.tokenizer(CAPTIONS)
    with torch.no_grad():
        torch.testing.assert_close(backbone.encode_source_text(tokens),
                                   reference_text_features(state, tokens, layers=1),
                                   rtol=1e-4, atol=1e-5)
