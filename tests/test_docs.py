"""The README and docs/ agree with the code: the files, configs, ablations and tests they name
exist; the flags their commands pass are their tools' flags, a command written out in full parses
and its --cfg-options load; the types they write are registered, the xmr.a.b names they use
resolve; the signatures they write for xmr's public API (xmr.apis, xmr.evaluation, ...) are the
code's; their links reach a file and heading. The code's own pointers to docs/, tools/ and
xmr.a.b resolve too, docs/data.md's table of dataset configs names their extra dataloaders, and
the demo's schedule that docs/getting_started.md and docs/design_notes.md quote is the demo's.

A placeholder names nothing: <name>, ..., a word in capitals (CONFIG), [optional] parts; a
user's own files (my_project/...) lie outside the repository's folders and are not read as paths.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import functools
import importlib
import inspect
import io
import os
import re
import runpy
import sys
import tomllib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from mmengine.registry import Registry

from xmr.console import LAUNCHERS
from xmr.utils.cli import DEBUG_FLAG

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / 'README.md', *sorted((REPO / 'docs').rglob('*.md'))]
# A fence may be indented, inside a list item.
FENCE = re.compile(r'^ *```[^\n]*\n(.*?)^ *```', re.S | re.M)
# A path into the repository's own folders; placeholders (<config>, ..., *, {}) are not files.
REPO_PATH = re.compile(r'(?<![\w./-])((?:tools|configs|xmr|docs|tests|requirements)/'
                       r'[\w./+-]*[\w+-])')
# CONFIG, NAME: no repository path has capitals.
PLACEHOLDER = re.compile(r'[<>*{}]|\.\.\.|[A-Z]{2,}')


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


# ---------------------------------------------------------------------------------------------
# Flags: every `--flag` a documented command passes is one its tool's parser accepts.

# A tool the docs run: `python tools/X.py`, `python -m xmr SUB`, `xmr SUB`, `xmr data X`, or a
# launcher (`tools/dist_train.sh`, `xmr dist_train`) that hands its trailing options to
# tools/train.py or tools/test.py.
INVOCATION = re.compile(r'(?:python3? -m (?P<module>[\w.]+)'
                        r'|(?:python3? )?(?P<script>tools/[\w/]+\.py)'
                        r'|(?:bash )?tools/(?P<launcher>(?:dist|slurm)_(?:train|test)\.sh)'
                        r'|(?P<xmr>xmr))(?=\s|$)')
ENVIRONMENT = re.compile(r'^(?:\$ )?(?:\w+=\S* )*')
SEPARATOR = re.compile(r'\s(?:&&|\|\|?|;)\s')
FLAG = re.compile(r'(?<![\w-])--[a-z][\w-]*')
INLINE_CODE = re.compile(r'(?<!`)`([^`\n]+)`(?!`)')


def documented_commands(page: Path, inline: bool = True) -> list[str]:
    """The fenced command lines of a page and (with ``inline``) its inline code, one per
    command (``a && b`` is two)."""
    text = page.read_text(encoding='utf-8')
    commands = [' '.join(line.split(' #', 1)[0].split())
                for block in FENCE.findall(text)
                for line in block.replace('\\\n', ' ').splitlines()]
    if inline:
        commands += [span.replace('\\|', '|') for span in INLINE_CODE.findall(FENCE.sub('', text))]
    return [ENVIRONMENT.sub('', part) for command in commands for part in SEPARATOR.split(command)]


def launched(launcher: str, words: list[str]) -> tuple[str, list[str]]:
    """The tool a launcher runs and its words: the launcher's own (``dist_*.sh``'s
    NUM_PROCESSES after CONFIG [CHECKPOINT], ``slurm_*.sh``'s PARTITION JOB_NAME) left out."""
    script = 'train.py' if '_train' in launcher else 'test.py'
    if launcher.startswith('slurm'):
        return f'tools/{script}', words[2:]
    count = 1 if script == 'train.py' else 2
    return f'tools/{script}', words[:count] + words[count + 1:]


def tool_call(command: str) -> tuple[str, list[str]] | None:
    """The script ``tools/...py`` a command runs and the words after it; None for a command that
    runs no tool of the repository or names it by a placeholder (``xmr data prepare_<set>``)."""
    match = INVOCATION.match(command)
    if match is None:
        return None
    words = command[match.end():].split()
    if match['launcher']:
        return launched(match['launcher'], words)
    if match['script']:
        return match['script'], words
    if match['module'] not in (None, 'xmr'):
        path = match['module'].replace('.', '/') + '.py'
        return (path, words) if path.startswith('tools/') else None
    if words[:1] and words[0] in LAUNCHERS:
        return launched(words[0], words[1:])
    count = 2 if words[:1] in (['data'], ['convert']) else 1
    if len(words) < count or any(PLACEHOLDER.search(word) or word.startswith('-')
                                 for word in words[:count]):
        return None
    return 'tools/' + '/'.join(words[:count]) + '.py', words[count:]


