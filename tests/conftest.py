"""Shared fixtures: a tiny random CLIP and the path of the real data fixtures."""
from __future__ import annotations

import gc
import importlib.util
import json
import multiprocessing
import os
import types
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

#: The suite's settings, a plugin apart from torch (tests/plugin.py).
pytest_plugins = ['tests.plugin']

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO / '..' / 'shared' / 'data').resolve()

TINY_CLIP = dict(
    embed_dim=32,
    vision_cfg=dict(image_size=32, layers=2, width=32, patch_size=8, head_width=16),
    text_cfg=dict(context_length=32, vocab_size=49408, width=32, heads=2, layers=3),
)

CORPUS = ['ein roter Kreis', 'zwei blaue Quadrate links', 'un cercle rouge à gauche',
          '一个红色的圆', '两个蓝色的正方形在左边', 'drei grüne Dreiecke oben']


def pytest_configure() -> None:
    """Under pytest-xdist, share the cores among the workers as the tools share them among a
    run's processes: each worker's torch would take every core, and N workers' spinning OpenMP
    threads then slow one another down."""
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', 1))
    if workers > 1:
        from xmr.engine.threads import choose_cpu_threads
        torch.set_num_threads(choose_cpu_threads(local_processes=workers)[0])


#: A mixed-language training batch of four 32 px images (German and Chinese captions), the
#: retriever tests' common input. Its media have their own seed: at import, the global stream's
#: state depends on what was collected before.
MIXED_BATCH = dict(
    media=torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8,
                        generator=torch.Generator().manual_seed(0)),
    source_text=['a red circle', 'a blue square', 'two red circles', 'a green triangle'],
    target_text=['ein roter Kreis', '一个蓝色的正方形', 'zwei rote Kreise', '一个绿色的三角形'],
    lang=['de', 'zh', 'de', 'zh'], media_id=['a', 'b', 'c', 'd'], index=[0, 1, 2, 3])


def benchmark_script(name: str) -> types.ModuleType:
    """``tools/benchmarks/<name>.py`` loaded as a module (the scripts are no package)."""
    spec = importlib.util.spec_from_file_location(
        name, REPO / 'tools' / 'benchmarks' / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_backbone_cfg(**overrides) -> dict:
    return dict(type='OpenCLIPBackbone', arch=None, model_cfg=TINY_CLIP, **overrides)


def tiny_branch_cfg(languages=('de', 'zh'), adapters=None, **overrides) -> dict:
    return dict(type='TargetLanguageBranch', languages=list(languages),
                tokenizer=dict(type='SentencePieceTokenizer', corpus=CORPUS * 20, vocab_size=48,
                               max_length=32),
                embedding=dict(type='TargetEmbedding', table_width=24),
                adapters=adapters if adapters is not None else dict(type='StaticAdapter',
                                                                    hidden=8),
                **overrides)


def tiny_retriever_cfg(**overrides) -> dict:
    cfg = dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
               language_branch=tiny_branch_cfg())
    cfg.update(overrides)
    return cfg


def tiny_dasd_cfg() -> dict:
    """DASD's retriever on the tiny CLIP: dynamic adapters (hidden 4) and the SDM (stream
    adapters of hidden 8, a generator of ``d_z = 16``, ``d_u = 4``)."""
    return tiny_retriever_cfg(
        language_branch=tiny_branch_cfg(adapters=dict(type='DynamicAdapter', hidden=4)),
        disentangler=dict(type='SemanticsDisentangler',
                          adapter=dict(type='StaticAdapter', hidden=8),
                          generator=dict(d_z=16, d_u=4)))


@pytest.fixture(autouse=True)
def _process_settings_of_the_tools_restored():
    """A tool run in the test's process sets torch's threads for a process of its own (every
    core but one) and ``LOCAL_RANK``: the worker's share of the cores (pytest_configure) and
    its environment are given back."""
    threads, rank = torch.get_num_threads(), os.environ.get('LOCAL_RANK')
    yield
    torch.set_num_threads(threads)
    if rank is None:
        os.environ.pop('LOCAL_RANK', None)
    else:
        os.environ['LOCAL_RANK'] = rank


@pytest.fixture(autouse=True)
def _runner_instances_of_the_test_released():
    """Forget the process-wide MMEngine instances a test's runners made (loggers closed,
    message hubs, visualizers, scopes: :func:`~xmr.engine.runner.runner_instances_released`).

    MMEngine names a runner built from a config of no file by the second it starts, and hands a
    runner of a later test started in that second the earlier one's instances: a visualizer
    writing into the earlier test's ``tmp_path``, removed once that test passed (a forked DDP
    child failed to dump its config there). A kept logger's stream handler, bound to the
    ``sys.stdout`` of the test that made it, printed '--- Logging error ---' into later tests.
    """
    from xmr.engine.runner import runner_instances_released

    with runner_instances_released():
        yield


