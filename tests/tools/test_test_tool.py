"""tools/test.py: real XTD10 + Multi30K captions end to end, leaderboard files, compare, errors."""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config
from PIL import Image

import xmr
from tests.conftest import (
    HELD_AT_THE_FIRST_MEDIA,
    REPO,
    terminated_while_held,
    tiny_branch_cfg,
    tiny_retriever_cfg,
)
from tests.test_run_config import cached_gallery_config
from xmr import evaluation
from xmr.apis import encode_media, encode_texts, init_retriever
from xmr.datasets import dump_annotation
from xmr.datasets.converters.multi30k import convert_multi30k
from xmr.datasets.converters.xtd10 import XTD10_LANGUAGES, convert_xtd10
from xmr.evaluation import EvaluationResult, load_result, save_result
from xmr.registry import MODELS
from xmr.utils.cli import EXIT_ERROR, UserError, run_tool
from xmr.version import source_commit

TOOL = Path(__file__).resolve().parents[2] / 'tools' / 'test.py'
TINY = dict(type='MediaTransform', backbone=None, size=32)
MULTI30K_LANGUAGES = ['en', 'de', 'fr', 'cs']
TARGETS = [lang for lang in XTD10_LANGUAGES if lang != 'en'] + ['cs']


def table_lines(out: str) -> list[str]:
    """The printed leaderboard: stdout from its first table heading on (log lines go before)."""
    lines = out.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith('test set: ')):]


