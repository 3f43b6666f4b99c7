"""CLIP_benchmark's JSON records from xmr's metric keys."""
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from xmr.evaluation import RetrievalMetric, scored_datasets
from xmr.evaluation.clip_benchmark import (
    ScoredDataset,
    clip_benchmark_filename,
    clip_benchmark_files,
    clip_benchmark_records,
    clip_benchmark_texts,
    comparable_entries,
    write_clip_benchmark,
)
from xmr.evaluation.leaderboard import EvaluationResult, save_result

METRICS = {'nllb/sw/t2i_R@1': 25.0, 'nllb/sw/i2t_R@1': 50.0, 'nllb/sw/t2i_R@5': 75.0,
           'nllb/sw/i2t_R@5': 100.0, 'nllb/sw/t2i_MnR': 3.0, 'nllb/sw/AR': 62.5,
           'nllb/zh-Hant/t2i_R@1': 10.0, 'nllb/zh-Hant/i2t_R@1': 20.0, 'nllb/mAR': 40.0,
           'xtd/ja/t2i_R@10': 40.0, 'xtd/mean_t2i_R@10': 40.0}


def test_records_use_clip_benchmark_names_fractions_and_key_order():
    scored = [ScoredDataset('nllb', 'flickr30k_200', 'flickr30k_200'),
              ScoredDataset('xtd', 'xtd10', 'xtd10_t2i_r10')]
    records = clip_benchmark_records(METRICS, scored, 'lora_b32', 'work/iter_10.pth')
    assert records[0] == {
        'dataset': 'flickr30k-200', 'model': 'lora_b32', 'pretrained': 'work/iter_10.pth',
        'task': 'zeroshot_retrieval', 'language': 'swh_Latn',
        'metrics': {'image_retrieval_recall@1': 0.25, 'text_retrieval_recall@1': 0.5,
                    'image_retrieval_recall@5': 0.75, 'text_retrieval_recall@5': 1.0}}
    assert list(records[0]['metrics']) == ['image_retrieval_recall@1', 'text_retrieval_recall@1',
                                           'image_retrieval_recall@5', 'text_retrieval_recall@5']
    assert [(r['dataset'], r['language']) for r in records[1:]] == [
        ('flickr30k-200', 'zho_Hant'), ('multilingual_mscoco_captions', 'jp')]
    assert records[2]['metrics'] == {'image_retrieval_recall@10': 0.4}
    assert clip_benchmark_filename(records[0]) == (
        'flickr30k-200_iter_10.pth_lora_b32_swh_Latn_zeroshot_retrieval.json')


def test_only_protocols_ranking_what_clip_benchmark_ranks_are_written():
    all_captions = ScoredDataset('nllb', 'crossmodal3600', 'crossmodal3600')
    few_shot = ScoredDataset('xtd', 'xtd10', 'xtd10_fewshot')
    with pytest.raises(ValueError, match=r"no test metric is comparable with CLIP_benchmark: "
                       r"nllb \(crossmodal3600, crossmodal3600\), xtd \(xtd10, xtd10_fewshot\)"):
        clip_benchmark_records(METRICS, [all_captions, few_shot], 'm', 'p')
    # PECTVLM's configs score the 900 test images as an annotation of their own.
    few_shot_split = ScoredDataset('xtd', 'xtd10', 'standard', split='fewshot50_test')
    with pytest.raises(ValueError, match=r'xtd \(xtd10, standard, split fewshot50_test\)'):
        clip_benchmark_records(METRICS, [few_shot_split], 'm', 'p')
    assert comparable_entries([few_shot_split._replace(split='test')])
    first = ScoredDataset('nllb', 'crossmodal3600', 'crossmodal3600_first_caption')
    records = clip_benchmark_records(METRICS, [all_captions, first], 'm', 'p')
    assert [(r['dataset'], r['language']) for r in records] == [
        ('crossmodal3600', 'sw'), ('crossmodal3600', 'zh-Hant')]
    with pytest.raises(ValueError, match="'nllb' and 'nllb' both score the languages of "
                       'crossmodal3600, which CLIP_benchmark keeps in one file'):
        clip_benchmark_records(METRICS, [first, first], 'm', 'p')


