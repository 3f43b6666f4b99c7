"""The phase report survives an interruption: a resumed run writes the uninterrupted run's table."""
from __future__ import annotations

import copy
import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from mmengine.config import Config

from tests.conftest import REPO
from tests.engine.test_loops import LANGS, PHASES, loader, make_cfg, train
from xmr.engine.checkpoint import CheckpointReadError
from xmr.engine.hooks import PhaseReportHook

VAL_LANGS = ['en', *LANGS]
# The cross-lingual phase also validates at its start: a column of the resumed run's own.
REPORT_PHASES = [PHASES[0], dict(PHASES[1], validate_at_start=True), PHASES[2]]


def report_cfg(work_dir, **kwargs):
    cfg = make_cfg(work_dir, phases=copy.deepcopy(REPORT_PHASES), **kwargs)
    cfg.val_dataloader = dict(loader(dict(
        type='SyntheticRetrievalDataset', num_scenes=12, languages=VAL_LANGS, split='val',
        image_size=32, seed=0, captions_per_image=1), batch_size=12), drop_last=False)
    cfg.val_evaluator = dict(type='RetrievalMetric', languages=VAL_LANGS, source_language='en')
    cfg.val_cfg = dict(type='ValLoop')
    cfg.custom_hooks.append(dict(type='PhaseReportHook'))
    return cfg


def read_report(work_dir) -> list[dict]:
    return json.loads((work_dir / 'phase_report.json').read_text())


def report_rows(*validations: dict) -> list[list[str]]:
    """The cells of the report's rows, one validation per column."""
    hook = PhaseReportHook()
    hook.columns = [(f'phase {i} end', i, metrics) for i, metrics in enumerate(validations)]
    return [[cell.strip() for cell in line.strip('|').split('|')]
            for line in hook.table().splitlines()[2:]]


def test_the_rows_of_several_datasets_keep_their_names_and_the_overall_mean_is_last():
    """MultiDatasetValLoop's validation (DASD's MSCOCO configs: COCO ja and COCO-CN zh)."""
    metrics = {'coco/en/AR': 80.0, 'coco/ja/AR': 30.0, 'coco/mAR': 30.0,
               'cococn/en/AR': 70.0, 'cococn/zh/AR': 10.0, 'cococn/mAR': 10.0, 'mAR': 20.0}
    assert report_rows(metrics) == [
        ['coco/en', '80.00'], ['coco/ja', '30.00'], ['cococn/en', '70.00'],
        ['cococn/zh', '10.00'], ['coco/mAR', '30.00'], ['cococn/mAR', '10.00'], ['mAR', '20.00']]
    one_dataset = {'multi30k/en/AR': 80.0, 'multi30k/de/AR': 40.0, 'multi30k/mAR': 40.0}
    assert report_rows(one_dataset, {}) == [
        ['en', '80.00', '-'], ['de', '40.00', '-'], ['mAR', '40.00', '-']]


def test_a_resumed_run_reports_the_phases_validated_before_the_interruption(tmp_path):
    uninterrupted, interrupted = tmp_path / 'uninterrupted', tmp_path / 'interrupted'
    torch.manual_seed(0)
    train(report_cfg(uninterrupted))
    expected = read_report(uninterrupted)
    assert [(c['column'], c['iter']) for c in expected] == [
        ('source_finetune end', 4), ('cross_lingual start', 4), ('cross_lingual end', 12),
        ('cross_modal end', 16)]

    # Stopped at the first phase's end (as SIGTERM stops a run), with the checkpoint at
    # iteration 4 written: a stopped run validates nothing, and the resumed run validates that
    # phase end (the checkpoint cannot say it was), on the same weights.
    torch.manual_seed(0)
    train(report_cfg(interrupted, checkpoint_interval=4, stop_after=4))
    assert not (interrupted / 'phase_report.json').exists()
    train(report_cfg(interrupted, resume_from=interrupted / 'iter_4.pth'))
    resumed = read_report(interrupted)
    assert [(c['column'], c['iter']) for c in resumed] == [
        (c['column'], c['iter']) for c in expected]
    assert [c['metrics'] for c in resumed] == [c['metrics'] for c in expected]
    assert (interrupted / 'phase_report.md').read_text() == \
        (uninterrupted / 'phase_report.md').read_text()