def load_tool():
    spec = importlib.util.spec_from_file_location('xmr_test_tool', TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def eval_loader(dataset: dict, batch_size: int = 250) -> dict:
    return dict(batch_size=batch_size, num_workers=0, drop_last=False,
                sampler=dict(type='DefaultSampler', shuffle=False),
                collate_fn=dict(type='xmr.retrieval_collate'), dataset=dataset)


def placeholder_images(folder: Path, relative_paths: list[str], seed: int) -> None:
    """8x8 noise images, distinct per file, so every media embedding differs."""
    rng = np.random.default_rng(seed)
    for relative in relative_paths:
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(path, 'PNG')


def save_checkpoint(model_cfg: dict, path: Path, seed: int = 0) -> None:
    """A checkpoint whose branch weights moved away from a fresh build's."""
    torch.manual_seed(seed)
    model = MODELS.build(model_cfg)
    with torch.no_grad():
        for parameter in model.language_branch.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    torch.save({'meta': {'iter': 42}, 'state_dict': model.state_dict()}, path)


def write_config(path: Path, work_dir: Path, model: dict, datasets: list[dict],
                 evaluators: list[dict]) -> Path:
    Config(dict(default_scope='xmr', work_dir=str(work_dir), model=model, log_level='WARNING',
                test_dataloader=[eval_loader(d) for d in datasets], test_evaluator=evaluators,
                test_cfg=dict(type='MultiDatasetTestLoop'))).dump(path)
    return path


@pytest.fixture(scope='module')
def real_captions(tmp_path_factory):
    """XTD10 (11 languages) and Multi30K test (4 languages) with placeholder images."""
    data = Path(__file__).resolve().parents[2] / '..' / 'shared' / 'data'
    if not (data / 'xtd10' / 'test_image_names.txt').is_file() or not (
            data / 'multi30k' / 'raw' / 'test_2016_flickr.cs.gz').is_file():
        pytest.skip(f'XTD10 / Multi30K fixtures not found under {data}')
    root = tmp_path_factory.mktemp('real_captions')
    xtd10 = convert_xtd10(data / 'xtd10')
    multi30k = convert_multi30k(data / 'multi30k' / 'raw', data / 'multi30k' / 'image_splits',
                                splits=['test'])['test']
    placeholder_images(root / 'coco', [r.media_path for r in xtd10.items], seed=0)
    placeholder_images(root / 'flickr', [r.media_path for r in multi30k.items], seed=1)
    dump_annotation(xtd10, root / 'xtd10_test.json')
    dump_annotation(multi30k, root / 'multi30k_test.json')
    model = tiny_retriever_cfg(language_branch=tiny_branch_cfg(languages=TARGETS))
    save_checkpoint(model, root / 'tiny.pth')
    datasets = [
        dict(type='RetrievalDataset', ann_file=str(root / 'xtd10_test.json'),
             data_prefix=dict(media=str(root / 'coco')), transform=TINY),
        dict(type='RetrievalDataset', ann_file=str(root / 'multi30k_test.json'),
             data_prefix=dict(media=str(root / 'flickr')), transform=TINY)]
    config = write_config(root / 'tiny_xtd10_multi30k.py', root / 'work', model, datasets, [
        dict(type='RetrievalMetric', protocol='xtd10_t2i_r10', prefix='xtd10'),
        dict(type='RetrievalMetric', prefix='multi30k')])
    return root, config, xtd10, multi30k


@pytest.fixture(scope='module')
def real_run(real_captions):
    root, config, _, _ = real_captions
    import io
    from contextlib import redirect_stdout

    printed = io.StringIO()
    with redirect_stdout(printed):
        load_tool().main([str(config), str(root / 'tiny.pth')])
    return printed.getvalue()


def test_real_xtd10_and_multi30k_report_every_language(real_captions, real_run):
    root, _, _, _ = real_captions
    result = json.loads((root / 'tiny_test.json').read_text(encoding='utf-8'))
    metrics = result['metrics']
    assert result['name'] == 'tiny_xtd10_multi30k (tiny)' and result['iter'] == 42
    for lang in XTD10_LANGUAGES:
        assert 0 <= metrics[f'xtd10/{lang}/t2i_R@10'] <= 100
        assert 1 <= metrics[f'xtd10/{lang}/t2i_MnR'] <= 1000
    assert metrics['xtd10/mean_t2i_R@10'] == pytest.approx(
        sum(metrics[f'xtd10/{lang}/t2i_R@10'] for lang in TARGETS[:-1]) / 10)
    for lang in MULTI30K_LANGUAGES:
        assert {f'multi30k/{lang}/{key}' for key in ('t2i_R@1', 'i2t_R@10', 'AR')} <= set(metrics)
    assert metrics['multi30k/mAR'] == pytest.approx(
        sum(metrics[f'multi30k/{lang}/AR'] for lang in ('de', 'fr', 'cs')) / 3)
    assert metrics['mAR'] == pytest.approx(metrics['multi30k/mAR'])
    # The languages each summary is over, recorded beside the metrics and named by the legend.
    xtd10_targets = sorted(set(XTD10_LANGUAGES) - {'en'})
    assert result['summary_languages'] == {'xtd10': xtd10_targets,
                                           'multi30k': ['cs', 'de', 'fr']}
    assert '- multi30k/mAR is over cs, de, fr; en: reported, not averaged' in real_run
    assert result['rankings'] == {}   # both metrics rank exactly, image->text by any caption

    printed = table_lines(real_run)
    assert printed[0].startswith('test set: xtd10 test (')
    header = printed[2]
    columns = [cell.strip() for cell in header.strip('|').split('|')]
    # The metric lists the source language first, then the others alphabetically.
    xtd10_order = ['en', *sorted(set(XTD10_LANGUAGES) - {'en'})]
    assert columns == ['model', *(f'xtd10/{lang}' for lang in xtd10_order),
                       'xtd10/mean_t2i_R@10', 'multi30k/en', 'multi30k/cs', 'multi30k/de',
                       'multi30k/fr', 'multi30k/mAR', 'mAR']
    row = [cell.strip() for cell in printed[4].strip('|').split('|')]
    assert row[0] == 'tiny_xtd10_multi30k (tiny)'
    assert row[columns.index('multi30k/de')] == f"{metrics['multi30k/de/AR']:.2f}"
    assert row[columns.index('xtd10/ja')] == f"{metrics['xtd10/ja/t2i_R@10']:.2f}"
    with open(root / 'tiny_test.csv', newline='', encoding='utf-8') as handle:
        table = list(csv.reader(handle))
    assert table[0] == columns and float(table[1][-1]) == pytest.approx(metrics['mAR'])


def test_real_captions_the_model_reads_cut_or_unknown_are_counted_per_language(real_captions,
                                                                               real_run):
    """Each test set records, per language, how many captions the model's tokenizer cut and
    how many of their tokens it does not know: the counts equal the tokenizer's own truncation
    counter and an unknown-id count over an evaluation batch of the same captions, and the
    legend names exactly the languages with any cut."""
    root, config, xtd10, multi30k = real_captions
    recorded = json.loads((root / 'tiny_test.json').read_text(encoding='utf-8'))['test_sets']
    preprocessor = init_retriever(config, root / 'tiny.pth').data_preprocessor
    legend = next(line for line in real_run.splitlines() if 'encoded cut' in line)
    for test_set, annotation in zip(recorded, (xtd10, multi30k)):
        assert list(test_set['caption_token_counts']) == test_set['languages']
        for lang, count in test_set['caption_token_counts'].items():
            tokenizer = (preprocessor.source_tokenizer if lang == 'en'
                         else preprocessor.target_tokenizer)
            captions = [text for item in annotation.items for text in item.captions[lang]]
            tokenizer.truncated = 0
            batch = tokenizer.evaluation_batch(captions, [lang] * len(captions))
            assert {key: count[key] for key in ('captions', 'context', 'cut')} == {
                'captions': len(captions), 'context': tokenizer.max_length,
                'cut': tokenizer.truncated}
            if tokenizer.unk_id is None:
                assert count['unknown'] is None
            elif count['cut'] == 0:  # the batch holds every token: the unknowns are its own
                assert count['unknown'] == int(
                    (batch['input_ids'][batch['attention_mask']] == tokenizer.unk_id).sum())
            share = f"{lang} {100 * count['cut'] / len(captions):.1f}% ({count['cut']:,} of"
            assert (share in legend) == (count['cut'] > 0)
    # The tiny branch's 32-token context cuts most Latin-script captions, while XTD10's
    # Chinese comes out as a few pieces, half of them unknown: the test sees every kind.
    counts = recorded[0]['caption_token_counts']
    assert counts['de']['cut'] > 900 and counts['zh']['cut'] == 0
    assert counts['zh']['unknown'] > 0.25 * counts['zh']['pieces']
    assert f"zh {100 * counts['zh']['unknown'] / counts['zh']['pieces']:.1f}%" in real_run


def _ranks(queries: torch.Tensor, gallery: torch.Tensor) -> torch.Tensor:
    """Brute-force ranks of row i's own item i, ties counted against the query."""
    scores = queries @ gallery.T
    return (scores >= scores.diagonal()[:, None]).sum(dim=1)


def test_real_numbers_equal_a_brute_force_reference(real_captions, real_run):
    root, config, xtd10, multi30k = real_captions
    metrics = json.loads((root / 'tiny_test.json').read_text(encoding='utf-8'))['metrics']
    model = init_retriever(config, root / 'tiny.pth')
    checks = [('xtd10', xtd10, root / 'coco', 'ja', ('t2i',)),
              ('multi30k', multi30k, root / 'flickr', 'de', ('t2i', 'i2t'))]
    for prefix, ann, folder, lang, directions in checks:
        images = encode_media(model, [folder / r.media_path for r in ann.items], transform=TINY,
                              batch_size=250)
        texts = encode_texts(model, [r.captions[lang][0] for r in ann.items], lang)
        for direction in directions:
            ranks = _ranks(texts, images) if direction == 't2i' else _ranks(images, texts)
            # Float noise between the two encoding paths may swap a near tie: a rank off by one
            # for a caption or two moves MnR by ~0.001 and R@K by 0.1 per swap.
            assert metrics[f'{prefix}/{lang}/{direction}_MnR'] == pytest.approx(
                ranks.double().mean().item(), abs=0.01)
            assert metrics[f'{prefix}/{lang}/{direction}_R@10'] == pytest.approx(
                100 * (ranks <= 10).double().mean().item(), abs=0.21)


@pytest.fixture
def synthetic_setup(tmp_path):
    """A fast config on the synthetic set, and a checkpoint of its model."""
    model = tiny_retriever_cfg()
    save_checkpoint(model, tmp_path / 'model.pth')

    def config(languages=('en', 'de', 'zh'), model_cfg=model, name='synthetic.py') -> Path:
        dataset = dict(type='SyntheticRetrievalDataset', num_scenes=8, languages=list(languages),
                       split='test', image_size=32, seed=0, captions_per_image=2)
        return write_config(tmp_path / name, tmp_path / 'work', model_cfg, [dataset],
                            [dict(type='RetrievalMetric', prefix='synthetic')])

    return tmp_path, config


def test_compare_prints_earlier_results_side_by_side(synthetic_setup, capsys):
    root, config = synthetic_setup
    synthetic = dict(dataset='synthetic', split='test', languages=['en', 'de', 'zh'], media=8,
                     galleries=[])
    save_result(root / 'baseline.json', EvaluationResult(
        'baseline', {'synthetic/de/AR': 10.0, 'synthetic/zh/AR': 20.0, 'synthetic/mAR': 15.0,
                     'mAR': 15.0}, test_sets=[synthetic]))
    save_result(root / 'other.json', EvaluationResult(
        'other', {'xtd10/de/t2i_R@10': 30.0, 'xtd10/mean_t2i_R@10': 30.0},
        test_sets=[synthetic]))
    tool = load_tool()
    tool.main(['--compare', str(root / 'baseline.json'), str(root / 'other.json')])
    printed = table_lines(capsys.readouterr().out)
    assert printed[:2] == ['test set: synthetic test (de, en, zh), 8 media', '']
    printed = printed[2:]
    assert printed[0].split('|')[1:-1] == [
        ' model    ', ' synthetic/de ', ' synthetic/zh ', ' synthetic/mAR ', ' xtd10/de ',
        ' xtd10/mean_t2i_R@10 ', ' mAR   ']
    assert printed[2].split('|')[1:-1] == [
        ' baseline ', ' 10.00        ', ' 20.00        ', ' 15.00         ', ' -        ',
        ' -                   ', ' 15.00 ']

    # A new test run joins the comparison as the last row; --out moves the files, and the logs
    # to test/ beside them.
    tool.main([str(config()), str(root / 'model.pth'), '--compare',
               str(root / 'baseline.json'), '--out', str(root / 'results' / 'new.json'),
               '--name', 'new'])
    assert (root / 'results' / 'test' / 'synthetic.py').is_file()
    lines = table_lines(capsys.readouterr().out)
    assert [line.split('|')[1].strip() for line in lines[4:6]] == ['baseline', 'new']
    assert json.loads((root / 'results' / 'new.json').read_text())['name'] == 'new'
    assert (root / 'results' / 'new.csv').is_file() and not (root / 'model_test.json').exists()
    recorded = json.loads((root / 'results' / 'new.json').read_text())['test_sets']
    assert [{key: value for key, value in test_set.items() if key != 'caption_token_counts'}
            for test_set in recorded] == [synthetic]

    # Without --out, the result and the logs go beside the checkpoint, in the work dir it was
    # trained in (here by --work-dir, not the config's work_dirs/...): the training run's config
    # dump there stays as it was.
    (root / 'trained').mkdir()
    shutil.copy(root / 'model.pth', root / 'trained' / 'model.pth')
    (root / 'trained' / 'synthetic.py').write_text('# the training run\'s dump\n')
    tool.main([str(config()), str(root / 'trained' / 'model.pth')])
    assert (root / 'trained' / 'synthetic.py').read_text() == '# the training run\'s dump\n'
    assert (root / 'trained' / 'test' / 'synthetic.py').is_file()
    assert (root / 'trained' / 'model_test.json').is_file()
    assert not (root / 'work').exists()  # the config's own work dir is not the run's
    capsys.readouterr()

    # Results of another test set (or none recorded) are never in the same table.
    save_result(root / 'val.json', EvaluationResult('val', {'synthetic/de/AR': 1.0,
                                                            'synthetic/mAR': 1.0},
                                                    test_sets=[dict(synthetic, split='val')]))
    tool.main(['--compare', str(root / 'baseline.json'), str(root / 'val.json')])
    out = capsys.readouterr().out
    assert 'test set: synthetic test (de, en, zh), 8 media\n' in out
    assert 'test set: synthetic val (de, en, zh), 8 media\n' in out


def test_out_is_checked_before_testing_and_the_table_is_printed_even_if_saving_fails(
        synthetic_setup, capsys, monkeypatch):
    root, config = synthetic_setup
    tool = load_tool()
    (root / 'file').write_text('')
    tested = []
    monkeypatch.setattr(tool, 'run_test', lambda args, cfg: tested.append(args))
    with pytest.raises(SystemExit) as exit_info:
        run_tool(tool.main, [str(config()), str(root / 'model.pth'), '--out',
                             str(root / 'file' / 'r.json')])
    assert exit_info.value.code == EXIT_ERROR and tested == []
    assert re.match(r'error: .*file/r\.json \(--out\): cannot be written there \(.*\): give a '
                    'writable --out', capsys.readouterr().err)
    with pytest.raises(UserError, match=r'file/r\.json \(the default, beside CHECKPOINT\): '):
        tool.check_writable(root / 'file' / 'r.json', False, 'the default, beside CHECKPOINT')
    with pytest.raises(SystemExit):
        run_tool(tool.main, [str(config()), str(root / 'model.pth'), '--out', str(root)])
    assert tested == [] and capsys.readouterr().err == (
        f'error: {root}: is a folder, where the result file goes: give --out the path of a '
        '.json file (its .csv goes beside it)\n')
    (root / 'table.csv').mkdir()  # where the table of --out table.json goes
    with pytest.raises(SystemExit):
        run_tool(tool.main, [str(config()), str(root / 'model.pth'), '--out',
                             str(root / 'table.json')])
    assert tested == [] and capsys.readouterr().err.startswith(
        f'error: {root / "table.csv"}: is a folder, where the result file goes')

    monkeypatch.undo()

    def full_disk(*args):
        raise OSError(28, 'No space left on device', str(root / 'r.json'))

    monkeypatch.setattr(evaluation, 'save_result_files', full_disk)
    with pytest.raises(SystemExit):
        run_tool(tool.main, [str(config()), str(root / 'model.pth'), '--out',
                             str(root / 'r.json')])
    captured = capsys.readouterr()
    assert table_lines(captured.out)[0] == 'test set: synthetic test (de, en, zh), 8 media'
    assert '| synthetic (model) |' in captured.out
    assert captured.err == f'error: {root / "r.json"}: No space left on device\n'


def test_bad_input_stops_with_a_clear_message(synthetic_setup, capsys):
    root, config = synthetic_setup
    tool = load_tool()
    other_languages = tiny_retriever_cfg(language_branch=tiny_branch_cfg(languages=('de', 'ja')))
    cases = [
        ([str(config(model_cfg=other_languages, name='ja.py')), str(root / 'model.pth')],
         r"error: checkpoint .*model\.pth: checkpoint does not match the config: languages: "
         r"checkpoint \['de', 'zh'\] vs config \['de', 'ja'\]\. give the config the checkpoint "
         r"was trained with, or set the config's values to the checkpoint's \(--cfg-options\)"),
        ([str(config(languages=('en', 'de', 'fr'), name='fr.py')), str(root / 'model.pth')],
         r"error: test dataset synthetic: the model has no adapters for \['fr'\]; it reads "
         r"\['en', 'de', 'zh'\]"),
        ([str(config()), str(root / 'missing.pth')], r'error: .*missing.pth \(CHECKPOINT\): no '
         'such file: give a .pth written by tools/train.py'),
        (['--compare', str(root / 'nothing.json')], 'error: .*nothing.json: no such result '
         r'file: give a result JSON tools/test.py wrote \(<checkpoint>_test.json, or its '
         r'--out\)\n$'),
        # Read as JSON, the checkpoint was 'not UTF-8 ...: save it as UTF-8'.
        (['--compare', str(root / 'model.pth')], re.escape(
            f"error: {root / 'model.pth'} (--compare): is a checkpoint, not a test result: give "
            f"its result ({root / 'model_test.json'}, which tools/test.py CONFIG "
            f"{root / 'model.pth'} writes) or another result JSON\n")),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            run_tool(tool.main, argv)
        assert exit_info.value.code == EXIT_ERROR
        assert re.match(message, capsys.readouterr().err)
    with pytest.raises(SystemExit):
        tool.main([str(config())])  # a checkpoint is required
    capsys.readouterr()
    # A mistyped config is named as such, also where an earlier result of the checkpoint stands
    # (the place of the result is checked after the inputs).
    save_result(root / 'model_test.json', EvaluationResult('earlier', {'mAR': 1.0}))
    evaluation.write_csv(root / 'model_test.csv', [EvaluationResult('earlier', {'mAR': 1.0})])
    with pytest.raises(SystemExit):
        run_tool(tool.main, [str(root / 'no_such_config.py'), str(root / 'model.pth')])
    assert re.match(r'error: .*no_such_config\.py \(CONFIG\): no such file',
                    capsys.readouterr().err)


def test_only_an_earlier_result_is_replaced_and_only_with_overwrite(synthetic_setup, capsys,
                                                                    monkeypatch):
    root, config = synthetic_setup
    tool = load_tool()
    tested = []
    synthetic = dict(dataset='synthetic', split='test', languages=['de'])

    def fake_test(args, cfg):
        tested.append(args)
        return EvaluationResult(f'run {len(tested)}', {'synthetic/de/AR': float(len(tested)),
                                                       'synthetic/mAR': float(len(tested))},
                                checkpoint=args.checkpoint, test_sets=[synthetic]), []

    monkeypatch.setattr(tool, 'run_test', fake_test)
    checkpoint = (root / 'model.pth').read_bytes()
    report = root / 'phase_report.json'
    report.write_text('{"phases": []}\n')
    (root / 'notes.csv').write_text('my,own,table\n')
    save_result(root / 'notes.json', EvaluationResult('earlier', {'mAR': 1.0}))
    refused = [
        (['--out', str(root / 'model.pth')], 'model.pth: the result is written as JSON'),
        (['--out', str(report)], r'phase_report\.json: exists and is not an earlier test result '
         r"\(.*not an xmr test result.*\); it is left as it is: give --out another \.json path"),
        (['--out', str(root / 'notes.json'), '--overwrite'],
         r'notes\.csv: exists and is not the table of a test result'),
    ]
    for extra, message in refused:
        with pytest.raises(SystemExit):
            run_tool(tool.main, [str(config()), str(root / 'model.pth'), *extra])
        assert re.match(f'error: .*{message}', capsys.readouterr().err)
    assert tested == [] and (root / 'model.pth').read_bytes() == checkpoint
    assert report.read_text() == '{"phases": []}\n'
    assert (root / 'notes.csv').read_text() == 'my,own,table\n'

    # The default result beside the checkpoint: a second test keeps the first unless told.
    tool.main([str(config()), str(root / 'model.pth')])
    first = (root / 'model_test.json').read_text()
    with pytest.raises(SystemExit):
        run_tool(tool.main, [str(config()), str(root / 'model.pth')])
    assert re.match(r'error: .*model_test\.json: holds an earlier test result \(tested .*, '
                    r'.*model\.pth\); it is kept: pass --overwrite to replace it',
                    capsys.readouterr().err)
    assert len(tested) == 1 and (root / 'model_test.json').read_text() == first
    tool.main([str(config()), str(root / 'model.pth'), '--overwrite'])
    assert json.loads((root / 'model_test.json').read_text())['name'] == 'run 2'
    assert 'run 2' in (root / 'model_test.csv').read_text()

    # A result's table left without its JSON (a test killed between the two renames: every
    # rerun was refused, --overwrite too) is replaced with --overwrite alone.
    (root / 'model_test.json').unlink()
    with pytest.raises(SystemExit):
        run_tool(tool.main, [str(config()), str(root / 'model.pth')])
    assert re.match(r'error: .*model_test\.csv: holds the table of a test result without its '
                    r'model_test\.json \(a test stopped as it saved\); it is kept: pass '
                    '--overwrite to replace it', capsys.readouterr().err)
    assert len(tested) == 2
    tool.main([str(config()), str(root / 'model.pth'), '--overwrite'])
    assert len(tested) == 3 and (root / 'model_test.json').exists()
    # Any other file there is no result's table: kept, --overwrite or not.
    (root / 'model_test.json').unlink()
    (root / 'model_test.csv').write_text('my,own,table\n')
    with pytest.raises(SystemExit):
        run_tool(tool.main, [str(config()), str(root / 'model.pth'), '--overwrite'])
    assert re.match(r'error: .*model_test\.csv: exists, and no test result model_test\.json',
                    capsys.readouterr().err)
    assert len(tested) == 3 and (root / 'model_test.csv').read_text() == 'my,own,table\n'


def test_a_result_written_by_another_test_meanwhile_is_kept_and_this_one_saved_beside_it(
        synthetic_setup, capsys, monkeypatch):
    """Two tests of one checkpoint at once (two test sets, two GPUs) both found the default
    result free as they began; the later one replaced the other's without --overwrite."""
    root, config = synthetic_setup
    tool = load_tool()
    synthetic = dict(dataset='synthetic', split='test', languages=['de'])

    def other_test_finishes_meanwhile(args, cfg):
        save_result(root / 'model_test.json', EvaluationResult('other', {'mAR': 1.0}))
        return EvaluationResult('this', {'synthetic/de/AR': 2.0, 'synthetic/mAR': 2.0},
                                checkpoint=args.checkpoint, test_sets=[synthetic]), []

    monkeypatch.setattr(tool, 'run_test', other_test_finishes_meanwhile)
    tool.main([str(config()), str(root / 'model.pth')])
    err = capsys.readouterr().err
    assert load_result(root / 'model_test.json').name == 'other'
    moved = sorted(root.glob('model_test_*.json'))
    assert [load_result(path).name for path in moved] == ['this']
    assert moved[0].with_suffix('.csv').is_file()
    assert re.search(r'warning: .*model_test\.json: another test wrote its result there while '
                     r'this one ran; this result goes to .*model_test_\d{8}_\d{6}\.json', err)
    # With --overwrite, the result goes where it was told, whether a result stood there as
    # the test began or one was written meanwhile.
    for path in [root / 'model_test.json', root / 'model_test.csv', *moved]:
        path.unlink(missing_ok=True)
    tool.main([str(config()), str(root / 'model.pth'), '--overwrite'])
    assert load_result(root / 'model_test.json').name == 'this'
    assert not list(root.glob('model_test_*.json'))
    tool.main([str(config()), str(root / 'model.pth'), '--overwrite'])
    assert load_result(root / 'model_test.json').name == 'this'


def test_a_checkpoint_is_tested_with_its_vocabulary_where_its_corpus_is_gone(synthetic_setup):
    """The config learns its SentencePiece vocabulary from a corpus file this machine lacks:
    the test built no model before; now it reads the vocabulary the checkpoint carries and
    scores as the config with the corpus does."""
    root, config = synthetic_setup
    tool = load_tool()
    tool.main([str(config()), str(root / 'model.pth'), '--out', str(root / 'with.json')])
    moved = tiny_retriever_cfg()
    moved['language_branch']['tokenizer']['corpus'] = str(root / 'gone' / 'captions.txt')
    tool.main([str(config(model_cfg=moved, name='moved.py')), str(root / 'model.pth'),
               '--out', str(root / 'without.json')])
    assert load_result(root / 'without.json').metrics == \
        load_result(root / 'with.json').metrics


def test_a_result_the_leaderboard_cannot_show_is_saved_all_the_same(synthetic_setup, capsys,
                                                                    monkeypatch):
    """The table was made before anything was written: a result without a column it can show
    (R@5 alone) stopped the tool after the whole test, and its numbers were lost."""
    root, config = synthetic_setup
    tool = load_tool()
    metrics = {'synthetic/de/t2i_R@5': 40.0}
    monkeypatch.setattr(tool, 'run_test', lambda args, cfg: (EvaluationResult('r5', metrics),
                                                                []))
    with pytest.raises(SystemExit):
        run_tool(tool.main, [str(config()), str(root / 'model.pth')])
    assert re.match(r'error: .*hold no retrieval metric.*; the result is saved: .*model_test\.json',
                    capsys.readouterr().err)
    assert json.loads((root / 'model_test.json').read_text())['metrics'] == metrics


def test_a_new_result_over_seeds_that_cannot_be_averaged_is_saved_all_the_same(
        synthetic_setup, capsys):
    """--over-seeds refused the table by SystemExit, past the saving: the whole test of a
    checkpoint recording no seed was lost, and testing it again lost it again."""
    root, config = synthetic_setup
    save_result(root / 'seed0.json', EvaluationResult(
        'seed 0', {'synthetic/de/AR': 1.0, 'synthetic/mAR': 1.0}, config=str(config()),
        checkpoint='seed0/model.pth', extra={'seed': 0, 'ablations': []}))
    with pytest.raises(SystemExit):
        run_tool(load_tool().main, [str(config()), str(root / 'model.pth'), '--compare',
                                    str(root / 'seed0.json'), '--over-seeds'])
    assert re.search(r'error: .*records no seed.*; the result is saved: .*model_test\.json',
                     capsys.readouterr().err)
    assert 'synthetic/mAR' in load_result(root / 'model_test.json').metrics


def test_two_metrics_clip_benchmark_would_keep_in_one_file_stop_before_the_test(
        tmp_path, capsys, monkeypatch):
    """The check before the test saw no file, and the clash stopped the tool once the test had
    run, its result unsaved (configs/cdds's token score and pooled/ on one set)."""
    model = tiny_retriever_cfg()
    save_checkpoint(model, tmp_path / 'model.pth')
    dataset = dict(type='SyntheticRetrievalDataset', num_scenes=4, languages=['en', 'de'],
                   split='test', image_size=32, seed=0)
    config = write_config(tmp_path / 'two.py', tmp_path / 'work', model, [dataset], [[
        dict(type='RetrievalMetric', prefix='a'),
        dict(type='RetrievalMetric', prefix='b', directions=['t2i'])]])
    monkeypatch.setattr('mmengine.runner.Runner.test', lambda runner: pytest.fail('tested'))
    with pytest.raises(SystemExit, match="test metrics 'a' and 'b' both score the languages of "
                       'synthetic, which CLIP_benchmark keeps in one file'):
        load_tool().main([str(config), str(tmp_path / 'model.pth'), '--format',
                          'clip_benchmark'])
    assert not list(tmp_path.glob('model_test*'))


@pytest.mark.parametrize('typed', ['tools/test.py', 'tools/train.py', '{repo}/tools/test.py',
                                   '{repo}/tools/train.py', '{repo}/tools/../tools/test.py'])
def test_the_command_recorded_names_the_tool_as_it_was_run(monkeypatch, typed):
    """Run as python /abs/xmr/tools/train.py --test from another folder, the result recorded
    'tools/test.py ...', which does not run there."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, 'argv', [typed.format(repo=REPO), 'my config.py', 'iter_9.pth'])
    args = load_tool().parse_args(['my config.py', 'iter_9.pth'])
    tool = str(Path(typed.format(repo=REPO)).with_name('test.py'))
    assert args.command == shlex.join([tool, 'my config.py', 'iter_9.pth'])


@pytest.mark.parametrize('run_by, recorded', [(None, ['tools/test.py']),
                                               ('xmr test', ['xmr', 'test']),
                                               ('xmr train', ['xmr', 'test'])])
def test_the_command_recorded_is_the_one_the_user_runs_again(monkeypatch, run_by, recorded):
    """Run by the xmr command (an installed copy has no tools/ folder), a result recorded, and
    xmr train --test advised, 'tools/test.py ...'."""
    monkeypatch.setattr(xmr.utils.cli, 'command_name', run_by)
    args = load_tool().parse_args(['my config.py', 'iter_9.pth'])
    assert args.command == shlex.join([*recorded, 'my config.py', 'iter_9.pth'])


def test_a_config_named_in_bytes_that_are_not_utf8_is_tested_and_saved(synthetic_setup, capsys):
    """A config unpacked from a Latin-1 archive ('mod\\xe8le.py'): Python holds the byte as a
    lone surrogate ('\\udce8'), which the result's name, config path and command carried;
    after the whole test, no UTF-8 file could hold them and the result was lost. Expected: the
    result saved and readable, the byte shown as its escape."""
    root, config = synthetic_setup
    path = config(name=os.fsdecode(b'mod\xe8le.py'))
    run_tool(load_tool().main, [str(path), str(root / 'model.pth')])
    result = load_result(root / 'model_test.json')
    assert result.name == 'mod\\xe8le (model)'
    assert result.config == str(root / 'mod\\xe8le.py')
    assert 'mod\\xe8le (model)' in capsys.readouterr().out
    assert (root / 'model_test.csv').read_text(encoding='utf-8').count('mod\\xe8le') == 1


def test_an_earlier_results_clip_benchmark_files_go_with_it(synthetic_setup, capsys,
                                                            monkeypatch):
    """The export of a replaced result described it still: after --overwrite with fewer
    languages, its zh file stood beside the new result, and `clip_benchmark build` read it."""
    root, config = synthetic_setup
    tool = load_tool()
    runs = [['de', 'zh'], ['de']]

    def fake_test(args, cfg):
        languages = runs.pop(0)
        metrics = {f'synthetic/{lang}/{direction}_R@1': 50.0
                   for lang in languages for direction in ('t2i', 'i2t')}
        return EvaluationResult('run', metrics, checkpoint=args.checkpoint), [
            evaluation.ScoredDataset('synthetic', 'synthetic', 'standard')]

    monkeypatch.setattr(tool, 'run_test', fake_test)
    command = [str(config()), str(root / 'model.pth'), '--format', 'clip_benchmark']
    folder = root / 'model_test_clip_benchmark'
    my_notes = folder / 'notes.txt'
    tool.main(command)
    my_notes.write_text('mine\n')
    assert sorted(path.name for path in folder.glob('*.json')) == [
        'synthetic_model.pth_synthetic_de_zeroshot_retrieval.json',
        'synthetic_model.pth_synthetic_zh_zeroshot_retrieval.json']
    tool.main([*command, '--overwrite'])
    assert [path.name for path in folder.glob('*.json')] == [
        'synthetic_model.pth_synthetic_de_zeroshot_retrieval.json']
    assert my_notes.read_text() == 'mine\n'  # not an export file: left as it is
    capsys.readouterr()

    # Files of an export without its result are kept unless told, like a result.
    (root / 'model_test.json').unlink()
    (root / 'model_test.csv').unlink()
    with pytest.raises(SystemExit):
        run_tool(tool.main, [str(config()), str(root / 'model.pth')])
    assert re.match(r'error: .*model_test_clip_benchmark: holds the CLIP_benchmark files of an '
                    r'earlier test result; they are kept: pass --overwrite to replace them',
                    capsys.readouterr().err)


def test_a_test_set_without_the_back_translations_routine_3_queries_with_stops_before_encoding():
    from types import SimpleNamespace

    from tests.models.retrievers.test_translation import build

    dataset = SimpleNamespace(metainfo={'dataset': 'xtd10', 'ann_file': 'test.json',
                                        'languages': ['en', 'de'],
                                        'back_translated_languages': []})
    runner = SimpleNamespace(test_loop=SimpleNamespace(
        dataloader=SimpleNamespace(dataset=dataset), evaluator=SimpleNamespace(metrics=[])))
    with pytest.raises(ValueError, match=(r"^test dataset xtd10 \(test.json\): routine "
                                          r"'routine3' queries \['de'\]")):
        load_tool().check_test_languages(runner, build('routine3'))


def test_a_test_set_of_another_media_size_than_the_image_tower_stops_before_encoding():
    """It failed inside the tower at the first test batch, with two token counts."""
    from types import SimpleNamespace

    dataset = SimpleNamespace(transform=SimpleNamespace(size=(64, 64)), with_media=True,
                              metainfo={'dataset': 'multi30k', 'ann_file': 'test.json'})
    runner = SimpleNamespace(test_loop=SimpleNamespace(
        dataloader=SimpleNamespace(dataset=dataset), evaluator=SimpleNamespace(metrics=[])))
    model = SimpleNamespace(backbone=SimpleNamespace(image_size=(32, 32)))
    with pytest.raises(ValueError, match=(
            r'^test dataset multi30k \(test.json\): its transform gives 64x64 media, but the '
            r'image tower of SimpleNamespace takes 32x32')):
        load_tool().check_test_languages(runner, model)


def test_a_test_set_of_another_count_than_its_protocol_stops_before_encoding(tmp_path):
    """COCO 5K given the 1K file failed once the whole gallery was encoded (found in review)."""
    from types import SimpleNamespace

    from tests.engine.test_loops import three_image_loop

    runner = SimpleNamespace(test_loop=three_image_loop(tmp_path, 'test', 32, protocol='coco_5k'))
    with pytest.raises(ValueError, match=(
            r"^test dataset 0 \(.*test.json\) holds 3 media, but its metric's protocol "
            r"'coco_5k' is defined on 5000: ")):
        load_tool().check_test_languages(runner, MODELS.build(tiny_retriever_cfg()))


@pytest.mark.parametrize('extra, message', [
    (['--format', 'clip_benchmark'], '--format clip_benchmark needs CONFIG and CHECKPOINT'),
    (['--overwrite'], '--out, --overwrite, --work-dir, --name, --ablation and --cfg-options '
     'need CONFIG and CHECKPOINT'),
])
def test_options_of_a_new_test_are_refused_with_compare_alone(extra, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_tool().parse_args(['--compare', 'a.json', *extra])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_over_seeds_without_results_to_compare_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_tool().parse_args(['c.py', 'm.pth', '--over-seeds'])
    assert exit_info.value.code == 2
    assert '--over-seeds averages the results of --compare JSON ...' in capsys.readouterr().err


def test_compare_over_seeds_prints_one_row_per_run(tmp_path, capsys):
    for seed, value in enumerate((10.0, 20.0, 60.0)):
        save_result(tmp_path / f'seed{seed}.json', EvaluationResult(
            f'dasd (iter_9, seed {seed})', {'de/AR': value, 'mAR': value}, config='dasd.py',
            checkpoint=f'seed{seed}/iter_9.pth', extra={'seed': seed, 'ablations': []}))
    files = [str(tmp_path / f'seed{seed}.json') for seed in range(3)]
    load_tool().main(['--compare', *files, '--over-seeds'])
    rows = [line for line in table_lines(capsys.readouterr().out) if line.startswith('| dasd')]
    assert [row.split('|')[1:-1] for row in rows] == [
        [' dasd (iter_9, seeds 0, 1, 2) ', ' 30.00 ± 26.46 ', ' 30.00 ± 26.46 ']]
    with pytest.raises(SystemExit, match=r'^error: seed 0 of dasd \(iter_9, seed 0\) is in 2 '
                       r'results, of seed0/iter_9.pth, seed0/iter_9.pth: '):
        load_tool().main(['--compare', *files, files[0], '--over-seeds'])


def test_compare_prints_the_layout_asked_for_and_its_choices_are_the_leaderboard_s(tmp_path,
                                                                                   capsys):
    """``--layout long`` prints a row per language, a column per result; the tool's choices
    and the bound its help names are the leaderboard's own (written out there so that --help
    loads no torch)."""
    from xmr.evaluation.leaderboard import LAYOUTS, WIDE_COLUMNS_AT_MOST

    for name, value in (('a', 10.0), ('b', 20.0)):
        save_result(tmp_path / f'{name}.json',
                    EvaluationResult(name, {'de/AR': value, 'fr/AR': value, 'mAR': value}))
    files = [str(tmp_path / 'a.json'), str(tmp_path / 'b.json')]
    load_tool().main(['--compare', *files, '--layout', 'long'])
    assert [line.split('|')[1].strip() for line in table_lines(capsys.readouterr().out)[2:7]
            ] == ['language', '----------', 'de', 'fr', 'mAR']
    load_tool().main(['--compare', *files])
    assert table_lines(capsys.readouterr().out)[2].startswith('| model ')
    parser_help = subprocess.run([sys.executable, str(TOOL), '--help'], capture_output=True,
                                 text=True, check=True).stdout
    assert '{' + ','.join(LAYOUTS) + '}' in parser_help
    assert f'beyond {WIDE_COLUMNS_AT_MOST} columns' in ' '.join(parser_help.split())


def test_runs_of_other_seeds_and_ablations_are_told_apart_and_recorded(synthetic_setup, capsys):
    """Three seeds of a config and an ablation row: each row names its ablation and seed (the
    default labels would otherwise be equal), and each result records both and the xmr that
    tested it (version and commit), so a table over seeds and rows can be built from the JSON
    files alone."""
    root, config = synthetic_setup
    (root / 'no-x.py').write_text("log_level = 'WARNING'\n")
    trained = torch.load(root / 'model.pth', weights_only=True)
    runs = []
    for seed, ablation in ((1, []), (2, []), (1, [str(root / 'no-x.py')])):
        run = root / f"seed{seed}{'_no-x' if ablation else ''}"
        run.mkdir()
        torch.save({'meta': {'iter': 42, 'seed': seed}, 'state_dict': trained['state_dict']},
                   run / 'iter_42.pth')
        load_tool().main([str(config()), str(run / 'iter_42.pth'),
                          *(['--ablation', *ablation] if ablation else [])])
        runs.append(json.loads((run / 'iter_42_test.json').read_text()))
    assert [(r['name'], r['seed'], r['ablations']) for r in runs] == [
        ('synthetic (iter_42, seed 1)', 1, []), ('synthetic (iter_42, seed 2)', 2, []),
        ('synthetic_no-x (iter_42, seed 1)', 1, [str(root / 'no-x.py')])]
    assert all(r['xmr_version'] == xmr.__version__ and r['xmr_commit'] == source_commit()
               for r in runs)
    # A checkpoint without a recorded seed (a bare state dict, a converted model) keeps the
    # plain label and records none.
    load_tool().main([str(config()), str(root / 'model.pth')])
    plain = json.loads((root / 'model_test.json').read_text())
    assert plain['name'] == 'synthetic (model)' and plain['seed'] is None
    capsys.readouterr()
    # The command recorded is the one given to main (not the Python process's own arguments),
    # quoted to run again as it is.
    assert plain['command'] == shlex.join(['tools/test.py', str(config()),
                                           str(root / 'model.pth')])


def test_a_result_names_its_files_wherever_it_is_read_from(synthetic_setup, capsys,
                                                          monkeypatch):
    """Tested with paths relative to the folder the tool ran in, a result recorded those alone:
    read from anywhere else, it named no file. It keeps them for display, and records each file's
    absolute path, a link resolved to the file it names."""
    root, config = synthetic_setup
    (root / 'runs' / 'a').mkdir(parents=True)
    shutil.copy(root / 'model.pth', root / 'runs' / 'a' / 'iter_42.pth')
    (root / 'runs' / 'latest.pth').symlink_to('a/iter_42.pth')
    config()
    monkeypatch.chdir(root)
    tool = load_tool()
    tool.main(['synthetic.py', 'runs/latest.pth', '--out', 'results/a.json'])
    monkeypatch.chdir(root / 'runs')  # elsewhere
    result = load_result(root / 'results' / 'a.json')
    assert (result.config, result.checkpoint) == ('synthetic.py', 'runs/latest.pth')
    checkpoint = (root / 'runs' / 'a' / 'iter_42.pth').resolve()
    assert (result.config_resolved, result.checkpoint_resolved) == (
        str((root / 'synthetic.py').resolve()), str(checkpoint))
    # Tested again from elsewhere, the earlier result kept names the checkpoint it holds.
    with pytest.raises(UserError, match=re.escape(f'{checkpoint}); it is kept')):
        tool.main([str(root / 'synthetic.py'), 'a/iter_42.pth', '--out', '../results/a.json'])
    # --compare reads it from anywhere as before: its row is its name.
    tool.main(['--compare', '../results/a.json'])
    assert 'synthetic (latest)' in capsys.readouterr().out


def test_a_result_is_written_when_the_reader_of_the_table_has_quit(synthetic_setup):
    """`tools/test.py CONFIG CKPT | head -3`: the reader is gone long before the table is
    printed; the test's result is still written, and the run does not fail."""
    root, config = synthetic_setup
    reader, writer = os.pipe()
    os.close(reader)
    try:
        run = subprocess.run([sys.executable, str(TOOL), str(config()), str(root / 'model.pth')],
                             stdout=writer, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=str(TOOL.parents[1])))
    finally:
        os.close(writer)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads((root / 'model_test.json').read_text())['name'] == 'synthetic (model)'
    assert (root / 'model_test.csv').is_file()


