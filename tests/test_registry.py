import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Sequence

import mmengine.registry as mm_registry
import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook

from tests.conftest import tiny_retriever_cfg
from xmr import registry
from xmr.models.adapters import AdapterPlacement, BaseAdapter
from xmr.registry import ADAPTERS, HOOKS, MODELS, UnknownOptionError, check_part_options
from xmr.utils.cli import UserKeyError


def test_every_mmengine_root_has_an_xmr_child():
    roots = [n for n in dir(mm_registry) if n.isupper() and
             isinstance(getattr(mm_registry, n), mm_registry.Registry)]
    assert len(roots) >= 20
    for name in roots:
        child = getattr(registry, name)
        assert child.parent is getattr(mm_registry, name), name
        assert child.scope == 'xmr'


def test_registries_build_xmr_and_mmengine_types():
    assert type(MODELS.build(dict(type='AlignmentLoss'))).__name__ == 'AlignmentLoss'
    assert registry.OPTIMIZERS.get('AdamW') is torch.optim.AdamW
    assert ADAPTERS.get('StaticAdapter').__name__ == 'StaticAdapter'


def test_unknown_type_lists_the_closest_registered_names():
    with pytest.raises(KeyError, match="'StaticAdaptor' is not a registered type.*StaticAdapter"):
        ADAPTERS.build(dict(type='StaticAdaptor', width=8))
    with pytest.raises(KeyError, match='CrossLingualRetriever'):
        MODELS.build(dict(type='CrossLingualRetreiver'))
    assert 'StaticAdaptor' not in ADAPTERS and 'StaticAdapter' in ADAPTERS


def test_a_membership_test_neither_imports_the_name_nor_writes_an_error(monkeypatch):
    """``in`` asks for a registered type: a name that only imports as a module (``json``) is
    none, and a miss writes no suggestions (a config's check asks every registry about every
    part's type). A dotted name is still resolved as MMEngine resolves it."""
    monkeypatch.setattr(registry.XMRRegistry, '_unknown_type_message',
                        lambda *args: pytest.fail('an error message was written'))
    assert 'json' not in ADAPTERS and 'OpenCLIPBackbone' not in ADAPTERS
    assert 'OpenCLIPBackbone' in MODELS and 'LoggerHook' in HOOKS  # its parent's
    assert 'mmengine.hooks.LoggerHook' in HOOKS


def test_a_type_registered_in_another_registry_is_named_with_it(monkeypatch):
    """A user's adapter registered with MODELS was 'not a registered type' in the adapter
    registry, with advice to add the custom_imports the config already had."""
    own = type('WrongRegistryAdapter', (torch.nn.Module,), dict(__module__='myext.adapters'))
    monkeypatch.setitem(MODELS.module_dict, 'WrongRegistryAdapter', own)
    with pytest.raises(KeyError, match=re.escape(
            "'WrongRegistryAdapter' is not a registered type in the xmr 'adapter' registry: "
            "myext.adapters registered it in the xmr 'model' registry; register it with "
            'xmr.registry.ADAPTERS to build it here.')):
        ADAPTERS.build(dict(type='WrongRegistryAdapter'))
    with pytest.raises(KeyError, match=re.escape(
            "'StaticAdapter' is not a registered type in the xmr 'model' registry: "
            "xmr.models.adapters.static registered it in the xmr 'adapter' registry; use it "
            "where xmr builds 'adapter' types.")):
        MODELS.build(dict(type='StaticAdapter'))


def test_a_loose_misspelling_is_still_suggested_nearest_first():
    """'DynAdapter' is no substring of a name and far from exact: about 0.8 alike with
    DynamicAdapter, less with the others."""
    with pytest.raises(KeyError, match=r"'DynAdapter' .* Closest registered names: "
                                       r'DynamicAdapter, '):
        ADAPTERS.get('DynAdapter')


def test_unknown_type_through_the_mmengine_root_also_suggests():
    with mm_registry.DefaultScope.overwrite_default_scope('xmr'):
        with pytest.raises(KeyError, match='Closest registered names: InfoNCELoss'):
            mm_registry.MODELS.build(dict(type='InfoNCELos'))


