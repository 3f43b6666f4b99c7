"""The tower's own token embedding as the target branch's embedding block."""
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import tiny_backbone_cfg, tiny_branch_cfg
from xmr.models.language.tower_embedding import TowerTokenEmbedding, check_tower_tokenizer
from xmr.registry import MODELS


@pytest.fixture(scope='module')
def backbone():
    torch.manual_seed(0)
    return MODELS.build(tiny_backbone_cfg())


def test_it_embeds_with_the_towers_own_table(backbone):
    tower = backbone.text_tower
    embedding = TowerTokenEmbedding(tower, vocab_size=tower.vocab_size, width=tower.width)
    ids = torch.tensor([[49406, 320, 49407], [49406, 49407, 0]])
    table = backbone.clip.token_embedding.weight
    torch.testing.assert_close(embedding(ids), table[ids])
    assert not list(embedding.parameters())  # held, not registered


def test_a_tokenizer_emitting_one_id_more_than_the_tower_embeds_is_refused(backbone):
    tower = backbone.text_tower
    with pytest.raises(ValueError, match=r'the tokenizer emits 49409 ids but the tower embeds '
                                         r"49408; TowerTokenEmbedding needs the tower's own"):
        TowerTokenEmbedding(tower, vocab_size=tower.vocab_size + 1, width=tower.width)


def test_a_target_tokenizer_other_than_the_tower_s_own_is_refused():
    """A 48-piece SentencePiece vocabulary built and ran: its ids read as CLIP BPE tokens."""
    branch = dict(tiny_branch_cfg(), embedding=dict(type='TowerTokenEmbedding'))
    with pytest.raises(ValueError, match=r"model.language_branch.tokenizer: TowerTokenEmbedding "
                                         r"embeds with the text tower's own table, which reads the "
                                         r"source tokenizer's ids \(vocabulary [0-9a-f]{16}, 49408 "
                                         r'ids\), and the target tokenizer has another vocabulary '
                                         r'\([0-9a-f]{16}, 48 ids\)'):
        MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                          language_branch=branch))
    branch['tokenizer'] = dict(type='OpenCLIPTokenizer', model_name='ViT-B-32', max_length=24)
    MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                      language_branch=branch))


def test_a_tokenizer_that_cannot_list_its_vocabulary_is_not_compared():
    """A digest of None on either side (a tokenizer that cannot list its vocabulary) is no
    evidence of another vocabulary: nothing is refused."""
    listed = SimpleNamespace(vocabulary_digest=lambda: '0123456789abcdef', vocab_size=10)
    unlisted = SimpleNamespace(vocabulary_digest=lambda: None, vocab_size=10)
    check_tower_tokenizer(listed, unlisted)
    check_tower_tokenizer(unlisted, listed)
    check_tower_tokenizer(unlisted, unlisted)
