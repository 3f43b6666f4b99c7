"""open_clip models follow their weights' record; OpenAI's released files load in both formats."""
from __future__ import annotations

import math
import re

import open_clip
import pytest
import torch
from open_clip.transformer import QuickGELU

from tests.conftest import TINY_CLIP, tiny_backbone_cfg, tiny_branch_cfg
from tests.models.backbones.open_clip_families import (
    XLMR_TOKENIZER,
    backbone_cfg,
    coca_cfg,
    xlmr_tokenizer,
)
from tests.models.backbones.openai_clip_layout import (
    openai_state_dict,
    openai_vit_clip_shapes,
    save_openai_torchscript,
    shapes_of_model_cfg,
)
from xmr.models.backbones.open_clip_pretrained import (
    build_open_clip,
    check_model_cfg,
    check_record_tokenizer,
    pretrained_record,
    record_for,
    record_tokenizer_cfg,
    resolve_pretrained,
)
from xmr.models.language.tokenizers import OpenCLIPTokenizer
from xmr.registry import MODELS, TOKENIZERS
from xmr.utils.cli import UserError

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
TEXTS = ['a dog on a red sofa', 'two cats']


needs_xlmr_tokenizer = pytest.mark.skipif(not XLMR_TOKENIZER.is_file(),
                                          reason=f'no XLM-R tokenizer at {XLMR_TOKENIZER}')


def _activations(clip: torch.nn.Module) -> set[type]:
    towers = [*clip.transformer.resblocks, *clip.visual.transformer.resblocks]
    return {type(block.mlp.gelu) for block in towers}


def test_openai_tag_builds_quick_gelu_with_openai_preprocessing(monkeypatch):
    def offline(cfg, **kwargs):
        raise OSError('offline')

    monkeypatch.setattr(open_clip.pretrained, 'download_pretrained', offline)
    with torch.device('meta'):
        backbone = MODELS.build(dict(type='OpenCLIPBackbone', arch='ViT-B-32',
                                     pretrained_cfg='openai'))
        plain = MODELS.build(dict(type='OpenCLIPBackbone', arch='ViT-B-32'))
    assert _activations(backbone.clip) == {QuickGELU}
    assert _activations(plain.clip) == {torch.nn.GELU}  # ViT-B-32's own config: GELU
    assert backbone.image_mean == OPENAI_MEAN and backbone.image_std == OPENAI_STD
    assert backbone.image_size == (224, 224)
    assert backbone.clip.visual.preprocess_cfg['interpolation'] == 'bicubic'
    assert backbone.clip.visual.preprocess_cfg['resize_mode'] == 'shortest'
    assert backbone.tokenizer.max_length == 77


#: A released checkpoint of each kind of open_clip model built from a name: OpenAI's (QuickGELU
#: from its tag), a ResNet, SigLIP 2 (timm ViT, tanh GELU), MobileCLIP, CoCa, CLIPA, MetaCLIP 2
#: worldwide, EVA and ViTamin (timm towers).
FACTORY_CHECKPOINTS = [
    ('ViT-B-32', 'openai'), ('RN50', 'openai'), ('ViT-B-16-SigLIP2-256', 'webli'),
    ('MobileCLIP-S1', 'datacompdr'), ('coca_ViT-B-32', 'laion2b_s13b_b90k'),
    ('ViT-L-14-CLIPA', 'datacomp1b'), ('ViT-H-14-worldwide', 'metaclip2_worldwide'),
    ('EVA02-B-16', 'merged2b_s8b_b131k'), ('ViTamin-S', 'datacomp1b')]


def _layout(model: torch.nn.Module) -> list[tuple]:
    """Every module's name, class, GELU approximation and norm epsilon, then every weight's
    name, shape and type."""
    return ([(name, type(module).__name__, getattr(module, 'approximate', None),
              getattr(module, 'eps', None)) for name, module in model.named_modules()]
            + [(name, tuple(value.shape), value.dtype)
               for name, value in model.state_dict().items()])


@pytest.mark.parametrize(('arch', 'tag'), FACTORY_CHECKPOINTS)
def test_the_model_is_the_one_open_clips_factory_builds_with_its_tags_activation(arch, tag):
    """xmr builds the model class itself (on any device, with the record's preprocessing);
    open_clip's ``create_model``, given the activation the tag records, builds the same modules,
    norms and weights."""
    trained_quick_gelu = open_clip.get_pretrained_cfg(arch, tag).get('quick_gelu', False)
    with torch.device('meta'):
        built, _ = build_open_clip(arch, None, tag)
        reference = open_clip.create_model(arch, pretrained=None, device='meta',
                                           force_quick_gelu=trained_quick_gelu)
    assert type(built) is type(reference)
    assert _layout(built) == _layout(reference)


def test_the_record_is_part_of_the_feature_cache_key():
    torch.manual_seed(0)
    gelu = MODELS.build(tiny_backbone_cfg())
    torch.manual_seed(0)
    quick = MODELS.build(tiny_backbone_cfg(pretrained_cfg=dict(quick_gelu=True)))
    assert all(torch.equal(a, b) for a, b in zip(gelu.state_dict().values(),
                                                quick.state_dict().values()))
    assert gelu.fingerprint() != quick.fingerprint()  # features of GELU are not reused


