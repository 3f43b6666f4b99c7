import copy
import re

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from tests.conftest import (
    CORPUS,
    TINY_CLIP,
    phase_loss_keys,
    tiny_branch_cfg,
    tiny_dasd_cfg,
    tiny_retriever_cfg,
)
from tests.conftest import MIXED_BATCH as BATCH
from xmr.datasets.collate import media_keys
from xmr.models.adapters import StaticAdapter
from xmr.models.backbones import OpenCLIPBackbone
from xmr.models.disentanglers.semantics import NO_CONDITION_READER, SemanticsDisentangler
from xmr.registry import (
    DISENTANGLERS,
    MODELS,
    TOKENIZERS,
    UnknownOptionError,
    check_part_options,
)


def test_preprocessor_normalises_with_the_backbone_statistics(tiny_retriever):
    data = tiny_retriever.data_preprocessor(BATCH, True)
    mean = torch.tensor(tiny_retriever.backbone.image_mean).view(3, 1, 1)
    std = torch.tensor(tiny_retriever.backbone.image_std).view(3, 1, 1)
    torch.testing.assert_close(data['media'], (BATCH['media'].float() / 255 - mean) / std)
    assert data['target_tokens']['input_ids'].shape[0] == 4
    assert data['langs'] == BATCH['lang']


def test_each_phase_runs_only_its_losses(tiny_retriever):
    model = tiny_retriever
    data = model.data_preprocessor(BATCH, True)
    model.set_phase('cross_lingual', dict(cl=1.0))
    losses = model(mode='loss', **data)
    assert set(losses) == {'loss_cl'}
    r_source = model.backbone.encode_source_text(data['source_tokens'])
    r_target, _ = model.encode_target(data['target_tokens'], data['langs'])
    torch.testing.assert_close(losses['loss_cl'], ((r_target - r_source) ** 2).mean())

    model.set_phase('cross_modal', dict(cm=0.5))
    losses = model(mode='loss', **data)
    assert set(losses) == {'loss_cm'}
    a = torch.nn.functional.normalize(r_target, dim=-1)
    b = torch.nn.functional.normalize(model.backbone.encode_media(data['media']), dim=-1)
    logits = 100 * a @ b.t()
    labels = torch.arange(4)
    expected = (torch.nn.functional.cross_entropy(logits, labels)
                + torch.nn.functional.cross_entropy(logits.t(), labels)) / 2
    torch.testing.assert_close(losses['loss_cm'], 0.5 * expected, rtol=1e-4, atol=1e-5)


def test_l_cm_built_to_mask_leaves_one_images_other_captions_out_of_each_softmax():
    """Rows 0 and 2 caption image 'a': their cross pairs leave both directions' softmax. The
    masked path weighs its loss too: the weight 0.5 halves it."""
    torch.manual_seed(0)
    model = MODELS.build(tiny_retriever_cfg(losses=dict(
        cm=dict(type='InfoNCELoss', temperature=0.01, mask_same_media=True))))
    data = model.data_preprocessor({**BATCH, 'media_keys': media_keys(['a', 'b', 'a', 'd'])}, True)
    model.set_phase('cross_modal', dict(cm=1.0))
    loss = model(mode='loss', **data)['loss_cm']
    r_target, _ = model.encode_target(data['target_tokens'], data['langs'])
    a = torch.nn.functional.normalize(r_target, dim=-1)
    b = torch.nn.functional.normalize(model.backbone.encode_media(data['media']), dim=-1)
    logits = 100 * a @ b.t()
    logits[0, 2] = logits[2, 0] = float('-inf')
    labels = torch.arange(4)
    expected = (torch.nn.functional.cross_entropy(logits, labels)
                + torch.nn.functional.cross_entropy(logits.t(), labels)) / 2
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    model.set_phase('cross_modal', dict(cm=0.5))
    torch.testing.assert_close(model(mode='loss', **data)['loss_cm'], 0.5 * loss)


def test_cached_features_replace_the_towers(tiny_retriever):
    model = tiny_retriever
    data = model.data_preprocessor(BATCH, True)
    model.set_phase('cross_lingual', dict(cl=1.0))
    fake = torch.zeros(4, 32)
    data['source_features'] = fake
    r_target, _ = model.encode_target(data['target_tokens'], data['langs'])
    torch.testing.assert_close(model(mode='loss', **data)['loss_cl'], (r_target ** 2).mean())


def test_unknown_loss_weight_fails_naming_the_known_ones(tiny_retriever):
    with pytest.raises(KeyError, match=r"unknown loss weights \['sc'\].*'cl'"):
        tiny_retriever.set_phase('cross_lingual', dict(cl=1.0, sc=0.1))


def test_predict_returns_normalised_embeddings_per_language(tiny_retriever):
    batch = dict(media=BATCH['media'][:2], media_id=['a', 'b'], index=[0, 1],
                 captions=[{'en': ['a red circle', 'red circle'], 'de': ['ein roter Kreis']},
                           {'en': ['a blue square'], 'zh': ['一个蓝色的正方形']}])
    outputs = tiny_retriever.val_step(batch)
    assert [o['media_id'] for o in outputs] == ['a', 'b']
    assert outputs[0]['caption_embeddings']['en'].shape == (2, 32)
    assert outputs[0]['caption_embeddings']['zh'].shape == (0, 32)
    assert outputs[1]['caption_embeddings']['zh'].shape == (1, 32)
    torch.testing.assert_close(outputs[0]['media_embedding'].norm(), torch.tensor(1.0))


def test_untrained_language_is_refused_listing_the_trained_ones(tiny_retriever):
    batch = dict(media=BATCH['media'][:1], media_id=['a'], index=[0],
                 captions=[{'fr': ['un cercle rouge']}])
    with pytest.raises(ValueError, match=r"query: the model has no adapters for \['fr'\]; it "
                       r"reads \['en', 'de', 'zh'\]"):
        tiny_retriever.val_step(batch)


