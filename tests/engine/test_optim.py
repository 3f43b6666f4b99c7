"""PhasedOptimWrapperConstructor: named groups, and SparseAdam for sparse embedding tables."""
import logging
import math

import pytest
import torch
from torch import nn

from xmr.engine.optim import (
    HybridOptimizer,
    PhasedOptimWrapperConstructor,
    clip_grad_norm_with_sparse,
    clip_grad_value_with_sparse,
    fused_by_default,
    group_of,
    parameter_counts,
    sparse_parameter_names,
    traceable_by_default,
)
from xmr.models.language.embedding import TargetEmbedding

LR = 0.1
BETAS = (0.9, 0.98)
EPS = 1e-6


class TinyBranch(nn.Module):
    """An embedding block plus a dense layer, named like the retriever's groups."""

    def __init__(self, sparse: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.language_branch = nn.Module()
        self.language_branch.embedding = TargetEmbedding(vocab_size=10, width=4, table_width=3,
                                                         sparse=sparse)
        self.language_branch.adapters = nn.Linear(4, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.language_branch.adapters(self.language_branch.embedding(ids)).sum()


def build(model: nn.Module, wrapper: str = 'OptimWrapper', weight_decay: float = 0.0,
          **wrapper_kwargs):
    cfg = dict(type=wrapper, optimizer=dict(type='AdamW', lr=LR, betas=BETAS, eps=EPS,
                                            weight_decay=weight_decay), **wrapper_kwargs)
    return PhasedOptimWrapperConstructor(cfg)(model)


def train_step(model: nn.Module, wrapper, ids: list[int]) -> None:
    with wrapper.optim_context(model):
        loss = model(torch.tensor([ids], device=next(model.parameters()).device))
    wrapper.update_params(loss)


def test_groups_are_named_and_biases_get_no_weight_decay():
    model = TinyBranch(sparse=False)
    optimizer = build(model, weight_decay=0.2).optimizer
    decay = {(g['name'], g['weight_decay']) for g in optimizer.param_groups}
    assert decay == {('language_branch.embedding', 0.2), ('language_branch.embedding', 0.0),
                     ('language_branch.adapters', 0.2), ('language_branch.adapters', 0.0)}
    assert not isinstance(optimizer, HybridOptimizer)


@pytest.mark.parametrize('optimizer, decay', [('AdamW', 0.01), ('BertAdam', 0.01),
                                              ('Adam', 0.0)])
def test_a_config_without_weight_decay_keeps_the_optimizer_s_default(optimizer, decay):
    """Every decaying group was given 0.0: AdamW trained without its 0.01."""
    cfg = dict(type='OptimWrapper', optimizer=dict(type=optimizer, lr=LR))
    groups = PhasedOptimWrapperConstructor(cfg)(TinyBranch(sparse=False)).optimizer.param_groups
    assert sorted({g['weight_decay'] for g in groups}) == sorted({decay, 0.0})
    assert all(g['weight_decay'] == 0.0 for g in groups if g['params'][0].ndim < 2)


def test_sparse_table_goes_to_sparse_adam_and_the_rest_to_the_dense_optimizer():
    model = TinyBranch(sparse=True)
    optimizer = build(model).optimizer
    assert isinstance(optimizer, HybridOptimizer)
    assert isinstance(optimizer.sparse, torch.optim.SparseAdam)
    table = model.language_branch.embedding.table.weight
    assert [p for g in optimizer.sparse.param_groups for p in g['params']] == [table]
    assert all(p is not table for g in optimizer.dense.param_groups for p in g['params'])
    assert optimizer.sparse.param_groups[0]['betas'] == BETAS
    assert optimizer.sparse.param_groups[0]['eps'] == EPS
    # A learning rate set through the combined groups reaches the optimiser that owns them.
    for group in optimizer.param_groups:
        group['lr'] = 0.5
    assert optimizer.sparse.param_groups[0]['lr'] == optimizer.dense.param_groups[0]['lr'] == 0.5


def test_a_sparse_table_takes_the_dense_optimizer_s_default_eps_where_the_config_gives_none():
    """The authors' BertAdam (eps 1e-6 by default) left the table to SparseAdam's 1e-8."""
    cfg = dict(type='OptimWrapper', optimizer=dict(type='BertAdam', lr=LR))
    optimizer = PhasedOptimWrapperConstructor(cfg)(TinyBranch(sparse=True)).optimizer
    assert optimizer.sparse.param_groups[0]['eps'] == 1e-6
    assert optimizer.sparse.param_groups[0]['betas'] == (0.9, 0.999)


def test_sparse_update_follows_adam_on_the_batch_rows_only():
    model = TinyBranch(sparse=True)
    wrapper = build(model)
    table = model.language_branch.embedding.table.weight
    before = table.detach().clone()
    with wrapper.optim_context(model):
        loss = model(torch.tensor([[2, 5, 5]]))
    loss.backward()
    grad = table.grad.coalesce().to_dense()
    wrapper.step()
    # Adam's first step, by hand: m = (1-b1) g, v = (1-b2) g², bias-corrected.
    m, v = (1 - BETAS[0]) * grad, (1 - BETAS[1]) * grad ** 2
    step = LR * math.sqrt(1 - BETAS[1]) / (1 - BETAS[0])
    expected = before - step * m / (v.sqrt() + EPS)
    touched = [2, 5]
    torch.testing.assert_close(table.detach()[touched], expected[touched])
    untouched = [i for i in range(10) if i not in touched]
    assert torch.equal(table.detach()[untouched], before[untouched])


def test_rows_outside_the_batch_stay_put_with_sparse_but_move_with_dense_momentum():
    moved = {}
    for sparse in (False, True):
        model = TinyBranch(sparse=sparse)
        wrapper = build(model)
        train_step(model, wrapper, [1, 2])
        row_one = model.language_branch.embedding.table.weight.detach()[1].clone()
        wrapper.zero_grad()
        train_step(model, wrapper, [3, 4])
        moved[sparse] = not torch.equal(
            model.language_branch.embedding.table.weight.detach()[1], row_one)
    assert moved == {False: True, True: False}


def test_state_is_cleared_and_saved_for_both_parts():
    model = TinyBranch(sparse=True)
    wrapper = build(model)
    train_step(model, wrapper, [1, 2])
    optimizer = wrapper.optimizer
    table = model.language_branch.embedding.table.weight
    # table (sparse part) + projection and adapter weights and biases (dense part)
    assert len(optimizer.state) == 5 and 'exp_avg' in optimizer.state[table]
    saved = optimizer.state_dict()
    other = build(TinyBranch(sparse=True)).optimizer
    other.load_state_dict(saved)
    assert len(other.state) == 5
    optimizer.state.clear()
    assert len(optimizer.state) == 0 and not optimizer.dense.state and not optimizer.sparse.state
    with pytest.raises(ValueError, match='saved without sparse embedding updates'):
        optimizer.load_state_dict(build(TinyBranch(sparse=False)).optimizer.state_dict())


def test_gradient_clipping_measures_the_coalesced_sparse_gradient():
    model = TinyBranch(sparse=True)
    wrapper = build(model, clip_grad=dict(max_norm=1e-3))
    with wrapper.optim_context(model):
        loss = model(torch.tensor([[2, 2, 7]]))
    loss.backward()
    grads = [model.language_branch.embedding.table.weight.grad.coalesce().values()]
    grads += [p.grad for p in model.language_branch.adapters.parameters()]
    grads += [p.grad for p in model.language_branch.embedding.proj.parameters()]
    expected_norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
    wrapper._clip_grad()
    wrapper.log_pending_norm()
    assert wrapper.message_hub.get_scalar('train/grad_norm').current() == pytest.approx(
        float(expected_norm), rel=1e-5)
    clipped = model.language_branch.embedding.table.weight.grad.coalesce().values()
    torch.testing.assert_close(clipped, grads[0] * 1e-3 / float(expected_norm), rtol=1e-4,
                               atol=0)


@pytest.mark.parametrize('norm_type', [2.0, 1.0, math.inf])
@pytest.mark.parametrize('max_norm', [1e-3, 1e3])
def test_sparse_clipping_equals_torch_clipping_of_the_dense_gradients(norm_type, max_norm):
    sparse, dense = TinyBranch(sparse=True), TinyBranch(sparse=False)
    for model in (sparse, dense):
        model(torch.tensor([[2, 2, 7]])).backward()
    assert sparse.language_branch.embedding.table.weight.grad.is_sparse
    norm = clip_grad_norm_with_sparse(sparse.parameters(), max_norm, norm_type)
    expected = nn.utils.clip_grad_norm_(dense.parameters(), max_norm, norm_type)
    torch.testing.assert_close(norm, expected)
    for got, want in zip(sparse.parameters(), dense.parameters(), strict=True):
        torch.testing.assert_close(got.grad.to_dense(), want.grad)


def test_the_sparse_wrapper_clips_with_the_sparse_aware_norm():
    assert build(TinyBranch(sparse=True), clip_grad=dict(max_norm=1.0)).clip_func is \
        clip_grad_norm_with_sparse
    assert build(TinyBranch(sparse=False), clip_grad=dict(max_norm=1.0)).clip_func is \
        nn.utils.clip_grad_norm_


@pytest.mark.parametrize('clip_value', [1e-3, 1e3])
def test_sparse_clipping_by_value_equals_torch_clipping_of_the_dense_gradients(clip_value):
    """torch's clip_grad_value_ stopped at the sparse gradient (no sparse clamp)."""
    sparse, dense = TinyBranch(sparse=True), TinyBranch(sparse=False)
    for model in (sparse, dense):
        model(torch.tensor([[2, 2, 7]])).backward()
    clip_grad_value_with_sparse(sparse.parameters(), clip_value)
    nn.utils.clip_grad_value_(dense.parameters(), clip_value)
    for got, want in zip(sparse.parameters(), dense.parameters(), strict=True):
        torch.testing.assert_close(got.grad.to_dense(), want.grad)
    wrapper = build(TinyBranch(sparse=True), clip_grad=dict(type='value', clip_value=1e-3))
    assert wrapper.clip_func is clip_grad_value_with_sparse


def test_an_fp16_checkpoint_loads_into_a_run_without_loss_scaling_with_a_warning(monkeypatch):
    """Its loss scale was taken for a sparse setting that differs, and refused as such."""
    from xmr.engine import optim_wrapper

    model = TinyBranch(sparse=True)
    scaled = build(model, wrapper='AutocastOptimWrapper', dtype='float16')
    train_step(model, scaled, [1, 2])
    state = scaled.state_dict()
    assert set(state) == {'dense', 'sparse', 'loss_scaler', 'accumulative_counts'}
    said = []
    monkeypatch.setattr(optim_wrapper, 'print_log', lambda message, **kwargs: said.append(
        (message, kwargs.get('level'))))
    for wrapper in (build(TinyBranch(sparse=True)),
                    build(TinyBranch(sparse=True), wrapper='AutocastOptimWrapper',
                          dtype='bfloat16')):
        wrapper.load_state_dict(state)
        assert wrapper.optimizer.sparse.state_dict()['state'].keys() == \
            state['sparse']['state'].keys()
    assert [level for message, level in said if 'under fp16 loss scaling' in message] == [
        logging.WARNING] * 2


def test_sparse_updates_run_under_fp16_loss_scaling():
    model = TinyBranch(sparse=True)
    wrapper = build(model, wrapper='AutocastOptimWrapper', dtype='float16',
                    loss_scale=dict(init_scale=256.0))
    before = model.language_branch.embedding.table.weight.detach().clone()
    train_step(model, wrapper, [1, 2])
    after = model.language_branch.embedding.table.weight.detach()
    assert wrapper.scaler is not None and wrapper.scaler.get_scale() == 256.0
    assert not torch.equal(after[1], before[1]) and torch.equal(after[3], before[3])


def test_unknown_paramwise_keys_are_refused():
    with pytest.raises(KeyError, match=r"takes groups and sparse_optimizer, got \['custom'\]"):
        PhasedOptimWrapperConstructor(dict(optimizer=dict(type='AdamW')), dict(custom=1))


def test_adamw_runs_fused_unless_the_config_chooses_and_matches_the_loop_update():
    fused_model, loop_model = TinyBranch(sparse=False), TinyBranch(sparse=False)
    fused = build(fused_model, weight_decay=0.2)
    cfg = dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=LR, betas=BETAS, eps=EPS,
                                                   weight_decay=0.2, foreach=False))
    loop = PhasedOptimWrapperConstructor(cfg)(loop_model)
    assert all(g['fused'] for g in fused.optimizer.param_groups)
    assert not any(g['fused'] for g in loop.optimizer.param_groups)
    for _ in range(3):
        train_step(fused_model, fused, [1, 2, 2])
        train_step(loop_model, loop, [1, 2, 2])
    for a, b in zip(fused_model.parameters(), loop_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    sgd = PhasedOptimWrapperConstructor(dict(optimizer=dict(type='SGD', lr=LR)))
    assert not sgd(TinyBranch(sparse=False)).optimizer.param_groups[0].get('fused')


def test_a_parameter_belongs_to_its_longest_configured_prefix():
    """cdds_vit-bert-b16_phases.py lists 'backbone' (lr_mult 0.1) and 'backbone.vision_proj'
    (full rate): the projection must fall into its own group, whichever comes first."""
    groups = ('backbone', 'backbone.vision_proj')
    assert group_of('backbone.vision_proj.weight', groups) == 'backbone.vision_proj'
    assert group_of('backbone.vision_proj.weight', groups[::-1]) == 'backbone.vision_proj'
    assert group_of('backbone.text.layer.0.weight', groups) == 'backbone'
    assert group_of('backbone.vision_projection.weight', groups) == 'backbone'  # not a prefix
    assert group_of('disentangler.gate.weight', groups) == 'disentangler'  # first component
    # A configured group may be one parameter (backbone.logit_scale, its own lr_mult).
    assert group_of('backbone.logit_scale', ('backbone', 'backbone.logit_scale')) == \
        'backbone.logit_scale'


def test_a_learning_rate_set_after_loading_a_state_reaches_both_parts():
    """Resuming loads the optimiser state, which gives torch's optimisers new group dicts; the
    phased loop then sets each iteration's learning rate through the combined groups, so they
    must be the loaded ones (else a resumed run with a sparse table keeps the checkpoint's lr)."""
    model = TinyBranch(sparse=True)
    wrapper = build(model)
    train_step(model, wrapper, [1, 2])
    resumed = build(TinyBranch(sparse=True)).optimizer
    resumed.load_state_dict(wrapper.optimizer.state_dict())
    for group in resumed.param_groups:
        group['lr'] = 0.25
    assert [g['lr'] for g in resumed.dense.param_groups] == [0.25] * len(
        resumed.dense.param_groups)
    assert resumed.sparse.param_groups[0]['lr'] == 0.25
    assert resumed.param_groups == [*resumed.dense.param_groups, *resumed.sparse.param_groups]


def test_parameter_counts_count_only_trainable_parameters_as_trainable():
    """The #TP column: a frozen group counts in the total and not as trainable."""
    model = TinyBranch(sparse=False)
    model.language_branch.adapters.requires_grad_(False)
    # table 10x3, projection 3->4 with bias; adapters 4->4 with bias.
    assert parameter_counts(model) == {'language_branch.embedding': (30 + 12 + 4, 46),
                                       'language_branch.adapters': (0, 16 + 4)}


def test_fused_and_traceable_defaults_keep_what_the_config_or_the_parameters_rule_out():
    integer = nn.Parameter(torch.zeros(2, dtype=torch.long), requires_grad=False)
    assert fused_by_default(dict(type='AdamW'), [nn.Parameter(torch.zeros(2)), integer]) == \
        dict(type='AdamW')
    assert fused_by_default(dict(type='AdamW'), [nn.Parameter(torch.zeros(2))]) == \
        dict(type='AdamW', fused=True)
    assert traceable_by_default(dict(type='Adam', capturable=False)) == \
        dict(type='Adam', capturable=False)
    assert traceable_by_default(dict(type='Adam')) == \
        dict(type='Adam', foreach=True, capturable=True)


def test_sparse_parameter_names_cover_bags_and_a_bare_table():
    model = nn.Module()
    model.bag = nn.EmbeddingBag(5, 2, sparse=True)
    model.dense = nn.Embedding(5, 2)
    assert sparse_parameter_names(model) == {'bag.weight'}
    assert sparse_parameter_names(nn.Embedding(5, 2, sparse=True)) == {'weight'}


def tripled_sum_closure(optimizer, weight: torch.Tensor):
    """An optimiser step's closure: gradients cleared, then ``sum(3 w)`` (each gradient 3)
    backpropagated and returned."""
    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = (weight * 3.0).sum()
        loss.backward()
        return loss
    return closure


def test_hybrid_step_runs_the_closure_with_gradients_and_returns_its_loss():
    weight, table = nn.Parameter(torch.ones(2)), nn.Parameter(torch.zeros(3, 2))
    optimizer = HybridOptimizer(torch.optim.SGD([weight], lr=0.5),
                                torch.optim.SparseAdam([table]))
    assert float(optimizer.step(tripled_sum_closure(optimizer, weight)).detach()) == 6.0
    assert weight.detach().tolist() == [1.0 - 0.5 * 3.0] * 2


def test_sparse_clipping_refuses_a_non_finite_norm_when_asked_as_torch_does():
    model = TinyBranch(sparse=True)
    model(torch.tensor([[2, 7]])).backward()
    model.language_branch.adapters.bias.grad[0] = math.inf
    with pytest.raises(RuntimeError, match='clipping cannot make them finite'):
        clip_grad_norm_with_sparse(model.parameters(), 1.0, error_if_nonfinite=True)
    assert math.isinf(clip_grad_norm_with_sparse(model.parameters(), 1.0))


def test_a_compiled_step_with_default_options_gets_a_traceable_optimizer():
    """``compiled_step=dict()`` (Inductor's default mode) is a compiled step too."""
    wrapper = build(TinyBranch(sparse=False), compiled_step=dict())
    assert all(g['foreach'] and g['capturable'] and not g['fused']
               for g in wrapper.optimizer.param_groups)


def test_groups_of_a_wrapped_model_are_named_as_those_of_the_model():
    wrapper = build(nn.DataParallel(TinyBranch(sparse=False)), weight_decay=0.2)
    assert {g['name'] for g in wrapper.optimizer.param_groups} == {
        'language_branch.embedding', 'language_branch.adapters'}


def test_hybrid_zero_grad_clears_the_dense_and_the_sparse_gradients():
    """Else the dense layers' gradients would add up across iterations."""
    model = TinyBranch(sparse=True)
    optimizer = build(model).optimizer
    model(torch.tensor([[1, 2]])).backward()
    optimizer.zero_grad()
    assert [name for name, p in model.named_parameters() if p.grad is not None] == []


def test_a_configured_group_that_matches_no_parameter_is_refused_at_build():
    """A misspelt group would leave its parameters in a shorter prefix's group (CDDS's towers'
    lr_mult 0.1) with nothing said: refused when the optimiser is built, naming the module."""
    cfg = dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=LR))
    typo = PhasedOptimWrapperConstructor(cfg, dict(groups=['language_branch',
                                                           'language_branch.embeding']))
    with pytest.raises(ValueError, match=r"groups: 'language_branch.embeding' matches no "
                       r"parameter of the model \(did you mean 'language_branch.embedding'\?\)"):
        typo(TinyBranch(sparse=False))
    with pytest.raises(ValueError, match=r"groups='language_branch' must be a list of"):
        PhasedOptimWrapperConstructor(cfg, dict(groups='language_branch'))
    # The defaults name modules a model may lack (this one has no backbone nor disentangler),
    # given or not: never refused.
    for paramwise in (None, dict(groups=['backbone', 'language_branch.embedding',
                                         'disentangler'])):
        names = {g['name'] for g in PhasedOptimWrapperConstructor(cfg, paramwise)(
            TinyBranch(sparse=False)).optimizer.param_groups}
        assert names == {'language_branch.embedding', 'language_branch' if paramwise else
                         'language_branch.adapters'}
    configured = PhasedOptimWrapperConstructor(cfg, dict(groups=['language_branch.adapters']))
    assert {g['name'] for g in configured(TinyBranch(sparse=False)).optimizer.param_groups} == \
        {'language_branch', 'language_branch.adapters'}