@pytest.mark.parametrize('tower', ['text_cfg', 'vision_cfg'])
def test_an_inline_architectures_poolings_are_part_of_the_feature_cache_key(tower):
    """A pooling holds no weight: the same weights pooled otherwise give other features, so
    features cached under one pooling are not read back under the other."""
    other = {**TINY_CLIP, tower: {**TINY_CLIP[tower],
                                  'pool_type': 'first' if tower == 'text_cfg' else 'avg'}}
    torch.manual_seed(0)
    default = MODELS.build(tiny_backbone_cfg()).eval()
    torch.manual_seed(0)
    pooled = MODELS.build({**tiny_backbone_cfg(), 'model_cfg': other}).eval()
    assert all(torch.equal(a, b) for a, b in zip(default.state_dict().values(),
                                                pooled.state_dict().values()))
    with torch.no_grad():
        if tower == 'text_cfg':
            tokens = default.tokenizer(['a red circle', 'two blue squares'], ['en', 'en'])
            first, second = default.encode_source_text(tokens), pooled.encode_source_text(tokens)
        else:
            images = torch.randn(2, 3, 32, 32)
            first, second = default.encode_image(images), pooled.encode_image(images)
    assert not torch.allclose(first, second)
    assert default.fingerprint() != pooled.fingerprint()
    torch.manual_seed(0)
    assert MODELS.build(tiny_backbone_cfg()).fingerprint() == default.fingerprint()


def test_a_tags_settings_are_taken_from_its_record():
    siglip = pretrained_record('ViT-B-16-SigLIP', 'webli')
    assert (siglip.mean, siglip.std, siglip.resize_mode) == ((0.5,) * 3, (0.5,) * 3, 'squash')
    assert siglip.context_length == 64 and not siglip.quick_gelu
    assert pretrained_record('ViT-L-14-336', 'openai').image_size == (336, 336)
    assert pretrained_record('ViT-B-32', 'laion2b_s34b_b79k').quick_gelu is False
    # A tag recording no activation keeps its architecture's, as open_clip builds it:
    # roberta-ViT-B-32's config says QuickGELU, its one tag says nothing.
    from open_clip.pretrained import get_pretrained_cfg

    assert 'quick_gelu' not in get_pretrained_cfg('roberta-ViT-B-32', 'laion2b_s12b_b32k')
    assert pretrained_record('roberta-ViT-B-32', 'laion2b_s12b_b32k').quick_gelu is True


@needs_xlmr_tokenizer
def test_a_hugging_face_tower_saved_before_transformers_4_31_loads_without_its_position_ids(
        tmp_path):
    """The XLM-R and RoBERTa CLIPs' releases hold text.transformer.embeddings.position_ids,
    a buffer transformers no longer saves; open_clip's load_checkpoint drops it, so does xmr."""
    from tests.models.backbones.open_clip_families import backbone_cfg, xlmr_cfg, xlmr_tokenizer

    cfg = xlmr_cfg(tmp_path / 'xlmr')
    reference = MODELS.build(backbone_cfg(cfg, xlmr_tokenizer()))
    state = reference.clip.state_dict()
    assert 'text.transformer.embeddings.position_ids' not in state
    state['text.transformer.embeddings.position_ids'] = torch.arange(40)[None]
    torch.save(state, tmp_path / 'open_clip_pytorch_model.bin')
    loaded = MODELS.build(dict(backbone_cfg(cfg, xlmr_tokenizer()),
                               pretrained=str(tmp_path / 'open_clip_pytorch_model.bin')))
    for name, value in reference.clip.state_dict().items():
        assert torch.equal(loaded.clip.state_dict()[name], value), name


def test_contradictions_with_the_record_are_refused():
    with pytest.raises(ValueError, match=r"quick_gelu: architecture ViT-B-32-quickgelu fixes "
                                         r"True, pretrained_cfg dict of the weights records "
                                         r"False; use the architecture without the '-quickgelu'"):
        pretrained_record('ViT-B-32-quickgelu', dict(quick_gelu=False))
    with pytest.raises(ValueError, match="quick_gelu: architecture custom fixes False, "
                                         "pretrained_cfg dict of the weights records True"):
        pretrained_record(None, dict(quick_gelu=True), model_cfg={**TINY_CLIP, 'quick_gelu': False})
    with pytest.raises(ValueError, match="pretrained tag 'openai' needs an open_clip arch name"):
        pretrained_record(None, 'openai', model_cfg=TINY_CLIP)
    with pytest.raises(ValueError, match=r"pretrained_cfg keys \['gelu'\] are not settings"):
        pretrained_record('ViT-B-32', dict(gelu=True))
    record = pretrained_record('ViT-B-32', 'openai')
    with pytest.raises(ValueError, match="tokenizer.max_length: the config sets 64, open_clip "
                                         "tag 'openai' of ViT-B-32 records 77"):
        check_record_tokenizer(record, TOKENIZERS.build(record_tokenizer_cfg(
            record, dict(type='OpenCLIPTokenizer', max_length=64))))
    with pytest.raises(ValueError, match="tokenizer.model_name: the config sets 'ViT-B-16'"):
        check_record_tokenizer(record, TOKENIZERS.build(record_tokenizer_cfg(
            record, dict(type='OpenCLIPTokenizer', model_name='ViT-B-16'))))
    with pytest.raises(ValueError, match="tokenizer.type: the config builds a "
                                         "SentencePieceTokenizer"):
        MODELS.build(tiny_backbone_cfg(tokenizer=tiny_branch_cfg()['tokenizer']))
    assert record_tokenizer_cfg(record, dict(type='OpenCLIPTokenizer', pad_to=77)) == dict(
        type='OpenCLIPTokenizer', pad_to=77, model_name='ViT-B-32', max_length=77)


def test_a_local_file_must_name_its_record_and_a_tag_keeps_its_own(tmp_path):
    path = tmp_path / 'ViT-B-32.pt'
    path.write_bytes(b'')
    with pytest.raises(ValueError, match=r"is a local file, which records no training settings: "
                                         r"set pretrained_cfg to the ViT-B-32 tag .*'openai' for "
                                         r"OpenAI's released ViT-B-32.pt"):
        MODELS.build(dict(type='OpenCLIPBackbone', arch='ViT-B-32', pretrained=str(path)))
    with pytest.raises(ValueError, match="pretrained_cfg='laion2b_s34b_b79k' contradicts the tag"):
        MODELS.build(dict(type='OpenCLIPBackbone', arch='ViT-B-32', pretrained='openai',
                          pretrained_cfg='laion2b_s34b_b79k'))


