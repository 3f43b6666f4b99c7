"""tools/language_modules.py: report, export and merge per-language modules end to end."""
from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import TINY_CLIP, tiny_dasd_cfg, tiny_retriever_cfg
from xmr.version import provenance

TOOL = Path(__file__).resolve().parents[2] / 'tools' / 'language_modules.py'
CONFIG = f"""
model = dict(
    type='CrossLingualRetriever',
    backbone=dict(type='OpenCLIPBackbone', arch=None, model_cfg={TINY_CLIP!r}),
    language_branch=dict(
        type='TargetLanguageBranch', languages=['de', 'fr'],
        tokenizer=dict(type='OpenCLIPTokenizer', model_name='ViT-B-32', max_length=24),
        embedding=dict(type='TowerTokenEmbedding'),
        adapters=dict(type='LoRA', r=1, alpha=16, targets=['q', 'v'])))
"""


def _run(args, monkeypatch) -> None:
    # Every model build draws the same frozen tiny CLIP, as a pretrained tower would be.
    torch.manual_seed(0)
    monkeypatch.setattr(sys, 'argv', [str(TOOL), *args])
    runpy.run_path(str(TOOL), run_name='__main__')


def test_report_export_and_merge(tmp_path, monkeypatch, capsys):
    from xmr.apis import init_retriever

    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    _run(['report', str(config)], monkeypatch)
    report = capsys.readouterr().out
    # 3 blocks x (q, v) x (A [1, 32] + B [32, 1]) = 384 parameters per language.
    assert '| de | 384 |' in report and '| fr | 384 |' in report
    # The report of another setting than the config's: more languages, a larger rank.
    _run(['report', str(config), '--cfg-options', "model.language_branch.languages=['de','cs']",
          'model.language_branch.adapters.r=2'], monkeypatch)
    report = capsys.readouterr().out
    assert '| de | 768 |' in report and '| cs | 768 |' in report and '| fr |' not in report

    torch.manual_seed(0)
    trained = init_retriever(config)
    with torch.no_grad():
        for parameter in trained.language_branch.adapters.parameters():
            parameter.normal_()
    torch.save(dict(state_dict=trained.state_dict()), tmp_path / 'trained.pth')
    _run(['export', str(config), str(tmp_path / 'trained.pth'), '--langs', 'de', 'fr',
          '--out-dir', str(tmp_path / 'modules')], monkeypatch)
    assert sorted(p.name for p in (tmp_path / 'modules').iterdir()) == ['de.pth', 'fr.pth']

    # Swap the languages on merging: the merged model's de is the trained fr.
    _run(['merge', str(config), '--modules', f'de={tmp_path / "modules" / "fr.pth"}',
          f'fr={tmp_path / "modules" / "de.pth"}', '--out', str(tmp_path / 'merged.pth')],
         monkeypatch)
    meta = torch.load(tmp_path / 'merged.pth', weights_only=True)['meta']
    assert {key: meta[key] for key in provenance()} == provenance()
    torch.manual_seed(0)
    merged = init_retriever(config, tmp_path / 'merged.pth')
    tokens = merged.language_branch.tokenize(['a red circle', 'two blue squares'])
    with torch.no_grad():
        torch.testing.assert_close(merged.encode_text(tokens, 'de'),
                                   trained.eval().encode_text(tokens, 'fr'))


def test_bad_module_argument_stops_with_a_message(tmp_path, monkeypatch, capsys):
    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    with pytest.raises(SystemExit, match='2'):
        _run(['merge', str(config), '--modules', 'de.pth', '--out', str(tmp_path / 'x.pth')],
             monkeypatch)
    assert capsys.readouterr().err == ('error: de.pth: not a --modules value: give LANG=PATH, '
                                      'e.g. de=de.pth\n')
    with pytest.raises(SystemExit, match='2'):
        _run(['merge', str(config), '--modules', f'de={tmp_path / "missing.pth"}', '--out',
              str(tmp_path / 'x.pth')], monkeypatch)
    assert f'{tmp_path / "missing.pth"} (--modules de=...): no such file' in (
        capsys.readouterr().err)


def _refuse_building(monkeypatch) -> None:
    """Any model build fails the test: what it checks must be refused before it."""
    import xmr.apis

    def built(*args, **kwargs):
        raise AssertionError('the model was built before the bad argument was refused')

    monkeypatch.setattr(xmr.apis, 'init_retriever', built)