def test_checkpoint_of_other_languages_is_refused(tiny_retriever):
    other = MODELS.build(tiny_retriever_cfg(language_branch=dict(
        tiny_retriever_cfg()['language_branch'], languages=['de', 'ja'])))
    with pytest.raises(ValueError, match=r"languages: checkpoint \['de', 'ja'\] vs config "
                                         r"\['de', 'zh'\]"):
        tiny_retriever.load_state_dict(other.state_dict())


def test_a_checkpoint_loads_into_a_config_listing_its_languages_in_another_order(tiny_retriever):
    """Each language's weights are stored under its code: ['zh', 'de'] builds the model that
    ['de', 'zh'] trained, and it was refused ('languages: checkpoint ['de', 'zh'] vs config
    ['zh', 'de']')."""
    reordered = MODELS.build(tiny_retriever_cfg(language_branch=dict(
        tiny_retriever_cfg()['language_branch'], languages=['zh', 'de'])))
    reordered.load_state_dict(tiny_retriever.state_dict())
    langs = ['de', 'zh', 'de']
    tokens = tiny_retriever.language_branch.tokenize(['ein roter Kreis', '一个红色的圆',
                                                      'zwei Quadrate'], langs)
    with torch.no_grad():
        torch.testing.assert_close(reordered.encode_target(tokens, langs)[0],
                                   tiny_retriever.encode_target(tokens, langs)[0])


def test_checkpoint_of_another_adapter_type_is_refused_by_its_facts(tiny_retriever):
    lora = MODELS.build(tiny_retriever_cfg(language_branch=dict(
        tiny_retriever_cfg()['language_branch'], adapters=dict(type='LoRA', r=2))))
    assert lora.checkpoint_facts()['adapters'] == ['LoRA']
    assert tiny_retriever.checkpoint_facts()['adapters'] == ['StaticAdapter']
    assert tiny_retriever.checkpoint_facts()['disentangler'] is None
    with pytest.raises(ValueError, match=r"adapters: checkpoint \['LoRA'\] vs config "
                                         r"\['StaticAdapter'\]"):
        tiny_retriever.load_state_dict(lora.state_dict(), strict=False)
    # A checkpoint written before the facts named the adapters still loads.
    state = tiny_retriever.state_dict()
    older = {k: v for k, v in tiny_retriever.checkpoint_facts().items()
             if k not in ('adapters', 'disentangler')}
    tiny_retriever.load_state_dict(dict(state, _extra_state=older))


@pytest.mark.parametrize('trained, configured, fact', [
    (dict(type='LoRA', r=1, alpha=16), dict(type='LoRA', r=1), r"'scale': 16\.0"),
    (dict(type='HoulsbyAdapter', hidden=4), dict(type='HoulsbyAdapter', hidden=4,
                                                 activation='relu'), "'activation': 'gelu_new'"),
    (dict(type='CompacterAdapter', reduction_factor=4),
     dict(type='CompacterAdapter', reduction_factor=4, activation='gelu'),
     "'activation': 'gelu_new'"),
    # The language's shared PHM rule sits beside its adapters and has settings of none.
    (dict(type='CompacterAdapter', reduction_factor=4, share_rule=True),
     dict(type='CompacterAdapter', reduction_factor=4, share_rule=True, activation='gelu'),
     "'activation': 'gelu_new'"),
    (dict(type='HardPrompt', text='ein Foto von'), dict(type='HardPrompt', text='ein Bild von'),
     "'text': 'ein Foto von'"),
])
def test_a_checkpoint_of_other_adapter_settings_than_its_weights_hold_is_refused_by_its_facts(
        trained, configured, fact):
    """PECTVLM's LoRA (alpha 16 at r = 1: scale 16) loaded into a config of the default alpha
    (scale 1), or an adapter under another activation, or a frozen hard prompt of another text:
    every weight fits, and the model computed other features without a word."""
    def built(adapters):
        torch.manual_seed(0)
        return MODELS.build(tiny_retriever_cfg(language_branch=tiny_branch_cfg(
            adapters=adapters)))

    checkpoint, model = built(trained), built(configured)
    settings = checkpoint.checkpoint_facts()['adapter_settings']
    assert len(settings) == 1 and settings[0]['type'] == trained['type']
    with pytest.raises(ValueError, match=r"adapter_settings: checkpoint \[\{.*" + fact):
        model.load_state_dict(checkpoint.state_dict())
    built(trained).load_state_dict(checkpoint.state_dict())
    # A checkpoint written before the facts held the adapters' settings still loads.
    older = {k: v for k, v in checkpoint.checkpoint_facts().items() if k != 'adapter_settings'}
    model.load_state_dict(dict(checkpoint.state_dict(), _extra_state=older))


def test_adapters_whose_weights_hold_all_they_compute_with_record_no_settings(tiny_retriever):
    assert tiny_retriever.checkpoint_facts()['adapter_settings'] == []
    trainable = MODELS.build(tiny_retriever_cfg(language_branch=tiny_branch_cfg(
        adapters=dict(type='HardPrompt', text='ein Foto von', trainable=True))))
    assert trainable.checkpoint_facts()['adapter_settings'] == []


def test_checkpoint_of_another_target_vocabulary_is_refused(tiny_retriever):
    """A SentencePiece model learned from another corpus: the same size, other tokens."""
    branch = tiny_retriever_cfg()['language_branch']
    corpus = [caption.upper() for caption in CORPUS] * 20
    other = MODELS.build(tiny_retriever_cfg(language_branch=dict(branch, tokenizer=dict(
        branch['tokenizer'], corpus=corpus))))
    assert other.language_branch.tokenizer.vocab_size == \
        tiny_retriever.language_branch.tokenizer.vocab_size
    with pytest.raises(ValueError, match='target_vocabulary: checkpoint'):
        tiny_retriever.load_state_dict(other.state_dict())

def test_source_language_cannot_be_a_target():
    with pytest.raises(ValueError, match="source language 'en'"):
        MODELS.build(tiny_retriever_cfg(language_branch=dict(
            tiny_retriever_cfg()['language_branch'], languages=['en', 'de'])))