def test_an_empty_pretrained_is_refused_not_taken_for_random_weights():
    """``--cfg-options model.backbone.pretrained=$FILE`` with FILE unset gives ''."""
    with pytest.raises(ValueError, match=r"pretrained='' names no weights: .*None for random"):
        MODELS.build(tiny_backbone_cfg(pretrained=''))
    with pytest.raises(ValueError, match=r"image_pretrained='' names no weights"):
        record_for('ViT-L-14', '', key_prefix='image_')


def test_a_built_tokenizer_that_contradicts_the_record_is_refused():
    record = pretrained_record('ViT-B-32', 'openai')
    check_record_tokenizer(record, OpenCLIPTokenizer('ViT-B-32', max_length=77))
    with pytest.raises(ValueError, match="tokenizer.max_length: the config sets 64, open_clip "
                                         "tag 'openai' of ViT-B-32 records 77"):
        check_record_tokenizer(record, OpenCLIPTokenizer('ViT-B-32', max_length=64))
    with pytest.raises(ValueError, match="tokenizer.model_name: the config sets 'RN50', open_clip "
                                         "tag 'openai' of ViT-B-32 records 'ViT-B-32'"):
        check_record_tokenizer(record, OpenCLIPTokenizer('RN50', max_length=77))


@pytest.mark.parametrize('tokenizer', [
    dict(type='OpenCLIPTokenizer', model_name='ViT-B-32', max_length=64),
    dict(type='SentencePieceTokenizer', corpus=['ein roter Kreis', 'a red circle'] * 20,
         vocab_size=40, max_length=64)])
def test_a_tokenizer_of_another_kind_than_the_towers_hugging_face_one_is_refused(tokenizer):
    """A SigLIP tower would read CLIP's BPE ids (or a SentencePiece model's own) as pieces of
    its own vocabulary: both fit its table and its 64-token context, so nothing else stops
    them, as open_clip's own tokenizer class is required of a tower trained on CLIP's BPE."""
    from tests.models.backbones.open_clip_families import backbone_cfg, siglip_cfg

    kind = tokenizer['type']
    with pytest.raises(ValueError, match=f'tokenizer.type: the config builds a {kind}, but the '
                                         'text tower of custom was trained with the Hugging '
                                         "Face tokenizer 'timm/ViT-B-16-SigLIP'; use "
                                         "'HFTokenizer'"):
        MODELS.build(backbone_cfg(siglip_cfg(), tokenizer))


def test_a_path_is_a_local_file_even_without_a_checkpoint_suffix():
    """``work_dirs/clip`` names a file (it has a folder), not a tag: it takes the record it
    declares and, absent, is reported missing rather than as an unknown tag."""
    assert record_for('ViT-B-32', 'work_dirs/clip', 'openai') == record_for('ViT-B-32', 'openai')
    with pytest.raises(UserError, match=r'^work_dirs/clip \(pretrained\): no such file: give a '
                       'local open_clip checkpoint file'):
        resolve_pretrained('ViT-B-32', 'work_dirs/clip', 'openai')


def test_a_missing_pretrained_file_is_refused_as_the_config_loads(tmp_path):
    """It was met as the backbone built, after the runner had written its work dir and log
    (``pretrained checkpoint X does not exist``). A hub snapshot folder is a pretrained value."""
    from xmr.registry import check_part_options

    def backbone(pretrained):
        return dict(type='OpenCLIPBackbone', arch='ViT-B-32', pretrained=str(pretrained),
                    pretrained_cfg='openai')

    given = tmp_path / 'none.pt'
    with pytest.raises(UserError, match=f'^{given} \\(pretrained\\): no such file: give a '
                       'local open_clip checkpoint file or hub snapshot folder'):
        check_part_options(MODELS, backbone(given), 'model.backbone')
    check_part_options(MODELS, backbone(tmp_path), 'model.backbone')


def test_a_tag_repeated_as_its_own_pretrained_cfg_is_no_contradiction():
    assert record_for('ViT-B-32', 'openai', 'openai') == record_for('ViT-B-32', 'openai')


def test_a_file_whose_logit_scale_and_bias_are_one_element_vectors_loads(tmp_path):
    """[1] in some releases (Hugging Face's SigLIP), a scalar in open_clip, whose
    load_checkpoint reshapes both."""
    sigmoid_clip = dict(TINY_CLIP, init_logit_bias=-10.0)
    state = open_clip.CLIP(**sigmoid_clip).state_dict()
    state['logit_scale'], state['logit_bias'] = torch.tensor([2.5]), torch.tensor([-6.5])
    path = tmp_path / 'tiny.pt'
    torch.save(state, path)
    loaded = MODELS.build(dict(tiny_backbone_cfg(pretrained=str(path)), model_cfg=sigmoid_clip))
    scale, bias = loaded.pair_logits()
    assert scale.shape == bias.shape == ()
    assert float(scale) == pytest.approx(math.exp(2.5)) and float(bias) == -6.5


def test_a_hub_snapshot_folder_loads_its_open_clip_weights(tmp_path):
    """open_clip's hub repositories (timm/vit_base_patch32_clip_224.openai) hold
    open_clip_model.safetensors beside timm's image-only model.safetensors."""
    from safetensors.torch import save_file

    torch.manual_seed(3)
    source = open_clip.CLIP(**TINY_CLIP)
    save_file(source.state_dict(), str(tmp_path / 'open_clip_model.safetensors'))
    save_file({'patch_embed.proj.weight': torch.zeros(2)}, str(tmp_path / 'model.safetensors'))
    loaded = MODELS.build(tiny_backbone_cfg(pretrained=str(tmp_path)))
    assert all(torch.equal(loaded.clip.state_dict()[name], tensor)
               for name, tensor in source.state_dict().items())


