"""Every repository file a fenced command of the README or docs/ names exists."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / 'README.md', *sorted((REPO / 'docs').rglob('*.md'))]
FENCE = re.compile(r'^```[^\n]*\n(.*?)^```', re.S | re.M)
# A path into the repository's own folders; placeholders (<config>, ..., *, {}) are not files.
REPO_PATH = re.compile(r'(?<![\w./-])((?:tools|configs|xmr|docs|tests|requirements)/'
                       r'[\w./+-]*[\w+-])')
PLACEHOLDER = re.compile(r'[<>*{}]|\.\.\.|CONFIG')


def fenced_commands(page: Path) -> list[str]:
    """The command lines of a page's fenced blocks (continuations joined, comments cut)."""
    text = page.read_text(encoding='utf-8')
    lines = []
    for block in FENCE.findall(text):
        for line in block.replace('\\\n', ' ').splitlines():
            command = ' '.join(line.split(' #', 1)[0].split())
            if re.match(r'(\$ )?(python|bash|sh|pip|OMP_NUM_THREADS|PYTHON|torchrun|srun|'
                        r'tools/)', command):
                lines.append(command)
    return lines


def named_files(command: str) -> list[str]:
    return [path for path in REPO_PATH.findall(command)
            if not PLACEHOLDER.search(path) and not path.startswith('tests/data')]


def test_the_extractor_finds_commands_and_their_files(tmp_path):
    page = tmp_path / 'page.md'
    page.write_text('text tools/not_a_command.py\n```bash\n'
                    'python tools/train.py configs/demo/x.py --work-dir w  # configs/y.py\n'
                    'OMP_NUM_THREADS=1 python tools/test.py configs/<config>.py \\\n'
                    '    work_dirs/a.pth --out r.json\n```\n')
    commands = fenced_commands(page)
    assert commands == ['python tools/train.py configs/demo/x.py --work-dir w',
                        'OMP_NUM_THREADS=1 python tools/test.py configs/<config>.py '
                        'work_dirs/a.pth --out r.json']
    assert [named_files(command) for command in commands] == [
        ['tools/train.py', 'configs/demo/x.py'], ['tools/test.py']]


@pytest.mark.parametrize('page', PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_files_named_by_fenced_commands_exist(page):
    missing = sorted({path for command in fenced_commands(page) for path in named_files(command)
                      if not (REPO / path).exists()})
    assert not missing, f'{page.relative_to(REPO)} names files that do not exist: {missing}'
