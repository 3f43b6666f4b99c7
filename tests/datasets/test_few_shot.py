"""PECTVLM's seeded few-shot protocols: the permutation, the subsample, the command line."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from xmr.datasets.annotation import Annotation, MediaRecord, dump_annotation, load_annotation
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.few_shot import (
    few_shot_splits,
    is_few_shot_split,
    main,
    seeded_permutation,
    subsample,
)


def _train(count: int = 10) -> Annotation:
    return Annotation(
        dataset='multi30k', split='train', media_type='image', languages=['en', 'de'],
        source_lang='en', translation_langs=['de'], back_translation_langs=['de'],
        items=[MediaRecord(f'{i}', f'{i}.jpg', {'en': [f'en {i}'], 'de': [f'de {i}']},
                           {'de': [f'mt {i}']}, {'de': [f'bt {i}']}) for i in range(count)])


def test_the_permutation_is_pectvlms_seed_42_draw():
    # torch.randperm(n, generator=Generator().manual_seed(42)): the authors' split indices.
    assert seeded_permutation(1000, 42)[:6] == [542, 618, 816, 68, 94, 215]
    assert seeded_permutation(10, 42) == [2, 6, 1, 8, 4, 5, 0, 9, 3, 7]
    assert seeded_permutation(10, 0) != seeded_permutation(10, 42)


def test_subsample_keeps_the_first_n_of_the_permutation_with_all_their_texts():
    part = subsample(_train(), 3, seed=42)
    assert [r.media_id for r in part.items] == ['2', '6', '1']
    assert part.split == 'train_3shot_seed42'
    # A subset's scores are not the whole split's (no CLIP_benchmark export as the split).
    assert is_few_shot_split(part.split) and is_few_shot_split('test_2016_100shot')
    assert is_few_shot_split('fewshot50_seed7_test') and is_few_shot_split('fewshot50_val')
    assert not is_few_shot_split('train') and not is_few_shot_split('test_2016_flickr')
    assert part.items[0].translations == {'de': ['mt 2']}
    assert part.items[0].back_translations == {'de': ['bt 2']}
    part.validate()
    with pytest.raises(ConversionError, match='cannot keep 11 of 10 items'):
        subsample(_train(), 11)


def test_command_line_writes_both_protocols(tmp_path, capsys):
    dump_annotation(_train(), tmp_path / 'train.json')
    main([str(tmp_path / 'train.json'), '--protocol', 'subsample', '--shots', '4',
          '--out-dir', str(tmp_path / 'out')])
    # Without --seed, PECTVLM's 42: the first of seeded_permutation(10, 42).
    assert [r.media_id for r in load_annotation(
        tmp_path / 'out' / 'multi30k_train_4shot_seed42.json').items] == ['2', '6', '1', '8']
    main([str(tmp_path / 'train.json'), '--protocol', 'split', '--shots', '2',
          '--out-dir', str(tmp_path / 'out')])
    sizes = [len(load_annotation(
        tmp_path / 'out' / f'multi30k_train_fewshot2_seed42_{part}.json').items)
        for part in ('train', 'val', 'test')]
    assert sizes == [2, 2, 6]
    with pytest.raises(SystemExit, match='few-shot size 5 must be positive and leave test'):
        main([str(tmp_path / 'train.json'), '--protocol', 'split', '--shots', '5',
              '--out-dir', str(tmp_path / 'out')])


def test_split_deals_train_val_and_test_from_one_permutation_without_overlap():
    # seeded_permutation(10, 42) == [2, 6, 1, 8, 4, 5, 0, 9, 3, 7] (the test above).
    parts = few_shot_splits(_train(), 2, seed=42)
    ids = {part: [r.media_id for r in ann.items] for part, ann in parts.items()}
    assert ids == {'train': ['2', '6'], 'val': ['1', '8'], 'test': ['4', '5', '0', '9', '3', '7']}
    assert [ann.split for ann in parts.values()] == [
        'train_fewshot2_seed42_train', 'train_fewshot2_seed42_val', 'train_fewshot2_seed42_test']
    # XTD10's evaluation set, the protocol's own source, keeps the names its configs read.
    assert few_shot_splits(replace(_train(), split='test'), 2)['val'].split == 'fewshot2_seed42_val'


def test_subsample_may_keep_every_item_but_a_split_must_leave_test_items():
    assert len(subsample(_train(), 10).items) == 10
    assert len(few_shot_splits(_train(), 4)['test'].items) == 2
    with pytest.raises(ConversionError, match='few-shot size 5 must be positive'):
        few_shot_splits(_train(), 5)
    with pytest.raises(ConversionError, match='few-shot size 0 must be positive'):
        few_shot_splits(_train(), 0)
    with pytest.raises(ConversionError, match='cannot keep 0 of 10 items'):
        subsample(_train(), 0)


def test_without_a_seed_both_protocols_use_pectvlms_42():
    assert seeded_permutation(10) == [2, 6, 1, 8, 4, 5, 0, 9, 3, 7]
    assert [r.media_id for r in subsample(_train(), 3).items] == ['2', '6', '1']
    assert [r.media_id for r in few_shot_splits(_train(), 2)['val'].items] == ['1', '8']


def test_a_rerun_keeps_an_output_holding_translations_attached_since(tmp_path):
    """Attaching French to the few-shot file, then running the split again, dropped it."""
    dump_annotation(_train(), tmp_path / 'train.json')
    run = [str(tmp_path / 'train.json'), '--protocol', 'subsample', '--shots', '4', '--out-dir',
           str(tmp_path / 'out')]
    main(run)
    out = tmp_path / 'out' / 'multi30k_train_4shot_seed42.json'
    few = load_annotation(out)
    attached = replace(few, translation_langs=['de', 'fr'], items=[
        replace(item, translations={**item.translations, 'fr': ['fr']}) for item in few.items])
    dump_annotation(attached, out)
    kept = out.read_bytes()
    with pytest.raises(SystemExit, match=re.escape(
            f"{out}: holds texts attached after its conversion (translation_langs ['fr'])")):
        main(run)
    assert out.read_bytes() == kept


def test_out_dir_replaces_an_earlier_split_of_the_dataset_alone(tmp_path):
    """A test result at <out-dir>/<dataset>_<split>.json was written over by the split."""
    dump_annotation(_train(), tmp_path / 'train.json')
    run = [str(tmp_path / 'train.json'), '--protocol', 'split', '--shots', '2', '--out-dir',
           str(tmp_path)]
    result = tmp_path / 'multi30k_train_fewshot2_seed42_val.json'
    result.write_text('{"metrics": {"mAR": 50.0}}')
    with pytest.raises(SystemExit, match=re.escape(
            f'error: {result} (--out-dir): exists and is no multi30k annotation a converter '
            'wrote; it is kept')):
        main(run)
    assert result.read_text() == '{"metrics": {"mAR": 50.0}}'
    assert not (tmp_path / 'multi30k_train_fewshot2_seed42_train.json').exists()
    result.unlink()
    main(run)
    main(run)  # its own earlier output: replaced
    assert len(load_annotation(result).items) == 2


def test_draws_from_other_splits_are_named_apart_and_kept_apart(tmp_path, capsys):
    """A draw of Multi30K's test_5captions wrote multi30k_fewshot2_seed42_test.json over the
    draw of its test split, in place, without a word (a run replaces its own dataset's
    outputs); a cut of a few-shot part took the whole set's names."""
    for split in ('test', 'test_5captions', 'fewshot2_seed42_test'):
        dump_annotation(replace(_train(), split=split), tmp_path / f'{split}.json')
        main([str(tmp_path / f'{split}.json'), '--protocol', 'split', '--shots', '2',
              '--out-dir', str(tmp_path / 'out')])
    assert sorted(p.name for p in (tmp_path / 'out').iterdir()) == sorted(
        f'multi30k_{source}fewshot2_seed42_{part}.json'
        for source in ('', 'test_5captions_', 'fewshot2_seed42_test_')
        for part in ('train', 'val', 'test'))
    assert is_few_shot_split('test_5captions_fewshot2_seed42_val')


