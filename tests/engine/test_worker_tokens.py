"""Tokenisation in the dataloader workers: the same tokens as the preprocessor's, made there."""
from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from tests.engine.test_loops import PHASES, loader, make_cfg, train
from xmr.datasets import retrieval_collate
from xmr.datasets.synthetic import SyntheticPairDataset
from xmr.engine.worker_tokens import TokenizingCollate, tokenize_in_workers

TEXT_KEYS = ('source_text', 'target_text', 'lang')


def text_items(count: int = 8) -> list[dict]:
    dataset = SyntheticPairDataset(num_scenes=count, languages=['de', 'zh'], image_size=16)
    items = [{key: dataset[i][key] for key in TEXT_KEYS} for i in range(count)]
    for index, item in enumerate(items):
        item['captions'] = {'en': [item['source_text']], item['lang']: [item['target_text']]}
        item['index'] = index
    return items


def assert_same_inputs(got, expected) -> None:
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, dict) and 'input_ids' in value:
            for part in value:
                assert torch.equal(got[key][part], value[part]), (key, part)
        elif key == 'caption_tokens':
            for lang, (tokens, owner) in value.items():
                assert torch.equal(got[key][lang][0]['input_ids'], tokens['input_ids'])
                assert torch.equal(got[key][lang][1], owner)
        else:
            assert got[key] == value, key


def test_workers_tokenise_and_the_preprocessor_takes_their_tokens(tiny_retriever):
    preprocessor = tiny_retriever.data_preprocessor
    items = text_items()
    workers = DataLoader(items, batch_size=4, num_workers=2, collate_fn=retrieval_collate)
    assert tokenize_in_workers(workers, tiny_retriever)
    assert isinstance(workers.collate_fn, TokenizingCollate)
    batches = list(workers)  # the workers are forked with the real tokenize
    preprocessor.tokenize = lambda data: (_ for _ in ()).throw(AssertionError('main process'))
    got = [preprocessor(batch) for batch in batches]
    del preprocessor.tokenize
    expected = [preprocessor(retrieval_collate(items[i:i + 4])) for i in (0, 4)]
    for mine, theirs in zip(got, expected, strict=True):
        assert_same_inputs(mine, theirs)


def test_spawned_workers_tokenise_with_a_hugging_face_tokenizer_as_the_main_process(
        tiny_retriever, shared_data):
    """Under spawn (macOS's start method; forkserver, Python 3.14's on Linux, pickles alike)
    the preprocessor goes to each worker by pickle: an HFTokenizer held a function defined
    inside its loader, which pickle refuses, and no loader of a run could start."""
    from xmr.models.language.tokenizers import HFTokenizer

    preprocessor = tiny_retriever.data_preprocessor
    preprocessor.target_tokenizer = HFTokenizer(
        tokenizer_file=str(shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json'))
    items = text_items()
    workers = DataLoader(items, batch_size=4, num_workers=1, collate_fn=retrieval_collate,
                         multiprocessing_context='spawn')
    assert tokenize_in_workers(workers, tiny_retriever)
    batches = list(workers)
    preprocessor.tokenize = lambda data: (_ for _ in ()).throw(AssertionError('main process'))
    got = [preprocessor(batch) for batch in batches]
    del preprocessor.tokenize
    expected = [preprocessor(retrieval_collate(items[i:i + 4])) for i in (0, 4)]
    for mine, theirs in zip(got, expected, strict=True):
        assert_same_inputs(mine, theirs)


def test_loaders_without_workers_or_models_without_tokenisation_stay_as_they_are(
        tiny_retriever):
    alone = DataLoader(text_items(), batch_size=4, num_workers=0, collate_fn=retrieval_collate)
    assert not tokenize_in_workers(alone, tiny_retriever)
    assert alone.collate_fn is retrieval_collate
    workers = DataLoader(text_items(), batch_size=4, num_workers=2, collate_fn=retrieval_collate)
    assert not tokenize_in_workers(workers, torch.nn.Linear(2, 2))
    assert tokenize_in_workers(workers, tiny_retriever)
    wrapped = workers.collate_fn
    assert tokenize_in_workers(workers, tiny_retriever) and workers.collate_fn is wrapped


def test_training_with_tokenising_workers_repeats_the_run_without(tmp_path):
    phases = [dict(phase, dataloader=dict(phase['dataloader'], num_workers=2))
              if 'dataloader' in phase else phase for phase in PHASES]
    _, alone = train(make_cfg(tmp_path / 'alone'))
    cfg = make_cfg(tmp_path / 'workers', phases=phases)
    cfg.train_dataloader = dict(loader(cfg.train_dataloader.dataset), num_workers=2)
    runner, with_workers = train(cfg)
    assert isinstance(runner.train_loop.dataloader.collate_fn, TokenizingCollate)
    assert [r['losses'] for r in with_workers] == [r['losses'] for r in alone]


def test_a_loader_with_one_worker_tokenises_there(tiny_retriever):
    one = DataLoader(text_items(), batch_size=4, num_workers=1, collate_fn=retrieval_collate)
    assert tokenize_in_workers(one, tiny_retriever)
    assert isinstance(one.collate_fn, TokenizingCollate)


def test_a_wrapped_model_s_preprocessor_tokenises(tiny_retriever):
    # The loops pass runner.model, a DDP wrapper under torchrun.
    workers = DataLoader(text_items(), batch_size=4, num_workers=2, collate_fn=retrieval_collate)
    assert tokenize_in_workers(workers, torch.nn.DataParallel(tiny_retriever))
    assert workers.collate_fn.tokenize == tiny_retriever.data_preprocessor.tokenize
