"""The dual encoder on token outputs: plain, with the Table 4 plug-in, and with CDDS."""
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import TINY_CLIP, tiny_backbone_cfg, tiny_sentence_encoder
from tests.models.backbones.mclip_helpers import TOKENIZER_FILE, tiny_mclip_cfg
from tests.models.losses.test_vse_hinge import triplet_loop
from xmr.datasets import retrieval_collate
from xmr.engine.loops import _losses_run
from xmr.models.disentanglers.cdds import column_statistics
from xmr.models.losses.cdds import CDDSDistributionSamplingLoss, patch_word_similarity
from xmr.models.retrievers.dual_encoder import _real_tokens
from xmr.registry import MODELS, check_part_options

BATCH = dict(
    media=torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8,
                        generator=torch.Generator().manual_seed(0)),
    source_text=['a red circle', 'a blue square on the left', 'two red circles',
                 'a green triangle'],
    target_text=['ein roter Kreis', 'ein blaues Quadrat links', 'zwei rote Kreise',
                 'un triangle vert'],
    lang=['de', 'de', 'de', 'fr'], media_id=['a', 'b', 'c', 'd'], index=[0, 1, 2, 3])
CDDS = dict(type='CDDSDisentangler', num_heads=2, num_perturbations=2)
CDDS_TERMS = {'semantic_consistency', 'modality_consistency', 'information_integrity',
              'x_semantic_reconstruction'}


def build(**overrides):
    torch.manual_seed(0)
    cfg = dict(type='DualEncoderRetriever', backbone=tiny_backbone_cfg())
    cfg.update(overrides)
    return MODELS.build(cfg)