def test_a_source_language_among_the_targets_in_any_form_is_refused_by_the_config_check():
    """Refused only once the backbone and the branch's tokenizer were built, in the work dir."""
    cfg = tiny_retriever_cfg(language_branch=tiny_branch_cfg(languages=['de', 'eng']))
    with pytest.raises(ValueError, match="^source language 'en' is read by the frozen tower"):
        check_part_options(MODELS, cfg, 'model')
    check_part_options(MODELS, dict(cfg, source_language='fr'), 'model')
    with pytest.raises(ValueError, match="^source language 'de'"):
        check_part_options(MODELS, dict(cfg, source_language='deu'), 'model')


class ReadsCondition(StaticAdapter):
    """An own adapter type that reads the SDM's ``W^z`` (its forward is StaticAdapter's)."""

    reads_condition = True


def dasd_with(adapters) -> dict:
    return dict(tiny_dasd_cfg(), language_branch=tiny_branch_cfg(adapters=adapters))


def test_a_disentangler_the_model_cannot_run_is_refused_by_the_config_check_alone():
    """Refused only as the model built, after the backbone and the runner's work dir."""
    with pytest.raises(ValueError, match=f'^{re.escape(NO_CONDITION_READER)}$'):
        check_part_options(MODELS, dasd_with(dict(type='StaticAdapter', hidden=4)), 'model')
    with pytest.raises(ValueError, match='^a disentangler needs a language_branch'):
        check_part_options(MODELS, dict(tiny_dasd_cfg(), language_branch=None), 'model')
    with pytest.raises(TypeError, match='CrossLingualRetriever runs disentanglers that subclass '
                                        'ConditionDisentangler; CDDSDisentangler does not'):
        check_part_options(MODELS, tiny_retriever_cfg(disentangler=dict(type='CDDSDisentangler')),
                           'model')


def test_an_adapter_reading_a_condition_without_a_disentangler_is_refused_by_the_config():
    """DynamicAdapter without the SDM was refused at its first batch: the closing validation
    of the source-finetune phase, after that whole phase had trained."""
    with pytest.raises(ValueError, match=(
            r'^adapter DynamicAdapter reads a per-caption condition \(DASD\'s W\^z\) that only a '
            r"disentangler makes: configure model\.disentangler")):
        check_part_options(MODELS, tiny_retriever_cfg(language_branch=tiny_branch_cfg(
            adapters=dict(type='DynamicAdapter', hidden=4))), 'model')
    check_part_options(MODELS, tiny_retriever_cfg(language_branch=tiny_branch_cfg(
        adapters=dict(type='StaticAdapter', hidden=4))), 'model')


def test_padding_averaged_into_f_sa_needs_a_fixed_padding_as_the_config_loads():
    """``padding_as_tokens`` (the authors' f^sa over all 77 positions) under padding to the
    batch's longest caption: a caption's embedding depended on the other captions of its batch
    (its evaluation batch, encode_texts' batch_size)."""
    cfg = copy.deepcopy(tiny_dasd_cfg())
    cfg['disentangler']['padding_as_tokens'] = True
    with pytest.raises(ValueError, match=r'^model\.disentangler\.padding_as_tokens=True averages '
                       r'the padding into f\^sa, but model\.language_branch\.tokenizer has no '
                       r'pad_to'):
        check_part_options(MODELS, cfg, 'model')
    # A backbone whose config does not tell its tower (text_tower_shape: None) needs pad_to.
    with pytest.raises(ValueError, match=r'tokenizer has no pad_to'):
        SemanticsDisentangler.check_tokenizer_config(
            cfg['disentangler'], cfg['language_branch']['tokenizer'], None)
    cfg['language_branch']['tokenizer']['pad_to'] = 32
    check_part_options(MODELS, cfg, 'model')
    torch.manual_seed(0)
    model = MODELS.build(cfg).eval()
    texts = ['ein roter Kreis', 'zwei blaue Quadrate links oben', 'drei']
    with torch.no_grad():
        together = model.encode_text(model.language_branch.tokenize(texts, ['de'] * 3), 'de')
        alone = [model.encode_text(model.language_branch.tokenize([text], ['de']), 'de')
                 for text in texts]
    torch.testing.assert_close(together, torch.cat(alone))


def test_padding_averaged_into_f_sa_needs_a_fixed_padding_of_a_tokenizer_given_built():
    """A tokenizer given built (an object, not a config dict) went unchecked: the model was
    built with f^sa depending on the other captions of a batch."""
    cfg = copy.deepcopy(tiny_dasd_cfg())
    cfg['disentangler']['padding_as_tokens'] = True
    tokenizer_cfg = cfg['language_branch']['tokenizer']
    cfg['language_branch']['tokenizer'] = TOKENIZERS.build(tokenizer_cfg)
    message = (r'^model\.disentangler\.padding_as_tokens=True averages the padding into f\^sa, '
               r'but model\.language_branch\.tokenizer \(a built SentencePieceTokenizer\) has '
               r'no pad_to: ')
    with pytest.raises(ValueError, match=message):
        check_part_options(MODELS, cfg, 'model')
    with pytest.raises(ValueError, match=message):
        MODELS.build(cfg)
    cfg['language_branch']['tokenizer'] = TOKENIZERS.build(dict(tokenizer_cfg, pad_to=32))
    check_part_options(MODELS, cfg, 'model')
    assert MODELS.build(cfg).language_branch.tokenizer.pad_to == 32


@pytest.mark.parametrize('text_cfg', [dict(pool_type='last'),
                                      dict(pool_type='last', no_causal_mask=True),
                                      dict(no_causal_mask=True)],
                         ids=['causal_last', 'siglip_bidirectional_last', 'bidirectional'])