def test_a_missing_module_file_is_refused_before_the_model_is_built(tmp_path, monkeypatch,
                                                                    capsys):
    """A paper's backbone loads for minutes; a mistyped module path (the second of two) was
    named only once it stood and the first module was loaded."""
    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    (tmp_path / 'de.pth').write_bytes(b'')
    _refuse_building(monkeypatch)
    with pytest.raises(SystemExit, match='2'):
        _run(['merge', str(config), '--modules', f'de={tmp_path / "de.pth"}',
              f'fr={tmp_path / "fr_typo.pth"}', '--out', str(tmp_path / 'x.pth')], monkeypatch)
    assert capsys.readouterr().err == (
        f'error: {tmp_path / "fr_typo.pth"} (--modules fr=...): no such file: give a module file '
        'tools/language_modules.py export wrote\n')
    assert not (tmp_path / 'x.pth').exists()


@pytest.mark.parametrize('command', ['export', 'merge'])
def test_a_truncated_checkpoint_is_refused_before_the_model_is_built_naming_its_flag(
        tmp_path, monkeypatch, capsys, command):
    """A checkpoint copy cut short was refused once the backbone had loaded, named as the
    API's '(checkpoint)', which the command line has not."""
    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    torch.save(dict(state_dict={'w': torch.zeros(64)}), tmp_path / 'whole.pth')
    (tmp_path / 'cut.pth').write_bytes((tmp_path / 'whole.pth').read_bytes()[:300])
    _refuse_building(monkeypatch)
    given = {'export': [str(tmp_path / 'missing.pth'), '--out-dir', str(tmp_path / 'm')],
             'merge': ['--base', str(tmp_path / 'missing.pth'), '--modules',
                       f'de={tmp_path / "whole.pth"}', '--out', str(tmp_path / 'x.pth')]}[command]
    flag = {'export': 'CHECKPOINT', 'merge': '--base'}[command]
    with pytest.raises(SystemExit, match='2'):
        _run([command, str(config), *given], monkeypatch)
    assert f'{tmp_path / "missing.pth"} ({flag}): no such file' in capsys.readouterr().err
    with pytest.raises(SystemExit, match='2'):
        _run([command, str(config), *[str(tmp_path / 'cut.pth') if arg.endswith('missing.pth')
                                      else arg for arg in given]], monkeypatch)
    assert re.search(rf'{re.escape(str(tmp_path / "cut.pth"))}: .*truncated',
                     capsys.readouterr().err)


@pytest.mark.parametrize('lang, message', [
    ('ko', "the model has no adapters for ['ko']; it reads ['en', 'de', 'fr']"),
    ('EN', "'en' is the model's source language, read by its frozen tower with no module of "
           "its own; give one of its target languages ['de', 'fr']")])
@pytest.mark.parametrize('command', ['export', 'merge'])
def test_a_language_without_a_module_in_the_config_is_refused_before_the_model_is_built(
        tmp_path, monkeypatch, capsys, command, lang, message):
    """'--langs ko' or '--modules ko=...' on a de/fr model, or its source language 'en' (read
    by the frozen tower, no module to export or merge into), was refused only once the model
    stood and the checkpoint had loaded (minutes for a paper's backbone), though the config
    names the model's languages."""
    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    torch.save(dict(state_dict={'w': torch.zeros(4)}), tmp_path / 'trained.pth')
    _refuse_building(monkeypatch)
    given = {'export': [str(tmp_path / 'trained.pth'), '--langs', 'de', lang, '--out-dir',
                        str(tmp_path / 'modules')],
             'merge': ['--modules', f'{lang}={tmp_path / "trained.pth"}', '--out',
                       str(tmp_path / 'x.pth')]}[command]
    flag = {'export': '--langs', 'merge': '--modules'}[command]
    with pytest.raises(SystemExit, match='2'):
        _run([command, str(config), *given], monkeypatch)
    assert capsys.readouterr().err == (
        f"error: {flag}: {message} (the config's source_language and "
        'model.language_branch.languages)\n')
    assert not (tmp_path / 'modules').exists() and not (tmp_path / 'x.pth').exists()


