"""Multi-dataset validation/test loops: prefixes, one gallery pass, combined mAR, save-best."""
from __future__ import annotations

import contextlib
import copy
import itertools
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp
from mmengine.config import Config
from mmengine.evaluator import BaseMetric, Evaluator
from mmengine.hooks import Hook
from mmengine.runner import Runner
from torch.utils.data import DataLoader

from tests.conftest import tiny_retriever_cfg
from tests.engine.test_distributed import free_port
from xmr.datasets import Annotation, MediaRecord, dump_annotation
from xmr.engine import eval_loops
from xmr.engine.distributed import setup_cpu_distributed
from xmr.engine.eval_loops import (
    MultiDatasetTestLoop,
    MultiDatasetValLoop,
    check_media_exist,
    combined_mean_ar,
    expected_metric_keys,
    workers_ending,
)
from xmr.engine.worker_signals import IgnoringWorkerInit, end_workers
from xmr.engine.worker_tokens import TokenizingCollate
from xmr.evaluation import RetrievalMetric
from xmr.evaluation.metrics import retrieval
from xmr.registry import MODELS

TINY = dict(type='MediaTransform', backbone=None, size=32)
CLIPS = ['flipping_a_pancake.mkv', 'video_0.mov', 'unordered.mov']
# A fresh experiment name per runner: MMEngine keys its logger and scope instances by it.
RUN_IDS = itertools.count()