def test_padding_averaged_into_f_sa_is_accepted_on_a_fixed_context_tower_without_pad_to(
        text_cfg):
    """A fixed-context tower (``'last'`` pooling, SigLIP's; a bidirectional tower that attends
    to its padding) has every caption padded to its context whatever the tokenizer's config
    says: a caption's embedding never depends on its batch, and ``padding_as_tokens`` needs
    no ``pad_to`` in the config."""
    cfg = copy.deepcopy(tiny_dasd_cfg())
    cfg['disentangler']['padding_as_tokens'] = True
    backbone = cfg['backbone']
    backbone['model_cfg'] = copy.deepcopy(backbone['model_cfg'])
    backbone['model_cfg']['text_cfg'].update(text_cfg)
    assert 'pad_to' not in cfg['language_branch']['tokenizer']
    check_part_options(MODELS, cfg, 'model')
    torch.manual_seed(0)
    model = MODELS.build(cfg).eval()
    assert model.backbone.text_tower.fixed_context
    texts = ['ein roter Kreis', 'zwei blaue Quadrate links oben', 'drei']
    tokens = model.language_branch.tokenize(texts, ['de'] * 3)
    context = backbone['model_cfg']['text_cfg']['context_length']
    assert tokens['input_ids'].shape == (3, context)
    with torch.no_grad():
        together = model.encode_text(tokens, 'de')
        alone = [model.encode_text(model.language_branch.tokenize([text], ['de']), 'de')
                 for text in texts]
    torch.testing.assert_close(together, torch.cat(alone))


@pytest.mark.parametrize('change, fact', [
    # The authors' SDM has no stream adapters: its depth is in no weight's shape.
    (dict(stream_adapters=False, depth=1), r"'depth': 2"),
    (dict(stream_adapters=False, depth=2, generator=dict(d_z=16, d_u=4, activation='gelu')),
     r"'generator_activation': 'quick_gelu'"),
])
def test_a_checkpoint_of_other_disentangler_settings_than_its_weights_hold_is_refused(change,
                                                                                      fact):
    """The same weights under another SDM depth or generator activation: every weight fit,
    and the condition W^z came out otherwise without a word."""
    def built(**options):
        cfg = copy.deepcopy(tiny_dasd_cfg())
        cfg['disentangler'].update(options)
        torch.manual_seed(0)
        return MODELS.build(cfg)

    authors = dict(stream_adapters=False, depth=2,
                   generator=dict(d_z=16, d_u=4, activation='quick_gelu'))
    checkpoint = built(**authors)
    assert checkpoint.checkpoint_facts()['disentangler_settings'] == dict(
        depth=2, generator_activation='quick_gelu', padding_as_tokens=False)
    with pytest.raises(ValueError, match=r'disentangler_settings: checkpoint \{.*' + fact):
        built(**change).load_state_dict(checkpoint.state_dict())
    built(**authors).load_state_dict(checkpoint.state_dict())
    assert MODELS.build(tiny_retriever_cfg()).checkpoint_facts()['disentangler_settings'] == {}


def test_dynamic_adapters_of_another_width_than_the_generators_d_u_are_refused_as_it_loads():
    """``W^z`` (``d_u × d_u``) sits between the adapters' ``W_down`` and ``W_up``. Built, such
    a model stopped at its first forward with a condition: at the validation that ends a whole
    source-finetune phase, or after the cross-lingual phase's feature cache was built."""
    wider = dasd_with([dict(type='DynamicAdapter', hidden=4, blocks=[0]),
                       dict(type='DynamicAdapter', hidden=8, blocks=[1, 2])])
    message = ('^model.disentangler.generator.d_u=4 but model.language_branch.adapters '
               r'\(DynamicAdapter\) has hidden=8: W\^z \(d_u × d_u\) sits between the dynamic '
               "adapters' W_down and W_up; give both the same d_u")
    with pytest.raises(ValueError, match=message):
        check_part_options(MODELS, wider, 'model')
    with pytest.raises(ValueError, match=message):
        MODELS.build(wider)
    # Either side's default (32) counts: the generator's here, the adapter's below.
    generator_default = tiny_dasd_cfg()
    generator_default['disentangler'].pop('generator')
    with pytest.raises(ValueError, match=r'generator.d_u=32 .* has hidden=4: '):
        check_part_options(MODELS, generator_default, 'model')
    with pytest.raises(ValueError, match=r'generator.d_u=4 .* has hidden=32: '):
        check_part_options(MODELS, dasd_with(dict(type='DynamicAdapter')), 'model')
    # A misspelt d_u is named as such, not as the default's mismatch.
    misspelt = dasd_with(dict(type='DynamicAdapter', hidden=16))
    misspelt['disentangler']['generator'] = dict(d_z=16, du=16)
    with pytest.raises(UnknownOptionError, match=r"generator\.du: .* unknown option 'du' "
                                                 r"\(did you mean 'd_u'\?\)"):
        check_part_options(MODELS, misspelt, 'model')
    # An adapter that reads no W^z has its own width; an own reader of the condition is not
    # the SDM's to size.
    check_part_options(MODELS, dasd_with([dict(type='DynamicAdapter', hidden=4, blocks=[0]),
                                          dict(type='StaticAdapter', hidden=8, blocks=[1])]),
                       'model')
    check_part_options(MODELS, dasd_with(dict(type=ReadsCondition, hidden=8)), 'model')


#: Options of DASD's tiny model (a text tower of width 32 and 3 blocks) beyond that tower, and
#: what the message names: the key, the value and the fix.
BEYOND_THE_TOWER = [
    ('language_branch', dict(adapters=dict(type='DynamicAdapter', hidden=4, blocks=[0, 3])),
     'model.language_branch.adapters (DynamicAdapter): blocks=[0, 3], an adapter placed at '
     'block 3, but the branch runs 3 blocks, numbered 0..2'),
    ('language_branch', dict(num_blocks=2, adapters=dict(type='DynamicAdapter', hidden=4,
                                                         blocks=[2])),
     'blocks=[2], an adapter placed at block 2, but the branch runs 2 blocks'),
    ('language_branch', dict(adapters=dict(type='DynamicAdapter', hidden=4, width=64)),
     'model.language_branch.adapters (DynamicAdapter): width 64 does not match the text tower '
     "width 32; leave width out"),
    ('language_branch', dict(num_blocks=4),
     'model.language_branch.num_blocks=4 but the text tower has 3 blocks; set it in 1..3'),
    ('language_branch', dict(embedding=dict(type='TargetEmbedding', table_width=24, width=64)),
     'model.language_branch.embedding: width 64 does not match the text tower width 32'),
    ('disentangler', dict(depth=4),
     "SDM depth 4 is outside 0..3 (the text tower's blocks): set model.disentangler.depth in "
     '0..3'),
    ('disentangler', dict(adapter=dict(type='StaticAdapter', hidden=8, width=64)),
     'model.disentangler.adapter: width 64 does not match the text tower width 32')]


