"""A cross-lingual retriever on a text-only backbone: the docs' sentence encoder on a tiny random
BERT (docs/custom_modules.md), no image attributes anywhere."""
import pytest
import torch
import torch.nn.functional as F

from tests.conftest import tiny_sentence_encoder
from xmr.models.backbones import TextBackbone, VisionLanguageBackbone
from xmr.registry import MODELS

PAIRS = dict(source_text=['a man on the street', 'two dogs in the snow', 'a girl with a ball'],
             target_text=['ein Mann auf der Straße', 'zwei Hunde im Schnee',
                          'ein Mädchen mit einem Ball'],
             lang=['de', 'de', 'de'], media=None)
GALLERY = dict(media=None, media_id=['a', 'b', 'c'], index=[0, 1, 2],
               captions=[{'en': ['a man on the street'], 'de': ['ein Mann auf der Straße']},
                         {'en': ['two dogs in the snow'], 'de': ['zwei Hunde im Schnee']},
                         {'en': ['a girl with a ball'], 'de': ['ein Mädchen mit einem Ball']}])


@pytest.fixture
def teacher_folder(tmp_path):
    return tiny_sentence_encoder(tmp_path / 'teacher')


@pytest.fixture
def model(teacher_folder, sentence_encoder_module, shared_data):
    torch.manual_seed(0)
    return MODELS.build(dict(
        type='CrossLingualRetriever',
        backbone=dict(type='SentenceEncoder', folder=str(teacher_folder)),
        language_branch=dict(
            type='TargetLanguageBranch', languages=['de'],
            tokenizer=dict(type='HFTokenizer', max_length=32, tokenizer_file=str(
                shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json')),
            embedding=dict(type='TargetEmbedding', table_width=8, sparse=True),
            adapters=dict(type='StaticAdapter', hidden=4))))


def test_the_backbone_is_text_only(model):
    backbone = model.backbone
    assert isinstance(backbone, TextBackbone) and not isinstance(backbone, VisionLanguageBackbone)
    assert not hasattr(backbone, 'image_mean') and not hasattr(backbone, 'encode_image')
    assert backbone.text_tower.text_proj is None and backbone.embed_dim == 32


def test_the_teacher_embedding_is_the_normalised_mean_of_its_real_tokens(model, teacher_folder):
    """Against transformers' own BertModel read from the same folder, pooled and normalised as
    its modules say (Pooling(mean), Normalize: all-MiniLM-L6-v2's)."""
    from transformers import BertModel

    bert = BertModel.from_pretrained(teacher_folder, add_pooling_layer=False).eval()
    tokens = model.backbone.tokenizer(PAIRS['source_text'])
    with torch.no_grad():
        states = bert(input_ids=tokens['input_ids'],
                      attention_mask=tokens['attention_mask'].long()).last_hidden_state
        ours = model.backbone.encode_source_text(tokens)
    mask = tokens['attention_mask'].unsqueeze(-1).float()
    expected = F.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-5)


def test_text_pairs_train_the_branch_and_nothing_of_the_teacher(model):
    data = model.data_preprocessor(PAIRS, True)
    assert 'media' not in data
    model.set_phase('cross_lingual', dict(cl=1.0))
    losses = model(mode='loss', **data)
    r_source = model.backbone.encode_source_text(data['source_tokens'])
    r_target, _ = model.encode_target(data['target_tokens'], data['langs'])
    torch.testing.assert_close(losses['loss_cl'], ((r_target - r_source) ** 2).mean())
    losses['loss_cl'].backward()
    assert all(p.grad is None for p in model.backbone.parameters())
    assert model.language_branch.embedding.table.weight.grad is not None


@pytest.mark.parametrize('weights', [dict(cm=1.0), dict(cl=1.0, source_cm=0.5)])
def test_a_media_loss_is_refused_when_the_phase_is_checked(model, weights):
    with pytest.raises(ValueError, match=r"phase cross_modal weights \['(cm|source_cm)'\], which "
                       r'compare with media, but SentenceEncoder is a text-only backbone'):
        model.check_phase('cross_modal', weights)


def test_media_are_refused_naming_the_fix(model):
    with pytest.raises(TypeError, match="text-only backbone.*protocol='text_to_text'"):
        model.encode_media(torch.zeros(1, 3, 8, 8))
    with pytest.raises(ValueError, match="text-only backbone; give its datasets a text-only "
                       "annotation \\(media_type 'text'\\) or with_media=False"):
        model.data_preprocessor(dict(PAIRS, media=torch.zeros(3, 3, 8, 8, dtype=torch.uint8)))


def test_predict_embeds_the_captions_of_a_gallery_without_media(model):
    model.eval()
    items = model(mode='predict', **model.data_preprocessor(GALLERY))
    assert [item['media_id'] for item in items] == ['a', 'b', 'c']
    assert all('media_embedding' not in item for item in items)
    tokens = model.backbone.tokenizer(['two dogs in the snow'])
    with torch.no_grad():
        expected = F.normalize(model.backbone.encode_source_text(tokens), dim=-1)[0]
    torch.testing.assert_close(items[1]['caption_embeddings']['en'][0], expected)
    assert items[2]['caption_embeddings']['de'].shape == (1, 32)


def test_the_api_refuses_media_for_a_text_only_model(model):
    from xmr.apis import encode_media

    with pytest.raises(TypeError, match='SentenceEncoder is a text-only backbone.*encode_texts'):
        encode_media(model, ['image.jpg'])


def test_a_media_protocol_is_refused_before_training(model):
    """The loop refuses, before the first step, a validation metric that ranks media on a
    text-only backbone (it failed at the first validation, val_interval steps in)."""
    from types import SimpleNamespace

    from mmengine.evaluator import Evaluator

    from xmr.engine.loops import PhasedTrainLoop
    from xmr.evaluation.metrics.retrieval import RetrievalMetric

    def check(protocol: str) -> None:
        val_loop = SimpleNamespace(evaluator=Evaluator([RetrievalMetric(protocol=protocol)]))
        PhasedTrainLoop._check_val_protocols(SimpleNamespace(model=model), val_loop)

    check('text_to_text')
    with pytest.raises(ValueError, match=r"protocol='standard'\) ranks media, but "
                                         r"SentenceEncoder is a text-only backbone"):
        check('standard')