def test_a_misspelt_mmengine_type_is_suggested_through_xmr_s_registry():
    """xmr's hook registry names the parent's types too: ``IterTimerHook`` is MMEngine's."""
    with pytest.raises(KeyError, match='Closest registered names: IterTimerHook'):
        HOOKS.build(dict(type='IterTimerHok'))


def test_a_config_of_another_scope_is_left_to_that_scope():
    """A ``_scope_`` dict builds from another package's registry: its type and options are not
    xmr's to judge."""
    HOOKS.check_options(dict(type='DetVisualizationHook', _scope_='mmdet', draw=True))


USER_MODULE = '''
import torch
from xmr.models.adapters import AdapterPlacement, BaseAdapter
from xmr.registry import ADAPTERS


@ADAPTERS.register_module()
class ScaledIdentityAdapter(BaseAdapter):
    def __init__(self, placement, scale=2.0):
        super().__init__(placement)
        self.scale = torch.nn.Parameter(torch.tensor(scale))

    def forward(self, x, ctx):
        return x * self.scale
'''


def test_user_adapter_loaded_with_custom_imports(tmp_path, monkeypatch):
    (tmp_path / 'my_adapters.py').write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg_path = tmp_path / 'config.py'
    model = tiny_retriever_cfg()
    model['language_branch']['adapters'] = dict(type='ScaledIdentityAdapter', scale=3.0)
    cfg_path.write_text(textwrap.dedent(f'''
        custom_imports = dict(imports=['my_adapters'], allow_failed_imports=False)
        model = {model!r}
    '''))
    try:
        cfg = Config.fromfile(str(cfg_path))
        built = MODELS.build(cfg.model)
        adapter = built.language_branch.adapters.sets['de']['0:block_output']
        assert type(adapter).__name__ == 'ScaledIdentityAdapter'
        assert adapter.scale.item() == 3.0
    finally:
        ADAPTERS.module_dict.pop('ScaledIdentityAdapter', None)
        sys.modules.pop('my_adapters', None)


# A fresh process: `import xmr` loads no deep-learning library, MMEngine's root registry finds an
# xmr type through the default scope with nothing imported first (the Runner's path), and that
# first look-up registers every type the modules of xmr register, in every registry (each
# module imported one by one afterwards, `__main__` aside, adds none).
FRESH_PROCESS = """
import importlib, json, pkgutil, sys
import xmr
heavy = sorted(m for m in ('torch', 'open_clip', 'transformers') if m in sys.modules)
from mmengine.registry import METRICS
with METRICS.switch_scope_and_registry('xmr') as found_in:  # as MMEngine's build does
    metric = found_in.get('RetrievalMetric').__module__
from xmr import registry
def registered():
    return {name: sorted(getattr(registry, name).module_dict) for name in registry.__all__
            if isinstance(getattr(registry, name), registry.XMRRegistry)}
first = registered()
for info in pkgutil.walk_packages(xmr.__path__, 'xmr.'):
    if not info.name.endswith('__main__'):
        importlib.import_module(info.name)
print(json.dumps(dict(heavy=heavy, metric=metric, first=first, every=registered())))
"""


