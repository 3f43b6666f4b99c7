"""tools/benchmark.py on a tiny CLIP: rows, padding and packing, equal first losses, ratios and
verdicts."""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

from tests.conftest import REPO, SHARED_DATA, terminated_while_held

sys.path.insert(0, str(REPO / 'tools'))
import benchmark  # noqa: E402


@pytest.fixture(scope='module')
def bench_dir(tmp_path_factory):
    return tmp_path_factory.mktemp('bench')


@pytest.fixture(scope='module')
def tiny_run(bench_dir):
    out = bench_dir / 'rows.json'
    rows = benchmark.main(['--arch', 'tiny', '--batch-size', '4', '--steps', '1', '--warmup',
                           '0', '--frames', '2', '--in-process', '--cases',
                           'cross_lingual,video,eval', '--out', str(out),
                           '--profile', str(out.with_name('profile.md'))])
    return rows, json.loads(out.read_text())


def test_every_case_has_its_paths_and_the_recompute_path_pads_to_77(tiny_run):
    rows, _ = tiny_run
    assert [(r['case'], r['path']) for r in rows] == [
        ('cross_lingual', 'recompute'), ('cross_lingual', 'xmr'), ('cross_lingual', 'xmr+sparse'),
        ('cross_lingual', 'xmr-padded'), ('cross_lingual', 'xmr-packed'), ('video', 'recompute'),
        ('video', 'xmr'),
        ('eval', 'recompute'), ('eval', 'xmr')]
    for row in rows:
        padded = (row['target_tokens'], row['source_tokens'])
        if row['path'] == 'recompute':
            assert padded == (77, 77)
            assert row['target_tokens_run'] == 77
        else:
            assert max(padded) < 77
        if row['path'] in ('xmr', 'xmr+sparse', 'xmr-packed'):
            # Packed (on the CPU by default): the blocks run the real tokens only.
            assert row['target_tokens_run'] < row['target_tokens']
        elif row['path'] == 'xmr-padded':
            assert row['target_tokens_run'] == row['target_tokens']
        assert row['steps_per_s'] > 0 and row['samples_per_s'] == pytest.approx(
            4 * row['steps_per_s'])
        # One timed step: its data path (tokenising included) and the rest make it up.
        assert 0 < row['data_ms'] < row['step_ms']
        assert row['data_ms'] + row['model_ms'] == pytest.approx(row['step_ms'])


def test_cached_and_recomputed_paths_start_from_the_same_loss(tiny_run):
    rows, saved = tiny_run
    by_path = {(r['case'], r['path']): r for r in rows}
    for case in ('cross_lingual', 'video'):
        reference = by_path[(case, 'recompute')]['first_loss']
        paths = ('xmr', 'xmr+sparse', 'xmr-padded', 'xmr-packed')
        for path in paths if case == 'cross_lingual' else ('xmr',):
            assert by_path[(case, path)]['first_loss'] == pytest.approx(reference, rel=1e-5)
            assert by_path[(case, path)]['loss_rel_diff'] < 1e-5
    assert by_path[('eval', 'xmr')]['first_loss'] is None
    assert saved['arch'] == 'tiny' and len(saved['rows']) == len(rows)


def test_training_rows_time_their_steps_queued_without_waiting_for_the_device(tiny_run):
    rows, saved = tiny_run
    for row, kept in zip(rows, saved['rows']):
        if row['case'] == 'eval':
            assert 'unwaited_ms' not in row
        else:
            # Nothing waits on a CPU; the queued steps ran and were timed.
            assert row['unwaited_ms'] > 0 and row['waits'] == []
            assert kept['unwaited_ms'] == row['unwaited_ms']


def test_the_unwaited_step_is_the_mean_of_the_fastest_window(monkeypatch):
    import torch

    clock = [0.0]
    monkeypatch.setattr(benchmark.time, 'perf_counter', lambda: clock[0])

    def train(batch):
        clock[0] += batch['seconds']

    # Windows of 5 then 2 steps: means 5 s and 2 s.
    batches = [dict(seconds=s) for s in (5, 5, 5, 5, 5, 1, 3)]
    assert benchmark.UNWAITED_WINDOW == 5
    assert benchmark.unwaited_steps(train, batches, torch.device('cpu')) == dict(
        unwaited_ms=2000.0, waits=[])


