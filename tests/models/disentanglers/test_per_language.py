"""PerLanguageDisentangler: each caption through its own language's SDM, losses as batch means,
gradients only into the languages of the batch, and the retriever's per_language switch."""
from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_backbone_cfg, tiny_branch_cfg, tiny_retriever_cfg
from tests.models.disentanglers.test_semantics import ADAPTER, BATCH, GENERATOR, batch, build
from xmr.models.disentanglers import PerLanguageDisentangler
from xmr.models.language.branch import select_tokens
from xmr.registry import MODELS

LANGS = ['de', 'fr', 'de', 'de']


@pytest.fixture(scope='module')
def tower():
    torch.manual_seed(0)
    return MODELS.build(tiny_backbone_cfg()).text_tower


def per_language(tower) -> PerLanguageDisentangler:
    modules = {}
    for seed, lang in enumerate(('de', 'fr')):
        modules[lang] = build(tower)
        torch.manual_seed(10 + seed)  # the two languages start from different weights
        for parameter in modules[lang].parameters():
            parameter.data.normal_(0, 0.1)
    return PerLanguageDisentangler(modules)


def assert_each_caption_conditioned_alone(sdm, embeddings, tokens, condition, langs) -> None:
    """Each caption's ``W^z`` in ``condition`` is the one its language's module gives it
    alone."""
    assert condition
    for row, lang in enumerate(langs):
        index = torch.tensor([row])
        alone, _ = sdm.per_language[lang](embeddings[index], select_tokens(tokens, index))
        assert set(alone) == set(condition)
        for block, weights in alone.items():
            torch.testing.assert_close(condition[block][index], weights)


def test_each_caption_is_conditioned_by_its_own_languages_module(tower):
    sdm = per_language(tower)
    embeddings, tokens, _ = batch(tower)
    condition, losses = sdm(embeddings, tokens, langs=LANGS)
    assert losses == {}
    assert_each_caption_conditioned_alone(sdm, embeddings, tokens, condition, LANGS)
    other, _ = sdm.per_language['fr'](embeddings[:1], select_tokens(tokens, torch.tensor([0])))
    assert not torch.allclose(condition[0][0], other[0][0])


def test_losses_are_batch_means_and_train_only_the_batchs_languages(tower):
    sdm = per_language(tower)
    embeddings, tokens, r_source = batch(tower)
    _, losses = sdm(embeddings, tokens, r_source=r_source, langs=LANGS)
    assert set(losses) == {'sc', 'adv'}
    # L_sc by hand: lambda_2 * mean over all captions and dimensions of |f^sr - r^S|, each
    # caption's f^sr from its own language's module.
    f_sr = torch.stack([
        sdm.per_language[lang].semantic_related(embeddings[[row]],
                                                select_tokens(tokens, torch.tensor([row])))[0]
        for row, lang in enumerate(LANGS)])
    torch.testing.assert_close(losses['sc'], 0.1 * (f_sr - r_source).abs().mean())
    only_german = ['de'] * 4
    sdm.zero_grad()
    sum(sdm(embeddings, tokens, r_source=r_source, langs=only_german)[1].values()).backward()
    assert all(p.grad is None for p in sdm.per_language['fr'].parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0
               for p in sdm.per_language['de'].parameters())


def test_a_language_with_one_caption_still_has_an_adversarial_negative(tower):
    sdm = per_language(tower)
    embeddings, tokens, r_source = batch(tower)
    _, losses = sdm(embeddings, tokens, r_source=r_source, langs=LANGS)  # one fr caption
    assert torch.isfinite(losses['adv'])


def test_without_a_discriminator_a_batch_of_one_caption_trains_as_the_shared_module(tower):
    """No module reads negatives, so none are drawn: the wrapper refused a batch of one (a last
    partial batch) naming a discriminator that did not exist."""
    torch.manual_seed(0)
    shared = build(tower, use_adversarial=False)
    wrapped = PerLanguageDisentangler({'de': shared})
    embeddings, tokens, r_source = batch(tower)
    one = torch.tensor([0])
    inputs = (embeddings[one], select_tokens(tokens, one))
    _, alone = shared(*inputs, r_source=r_source[one])
    _, losses = wrapped(*inputs, r_source=r_source[one], langs=['de'])
    assert set(losses) == {'sc'}
    torch.testing.assert_close(losses['sc'], alone['sc'])


def test_adversarial_negatives_are_drawn_from_the_whole_batch(tower, monkeypatch):
    """As in the shared SDM: r^S- of each caption is another caption's r^S, drawn over the
    whole batch (other languages included), then handed to each caption's language module."""
    from xmr.models.disentanglers.discriminator import shuffled_negatives

    sdm = per_language(tower)
    embeddings, tokens, r_source = batch(tower)
    seen = {}
    for lang, module in sdm.per_language.items():
        def spy(*args, lang=lang, forward=module.forward, **training):
            seen[lang] = training['r_negative']
            return forward(*args, **training)

        monkeypatch.setattr(module, 'forward', spy)
    torch.manual_seed(5)
    sdm(embeddings, tokens, r_source=r_source, langs=LANGS)
    torch.manual_seed(5)
    negatives = r_source[shuffled_negatives(len(LANGS), device=r_source.device)]
    for lang in ('de', 'fr'):
        rows = [row for row, code in enumerate(LANGS) if code == lang]
        torch.testing.assert_close(seen[lang], negatives[rows])


