"""RecordStore: an annotation's records packed in one buffer, decoded at each access."""
from __future__ import annotations

import gc
import pickle
import tracemalloc
from functools import partial

import numpy as np
import pytest

from xmr.datasets import (
    Annotation,
    AnnotationError,
    CaptionPairDataset,
    MediaRecord,
    RecordStore,
    dump_annotation,
    load_annotation,
)

RECORDS = [
    MediaRecord('a', 'a.jpg', {'en': ['a dog'], 'vi': ['một con chó']}, {'ja': ['犬']}),
    MediaRecord('b', None, {'en': ['two cats', 'cats'], 'vi': ['hai con mèo', 'mèo']},
                back_translations={'vi': ['two cats', 'cats']}),
    MediaRecord('c', 'c/d.jpg', {'en': ['x'], 'vi': ['y']}),
]


def test_the_store_gives_back_each_record_in_order():
    store = RecordStore(RECORDS)
    assert len(store) == 3
    assert list(store) == RECORDS
    assert [store[i] for i in range(3)] == RECORDS
    assert store[-1] == RECORDS[2] and store[-3] == RECORDS[0]
    assert store[1:] == RECORDS[1:] and store[::-2] == RECORDS[::-2]
    assert store.index(RECORDS[1]) == 1 and RECORDS[2] in store
    for index in (3, -4):
        with pytest.raises(IndexError, match=f'record {index} is out of range for 3 records'):
            store[index]
    assert len(RecordStore([])) == 0 and list(RecordStore([])) == []


def test_a_record_read_from_the_store_is_a_copy():
    store = RecordStore(RECORDS)
    record = store[0]
    record.captions['en'].append('changed')
    record.media_id = 'z'
    assert store[0] == RECORDS[0]


def test_the_packed_annotation_equals_the_loaded_one_and_is_validated_as_it(tmp_path):
    ann = Annotation(dataset='demo', split='train', media_type='image', languages=['en', 'vi'],
                     source_lang='en', translation_langs=['ja'],
                     items=[RECORDS[0], MediaRecord('c', 'c/d.jpg', {'en': ['x'], 'vi': ['y']},
                                                    {'ja': ['z']})])
    dump_annotation(ann, tmp_path / 'ann.json')
    packed = load_annotation(tmp_path / 'ann.json', items=RecordStore)
    assert isinstance(packed.items, RecordStore)
    assert packed.items[:] == load_annotation(tmp_path / 'ann.json').items
    assert packed.header_json() == ann.header_json()
    (tmp_path / 'bad.json').write_text(
        (tmp_path / 'ann.json').read_text(encoding='utf-8').replace('"a.jpg"', '""'),
        encoding='utf-8')
    with pytest.raises(AnnotationError, match=r'bad\.json: item 0: media_path must be'):
        load_annotation(tmp_path / 'bad.json', items=RecordStore)


def _traced(build):
    """``(held, peak, result)``: the bytes Python and numpy still hold after ``build()`` returns
    (its result alive) and the most they held meanwhile, over what they held before."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = build()
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
        return held - before, peak - before, result
    finally:
        tracemalloc.stop()


def _write_records(path, languages):
    """5,000 records with an English caption and its translation into each of ``languages``."""
    items = [MediaRecord(f'{i:06d}', f'{i:06d}.jpg', {'en': [f'a photo of dog {i}']},
                         {lang: [f'{lang}: a photo of dog {i}'] for lang in languages})
             for i in range(5000)]
    dump_annotation(Annotation(dataset='demo', split='train', media_type='image',
                               languages=['en'], source_lang='en',
                               translation_langs=list(languages), items=items), path)
    return items


def test_a_dataset_holds_its_records_packed_not_as_objects(tmp_path):
    """Each record of the file is a handful of dicts, lists and strings as objects (about
    1 kB here); packed, the pickle's bytes (about 0.2 kB). A dataset of 5,000 records must hold
    them packed: less than half the objects' memory."""
    _write_records(tmp_path / 'ann.json', ['de', 'fr'])

    def build():
        return CaptionPairDataset(tmp_path / 'ann.json', data_root=tmp_path, with_media=False,
                                  transform=dict(type='MediaTransform', backbone=None, size=8))

    build()  # the imports and registries' first use, which hold memory of their own
    as_objects, _, _ = _traced(lambda: load_annotation(tmp_path / 'ann.json'))
    packed, _, dataset = _traced(build)
    assert isinstance(dataset.records, RecordStore)
    assert packed < as_objects / 2, (packed, as_objects)
    assert dataset[9999]['target_text'] == 'fr: a photo of dog 4999'


def test_loading_packed_never_holds_every_record_as_objects(tmp_path):
    """The items are packed as they are decoded: the load's peak holds the file's text and the
    packed bytes, well under half of what a load into a list peaks at."""
    items = _write_records(tmp_path / 'ann.json', ['de'])
    peaks = {}
    for name, container in (('list', list), ('packed', RecordStore)):
        _, peaks[name], loaded = _traced(
            partial(load_annotation, tmp_path / 'ann.json', items=container))
        assert loaded.items[4999] == items[4999]
    assert peaks['packed'] < peaks['list'] / 2, peaks


def test_offsets_are_int64_bounds_of_each_records_bytes():
    store = RecordStore(RECORDS)
    assert store.offsets.dtype == np.int64 and store.buffer.dtype == np.uint8
    sizes = [len(pickle.dumps(tuple(vars(record).values()), protocol=pickle.HIGHEST_PROTOCOL))
             for record in RECORDS]
    assert store.offsets.tolist() == [0, *np.cumsum(sizes).tolist()]
    assert store.buffer.size == sum(sizes)


def test_the_buffer_and_offsets_are_read_only():
    store = RecordStore(RECORDS)
    for array in (store.buffer, store.offsets):
        with pytest.raises(ValueError, match='read-only'):
            array[0] = 1
    assert store[0] == RECORDS[0]