def test_a_wait_is_named_by_torch_s_warning_of_one_not_by_the_mode_s_own_notice(recwarn):
    """The sync debug mode's first use warns that it "does not yet detect all synchronizing
    operations": on an H200 that notice counted as a wait of the loop's first iteration."""
    import torch

    def train(batch):
        warnings.warn('Synchronization debug mode is a prototype feature and does not yet '
                      'detect all synchronizing operations', UserWarning)
        warnings.warn(benchmark.WAIT_WARNING, UserWarning)  # the line named below

    line = train.__code__.co_firstlineno + 3
    assert benchmark.unwaited_steps(train, [{}], torch.device('cpu'))['waits'] == [
        f'test_benchmark.py:{line}']
    library = Path(torch.__file__).parent / 'lib' / 'libc10_cuda.so'
    if library.exists():  # the message as torch's CUDA library writes it
        assert benchmark.WAIT_WARNING.encode() in library.read_bytes()


def test_each_row_splits_its_step_into_the_parts_of_a_training_or_an_evaluation_step(tiny_run):
    rows, saved = tiny_run
    training = ['data', 'preprocess', 'forward', 'backward', 'clip', 'optimizer', 'zero_grad',
                'wait', 'other']
    for row, kept in zip(rows, saved['rows']):
        parts = row['parts_ms']
        if row['case'] == 'eval':
            assert list(parts) == ['data', 'preprocess', 'encode', 'other']
        else:
            assert list(parts) == training
        assert all(ms > 0 for name, ms in parts.items() if name != 'other')
        assert sum(parts.values()) == pytest.approx(row['step_ms'])
        # One timed step: its data part is the row's data path.
        assert parts['data'] == pytest.approx(row['data_ms'])
        assert kept['parts_ms'] == parts