@pytest.mark.parametrize('part, options, message', BEYOND_THE_TOWER)
def test_an_option_beyond_the_text_tower_is_refused_by_the_config_check_as_the_build_does(
        tiny_retriever, part, options, message):
    """Refused only as the branch or the SDM built, on the built backbone's tower, after the
    runner had made the work dir; the config check reads the tower's width and depth from the
    backbone's config (open_clip's model_cfg) and gives the build's message."""
    cfg = tiny_dasd_cfg()
    cfg[part] = dict(cfg[part], **options)
    with pytest.raises(ValueError, match=re.escape(message)) as loaded:
        check_part_options(MODELS, cfg, 'model')
    registry = MODELS if part == 'language_branch' else DISENTANGLERS
    with pytest.raises(ValueError) as built:
        registry.build(cfg[part], default_args=dict(tower=tiny_retriever.backbone.text_tower))
    assert str(loaded.value) == str(built.value)


def test_a_backbone_whose_tower_only_its_build_knows_leaves_the_tower_to_the_build():
    """A subclass's own config tells nothing of its tower (text_tower_shape: None)."""
    cfg = tiny_dasd_cfg()
    cfg['backbone'] = dict(cfg['backbone'], type=OwnBackbone)
    cfg['disentangler'] = dict(cfg['disentangler'], depth=4)
    check_part_options(MODELS, cfg, 'model')


class OwnBackbone(OpenCLIPBackbone):
    """A backbone of a user's own whose config does not give its tower's shape."""

    @classmethod
    def text_tower_shape(cls, cfg):
        return None


@pytest.mark.parametrize('adapters', [
    dict(type=ReadsCondition, hidden=4),
    [dict(type='StaticAdapter', hidden=4), dict(type='DynamicAdapter', hidden=4, blocks=[1])],
    dict(type='NoSuchAdapter')])  # its build names it; the check takes no guess
def test_the_config_check_takes_any_branch_with_an_adapter_type_that_reads_the_condition(
        adapters):
    MODELS.get('CrossLingualRetriever').check_config(dasd_with(adapters))


def test_a_source_language_in_another_form_reads_the_datasets_canonical_code():
    """``source_language='eng'`` (ISO 639-3, accepted for the target languages) is ``en``: the
    English captions of a dataset are read by the frozen tower, not refused."""
    torch.manual_seed(0)
    model = MODELS.build(tiny_retriever_cfg(source_language='eng'))
    assert model.source_language == 'en'
    batch = dict(media=BATCH['media'][:1], media_id=['a'], index=[0],
                 captions=[{'en': ['a red circle'], 'de': ['ein roter Kreis']}])
    assert model.val_step(batch)[0]['caption_embeddings']['en'].shape == (1, 32)
    with pytest.raises(ValueError, match="source language 'en'"):
        MODELS.build(tiny_retriever_cfg(source_language='EN', language_branch=dict(
            tiny_retriever_cfg()['language_branch'], languages=['en', 'de'])))


def test_a_model_without_a_branch_fine_tunes_the_towers_on_source_cm_alone():
    """``source_cm`` reads the frozen towers alone, so a model built without a branch runs it;
    the other losses read r^T and are refused before anything trains."""
    torch.manual_seed(0)
    model = MODELS.build(tiny_retriever_cfg(language_branch=None))
    model.set_phase('finetune', dict(source_cm=1.0))
    data = model.data_preprocessor(dict(media=BATCH['media'], source_text=BATCH['source_text']),
                                   True)
    loss = model(mode='loss', **data)['loss_source_cm']
    a = F.normalize(model.backbone.encode_source_text(data['source_tokens']), dim=-1)
    b = F.normalize(model.backbone.encode_media(data['media']), dim=-1)
    logits, labels = a @ b.t() / 0.07, torch.arange(4)  # the default's initial temperature
    expected = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"phase p weights \['cl'\] need a language_branch"):
        model.check_phase('p', dict(cl=1.0))


@pytest.mark.parametrize('weights', [dict(disentangler=1.0), dict(cm=1.0, disentangler=1.0)])
def test_a_phase_without_cl_still_computes_the_disentanglers_losses(weights):
    """The disentangler's terms read r^S: a phase that weighs them encodes the source captions
    even when no loss of its own compares with them."""
    torch.manual_seed(0)
    model = MODELS.build(tiny_dasd_cfg())
    model.set_phase('p', weights)
    losses = model(mode='loss', **model.data_preprocessor(BATCH, True))
    assert set(losses) == phase_loss_keys(model, weights) != {'loss_cm'}


@pytest.mark.parametrize('weights', [dict(cl=1.0), dict(cl=1.0, disentangler=0.0)])
def test_a_phase_that_does_not_weigh_the_disentangler_computes_none_of_its_losses(
        weights, monkeypatch):
    """Given r^S, the SDM computed L_sc and L_d (one more pass of its blocks, the
    discriminator, a draw of negatives) which a phase without its weight dropped; L_CL is the
    same without them."""
    from xmr.models.disentanglers.discriminator import PairDiscriminator

    torch.manual_seed(0)
    model = MODELS.build(tiny_dasd_cfg())
    data = model.data_preprocessor(BATCH, True)
    model.set_phase('both', dict(cl=1.0, disentangler=1.0))
    weighed = model(mode='loss', **data)['loss_cl']

    def computed(*args, **kwargs):
        raise AssertionError('the discriminator ran')

    monkeypatch.setattr(PairDiscriminator, 'loss', computed)
    model.set_phase('cl only', weights)
    state = torch.get_rng_state()
    losses = model(mode='loss', **data)
    assert set(losses) == {'loss_cl'} and torch.equal(torch.get_rng_state(), state)
    torch.testing.assert_close(losses['loss_cl'], weighed)


