import copy
import re

import pytest
import torch

from tests.conftest import (
    TINY_CLIP,
    UNCACHED_TOKENIZER,
    check_offline_tokenizer_error,
    randomise,
    tiny_backbone_cfg,
    tiny_branch_cfg,
)
from tests.models.language.test_packed_tokens import ADAPTER_SETS
from xmr.models.adapters.base import AdapterContext, AdapterPlacement, AdapterSite, BaseAdapter
from xmr.models.adapters.language_adapters import LanguageAdapters
from xmr.models.language import branch as branch_module
from xmr.models.language.branch import select_tokens
from xmr.models.language.tokenizers import TokenizerOutOfReach
from xmr.registry import ADAPTERS, MODELS


@pytest.fixture
def parts():
    torch.manual_seed(0)
    backbone = MODELS.build(tiny_backbone_cfg())
    branch = MODELS.build(tiny_branch_cfg(), default_args=dict(tower=backbone.text_tower))
    return backbone, branch


TEXTS = ['ein roter Kreis', '一个红色的圆', 'zwei blaue Quadrate links']
LANGS = ['de', 'zh', 'de']


def test_adapters_change_the_output(parts):
    backbone, branch = parts
    tokens = branch.tokenize(TEXTS)
    with_adapters = branch(tokens, LANGS)
    bare = MODELS.build(tiny_branch_cfg(adapters=[]), default_args=dict(tower=backbone.text_tower))
    bare.embedding.load_state_dict(branch.embedding.state_dict())
    assert not torch.allclose(with_adapters, bare(tokens, LANGS))


def test_branch_equals_frozen_tower_plus_adapters_by_hand(parts):
    backbone, branch = parts
    tokens = branch.tokenize(TEXTS[:1])
    tower = backbone.text_tower
    x = tower.add_positions(branch.embedding(tokens['input_ids']))
    mask = tower.build_mask(tokens['attention_mask'])
    for i in range(tower.num_blocks):
        x = tower.run_block(i, x, mask)
        adapter = branch.adapters.sets['de'][f'{i}:block_output']
        x = x + adapter.up(torch.relu(adapter.down(x)))
    expected = tower.head(x[0, tokens['eos_index'][0]])
    torch.testing.assert_close(branch(tokens, ['de'])[0], expected)


def test_a_built_tokenizer_is_the_branch_s_own(parts):
    """Its pad_to was read as a built tokenizer's, then TOKENIZERS.build refused it."""
    backbone, branch = parts
    built = branch.tokenizer
    torch.manual_seed(0)
    given = MODELS.build(dict(tiny_branch_cfg(), tokenizer=built),
                         default_args=dict(tower=backbone.text_tower))
    assert given.tokenizer.vocabulary_digest() == built.vocabulary_digest()
    assert (given.tokenizer.max_length, given.tokenizer.pad_to) == (built.max_length, None)
    tower = backbone.text_tower
    tower.fixed_context = True  # a SigLIP-like tower reads its whole context
    with pytest.raises(ValueError, match=f'the target tokenizer pads to None, but the text '
                       f'tower reads a fixed context of {tower.context_length} tokens'):
        MODELS.build(dict(tiny_branch_cfg(), tokenizer=built), default_args=dict(tower=tower))


def test_a_branch_built_on_the_backbone_s_tokenizer_leaves_the_source_captions_whole(parts):
    """Prompt tokens lower the branch tokenizer's max_length; given the backbone's own (the
    tower's, as TowerTokenEmbedding takes it), that cut the source captions as well."""
    backbone, _ = parts
    source = backbone.tokenizer
    caption = ' '.join(['a red circle left of two blue squares'] * 8)
    before = source([caption])
    assert int(before['attention_mask'].sum()) == source.max_length  # fills the context
    branch = MODELS.build(dict(type='TargetLanguageBranch', languages=['de'], tokenizer=source,
                               embedding=dict(type='TowerTokenEmbedding'),
                               adapters=dict(type='SoftPrompt', num_tokens=4)),
                          default_args=dict(tower=backbone.text_tower))
    assert branch.tokenizer.max_length == source.max_length - 4
    after = source([caption])
    assert torch.equal(after['input_ids'], before['input_ids'])
    with torch.no_grad():
        assert torch.equal(backbone.encode_source_text(after), backbone.encode_source_text(before))