def test_a_part_counts_its_own_time_not_that_of_the_parts_it_calls(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(benchmark.time, 'perf_counter', lambda: clock[0])

    class Wrapper:
        def step(self):
            clock[0] += 2
            self.clip()
            clock[0] += 3

        def clip(self):
            clock[0] += 4

    parts = benchmark.StepParts()
    wrapper = Wrapper()
    parts.wrap(wrapper, 'clip', 'clip')
    parts.wrap(wrapper, 'step', 'optimizer')
    with parts.part('data'):
        clock[0] += 1
    wrapper.step()
    wrapper.clip()
    # step: 9 s, 4 of them in clip; clip: 4 s there and 4 s called alone.
    assert parts.take() == dict(data=1.0, optimizer=5.0, clip=8.0)
    assert parts.take() == {}
    # In step order, the rest of a 20 s step as other.
    assert list(benchmark.StepParts.in_ms(dict(clip=8.0, data=1.0), 20.0).items()) == [
        ('data', 1000.0), ('clip', 8000.0), ('other', 11000.0)]


def test_the_profile_has_a_section_per_row_with_its_step_summary(tiny_run, bench_dir):
    rows, _ = tiny_run
    text = (bench_dir / 'profile.md').read_text()
    titles = [line[3:] for line in text.splitlines() if line.startswith('## ')]
    assert titles == [f"static {r['case']} {r['path']} fp32" for r in rows]
    for section in text.split('\n## ')[1:]:
        assert 'ms timed' in section and 'the data path (fetch, collate, tokenise)' in section
        assert 'Self CPU time total' in section  # torch.profiler's table of the row


def made_row(spec: dict) -> dict:
    return dict(method=spec['method'], case=spec['case'], path=spec['path'],
                precision=spec['precision'], batch_size=4, steps_per_s=1.0, samples_per_s=4.0,
                step_ms=1000.0, cpu_ms=1000.0, data_ms=1.0, model_ms=999.0,
                unwaited_ms=998.0, waits=['clip.py:7'], peak_memory_mib=1.0, first_loss=1.0,
                target_tokens=9, source_tokens=7, target_tokens_run=1.0,
                parts_ms=dict(data=1.0, forward=999.0))


def test_a_failed_row_is_reported_and_the_others_kept(monkeypatch, tmp_path, capsys):
    def run_one(spec):
        if spec['path'] == 'xmr':
            raise RuntimeError('planted failure')
        return made_row(spec)

    monkeypatch.setattr(benchmark, 'run_one', run_one)
    out = tmp_path / 'rows.json'
    with pytest.raises(SystemExit, match=r'1 benchmark rows failed .*static video xmr fp32'):
        benchmark.main(['--arch', 'tiny', '--in-process', '--cases', 'video', '--out', str(out)])
    assert 'planted failure' in capsys.readouterr().out
    assert [row['path'] for row in json.loads(out.read_text())['rows']] == ['recompute']


def test_a_run_cut_short_keeps_its_finished_rows_and_their_parts(monkeypatch, tmp_path, capsys):
    """A lease's time limit stops a run before its table: each finished row is already in the
    JSON, its ratio to the baseline there, and its details and parts already printed."""
    def run_one(spec):
        if spec['path'] == 'xmr':
            raise KeyboardInterrupt  # the limit's signal: no row after this one runs
        return made_row(spec)

    monkeypatch.setattr(benchmark, 'run_one', run_one)
    out = tmp_path / 'rows.json'
    with pytest.raises(KeyboardInterrupt):
        benchmark.main(['--arch', 'tiny', '--in-process', '--cases', 'video', '--out', str(out)])
    assert [(r['path'], r['speedup']) for r in json.loads(out.read_text())['rows']] == [
        ('recompute', 1.0)]
    assert ('    tokens tgt/en 9/7, model 999.00 ms, 998.00 ms unwaited (waits at clip.py:7); '
            'its fastest step by part, ms: data 1.00, forward 999.00\n') in capsys.readouterr().out


def test_out_replaces_only_an_earlier_benchmarks_rows_with_overwrite(monkeypatch, tmp_path,
                                                                     capsys):
    """--out wrote over whatever stood there (a checkpoint, a test result) once a row ended."""
    monkeypatch.setattr(benchmark, 'run_one', made_row)
    out = tmp_path / 'rows.json'
    run = ['--arch', 'tiny', '--in-process', '--cases', 'video', '--out', str(out)]
    benchmark.main(run)
    earlier = out.read_text()
    monkeypatch.setattr(benchmark, 'run_one', lambda spec: pytest.fail('a row ran'))
    with pytest.raises(SystemExit):
        benchmark.main(run)
    assert (f"{out} (--out): holds an earlier benchmark's rows; it is kept: pass --overwrite to "
            'replace it, or give --out another .json path') in capsys.readouterr().err
    assert out.read_text() == earlier
    checkpoint = tmp_path / 'iter_10.json'
    checkpoint.write_text('{"state_dict": {}}')
    with pytest.raises(SystemExit):
        benchmark.main([*run[:-1], str(checkpoint), '--overwrite'])
    assert "exists and is not an earlier benchmark's rows" in capsys.readouterr().err
    assert checkpoint.read_text() == '{"state_dict": {}}'
    monkeypatch.setattr(benchmark, 'run_one', made_row)
    benchmark.main([*run, '--overwrite'])
    assert [row['path'] for row in json.loads(out.read_text())['rows']] == ['recompute', 'xmr']


@pytest.mark.parametrize(('profile', 'refused'), [
    ('result.json', 'result.json (--profile): each row appends Markdown to it: give a path '
                    'ending in .md'),
    ('rows.md', 'rows.md (--profile): is also --out, which the rows replace'),
])
def test_a_profile_that_would_spoil_a_file_is_refused_before_the_first_row(
        monkeypatch, tmp_path, capsys, profile, refused):
    """Appended to a test result, the profile left it no JSON; given as --out too, lost."""
    monkeypatch.setattr(benchmark, 'run_one', lambda spec: pytest.fail('a row ran'))
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'result.json').write_text('{}')
    with pytest.raises(SystemExit):
        benchmark.main(['--arch', 'tiny', '--in-process', '--cases', 'video', '--out', 'rows.md',
                        '--profile', profile])
    assert refused in capsys.readouterr().err
    assert (tmp_path / 'result.json').read_text() == '{}'


