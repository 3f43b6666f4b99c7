"""The adapter contract enforces itself: abstract methods, the placement object, declarations."""
from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from tests.conftest import tiny_backbone_cfg
from tests.models.adapters.peft_helpers import build_clip_branch, clip_branch_cfg
from xmr.models.adapters import (
    AdapterContext,
    AdapterPlacement,
    AdapterSite,
    BaseAdapter,
    LanguageAdapters,
    StaticAdapter,
)
from xmr.models.backbones.base import TextTower, block_linear_shapes
from xmr.registry import ADAPTERS, MODELS


class _NoForward(BaseAdapter):
    pass


class _Scale(BaseAdapter):
    sites = (AdapterSite.MLP_OUTPUT, AdapterSite.BLOCK_OUTPUT)

    def __init__(self, placement: AdapterPlacement, factor: float = 2.0) -> None:
        super().__init__(placement)
        self.factor = nn.Parameter(torch.tensor(factor))

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        return x * self.factor


def test_a_subclass_without_forward_cannot_be_built():
    with pytest.raises(TypeError, match='abstract method.*forward'):
        _NoForward(AdapterPlacement(8))


def test_the_placement_sets_sites_widths_and_block():
    adapter = _Scale(AdapterPlacement(16, 'mlp.output', 3))
    assert (adapter.width, adapter.site, adapter.block_index) == (16, AdapterSite.MLP_OUTPUT, 3)
    assert (adapter.in_features, adapter.out_features) == (16, 16)
    assert _Scale(AdapterPlacement(16)).site == AdapterSite.MLP_OUTPUT  # the class's first site


def test_loose_placement_values_and_foreign_sites_are_refused_naming_the_fix():
    with pytest.raises(TypeError, match=r'_Scale takes an AdapterPlacement.*got 16.*'
                                        r'_Scale\(AdapterPlacement\(width=\.\.\.\)'):
        _Scale(16)
    with pytest.raises(ValueError, match=r"_Scale serves \['mlp.output', 'block.output'\], "
                                         'not attn.qkv'):
        _Scale(AdapterPlacement(16, 'attn.qkv'))
    with pytest.raises(ValueError, match='width must be a positive int, got 0'):
        AdapterPlacement(0)
    with pytest.raises(ValueError, match=(
            r"adapter site 'block.outptu' does not exist \(did you mean 'block.output'\?\); "
            'the sites are input, attn.qkv, attn.out, attn.output, mlp.fc, mlp.proj, ')):
        AdapterPlacement(8, 'block.outptu')
    with pytest.raises(ValueError, match="adapter site 'mlp.middle' does not exist; the sites"):
        AdapterPlacement(8, 'mlp.middle')


def test_the_branch_places_a_user_adapter_through_its_placement():
    ADAPTERS.register_module(name='TestScaleAdapter', module=_Scale, force=True)
    _, branch = build_clip_branch(dict(type='TestScaleAdapter', factor=3.0, blocks=[1]),
                                  languages=['de'])
    [adapter] = branch.adapters.sets['de'].values()
    assert adapter.placement == AdapterPlacement(branch.tower.width, AdapterSite.MLP_OUTPUT, 1)


class _Narrow(BaseAdapter):
    """Returns a bottleneck's width where its site continues with the tower's."""

    sites = (AdapterSite.MLP_OUTPUT, AdapterSite.MLP_FC)

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        return x[..., :4]


@pytest.mark.parametrize('site, kind, width', [('mlp.output', 'rows', 'width'),
                                               ('mlp.fc', 'delta of the projection', 'fc')])
def test_an_adapter_that_returns_another_shape_is_named_with_its_site(site, kind, width):
    """torch's error, steps later (a LayerNorm's normalized_shape, at the first validation of a
    run), named no adapter, site or block."""
    ADAPTERS.register_module(name='TestNarrowAdapter', module=_Narrow, force=True)
    backbone, branch = build_clip_branch(dict(type='TestNarrowAdapter', sites=[site],
                                              blocks=[1]), languages=['de'])
    tokens = branch.tokenizer(['a red circle'])
    expected = branch.tower.width if width == 'width' else \
        branch.tower.linear_shapes()[AdapterSite.MLP_FC][1]
    with pytest.raises(ValueError, match=(
            rf'^model\.language_branch\.adapters: _Narrow at {re.escape(site)} of block 1 \(de\) '
            rf'returned shape \(1, \d+, 4\) torch.float32; the site continues with its {kind}, '
            rf'shape \(1, \d+, {expected}\) torch.float32: check its forward$')):
        branch(tokens, ['de'])