def test_compare_into_a_closed_pipe_is_quiet(tmp_path):
    """`tools/test.py --compare a.json b.json | head -3`, the reader gone before the table."""
    for name in ('a', 'b'):
        save_result(tmp_path / f'{name}.json', EvaluationResult(name, {'de/AR': 1.0, 'mAR': 1.0}))
    reader, writer = os.pipe()
    os.close(reader)
    try:
        run = subprocess.run([sys.executable, str(TOOL), '--compare', str(tmp_path / 'a.json'),
                              str(tmp_path / 'b.json')], stdout=writer, stderr=subprocess.PIPE,
                             text=True, env=dict(os.environ, PYTHONPATH=str(TOOL.parents[1])))
    finally:
        os.close(writer)
    assert (run.returncode, run.stderr) == (0, '')


def test_the_help_of_ablation_says_what_the_test_names_after_it(capsys):
    """The help said 'the default work dir adds their names', as tools/train.py's does; the test
    writes beside the checkpoint, and its row label is what adds them."""
    with pytest.raises(SystemExit):
        load_tool().parse_args(['--help'])
    ablation = capsys.readouterr().out.split('--ablation NAME [NAME ...]')[-1].split('--cfg')[0]
    assert ' '.join(ablation.split()).endswith(
        'or a .py file; the default row label (--name) adds their names')