def test_an_export_into_a_file_is_refused_before_the_model_is_built(tmp_path, monkeypatch,
                                                                   capsys):
    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    (tmp_path / 'modules').write_text('notes')
    (tmp_path / 'trained.pth').write_bytes(b'')
    _refuse_building(monkeypatch)
    with pytest.raises(SystemExit, match='2'):
        _run(['export', str(config), str(tmp_path / 'trained.pth'), '--out-dir',
              str(tmp_path / 'modules')], monkeypatch)
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'modules'} (--out-dir): is a file, not a folder: name a folder "
        '(made if missing) for the module files\n')


def _perturbed(config, parts, seed):
    """The config's model with ``parts`` (attribute paths) redrawn: a stand-in for training."""
    from xmr.apis import init_retriever

    torch.manual_seed(0)
    model = init_retriever(config)
    torch.manual_seed(seed)
    with torch.no_grad():
        for part in parts:
            for parameter in model.get_submodule(part).parameters():
                parameter.add_(torch.randn_like(parameter) * 0.05)
    return model


def test_merge_reproduces_a_fine_tuned_tower_and_shared_table_or_refuses(tmp_path, monkeypatch,
                                                                          capsys):
    from xmr.apis import init_retriever

    config = tmp_path / 'tiny_static.py'
    config.write_text(f'model = {tiny_retriever_cfg()!r}\n')
    trained = _perturbed(config, ['backbone', 'language_branch.embedding',
                                  'language_branch.adapters'], seed=1)
    torch.save(dict(state_dict=trained.state_dict()), tmp_path / 'trained.pth')
    _run(['export', str(config), str(tmp_path / 'trained.pth'), '--out-dir',
          str(tmp_path / 'modules')], monkeypatch)
    modules = ['--modules', f'de={tmp_path / "modules" / "de.pth"}',
               f'zh={tmp_path / "modules" / "zh.pth"}']

    # From the config alone the tuned tower and the trained table are lost: refused.
    with pytest.raises(SystemExit, match='2'):
        _run(['merge', str(config), *modules, '--out', str(tmp_path / 'lost.pth')], monkeypatch)
    err = capsys.readouterr().err
    assert re.search(r"de\.pth \(de\): this model's shared weights \['backbone\.clip', "
                     r"'backbone\.text_tower', 'language_branch\.embedding'\] differ", err), err
    assert f'merge --base {tmp_path / "trained.pth"}' in err
    assert not (tmp_path / 'lost.pth').exists()

    _run(['merge', str(config), '--base', str(tmp_path / 'trained.pth'), *modules, '--out',
          str(tmp_path / 'merged.pth')], monkeypatch)
    merged = init_retriever(config, tmp_path / 'merged.pth')
    tokens = merged.language_branch.tokenize(['ein roter Kreis', '一个红色的圆'])
    with torch.no_grad():
        for lang in ('de', 'zh'):
            torch.testing.assert_close(merged.encode_text(tokens, lang),
                                       trained.eval().encode_text(tokens, lang), atol=0, rtol=0)

    # A module of another training run (another tower and table) cannot join this base.
    other = _perturbed(config, ['backbone', 'language_branch.embedding'], seed=2)
    torch.save(dict(state_dict=other.state_dict()), tmp_path / 'other.pth')
    _run(['export', str(config), str(tmp_path / 'other.pth'), '--langs', 'de', '--out-dir',
          str(tmp_path / 'other')], monkeypatch)
    with pytest.raises(SystemExit, match='2'):
        _run(['merge', str(config), '--base', str(tmp_path / 'trained.pth'), '--modules',
              f'de={tmp_path / "other" / "de.pth"}', '--out', str(tmp_path / 'mixed.pth')],
             monkeypatch)
    err = capsys.readouterr().err
    assert "'language_branch.embedding'] differ" in err
    assert f'merge --base {tmp_path / "other.pth"}' in err


@pytest.mark.parametrize('value', ['de', 'de=', '=de.pth'])
def test_a_modules_value_needs_a_language_and_a_path(value):
    from xmr.utils.cli import UserError

    pairs = runpy.run_path(str(TOOL))['_pairs']
    assert pairs(['de=de.pth', 'fr=x/fr.pth']) == {'de': Path('de.pth'), 'fr': Path('x/fr.pth')}
    with pytest.raises(UserError, match=f'^{value}: not a --modules value: give LANG=PATH'):
        pairs([value])