class _Double(BaseAdapter):
    """Returns its rows in float64, as numpy-minded code does."""

    sites = (AdapterSite.MLP_OUTPUT,)

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        return x.double()


def test_an_adapter_that_returns_another_dtype_is_named_with_its_site():
    """torch's 'mixed dtype (CPU)' came from a later layer, naming no adapter; under autocast
    the autocast dtype is taken as well as the rows'."""
    ADAPTERS.register_module(name='TestDoubleAdapter', module=_Double, force=True)
    backbone, branch = build_clip_branch(dict(type='TestDoubleAdapter', blocks=[1]),
                                         languages=['de'])
    tokens = branch.tokenizer(['a red circle'])
    with pytest.raises(ValueError, match=(
            r'_Double at mlp.output of block 1 \(de\) returned shape \(1, \d+, \d+\) '
            r'torch.float64; the site continues with its rows, shape \(1, \d+, \d+\) '
            r'torch.float32: check its forward$')):
        branch(tokens, ['de'])
    _Double.forward = lambda self, x, ctx: x.bfloat16()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        branch(tokens, ['de'])


def test_a_tower_without_linear_sites_offers_residual_sites_only():
    class _Residual(TextTower):
        embed_tokens = add_positions = run_block = head = None

    assert _Residual.linear_shapes(None) == {}
    residual_only = _Residual.linear_shapes(None)
    LanguageAdapters(['de'], dict(type='StaticAdapter', hidden=4), 8, 2, residual_only)
    with pytest.raises(ValueError) as refused:
        LanguageAdapters(['de'], dict(type='LoRA', r=1), 8, 2, residual_only)
    assert str(refused.value) == (
        'adapter LoRA at attn.qkv: the text tower exposes no linear site attn.qkv (its linear '
        'sites: none: residual sites only); a tower of your own offers its frozen projections '
        'by overriding TextTower.linear_shapes() (docs/custom_modules.md), else choose an '
        'adapter at a residual site (StaticAdapter, HoulsbyAdapter)')
    mlp_only = {AdapterSite.MLP_FC: (8, 16), AdapterSite.MLP_PROJ: (16, 8)}
    with pytest.raises(ValueError, match=r'no linear site attn.qkv \(its linear sites: mlp.fc, '
                                         r'mlp.proj\);'):
        LanguageAdapters(['de'], dict(type='LoRA', r=1), 8, 2, mlp_only)


def test_an_embedding_block_outside_the_base_is_refused():
    @MODELS.register_module(name='TestPlainEmbedding', force=True)
    class _Plain(nn.Embedding):
        def __init__(self, vocab_size: int, width: int, padding_idx: int | None = None):
            super().__init__(vocab_size, width, padding_idx=padding_idx)

    backbone = MODELS.build(tiny_backbone_cfg())
    cfg = dict(clip_branch_cfg(None, ['de']), embedding=dict(type='TestPlainEmbedding'))
    with pytest.raises(TypeError, match="embedding type 'TestPlainEmbedding' must subclass "
                                        "xmr's EmbeddingBlock"):
        MODELS.build(cfg, default_args=dict(tower=backbone.text_tower))


def _placed_sites(adapters: LanguageAdapters) -> set[tuple[int, str]]:
    return {(adapter.block_index, str(adapter.site))
            for adapter in adapters.sets['de'].values()}


