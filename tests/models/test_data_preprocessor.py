"""RetrievalDataPreprocessor: the source prompt is written before source-language texts only;
evaluation captions go through the tokenizer's evaluation batch."""
import pytest
import torch

from tests.conftest import tiny_backbone_cfg, tiny_branch_cfg
from tests.models.backbones.test_cclm import TOKENIZER_FILE, needs_tokenizer
from tests.models.backbones.test_cclm import tiny_cfg as cclm_tiny_cfg
from tests.models.test_translation_data_preprocessor import RecordingTokenizer
from xmr.models.data_preprocessor import RetrievalDataPreprocessor
from xmr.registry import MODELS


def test_the_source_prompt_prefixes_source_texts_and_nothing_else():
    # Options alone: the retriever gives its preprocessor's type.
    model = MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                              language_branch=tiny_branch_cfg(languages=['de']),
                              data_preprocessor=dict(source_prompt='a photo of')))
    preprocessor = model.data_preprocessor
    out = preprocessor(dict(
        source_text=['a red circle'], target_text=['ein roter Kreis'], lang=['de'],
        captions=[{'en': ['a blue square'], 'de': ['ein blaues Quadrat']}]), False)
    source, target = preprocessor.source_tokenizer, preprocessor.target_tokenizer
    expected = {'source_tokens': source(['a photo of a red circle'], ['en']),
                'target_tokens': target(['ein roter Kreis'], ['de'])}
    expected_captions = {'en': source(['a photo of a blue square'], ['en']),
                         'de': target(['ein blaues Quadrat'], ['de'])}
    for key, tokens in expected.items():
        assert torch.equal(out[key]['input_ids'], tokens['input_ids']), key
    for lang, tokens in expected_captions.items():
        assert torch.equal(out['caption_tokens'][lang][0]['input_ids'], tokens['input_ids']), lang
    plain = MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                              language_branch=tiny_branch_cfg(languages=['de'])))
    unprompted = plain.data_preprocessor(dict(source_text=['a red circle']), False)
    assert not torch.equal(unprompted['source_tokens']['input_ids'],
                           expected['source_tokens']['input_ids'])


def test_a_batch_with_cached_source_features_leaves_its_source_captions_untokenised():
    model = MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                              language_branch=tiny_branch_cfg(languages=['de'])))
    features = torch.randn(1, 32)
    out = model.data_preprocessor(dict(source_text=['a red circle'], source_features=features,
                                       target_text=['ein roter Kreis'], lang=['de']), True)
    assert 'source_tokens' not in out
    assert torch.equal(out['source_features'], features)
    assert out['target_tokens']['input_ids'].shape[0] == 1


def test_caption_owners_stay_on_the_host_while_the_tokens_go_to_the_device():
    model = MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                              language_branch=tiny_branch_cfg(languages=['de'])))
    # The meta device stands in for a GPU: what is cast goes there, what is not stays here.
    preprocessor = model.data_preprocessor.to('meta')
    captions = [{'de': ['ein Kreis', 'zwei Kreise']}, {'de': ['ein Quadrat']}]
    out = preprocessor(dict(source_text=['a red circle'], captions=captions), False)
    tokens, owner = out['caption_tokens']['de']
    assert out['source_tokens']['input_ids'].device.type == 'meta'
    assert tokens['input_ids'].device.type == 'meta'
    assert owner.device.type == 'cpu' and owner.tolist() == [0, 0, 1]


def test_a_batch_with_a_source_only_item_gets_no_target_tokens():
    """Target tokens come for every row or none: rows and languages stay aligned."""
    model = MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                              language_branch=tiny_branch_cfg(languages=['de'])))
    out = model.data_preprocessor(dict(source_text=['a red circle', 'a blue square'],
                                       target_text=['ein roter Kreis', None],
                                       lang=['de', None]), True)
    assert out['source_tokens']['input_ids'].shape[0] == 2
    assert 'target_tokens' not in out and 'langs' not in out