def test_ratios_and_target_verdicts_from_hand_made_rows():
    def row(case, path, ms, loss=1.0):
        return dict(case=case, path=path, precision='fp32', step_ms=ms, cpu_ms=2 * ms,
                    model_ms=ms - 50, unwaited_ms=ms - 100, waits=[], first_loss=loss,
                    batch_size=32, parts_ms=dict(data=50.0, forward=ms - 75, other=25.0))

    rows = benchmark.with_ratios([row('cross_lingual', 'recompute', 900.0),
                                  row('cross_lingual', 'xmr', 300.0, loss=1.001),
                                  row('video', 'recompute', 1000.0), row('video', 'xmr', 250.0)])
    assert rows[1]['speedup'] == pytest.approx(3.0)
    assert rows[1]['cpu_speedup'] == pytest.approx(3.0)
    assert rows[1]['loss_rel_diff'] == pytest.approx(1e-3)
    lines = benchmark.summary(rows)
    assert lines[0].startswith('static cross_lingual fp32: xmr is 3.00x the recompute path')
    assert '250.0 ms with the data path in workers, 200.0 ms if the host never waited for the ' \
        'device)' in lines[0]
    assert '(target >= 3x: met against the recompute path), first-step loss' in lines[0]
    assert 'recompute_speedup' not in rows[1]
    assert lines[1] == '    its fastest step by part, ms: data 50.00, forward 225.00, other 25.00'
    assert 'target >= 5x: NOT met against the recompute path' in lines[2]


def test_dasd_rows_are_measured_against_the_authors_path_and_the_schedule_is_projected():
    def row(case, path, ms):
        waited = {} if case == 'eval' else dict(unwaited_ms=ms / 4, waits=['clip.py:7'])
        return dict(method='dasd', case=case, path=path, precision='amp', step_ms=ms,
                    cpu_ms=ms, model_ms=ms / 2, first_loss=None, batch_size=128,
                    parts_ms=dict(other=ms), **waited)

    rows = benchmark.with_ratios([row('cross_lingual', 'authors', 60.0),
                                  row('cross_lingual', 'recompute', 40.0),
                                  row('cross_lingual', 'xmr', 10.0),
                                  row('cross_modal', 'authors', 30.0),
                                  row('cross_modal', 'xmr', 12.0),
                                  row('eval', 'authors', 40.0), row('eval', 'xmr', 20.0)])
    assert [r['speedup'] for r in rows] == pytest.approx([1.0, 1.5, 6.0, 1.0, 2.5, 1.0, 2.0])
    # Against the recompute path too where the run has one (the targets name it).
    assert [r.get('recompute_speedup') for r in rows] == pytest.approx(
        [2 / 3, 1.0, 4.0, None, None, None, None])
    lines = benchmark.summary(rows)
    assert lines[0] == ('dasd cross_lingual amp: xmr is 6.00x the authors path (6.00x in CPU '
                        'time), 4.00x the recompute path, 10.0 ms/step (5.0 ms with the data '
                        'path in workers, 2.5 ms if the host never waited for the device (it '
                        'still waited at clip.py:7)) (target >= 5x: met against the authors '
                        'path, NOT met against the recompute path)')
    # 256 captions (English and German) in 20 ms, or in the 10 ms of the model alone.
    assert lines[4].startswith('dasd eval amp: xmr is 2.00x the authors path (2.00x in CPU time), '
                               '12800 captions/s (25600 with the data path in workers)')
    # 45,000 x 10 ms + 6,000 x 12 ms = 522 s = 0.145 h; the recompute path lacks cross_modal.
    assert "dasd xmr amp: the paper's 45k + 6k steps at batch 128 would take 0.14 h" in lines
    assert not any(line.startswith('dasd recompute') for line in lines)


