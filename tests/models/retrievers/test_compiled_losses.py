"""``CrossLingualRetriever(compile=...)``: DASD's training losses and evaluation encoding
compiled equal eager ones, and the compiled code depends on which languages a batch holds, not
on their mix, nor (within a multiple of 8 tokens) on its length."""
from __future__ import annotations

import copy
import inspect

import pytest
import torch
from mmengine.config import Config
from mmengine.runner import Runner
from torch._dynamo.utils import counters

from tests.configs.test_dasd_configs import DEMO, PAPER, run_phases, small_demo, tiny_model
from tests.configs.test_dasd_configs import MULTI30K as CLFT
from tests.configs.test_dasd_configs import batch as dasd_batch
from tests.conftest import tiny_retriever_cfg
from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
from xmr.models.retrievers.cross_lingual import COMPILED_PAD_MULTIPLE
from xmr.registry import MODELS

DASD = next(p for p in PAPER if p.name == 'dasd_clip-vit-b32_multi30k_zeroshot.py')
#: AOTAutograd's traced forward and backward, run eagerly: the graphs Inductor would compile,
#: at test speed.
TRACED = dict(backend='aot_eager')


def shallow(model: dict) -> dict:
    """A tiny model config with 3 text blocks: tracing time grows with the blocks."""
    clip = model['backbone']['model_cfg']
    model['backbone']['model_cfg'] = dict(clip, text_cfg=dict(clip['text_cfg'], layers=3))
    return model


def dasd(compile: dict | None = None, per_language: bool = False, **tokenizer):
    cfg = shallow(tiny_model(Config.fromfile(DASD)))
    cfg['disentangler']['per_language'] = per_language
    cfg['language_branch']['tokenizer'].update(tokenizer)
    torch.manual_seed(0)
    model = MODELS.build(dict(cfg, compile=compile))
    model.set_phase('cross_lingual', dict(cl=1.0, disentangler=1.0))
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith(('language_branch.', 'disentangler.')))
    return model


def losses_and_grads(model, langs: list[str], **captions) -> list[torch.Tensor]:
    data = model.data_preprocessor(dict(dasd_batch(langs), lang=langs, **captions), True)
    torch.manual_seed(1)  # the discriminator's shuffled negatives
    losses = model(mode='loss', **data)
    trained = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(sum(losses.values()), trained, allow_unused=True)
    return [*(losses[k] for k in sorted(losses)), *(g for g in grads if g is not None)]


# A shared SDM compiles with the branch into one graph. A per-language one runs eagerly
# (torch.compiler.disable): the step's code breaks around it into four graphs, the parts of
# the loss and of encode_target before and after it, of which a new set of languages changes
# one (the branch's).
@pytest.mark.slow
@pytest.mark.parametrize('per_language, graphs', [(False, 1), (True, 4)],
                         ids=['shared', 'per-language'])
def test_compiled_losses_equal_eager_and_compile_once_per_set_of_languages(per_language, graphs):
    eager, compiled = dasd(per_language=per_language), dasd(TRACED, per_language)
    compiled.load_state_dict(eager.state_dict())
    torch._dynamo.reset()
    counters.clear()
    de, fr, cs = eager.languages
    for langs, made in (([de, fr, cs, de], graphs), ([cs, cs, fr, de], graphs),
                        ([fr, de, de, fr], graphs + 1)):
        want, got = losses_and_grads(eager, langs), losses_and_grads(compiled, langs)
        assert len(got) == len(want) > 3
        for mine, expected in zip(got, want, strict=True):
            torch.testing.assert_close(mine, expected, rtol=1e-5, atol=1e-6)
        # Two mixes of all three languages share the code; the batch without cs is a new set.
        assert counters['stats']['unique_graphs'] == made


@pytest.mark.slow
def test_batches_padded_to_one_width_share_the_compiled_code():
    """Two batches whose longest captions differ in length, but not in multiples of 8 tokens:
    padded to the multiple (the compiled model's default) they run one graph; padded to their
    longest (``pad_to_multiple_of=1``), the second length compiles the code again."""
    # Dynamo's graphs run as captured: a shape that needs a new graph needs it before any
    # backend sees it (AOTAutograd's tracing of the three took 23 s of this test's 43 s).
    captured = dict(backend='eager')
    bucketed, exact = dasd(captured), dasd(captured, pad_to_multiple_of=1)
    for tokenizer in (bucketed.backbone.tokenizer, bucketed.language_branch.tokenizer):
        assert tokenizer.pad_to_multiple_of == COMPILED_PAD_MULTIPLE
    tokenizer = exact.language_branch.tokenizer
    lengths = {n: tokenizer(['Kreis' + ' Kreis' * n])['input_ids'].shape[1] for n in range(6)}
    short, long = next((a, b) for a in lengths for b in lengths
                       if (lengths[a] - 1) // 8 == (lengths[b] - 1) // 8
                       and lengths[a] < lengths[b])
    langs = [*bucketed.languages, bucketed.languages[0]]
    for model, graphs in ((bucketed, 1), (exact, 2)):
        torch._dynamo.reset()
        counters.clear()
        for n in (short, long):
            losses_and_grads(model, langs, target_text=['Kreis' + ' Kreis' * n, 'ein', 'un', 'a'])
        assert counters['stats']['unique_graphs'] == graphs