def test_the_report_names_the_languages_whose_validation_captions_the_model_reads_cut(tmp_path):
    """Below the table, each language with validation captions longer than its tokenizer's
    context, counted as the tokenizer's own truncation counter counts an evaluation batch of
    them, and no other language; then those read as unknown tokens."""
    torch.manual_seed(0)
    runner, _ = train(report_cfg(tmp_path))
    dataset = runner.val_loop.dataloader.dataset
    preprocessor = runner.model.data_preprocessor
    shares = {}
    for lang in VAL_LANGS:
        tokenizer = (preprocessor.source_tokenizer if lang == 'en'
                     else preprocessor.target_tokenizer)
        captions = [text for index in range(len(dataset))
                    for text in dataset.captions_of(index)[lang]]
        tokenizer.truncated = 0
        tokenizer.evaluation_batch(captions, [lang] * len(captions))
        if tokenizer.truncated:
            shares[lang] = (f'{100 * tokenizer.truncated / len(captions):.1f}% '
                            f'({tokenizer.truncated} of {len(captions)})')
    assert shares and 'en' not in shares   # the 48-piece branch cuts, CLIP's BPE does not
    table, legend = (tmp_path / 'phase_report.md').read_text().split('\n\n')
    assert table.startswith('| language |')
    worst_first = sorted(shares, key=lambda lang: -float(shares[lang].split('%')[0]))
    cut, unknown = legend.splitlines()
    assert cut == (
        "- validation: captions longer than the model's text context (32 tokens), encoded cut "
        '(their recalls are of truncated text): '
        + ', '.join(f'{lang} {shares[lang]}' for lang in worst_first)
        + '; tools/caption_tokens.py counts them')
    # Chinese through a vocabulary learned from Latin script (counted as tools/test.py counts).
    assert unknown.startswith('- validation: tokens its vocabulary lacks, read as unknown (the '
                              'words they stand for are lost): zh ')


def test_validations_repeated_after_a_resume_replace_their_restored_columns(tmp_path):
    torch.manual_seed(0)
    train(report_cfg(tmp_path, checkpoint_interval=4))
    assert len(read_report(tmp_path)) == 4
    # Resuming from iteration 8 again: the later validations of the first run are not kept.
    train(report_cfg(tmp_path, resume_from=tmp_path / 'iter_8.pth'))
    assert [c['column'] for c in read_report(tmp_path)] == [
        'source_finetune end', 'cross_lingual start', 'cross_lingual end', 'cross_modal end']


def test_a_run_resumed_in_another_work_dir_reports_the_columns_of_its_checkpoint(tmp_path):
    torch.manual_seed(0)
    train(report_cfg(tmp_path / 'first', checkpoint_interval=4))
    train(report_cfg(tmp_path / 'fork', resume_from=tmp_path / 'first' / 'iter_8.pth'))
    assert [(c['column'], c['iter']) for c in read_report(tmp_path / 'fork')] == [
        (c['column'], c['iter']) for c in read_report(tmp_path / 'first')]


def test_weights_loaded_without_resuming_start_an_empty_report(tmp_path):
    """load_from alone (fine-tuning a checkpoint) starts a new run: the columns the
    checkpoint carries are the earlier run's, not this one's; resuming takes them back."""
    columns = [{'column': 'align end', 'iter': 4, 'metrics': {'de/AR': 50.0, 'mAR': 50.0}}]
    checkpoint = {'phase_report': columns, 'meta': {'iter': 4}}
    for resume, expected in ((False, []), (True, [('align end', 4, {'de/AR': 50.0,
                                                                    'mAR': 50.0})])):
        hook = PhaseReportHook()
        hook.after_load_checkpoint(SimpleNamespace(_resume=resume, work_dir=str(tmp_path)),
                                   copy.deepcopy(checkpoint))
        assert hook.columns == expected


