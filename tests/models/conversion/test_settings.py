"""The settings of an xmr model that computes otherwise than the MLA / DASD authors' code."""
from __future__ import annotations

from torch import nn

from tests.models.conversion.test_authors import model_cfg
from xmr.models.conversion.settings import authors_differences
from xmr.registry import MODELS


def test_an_mla_model_with_a_condition_module_differs_from_the_authors():
    """MLA's code has no SDM: a condition module beside its static adapters (one a project
    registers; xmr's SDM needs dynamic adapters) computes otherwise."""
    model = MODELS.build(model_cfg('mla'))
    assert authors_differences(model, 'mla') == []
    model.disentangler = nn.Identity()
    assert authors_differences(model, 'mla') == [('model.disentangler', 'Identity', None)]
