"""Checkpoint facts: which differences refuse a checkpoint, how a long differing text is cut
for the message, and the facts' round trip through a uint8 tensor."""
import pytest
import torch

from xmr.models.retrievers.checkpoint_facts import (
    _where_different,
    check_checkpoint_facts,
    decode_facts,
    store_facts_as_tensor,
)


def test_equal_facts_pass_and_every_differing_one_is_named():
    """Each fact both sides state with other values, in the config's order."""
    facts = dict(backbone='OpenCLIPBackbone', embed_dim=32, languages=['de', 'zh'])
    check_checkpoint_facts(dict(facts), dict(facts))
    with pytest.raises(ValueError, match=r"^checkpoint does not match the config: backbone: "
                                         r"checkpoint 'OpenCLIPBackbone' vs config 'Other'; "
                                         r"embed_dim: checkpoint 32 vs config 48$"):
        check_checkpoint_facts(facts, dict(facts, embed_dim=48, backbone='Other'))


def test_languages_compare_in_any_order_and_other_lists_in_theirs():
    """A model holds each language's weights under its code: ``['zh', 'de']`` is the model
    trained for ``['de', 'zh']``; the order of another list (adapters) is the model's."""
    check_checkpoint_facts(dict(languages=['de', 'zh']), dict(languages=['zh', 'de']))
    with pytest.raises(ValueError, match=r"adapters: checkpoint \['LoRA', 'StaticAdapter'\]"):
        check_checkpoint_facts(dict(adapters=['LoRA', 'StaticAdapter']),
                               dict(adapters=['StaticAdapter', 'LoRA']))


def test_a_fact_one_side_does_not_state_is_not_compared():
    """A checkpoint written before a fact existed loads; a fact only it states is not read."""
    check_checkpoint_facts(dict(embed_dim=32), dict(embed_dim=32, routine='routine1'))
    check_checkpoint_facts(dict(embed_dim=32, routine='routine1'), dict(embed_dim=32))


def test_texts_up_to_three_contexts_long_and_other_values_are_shown_whole():
    """72 characters (three contexts of 24) are short enough to show whole; non-texts are
    never cut."""
    short, other = 'a' * 72, 'a' * 71 + 'b'
    assert _where_different(short, other) == (short, other)
    assert _where_different([1, 2], [1, 3]) == ([1, 2], [1, 3])
    assert _where_different('a' * 100, 5) == ('a' * 100, 5)


def test_a_long_text_is_cut_to_where_it_differs_with_the_context_either_side():
    """50 shared characters, one that differs, 50 shared: 24 either side, marked as cut."""
    first, second = 'a' * 50 + 'X' + 'b' * 50, 'a' * 50 + 'Y' + 'b' * 50
    assert _where_different(first, second) == ('…' + 'a' * 24 + 'X' + 'b' * 24 + '…',
                                               '…' + 'a' * 24 + 'Y' + 'b' * 24 + '…')


def test_a_difference_at_either_end_is_cut_on_the_other_side_only():
    """No ellipsis on the side where the text itself ends."""
    assert _where_different('X' + 'b' * 80, 'Y' + 'b' * 80) == ('X' + 'b' * 24 + '…',
                                                                'Y' + 'b' * 24 + '…')
    assert _where_different('a' * 80 + 'X', 'a' * 80 + 'Y') == ('…' + 'a' * 24 + 'X',
                                                                '…' + 'a' * 24 + 'Y')


def test_one_long_text_against_a_short_one_is_cut():
    """The longer side decides: 100 characters against 61 are cut at the 61st."""
    assert _where_different('a' * 100, 'a' * 60 + 'b') == ('…' + 'a' * 64,
                                                           '…' + 'a' * 24 + 'b')


def test_an_inserted_character_shows_with_the_context_after_it():
    """``x`` inserted at 30 of ``x*30 + a*60``: the common end (the a's) stops where the
    shorter text's common start begins, so both sides show 24 a's after the x's."""
    first, second = 'x' * 30 + 'a' * 60, 'x' * 31 + 'a' * 60
    assert _where_different(first, second) == ('…' + 'x' * 24 + 'a' * 24 + '…',
                                               '…' + 'x' * 25 + 'a' * 24 + '…')


def test_decode_facts_reads_json_bytes_and_leaves_other_values_as_they_are():
    """Only a uint8 tensor holds facts; a weight tensor or a decoded dict is passed through."""
    encoded = torch.tensor(list(b'{"embed_dim": 32}'), dtype=torch.uint8)
    assert decode_facts(encoded) == {'embed_dim': 32}
    weights = torch.tensor([123.0, 34.0])
    assert decode_facts(weights) is weights
    assert decode_facts({'embed_dim': 32}) == {'embed_dim': 32}


class WithFacts(torch.nn.Module):
    """A module whose extra state is a facts dict, checked on load as a retriever's is."""

    def __init__(self, facts: dict) -> None:
        super().__init__()
        self.facts = facts
        self.weight = torch.nn.Parameter(torch.zeros(2))
        store_facts_as_tensor(self)

    def get_extra_state(self) -> dict:
        return self.facts

    def set_extra_state(self, state: dict) -> None:
        check_checkpoint_facts(state, self.facts)


def test_facts_travel_as_a_uint8_tensor_and_are_checked_on_load():
    """DDP broadcasts state entries as tensors: the facts are JSON bytes in the state dict,
    a dict again for ``set_extra_state``, which refuses other values."""
    state = WithFacts(dict(embed_dim=32)).state_dict()
    assert state['_extra_state'].dtype == torch.uint8
    assert decode_facts(state['_extra_state']) == dict(embed_dim=32)
    WithFacts(dict(embed_dim=32)).load_state_dict(state)
    with pytest.raises(ValueError, match='embed_dim: checkpoint 32 vs config 48'):
        WithFacts(dict(embed_dim=48)).load_state_dict(state)


def test_a_state_dict_without_facts_loads_unchecked_when_not_strict():
    """MMEngine loads checkpoints with ``strict=False``: weights converted from elsewhere
    carry no facts, and their load must not fail looking for them."""
    model = WithFacts(dict(embed_dim=32))
    model.load_state_dict({'weight': torch.ones(2)}, strict=False)
    torch.testing.assert_close(model.weight.detach(), torch.ones(2))