def test_a_run_killed_while_validating_a_phase_end_reports_and_keeps_the_best_as_if_not(
        tmp_path):
    """The kill comes after the checkpoint at the phase's last iteration and before its
    validation wrote the report's column and the best checkpoint."""
    def cfg(work_dir, **kwargs):
        built = report_cfg(work_dir, checkpoint_interval=4, **kwargs)
        built.default_hooks.checkpoint.update(save_best='mAR', rule='greater')
        return built

    uninterrupted, killed = tmp_path / 'uninterrupted', tmp_path / 'killed'
    torch.manual_seed(0)
    train(cfg(uninterrupted))
    torch.manual_seed(0)
    train(cfg(killed, stop_after=4))
    # A stopped run does not validate: the checkpoint at iteration 4 is the state a kill
    # during that validation would leave, no column and no best checkpoint written.
    assert not (killed / 'phase_report.json').exists() and not list(killed.glob('best_*.pth'))
    train(cfg(killed, resume_from=killed / 'iter_4.pth'))
    expected = read_report(uninterrupted)
    assert [(c['column'], c['iter']) for c in read_report(killed)] == [
        (c['column'], c['iter']) for c in expected]
    assert [c['metrics'] for c in read_report(killed)] == [c['metrics'] for c in expected]
    assert sorted(p.name for p in killed.glob('best_*.pth')) == sorted(
        p.name for p in uninterrupted.glob('best_*.pth'))


def test_only_the_main_process_writes_the_report(tmp_path, monkeypatch):
    """Under DDP every rank gets the metrics; rank 0 alone writes the work dir's report."""
    runner = SimpleNamespace(_train_loop=None, iter=0, work_dir=str(tmp_path),
                             logger=SimpleNamespace(info=lambda message: None))
    metrics = {'en/AR': 80.0, 'de/AR': 40.0, 'mAR': 40.0}
    monkeypatch.setattr('xmr.engine.hooks.phase_report.is_main_process', lambda: False)
    hook = PhaseReportHook()
    hook.before_train(SimpleNamespace(**vars(runner), val_loop=object()))  # rank 1: not read
    hook.after_val_epoch(runner, metrics)
    hook.after_train(runner)
    assert list(tmp_path.iterdir()) == [] and hook.validation_sets == []
    monkeypatch.setattr('xmr.engine.hooks.phase_report.is_main_process', lambda: True)
    hook.after_val_epoch(runner, metrics)
    assert read_report(tmp_path) == [{'column': 'eval', 'iter': 0, 'metrics': metrics}]


def test_a_validation_is_labelled_by_its_place_in_its_phase_and_one_without_metrics_is_not(
        tmp_path, monkeypatch):
    monkeypatch.setattr('xmr.engine.hooks.phase_report.is_main_process', lambda: True)
    phase = SimpleNamespace(name='align', start=4, end=12)
    runner = SimpleNamespace(_train_loop=object(), train_loop=SimpleNamespace(current_phase=phase),
                             iter=0, work_dir=str(tmp_path))
    hook = PhaseReportHook()
    runner.iter = 4
    hook.after_val_epoch(runner, {})
    hook.after_val_epoch(runner, None)
    assert hook.columns == [] and list(tmp_path.iterdir()) == []
    for runner.iter in (4, 8, 12):
        hook.after_val_epoch(runner, {'mAR': float(runner.iter)})
    assert [(c['column'], c['iter']) for c in read_report(tmp_path)] == [
        ('align start', 4), ('align @8', 8), ('align end', 12)]


def test_a_metric_of_numpy_or_torch_numbers_is_reported_as_those_numbers_and_a_text_left_out(
        tmp_path, monkeypatch):
    """A user metric may report np.float32 or a one-element tensor, as MMEngine's logger
    accepts: the report writes the numbers, where json failed on them and stopped training."""
    monkeypatch.setattr('xmr.engine.hooks.phase_report.is_main_process', lambda: True)
    runner = SimpleNamespace(_train_loop=None, iter=0, work_dir=str(tmp_path))
    hook = PhaseReportHook()
    hook.after_val_epoch(runner, {'de/AR': np.float32(40.5), 'fr/AR': torch.tensor([30.25]),
                                  'mAR': torch.tensor(35.375, dtype=torch.float64),
                                  'note': 'a text', 'ranks': torch.arange(3)})
    assert read_report(tmp_path)[0]['metrics'] == {'de/AR': 40.5, 'fr/AR': 30.25, 'mAR': 35.375}
    assert [[cell.strip() for cell in line.strip('|').split('|')]
            for line in hook.table().splitlines()[-3:]] == [
        ['de', '40.50'], ['fr', '30.25'], ['mAR', '35.38']]