def test_mixed_language_batch_equals_per_language_batches(parts):
    _, branch = parts
    mixed = branch(branch.tokenize(TEXTS), LANGS)
    german = branch(branch.tokenize([TEXTS[0], TEXTS[2]]), ['de', 'de'])
    chinese = branch(branch.tokenize([TEXTS[1]]), ['zh'])
    torch.testing.assert_close(mixed[[0, 2]], german, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mixed[[1]], chinese, atol=1e-5, rtol=1e-4)


def test_languages_have_their_own_adapters(parts):
    _, branch = parts
    tokens = branch.tokenize(TEXTS[:1])
    assert not torch.allclose(branch(tokens, ['de']), branch(tokens, ['zh']))


def test_only_embedding_and_adapters_receive_gradients(parts):
    backbone, branch = parts
    branch(branch.tokenize(TEXTS), LANGS).sum().backward()
    assert all(p.grad is None for p in backbone.parameters())
    grads = {n for n, p in branch.named_parameters() if p.grad is not None}
    assert grads == {n for n, _ in branch.named_parameters()}
    assert any(n.startswith('adapters.sets.de.') for n in grads)
    assert 'embedding.table.weight' in grads


def test_unknown_language_names_the_configured_ones(parts):
    _, branch = parts
    with pytest.raises(KeyError, match=r"no adapters for language 'fr'.*\['de', 'zh'\]"):
        branch(branch.tokenize(TEXTS[:1]), ['fr'])


def test_width_mismatches_fail_at_build_naming_both_numbers(parts):
    backbone, _ = parts
    with pytest.raises(ValueError, match='width 768 does not match the text tower width 32'):
        MODELS.build(tiny_branch_cfg(adapters=dict(type='StaticAdapter', width=768)),
                     default_args=dict(tower=backbone.text_tower))
    bad_embedding = tiny_branch_cfg()
    bad_embedding['embedding'] = dict(type='TargetEmbedding', width=512)
    with pytest.raises(ValueError, match='width 512 does not match the text tower width 32'):
        MODELS.build(bad_embedding, default_args=dict(tower=backbone.text_tower))
    long_tokens = tiny_branch_cfg()
    long_tokens['tokenizer']['max_length'] = 33
    with pytest.raises(ValueError, match='max_length 33 exceeds the text tower context length 32'):
        MODELS.build(long_tokens, default_args=dict(tower=backbone.text_tower))


@pytest.mark.parametrize('max_length', [0, -3, 2, 8.0])
def test_a_target_max_length_that_keeps_no_piece_of_a_caption_is_refused_at_build(parts,
                                                                                 max_length):
    """0 or below sliced nothing off, and the first long caption overflowed the tower's
    context at its batch; 2 kept SentencePiece's start and end tokens alone; a float failed at
    the first caption to cut."""
    backbone, _ = parts
    cfg = tiny_branch_cfg()
    cfg['tokenizer']['max_length'] = max_length
    with pytest.raises(ValueError, match=re.escape(
            f'tokenizer.max_length={max_length!r} of the target language branch keeps no piece '
            'of a caption: a SentencePieceTokenizer writes 1 start token(s) and an end token; '
            'set tokenizer.max_length to an integer >= 3')):
        MODELS.build(cfg, default_args=dict(tower=backbone.text_tower))
    cfg['tokenizer']['max_length'] = 3
    assert MODELS.build(cfg, default_args=dict(tower=backbone.text_tower)).tokenizer.max_length == 3


