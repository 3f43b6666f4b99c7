"""LanguageAdapters: keyed by every language code, Tongan's ``to`` (a Module method) included;
the settings they record; whether a language's blocks run packed tokens."""
from __future__ import annotations

import torch

from tests.conftest import tiny_branch_cfg, tiny_retriever_cfg
from xmr.models.adapters import (
    AdapterContext,
    AdapterSite,
    BaseAdapter,
    LanguageAdapters,
)
from xmr.models.backbones.base import block_linear_shapes
from xmr.models.language.language_modules import load_language_module, save_language_module
from xmr.registry import ADAPTERS, MODELS


def test_tongan_whose_code_names_a_module_method_is_a_target_language(tmp_path):
    """ISO 639-1 ``to`` (Tongan) is also ``nn.Module.to``, a name ``add_module`` refuses: the
    model is built, saves and loads its adapters under ``sets.to``, and ``.to()`` still moves
    it."""
    torch.manual_seed(0)
    model = MODELS.build(tiny_retriever_cfg(
        language_branch=tiny_branch_cfg(languages=['to', 'de']))).eval()
    assert model.languages == ['to', 'de']
    assert any(key.startswith('language_branch.adapters.sets.to.') for key in model.state_dict())
    assert model.to(torch.float32) is model
    tokens = model.language_branch.tokenize(['ko e pusi', 'ko e pusi'])
    with torch.no_grad():
        for parameter in model.language_branch.adapters.sets['to'].parameters():
            parameter.normal_(std=0.1)
        tongan = model.encode_text(tokens, 'to')
    assert not torch.equal(tongan, model.encode_text(tokens, 'de'))

    torch.manual_seed(0)
    receiver = MODELS.build(tiny_retriever_cfg(
        language_branch=tiny_branch_cfg(languages=['to', 'de']))).eval()
    load_language_module(receiver, save_language_module(model, 'to', tmp_path / 'to.pth'))
    with torch.no_grad():
        assert torch.equal(receiver.encode_text(tokens, 'to'), tongan)


def test_the_settings_list_each_distinct_nonempty_setting_once():
    """A static adapter computes with nothing but its weights: it records no setting, where
    LoRA records its scale once for both languages and all its sites."""
    static = dict(type='StaticAdapter', hidden=4)
    lora = dict(type='LoRA', r=2, alpha=4)
    shapes = block_linear_shapes(8, 32)
    assert LanguageAdapters(['de', 'fr'], static, 8, 2).settings() == []
    assert LanguageAdapters(['de', 'fr'], [static, lora], 8, 2, shapes).settings() == [
        {'scale': 2.0, 'type': 'LoRA'}]


@ADAPTERS.register_module(name='_TestTokenMixer', force=True)
class _TokenMixer(BaseAdapter):
    """Adds the sequence mean: it mixes tokens, so it cannot take packed ones."""

    sites = (AdapterSite.MLP_OUTPUT,)

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        """``[B, L, D] -> [B, L, D]``."""
        return x + x.mean(dim=1, keepdim=True)


def test_one_block_adapter_refusing_packed_tokens_makes_the_language_run_padded():
    """Packed tokens need every block adapter of the language to take them."""
    static = dict(type='StaticAdapter', hidden=4, sites=['block.output'])
    assert LanguageAdapters(['de'], static, 8, 2).accepts_packed_tokens('de')
    mixed = LanguageAdapters(['de'], [static, dict(type='_TestTokenMixer')], 8, 2)
    assert mixed.sets['de']['0:block_output'].accepts_packed_tokens
    assert not mixed.accepts_packed_tokens('de')
