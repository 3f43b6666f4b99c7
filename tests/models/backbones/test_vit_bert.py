"""The timm ViT / Swin + BERT backbone: registration, towers against their libraries, loading."""
import re

import pytest
import timm
import torch
from safetensors.torch import save_file
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from transformers import (
    AutoConfig,
    BertConfig,
    BertModel,
    RobertaModel,
    XLMRobertaModel,
)

from tests.conftest import CORPUS, UNCACHED_TOKENIZER, check_offline_tokenizer_error
from tests.zip_records import damage_record
from xmr.engine.loops import frozen_eval_modules
from xmr.models.backbones.vit_bert import ViTBERTBackbone
from xmr.models.language.tokenizers import TokenizerOutOfReach
from xmr.registry import MODELS, TOKENIZERS

TINY_VIT = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2)
TINY_BERT = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=80)
CAPTIONS = ['ein roter Kreis', 'zwei blaue Quadrate links', 'un']


def tokenizer(**overrides):
    return TOKENIZERS.build(dict(type='SentencePieceTokenizer', corpus=CORPUS * 20,
                                 vocab_size=48, **overrides))


def tiny_cfg(**overrides):
    cfg = dict(type='ViTBERTBackbone', vision='vit_base_patch16_224', vision_cfg=TINY_VIT,
               text_cfg=TINY_BERT, embed_dim=16, tokenizer=tokenizer())
    cfg.update(overrides)
    return cfg


@pytest.fixture(scope='module')
def backbone():
    torch.manual_seed(0)
    return MODELS.build(tiny_cfg()).eval()


def test_registered_frozen_with_the_vision_models_statistics(backbone):
    assert isinstance(backbone, ViTBERTBackbone)
    assert not any(p.requires_grad for p in backbone.parameters())
    assert backbone.image_size == (32, 32) and backbone.embed_dim == 16
    assert backbone.image_mean == (0.5, 0.5, 0.5) and backbone.image_std == (0.5, 0.5, 0.5)


