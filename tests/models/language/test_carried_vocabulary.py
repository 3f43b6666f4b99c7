"""A checkpoint carries the SentencePiece vocabulary its model learned; models built to load it
read that vocabulary, not one learned again."""
from __future__ import annotations

import copy

import pytest
import torch
from mmengine.config import Config

from tests.conftest import CORPUS, tiny_retriever_cfg
from xmr.apis import encode_texts, init_retriever
from xmr.models.language.carried_vocabulary import carried_model, read_vocabulary_from
from xmr.models.language.tokenizers import SentencePieceTokenizer
from xmr.registry import MODELS

#: Captions of the same scripts in another order and count: SentencePiece learns other pieces
#: from them (what a moved, edited or re-exported corpus, or another sentencepiece version, does).
OTHER_CORPUS = [caption + ' ' + caption[::-1] for caption in CORPUS[::-1]] * 7
QUERIES = ['zwei rote Kreise oben', '一个蓝色的正方形']


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """A model whose vocabulary was learned from CORPUS, its trained checkpoint, the model."""
    root = tmp_path_factory.mktemp('carried')
    torch.manual_seed(0)
    model = MODELS.build(tiny_retriever_cfg()).eval()
    with torch.no_grad():
        for parameter in model.language_branch.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    torch.save({'meta': {'iter': 3}, 'state_dict': model.state_dict()}, root / 'trained.pth')
    return root, root / 'trained.pth', model


def config_learning_from(root, corpus) -> str:
    cfg = tiny_retriever_cfg()
    cfg['language_branch']['tokenizer']['corpus'] = corpus
    path = root / f'learns_{abs(hash(str(corpus)))}.py'
    Config(dict(model=cfg)).dump(path)
    return str(path)


def test_the_checkpoint_carries_the_learned_model_byte_for_byte(trained):
    _, checkpoint, model = trained
    assert carried_model(checkpoint) == model.language_branch.tokenizer.vocabulary()


def test_a_model_loads_where_its_corpus_learns_another_vocabulary(trained):
    """Before, the vocabulary learned again from OTHER_CORPUS was refused (its digest differs
    from the checkpoint's): the trained model could not be loaded at all."""
    root, checkpoint, reference = trained
    other = SentencePieceTokenizer(corpus=OTHER_CORPUS, vocab_size=48, max_length=32)
    ids = reference.language_branch.tokenizer.encode(QUERIES[0])
    assert other.encode(QUERIES[0]) != ids  # relearning would read other ids
    model = init_retriever(config_learning_from(root, OTHER_CORPUS), checkpoint)
    assert model.language_branch.tokenizer.encode(QUERIES[0]) == ids
    for lang, text in zip(('de', 'zh'), QUERIES):
        torch.testing.assert_close(encode_texts(model, [text], lang),
                                   encode_texts(reference, [text], lang), rtol=0, atol=0)


def test_a_model_loads_where_its_corpus_is_not(trained):
    root, checkpoint, reference = trained
    model = init_retriever(config_learning_from(root, str(root / 'moved' / 'captions.txt')),
                           checkpoint)
    assert model.language_branch.tokenizer.vocabulary() == \
        reference.language_branch.tokenizer.vocabulary()
    assert model.cfg.model.language_branch.tokenizer.model_file == str(checkpoint)


def test_only_a_tokenizer_without_its_own_model_file_takes_the_carried_vocabulary(trained,
                                                                                 tmp_path):
    _, checkpoint, reference = trained
    learning = tiny_retriever_cfg()
    assert read_vocabulary_from(learning, checkpoint)
    assert learning['language_branch']['tokenizer']['model_file'] == str(checkpoint)
    assert 'corpus' not in learning['language_branch']['tokenizer']
    assert learning['language_branch']['tokenizer']['max_length'] == 32

    model_file = tmp_path / 'own.model'
    model_file.write_bytes(reference.language_branch.tokenizer.vocabulary())
    given = tiny_retriever_cfg()
    given['language_branch']['tokenizer'].update(model_file=str(model_file))
    before = copy.deepcopy(given)
    assert not read_vocabulary_from(given, checkpoint)
    assert given == before

    dumped = tiny_retriever_cfg()  # a run's dump names the checkpoint it read: this one reads
    dumped['language_branch']['tokenizer'].update(model_file=str(tmp_path / 'removed.pth'))
    assert read_vocabulary_from(dumped, checkpoint)
    assert dumped['language_branch']['tokenizer']['model_file'] == str(checkpoint)

    bare = tmp_path / 'bare.pth'  # a checkpoint written before checkpoints carried it
    state = reference.state_dict()
    state['_extra_state'] = torch.tensor(list(b'{"languages": ["de", "zh"]}'), dtype=torch.uint8)
    torch.save({'state_dict': state}, bare)
    learning = tiny_retriever_cfg()
    assert not read_vocabulary_from(learning, bare)
    assert learning['language_branch']['tokenizer']['corpus'] == CORPUS * 20


def test_model_file_names_a_checkpoint_that_carries_none(trained, tmp_path):
    _, checkpoint, reference = trained
    assert SentencePieceTokenizer(model_file=str(checkpoint), max_length=32).encode(
        QUERIES[1]) == reference.language_branch.tokenizer.encode(QUERIES[1])
    bare = tmp_path / 'bare.pth'
    torch.save({'state_dict': {'w': torch.zeros(1)}}, bare)
    with pytest.raises(ValueError, match=f'model_file {bare}: a checkpoint that carries no '
                       'SentencePiece model'):
        SentencePieceTokenizer(model_file=str(bare))


def test_the_carried_model_is_read_from_every_layout_of_a_checkpoint(trained, tmp_path):
    """A bare state dict, a DDP one (``module.`` keys), and a file written again at the same
    path (read anew, not from the cache of the earlier file)."""
    _, _, model = trained
    vocabulary = model.language_branch.tokenizer.vocabulary()
    bare = tmp_path / 'bare_state.pth'
    torch.save(model.state_dict(), bare)
    assert carried_model(bare) == vocabulary
    wrapped = tmp_path / 'ddp.pth'
    torch.save({'state_dict': {f'module.{k}': v for k, v in model.state_dict().items()}},
               wrapped)
    assert carried_model(wrapped) == vocabulary
    torch.save({'state_dict': {'w': torch.zeros(1)}}, bare)  # the same path, no facts now
    assert carried_model(bare) is None


def test_which_configs_take_the_carried_vocabulary(trained, tmp_path):
    """A model_file naming a checkpoint (a zip: the one a dumped config read) still counts as
    learned, a tokenizer type given as a class is read as its name is, and an unreadable file
    leaves the config as it is (the load of its weights names what is wrong)."""
    _, checkpoint, _ = trained
    other = tmp_path / 'other.pth'
    other.write_bytes(checkpoint.read_bytes())
    dumped = tiny_retriever_cfg()
    dumped['language_branch']['tokenizer'].update(model_file=str(other))
    assert read_vocabulary_from(dumped, checkpoint)
    assert dumped['language_branch']['tokenizer']['model_file'] == str(checkpoint)

    by_class = tiny_retriever_cfg()
    by_class['language_branch']['tokenizer']['type'] = SentencePieceTokenizer
    assert read_vocabulary_from(by_class, checkpoint)
    assert by_class['language_branch']['tokenizer']['model_file'] == str(checkpoint)

    damaged = tmp_path / 'damaged.pth'
    damaged.write_bytes(checkpoint.read_bytes()[:200])
    learning = tiny_retriever_cfg()
    before = copy.deepcopy(learning)
    assert not read_vocabulary_from(learning, damaged)
    assert learning == before
