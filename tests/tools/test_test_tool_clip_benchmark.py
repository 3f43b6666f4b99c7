"""Done-when of the low-resource benchmarks: a Crossmodal-3600 Swahili test of a tiny random model
writes xmr's table and CLIP_benchmark's JSON, from a captions.jsonl in the release's layout."""
from __future__ import annotations

import csv
import json

import pytest
import torch

from tests.conftest import tiny_branch_cfg, tiny_retriever_cfg
from tests.datasets.converters.test_lowres_converters import write_xm3600
from tests.tools.test_test_tool import (
    TINY,
    eval_loader,
    load_tool,
    placeholder_images,
    save_checkpoint,
)
from xmr.apis import encode_media, encode_texts, init_retriever
from xmr.datasets import dump_annotation
from xmr.datasets.converters.crossmodal3600 import convert_crossmodal3600

NUM_IMAGES = 8
WORDS = ['paka', 'mbwa', 'gari', 'ndege', 'mti', 'nyumba', 'mtoto', 'samaki']


def xm3600_rows() -> list[dict]:
    rows = []
    for i, word in enumerate(WORDS):
        swahili = [f'{word} mdogo', f'{word} kwenye picha'][:1 + i % 2]
        rows.append({'image/key': f'{i:016x}',
                     'en': {'caption': [f'a photo number {i}'], 'caption/tokenized': ['x']},
                     'sw': {'caption': swahili, 'caption/tokenized': swahili}})
    return rows


@pytest.fixture(scope='module')
def xm3600_run(tmp_path_factory):
    root = tmp_path_factory.mktemp('xm3600')
    rows = xm3600_rows()
    write_xm3600(root, rows)
    placeholder_images(root / 'images', [f"{row['image/key']}.jpg" for row in rows], seed=3)
    ann = convert_crossmodal3600(root / 'captions.jsonl', root / 'images', ['en', 'swh_Latn'])
    dump_annotation(ann, root / 'crossmodal3600_test.json')
    model = tiny_retriever_cfg(language_branch=tiny_branch_cfg(languages=['sw']))
    save_checkpoint(model, root / 'tiny.pth')
    dataset = dict(type='RetrievalDataset', ann_file=str(root / 'crossmodal3600_test.json'),
                   data_prefix=dict(media=str(root / 'images')), transform=TINY,
                   languages=['swh_Latn'],
                   # A few images of the 3,600: a deliberate subset, scored at its own size.
                   check_benchmark_size=False)
    metric = dict(type='RetrievalMetric', gallery_size=NUM_IMAGES, languages=['sw'])
    config = root / 'xm3600_sw.py'
    from mmengine.config import Config
    Config(dict(default_scope='xmr', work_dir=str(root / 'work'), model=model,
                log_level='WARNING', test_dataloader=eval_loader(dataset),
                test_evaluator=[dict(metric, protocol='crossmodal3600', prefix='xm3600'),
                                dict(metric, protocol='crossmodal3600_first_caption',
                                     prefix='xm3600_cb')],
                test_cfg=dict(type='TestLoop'))).dump(config)
    load_tool().main([str(config), str(root / 'tiny.pth'), '--format', 'clip_benchmark'])
    return root, config, ann


def test_xmr_table_and_clip_benchmark_json_are_both_written(xm3600_run):
    root, _, _ = xm3600_run
    metrics = json.loads((root / 'tiny_test.json').read_text(encoding='utf-8'))['metrics']
    with open(root / 'tiny_test.csv', newline='', encoding='utf-8') as handle:
        header = next(csv.reader(handle))
    assert header == ['model', 'xm3600/sw', 'xm3600/mAR', 'xm3600_cb/sw', 'xm3600_cb/mAR']
    [path] = (root / 'tiny_test_clip_benchmark').iterdir()
    assert path.name == 'crossmodal3600_tiny.pth_xm3600_sw_sw_zeroshot_retrieval.json'
    record = json.loads(path.read_text(encoding='utf-8'))
    assert {key: record[key] for key in ('dataset', 'model', 'task', 'language')} == {
        'dataset': 'crossmodal3600', 'model': 'xm3600_sw', 'task': 'zeroshot_retrieval',
        'language': 'sw'}
    assert record['pretrained'] == str(root / 'tiny.pth')
    for k in (1, 5, 10):
        assert record['metrics'][f'image_retrieval_recall@{k}'] == pytest.approx(
            metrics[f'xm3600_cb/sw/t2i_R@{k}'] / 100)
        assert record['metrics'][f'text_retrieval_recall@{k}'] == pytest.approx(
            metrics[f'xm3600_cb/sw/i2t_R@{k}'] / 100)