class _Parsed(BaseException):
    """Raised in place of parsing, to hand the parser a tool built back to the caller (not an
    Exception, so that run_tool passes it on)."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


@functools.cache
def tool_parser(script: str) -> argparse.ArgumentParser:
    """The parser ``tools/<script>`` builds, caught at its first parse (the script runs as
    ``__main__`` in this process, up to that point only)."""
    def caught(parser, *args, **kwargs):
        raise _Parsed(parser)

    saved = sys.argv[:], sys.path[:]
    sys.argv = [str(REPO / script)]
    try:  # what the script sets up before parsing (environment, warnings) stays with it
        with mock.patch.object(argparse.ArgumentParser, 'parse_known_args', caught), \
                mock.patch.dict(os.environ), warnings.catch_warnings():
            runpy.run_path(str(REPO / script), run_name='__main__')
    except _Parsed as parsed:
        return parsed.parser
    finally:
        sys.argv, sys.path[:] = saved
    raise AssertionError(f'{script} parsed no arguments')


def accepted_flags(parser: argparse.ArgumentParser, words: list[str]) -> set[str]:
    """The flags ``parser`` takes, with those of the sub-command the first word names."""
    flags = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            command = next((word for word in words if not word.startswith('-')), None)
            if command in action.choices:
                flags |= accepted_flags(action.choices[command], [])
    return flags | {DEBUG_FLAG}


def unknown_flags(page: Path) -> list[str]:
    wrong = []
    for command in documented_commands(page):
        call = tool_call(command)
        if call is None:
            continue
        script, words = call
        if not (REPO / script).is_file():
            wrong.append(f'{script}: no such tool')
            continue
        flags = accepted_flags(tool_parser(script), words)
        wrong += [f'{script} {flag}' for flag in FLAG.findall(' '.join(words))
                  if flag not in flags]
    return sorted(set(wrong))


@pytest.mark.parametrize('page', PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_documented_flags_are_accepted_by_their_tools(page):
    wrong = unknown_flags(page)
    assert not wrong, f'{page.relative_to(REPO)} passes flags its tools do not take: {wrong}'


def unknown_markers(page: Path) -> list[str]:
    """The words of a documented ``pytest -m EXPR`` that pyproject.toml declares no marker."""
    declared = tomllib.loads((REPO / 'pyproject.toml').read_text(encoding='utf-8'))
    markers = {marker.split(':')[0] for marker in
               declared['tool']['pytest']['ini_options']['markers']}
    return sorted({word for command in documented_commands(page)
                   for expression in re.findall(r'pytest .*?-m ("[^"]*"|\S+)', command)
                   for word in re.findall(r'\w+', expression)
                   if word not in markers | {'and', 'or', 'not'}})


@pytest.mark.parametrize('page', PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_documented_pytest_markers_are_declared(page):
    unknown = unknown_markers(page)
    assert not unknown, f'{page.relative_to(REPO)} selects undeclared pytest markers: {unknown}'


# A fenced command written out in full (no [optional] part, <placeholder>, a|b or ...) parses as
# its tool parses it, and the --cfg-options and --ablation it gives a config of the repository
# load as the tools load them (a key the config's types do not take, a list index past its end,
# a top-level key the config does not have).

UNPARSED = re.compile(r'[][<>|]|\.\.\.')


def registered_in(found: Registry, name: str) -> bool:
    try:
        return found.get(name) is not None
    except KeyError:
        return False


def refused_commands(page: Path, work_dir: Path) -> list[str]:
    from xmr.run_config import load_run_config

    refused = []
    for command in documented_commands(page, inline=False):
        call = tool_call(command)
        if call is None or any(UNPARSED.search(word) for word in call[1]):
            continue
        script, words = call
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                args = tool_parser(script).parse_args(words)
        except SystemExit:
            refused.append(f'{command}: {errors.getvalue().strip().splitlines()[-1]}')
            continue
        config, options = getattr(args, 'config', None), getattr(args, 'cfg_options', None)
        ablations = getattr(args, 'ablation', None) or ()  # the converters take none
        if not (config and (REPO / config).is_file() and (options or ablations)):
            continue
        try:
            plain = load_run_config(REPO / config, ablations=ablations, work_dir=str(work_dir))
            load_run_config(REPO / config, ablations=ablations, cfg_options=options,
                            work_dir=str(work_dir))
        except Exception as error:  # noqa: BLE001  (any refusal is the finding)
            refused.append(f'{command}: {type(error).__name__}: {error}')
            continue
        # MMEngine adds a key the config lacks; at the top level, no part of a run reads it.
        refused += [f'{command}: {key}: the config has no {key.split(".")[0]}'
                    for key in options or () if key.split('.')[0] not in plain]
    return refused


def test_a_refused_command_is_reported(tmp_path):
    page = tmp_path / 'page.md'
    page.write_text('```bash\npython tools/test.py CONFIG CKPT --out\n'
                    'python tools/train.py configs/demo/static_tiny-clip_synthetic.py '
                    '--cfg-options model.no_such_option=1\npython tools/train.py [--amp]\n'
                    'python tools/train.py configs/demo/static_tiny-clip_synthetic.py '
                    '--cfg-options no_such_loader.batch_size=8\n'
                    'python tools/train.py configs/demo/static_tiny-clip_synthetic.py '
                    '--cfg-options model.language_branch.adapters.hiden=8\n```\n')
    refused = refused_commands(page, tmp_path / 'work')
    assert len(refused) == 4 and 'expected one argument' in refused[0]
    assert "'hiden' (did you mean 'hidden'?)" in refused[3]
    assert 'no_such_option' in refused[1] and 'has no no_such_loader' in refused[2]


@pytest.mark.parametrize('page', PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_fenced_commands_parse_and_load_their_config(page, tmp_path):
    refused = refused_commands(page, tmp_path)
    assert not refused, f'{page.relative_to(REPO)} runs commands its tools refuse: {refused}'


def elided_commands(page: Path) -> list[str]:
    """The fenced commands that name no placeholder but cut their options short with a bare
    ``...``: written out but for that, they are meant to be run as typed, and the checks above
    pass over them (a word with ``...`` is read as a placeholder)."""
    elided = []
    for command in documented_commands(page, inline=False):
        call = tool_call(command)
        if call and '...' in call[1] and not any(
                UNPARSED.search(word) for word in call[1] if word != '...'):
            elided.append(command)
    return elided


def test_an_elided_command_is_reported(tmp_path):
    page = tmp_path / 'page.md'
    page.write_text('```bash\npython tools/train.py configs/demo/x.py --cfg-options a=1 ...\n'
                    'python tools/train.py CONFIG --cfg-options [k=v ...]\n'
                    'python tools/test.py configs/demo/x.py work_dirs/.../iter_4.pth ...\n'
                    'python tools/train.py configs/demo/x.py --cfg-options a=1\n```\n')
    assert elided_commands(page) == [
        'python tools/train.py configs/demo/x.py --cfg-options a=1 ...']


@pytest.mark.parametrize('page', PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_runnable_commands_are_written_out_in_full(page):
    elided = elided_commands(page)
    assert not elided, (f'{page.relative_to(REPO)} elides the options of commands it gives to '
                        f'run (write them out): {elided}')


# ---------------------------------------------------------------------------------------------
# Paths: every repository path the text of a page names exists: `configs/...`, `xmr/...`,
# `tools/...`; a config named as `_base_` and the tools name it (`xmr::dasd/x.py`,
# `../_base_/x.py`, `dasd/x.py`) or by its bare name (`cdds_clip-vit-b32_mscoco.py`: a `-` and a
# `_` make a config's name), and an ablation by its name (`dasd/no-sc`). `{a,b}` names each of a
# and b, a `*` at least one file; a placeholder (<name>, ..., CONFIG) names nothing.

ROOTS = ('tools/', 'configs/', 'xmr/', 'docs/', 'tests/', 'requirements/')
CONFIG_FOLDERS = tuple(f'{path.name}/' for path in (REPO / 'configs').iterdir() if path.is_dir())
WORD = re.compile(r'[\w./+{},*<>:-]+')
BRACES = re.compile(r'\{([^{}]*)\}')


def expanded(pattern: str) -> list[str]:
    """``a{b,c}d`` as ``abd`` and ``acd`` (shell brace expansion, nested ones too)."""
    match = BRACES.search(pattern)
    if match is None:
        return [pattern]
    return [path for choice in match[1].split(',')
            for path in expanded(pattern[:match.start()] + choice + pattern[match.end():])]


def repository_path(word: str) -> str | None:
    """The pattern of repository paths ``word`` names, or None for a word that names none."""
    word = word.rstrip('.,:;')
    if re.search(r'[<>]|\.\.\.|[A-Z]{2,}', word) or word.startswith('tests/data'):
        return None
    if word.startswith(ROOTS):
        return word
    word = word.removeprefix('xmr::').removeprefix('../')
    if word.startswith(CONFIG_FOLDERS) and word.endswith('.py'):
        return 'configs/' + word
    if '/' not in word and word.endswith('.py') and '-' in word and '_' in word:
        return 'configs/**/' + word
    ablation = re.fullmatch(r'([\w-]+)/([\w-]+)', word)  # `dasd/no-sc`, as --ablation names it
    if ablation and (REPO / 'configs' / ablation[1] / 'ablations').is_dir():
        return f'configs/{ablation[1]}/ablations/{ablation[2]}.py'
    return None


def missing_paths(page: Path, roots: tuple[str, ...] = ()) -> list[str]:
    """The paths that do not exist of those ``page`` names (only those under ``roots``, if
    given)."""
    patterns = {repository_path(word) for word in WORD.findall(page.read_text(encoding='utf-8'))
                if not roots or word.startswith(roots)}
    return sorted(path for pattern in patterns - {None} for path in expanded(pattern)
                  if not (any(REPO.glob(path)) if '*' in path else (REPO / path).exists()))


def test_the_path_reader_expands_patterns_and_skips_placeholders(tmp_path):
    assert expanded('a{b,c}_{d,}.py') == ['ab_d.py', 'ab_.py', 'ac_d.py', 'ac_.py']
    assert [repository_path(word) for word in (
        'configs/dasd/x.py,', 'xmr::demo/x.py', '../_base_/datasets/x.py', 'dasd/no-sc',
        'cdds_clip-vit-b32_mscoco.py', 'my_project/adapters.py', 'run_XTD.py',
        'configs/demo/<config>.py', 'work_dirs/.../x.py')] == [
        'configs/dasd/x.py', 'configs/demo/x.py', 'configs/_base_/datasets/x.py',
        'configs/dasd/ablations/no-sc.py',
        'configs/**/cdds_clip-vit-b32_mscoco.py', None, None, None, None]
    page = tmp_path / 'page.md'
    page.write_text('`configs/demo/{static,no_such}_tiny-clip_synthetic.py`, docs/no_such.md\n')
    assert missing_paths(page) == ['configs/demo/no_such_tiny-clip_synthetic.py', 'docs/no_such.md']
    assert missing_paths(page, ('docs/',)) == ['docs/no_such.md']


@pytest.mark.parametrize('page', PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_repository_paths_named_in_the_text_exist(page):
    missing = missing_paths(page)
    assert not missing, f'{page.relative_to(REPO)} names paths that do not exist: {missing}'


def test_the_configs_page_names_config_files_that_exist():
    """docs/configs.md names the files of configs/ by their name alone (`train_loaders.py`),
    where the path reader takes only a name with a `-` and a `_` for a config's."""
    named = set(re.findall(r'`(\w[\w.-]*\.py)`', (REPO / 'docs' / 'configs.md').read_text()))
    missing = sorted(name for name in named if not any((REPO / 'configs').rglob(name)))
    assert not missing, f'docs/configs.md names config files that do not exist: {missing}'