def test_parameters_on_two_devices_are_not_fused_even_where_both_have_kernels(monkeypatch):
    """torch's fused Adam runs one kernel per device type and refuses a mix: parameters on two
    devices keep the config as it is, even where each device alone would run fused."""
    from torch.utils import _foreach_utils

    monkeypatch.setattr(_foreach_utils, '_get_fused_kernels_supported_devices',
                        lambda: ['cpu', 'meta'])
    on_cpu, on_meta = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(2, device='meta'))
    assert fused_by_default(dict(type='AdamW'), [on_cpu, on_meta]) == dict(type='AdamW')
    assert fused_by_default(dict(type='AdamW'), [on_meta]) == dict(type='AdamW', fused=True)


def test_sparse_clipping_divides_by_the_norm_plus_torch_s_1e_6():
    """As ``clip_grad_norm_``: a sparse gradient of norm 1e-6 capped at 1e-6 is halved,
    ``1e-6 / (1e-6 + 1e-6)``, not left as it is."""
    table = nn.Parameter(torch.zeros(4, 2))
    table.grad = torch.sparse_coo_tensor([[1]], [[0.0, 1e-6]], (4, 2), check_invariants=True)
    norm = clip_grad_norm_with_sparse([table], max_norm=1e-6)
    assert float(norm) == pytest.approx(1e-6)
    assert table.grad.to_dense()[1].tolist() == pytest.approx([0.0, 5e-7], rel=1e-5)


