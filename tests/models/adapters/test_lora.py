import copy

import pytest
import torch

from tests.models.adapters.peft_helpers import CAPTIONS, build_clip_branch, lora_delta
from xmr.models.adapters import AdapterContext, AdapterPlacement, AdapterSite, LoRA
from xmr.models.adapters.language_adapters import LanguageAdapters
from xmr.models.adapters.lora import check_targets

ALL_TARGETS = ['q', 'k', 'v', 'out', 'fc', 'proj']


def randomise_lora(branch, lang='de'):
    """Give every LoRA of ``lang`` a non-zero B so that it acts."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, parameter in branch.adapters.sets[lang].named_parameters():
            if 'lora_B' in name:
                parameter.normal_(std=0.2)


def merged_clip(backbone, branch, lang='de'):
    """A copy of the open_clip model whose frozen weights absorb ``W += (α/r) B A``.

    open_clip then runs its own ``nn.MultiheadAttention`` path: an independent reference.
    """
    clip = copy.deepcopy(backbone.clip)
    width = clip.transformer.width
    placed = branch.adapters.sets[lang]
    with torch.no_grad():
        for index, block in enumerate(clip.transformer.resblocks):
            for key, lora in placed.items():
                if not key.startswith(f'{index}:'):
                    continue
                for target in lora.targets:
                    delta = lora_delta(lora, target)
                    if target in ('q', 'k', 'v'):
                        row = 'qkv'.index(target) * width
                        block.attn.in_proj_weight[row:row + width] += delta
                    elif target == 'out':
                        block.attn.out_proj.weight += delta
                    elif target == 'fc':
                        block.mlp.c_fc.weight += delta
                    else:
                        block.mlp.c_proj.weight += delta
    return clip


@pytest.mark.parametrize('targets', [['q'], ['v'], ['out'], ['q', 'v'], ALL_TARGETS])
def test_lora_equals_the_merged_weights_run_by_open_clip_itself(targets):
    backbone, branch = build_clip_branch(dict(type='LoRA', r=2, alpha=3, targets=targets))
    randomise_lora(branch)
    tokens = branch.tokenize(CAPTIONS)
    adapted = branch(tokens, ['de'] * len(CAPTIONS))

    clip = merged_clip(backbone, branch)
    context = clip.positional_embedding.shape[0]
    ids = torch.zeros(len(CAPTIONS), context, dtype=torch.long)
    ids[:, :tokens['input_ids'].shape[1]] = tokens['input_ids']
    expected = clip.encode_text(ids)
    torch.testing.assert_close(adapted, expected, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(adapted, backbone.clip.encode_text(ids), atol=1e-3)


def test_lora_on_the_attention_output_projection_really_acts():
    """The MHA ``out_proj`` pitfall: a LoRA there must change the block's attention output."""
    backbone, branch = build_clip_branch(dict(type='LoRA', r=1, targets=['out']))
    tower = backbone.text_tower
    tokens = branch.tokenize(CAPTIONS[:1])
    x = tower.add_positions(tower.embed_tokens(tokens['input_ids']))
    mask = tower.build_mask(tokens['attention_mask'])
    ctx = AdapterContext(lang='de', attention_mask=tokens['attention_mask'],
                         eos_index=tokens['eos_index'])
    frozen = tower.run_block(0, x, mask, branch.adapters.hooks(ctx))
    randomise_lora(branch)
    adapted = tower.run_block(0, x, mask, branch.adapters.hooks(ctx))
    assert not torch.allclose(adapted, frozen, atol=1e-4)


def test_parameter_counts_match_hand_counts():
    # Tiny CLIP: width 32, MLP 128, 3 blocks. Per block: q and v each A [r, 32] + B [32, r].
    _, branch = build_clip_branch(dict(type='LoRA', r=2, targets=['q', 'v']), languages=['de'])
    assert sum(p.numel() for p in branch.adapters.parameters()) == 3 * 2 * (2 * 32 + 32 * 2)
    # All targets at r = 1: q, k, v, out (32 + 32 each), fc (32 + 128), proj (128 + 32).
    _, branch = build_clip_branch(dict(type='LoRA', r=1, targets=ALL_TARGETS), languages=['de'])
    assert sum(p.numel() for p in branch.adapters.parameters()) == 3 * (4 * 64 + 160 + 160)