def test_languages_are_read_in_any_spelling_of_their_code(tmp_path, monkeypatch):
    """'--langs DE' stopped on "no adapters for language 'DE'" and a --modules key on the same,
    where the API and the configs read any spelling of a code (docs/data.md)."""
    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    torch.manual_seed(0)
    from xmr.apis import init_retriever

    torch.save(dict(state_dict=init_retriever(config).state_dict()), tmp_path / 'trained.pth')
    _run(['export', str(config), str(tmp_path / 'trained.pth'), '--langs', 'DE', 'fra',
          '--out-dir', str(tmp_path / 'modules')], monkeypatch)
    assert sorted(p.name for p in (tmp_path / 'modules').iterdir()) == ['de.pth', 'fr.pth']
    pairs = runpy.run_path(str(TOOL))['_pairs']
    assert pairs(['deu_Latn=de.pth', 'FR=fr.pth']) == {'de': Path('de.pth'), 'fr': Path('fr.pth')}


def test_a_language_given_twice_to_merge_is_refused():
    """'bo=a.pth bod_Tibt=b.pth' name one language: the second file silently replaced the
    first, which was never merged."""
    from xmr.utils.cli import UserError

    pairs = runpy.run_path(str(TOOL))['_pairs']
    with pytest.raises(UserError, match=r"^bod_Tibt=b.pth: --modules names the language 'bo' "
                                        r'twice \(bo=a.pth\): give one module file a '
                                        'language$'):
        pairs(['bo=a.pth', 'bod_Tibt=b.pth'])


def test_an_export_naming_a_language_without_a_module_writes_no_file(tmp_path, monkeypatch,
                                                                     capsys):
    from xmr.apis import init_retriever

    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    torch.save(dict(state_dict=init_retriever(config).state_dict()), tmp_path / 'trained.pth')
    with pytest.raises(SystemExit, match='2'):
        _run(['export', str(config), str(tmp_path / 'trained.pth'), '--langs', 'de', 'ko',
              '--out-dir',
              str(tmp_path / 'modules')], monkeypatch)
    assert "'ko'" in capsys.readouterr().err
    assert not (tmp_path / 'modules').exists() or not any((tmp_path / 'modules').iterdir())


def test_an_export_with_a_diverged_language_writes_no_file(tmp_path, monkeypatch, capsys):
    """fr diverged before the checkpoint: de is not written either, as if the export were
    done."""
    from xmr.apis import init_retriever

    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    state = init_retriever(config).state_dict()
    key = next(k for k in state if '.sets.fr.' in k)
    state[key].view(-1)[0] = float('nan')
    torch.save(dict(state_dict=state), tmp_path / 'trained.pth')
    with pytest.raises(SystemExit, match='2'):
        _run(['export', str(config), str(tmp_path / 'trained.pth'), '--out-dir',
              str(tmp_path / 'modules')], monkeypatch)
    assert 'the fr module holds NaN or infinite weights' in capsys.readouterr().err
    assert not (tmp_path / 'modules').exists() or not any((tmp_path / 'modules').iterdir())


@pytest.mark.parametrize('out_dir, problem', [
    ('modules', 'is a file, not a folder'),
    ('modules/run1', 'cannot be made there ({modules} is a file, not a folder)'),
])
def test_an_export_into_or_beneath_a_file_is_refused_naming_out_dir(tmp_path, monkeypatch,
                                                                    capsys, out_dir, problem):
    """An --out-dir that is a file failed with the OS's terse 'File exists', one beneath a
    file on 'Not a directory', naming no flag."""
    from xmr.apis import init_retriever

    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    torch.save(dict(state_dict=init_retriever(config).state_dict()), tmp_path / 'trained.pth')
    (tmp_path / 'modules').write_text('notes')
    with pytest.raises(SystemExit, match='2'):
        _run(['export', str(config), str(tmp_path / 'trained.pth'), '--out-dir',
              str(tmp_path / out_dir)], monkeypatch)
    assert capsys.readouterr().err == (
        f"error: {tmp_path / out_dir} (--out-dir): "
        f"{problem.format(modules=tmp_path / 'modules')}: name a folder (made if missing) for "
        'the module files\n')
    assert (tmp_path / 'modules').read_text() == 'notes'