def test_the_first_look_up_registers_every_module_of_xmr():
    result = subprocess.run([sys.executable, '-c', FRESH_PROCESS], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen['heavy'] == []
    assert seen['metric'] == 'xmr.evaluation.metrics.retrieval'
    assert seen['first'] == seen['every']
    assert 'CachedFeatureDataset' in seen['first']['DATASETS']  # registered by xmr.engine
    assert 'StaticAdapter' in seen['first']['ADAPTERS']


def test_subpackages_import_on_first_access():
    import xmr
    assert xmr.evaluation.xtd10_fewshot_split.__module__.startswith('xmr.evaluation')
    with pytest.raises(AttributeError, match="module 'xmr' has no attribute 'modles'"):
        _ = xmr.modles


def test_an_option_the_type_does_not_take_is_named_with_the_ones_it_does():
    with pytest.raises(UnknownOptionError, match=(
            r"^adapter StaticAdapter: unknown option 'hiden' \(did you mean 'hidden'\?\); it "
            r'takes placement, hidden, zero_init, width, blocks, sites$')):
        ADAPTERS.build(dict(type='StaticAdapter', hiden=8), default_args=dict(placement=None))


def test_a_whole_config_must_give_every_option_without_a_default():
    """A part built from its config alone (a dataset, a metric, a hook) must give them; a part
    its builder completes (a sampler gets its dataset) is left to that builder."""
    from xmr.registry import DATA_SAMPLERS, DATASETS

    cfg = dict(type='RetrievalDataset', test_mode=True)
    with pytest.raises(ValueError, match=(
            "^train_dataloader.dataset: dataset RetrievalDataset: option 'ann_file' has no "
            'default: give it; it takes ann_file, ')):
        DATASETS.check_options(cfg, 'train_dataloader.dataset', whole=True)
    DATASETS.check_options(cfg)
    DATA_SAMPLERS.check_options(dict(type='DefaultSampler', shuffle=True))


def test_a_string_for_a_config_dict_and_a_list_for_a_number_are_refused_by_the_annotation():
    """consistency_loss='l3' failed as MMEngine built it ('cfg should be a dict ... but got
    str'), temperature=[0.01] as the loss compared it with 0: both after the work dir was
    made, as Python's errors."""
    from xmr.registry import DISENTANGLERS

    with pytest.raises(ValueError, match=(
            r"^disentangler SemanticsDisentangler: option consistency_loss='l3' must be a dict "
            r"\(dict\(type='\.\.\.', \.\.\.\)\) \(its default is None\)")):
        DISENTANGLERS.check_options(dict(type='SemanticsDisentangler', consistency_loss='l3'))
    with pytest.raises(ValueError, match=(r'^model InfoNCELoss: option temperature=\[0\.01\] '
                                          r'must be a number \(its default is 0\.01\)')):
        MODELS.check_options(dict(type='InfoNCELoss', temperature=[0.01]))

    @MODELS.register_module()
    class KindsTaken(torch.nn.Module):
        def __init__(self, size: float | Sequence[float] = 1.0, cache: bool | dict = False,
                     loss: str | dict = 'l1', scale=1.0) -> None:
            super().__init__()

    try:  # a sequence, a dict or a string its annotation takes; no annotation: no refusal
        MODELS.check_options(dict(type='KindsTaken', size=[1.0, 2.0], cache=dict(folder='x'),
                                  loss='l2', scale=[1.0]))
    finally:
        MODELS.module_dict.pop('KindsTaken')


def test_a_type_that_takes_any_option_gets_them_all():
    @ADAPTERS.register_module()
    class OptionsAdapter(BaseAdapter):
        def __init__(self, placement, **options):
            super().__init__(placement)
            self.options = options

        def forward(self, x, ctx):
            return x

    try:
        built = ADAPTERS.build(dict(type='OptionsAdapter', hiden=8),
                               default_args=dict(placement=AdapterPlacement(width=8)))
        assert built.options == {'hiden': 8}
    finally:
        ADAPTERS.module_dict.pop('OptionsAdapter')


def test_a_name_xmr_holds_is_refused_at_the_registration_naming_both_modules_and_the_ways_out():
    with pytest.raises(UserKeyError) as refused:
        @ADAPTERS.register_module()
        class StaticAdapter(BaseAdapter):
            pass
    assert str(refused.value) == (
        "'StaticAdapter' is already registered in the xmr 'adapter' registry, by "
        'xmr.models.adapters.static, so tests.test_registry cannot register its StaticAdapter '
        "under that name: give it another (register_module(name='MyStaticAdapter')) or, to "
        "replace xmr.models.adapters.static's, register_module(force=True)")
    assert ADAPTERS.get('StaticAdapter').__module__ == 'xmr.models.adapters.static'


def test_a_name_mmengine_holds_is_refused_too_as_it_would_shadow_mmengine_s_type_in_every_config():
    """A user's ``LoggerHook`` in xmr's child would replace MMEngine's for the default runtime's
    ``type='LoggerHook'`` (scope ``xmr`` looks here first); ``force=True`` still does it."""
    with pytest.raises(UserKeyError) as refused:
        @HOOKS.register_module()
        class LoggerHook(Hook):
            pass
    assert str(refused.value) == (
        "'LoggerHook' is already registered in MMEngine's 'hook' registry, by "
        'mmengine.hooks.logger_hook, so tests.test_registry cannot register its LoggerHook '
        "under that name: give it another (register_module(name='MyLoggerHook')) or, to "
        "replace mmengine.hooks.logger_hook's, register_module(force=True)")
    assert HOOKS.get('LoggerHook') is mm_registry.HOOKS.get('LoggerHook')
    with pytest.raises(UserKeyError, match="'AdamW' is already registered in MMEngine's "
                                           "'optimizer' registry, by torch.optim.adamw"):
        registry.OPTIMIZERS.register_module(name='AdamW', module=torch.optim.SGD)
    assert registry.OPTIMIZERS.get('AdamW') is torch.optim.AdamW

    class Replacement(Hook):
        pass

    HOOKS.register_module(name='LoggerHook', module=Replacement, force=True)
    try:
        assert HOOKS.get('LoggerHook') is Replacement
    finally:
        HOOKS.module_dict.pop('LoggerHook')


# A fresh process whose first registry call is the user's registration (a driver script, a
# notebook: nothing of xmr imported yet), then look-ups of xmr's type and of another.
USER_REGISTERS_FIRST = """
import sys
sys.path.insert(0, {folder!r})
import my_hooks
from xmr.registry import HOOKS
print(HOOKS.get('PhaseReportHook').__module__, HOOKS.get('WorkDirLockHook').__module__)
"""
USER_HOOK = """
from mmengine.hooks import Hook
from xmr.registry import HOOKS


@HOOKS.register_module(force={force})
class PhaseReportHook(Hook):
    pass
"""


@pytest.mark.parametrize('force', [True, False])
def test_a_user_registration_before_any_look_up_meets_xmr_s_types(tmp_path, force):
    (tmp_path / 'my_hooks.py').write_text(USER_HOOK.format(force=force))
    result = subprocess.run([sys.executable, '-c', USER_REGISTERS_FIRST.format(folder=str(
        tmp_path))], capture_output=True, text=True)
    if force:  # replaces xmr's type; every other look-up still finds xmr's
        assert result.stdout.split() == ['my_hooks', 'xmr.engine.hooks.work_dir_lock']
    else:  # refused at the user's decorator, not at some later look-up
        assert result.returncode != 0
        assert "my_hooks.py\", line 6, in <module>" in result.stderr
        assert result.stderr.strip().endswith(
            "so my_hooks cannot register its PhaseReportHook under that name: give it another "
            "(register_module(name='MyPhaseReportHook')) or, to replace "
            "xmr.engine.hooks.phase_report's, register_module(force=True)")


def test_an_option_s_default_is_the_type_s_own_before_the_one_it_forwards_to():
    """``size`` is the type's own (a word by default) and shadows the forwarded ``size`` (a
    number): a word is its value; the forwarded ``depth`` still wants a number."""
    def build_inner(size=1, depth=2):
        return size, depth

    class Outer:
        forwards_options_to = (build_inner,)

        def __init__(self, size='auto', **options):
            self.size, self.options = size, options

    ADAPTERS.check_options(dict(type=Outer, size='large', depth=3))
    with pytest.raises(ValueError, match=r"Outer: option depth='deep' must be a number \(its "
                                         r'default is 2\)'):
        ADAPTERS.check_options(dict(type=Outer, depth='deep'))


def test_a_word_is_taken_where_the_options_annotation_takes_one_beside_a_bool_default():
    def opens(resume: 'str | bool' = False, shuffle: bool = True) -> None:
        """resume=False or a checkpoint's path, as MMEngine's FlexibleRunner takes it."""

    MODELS.check_options(dict(type=opens, resume='work_dirs/iter_8.pth'))
    with pytest.raises(ValueError, match=r"option shuffle='no' must be True or False"):
        MODELS.check_options(dict(type=opens, shuffle='no'))


def test_a_part_inside_a_part_is_checked_by_its_own_registry_and_named_by_its_key_path():
    def holds(parts=(), loss=None):
        """A model whose options hold registered parts, in a list and in a dict."""

    check_part_options(MODELS, dict(type=holds, parts=[dict(type='StaticAdapter', hidden=8)],
                                    loss=dict(type='AlignmentLoss', kind='l1')), 'model')
    with pytest.raises(UnknownOptionError, match=(
            r"^model\.parts\.1\.hiden: adapter StaticAdapter: unknown option 'hiden' \(did you "
            r"mean 'hidden'\?\)")):
        check_part_options(MODELS, dict(type=holds, parts=[
            dict(type='StaticAdapter'), dict(type='StaticAdapter', hiden=8)]), 'model')
    with pytest.raises(ValueError, match=(
            r"^model\.loss\.normalize: model AlignmentLoss: option normalize='no' must be "
            r'True or False')):
        check_part_options(MODELS, dict(type=holds, loss=dict(type='AlignmentLoss',
                                                              normalize='no')), 'model')


class Sized:
    """A part its owner builds with a width of its own, from options of the config's."""

    def __init__(self, width: int, depth: int = 1, scale: float = 1.0) -> None:
        pass


class PassesOn:
    """A model that passes ``inner``, a dict without a type, on to ``Sized``."""

    option_dicts = {'inner': (Sized, ('width',))}

    def __init__(self, inner: dict | None = None) -> None:
        self.inner = Sized(8, **(inner or {}))


@pytest.mark.parametrize('inner, error, message', [
    (dict(detph=2), UnknownOptionError,
     r"^model\.inner\.detph: model Sized: unknown option 'detph' \(did you mean 'depth'\?\); "
     r'it takes depth, scale$'),
    # Its owner fills it in: given in the config, the build would get it twice.
    (dict(width=8), UnknownOptionError, r"^model\.inner\.width: model Sized: option 'width' is "
     r"given by what builds the part, and the config's would replace it: leave it out; it "
     r'takes depth, scale$'),
    (dict(scale='big'), ValueError,
     r"^model\.inner\.scale: model Sized: option scale='big' must be a number")])
def test_an_option_dict_without_a_type_is_checked_against_what_its_owner_passes_it_to(
        inner, error, message):
    """Such dicts were checked only as their owner built them (a TypeError naming no key)."""
    check_part_options(MODELS, dict(type=PassesOn, inner=dict(depth=2, scale=0.5)), 'model')
    with pytest.raises(error, match=message):
        check_part_options(MODELS, dict(type=PassesOn, inner=inner), 'model')


@pytest.mark.parametrize('path, options, message', [
    ('disentangler.generator', dict(dz=16),
     r"^model\.disentangler\.generator\.dz: disentangler ParameterGenerator: unknown option 'dz' "
     r"\(did you mean 'd_z'\?\); it takes d_z, d_u, activation$"),
    ('disentangler.discriminator', dict(hiden=(8,)),
     r"^model\.disentangler\.discriminator\.hiden: disentangler PairDiscriminator: unknown "
     r"option 'hiden' \(did you mean 'hidden'\?\); it takes hidden$"),
    ('disentangler.generator', dict(blocks=[0]),
     r'^the generator produces W\^z for the blocks whose adapters read it'),
    ('compile', dict(mdoe='reduce-overhead'),
     r"^model\.compile\.mdoe: model compile: unknown option 'mdoe' \(did you mean 'mode'\?\)")])
def test_the_option_dicts_of_xmrs_models_are_checked_as_the_config_loads(path, options,
                                                                         message):
    """DASD's generator, discriminator and compile options were refused as the model built."""
    from tests.conftest import tiny_dasd_cfg

    cfg = tiny_dasd_cfg()
    holder = cfg
    for key in path.split('.')[:-1]:
        holder = holder[key]
    holder[path.split('.')[-1]] = options
    with pytest.raises((UnknownOptionError, ValueError), match=message):
        check_part_options(MODELS, cfg, 'model')


def test_a_part_whose_type_two_registries_hold_apart_is_left_to_its_builder(monkeypatch):
    class One:
        def __init__(self, size=1):
            pass

    class Other:
        def __init__(self, depth=1):
            pass

    monkeypatch.setitem(ADAPTERS._module_dict, 'TwinPart', One)
    monkeypatch.setitem(registry.TOKENIZERS._module_dict, 'TwinPart', Other)
    twin = dict(type=MODELS.get('AlignmentLoss'), kind='l1',
                unread=dict(type='TwinPart', size=2, depth=2))
    with pytest.raises(UnknownOptionError, match="^model AlignmentLoss: unknown option 'unread'"):
        check_part_options(MODELS, twin, 'model')
    twin.pop('type')  # no type: only the part inside is looked at, and which registry is unknown
    check_part_options(MODELS, dict(type=lambda **options: None, twin=twin), 'model')
    monkeypatch.delitem(registry.TOKENIZERS._module_dict, 'TwinPart')
    with pytest.raises(UnknownOptionError, match=r"^model\.twin\.unread\.depth: adapter One: "):
        check_part_options(MODELS, dict(type=lambda **options: None, twin=twin), 'model')


@pytest.mark.parametrize('value, wanted', [
    (1, 'a list or tuple'), (0.5, 'a list or tuple'), (True, 'a list or tuple'),
    ('ln_*', r"a list or tuple \(\['ln_\*'\] for one\)")])
def test_a_scalar_where_a_list_goes_is_refused_whatever_the_lists_default(value, wanted):
    """An empty default says nothing of its items; the annotation and the default's kind do."""
    def tunes(tuned_weights: Sequence[str] = (), suffixes: str | Sequence[str] = ('.py',),
              ks: int | Sequence[int] = (1, 5), betas=(0.9, 0.999)) -> None:
        """Lists of names or numbers, one of them given alone where the annotation says so."""

    for option in ('tuned_weights', 'betas'):
        with pytest.raises(ValueError, match=(
                rf'^model tunes: option {option}={re.escape(repr(value))} must be {wanted} '
                r'\(its default is')):
            MODELS.check_options(dict(type=tunes, **{option: value}))
    MODELS.check_options(dict(type=tunes, tuned_weights=['ln_*'], suffixes='.json', ks=10))
    MODELS.check_options(dict(type=tunes, tuned_weights=(), betas=[0.9, 0.99]))


def test_a_name_xmr_replaces_mmengine_s_type_under_is_refused_naming_xmr_s_module():
    """xmr's ``CheckpointHook`` replaces MMEngine's in the ``xmr`` scope: a user's refused
    registration names the type it would replace in that scope, xmr's, not MMEngine's."""
    with pytest.raises(UserKeyError) as refused:
        @HOOKS.register_module()
        class CheckpointHook(Hook):
            pass
    assert str(refused.value).startswith(
        "'CheckpointHook' is already registered in the xmr 'hook' registry, by "
        'xmr.engine.hooks.checkpoint, so tests.test_registry cannot register')


def test_a_type_that_takes_any_option_still_refuses_a_word_for_a_number_it_names():
    """``**options`` lets unknown options through, not a named option of the wrong kind:
    ``width='8'`` beside ``width: int = 4`` is refused as the config loads."""
    @ADAPTERS.register_module()
    class WideOptionsAdapter(BaseAdapter):
        def __init__(self, placement, width: int = 4, **options):
            super().__init__(placement)

        def forward(self, x, ctx):
            return x

    try:
        ADAPTERS.check_options(dict(type='WideOptionsAdapter', width=8, anything='x'))
        with pytest.raises(ValueError, match=r"option width='8' must be a number "
                                             r'\(its default is 4\)'):
            ADAPTERS.check_options(dict(type='WideOptionsAdapter', width='8'))
    finally:
        ADAPTERS.module_dict.pop('WideOptionsAdapter')


def test_a_scoped_name_of_another_registry_s_type_is_named_with_that_registry():
    """``xmr.StaticAdapter`` in a model's config: the scope prefix is no part of the name the
    adapter registry holds, so the message still says where the type is registered."""
    with pytest.raises(UserKeyError, match=re.escape(
            "'xmr.StaticAdapter' is not a registered type in the xmr 'model' registry: "
            "xmr.models.adapters.static registered it in the xmr 'adapter' registry; use it "
            "where xmr builds 'adapter' types.")):
        MODELS.get('xmr.StaticAdapter')


def test_a_name_inside_a_registered_one_is_suggested_where_it_is_too_short_to_be_close():
    """``Dyn`` is too short for difflib to match ``DynamicAdapter``; the registered names that
    hold it are suggested all the same, not the whole list."""
    with pytest.raises(UserKeyError, match="'Dyn' is not a registered type in the xmr 'adapter' "
                                           r'registry\. Closest registered names: '
                                           r'DynamicAdapter\. '):
        ADAPTERS.get('Dyn')


@pytest.mark.parametrize('registry, name, module', [
    ('ADAPTERS', 'StaticAdapter', 'xmr.models.adapters.static'),
    ('TOKENIZERS', 'SentencePieceTokenizer', 'xmr.models.language.tokenizers'),
    ('DATASETS', 'CachedFeatureDataset', 'xmr.engine.feature_cache.dataset')])
def test_a_registry_looked_up_first_in_a_fresh_process_finds_its_types(registry, name, module):
    """A user's script that builds an adapter (or a project registry's other type) before
    anything else imported xmr's modules: the registry's own look-up imports them."""
    result = subprocess.run([sys.executable, '-c', (
        f'from xmr.registry import {registry}\n'
        f'print({registry}.get({name!r}).__module__)')], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == module


def test_a_part_of_another_scope_inside_a_part_is_left_to_that_scope():
    """Its type's name may be one of xmr's, yet it builds from the other package's registry:
    xmr's ``check_config`` must not judge it any more than xmr's options do."""
    def holds(parts=()):
        """A model whose option holds parts."""

    check_part_options(MODELS, dict(type=holds, parts=[
        dict(type='StaticAdapter', _scope_='mmdet', sites='ml')]), 'model')
    with pytest.raises(ValueError, match=r"sites='ml' must be a list of sites"):
        check_part_options(MODELS, dict(type=holds, parts=[
            dict(type='StaticAdapter', sites='ml')]), 'model')


def test_a_part_inside_a_tuple_is_checked_as_one_inside_a_list():
    """A Python config may hold its parts in a tuple (``adapters=(dict(...),)``)."""
    def holds(parts=()):
        """A model whose option holds parts."""

    with pytest.raises(UnknownOptionError, match=r"^model\.parts\.0\.hiden: adapter "
                                                 r"StaticAdapter: unknown option 'hiden'"):
        check_part_options(MODELS, dict(type=holds, parts=(
            dict(type='StaticAdapter', hiden=8),)), 'model')


def test_an_option_dict_given_a_type_of_its_own_is_not_checked_as_its_owners_default():
    """``inner=dict(type=...)`` is a part of its own kind, which the owner builds as it is: the
    arguments the owner fills in for its default callable (``width``) are no concern of it."""
    check_part_options(MODELS, dict(type=PassesOn, inner=dict(type=Sized, width=8)), 'model')


def test_kinds_outside_sequences_are_read_from_the_outermost_brackets_in():
    """A scalar inside an outer sequence's brackets, beside an inner sequence, is an item of
    the sequence, not a kind the option takes alone: ``pairs=0.5`` is refused."""
    def pairs(pairs: Sequence[tuple[str, int] | float] = ()) -> None:
        """A list of pairs or numbers."""

    with pytest.raises(ValueError, match=r'^model pairs: option pairs=0\.5 must be a list or '
                                         r'tuple \(its default is'):
        MODELS.check_options(dict(type=pairs, pairs=0.5))
    MODELS.check_options(dict(type=pairs, pairs=[('a', 1), 0.5]))


@pytest.mark.parametrize('written, meant', [('StaticAdaptr', 'StaticAdapter'), ('Lora', 'LoRA')])
def test_a_part_s_type_a_slip_from_a_registered_one_is_refused_as_the_config_loads(written,
                                                                                 meant):
    """Its parent's build refused it only once MMEngine's runner had made the work dir."""
    cfg = tiny_retriever_cfg()
    cfg['language_branch']['adapters']['type'] = written
    with pytest.raises(UserKeyError, match=(
            rf"^model\.language_branch\.adapters\.type: '{written}' is not a registered type "
            rf"in the xmr 'adapter' registry\. Closest registered names: {meant}\b")):
        check_part_options(MODELS, cfg, 'model')
    # Far from every registered name, it may be built by the parent's own means.
    cfg['language_branch']['adapters']['type'] = 'ProjectSpecificPart'
    check_part_options(MODELS, cfg, 'model')


@pytest.mark.parametrize('path, option, value, part', [
    ('language_branch.adapters', 'placement', None, 'adapter DynamicAdapter'),
    ('language_branch', 'tower', None, 'model TargetLanguageBranch'),
    ('disentangler', 'tower', None, 'disentangler SemanticsDisentangler'),
    # Taken, it replaced the blocks the retriever computed ([0, 1] here): the run failed at its
    # first forward, naming neither the key nor that it was not the config's to set.
    ('disentangler', 'condition_blocks', [1], 'disentangler SemanticsDisentangler'),
    ('losses.cm', 'backbone', None, 'model InfoNCELoss')])
def test_an_argument_the_builder_gives_is_refused_as_the_config_loads(path, option, value,
                                                                      part):
    from tests.conftest import tiny_dasd_cfg

    cfg = tiny_dasd_cfg()
    cfg.setdefault('losses', {})['cm'] = dict(type='InfoNCELoss')
    holder = cfg
    for key in path.split('.'):
        holder = holder[key]
    check_part_options(MODELS, cfg, 'model')
    holder[option] = value
    message = (rf"^model\.{re.escape(path)}\.{option}: {part}: option '{option}' is given by "
               r"what builds the part, and the config's would replace it: leave it out; it "
               r"takes ")
    with pytest.raises(UnknownOptionError, match=message) as error:
        check_part_options(MODELS, cfg, 'model')
    taken = str(error.value).partition('it takes ')[2].split(', ')
    assert option not in taken and taken[0]


def test_a_users_part_that_reads_what_its_builder_passes_is_given_it_without_saying_so():
    """A loss of one's own that reads the backbone (reads_backbone) had to name `backbone` in
    given_by_builder too, or a config's `backbone` replaced the retriever's unrefused."""
    from xmr.models.language.embedding import EmbeddingBlock
    from xmr.models.losses.pair import PairLoss

    class ScaledByBackbone(PairLoss):
        reads_backbone = True

        def __init__(self, backbone=None, margin: float = 0.2) -> None:
            super().__init__()

        def forward(self, a, b):
            return (a - b).pow(2).mean()

    class TowerTable(EmbeddingBlock):
        reads_tower = True
        given_by_builder = ('width',)

    assert ScaledByBackbone.given_by_builder == ('backbone',)
    assert TowerTable.given_by_builder == ('width', 'tower')
    assert PairLoss.given_by_builder == EmbeddingBlock.given_by_builder == ()

    def holds(loss=None):
        """A model that builds its loss with its backbone."""

    MODELS.register_module(module=ScaledByBackbone)
    try:
        cfg = dict(type=holds, loss=dict(type='ScaledByBackbone', margin=0.1))
        check_part_options(MODELS, cfg, 'model')
        cfg['loss']['backbone'] = None
        with pytest.raises(UnknownOptionError, match=r"^model\.loss\.backbone: .*option "
                                                     r"'backbone' is given by what builds"):
            check_part_options(MODELS, cfg, 'model')
    finally:
        MODELS._module_dict.pop('ScaledByBackbone')
