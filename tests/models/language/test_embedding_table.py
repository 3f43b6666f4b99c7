"""The target embedding table loads from mBERT's released files; wrong files are named."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from xmr.models.language.embedding import TargetEmbedding

VOCAB, WIDTH = 11, 6


def _mbert_release(table: torch.Tensor, prefix: str = 'bert.') -> dict[str, torch.Tensor]:
    """Keys of ``bert-base-multilingual-cased``'s ``BertForPreTraining`` checkpoint (excerpt)."""
    return {
        f'{prefix}embeddings.word_embeddings.weight': table,
        f'{prefix}embeddings.position_embeddings.weight': torch.randn(8, WIDTH),
        f'{prefix}embeddings.token_type_embeddings.weight': torch.randn(2, WIDTH),
        f'{prefix}embeddings.LayerNorm.gamma': torch.ones(WIDTH),
        f'{prefix}encoder.layer.0.attention.self.query.weight': torch.randn(WIDTH, WIDTH),
        'cls.predictions.bias': torch.zeros(VOCAB),
    }


@pytest.mark.parametrize('layout', ['pytorch_model.bin', 'model.safetensors', 'folder'])
def test_table_is_copied_from_mbert_release_files(tmp_path, layout):
    table = torch.randn(VOCAB, WIDTH, generator=torch.Generator().manual_seed(3))
    if layout == 'model.safetensors':  # a BertModel save: no 'bert.' prefix
        save_file(_mbert_release(table, prefix=''), str(tmp_path / layout))
    else:
        torch.save(_mbert_release(table), tmp_path / 'pytorch_model.bin')
    source = tmp_path if layout == 'folder' else tmp_path / layout
    embedding = TargetEmbedding(VOCAB, width=4, table_width=WIDTH, pretrained=str(source))
    assert torch.equal(embedding.table.weight.detach(), table)
    ids = torch.tensor([[1, 5, 10]])
    torch.testing.assert_close(embedding(ids), table[ids] @ embedding.proj.weight.T
                               + embedding.proj.bias)


def test_wrong_files_are_refused_with_the_fix(tmp_path):
    path = tmp_path / 'pytorch_model.bin'
    torch.save(_mbert_release(torch.zeros(VOCAB + 1, WIDTH)), path)
    with pytest.raises(ValueError, match=r'word embeddings of .*pytorch_model.bin '
                                         r'\(bert.embeddings.word_embeddings.weight\) are \(12, 6\)'
                                         r', the configured table is \(11, 6\); set vocab_size'):
        TargetEmbedding(VOCAB, width=4, table_width=WIDTH, pretrained=str(path))
    clip = tmp_path / 'clip.pt'
    torch.save({'token_embedding.weight': torch.zeros(VOCAB, WIDTH)}, clip)
    with pytest.raises(ValueError, match=r"clip.pt has no word-embedding table: none of "
                                         r"\['bert.embeddings.word_embeddings.weight'.* among its "
                                         r"1 keys \(first: \['token_embedding.weight'\]\)"):
        TargetEmbedding(VOCAB, width=4, table_width=WIDTH, pretrained=str(clip))
    truncated = tmp_path / 'model.safetensors'
    save_file(_mbert_release(torch.zeros(VOCAB, WIDTH)), str(truncated))
    truncated.write_bytes(truncated.read_bytes()[:100])
    with pytest.raises(ValueError, match='model.safetensors .* is not a readable word-embedding '
                                         'checkpoint'):
        TargetEmbedding(VOCAB, width=4, table_width=WIDTH, pretrained=str(truncated))
    with pytest.raises(FileNotFoundError, match='absent/pytorch_model.bin does not exist'):
        TargetEmbedding(VOCAB, width=4, table_width=WIDTH,
                        pretrained=str(tmp_path / 'absent' / 'pytorch_model.bin'))


def test_a_hub_name_that_cannot_be_fetched_names_it_and_the_local_route(monkeypatch):
    """Offline, transformers' error names neither the model nor the key that takes a file."""
    from transformers import AutoModel

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files\nmore")

    monkeypatch.setattr(AutoModel, 'from_pretrained', offline)
    with pytest.raises(FileNotFoundError, match=(
            r"the word embeddings of 'bert-base-multilingual-cased' \(a Hugging Face hub name\) "
            r"could not be fetched \(We couldn't connect .*\); .*"
            r'model\.language_branch\.embedding\.pretrained=FILE')):
        TargetEmbedding(VOCAB, width=4, table_width=WIDTH,
                        pretrained='bert-base-multilingual-cased')


def test_the_padding_row_starts_at_zero_and_gets_no_gradient():
    embedding = TargetEmbedding(VOCAB, width=4, table_width=WIDTH, padding_idx=2)
    table = embedding.table.weight
    assert not table[2].any() and table[[0, 1, 3]].abs().min() > 0
    embedding(torch.tensor([[1, 2, 2], [3, 2, 2]])).sum().backward()
    assert not table.grad[2].any() and table.grad[[1, 3]].abs().min() > 0


def test_a_fresh_table_is_drawn_as_berts_embeddings_are():
    """N(0, 0.02²), BERT's initializer range (mBERT's table is the usual start)."""
    torch.manual_seed(0)
    table = TargetEmbedding(1000, width=4, table_width=64).table.weight.detach()
    assert abs(float(table.mean())) < 1e-3 and abs(float(table.std()) - 0.02) < 1e-3


def test_an_mbert_table_loads_with_the_default_width(tmp_path):
    table = torch.randn(VOCAB, 768, generator=torch.Generator().manual_seed(3))
    torch.save(_mbert_release(table), tmp_path / 'pytorch_model.bin')
    embedding = TargetEmbedding(VOCAB, width=4, pretrained=str(tmp_path / 'pytorch_model.bin'))
    assert torch.equal(embedding.table.weight.detach(), table)


def test_a_checkpoint_with_two_word_embedding_keys_gives_the_first_one_named(tmp_path):
    """WORD_EMBEDDING_KEYS is an order of preference: ``bert.`` (BertForPreTraining) before a
    bare BertModel's key, and the table read is the one the source names."""
    preferred = torch.randn(VOCAB, WIDTH, generator=torch.Generator().manual_seed(5))
    state = {**_mbert_release(torch.zeros(VOCAB, WIDTH), prefix=''), **_mbert_release(preferred)}
    torch.save(state, tmp_path / 'pytorch_model.bin')
    embedding = TargetEmbedding(VOCAB, width=4, table_width=WIDTH, pretrained=str(tmp_path))
    assert torch.equal(embedding.table.weight.detach(), preferred)