def test_an_export_replaces_earlier_modules_alone_and_those_with_overwrite(tmp_path,
                                                                            monkeypatch, capsys):
    """Exporting ``modules/de.pth`` into ``modules`` replaced the training checkpoint with
    its German module; a second export replaced the first's modules without a word."""
    from xmr.apis import init_retriever

    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    modules = tmp_path / 'modules'
    modules.mkdir()
    checkpoint = modules / 'de.pth'
    torch.save(dict(state_dict=init_retriever(config).state_dict()), checkpoint)
    (modules / 'fr.pth').write_bytes(checkpoint.read_bytes())
    saved = checkpoint.read_bytes()

    def export(*flags):
        _run(['export', str(config), str(checkpoint), '--out-dir', str(modules), *flags],
             monkeypatch)

    with pytest.raises(SystemExit, match='2'):
        export('--langs', 'de', '--overwrite')
    assert (f'{checkpoint} (--out-dir): is an input of the export ({checkpoint}): export into '
            'another --out-dir') in capsys.readouterr().err
    with pytest.raises(SystemExit, match='2'):
        export('--langs', 'fr', '--overwrite')
    assert (f"{modules / 'fr.pth'} (--out-dir): exists and is no language module; it is left "
            'as it is') in capsys.readouterr().err
    assert checkpoint.read_bytes() == saved == (modules / 'fr.pth').read_bytes()

    (modules / 'fr.pth').unlink()
    export('--langs', 'fr')
    with pytest.raises(SystemExit, match='2'):
        export('--langs', 'fr')
    assert (f"{modules / 'fr.pth'} (--out-dir): holds the fr module of an earlier export; it is "
            'kept: pass --overwrite to replace it') in capsys.readouterr().err
    export('--langs', 'fr', '--overwrite')
    assert checkpoint.read_bytes() == saved


@pytest.mark.parametrize('out', ['trained.pth', 'modules/de.pth', 'tiny_lora.py'])
def test_a_merge_refuses_to_write_over_its_own_inputs(tmp_path, monkeypatch, capsys, out):
    """--out naming --base replaced a training checkpoint (optimizer, schedule: a resumable
    run) with the merged weights alone; naming the config, the user's config."""
    from xmr.apis import init_retriever

    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    torch.manual_seed(0)
    torch.save(dict(state_dict=init_retriever(config).state_dict(), optimizer={'step': 7}),
               tmp_path / 'trained.pth')
    _run(['export', str(config), str(tmp_path / 'trained.pth'), '--langs', 'de', '--out-dir',
          str(tmp_path / 'modules')], monkeypatch)
    capsys.readouterr()
    before = (tmp_path / out).read_bytes()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match='2'):
        _run(['merge', str(config), '--base', str(tmp_path / 'trained.pth'), '--modules',
              f'de={tmp_path / "modules" / "de.pth"}', '--out', out], monkeypatch)
    assert re.match(rf'error: {re.escape(out)}: --out is an input of the merge \(.*\): write '
                    'the merged checkpoint to another file', capsys.readouterr().err)
    assert (tmp_path / out).read_bytes() == before


def _trained_with_de_exported(tmp_path, monkeypatch) -> Path:
    """The tiny LoRA config, its built model saved as ``trained.pth`` and that model's de
    module exported to ``modules/de.pth``."""
    from xmr.apis import init_retriever

    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    torch.manual_seed(0)
    torch.save(dict(state_dict=init_retriever(config).state_dict()), tmp_path / 'trained.pth')
    _run(['export', str(config), str(tmp_path / 'trained.pth'), '--langs', 'de', '--out-dir',
          str(tmp_path / 'modules')], monkeypatch)
    return config


def test_a_merge_names_the_languages_given_no_module_and_where_theirs_come_from(
        tmp_path, monkeypatch, capsys):
    """Only 'de modules merged' was printed: the merged file's fr, the config's untrained
    module, was scored by tools/test.py as if it were a trained one."""
    config = _trained_with_de_exported(tmp_path, monkeypatch)
    capsys.readouterr()
    module = f'de={tmp_path / "modules" / "de.pth"}'
    _run(['merge', str(config), '--modules', module, '--out', str(tmp_path / 'a.pth')],
         monkeypatch)
    assert capsys.readouterr().out.splitlines() == [
        f'{tmp_path / "a.pth"}: de modules merged',
        'fr: no module given, kept as the config builds it (untrained)']
    _run(['merge', str(config), '--base', str(tmp_path / 'trained.pth'), '--modules', module,
          '--out', str(tmp_path / 'b.pth')], monkeypatch)
    assert capsys.readouterr().out.splitlines()[1:] == [
        f'fr: no module given, kept from {tmp_path / "trained.pth"}']