class EvalRecorder(Hook):
    """Records the hooks of each mode and the metrics every evaluation reports."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.val_metrics: list[dict] = []
        self.test_metrics: list[dict] = []

    def before_val_epoch(self, runner) -> None:
        self.calls.append('before_val_epoch')

    def after_val_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        self.calls.append(f'val_iter {batch_idx}')

    def after_val_epoch(self, runner, metrics=None) -> None:
        self.calls.append('after_val_epoch')
        self.val_metrics.append(dict(metrics))

    def before_test_epoch(self, runner) -> None:
        self.calls.append('before_test_epoch')

    def after_test_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        self.calls.append(f'test_iter {batch_idx}')

    def after_test_epoch(self, runner, metrics=None) -> None:
        self.calls.append('after_test_epoch')
        self.test_metrics.append(dict(metrics))


def eval_loader(dataset: dict, batch_size: int = 4) -> dict:
    return dict(batch_size=batch_size, num_workers=0, drop_last=False,
                sampler=dict(type='DefaultSampler', shuffle=False),
                collate_fn=dict(type='xmr.retrieval_collate'), dataset=dataset)


def synthetic(split: str, languages: list[str], num_scenes: int = 6) -> dict:
    return dict(type='SyntheticRetrievalDataset', num_scenes=num_scenes, languages=languages,
                split=split, image_size=32, seed=0, captions_per_image=2)


def base_cfg(work_dir: Path, **extra) -> dict:
    cfg = dict(model=tiny_retriever_cfg(), work_dir=str(work_dir), default_scope='xmr',
               experiment_name=f'eval_loops_{next(RUN_IDS)}',
               default_hooks=dict(logger=dict(type='LoggerHook', interval=100)),
               log_level='WARNING', randomness=dict(seed=0))
    cfg.update(extra)
    return cfg


@pytest.fixture
def clips_ann(shared_data, tmp_path) -> Path:
    """Three real clips with an English and a German caption each."""
    folder = shared_data / 'videos'
    if not all((folder / name).is_file() for name in CLIPS):
        pytest.skip(f'video fixtures not found under {folder}')
    ann = Annotation(dataset='clips', split='test', media_type='video', languages=['en', 'de'],
                     items=[MediaRecord(name.split('.')[0], str(folder / name),
                                        {'en': [f'a clip called {name}'],
                                         'de': [f'ein Clip namens {name}']})
                            for name in CLIPS])
    dump_annotation(ann, tmp_path / 'clips.json')
    return tmp_path / 'clips.json'


def test_combined_mean_ar_weighs_every_language_once():
    multi30k = Evaluator([RetrievalMetric(prefix='multi30k')])
    coco = Evaluator([RetrievalMetric(prefix='coco', mean_languages=['ja'])])
    video = Evaluator([RetrievalMetric(prefix='msrvtt', protocol='text_to_video')])
    results = [
        {'multi30k/en/AR': 90.0, 'multi30k/de/AR': 50.0, 'multi30k/fr/AR': 70.0,
         'multi30k/mAR': 60.0},
        # zh is evaluated but left out of coco's mean_languages, so out of the combined mean.
        {'coco/en/AR': 80.0, 'coco/ja/AR': 40.0, 'coco/zh/AR': 10.0, 'coco/mAR': 40.0},
        {'msrvtt/de/t2i_R@1': 30.0, 'msrvtt/t2v_R@1_sum': 30.0},
    ]
    # (50 + 70 + 40) / 3, not the mean of the dataset means (60 + 40) / 2.
    assert combined_mean_ar([multi30k, coco, video], results) == pytest.approx(160 / 3)
    assert combined_mean_ar([video], results[2:]) is None


def test_combined_mean_ar_counts_a_nested_prefixs_languages_under_its_own_metric_only():
    # Two metrics of one evaluator, one prefix inside the other: xtd/fewshot/de/AR belongs to
    # the second metric and is no language 'fewshot/de' of the first.
    xtd = Evaluator([RetrievalMetric(prefix='xtd'), RetrievalMetric(prefix='xtd/fewshot')])
    results = [{'xtd/de/AR': 60.0, 'xtd/mAR': 60.0, 'xtd/fewshot/de/AR': 20.0,
                'xtd/fewshot/mAR': 20.0}]
    assert combined_mean_ar([xtd], results) == pytest.approx((60 + 20) / 2)
    # docs/evaluation.md: mean_languages=[] keeps a second metric of a dataset out of mAR.
    quiet = Evaluator([RetrievalMetric(prefix='xtd'),
                       RetrievalMetric(prefix='xtd/fewshot', mean_languages=[])])
    assert combined_mean_ar([quiet], results) == pytest.approx(60)


def test_one_pass_over_image_and_video_sets_with_prefixes(tmp_path, clips_ann):
    recorder = EvalRecorder()
    video = dict(type='RetrievalDataset', ann_file=str(clips_ann), num_frames=2,
                 transform=TINY)
    runner = Runner(**base_cfg(
        tmp_path,
        test_dataloader=[eval_loader(synthetic('val', ['en', 'de', 'zh'])),
                         eval_loader(synthetic('test', ['en', 'de'], num_scenes=5)),
                         eval_loader(video, batch_size=2)],
        test_evaluator=[dict(type='RetrievalMetric', prefix='synth_a'),
                        [dict(type='RetrievalMetric', prefix='synth_b')],
                        dict(type='RetrievalMetric', protocol='text_to_video', prefix='clips')],
        test_cfg=dict(type='MultiDatasetTestLoop'),
        custom_hooks=[recorder]))
    model = runner.model
    encoded = []
    encode_media = model.encode_media
    model.encode_media = lambda media: encoded.append(media.shape) or encode_media(media)

    metrics = runner.test()

    # Every media is encoded once, whatever the number of caption languages: 6 + 5 images,
    # 3 videos of 2 frames, in batches of 4 and 2.
    assert encoded == [(4, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32), (1, 3, 32, 32),
                       (2, 2, 3, 32, 32), (1, 2, 3, 32, 32)]
    assert recorder.calls == ['before_test_epoch', *(f'test_iter {i}' for i in range(6)),
                              'after_test_epoch']
    assert recorder.test_metrics == [metrics]
    assert {key.split('/')[0] for key in metrics} == {'synth_a', 'synth_b', 'clips', 'mAR'}
    for lang in ('en', 'de', 'zh'):
        assert f'synth_a/{lang}/AR' in metrics
    assert 'synth_b/zh/AR' not in metrics and 'clips/de/AR' not in metrics
    assert set(metrics) >= {'clips/en/t2i_R@1', 'clips/de/t2i_R@1', 'clips/t2v_R@1_sum'}
    assert metrics['mAR'] == pytest.approx(
        (metrics['synth_a/de/AR'] + metrics['synth_a/zh/AR'] + metrics['synth_b/de/AR']) / 3)
    assert len(runner.test_dataloader) == 6


def test_the_logged_table_of_each_dataset_names_its_prefix_and_dataset(tmp_path, monkeypatch):
    """Two galleries under one protocol logged two tables headed alike ('Retrieval (standard,
    i2t standard):'), so the log did not tell which numbers were whose."""
    said = []
    monkeypatch.setattr(retrieval, 'print_log', lambda message, **_: said.append(message))
    runner = Runner(**base_cfg(
        tmp_path,
        val_dataloader=[eval_loader(synthetic('val', ['en', 'de'], num_scenes=3)),
                        eval_loader(synthetic('test', ['en', 'de'], num_scenes=3))],
        val_evaluator=[dict(type='RetrievalMetric', prefix='synth_a'),
                       dict(type='RetrievalMetric', prefix='synth_b', directions=('t2i',))],
        val_cfg=dict(type='MultiDatasetValLoop')))
    runner.val()
    assert [message.splitlines()[0] for message in said if message.startswith('Retrieval')] == [
        'Retrieval of synth_a (synthetic val; standard, i2t standard):',
        'Retrieval of synth_b (synthetic test; standard):']


