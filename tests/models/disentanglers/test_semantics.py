"""SemanticsDisentangler: features against hand references, gradients, the adversarial game,
its ablation switches, and per-caption conditioning inside the retriever."""
from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import MIXED_BATCH as BATCH
from tests.conftest import tiny_backbone_cfg, tiny_dasd_cfg
from xmr.models.disentanglers import SemanticsDisentangler
from xmr.models.disentanglers.discriminator import reverse_gradient, shuffled_negatives
from xmr.registry import DISENTANGLERS, MODELS, check_part_options

ADAPTER = dict(type='StaticAdapter', hidden=8)
GENERATOR = dict(d_z=16, d_u=4)


@pytest.fixture(scope='module')
def tower():
    torch.manual_seed(0)
    return MODELS.build(tiny_backbone_cfg()).text_tower


def build(tower, **overrides) -> SemanticsDisentangler:
    torch.manual_seed(1)
    cfg = dict(type='SemanticsDisentangler', adapter=ADAPTER, generator=GENERATOR)
    cfg.update(overrides)
    return DISENTANGLERS.build(cfg, default_args=dict(tower=tower))


def batch(tower, lengths=(5, 3, 4, 2)):
    torch.manual_seed(2)
    size, longest = len(lengths), max(lengths)
    lengths = torch.tensor(lengths)
    tokens = dict(input_ids=torch.zeros(size, longest, dtype=torch.long),
                  attention_mask=torch.arange(longest)[None] < lengths[:, None],
                  eos_index=lengths - 1)
    embeddings = tower.add_positions(torch.randn(size, longest, tower.width) * 0.1)
    r_source = torch.randn(size, tower.embed_dim)
    return embeddings, tokens, r_source


def run_stream(tower, adapters, x, tokens, depth):
    """The SDM stream written out: block i then adapter i, for the first ``depth`` blocks."""
    if depth == 0:
        return adapters[0](x, None)
    mask = tower.build_mask(tokens['attention_mask'])
    for index in range(depth):
        x = adapters[index](tower.run_block(index, x, mask), None)
    return x


@pytest.mark.parametrize('depth', [0, 1, 2, 3])  # 3: every block of the tower
def test_features_match_the_equations(tower, depth):
    sdm = build(tower, depth=depth)
    embeddings, tokens, _ = batch(tower)
    assert len(sdm.sr_adapters) == len(sdm.sa_adapters) == max(depth, 1)
    rows = torch.arange(4)
    x_sr = run_stream(tower, sdm.sr_adapters, embeddings, tokens, depth)
    expected_sr = F.layer_norm(x_sr[rows, tokens['eos_index']], (tower.width,),
                               sdm.sr_norm.weight, sdm.sr_norm.bias) @ sdm.sr_projection.weight.T
    x_sa = F.layer_norm(run_stream(tower, sdm.sa_adapters, embeddings, tokens, depth),
                        (tower.width,), sdm.sa_norm.weight, sdm.sa_norm.bias)
    expected_sa = torch.stack([x_sa[b, :int(tokens['eos_index'][b]) + 1].mean(0)
                               for b in range(4)])
    found = sdm.extract(embeddings, tokens)
    torch.testing.assert_close(found['sr'], expected_sr)
    torch.testing.assert_close(found['sa'], expected_sa)
    assert found['sr'].shape == (4, tower.embed_dim) and found['sa'].shape == (4, tower.width)


def test_padding_does_not_reach_the_features(tower):
    sdm = build(tower)
    embeddings, tokens, _ = batch(tower)
    noisy = embeddings.clone()
    noisy[~tokens['attention_mask']] += 5.0
    a, b = sdm.extract(embeddings, tokens), sdm.extract(noisy, tokens)
    torch.testing.assert_close(a['sr'], b['sr'])
    torch.testing.assert_close(a['sa'], b['sa'])