def authors_setup(tmp_path, case: str, phase: str, weights: dict):
    """A tiny DASD model, its optimiser wrapper as the authors row builds it, the row's extra
    costs and a collated batch of ``case``."""
    import torch

    from xmr.datasets.collate import retrieval_collate
    from xmr.registry import MODELS, OPTIM_WRAPPER_CONSTRUCTORS, TOKENIZERS

    sp_model = str(tmp_path / 'sp.model')
    cfg = benchmark.model_cfg('tiny', 77, False, sp_model, method='dasd')
    TOKENIZERS.build(cfg['language_branch']['tokenizer'])
    torch.manual_seed(0)
    model = MODELS.build(cfg)
    benchmark.train_target_only(model)
    model.set_phase(phase, weights)
    wrapper = OPTIM_WRAPPER_CONSTRUCTORS.build(dict(
        type='PhasedOptimWrapperConstructor', optim_wrapper_cfg=dict(
            type='OptimWrapper', clip_grad=dict(max_norm=1.0),
            optimizer=dict(type='AdamW', lr=1e-2, foreach=False, fused=False))))(model)
    costs = benchmark.AuthorsDASDCosts(model, wrapper)
    items = benchmark.make_items(case, 4, 1, model.backbone.image_size[0])
    return model, wrapper, costs, retrieval_collate(items)


def test_the_authors_path_pays_frozen_gradients_and_a_second_discriminator_update(tmp_path):
    import torch

    model, _, costs, batch = authors_setup(tmp_path, 'cross_lingual', 'cross_lingual',
                                           dict(cl=1.0, disentangler=1.0))
    data = model.data_preprocessor(batch, True)
    frozen = model.backbone.text_tower.blocks[0].mlp.c_fc.weight
    discriminator = model.disentangler.discriminator
    model(mode='loss', **data)['loss_adv'].backward()
    assert frozen.grad is not None and frozen.grad.abs().sum() > 0
    before = [p.detach().clone() for p in discriminator.parameters()]
    costs.update_discriminator()
    assert costs.inputs[0].shape == (4, model.backbone.text_tower.width)
    assert not costs.inputs[0].requires_grad  # its own update: detached from the SDM
    assert all(not torch.equal(a, b) for a, b in zip(before, discriminator.parameters()))


@pytest.mark.parametrize('case, phase, weights', [
    ('cross_lingual', 'cross_lingual', dict(cl=1.0, disentangler=1.0)),
    ('cross_modal', 'cross_modal', dict(cm=1.0, disentangler=1.0))])
def test_the_authors_step_backpropagates_the_branch_alone_and_updates_no_frozen_weight(
        tmp_path, case, phase, weights):
    """Their code embeds the English captions and the media under ``torch.no_grad()`` and
    steps an optimiser of the trained parameters alone: the frozen weights' gradients are
    those of the target branch's graph, and no optimiser applies them. The row backpropagated
    through both teacher towers and AdamW updated every frozen weight."""
    import torch

    model, wrapper, _, batch = authors_setup(tmp_path, case, phase, weights)
    trained = ('language_branch.', 'disentangler.')
    got_grad: set[str] = set()
    for name, parameter in model.named_parameters():
        parameter.register_post_accumulate_grad_hook(
            lambda _, name=name: got_grad.add(name))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    model.train()
    model.train_step(batch, wrapper)
    frozen_grads = {name for name in got_grad if not name.startswith(trained)}
    # The branch runs the tower's text blocks: their weights get gradients, as in their code.
    assert any('.transformer.resblocks.' in name for name in frozen_grads)
    # The teachers' passes record no graph: no gradient of the image tower, nor of the
    # English token embedding (the branch embeds its captions with its own table).
    assert not any('.visual.' in name or 'token_embedding' in name for name in frozen_grads)
    changed = {name for name, p in model.named_parameters()
               if not torch.equal(p, before[name])}
    assert changed and all(name.startswith(trained) for name in changed)