def _odd_galleries_cfg(work_dir: Path, clips: Path) -> dict:
    """7 and 9 images (en/de/zh; en/de, scored on the second of 3 COCO-style folds of
    consecutive images) and 3 clips, in batches that no rank count divides."""
    video = dict(type='RetrievalDataset', ann_file=str(clips), num_frames=2, transform=TINY)
    return base_cfg(
        work_dir, experiment_name=f'odd_galleries_{work_dir.name}',
        test_dataloader=[eval_loader(synthetic('val', ['en', 'de', 'zh'], num_scenes=7), 2),
                         eval_loader(synthetic('test', ['en', 'de'], num_scenes=9), 4),
                         eval_loader(video, batch_size=2)],
        test_evaluator=[dict(type='RetrievalMetric', prefix='a'),
                        dict(type='RetrievalMetric', prefix='b', protocol='coco_1k_5fold',
                             gallery_size=9, num_folds=3, folds=(1,)),
                        dict(type='RetrievalMetric', protocol='text_to_video', prefix='clips')],
        test_cfg=dict(type='MultiDatasetTestLoop'))


def _odd_galleries_rank(rank: int, port: int, work_dir: str, clips: str) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE='2', LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    # Each rank in its own working directory, as the nodes of a multi-node run are.
    own_folder = Path(work_dir) / f'cwd{rank}'
    own_folder.mkdir()
    os.chdir(own_folder)
    cfg = Config(dict(_odd_galleries_cfg(Path(work_dir) / 'ddp', Path(clips)), launcher='pytorch'))
    setup_cpu_distributed(cfg, 'pytorch')
    torch.save(Runner.from_cfg(cfg).test(), Path(work_dir) / f'metrics{rank}.pt')
    torch.distributed.destroy_process_group()


def test_two_gloo_processes_score_every_gallery_as_one_process(tmp_path, clips_ann, monkeypatch):
    """Galleries of 7, 9 and 3 media on 2 ranks: MMEngine's sampler pads each with its first
    media, which the metric drops (kept, they score other numbers), and the gathered items
    are in dataset order (the fold scored follows it), so every key equals one process's, bit
    for bit. The ranks work in folders of their own and gather without files: nothing is
    written there."""
    MODELS.import_from_location()
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    mp.start_processes(_odd_galleries_rank, args=(free_port(), str(tmp_path), str(clips_ann)),
                       nprocs=2, join=True, start_method='fork')
    one = Runner.from_cfg(Config(_odd_galleries_cfg(tmp_path / 'one', clips_ann))).test()
    assert len(one) == 76 and 0 < one['a/de/t2i_R@1'] < 100
    for rank in range(2):
        assert torch.load(tmp_path / f'metrics{rank}.pt') == one
        assert not any((tmp_path / f'cwd{rank}').iterdir())


def test_bad_configurations_name_the_fault(tmp_path):
    loaders = [eval_loader(synthetic('val', ['en', 'de'])),
               eval_loader(synthetic('test', ['en', 'de']))]
    cases = [
        ([dict(type='RetrievalMetric', prefix='a')], 'MultiDatasetValLoop: 2 dataloaders but 1'),
        ([dict(type='RetrievalMetric', prefix='a'), dict(type='RetrievalMetric')],
         r"val_evaluator\[1\] \(synthetic\): RetrievalMetric has no prefix"),
        ([dict(type='RetrievalMetric', prefix='a'), dict(type='RetrievalMetric', prefix='a')],
         r"val_evaluator\[1\] \(synthetic\) and val_evaluator\[0\] share the prefix 'a'"),
    ]
    for evaluators, message in cases:
        runner = Runner(**base_cfg(tmp_path, val_dataloader=loaders, val_evaluator=evaluators,
                                   val_cfg=dict(type='MultiDatasetValLoop')))
        with pytest.raises(ValueError, match=message):
            runner.val()
    runner = Runner(**base_cfg(tmp_path, val_dataloader=loaders[0],
                               val_evaluator=[dict(type='RetrievalMetric', prefix='a')],
                               val_cfg=dict(type='MultiDatasetValLoop')))
    with pytest.raises(TypeError, match='takes a list of dataloaders as val_dataloader'):
        runner.val()