def test_b_starts_at_zero_and_a_does_not():
    lora = LoRA(AdapterPlacement(32, 'attn.qkv', in_features=32, out_features=96), r=4,
                targets=['q', 'v'])
    assert all(torch.count_nonzero(b) == 0 for b in lora.lora_B.values())
    assert all(torch.count_nonzero(a) > 0 for a in lora.lora_A.values())


def test_a_starts_as_nn_linear_within_one_over_the_square_root_of_its_inputs():
    """Kaiming-uniform with ``a = sqrt(5)`` (nn.Linear's, the reference's): bound
    ``sqrt(6 / ((1 + 5) d_in)) = 1 / sqrt(d_in)``, 1/16 for 256 inputs; 2,048 draws reach
    within 1% of it."""
    torch.manual_seed(0)
    lora = LoRA(AdapterPlacement(256, 'attn.out', in_features=256, out_features=256), r=8,
                targets=['out'])
    largest = lora.lora_A['out'].abs().max().item()
    assert 0.99 / 16 < largest <= 1 / 16


def test_targets_are_named_in_a_list_kept_in_q_k_v_out_fc_proj_order_and_widths_checked():
    assert check_targets(['fc', 'v', 'q']) == ('q', 'v', 'fc')
    with pytest.raises(ValueError, match="LoRA targets must be a non-empty list .* got 'qv'"):
        check_targets('qv')
    with pytest.raises(ValueError, match='attn.qkv output width 25 does not split into q, k and '
                                         'v'):
        LoRA(AdapterPlacement(8, 'attn.qkv', in_features=8, out_features=25), targets=['q'])


def test_the_settings_a_checkpoint_records_are_the_scale_alone():
    """``r`` is in the weights' shapes, which name it when a checkpoint's differs."""
    lora = LoRA(AdapterPlacement(8, 'attn.out'), r=2, alpha=3, targets=['out'])
    assert lora.settings() == {'scale': 1.5}


def test_qkv_delta_updates_only_the_targeted_thirds():
    lora = LoRA(AdapterPlacement(8, 'attn.qkv', in_features=8, out_features=24), r=2, alpha=2,
                targets=['k'])
    with torch.no_grad():
        lora.lora_B['k'].normal_()
    x = torch.randn(2, 5, 8)
    delta = lora(x, AdapterContext(lang='de'))
    assert delta.shape == (2, 5, 24)
    assert torch.count_nonzero(delta[..., :8]) == 0 and torch.count_nonzero(delta[..., 16:]) == 0
    expected = x @ (lora.lora_B['k'] @ lora.lora_A['k']).t()
    torch.testing.assert_close(delta[..., 8:16], expected)


def test_sites_follow_targets_and_a_disagreeing_config_is_refused():
    shapes = {AdapterSite.ATTN_QKV: (8, 24), AdapterSite.ATTN_OUT: (8, 8),
              AdapterSite.MLP_FC: (8, 32), AdapterSite.MLP_PROJ: (32, 8)}
    placed = LanguageAdapters(['de'], dict(type='LoRA', targets=['v', 'fc']), 8, 2, shapes)
    assert sorted(placed.sets['de']) == ['0:attn_qkv', '0:mlp_fc', '1:attn_qkv', '1:mlp_fc']
    with pytest.raises(ValueError, match=r"targets \['q', 'out'\] sit at .*attn.qkv.*attn.out"):
        LanguageAdapters(['de'], dict(type='LoRA', targets=['q', 'out'], sites=['attn.qkv']),
                         8, 2, shapes)
    with pytest.raises(ValueError, match=r"unknown LoRA targets \['query'\]"):
        LanguageAdapters(['de'], dict(type='LoRA', targets=['query']), 8, 2, shapes)


