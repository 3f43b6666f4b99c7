"""PECTVLM's routines: which text each one trains and queries with, and its losses by hand."""
import pytest
import torch
import torch.nn.functional as F
from mmengine.optim import OptimWrapper

from tests.conftest import tiny_backbone_cfg, tiny_branch_cfg
from xmr.datasets.collate import media_keys
from xmr.registry import MODELS, UnknownOptionError, check_part_options

# Every text differs, so a routine that reads the wrong one cannot match the expected loss.
BATCH = dict(
    # Drawn from its own seed: at import, the global stream's state depends on what was
    # collected before (one such state made a wrong text's loss land within 1e-3).
    media=torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8,
                        generator=torch.Generator().manual_seed(0)),
    source_text=['a red circle', 'two blue squares', 'a green triangle'],
    target_text=['ein roter Kreis', 'zwei blaue Quadrate', 'ein grünes Dreieck'],
    source_to_target_text=['ein rotes Rund', 'zwei blaue Vierecke', 'ein grüner Dreier'],
    target_to_source_text=['one red round', 'a pair of blue squares', 'green triangle'],
    lang=['de', 'de', 'zh'], media_id=['a', 'b', 'c'], index=[0, 1, 2])
QUERY_TEXT = {'target_only': 'target_text', 'routine1': 'target_text',
              'routine2': 'target_text', 'translate_test': 'target_to_source_text',
              'routine3': 'target_to_source_text'}
PARTNER_TEXT = {'routine1': 'source_text', 'routine2': 'source_to_target_text',
                'routine3': 'source_text'}


def build(routine, **kwargs):
    torch.manual_seed(0)
    cfg = dict(type='TranslationAlignmentRetriever', routine=routine,
               backbone=tiny_backbone_cfg(),
               language_branch=tiny_branch_cfg(
                   adapters=dict(type='LoRA', r=2, targets=['q', 'v', 'out'])))
    cfg.update(kwargs)
    model = MODELS.build(cfg)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if 'lora_B' in name:
                parameter.normal_(std=0.1)
    return model


def branch_embed(model, texts, langs):
    return model.language_branch(model.language_branch.tokenize(texts), langs)