@pytest.fixture(autouse=True)
def _loader_workers_of_the_test_collected():
    """A DataLoader iterator a test leaves in a reference cycle (a traceback's frames, a
    runner's loaders) kept its worker processes until a later collection, in another test or
    at the session's end, where its ``__del__`` joining them was interrupted by pytest-xdist's
    shutdown (a ``KeyboardInterrupt`` printed after the last test): collected, and its workers
    ended, by the test that made it."""
    yield
    if multiprocessing.active_children():
        gc.collect()


def randomise(module: torch.nn.Module, seed: int = 0, scale: float = 0.2) -> None:
    """Random values in every parameter of ``module``: LayerNorm scales ``1 + 0.1 * N(0, 1)``,
    the rest ``scale * N(0, 1)``. Default initialisations hide misplaced weights: two
    LayerNorms equal, zero biases, zero LoRA B and adapter up-projections that change nothing.
    """
    generator = torch.Generator().manual_seed(seed)
    norm_scales = {id(m.weight) for m in module.modules()
                   if isinstance(m, torch.nn.LayerNorm) and m.weight is not None}
    with torch.no_grad():
        for parameter in module.parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            parameter.copy_(1 + 0.1 * noise if id(parameter) in norm_scales else scale * noise)


@pytest.fixture
def tiny_retriever():
    from xmr.registry import MODELS

    torch.manual_seed(0)
    return MODELS.build(tiny_retriever_cfg())


class Interrupt(Exception):
    """Stands in for a kill (Ctrl-C, a crash) in the middle of a run."""


def decoded_media(monkeypatch: pytest.MonkeyPatch, interrupt_at: object = None) -> list:
    """Record the media ``xmr.apis`` decodes, in order, from now on; raise :class:`Interrupt`
    instead of decoding the media ``interrupt_at``."""
    import xmr.apis.inference as inference

    # Patched again, the decoder wraps the original, not the earlier patch.
    decoded, decode = [], getattr(inference._decode, 'original', inference._decode)

    def recorded(item, num_frames, position):
        if interrupt_at is not None and item == interrupt_at:
            raise Interrupt
        decoded.append(item)
        return decode(item, num_frames, position)

    recorded.original = decode
    monkeypatch.setattr(inference, '_decode', recorded)
    return decoded


#: A Hugging Face tokenizer name that no cache holds (:func:`offline_hub`).
UNCACHED_TOKENIZER = 'xlm-roberta-base-not-cached'


@pytest.fixture
def offline_hub(monkeypatch, tmp_path) -> None:
    """A machine without network and with an empty Hugging Face cache: the offline variables
    set and ``HF_HOME`` a fresh folder. huggingface_hub reads them once, when imported, so its
    constants are set too (with the variable alone the hub was tried with retries, 46 s before
    the error on a machine without network)."""
    home = tmp_path / 'hf_home'
    for variable in ('HF_HUB_OFFLINE', 'TRANSFORMERS_OFFLINE'):
        monkeypatch.setenv(variable, '1')
    monkeypatch.setenv('HF_HOME', str(home))
    monkeypatch.setattr('huggingface_hub.constants.HF_HUB_OFFLINE', True)
    monkeypatch.setattr('huggingface_hub.constants.HF_HOME', str(home))
    monkeypatch.setattr('huggingface_hub.constants.HF_HUB_CACHE', str(home / 'hub'))


def check_offline_tokenizer_error(raised: pytest.ExceptionInfo, where: str,
                                  kind: str = 'HFTokenizer') -> None:
    """``raised`` (building :data:`UNCACHED_TOKENIZER` under :func:`offline_hub`) names
    ``where`` (the config key, or the tokenizer's class alone), the name and the local routes,
    with transformers' own error as its cause."""
    message = str(raised.value)
    assert message.startswith(f"{where}{kind}(name_or_path='{UNCACHED_TOKENIZER}'): the Hugging "
                              'Face tokenizer could not be fetched ('), message
    for route in ('name_or_path a local folder', 'tokenizer_file=<its tokenizer.json>',
                  f'hf download {UNCACHED_TOKENIZER} '):
        assert route in message
    cause = raised.value.__cause__
    assert type(cause) is OSError and 'huggingface.co' in str(cause)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f'real data fixtures not found at {SHARED_DATA}')
    return SHARED_DATA


#: Pieces of XLM-R's vocabulary a cut copy keeps (:func:`xlmr_spec`); ``<mask>`` follows them.
XLMR_CUT_PIECES = 20_000


