import copy
import json
import re

import pytest
import torch
from safetensors.torch import save_file

from tests.conftest import TINY_CLIP, UNCACHED_TOKENIZER, check_offline_tokenizer_error
from tests.models.adapters.peft_helpers import lora_delta
from tests.models.backbones.mclip_helpers import (
    CAPTIONS,
    TINY_XLMR,
    mclip_reference,
    needs_tokenizer,
    tiny_mclip,
    tiny_mclip_cfg,
    tokenizer_cfg,
)
from xmr.models.adapters import AdapterContext
from xmr.models.backbones import mclip
from xmr.models.backbones.base import TowerShape
from xmr.models.backbones.mclip import XLMR_LARGE, MultilingualCLIPBackbone
from xmr.models.language.tokenizers import TokenizerOutOfReach
from xmr.registry import MODELS

pytestmark = needs_tokenizer


@pytest.fixture(scope='module')
def backbone():
    return tiny_mclip()


def release_state_dict(backbone) -> dict:
    """The tower's weights under the names of M-CLIP's release (with a pooler it never uses, and
    the position-id buffer that transformers saved before 4.31)."""
    tower = backbone.text_tower
    state = {f'transformer.embeddings.{k}': v for k, v in tower.embeddings.state_dict().items()}
    positions = tower.embeddings.position_embeddings.num_embeddings
    state['transformer.embeddings.position_ids'] = torch.arange(positions)[None]
    state.update({f"transformer.encoder.layer.{k}": v
                  for k, v in tower.layers.state_dict().items()})
    state.update({f'LinearTransformation.{k}': v for k, v in tower.text_proj.state_dict().items()})
    state['transformer.pooler.dense.weight'] = torch.zeros(32, 32)
    return {k: v.clone().contiguous() for k, v in state.items()}


def hf_model(backbone):
    from transformers import XLMRobertaModel

    model = XLMRobertaModel(backbone.config, add_pooling_layer=False).eval()
    tower = backbone.text_tower
    model.embeddings.load_state_dict(tower.embeddings.state_dict())
    model.encoder.layer.load_state_dict(tower.layers.state_dict())
    return model


def test_text_tower_equals_mclip_formula_on_a_padded_multilingual_batch(backbone):
    tokens = backbone.tokenizer(CAPTIONS)
    assert tokens['attention_mask'].sum(1).unique().numel() > 1
    expected = mclip_reference(hf_model(backbone), backbone.text_tower.text_proj, tokens)
    torch.testing.assert_close(backbone.encode_source_text(tokens), expected, atol=1e-5,
                               rtol=1e-4)


@pytest.mark.parametrize('packed', [True, False])
def test_a_caption_spelling_pad_is_attended_to_and_its_position_skipped_as_in_mclip(backbone,
                                                                                   packed):
    """M-CLIP's Hugging Face pass takes the tokenizer's mask, which keeps a spelled ``<pad>``
    (id 1), while XLM-R derives positions from the ids and does not count it: the tower
    attends to and pools that token and numbers the tokens after it as Hugging Face does."""
    tokens = backbone.tokenizer(['a dog <pad> on the grass', '<pad> two cats', 'a dog'])
    spelled = tokens['attention_mask'] & (tokens['input_ids'] == 1)
    assert spelled[:2].any(1).all() and not spelled[2].any()
    expected = mclip_reference(hf_model(backbone), backbone.text_tower.text_proj, tokens)
    backbone.text_tower.pack_tokens = packed
    try:
        torch.testing.assert_close(backbone.encode_source_text(tokens), expected, atol=1e-5,
                                   rtol=1e-4)
    finally:
        backbone.text_tower.pack_tokens = 'auto'


@pytest.mark.parametrize('suffix', ['.safetensors', '.bin'])
def test_release_checkpoint_loads_under_its_own_names(backbone, tmp_path, suffix):
    path = tmp_path / f'model{suffix}'
    state = release_state_dict(backbone)
    if suffix == '.safetensors':
        save_file(state, str(path))
    else:
        torch.save(state, path)
    torch.manual_seed(1)
    loaded = MODELS.build(tiny_mclip_cfg(checkpoint=str(path), tokenizer=backbone.tokenizer)
                          ).eval()
    tokens = backbone.tokenizer(CAPTIONS)
    torch.testing.assert_close(loaded.encode_source_text(tokens),
                               backbone.encode_source_text(tokens))