def test_two_metrics_that_would_write_one_file_are_refused_from_what_a_test_will_score():
    """tools/test.py checked with no metrics, which write no file: two metrics of a dataset
    (CDDS's token score and pooled/) were refused once the whole test had run."""
    tokens = ScoredDataset('', 'synthetic', 'standard')
    pooled = ScoredDataset('pooled', 'synthetic', 'standard', languages=('de',))
    with pytest.raises(ValueError, match="test metrics '' and 'pooled' both score the languages "
                       'of synthetic'):
        comparable_entries([tokens, pooled])
    german = pooled
    chinese = ScoredDataset('zh', 'synthetic', 'standard', languages=('zh', 'ja'))
    other_set = ScoredDataset('x', 'xtd10', 'standard')
    assert comparable_entries([german, chinese, other_set]) == [german, chinese, other_set]
    with pytest.raises(ValueError, match="'zh' and 'ja' both score language ja of synthetic"):
        comparable_entries([german, chinese, chinese._replace(prefix='ja', languages=('ja',))])


def test_files_are_plain_json_named_as_clip_benchmark_names_them(tmp_path):
    record = {'dataset': 'xtd200', 'model': 'a/b', 'pretrained': 'ckpt.pth',
              'task': 'zeroshot_retrieval', 'metrics': {'image_retrieval_recall@1': 0.5},
              'language': 'swh_Latn'}
    [path] = write_clip_benchmark([record], tmp_path / 'cb')
    assert path.name == 'xtd200_ckpt.pth_a_b_swh_Latn_zeroshot_retrieval.json'
    assert json.loads(path.read_text(encoding='utf-8')) == record


def test_an_xmr_result_beside_the_records_is_not_taken_for_one(tmp_path):
    """xmr's own result JSON has metrics too; only files with every CLIP_benchmark field are
    its records."""
    record = {'dataset': 'xtd200', 'model': 'm', 'pretrained': 'p', 'task': 'zeroshot_retrieval',
              'metrics': {'image_retrieval_recall@1': 0.5}, 'language': 'swh_Latn'}
    [path] = write_clip_benchmark([record], tmp_path)
    save_result(tmp_path / 'result.json', EvaluationResult('m', {'xtd200/sw/t2i_R@1': 50.0}))
    assert clip_benchmark_files(tmp_path) == [path]


def test_scored_datasets_of_single_and_multi_dataset_loops():
    from types import SimpleNamespace

    from xmr.evaluation import RetrievalMetric, scored_datasets

    def loader(name, split=None):
        return SimpleNamespace(dataset=SimpleNamespace(metainfo={'dataset': name,
                                                                 'split': split}))

    xm3600 = SimpleNamespace(metrics=[
        RetrievalMetric(protocol='crossmodal3600', prefix='all'),
        RetrievalMetric(protocol='crossmodal3600_first_caption', prefix='cb')])
    single = SimpleNamespace(dataloader=loader('crossmodal3600'), evaluator=xm3600)
    assert scored_datasets(single) == [
        ScoredDataset('all', 'crossmodal3600', 'crossmodal3600'),
        ScoredDataset('cb', 'crossmodal3600', 'crossmodal3600_first_caption')]
    multi = SimpleNamespace(
        dataloaders=[loader('xtd200'), loader('xtd10', 'fewshot50_test')],
        evaluators=[SimpleNamespace(metrics=[RetrievalMetric(protocol='xtd200', prefix='x')]),
                    SimpleNamespace(metrics=[RetrievalMetric(prefix='m')])])
    assert scored_datasets(multi) == [ScoredDataset('x', 'xtd200', 'xtd200'),
                                      ScoredDataset('m', 'xtd10', 'standard',
                                                    split='fewshot50_test')]
    assert comparable_entries(scored_datasets(multi)) == [ScoredDataset('x', 'xtd200', 'xtd200')]


def test_crossmodal3600_under_the_standard_protocol_is_not_comparable():
    """The standard protocol ranks all of Crossmodal-3600's captions; CLIP_benchmark ranks the
    first caption only, so those recalls are not written as its results."""
    with pytest.raises(ValueError, match='no test metric is comparable with CLIP_benchmark'):
        clip_benchmark_records(METRICS, [ScoredDataset('nllb', 'crossmodal3600', 'standard')],
                               'm', 'p')