def test_padding_as_tokens_attends_to_the_padding_and_averages_it_into_f_sa(tower):
    """The authors' ``f^sa``: the stream runs with every position as a token and
    ``f^sa = mean_t LN(x_t)`` over all of them; ``f^sr`` (pooled at EOS by a causal tower)
    is that of the masked stream."""
    sdm = build(tower, padding_as_tokens=True)
    embeddings, tokens, _ = batch(tower)
    everything = dict(tokens, attention_mask=torch.ones_like(tokens['attention_mask']))
    x_sa = F.layer_norm(run_stream(tower, sdm.sa_adapters, embeddings, everything, 1),
                        (tower.width,), sdm.sa_norm.weight, sdm.sa_norm.bias)
    found = sdm.extract(embeddings, tokens)
    torch.testing.assert_close(found['sa'], x_sa.mean(1))
    masked = build(tower)
    torch.testing.assert_close(found['sr'], masked.extract(embeddings, tokens)['sr'])
    assert not torch.allclose(found['sa'], masked.extract(embeddings, tokens)['sa'])


def test_the_sr_projection_starts_as_clips_text_projection(tower):
    """``W_p^sr ~ N(0, width^-1)``, CLIP's initialisation of its text projection, where
    ``nn.Linear``'s own gives a std of ``(3 · width)^-1/2``."""
    weight = build(tower).sr_projection.weight
    assert weight.shape == (tower.embed_dim, tower.width)
    assert weight.std().item() == pytest.approx(tower.width ** -0.5, rel=0.15)
    assert abs(weight.mean().item()) < 0.2 * tower.width ** -0.5


def test_condition_is_one_generated_matrix_per_block_and_caption(tower):
    sdm = build(tower)
    embeddings, tokens, _ = batch(tower)
    condition, losses = sdm(embeddings, tokens)
    assert losses == {}
    assert sorted(condition) == list(range(tower.num_blocks))
    found = sdm.extract(embeddings, tokens)
    expected = sdm.generator(torch.cat([found['sr'], found['sa']], -1))
    for block, matrix in condition.items():
        assert matrix.shape == (4, 4, 4)
        torch.testing.assert_close(matrix, expected[block])
    assert not torch.allclose(condition[0][0], condition[0][1])


def test_losses_are_l_sc_and_l_d(tower):
    sdm = build(tower)
    embeddings, tokens, r_source = batch(tower)
    torch.manual_seed(5)
    _, losses = sdm(embeddings, tokens, r_source=r_source)
    assert set(losses) == {'sc', 'adv'} == sdm.loss_names
    found = sdm.extract(embeddings, tokens)
    # lambda_2 = 0.1 and lambda_1 = 1 (Eq. 12) are the module's own defaults.
    torch.testing.assert_close(losses['sc'], 0.1 * (found['sr'] - r_source).abs().mean())
    torch.manual_seed(5)
    negatives = shuffled_negatives(4)
    p_pos = torch.sigmoid(sdm.discriminator(found['sa'], r_source))
    p_neg = torch.sigmoid(sdm.discriminator(found['sa'], r_source[negatives]))
    expected = (-torch.log(p_pos) - torch.log(1 - p_neg)).mean()
    torch.testing.assert_close(losses['adv'], expected)


@pytest.mark.parametrize('kind,reference', [
    ('mse', F.mse_loss), ('smooth_l1', F.smooth_l1_loss), ('l1', F.l1_loss)])
def test_consistency_loss_kind_is_selectable(tower, kind, reference):
    sdm = build(tower, consistency_loss=dict(type='AlignmentLoss', kind=kind))
    embeddings, tokens, r_source = batch(tower)
    _, losses = sdm(embeddings, tokens, r_source=r_source)
    f_sr = sdm.semantic_related(embeddings, tokens)
    torch.testing.assert_close(losses['sc'], 0.1 * reference(f_sr, r_source))


def test_trainable_parts_get_gradients_and_frozen_blocks_do_not(tower):
    sdm = build(tower)
    embeddings, tokens, r_source = batch(tower)
    condition, losses = sdm(embeddings, tokens, r_source=r_source)
    total = losses['sc'] + losses['adv'] + sum(m.square().sum() for m in condition.values())
    total.backward()
    for name, parameter in sdm.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    assert all(not p.requires_grad and p.grad is None for p in tower.parameters())
    assert not any(name.startswith('tower') for name, _ in sdm.named_parameters())