def test_check_languages_accepts_the_source_and_the_branchs_languages(tiny_retriever):
    tiny_retriever.check_languages(['en', 'de', 'zh'], 'val dataset xtd10')
    with pytest.raises(ValueError, match=r"val dataset xtd10: the model has no adapters for "
                                         r"\['fr'\]; it reads \['en', 'de', 'zh'\]"):
        tiny_retriever.check_languages(['en', 'fr'], 'val dataset xtd10')


def test_the_target_group_trains_the_branch_and_the_disentangler(tiny_retriever):
    assert tiny_retriever.trainable_groups() == {'target': ['language_branch']}
    dasd = MODELS.build(tiny_dasd_cfg())
    assert dasd.trainable_groups() == {'target': ['language_branch', 'disentangler']}
    assert MODELS.build(tiny_retriever_cfg(language_branch=None)).trainable_groups() == \
        {'target': []}


def test_the_adapters_fact_names_adapter_types_and_not_a_languages_tower_weights():
    """A language's own tower weights are state, not an adapter type (their keys are checked
    as every weight's are)."""
    model = MODELS.build(tiny_retriever_cfg(
        language_branch=tiny_branch_cfg(tuned_weights=['ln_final.*'])))
    assert 'tower_weights' in model.language_branch.adapters.sets['de']
    assert model.checkpoint_facts()['adapters'] == ['StaticAdapter']


def test_full_fine_tuning_beside_a_branch_table_copies_no_token_table():
    """``tuned_weights=['*']`` on DASD's branch (its own table, TargetEmbedding): CLIP's
    49,408-row token table is read by the source side only, so the languages hold no copy of
    it, neither among their trainable weights nor in the checkpoint; every copy they hold
    trains."""
    model = MODELS.build(tiny_retriever_cfg(
        language_branch=tiny_branch_cfg(tuned_weights=['*'])))
    tower = model.backbone.text_tower
    table = TINY_CLIP['text_cfg']['vocab_size'] * TINY_CLIP['text_cfg']['width']
    for lang in ('de', 'zh'):
        copies = model.language_branch.adapters.tower_weights(lang)
        assert sum(weight.numel() for weight in copies.parameters()) == (
            sum(weight.numel() for weight in tower.parameters()) - table)
    assert not any('tower_weights.token_embedding' in key for key in model.state_dict())
    model.set_phase('cross_lingual', dict(cl=1.0))
    data = model.data_preprocessor(BATCH, True)
    sum(model(mode='loss', **data).values()).backward()
    assert all(weight.grad is not None and weight.grad.abs().sum() > 0
               for weight in model.language_branch.adapters.tower_weights('de').parameters())


def dasd_reference(model, tokens, langs):
    """``r^T`` of DASD written from the paper's equations, run by open_clip's own blocks (causal
    mask: the padding after a caption's EOS reaches neither its EOS nor its real tokens)."""
    clip, branch = model.backbone.clip, model.language_branch
    ids, mask, eos = tokens['input_ids'], tokens['attention_mask'].bool(), tokens['eos_index']
    length = ids.shape[1]
    causal = torch.full((length, length), float('-inf')).triu(1)
    x = branch.embedding.proj(branch.embedding.table(ids)) + clip.positional_embedding[:length]

    def bottleneck(adapter, h, middle=None):
        down = adapter.down(h) if middle is None else adapter.down(h) @ middle.t()
        return h + adapter.up(torch.relu(down))

    outputs = []
    for row, lang in enumerate(langs):
        sdm = model.disentangler
        sdm = sdm.per_language[lang] if hasattr(sdm, 'per_language') else sdm
        streams = {}
        for name in ('sr', 'sa'):
            adapters, h = getattr(sdm, f'{name}_adapters'), x[row:row + 1]
            for k in range(max(sdm.depth, 1)):
                h = bottleneck(adapters[k],
                               clip.transformer.resblocks[k](h, attn_mask=causal)
                               if sdm.depth else h)
            streams[name] = getattr(sdm, f'{name}_norm')(h)[0]
        f_sr = streams['sr'][eos[row]] @ sdm.sr_projection.weight.t()       # W_p^sr LN(x_EOS)
        f_sa = streams['sa'][mask[row]].mean(0)                            # mean over real tokens
        z = F.gelu(sdm.generator.to_z[0](torch.cat([f_sr, f_sa])))
        h = x[row:row + 1]
        for i, block in enumerate(clip.transformer.resblocks):
            head, d_u = sdm.generator.heads[str(i)], sdm.generator.d_u
            middle = (head.weight @ z + head.bias).view(d_u, d_u)         # W_i^z, row-major
            h = bottleneck(branch.adapters.sets[lang][f'{i}:block_output'],
                           block(h, attn_mask=causal), middle)
        outputs.append(clip.ln_final(h)[0, eos[row]] @ clip.text_projection)
    return torch.stack(outputs)


@pytest.mark.parametrize('per_language', [False, True])
@pytest.mark.parametrize('depth', [0, 1, 2])
def test_dasd_target_embeddings_are_the_papers_equations_run_by_open_clip(per_language, depth):
    """A mixed-language batch through the SDM (``f^sr``, ``f^sa``), the generator (``z``,
    ``W_i^z``) and one dynamic adapter per block, ``H + W_up ReLU(W^z W_down H)``."""
    torch.manual_seed(0)
    cfg = tiny_dasd_cfg()
    cfg['disentangler'].update(per_language=per_language, depth=depth)
    model = MODELS.build(cfg).eval()
    with torch.no_grad():
        for parameter in [*model.language_branch.adapters.parameters(),
                          *model.disentangler.parameters()]:
            parameter.add_(torch.randn_like(parameter) * 0.2)
        tokens = model.language_branch.tokenize(BATCH['target_text'], BATCH['lang'])
        torch.testing.assert_close(model.encode_target(tokens, BATCH['lang'])[0],
                                   dasd_reference(model, tokens, BATCH['lang']),
                                   atol=1e-5, rtol=1e-5)