def test_a_metric_ranking_otherwise_than_clip_benchmark_is_not_written():
    """CLIP_benchmark counts an image a hit at k when any of its captions is in its exact top k.
    The DASD code's grouped ranking (a media's captions ranked as one group: R@5/10 as high or
    higher), an approximate index and a re-ranked shortlist give other numbers: a whole-set
    protocol with one of them is not written as CLIP_benchmark's result."""
    from types import SimpleNamespace

    from xmr.evaluation import RetrievalMetric, scored_datasets

    metrics = [RetrievalMetric(protocol='xtd200', prefix='grouped', i2t_mode='grouped'),
               RetrievalMetric(protocol='xtd200', prefix='ivf', search=dict(index='ivf')),
               RetrievalMetric(protocol='xtd200', prefix='rerank', scoring='tokens_rerank')]
    loop = SimpleNamespace(dataloader=SimpleNamespace(dataset=SimpleNamespace(
        metainfo={'dataset': 'xtd200'})), evaluator=SimpleNamespace(metrics=metrics))
    scored = scored_datasets(loop)
    assert [s.ranking for s in scored] == [
        "i2t_mode='grouped'", "search index 'ivf'", "scoring='tokens_rerank'"]
    recalls = {f'{s.prefix}/sw/{d}_R@1': 50.0 for s in scored for d in ('t2i', 'i2t')}
    with pytest.raises(ValueError, match=r"grouped \(xtd200, xtd200, i2t_mode='grouped'\), "
                                         r"ivf \(xtd200, xtd200, search index 'ivf'\)"):
        clip_benchmark_records(recalls, scored, 'm', 'p')


def test_a_json_file_python_cannot_read_beside_the_records_is_not_taken_for_one(tmp_path):
    """A number too long or arrays nested too deep raised a bare ValueError or RecursionError,
    which stopped tools/test.py's check of the folder; such a file is no record, and is kept."""
    record = {'dataset': 'xtd200', 'model': 'm', 'pretrained': 'p', 'task': 'zeroshot_retrieval',
              'metrics': {'image_retrieval_recall@1': 0.5}, 'language': 'swh_Latn'}
    [path] = write_clip_benchmark([record], tmp_path)
    (tmp_path / 'long.json').write_text('{"n": ' + '7' * 5000 + '}', encoding='utf-8')
    (tmp_path / 'deep.json').write_text('[' * 100_000 + ']' * 100_000, encoding='utf-8')
    assert clip_benchmark_files(tmp_path) == [path]


def test_each_whole_set_protocol_is_written_under_clip_benchmarks_dataset_name():
    scored = [ScoredDataset('coco', 'mscoco', 'coco_5k'),
              ScoredDataset('video', 'msrvtt', 'text_to_video')]
    metrics = {'coco/en/t2i_R@1': 30.0, 'coco/en/i2t_R@1': 40.0, 'video/en/t2i_R@1': 20.0}
    records = clip_benchmark_records(metrics, scored, 'm', 'p')
    assert [(r['dataset'], r['language'], r['metrics']) for r in records] == [
        ('mscoco_captions', 'en', {'image_retrieval_recall@1': 0.3,
                                   'text_retrieval_recall@1': 0.4}),
        ('msrvtt', 'en', {'image_retrieval_recall@1': 0.2})]


def test_recalls_at_10_follow_recalls_at_5_as_clip_benchmark_orders_them():
    metrics = {f'x/de/{d}_R@{k}': float(k) for k in (10, 5, 1) for d in ('i2t', 't2i')}
    [record] = clip_benchmark_records(metrics, [ScoredDataset('x', 'xtd200', 'xtd200')], 'm', 'p')
    assert list(record['metrics'].items()) == [
        ('image_retrieval_recall@1', 0.01), ('text_retrieval_recall@1', 0.01),
        ('image_retrieval_recall@5', 0.05), ('text_retrieval_recall@5', 0.05),
        ('image_retrieval_recall@10', 0.1), ('text_retrieval_recall@10', 0.1)]


def test_an_unprefixed_metric_takes_no_key_of_a_prefixed_one():
    """Without a prefix, a metric's keys are ``{lang}/{statistic}``: another metric's
    ``pooled/sw/t2i_R@1`` and its summary ``pooled/t2i_R@1_sum`` are not its languages."""
    scored = [ScoredDataset('', 'xtd200', 'xtd200'),
              ScoredDataset('pooled', 'flickr30k_200', 'flickr30k_200')]
    metrics = {'sw/t2i_R@1': 50.0, 't2i_R@1_sum': 50.0, 'pooled/sw/t2i_R@1': 25.0,
               'pooled/t2i_R@1_sum': 25.0}
    records = clip_benchmark_records(metrics, scored, 'm', 'p')
    assert [(r['dataset'], r['language'], r['metrics']) for r in records] == [
        ('xtd200', 'swh_Latn', {'image_retrieval_recall@1': 0.5}),
        ('flickr30k-200', 'swh_Latn', {'image_retrieval_recall@1': 0.25})]