def test_gradient_reversal_negates_exactly_the_gradient_upstream(tower):
    sdm = build(tower)
    embeddings, tokens, r_source = batch(tower)
    negatives = shuffled_negatives(4)
    grads = []
    for through in (reverse_gradient, lambda t: t):
        sdm.zero_grad()
        sdm.discriminator.loss(through(sdm.semantic_agnostic(embeddings, tokens)), r_source,
                               r_source[negatives]).backward()
        grads.append(([p.grad.clone() for p in sdm.sa_adapters.parameters()],
                      [p.grad.clone() for p in sdm.discriminator.parameters()]))
    (sdm_reversed, disc_reversed), (sdm_plain, disc_plain) = grads
    for a, b in zip(sdm_reversed, sdm_plain):
        torch.testing.assert_close(a, -b)
    for a, b in zip(disc_reversed, disc_plain):
        torch.testing.assert_close(a, b)


def test_adversarial_gradient_stops_at_the_sdm_input(tower):
    sdm = build(tower)
    embeddings, tokens, r_source = batch(tower)
    embeddings.requires_grad_()
    _, losses = sdm(embeddings, tokens, r_source=r_source)
    losses['adv'].backward(retain_graph=True)
    assert embeddings.grad is None
    assert all(p.grad.abs().sum() > 0 for p in sdm.sa_adapters.parameters())
    losses['sc'].backward()
    assert embeddings.grad.abs().sum() > 0


def test_adversarial_gradient_reaches_the_embeddings_when_asked(tower):
    sdm = build(tower, adversarial_through_embeddings=True)
    embeddings, tokens, r_source = batch(tower)
    embeddings.requires_grad_()
    torch.manual_seed(5)
    sdm(embeddings, tokens, r_source=r_source)[1]['adv'].backward()
    reversed_grad = embeddings.grad.clone()
    # The same loss without reversal, through f^sa computed by hand: the opposite gradient.
    embeddings.grad = None
    torch.manual_seed(5)
    negatives = shuffled_negatives(4)
    sdm.discriminator.loss(sdm.semantic_agnostic(embeddings, tokens), r_source,
                           r_source[negatives]).backward()
    torch.testing.assert_close(reversed_grad, -embeddings.grad)


def test_discriminator_and_sdm_move_l_d_in_opposite_directions(tower):
    sdm = build(tower)
    embeddings, tokens, r_source = batch(tower)

    def l_d(module):
        torch.manual_seed(7)
        with torch.no_grad():
            return float(module(embeddings, tokens, r_source=r_source)[1]['adv'])

    torch.manual_seed(7)
    sdm(embeddings, tokens, r_source=r_source)[1]['adv'].backward()
    before = l_d(sdm)

    def stepped(prefixes):
        moved = copy.deepcopy(sdm)
        with torch.no_grad():
            for (name, parameter), original in zip(moved.named_parameters(), sdm.parameters()):
                if name.startswith(prefixes):
                    parameter -= 0.05 * original.grad
        return moved

    assert l_d(stepped(('discriminator',))) < before - 1e-4
    assert l_d(stepped(('sa_adapters', 'sa_norm'))) > before + 1e-6


def test_source_embeddings_and_their_negatives_get_no_gradient(tower):
    """``r^S`` and ``r^S−`` come from the frozen source tower: even given with a graph (a phase
    that trains it), no SDM loss sends a gradient into them."""
    sdm = build(tower)
    embeddings, tokens, r_source = batch(tower)
    r_source.requires_grad_()
    r_negative = r_source.detach()[shuffled_negatives(4)].requires_grad_()
    _, losses = sdm(embeddings, tokens, r_source=r_source, r_negative=r_negative)
    (losses['sc'] + losses['adv']).backward()
    assert r_source.grad is None and r_negative.grad is None


def test_the_default_discriminator_has_the_papers_hidden_widths(tower):
    layers = [layer for layer in build(tower).discriminator.mlp
              if isinstance(layer, torch.nn.Linear)]
    assert [(layer.in_features, layer.out_features) for layer in layers] == [
        (tower.width + tower.embed_dim, 256), (256, 128), (128, 1)]


def test_shuffled_negatives_never_pair_a_caption_with_itself():
    for size in (2, 3, 8):
        for seed in range(20):
            negatives = shuffled_negatives(size, torch.Generator().manual_seed(seed))
            assert sorted(negatives.tolist()) == list(range(size))
            assert not (negatives == torch.arange(size)).any()
    with pytest.raises(ValueError, match=re.escape(
            'batches of at least two captions; got 1: give train_dataloader a batch_size of at '
            'least 2 and drop_last=True (an epoch may end on a batch of one), or train without '
            "L_adv (the disentangler's use_adversarial=False)")):
        shuffled_negatives(1)