class BiasCasts(TorchDispatchMode):
    """Counts the dtype conversions of ``[B, 1, L, L]`` tensors: an attention bias's casts."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch, self.count = batch, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default:
            shape = args[0].shape
            self.count += len(shape) == 4 and shape[:2] == (self.batch, 1) and shape[2] == shape[3]
        return func(*args, **(kwargs or {}))


def cached_step_data(model) -> dict:
    """The mixed batch of a DASD cross-lingual step from cached English features, padded (a
    GPU's layout)."""
    model.backbone.text_tower.pack_tokens = False
    model.set_phase('cross_lingual', dict(cl=1.0, disentangler=1.0))
    data = model.data_preprocessor(BATCH, True)
    data['source_features'] = model.encode_source(data.pop('source_tokens')).detach()
    return data


def dasd_step_in_bf16(model, data: dict) -> tuple[dict, list, int]:
    """The step's losses, trained gradients and attention-bias casts under bf16 autocast."""
    torch.manual_seed(1)  # the discriminator's shuffled negatives
    with torch.autocast('cpu', dtype=torch.bfloat16), BiasCasts(len(BATCH['lang'])) as casts:
        losses = model(mode='loss', **data)
        trained = [p for p in model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(sum(losses.values()), trained, allow_unused=True)
    return losses, grads, casts.count


def test_a_dasd_step_builds_its_attention_bias_once_and_casts_it_once(monkeypatch):
    """The SDM's two streams, its adversarial pass and the branch read one mask: one bias is
    built, in autocast's dtype, and no block casts it again."""
    torch.manual_seed(0)
    model = MODELS.build(tiny_dasd_cfg())
    data = cached_step_data(model)
    tower = model.backbone.text_tower
    builds = []
    build_mask = tower.build_mask
    monkeypatch.setattr(tower, 'build_mask', lambda mask: builds.append(mask) or build_mask(mask))
    *_, casts = dasd_step_in_bf16(model, data)
    assert len(builds) == 1
    assert casts == 1


def test_a_dasd_step_with_one_bias_equals_one_built_at_every_call_bit_for_bit():
    torch.manual_seed(0)
    model = MODELS.build(tiny_dasd_cfg())
    every_call = copy.deepcopy(model)
    tower = every_call.backbone.text_tower
    tower.attention_bias = tower.build_mask  # float32, built at each call, cast in each block
    losses, grads, _ = dasd_step_in_bf16(model, cached_step_data(model))
    expected_losses, expected_grads, casts = dasd_step_in_bf16(every_call,
                                                               cached_step_data(every_call))
    assert casts > 1
    assert losses.keys() == expected_losses.keys()
    assert all(torch.equal(losses[k], expected_losses[k]) for k in losses)
    assert all((g is None and e is None) or torch.equal(g, e)
               for g, e in zip(grads, expected_grads, strict=True))


def test_val_step_embeds_each_language_through_its_own_path_normalised(tiny_retriever):
    """``predict`` gives, per language, the L2-normalised embeddings of that language's path:
    English captions through the frozen source tower, German and Chinese ones through the branch
    with their own language's adapters (which the test first shows compute otherwise than the
    other's), and the medium through the frozen image tower. A wrong route or a missing
    normalisation would evaluate another model than the one trained."""
    model = tiny_retriever
    captions = {'en': ['a red circle', 'two red circles'],
                'de': ['ein roter Kreis', 'zwei rote Kreise'],
                'zh': ['一个蓝色的正方形', '一个绿色的三角形']}
    outputs = model.val_step(dict(media=BATCH['media'][:1], media_id=['a'], index=[0],
                                  captions=[captions]))
    branch = model.language_branch

    def target(texts, lang):
        tokens = branch.tokenize(texts, [lang] * len(texts))
        return F.normalize(branch.encode(branch.embed(tokens), tokens, [lang] * len(texts)), dim=-1)

    with torch.no_grad():
        expected = {lang: target(captions[lang], lang) for lang in ('de', 'zh')}
        for lang, other in (('de', 'zh'), ('zh', 'de')):
            assert not torch.allclose(expected[lang], target(captions[lang], other), atol=1e-3)
        expected['en'] = F.normalize(model.backbone.encode_source_text(
            model.backbone.tokenizer(captions['en'])), dim=-1)
        media = model.backbone.encode_media(model.data_preprocessor(
            dict(media=BATCH['media'][:1]), False)['media'])
    for lang, embeddings in expected.items():
        torch.testing.assert_close(outputs[0]['caption_embeddings'][lang], embeddings,
                                   atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outputs[0]['media_embedding'], F.normalize(media[0], dim=-1),
                               atol=1e-5, rtol=1e-5)


def test_cached_media_features_replace_the_image_tower_in_predict(tiny_retriever):
    """A gallery batch carrying ``media_features`` (a feature cache) is embedded from them,
    normalised, and not from its media through the tower."""
    features = torch.tensor([[3.0, 4.0] + [0.0] * 30])
    outputs = tiny_retriever.val_step(dict(media=BATCH['media'][:1], media_id=['a'], index=[0],
                                           media_features=features,
                                           captions=[{'en': ['a red circle']}]))
    torch.testing.assert_close(outputs[0]['media_embedding'][:2], torch.tensor([0.6, 0.8]))


def test_the_cl_weight_scales_l_cl(tiny_retriever):
    """``loss_cl`` is the phase's ``cl`` weight times the MSE between ``r^T`` and ``r^S``."""
    model = tiny_retriever
    data = model.data_preprocessor(BATCH, True)
    model.set_phase('cross_lingual', dict(cl=0.25))
    loss = model(mode='loss', **data)['loss_cl']
    r_source = model.backbone.encode_source_text(data['source_tokens'])
    r_target, _ = model.encode_target(data['target_tokens'], data['langs'])
    torch.testing.assert_close(loss, 0.25 * ((r_target - r_source) ** 2).mean())


def test_the_disentangler_weight_scales_each_of_its_losses_under_their_keys():
    """The phase's ``disentangler`` weight multiplies every loss the SDM returns (already
    weighted by its own lambdas), each logged as ``loss_<name>``; the SDM's own losses are
    recomputed from the same ``r^S`` and the same draw of negatives."""
    torch.manual_seed(0)
    model = MODELS.build(tiny_dasd_cfg())
    data = model.data_preprocessor(BATCH, True)
    model.set_phase('p', dict(cl=1.0, disentangler=0.5))
    torch.manual_seed(1)
    losses = model(mode='loss', **data)
    torch.manual_seed(1)
    r_source = model.backbone.encode_source_text(data['source_tokens'])
    tokens = model.language_branch.read(data['target_tokens'])
    _, own = model.disentangler(model.language_branch.embed(tokens), tokens, r_source=r_source)
    assert set(own) == {'sc', 'adv'}
    assert set(losses) == {'loss_cl', 'loss_sc', 'loss_adv'}
    for name, value in own.items():
        torch.testing.assert_close(losses[f'loss_{name}'], 0.5 * value)


def _gradients(model, weights, data):
    """``{part: whether a parameter of it got a non-zero gradient}`` after one backward of the
    phase ``weights``' total loss; the SDM's parts by name (one SDM, or one per language)."""
    model.zero_grad(set_to_none=True)
    model.set_phase('p', weights)
    sum(model(mode='loss', **data).values()).backward()

    def trained(parameters):
        return any(p.grad is not None and p.grad.abs().sum() > 0 for p in parameters)

    sdm = dict(model.disentangler.named_parameters())
    return dict(embedding=trained(model.language_branch.embedding.parameters()),
                adapters=trained(model.language_branch.adapters.parameters()),
                **{part: trained(p for name, p in sdm.items() if f'{part}.' in name)
                   for part in ('generator', 'sr_adapters', 'discriminator')},
                backbone=trained(model.backbone.parameters()))


@pytest.mark.parametrize('per_language', [False, True])
def test_which_parts_of_dasd_each_phase_loss_trains(per_language):
    """``L_CL`` trains the branch's adapters, the embedding block and, through the condition
    ``W^z``, the SDM's generator and its semantic-related stream; the SDM's own losses train
    the embedding block (``L_sc`` reads the target embeddings), the SDM and the discriminator
    but not the branch's adapters; the frozen teacher and towers get no gradient from either."""
    torch.manual_seed(0)
    cfg = tiny_dasd_cfg()
    cfg['disentangler'].update(per_language=per_language)
    model = MODELS.build(cfg)
    with torch.no_grad():  # W_up of the dynamic adapters starts at zero: give them a say
        for parameter in model.language_branch.adapters.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.2)
    data = model.data_preprocessor(BATCH, True)
    assert _gradients(model, dict(cl=1.0), data) == dict(
        embedding=True, adapters=True, generator=True, sr_adapters=True, discriminator=False,
        backbone=False)
    assert _gradients(model, dict(disentangler=1.0), data) == dict(
        embedding=True, adapters=False, generator=False, sr_adapters=True, discriminator=True,
        backbone=False)


def test_cached_media_features_replace_the_image_tower_in_l_cm(tiny_retriever):
    """A training batch carrying ``media_features`` (a feature cache) computes ``L_CM`` against
    them, as rows ``[E]`` too (another collate's form): InfoNCE τ=0.01 by hand."""
    model = tiny_retriever
    data = model.data_preprocessor(BATCH, True)
    model.set_phase('cross_modal', dict(cm=1.0))
    cached = torch.randn(4, 32, generator=torch.Generator().manual_seed(3))
    loss = model(mode='loss', **data, media_features=list(cached))['loss_cm']
    r_target, _ = model.encode_target(data['target_tokens'], data['langs'])
    logits = 100 * F.normalize(r_target, dim=-1) @ F.normalize(cached, dim=-1).t()
    labels = torch.arange(4)
    expected = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)