def test_draws_that_differ_only_in_seed_are_named_apart_and_kept_apart(tmp_path):
    """Both seeds wrote ``multi30k_fewshot2_val.json`` with split ``fewshot2_val``: the second
    draw was refused beside the first (or replaced it in another run), and what is keyed on the
    split (a feature cache's metainfo, a result's dataset row) could not tell them apart."""
    from xmr.datasets.retrieval import RetrievalDataset

    dump_annotation(_train(), tmp_path / 'train.json')
    for seed in ('42', '7'):
        main([str(tmp_path / 'train.json'), '--protocol', 'split', '--shots', '2', '--seed', seed,
              '--out-dir', str(tmp_path / 'out')])
        main([str(tmp_path / 'train.json'), '--protocol', 'subsample', '--shots', '2',
              '--seed', seed, '--out-dir', str(tmp_path / 'out')])
    assert sorted(p.name for p in (tmp_path / 'out').iterdir()) == sorted(
        [f'multi30k_train_fewshot2_seed{seed}_{part}.json' for seed in (42, 7)
         for part in ('train', 'val', 'test')]
        + ['multi30k_train_2shot_seed42.json', 'multi30k_train_2shot_seed7.json'])
    # seeded_permutation(10, 7) is another order than seed 42's [2, 6, 1, 8, ...].
    assert seeded_permutation(10, 7)[:2] != [2, 6]
    metainfo = {seed: RetrievalDataset(
        ann_file=str(tmp_path / 'out' / f'multi30k_train_fewshot2_seed{seed}_val.json'),
        with_media=False, test_mode=True).metainfo for seed in (42, 7)}
    # What a feature cache's key holds of the dataset (every field but the path).
    assert [metainfo[seed]['split'] for seed in (42, 7)] == ['train_fewshot2_seed42_val',
                                                             'train_fewshot2_seed7_val']
    # The number of shots is in the name too.
    assert subsample(_train(), 3, seed=7).split != subsample(_train(), 2, seed=7).split
