"""A language's own copies of tower weights (PECTVLM's LayerNorms and head, FT's whole tower)."""
import re

import pytest
import torch

from tests.models.backbones.mclip_helpers import (
    CAPTIONS,
    TINY_XLMR,
    mclip_reference,
    needs_tokenizer,
    tiny_mclip,
    tokenizer_cfg,
)
from xmr.models.language.language_modules import (
    language_parameter_report,
    load_language_module,
    save_language_module,
)
from xmr.models.language.tower_weights import TowerWeights
from xmr.registry import MODELS

pytestmark = needs_tokenizer

PECTVLM_WEIGHTS = ['layers.*.output.LayerNorm.*', 'text_proj.*']


@pytest.fixture(scope='module')
def backbone():
    return tiny_mclip()


def build_branch(backbone, tuned_weights, adapters=None):
    return MODELS.build(
        dict(type='TargetLanguageBranch', languages=['de', 'fr'], tokenizer=tokenizer_cfg(),
             embedding=dict(type='TowerTokenEmbedding'), adapters=adapters,
             tuned_weights=tuned_weights),
        default_args=dict(tower=backbone.text_tower))


def hugging_face_on(backbone, weights):
    """M-CLIP's own forward (Hugging Face XLM-R + the linear head) on the tower's weights with
    ``weights`` (tower names) put in their place."""
    from transformers import XLMRobertaModel

    state = {**backbone.text_tower.state_dict(), **weights}
    xlmr = XLMRobertaModel(backbone.config, add_pooling_layer=False).eval()
    xlmr.embeddings.load_state_dict({k[len('embeddings.'):]: v for k, v in state.items()
                                     if k.startswith('embeddings.')}, strict=False)
    xlmr.encoder.layer.load_state_dict({k[len('layers.'):]: v for k, v in state.items()
                                        if k.startswith('layers.')})
    head = torch.nn.Linear(*reversed(state['text_proj.weight'].shape))
    head.load_state_dict({'weight': state['text_proj.weight'], 'bias': state['text_proj.bias']})
    return lambda tokens: mclip_reference(xlmr, head, tokens)


def perturb(module, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)


def test_pectvlm_patterns_copy_both_layernorms_of_every_layer_and_the_head(backbone):
    weights = TowerWeights(backbone.text_tower, PECTVLM_WEIGHTS)
    layers, width = TINY_XLMR['num_hidden_layers'], TINY_XLMR['hidden_size']
    names = dict(weights.named_parameters())
    assert sorted(names) == sorted(
        [f'layers.{i}.{part}LayerNorm.{p}' for i in range(layers)
         for part in ('attention.output.', 'output.') for p in ('weight', 'bias')]
        + ['text_proj.weight', 'text_proj.bias'])
    embed_dim = backbone.embed_dim
    assert sum(p.numel() for p in names.values()) == (layers * 2 * 2 * width
                                                      + width * embed_dim + embed_dim)
    for name, copy in names.items():
        original = backbone.text_tower.get_parameter(name)
        assert copy is not original
        torch.testing.assert_close(copy, original, rtol=0, atol=0)


def test_a_pattern_matching_nothing_is_refused_by_name(backbone):
    with pytest.raises(ValueError, match=r"pattern 'layers\.\*\.ln_1\.\*' matches no parameter"):
        build_branch(backbone, ['layers.*.ln_1.*'])


def test_each_language_encodes_with_its_own_weights_as_m_clip_would(backbone):
    branch = build_branch(backbone, PECTVLM_WEIGHTS)
    german = branch.adapters.tower_weights('de')
    perturb(german, seed=1)
    tokens = branch.tokenize(CAPTIONS)
    frozen = {k: v.clone() for k, v in backbone.text_tower.state_dict().items()}
    mixed = branch(tokens, ['de', 'fr', 'de', 'fr'])

    expected_de = hugging_face_on(backbone, dict(german.named_parameters()))(tokens)
    torch.testing.assert_close(mixed[[0, 2]], expected_de[[0, 2]], atol=1e-5, rtol=1e-4)
    # French still holds copies equal to the tower: it encodes as the frozen M-CLIP does.
    torch.testing.assert_close(mixed[[1, 3]], backbone.encode_source_text(tokens)[[1, 3]],
                               atol=1e-5, rtol=1e-4)
    assert not torch.allclose(mixed[[0, 2]], backbone.encode_source_text(tokens)[[0, 2]],
                              atol=1e-3)
    for name, value in backbone.text_tower.state_dict().items():
        assert torch.equal(value, frozen[name]), name


def test_a_step_trains_only_the_language_own_copies(backbone):
    branch = build_branch(backbone, PECTVLM_WEIGHTS, adapters=dict(type='LoRA', r=1, alpha=16,
                                                                   targets=['q', 'v']))
    german = dict(branch.adapters.tower_weights('de').named_parameters())
    tower = backbone.text_tower
    # Even an unfrozen tower gets no gradient on the weights the language replaces.
    tower.requires_grad_(True)
    try:
        tokens = branch.tokenize(CAPTIONS[:2])
        branch(tokens, ['de', 'de']).pow(2).sum().backward()
        assert all(tower.get_parameter(name).grad is None for name in german)
        assert tower.get_parameter('layers.0.intermediate.dense.weight').grad is not None
    finally:
        tower.requires_grad_(False)
        tower.zero_grad(set_to_none=True)
    assert all(german[name].grad is not None and german[name].grad.abs().sum() > 0
               for name in german)
    assert all(p.grad is None for p in branch.adapters.sets['fr'].parameters())