def _tiny_dasd_with_paper_figures(tmp_path) -> Path:
    """The tiny DASD model with a DASD config's paper figures (Table 1's #TP)."""
    config = tmp_path / 'tiny_dasd.py'
    config.write_text(f'model = {tiny_dasd_cfg()!r}\n'
                      "paper_figures = dict(source='DASD, Table 1', trainable_parameters=134e6)\n")
    return config


def _table_and_after(out: str) -> list[str]:
    """The report's lines from its table's header on (the model's build logs come before)."""
    lines = out.splitlines()
    return lines[lines.index(next(line for line in lines if line.startswith('| language'))):]


@pytest.mark.parametrize('ablation', ['dasd/du-16', 'dasd/static-adapter', 'dasd/no-adv'])
def test_a_report_of_an_ablation_that_resizes_the_model_states_no_paper_figure(
        tmp_path, monkeypatch, capsys, ablation):
    """'--ablation dasd/du-16' printed Table 1's 134M beside the count of a smaller model, which
    the paper reports no #TP of."""
    config = _tiny_dasd_with_paper_figures(tmp_path)
    _run(['report', str(config)], monkeypatch)
    full = _table_and_after(capsys.readouterr().out)
    assert full[0].endswith('| paper |') and '| 134M |' in full[-2]
    _run(['report', str(config), '--ablation', ablation], monkeypatch)
    ablated = _table_and_after(capsys.readouterr().out)
    assert 'paper' not in ablated[0] and '134M' not in ''.join(ablated)
    assert ablated[-1] == (
        f"no paper column: the config's paper figures (DASD, Table 1) are of its model without "
        f"--ablation {ablation}, which changes the parameters counted")


def test_a_report_of_an_ablation_with_options_of_its_own_model_states_no_paper_figure(
        tmp_path, monkeypatch, capsys):
    """The model without the rows, for the paper's figures, was built with the options of the
    ablated one, which it refused: the report was lost."""
    config = _tiny_dasd_with_paper_figures(tmp_path)
    _run(['report', str(config), '--ablation', 'dasd/static-adapter', '--cfg-options',
          'model.language_branch.adapters.zero_init=True'], monkeypatch)
    ablated = _table_and_after(capsys.readouterr().out)
    assert 'paper' not in ablated[0]
    assert ablated[-1].startswith(
        "no paper column: the config's paper figures (DASD, Table 1) are of its model without "
        "--ablation dasd/static-adapter, which --cfg-options do not fit (model.language_branch."
        "adapters.zero_init: adapter DynamicAdapter: unknown option 'zero_init'")


def test_a_config_error_is_told_as_it_is(tmp_path, monkeypatch, capsys):
    """Every KeyError got 'see the languages of the model' added, a phase's own too."""
    config = _tiny_dasd_with_paper_figures(tmp_path)
    config.write_text(config.read_text() + "train_cfg = dict(type='PhasedTrainLoop', phases=["
                      "dict(name='cross_lingual', itres=1)])\n")
    with pytest.raises(SystemExit, match='2'):
        _run(['report', str(config)], monkeypatch)
    err = capsys.readouterr().err
    assert 'phase 0 (cross_lingual) lacks' in err and 'see the languages' not in err


def test_a_report_of_an_ablation_that_keeps_the_models_size_or_states_its_own_figures(
        tmp_path, monkeypatch, capsys):
    config = _tiny_dasd_with_paper_figures(tmp_path)
    # L_sc by MSE: another loss on the same parameters, whose #TP is Table 1's.
    _run(['report', str(config), '--ablation', 'dasd/sc-mse'], monkeypatch)
    assert _table_and_after(capsys.readouterr().out)[-2].endswith('| 134M |')
    own = tmp_path / 'du-16-stated.py'
    own.write_text("model = dict(language_branch=dict(adapters=dict(hidden=16)),\n"
                   "             disentangler=dict(generator=dict(d_u=16)))\n"
                   "paper_figures = dict(source='a row of my own', trainable_parameters=5e6)\n")
    _run(['report', str(config), '--ablation', str(own)], monkeypatch)
    report = _table_and_after(capsys.readouterr().out)
    assert report[-2].endswith('| 5M |') and report[-1] == 'paper: a row of my own'