def test_ablation_switches_remove_their_parts(tower):
    only_sr = build(tower, features=['sr'], use_adversarial=False)
    assert not hasattr(only_sr, 'sa_adapters') and only_sr.discriminator is None
    assert only_sr.generator.to_z[0].in_features == tower.embed_dim
    assert only_sr.loss_names == {'sc'}
    only_sa = build(tower, features=['sa'], use_consistency_loss=False)
    assert not hasattr(only_sa, 'sr_adapters') and not hasattr(only_sa, 'sr_projection')
    assert only_sa.generator.to_z[0].in_features == tower.width
    assert only_sa.loss_names == {'adv'}
    embeddings, tokens, r_source = batch(tower)
    assert set(only_sa(embeddings, tokens, r_source=r_source)[1]) == {'adv'}
    no_losses = build(tower, use_consistency_loss=False, use_adversarial=False)
    assert no_losses.loss_names == set() and no_losses.consistency_loss is None
    assert no_losses(embeddings, tokens, r_source=r_source)[1] == {}
    some_blocks = build(tower, condition_blocks=[0, 2])
    assert sorted(some_blocks(embeddings, tokens)[0]) == [0, 2]


def test_bad_options_fail_naming_the_option(tower):
    with pytest.raises(ValueError, match='depth 4 is outside 0..3'):
        build(tower, depth=4)
    with pytest.raises(ValueError, match='non-empty subset'):
        build(tower, features=['sr', 'style'])
    with pytest.raises(ValueError, match='non-empty subset'):
        build(tower, features=['sr', 'sr'])
    with pytest.raises(ValueError, match='use_consistency_loss=False'):
        build(tower, features=['sa'])
    with pytest.raises(ValueError, match='use_adversarial=False'):
        build(tower, features=['sr'])
    with pytest.raises(ValueError, match=r'generator blocks \[3\]'):
        build(tower, condition_blocks=[3])
    with pytest.raises(ValueError, match=r'distinct non-negative indices, got \[1, 1\]'):
        build(tower, condition_blocks=[1, 1])
    with pytest.raises(ValueError, match='place the dynamic adapters'):
        build(tower, generator=dict(GENERATOR, blocks=[0]))
    with pytest.raises(ValueError, match="no adapter of the target branch reads the SDM's "
                                         'condition: no adapter type of model.language_branch.'
                                         'adapters sets reads_condition = True'):
        build(tower, condition_blocks=[])
    with pytest.raises(ValueError, match='width 16 does not match'):
        build(tower, adapter=dict(ADAPTER, width=16))
    # A misspelt weight would otherwise leave lambda_1 at its default unnoticed.
    with pytest.raises(KeyError, match=r"SDM loss_weights name \['ad', 'adv', 'sc'\]; the SDM "
                                       r"computes \['adv', 'sc'\]"):
        build(tower, loss_weights=dict(ad=0.5))


@pytest.mark.parametrize('options, error, refused', [
    (dict(features=['sa']), ValueError, 'L_sc supervises f.sr.*use_consistency_loss=False'),
    (dict(features=['sr'], use_consistency_loss=True), ValueError, 'use_adversarial=False'),
    (dict(loss_weights=dict(ad=0.5)), KeyError, r"SDM loss_weights name \['ad', 'adv', 'sc'\]"),
    # A negative adv turns the reversed gradient around: the SDM would help the discriminator.
    (dict(loss_weights=dict(adv=-1.0)), ValueError,
     r"SDM loss_weights\['adv'\]=-1.0 must be a finite number >= 0 \(the paper: 1.0\)"),
    (dict(loss_weights=dict(sc='0.1')), ValueError, r"SDM loss_weights\['sc'\]='0.1' must be")])
def test_contradicting_options_are_refused_by_the_config_check_without_a_build(
        options, error, refused):
    """Refused only as the model built, after the backbone and the runner's work dir."""
    cfg = tiny_dasd_cfg()
    cfg['disentangler'].update(options)
    with pytest.raises(error, match=refused):
        check_part_options(MODELS, cfg, 'model')