PHASES = [
    dict(name='cross_lingual', iters=2, lr=4e-3, warmup_ratio=0.0, schedule='constant',
         trainable=['language_branch'], loss_weights=dict(cl=1.0)),
    dict(name='cross_modal', iters=2, lr=4e-3, warmup_ratio=0.0, schedule='constant',
         trainable=['language_branch'], loss_weights=dict(cm=1.0)),
]


def test_save_best_follows_validation_and_test_never_changes_it(tmp_path):
    recorder = EvalRecorder()
    train_loader = eval_loader(dict(type='SyntheticPairDataset', num_scenes=16,
                                    languages=['de', 'zh'], split='train', image_size=32,
                                    seed=0), batch_size=8)
    train_loader['sampler'] = dict(type='DefaultSampler', shuffle=True)
    runner = Runner(**base_cfg(
        tmp_path,
        train_dataloader=train_loader,
        train_cfg=dict(type='PhasedTrainLoop', phases=copy.deepcopy(PHASES),
                       validate_at_phase_end=True),
        optim_wrapper=dict(type='OptimWrapper', constructor='PhasedOptimWrapperConstructor',
                           optimizer=dict(type='AdamW', lr=1e-3)),
        val_dataloader=[eval_loader(synthetic('val', ['en', 'de'])),
                        eval_loader(synthetic('val', ['en', 'zh'], num_scenes=5))],
        val_evaluator=[dict(type='RetrievalMetric', prefix='val_de'),
                       dict(type='RetrievalMetric', prefix='val_zh')],
        val_cfg=dict(type='MultiDatasetValLoop'),
        test_dataloader=[eval_loader(synthetic('test', ['en', 'de', 'zh'], num_scenes=8))],
        test_evaluator=[dict(type='RetrievalMetric', prefix='test')],
        test_cfg=dict(type='MultiDatasetTestLoop'),
        default_hooks=dict(
            logger=dict(type='LoggerHook', interval=100),
            checkpoint=dict(type='CheckpointHook', interval=1000, by_epoch=False,
                            save_best='mAR', rule='greater')),
        custom_hooks=[recorder]))
    runner.train()

    assert len(recorder.val_metrics) == 2
    val_scores = [metrics['mAR'] for metrics in recorder.val_metrics]
    for metrics in recorder.val_metrics:
        assert metrics['mAR'] == pytest.approx(
            (metrics['val_de/de/AR'] + metrics['val_zh/zh/AR']) / 2)
    hub = runner.message_hub
    best_score, best_ckpt = hub.get_info('best_score'), hub.get_info('best_ckpt')
    assert best_score == pytest.approx(max(val_scores))
    best_iter = 2 * (val_scores.index(max(val_scores)) + 1)
    assert Path(best_ckpt).name == f'best_mAR_iter_{best_iter}.pth'
    saved = {path.name: path.stat().st_mtime_ns for path in Path(best_ckpt).parent.glob('*.pth')}

    test_metrics = runner.test()
    # A test score cannot move the selection, even when it beats the validation best.
    runner.call_hook('after_test_epoch', metrics={**test_metrics, 'mAR': best_score + 100})

    assert 'mAR' in test_metrics and recorder.test_metrics[0] == test_metrics
    assert recorder.calls[-1] == 'after_test_epoch'
    assert recorder.calls.count('after_val_epoch') == 2
    assert hub.get_info('best_score') == best_score
    assert hub.get_info('best_ckpt') == best_ckpt
    assert {path.name: path.stat().st_mtime_ns
            for path in Path(best_ckpt).parent.glob('*.pth')} == saved
    assert torch.load(best_ckpt, map_location='cpu', weights_only=False)['meta']['iter'] == (
        best_iter)


def amp_evaluation(work_dir: Path, cached: bool) -> tuple[dict, set, torch.dtype]:
    """Metrics of an fp16 test run, the dtypes a frozen weight had while media were encoded,
    and its dtype after the run."""
    runner = Runner(**base_cfg(
        work_dir, test_dataloader=[eval_loader(synthetic('test', ['en', 'de']))],
        test_evaluator=[dict(type='RetrievalMetric', prefix='synth')],
        test_cfg=dict(type='MultiDatasetTestLoop', fp16=True)))
    model = runner.model
    if not cached:
        runner.test_loop.frozen_casts.swapped_into = lambda model: contextlib.nullcontext()
    seen = set()
    encode_media = model.encode_media
    layer = model.backbone.clip.visual.transformer.resblocks[0].mlp.c_fc
    model.encode_media = lambda media: seen.add(layer.weight.dtype) or encode_media(media)
    return runner.test(), seen, layer.weight.dtype


