from types import SimpleNamespace

import pytest
import torch

from tests.models.adapters.peft_helpers import CAPTIONS, build_clip_branch
from xmr.models.adapters import AdapterContext, AdapterPlacement, HardPrompt, SoftPrompt
from xmr.models.adapters.prompt import insert_after_start


def test_insertion_extends_mask_and_moves_the_eos_index():
    x = torch.arange(2 * 4 * 1, dtype=torch.float32).view(2, 4, 1)
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    ctx = AdapterContext(lang='de', attention_mask=mask, eos_index=torch.tensor([2, 3]))
    out = insert_after_start(x, torch.tensor([[-1.0], [-2.0]]), ctx)
    assert out[:, :, 0].tolist() == [[0, -1, -2, 1, 2, 3], [4, -1, -2, 5, 6, 7]]
    assert ctx.attention_mask.tolist() == [[True, True, True, True, True, False],
                                           [True, True, True, True, True, True]]
    assert ctx.eos_index.tolist() == [4, 5]


def test_frozen_hard_prompt_equals_writing_the_prefix_into_the_caption():
    """Positions, mask and EOS after insertion match those of the prefixed text itself."""
    backbone, branch = build_clip_branch(dict(type='HardPrompt', text='a photo of'))
    tokenizer = branch.tokenizer
    prefixed = [f'a photo of {caption}' for caption in CAPTIONS]
    prefix_ids = tokenizer.encode('a photo of')[1:-1]
    for caption, text in zip(CAPTIONS, prefixed):
        ids = tokenizer.encode(caption)
        assert tokenizer.encode(text) == ids[:1] + prefix_ids + ids[1:]
    prompted = branch(branch.tokenize(CAPTIONS), ['de'] * 3)
    expected = backbone.encode_source_text(tokenizer(prefixed))
    torch.testing.assert_close(prompted, expected, atol=1e-5, rtol=1e-5)


def test_soft_prompt_set_to_token_embeddings_equals_the_prefixed_caption():
    backbone, branch = build_clip_branch(dict(type='SoftPrompt', num_tokens=3),
                                         languages=['de'])
    tokenizer = branch.tokenizer
    prefix_ids = torch.tensor(tokenizer.encode('a photo of')[1:-1])
    assert len(prefix_ids) == 3
    prompt = branch.adapters.sets['de']['-1:input']
    with torch.no_grad():
        prompt.prompt.copy_(backbone.text_tower.embed_tokens(prefix_ids))
    prompted = branch(branch.tokenize(CAPTIONS), ['de'] * 3)
    expected = backbone.encode_source_text(tokenizer([f'a photo of {c}' for c in CAPTIONS]))
    torch.testing.assert_close(prompted, expected, atol=1e-5, rtol=1e-5)


def test_trainable_hard_prompt_starts_from_the_text_embeddings():
    backbone, branch = build_clip_branch(dict(type='HardPrompt', text='a photo of',
                                              trainable=True), languages=['de'])
    prompt = branch.adapters.sets['de']['-1:input']
    ids = torch.tensor(branch.tokenizer.encode('a photo of')[1:-1])
    torch.testing.assert_close(prompt.prompt, backbone.text_tower.embed_tokens(ids))
    assert prompt.prompt.requires_grad and prompt.num_tokens == 3
    assert [n for n, _ in branch.named_parameters()] == ['adapters.sets.de.-1:input.prompt']


def test_a_context_without_an_eos_index_to_move_is_refused():
    ctx = AdapterContext(lang='de', attention_mask=torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match='a prompt needs ctx.attention_mask and ctx.eos_index'):
        insert_after_start(torch.zeros(1, 3, 2), torch.ones(1, 2), ctx)


def test_an_fp32_prompt_joins_bf16_tokens_as_bf16():
    """Under autocast the tower's tokens are bf16 and the prompt's weights fp32: the sequence
    stays bf16, as it would without a prompt."""
    ctx = AdapterContext(lang='de', attention_mask=torch.ones(1, 2, dtype=torch.bool),
                         eos_index=torch.tensor([1]))
    prompt = torch.tensor([[1.0 + 2 ** -12]])  # not a bf16 number: rounded to 1
    out = insert_after_start(torch.full((1, 2, 1), 3.0, dtype=torch.bfloat16), prompt, ctx)
    assert out.dtype == torch.bfloat16 and out[0, :, 0].tolist() == [3.0, 1.0, 3.0]