def test_a_stream_adapter_reading_the_condition_is_refused_at_the_config_check_and_the_build(
        tower):
    """A^sr / A^sa run before the generator: a DynamicAdapter there built, passed the config
    check, and stopped at the first step of cross_lingual (after source_finetune), telling the
    user to configure the SemanticsDisentangler they had configured."""
    refused = (r"model.disentangler.adapter is DynamicAdapter, which reads the W\^z the SDM "
               r"generates .*type='StaticAdapter', hidden=256")
    cfg = tiny_dasd_cfg()
    cfg['disentangler']['adapter'] = dict(type='DynamicAdapter', hidden=4)
    with pytest.raises(ValueError, match=refused):
        check_part_options(MODELS, cfg, 'model')
    with pytest.raises(ValueError, match=refused):
        build(tower, adapter=dict(type='DynamicAdapter', hidden=4))
    cfg['disentangler']['stream_adapters'] = False  # no stream adapter is built: nothing to read
    check_part_options(MODELS, cfg, 'model')


def test_the_config_check_takes_the_tables_feature_ablations():
    for options in (dict(features=['sr'], use_adversarial=False),
                    dict(features=['sa'], use_consistency_loss=False),
                    dict(use_consistency_loss=False, use_adversarial=False)):
        cfg = tiny_dasd_cfg()
        cfg['disentangler'].update(options)
        check_part_options(MODELS, cfg, 'model')


# ------------------------------------------------------------------------------------ retriever


@pytest.fixture(scope='module')
def dasd():
    torch.manual_seed(0)
    return MODELS.build(tiny_dasd_cfg())


def test_changing_one_caption_leaves_the_others_outputs_alone(dasd):
    texts = list(BATCH['target_text'])
    first = dasd.language_branch.tokenize(texts)
    texts[2] = 'drei grüne Dreiecke oben links'
    second = dasd.language_branch.tokenize(texts)
    with torch.no_grad():
        a, _ = dasd.encode_target(first, BATCH['lang'])
        b, _ = dasd.encode_target(second, BATCH['lang'])
    torch.testing.assert_close(a[[0, 1, 3]], b[[0, 1, 3]], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(a[2], b[2])


def test_phase_losses_include_the_weighted_disentangling_terms(dasd):
    data = dasd.data_preprocessor(BATCH, True)
    dasd.disentangler.loss_weights = dict(adv=0.5, sc=0.1)
    dasd.set_phase('cross_modal', dict(cm=1.0, disentangler=2.0))
    torch.manual_seed(3)
    losses = dasd(mode='loss', **data)
    assert set(losses) == {'loss_cm', 'loss_adv', 'loss_sc'}
    r_source = dasd.backbone.encode_source_text(data['source_tokens'])
    embeddings = dasd.language_branch.embed(data['target_tokens'])
    torch.manual_seed(3)
    _, expected = dasd.disentangler(embeddings, data['target_tokens'], r_source=r_source)
    # The module weighs its terms (lambda_1 = 0.5, lambda_2 = 0.1), the phase scales them all.
    torch.testing.assert_close(losses['loss_sc'], 2.0 * expected['sc'])
    torch.testing.assert_close(losses['loss_adv'], 2.0 * expected['adv'])
    dasd.disentangler.loss_weights = dict(adv=1.0, sc=1.0)
    torch.manual_seed(3)
    _, unit = dasd.disentangler(embeddings, data['target_tokens'], r_source=r_source)
    torch.testing.assert_close(expected['adv'], 0.5 * unit['adv'])
    torch.testing.assert_close(expected['sc'], 0.1 * unit['sc'])
    dasd.set_phase('cross_modal', dict(cm=1.0, disentangler=0.0))
    assert set(dasd(mode='loss', **data)) == {'loss_cm'}
    with pytest.raises(KeyError, match=r"loss weights \['adv', 'sc'\] belong to the "
                                       'disentangler: set them in model.disentangler.loss_weights'):
        dasd.set_phase('cross_modal', dict(cm=1.0, adv=1.0, sc=0.1))
    with pytest.raises(KeyError, match='unknown loss weights'):
        dasd.set_phase('cross_lingual', dict(cl=1.0, kl=1.0))