def test_amp_evaluation_runs_on_cast_frozen_weights_with_autocast_results(tmp_path):
    metrics, seen, after = amp_evaluation(tmp_path / 'cached', cached=True)
    plain_metrics, plain_seen, _ = amp_evaluation(tmp_path / 'plain', cached=False)
    assert seen == {torch.bfloat16} and plain_seen == {torch.float32}
    assert after == torch.float32
    assert metrics == plain_metrics


@pytest.mark.parametrize('loop', ['MultiDatasetTestLoop', 'TestLoop'])
def test_evaluation_with_tokenising_workers_gives_the_same_metrics(tmp_path, loop):
    metrics = []
    for workers in (0, 2):
        loader = dict(eval_loader(synthetic('test', ['en', 'de', 'zh'])), num_workers=workers,
                      persistent_workers=bool(workers))
        evaluator = dict(type='RetrievalMetric', prefix='synth')
        one_dataset = loop == 'TestLoop'
        runner = Runner(**base_cfg(
            tmp_path / str(workers), test_dataloader=loader if one_dataset else [loader],
            test_evaluator=evaluator if one_dataset else [evaluator],
            test_cfg=dict(type=loop)))
        metrics.append(runner.test())
        tested = runner.test_loop.dataloader if one_dataset else runner.test_loop.dataloaders[0]
        assert isinstance(tested.collate_fn, TokenizingCollate) == bool(workers)
        # A test runs once: its persistent workers end with it (each left a pymp-* folder).
        assert getattr(tested, '_iterator', None) is None
    assert metrics[0] == metrics[1]


def test_the_loader_sequence_counts_the_batches_of_every_loader():
    """MMEngine's logger and timer read it as the evaluation's length: 3 + 2 batches."""
    from torch.utils.data import DataLoader

    from xmr.engine.eval_loops import LoaderSequence

    loaders = [DataLoader(range(6), batch_size=2), DataLoader(range(3), batch_size=2)]
    assert len(LoaderSequence(loaders)) == 5


def test_a_metric_language_the_dataset_lacks_is_refused_when_the_loop_is_built(tmp_path):
    """The loop hands each evaluator its dataset's facts, as MMEngine's loops do."""
    runner = Runner(**base_cfg(
        tmp_path, val_dataloader=[eval_loader(synthetic('val', ['en', 'de']))],
        val_evaluator=[dict(type='RetrievalMetric', prefix='a', languages=['en', 'fr'])],
        val_cfg=dict(type='MultiDatasetValLoop')))
    with pytest.raises(ValueError, match=r"languages \['fr'\] were requested but synthetic "
                                         r"val has captions in \['en', 'de'\] only"):
        runner.val()


class TrainingModeRecorder(Hook):
    """Whether the model was in training mode at each validation batch."""

    def __init__(self) -> None:
        self.modes: list[bool] = []

    def before_val_iter(self, runner, batch_idx, data_batch=None) -> None:
        self.modes.append(runner.model.training)


def test_validation_runs_a_model_left_in_training_mode_in_eval_mode(tmp_path):
    """The training loop validates between its steps, with the model in training mode."""
    recorder = TrainingModeRecorder()
    runner = Runner(**base_cfg(
        tmp_path, val_dataloader=[eval_loader(synthetic('val', ['en', 'de']))],
        val_evaluator=[dict(type='RetrievalMetric', prefix='a')],
        val_cfg=dict(type='MultiDatasetValLoop'), custom_hooks=[recorder]))
    runner.model.train()
    runner.val()
    assert recorder.modes == [False, False]


def test_no_summary_key_is_reported_when_no_dataset_reports_ar(tmp_path):
    """One direction scored gives no AR: ``mAR`` is left out, not reported as ``None``."""
    runner = Runner(**base_cfg(
        tmp_path, val_dataloader=[eval_loader(synthetic('val', ['en', 'de']))],
        val_evaluator=[dict(type='RetrievalMetric', prefix='a', directions=['t2i'])],
        val_cfg=dict(type='MultiDatasetValLoop')))
    metrics = runner.val()
    assert 'a/de/t2i_R@1' in metrics and 'mAR' not in metrics


class ItemCount(BaseMetric):
    """The number of gallery items a metric is handed, as MMEngine's metrics keep them."""

    def process(self, data_batch, data_samples) -> None:
        self.results.extend(data_samples)

    def compute_metrics(self, results: list) -> dict:
        return dict(items=len(results))


def test_a_metric_keeps_every_item_of_its_dataset_not_one_per_batch(tmp_path):
    """MMEngine's metrics keep the first ``size`` results: the dataset's 6 items, not its 2
    batches (RetrievalMetric keeps all of them whatever the size)."""
    runner = Runner(**base_cfg(
        tmp_path, val_dataloader=[eval_loader(synthetic('val', ['en', 'de']))],
        val_evaluator=[Evaluator([ItemCount(prefix='count')])],
        val_cfg=dict(type='MultiDatasetValLoop')))
    assert runner.val() == {'count/items': 6}