def test_defaults_follow_the_device(monkeypatch):
    import torch

    cpu = benchmark.parse_args([])
    assert (cpu.batch_size, cpu.steps, cpu.warmup, cpu.amp) == (32, 2, 1, 'none')
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 1)
    cuda = benchmark.parse_args(['--device', 'cuda'])
    assert (cuda.batch_size, cuda.steps, cuda.warmup, cuda.amp) == (128, 20, 5, 'both')
    with pytest.raises(SystemExit):
        benchmark.parse_args(['--cases', 'cross_lingual,audio'])


def test_compiled_rows_are_dasd_rows_of_each_mode():
    args = benchmark.parse_args(['--methods', 'static,dasd', '--cases', 'cross_modal,eval',
                                 '--compile', 'default,reduce-overhead'])
    paths = {(s['method'], s['case'], s['path']) for s in benchmark.rows_to_run(args)}
    compiled = {row for row in paths if row[2] in ('xmr-compile', 'xmr-graphs')}
    assert compiled == {('dasd', case, path) for case in ('cross_modal', 'eval')
                        for path in ('xmr-compile', 'xmr-graphs')}
    assert len(paths) == 2 * 2 + 3 * 2 + 4  # static, dasd (authors path first), compiled
    with pytest.raises(SystemExit):
        benchmark.parse_args(['--compile', 'max-autotune'])
    # With the backward traced too: each compiled training row again, never an eval row.
    traced = benchmark.parse_args(['--methods', 'dasd', '--cases', 'cross_lingual,eval',
                                   '--compile', 'reduce-overhead', '--compiled-autograd'])
    assert [s['path'] for s in benchmark.rows_to_run(traced)] == [
        'authors', 'recompute', 'xmr', 'xmr-graphs', 'xmr-graphs+ca',
        'authors', 'recompute', 'xmr', 'xmr-graphs']
    # Both wrapper options: each alone, then both.
    both = benchmark.parse_args(['--methods', 'dasd', '--cases', 'cross_lingual', '--compile',
                                 'default,reduce-overhead', '--compiled-autograd',
                                 '--compiled-step'])
    assert [s['path'] for s in benchmark.rows_to_run(both)][3:] == [
        'xmr-compile', 'xmr-compile+ca', 'xmr-compile+step', 'xmr-compile+ca+step',
        'xmr-graphs', 'xmr-graphs+ca', 'xmr-graphs+step', 'xmr-graphs+ca+step']


@pytest.mark.parametrize('argv, message', [
    (['--steps', '0'], "--steps: '0' is no whole number >= 1"),
    (['--batch-size', '-4'], "--batch-size: '-4' is no whole number >= 1"),
    (['--warmup', '-1'], "--warmup: '-1' is no whole number >= 0"),
    (['--frames', '0'], "--frames: '0' is no whole number >= 1"),
    (['--cases', ','], "--cases names none of"),
    (['--methods', 'static', '--compile', 'default'], '--compile adds compiled DASD rows: add '
     'dasd to --methods'),
    (['--methods', 'dasd', '--compiled-autograd'], '--compiled-autograd adds each compiled row '
     'again: give --compile'),
    (['--device', 'cuda'], '--device cuda: this machine has 0 CUDA device(s): give cpu'),
    (['--device', 'gpu'], '--device gpu: is no torch device: give cpu, cuda or cuda:N'),
    (['--threads', '0'], "--threads: '0' is no whole number >= 1"),
    (['--tokenizer-file', 'no/tokenizer.json', '--arch', 'ViT-B-16-SigLIP2-256'],
     'no/tokenizer.json (--tokenizer-file): no such file'),
    # os.makedirs said 'README.md: File exists', naming no option
    (['--work-dir', 'README.md'], 'README.md (--work-dir): is a file, not a folder'),
])
def test_options_that_would_fail_every_row_or_add_none_are_refused(monkeypatch, capsys, argv,
                                                                   message):
    """Each was taken: rows then failed after their model was built (no step, no GPU), or
    nothing was added and nothing said."""
    import torch

    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    with pytest.raises(SystemExit):
        benchmark.parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize('arch', ['ViT-B-32', 'tiny'])