def test_a_post_norm_tower_takes_the_static_adapter_before_its_layernorm_as_identity():
    """BERT-style blocks end in LN(x + f(x)): the defaults move from block.output with PyTorch's
    initialisation to mlp.output starting at zero (docs/methods/text_teacher.md); a config's
    own sites and zero_init are kept."""
    static = dict(type='StaticAdapter', hidden=4)
    pre_norm = LanguageAdapters(['de'], static, 8, 2)
    assert _placed_sites(pre_norm) == {(0, 'block.output'), (1, 'block.output')}
    assert all(a.up.weight.abs().sum() > 0 for a in pre_norm.sets['de'].values())
    post_norm = LanguageAdapters(['de'], static, 8, 2, post_norm=True)
    assert _placed_sites(post_norm) == {(0, 'mlp.output'), (1, 'mlp.output')}
    x = torch.randn(3, 5, 8)
    for adapter in post_norm.sets['de'].values():
        torch.testing.assert_close(adapter(x, AdapterContext(lang='de')), x)
    kept = LanguageAdapters(['de'], dict(static, sites=['block.output'], zero_init=False), 8, 2,
                            post_norm=True)
    assert _placed_sites(kept) == {(0, 'block.output'), (1, 'block.output')}
    assert all(a.up.weight.abs().sum() > 0 for a in kept.sets['de'].values())
    houlsby = _placed_sites(LanguageAdapters(['de'], dict(type='HoulsbyAdapter', hidden=4), 8,
                                             1, post_norm=True))
    assert houlsby == {(0, 'attn.output'), (0, 'mlp.output')}


def test_the_written_out_bert_tower_is_post_norm_and_clip_is_not():
    from xmr.models.backbones import BertTextTower, OpenCLIPTextTower

    assert BertTextTower.post_norm and not OpenCLIPTextTower.post_norm


@pytest.mark.parametrize('name', ['StaticAdapter', 'HoulsbyAdapter', 'DynamicAdapter'])
@pytest.mark.parametrize('hidden', [0, -4, 2.5, True])
def test_a_bottleneck_width_that_is_no_positive_integer_is_refused(name, hidden):
    """torch builds a 0-wide layer: the adapter trained a bias alone, without a word."""
    with pytest.raises(ValueError, match=(
            f'^adapter {name}: hidden={hidden!r} must be a positive integer$')):
        ADAPTERS.get(name)(AdapterPlacement(width=8), hidden=hidden)
    assert ADAPTERS.get(name)(AdapterPlacement(width=8), hidden=1).up.in_features == 1


@pytest.mark.parametrize('name, site, option', [
    ('LoRA', 'attn.out', 'r'), ('SoftPrompt', 'input', 'num_tokens'),
    ('CompacterAdapter', 'mlp.output', 'reduction_factor'),
    ('CompacterAdapter', 'mlp.output', 'phm_dim'), ('CompacterAdapter', 'mlp.output', 'rank')])
@pytest.mark.parametrize('value', [0, 2.0, True, '4'])
def test_a_rank_token_count_or_divisor_that_is_no_positive_integer_is_refused(
        name, site, option, value):
    """A float (``r=2.0`` from a sweep) or a string failed inside torch, naming neither."""
    options = dict(targets=['out']) if name == 'LoRA' else {}
    with pytest.raises(ValueError, match=(
            f'^adapter {name}: {option}={value!r} must be a positive integer$')):
        ADAPTERS.get(name)(AdapterPlacement(width=8, site=site), **options, **{option: value})


@pytest.mark.parametrize('name, option', [
    ('StaticAdapter', 'hidden'), ('HoulsbyAdapter', 'hidden'), ('DynamicAdapter', 'hidden'),
    ('LoRA', 'r'), ('SoftPrompt', 'num_tokens'), ('CompacterAdapter', 'reduction_factor'),
    ('CompacterAdapter', 'phm_dim'), ('CompacterAdapter', 'rank')])
def test_a_size_that_is_no_positive_integer_is_refused_as_the_config_loads(name, option):
    """``r=0`` was refused only as the model built, in the runner's new work dir, after the
    backbone's weights and the tokenizer had loaded, and without the config key."""
    from xmr.registry import check_part_options

    message = (rf'^model\.language_branch\.adapters \({name}\): {option}=0 must be a positive '
               'integer$')
    with pytest.raises(ValueError, match=message):
        check_part_options(ADAPTERS, {'type': name, option: 0}, 'model.language_branch.adapters')
    with pytest.raises(ValueError, match=message):
        LanguageAdapters(['de'], {'type': name, option: 0}, 8, 2, block_linear_shapes(8, 32))
    check_part_options(ADAPTERS, {'type': name, option: 2}, 'model.language_branch.adapters')


class _Scaled(StaticAdapter):
    """An own subclass that passes its base's options on in ``**kwargs``."""

    def __init__(self, placement: AdapterPlacement, scale: float = 1.0, **kwargs) -> None:
        super().__init__(placement, **kwargs)