def test_a_folder_holding_another_librarys_layout_names_its_file_and_the_open_clip_one(
        tmp_path):
    """transformers' CLIPModel folders (openai/clip-vit-base-patch32) and timm's image-only
    model.safetensors were refused naming the folder, with the advice to change arch."""
    from safetensors.torch import save_file
    from transformers import CLIPConfig, CLIPModel

    CLIPModel(CLIPConfig(
        text_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=32),
        vision_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, image_size=32, patch_size=8),
        projection_dim=16)).save_pretrained(tmp_path / 'hf')
    with pytest.raises(ValueError, match=r"hf/model\.safetensors does not fit .*Hugging Face "
                                         r"transformers' layout \((text|vision)_model\..*"
                                         r'open_clip_model\.safetensors'):
        MODELS.build(tiny_backbone_cfg(pretrained=str(tmp_path / 'hf')))
    (tmp_path / 'timm').mkdir()
    save_file({'patch_embed.proj.weight': torch.zeros(2), 'cls_token': torch.zeros(2)},
              str(tmp_path / 'timm' / 'model.safetensors'))
    with pytest.raises(ValueError, match=r"timm/model\.safetensors does not fit .*timm's "
                                         r'image tower alone.*open_clip_model\.safetensors'):
        MODELS.build(tiny_backbone_cfg(pretrained=str(tmp_path / 'timm')))


def _tiny_reference(state: dict[str, torch.Tensor], quick_gelu: bool) -> open_clip.CLIP:
    reference = open_clip.CLIP(**TINY_CLIP, quick_gelu=quick_gelu)
    reference.load_state_dict({k: v.float() for k, v in state.items()})
    return reference.eval()


@pytest.mark.parametrize('layout', ['torchscript', 'state_dict'])
def test_openai_release_formats_load_and_run_with_quick_gelu(tmp_path, layout):
    state = openai_state_dict(shapes_of_model_cfg(TINY_CLIP), scale=0.5)
    path = tmp_path / 'ViT-B-16.pt'
    if layout == 'torchscript':
        save_openai_torchscript(state, path, input_resolution=32, context_length=32,
                                vocab_size=49408)
    else:
        torch.save(state, path)
    backbone = MODELS.build(tiny_backbone_cfg(pretrained=str(path),
                                              pretrained_cfg=dict(quick_gelu=True))).eval()
    assert _activations(backbone.clip) == {QuickGELU}
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    tokens = backbone.tokenizer(TEXTS)
    ids = open_clip.get_tokenizer('ViT-B-32')(TEXTS, context_length=32)
    reference, gelu = _tiny_reference(state, True), _tiny_reference(state, False)
    with torch.no_grad():
        torch.testing.assert_close(backbone.encode_image(images), reference.encode_image(images))
        torch.testing.assert_close(backbone.encode_source_text(tokens),
                                   reference.encode_text(ids), rtol=1e-4, atol=1e-5)
        # The activation is visible in the output: GELU would have been caught.
        assert (backbone.encode_image(images) - gelu.encode_image(images)).abs().max() > 1e-2


def test_dasd_style_vit_b16_file_loads_at_full_size_on_meta(tmp_path):
    """DASD loads ``pretrained_model/clip/ViT-B-16.pt``: the full-size layout fits ViT-B-16."""
    shapes = openai_vit_clip_shapes(512, 224, 16, 768, 12, 77, 49408, 512, 12)
    path = tmp_path / 'pretrained_model' / 'clip' / 'ViT-B-16.pt'
    path.parent.mkdir(parents=True)
    torch.save(openai_state_dict(shapes, device='meta'), path)
    with torch.device('meta'):
        backbone = MODELS.build(dict(type='OpenCLIPBackbone', arch='ViT-B-16',
                                     pretrained=str(path), pretrained_cfg='openai'))
        assert _activations(backbone.clip) == {QuickGELU}
        with pytest.raises(ValueError, match=r'ViT-B-16.pt does not fit open_clip ViT-B-32: 2 '
                                             r'with another shape \(visual.conv1.weight \(file '
                                             r'\[768, 3, 16, 16\], model \[768, 3, 32, 32\]\), '
                                             r'visual.positional_embedding \(file \[197, 768\], '
                                             r'model \[50, 768\]\)\). Is it a checkpoint of '
                                             r'ViT-B-32\? Set arch'):
            MODELS.build(dict(type='OpenCLIPBackbone', arch='ViT-B-32', pretrained=str(path),
                              pretrained_cfg='openai'))


def test_files_of_another_architecture_or_broken_are_refused(tmp_path):
    state = openai_state_dict(shapes_of_model_cfg(TINY_CLIP))
    del state['visual.proj']
    state['visual.attnpool.c_proj.weight'] = torch.zeros(2)
    path = tmp_path / 'other.pt'
    torch.save(state, path)
    with pytest.raises(ValueError, match=r'other.pt does not fit open_clip custom: 1 missing '
                                         r'\(visual.proj\); 1 unexpected '
                                         r'\(visual.attnpool.c_proj.weight\)'):
        MODELS.build(tiny_backbone_cfg(pretrained=str(path)))
    truncated = tmp_path / 'ViT-B-32.pt'
    truncated.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ValueError, match='ViT-B-32.pt .* is not a readable custom CLIP '
                                         'checkpoint.*download the file again'):
        MODELS.build(tiny_backbone_cfg(pretrained=str(truncated)))


