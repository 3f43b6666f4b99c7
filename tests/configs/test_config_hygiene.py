"""Leaf configs and ablation overlays are data: assignments of values, no function, lambda,
comprehension, loop, condition, import or call other than ``dict(...)`` (docs/configs.md);
phases name their loaders."""
import ast
import re
from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
CODE = (ast.FunctionDef, ast.Lambda, ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp,
        ast.IfExp)


def leaves():
    return [path for path in sorted(CONFIGS.rglob('*.py')) if '_base_' not in path.parts]


def is_data_statement(node: ast.stmt) -> bool:
    """An assignment, or the module's docstring: anything else (a loop, an ``if``, an import,
    a class) runs code as the config loads."""
    return isinstance(node, (ast.Assign, ast.AnnAssign)) or (
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))


def is_code(node: ast.AST) -> bool:
    """A function, comprehension or conditional value, or a call of anything but ``dict``
    (``list(range(12))`` computes what a leaf should state: ``[0, 1, ..., 11]``)."""
    return isinstance(node, CODE) or (isinstance(node, ast.Call) and not (
        isinstance(node.func, ast.Name) and node.func.id == 'dict'))


def holds_code(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding='utf-8'))
    return (not all(is_data_statement(node) for node in tree.body)
            or any(is_code(node) for node in ast.walk(tree)))


def test_no_leaf_config_holds_code():
    found = {str(path.relative_to(CONFIGS)) for path in leaves() if holds_code(path)}
    assert found == set()


@pytest.mark.parametrize('text', [
    'phases = [dict(p, lr=1e-4) for p in _base_.phases]',
    'blocks = list(range(12))',
    'lr = 1e-4 if fast else 1e-5',
    'for phase in _base_.phases:\n    phase.update(lr=1e-4)',
    'if fast:\n    lr = 1e-4',
    'import os\ndata_root = os.environ["DATA"]',
    '_base_.phases[0].update(lr=1e-4)',
])
def test_the_check_sees_code(text, tmp_path):
    leaf = tmp_path / 'leaf.py'
    leaf.write_text(text + '\n')
    assert holds_code(leaf)


def test_the_check_passes_data(tmp_path):
    leaf = tmp_path / 'leaf.py'
    leaf.write_text('"""A leaf."""\n_base_ = ["./base.py"]\n'
                    "model = dict(language_branch=dict(num_blocks=3, blocks=[0, 1, 2]))\n"
                    "a = b = {{_base_.images_384}}\n"
                    "phases = [*_base_.phases, dict(_base_.phase, lr=-1e-4)]\n")
    assert not holds_code(leaf)


#: A phase's ``dataloader={{_base_.<key>}}``: a copy of the loader, not its name.
COPIED_LOADER = re.compile(r'(?<!\w)dataloader\s*=\s*\{\{\s*_base_\.(\w+)\s*\}\}')


def test_phases_name_their_loaders_so_that_overrides_of_the_loader_reach_them():
    """``--cfg-options source_finetune_dataloader.batch_size=64`` changes the key a phase names;
    a phase holding a copy would keep the old value without a word."""
    copies = {f'{path.relative_to(CONFIGS)}: {match.group(1)}'
              for path in sorted(CONFIGS.rglob('*.py'))
              for match in COPIED_LOADER.finditer(path.read_text())}
    assert copies == set()
    assert COPIED_LOADER.search("dict(name='a', dataloader={{_base_.text_train_dataloader}})")
    assert not COPIED_LOADER.search('test_dataloader = {{_base_.full_test_dataloader}}')


#: The keys a runner builds from: a ``_delete_`` left in them reaches a constructor.
BUILT = ('model', 'optim_wrapper', 'default_hooks', 'custom_hooks', 'param_scheduler')


def kept_deletes(node, path=''):
    """The paths under ``node`` whose dict still holds ``_delete_``."""
    if isinstance(node, dict):
        yield from [path] if '_delete_' in node else []
        for key, value in node.items():
            yield from kept_deletes(value, f'{path}.{key}' if path else key)
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from kept_deletes(value, f'{path}.{index}')


