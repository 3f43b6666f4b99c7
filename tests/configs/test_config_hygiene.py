"""Leaf configs and ablation overlays are data: no function, lambda or comprehension
(docs/configs.md)."""
import ast
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
CODE = (ast.FunctionDef, ast.Lambda, ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp)

def leaves():
    return [path for path in sorted(CONFIGS.rglob('*.py')) if '_base_' not in path.parts]


def holds_code(path: Path) -> bool:
    return any(isinstance(node, CODE) for node in ast.walk(ast.parse(path.read_text())))


def test_no_leaf_config_holds_code():
    found = {str(path.relative_to(CONFIGS)) for path in leaves() if holds_code(path)}
    assert found == set()


def test_the_check_sees_code(tmp_path):
    leaf = tmp_path / 'leaf.py'
    leaf.write_text("phases = [dict(p, lr=1e-4) for p in _base_.phases]\n")
    assert holds_code(leaf)
    leaf.write_text("model = dict(language_branch=dict(num_blocks=3))\n")
    assert not holds_code(leaf)