def test_a_resume_from_weights_alone_in_a_reported_work_dir_names_what_the_file_lacks(tmp_path):
    """Under MMEngine's own Runner (the Python API: tools/train.py checks --resume before it
    builds one), this hook read the file's meta first and the run failed with KeyError: 'meta'
    where CheckpointHook names what the file lacks and load_from."""
    torch.manual_seed(0)
    train(report_cfg(tmp_path, checkpoint_interval=4, stop_after=4))
    (tmp_path / 'phase_report.json').write_text(json.dumps(
        [{'column': 'source_finetune end', 'iter': 4, 'metrics': {'mAR': 1.0}}]))
    weights = tmp_path / 'weights.pth'
    torch.save(torch.load(tmp_path / 'iter_4.pth', weights_only=False)['state_dict'], weights)
    with pytest.raises(CheckpointReadError, match=r'weights.pth: not a checkpoint to resume '
                       r'from: it has no state_dict, message_hub, meta.epoch, meta.iter'):
        train(report_cfg(tmp_path, resume_from=weights))


def test_a_resume_keeps_the_columns_up_to_its_iteration_also_from_an_earlier_xmr_s_work_dir(
        tmp_path):
    """A checkpoint of an earlier xmr carries no columns: its work dir's JSON gives them."""
    records = [{'column': 'align end', 'iter': 4, 'metrics': {'mAR': 50.0}},
               {'column': 'tune end', 'iter': 8, 'metrics': {'mAR': 60.0}}]
    runner = SimpleNamespace(_resume=True, work_dir=str(tmp_path))
    hook = PhaseReportHook()
    hook.after_load_checkpoint(runner, {'phase_report': copy.deepcopy(records),
                                        'meta': {'iter': 4}})
    assert hook.columns == [('align end', 4, {'mAR': 50.0})]
    hook = PhaseReportHook()
    hook.after_load_checkpoint(runner, {'meta': {'iter': 8}})
    assert hook.columns == []
    (tmp_path / 'phase_report.json').write_text(json.dumps(records))
    hook.after_load_checkpoint(runner, {'meta': {'iter': 4}})
    assert hook.columns == [('align end', 4, {'mAR': 50.0})]


def test_a_metric_the_validation_does_not_report_per_language_is_warned_about_once(
        tmp_path, monkeypatch):
    """PhaseReportHook(metric='R@1') wrote a table of the mean alone, without a word."""
    said = []
    monkeypatch.setattr('xmr.engine.hooks.phase_report.print_log',
                        lambda message, **kwargs: said.append(message))
    runner = SimpleNamespace(_train_loop=None, iter=0, work_dir=str(tmp_path))
    metrics = {'en/AR': 80.0, 'en/t2i_R@1': 70.0, 'de/AR': 40.0, 'mAR': 40.0}
    PhaseReportHook().after_val_epoch(runner, metrics)
    PhaseReportHook(metric='t2i_R@1').after_val_epoch(runner, metrics)
    assert said == []
    hook = PhaseReportHook(metric='R@1')
    hook.after_val_epoch(runner, metrics)
    hook.after_val_epoch(runner, metrics)
    assert said == ["PhaseReportHook: the validation reports no '<language>/R@1' (did you mean "
                    "'t2i_R@1'?), so its table lists no language; set custom_hooks' "
                    "PhaseReportHook(metric=...) to one it reports: AR, t2i_R@1"]