def test_text_is_transformers_bert_projected(backbone):
    tower = backbone.text_tower
    reference = BertModel(BertConfig(**TINY_BERT), add_pooling_layer=False).eval()
    reference.embeddings.load_state_dict(tower.embeddings.state_dict())
    reference.encoder.layer.load_state_dict(tower.layers.state_dict())
    tokens = backbone.tokenizer(CAPTIONS)
    with torch.no_grad():
        hidden = reference(input_ids=tokens['input_ids'],
                           attention_mask=tokens['attention_mask'].long()).last_hidden_state
        expected = tower.text_proj(hidden)
        out = backbone.encode_text_tokens(tokens)
        torch.testing.assert_close(backbone.encode_source_text(tokens), expected[:, 0],
                                   rtol=1e-4, atol=1e-5)
    real = tokens['attention_mask']
    torch.testing.assert_close(out.tokens[real], expected[real], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.pooled, expected[:, 0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('trainable, drops_out', [
    (['backbone', 'disentangler'], True), (['backbone.text_tower.text_proj'], False),
    (['disentangler'], False)])
def test_a_phase_that_trains_the_bert_runs_its_dropout_and_a_frozen_one_none(trainable,
                                                                           drops_out):
    """CDDS fine-tunes BERT as LAPS does, with its dropout (0.1); where the phase leaves the
    layers frozen, the loop keeps them in eval mode and the text is encoded without it."""
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.backbone = MODELS.build(tiny_cfg())
    model.disentangler = torch.nn.Linear(2, 2)
    model.train()
    for module in frozen_eval_modules(model, trainable):
        module.eval()
    tokens = model.backbone.tokenizer(CAPTIONS)
    with torch.no_grad():
        first, second = (model.backbone.encode_source_text(tokens) for _ in range(2))
    assert torch.equal(first, second) is not drops_out


def test_vit_tokens_are_cls_then_patches_and_cls_is_the_embedding(backbone):
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = backbone.vision_proj(backbone.vision(images))
        out = backbone.encode_image_tokens(images)
        torch.testing.assert_close(backbone.encode_image(images), expected)
    assert out.tokens.shape == (2, 1 + 16, 16) and out.mask.all()
    # A boolean mask, as every tower's: a float one of ones would read as attention biases.
    assert out.mask.dtype == torch.bool
    torch.testing.assert_close(out.pooled, expected)
    torch.testing.assert_close(out.tokens[:, 0], expected)


def test_the_projections_are_laps_linear_maps_with_their_biases(backbone):
    """LAPS's ``vision_proj`` and ``text_proj`` are ``nn.Linear(width, E)``: a checkpoint of
    theirs holds both biases, which a map without one would refuse to load."""
    shapes = {key: tuple(value.shape) for key, value in backbone.state_dict().items()
              if key.startswith(('vision_proj.', 'text_tower.text_proj.'))}
    assert shapes == {'vision_proj.weight': (16, 32), 'vision_proj.bias': (16,),
                      'text_tower.text_proj.weight': (16, 32), 'text_tower.text_proj.bias': (16,)}


def test_swin_tokens_are_the_final_patches_averaging_to_the_embedding():
    torch.manual_seed(0)
    backbone = MODELS.build(tiny_cfg(
        vision='swin_base_patch4_window7_224',
        vision_cfg=dict(img_size=32, embed_dim=16, depths=(1, 1), num_heads=(2, 2),
                        window_size=2))).eval()
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        out = backbone.encode_image_tokens(images)
        expected = backbone.vision_proj(backbone.vision(images))
    assert out.tokens.shape == (2, 4 * 4, 16)
    torch.testing.assert_close(out.pooled, expected)
    # The model's own statistics: ImageNet's for this Swin, not the ViT's 0.5.
    assert (backbone.image_mean, backbone.image_std) == (IMAGENET_DEFAULT_MEAN,
                                                         IMAGENET_DEFAULT_STD)
    torch.testing.assert_close(out.tokens.mean(1), expected, rtol=1e-4, atol=1e-5)


def test_a_cnn_takes_its_records_size_and_its_tokens_are_its_final_map():
    """A timm CNN (ConvNeXt) has no patch embedding: the backbone failed to build
    (AttributeError: no attribute 'patch_embed'), and its NCHW map gave no tokens."""
    torch.manual_seed(0)
    backbone = MODELS.build(tiny_cfg(vision='convnext_atto', vision_cfg=dict(
        depths=(1, 1, 1, 1), dims=(8, 8, 16, 16)))).eval()
    assert backbone.image_size == (224, 224)  # timm's record: the size it was trained at
    images = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        feature_map = backbone.vision.forward_features(images)  # [B, C, h, w]
        out = backbone.encode_image_tokens(images)
        expected = backbone.vision_proj(backbone.vision(images))
    assert feature_map.shape == (2, 16, 2, 3) and out.tokens.shape == (2, 6, 16)
    for row in range(2):
        for column in range(3):
            torch.testing.assert_close(out.tokens[:, 3 * row + column], backbone.vision_proj(
                feature_map[:, :, row, column]))
    torch.testing.assert_close(out.pooled, expected)
    torch.testing.assert_close(backbone.encode_image(images), expected)


def _saved_as_a_file(state: dict, folder) -> str:
    torch.save(state, folder / 'vit.pth')
    return str(folder / 'vit.pth')


def _saved_as_a_hub_snapshot(state: dict, folder) -> str:
    """timm's hub repositories hold model.safetensors (and pytorch_model.bin)."""
    save_file(state, str(folder / 'model.safetensors'))
    return str(folder)


@pytest.mark.parametrize('saved', [_saved_as_a_file, _saved_as_a_hub_snapshot])
def test_vision_weights_load_from_a_local_file_or_folder(tmp_path, saved):
    torch.manual_seed(1)
    source = timm.create_model('vit_base_patch16_224', num_classes=0, **TINY_VIT)
    backbone = MODELS.build(tiny_cfg(vision_pretrained=saved(source.state_dict(), tmp_path)))
    for name, tensor in source.state_dict().items():
        assert torch.equal(backbone.vision.state_dict()[name], tensor), name


def test_a_vision_file_loaded_is_not_kept_a_second_time_in_the_models_record(tmp_path):
    """timm's record of the model held the whole state dict it was given: a ViT-B's 330 MB
    twice in memory, and in every copy of the model."""
    source = timm.create_model('vit_base_patch16_224', num_classes=0, **TINY_VIT)
    backbone = MODELS.build(tiny_cfg(vision_pretrained=_saved_as_a_file(source.state_dict(),
                                                                         tmp_path)))
    assert 'state_dict' not in backbone.vision.pretrained_cfg


def test_a_text_folder_without_weights_gets_the_libraries_own_error_not_a_fetch_hint(
        tmp_path):
    """A local folder is no download: its error is the folder's (no weight file), not advice
    to download a hub repository."""
    BertConfig(**TINY_BERT).save_pretrained(tmp_path / 'bert')
    with pytest.raises(OSError) as raised:
        MODELS.build(tiny_cfg(text=str(tmp_path / 'bert'), text_cfg=None))
    assert str(tmp_path / 'bert') in str(raised.value)
    assert 'could not be fetched' not in str(raised.value)


def test_the_weights_timms_record_names_are_told_by_where_they_lie():
    """A hub record is named by its repository, a record without one by its URL, and a file
    overlaid on the record by the file."""
    from xmr.models.backbones.vit_bert import _record_source

    name = 'vit_base_patch16_224.augreg2_in21k_ft_in1k'
    hub = timm.models.get_pretrained_cfg(name).hf_hub_id
    assert hub and _record_source(name, {}) == f'hf-hub:{hub}'
    assert _record_source(name, dict(pretrained_cfg_overlay=dict(file='/w/vit.pth'))) == \
        'file /w/vit.pth'
    assert _record_source(name, dict(pretrained_cfg_overlay=dict(hf_hub_id=None, url='u'))) \
        == 'u'


def test_a_missing_vision_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match='missing.pth does not exist'):
        MODELS.build(tiny_cfg(vision_pretrained=str(tmp_path / 'missing.pth')))


def test_a_vision_file_with_its_classifier_loads_without_it(tmp_path):
    torch.manual_seed(2)
    source = timm.create_model('vit_base_patch16_224', num_classes=10, **TINY_VIT)
    path = tmp_path / 'vit_with_head.pth'
    torch.save(source.state_dict(), path)
    backbone = MODELS.build(tiny_cfg(vision_pretrained=str(path)))
    loaded = backbone.vision.state_dict()
    assert set(loaded) == set(source.state_dict()) - {'head.weight', 'head.bias'}
    assert all(torch.equal(tensor, source.state_dict()[name]) for name, tensor in loaded.items())


def test_a_vision_file_of_another_model_or_broken_is_refused_naming_it(tmp_path):
    """timm loads a file non-strictly once the head differs from its record's (num_classes=0
    here): weights the file lacks would stay random without a word."""
    shallower = tmp_path / 'depth_1.pth'
    torch.save(timm.create_model('vit_base_patch16_224', num_classes=0,
                                 **dict(TINY_VIT, depth=1)).state_dict(), shallower)
    with pytest.raises(ValueError, match=r'depth_1\.pth does not fit timm '
                                         r"'vit_base_patch16_224'.*blocks\.1\.attn\.qkv\.weight"):
        MODELS.build(tiny_cfg(vision_pretrained=str(shallower)))
    clip = tmp_path / 'clip.pth'
    torch.save({'visual.conv1.weight': torch.zeros(32, 3, 8, 8)}, clip)
    with pytest.raises(ValueError, match=r'clip\.pth does not fit timm .*visual\.conv1\.weight'):
        MODELS.build(tiny_cfg(vision_pretrained=str(clip)))
    whole = tmp_path / 'vit.pth'
    torch.save(timm.create_model('vit_base_patch16_224', num_classes=0, **TINY_VIT).state_dict(),
               whole)
    truncated = tmp_path / 'truncated.pth'
    truncated.write_bytes(whole.read_bytes()[:3000])
    with pytest.raises(ValueError, match=r'truncated\.pth \(3000 bytes\) is not a readable timm '
                                         r"'vit_base_patch16_224' checkpoint"):
        MODELS.build(tiny_cfg(vision_pretrained=str(truncated)))
    record = damage_record(whole, '/data/')
    with pytest.raises(ValueError, match=rf'vit\.pth: truncated or corrupt .* \(its record '
                                         rf'{re.escape(record)} is damaged'):
        MODELS.build(tiny_cfg(vision_pretrained=str(whole)))


TINY_SWIN = dict(img_size=32, embed_dim=16, depths=(1, 1), num_heads=(2, 2), window_size=2)


@pytest.mark.parametrize('vision, vision_cfg, dropped', [
    ('vit_base_patch16_224', TINY_VIT, 'blocks.1.attn.qkv.weight'),
    ('swin_base_patch4_window7_224', TINY_SWIN, 'layers.1.blocks.0.mlp.fc2.weight')])
def test_timms_own_weights_load_strictly_into_the_headless_tower(tmp_path, vision, vision_cfg,
                                                                 dropped):
    """``vision_pretrained=True`` loads the file timm's record names (here through
    ``pretrained_cfg_overlay``, as a hub download would be): timm loads a headless model
    non-strictly, so a file that lacks a weight left it random without a word."""
    torch.manual_seed(3)
    source = timm.create_model(vision, **vision_cfg).state_dict()  # the record's head: 1000
    for kind, state in (('whole', source),
                        ('lacking', {k: v for k, v in source.items() if k != dropped}),
                        ('extra', dict(source, **{'extra.weight': torch.zeros(2)}))):
        torch.save(state, tmp_path / f'{kind}.pth')
    def built(kind: str) -> ViTBERTBackbone:
        overlay = dict(file=str(tmp_path / f'{kind}.pth'))
        return MODELS.build(tiny_cfg(vision=vision, vision_pretrained=True,
                                     vision_cfg=dict(vision_cfg, pretrained_cfg_overlay=overlay)))

    loaded = built('whole').vision.state_dict()
    head = {k for k in source if k.startswith('head.')}
    assert head and set(loaded) == set(source) - head  # headless, as num_classes=0 builds it
    assert all(torch.equal(tensor, source[key]) for key, tensor in loaded.items())
    with pytest.raises(ValueError, match=rf"record of '{vision}' names \(file .*lacking\.pth\) "
                                         rf'does not fit .*: 1 missing \({re.escape(dropped)}\)'):
        built('lacking')
    with pytest.raises(ValueError, match=r'extra\.pth\) does not fit .*: 1 unexpected '
                                         r'\(extra\.weight\)'):
        built('extra')


def _microsoft_swin_layout(state: dict) -> dict:
    """A timm Swin state dict as Microsoft released theirs: each stage's downsample at the end
    of the stage before, the classifier as ``head``."""
    def original(key: str) -> str:
        key = re.sub(r'layers\.(\d+)\.downsample',
                     lambda found: f'layers.{int(found.group(1)) - 1}.downsample', key)
        return key.replace('head.fc.', 'head.')
    return {original(key): value for key, value in state.items()}


@pytest.mark.parametrize('wrapped', [True, False])
def test_a_swin_file_in_microsofts_layout_loads_as_timm_loads_it(tmp_path, wrapped):
    """timm's filter renames the original layout; xmr dropped the classifier under timm's name
    only, so Microsoft's 'head.weight' came back as an unexpected 'head.fc.weight', and
    refused the {'model': ...} wrapping of their releases."""
    torch.manual_seed(4)
    source = timm.create_model('swin_base_patch4_window7_224', **TINY_SWIN).eval()
    released = _microsoft_swin_layout(source.state_dict())
    assert 'layers.0.downsample.reduction.weight' in released and 'head.weight' in released
    path = tmp_path / 'swin_ms.pth'
    torch.save({'model': released} if wrapped else released, path)
    backbone = MODELS.build(tiny_cfg(vision='swin_base_patch4_window7_224', vision_cfg=TINY_SWIN,
                                     vision_pretrained=str(path)))
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = source.forward_head(source.forward_features(images), pre_logits=True)
        torch.testing.assert_close(backbone.vision.eval()(images), expected)
    # A key the file lacks is named as timm's filter names it, not as the file does.
    del released['layers.0.blocks.0.mlp.fc1.weight']
    torch.save(released, path)
    with pytest.raises(ValueError, match=r'swin_ms\.pth does not fit .*: 1 missing '
                                         r'\(layers\.0\.blocks\.0\.mlp\.fc1\.weight\)\. Is it'):
        MODELS.build(tiny_cfg(vision='swin_base_patch4_window7_224', vision_cfg=TINY_SWIN,
                              vision_pretrained=str(path)))


def test_fingerprint_follows_settings_that_change_features_but_no_weight():
    """Features cached under one BERT activation or timm pooling were read back under another:
    the fingerprint hashed the vision model's name, the image size and the weights only."""
    def built(**overrides):
        torch.manual_seed(0)
        return MODELS.build(tiny_cfg(**overrides))

    swin = dict(vision='swin_base_patch4_window7_224')
    prints = [built().fingerprint(),
              built(text_cfg=dict(TINY_BERT, hidden_act='relu')).fingerprint(),
              # timm's ViT keeps its pooling in a plain attribute: avg and max share weights.
              built(vision_cfg=dict(TINY_VIT, global_pool='avg')).fingerprint(),
              built(vision_cfg=dict(TINY_VIT, global_pool='max')).fingerprint(),
              built(**swin, vision_cfg=TINY_SWIN).fingerprint(),
              built(**swin, vision_cfg=dict(TINY_SWIN, global_pool='max')).fingerprint()]
    assert len(set(prints)) == 6
    assert built().fingerprint() == prints[0]


def test_bad_configurations_are_named():
    with pytest.raises(ValueError, match="unknown timm model 'vit_bsae_patch16_224'.*"
                                         'vit_base_patch16_224'):
        MODELS.build(tiny_cfg(vision='vit_bsae_patch16_224'))
    with pytest.raises(ValueError, match='needs text .* or text_cfg'):
        MODELS.build(tiny_cfg(text_cfg=None))
    with pytest.raises(ValueError,
                       match='emits 48 ids but the text tower of the BERT has 40 embeddings'):
        MODELS.build(tiny_cfg(text_cfg=dict(TINY_BERT, vocab_size=40)))
    with pytest.raises(ValueError,
                       match='max_length 77 exceeds the text context length 64 of the BERT'):
        MODELS.build(tiny_cfg(text_cfg=dict(TINY_BERT, max_position_embeddings=64)))
    with pytest.raises(ValueError, match='random BERT .* needs an explicit tokenizer'):
        MODELS.build(tiny_cfg(tokenizer=None))


def test_a_bert_folder_that_lacks_weights_of_the_configured_model_is_refused(tmp_path):
    """transformers only prints the weights it initialised at random: a 2-layer folder under a
    3-layer text_cfg would run a random third layer."""
    BertModel(BertConfig(**TINY_BERT), add_pooling_layer=False).save_pretrained(tmp_path / 'bert')
    with pytest.raises(ValueError, match=r"the BERT '.*bert' lacks 16 weights of the configured "
                                         r'BertModel \(encoder\.layer\.2\..*text_cfg'):
        MODELS.build(tiny_cfg(text=str(tmp_path / 'bert'), text_cfg=dict(num_hidden_layers=3)))


@pytest.mark.parametrize('model_cls', [XLMRobertaModel, RobertaModel])
def test_a_roberta_style_folder_runs_as_its_own_model_at_its_own_positions(tmp_path, model_cls):
    """An XLM-R or RoBERTa folder (a multilingual text tower for CDDS) numbers its positions
    from pad_id + 1; loaded as a BertModel it took every weight and ran at BERT's 0..L-1, with
    features far from the model's (3.1 apart here)."""
    torch.manual_seed(6)
    config = {**TINY_BERT, 'pad_token_id': 1}
    reference = model_cls(model_cls.config_class(**config), add_pooling_layer=False).eval()
    reference.save_pretrained(tmp_path / 'encoder')
    backbone = MODELS.build(tiny_cfg(text=str(tmp_path / 'encoder'), text_cfg=None)).eval()
    assert type(backbone.text_tower.embeddings) is type(reference.embeddings)
    tokens = backbone.tokenizer(CAPTIONS)
    with torch.no_grad():
        hidden = reference(input_ids=tokens['input_ids'],
                           attention_mask=tokens['attention_mask'].long()).last_hidden_state
        torch.testing.assert_close(backbone.encode_source_text(tokens),
                                   backbone.text_tower.text_proj(hidden[:, 0]),
                                   rtol=1e-4, atol=1e-5)


def test_a_text_folder_of_another_encoder_is_refused_naming_its_model_type(tmp_path):
    from transformers import DistilBertConfig, DistilBertModel

    DistilBertModel(DistilBertConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2,
                                     hidden_dim=64)).save_pretrained(tmp_path / 'distilbert')
    with pytest.raises(ValueError, match=r"text='.*distilbert': its config.json gives "
                                         r"model_type='distilbert'; the text tower runs "
                                         r'BERT-style encoders \(bert, roberta, xlm-roberta\)'):
        MODELS.build(tiny_cfg(text=str(tmp_path / 'distilbert'), text_cfg=None))


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_a_bert_folder_saved_in_half_precision_runs_in_float32(tmp_path, dtype):
    """transformers 5 loads a folder in the dtype it was saved in: a half-precision BERT beside
    the float32 projection failed at the first caption (mat1 and mat2 dtypes)."""
    torch.manual_seed(5)
    bert = BertModel(BertConfig(**TINY_BERT), add_pooling_layer=False)
    bert.to(dtype).save_pretrained(tmp_path / 'bert')
    backbone = MODELS.build(tiny_cfg(text=str(tmp_path / 'bert'))).eval()
    assert {p.dtype for p in backbone.text_tower.parameters()} == {torch.float32}
    torch.testing.assert_close(backbone.text_tower.embeddings.word_embeddings.weight,
                               bert.embeddings.word_embeddings.weight.float())
    ids = backbone.tokenizer(CAPTIONS)
    assert backbone.encode_source_text(ids).dtype == torch.float32