@needs_xlmr_tokenizer
def test_a_hugging_face_encoder_config_that_cannot_be_fetched_names_it_and_the_local_routes(
        monkeypatch):
    """Offline, transformers' error names neither the encoder nor the open_clip model."""
    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files\nmore")

    monkeypatch.setattr(open_clip.hf_model.AutoConfig, 'from_pretrained', offline)
    with pytest.raises(FileNotFoundError, match=(
            r"the config of the Hugging Face text encoder 'xlm-roberta-base' of open_clip "
            r"xlm-roberta-base-ViT-B-32 could not be fetched \(We couldn't connect .*\); "
            r'.*huggingface-cli download xlm-roberta-base config.json.*hf_model_name')):
        with torch.device('meta'):
            MODELS.build(dict(type='OpenCLIPBackbone', arch='xlm-roberta-base-ViT-B-32',
                              tokenizer=xlmr_tokenizer()))


def test_hugging_face_tokenized_families_get_open_clips_tokenizer_options():
    from xmr.models.backbones.open_clip_pretrained import text_tokenizer_cfg

    assert text_tokenizer_cfg('ViT-B-32', None) is None  # CLIP's BPE, from the record
    assert text_tokenizer_cfg('ViT-B-16-SigLIP2', None) == dict(
        type='HFTokenizer', name_or_path='timm/ViT-B-16-SigLIP2', clean='canonicalize',
        lowercase=False, strip_sep_token=False)
    assert text_tokenizer_cfg('ViT-L-14-CLIPA', None) == dict(
        type='HFTokenizer', name_or_path='bert-base-uncased', clean='whitespace', lowercase=False,
        strip_sep_token=True)
    assert text_tokenizer_cfg('xlm-roberta-base-ViT-B-32', None)['name_or_path'] == \
        'xlm-roberta-base'
    # MetaCLIP 2 worldwide (docs/backbones.md): XLM-V's tokenizer, mT5's for the L/14.
    assert text_tokenizer_cfg('ViT-H-14-worldwide', None) == dict(
        type='HFTokenizer', name_or_path='facebook/xlm-v-base', clean='whitespace', lowercase=False,
        strip_sep_token=False)
    assert text_tokenizer_cfg('ViT-L-14-worldwide', None) == dict(
        type='HFTokenizer', name_or_path='google/mt5-base', clean='canonicalize', lowercase=False,
        strip_sep_token=False)
    clips = {**TINY_CLIP, 'text_cfg': {**TINY_CLIP['text_cfg'], 'hf_tokenizer_name': 'x',
                                       'tokenizer_mode': 'clips'}}
    with pytest.raises(ValueError, match="'custom' tokenizes with tokenizer_mode='clips'"):
        text_tokenizer_cfg(None, clips)


@needs_xlmr_tokenizer
def test_a_configs_own_hugging_face_tokenizer_gets_open_clips_options_or_is_refused(tmp_path):
    """A config names its own copy of the vocabulary (a local file, offline) and leaves the
    options to the backbone: open_clip's text cleaning is filled in; another one is refused,
    as the tower would read other ids than it was trained on."""
    from tests.models.backbones.open_clip_families import backbone_cfg, xlmr_cfg, xlmr_tokenizer

    cfg = xlmr_cfg(tmp_path / 'xlmr')
    built = MODELS.build(backbone_cfg(cfg, xlmr_tokenizer()))
    assert built.tokenizer.clean == 'whitespace'  # open_clip's default for HF tokenizers
    # ftfy and HTML unescaping: what a caption scraped from the web carries.
    assert torch.equal(built.tokenizer(['Tom &amp; Jerry'])['input_ids'],
                       built.tokenizer(['Tom & Jerry'])['input_ids'])
    with pytest.raises(ValueError, match="tokenizer.clean: the config sets 'lower', open_clip "
                                         "tokenizes for this architecture with 'whitespace'"):
        MODELS.build(backbone_cfg(cfg, xlmr_tokenizer(clean='lower')))
    # lowercase=True reads 'A Dog' as 'a dog', as clean='lower' would: both are refused.
    with pytest.raises(ValueError, match='tokenizer.lowercase: the config sets True, open_clip '
                                         'tokenizes for this architecture with False'):
        MODELS.build(backbone_cfg(cfg, xlmr_tokenizer(lowercase=True)))
    # CCLM's HFTokenizer (a config moved from a CCLM base to an XLM-R CLIP keeps it) reads the
    # same vocabulary into other ids: lower case, no punctuation, 30 words.
    cclm = dict(type='CCLMTokenizer', tokenizer_file=xlmr_tokenizer()['tokenizer_file'],
                max_length=30)
    with pytest.raises(ValueError, match='tokenizer.type: the config builds a CCLMTokenizer, but '
                                         'the text tower of custom was trained with the Hugging '
                                         "Face tokenizer 'xlm-roberta-base'"):
        MODELS.build(backbone_cfg(cfg, cclm))


def _hand_sinusoids(rows: int, dim: int, pad_id: int) -> torch.Tensor:
    """fairseq's table, written from its formula: row ``p`` is ``sin(p w_i)`` for ``i < D/2``
    then ``cos(p w_i)``, ``w_i = 10000^(-i / (D/2 - 1))``; the padding row is zero."""
    half = dim // 2
    table = torch.tensor([[math.sin(p * 10000 ** (-i / (half - 1))) for i in range(half)] +
                          [math.cos(p * 10000 ** (-i / (half - 1))) for i in range(half)]
                          for p in range(rows)], dtype=torch.float64)
    table[pad_id] = 0
    return table