def info_nce(a, b, scale=100.0):
    logits = scale * F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).t()
    labels = torch.arange(a.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


@pytest.mark.parametrize('routine', sorted(QUERY_TEXT))
def test_image_text_loss_uses_the_routines_query_text(routine):
    model = build(routine)
    data = model.data_preprocessor(BATCH, True)
    model.set_phase('train', dict(cm=1.0))
    losses = model(mode='loss', **data)
    r_media = model.backbone.encode_media(data['media'])
    expected = info_nce(branch_embed(model, BATCH[QUERY_TEXT[routine]], BATCH['lang']), r_media)
    torch.testing.assert_close(losses['loss_cm'], expected, rtol=1e-4, atol=1e-5)
    swapped = 'target_text' if QUERY_TEXT[routine] != 'target_text' else 'target_to_source_text'
    wrong = info_nce(branch_embed(model, BATCH[swapped], BATCH['lang']), r_media)
    assert not torch.allclose(losses['loss_cm'], wrong, rtol=1e-3)


@pytest.mark.parametrize('routine', sorted(PARTNER_TEXT))
@pytest.mark.parametrize('kind', ['mse', 'contrastive'])
def test_alignment_pairs_the_query_with_the_routines_translation(routine, kind):
    model = build(routine, losses=dict(align=dict(type='TranslationAlignmentLoss', kind=kind)))
    data = model.data_preprocessor(BATCH, True)
    model.set_phase('train', dict(cm=1.0, align=0.3))
    losses = model(mode='loss', **data)
    query = branch_embed(model, BATCH[QUERY_TEXT[routine]], BATCH['lang'])
    partner = branch_embed(model, BATCH[PARTNER_TEXT[routine]], BATCH['lang'])
    expected = ((query - partner) ** 2).mean() if kind == 'mse' else info_nce(query, partner)
    torch.testing.assert_close(losses['loss_align'], 0.3 * expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize('name', ['cm', 'align'])
def test_a_loss_built_to_mask_reads_the_batchs_media_keys(name):
    """An InfoNCE ``cm`` (query and image) or ``align`` (query and translation) masking one
    image's captions: rows 0 and 2 caption one image, so their cross pairs leave both
    directions' softmax."""
    model = build('routine1', losses={name: dict(type='InfoNCELoss', temperature=0.01,
                                                 mask_same_media=True)})
    data = model.data_preprocessor({**BATCH, 'media_keys': media_keys(['a', 'b', 'a'])}, True)
    model.set_phase('train', {name: 1.0})
    loss = model(mode='loss', **data)[f'loss_{name}']
    query = F.normalize(branch_embed(model, BATCH['target_text'], BATCH['lang']), dim=-1)
    partner = (model.backbone.encode_media(data['media']) if name == 'cm'
               else branch_embed(model, BATCH['source_text'], BATCH['lang']))
    logits = 100 * query @ F.normalize(partner, dim=-1).t()
    logits[0, 2] = logits[2, 0] = float('-inf')
    labels = torch.arange(3)
    expected = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)


def test_frozen_english_encoder_aligns_with_the_frozen_tower():
    model = build('routine1', english_encoder='frozen')
    data = model.data_preprocessor(BATCH, True)
    assert 'source_branch_tokens' not in data
    model.set_phase('train', dict(align=1.0))
    losses = model(mode='loss', **data)
    query = branch_embed(model, BATCH['target_text'], BATCH['lang'])
    teacher = model.backbone.encode_source_text(model.backbone.tokenizer(BATCH['source_text']))
    torch.testing.assert_close(losses['loss_align'], ((query - teacher) ** 2).mean())
    # Cached features stand for the frozen tower's r^S (their captions go untokenised).
    cached = model.data_preprocessor(dict(BATCH, source_features=teacher.detach()), True)
    assert 'source_tokens' not in cached
    torch.testing.assert_close(model(mode='loss', **cached)['loss_align'], losses['loss_align'])


EVAL_BATCH = dict(
    media=torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8,
                        generator=torch.Generator().manual_seed(1)), media_id=['a', 'b'],
    index=[0, 1],
    captions=[{'en': ['a red circle'], 'de': ['ein roter Kreis']},
              {'en': ['two blue squares'], 'de': ['zwei blaue Quadrate']}],
    back_translations=[{'de': ['one red round']}, {'de': ['a pair of blue squares']}])