def test_languages_must_be_given_and_known(tower):
    sdm = per_language(tower)
    embeddings, tokens, _ = batch(tower)
    with pytest.raises(ValueError, match='needs the language of each of the 4 captions'):
        sdm(embeddings, tokens)
    with pytest.raises(ValueError, match=r"no disentangler for languages \['cs'\].*\['de', 'fr'\]"):
        sdm(embeddings, tokens, langs=['de', 'cs', 'de', 'de'])


def test_the_retriever_builds_one_per_language_from_the_switch_and_trains_it():
    cfg = tiny_retriever_cfg(
        language_branch=tiny_branch_cfg(adapters=dict(type='DynamicAdapter', hidden=4)),
        disentangler=dict(type='SemanticsDisentangler', adapter=ADAPTER, generator=GENERATOR,
                          per_language=True))
    torch.manual_seed(0)
    model = MODELS.build(cfg)
    assert isinstance(model.disentangler, PerLanguageDisentangler)
    assert list(model.disentangler.per_language) == model.languages
    model.set_phase('cross_lingual', dict(cl=1.0, disentangler=1.0))
    losses = model(mode='loss', **model.data_preprocessor(dict(BATCH), True))
    assert set(losses) == {'loss_cl', 'loss_sc', 'loss_adv'}
    sum(losses.values()).backward()
    for lang in model.languages:  # both languages of the batch train their own SDM
        assert model.disentangler.per_language[lang].sr_projection.weight.grad.abs().sum() > 0
    shared = MODELS.build(dict(cfg, disentangler=dict(cfg['disentangler'], per_language=False)))
    count = sum(p.numel() for p in shared.disentangler.parameters())
    assert sum(p.numel() for p in model.disentangler.parameters()) == len(model.languages) * count


def test_a_language_list_of_another_length_than_the_batch_is_refused(tower):
    """Three codes for four captions would leave the fourth caption's condition unwritten."""
    sdm = per_language(tower)
    embeddings, tokens, _ = batch(tower)
    with pytest.raises(ValueError, match='needs the language of each of the 4 captions'):
        sdm(embeddings, tokens, langs=LANGS[:3])


def test_tongan_whose_code_names_a_module_method_has_its_own_module(tower):
    """``to`` (Tongan) is also ``nn.Module.to``, a name ``add_module`` refuses."""
    sdm = PerLanguageDisentangler({'to': build(tower), 'de': build(tower)})
    assert list(sdm.per_language) == ['to', 'de']
    assert any(key.startswith('per_language.to.') for key in sdm.state_dict())
    embeddings, tokens, _ = batch(tower)
    langs = ['to', 'de', 'to', 'de']
    condition, _ = sdm(embeddings, tokens, langs=langs)
    assert_each_caption_conditioned_alone(sdm, embeddings, tokens, condition, langs)


def test_a_batch_contrastive_l_sc_keeps_the_shared_modules_order_of_losses(tower):
    """``sc`` then ``adv``, as one shared module returns them (the order logs list them in)."""
    contrastive = dict(type='InfoNCELoss', temperature=0.1)
    sdm = PerLanguageDisentangler({lang: build(tower, consistency_loss=contrastive)
                                   for lang in ('de', 'fr')})
    embeddings, tokens, r_source = batch(tower)
    shared = build(tower, consistency_loss=contrastive)
    assert list(shared(embeddings, tokens, r_source=r_source)[1]) == ['sc', 'adv']
    assert list(sdm(embeddings, tokens, r_source=r_source, langs=LANGS)[1]) == ['sc', 'adv']


def test_with_a_batch_contrastive_l_sc_inference_conditions_each_caption_by_its_language(tower):
    """Without ``r^S`` (inference) there is no L_sc to compute over the batch: each caption
    is conditioned as its language's module alone conditions it, and no loss is returned."""
    contrastive = dict(type='InfoNCELoss', temperature=0.1)
    sdm = PerLanguageDisentangler({lang: build(tower, consistency_loss=contrastive)
                                   for lang in ('de', 'fr')})
    embeddings, tokens, _ = batch(tower)
    condition, losses = sdm(embeddings, tokens, langs=LANGS)
    assert losses == {}
    assert_each_caption_conditioned_alone(sdm, embeddings, tokens, condition, LANGS)


def test_the_settings_are_the_language_modules_and_no_language_is_refused(tower):
    sdm = per_language(tower)
    assert sdm.settings() == sdm.per_language['de'].settings() == dict(
        depth=1, generator_activation=sdm.per_language['de'].generator.activation,
        padding_as_tokens=sdm.per_language['de'].padding_as_tokens)
    with pytest.raises(ValueError, match='PerLanguageDisentangler needs at least one language'):
        PerLanguageDisentangler({})