def _nllb_file_with_sinusoids(tmp_path, change) -> tuple[dict, torch.nn.Module, str]:
    """A tiny NLLB-CLIP's backbone config, the backbone, and a file of its weights holding
    ``text.transformer.embed_positions.weights`` as transformers < 4.27 saved it
    (``change(table)`` of the hand-written table)."""
    from tests.models.backbones.open_clip_families import backbone_cfg, nllb_cfg

    cfg = backbone_cfg(nllb_cfg(tmp_path / 'nllb'))
    reference = MODELS.build(cfg)
    state = reference.clip.state_dict()
    assert 'text.transformer.embed_positions.weights' not in state  # a buffer left out now
    # 40 positions + M2M100's offset 2 rows, d_model 32, padding id 1 (nllb_cfg's encoder)
    state['text.transformer.embed_positions.weights'] = change(_hand_sinusoids(42, 32, 1))
    path = str(tmp_path / 'open_clip_pytorch_model.bin')
    torch.save(state, path)
    return cfg, reference, path


@pytest.mark.parametrize('dtype', [torch.float32, torch.float16])
def test_an_nllb_file_holding_the_sinusoid_table_the_model_computes_loads(dtype, tmp_path):
    """NLLB-CLIP files saved when transformers kept M2M100's sinusoids as a parameter hold the
    table; it is the computation the model repeats, so it is checked and dropped."""
    cfg, reference, path = _nllb_file_with_sinusoids(tmp_path, lambda table: table.to(dtype))
    loaded = MODELS.build(dict(cfg, pretrained=path))
    for name, value in reference.clip.state_dict().items():
        assert torch.equal(loaded.clip.state_dict()[name], value), name
    torch.testing.assert_close(loaded.text_tower.sinusoids.weights.double(),
                               _hand_sinusoids(42, 32, 1), atol=1e-5, rtol=0)


@pytest.mark.parametrize('change,named', [
    (lambda table: table.index_add(0, torch.tensor([7]), torch.full((1, 32), 0.01,
                                                                    dtype=table.dtype)),
     'values up to 0.01 away from the sinusoids the model computes'),
    (lambda table: table[:30], 'a [30, 32] table where the model computes [42, 32]'),
], ids=['one_row_moved', 'fewer_rows'])
def test_an_nllb_sinusoid_table_other_than_the_models_is_refused_naming_it(change, named,
                                                                          tmp_path):
    cfg, _, path = _nllb_file_with_sinusoids(tmp_path, change)
    with pytest.raises(ValueError) as refused:
        MODELS.build(dict(cfg, pretrained=path))
    message = str(refused.value)
    assert message.startswith(f'{path}: text.transformer.embed_positions.weights holds {named}')
    assert 'd_model 32, padding id 1' in message and 'text_cfg.hf_model_name' in message


def test_a_file_lacking_a_position_table_is_refused_naming_it(tmp_path):
    """Taken for a table of another size, it was read: a bare KeyError named no file."""
    torch.manual_seed(0)
    state = open_clip.CLIP(**TINY_CLIP).state_dict()
    del state['positional_embedding']
    torch.save(state, tmp_path / 'partial.pt')
    with pytest.raises(ValueError, match=r'partial\.pt.* 1 missing \(positional_embedding\).*'
                       'Set arch to the architecture it was trained as'):
        MODELS.build(tiny_backbone_cfg(pretrained=str(tmp_path / 'partial.pt')))


def test_a_coca_fine_tune_of_another_context_length_is_told_its_length_not_its_rows(tmp_path):
    """CoCa's text table holds a position for its class token beyond the context: the hint
    said context_length=41 for a file trained at 40, a model that would refuse it again."""
    cfg = {key: value for key, value in coca_cfg().items() if key != 'custom_text'}
    cfg['text_cfg'] = dict(cfg['text_cfg'], context_length=40)
    cfg['multimodal_cfg'] = dict(cfg['multimodal_cfg'], context_length=40)
    torch.manual_seed(0)
    torch.save(open_clip.CoCa(**cfg).state_dict(), tmp_path / 'coca.pt')
    with pytest.raises(ValueError) as refused:
        MODELS.build(dict(backbone_cfg(coca_cfg()), pretrained=str(tmp_path / 'coca.pt')))
    assert ('text.positional_embedding holds 41 positions: the file was trained with context '
            "length 40 (open_clip's --force-context-length 40)") in str(refused.value)
    assert 'text_cfg.context_length=40>' in str(refused.value)


@pytest.mark.parametrize('forced,setting,named', [
    (dict(vision_cfg=dict(image_size=48)), 'vision_cfg.image_size=48',
     "visual.positional_embedding holds a 6 x 6 grid of 8-pixel patches: the file was trained "
     "at image size 48 (open_clip's --force-image-size 48), the model takes 32"),
    (dict(text_cfg=dict(context_length=40)), 'text_cfg.context_length=40',
     "positional_embedding holds 40 positions: the file was trained with context length 40 "
     "(open_clip's --force-context-length 40)"),
], ids=['image_size', 'context_length'])
def test_an_open_clip_fine_tune_at_another_size_is_refused_naming_its_size(forced, setting,
                                                                          named, tmp_path):
    """open_clip's training with --force-image-size / --force-context-length writes position
    tables of another length; open_clip's load_checkpoint would interpolate them. The refusal
    names the size the file was trained at, and the model built at that size loads it as
    open_clip loads it into the model its training built."""
    trained_cfg = {**TINY_CLIP, **{part: {**TINY_CLIP[part], **values}
                                   for part, values in forced.items()}}
    torch.manual_seed(0)
    path = tmp_path / 'epoch_2.pt'
    torch.save({'epoch': 2, 'name': 'ft', 'optimizer': {'state': {}, 'param_groups': []},
                'state_dict': {f'module.{k}': v
                               for k, v in open_clip.CLIP(**trained_cfg).state_dict().items()}},
               path)
    with pytest.raises(ValueError) as refused:
        MODELS.build(tiny_backbone_cfg(pretrained=str(path)))
    message = str(refused.value)
    assert named in message and f'model_cfg=<your model_cfg with {setting}>' in message
    assert 'Set arch' not in message

    loaded = MODELS.build(dict(tiny_backbone_cfg(pretrained=str(path)), model_cfg=trained_cfg))
    reference = open_clip.CLIP(**trained_cfg)
    open_clip.load_checkpoint(reference, str(path))
    for name, value in reference.state_dict().items():
        assert torch.equal(loaded.clip.state_dict()[name], value), name