@pytest.mark.slow
def test_compiled_evaluation_equals_eager_and_compiles_once_per_language():
    """``encode_text``, as the evaluation loops call it: one language a batch, batches of
    several sizes and widths. The frozen tower's English and the first target language's code
    are each made static, then dynamic in the batch's shape; each other language adds one
    graph."""
    eager, compiled = dasd(), dasd(TRACED)
    compiled.load_state_dict(eager.state_dict())
    eager.eval(), compiled.eval()
    torch._dynamo.reset()
    counters.clear()
    captions = ['ein roter Kreis', 'un carré bleu', 'zwei rote Kreise', '一个十字',
                'Kreis' + ' Kreis' * 8]
    source = compiled.source_language
    for made, lang in zip((2, 4, 5, 6), (source, *compiled.languages), strict=True):
        for size in (5, 3, 4):
            with torch.no_grad():
                want, got = (model.encode_text(model.data_preprocessor.caption_tokens(
                    [{lang: captions[:size]}])[lang][0], lang) for model in (eager, compiled))
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert counters['stats']['unique_graphs'] == made


def test_a_copy_compiles_its_own_losses():
    model = dasd(TRACED)
    twin = copy.deepcopy(model)
    assert twin._losses is not model._losses
    assert twin._source_embeddings is not model._source_embeddings
    assert twin._target_embeddings is not model._target_embeddings
    langs = [*model.languages, model.languages[0]]
    torch.testing.assert_close(losses_and_grads(twin, langs)[0], losses_and_grads(model, langs)[0])


def test_every_phase_and_language_of_one_language_batches_runs_compiled(monkeypatch):
    """The losses are guarded on a one-language batch's language and on the phase's losses:
    the limit of the languages plus 2 was spent within two phases, and the rest ran eagerly,
    with a warning."""
    from torch._dynamo import convert_frame

    warned = []
    monkeypatch.setattr(convert_frame.log, 'warning',
                        lambda message, *args: warned.append(message % args))
    with torch._dynamo.config.patch(recompile_limit=2):
        torch._dynamo.reset()
        model = dasd(dict(backend='eager'))
        for phase, weights in (('source_finetune', dict(source_cm=1.0)),
                               ('cross_lingual', dict(cl=1.0, disentangler=1.0)),
                               ('cross_modal', dict(cm=1.0))):
            model.set_phase(phase, weights)
            for lang in model.languages:
                for words in (1, 9):  # two widths
                    data = model.data_preprocessor(dict(
                        dasd_batch([lang]), target_text=['Kreis ' * words] * 4), True)
                    model(mode='loss', **data)
    assert not [line for line in warned if 'recompile_limit' in line]


@pytest.mark.parametrize('options', [TRACED, {}], ids=['options', 'defaults'])
def test_compile_refuses_adapters_that_sort_each_batch_by_language(options):
    with pytest.raises(ValueError, match='GroupedAdapter'):
        MODELS.build(tiny_retriever_cfg(compile=options))


@pytest.mark.parametrize('options', [None, {}], ids=['eager', 'defaults'])
def test_compile_without_options_compiles_with_torchs_defaults(options):
    """``compile=dict()`` ran eagerly, as ``None`` does: the model's methods stayed bound."""
    model = dasd(options)
    assert model.compile_options == options
    compiled = [not inspect.ismethod(getattr(model, name)) for name in model.COMPILED]
    assert compiled == [options is not None] * len(model.COMPILED)
    assert (model.language_branch.tokenizer.pad_to_multiple_of == COMPILED_PAD_MULTIPLE) == (
        options is not None)


@pytest.mark.slow
def test_every_phase_of_a_paper_config_runs_compiled():
    # The clft schedule: source finetune (towers trained on raw images), cross-lingual,
    # cross-modal; the paper's per-language SDMs.
    cfg = Config.fromfile(CLFT)
    model = MODELS.build(dict(shallow(tiny_model(cfg)), compile=TRACED))
    torch._dynamo.reset()
    counters.clear()
    run_phases(cfg, model)
    assert counters['stats']['unique_graphs'] >= len(cfg.train_cfg.phases)


@pytest.mark.slow
def test_a_compiled_run_of_the_demo_trains_as_the_eager_one(tmp_path):
    """The Runner's three phases, validation and checkpoint with compiled losses and
    evaluation: the trained weights and the validation's metrics equal an eager run's."""
    allow_mmengine_checkpoint_types()
    trained, metrics = {}, {}
    # Dynamo's graphs run as captured: AOTAutograd's (TRACED) are compared with eager above, per
    # set of languages; tracing them for every phase and validation here took 79 s, this 42 s.
    for name, options in (('eager', None), ('compiled', dict(backend='eager'))):
        cfg = small_demo(DEMO, tmp_path / name)
        cfg.model.compile = options
        cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=-1, save_last=True)
        runner = Runner.from_cfg(cfg)
        counters.clear()
        runner.train()
        assert (counters['stats']['unique_graphs'] > 0) == (options is not None)
        trained[name] = {k: v for k, v in runner.model.state_dict().items()
                         if k.startswith(('language_branch.', 'disentangler.'))}
        metrics[name] = {k: v.current() for k, v in runner.message_hub.log_scalars.items()
                         if k.startswith('val/') and not k.endswith('time')}
    assert (tmp_path / 'compiled' / 'last_checkpoint').is_file()
    assert metrics['compiled'] == pytest.approx(metrics['eager']) and len(metrics['eager']) > 3
    # 1e-5: the compiled run pads its batches to multiples of 8 tokens, and Adam's step turns
    # the padding's rounding in a rarely seen row's small gradient into up to 4e-6 of weight.
    for key, value in trained['eager'].items():
        torch.testing.assert_close(trained['compiled'][key], value, rtol=1e-5, atol=1e-5,
                                   msg=key)