def test_a_vision_folder_in_transformers_layout_is_refused_naming_its_file(tmp_path):
    """LAPS names its towers by their Hugging Face repositories; their model.safetensors is in
    transformers' layout, on which timm's filter failed with an AttributeError naming no file
    (Swin) or the advice to change the model (ViT)."""
    from transformers import SwinConfig, SwinForImageClassification, ViTConfig, ViTModel

    SwinForImageClassification(SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
        window_size=2, num_labels=3)).save_pretrained(tmp_path / 'swin')
    with pytest.raises(ValueError, match=r"swin/model\.safetensors is in Hugging Face "
                                         r"transformers' layout \(swin\.embeddings\."
                                         r"patch_embeddings\..*timm/ hub repository"):
        MODELS.build(tiny_cfg(vision='swin_base_patch4_window7_224', vision_cfg=TINY_SWIN,
                              vision_pretrained=str(tmp_path / 'swin')))
    ViTModel(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=64)
             ).save_pretrained(tmp_path / 'vit')
    with pytest.raises(ValueError, match=r"vit/model\.safetensors is in Hugging Face "
                                         r"transformers' layout \(embeddings\.patch_embed"):
        MODELS.build(tiny_cfg(vision_pretrained=str(tmp_path / 'vit')))


def test_weights_that_cannot_be_fetched_name_the_model_and_the_local_route(monkeypatch,
                                                                          tmp_path):
    """Offline, timm's and Hugging Face's hub clients raise OSErrors that name no model."""
    def offline(*args, **kwargs):
        raise OSError('An error happened while trying to locate the file on the Hub\nmore')

    monkeypatch.setattr(timm, 'create_model', offline)
    with pytest.raises(FileNotFoundError) as error:
        MODELS.build(tiny_cfg(vision='vit_base_patch16_224.orig_in21k', vision_pretrained=True))
    assert str(error.value) == (
        "timm's weights of 'vit_base_patch16_224.orig_in21k' could not be fetched (An error "
        'happened while trying to locate the file on the Hub); download them once and set '
        'vision_pretrained=<local file> (--cfg-options model.backbone.vision_pretrained=FILE)')
    monkeypatch.undo()
    # A local folder's own errors pass unchanged: nothing was fetched.
    BertModel(BertConfig(**TINY_BERT), add_pooling_layer=False).save_pretrained(tmp_path / 'bert')
    with pytest.raises(RuntimeError, match='ignore_mismatched_sizes'):
        MODELS.build(tiny_cfg(text=str(tmp_path / 'bert'), text_cfg=dict(intermediate_size=128)))
    monkeypatch.setattr(AutoConfig, 'from_pretrained', offline)
    with pytest.raises(FileNotFoundError, match=(
            r"the BERT 'bert-base-uncased' \(a Hugging Face hub name\) could not be "
            r'fetched .*set text=<its folder> \(--cfg-options model.backbone.text=FOLDER\)')):
        MODELS.build(tiny_cfg(text='bert-base-uncased'))


def test_an_uncached_hugging_face_tokenizer_offline_names_the_key_and_the_local_routes(
        offline_hub, shared_data):
    with pytest.raises(TokenizerOutOfReach) as raised:
        MODELS.build(tiny_cfg(tokenizer=dict(type='HFTokenizer',
                                             name_or_path=UNCACHED_TOKENIZER)))
    check_offline_tokenizer_error(raised, 'model.backbone.tokenizer: ')
    # XLM-R's tokenizer.json loads offline, for a BERT of its vocabulary.
    local = dict(type='HFTokenizer',
                 tokenizer_file=str(shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json'))
    built = MODELS.build(tiny_cfg(tokenizer=local,
                                  text_cfg=dict(TINY_BERT, vocab_size=250002)))
    assert built.tokenizer.vocab_size == 250002