def test_a_soft_prompt_never_attached_goes_after_one_start_token():
    """Built alone (no branch to read the tokenizer's start tokens from), a soft prompt keeps
    the first token, the start token of the CLIP and XLM-R tokenizers, in front."""
    prompt = SoftPrompt(AdapterPlacement(1), num_tokens=2)
    with torch.no_grad():
        prompt.prompt.copy_(torch.tensor([[-1.0], [-2.0]]))
    x = torch.tensor([[[5.0], [6.0], [7.0]]])
    ctx = AdapterContext(lang='de', attention_mask=torch.ones(1, 3, dtype=torch.bool),
                         eos_index=torch.tensor([2]))
    assert prompt(x, ctx)[0, :, 0].tolist() == [5.0, -1.0, -2.0, 6.0, 7.0]
    assert ctx.eos_index.tolist() == [4]


def test_soft_prompt_initialisation_and_size():
    """PECTVLM's defaults: 4 vectors drawn from N(0, 0.02)."""
    torch.manual_seed(0)
    prompt = SoftPrompt(AdapterPlacement(512))
    assert prompt.prompt.shape == (4, 512) and prompt.num_tokens == 4
    assert prompt.prompt.std().item() == pytest.approx(0.02, rel=0.1)
    wide = SoftPrompt(AdapterPlacement(512), num_tokens=2, init_std=0.5)
    assert wide.prompt.std().item() == pytest.approx(0.5, rel=0.1)
    with pytest.raises(ValueError,
                       match='adapter SoftPrompt: num_tokens=0 must be a positive integer'):
        SoftPrompt(AdapterPlacement(8), num_tokens=0)


@pytest.mark.parametrize('num_tokens, max_length', [(4, 24), (10, 22)])
def test_captions_are_cut_to_leave_the_prompt_room_in_the_context(num_tokens, max_length):
    # Tiny CLIP context: 32 tokens; captions are cut at 24. 4 prompt tokens fit beside them;
    # 10 would overflow the context, which stopped the run at the first caption that long.
    backbone, branch = build_clip_branch(dict(type='SoftPrompt', num_tokens=num_tokens),
                                         languages=['de'])
    tokens = branch.tokenize([' '.join(['red'] * 40)])
    assert tokens['input_ids'].shape[1] == max_length
    assert branch(tokens, ['de']).shape == (1, backbone.embed_dim)


def test_a_prompt_that_leaves_no_room_for_a_caption_is_refused():
    with pytest.raises(ValueError, match='31 prompt tokens leave 1 of the 32-token context'):
        build_clip_branch(dict(type='SoftPrompt', num_tokens=31))


def test_unattached_hard_prompt_and_two_prompts_are_refused():
    with pytest.raises(RuntimeError, match='never attached'):
        HardPrompt(AdapterPlacement(8), text='a photo of')(torch.zeros(1, 2, 8),
                                                           AdapterContext(lang='de'))
    with pytest.raises(ValueError, match='one site holds one adapter'):
        build_clip_branch([dict(type='SoftPrompt'), dict(type='HardPrompt', text='a photo')])


def test_a_frozen_hard_prompt_holds_no_weights_or_ids_of_its_own():
    """It borrows the tower's frozen embedding and keeps its ids out of the state dict: a
    checkpoint of the branch holds nothing of it (its text is in its settings)."""
    _, branch = build_clip_branch(dict(type='HardPrompt', text='a photo of'), languages=['de'])
    prompt = branch.adapters.sets['de']['-1:input']
    assert prompt.num_tokens == 3
    assert list(prompt.state_dict()) == [] and list(branch.adapters.state_dict()) == []


def test_a_blank_prompt_text_and_one_of_no_pieces_are_refused():
    with pytest.raises(ValueError, match="a hard prompt needs a non-empty text, got ' '"):
        HardPrompt(AdapterPlacement(8), text=' ')
    no_pieces = SimpleNamespace(pieces=lambda text: [], start_tokens=1)
    with pytest.raises(ValueError, match="hard prompt '…' tokenises to no token between"):
        HardPrompt(AdapterPlacement(8), text='…').attach(no_pieces, torch.nn.Embedding(4, 8))