def test_a_table_with_fewer_rows_than_the_tokenizer_has_ids_is_refused_at_build(parts):
    """It built, and a caption with a high id stopped the run at its batch (IndexError)."""
    backbone, _ = parts
    cfg = tiny_branch_cfg()
    cfg['embedding']['vocab_size'] = 47
    with pytest.raises(ValueError, match=re.escape(
            'model.language_branch.embedding.vocab_size=47 holds fewer rows than the target '
            "tokenizer has ids (48); leave it out to take the tokenizer's size")):
        MODELS.build(cfg, default_args=dict(tower=backbone.text_tower))
    cfg['embedding']['vocab_size'] = 50  # room to spare is taken
    MODELS.build(cfg, default_args=dict(tower=backbone.text_tower))


@pytest.mark.parametrize('adapters, pad_to, message', [
    (None, 33, 'target tokenizer pad_to 33 exceeds the text tower context length 32; set '
               'model.language_branch.tokenizer.pad_to <= 32'),
    ([dict(type='StaticAdapter', hidden=8), dict(type='SoftPrompt', num_tokens=4)], 32,
     'target tokenizer pad_to 32 with the 4 prompt tokens exceeds the text tower context length '
     '32; set model.language_branch.tokenizer.pad_to <= 28'),
])
def test_a_pad_to_beyond_the_context_left_for_captions_is_refused_at_build(parts, adapters,
                                                                           pad_to, message):
    """The authors' pad_to=77 with prompts on a 77-token tower failed at every forward."""
    backbone, _ = parts
    cfg = tiny_branch_cfg(adapters=adapters)
    cfg['tokenizer']['pad_to'] = pad_to
    with pytest.raises(ValueError, match=re.escape(message)):
        MODELS.build(cfg, default_args=dict(tower=backbone.text_tower))
    fits = pad_to - 4 if adapters else pad_to - 1
    cfg['tokenizer'].update(pad_to=fits, max_length=fits)
    branch = MODELS.build(cfg, default_args=dict(tower=backbone.text_tower))
    assert branch.tokenize(['ein roter Kreis'])['input_ids'].shape == (1, fits)


def test_num_blocks_limits_the_branch(parts):
    backbone, _ = parts
    short = MODELS.build(tiny_branch_cfg(num_blocks=1), default_args=dict(
        tower=backbone.text_tower))
    assert {k.split(':')[0] for k in short.adapters.sets['de']} == {'0'}
    for num_blocks in (0, 4):
        with pytest.raises(ValueError, match=f'num_blocks={num_blocks} but the text tower has 3 '
                                             'blocks'):
            MODELS.build(tiny_branch_cfg(num_blocks=num_blocks),
                         default_args=dict(tower=backbone.text_tower))


def test_a_branch_of_fewer_blocks_pools_after_its_last_block(parts):
    """``num_blocks=2`` of 3: the output is the head on the hidden state after block 1 and its
    adapter, computed by hand; the frozen block 2 never runs."""
    backbone, _ = parts
    tower = backbone.text_tower
    short = MODELS.build(tiny_branch_cfg(num_blocks=2), default_args=dict(tower=tower))
    randomise(short.adapters, 1)
    tokens = short.tokenize(TEXTS[:1])
    x = tower.add_positions(short.embedding(tokens['input_ids']))
    mask = tower.build_mask(tokens['attention_mask'])
    for i in range(2):
        x = tower.run_block(i, x, mask)
        adapter = short.adapters.sets['de'][f'{i}:block_output']
        x = x + adapter.up(torch.relu(adapter.down(x)))
    expected = tower.head(x[0, tokens['eos_index'][0]])
    with torch.no_grad():
        torch.testing.assert_close(short(tokens, ['de'])[0], expected)


ROUTED_TEXTS = ['ein roter Kreis', '一个蓝色的正方形', 'zwei rote Kreise links oben',
                'un cercle', '一个绿色的三角形在左边', 'drei Quadrate']
ROUTED_LANGS = ['de', 'zh', 'de', 'fr', 'zh', 'de']


@ADAPTERS.register_module(name='_TestConditionScaleAdapter', force=True)
class ConditionScaleAdapter(BaseAdapter):
    """Scales each sample by the mean of its own condition at this block: a conditioned adapter
    of no grouped class, called on each language's rows with that language's condition."""

    reads_condition = True

    def __init__(self, placement: AdapterPlacement) -> None:
        super().__init__(placement)
        self.gain = torch.nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        scale = ctx.condition[self.block_index].mean((1, 2))                       # [b]
        return x * (1 + self.gain * scale)[:, None, None]