def xlmr_spec(cut: bool = False) -> dict:
    """XLM-R's tokenizer.json (``../shared/data``) as a dict; ``cut``: its vocabulary cut to
    its first :data:`XLMR_CUT_PIECES` of 250,002 pieces (the specials, then the likeliest; the
    words past them are read as several pieces) and ``<mask>`` renumbered after them, its
    pipeline whole (normaliser, pre-tokeniser, the post-processor's ``<s>`` and ``</s>``). For
    a test of truncation or of the pipeline on copies of the file: the copies' transformers
    routes read 17 MB at about 1.5 s a load."""
    path = SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json'
    if not path.is_file():
        pytest.skip(f'XLM-R tokenizer fixture missing: {path}')
    spec = json.loads(path.read_text(encoding='utf-8'))
    if cut:
        vocabulary = spec['model']['vocab']
        spec['model']['vocab'] = [*vocabulary[:XLMR_CUT_PIECES], vocabulary[-1]]
        for token in spec['added_tokens']:
            if token['id'] == len(vocabulary) - 1:
                token['id'] = XLMR_CUT_PIECES
    return spec


def phase_loss_keys(model, loss_weights: dict) -> set[str]:
    """The ``loss_<name>`` keys a retriever returns for a phase's weights: the retriever's own
    losses, and every loss of its disentangler when the phase scales them (``disentangler``)."""
    keys = {f'loss_{k}' for k, weight in loss_weights.items() if weight and k != 'disentangler'}
    if loss_weights.get('disentangler') and getattr(model, 'disentangler', None) is not None:
        keys |= {f'loss_{k}' for k in model.disentangler.loss_names}
    return keys


def differences(mine, expected, where: str = '') -> list[str]:
    """The places (``optimizer.state.0.exp_avg``) where two nested dicts, lists and tensors
    differ in any bit, a key or a length; ``[]`` when identical."""
    if isinstance(expected, dict):
        if not isinstance(mine, dict) or mine.keys() != expected.keys():
            return [f'{where} (keys)']
        return [place for key in expected
                for place in differences(mine[key], expected[key], f'{where}.{key}')]
    if isinstance(expected, (list, tuple)):
        if not isinstance(mine, (list, tuple)) or len(mine) != len(expected):
            return [f'{where} (length)']
        return [place for i, (a, b) in enumerate(zip(mine, expected))
                for place in differences(a, b, f'{where}.{i}')]
    if isinstance(expected, torch.Tensor):
        same = isinstance(mine, torch.Tensor) and mine.dtype == expected.dtype and torch.equal(
            mine, expected)
        return [] if same else [where]
    return [] if mine == expected else [where]


#: What a resumed run's checkpoint must share, bit for bit, with the uninterrupted run's.
RESUMED_KEYS = ('state_dict', 'optimizer', 'phase_report')


def assert_same_checkpoint(path: Path, reference: Path) -> None:
    """The checkpoint at ``path`` holds the weights, optimiser state and phase report of
    ``reference`` exactly (the project's rule: resume equal to an uninterrupted run)."""
    from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
    allow_mmengine_checkpoint_types()
    mine, expected = (torch.load(p, map_location='cpu', weights_only=True)
                      for p in (path, reference))
    assert 'state_dict' in expected and 'optimizer' in expected
    assert differences({k: mine.get(k) for k in RESUMED_KEYS},
                       {k: expected.get(k) for k in RESUMED_KEYS}) == []


#: Words of the tiny sentence encoder's WordPiece vocabulary (English captions of the tests).
TEACHER_WORDS = ('a an the two three man woman dog dogs girl boy men people red blue green '
                 'is are on in of with at and playing running sitting street grass water ball '
                 'shirt snow group young little white black').split()


def sentence_transformer_files(folder: Path, width: int, pooling: str = 'mean',
                               normalize: bool = True, dense: Sequence[dict] = ()) -> Path:
    """Write sentence-transformers' ``modules.json`` and ``1_Pooling/config.json`` (then a
    ``<i>_Dense`` folder per ``dense`` config, with random weights, and an empty
    ``<i>_Normalize``) into ``folder``, as ``SentenceTransformer.save`` does."""
    modules = [('Transformer', ''), ('Pooling', '1_Pooling')]
    for index, config in enumerate(dense, start=2):
        modules.append(('Dense', f'{index}_Dense'))
        dense_files(folder / f'{index}_Dense', **config)
    modules += [('Normalize', f'{len(modules)}_Normalize')] * normalize
    (folder / 'modules.json').write_text(json.dumps([
        dict(idx=i, name=str(i), path=path, type=f'sentence_transformers.models.{kind}')
        for i, (kind, path) in enumerate(modules)]))
    (folder / '1_Pooling').mkdir(exist_ok=True)
    (folder / '1_Pooling' / 'config.json').write_text(json.dumps(dict(
        word_embedding_dimension=width, pooling_mode_cls_token=pooling == 'cls',
        pooling_mode_mean_tokens=pooling == 'mean', pooling_mode_max_tokens=False,
        pooling_mode_mean_sqrt_len_tokens=False, pooling_mode_weightedmean_tokens=False,
        pooling_mode_lasttoken=False, include_prompt=True)))
    if normalize:
        (folder / modules[-1][1]).mkdir(exist_ok=True)
    return folder