def test_a_work_dir_of_a_training_run_is_refused_before_its_config_dump_is_replaced(
        synthetic_setup, capsys):
    """--work-dir <the training work dir> (MMEngine's tools' habit) dumped the test's config
    over the training run's, which records how its checkpoints were trained."""
    root, config = synthetic_setup
    trained = root / 'trained'
    trained.mkdir()
    shutil.copy(root / 'model.pth', trained / 'iter_4.pth')
    (trained / 'synthetic.py').write_text("# the training run's dump\n")
    with pytest.raises(UserError, match=rf"^{re.escape(str(trained))}: is the work dir of a "
                       r'training run \(iter_4.pth\), whose config dump synthetic.py the test '
                       r'would replace with its own: leave out --work-dir'):
        load_tool().main([str(config()), str(trained / 'iter_4.pth'), '--work-dir',
                          str(trained)])
    assert (trained / 'synthetic.py').read_text() == "# the training run's dump\n"
    assert not (trained / 'iter_4_test.json').exists()
    # A run whose checkpoint hook saved to its out_dir left its pointer alone in the work dir.
    saved_elsewhere = root / 'bigdisk' / 'trained'
    saved_elsewhere.mkdir(parents=True)
    (trained / 'iter_4.pth').rename(saved_elsewhere / 'iter_4.pth')
    (trained / 'last_checkpoint').write_text(str(saved_elsewhere / 'iter_4.pth'))
    with pytest.raises(UserError, match=r'is the work dir of a training run \(last_checkpoint\)'):
        load_tool().main([str(config()), str(saved_elsewhere / 'iter_4.pth'), '--work-dir',
                          str(trained)])
    assert (trained / 'synthetic.py').read_text() == "# the training run's dump\n"
    shutil.copy(saved_elsewhere / 'iter_4.pth', trained / 'iter_4.pth')
    # A folder of the test's own, or a work dir without checkpoints, is taken.
    load_tool().main([str(config()), str(trained / 'iter_4.pth'), '--work-dir',
                      str(root / 'tests')])
    assert (root / 'tests' / 'synthetic.py').is_file()
    capsys.readouterr()


