"""What every PEFT module must do in a frozen tower (issue: PEFT family).

Zero-initialised modules leave the frozen model's output unchanged; one optimiser step changes
the output and moves only the trained language's module; nothing else of the model moves.
"""
import pytest
import torch

from tests.models.adapters.peft_helpers import CAPTIONS, build_clip_branch, frozen_tower_output

ZERO_INIT = {
    'lora_qv': dict(type='LoRA', r=2, alpha=4, targets=['q', 'v']),
    'lora_all': dict(type='LoRA', r=1, targets=['q', 'k', 'v', 'out', 'fc', 'proj']),
    'houlsby': dict(type='HoulsbyAdapter', hidden=8, zero_init=True),
    'compacter': dict(type='CompacterAdapter', reduction_factor=4, phm_dim=4, zero_init=True),
    'lora_and_houlsby': [dict(type='LoRA', r=1, targets=['q', 'v']),
                         dict(type='HoulsbyAdapter', hidden=4, zero_init=True)],
}
TRAINABLE = {
    **ZERO_INIT,
    'soft_prompt': dict(type='SoftPrompt', num_tokens=3),
    'hard_prompt': dict(type='HardPrompt', text='a photo of', trainable=True),
}


@pytest.mark.parametrize('name', sorted(ZERO_INIT))
def test_zero_initialised_module_leaves_the_frozen_output_unchanged(name):
    backbone, branch = build_clip_branch(ZERO_INIT[name])
    tokens = branch.tokenize(CAPTIONS)
    torch.testing.assert_close(branch(tokens, ['de', 'zh', 'de']),
                               frozen_tower_output(backbone, tokens), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('name', sorted(TRAINABLE))
def test_one_step_changes_the_output_and_moves_only_that_languages_module(name):
    backbone, branch = build_clip_branch(TRAINABLE[name])
    model = torch.nn.ModuleDict(dict(backbone=backbone, branch=branch))
    for param_name, parameter in model.named_parameters():
        parameter.requires_grad_(param_name.startswith('branch.adapters.'))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tokens = branch.tokenize(CAPTIONS)
    langs = ['de'] * len(CAPTIONS)
    with torch.no_grad():
        start = branch(tokens, langs)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    target = torch.randn_like(start)
    ((branch(tokens, langs) - target) ** 2).sum().backward()
    optimizer.step()

    with torch.no_grad():
        assert not torch.allclose(branch(tokens, langs), start, atol=1e-6)
    after = model.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved, 'no parameter moved'
    assert all(k.startswith('branch.adapters.sets.de.') for k in moved), sorted(moved)


def test_the_other_language_keeps_its_output_after_training_one():
    backbone, branch = build_clip_branch(ZERO_INIT['lora_qv'])
    with torch.no_grad():
        for name, parameter in branch.named_parameters():
            if '.de.' in name and 'lora_B' in name:
                parameter.normal_()
    tokens = branch.tokenize(CAPTIONS)
    frozen = frozen_tower_output(backbone, tokens)
    torch.testing.assert_close(branch(tokens, ['zh'] * 3), frozen, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(branch(tokens, ['de'] * 3), frozen, atol=1e-4)


ROUND_TRIP = {
    **TRAINABLE,
    'compacter_shared_rule': dict(type='CompacterAdapter', reduction_factor=4, share_rule=True),
    'frozen_hard_prompt': dict(type='HardPrompt', text='a photo of'),
}


@pytest.mark.parametrize('name', sorted(ROUND_TRIP))
def test_a_state_dict_round_trip_gives_the_same_outputs(name):
    """Strictly loaded into a branch whose modules hold other values (a shared Compacter rule
    included, which its layers hold without registering), the adapters give the source's
    outputs for every language."""
    _, source = build_clip_branch(ROUND_TRIP[name])
    _, target = build_clip_branch(ROUND_TRIP[name])
    for seed, branch in ((1, source), (2, target)):
        torch.manual_seed(seed)
        with torch.no_grad():
            for parameter in branch.adapters.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.3)
    tokens = source.tokenize(CAPTIONS)
    langs = ['de', 'zh', 'de']
    assert not torch.allclose(source(tokens, langs), target(tokens, langs)) or \
        not list(source.adapters.parameters())
    target.adapters.load_state_dict(source.adapters.state_dict(), strict=True)
    torch.testing.assert_close(target(tokens, langs), source(tokens, langs), rtol=0, atol=0)