def _no_hub_config(monkeypatch) -> None:
    """open_clip fetches an ``hf-hub:`` name's config; offline it retries for half a minute."""
    def fetched(model_id):
        raise AssertionError(f'open_clip fetched the config of {model_id}')

    monkeypatch.setattr(open_clip.factory, '_get_hf_config', fetched)


@pytest.mark.parametrize('name, settings', [
    ('hf-hub:timm/ViT-B-16-SigLIP2-256', "arch='ViT-B-16-SigLIP2-256', pretrained='webli'"),
    ('hf-hub:visheratin/nllb-clip-base-oc', "arch='nllb-clip-base', pretrained='v1'"),
    # Hub names ignore case; a record naming a file in the repository is of that repository.
    ('hf-hub:TIMM/vit_base_patch32_clip_224.openai',
     "arch='ViT-B-32', pretrained='openai' or arch='ViT-B-32-quickgelu', pretrained='openai'"),
])
def test_an_open_clip_hub_name_is_refused_naming_the_arch_and_tag_of_its_record(
        name, settings, monkeypatch):
    """The name open_clip's model cards give (``create_model('hf-hub:timm/...')`` loads the
    repository's weights); xmr reads weights from ``pretrained`` alone."""
    _no_hub_config(monkeypatch)
    with pytest.raises(ValueError, match=f"^arch='{name}' names open_clip's hf-hub model, "
                       '.* would build random ones: set ' + re.escape(settings) + r' \('):
        record_for(name, None)


def test_an_open_clip_folder_name_is_refused_for_the_route_that_loads_its_weights(tmp_path,
                                                                                  monkeypatch):
    """``arch='local-dir:F'`` built F's architecture with random weights, where open_clip's
    ``create_model`` loads F's; the route the error gives equals open_clip's model and
    preprocessing."""
    import json

    _no_hub_config(monkeypatch)
    config = dict(model_cfg=TINY_CLIP, preprocess_cfg=dict(
        mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5], interpolation='bilinear',
        resize_mode='squash'))
    (tmp_path / 'open_clip_config.json').write_text(json.dumps(config))
    torch.manual_seed(3)
    torch.save(open_clip.CLIP(**TINY_CLIP).state_dict(),
               tmp_path / 'open_clip_pytorch_model.bin')
    with pytest.raises(ValueError, match=re.escape(
            f"set arch=None, model_cfg=<the 'model_cfg' of {tmp_path}/open_clip_config.json, "
            f"with that file's 'preprocess_cfg' inside> and pretrained='{tmp_path}'")):
        MODELS.build(dict(type='OpenCLIPBackbone', arch=f'local-dir:{tmp_path}'))

    reference = open_clip.create_model(f'local-dir:{tmp_path}').eval()
    backbone = MODELS.build(dict(
        type='OpenCLIPBackbone', arch=None, pretrained=str(tmp_path),
        model_cfg=dict(config['model_cfg'], preprocess_cfg=config['preprocess_cfg'])))
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    tokens = backbone.tokenizer(TEXTS)
    ids = torch.nn.functional.pad(tokens['input_ids'], (0, 32 - tokens['input_ids'].shape[1]))
    with torch.no_grad():
        torch.testing.assert_close(backbone.encode_image(images), reference.encode_image(images))
        torch.testing.assert_close(backbone.encode_source_text(tokens), reference.encode_text(ids))
    assert (backbone.image_mean, backbone.image_std) == ((0.5,) * 3, (0.5,) * 3)
    assert (backbone.image_interpolation, backbone.image_resize_mode) == ('bilinear', 'squash')
    assert reference.visual.preprocess_cfg['resize_mode'] == 'squash'


@pytest.mark.parametrize('backbone, error, message', [
    (dict(type='OpenCLIPBackbone', arch='ViT-B-16-SigLIP2-265'), ValueError,
     r"unknown open_clip architecture 'ViT-B-16-SigLIP2-265'; closest: \['ViT-B-16-SigLIP2-256'"),
    (dict(type='OpenCLIPBackbone', arch='ViT-B-16-SigLIP2-256', pretrained='webly'), ValueError,
     r"pretrained='webly' is neither a file nor an open_clip tag of ViT-B-16-SigLIP2-256 "
     r"\(closest: \['webli'\]"),
    (dict(type='OpenCLIPBackbone', arch='ViT-B-32', pretrained='openai',
          pretrained_cfg=dict(quick_gelu=False)), ValueError,
     "pretrained_cfg=.* contradicts the tag pretrained='openai'"),
    (dict(type='OpenCLIPBackbone', arch='hf-hub:timm/ViT-B-16-SigLIP2-256'), ValueError,
     "set arch='ViT-B-16-SigLIP2-256', pretrained='webli'"),
    (dict(type='MultilingualCLIPBackbone', image_arch='ViT-L-14', image_pretrained='opena1'),
     ValueError, r"^image_pretrained='opena1' is neither a file nor an open_clip tag of "
     r"ViT-L-14 \(closest: \['openai'\]"),
    (dict(type='MultilingualCLIPBackbone', image_pretrained='ViT-L-14.pt'), ValueError,
     "image_pretrained='ViT-L-14.pt' is a local file, .* set image_pretrained_cfg"),
    (dict(type='MultilingualCLIPBackbone', image_pretrained='none/ViT-L-14.pt',
          image_pretrained_cfg='openai'), UserError,
     r'^none/ViT-L-14.pt \(image_pretrained\): no such file'),
])
def test_weights_the_build_would_refuse_are_refused_as_the_config_loads(backbone, error, message,
                                                                        monkeypatch):
    """They were met as the backbone built, after the runner had written its work dir and log:
    names, tags and records are checked without reading weights."""
    from xmr.registry import check_part_options

    _no_hub_config(monkeypatch)
    with pytest.raises(error, match=message):
        check_part_options(MODELS, backbone, 'model.backbone')