def info_nce(a, b, scale):
    logits = scale * F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).t()
    labels = torch.arange(a.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


def test_plain_dual_encoder_contrasts_the_towers_own_embeddings():
    model = build()
    assert model.loss_names() == {'itc'} and model.loss_weights == {'itc': 1.0}
    data = model.data_preprocessor(BATCH, True)
    losses = model(mode='loss', **data)
    assert set(losses) == {'loss_itc'}
    image = model.backbone.encode_image(data['media'])
    text = model.backbone.encode_source_text(data['source_tokens'])
    torch.testing.assert_close(losses['loss_itc'], info_nce(image, text, 20.0),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('name', ['itc', 'tower_itc'])
def test_a_loss_masking_one_images_captions_reads_them_from_the_collated_media_ids(name):
    """Items 0 and 2 are two captions of image 'a': through the collate and the preprocessor,
    VSE++ with LAPS's mask skips their triplets, as ``itc`` or ``tower_itc``; a batch without
    media ids is refused."""
    media = ['a', 'b', 'a', 'd']
    items = [dict(media=BATCH['media'][row], media_id=media_id,
                  source_text=BATCH['source_text'][row], lang='de')
             for row, media_id in enumerate(media)]
    model = build(losses={name: dict(type='VSEHingeLoss', hardest_after_pairs=None,
                                     mask_same_media=True)})
    data = model.data_preprocessor(retrieval_collate(items), True)
    loss = model(mode='loss', **data)[f'loss_{name}']
    image = model.backbone.encode_image(data['media'])
    text = model.backbone.encode_source_text(data['source_tokens'])
    torch.testing.assert_close(loss, triplet_loop(image, text, 0.2, False, media))
    del data['media_keys']
    with pytest.raises(ValueError, match=rf"loss {name} \(VSEHingeLoss, mask_same_media=True\) "
                                         ".* carry no 'media_id'"):
        model(mode='loss', **data)


def test_distribution_sampling_plugs_into_the_plain_dual_encoder():
    model = build(losses=dict(itc=dict(type='InfoNCELoss', temperature=0.05),
                              distribution_sampling=dict(type='CDDSDistributionSamplingLoss',
                                                         temperature=0.1)))
    assert model.losses['distribution_sampling'].correlation.image_dim == 32
    model.set_phase('baseline+ds', dict(itc=1.0, distribution_sampling=0.5))
    data = model.data_preprocessor(BATCH, True)
    losses = model(mode='loss', **data)
    assert set(losses) == {'loss_itc', 'loss_distribution_sampling'}
    image = model.backbone.encode_image_tokens(data['media'])
    text = model.backbone.encode_text_tokens(data['source_tokens'])
    reference = CDDSDistributionSamplingLoss(dim=32, temperature=0.1)
    reference.load_state_dict(model.losses['distribution_sampling'].state_dict())
    torch.testing.assert_close(losses['loss_distribution_sampling'],
                               0.5 * reference(image.tokens, image.mask, text.tokens, text.mask))


def losses_and_disentangled(model, data: dict):
    """The phase's losses on ``data``, the towers' tokens and the disentangler's outputs on
    them, drawn from the same random stream as the losses were."""
    torch.manual_seed(1)
    losses = model(mode='loss', **data)
    image = model.backbone.encode_image_tokens(data['media'])
    text = model.backbone.encode_text_tokens(data['source_tokens'])
    torch.manual_seed(1)
    return losses, image, text, model.disentangler(image.tokens, image.mask, text.tokens,
                                                   text.mask)


def test_cdds_losses_are_the_disentanglers_terms_weighted_by_the_phase():
    model = build(disentangler=CDDS)
    assert model.loss_names() == {'disentangler', 'itc'}
    model.set_phase('cdds', dict(disentangler=2.0, itc=0.25))
    data = model.data_preprocessor(BATCH, True)
    losses, image, text, out = losses_and_disentangled(model, data)
    assert set(losses) == {f'loss_{name}' for name in CDDS_TERMS | {'itc'}}
    for name in CDDS_TERMS:
        torch.testing.assert_close(losses[f'loss_{name}'], 2.0 * out['losses'][f'loss_{name}'])
    expected_itc = info_nce(model.disentangler.pool(out['image_semantic'], image.mask),
                            model.disentangler.pool(out['text_semantic'], text.mask), 20.0)
    torch.testing.assert_close(losses['loss_itc'], 0.25 * expected_itc, rtol=1e-4, atol=1e-5)


def test_a_removed_constraint_is_not_computed_and_single_terms_are_not_weighable():
    model = build(disentangler=dict(CDDS, use_modality_consistency=False))
    with pytest.raises(KeyError, match=r"unknown loss weights \['modality_consistency'\]; "
                                       r"this model computes \['disentangler', 'itc'\]"):
        model.set_phase('cdds', dict(modality_consistency=1.0))
    data = model.data_preprocessor(BATCH, True)
    losses = model(mode='loss', **data)
    assert set(losses) == {f'loss_{n}' for n in CDDS_TERMS - {'modality_consistency'} | {'itc'}}
    model.set_phase('itc only', dict(itc=1.0, disentangler=0.0))
    assert set(model(mode='loss', **data)) == {'loss_itc'}


def test_tower_itc_contrasts_the_towers_own_embeddings_beneath_cdds():
    model = build(disentangler=CDDS, losses=dict(
        tower_itc=dict(type='InfoNCELoss', temperature=0.1)))
    model.set_phase('towers', dict(tower_itc=1.0))
    data = model.data_preprocessor(BATCH, True)
    losses = model(mode='loss', **data)
    assert set(losses) == {'loss_tower_itc'}
    image = model.backbone.encode_image(data['media'])
    text = model.backbone.encode_source_text(data['source_tokens'])
    torch.testing.assert_close(losses['loss_tower_itc'], info_nce(image, text, 10.0),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('disentangler_weight', [0.0, 1.0])
def test_itc_reads_the_semantic_components_and_tower_itc_the_towers_in_one_phase(
        disentangler_weight):
    """Whether or not the phase trains the disentangler, ``itc`` contrasts the pooled semantic
    components (what ``predict`` embeds) and ``tower_itc`` the towers' own embeddings."""
    model = build(disentangler=CDDS, losses=dict(
        itc=dict(type='InfoNCELoss', temperature=0.05),
        tower_itc=dict(type='InfoNCELoss', temperature=0.1)))
    model.set_phase('p', dict(itc=1.0, tower_itc=1.0, disentangler=disentangler_weight))
    data = model.data_preprocessor(BATCH, True)
    losses, image, text, out = losses_and_disentangled(model, data)
    expected_itc = info_nce(model.disentangler.pool(out['image_semantic'], image.mask),
                            model.disentangler.pool(out['text_semantic'], text.mask), 20.0)
    torch.testing.assert_close(losses['loss_itc'], expected_itc, rtol=1e-4, atol=1e-5)
    towers = info_nce(model.backbone.encode_image(data['media']),
                      model.backbone.encode_source_text(data['source_tokens']), 10.0)
    torch.testing.assert_close(losses['loss_tower_itc'], towers, rtol=1e-4, atol=1e-5)


def test_a_phase_that_does_not_weigh_the_disentangler_computes_none_of_its_terms(monkeypatch):
    """With itc alone the whole CDDS forward ran, distribution sampling and four terms, and
    its losses were dropped: about 40% of the tiny model's step."""
    from xmr.models.disentanglers.cdds.disentangler import CDDSDisentangler

    model = build(disentangler=CDDS)
    data = model.data_preprocessor(BATCH, True)
    model.set_phase('both', dict(itc=1.0, disentangler=1.0))
    torch.manual_seed(1)
    weighed = model(mode='loss', **data)['loss_itc']

    def computed(*args, **kwargs):
        raise AssertionError('the CDDS terms were computed')

    monkeypatch.setattr(CDDSDisentangler, 'forward', computed)
    model.set_phase('itc only', dict(itc=1.0, disentangler=0.0))
    torch.manual_seed(1)  # the UNets draw their perturbations alike
    torch.testing.assert_close(model(mode='loss', **data)['loss_itc'], weighed)


NO_TERMS = dict(CDDS, use_semantic_consistency=False, use_modality_consistency=False,
                use_information_integrity=False)


def test_a_cdds_disentangler_with_every_term_switched_off_is_no_loss_to_weigh():
    """Table 3's switches all off (the CDDS configs' losses=dict()) built and then failed at
    the first training step, after the backbone had loaded, with AttributeError: 'int'
    object has no attribute 'detach' (no loss to sum); beside itc the phase's 'disentangler'
    weight ran the UNets' sampling for nothing."""
    with pytest.raises(ValueError, match=r"weigh no loss this model computes \('disentangler' "
                                         r"scales a disentangler's losses, and its "
                                         r'CDDSDisentangler has every term switched off\)'):
        build(disentangler=NO_TERMS, losses=dict())
    model = build(disentangler=NO_TERMS)
    assert model.loss_names() == {'itc'}
    model.set_phase('cdds', dict(disentangler=1.0, itc=1.0))
    assert model.loss_weights == {'itc': 1.0}
    # The phase's log line said the model had no disentangler.
    phase = SimpleNamespace(loss_weights=dict(disentangler=1.0, itc=1.0))
    assert _losses_run(phase, model) == (
        "{'itc': 1.0} (not run: disentangler=1; the model has a disentangler with every term "
        "switched off for 'disentangler' to scale)")
    data = model.data_preprocessor(BATCH, True)
    losses = model(mode='loss', **data)
    assert set(losses) == {'loss_itc'}
    model.parse_losses(losses)[0].backward()
    assert any(p.grad is not None for p in model.disentangler.image_unet.parameters())


def test_frozen_towers_get_no_gradient_and_the_unets_do():
    model = build(disentangler=CDDS)
    data = model.data_preprocessor(BATCH, True)
    sum(model(mode='loss', **data).values()).backward()
    assert all(p.grad is None for p in model.backbone.parameters())
    assert all(p.grad is not None for p in model.disentangler.image_unet.parameters())
    assert model.losses['itc'].log_scale.grad is not None


def test_itc_alone_trains_both_unets_semantic_paths_and_no_modality_path():
    """Backward through every loss gave each UNet parameter a gradient from the CDDS terms
    alone, whether or not L_itc reached the UNets."""
    model = build(disentangler=CDDS)
    model.set_phase('itc', dict(itc=1.0))
    model(mode='loss', **model.data_preprocessor(BATCH, True))['loss_itc'].backward()
    for unet in (model.disentangler.image_unet, model.disentangler.text_unet):
        assert any(p.grad is not None and p.grad.abs().sum() > 0
                   for p in unet.semantic_decoder.parameters())
        assert any(p.grad is not None and p.grad.abs().sum() > 0
                   for p in unet.encoder.parameters())
        assert all(p.grad is None or not p.grad.any()
                   for p in unet.modality_decoder.parameters())


def test_predict_embeds_semantic_components_only():
    model = build(disentangler=CDDS).eval()
    batch = dict(media=BATCH['media'][:2], media_id=['a', 'b'], index=[5, 6],
                 captions=[{'en': ['a red circle', 'red circle']}, {'en': ['a blue square']}])
    outputs = model.val_step(batch)
    assert [o['media_id'] for o in outputs] == ['a', 'b'] and outputs[1]['index'] == 6
    data = model.data_preprocessor(batch, False)
    image = model.backbone.encode_image_tokens(data['media'])
    expected = F.normalize(model.disentangler.embed_image(image.tokens, image.mask), dim=-1)
    torch.testing.assert_close(torch.stack([o['media_embedding'] for o in outputs]), expected)
    tokens, _ = data['caption_tokens']['en']
    text = model.backbone.encode_text_tokens(tokens)
    captions = F.normalize(model.disentangler.embed_text(text.tokens, text.mask), dim=-1)
    torch.testing.assert_close(outputs[0]['caption_embeddings']['en'], captions[:2])
    torch.testing.assert_close(outputs[1]['caption_embeddings']['en'], captions[2:])
    with pytest.raises(KeyError, match=r"does not read language 'de'; languages: \['en'\]"):
        model.val_step(dict(batch, captions=[{'de': ['ein Kreis']}, {}]))


@pytest.mark.parametrize('change, fact', [
    (dict(num_heads=4), r"'num_heads': 2"),
    (dict(pooling='first'), r"'pooling': 'mean'"),
])
def test_a_checkpoint_of_other_cdds_settings_than_its_weights_hold_is_refused(change, fact):
    """The UNets' attention heads and the semantic tokens' pooling are in no weight's shape:
    a checkpoint loaded under others retrieved with other embeddings without a word."""
    checkpoint = build(disentangler=CDDS)
    assert checkpoint.checkpoint_facts()['disentangler_settings'] == dict(num_heads=2,
                                                                          pooling='mean')
    with pytest.raises(ValueError, match=r'disentangler_settings: checkpoint \{.*' + fact):
        build(disentangler=dict(CDDS, **change)).load_state_dict(checkpoint.state_dict())
    build(disentangler=CDDS).load_state_dict(checkpoint.state_dict())


def test_check_languages_names_those_the_model_does_not_read():
    model = build(disentangler=CDDS)
    model.check_languages(['en'], 'query')
    with pytest.raises(ValueError, match=r"test dataset x: the model does not read \['de'\]; it "
                                         r"reads \['en'\]"):
        model.check_languages(['en', 'de'], 'test dataset x')


def test_patch_word_retrieval_hands_the_semantic_tokens_and_the_score_to_the_metric():
    model = build(disentangler=CDDS, retrieval_score='patch_word').eval()
    batch = dict(media=BATCH['media'][:2], media_id=['a', 'b'],
                 captions=[{'en': ['a red circle', 'red circle']}, {'en': ['a blue square']}])
    outputs = model.val_step(batch)
    data = model.data_preprocessor(batch, False)
    image = model.backbone.encode_image_tokens(data['media'])
    semantic = model.disentangler.encode_image(image.tokens, image.mask)
    tokens, _ = data['caption_tokens']['en']
    text = model.backbone.encode_text_tokens(tokens)
    words = model.disentangler.encode_text(text.tokens, text.mask)
    torch.testing.assert_close(outputs[1]['media_tokens'], semantic[1][image.mask[1]])
    second_caption = outputs[0]['caption_tokens']['en'][1]
    assert second_caption.shape[0] == int(text.mask[1].sum()) < text.mask.shape[1]
    torch.testing.assert_close(second_caption, words[1][text.mask[1]])
    assert [len(o['caption_tokens']['en']) for o in outputs] == [2, 1]
    assert outputs[0]['token_score'] is patch_word_similarity
    assert 'media_tokens' not in build(disentangler=CDDS).eval().val_step(batch)[0]
    with pytest.raises(ValueError, match=r"retrieval_score 'words' is not one of"):
        build(retrieval_score='words')


def test_cross_lingual_setting_trains_on_the_target_captions():
    model = build(disentangler=CDDS, languages=['en', 'de', 'fr'], train_text='target')
    data = model.data_preprocessor(BATCH, True)
    assert model.training_text(data['source_tokens'], data['target_tokens'],
                               data['langs']) is data['target_tokens']
    assert set(model(mode='loss', **data)) == {f'loss_{n}' for n in CDDS_TERMS | {'itc'}}
    german_only = build(disentangler=CDDS, languages=['de'], train_text='target')
    with pytest.raises(ValueError, match=r"training captions: the model does not read \['fr'\]"):
        german_only(mode='loss', **german_only.data_preprocessor(BATCH, True))
    source_only = dict(BATCH, target_text=[None] * 4)
    with pytest.raises(ValueError, match="train_text='target' needs a 'target_text'"):
        model(mode='loss', **model.data_preprocessor(source_only, True))


def test_dataset_correlation_accumulates_semantic_statistics():
    model = build(disentangler=dict(CDDS, correlation=dict(mode='dataset')),
                  losses=dict(distribution_sampling=dict(type='CDDSDistributionSamplingLoss',
                                                         correlation=dict(mode='dataset'))))
    found = model.dataset_correlations()
    assert found == [model.disentangler.correlation,
                     model.losses['distribution_sampling'].correlation]
    model.eval()
    data = model.data_preprocessor(BATCH, False)
    model.accumulate_correlation(**data)
    image = model.backbone.encode_image_tokens(data['media'])
    text = model.backbone.encode_text_tokens(data['source_tokens'])
    semantic = model.disentangler.encode_image(image.tokens, image.mask)
    torch.testing.assert_close(model.disentangler.correlation.image_statistics,
                               column_statistics(semantic, image.mask), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.losses['distribution_sampling'].correlation.text_statistics,
                               column_statistics(text.tokens, text.mask))
    assert build(disentangler=CDDS).dataset_correlations() == []


def test_bad_configurations_are_named():
    with pytest.raises(KeyError, match=r"DualEncoderRetriever: unknown losses \['cm'\]"):
        build(losses=dict(cm=dict(type='InfoNCELoss')))
    with pytest.raises(ValueError, match="train_text 'both'"):
        build(train_text='both')
    with pytest.raises(ValueError, match='reads en captions, which are not among'):
        build(languages=['de'])
    other = build(languages=['en', 'de'])
    with pytest.raises(ValueError, match=r"languages: checkpoint \['en', 'de'\] vs config"):
        build().load_state_dict(other.state_dict())


def test_a_cdds_dim_other_than_the_backbones_token_width_is_refused_by_key_before_a_token():
    """It was met at the first forward (``UNet built for width 48, got tokens of width 40``),
    after the runner had made the work dir. The tokens are the projected ones: ``E`` = 40, not
    the text tower's width 32."""
    from tests.models.retrievers.test_cross_lingual import OwnBackbone

    backbone = dict(tiny_backbone_cfg(), model_cfg=dict(TINY_CLIP, embed_dim=40))
    cfg = dict(type='DualEncoderRetriever', backbone=backbone)
    refused = (r'^model\.disentangler\.dim={} but the backbone gives tokens of width 40 \(its '
               r"embed_dim\); leave dim out \(the backbone's is filled in\)$")
    for dim in (32, 48):
        with pytest.raises(ValueError, match=refused.format(dim)):
            check_part_options(MODELS, dict(cfg, disentangler=dict(CDDS, dim=dim)), 'model')
    check_part_options(MODELS, dict(cfg, disentangler=dict(CDDS, dim=40)), 'model')
    # A backbone whose config does not tell: its build refuses it, with the same message.
    with pytest.raises(ValueError, match=refused.format(48)):
        build(backbone=dict(backbone, type=OwnBackbone), disentangler=dict(CDDS, dim=48))


def test_checkpoint_facts_travel_as_a_tensor_and_refuse_another_model():
    model = build()
    state = model.state_dict()
    assert state['_extra_state'].dtype == torch.uint8  # DDP broadcasts state entries as tensors
    build().load_state_dict(state)
    other = build(languages=('en', 'de'))
    with pytest.raises(ValueError,
                       match=r"languages: checkpoint \['en'\] vs config \['en', 'de'\]"):
        other.load_state_dict(state)


@pytest.mark.skipif(not TOKENIZER_FILE.is_file(), reason=f'missing {TOKENIZER_FILE}')
def test_cdds_runs_on_multilingual_clip_token_outputs():
    model = build(backbone=tiny_mclip_cfg(), disentangler=CDDS)
    model.set_phase('cdds', dict(disentangler=1.0, itc=1.0))
    data = model.data_preprocessor(BATCH, True)
    losses = model(mode='loss', **data)
    assert set(losses) == {f'loss_{name}' for name in CDDS_TERMS | {'itc'}}
    sum(losses.values()).backward()
    assert all(p.grad is None for p in model.backbone.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0
               for p in model.disentangler.parameters() if p.requires_grad)


def test_languages_and_source_language_in_other_forms_are_the_canonical_codes():
    """``languages=['eng', 'deu']`` with ``source_language='EN'``: one language, read as the
    datasets' ``en`` and ``de``; no refusal of the source as missing from the languages."""
    model = build(languages=['eng', 'deu'], source_language='EN')
    assert model.languages == ['en', 'de'] and model.source_language == 'en'
    model.check_languages(['en', 'de'], 'test dataset x')


@pytest.mark.parametrize('options, error, message', [
    (dict(disentangler=dict(type='SemanticsDisentangler')), TypeError,
     '^DualEncoderRetriever runs disentanglers that subclass TokenDisentangler; '
     'SemanticsDisentangler does not'),
    (dict(train_text='src'), ValueError, "^train_text 'src' is not one of"),
    (dict(retrieval_score='words'), ValueError, "^retrieval_score 'words' is not one of"),
    (dict(languages=['de'], source_language='eng'), ValueError,
     r"^train_text='source' reads en captions, which are not among languages \['de'\]")])
def test_a_dual_encoder_its_config_alone_refuses_is_refused_as_the_config_loads(options, error,
                                                                                 message):
    """Refused as the model built, after the runner had made the work dir."""
    cfg = dict(type='DualEncoderRetriever', backbone=tiny_backbone_cfg(), **options)
    with pytest.raises(error, match=message):
        check_part_options(MODELS, cfg, 'model')
    with pytest.raises(error, match=message):
        MODELS.build(cfg)


def test_no_caption_languages_are_refused_as_the_config_loads_when_training_on_targets():
    """``train_text='target'`` reads no source caption, so only the emptiness check stands
    between ``languages=[]`` and a model that refuses every caption it is given."""
    cfg = dict(type='DualEncoderRetriever', backbone=tiny_backbone_cfg(), languages=[],
               train_text='target')
    message = '^the dual encoder needs at least one caption language$'
    with pytest.raises(ValueError, match=message):
        check_part_options(MODELS, cfg, 'model')
    with pytest.raises(ValueError, match=message):
        MODELS.build(cfg)


def test_a_text_only_backbone_is_refused_naming_the_token_encoders_it_lacks(
        tmp_path, sentence_encoder_module):
    """A :class:`TextBackbone` has no image tower: refused as the model builds, by its type,
    not by whichever image attribute is read first."""
    folder = tiny_sentence_encoder(tmp_path / 'teacher')
    with pytest.raises(TypeError, match=r'^SentenceEncoder is not a VisionLanguageBackbone, '
                                        r'whose token-level encoders the dual encoder reads$'):
        build(backbone=dict(type='SentenceEncoder', folder=str(folder)))


@pytest.mark.parametrize('missing, message', [
    ('source_tokens', "^train_text='source' needs 'source_text' in every batch$"),
    ('media', "^the dual encoder needs 'media' in every training batch$")])
def test_a_training_batch_without_what_the_dual_encoder_reads_is_refused_by_name(missing,
                                                                                 message):
    """A batch without the captions ``train_text`` picks, or without images, names the
    missing key rather than failing inside a tower."""
    model = build()
    data = model.data_preprocessor(BATCH, True)
    data[missing] = None
    with pytest.raises(ValueError, match=message):
        model(mode='loss', **data)


def test_itc_in_a_phase_that_trains_the_disentangler_reaches_both_unets():
    """``itc`` contrasts the pooled semantic components of the disentangler's own pass: its
    gradient alone must reach both UNets' semantic paths, not stop at the components."""
    model = build(disentangler=CDDS)
    model.set_phase('cdds', dict(disentangler=1.0, itc=1.0))
    losses = model(mode='loss', **model.data_preprocessor(BATCH, True))
    for unet in (model.disentangler.image_unet, model.disentangler.text_unet):
        parameters = list(unet.semantic_decoder.parameters())
        grads = torch.autograd.grad(losses['loss_itc'], parameters, retain_graph=True,
                                    allow_unused=True)
        assert any(g is not None and g.abs().sum() > 0 for g in grads)


def test_distribution_sampling_trains_both_towers_when_they_are_unfrozen():
    """The Table 4 plug-in aligns the towers themselves: with their weights trainable, its
    loss alone gives both the image and the text tower a gradient."""
    model = build(losses=dict(distribution_sampling=dict(type='CDDSDistributionSamplingLoss',
                                                         temperature=0.1)))
    model.backbone.requires_grad_(True)
    model(mode='loss', **model.data_preprocessor(BATCH, True))[
        'loss_distribution_sampling'].backward()
    clip = model.backbone.clip
    for tower in (clip.visual, clip.transformer):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in tower.parameters())


def test_a_plug_in_whose_correlation_is_per_batch_needs_no_dataset_pass():
    """Only a ``'dataset'``-mode correlation takes statistics from a pass over the dataset;
    the plug-in's default (per batch) is no dataset correlation, and accumulating a batch
    without media is refused by name."""
    model = build(losses=dict(distribution_sampling=dict(type='CDDSDistributionSamplingLoss')))
    assert model.losses['distribution_sampling'].correlation.mode == 'batch'
    assert model.dataset_correlations() == []
    data = model.data_preprocessor(BATCH, False)
    data['media'] = None
    with pytest.raises(ValueError, match="^accumulating the correlation needs 'media' in "
                                         'every batch$'):
        model.accumulate_correlation(**data)


def test_predicted_embeddings_and_tokens_carry_no_autograd_graph():
    """Called with autograd on, ``predict`` still hands the metric plain tensors: CDDS's
    semantic components come from UNets whose weights require gradients, and a graph kept
    for every gallery batch would hold the UNets' activations until the metric ends."""
    model = build(disentangler=CDDS, retrieval_score='patch_word').eval()
    batch = dict(media=BATCH['media'][:2], media_id=['a', 'b'],
                 captions=[{'en': ['a red circle']}, {'en': ['a blue square']}])
    with torch.enable_grad():
        outputs = model(mode='predict', **model.data_preprocessor(batch, False))
    for out in outputs:
        tensors = [out['media_embedding'], out['caption_embeddings']['en'],
                   out['media_tokens'], *out['caption_tokens']['en']]
        assert not any(t.requires_grad for t in tensors)


def test_real_tokens_are_float32_on_the_host_whatever_the_towers_precision():
    """Half-precision towers' tokens reach the metric in float32, each sample's real ones."""
    tokens = torch.arange(12, dtype=torch.bfloat16).reshape(2, 3, 2)
    mask = torch.tensor([[True, False, True], [False, True, False]])
    first, second = _real_tokens(tokens, mask)
    assert first.dtype == second.dtype == torch.float32
    torch.testing.assert_close(first, torch.tensor([[0., 1.], [4., 5.]]))
    torch.testing.assert_close(second, torch.tensor([[8., 9.]]))


def test_a_cdds_checkpoint_loaded_into_a_plain_dual_encoder_names_the_disentangler():
    """The facts name the disentangler's type (``None`` without one): a checkpoint of the
    other method says so rather than listing its keys."""
    cdds, plain = build(disentangler=CDDS), build()
    assert cdds.checkpoint_facts()['disentangler'] == 'CDDSDisentangler'
    assert plain.checkpoint_facts()['disentangler'] is None
    with pytest.raises(ValueError, match="disentangler: checkpoint 'CDDSDisentangler' vs "
                                         'config None'):
        plain.load_state_dict(cdds.state_dict())


def test_configured_languages_are_the_canonical_codes_the_built_model_reads():
    """Read from the config alone (``xmr.apis.trained_languages`` before a build): the codes
    in the datasets' form, ``('en',)`` when left out."""
    kind = MODELS.get('DualEncoderRetriever')
    assert kind.configured_languages(dict(languages=['eng', 'DE'])) == ['en', 'de']
    assert kind.configured_languages({}) == ['en']


def test_a_source_language_other_than_english_is_the_models_and_its_preprocessors():
    """``source_language='deu'``: the model and the preprocessor that tokenises the pairs'
    source captions both read German, in its canonical code."""
    model = build(languages=['en', 'de'], source_language='deu')
    assert model.source_language == 'de'
    assert model.data_preprocessor.source_language == 'de'