def clips_test_runner(tmp_path: Path, loader: dict, loop: str) -> tuple[Runner, list[int]]:
    """A test run of ``loop`` over ``loader``'s clips (its one loader and metric, listed for
    ``MultiDatasetTestLoop``), and the list that records each batch's media count as the model
    embeds it."""
    metric = dict(type='RetrievalMetric', protocol='text_to_video', prefix='clips')
    several = loop == 'MultiDatasetTestLoop'
    runner = Runner(**base_cfg(tmp_path, test_dataloader=[loader] if several else loader,
                               test_evaluator=[metric] if several else metric,
                               test_cfg=dict(type=loop)))
    encoded: list[int] = []
    encode_media = runner.model.encode_media
    runner.model.encode_media = lambda media: encoded.append(len(media)) or encode_media(media)
    return runner, encoded


@pytest.mark.parametrize('loop', ['TestLoop', 'MultiDatasetTestLoop'])
def test_a_batch_whose_every_medium_was_skipped_is_counted_without_the_model(
        tmp_path, shared_data, loop):
    """on_corrupt='skip' with the damaged clip alone in its batch: the model has nothing to
    embed, the metric scores the two readable clips and counts the skipped one."""
    folder = shared_data / 'videos'
    names = ['video_0.mov', 'corrupted.mp4', 'unordered.mov']
    if not all((folder / name).is_file() for name in names):
        pytest.skip(f'video fixtures not found under {folder}')
    ann = Annotation(dataset='clips', split='test', media_type='video', languages=['en'],
                     items=[MediaRecord(name.split('.')[0], str(folder / name),
                                        {'en': [f'a clip called {name}']}) for name in names])
    dump_annotation(ann, tmp_path / 'clips.json')
    loader = eval_loader(dict(type='RetrievalDataset', ann_file=str(tmp_path / 'clips.json'),
                              num_frames=2, transform=TINY, on_corrupt='skip'), batch_size=1)
    runner, encoded = clips_test_runner(tmp_path, loader, loop)

    with pytest.warns(UserWarning, match='corrupted.mp4'):
        metrics = runner.test()

    assert encoded == [1, 1]
    assert metrics['clips/skipped_media'] == 1


def test_a_loops_expected_keys_are_its_metrics_and_summary_key_or_none_if_one_cannot_tell():
    """A metric that cannot tell its keys (another type, unknown languages) leaves them all
    unknown: a save_best key of that metric is not refused before training."""
    def scored(*metrics):
        return SimpleNamespace(dataloaders=[object()] * len(metrics),
                               evaluators=[SimpleNamespace(metrics=[m]) for m in metrics],
                               summary_key='mean_ar')

    first = RetrievalMetric(recall_ks=(1,), directions=('t2i',), languages=['en'], prefix='a')
    second = RetrievalMetric(recall_ks=(1,), directions=('t2i',), languages=['en'], prefix='b')
    # 'en' is the source language: no summary over it, the per-language keys only; and no AR
    # of one direction, so no summary of the loop either (it was expected, and a save_best of
    # it refused only at the first validation).
    assert expected_metric_keys(scored(first, second)) == {
        f'{prefix}/en/t2i_{statistic}' for prefix in 'ab' for statistic in ('R@1', 'MdR', 'MnR')}
    german = RetrievalMetric(recall_ks=(1,), languages=['de'], prefix='c')
    assert 'mean_ar' in expected_metric_keys(scored(first, german))
    assert 'mean_ar' not in expected_metric_keys(scored(
        first, RetrievalMetric(recall_ks=(1,), languages=['en'], prefix='d')))
    assert expected_metric_keys(scored(first, RetrievalMetric())) is None
    assert expected_metric_keys(scored(first, SimpleNamespace())) is None  # another type