def test_two_datasets_clip_benchmark_names_alike_are_refused_before_the_test():
    """They were refused once the whole test had run, when the files were named."""
    xtd10 = ScoredDataset('a', 'xtd10', 'standard', languages=('de', 'ja'))
    alike = ScoredDataset('b', 'multilingual_mscoco_captions', 'standard', languages=('de',))
    with pytest.raises(ValueError, match=re.escape(
            "test metrics 'a' and 'b' both score language de of xtd10 and "
            'multilingual_mscoco_captions (both multilingual_mscoco_captions to CLIP_benchmark), '
            'which CLIP_benchmark keeps in one file')):
        comparable_entries([xtd10, alike])
    assert comparable_entries([xtd10, alike._replace(dataset='mscoco')])


def test_two_languages_of_one_release_code_are_refused_naming_the_file():
    """XTD10's release calls Japanese 'jp': a dataset CLIP_benchmark names alike whose own
    language is 'jp' scores another language, and writes the same file."""
    scored = [ScoredDataset('a', 'xtd10', 'standard', languages=('ja',)),
              ScoredDataset('b', 'multilingual_mscoco_captions', 'standard', languages=('jp',))]
    assert comparable_entries(scored) == scored
    metrics = {'a/ja/t2i_R@1': 50.0, 'b/jp/t2i_R@1': 40.0}
    with pytest.raises(ValueError, match="test metrics 'a' and 'b' both give "
                       'multilingual_mscoco_captions_p_m_jp_zeroshot_retrieval.json; keep one '
                       'metric per dataset and language'):
        clip_benchmark_records(metrics, scored, 'm', 'p')


def test_scored_datasets_name_a_dataset_without_metainfo_by_its_class_and_skip_other_metrics():
    class PlainSet:
        pass

    dumper = SimpleNamespace(prefix='dump')  # a metric of no retrieval protocol
    loop = SimpleNamespace(dataloader=SimpleNamespace(dataset=PlainSet()),
                           evaluator=SimpleNamespace(metrics=[
                               dumper, RetrievalMetric(prefix='sw', languages=['swh_Latn'])]))
    assert scored_datasets(loop) == [
        ScoredDataset('sw', 'PlainSet', 'standard', languages=('sw',))]


def test_a_file_without_every_field_a_list_or_not_json_is_not_a_record(tmp_path):
    record = {'dataset': 'xtd200', 'model': 'm', 'pretrained': 'p', 'task': 'zeroshot_retrieval',
              'metrics': {'image_retrieval_recall@1': 0.5}, 'language': 'swh_Latn'}
    paths = write_clip_benchmark([record, dict(record, language='fra_Latn'),
                                  dict(record, language='deu_Latn')], tmp_path)
    no_language = {key: value for key, value in record.items() if key != 'language'}
    (tmp_path / 'no_language.json').write_text(json.dumps(no_language), encoding='utf-8')
    (tmp_path / 'list.json').write_text(json.dumps([record]), encoding='utf-8')
    (tmp_path / 'record.txt').write_text(json.dumps(record), encoding='utf-8')
    assert clip_benchmark_files(tmp_path) == sorted(paths)


def test_a_record_file_is_one_line_of_utf8_json():
    record = {'dataset': 'xtd200', 'model': 'modèle', 'pretrained': 'p',
              'task': 'zeroshot_retrieval', 'metrics': {'image_retrieval_recall@1': 0.5},
              'language': 'swh_Latn'}
    assert clip_benchmark_texts([record], 'out') == {
        Path('out/xtd200_p_modèle_swh_Latn_zeroshot_retrieval.json'):
        '{"dataset": "xtd200", "model": "modèle", "pretrained": "p", '
        '"task": "zeroshot_retrieval", "metrics": {"image_retrieval_recall@1": 0.5}, '
        '"language": "swh_Latn"}\n'}