def test_a_frozen_hard_prompt_records_its_text_in_its_settings_and_a_trainable_one_nothing():
    """A frozen prompt embeds its text at every forward, so the text is what it computes with
    (a checkpoint records it); a trainable one's text only initialised its weights."""
    frozen = HardPrompt(AdapterPlacement(8), text='ein Foto von')
    trainable = HardPrompt(AdapterPlacement(8), text='ein Foto von', trainable=True)
    assert frozen.settings() == {'text': 'ein Foto von'}
    assert trainable.settings() == {}


def test_a_hard_prompt_shows_its_text_and_whether_it_trains_in_the_model_tree():
    """Printing a model names each hard prompt's text, trainable or not."""
    prompt = HardPrompt(AdapterPlacement(8), text='ein Foto von', trainable=True)
    assert repr(prompt) == "HardPrompt(text='ein Foto von', trainable=True)"


def _xlmr_tokenizer(shared_data, tmp_path, start_token: bool):
    """XLM-R's ``<s> pieces </s>``, or the same pieces as T5's tokenizers (SigLIP's, mT5's)
    write them, ``pieces </s>`` with no start token."""
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    from xmr.models.language.tokenizers import HFTokenizer

    path = shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json'
    if not start_token:
        fast = Tokenizer.from_file(str(path))
        fast.post_processor = TemplateProcessing(single='$A </s>', special_tokens=[('</s>', 2)])
        path = tmp_path / 'end_token_only.json'
        fast.save(str(path))
    return HFTokenizer(tokenizer_file=str(path))


def _assert_prompt_writes_the_prefix(prompt, tokenizer, ids_as_features) -> None:
    """Each prompted caption holds the ids the tokenizer gives the text prefixed with
    'a photo of': the whole prefix and nothing of the caption before it."""
    for caption in ['a dog', 'zwei Hunde im Schnee', '雪の中の犬']:
        ids = torch.tensor([tokenizer.encode(caption)])
        ctx = AdapterContext(lang='de', attention_mask=torch.ones_like(ids, dtype=torch.bool),
                             eos_index=torch.tensor([ids.shape[1] - 1]))
        prompted = prompt(ids_as_features(ids), ctx)[0, :, 0].round().long().tolist()
        assert prompted == tokenizer.encode(f'a photo of {caption}')
        assert int(ctx.eos_index) == len(prompted) - 1


@pytest.mark.parametrize('start_token', [True, False])
@pytest.mark.parametrize('kind', ['frozen_hard', 'soft'])
def test_a_prompt_goes_after_the_start_token_or_first_when_the_tokenizer_writes_none(
        shared_data, tmp_path, start_token, kind):
    tokenizer = _xlmr_tokenizer(shared_data, tmp_path, start_token)
    ids_as_features = torch.nn.Embedding.from_pretrained(
        torch.arange(tokenizer.vocab_size, dtype=torch.float32)[:, None])
    if kind == 'soft':
        prompt = SoftPrompt(AdapterPlacement(1), num_tokens=3)
        prefix = torch.tensor(tokenizer.encode('a photo of'))
        with torch.no_grad():
            prompt.prompt.copy_(ids_as_features(prefix[1:-1] if start_token else prefix[:-1]))
    else:
        prompt = HardPrompt(AdapterPlacement(1), text='a photo of')
    prompt.attach(tokenizer, ids_as_features)
    _assert_prompt_writes_the_prefix(prompt, tokenizer, ids_as_features)


def test_an_input_adapter_that_lengthens_the_tokens_without_their_mask_is_refused():
    """Packed, each later caption read its tokens at the wrong positions (its embedding changed
    with its batch, training on); padded, attention failed with SDPA's size error."""
    from xmr.registry import ADAPTERS

    @ADAPTERS.register_module()
    class ForgetfulPrompt(SoftPrompt):
        def forward(self, x, ctx):
            return torch.cat([self.prompt.expand(len(x), -1, -1), x], dim=1)

    try:
        _, branch = build_clip_branch(dict(type='ForgetfulPrompt', num_tokens=3),
                                      languages=['de'])
        with pytest.raises(ValueError, match=(
                r'^input adapter ForgetfulPrompt \(de\) returned \(3, \d+\) tokens for a mask of '
                r'\(3, \d+\): an adapter that lengthens the sequence updates '
                r'ctx\.attention_mask and ctx\.eos_index too')):
            branch(branch.tokenize(CAPTIONS), ['de'] * 3)
    finally:
        ADAPTERS.module_dict.pop('ForgetfulPrompt')