def test_a_foreign_or_incomplete_checkpoint_is_refused(backbone, tmp_path):
    state = release_state_dict(backbone)
    with pytest.raises(ValueError, match=r"unexpected keys \['visual.proj'\]"):
        backbone.load_text_checkpoint({**state, 'visual.proj': torch.zeros(1)})
    del state['LinearTransformation.bias']
    with pytest.raises(ValueError, match=r'<state dict> does not fit the configured XLM-R '
                                         r'encoder: 1 missing \(text_proj.bias\)'):
        backbone.load_text_checkpoint(state)
    with pytest.raises(FileNotFoundError, match="holds none of \\['model.safetensors', "):
        backbone.load_text_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match=(
            'M-CLIP text checkpoint .*absent does not exist: download an M-CLIP release there '
            r'\(the hub repository M-CLIP/XLM-Roberta-Large-Vit-L-14: .* as mclip_dir, for the '
            r'weights and both tokenizers \(elsewhere: --cfg-options '
            'model.backbone.checkpoint=DIR model.backbone.tokenizer.name_or_path=DIR')):
        backbone.load_text_checkpoint(tmp_path / 'absent')


def test_a_release_of_another_size_or_a_broken_file_is_refused(backbone, tmp_path):
    """A release of another XLM-R width (here the intermediate size) is named key by key."""
    state = release_state_dict(backbone)
    wider = {k: torch.zeros(2 * v.shape[0], *v.shape[1:]) if '.intermediate.dense.' in k else v
             for k, v in state.items()}
    with pytest.raises(ValueError, match=r'does not fit the configured XLM-R encoder: 4 with '
                                         r'another shape \(layers.0.intermediate.dense.bias '
                                         r'\(file \[128\], model \[64\]\), '
                                         r'layers.0.intermediate.dense.weight \(file \[128, 32\], '
                                         r'model \[64, 32\]\), .*Set '
                                         r'text_encoder to the XLM-R config'):
        backbone.load_text_checkpoint(wider)
    path = tmp_path / 'pytorch_model.bin'
    torch.save(state, path)
    path.write_bytes(path.read_bytes()[:4096])
    with pytest.raises(ValueError, match='pytorch_model.bin .* is not a readable M-CLIP text '
                                         'checkpoint.*download the file again'):
        backbone.load_text_checkpoint(tmp_path)


def test_image_tower_loads_openai_torchscript_release_with_its_record(tmp_path):
    import open_clip
    from open_clip.transformer import QuickGELU

    from tests.models.backbones.openai_clip_layout import (
        openai_state_dict,
        save_openai_torchscript,
        shapes_of_model_cfg,
    )

    state = openai_state_dict(shapes_of_model_cfg(TINY_CLIP), scale=0.5)
    path = tmp_path / 'ViT-L-14.pt'
    save_openai_torchscript(state, path, input_resolution=32, context_length=32,
                            vocab_size=49408)
    mclip = MODELS.build(tiny_mclip_cfg(image_pretrained=str(path),
                                        image_pretrained_cfg=dict(quick_gelu=True)))
    assert {type(b.mlp.gelu) for b in mclip.visual.transformer.resblocks} == {QuickGELU}
    reference = open_clip.CLIP(**TINY_CLIP, quick_gelu=True)
    reference.load_state_dict({k: v.float() for k, v in state.items()})
    images = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(mclip.encode_image(images), reference.eval().encode_image(images))


def test_roberta_positions_and_context_length(backbone):
    tower = backbone.text_tower
    assert tower.context_length == 40 - 1 - 1
    x = torch.zeros(1, 3, 32)
    expected = tower.embeddings.LayerNorm(
        tower.embeddings.position_embeddings.weight[2:5]
        + tower.embeddings.token_type_embeddings.weight[0])
    torch.testing.assert_close(tower.add_positions(x)[0], expected)
    with pytest.raises(ValueError, match='sequence of 39 tokens exceeds'):
        tower.add_positions(torch.zeros(1, 39, 32))