def test_a_tokenizer_file_for_an_architecture_with_clips_bpe_is_refused(tmp_path, capsys, arch):
    """Its rows ran with the BPE, the file unread and nothing said."""
    tokenizer_file = tmp_path / 'tokenizer.json'
    tokenizer_file.write_text('{}')
    with pytest.raises(SystemExit):
        benchmark.parse_args(['--arch', arch, '--tokenizer-file', str(tokenizer_file)])
    assert (f"{tokenizer_file} (--tokenizer-file): --arch {arch} tokenizes with CLIP's BPE and "
            'reads no tokenizer file') in capsys.readouterr().err


def test_an_empty_entry_of_a_comma_list_names_no_row():
    """``--cases eval,`` ran rows of case '' (cross-modal training shown without a case)."""
    args = benchmark.parse_args(['--cases', 'eval,', '--methods', 'dasd,'])
    assert (args.cases, args.methods) == ('eval', 'dasd')
    assert {(s['method'], s['case']) for s in benchmark.rows_to_run(args)} == {('dasd', 'eval')}


def test_a_failed_baseline_row_leaves_its_rows_without_ratios_not_the_summary_broken():
    rows = benchmark.with_ratios([dict(case='video', path='xmr', precision='fp32', step_ms=250.0,
                                       cpu_ms=500.0, model_ms=200.0, unwaited_ms=150.0, waits=[],
                                       first_loss=1.0, batch_size=32, parts_ms=dict(data=1.0),
                                       steps_per_s=4.0, samples_per_s=128.0, data_ms=1.0,
                                       peak_memory_mib=1.0, target_tokens=9, source_tokens=7,
                                       target_tokens_run=9.0)])
    assert benchmark.summary(rows) == ['static video fp32: xmr has no recompute row to compare '
                                       'with']
    cells = [cell.strip() for cell in benchmark.results_table(rows, 'cpu').splitlines()[-1]
             .split('|')]
    assert cells[-4:] == ['1.00000', '', '', '']  # no speed-up shown as 1.00x


def test_a_work_dir_reused_with_another_batch_size_rebuilds_its_feature_cache(tmp_path):
    """Every xmr row failed on the stale cache of the first run's sizes."""
    for batch_size in ('4', '6'):
        rows = benchmark.main(['--arch', 'tiny', '--batch-size', batch_size, '--steps', '1',
                               '--warmup', '0', '--in-process', '--cases', 'eval',
                               '--work-dir', str(tmp_path)])
        assert [(row['path'], row['batch_size']) for row in rows] == [
            ('recompute', int(batch_size)), ('xmr', int(batch_size))]


@pytest.mark.parametrize('path, split', [
    ('xmr-graphs+ca+step', ('xmr-graphs', ('compiled_autograd', 'compiled_step'))),
    ('xmr-compile+step', ('xmr-compile', ('compiled_step',))),
    ('xmr-graphs+ca', ('xmr-graphs', ('compiled_autograd',))),
    ('xmr+sparse', ('xmr+sparse', ())),
    ('authors', ('authors', ())),
])
def test_a_path_names_its_compiled_wrapper_options_by_suffix(path, split):
    assert benchmark.split_path(path) == split