@pytest.mark.parametrize('key_prefix', ['', 'image_'])
def test_an_unknown_record_tag_of_a_file_is_named_as_its_pretrained_cfg(key_prefix):
    """It was told as ``'opena1' is neither a file nor an open_clip tag ...; a local file needs
    its path``, naming neither the key nor the closest tag, while the file was given."""
    with pytest.raises(ValueError, match=(
            f"^{key_prefix}pretrained_cfg='opena1' is no open_clip tag of ViT-B-32 "
            r"\(closest: \['openai'\]; tags: \['openai', .*'metaclip_fullcc'\]\)$")):
        record_for('ViT-B-32', 'weights/ViT-B-32.pt', 'opena1', key_prefix=key_prefix)


def test_a_tag_and_its_record_tag_spelt_as_open_clip_reads_them_are_no_contradiction():
    """open_clip reads tags lower-cased with ``_`` for ``-``: both name one record."""
    assert record_for('ViT-B-32', 'laion2b-s34b-b79k', 'LAION2B_s34b_b79k').settings() == \
        record_for('ViT-B-32', 'laion2b_s34b_b79k').settings()


@pytest.mark.parametrize('setting, takes', [
    (dict(std=(0.0, 0.5, 0.5)), r'std=\(0\.0, 0\.5, 0\.5\): it takes three positive numbers'),
    (dict(mean=[0.5, 0.5]), r'mean=\[0\.5, 0\.5\]: it takes three numbers, one per RGB'),
    (dict(resize_mode='center'),
     r"resize_mode='center': it takes one of \('shortest', 'longest', 'squash'\)"),
    (dict(interpolation='nearest'),
     r"interpolation='nearest': it takes one of \('bicubic', 'bilinear'\)"),
    (dict(quick_gelu='false'), r"quick_gelu='false': it takes True or False"),
    (dict(fill_color=300), r'fill_color=300: it takes an integer in 0\.\.255'),
])
@pytest.mark.parametrize('backbone, key', [
    (dict(type='OpenCLIPBackbone', arch='ViT-B-32'), 'pretrained'),
    (dict(type='MultilingualCLIPBackbone', image_arch='ViT-B-32'), 'image_pretrained'),
])
def test_a_settings_dict_the_model_cannot_run_with_is_refused_as_the_config_loads(
        setting, takes, backbone, key, tmp_path):
    """Unchecked, a dict's value was read only where it is used, after the model was built: a
    std of 0 normalised every image to infinities, two mean values failed in the data
    preprocessor's reshape, an unknown resize mode in the dataset's transform, none of them
    naming the setting."""
    weights = tmp_path / 'ViT-B-32.pt'
    weights.write_bytes(b'weights')
    with pytest.raises(ValueError, match=f'^{key}_cfg.{takes}'):
        MODELS.get(backbone['type']).check_config(
            {**backbone, key: str(weights), f'{key}_cfg': setting})


@pytest.mark.parametrize('change, message', [
    # randn(): argument 'size' must be tuple of ints, but found element of type str
    (dict(embed_dim='abc'), r"^model_cfg\.embed_dim: model CLIP: option embed_dim='abc' must be "
     r'a number \(it has no default\)'),
    # too many values to unpack (expected 2), told as if xmr meant it
    (dict(vision_cfg=dict(TINY_CLIP['vision_cfg'], image_size='abc')),
     r"^model_cfg\.vision_cfg\.image_size: model CLIPVisionCfg: option image_size='abc' must be "
     r'a number or a list or tuple of them'),
    # CLIPTextCfg.__init__() got an unexpected keyword argument 'widht'
    (dict(text_cfg=dict(TINY_CLIP['text_cfg'], widht=64)),
     r"^model_cfg\.text_cfg\.widht: model CLIPTextCfg: unknown option 'widht' \(did you mean "
     r"'width'\?\)"),
    # AssertionError: embed_dim must be divisible by num_heads
    (dict(text_cfg=dict(TINY_CLIP['text_cfg'], width=33)),
     r'^model_cfg\.text_cfg: width 33 is not divisible by heads 2'),
    (dict(vision_cfg=dict(TINY_CLIP['vision_cfg'], width=95, head_width=32)),
     r'^model_cfg\.vision_cfg: width 95 makes 2 heads of head_width 32 \(width // head_width\), '
     r'which must be at least one and divide the width'),
])
def test_a_model_cfg_open_clip_would_refuse_is_refused_naming_its_key(change, message):
    """Each failed as open_clip built the model, after the runner had made the work dir, with
    Python's message and no key."""
    with pytest.raises((TypeError, ValueError), match=message):
        check_model_cfg({**TINY_CLIP, **change})
    with pytest.raises((TypeError, ValueError), match=message):
        MODELS.build(dict(tiny_backbone_cfg(), model_cfg={**TINY_CLIP, **change}))


def test_every_architecture_open_clip_names_passes_the_model_cfg_check():
    for arch in open_clip.list_models():
        check_model_cfg(open_clip.get_model_config(arch))