def test_a_size_passed_on_in_kwargs_is_checked_where_the_config_gives_it():
    from xmr.registry import check_part_options

    check_part_options(ADAPTERS, dict(type=_Scaled, scale=2.0), 'model.language_branch.adapters')
    with pytest.raises(ValueError, match=r'^model\.language_branch\.adapters \(_Scaled\): '
                                         'hidden=0 must be a positive integer$'):
        check_part_options(ADAPTERS, dict(type=_Scaled, hidden=0),
                           'model.language_branch.adapters')


@pytest.mark.parametrize('blocks, message', [
    ([-1], r'placed at block -1, but the branch runs 2 blocks, numbered 0..1 \(the last is 1, '
           r'not -1\)'),
    ([0, 2], r'placed at block 2, but the branch runs 2 blocks'),
    ([1.0], r'placed at block 1.0'),
    ([], r'blocks=\[\] places no adapter; leave blocks out for every block \(0..1\)'),
    ([1, 1], r'blocks lists \[1\] more than once'),
    (1, r'blocks=1 must be a list of block indices in 0..1, e.g. blocks=\[1\]'),
])
def test_blocks_that_place_nothing_or_not_what_they_say_are_refused(blocks, message):
    """``blocks=[-1]`` (Python's last block) placed no adapter at all, without a word."""
    from xmr.models.adapters.language_adapters import LanguageAdapters

    with pytest.raises(ValueError, match=r'^model\.language_branch\.adapters \(HoulsbyAdapter\): '
                                         rf'(blocks=.*, an adapter )?{message}'):
        LanguageAdapters(['de'], dict(type='HoulsbyAdapter', hidden=4, blocks=blocks), 8, 2)
    placed = LanguageAdapters(['de'], dict(type='HoulsbyAdapter', hidden=4, blocks=[1]), 8, 2)
    assert sorted(placed.sets['de']) == ['1:attn_output', '1:mlp_output']


def test_blocks_given_to_an_input_site_prompt_are_refused():
    """``blocks`` read as deep prompts (one set per block) built a shallow prompt silently."""
    from xmr.models.adapters.language_adapters import LanguageAdapters

    # Beyond the branch's two blocks too: the fix is to drop them, not to renumber them.
    for blocks in ([0, 1], [5]):
        with pytest.raises(ValueError, match=(
                rf'^model\.language_branch\.adapters \(SoftPrompt\): '
                rf'blocks={re.escape(repr(blocks))} does not apply to SoftPrompt, which acts '
                r'once, at the input site, .*: drop blocks')):
            LanguageAdapters(['de'], dict(type='SoftPrompt', blocks=blocks), 8, 2)
    assert sorted(LanguageAdapters(['de'], dict(type='SoftPrompt'), 8, 2).sets['de']) == [
        '-1:input']


def test_blocks_given_to_a_prompt_are_refused_as_the_config_loads_whatever_the_tower():
    """Its class's check_config runs on the adapter's config, which no tower shape gates (a
    backbone whose config cannot tell its tower's depth)."""
    from xmr.registry import ADAPTERS, check_part_options

    with pytest.raises(ValueError, match=r'^model\.language_branch\.adapters \(HardPrompt\): '
                                         r'blocks=\[0\] does not apply to HardPrompt'):
        check_part_options(ADAPTERS, dict(type='HardPrompt', text='a photo of', blocks=[0]),
                           'model.language_branch.adapters')
    check_part_options(ADAPTERS, dict(type='HoulsbyAdapter', hidden=4, blocks=[0]),
                       'model.language_branch.adapters')


def test_sites_given_as_one_string_are_refused_as_the_config_loads():
    """'mlp.output' was read letter by letter, as the model built: "site 'm' does not exist"."""
    from xmr.models.adapters.language_adapters import LanguageAdapters
    from xmr.registry import ADAPTERS, check_part_options

    message = (r"^model\.language_branch\.adapters \(StaticAdapter\): sites='mlp.output' must "
               r"be a list of sites \(\['mlp.output'\] for one\)$")
    with pytest.raises(ValueError, match=message):
        check_part_options(ADAPTERS, dict(type='StaticAdapter', hidden=4, sites='mlp.output'),
                           'model.language_branch.adapters')
    with pytest.raises(ValueError, match=message):
        LanguageAdapters(['de'], dict(type='StaticAdapter', hidden=4, sites='mlp.output'), 8, 2)
    placed = LanguageAdapters(['de'], dict(type='StaticAdapter', hidden=4, sites=['mlp.output']),
                              8, 2)
    assert sorted(placed.sets['de']) == ['0:mlp_output', '1:mlp_output']