def test_the_runner_of_a_test_neither_loads_nor_resumes_what_the_config_names(tmp_path):
    """The checkpoint given is loaded strictly by the tool: MMEngine's Runner.test() would then
    load a config's load_from (or resume) over it, and score those weights unsaid."""
    demo = REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'
    args = load_tool().parse_args([str(demo), str(tmp_path / 'model.pth'), '--cfg-options',
                                   f"load_from={tmp_path / 'other.pth'}", 'resume=True'])
    cfg = load_tool().build_config(args)
    assert cfg.load_from is None and cfg.resume is False


def test_a_cached_test_gallery_without_its_hook_is_refused_before_the_runner(tmp_path):
    config = tmp_path / 'cached.py'
    config.write_text(cached_gallery_config(
        tmp_path, "test_dataloader = dict(dataset=dict(_delete_=True, **{gallery}))"))
    args = load_tool().parse_args([str(config), str(tmp_path / 'model.pth')])
    with pytest.raises(ValueError, match='^test_dataloader.dataset is a CachedFeatureDataset'):
        load_tool().build_config(args)


KILLED_TEST = '''
import importlib.util, os, signal, sys
from xmr.evaluation import EvaluationResult, leaderboard

path, run, moment = sys.argv.pop(1), int(sys.argv.pop(1)), sys.argv.pop(1)
spec = importlib.util.spec_from_file_location('xmr_test_tool', path)
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
tool.run_test = lambda args, cfg: (EvaluationResult(
    f'run {run}', {'synthetic/de/AR': float(run), 'synthetic/mAR': float(run)},
    checkpoint=args.checkpoint, test_sets=[dict(dataset='synthetic', split='test',
                                                languages=['de'])]), [])


def killed(*args):
    os.kill(os.getpid(), signal.SIGKILL)


if moment == 'making the table':
    leaderboard._csv_value = killed
elif moment == 'on disk, not renamed':  # the first file written in full, then its fsync
    os.fsync = killed
tool.main(sys.argv[1:])
'''