def test_image_tower_is_open_clips_and_dimensions_must_agree(backbone):
    import open_clip

    images = torch.randn(2, 3, 32, 32)
    clip = open_clip.CLIP(**TINY_CLIP)
    clip.visual.load_state_dict(backbone.visual.state_dict())
    torch.testing.assert_close(backbone.encode_image(images), clip.encode_image(images))
    with pytest.raises(ValueError, match='gives 16-d embeddings but the image tower custom '
                                         'gives 32-d'):
        MODELS.build(tiny_mclip_cfg(embed_dim=16))
    too_long = copy.copy(backbone.tokenizer)
    too_long.max_length = 100
    with pytest.raises(ValueError,
                       match='max_length 100 exceeds the text context length 38 of M-CLIP XLM-R'):
        MODELS.build(tiny_mclip_cfg(tokenizer=too_long))


def test_a_tokenizer_of_another_kind_than_xlm_rs_is_refused():
    """CLIP's BPE (the image tower's own tokenizer) fits XLM-R's table and context, and its ids
    would be read as XLM-R's pieces."""
    clip_bpe = dict(type='OpenCLIPTokenizer', model_name='ViT-B-32', max_length=38)
    with pytest.raises(ValueError, match='tokenizer.type: the config builds a OpenCLIPTokenizer, '
                                         'but the text tower of M-CLIP XLM-R was trained with '
                                         "the Hugging Face tokenizer 'xlm-roberta-large'; use "
                                         "'HFTokenizer'"):
        MODELS.build(tiny_mclip_cfg(tokenizer=clip_bpe))


def _lora_branch_and_merged_encoder(backbone):
    """A branch on M-CLIP's own table with LoRA on q and v (``B`` drawn, not zero), and
    Hugging Face's XLM-R with the same deltas merged into its weights."""
    branch = MODELS.build(
        dict(type='TargetLanguageBranch', languages=['de'], tokenizer=tokenizer_cfg(),
             embedding=dict(type='TowerTokenEmbedding'),
             adapters=dict(type='LoRA', r=1, alpha=16, targets=['q', 'v'])),
        default_args=dict(tower=backbone.text_tower))
    torch.manual_seed(2)
    with torch.no_grad():
        for name, parameter in branch.named_parameters():
            if 'lora_B' in name:
                parameter.normal_(std=0.05)
    merged = hf_model(backbone)
    with torch.no_grad():
        for index, layer in enumerate(merged.encoder.layer):
            lora = branch.adapters.sets['de'][f'{index}:attn_qkv']
            layer.attention.self.query.weight += lora_delta(lora, 'q')
            layer.attention.self.value.weight += lora_delta(lora, 'v')
    return branch, merged