def test_the_batch_s_languages_ids_and_indices_are_its_own_lists_on_the_host():
    model = MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                              language_branch=tiny_branch_cfg(languages=['de', 'fr'])))
    preprocessor = model.data_preprocessor.to('meta')  # a GPU's stand-in, as above
    tokens = preprocessor.tokenize(dict(target_text=['ein Kreis', 'un carré'], lang=['de', 'fr']))
    batch = dict(tokens=tokens, media_id=['m0', 'm1'], index=[3, 7])
    out = preprocessor(batch, True)
    # Not copied element by element (MMEngine's cast_data would rebuild each list).
    assert out['langs'] is tokens['langs'] and out['langs'] == ['de', 'fr']
    assert out['media_ids'] is batch['media_id'] and out['indices'] is batch['index']
    assert out['target_tokens']['input_ids'].device.type == 'meta'


@needs_tokenizer
def test_cclm_evaluation_ranks_every_xtd10_german_caption_and_training_refuses_an_empty_one(
        shared_data):
    """XTD10's German captions 262 and 768 are '?', which CCLM's caption cleaning empties: an
    evaluation batch still encodes all 1,000 (those two as <s></s>), a training pair refuses."""
    captions = (shared_data / 'xtd10' / 'test_1kcaptions_de.txt').read_text(
        encoding='utf-8').splitlines()
    model = MODELS.build(dict(
        type='CrossLingualRetriever', backbone=cclm_tiny_cfg(),
        language_branch=dict(type='TargetLanguageBranch', languages=['de'],
                             tokenizer=dict(type='CCLMTokenizer',
                                            tokenizer_file=str(TOKENIZER_FILE)),
                             embedding=dict(type='TowerTokenEmbedding'),
                             adapters=dict(type='StaticAdapter', hidden=4))))
    tokens, owner = model.data_preprocessor(
        dict(captions=[{'de': [caption]} for caption in captions]), False)['caption_tokens']['de']
    assert tokens['input_ids'].shape[0] == 1000 and owner.tolist() == list(range(1000))
    assert [i for i, caption in enumerate(captions) if caption == '?'] == [261, 767]
    assert tokens['eos_index'][[261, 767]].tolist() == [1, 1]
    assert tokens['input_ids'][[261, 767], :2].tolist() == [[0, 2], [0, 2]]
    assert int((tokens['eos_index'] == 1).sum()) == 2
    with torch.no_grad():
        out = model.val_step(dict(
            media=torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8),
            captions=[{'de': [captions[260]]}, {'de': [captions[261]]}],
            media_id=['a', 'b'], index=[0, 1]))
    assert [tuple(item['caption_embeddings']['de'].shape) for item in out] == [(1, 16), (1, 16)]
    with pytest.raises(ValueError, match=r"caption '\?' is empty after CCLM's caption cleaning"):
        model.data_preprocessor(dict(source_text=['a dog'], target_text=['?'], lang=['de']), True)


def test_media_are_scaled_from_uint8_by_hand_and_float_media_are_refused():
    """A float image in 0..255 from a dataset of one's own trained silently on values 255 times
    too large: only the uint8 the datasets give is read."""
    model = MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                              language_branch=tiny_branch_cfg(languages=['de'])))
    preprocessor = model.data_preprocessor
    media = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    mean, std = preprocessor.mean.flatten().tolist(), preprocessor.std.flatten().tolist()
    expected = torch.stack([(media[:, c].double() / 255 - mean[c]) / std[c] for c in range(3)], 1)
    torch.testing.assert_close(preprocessor.normalize_media(media).double(), expected,
                               atol=1e-6, rtol=0)
    for given in (media.float(), media.float() / 255):
        with pytest.raises(ValueError, match=r"the batch's media are torch.float32, not uint8 "
                                             r'\[..., 3, H, W\] in 0..255'):
            preprocessor(dict(media=given, source_text=['a'] * 2), True)


