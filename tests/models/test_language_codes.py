"""Models and the encoding API take language codes in any accepted form."""
import pytest
import torch

from tests.conftest import tiny_branch_cfg, tiny_retriever_cfg
from xmr.apis import encode_texts
from xmr.registry import MODELS


def test_branch_languages_and_queries_are_canonical():
    torch.manual_seed(0)
    model = MODELS.build(tiny_retriever_cfg(
        language_branch=tiny_branch_cfg(languages=['swh_Latn', 'jp'])))
    assert model.language_branch.languages == ['sw', 'ja']
    model.eval()
    by_flores = encode_texts(model, ['paka mdogo'], 'swh_Latn')
    assert torch.equal(by_flores, encode_texts(model, ['paka mdogo'], 'sw'))
    with pytest.raises(ValueError, match="encode_texts lang: unknown language code 'swahili'"):
        encode_texts(model, ['paka'], 'swahili')