def test_a_report_of_an_ablation_that_leaves_the_model_alone_builds_it_once(
        tmp_path, monkeypatch, capsys):
    """A schedule's row (pectvlm/authors-script-*) changes no parameter: the paper column stays,
    and the model (a paper's is large) is not built a second time to find that out."""
    import xmr.apis

    config = _tiny_dasd_with_paper_figures(tmp_path)
    schedule = tmp_path / 'schedule.py'
    schedule.write_text('train_dataloader = dict(batch_size=5)\n')
    builds = []
    build = xmr.apis.init_retriever
    monkeypatch.setattr(xmr.apis, 'init_retriever',
                        lambda *args, **kwargs: builds.append(args) or build(*args, **kwargs))
    _run(['report', str(config), '--ablation', str(schedule)], monkeypatch)
    assert _table_and_after(capsys.readouterr().out)[-2].endswith('| 134M |')
    assert len(builds) == 1


@pytest.mark.parametrize('out, problem', [
    ('merged', 'is a folder, not a file'),
    ('de.pth/merged.pth', 'cannot be written there ({} is a file, not a folder)'),
])
def test_a_merge_into_a_folder_is_refused_before_the_model_is_built(tmp_path, monkeypatch,
                                                                    capsys, out, problem):
    """It failed once the model was built and the modules loaded ('Is a directory'; beneath
    a file, 'File exists', naming neither --out nor the file)."""
    config = tmp_path / 'tiny_lora.py'
    config.write_text(CONFIG)
    (tmp_path / 'de.pth').write_bytes(b'')
    (tmp_path / 'merged').mkdir()
    import xmr.apis

    monkeypatch.setattr(xmr.apis, 'init_retriever', None)  # never reached
    with pytest.raises(SystemExit, match='2'):
        _run(['merge', str(config), '--modules', f'de={tmp_path / "de.pth"}', '--out',
              str(tmp_path / out)], monkeypatch)
    assert capsys.readouterr().err == (
        f"error: {tmp_path / out} (--out): {problem.format(tmp_path / 'de.pth')}: name the "
        'merged checkpoint file (.pth)\n')


def test_a_merge_replaces_a_file_at_out_only_with_overwrite(tmp_path, monkeypatch, capsys):
    """Any checkpoint at --out (a copy of a training one: optimizer, schedule) became the
    merged weights alone, without a word."""
    config = _trained_with_de_exported(tmp_path, monkeypatch)
    (tmp_path / 'kept.pth').write_bytes(b'a training checkpoint')
    merge = ['merge', str(config), '--modules', f'de={tmp_path / "modules" / "de.pth"}',
             '--out', str(tmp_path / 'kept.pth')]
    capsys.readouterr()
    import xmr.apis

    with monkeypatch.context() as patch:
        patch.setattr(xmr.apis, 'init_retriever', None)  # refused before the model is built
        with pytest.raises(SystemExit, match='2'):
            _run(merge, monkeypatch)
    assert capsys.readouterr().err == (
        f"error: --out {tmp_path / 'kept.pth'}: exists and is kept (a training checkpoint there "
        'would lose what a resume needs): pass --overwrite to replace it, or write the merged '
        'checkpoint to another file\n')
    assert (tmp_path / 'kept.pth').read_bytes() == b'a training checkpoint'
    # --overwrite replaces an earlier merge alone.
    with pytest.raises(SystemExit, match='2'):
        _run([*merge, '--overwrite'], monkeypatch)
    assert 'exists and is no earlier merge' in capsys.readouterr().err
    assert (tmp_path / 'kept.pth').read_bytes() == b'a training checkpoint'
    merge[-1] = str(tmp_path / 'merged.pth')
    _run(merge, monkeypatch)
    first = (tmp_path / 'merged.pth').stat().st_mtime_ns
    _run([*merge, '--overwrite'], monkeypatch)
    assert (tmp_path / 'merged.pth').stat().st_mtime_ns != first
    assert sorted(torch.load(tmp_path / 'merged.pth', weights_only=True)) == ['meta',
                                                                              'state_dict']