@pytest.mark.parametrize('routine', sorted(QUERY_TEXT))
def test_test_time_queries_follow_the_routine(routine):
    model = build(routine)
    model.eval()
    outputs = model(mode='predict', **model.data_preprocessor(EVAL_BATCH, False))
    native = [c['de'][0] for c in EVAL_BATCH['captions']]
    back = [b['de'][0] for b in EVAL_BATCH['back_translations']]
    texts = back if QUERY_TEXT[routine] == 'target_to_source_text' else native
    with torch.no_grad():
        expected = F.normalize(branch_embed(model, texts, ['de', 'de']), dim=-1)
        english = F.normalize(model.backbone.encode_source_text(model.backbone.tokenizer(
            [c['en'][0] for c in EVAL_BATCH['captions']])), dim=-1)
    for row, out in enumerate(outputs):
        torch.testing.assert_close(out['caption_embeddings']['de'][0], expected[row],
                                   atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(out['caption_embeddings']['en'][0], english[row],
                                   atol=1e-5, rtol=1e-4)
    # What the model queries with is what its preprocessor says it does: the texts the counts
    # before a test (tools/test.py) and xmr.apis read.
    queried = 'back_translations' if QUERY_TEXT[routine] == 'target_to_source_text' else 'captions'
    assert model.data_preprocessor.query_texts('de')[0] == queried
    assert model.data_preprocessor.query_texts('en') == ('captions', None)


def test_translate_test_without_back_translations_names_the_dataset_option():
    model = build('routine3')
    batch = {k: v for k, v in EVAL_BATCH.items() if k != 'back_translations'}
    with pytest.raises(ValueError, match=r"back_translated_languages=\[..., 'de'\]"):
        model(mode='predict', **model.data_preprocessor(batch, False))


@pytest.mark.parametrize('routine', sorted(QUERY_TEXT))
def test_a_gallery_without_the_back_translations_queried_is_refused_before_encoding(routine):
    """Translate-test and routine 3 need every target language's back-translations; the other
    routines never read them."""
    model = build(routine)
    plain = dict(languages=['en', 'de', 'zh'], back_translated_languages=[])
    if QUERY_TEXT[routine] != 'target_to_source_text':
        model.check_gallery(plain, 'val dataset 0 (val.json)')
        return
    model.check_gallery(dict(plain, back_translated_languages=['de', 'zh']), 'val')
    with pytest.raises(ValueError, match=(
            rf"^val dataset 0 \(val.json\): routine '{routine}' queries \['zh'\] with their "
            r'captions machine-translated into the source language; give the evaluation dataset '
            r"back_translated_languages=\[..., 'zh'\] \(attached to its file with "
            r'tools/data/attach_back_translations.py')):
        model.check_gallery(dict(plain, back_translated_languages=['de']),
                            'val dataset 0 (val.json)')


def test_missing_training_translation_names_the_dataset_option():
    model = build('routine2')
    batch = {k: v for k, v in BATCH.items() if k != 'source_to_target_text'}
    model.set_phase('train', dict(cm=1.0, align=0.1))
    with pytest.raises(ValueError, match=r"source_to_target_tokens.*translated_texts="
                                         r"\['source_to_target'\]"):
        model(mode='loss', **model.data_preprocessor(batch, True))


def test_baselines_refuse_an_alignment_weight_and_unknown_names_fail():
    with pytest.raises(ValueError, match="'translate_test' is a baseline"):
        build('translate_test').set_phase('train', dict(cm=1.0, align=0.1))
    with pytest.raises(ValueError, match="unknown routine 'method3'"):
        build('method3')
    with pytest.raises(KeyError, match=r"unknown loss weights \['cl'\]"):
        build('routine1').set_phase('train', dict(cl=1.0))


@pytest.mark.parametrize('routine', ['routine1', 'routine2', 'routine3'])
def test_a_routine_with_a_partner_refuses_a_schedule_that_never_aligns(routine):
    """Set on a baseline's config, such a routine trained the baseline under its own name."""
    model = build(routine)
    model.check_schedule({'warmup': dict(cm=1.0), 'train': dict(cm=1.0, align=0.1)})
    with pytest.raises(ValueError, match=(
            rf"routine '{routine}' aligns .* no phase of \['train', 'warmup'\] weighs align")):
        model.check_schedule({'warmup': dict(cm=1.0), 'train': dict(cm=1.0, align=0)})
    for baseline in ('target_only', 'translate_test'):
        build(baseline).check_schedule({'train': dict(cm=1.0)})


def test_one_step_moves_only_the_trained_languages_module():
    model = build('routine3', losses=dict(align=dict(type='TranslationAlignmentLoss',
                                                     kind='contrastive')))
    model.set_phase('train', dict(cm=1.0, align=0.1))
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith('language_branch.adapters.'))
    before = {k: v.clone() for k, v in model.state_dict().items()
              if isinstance(v, torch.Tensor)}
    optim = OptimWrapper(torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad], lr=0.5))
    batch = {k: (v[:2] if isinstance(v, (list, torch.Tensor)) else v) for k, v in BATCH.items()}
    model.train_step(batch, optim)
    moved = {k for k, v in model.state_dict().items()
             if k in before and not torch.equal(v, before[k])}
    assert moved and all(k.startswith('language_branch.adapters.sets.de.') for k in moved)