#: Conditioned adapters beside a site not grouped, and of a class not grouped: the batch is
#: sorted by language, and each language's adapters read only its own samples' condition.
ROUTED_ADAPTER_SETS = {**ADAPTER_SETS, 'dynamic+static': [
    *ADAPTER_SETS['dynamic'], dict(type='StaticAdapter', hidden=8, sites=['mlp.output'])],
    'conditioned': [dict(type='_TestConditionScaleAdapter')]}


@pytest.mark.parametrize('pack', [False, True], ids=['padded', 'packed'])
@pytest.mark.parametrize('adapter_set', list(ROUTED_ADAPTER_SETS))
def test_a_mixed_batch_runs_the_blocks_once_and_equals_each_language_alone(adapter_set, pack):
    torch.manual_seed(0)
    backbone = MODELS.build(tiny_backbone_cfg())
    tower = backbone.text_tower
    tower.pack_tokens = pack
    branch = MODELS.build(tiny_branch_cfg(languages=('de', 'zh', 'fr'),
                                          adapters=ROUTED_ADAPTER_SETS[adapter_set]),
                          default_args=dict(tower=tower))
    randomise(branch.adapters, 1)
    tokens = branch.tokenize(ROUTED_TEXTS)
    generator = torch.Generator().manual_seed(4)
    condition = {i: torch.randn(len(ROUTED_TEXTS), 4, 4, generator=generator)
                 for i in range(tower.num_blocks)}
    embeddings = branch.embed(tokens)
    calls = []
    run_block = tower.run_block
    tower.run_block = lambda *args: calls.append(args[0]) or run_block(*args)
    mixed = branch.encode(embeddings, tokens, ROUTED_LANGS, condition)
    del tower.run_block
    assert calls == list(range(tower.num_blocks))

    # Each language alone: its rows of the padded batch through the blocks with its hooks.
    expected = torch.empty_like(mixed)
    for lang in dict.fromkeys(ROUTED_LANGS):
        index = torch.tensor([i for i, code in enumerate(ROUTED_LANGS) if code == lang])
        ctx = AdapterContext(lang=lang, condition={i: c[index] for i, c in condition.items()},
                             attention_mask=tokens['attention_mask'][index],
                             eos_index=tokens['eos_index'][index])
        hidden = tower.encode_embeddings(embeddings[index], ctx.attention_mask,
                                         hooks=branch.adapters.hooks(ctx))
        expected[index] = tower.head(tower.pool(hidden, ctx.attention_mask, ctx.eos_index))
    torch.testing.assert_close(mixed, expected, rtol=1e-5, atol=1e-5)
    trainable = list(branch.adapters.parameters())
    got = torch.autograd.grad(mixed.square().sum(), trainable, retain_graph=True)
    want = torch.autograd.grad(expected.square().sum(), trainable)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_mixed_batch_of_prompted_languages_equals_each_language_alone(parts):
    backbone, _ = parts
    branch = MODELS.build(tiny_branch_cfg(adapters=[dict(type='SoftPrompt', num_tokens=3),
                                                    dict(type='StaticAdapter', hidden=8)]),
                          default_args=dict(tower=backbone.text_tower))
    randomise(branch.adapters, 1)
    mixed = branch(branch.tokenize(TEXTS), LANGS)
    german = branch(branch.tokenize([TEXTS[0], TEXTS[2]]), ['de', 'de'])
    chinese = branch(branch.tokenize([TEXTS[1]]), ['zh'])
    torch.testing.assert_close(mixed[[0, 2]], german, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mixed[[1]], chinese, atol=1e-5, rtol=1e-4)