@pytest.mark.parametrize('loop', ['TestLoop', 'MultiDatasetTestLoop'])
def test_a_test_run_names_every_missing_and_damaged_video_before_embedding_any(
        tmp_path, shared_data, loop):
    """A test run checked nothing first: it embedded the clips before the damaged one and
    stopped there, naming that file alone; the missing one came after a fix and a rerun."""
    folder = shared_data / 'videos'
    if not (folder / 'video_0.mov').is_file():
        pytest.skip(f'video fixtures not found under {folder}')
    (tmp_path / 'empty.mp4').write_bytes(b'')
    names = [str(folder / 'video_0.mov'), 'empty.mp4', 'gone.mp4']
    ann = Annotation(dataset='clips', split='test', media_type='video', languages=['en'],
                     items=[MediaRecord(f'v{i}', name, {'en': [f'clip {i}']})
                            for i, name in enumerate(names)])
    dump_annotation(ann, tmp_path / 'clips.json')
    loader = eval_loader(dict(type='RetrievalDataset', ann_file=str(tmp_path / 'clips.json'),
                              data_root=str(tmp_path), num_frames=2, transform=TINY),
                         batch_size=1)
    runner, encoded = clips_test_runner(tmp_path, loader, loop)

    with pytest.raises(FileNotFoundError) as info:
        runner.test()

    assert encoded == []
    assert str(info.value) == (
        f'{tmp_path / "clips.json"}: 1 of its 3 media files are missing, the first '
        f'{tmp_path / "gone.mp4"}: check data_root and data_prefix; 1 of its 3 videos cannot be '
        f'read whole:\n  {tmp_path / "empty.mp4"}: the file is empty (0 bytes)\nreplace them, '
        "or set on_corrupt='skip' to leave them out")


class FakeRunner(SimpleNamespace):
    """What the loops read of a runner: its seed and randomness, a loader builder that records
    the seeds it is given, a model that tokenises and tells which step ran, and the hooks."""

    def __init__(self, **randomness) -> None:
        super().__init__(seed=7, _randomness_cfg=randomness, built=[], hooks_called=[],
                         steps=[], visualizer=SimpleNamespace())
        self.model = SimpleNamespace(
            data_preprocessor=SimpleNamespace(tokenize=lambda texts: texts),
            eval=lambda: None,
            val_step=lambda batch: self.steps.append(('val', batch.tolist())) or ['v'],
            test_step=lambda batch: self.steps.append(('test', batch.tolist())) or ['t'])

    def build_dataloader(self, cfg, seed, diff_rank_seed):
        self.built.append((seed, diff_rank_seed))
        return DataLoader(range(2), num_workers=cfg.get('num_workers', 0))

    def call_hook(self, name, **kwargs) -> None:
        self.hooks_called.append(f"{name} {kwargs['batch_idx']}" if 'batch_idx' in kwargs
                                 else name)


class FakeEvaluator(SimpleNamespace):
    """An evaluator of one prefixed metric that records what it is handed."""

    def __init__(self, prefix: str) -> None:
        super().__init__(metrics=[SimpleNamespace(prefix=prefix)], processed=[])

    def process(self, data_samples, data_batch) -> None:
        self.processed.append((data_samples, data_batch))

    def evaluate(self, size: int) -> dict:
        return {f'{self.metrics[0].prefix}/size': size}


@pytest.mark.parametrize('dataloader, evaluator, error, message', [
    ([], [], ValueError, r'MultiDatasetValLoop: val_dataloader is an empty list'),
    (DataLoader(range(2)), [FakeEvaluator('a')], TypeError,
     'takes a list of dataloaders as val_dataloader, got DataLoader'),
    ([DataLoader(range(2)), DataLoader(range(2))], 'ab', TypeError,
     r'takes a list of evaluators as val_evaluator \(one per dataloader\), got str'),
])
def test_what_is_no_pair_of_lists_is_refused_before_any_loader_is_built(
        dataloader, evaluator, error, message):
    """An empty list, one loader object, or a string of evaluator names: each named as the
    fault it is, not met later as a length mismatch or a string's characters."""
    runner = FakeRunner()
    with pytest.raises(error, match=message):
        MultiDatasetValLoop(runner, dataloader, evaluator)
    assert runner.built == []


def test_the_loaders_are_built_with_the_runs_seed_per_rank_and_every_one_tokenises():
    """``randomness.diff_rank_seed`` reaches every loader built from a config, as MMEngine's
    one-dataset loops pass it; and the workers of every loader tokenise, not the first's
    alone."""
    runner = FakeRunner(diff_rank_seed=True)
    loop = MultiDatasetValLoop(runner, [dict(num_workers=2), dict(num_workers=2)],
                               [FakeEvaluator('a'), FakeEvaluator('b')])
    assert runner.built == [(7, True), (7, True)]
    assert [isinstance(loader.collate_fn, TokenizingCollate) for loader in loop.dataloaders] == [
        True, True]
    default = FakeRunner()  # the default: one seed for every rank
    MultiDatasetValLoop(default, [dict()], [FakeEvaluator('a')])
    assert default.built == [(7, False)]