#: Placements no block has, or the class does not serve, and what names them: the key, the
#: type, the value and the choices (each was refused only as the model built, in a work dir the
#: runner had made, without the key).
UNPLACEABLE = [
    (dict(type='StaticAdapter', sites=['attn.foo']),
     r"\(StaticAdapter\): adapter site 'attn.foo' does not exist \(did you mean 'attn.out'\?\); "
     'the sites are input, '),
    (dict(type='StaticAdapter', sites=['mlp.output', 'attn.qkv']),
     r"\(StaticAdapter\): sites=\['mlp.output', 'attn.qkv'\]: StaticAdapter cannot sit at "
     r"attn.qkv; its sites are \['block.output', 'attn.output', 'mlp.output'\]$"),
    (dict(type='HoulsbyAdapter', sites=['mlp.output', 'attn.output', 'mlp.output']),
     r"\(HoulsbyAdapter\): sites=\['mlp.output', 'attn.output', 'mlp.output'\] lists "
     r"\['mlp.output'\] more than once; one site of a block holds one adapter$"),
    (dict(type='LoRA', targets=['q', 'query']),
     r"\(LoRA\): unknown LoRA targets \['query'\]; choose from \['q', 'k', 'v', 'out', 'fc', "
     r"'proj'\]"),
    (dict(type='LoRA', targets=['q'], sites=['mlp.fc']),
     r"\(LoRA\): LoRA targets \['q'\] sit at \['attn.qkv'\], but the config names sites "
     r"\['mlp.fc'\]"),
]


@pytest.mark.parametrize('cfg, message', UNPLACEABLE)
def test_a_site_no_block_has_or_the_class_does_not_serve_is_refused_as_the_config_loads(
        cfg, message):
    from xmr.registry import check_part_options

    message = r'^model\.language_branch\.adapters ' + message
    with pytest.raises(ValueError, match=message):
        check_part_options(ADAPTERS, cfg, 'model.language_branch.adapters')
    with pytest.raises(ValueError, match=message):
        LanguageAdapters(['de'], cfg, 8, 2, block_linear_shapes(8, 32))


def test_a_prompt_before_the_blocks_leaves_packed_tokens_to_the_block_adapters():
    """The input site acts on the padded batch, before any packing: only the block sites'
    adapters decide whether the blocks may run packed."""
    prompted = LanguageAdapters(['de'], [dict(type='SoftPrompt'),
                                         dict(type='StaticAdapter', hidden=4)], 8, 2)
    assert not prompted.sets['de']['-1:input'].accepts_packed_tokens
    assert prompted.accepts_packed_tokens('de')


def test_the_condition_blocks_are_those_of_the_adapters_reading_the_condition():
    """The generator makes W^z for these blocks alone: a prompt or a static adapter elsewhere
    asks for none."""
    placed = LanguageAdapters(['de', 'fr'], [dict(type='SoftPrompt'),
                                             dict(type='StaticAdapter', hidden=4, blocks=[0]),
                                             dict(type='DynamicAdapter', hidden=4, blocks=[1])],
                              8, 2)
    assert placed.condition_blocks() == [1]


def test_an_adapter_class_without_placement_or_ctx_is_refused_as_it_is_defined():
    """A user's adapter without them failed with Python's TypeError as the branch built it, or
    at its first batch, after a whole source_finetune phase had trained."""
    with pytest.raises(TypeError, match=(
            r'^adapter .*NoPlacement: __init__ takes no placement; the adapter set builds each '
            r'instance with placement=AdapterPlacement')):
        class NoPlacement(BaseAdapter):
            def __init__(self, hidden: int = 8) -> None:
                super().__init__(None)

            def forward(self, x, ctx):
                return x

    with pytest.raises(TypeError, match=(
            r"^adapter .*OneArgument: forward takes \['x'\]; the tower calls it with the "
            r'hidden states and the call context: def forward\(self, x, ctx\)')):
        class OneArgument(BaseAdapter):
            def forward(self, x):
                return x

    class Forwarding(BaseAdapter):  # options and arguments passed on are taken
        def __init__(self, **options) -> None:
            super().__init__(options['placement'])

        def forward(self, *args):
            return args[0]