@pytest.mark.slow
@pytest.mark.parametrize('moment', ['making the table', 'on disk, not renamed'])
def test_a_test_killed_while_saving_keeps_the_earlier_result_whole(synthetic_setup, monkeypatch,
                                                                  moment):
    """SIGKILL while ``--overwrite`` saved: the new JSON stood beside the earlier result's CSV
    (a kill after the JSON, as the table was made), each looking valid, and a write killed
    before its rename left ``.model_test.*.<pid>.tmp`` there for good, through later runs.
    Expected: the earlier JSON and CSV as they were, and the next run's pair with no partial
    file beside it."""
    root, config = synthetic_setup
    command = [str(config()), str(root / 'model.pth'), '--overwrite']

    def test(run: int, moment: str = 'none') -> int:
        arguments = [str(TOOL), str(run), moment, *command]
        if moment == 'none':  # nothing is killed: the same script, in this process
            with monkeypatch.context() as patched:
                patched.setattr(sys, 'argv', ['-c', *arguments])
                exec(KILLED_TEST, {'__name__': '__main__'})
            return 0
        return subprocess.run([sys.executable, '-c', KILLED_TEST, *arguments],
                              env=dict(os.environ, PYTHONPATH=str(TOOL.parents[1])),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode

    def saved() -> tuple[str, list[str]]:
        return (load_result(root / 'model_test.json').name,
                [row[0] for row in csv.reader((root / 'model_test.csv').open())][1:])

    assert test(1) == 0 and saved() == ('run 1', ['run 1'])
    assert test(2, moment) == -signal.SIGKILL
    assert saved() == ('run 1', ['run 1'])
    assert test(3) == 0 and saved() == ('run 3', ['run 3'])
    assert sorted(path.name for path in root.glob('model_test*')) == [
        'model_test.csv', 'model_test.json']
    assert not list(root.glob('.*.tmp'))


@pytest.mark.parametrize('case', ['not a test config', 'damaged checkpoint', 'option typo',
                                  'checkpoint folder', 'work dir a file'])
def test_a_bad_config_or_checkpoint_is_refused_before_the_result_folder_or_runner(
        synthetic_setup, capsys, monkeypatch, case):
    """The folder of --out was made first, and a damaged checkpoint was met once the runner
    had been built (its hooks listed in the log)."""
    import mmengine.runner

    root, config = synthetic_setup
    argv = [str(config()), str(root / 'model.pth'), '--out', str(root / 'new' / 'r.json')]
    if case == 'not a test config':
        argv[0] = str(REPO / 'configs' / '_base_' / 'default_runtime.py')
        message = (f'error: {argv[0]}: has no test_dataloader, test_evaluator, test_cfg: a test '
                   'run needs the test split(s), their metrics and the test loop: give a config '
                   'that tests a model (configs/<method>/*.py), not a _base_ part\n')
    elif case == 'damaged checkpoint':
        (root / 'model.pth').write_bytes(b'not a checkpoint')
        message = (f'error: {root / "model.pth"}: not a checkpoint: neither a torch zip archive '
                   'nor a pickle; give a .pth written by torch.save (tools/train.py writes them)\n')
    elif case == 'work dir a file':
        argv += ['--work-dir', str(root / 'model.pth')]
        message = (f'error: {root / "model.pth"} (--work-dir): is a file, not a folder: give a '
                   'folder for the test logs (made if absent)\n')
    elif case == 'checkpoint folder':
        argv[1] = str(root)
        message = (f'error: {root} (CHECKPOINT): is a folder, not a file: give a .pth written by '
                   'tools/train.py')
    else:
        argv += ['--cfg-options', 'test_dataloader.0.batch_sise=4']
        message = ("error: test_dataloader.0: unknown option 'batch_sise' (did you mean "
                   "'batch_size'?)")

    def built(*args, **kwargs):
        raise AssertionError('the runner was built')

    monkeypatch.setattr(mmengine.runner.Runner, 'from_cfg', built)
    with pytest.raises(SystemExit) as exit_info:
        run_tool(load_tool().main, argv)
    assert exit_info.value.code == EXIT_ERROR
    assert capsys.readouterr().err.startswith(message)
    assert not (root / 'new').exists()


def test_sigterm_to_the_job_ends_a_test_as_ctrl_c_does(synthetic_setup):
    """SIGTERM (a scheduler's stop, sent to every process of the job: the test loader's
    workers too) killed the test silently (exit -15), nothing said."""
    root, config = synthetic_setup
    cfg = Config.fromfile(str(config()))
    cfg.test_dataloader[0].update(num_workers=2, batch_size=4)
    cfg.dump(str(root / 'workers.py'))
    result = root / 'result.json'
    said = terminated_while_held(
        HELD_AT_THE_FIRST_MEDIA, TOOL, [str(root / 'workers.py'), str(root / 'model.pth'),
                                        '--out', str(result)], root / 'ready', whole_job=True)
    assert 'error' not in said, said
    assert not result.exists() and not list(root.glob('.result.json.*'))


def test_a_test_split_the_config_trains_on_is_refused_before_encoding(tmp_path, capsys):
    """tools/test.py (and so train.py --test, which runs it) on a config that trains on its
    test annotation: refused naming the test split, both files and the opt-out; allowed with
    it."""
    from xmr.datasets.annotation import Annotation, MediaRecord

    names = [f'{i}.png' for i in range(4)]
    placeholder_images(tmp_path / 'images', names, seed=0)
    dump_annotation(Annotation(dataset='d', split='test', media_type='image',
                               languages=['en', 'de'], source_lang='en',
                               items=[MediaRecord(name, name, {'en': [f'a {name}'],
                                                               'de': [f'ein {name}']})
                                      for name in names]), tmp_path / 'd_test.json')
    model = tiny_retriever_cfg()
    save_checkpoint(model, tmp_path / 'model.pth')
    media = dict(ann_file=str(tmp_path / 'd_test.json'),
                 data_prefix=dict(media=str(tmp_path / 'images')), transform=TINY)
    config = write_config(tmp_path / 'trained.py', tmp_path / 'work', model,
                          [dict(type='RetrievalDataset', **media)],
                          [dict(type='RetrievalMetric', prefix='d')])
    cfg = Config.fromfile(config)
    cfg.train_dataloader = dict(dataset=dict(type='CaptionPairDataset', target_field='captions',
                                             **media))
    cfg.train_cfg = dict(type='PhasedTrainLoop', phases=[dict(
        name='cl', iters=1, lr=1e-3, trainable=['language_branch'], loss_weights=dict(cl=1.0))])
    cfg.optim_wrapper = dict(optimizer=dict(type='AdamW', lr=1e-3))
    cfg.dump(config)
    with pytest.raises(SystemExit):
        run_tool(load_tool().main, [str(config), str(tmp_path / 'model.pth')])
    error = capsys.readouterr().err
    assert error.startswith(
        f'error: test dataset 0 (RetrievalDataset) ({tmp_path / "d_test.json"}) shares 4 of its '
        f'4 media files with training dataset train_dataloader.dataset '
        f'({tmp_path / "d_test.json"}), e.g. 0.png, 1.png, 2.png, 3.png: ')
    assert 'train_cfg.allow_eval_overlap=True' in error
    assert not (tmp_path / 'model_test.json').exists()
    run_tool(load_tool().main, [str(config), str(tmp_path / 'model.pth'),
                                '--cfg-options', 'train_cfg.allow_eval_overlap=True'])
    assert (tmp_path / 'model_test.json').exists()