def _bound(mean=(0.5, 0.25, 0.0), std=(0.5, 0.25, 1.0), target=True,
           source_language='en') -> RetrievalDataPreprocessor:
    preprocessor = RetrievalDataPreprocessor()
    target_tokenizer = RecordingTokenizer('target') if target else None
    preprocessor.bind(RecordingTokenizer('source'), target_tokenizer, mean, std, source_language)
    return preprocessor


def test_media_are_normalised_with_the_bound_mean_and_std_each_in_its_channel():
    """0, 255 and 51 in channel 0 (mean 0.5, std 0.5) are -1, 1 and -0.6; in channel 1 (mean
    and std 0.25) -1, 3 and -0.2; 51 in channel 2 (mean 0, std 1) is 0.2."""
    media = torch.tensor([[[[0, 255, 51]], [[0, 255, 51]], [[51, 51, 51]]]], dtype=torch.uint8)
    out = _bound().normalize_media(media)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out[0, :, 0], torch.tensor([[-1.0, 1.0, -0.6],
                                                           [-1.0, 3.0, -0.2],
                                                           [0.2, 0.2, 0.2]]))


def test_media_come_out_on_the_statistics_device_in_the_model_s_dtype():
    """A bf16 model meets bf16 media; the meta device stands in for a GPU."""
    media = torch.randint(0, 256, (2, 4, 3, 2, 2), dtype=torch.uint8)
    half = _bound().to(torch.bfloat16).normalize_media(media)
    assert half.dtype == torch.bfloat16 and half.shape == (2, 4, 3, 2, 2)
    assert _bound().to('meta').normalize_media(media).device.type == 'meta'


def test_media_for_a_text_only_backbone_are_refused_and_absent_media_are_skipped():
    text_only = _bound(mean=None, std=None)
    media = torch.zeros(1, 3, 2, 2, dtype=torch.uint8)
    with pytest.raises(ValueError, match='the batch carries media but the model has a '
                                         'text-only backbone'):
        text_only(dict(media=media, source_text=['a']), True)
    out = text_only(dict(media=None, source_text=['a']), True)
    assert 'media' not in out and out['source_tokens'] == [('source', 'a', 'en')]


def test_a_caption_in_the_source_language_goes_to_the_source_tokenizer_whatever_the_key():
    """An English-target pair reads its English target with the source tokenizer; a model with
    another source language (zh) writes that language; a model without a target branch names
    the language it cannot read."""
    out = _bound().tokenize(dict(target_text=['a dog'], lang=['en']))
    assert out['target_tokens'] == [('source', 'a dog', 'en')] and out['langs'] == ['en']
    chinese = _bound(source_language='zh').tokenize(dict(source_text=['一只猫'],
                                                         target_text=['a cat'], lang=['en']))
    assert chinese['source_tokens'] == [('source', '一只猫', 'zh')]
    assert chinese['target_tokens'] == [('target', 'a cat', 'en')]
    with pytest.raises(RuntimeError, match="no tokenizer bound for language 'de': the model has "
                                           'no target-language branch'):
        _bound(target=False).tokenize(dict(target_text=['ein Hund'], lang=['de']))


def test_a_language_without_captions_in_the_batch_gets_no_group_and_owners_are_int64():
    out = _bound().tokenize(dict(captions=[{'en': ['a'], 'de': []}, {'en': ['b', 'c']}]))
    assert list(out['caption_tokens']) == ['en']
    tokens, owner = out['caption_tokens']['en']
    assert tokens == [('source', text, 'en') for text in 'abc']
    assert owner.dtype == torch.int64 and owner.tolist() == [0, 1, 1]


def test_media_keys_and_cached_features_pass_through_the_batch():
    keys, features = torch.tensor([4, 9]), torch.randn(2, 5)
    out = _bound()(dict(media_keys=keys, target_features=features), True)
    assert torch.equal(out['media_keys'], keys) and torch.equal(out['target_features'], features)