def test_the_command_reader_finds_the_tool_and_its_words():
    assert tool_call('python tools/train.py C --amp') == ('tools/train.py', ['C', '--amp'])
    assert tool_call('xmr data prepare_multi30k --text-only') == (
        'tools/data/prepare_multi30k.py', ['--text-only'])
    assert tool_call('python -m xmr test CONFIG CKPT') == ('tools/test.py', ['CONFIG', 'CKPT'])
    assert tool_call('tools/dist_train.sh C 2 --amp') == ('tools/train.py', ['C', '--amp'])
    assert tool_call('tools/dist_test.sh C K 4 --out r.json') == (
        'tools/test.py', ['C', 'K', '--out', 'r.json'])
    assert tool_call('tools/slurm_train.sh P JOB C --amp') == ('tools/train.py', ['C', '--amp'])
    assert [tool_call(command) for command in (
        'python -m pytest -x', 'xmr data prepare_<set>', 'xmr --help', 'pip install -e .')] == [
        None] * 4
    merge = accepted_flags(tool_parser('tools/language_modules.py'), ['merge', 'CONFIG'])
    assert {'--modules', '--cfg-options', '--debug'} <= merge and '--no-such' not in merge


def test_docs_tools_and_modules_named_by_the_code_exist():
    """The code's own pointers (``usage: docs/data.md``, ``see tools/dist_launch.sh``,
    ``:class:`~xmr.engine.loops.PhasedTrainLoop```); its ``configs/`` words are left out, as
    they also name the released code's files."""
    sources = [*(REPO / 'xmr').rglob('*.py'), *(REPO / 'tools').rglob('*.py'),
               *(REPO / 'tools').glob('*.sh'), *(REPO / 'configs').rglob('*.py')]
    missing = {f'{source.relative_to(REPO)}: {path}' for source in sources
               for path in missing_paths(source, ('docs/', 'tools/', 'xmr/'))}
    missing |= {f'{source.relative_to(REPO)}: {name}' for source in sources
                if source.name != '__main__.py'
                for name in DOTTED.findall(source.read_text(encoding='utf-8'))
                if not resolves(name.rstrip('.')) and not registered(name)}
    assert not missing, f'the code names paths or names that do not exist: {sorted(missing)}'