def test_each_language_adds_only_its_own_linear_delta():
    width = 4
    lora = dict(type='LoRA', r=2, targets=['fc'])
    adapters = LanguageAdapters(['de', 'zh'], lora, width, 1, {AdapterSite.MLP_FC: (4, 8)})
    randomise(adapters, 2)
    del adapters.sets['zh']['0:mlp_fc']
    x = torch.randn(5, width)
    german = AdapterContext(lang='de', rows=slice(0, 2))
    hooks = adapters.hooks(german, AdapterContext(lang='zh', rows=slice(2, 5)))
    delta = hooks.linear(AdapterSite.MLP_FC, 0, x)
    expected_de = adapters.sets['de']['0:mlp_fc'](x[:2], german)
    torch.testing.assert_close(delta, torch.cat([expected_de, torch.zeros(3, 8)]))
    assert hooks.linear(AdapterSite.ATTN_OUT, 0, x) is None


@pytest.mark.parametrize('adapter_set, sorts', [('dynamic', False), ('static', True)])
def test_only_a_batch_with_a_site_not_grouped_is_sorted_by_language(adapter_set, sorts,
                                                                   monkeypatch):
    backbone = MODELS.build(tiny_backbone_cfg())
    branch = MODELS.build(tiny_branch_cfg(languages=('de', 'zh', 'fr'),
                                          adapters=ADAPTER_SETS[adapter_set]),
                          default_args=dict(tower=backbone.text_tower))
    tokens = branch.tokenize(ROUTED_TEXTS)
    condition = {i: torch.randn(len(ROUTED_TEXTS), 4, 4) for i in range(3)}
    selected = []
    monkeypatch.setattr(branch_module, 'select_tokens',
                        lambda *args: selected.append(args) or select_tokens(*args))
    branch.encode(branch.embed(tokens), tokens, ROUTED_LANGS, condition)
    assert bool(selected) == sorts


def test_a_grouped_dasd_branch_traces_as_one_graph():
    """No graph break in the blocks and grouped adapters: what a captured (CUDA graph) step
    needs."""
    torch.manual_seed(0)
    backbone = MODELS.build(tiny_backbone_cfg())
    backbone.text_tower.pack_tokens = False
    branch = MODELS.build(tiny_branch_cfg(languages=('de', 'zh', 'fr'),
                                          adapters=ADAPTER_SETS['dynamic']),
                          default_args=dict(tower=backbone.text_tower))
    randomise(branch.adapters, 1)
    tokens = branch.tokenize(ROUTED_TEXTS)
    condition = {i: torch.randn(len(ROUTED_TEXTS), 4, 4) for i in range(3)}
    embeddings = branch.embed(tokens)
    torch._dynamo.reset()
    traced = torch.compile(branch.encode, backend='eager', fullgraph=True)
    got = traced(embeddings, tokens, ROUTED_LANGS, condition)
    torch.testing.assert_close(got, branch.encode(embeddings, tokens, ROUTED_LANGS, condition))


def test_the_embedding_table_pads_with_the_tokenizers_pad_id(parts):
    _, branch = parts
    pad = branch.tokenizer.pad_id
    tokens = branch.tokenize(TEXTS)
    assert (tokens['input_ids'] == pad).any()
    table = branch.embedding.table.weight
    assert not table[pad].any()
    branch(tokens, LANGS).sum().backward()
    assert not table.grad[pad].any()


def test_a_language_code_for_each_sample_is_required(parts):
    _, branch = parts
    tokens = branch.tokenize(TEXTS)
    with pytest.raises(ValueError, match='2 language codes for a batch of 3'):
        branch.encode(branch.embed(tokens), tokens, LANGS[:2])