def test_checkpoint_state_names_the_routine():
    model = build('routine3')
    assert model.get_extra_state()['routine'] == 'routine3'
    with pytest.raises(ValueError, match="routine: checkpoint 'routine3' vs config 'routine1'"):
        build('routine1').set_extra_state(model.get_extra_state())


def test_a_preprocessor_config_without_a_type_is_checked_as_the_translation_ones():
    """Its options go to TranslationDataPreprocessor, which takes source_through_branch; the
    cross-lingual retriever's RetrievalDataPreprocessor does not."""
    options = dict(backbone=tiny_backbone_cfg(), language_branch=tiny_branch_cfg(),
                   data_preprocessor=dict(source_through_branch=True))
    check_part_options(MODELS, dict(type='TranslationAlignmentRetriever', routine='routine1',
                                    **options), 'model')
    with pytest.raises(UnknownOptionError, match=(
            r"^model\.data_preprocessor\.source_through_branch: model "
            r"RetrievalDataPreprocessor: unknown option 'source_through_branch'")):
        check_part_options(MODELS, dict(type='CrossLingualRetriever', **options), 'model')


@pytest.mark.parametrize('options, error, message', [
    (dict(english_encoder='teacher'), ValueError,
     r"^english_encoder 'teacher' is not one of \('branch', 'frozen'\)$"),
    (dict(disentangler=dict(type='SemanticsDisentangler')), ValueError,
     '^TranslationAlignmentRetriever takes no disentangler$'),
    (dict(language_branch=None), ValueError,
     '^TranslationAlignmentRetriever needs a language_branch'),
    (dict(data_preprocessor=dict(type='RetrievalDataPreprocessor')), TypeError,
     '^TranslationAlignmentRetriever reads the translated texts a TranslationDataPreprocessor '
     'tokenises; got RetrievalDataPreprocessor$')])
def test_a_translation_retriever_it_cannot_train_is_refused_as_it_builds(options, error,
                                                                        message):
    """Each option would build a cross-lingual retriever that trains or queries something
    other than the routine says (no per-language modules, untokenised translations)."""
    with pytest.raises(error, match=message):
        build('routine1', **options)


def test_a_training_batch_without_languages_is_refused_by_name():
    """Each text goes through its language's module: a batch without ``lang`` names the
    missing key rather than failing inside the branch."""
    model = build('target_only')
    data = model.data_preprocessor(BATCH, True)
    data['langs'] = None
    with pytest.raises(ValueError, match="^this phase's losses need 'lang' in every batch$"):
        model(mode='loss', **data)


def test_a_frozen_english_partner_without_source_captions_or_features_is_refused_by_name():
    """The frozen tower reads the source captions (or their cached features): a batch with
    neither names what routine 1 needs."""
    model = build('routine1', english_encoder='frozen')
    model.set_phase('train', dict(cm=1.0, align=1.0))
    data = model.data_preprocessor(BATCH, True)
    data['source_tokens'] = None
    with pytest.raises(ValueError, match="^routine 'routine1' needs source_text in every batch$"):
        model(mode='loss', **data)


def test_the_frozen_english_encoder_leaves_routine2s_translated_partner_on_the_branch():
    """``english_encoder`` concerns the original English only: routine 2 still aligns with
    the English MT'd into the target language, through the target branch."""
    model = build('routine2', english_encoder='frozen')
    model.set_phase('train', dict(align=1.0))
    losses = model(mode='loss', **model.data_preprocessor(BATCH, True))
    query = branch_embed(model, BATCH['target_text'], BATCH['lang'])
    partner = branch_embed(model, BATCH['source_to_target_text'], BATCH['lang'])
    torch.testing.assert_close(losses['loss_align'], ((query - partner) ** 2).mean())