def dense_files(folder: Path, in_features: int, out_features: int, bias: bool = True,
                activation: str = 'torch.nn.modules.activation.Tanh',
                weights: str = 'model.safetensors') -> None:
    """A sentence-transformers ``Dense`` module's folder: its ``config.json`` and its random
    ``linear.weight`` (and ``linear.bias``) in ``weights``."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / 'config.json').write_text(json.dumps(dict(
        in_features=in_features, out_features=out_features, bias=bias,
        activation_function=activation)))
    state = {'linear.weight': torch.randn(out_features, in_features)}
    if bias:
        state['linear.bias'] = torch.randn(out_features)
    if weights.endswith('.safetensors'):
        save_file(state, str(folder / weights))
    else:
        torch.save(state, folder / weights)


def tiny_sentence_encoder(folder: Path, width: int = 32, layers: int = 2,
                          pooling: str = 'mean', normalize: bool = True,
                          dense: Sequence[dict] = ()) -> Path:
    """A sentence-transformers folder of a random BERT-style encoder (``config.json``, weights,
    a WordPiece ``tokenizer.json``, the pooling and ``Normalize`` modules), the layout of
    all-MiniLM-L6-v2."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel

    vocab = {token: i for i, token in enumerate(
        ['[PAD]', '[UNK]', '[CLS]', '[SEP]', *TEACHER_WORDS])}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token='[UNK]'))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.BertProcessing(('[SEP]', 3), ('[CLS]', 2))
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / 'tokenizer.json'))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=width, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=2 * width,
                        max_position_embeddings=64)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    return sentence_transformer_files(folder, width, pooling, normalize, dense)


@pytest.fixture(scope='session')
def sentence_encoder_module(tmp_path_factory):
    """The docs' text-only backbone (docs/custom_modules.md, ``my_teacher/sentence_encoder.py``)
    imported once per session: it registers ``SentenceEncoder`` in ``MODELS``."""
    import importlib
    import sys

    sys.path.insert(0, str(REPO / 'tools' / 'benchmarks'))
    from text_teacher_adapters import docs_module

    project = tmp_path_factory.mktemp('user_project')
    (project / 'my_teacher').mkdir()
    (project / 'my_teacher' / '__init__.py').write_text('')
    (project / 'my_teacher' / 'sentence_encoder.py').write_text(docs_module())
    sys.path.insert(0, str(project))
    return importlib.import_module('my_teacher.sentence_encoder')


#: Runs a tool as its own process (argv: the file ``ready``, then the tool and its arguments)
#: after ``{patch}``, which holds one of its calls, writing ``ready`` as it starts: the time for
#: a test to send a signal there.
_HELD_TOOL = '''
import runpy, sys, time
from pathlib import Path
ready = Path(sys.argv[1])
{patch}
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name='__main__')
'''


#: Holds the encoding of the first media (:func:`terminated_while_held`).
HELD_AT_THE_FIRST_MEDIA = '''
from xmr.models.retrievers.cross_lingual import CrossLingualRetriever
encode = CrossLingualRetriever.encode_media
def held(self, inputs):
    ready.write_text('encoding the first media')
    time.sleep(60)
    return encode(self, inputs)
CrossLingualRetriever.encode_media = held
'''


def terminated_while_held(patch: str, tool: Path, args: list[str], ready: Path,
                          whole_job: bool = False, env: dict | None = None,
                          at_ready: Callable[[], None] | None = None) -> str:
    """Run ``tool`` as its own process, ``patch`` holding it (:data:`_HELD_TOOL`); once
    ``ready`` exists, call ``at_ready`` and send SIGTERM, to the process alone or, with
    ``whole_job``, to its process group (a scheduler's stop reaches every process of the job,
    DataLoader workers too). Asserts that it ended as ``run_tool`` ends a terminated tool: exit
    143, one last line, no traceback.

    Returns:
        What it printed, stdout then stderr.
    """
    import signal
    import subprocess
    import sys
    import time

    run = subprocess.Popen(
        [sys.executable, '-c', _HELD_TOOL.format(patch=patch), str(ready), str(tool), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=whole_job,
        env={**os.environ, 'PYTHONPATH': os.pathsep.join(sys.path), **(env or {})})
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), run.communicate(timeout=30)
        if at_ready is not None:
            at_ready()
        if whole_job:
            os.killpg(run.pid, signal.SIGTERM)
        else:
            run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=60)
    finally:
        run.kill()
    said = out + err
    assert run.returncode == 128 + signal.SIGTERM, said
    assert err.endswith('terminated by SIGTERM (--debug shows where)\n'), said
    assert 'Traceback' not in said, said
    return said