def test_dropout_acts_on_the_input_in_training_only():
    """``h = W x + (α/r) B A dropout(x)``: in eval mode the delta is exact; in training mode
    the dropped inputs change it, and a zero-probability dropout never does."""
    torch.manual_seed(0)
    lora = LoRA(AdapterPlacement(8, 'attn.out'), r=2, alpha=2, targets=['out'], dropout=0.5)
    with torch.no_grad():
        lora.lora_B['out'].normal_()
    x = torch.randn(4, 5, 8)
    expected = x @ lora_delta(lora, 'out').t()
    ctx = AdapterContext(lang='de')
    torch.testing.assert_close(lora.eval()(x, ctx), expected)
    torch.manual_seed(3)
    dropped = lora.train()(x, ctx)
    torch.manual_seed(3)
    reference = torch.nn.functional.dropout(x, 0.5, training=True) @ lora_delta(lora, 'out').t()
    torch.testing.assert_close(dropped, reference)
    assert not torch.allclose(dropped, expected)
    plain = LoRA(AdapterPlacement(8, 'attn.out'), r=2, alpha=2, targets=['out'])
    plain.load_state_dict(lora.state_dict())
    torch.testing.assert_close(plain.train()(x, ctx), expected)


def test_scale_is_alpha_over_r():
    lora = LoRA(AdapterPlacement(8, 'attn.out'), r=1, alpha=16, targets=['out'])
    assert lora.scale == 16.0
    with pytest.raises(ValueError, match='adapter LoRA: r=0 must be a positive integer'):
        LoRA(AdapterPlacement(8, 'attn.out'), r=0, targets=['out'])


def test_without_alpha_the_scale_is_one_whatever_the_rank():
    """``alpha`` defaults to ``r``: the delta is ``B A x`` itself, not ``(1 / r) B A x``."""
    lora = LoRA(AdapterPlacement(2, 'attn.out'), r=4, targets=['out'])
    assert lora.scale == 1.0
    with torch.no_grad():
        lora.lora_A['out'].copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]))
        lora.lora_B['out'].copy_(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]))
    # A x = [x0, x1, x0 + x1, 0]; B picks its rows 0 and 2.
    x = torch.tensor([[[2.0, 3.0]]])
    assert lora(x, AdapterContext(lang='de')).tolist() == [[[2.0, 5.0]]]


def test_a_dropout_that_drops_every_input_is_refused():
    with pytest.raises(ValueError, match=r'LoRA dropout must be in \[0, 1\), got 1.0'):
        LoRA(AdapterPlacement(8, 'attn.out'), targets=['out'], dropout=1.0)


def test_an_alpha_of_zero_which_would_never_update_the_model_is_refused():
    with pytest.raises(ValueError, match='LoRA alpha=0 scales the update to zero'):
        LoRA(AdapterPlacement(8, 'attn.out'), r=4, alpha=0, targets=['out'])


def test_lora_targets_draw_independent_dropout_masks():
    """peft (and the paper) wrap q and v as separate projections, each with its own dropout:
    with equal (A, B) for both, their deltas differ in training mode, agree in eval mode."""
    torch.manual_seed(0)
    lora = LoRA(AdapterPlacement(16, 'attn.qkv', in_features=16, out_features=48), r=2,
                targets=['q', 'v'], dropout=0.5)
    with torch.no_grad():
        lora.lora_B['q'].normal_()
        lora.lora_A['v'].copy_(lora.lora_A['q'])
        lora.lora_B['v'].copy_(lora.lora_B['q'])
    x = torch.randn(2, 7, 16)
    ctx = AdapterContext(lang='de')
    dq, _, dv = lora.train()(x, ctx).chunk(3, dim=-1)
    assert not torch.allclose(dq, dv)
    torch.manual_seed(5)
    # (α / r) B A dropout(x), one mask per target, drawn in the order q, v.
    reference = [torch.nn.functional.dropout(x, 0.5) @ lora_delta(lora, t).t()
                 for t in ('q', 'v')]
    torch.manual_seed(5)
    dq, _, dv = lora(x, ctx).chunk(3, dim=-1)
    torch.testing.assert_close(dq, reference[0])
    torch.testing.assert_close(dv, reference[1])
    eq, _, ev = lora.eval()(x, ctx).chunk(3, dim=-1)
    torch.testing.assert_close(eq, ev)