def test_cached_media_features_replace_the_image_tower_in_the_routines_image_text_loss():
    """``media_features`` (a feature cache) stand for the image tower: InfoNCE (scale 100)
    between the query text and them, as rows ``[E]`` too."""
    model = build('routine3')
    model.set_phase('train', dict(cm=1.0))
    cached = torch.randn(3, 32, generator=torch.Generator().manual_seed(3))
    data = model.data_preprocessor(BATCH, True)
    loss = model(mode='loss', **data, media_features=list(cached))['loss_cm']
    query = branch_embed(model, BATCH['target_to_source_text'], BATCH['lang'])
    torch.testing.assert_close(loss, info_nce(query, cached), rtol=1e-4, atol=1e-5)


def test_the_partner_is_encoded_with_each_captions_own_language_module():
    """A batch listing Chinese first: query and partner of every row go through the module
    of that row's language."""
    order = [2, 0, 1]
    batch = {k: ([v[i] for i in order] if isinstance(v, list) else v[order])
             for k, v in BATCH.items()}
    assert batch['lang'] == ['zh', 'de', 'de']
    model = build('routine2')
    model.set_phase('train', dict(cm=1.0, align=1.0))
    losses = model(mode='loss', **model.data_preprocessor(batch, True))
    query = branch_embed(model, batch['target_text'], batch['lang'])
    partner = branch_embed(model, batch['source_to_target_text'], batch['lang'])
    torch.testing.assert_close(losses['loss_align'], ((query - partner) ** 2).mean())


def test_a_media_only_gallery_batch_is_embedded_under_a_back_translating_routine():
    """``xmr.apis.encode_media`` hands ``predict`` media without captions: routines that
    query with back-translations have none to swap in, and embed the media."""
    model = build('routine3').eval()
    batch = {k: EVAL_BATCH[k] for k in ('media', 'media_id', 'index')}
    outputs = model(mode='predict', **model.data_preprocessor(batch, False))
    with torch.no_grad():
        expected = F.normalize(model.backbone.encode_media(
            model.data_preprocessor(batch, False)['media']), dim=-1)
    torch.testing.assert_close(torch.stack([o['media_embedding'] for o in outputs]), expected)


def test_a_baseline_takes_an_alignment_weight_of_zero():
    """A zero weight runs no alignment: a baseline's phase may carry one (a schedule shared
    with the routines), as any loss weighted 0 is dropped."""
    model = build('target_only')
    model.set_phase('train', dict(cm=1.0, align=0.0))
    assert model.loss_weights == {'cm': 1.0}


@pytest.mark.parametrize('routine', ['target_only', 'routine1'])
def test_a_model_before_any_phase_trains_the_image_text_loss_alone(routine):
    """Not the cross-lingual retriever's ``cl``, which this model does not build: a step
    before any phase is set computes ``cm`` with weight 1."""
    model = build(routine)
    assert model.loss_weights == {'cm': 1.0}
    data = model.data_preprocessor(BATCH, True)
    losses = model(mode='loss', **data)
    assert set(losses) == {'loss_cm'}
    query = branch_embed(model, BATCH[QUERY_TEXT[routine]], BATCH['lang'])
    expected = info_nce(query, model.backbone.encode_media(data['media']))
    torch.testing.assert_close(losses['loss_cm'], expected, rtol=1e-4, atol=1e-5)


def test_a_missing_back_translation_of_the_training_queries_names_the_dataset_option():
    """Routine 3 queries with the target captions MT'd into English: a batch without them
    names the dataset option that adds them."""
    model = build('routine3')
    batch = {k: v for k, v in BATCH.items() if k != 'target_to_source_text'}
    with pytest.raises(ValueError, match=r"^routine 'routine3' reads target_to_source_tokens in "
                                         r"every training batch; give the dataset "
                                         r"translated_texts=\['target_to_source'\] and the "
                                         r'model the TranslationDataPreprocessor$'):
        model(mode='loss', **model.data_preprocessor(batch, True))
