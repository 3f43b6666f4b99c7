"""Packed tokens: the blocks run on the real tokens only and give the padded batch's outputs
and gradients, for both kinds of tower, every adapter type, the DASD branch and the SDM."""
from __future__ import annotations

import pytest
import torch

from tests.conftest import randomise, tiny_backbone_cfg, tiny_branch_cfg, tiny_retriever_cfg
from xmr.models.adapters.base import AdapterContext, AdapterSite, BaseAdapter
from xmr.models.adapters.language_adapters import LanguageAdapters
from xmr.models.backbones.bert import BertTextTower, build_bert
from xmr.models.backbones.cclm import CCLM_TEXT
from xmr.models.language.packed_tokens import PackedTokens
from xmr.registry import ADAPTERS, MODELS

LENGTHS = (6, 2, 4, 1, 5)


def test_pack_and_unpack_by_hand():
    mask = torch.tensor([[True, True, False], [True, False, True]])
    packed = PackedTokens(mask, bias=torch.zeros(2, 1, 3, 3))
    x = torch.arange(12.).view(2, 3, 2)
    assert packed.num_tokens == 4
    assert packed.index.tolist() == [0, 1, 3, 5]
    assert packed.sample_index.tolist() == [0, 0, 1, 1]
    assert packed.pack(x).tolist() == [[0, 1], [2, 3], [6, 7], [10, 11]]
    rows = torch.tensor([[1., 2.], [3., 4.], [5., 6.], [7., 8.]], requires_grad=True)
    unpacked = packed.unpack(rows)
    assert unpacked.tolist() == [[[1, 2], [3, 4], [0, 0]], [[5, 6], [0, 0], [7, 8]]]
    weight = torch.arange(12.).view(2, 3, 2)
    (unpacked * weight).sum().backward()
    assert rows.grad.tolist() == [[0, 1], [2, 3], [6, 7], [10, 11]]


def test_a_run_of_samples_owns_a_run_of_packed_tokens():
    mask = torch.tensor([[True, True, False], [True, False, False], [True, True, True]])
    packed = PackedTokens(mask, bias=torch.arange(9.).view(3, 1, 3, 1))
    sub, tokens = packed.samples(slice(1, 3))
    assert tokens == slice(2, 6)
    assert sub.index.tolist() == [0, 3, 4, 5]
    assert sub.bias.flatten().tolist() == [3, 4, 5, 6, 7, 8]
    assert packed.samples(slice(0, 1))[1] == slice(0, 2)


def open_clip_tower():
    torch.manual_seed(0)
    return MODELS.build(tiny_backbone_cfg()).text_tower


def bert_tower():
    bert = build_bert(dict(CCLM_TEXT, vocab_size=50, hidden_size=32, num_layers=2, num_heads=4,
                           intermediate_size=64, max_position_embeddings=16))
    tower = BertTextTower(bert, 16)
    randomise(tower, 0)
    return tower.eval()


ADAPTER_SETS = {
    'static': [dict(type='StaticAdapter', hidden=8, sites=['attn.output', 'mlp.output',
                                                           'block.output'])],
    'lora': [dict(type='LoRA', r=4, targets=['q', 'k', 'v', 'out', 'fc', 'proj'])],
    'houlsby+compacter': [dict(type='HoulsbyAdapter', hidden=8),
                          dict(type='CompacterAdapter', reduction_factor=4, phm_dim=4,
                               sites=['block.output'])],
    'dynamic': [dict(type='DynamicAdapter', hidden=4)],
}


def batch(tower, lengths=LENGTHS):
    lengths = torch.tensor(lengths)
    longest = int(lengths.max())
    mask = torch.arange(longest)[None] < lengths[:, None]
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(len(lengths), longest, tower.width, generator=generator)
    return tower.add_positions(x).detach().requires_grad_(), mask, lengths - 1


def encode(tower, adapters, x, mask, eos, condition, pack):
    tower.pack_tokens = pack
    ctx = AdapterContext(lang='de', condition=condition, attention_mask=mask, eos_index=eos)
    ctx.packed = tower.packing(mask) if adapters.accepts_packed_tokens('de') else None
    assert (ctx.packed is not None) == pack
    hidden = tower.encode_embeddings(x, mask, hooks=adapters.hooks(ctx), packed=ctx.packed)
    return tower.head(tower.pool(hidden, mask, eos)), hidden


@pytest.mark.parametrize('make_tower', [open_clip_tower, bert_tower], ids=['clip', 'bert'])
@pytest.mark.parametrize('adapter_set', list(ADAPTER_SETS))
def test_packed_blocks_give_the_padded_outputs_and_gradients(make_tower, adapter_set):
    tower = make_tower()
    adapters = LanguageAdapters(['de'], ADAPTER_SETS[adapter_set], tower.width,
                                tower.num_blocks, tower.linear_shapes())
    randomise(adapters, 1)
    x, mask, eos = batch(tower)
    generator = torch.Generator().manual_seed(4)
    condition = {i: torch.randn(len(LENGTHS), 4, 4, generator=generator)
                 for i in range(tower.num_blocks)}
    results = []
    for pack in (False, True):
        pooled, hidden = encode(tower, adapters, x, mask, eos, condition, pack)
        grads = torch.autograd.grad(pooled.square().sum(), [x, *adapters.parameters()])
        results.append((pooled, hidden[mask], grads))
    (padded, padded_hidden, padded_grads), (packed, packed_hidden, packed_grads) = results
    assert not torch.allclose(padded, encode(tower, LanguageAdapters(
        ['de'], [], tower.width, tower.num_blocks), x, mask, eos, None, True)[0])
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed_hidden, padded_hidden, rtol=1e-5, atol=1e-5)
    for got, expected in zip(packed_grads, padded_grads):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    # The padded positions of x get no gradient either way: padding never reaches r.
    assert padded_grads[0][~mask].abs().max() == 0


