"""The settings of an xmr model that computes otherwise than the MLA / DASD authors' code."""
from __future__ import annotations

from torch import nn

from tests.models.conversion.test_authors import model_cfg
from xmr.models.conversion.settings import authors_differences
from xmr.models.language.embedding import TargetEmbedding
from xmr.registry import MODELS


def test_an_mla_model_with_a_condition_module_differs_from_the_authors():
    """MLA's code has no SDM: a condition module beside its static adapters (one a project
    registers; xmr's SDM needs dynamic adapters) computes otherwise."""
    model = MODELS.build(model_cfg('mla'))
    assert authors_differences(model, 'mla') == []
    model.disentangler = nn.Identity()
    assert authors_differences(model, 'mla') == [('model.disentangler', 'Identity', None)]


def test_an_embedding_block_of_another_type_differs_even_with_the_same_weights():
    """A subclass of ``TargetEmbedding`` (one a project registers) has the table and ``W_e``
    the file fills but may compute otherwise: only the authors' block itself is accepted."""
    class ProjectEmbedding(TargetEmbedding):
        pass

    model = MODELS.build(model_cfg('mla'))
    embedding = model.language_branch.embedding
    model.language_branch.embedding = ProjectEmbedding(embedding.table.num_embeddings,
                                                      embedding.proj.out_features,
                                                      table_width=embedding.table.embedding_dim)
    assert authors_differences(model, 'mla') == [
        ('model.language_branch.embedding.type', 'ProjectEmbedding', 'TargetEmbedding')]


def test_a_backbone_without_a_clip_differs_from_the_authors():
    """Their towers are OpenAI's CLIP: a backbone with no open_clip model (a dual-stream
    CCLM) is named by its type, where converting it would fail on a missing ``clip``."""
    model = MODELS.build(model_cfg('mla'))
    model.backbone = nn.Identity()
    assert authors_differences(model, 'mla') == [
        ('model.backbone.type', 'Identity', 'OpenCLIPBackbone')]