def _clip_benchmark_recall(scores: torch.Tensor, positives: torch.Tensor, k: int) -> float:
    """CLIP_benchmark's definition: a query is a hit when a positive is among its top k."""
    top = scores.topk(min(k, scores.shape[1]), dim=1).indices
    return positives.gather(1, top).any(dim=1).float().mean().item()


def test_clip_benchmark_numbers_equal_its_own_first_caption_computation(xm3600_run):
    root, config, ann = xm3600_run
    [path] = (root / 'tiny_test_clip_benchmark').iterdir()
    record = json.loads(path.read_text(encoding='utf-8'))['metrics']
    model = init_retriever(config, root / 'tiny.pth')
    images = encode_media(model, [root / 'images' / item.media_path for item in ann.items],
                          transform=TINY)
    texts = encode_texts(model, [item.captions['sw'][0] for item in ann.items], 'sw')
    scores = texts @ images.T
    positives = torch.eye(NUM_IMAGES, dtype=torch.bool)
    for k in (1, 5, 10):
        assert record[f'image_retrieval_recall@{k}'] == pytest.approx(
            _clip_benchmark_recall(scores, positives, k))
        assert record[f'text_retrieval_recall@{k}'] == pytest.approx(
            _clip_benchmark_recall(scores.T, positives.T, k))


def test_all_caption_protocol_ranks_every_caption(xm3600_run):
    root, config, ann = xm3600_run
    metrics = json.loads((root / 'tiny_test.json').read_text(encoding='utf-8'))['metrics']
    model = init_retriever(config, root / 'tiny.pth')
    images = encode_media(model, [root / 'images' / item.media_path for item in ann.items],
                          transform=TINY)
    captions = [(i, text) for i, item in enumerate(ann.items) for text in item.captions['sw']]
    assert len(captions) == 12  # half the images have two Swahili captions
    texts = encode_texts(model, [text for _, text in captions], 'sw')
    owner = torch.tensor([i for i, _ in captions])
    positives = owner[:, None] == torch.arange(NUM_IMAGES)[None]
    scores = texts @ images.T
    for k in (1, 5):
        assert metrics[f'xm3600/sw/t2i_R@{k}'] / 100 == pytest.approx(
            _clip_benchmark_recall(scores, positives, k))
        assert metrics[f'xm3600/sw/i2t_R@{k}'] / 100 == pytest.approx(
            _clip_benchmark_recall(scores.T, positives.T, k))


def test_clip_benchmark_format_without_a_comparable_metric_stops_before_encoding(
        xm3600_run, tmp_path):
    root, config, _ = xm3600_run
    with pytest.raises(SystemExit, match='no test metric is comparable with CLIP_benchmark'):
        load_tool().main([str(config), str(root / 'tiny.pth'), '--format', 'clip_benchmark',
                          '--out', str(tmp_path / 'r.json'), '--cfg-options',
                          'test_evaluator.1.protocol=crossmodal3600'])
    assert not (tmp_path / 'r.json').exists()


def test_an_ablation_rows_clip_benchmark_model_names_the_row(xm3600_run, tmp_path):
    """The files of an --ablation row and of the full model go into one `clip_benchmark build`:
    the row's model is named as its leaderboard row and work dir are."""
    root, config, _ = xm3600_run
    (tmp_path / 'no-x.py').write_text("log_level = 'WARNING'\n")
    load_tool().main([str(config), str(root / 'tiny.pth'), '--format', 'clip_benchmark',
                      '--out', str(tmp_path / 'row.json'), '--ablation', str(tmp_path / 'no-x.py')])
    [path] = (tmp_path / 'row_clip_benchmark').iterdir()
    assert json.loads(path.read_text(encoding='utf-8'))['model'] == 'xm3600_sw_no-x'
    assert path.name == 'crossmodal3600_tiny.pth_xm3600_sw_no-x_sw_zeroshot_retrieval.json'
