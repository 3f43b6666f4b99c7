import pytest
import torch

from tests.conftest import CORPUS
from xmr.models.language.tokenizers import (
    HFTokenizer,
    OpenCLIPTokenizer,
    SentencePieceTokenizer,
    pad_batch,
)


def test_pad_batch_pads_to_longest_and_marks_eos():
    batch = pad_batch([[5, 6, 7], [8, 9], [1, 2, 3, 4]], pad_id=0)
    assert batch['input_ids'].tolist() == [[5, 6, 7, 0], [8, 9, 0, 0], [1, 2, 3, 4]]
    assert batch['attention_mask'].sum(1).tolist() == [3, 2, 4]
    assert batch['eos_index'].tolist() == [2, 1, 3]


def test_truncation_keeps_the_end_token():
    tokenizer = OpenCLIPTokenizer(max_length=5)
    ids = tokenizer(['one two three four five six seven'])['input_ids'][0].tolist()
    assert len(ids) == 5 and ids[0] == 49406 and ids[-1] == 49407


def test_overlong_captions_are_counted_and_reported_once(monkeypatch):
    from xmr.models.language import tokenizers

    logged = []
    monkeypatch.setattr(tokenizers, 'print_log', lambda message, **_: logged.append(message))
    tokenizer = OpenCLIPTokenizer(max_length=5)
    tokenizer(['one two', 'one two three four five six seven'])  # 2 + 7 words + 2 specials
    tokenizer(['one two three', 'a b c d e f'])  # 5 tokens fit
    assert tokenizer.truncated == 2
    assert logged == ['OpenCLIPTokenizer: a caption of 9 tokens is longer than max_length=5 and '
                      'is truncated (its end token kept); later ones are counted in '
                      'tokenizer.truncated, not reported again']


def test_sentencepiece_trains_writes_and_reloads(tmp_path):
    path = tmp_path / 'spm' / 'target.model'
    trained = SentencePieceTokenizer(model_file=str(path), corpus=CORPUS * 10, vocab_size=64)
    assert path.is_file()
    reloaded = SentencePieceTokenizer(model_file=str(path))
    texts = ['zwei rote Kreise', '一个蓝色的圆']
    assert torch.equal(trained(texts)['input_ids'], reloaded(texts)['input_ids'])
    ids = trained(texts)['input_ids']
    assert ids[0, 0] == 2 and ids[0, trained(texts)['eos_index'][0]] == 3


def test_sentencepiece_bad_input_fails_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match='nothing.model'):
        SentencePieceTokenizer(model_file=str(tmp_path / 'nothing.model'))
    with pytest.raises(ValueError, match='vocab_size 20 is smaller than the 37 distinct'):
        SentencePieceTokenizer(corpus=CORPUS, vocab_size=20)


def test_hf_tokenizer_file_reads_the_real_xlmr_tokenizer(shared_data):
    tokenizer = HFTokenizer(tokenizer_file=str(shared_data / 'tokenizers' /
                                              'xlm-roberta.tokenizer.json'))
    batch = tokenizer(['Ein Hund läuft.', '一只狗在跑'])
    assert tokenizer.vocab_size == 250002 and tokenizer.pad_id == 1
    ids = batch['input_ids']
    assert ids[0, 0] == 0  # <s>
    assert ids[0, batch['eos_index'][0]] == 2 and ids[1, batch['eos_index'][1]] == 2  # </s>
    assert (ids[~batch['attention_mask']] == 1).all()


def test_hf_tokenizer_needs_exactly_one_source(tmp_path):
    with pytest.raises(ValueError, match='exactly one'):
        HFTokenizer()
    with pytest.raises(FileNotFoundError, match='absent.json'):
        HFTokenizer(tokenizer_file=str(tmp_path / 'absent.json'))


def test_hf_tokenizer_out_of_reach_names_it_and_the_offline_route(monkeypatch):
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    with pytest.raises(OSError, match="tokenizer 'xmr-tests/absent-tokenizer'.*tokenizer_file"):
        HFTokenizer(name_or_path='xmr-tests/absent-tokenizer')


def test_hf_tokenizer_applies_open_clips_cleaning_and_sep_stripping(shared_data):
    path = str(shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json')
    plain = HFTokenizer(tokenizer_file=path)
    canonical = HFTokenizer(tokenizer_file=path, clean='canonicalize')
    # SigLIP's cleaning: lower case, punctuation removed, whitespace collapsed.
    assert canonical.encode('A  Red circle!') == plain.encode('a red circle')
    stripped = HFTokenizer(tokenizer_file=path, strip_sep_token=True)
    ids = plain.encode('a red circle')
    assert ids[-1] == 2  # </s>
    assert stripped.encode('a red circle') == ids[:-1] + [0]
    with pytest.raises(ValueError, match="HFTokenizer clean='upper'"):
        HFTokenizer(tokenizer_file=path, clean='upper')
