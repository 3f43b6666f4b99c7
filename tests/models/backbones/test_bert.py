"""BertTextTower on the encoders the docs name for a user's own teacher (docs/custom_modules.md,
"A text-only backbone: your own teacher"): BERT, RoBERTa and XLM-R, against Hugging Face."""
import pytest
import torch
from transformers import (
    BertConfig,
    BertModel,
    RobertaConfig,
    RobertaModel,
    XLMRobertaConfig,
    XLMRobertaModel,
)

from xmr.models.backbones import BertTextTower
from xmr.models.language.tokenizers import pad_batch

SIZES = dict(vocab_size=20, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=32, max_position_embeddings=20)


class MeanPooledBertTower(BertTextTower):
    """The docs' sentence-transformers mean pooling."""

    pooling = 'mean'


@pytest.mark.parametrize('model_cls, config_cls, pad_id, offset', [
    (BertModel, BertConfig, 0, 0),
    (RobertaModel, RobertaConfig, 1, 2),
    (XLMRobertaModel, XLMRobertaConfig, 1, 2),
], ids=['bert', 'roberta', 'xlm-roberta'])
def test_mean_pooled_tower_equals_hugging_face(model_cls, config_cls, pad_id, offset):
    torch.manual_seed(0)
    model = model_cls(config_cls(pad_token_id=pad_id, **SIZES), add_pooling_layer=False).eval()
    tower = MeanPooledBertTower(model, embed_dim=None)
    # RoBERTa numbers real tokens from pad_id + 1: two positions fewer for text.
    assert (tower.position_offset, tower.context_length) == (offset, 20 - offset)
    tokens = pad_batch([[0, 5, 6, 7, 8, 2], [0, 9, 2]], pad_id)
    with torch.no_grad():
        hidden = model(input_ids=tokens['input_ids'],
                       attention_mask=tokens['attention_mask'].long()).last_hidden_state
        real = tokens['attention_mask'][..., None].float()
        expected = (hidden * real).sum(1) / real.sum(1)
        torch.testing.assert_close(tower(tokens), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('model_cls, config_cls, pad_id', [
    (BertModel, BertConfig, 0), (XLMRobertaModel, XLMRobertaConfig, 1)], ids=['bert', 'xlm-r'])
def test_a_tower_in_training_mode_drops_out_where_hugging_face_does(model_cls, config_cls,
                                                                     pad_id):
    """A tower a phase trains (CDDS's BERT) runs Hugging Face's dropout: on the embeddings, the
    attention weights and each sub-layer's output, drawn in the same order, so the same seed
    gives Hugging Face's training-mode states on the real tokens; in eval mode, none."""
    torch.manual_seed(0)
    model = model_cls(config_cls(pad_token_id=pad_id, hidden_dropout_prob=0.3,
                                 attention_probs_dropout_prob=0.3, **SIZES),
                      add_pooling_layer=False).train()
    tower = MeanPooledBertTower(model, embed_dim=None)
    tokens = pad_batch([[0, 5, 6, 7, 8, 2], [0, 9, 2]], pad_id)
    mask = tokens['attention_mask']

    def hidden_states() -> torch.Tensor:
        x = tower.add_positions(tower.embed_tokens(tokens['input_ids']), mask)
        return tower.encode_embeddings(x, mask)  # padded: masks drawn over [B, L, D]

    with torch.no_grad():
        torch.manual_seed(1)
        expected = model(input_ids=tokens['input_ids'],
                         attention_mask=mask.long()).last_hidden_state
        torch.manual_seed(1)
        torch.testing.assert_close(hidden_states()[mask], expected[mask], atol=1e-5, rtol=1e-5)
        assert not torch.allclose(hidden_states()[mask], expected[mask], atol=1e-2)
        model.eval()
        torch.testing.assert_close(hidden_states(), hidden_states(), atol=0, rtol=0)


def test_relative_position_embeddings_are_refused():
    config = BertConfig(**SIZES)
    bert = BertModel(config, add_pooling_layer=False)
    config.position_embedding_type = 'relative_key'
    with pytest.raises(TypeError, match="position_embedding_type='relative_key'"):
        BertTextTower(bert, embed_dim=None)