def test_blocks_see_only_the_real_tokens_when_packed():
    tower = open_clip_tower()
    adapters = LanguageAdapters(['de'], ADAPTER_SETS['static'], tower.width, tower.num_blocks)
    seen = []
    for module in adapters.modules():
        if isinstance(module, BaseAdapter):
            module.register_forward_hook(lambda _, args, out: seen.append(tuple(args[0].shape)))
    x, mask, eos = batch(tower)
    encode(tower, adapters, x, mask, eos, None, True)
    assert set(seen) == {(sum(LENGTHS), tower.width)}
    seen.clear()
    encode(tower, adapters, x, mask, eos, None, False)
    assert set(seen) == {(len(LENGTHS), max(LENGTHS), tower.width)}


def test_packing_is_skipped_without_padding_or_when_switched_off():
    tower = open_clip_tower()
    full = torch.ones(3, 4, dtype=torch.bool)
    assert tower.packing(full) is None
    mask = full.clone()
    mask[0, 3] = False
    assert isinstance(tower.packing(mask), PackedTokens)
    tower.pack_tokens = False
    assert tower.packing(mask) is None


@ADAPTERS.register_module(name='_TestSequenceMeanAdapter', force=True)
class SequenceMeanAdapter(BaseAdapter):
    """Mixes tokens (adds the sequence mean), so it must see ``[B, L, D]``."""

    sites = (AdapterSite.MLP_OUTPUT,)

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        assert x.dim() == 3, 'a token-mixing adapter was given packed tokens'
        weights = ctx.attention_mask.to(x.dtype).unsqueeze(-1)
        return x + (x * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True)


def test_a_language_with_an_adapter_that_does_not_accept_packed_tokens_runs_padded():
    torch.manual_seed(0)
    retriever = MODELS.build(tiny_retriever_cfg(language_branch=tiny_branch_cfg(
        adapters=[dict(type='StaticAdapter', hidden=8),
                  dict(type='_TestSequenceMeanAdapter')])))
    branch = retriever.language_branch
    assert not branch.adapters.accepts_packed_tokens('de')
    tokens = branch.tokenize(['ein roter Kreis', 'zwei blaue Quadrate links oben'])
    assert not tokens['attention_mask'].all()
    with torch.no_grad():
        mixed = branch(tokens, ['de', 'de'])
        branch.tower.pack_tokens = False
        torch.testing.assert_close(branch(tokens, ['de', 'de']), mixed)


def test_dasd_branch_and_sdm_give_the_padded_results_and_gradients():
    torch.manual_seed(0)
    dasd = MODELS.build(tiny_retriever_cfg(
        language_branch=tiny_branch_cfg(adapters=dict(type='DynamicAdapter', hidden=4)),
        disentangler=dict(type='SemanticsDisentangler', adapter=dict(type='StaticAdapter',
                                                                     hidden=8),
                          generator=dict(d_z=16, d_u=4))))
    randomise(dasd.language_branch.adapters, 1)
    randomise(dasd.disentangler, 2)
    texts = ['ein roter Kreis', '一个蓝色的正方形', 'zwei rote Kreise links oben und unten',
             '一个绿色的三角形']
    langs = ['de', 'zh', 'de', 'zh']
    tokens = dasd.language_branch.tokenize(texts)
    trainable = [p for n, p in dasd.named_parameters()
                 if n.startswith(('language_branch.', 'disentangler.'))]
    results = []
    for pack in (False, True):
        dasd.backbone.text_tower.pack_tokens = pack
        r_target, _ = dasd.encode_target(tokens, langs)
        results.append((r_target, torch.autograd.grad(r_target.square().sum(), trainable,
                                                      allow_unused=True)))
    (padded, padded_grads), (packed, packed_grads) = results
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-5)
    assert sum(g is not None for g in packed_grads) > 10
    for got, expected in zip(packed_grads, padded_grads):
        if expected is None:
            assert got is None
        else:
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_source_tower_packed_equals_padded(tiny_retriever):
    backbone = tiny_retriever.backbone
    tokens = backbone.tokenizer(['a red circle', 'two blue squares on the left of a triangle',
                                 'one'])
    with torch.no_grad():
        packed = backbone.encode_source_text(tokens)
        token_level = backbone.encode_text_tokens(tokens)
        backbone.text_tower.pack_tokens = False
        padded = backbone.encode_source_text(tokens)
        padded_tokens = backbone.encode_text_tokens(tokens)
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-5)
    mask = tokens['attention_mask']
    torch.testing.assert_close(token_level.tokens[mask], padded_tokens.tokens[mask],
                               rtol=1e-5, atol=1e-5)


def test_auto_packing_packs_on_the_cpu_only():
    tower = open_clip_tower()
    assert tower.pack_tokens == 'auto'
    mask = torch.tensor([[True, True, False], [True, True, True]])
    assert tower.packing(mask) is not None
    # On any other device the padded batch runs: the answer needs no look at the mask (a meta
    # tensor has no values to read).
    assert tower.packing(mask.to('meta')) is None
    tower.pack_tokens = True
    with pytest.raises(RuntimeError, match='meta'):
        tower.packing(mask.to('meta'))