def test_a_fixed_context_target_tokenizer_without_max_length_keeps_what_fits():
    """On a SigLIP-like tower (bidirectional, pooling the last of its 32 positions) the branch
    pads target captions to the context; a tokenizer config without max_length kept its class's
    77, refused as 'pad_to=32 is shorter than max_length=77', a pad_to the config never gave
    (on a causal tower the same config builds). It now keeps what fits, prompts included; a
    max_length the config gives is still checked."""
    model_cfg = copy.deepcopy(TINY_CLIP)
    model_cfg['text_cfg'].update(no_causal_mask=True, pool_type='last')
    tower = MODELS.build(dict(tiny_backbone_cfg(), model_cfg=model_cfg)).text_tower
    assert tower.fixed_context and (tower.context_length, tower.reserved_positions) == (32, 0)

    def tokenizer(adapters, **options):
        cfg = dict(tiny_branch_cfg(adapters=adapters), embedding=dict(type='TowerTokenEmbedding'),
                   tokenizer=dict(type='OpenCLIPTokenizer', model_name='ViT-B-32', **options))
        return MODELS.build(cfg, default_args=dict(tower=tower)).tokenizer

    plain = tokenizer([])
    assert (plain.max_length, plain.pad_to) == (32, 32)
    prompted = tokenizer([dict(type='SoftPrompt', num_tokens=3)])
    assert (prompted.max_length, prompted.pad_to) == (29, 29)
    ids = prompted(['a dog ' * 40])['input_ids']
    assert ids.shape == (1, 29) and int(ids[0, -1]) == 49407  # cut with its end token kept
    assert tokenizer([], pad_to=32).max_length == 32
    with pytest.raises(ValueError, match=re.escape(
            'target tokenizer max_length 30 does not fit the 32-token context less 3 prompt '
            'tokens; set tokenizer.max_length <= 29')):
        tokenizer([dict(type='SoftPrompt', num_tokens=3)], max_length=30)


def test_an_uncached_hugging_face_tokenizer_offline_names_the_key_and_the_local_routes(
        parts, offline_hub, shared_data):
    def branch(tokenizer: dict):
        return MODELS.build({**tiny_branch_cfg(), 'tokenizer': tokenizer},
                            default_args=dict(tower=parts[0].text_tower))

    with pytest.raises(TokenizerOutOfReach) as raised:
        branch(dict(type='HFTokenizer', name_or_path=UNCACHED_TOKENIZER))
    check_offline_tokenizer_error(raised, 'model.language_branch.tokenizer: ')
    # XLM-R's tokenizer.json loads offline.
    local = shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json'
    built = branch(dict(type='HFTokenizer', max_length=32, tokenizer_file=str(local)))
    assert built.tokenizer.vocab_size == 250002


def test_a_grouped_membership_keeps_the_configured_order_of_languages():
    """The batch's languages in the branch's configured order, whatever order the batch
    brings them in, so that a compiled step sees one tuple for every batch holding them."""
    backbone = MODELS.build(tiny_backbone_cfg())
    branch = MODELS.build(tiny_branch_cfg(languages=('de', 'zh', 'fr'),
                                          adapters=ADAPTER_SETS['dynamic']),
                          default_args=dict(tower=backbone.text_tower))
    membership = branch.membership(['fr', 'zh', 'fr', 'de'], torch.device('cpu'))
    assert membership.languages == ('de', 'zh', 'fr')
    assert membership.columns.tolist() == [2, 1, 2, 0]
    assert branch.membership(['zh', 'zh'], torch.device('cpu')) is None


def test_languages_with_their_own_tower_weights_read_their_own_samples_condition(parts):
    """Each language runs the tower alone on its tuned copies; its conditioned adapters still
    read only its own samples' condition, as when its samples come alone."""
    backbone, _ = parts
    branch = MODELS.build(tiny_branch_cfg(adapters=[dict(type='_TestConditionScaleAdapter')],
                                          tuned_weights=['ln_final.*']),
                          default_args=dict(tower=backbone.text_tower))
    randomise(branch.adapters, 1)
    tokens = branch.tokenize(TEXTS)
    generator = torch.Generator().manual_seed(4)
    condition = {i: torch.randn(len(TEXTS), 4, 4, generator=generator) for i in range(3)}
    with torch.no_grad():
        mixed = branch(tokens, LANGS, condition)
        for lang in dict.fromkeys(LANGS):
            index = [i for i, code in enumerate(LANGS) if code == lang]
            alone = branch(branch.tokenize([TEXTS[i] for i in index]), [lang] * len(index),
                           {block: c[index] for block, c in condition.items()})
            torch.testing.assert_close(mixed[index], alone, rtol=1e-5, atol=1e-5)