def test_sparse_clipping_without_gradients_returns_a_zero_norm():
    """As ``clip_grad_norm_``: parameters without gradients (a phase that trains none of them)
    clip nothing and measure 0."""
    frozen = [nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(3, 2))]
    assert float(clip_grad_norm_with_sparse(frozen, max_norm=1.0)) == 0.0
    assert all(p.grad is None for p in frozen)


def test_matrices_named_as_norms_get_no_weight_decay():
    """Decay is left off by name as well as by shape, as open_clip's training does: a matrix
    under a ``norm`` or an ``ln_`` name (a norm's learnt projection) takes none, another one
    does."""
    model = nn.Module()
    model.adapters = nn.Module()
    model.adapters.proj = nn.Linear(2, 2, bias=False)
    model.adapters.norm_mix = nn.Parameter(torch.ones(2, 2))
    model.adapters.ln_gate = nn.Parameter(torch.ones(2, 2))
    groups = build(model, weight_decay=0.2).optimizer.param_groups
    decay = {id(p): g['weight_decay'] for g in groups for p in g['params']}
    assert decay == {id(model.adapters.proj.weight): 0.2, id(model.adapters.norm_mix): 0.0,
                     id(model.adapters.ln_gate): 0.0}


def test_the_hybrid_optimizer_s_defaults_are_the_dense_optimizer_s():
    """MMEngine's wrapper keeps ``optimizer.defaults`` as its base settings: those of the
    dense optimiser (its weight decay, AdamW's ``amsgrad``), not SparseAdam's, which has no
    decay."""
    optimizer = build(TinyBranch(sparse=True), weight_decay=0.2).optimizer
    assert optimizer.defaults == optimizer.dense.defaults
    assert (optimizer.defaults['lr'], optimizer.defaults['weight_decay'],
            optimizer.defaults['amsgrad']) == (LR, 0.2, False)