def test_no_config_builds_a_delete_that_mmengine_left_in_a_list():
    """MMEngine applies ``_delete_`` where a dict merges into its base's; in a list's items
    (``test_evaluator = [dict(val_evaluator, ...)]`` of a ``val_evaluator`` with ``_delete_``)
    it stays, and the metric refuses it when the test starts."""
    from mmengine.config import Config

    import xmr  # noqa: F401  (the xmr:: scheme of _base_ lists)

    found = set()
    for path in sorted(CONFIGS.rglob('*.py')):
        if 'ablations' in path.parts:  # overlays: their _delete_ applies as they merge
            continue
        cfg = Config.fromfile(str(path)).to_dict()
        built = {key: value for key, value in cfg.items() if key in BUILT or key.endswith(
            ('_dataloader', '_dataloaders', '_evaluator', '_cfg'))}
        found |= {f'{path.relative_to(CONFIGS)}: {key}' for key in kept_deletes(built)}
    assert found == set()
    assert list(kept_deletes({'test_evaluator': [dict(type='M', _delete_=True)]})) == [
        'test_evaluator.0']


def test_no_config_holds_a_number_variable_that_an_option_would_change_alone():
    """A top-level number the runner and xmr never read is a variable the config copied where it
    uses it as it loaded; an option or a leaf that changes it changes it alone, and, unlike text,
    lists and dicts, no check can tell its copies (a number meets its equals by chance: 0.05 is
    a decay and a warm-up ratio). ``batch_size=128`` left CDDS at 64, ``num_epochs=10`` at 25
    epochs, ``num_frames=8`` MSRVTT at 12 frames, ``lambda_align=0.1`` PECTVLM at 0.5: the
    configs write such a value where it is used (docs/configs.md)."""
    from mmengine.config import Config

    import xmr  # noqa: F401  (the xmr:: scheme of _base_ lists)
    from xmr.config_variables import runner_keys
    from xmr.run_config import XMR_TOP_LEVEL_KEYS

    read = runner_keys() | set(XMR_TOP_LEVEL_KEYS)
    found = {f'{path.relative_to(CONFIGS)}: {key} = {value!r}'
             for path in leaves() if 'ablations' not in path.parts
             for key, value in Config.fromfile(str(path)).to_dict().items()
             if key not in read and isinstance(value, (int, float))
             and not isinstance(value, bool)}
    assert found == set()


#: docs/configs.md, "File names": a part is lower-case words joined by '-'; a leaf joins at least
#: {method}_{backbone}_{dataset} (or {backbone}_{dataset}_{setting} for a model evaluated as it
#: is) by '_'; an ablation overlay is one part, named after its change.
PART = r'[a-z0-9][a-z0-9.]*(?:-[a-z0-9.]+)*'
LEAF_NAME = re.compile(rf'{PART}(?:_{PART}){{2,}}')
ABLATION_NAME = re.compile(PART)
#: The names docs/configs.md keeps as users know them.
KEPT_NAMES = {'dasd/cclm_multi30k', 'demo/static_tiny-clip_synthetic'}


def misnamed(paths: list[Path]) -> set[str]:
    """The configs among ``paths`` whose stem breaks the scheme of their kind."""
    found = set()
    for path in paths:
        name = str(path.relative_to(CONFIGS).with_suffix(''))
        pattern = ABLATION_NAME if 'ablations' in path.parts else LEAF_NAME
        if name not in KEPT_NAMES and not pattern.fullmatch(path.stem):
            found.add(name)
    return found


def test_configs_follow_the_naming_scheme():
    assert misnamed(leaves()) == set()
    page = (CONFIGS.parent / 'docs' / 'configs.md').read_text(encoding='utf-8')
    assert all(f'configs/{name}.py' in page for name in KEPT_NAMES)
    assert all((CONFIGS / f'{name}.py').is_file() for name in KEPT_NAMES)


@pytest.mark.parametrize('name', ['dasd/DASD_clip-vit-b32_multi30k', 'dasd/dasd_multi30k',
                                  'dasd/dasd__multi30k_clft', 'cdds/cdds vit_bert_flickr30k',
                                  'pectvlm/lora-r1_mclip--xlmr_xtd10', 'dasd/ablations/no_sc'])
def test_the_naming_check_sees_a_broken_name(name):
    assert misnamed([CONFIGS / f'{name}.py']) == {name}