def test_arch_covers_siglip2_and_the_xlmr_clip():
    from xmr.registry import TOKENIZERS

    tokenizer_file = str(SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json')
    if not Path(tokenizer_file).is_file():
        pytest.skip(f'XLM-R tokenizer not found at {tokenizer_file}')
    siglip = benchmark.model_cfg('ViT-B-16-SigLIP2-256', 77, False, 'sp.model', 'dasd',
                                 tokenizer_file)
    backbone = siglip['backbone']
    assert (backbone['arch'], backbone['pretrained_cfg']) == ('ViT-B-16-SigLIP2-256', 'webli')
    assert backbone['tokenizer'] == dict(type='HFTokenizer', tokenizer_file=tokenizer_file,
                                         clean='canonicalize', lowercase=False,
                                         strip_sep_token=False, pad_id=0)
    # The fixed 64-token context: the branch pads to it on every path, captions fit it.
    branch_tokenizer = siglip['language_branch']['tokenizer']
    assert branch_tokenizer['pad_to'] is None and branch_tokenizer['max_length'] == 64
    # XLM-R masks its own padding id (1, its <pad>), which the tokenizer finds in the file;
    # SigLIP's 0 was imposed on it, and the tower refused the tokenizer.
    xlmr_file = benchmark.backbone_cfg('xlm-roberta-base-ViT-B-32', 77, tokenizer_file)
    assert TOKENIZERS.build(xlmr_file['tokenizer']).pad_id == 1
    xlmr = benchmark.backbone_cfg('xlm-roberta-base-ViT-B-32', 77)
    assert xlmr['pretrained_cfg'] == 'laion5b_s13b_b90k'
    assert xlmr['tokenizer']['name_or_path'] == 'xlm-roberta-base'
    assert xlmr['tokenizer']['pad_to'] == 77  # the recompute path pads as the authors do
    clip = benchmark.backbone_cfg('ViT-B-32', 77)
    assert clip['pretrained_cfg'] == 'openai' and clip['tokenizer']['pad_to'] == 77


def test_the_dasd_rows_run_under_cpu_autocast_the_authors_update_included(tmp_path):
    # CPU autocast leaves f^sa in bf16; the authors' own discriminator update runs in fp32.
    rows = benchmark.main(['--arch', 'tiny', '--methods', 'dasd', '--cases', 'cross_lingual',
                           '--amp', 'amp', '--in-process', '--steps', '1', '--warmup', '0',
                           '--batch-size', '4', '--work-dir', str(tmp_path)])
    assert [r['path'] for r in rows] == ['authors', 'recompute', 'xmr']
    assert all(r['precision'] == 'amp' and r['first_loss'] > 0 for r in rows)


#: Notes the start of the first row's process (:func:`~tests.conftest.terminated_while_held`).
AT_THE_FIRST_ROW = '''
import subprocess
run = subprocess.run
def started(*args, **kwargs):
    ready.write_text('running the first row')
    return run(*args, **kwargs)
subprocess.run = started
'''


def test_sigterm_ends_a_run_as_ctrl_c_does_its_row_process_and_temporary_folder_gone(tmp_path):
    """SIGTERM (a lease's end, a scheduler's stop) killed the run silently (exit -15): its
    temporary work dir (the tokenizer, the feature caches) was left in the temp folder, and
    the row's process ran on, on the device, with nobody to read its row."""
    import os
    import time

    temp = tmp_path / 'temp'
    temp.mkdir()
    terminated_while_held(
        AT_THE_FIRST_ROW, REPO / 'tools' / 'benchmark.py',
        ['--arch', 'tiny', '--batch-size', '2', '--steps', '1', '--warmup', '0', '--frames', '2',
         '--cases', 'video'], tmp_path / 'ready', env={'TMPDIR': str(temp)},
        at_ready=lambda: time.sleep(0.5))  # the row's process started
    # tempfile's folders (torchinductor_<user>, torch's cache kept across runs, is none)
    assert [path.name for path in temp.glob('tmp*')] == []
    rows = [pid for pid in os.listdir('/proc') if pid.isdigit()
            and str(temp).encode() in _command_line(pid)]
    assert rows == []


def _command_line(pid: str) -> bytes:
    try:
        return Path('/proc', pid, 'cmdline').read_bytes()
    except OSError:  # ended meanwhile
        return b''