def test_a_prefix_shared_by_two_later_datasets_names_both_of_them():
    """The owner of a prefix is the first dataset whose metric has it, whichever it is."""
    loaders = [DataLoader(range(2)) for _ in range(3)]
    with pytest.raises(ValueError, match=r"val_evaluator\[2\] \(range\) and val_evaluator\[1\] "
                                         r"share the prefix 'b'"):
        MultiDatasetValLoop(FakeRunner(), loaders,
                            [FakeEvaluator('a'), FakeEvaluator('b'), FakeEvaluator('b')])


def test_a_test_over_two_loaders_runs_the_test_hooks_and_step_in_order():
    """Every batch goes through the model's ``test_step`` (not ``val_step``) between its test
    hooks, numbered across the loaders; each evaluator is handed its dataset's size; the run
    ends with ``after_test``, which MMEngine's hooks (the logger's) end the test on."""
    runner = FakeRunner()
    evaluators = [FakeEvaluator('a'), FakeEvaluator('b')]
    loop = MultiDatasetTestLoop(runner, [DataLoader(range(3), batch_size=2),
                                         DataLoader(range(3, 4), batch_size=2)], evaluators)
    assert loop.run() == {'a/size': 3, 'b/size': 1}
    assert runner.steps == [('test', [0, 1]), ('test', [2]), ('test', [3])]
    assert runner.hooks_called == [
        'before_test', 'before_test_epoch', 'before_test_iter 0', 'after_test_iter 0',
        'before_test_iter 1', 'after_test_iter 1', 'before_test_iter 2', 'after_test_iter 2',
        'after_test_epoch', 'after_test']
    assert [len(evaluator.processed) for evaluator in evaluators] == [2, 1]


def test_a_batch_that_kept_no_item_reaches_the_metric_and_both_hooks_of_a_one_dataset_loop():
    """``CorruptMediaHook`` counts skipped media in ``after_test_iter``: a batch of skipped
    media alone skips the model, not that hook."""
    runner = FakeRunner()
    evaluator = FakeEvaluator('a')
    loop = eval_loops.TestLoop(runner, DataLoader(range(2)), evaluator)
    batch = dict(batch_size=0, skipped_media=['x.jpg'])
    loop.run_iter(5, batch)
    assert runner.steps == []
    assert evaluator.processed == [([], batch)]
    assert runner.hooks_called == ['before_test_iter 5', 'after_test_iter 5']


def test_a_test_blocks_workers_ignore_the_stop_signals_and_end_even_when_the_block_fails():
    """A test stopped by an error (or the signal the workers ignore) still ends its loader's
    persistent workers: left running, each kept its ``pymp-*`` folder."""
    loader = DataLoader(range(4), batch_size=2, num_workers=1, persistent_workers=True)
    try:
        with pytest.raises(RuntimeError, match='stopped'):
            with workers_ending([loader]):
                assert isinstance(loader.worker_init_fn, IgnoringWorkerInit)
                next(iter(loader))
                assert loader._iterator is not None
                raise RuntimeError('stopped')
        assert loader._iterator is None
    finally:
        end_workers(loader)  # a worker ignoring SIGTERM left running holds pytest's exit


def test_media_are_checked_once_per_dataset_however_many_loaders_share_it():
    class Checked:
        def __init__(self) -> None:
            self.checks = 0

        def check_media_exist(self) -> None:
            self.checks += 1

    shared, other = Checked(), Checked()
    check_media_exist([shared, other, shared, object()])
    assert (shared.checks, other.checks) == (1, 1)


def test_a_loop_expects_its_summary_key_whichever_of_its_metrics_averages_ar():
    """The metric that reports AR may come first, before one that reports none."""
    german = RetrievalMetric(recall_ks=(1,), languages=['de'], prefix='c')
    english = RetrievalMetric(recall_ks=(1,), directions=('t2i',), languages=['en'], prefix='a')
    loop = SimpleNamespace(dataloaders=[object(), object()], summary_key='mean_ar',
                           evaluators=[SimpleNamespace(metrics=[german]),
                                       SimpleNamespace(metrics=[english])])
    assert 'mean_ar' in expected_metric_keys(loop)


def test_the_combined_mean_ar_leaves_out_the_ar_keys_of_another_metric_type():
    """Only a RetrievalMetric tells which of its languages are averaged: another metric's
    ``<prefix>/<lang>/AR`` keys are no language of the table."""
    multi30k = Evaluator([RetrievalMetric(prefix='multi30k')])
    other = Evaluator([ItemCount(prefix='other')])
    results = [{'multi30k/de/AR': 50.0}, {'other/de/AR': 10.0}]
    assert combined_mean_ar([multi30k, other], results) == pytest.approx(50)