def test_lora_on_query_and_value_equals_merged_hugging_face_weights(backbone):
    """The sites reach XLM-R's separate q/k/v projections: LoRA matches merged weights."""
    branch, merged = _lora_branch_and_merged_encoder(backbone)
    tokens = branch.tokenize(CAPTIONS)
    expected = mclip_reference(merged, backbone.text_tower.text_proj, tokens)
    adapted = branch(tokens, ['de'] * len(CAPTIONS))
    torch.testing.assert_close(adapted, expected, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(adapted, backbone.encode_source_text(tokens), atol=1e-4)


@pytest.mark.parametrize('packed', [True, False])
def test_the_branch_numbers_positions_after_a_spelled_pad_as_mclip(backbone, packed):
    """On M-CLIP's own ids the branch numbers positions as the source path does, from the ids
    (a spelled ``<pad>`` attended to and not counted): LoRA equals Hugging Face's merged
    encoder on such captions too, padded or packed (before: numbered by index)."""
    branch, merged = _lora_branch_and_merged_encoder(backbone)
    tokens = branch.tokenize(['a dog <pad> on the grass', '<pad> two cats', 'a dog'])
    spelled = tokens['attention_mask'] & (tokens['input_ids'] == 1)
    assert spelled.any(1).tolist() == [True, True, False]
    expected = mclip_reference(merged, backbone.text_tower.text_proj, tokens)
    backbone.text_tower.pack_tokens = packed
    try:
        torch.testing.assert_close(branch(tokens, ['de'] * 3), expected, atol=1e-5, rtol=1e-4)
    finally:
        backbone.text_tower.pack_tokens = 'auto'


def test_houlsby_sits_before_each_post_ln_sublayer_norm(backbone):
    branch = MODELS.build(
        dict(type='TargetLanguageBranch', languages=['de'], tokenizer=tokenizer_cfg(),
             embedding=dict(type='TowerTokenEmbedding'),
             adapters=dict(type='HoulsbyAdapter', hidden=4)),
        default_args=dict(tower=backbone.text_tower))
    tower = backbone.text_tower
    tokens = branch.tokenize(CAPTIONS[:1])
    x = tower.add_positions(tower.embed_tokens(tokens['input_ids']))
    hooks = branch.adapters.hooks(AdapterContext(lang='de'))
    layer = tower.layers[0]
    attention = layer.attention
    adapted = copy.deepcopy(layer)
    adapter_attn = branch.adapters.sets['de']['0:attn_output']
    adapter_ffn = branch.adapters.sets['de']['0:mlp_output']

    # Hugging Face's layer with the adapters spliced in after each output projection.
    adapted.attention.output.dense = torch.nn.Sequential(
        attention.output.dense, _Apply(adapter_attn))
    adapted.output.dense = torch.nn.Sequential(layer.output.dense, _Apply(adapter_ffn))
    adapted.eval()
    expected = adapted(x)[0] if isinstance(adapted(x), tuple) else adapted(x)
    mask = tower.build_mask(tokens['attention_mask'])
    torch.testing.assert_close(tower.run_block(0, x, mask, hooks), expected, atol=1e-5,
                               rtol=1e-4)


class _Apply(torch.nn.Module):
    def __init__(self, adapter):
        super().__init__()
        self.adapter = adapter

    def forward(self, x):
        return self.adapter(x, AdapterContext(lang='de'))


def test_frozen_hard_prompt_with_mean_pooling_equals_the_prefixed_caption(backbone):
    branch = MODELS.build(
        dict(type='TargetLanguageBranch', languages=['de'], tokenizer=tokenizer_cfg(),
             embedding=dict(type='TowerTokenEmbedding'),
             adapters=dict(type='HardPrompt', text='a photo of')),
        default_args=dict(tower=backbone.text_tower))
    captions = ['a dog runs', 'two cats sleep on a red sofa']
    prefixed = [f'a photo of {c}' for c in captions]
    tokenizer = branch.tokenizer
    prefix = tokenizer.encode('a photo of')[1:-1]
    assert [tokenizer.encode(t) for t in prefixed] == [
        tokenizer.encode(c)[:1] + prefix + tokenizer.encode(c)[1:] for c in captions]
    torch.testing.assert_close(branch(branch.tokenize(captions), ['de', 'de']),
                               backbone.encode_source_text(tokenizer(prefixed)), atol=1e-5,
                               rtol=1e-4)


def test_fingerprint_follows_a_norms_eps_that_changes_features_but_no_weight(backbone):
    """r^S cached under one layer_norm_eps was read back under another: the fingerprint hashed
    the image record and the weights only."""
    other = tiny_mclip(text_encoder=dict(TINY_XLMR, layer_norm_eps=0.1))
    assert all(torch.equal(backbone.state_dict()[k], v) for k, v in other.state_dict().items())
    assert other.fingerprint() != backbone.fingerprint()
    assert tiny_mclip().fingerprint() == backbone.fingerprint()


def test_image_tower_needs_exactly_one_description():
    with pytest.raises(ValueError, match='needs exactly one of arch or model_cfg'):
        MODELS.build(tiny_mclip_cfg(image_arch='ViT-B-32'))


def test_the_image_towers_record_and_offline_errors_name_its_own_keys(tmp_path, monkeypatch):
    """M-CLIP's keys are image_pretrained / image_pretrained_cfg: an OpenCLIPBackbone's would be
    refused as unknown arguments."""
    import open_clip

    openai_file = tmp_path / 'ViT-L-14.pt'
    torch.save({}, openai_file)
    vit_l14 = dict(image_arch='ViT-L-14', image_model_cfg=None, embed_dim=768)
    with pytest.raises(ValueError, match=r"image_pretrained='.*ViT-L-14\.pt' is a local file, "
                                         r'.*: set image_pretrained_cfg to the ViT-L-14 tag'):
        MODELS.build(tiny_mclip_cfg(**vit_l14, image_pretrained=str(openai_file)))

    def offline(cfg, **kwargs):
        raise OSError('offline')

    monkeypatch.setattr(open_clip.pretrained, 'download_pretrained', offline)
    with pytest.raises(FileNotFoundError, match=(
            r"set image_pretrained=<local file> with image_pretrained_cfg='openai' "
            r'\(--cfg-options model\.backbone\.image_pretrained=FILE '
            r'model\.backbone\.image_pretrained_cfg=openai;')):
        MODELS.build(tiny_mclip_cfg(**vit_l14, image_pretrained='openai'))


def test_a_text_encoder_config_json_python_cannot_read_is_named_with_the_fault(tmp_path):
    """A bare JSONDecodeError named no file (a RecursionError for arrays nested too deep)."""
    config = tmp_path / 'config.json'
    config.write_text('{"hidden_size": 32,\n "layers": ' + '[' * 100_000 + ']' * 100_000 + '}',
                      encoding='utf-8')
    with pytest.raises(ValueError, match=re.escape(
            f'{config}: not a JSON file Python reads: a value nesting arrays and objects 100001 '
            'levels deep')):
        MultilingualCLIPBackbone.text_tower_shape(dict(text_encoder=str(config)))


def _release_config(folder, **fields) -> str:
    """A release's ``config.json`` as M-CLIP's ``MCLIPConfig`` saves it (``model_type='M-CLIP'``;
    the encoder is ``modelBase``'s, ``transformerDimensions`` wide)."""
    folder.mkdir(exist_ok=True)
    config = {'_name_or_path': 'M-CLIP/XLM-Roberta-Large-Vit-L-14',
              'architectures': ['MultilingualCLIP'], 'model_type': 'M-CLIP',
              'modelBase': 'xlm-roberta-large', 'transformerDimensions': 1024, 'numDims': 768,
              **fields}
    (folder / 'config.json').write_text(json.dumps(config))
    return str(folder)


def test_a_release_folder_as_text_encoder_is_its_model_bases_xlmr(tmp_path):
    """Its config.json is M-CLIP's own: read as an XLM-R config it gave transformers' defaults
    (768 wide, 12 layers, 30,522 ids) where the release is xlm-roberta-large's 1024 x 24."""
    from transformers import XLMRobertaConfig

    release = _release_config(tmp_path / 'release')
    for given in (release, f'{release}/config.json'):
        assert MultilingualCLIPBackbone.text_tower_shape(dict(text_encoder=given)) == (
            TowerShape(1024, 24, 768))
    base = tmp_path / 'base'
    XLMRobertaConfig(**TINY_XLMR).save_pretrained(base)
    tiny = _release_config(tmp_path / 'tiny', modelBase=str(base), transformerDimensions=32)
    built = tiny_mclip(text_encoder=tiny)
    reference = tiny_mclip()
    assert built.config.to_diff_dict() == reference.config.to_diff_dict()
    torch.testing.assert_close(built.encode_source_text(built.tokenizer(CAPTIONS)),
                               reference.encode_source_text(reference.tokenizer(CAPTIONS)))


@pytest.mark.parametrize('fields, message', [
    (dict(transformerDimensions=768), "the M-CLIP config gives transformerDimensions=768, but "
     "its modelBase 'xlm-roberta-large' is 1024 wide"),
    (dict(model_type='bert', hidden_size=768), "model_type='bert'; M-CLIP's text tower runs "
     'XLM-R encoders'),
])
def test_a_text_encoder_config_of_another_encoder_is_refused_naming_it(fields, message,
                                                                       tmp_path):
    with pytest.raises(ValueError, match=re.escape(message)):
        MultilingualCLIPBackbone.text_tower_shape(dict(
            text_encoder=_release_config(tmp_path / 'release', **fields)))


@needs_tokenizer
def test_an_uncached_hugging_face_tokenizer_offline_names_the_key_and_the_local_routes(
        offline_hub):
    uncached = dict(type='HFTokenizer', name_or_path=UNCACHED_TOKENIZER)
    with pytest.raises(TokenizerOutOfReach) as raised:
        MODELS.build(tiny_mclip_cfg(tokenizer=uncached))
    check_offline_tokenizer_error(raised, 'model.backbone.tokenizer: ')
    # XLM-R's tokenizer.json (tiny_mclip_cfg's) loads offline.
    assert MODELS.build(tiny_mclip_cfg()).tokenizer.vocab_size == TINY_XLMR['vocab_size']


def test_xlmr_large_is_the_published_xlm_roberta_large_config():
    """M-CLIP's ``modelBase``, as the hub's ``xlm-roberta-large/config.json`` gives it (written
    out here): a norm's eps, the activation or the pad id (where RoBERTa's positions start)
    other than these would run the release otherwise than it was trained."""
    published = {'attention_probs_dropout_prob': 0.1, 'bos_token_id': 0, 'eos_token_id': 2,
                 'hidden_act': 'gelu', 'hidden_dropout_prob': 0.1, 'hidden_size': 1024,
                 'initializer_range': 0.02, 'intermediate_size': 4096, 'layer_norm_eps': 1e-05,
                 'max_position_embeddings': 514, 'model_type': 'xlm-roberta',
                 'num_attention_heads': 16, 'num_hidden_layers': 24, 'pad_token_id': 1,
                 'position_embedding_type': 'absolute', 'type_vocab_size': 1,
                 'vocab_size': 250002}
    assert {key: published[key] for key in XLMR_LARGE} == XLMR_LARGE


def test_a_checkpoint_file_with_a_foreign_key_is_refused_naming_the_file(backbone, tmp_path):
    path = tmp_path / 'model.safetensors'
    save_file({**release_state_dict(backbone), 'visual.proj': torch.zeros(1)}, str(path))
    with pytest.raises(ValueError, match=re.escape(
            f"{path} is not an M-CLIP text checkpoint: unexpected keys ['visual.proj']")):
        backbone.load_text_checkpoint(tmp_path)


def test_the_backbone_is_frozen_unless_freeze_is_false():
    assert not any(p.requires_grad for p in MODELS.build(tiny_mclip_cfg()).parameters())
    assert all(p.requires_grad for p in MODELS.build(tiny_mclip_cfg(freeze=False)).parameters())


def test_the_default_tokenizer_is_xlm_r_larges_reading_the_towers_context(monkeypatch):
    """Without a ``tokenizer``, the hub's ``xlm-roberta-large`` reads as many tokens as the
    tower has positions for (here 40 - 2); the build goes to the tokenizer file instead."""
    built = []
    original = mclip.build_tokenizer

    def build(cfg, key):
        built.append((dict(cfg), key))
        return original(tokenizer_cfg(cfg['max_length']), key)

    monkeypatch.setattr(mclip, 'build_tokenizer', build)
    MODELS.build(tiny_mclip_cfg(tokenizer=None))
    assert built == [(dict(type='HFTokenizer', name_or_path='xlm-roberta-large', clean=None,
                           lowercase=False, strip_sep_token=False, max_length=38),
                      'model.backbone.tokenizer')]


def test_a_text_encoder_config_json_without_model_type_is_read_as_xlm_r(tmp_path):
    config = tmp_path / 'config.json'
    config.write_text(json.dumps(TINY_XLMR))
    assert MultilingualCLIPBackbone.text_tower_shape(dict(text_encoder=str(config))) == (
        TowerShape(32, 2, 768))


def test_without_text_encoder_or_model_base_the_encoder_is_xlm_roberta_large(tmp_path):
    """M-CLIP's ``MCLIPConfig`` defaults ``modelBase`` to ``xlm-roberta-large``."""
    assert MultilingualCLIPBackbone.text_tower_shape({}) == TowerShape(1024, 24, 768)
    release = _release_config(tmp_path / 'release')
    config = tmp_path / 'release' / 'config.json'
    fields = json.loads(config.read_text())
    del fields['modelBase']
    config.write_text(json.dumps(fields))
    assert MultilingualCLIPBackbone.text_tower_shape(dict(text_encoder=release)) == (
        TowerShape(1024, 24, 768))


def test_the_tower_shape_of_a_release_on_another_base_never_asks_the_hub(tmp_path, monkeypatch):
    """Its ``modelBase``'s config is read from the Hugging Face cache only: ``None`` where the
    cache holds none (the build fetches it)."""
    from transformers import PretrainedConfig

    asked = []

    def get_config_dict(name, **kwargs):
        asked.append((name, kwargs.get('local_files_only')))
        raise OSError(f'{name} is not in the cache')

    monkeypatch.setattr(PretrainedConfig, 'get_config_dict', get_config_dict)
    release = _release_config(tmp_path / 'release', modelBase='FacebookAI/xlm-roberta-base',
                              transformerDimensions=768)
    assert MultilingualCLIPBackbone.text_tower_shape(
        dict(text_encoder=f'{release}/config.json')) is None
    assert asked == [('FacebookAI/xlm-roberta-base', True)]


def test_the_fingerprint_follows_the_image_towers_normalisation(backbone):
    """The image mean is a plain attribute (no module shows it): features cached under one
    were read back under another."""
    other = tiny_mclip(image_pretrained_cfg=dict(mean=(0.5, 0.5, 0.5)))
    assert all(torch.equal(backbone.state_dict()[k], v) for k, v in other.state_dict().items())
    assert other.fingerprint() != backbone.fingerprint()


def test_image_tokens_of_a_resnet_image_tower_are_refused_naming_its_arch():
    resnet = tiny_mclip(image_model_cfg=dict(TINY_CLIP, vision_cfg=dict(
        image_size=64, layers=[1, 1, 1, 1], width=8, head_width=8)))
    with pytest.raises(TypeError, match='token-level image encoding needs an open_clip '
                                        'VisionTransformer without attentional pooling; custom '
                                        'has ModifiedResNet'):
        resnet.encode_image_tokens(torch.randn(1, 3, 64, 64))


@pytest.mark.parametrize('tokenizer, message', [
    (dict(type='CCLMTokenizer', tokenizer_file=tokenizer_cfg()['tokenizer_file'], max_length=30),
     'tokenizer.type: the config builds a CCLMTokenizer, but the text tower of M-CLIP XLM-R'),
    (dict(tokenizer_cfg(), clean='canonicalize'),
     "tokenizer.clean: the config sets 'canonicalize', M-CLIP reads the raw caption with None"),
    (dict(tokenizer_cfg(), lowercase=True),
     'tokenizer.lowercase: the config sets True, M-CLIP reads the raw caption with False'),
])
def test_a_tokenizer_reading_captions_otherwise_than_mclip_is_refused(tokenizer, message):
    """M-CLIP reads the raw caption: CCLM's tokenizer (a subclass of HFTokenizer) and cleaning
    or lower-casing give 'A Dog, running!' other ids than the tower was trained on."""
    with pytest.raises(ValueError, match=re.escape(message)):
        MODELS.build(tiny_mclip_cfg(tokenizer=tokenizer))


def test_a_tokenizer_config_without_max_length_reads_the_towers_whole_context():
    """M-CLIP's tokenizer call does not truncate: a config naming its own tokenizer file and no
    max_length was cut at HFTokenizer's default 77 (a 116-token caption lost 39 tokens)."""
    given = tokenizer_cfg()
    del given['max_length']
    backbone = MODELS.build(tiny_mclip_cfg(tokenizer=given))
    assert backbone.tokenizer.max_length == backbone.text_tower.context_length
    assert backbone.text_tower.context_length != 77