# ---------------------------------------------------------------------------------------------
# Names: every `type='Foo'` a page writes is registered (in xmr's registries or, through them,
# MMEngine's) or is a class the page itself writes (`class Foo(BaseAdapter):`, a user's); every
# dotted `xmr.a.b` it names imports, is an attribute of a module that does, or is a function
# registered with the `xmr.` scope (the collate function, `xmr.retrieval_collate`).

TYPE = re.compile(r'(?<![\w.])type=[\'"]([\w.]+)[\'"]')
DOTTED = re.compile(r'(?<![\w./:-])xmr(?:\.\w+)+')


@functools.cache
def registered(name: str) -> bool:
    """Whether any of xmr's registries (and their MMEngine parents) builds type ``name``."""
    from xmr import registry

    return any(registered_in(found, name) for found in vars(registry).values()
               if isinstance(found, Registry))


def resolves(dotted: str) -> bool:
    """Whether ``xmr.a.b`` is a module of xmr or an attribute of one (``xmr.a.B.method``)."""
    parts = dotted.split('.')
    for count in range(len(parts), 0, -1):
        try:
            found = importlib.import_module('.'.join(parts[:count]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[count:]:
            if not hasattr(found, attribute):  # a dataclass's field without a default
                return attribute in getattr(found, '__annotations__', {}) and \
                    attribute == parts[-1]
            found = getattr(found, attribute)
        return True
    return False


def unknown_names(page: Path) -> list[str]:
    text = page.read_text(encoding='utf-8')
    own = set(re.findall(r'^\s*(?:class|def) (\w+)', text, re.M))
    types = [f"type='{name}'" for name in TYPE.findall(text)
             if name not in own and not registered(name)]
    dotted = [name for name in DOTTED.findall(text.replace('\\_', '_'))
              if not resolves(name.rstrip('.')) and not registered(name)]
    return sorted(set(types + dotted))


@pytest.mark.parametrize('page', PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_types_and_modules_named_exist(page):
    unknown = unknown_names(page)
    assert not unknown, f'{page.relative_to(REPO)} names types or modules xmr lacks: {unknown}'


# Options: a `dict(type='Foo', a=..., b=...)` a page writes (a fenced block's or inline code's,
# over lines, comments cut) is one the registry holding Foo lets through its option check
# (`XMRRegistry.check_options`, as the config's build does): the keywords Foo takes, those its
# `forwards_options_to` take, values of the kind of each default (a value that is no literal,
# `...` or a name, is taken as None, of any kind). A dict that does not parse as Python
# (`dict(type='X', ..., key=1)`) or names a type of the page's own is passed over.

DICT_CALL = re.compile(r'(?<![\w.])dict\(')


def dict_calls(text: str) -> list[str]:
    """Every ``dict(...)`` of ``text`` up to its closing parenthesis, nested ones too, each
    line's ``#`` comment cut."""
    text = '\n'.join(line.split(' #', 1)[0] for line in text.splitlines())
    calls = []
    for match in DICT_CALL.finditer(text):
        depth = 0
        for end in range(match.end() - 1, len(text)):
            depth += {'(': 1, ')': -1}.get(text[end], 0)
            if depth == 0:
                calls.append(' '.join(text[match.start():end + 1].split()))
                break
    return calls


def literal_or_none(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:  # a call, a name, `...` inside a list
        return None


def refused_options(page: Path) -> list[str]:
    from xmr import registry

    refused = []
    for call in dict_calls(page.read_text(encoding='utf-8')):
        try:
            keywords = ast.parse(call, mode='eval').body.keywords
        except SyntaxError:
            continue
        cfg = {keyword.arg: literal_or_none(keyword.value) for keyword in keywords if keyword.arg}
        cfg.pop('_delete_', None)
        holder = next((found for found in vars(registry).values()
                       if isinstance(found, registry.XMRRegistry)
                       and isinstance(cfg.get('type'), str) and registered_in(found, cfg['type'])),
                      None)  # None: a type of the page's own, or none (the name check's)
        try:
            if holder is not None:
                holder.check_options(cfg)
        except (TypeError, ValueError) as error:
            refused.append(str(error))
    return sorted(set(refused))


def test_the_option_check_reads_dicts_over_lines_as_the_build_checks_them(tmp_path):
    page = tmp_path / 'page.md'
    page.write_text("```python\nmetric = dict(type='RetrievalMetric',  # a comment (\n"
                    "              langauges=['de'])\n"
                    "loader = dict(batch_size=8, sampler=dict(type='DefaultSampler',\n"
                    "              shufle=True))\n```\n"
                    "`dict(type='CaptionPairDataset', data_root='d', ann_file='a.json')`, "
                    "`dict(type='CheckpointHook', anything=1)`, `dict(type='Mine', x=1)`, "
                    "`dict(type='RetrievalMetric', ..., languages=None)`, "
                    "`dict(type='RetrievalMetric', rerank_candidates='100')`\n")
    refused = refused_options(page)
    assert len(refused) == 4, refused
    assert "DefaultSampler: unknown option 'shufle' (did you mean 'shuffle'?)" in refused[0]
    assert "CheckpointHook: unknown option 'anything'" in refused[1]  # MMEngine's, forwarded
    assert "RetrievalMetric: option rerank_candidates='100' must be a number" in refused[2]
    assert "RetrievalMetric: unknown option 'langauges' (did you mean 'languages'?)" in refused[3]


@pytest.mark.parametrize('page', PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_documented_dicts_pass_their_types_options_they_take(page):
    refused = refused_options(page)
    assert not refused, f'{page.relative_to(REPO)} writes options their types refuse: {refused}'


# Signatures: a signature the docs write for a function or class of the public API
# (`init_retriever(config, checkpoint=None, device='cpu')`; each argument a bare name, `name
# [shape]`, `name=literal` or `**name`) names its parameters as the code does, with its defaults;
# a call (`save_language_module(model, 'de', 'de.pth')`, a `...`) is not a signature.

PUBLIC_API = ('xmr.apis', 'xmr.evaluation', 'xmr.evaluation.leaderboard',
              'xmr.evaluation.clip_benchmark', 'xmr.models.language.language_modules')
SIGNATURE = re.compile(r'(?<![\w.])([A-Za-z_]\w*(?:\.[a-z_]\w*)?)\(([^()]*)\)')
ARGUMENT = re.compile(r'(\*{0,2})([a-z_]\w*)(?: \[[^\]]*\])?(?:=(.+))?')


def public_callable(name: str) -> Any:
    """The function or class ``name`` (``MediaIndex.from_media``) of the public API, or None."""
    for module in map(importlib.import_module, PUBLIC_API):
        owner, _, attribute = name.partition('.')
        found = getattr(module, owner) if owner in getattr(module, '__all__', ()) else None
        found = getattr(found, attribute, None) if attribute else found
        if callable(found):
            return found
    return None


def parameter_defaults(function: Any) -> dict[str, Any]:
    """Each parameter's default, a dataclass field's ``default_factory`` called."""
    defaults = {name: parameter.default
                for name, parameter in inspect.signature(function).parameters.items()}
    if dataclasses.is_dataclass(function):
        defaults |= {field.name: field.default_factory() for field in dataclasses.fields(function)
                     if field.default_factory is not dataclasses.MISSING}
    return defaults


def stated(default: str) -> Any:
    """A written default's value; ``...`` for a placeholder or a name (`N`, `torch.float32`)."""
    try:
        return ast.literal_eval(default)
    except (ValueError, SyntaxError):
        return ...


def signature_mismatches(page: Path) -> list[str]:
    text = ' '.join(FENCE.sub('', page.read_text(encoding='utf-8')).split())  # spans over lines
    wrong = []
    for name, arguments in SIGNATURE.findall(' '.join(re.findall(r'`([^`]+)`', text))):
        parsed = [ARGUMENT.fullmatch(part.strip())
                  for part in re.split(r',(?![^\[]*\])', arguments)]
        function = public_callable(name)
        if function is None or not all(parsed):
            continue
        parameters = inspect.signature(function).parameters
        defaults = parameter_defaults(function)
        # Settings alone (`RetrievalMetric(protocol='text_to_text')`) choose, they state no default.
        states_defaults = any(match[3] is None for match in parsed)
        keywords = {name for name, parameter in parameters.items()
                    if parameter.kind is inspect.Parameter.VAR_KEYWORD}
        for stars, argument, default in (match.groups() for match in parsed):
            # `**name` names the keyword arguments as the writer likes; they take any name.
            if not (keywords or stars != '**' and argument in parameters):
                wrong.append(f'{name}: no parameter {stars}{argument} '
                             f'(it takes {", ".join(parameters)})')
            elif states_defaults and default is not None and \
                    stated(default) not in (..., defaults[argument]):
                wrong.append(f'{name}: {argument}={default}, the code\'s default is '
                             f'{defaults[argument]!r}')
    return sorted(set(wrong))


def test_the_signature_check_reads_signatures_and_passes_over_calls(tmp_path):
    page = tmp_path / 'page.md'
    page.write_text("`init_retriever(config, checkpoint=None, device='cuda', options=None)`, "
                    "`MediaIndex(embeddings, media_ids, index='flat', **faiss_options)`,\n"
                    "`EvaluationResult(name, metrics, test_sets=[],\nextra={})`, "
                    "`encode_texts(model, captions, lang, batch_size=N)`, "
                    "`init_retriever('c.py', 'x.pth')`, `MediaIndex.from_media(model, ...)`\n")
    assert signature_mismatches(page) == [
        'encode_texts: no parameter captions (it takes model, texts, lang, batch_size)',
        "init_retriever: device='cuda', the code's default is 'cpu'",
        'init_retriever: no parameter options (it takes config, checkpoint, device, cfg_options)']


@pytest.mark.parametrize('page', PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_documented_signatures_are_the_codes(page):
    wrong = signature_mismatches(page)
    assert not wrong, f'{page.relative_to(REPO)} writes signatures the code does not have: {wrong}'


def test_the_name_checks_know_registered_types_and_modules():
    assert registered('PhasedTrainLoop') and registered('mmengine.OptimWrapper')
    assert registered('xmr.retrieval_collate') and not registered('PhasedTrainLoops')
    assert resolves('xmr.registry.LOCATIONS') and resolves('xmr.models.retrievers.BaseRetriever')
    assert not resolves('xmr.registry.NO_SUCH') and not resolves('xmr.no_such.module')
    assert resolves('xmr.models.adapters.base.AdapterContext.rows')  # a field, no default


def test_tests_the_docs_name_exist():
    """A test named in the docs (`test_a_fused_step_...`: ``test_`` and three words or more, so
    that config keys such as ``test_dataloader`` are not taken for one) is defined in tests/,
    and a test file named bare (`test_open_clip.py`) lies there."""
    sources = list((REPO / 'tests').rglob('test_*.py'))
    defined = {name for source in sources
               for name in re.findall(r'def (test_\w+)', source.read_text(encoding='utf-8'))}
    defined |= {source.name for source in sources}
    named = {(page.relative_to(REPO), name) for page in PAGES
             for name in re.findall(r'(?<![\w/.-])(test(?:_[a-z0-9]+){3,}(?:\.py)?)\b',
                                    page.read_text(encoding='utf-8'))}
    named |= {(page.relative_to(REPO), name) for page in PAGES
              for name in re.findall(r'(?<![\w/.-])(test_\w+\.py)\b', page.read_text('utf-8'))}
    missing = sorted(f'{page}: {name}' for page, name in named if name not in defined)
    assert not missing, f'the docs name tests that do not exist: {missing}'


# ---------------------------------------------------------------------------------------------
# Links: every relative link of a page reaches a file, and its `#anchor` a heading there (as
# GitHub writes a heading's anchor: lower case, punctuation dropped, spaces as hyphens, a
# repeated heading numbered).

LINK = re.compile(r'\]\(([^)\s]+)\)')


def anchors(page: Path) -> set[str]:
    headings = re.findall(r'^#+ (.+)$', FENCE.sub('', page.read_text(encoding='utf-8')), re.M)
    seen: list[str] = []
    slugs = set()
    for heading in headings:
        slug = re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')
        slugs.add(f'{slug}-{seen.count(slug)}' if slug in seen else slug)
        seen.append(slug)
    return slugs


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(FENCE.sub('', page.read_text(encoding='utf-8'))):
        if re.match(r'[a-z]+:', target):
            continue  # https:, mailto:
        path, _, anchor = target.partition('#')
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and linked.suffix == '.md'
                                   and anchor not in anchors(linked)):
            broken.append(target)
    return sorted(set(broken))


def test_anchors_are_written_as_github_writes_them(tmp_path):
    page = tmp_path / 'page.md'
    page.write_text('# Crossmodal-3600 — `tools/data/x.py`\n## Notes\n## Notes\n## Notes\n'
                    '```bash\n# not a heading\n```\n[a](#notes-2) [b](#nope) [c](other.md)\n',
                    encoding='utf-8')
    assert anchors(page) == {'crossmodal-3600--toolsdataxpy', 'notes', 'notes-1', 'notes-2'}
    assert broken_links(page) == ['#nope', 'other.md']


@pytest.mark.parametrize('page', PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_relative_links_reach_their_file_and_heading(page):
    broken = broken_links(page)
    assert not broken, f'{page.relative_to(REPO)} links to no file or heading: {broken}'


# ---------------------------------------------------------------------------------------------
# docs/data.md's table of dataset configs: the extra dataloaders of each row are the config's
# (its top-level `*_dataloader(s)` keys that hold a loader, besides train/val/test).

LOADER = re.compile(r'`(\w+_dataloaders?)`')


def documented_extra_loaders(text: str) -> dict[str, set[str]]:
    """``{config: extra dataloaders}`` of the table headed ``| config | train | ...``; a cell
    ``as above`` starts from the row before, and the names after ``without`` are taken away."""
    table = text[text.index('| config | train | val | test | extra dataloaders |'):]
    rows: dict[str, set[str]] = {}
    previous: set[str] = set()
    for line in table.splitlines()[2:]:
        if not line.startswith('|'):
            break
        cells = [cell.strip() for cell in line.strip('|').split('|')]
        config, extra = cells[0].strip('`'), cells[-1]
        kept, _, removed = extra.partition('without')
        names = set(previous) if kept.startswith('as above') else set()
        names = (names | set(LOADER.findall(kept))) - set(LOADER.findall(removed))
        rows[config] = previous = names
    return rows


def test_the_table_reader_follows_as_above_and_without():
    text = ('| config | train | val | test | extra dataloaders |\n|---|---|---|---|---|\n'
            '| `a` | x | x | x | `b_dataloader` (see `c.py`), `c_dataloaders` |\n'
            '| `d` | x | x | x | as above, without `c_dataloaders` |\n| `e` | x | x | x | — |\n')
    assert documented_extra_loaders(text) == {
        'a': {'b_dataloader', 'c_dataloaders'}, 'd': {'b_dataloader'}, 'e': set()}


def test_the_dataset_configs_table_lists_each_configs_extra_dataloaders():
    from xmr.run_config import load_run_config

    documented = documented_extra_loaders((REPO / 'docs' / 'data.md').read_text('utf-8'))
    assert len(documented) >= 8
    wrong = {}
    for name, listed in documented.items():
        cfg = load_run_config(REPO / 'configs' / '_base_' / 'datasets' / f'{name}.py')
        loaders = {key for key, value in cfg.items() if value is not None
                   and re.fullmatch(r'\w+_dataloaders?', key)}
        actual = loaders - {'train_dataloader', 'val_dataloader', 'test_dataloader'}
        if actual != listed:
            wrong[name] = f'documented {sorted(listed)}, the config has {sorted(actual)}'
    assert not wrong, f'docs/data.md lists other extra dataloaders than the configs: {wrong}'


# --- The demo's schedule as the pages quote it ------------------------------------------------

DEMO = REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'
RECIPE = re.compile(r'Its recipe \(lr ([\d.e-]+), ([\d,]+) steps\s+of\s+batch\s+(\d+)\)')


def test_the_demo_schedule_the_pages_quote_is_the_demo_config_s():
    """docs/getting_started.md quotes the demo's ``train_cfg`` whole, docs/design_notes.md its
    English recipe (lr, steps, batch): both are those of the config the README runs."""
    from xmr.run_config import load_run_config

    cfg = load_run_config(DEMO)
    quoted = next(block for block in FENCE.findall(
        (REPO / 'docs' / 'getting_started.md').read_text('utf-8'))
        if block.startswith('train_cfg = dict('))
    namespace: dict[str, Any] = {}
    exec(quoted, namespace)
    quoted_cfg = {key: value for key, value in namespace['train_cfg'].items() if key != '_delete_'}
    assert quoted_cfg == cfg.train_cfg.to_dict()

    lr, steps, batch = RECIPE.search((REPO / 'docs' / 'design_notes.md').read_text(
        encoding='utf-8')).groups()
    english = cfg.train_cfg.phases[0]
    assert (float(lr), int(steps.replace(',', '')), int(batch)) == (
        english.lr, english.iters, cfg.source_finetune_dataloader.batch_size)


def kept_checkpoints(cfg: Mapping) -> list[str]:
    """The ``iter_N.pth`` files a run of ``cfg`` as typed leaves: each ``interval``-th iteration
    and the last (``save_last``), the latest ``max_keep_ckpts`` of them."""
    hook = cfg['default_hooks']['checkpoint']
    total = sum(phase['iters'] for phase in cfg['train_cfg']['phases'])
    saved = sorted({*range(hook['interval'], total + 1, hook['interval']),
                    *([total] if hook.get('save_last') else [])})
    return [f'iter_{iteration}.pth' for iteration in saved[-hook['max_keep_ckpts']:]]


def test_the_api_example_loads_a_checkpoint_the_demo_leaves():
    """docs/evaluation.md's `xmr.apis` example loads a checkpoint that the README's demo command
    leaves in its work dir whatever the run's numbers (a best checkpoint's iteration is not)."""
    from xmr.run_config import load_run_config

    assert kept_checkpoints(dict(
        default_hooks=dict(checkpoint=dict(interval=500, max_keep_ckpts=2, save_last=True)),
        train_cfg=dict(phases=[dict(iters=700), dict(iters=700), dict(iters=200)]))) == [
        'iter_1500.pth', 'iter_1600.pth']
    example = re.search(r"init_retriever\('([^']+)',\s*'([^']+)'\)",
                        (REPO / 'docs' / 'evaluation.md').read_text(encoding='utf-8'))
    config, checkpoint = example.groups()
    cfg = load_run_config(REPO / config)
    assert (REPO / config) == DEMO
    assert Path(checkpoint).parent == Path(cfg.work_dir)
    assert Path(checkpoint).name in kept_checkpoints(cfg)


def test_the_api_example_shows_the_index_the_demo_model_builds():
    """The `MediaIndex` repr docs/evaluation.md shows is that of its example: as many media as
    it encodes, in the demo model's embedding width (it said 512, ViT-B's, of a 64-wide model)."""
    from xmr.run_config import load_run_config

    text = (REPO / 'docs' / 'evaluation.md').read_text(encoding='utf-8')
    media = ast.literal_eval(re.search(r'MediaIndex\.from_media\(model, (\[[^\]]*\])\)', text)[1])
    count, dims = map(int, re.search(r'# MediaIndex\((\d+) media, (\d+) dims', text).groups())
    assert (count, dims) == (len(media), load_run_config(DEMO).model.backbone.model_cfg.embed_dim)


def test_the_video_suffixes_evaluation_md_lists_are_the_ones_encode_media_reads():
    from xmr.apis import VIDEO_SUFFIXES

    text = (REPO / 'docs' / 'evaluation.md').read_text(encoding='utf-8')
    listed = re.search(r'`VIDEO_SUFFIXES`: `([^`]*)`', text)
    assert listed is not None and sorted(listed.group(1).split()) == sorted(VIDEO_SUFFIXES)


def test_the_scene_counts_data_synthetic_md_states_are_the_generator_s():
    """The scene space, the splits and the largest galleries docs/data_synthetic.md states are
    those the generator makes (``split_sizes``: each distinct scene hashed into its split)."""
    from xmr.datasets.synthetic import split_sizes

    text = ' '.join((REPO / 'docs' / 'data_synthetic.md').read_text(encoding='utf-8').split())
    sizes = split_sizes()

    def number(pattern: str) -> list[int]:
        return [int(value.replace(',', '')) for value in re.search(pattern, text).groups()]

    assert number(r'There are ([\d,]+) distinct scenes') == [sum(sizes.values())]
    assert number(r'\(([\d,]+) / ([\d,]+) / ([\d,]+) scenes\)') == [
        sizes['train'], sizes['val'], sizes['test']]
    assert number(r'\(([\d,]+) for val, ([\d,]+) for test\)') == [sizes['val'], sizes['test']]


# --- The Python versions the pages state -------------------------------------------------------

PYTHON_VERSIONS = re.compile(r'Python\s+(3\.\d+),\s+(3\.\d+),?\s+(?:or|and)\s+(3\.\d+)')


def test_the_python_versions_the_pages_state_are_the_package_s():
    """README.md and docs/getting_started.md name the Python versions xmr is tested on; the
    package's metadata (setup.py's classifiers, which pip and PyPI show) names the same, and its
    ``python_requires`` floor is the first of them."""
    setup = (REPO / 'setup.py').read_text(encoding='utf-8')
    classified = re.findall(r"'Programming Language :: Python :: (3\.\d+)'", setup)
    floor = re.search(r"python_requires='>=(3\.\d+)'", setup)[1]
    for page in (REPO / 'README.md', REPO / 'docs' / 'getting_started.md'):
        stated = list(PYTHON_VERSIONS.search(page.read_text(encoding='utf-8')).groups())
        assert stated == classified, (f'{page.relative_to(REPO)} states Python {stated}, '
                                      f"setup.py's classifiers {classified}")
        assert stated[0] == floor


# The versions docs/getting_started.md quotes, `(torch 2.14.1, open_clip 3.3.0, ...)`: each a
# package's pin in requirements/constraints.txt (`transformers 5.23` is 5.23.x) and each floor
# a requirement `>=` in setup.py.
QUOTED_VERSIONS = re.compile(r'([\w-]+) (\d+(?:\.\d+)+)')
DISTRIBUTIONS = {'open_clip': 'open_clip_torch'}


def quoted_versions(text: str, after: str) -> dict[str, str]:
    """``{distribution: version}`` of the parenthesis that follows ``after`` in ``text``."""
    start = text.index('(', text.index(after))
    listed = ' '.join(text[start + 1:text.index(')', start)].split())
    return {DISTRIBUTIONS.get(name, name): version
            for name, version in QUOTED_VERSIONS.findall(listed)}


def test_the_versions_getting_started_quotes_are_the_pins_and_floors():
    text = (REPO / 'docs' / 'getting_started.md').read_text(encoding='utf-8')
    pinned = dict(re.findall(r'^([\w-]+)==(\S+)$',
                             (REPO / 'requirements' / 'constraints.txt').read_text('utf-8'), re.M))
    floors = dict(re.findall(r"'([\w-]+)>=([\d.]+)'", (REPO / 'setup.py').read_text('utf-8')))
    pins = quoted_versions(text, 'pins the stack')
    assert len(pins) >= 6
    wrong = [f'{name} {version}: pinned {pinned.get(name)}' for name, version in pins.items()
             if not f'{pinned.get(name)}.'.startswith(f'{version}.')]
    wrong += [f'{name} {version}: setup.py has >={floors.get(name)}'
              for name, version in quoted_versions(text, 'down to the floors').items()
              if floors.get(name) != version]
    assert not wrong, f'docs/getting_started.md quotes other versions than the code: {wrong}'


def takes_flag(parser: argparse.ArgumentParser, flag: str) -> bool:
    """Whether ``parser`` or one of its sub-commands' parsers takes ``flag``."""
    return flag in parser._option_string_actions or any(
        takes_flag(command, flag) for action in parser._actions
        if isinstance(action, argparse._SubParsersAction) for command in action.choices.values())


def test_the_tools_configs_md_says_take_ablation_rows_are_those_that_do():
    """docs/configs.md lists the tools that take `--ablation` (of those that read a config,
    tools/*.py); it left out tools/search.py, which builds the model of a row as they do."""
    text = ' '.join((REPO / 'docs' / 'configs.md').read_text(encoding='utf-8').split())
    listed = re.search(r'((?:`tools/\w+\.py`(?:, | and | ))+)take `--ablation', text)[1]
    documented = set(re.findall(r'`(tools/\w+\.py)`', listed))
    taking = {str(path.relative_to(REPO)) for path in (REPO / 'tools').glob('*.py')
              if takes_flag(tool_parser(str(path.relative_to(REPO))), '--ablation')}
    assert documented == taking, (f'docs/configs.md says {sorted(documented - taking)} take '
                                  f'--ablation and leaves out {sorted(taking - documented)}')


def test_the_xmr_commands_custom_modules_lists_are_the_commands_xmr_runs():
    """docs/custom_modules.md lists the commands of ``xmr`` for a project without a checkout;
    each tool (a group, ``xmr data ...``, by its group) is among them and none is extra."""
    from xmr.console import available

    text = ' '.join((REPO / 'docs' / 'custom_modules.md').read_text(encoding='utf-8').split())
    listed = text[text.index("the `xmr` command runs the repository's tools:"):
                  text.index('(`xmr --help` lists them')]
    documented = set(re.findall(r'`xmr (\w+)', listed))
    commands = {command.split()[0] for command in available()}
    assert documented == commands, (
        f'docs/custom_modules.md lists xmr commands {sorted(documented - commands)} that xmr '
        f'lacks and leaves out {sorted(commands - documented)}')


def test_the_readme_s_demo_table_is_the_phase_report_s_of_its_own_numbers():
    """The table README.md says the demo ends with is the one ``PhaseReportHook`` writes for its
    numbers (the columns the phases' ends label, the rows in order), and each column's mAR is the
    mean of its target languages' AR, English left out (within the rounding of the shown
    values)."""
    from xmr.engine.hooks.phase_report import PhaseReportHook
    from xmr.run_config import load_run_config

    text = (REPO / 'README.md').read_text(encoding='utf-8')
    table = re.search(r'^\| language \|.*?(?=\n\n)', text, re.S | re.M)[0]
    header, _, *lines = ([cell.strip() for cell in line.strip('|').split('|')]
                         for line in table.splitlines())
    rows = {line[0]: [float(value) for value in line[1:]] for line in lines}
    demo = load_run_config(DEMO)
    phases = [phase.name for phase in demo.train_cfg.phases]
    assert header == ['language', *(f'{name} end' for name in phases)]
    assert list(rows) == demo.val_dataloader.dataset.languages + ['mAR']
    hook = PhaseReportHook()
    hook.columns = [(label, column, {'mAR' if lang == 'mAR' else f'{lang}/AR': values[column]
                                     for lang, values in rows.items()})
                    for column, label in enumerate(header[1:])]
    assert hook.table() == table
    targets = [values for lang, values in rows.items() if lang not in ('en', 'mAR')]
    for column, mean in enumerate(rows['mAR']):
        assert abs(sum(values[column] for values in targets) / len(targets) - mean) <= 0.01


def test_the_annotation_example_of_data_md_loads_and_its_table_names_every_key(tmp_path):
    """docs/data.md's example of the annotation format is a file ``load_annotation`` accepts,
    and its table of keys names every key of the header and of an item the loader reads."""
    from xmr.datasets import annotation

    text = (REPO / 'docs' / 'data.md').read_text(encoding='utf-8')
    section = text[text.index('## The annotation format'):text.index('## Language codes')]
    example = tmp_path / 'example.json'
    example.write_text(re.search(r'```json\n(.*?)```', section, re.S)[1], encoding='utf-8')
    loaded = annotation.load_annotation(example)
    assert loaded.translation_langs == ['de'] and len(loaded.items) == 1
    documented = {key.removeprefix('items[].') for row in re.findall(r'^\| (.+?) \|', section, re.M)
                  for key in re.findall(r'`([\w\[\].]+)`', row)}
    read = {*annotation._HEADER_KEYS, *annotation._ITEM_KEYS} - {'items'}
    assert read <= documented, f'docs/data.md leaves out the keys {sorted(read - documented)}'


def test_the_language_code_table_of_data_md_is_what_normalize_language_does():
    """Each row of docs/data.md's table of language codes: every code given maps to its
    canonical code (the row's one, or the one at its place in the list)."""
    from xmr.datasets.languages import normalize_language

    text = (REPO / 'docs' / 'data.md').read_text(encoding='utf-8')
    table = text[text.index('| given | canonical | rule |'):].splitlines()[2:]
    wrong, checked = [], 0
    for line in table[:next(i for i, line in enumerate(table) if not line.startswith('|'))]:
        given, canonical = (re.findall(r'`([^`]+)`', cell)
                            for cell in line.strip('|').split('|')[:2])
        canonical = canonical * len(given) if len(canonical) == 1 else canonical
        assert len(given) == len(canonical), line
        checked += len(given)
        wrong += [f'{code} -> {normalize_language(code)}, the table says {meant}'
                  for code, meant in zip(given, canonical) if normalize_language(code) != meant]
    assert checked >= 30 and not wrong, f'docs/data.md maps language codes otherwise: {wrong}'