def test_full_fine_tuning_copies_the_whole_tower_embeddings_included(backbone):
    branch = build_branch(backbone, ['*'])
    german = branch.adapters.tower_weights('de')
    tower_count = sum(p.numel() for p in backbone.text_tower.parameters())
    assert sum(p.numel() for p in german.parameters()) == tower_count
    perturb(german, seed=2)
    tokens = branch.tokenize(CAPTIONS)
    expected = hugging_face_on(backbone, dict(german.named_parameters()))(tokens)
    torch.testing.assert_close(branch(tokens, ['de'] * len(CAPTIONS)), expected, atol=1e-5,
                               rtol=1e-4)
    report = language_parameter_report(branch)
    assert report['de'].parameters == tower_count
    assert report['de'].of_text_encoder == 1.0


def build_own_table_branch(backbone, tuned_weights):
    """A branch with its own token table (``TargetEmbedding``) running one of the tower's
    layers."""
    return MODELS.build(
        dict(type='TargetLanguageBranch', languages=['de'], tokenizer=tokenizer_cfg(),
             embedding=dict(type='TargetEmbedding', table_width=16), adapters=None,
             num_blocks=1, tuned_weights=tuned_weights),
        default_args=dict(tower=backbone.text_tower))


def test_full_fine_tuning_copies_only_the_weights_the_branch_reads(backbone):
    """A branch with its own table never reads the tower's word embeddings, nor the layers past
    its ``num_blocks``: ``'*'`` copies neither (a copy of M-CLIP's 250,002-row table would
    train nothing, yet sit in the optimiser and in every checkpoint)."""
    branch = build_own_table_branch(backbone, ['*'])
    german = dict(branch.adapters.tower_weights('de').named_parameters())
    tower = dict(backbone.text_tower.named_parameters())
    layers = TINY_XLMR['num_hidden_layers']
    assert layers > 1
    unread = {'embeddings.word_embeddings.weight'} | {
        name for name in tower for index in range(1, layers)
        if name.startswith(f'layers.{index}.')}
    assert sorted(german) == sorted(set(tower) - unread)
    assert 'layers.0.output.LayerNorm.weight' in german and 'text_proj.weight' in german
    state = branch.state_dict()
    assert not any(key.endswith('tower_weights.embeddings.word_embeddings.weight')
                   for key in state)
    # Every copy kept is read: each gets a gradient.
    tokens = branch.tokenize(CAPTIONS)
    branch(tokens, ['de'] * len(CAPTIONS)).pow(2).sum().backward()
    assert all(copy.grad is not None and copy.grad.abs().sum() > 0
               for copy in german.values())


@pytest.mark.parametrize('pattern, why', [
    ('embeddings.word_embeddings.*', r'its own token table \(TargetEmbedding\)'),
    ('layers.1.*', r'1 of the tower.s 2 blocks \(num_blocks=1\)')])
def test_a_pattern_matching_only_weights_the_branch_never_reads_is_refused(backbone, pattern,
                                                                            why):
    assert TINY_XLMR['num_hidden_layers'] == 2
    with pytest.raises(ValueError, match=rf"^tuned_weights pattern '{re.escape(pattern)}' "
                                         rf'matches only weights the branch never reads: .*'
                                         rf'{why}'):
        build_own_table_branch(backbone, [pattern])


def test_the_tower_gets_its_weights_back_after_an_error(backbone):
    weights = TowerWeights(backbone.text_tower, PECTVLM_WEIGHTS)
    originals = dict(backbone.text_tower.named_parameters())
    with pytest.raises(RuntimeError, match='inside'):
        with weights.swapped_into(backbone.text_tower):
            assert backbone.text_tower.get_parameter('text_proj.weight') is \
                weights.get_parameter('text_proj.weight')
            raise RuntimeError('inside')
    assert all(p is originals[n] for n, p in backbone.text_tower.named_parameters())


def test_a_language_module_file_carries_its_tower_weights(backbone, tmp_path):
    trained = build_branch(backbone, PECTVLM_WEIGHTS)
    perturb(trained.adapters.sets['de'], seed=3)
    path = save_language_module(trained, 'de', tmp_path / 'de.pth')
    state = torch.load(path, weights_only=False)['state_dict']
    assert 'adapters.tower_weights.text_proj.weight' in state
    fresh = build_branch(backbone, PECTVLM_WEIGHTS)
    load_language_module(fresh, path)
    tokens = fresh.tokenize(CAPTIONS)
    torch.testing.assert_close(fresh(tokens, ['de'] * 4), trained(tokens, ['de'] * 4))


@pytest.mark.parametrize('pattern, count', [('embeddings.word_embeddings.*', 1),
                                            ('layers.1.attention.self.*.weight', 3),
                                            ('layers.1.*', 16)])
def test_the_refusal_lists_at_most_three_unread_weights_and_counts_them(backbone, pattern,
                                                                        count):
    """The first three names, ``...`` only when more are left out, and the count with its
    plural."""
    names = [name for name, _ in backbone.text_tower.named_parameters()
             if re.fullmatch(re.escape(pattern).replace(r'\*', '.*'), name)]
    assert len(names) == count
    listed = ', '.join(names[:3]) + (' ...' if count > 3 else '')
    weights = f"{count} weight{'s' if count > 1 else ''}: "
    with pytest.raises(ValueError, match=re.escape(f'never reads: {listed} ({weights}')):
        build_own_table_branch(backbone, [pattern])