def test_a_mixed_language_dasd_step_aligns_each_caption_through_its_own_languages_adapters():
    """In training, a DASD batch mixing German and Chinese runs every caption through its own
    language's dynamic adapters (the membership the step builds from ``langs``): ``L_CL``
    equals the MSE between the paper's equations run by open_clip and ``r^S``; the Chinese and
    German adapters differ, so a caption routed to the other language's would not."""
    torch.manual_seed(0)
    model = MODELS.build(tiny_dasd_cfg())
    with torch.no_grad():
        for parameter in [*model.language_branch.adapters.parameters(),
                          *model.disentangler.parameters()]:
            parameter.add_(torch.randn_like(parameter) * 0.2)
    data = model.data_preprocessor(BATCH, True)
    model.set_phase('cross_lingual', dict(cl=1.0))
    loss = model(mode='loss', **data)['loss_cl']
    with torch.no_grad():
        r_source = model.backbone.encode_source_text(data['source_tokens'])
        tokens = data['target_tokens']
        r_target = dasd_reference(model, tokens, data['langs'])
        swapped = dasd_reference(model, tokens, ['zh', 'de', 'zh', 'de'])
    assert not torch.allclose(r_target, swapped, atol=1e-3)
    torch.testing.assert_close(loss, ((r_target - r_source) ** 2).mean(), atol=1e-5, rtol=1e-5)


def test_l_cm_trains_the_branch_and_the_sdm_through_the_condition_and_not_the_towers():
    """The cross-modal phase's ``L_CM`` reaches the embedding block, the dynamic adapters and,
    through ``W^z``, the generator; the frozen towers and the discriminator get nothing."""
    torch.manual_seed(0)
    model = MODELS.build(tiny_dasd_cfg())
    with torch.no_grad():  # W_up of the dynamic adapters starts at zero: give them a say
        for parameter in model.language_branch.adapters.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.2)
    assert _gradients(model, dict(cm=1.0), model.data_preprocessor(BATCH, True)) == dict(
        embedding=True, adapters=True, generator=True, sr_adapters=True, discriminator=False,
        backbone=False)


def test_source_cm_fine_tunes_both_towers_once_unfrozen(tiny_retriever):
    """A source fine-tuning phase (the CL-FT setting) that unfreezes the backbone trains its
    text tower and its image tower: the frozen-tower context gives both their graphs then."""
    model = tiny_retriever
    model.backbone.requires_grad_(True)
    model.set_phase('finetune', dict(source_cm=1.0))
    model(mode='loss', **model.data_preprocessor(BATCH, True))['loss_source_cm'].backward()
    clip = model.backbone.clip
    for tower in (clip.visual, clip.transformer):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in tower.parameters())