def test_a_text_to_video_validation_is_reported_by_its_r1_and_their_sum():
    """text_to_video reports no AR: by default the table takes the statistic the leaderboard
    tabulates it by (t2i_R@1, summed as t2v_R@1_sum), where it listed no language before."""
    metrics = {'en/t2i_R@1': 40.0, 'en/t2i_R@5': 70.0, 'de/t2i_R@1': 30.0,
               'zh/t2i_R@1': 20.0, 't2v_R@1_sum': 50.0}
    assert report_rows(metrics, {}) == [
        ['en', '40.00', '-'], ['de', '30.00', '-'], ['zh', '20.00', '-'],
        ['t2v_R@1_sum', '50.00', '-']]
    hook = PhaseReportHook()
    hook.columns = [('align end', 4, metrics)]
    assert (hook.metric, hook.mean_key) == ('t2i_R@1', 't2v_R@1_sum')
    assert hook.report() == hook.table()  # no caption counted cut: nothing below the table


@pytest.mark.parametrize('metric', [None, 't2i_R@5'])
def test_a_mean_key_given_is_the_mean_row_whatever_the_metric(metric):
    metrics = {'en/t2i_R@1': 40.0, 'en/t2i_R@5': 70.0, 't2v_R@1_sum': 50.0, 'mean_R@5': 70.0}
    hook = PhaseReportHook(metric=metric, mean_key='mean_R@5')
    hook.columns = [('align end', 4, metrics)]
    assert (hook.metric, hook.mean_key) == (metric or 't2i_R@1', 'mean_R@5')
    assert [line.split('|')[1].strip() for line in hook.table().splitlines()[2:]] == [
        'en', 'mean_R@5']


def test_a_run_resumed_after_its_last_validation_writes_its_checkpoint_s_report_at_its_end(
        tmp_path, monkeypatch):
    """A fork resumed from the end of training validates nothing: its work dir gets the
    report of the columns its checkpoint carried when training ends."""
    monkeypatch.setattr('xmr.engine.hooks.phase_report.is_main_process', lambda: True)
    records = [{'column': 'align end', 'iter': 4, 'metrics': {'de/AR': 40.0, 'mAR': 40.0}}]
    hook = PhaseReportHook()
    hook.after_load_checkpoint(SimpleNamespace(_resume=True, work_dir=str(tmp_path)),
                               {'phase_report': records, 'meta': {'iter': 4}})
    hook.after_train(SimpleNamespace(work_dir=str(tmp_path),
                                     logger=SimpleNamespace(info=lambda message: None)))
    assert read_report(tmp_path) == records
    assert (tmp_path / 'phase_report.md').read_text() == hook.report() + '\n'


@pytest.mark.parametrize(('text', 'fault'), [
    ('{', 'Expecting property name enclosed in double quotes: line 1 column 2 (char 1)'),
    ('[' * 100_000 + ']' * 100_000, 'a value nesting arrays and objects 100000 levels deep'),
], ids=['cut off', 'nested too deep'])
def test_a_resume_from_an_earlier_xmr_s_work_dir_names_a_report_python_cannot_read(
        tmp_path, text, fault):
    """A bare JSONDecodeError or RecursionError stopped the resume, naming no file."""
    (tmp_path / 'phase_report.json').write_text(text, encoding='utf-8')
    runner = SimpleNamespace(_resume=True, work_dir=str(tmp_path))
    with pytest.raises(ValueError, match=re.escape(
            f"{tmp_path / 'phase_report.json'}: not a JSON file Python reads: {fault}")) as error:
        PhaseReportHook().after_load_checkpoint(runner, {'meta': {'iter': 4}})
    assert str(error.value).endswith('; it holds the columns of the phases before this resume: '
                                     'repair it, or move it aside to resume without them')
    assert (tmp_path / 'phase_report.json').read_text(encoding='utf-8') == text


def test_the_default_runtime_logs_each_validation_at_the_iteration_it_validated(tmp_path):
    """MMEngine logs a validation's metrics at the epoch by default: every validation of an
    iteration-based run was at step 0 in ``scalars.json`` and TensorBoard, one over another."""
    runtime = Config.fromfile(REPO / 'configs' / '_base_' / 'default_runtime.py')
    cfg = report_cfg(tmp_path)
    cfg.default_hooks.logger = runtime.default_hooks.logger
    train(cfg)
    scalars = [json.loads(line) for line in
               next(tmp_path.glob('*/vis_data/scalars.json')).read_text().splitlines()]
    validated = [record['step'] for record in scalars if 'mAR' in record]
    assert validated == [column['iter'] for column in read_report(tmp_path)] == [4, 4, 12, 16]
