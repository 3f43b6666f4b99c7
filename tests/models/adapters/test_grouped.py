"""Grouped calls: every language's adapter at a site in one call, equal to each language alone."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import MIXED_BATCH, randomise, tiny_branch_cfg, tiny_retriever_cfg
from xmr.models.adapters import (
    AdapterContext,
    AdapterSite,
    DynamicAdapter,
    LanguageAdapters,
    LanguageMembership,
)
from xmr.models.adapters.grouped import GroupedAdapter, spread
from xmr.models.language.packed_tokens import PackedTokens
from xmr.registry import ADAPTERS, MODELS

WIDTH, D_U, LENGTH = 12, 4, 5
#: An interleaved batch: a grouped call needs no order of samples.
LANGS = ['de', 'zh', 'de', 'fr', 'de', 'fr']
SAMPLES = {'de': [0, 2, 4], 'zh': [1], 'fr': [3, 5]}
LENGTHS = [5, 2, 4, 3, 5, 1]


def test_spread_places_each_row_in_its_languages_block():
    x = torch.tensor([[1., 2.], [3., 4.], [5., 6.]])
    one_hot = torch.tensor([[1., 0.], [0., 1.], [0., 1.]])
    assert spread(x, one_hot).tolist() == [[1, 2, 0, 0], [0, 0, 3, 4], [0, 0, 5, 6]]
    matrices = torch.arange(8.).view(2, 2, 2)
    placed = spread(matrices, one_hot[:2], dim=1)                       # [2, 4, 2]
    torch.testing.assert_close(placed[0], torch.cat([matrices[0], torch.zeros(2, 2)]))
    torch.testing.assert_close(placed[1], torch.cat([torch.zeros(2, 2), matrices[1]]))


def test_membership_is_a_one_hot_of_the_languages_per_sample_or_per_token():
    membership = LanguageMembership(LANGS, torch.device('cpu'))
    assert membership.languages == ('de', 'zh', 'fr')
    de, zh, fr = [1., 0., 0.], [0., 1., 0.], [0., 0., 1.]
    expected = torch.tensor([de, zh, de, fr, de, fr])
    padded = membership.rows(torch.float64, None)
    assert padded.shape == (6, 1, 3) and padded.dtype == torch.float64
    torch.testing.assert_close(padded.squeeze(1), expected.double())
    assert membership.rows(torch.float64, None) is padded
    mask = torch.arange(LENGTH)[None] < torch.tensor(LENGTHS)[:, None]
    per_token = membership.rows(torch.float32, PackedTokens(mask, torch.zeros(6, 1, 5, 5)))
    torch.testing.assert_close(per_token, expected.repeat_interleave(torch.tensor(LENGTHS), 0))


def test_a_membership_in_a_given_order_is_the_same_for_every_mix_of_the_languages():
    order = ('fr', 'ja', 'de', 'zh')  # a branch's languages; ja is in neither batch
    first = LanguageMembership(LANGS, torch.device('cpu'), order)
    second = LanguageMembership(['zh', 'fr', 'fr', 'de', 'zh', 'de'], torch.device('cpu'), order)
    assert first.languages == second.languages == ('fr', 'de', 'zh')
    assert first.columns.tolist() == [1, 2, 1, 0, 1, 0]
    assert second.columns.tolist() == [2, 0, 0, 1, 2, 1]
    assert len(first) == 6
    fr, de, zh = [1., 0., 0.], [0., 1., 0.], [0., 0., 1.]
    torch.testing.assert_close(first.one_hot(), torch.tensor([de, zh, de, fr, de, fr]))


def adapters_and_inputs():
    adapters = LanguageAdapters(list(SAMPLES), dict(type='DynamicAdapter', hidden=D_U), WIDTH, 3)
    randomise(adapters, 1)
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(6, LENGTH, WIDTH, generator=generator, requires_grad=True)
    condition = {1: torch.randn(6, D_U, D_U, generator=generator)}
    return adapters, x, condition


@pytest.mark.parametrize('pack', [False, True], ids=['padded', 'packed'])
def test_a_grouped_dynamic_call_equals_each_language_on_its_rows(pack):
    """Outputs and the gradients of the input, every language's weights and each sample's
    ``W^z`` (the parameter generator trains through them)."""
    adapters, x, condition = adapters_and_inputs()
    condition[1].requires_grad_()
    at_block = [adapters.sets[lang]['1:block_output'] for lang in SAMPLES]
    # Each language alone, its adapter's own forward on its padded samples.
    alone = torch.empty_like(x)
    for adapter, (lang, samples) in zip(at_block, SAMPLES.items()):
        alone[samples] = adapter(x[samples], AdapterContext(
            lang=lang, block_index=1, condition={1: condition[1][samples]}))
    mask = torch.arange(LENGTH)[None] < torch.tensor(LENGTHS)[:, None]
    packed = PackedTokens(mask, torch.zeros(6, 1, LENGTH, LENGTH)) if pack else None
    ctx = AdapterContext(lang='de+zh+fr', block_index=1, condition=condition, packed=packed,
                         membership=LanguageMembership(LANGS, x.device))
    grouped = DynamicAdapter.forward_grouped(at_block, packed.pack(x) if pack else x, ctx)
    if pack:
        alone = packed.pack(alone)
    torch.testing.assert_close(grouped, alone, rtol=1e-5, atol=1e-6)
    inputs = [x, condition[1], *adapters.parameters()]
    got = torch.autograd.grad(grouped.square().sum(), inputs, allow_unused=True)
    want = torch.autograd.grad(alone.square().sum(), inputs, allow_unused=True)
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def gradient_copies(adapters, x, condition) -> int:
    """Copies autograd makes to give the grouped call's gradients their parameters' layouts."""
    from torch.profiler import ProfilerActivity, profile

    at_block = [adapters.sets[lang]['1:block_output'] for lang in SAMPLES]
    ctx = AdapterContext(lang='de+zh+fr', block_index=1, condition=condition,
                         membership=LanguageMembership(LANGS, x.device))
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        DynamicAdapter.forward_grouped(at_block, x, ctx).square().sum().backward()
    copies = 0
    for event in profiler.events():
        parent = event.cpu_parent
        while event.name == 'aten::copy_' and parent is not None:
            if 'AccumulateGrad' in parent.name:
                copies += 1
                break
            parent = parent.cpu_parent
    return copies


def test_a_grouped_call_gives_each_language_its_gradients_without_copying_them():
    adapters, x, condition = adapters_and_inputs()
    assert gradient_copies(adapters, x, condition) == 0
    for placed in adapters.sets.values():
        up = placed['1:block_output'].up.weight
        assert up.shape == (WIDTH, D_U) and up.grad.stride() == up.stride() == (1, WIDTH)
    # Row-major up-projections (nn.Linear's own layout): one copy per language.
    adapters, x, condition = adapters_and_inputs()
    for placed in adapters.sets.values():
        linear = placed['1:block_output'].up
        linear.weight = torch.nn.Parameter(linear.weight.detach().contiguous())
    assert gradient_copies(adapters, x, condition) == len(SAMPLES)


def test_hooks_group_a_site_only_where_every_language_holds_the_class(monkeypatch):
    adapters, x, condition = adapters_and_inputs()
    calls = []
    forward, forward_grouped = DynamicAdapter.forward, DynamicAdapter.forward_grouped.__func__
    monkeypatch.setattr(DynamicAdapter, 'forward',
                        lambda self, *a: calls.append(self) or forward(self, *a))
    monkeypatch.setattr(DynamicAdapter, 'forward_grouped', classmethod(
        lambda cls, group, *a: calls.append(tuple(group)) or forward_grouped(cls, group, *a)))
    # The per-language path needs each language's samples contiguous: sort them.
    order = [index for samples in SAMPLES.values() for index in samples]
    x, condition = x[order], {1: condition[1][order]}
    rows = {'de': slice(0, 3), 'zh': slice(3, 4), 'fr': slice(4, 6)}
    contexts = [AdapterContext(lang=lang, condition={1: condition[1][span]}, rows=span)
                for lang, span in rows.items()]
    joint = AdapterContext(lang='de+zh+fr', condition=condition,
                           membership=LanguageMembership([LANGS[i] for i in order], x.device))
    hooks = adapters.hooks(*contexts, grouped=joint)
    hooks.residual(AdapterSite.BLOCK_OUTPUT, 1, x)
    assert calls == [tuple(adapters.sets[lang]['1:block_output'] for lang in SAMPLES)]

    calls.clear()
    del adapters.sets['zh']['1:block_output']
    out = hooks.residual(AdapterSite.BLOCK_OUTPUT, 1, x)
    assert calls == [adapters.sets['de']['1:block_output'], adapters.sets['fr']['1:block_output']]
    torch.testing.assert_close(out[rows['zh']], x[rows['zh']])

    calls.clear()
    adapters.hooks(*contexts).residual(AdapterSite.BLOCK_OUTPUT, 1, x)
    assert calls == [adapters.sets['de']['1:block_output'], adapters.sets['fr']['1:block_output']]


def test_a_grouped_context_of_one_language_runs_its_adapters():
    """A compiled evaluation reads one language as a membership, without routes: the hooks make
    the grouped call, equal to the language's own adapter (it once left the input as it was)."""
    adapters, x, condition = adapters_and_inputs()
    only_de = AdapterContext(lang='de', condition=condition,
                             membership=LanguageMembership(['de'] * 6, x.device))
    out = adapters.hooks(grouped=only_de).residual(AdapterSite.BLOCK_OUTPUT, 1, x)
    own = adapters.sets['de']['1:block_output'](x, AdapterContext(lang='de', block_index=1,
                                                                  condition=condition))
    torch.testing.assert_close(out, own, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(out, x)


class GroupedLinearDelta(GroupedAdapter):
    """A grouped adapter at a linear site: ``delta = up(down(x))``, all languages in one call
    (each language's bottleneck spread into its block of one wide bottleneck)."""

    sites = (AdapterSite.MLP_FC,)
    accepts_packed_tokens = True

    def __init__(self, placement, hidden: int = 4) -> None:
        super().__init__(placement)
        self.down = torch.nn.Linear(self.in_features, hidden)
        self.up = torch.nn.Linear(hidden, self.out_features)

    def forward(self, x, ctx):
        return self.up(self.down(x))

    @classmethod
    def forward_grouped(cls, adapters, x, ctx):
        one_hot = ctx.membership.rows(x.dtype, ctx.packed)                 # [B, 1, G]
        hidden = torch.cat([F.linear(x, a.down.weight, a.down.bias) for a in adapters], -1)
        # Each row's bottleneck outside its language's block is zeroed.
        hidden = hidden * one_hot.repeat_interleave(adapters[0].down.out_features, dim=-1)
        up = torch.cat([a.up.weight for a in adapters], dim=1)
        return F.linear(hidden, up) + one_hot @ torch.stack([a.up.bias for a in adapters])


def test_a_grouped_adapter_at_a_linear_site_serves_a_mixed_batch():
    """A mixed-language batch builds no per-language routes where every site is grouped: the
    linear hook made no grouped call, so the projection ran without the adapters' deltas and
    they got no gradient, while a one-language batch applied them."""
    ADAPTERS.register_module(name='TestGroupedLinearDelta', module=GroupedLinearDelta,
                             force=True)
    torch.manual_seed(0)
    branch = MODELS.build(tiny_retriever_cfg(language_branch=tiny_branch_cfg(
        adapters=dict(type='TestGroupedLinearDelta')))).language_branch
    texts, langs = MIXED_BATCH['target_text'], MIXED_BATCH['lang']
    assert len(set(langs)) > 1
    mixed = branch(branch.tokenizer(texts), langs)
    with torch.no_grad():
        alone = torch.cat([branch(branch.tokenizer([text]), [lang])
                           for text, lang in zip(texts, langs)])
    torch.testing.assert_close(mixed, alone, rtol=1e-5, atol=1e-5)
    mixed.sum().backward()
    for lang in set(langs):
        assert all(p.grad is not None and p.grad.abs().sum() > 0
                   for p in branch.adapters.sets[lang].parameters()), lang
