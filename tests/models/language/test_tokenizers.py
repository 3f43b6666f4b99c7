import hashlib
import json
import logging
import pickle
from pathlib import Path

import pytest
import sentencepiece
import torch

from tests.conftest import (
    CORPUS,
    UNCACHED_TOKENIZER,
    XLMR_CUT_PIECES,
    check_offline_tokenizer_error,
    xlmr_spec,
)
from tests.models.backbones.open_clip_families import gemma_snapshot
from xmr.models.language.tokenizers import (
    BaseTokenizer,
    HFTokenizer,
    NLLBTokenizer,
    OpenCLIPTokenizer,
    SentencePieceTokenizer,
    TokenizerOutOfReach,
    build_tokenizer,
    pad_batch,
)
from xmr.utils.recent import RecentResults


def test_pad_batch_pads_to_longest_and_marks_eos():
    batch = pad_batch([[5, 6, 7], [8, 9], [1, 2, 3, 4]], pad_id=0)
    assert batch['input_ids'].tolist() == [[5, 6, 7, 0], [8, 9, 0, 0], [1, 2, 3, 4]]
    assert batch['attention_mask'].sum(1).tolist() == [3, 2, 4]
    assert batch['eos_index'].tolist() == [2, 1, 3]


def open_clip_pooled_position(ids: torch.Tensor, pool_type: str,
                               eos_id: int | None = None) -> list[int]:
    """The position open_clip's ``text_global_pool`` reads in ``ids`` ``[B, L]``: it pools
    features that are their own positions."""
    from open_clip.transformer import text_global_pool

    positions = torch.arange(ids.shape[1], dtype=torch.float).expand(ids.shape[0], -1)
    return text_global_pool(positions[..., None], ids, pool_type,
                            eos_token_id=eos_id)[:, 0].long().tolist()


LITERAL_END_CAPTIONS = ['a dog {end} on grass', 'a dog on grass', '{end}', 'two {end} {end} x']


def test_eos_index_is_the_first_end_token_open_clips_argmax_pools():
    """A caption that spells CLIP's end token has it twice; open_clip's ``argmax`` pools the
    first (its own), which ``eos_index`` names."""
    import open_clip

    texts = [text.format(end='<end_of_text>') for text in LITERAL_END_CAPTIONS]
    batch = OpenCLIPTokenizer()(texts)
    # <start> a dog <end> ...; <start> a dog on grass <end>; <start> <end> <end>; <start> two <end>
    assert batch['eos_index'].tolist() == [3, 5, 1, 2]
    assert batch['eos_index'].tolist() == open_clip_pooled_position(
        open_clip.get_tokenizer('ViT-B-32')(texts), 'argmax')


def test_eos_index_is_the_first_end_token_open_clips_eos_pooling_pools(shared_data):
    """MetaCLIP 2's ``eos`` pooling on XLM-R's ids: the first ``</s>``, a caption's own one."""
    tokenizer = HFTokenizer(tokenizer_file=str(shared_data / 'tokenizers' /
                                               'xlm-roberta.tokenizer.json'), clean='whitespace')
    batch = tokenizer([text.format(end='</s>') for text in LITERAL_END_CAPTIONS])
    assert tokenizer.end_id == 2
    expected = open_clip_pooled_position(batch['input_ids'], 'eos', eos_id=2)
    assert batch['eos_index'].tolist() == expected
    assert expected[1] == int(batch['attention_mask'][1].sum()) - 1  # no literal: the last


def test_pad_batch_without_an_end_id_marks_the_last_real_token():
    batch = pad_batch([[5, 2, 7], [8, 9]], pad_id=0, end_id=None)
    assert batch['eos_index'].tolist() == [2, 1]
    assert pad_batch([[5, 2, 7], [8, 9]], pad_id=0, end_id=2)['eos_index'].tolist() == [1, 1]
    # A pad id that is the end id (T5's </s>): the padding is no end token of its caption.
    assert pad_batch([[5, 6, 7], [8, 9]], pad_id=2, end_id=2)['eos_index'].tolist() == [2, 1]


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


def test_a_language_the_vocabulary_never_saw_is_reported_once(monkeypatch):
    """A vocabulary learned from German, French and Chinese reads Korean as unknowns: said once,
    naming the language; the languages it covers are not."""
    from xmr.models.language import tokenizers

    logged = []
    monkeypatch.setattr(tokenizers, 'print_log', lambda message, **kw: logged.append(message))
    tokenizer = SentencePieceTokenizer(corpus=CORPUS * 10, vocab_size=64)
    logged.clear()  # the training report
    korean = ['왼쪽에 빨간 원이 두 개 있습니다', '파란 사각형']
    tokenizer([*CORPUS[:2], *korean], langs=['de', 'de', 'ko', 'ko'])
    tokenizer(korean, langs=['ko', 'ko'])
    unknown = sum(tokenizer.encode(text).count(1) for text in korean)
    assert logged == [f"SentencePieceTokenizer: {unknown} of the "
                      f"{sum(len(tokenizer.encode(t)) - 2 for t in korean)} tokens of the 'ko' "
                      'captions in a batch are unknown to its vocabulary, which does not cover '
                      'the language; give a tokenizer (and text tower) whose vocabulary does '
                      '(for a SentencePieceTokenizer, a model learned from a corpus holding the '
                      "language's captions)"]


class WordTokenizer(BaseTokenizer):
    """Words of a fixed vocabulary, every other word unknown (id 1), between ids 2 and 3."""

    words = {'red': 4, 'circle': 5, 'two': 6}
    vocab_size, pad_id, unk_id = 7, 0, 1

    def encode(self, text: str) -> list[int]:
        return [2, *(self.words.get(word, 1) for word in text.split()), 3]


def test_a_language_is_reported_once_over_a_quarter_of_its_tokens_in_a_batch_are_unknown(
        monkeypatch):
    """Counted per language over the batch, the specials left out: a quarter is not over it."""
    from xmr.models.language import tokenizers

    logged = []
    monkeypatch.setattr(tokenizers, 'print_log', lambda message, **kw: logged.append(message))
    tokenizer = WordTokenizer()
    # de: 1 of 4 (a quarter); fr: 1 of 3 in a caption, but 1 of 7 over its captions.
    tokenizer(['two red rouge circle', 'deux red circle', 'two red circle circle'],
              langs=['de', 'fr', 'fr'])
    assert logged == []
    tokenizer(['two red rouge circle', 'two rouge', 'red circle', 'zwei red circle'],
              langs=['de', 'fr', 'fr', 'es'])  # fr: 1 of 4; es: 1 of 3, over a quarter
    assert logged == ["WordTokenizer: 1 of the 3 tokens of the 'es' captions in a batch are "
                      'unknown to its vocabulary, which does not cover the language; give a '
                      'tokenizer (and text tower) whose vocabulary does (for a '
                      'SentencePieceTokenizer, a model learned from a corpus holding the '
                      "language's captions)"]
    tokenizer(['deux rouge', 'zwei rote'], langs=['fr', 'es'])  # es again: said once
    assert len(logged) == 2 and "'fr' captions" in logged[1]


class EndlessWordTokenizer(WordTokenizer):
    """:class:`WordTokenizer` writing no end token after a caption's words."""

    def encode(self, text: str) -> list[int]:
        return super().encode(text)[:-1]

    def end_count(self, ids: list[int]) -> int:
        return 0


def test_a_tokenizer_without_an_end_token_counts_every_token_after_its_start(monkeypatch):
    """Only the start token is a special here: 'red circle two zwei' is 1 unknown of 4 tokens,
    a quarter, not over it."""
    from xmr.models.language import tokenizers

    logged = []
    monkeypatch.setattr(tokenizers, 'print_log', lambda message, **kw: logged.append(message))
    tokenizer = EndlessWordTokenizer()
    tokenizer(['red circle two zwei'], langs=['de'])
    assert logged == []
    tokenizer(['red zwei circle'], langs=['es'])
    assert len(logged) == 1 and logged[0].startswith(
        "EndlessWordTokenizer: 1 of the 3 tokens of the 'es' captions")


def test_a_script_xlmr_never_saw_is_reported_by_the_hugging_face_tokenizer(shared_data,
                                                                           monkeypatch):
    """XLM-R's vocabulary has no Tibetan: a caption of one Tibetan word is '▁' and one
    ``<unk>`` (id 3), so every such caption reaches the model as the same ids; said once,
    naming the language. Amharic, which XLM-R covers, is not reported."""
    from xmr.models.language import tokenizers

    logged = []
    monkeypatch.setattr(tokenizers, 'print_log', lambda message, **kw: logged.append(message))
    tokenizer = HFTokenizer(tokenizer_file=str(shared_data / 'tokenizers' /
                                               'xlm-roberta.tokenizer.json'))
    tibetan = ['ཞི་མི་གཅིག་ཉལ་འདུག', 'ཁྱི་གཅིག་རྒྱུག་གི་འདུག']
    batch = tokenizer([*tibetan, 'አንድ ድመት በሶፋ ላይ ተኝቷል'], langs=['bo', 'bo', 'am'])
    assert batch['input_ids'][:2, :4].tolist() == [[0, 6, 3, 2]] * 2
    assert logged == ["HFTokenizer: 2 of the 4 tokens of the 'bo' captions in a batch are "
                      'unknown to its vocabulary, which does not cover the language; give a '
                      'tokenizer (and text tower) whose vocabulary does (for a '
                      'SentencePieceTokenizer, a model learned from a corpus holding the '
                      "language's captions)"]


def test_sentencepiece_trains_writes_and_reloads(tmp_path):
    path = tmp_path / 'spm' / 'target.model'
    # Another process of a sweep writing the same model_file: its temporary file was this
    # one's too, renamed away under it (FileNotFoundError) or rewritten once published.
    path.parent.mkdir()
    (tmp_path / 'spm' / 'target.model.tmp').write_bytes(b'another process, writing')
    trained = SentencePieceTokenizer(model_file=str(path), corpus=CORPUS * 10, vocab_size=64)
    assert path.is_file()
    assert (tmp_path / 'spm' / 'target.model.tmp').read_bytes() == b'another process, writing'
    reloaded = SentencePieceTokenizer(model_file=str(path))
    texts = ['zwei rote Kreise', '一个蓝色的圆']
    assert torch.equal(trained(texts)['input_ids'], reloaded(texts)['input_ids'])
    ids = trained(texts)['input_ids']
    assert ids[0, 0] == 2 and ids[0, trained(texts)['eos_index'][0]] == 3


def test_a_vocabulary_is_learned_once_per_corpus_and_settings(monkeypatch):
    """A model built again from its config learned its vocabulary again (4 s on the demo's
    40,000 captions); the bytes kept are those SentencePiece learns. Other settings, or the same
    text cut into other captions, learn their own."""
    from xmr.models.language import tokenizers
    from xmr.utils.recent import RecentResults

    learned, learn = [], SentencePieceTokenizer._train

    def counted(lines, *settings):
        learned.append(settings)
        return learn(lines, *settings)

    monkeypatch.setattr(tokenizers, 'LEARNED_MODELS', RecentResults(4))
    monkeypatch.setattr(SentencePieceTokenizer, '_train', staticmethod(counted))
    corpus = CORPUS * 20
    SentencePieceTokenizer(corpus=corpus, vocab_size=48)
    again = SentencePieceTokenizer(corpus=list(corpus), vocab_size=48, max_length=8)
    assert learned == [(48, 0.9999, 'unigram')]
    assert again._sp.serialized_model_proto() == learn(corpus, 48, 0.9999, 'unigram')
    assert again.max_length == 8
    SentencePieceTokenizer(corpus=corpus, vocab_size=50)
    cut = [CORPUS[0][:4], CORPUS[0][4:], *CORPUS[1:]] * 20  # the same characters in a row
    SentencePieceTokenizer(corpus=cut, vocab_size=48)
    assert learned == [(48, 0.9999, 'unigram'), (50, 0.9999, 'unigram'),
                       (48, 0.9999, 'unigram')]


@pytest.fixture
def logged(monkeypatch) -> list[tuple[str, int | None]]:
    """The tokenizers module's ``print_log`` messages and levels, as they are logged."""
    from xmr.models.language import tokenizers

    messages = []
    monkeypatch.setattr(tokenizers, 'print_log',
                        lambda message, **kwargs: messages.append((message, kwargs.get('level'))))
    return messages


@pytest.mark.parametrize('max_length, share, level', [(1000, '0%', logging.INFO),
                                                       (2, '100%', logging.WARNING)])
def test_a_trained_sentencepiece_reports_the_share_of_its_corpus_it_truncates(
        logged, tmp_path, max_length, share, level):
    # Every caption is at least BOS, one piece and EOS: none exceeds 1000 tokens, all exceed 2.
    path = tmp_path / 'target.model'
    trained = SentencePieceTokenizer(model_file=str(path), corpus=CORPUS * 10, vocab_size=64,
                                     max_length=max_length)
    (message, logged_level), = logged
    assert message.startswith(f'SentencePieceTokenizer: sentencepiece {sentencepiece.__version__} '
                              f'learned {trained.vocab_size} pieces from {len(CORPUS) * 10} '
                              f'captions; {share} of them are longer than '
                              f'max_length={max_length} tokens')
    assert (logged_level or logging.INFO) == level
    # The corpus supports 53 pieces of the 64 asked for: a larger vocab_size is no advice.
    assert trained.vocab_size < 64
    assert ('raise max_length' in message) == (level == logging.WARNING)
    assert 'raise vocab_size' not in message
    SentencePieceTokenizer(model_file=str(path), max_length=max_length)  # loaded: no report
    assert len(logged) == 1


def test_a_truncating_vocabulary_of_all_the_pieces_asked_for_advises_a_larger_vocab_size(
        logged):
    trained = SentencePieceTokenizer(corpus=CORPUS * 10, vocab_size=44, max_length=2)
    assert trained.vocab_size == 44
    (message, level), = logged
    assert level == logging.WARNING and 'raise vocab_size or max_length' in message


def test_a_corpus_that_supports_fewer_pieces_than_asked_says_vocab_size_will_not_help(
        logged):
    trained = SentencePieceTokenizer(corpus=CORPUS * 10, vocab_size=400, max_length=2)
    (message, level), = logged
    assert level == logging.WARNING
    assert (f'only {trained.vocab_size} of the vocab_size=400 pieces asked for were learned'
            in message)
    assert 'raise vocab_size' not in message and 'raise max_length' in message


def test_a_sentencepiece_model_trained_elsewhere_is_read_with_its_own_special_ids(tmp_path):
    """A model with SentencePiece's ids moved (unk 3, BOS 4, EOS 5, pad 6) frames and pads
    captions with them; one with its default ids (no pad) is refused, naming what it lacks."""
    import io

    def write(name: str, **ids: int) -> str:
        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(CORPUS * 10), model_writer=model, vocab_size=64,
            minloglevel=2, num_threads=1, hard_vocab_limit=False, **ids)
        (tmp_path / name).write_bytes(model.getvalue())
        return str(tmp_path / name)

    moved = SentencePieceTokenizer(model_file=write('moved.model', unk_id=3, bos_id=4, eos_id=5,
                                                    pad_id=6))
    assert (moved.pad_id, moved.unk_id) == (6, 3)
    batch = moved(['zwei rote Kreise', 'ein Kreis'])
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / 'moved.model'))
    assert batch['input_ids'][0].tolist() == [4, *pieces.encode('zwei rote Kreise'), 5]
    short = [4, *pieces.encode('ein Kreis'), 5]
    assert batch['input_ids'][1].tolist() == short + [6] * (batch['input_ids'].shape[1]
                                                            - len(short))
    default = write('default.model')
    with pytest.raises(ValueError, match=r'SentencePiece model .*default\.model: it defines no '
                                         r'pad_id, which'):
        SentencePieceTokenizer(model_file=default)


def test_sentencepiece_bad_input_fails_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match='nothing.model'):
        SentencePieceTokenizer(model_file=str(tmp_path / 'nothing.model'))
    with pytest.raises(ValueError, match='vocab_size 20 is smaller than the 37 distinct'):
        SentencePieceTokenizer(corpus=CORPUS, vocab_size=20)


def test_a_sentencepiece_corpus_file_is_one_caption_a_line_as_xmr_writes_them(
        monkeypatch, tmp_path):
    """A corpus file is read as xmr's caption files are (docs/data.md): split at line ends
    only, its byte order mark dropped, blank lines left out. ``str.splitlines`` also split a
    caption at a Unicode line or paragraph separator (U+2028, U+2029) or a NEL (U+0085), which
    ``export_source_captions`` writes inside a line, and kept the BOM as the first caption's
    first character. Expected: the vocabulary and caption count of the list of its lines."""
    from xmr.models.language import tokenizers

    logged = []
    monkeypatch.setattr(tokenizers, 'print_log', lambda message, **kwargs: logged.append(message))
    captions = [*CORPUS, 'ein roter\u2028Kreis', 'un cercle\u2029rouge', 'zwei\x85Quadrate']
    path = tmp_path / 'corpus.txt'
    path.write_bytes(b'\xef\xbb\xbf' + '\r\n'.join(captions * 10).encode() + b'\n\n')
    from_file = SentencePieceTokenizer(corpus=str(path), vocab_size=64)
    from_list = SentencePieceTokenizer(corpus=captions * 10, vocab_size=64)
    assert f'from {len(captions) * 10} captions' in logged[0]
    assert from_file.vocabulary_digest() == from_list.vocabulary_digest()


def test_hf_tokenizer_file_reads_the_real_xlmr_tokenizer(shared_data):
    tokenizer = HFTokenizer(tokenizer_file=str(shared_data / 'tokenizers' /
                                              'xlm-roberta.tokenizer.json'))
    batch = tokenizer(['Ein Hund läuft.', '一只狗在跑'])
    assert tokenizer.vocab_size == 250002 and tokenizer.pad_id == 1
    ids = batch['input_ids']
    assert ids[0, 0] == 0  # <s>
    assert ids[0, batch['eos_index'][0]] == 2 and ids[1, batch['eos_index'][1]] == 2  # </s>
    assert (ids[~batch['attention_mask']] == 1).all()


def test_a_folder_naming_no_pad_token_guesses_as_its_lone_file_does_and_says_so(
        shared_data, tmp_path, monkeypatch):
    """The folder route padded with 0 (XLM-R's <s>, which the target table then froze at
    zero) and did not flag the guess, so SigLIP's check never refused it."""
    from transformers import PreTrainedTokenizerFast

    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    file = shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json'
    PreTrainedTokenizerFast(tokenizer_file=str(file), bos_token='<s>', eos_token='</s>',
                            unk_token='<unk>').save_pretrained(tmp_path)
    from_file = HFTokenizer(tokenizer_file=str(tmp_path / 'tokenizer.json'))
    from_folder = HFTokenizer(name_or_path=str(tmp_path))
    assert (from_folder.pad_id, from_folder.pad_id_guessed) == (1, True)  # <pad>
    assert (from_file.pad_id, from_file.pad_id_guessed) == (1, True)


def sentencepiece_only_folder(folder) -> bytes:
    """google/mt5-base's layout in ``folder``: a SentencePiece ``spiece.model`` (T5's ids), no
    tokenizer.json; returns the model's bytes."""
    import io

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 20), model_writer=model, vocab_size=48, pad_id=0,
        eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    (folder / 'spiece.model').write_bytes(model.getvalue())
    (folder / 'tokenizer_config.json').write_text(json.dumps(
        {'tokenizer_class': 'T5Tokenizer', 'eos_token': '</s>', 'unk_token': '<unk>',
         'pad_token': '<pad>', 'extra_ids': 0}))
    return model.getvalue()


def test_a_folder_holding_only_a_sentencepiece_model_reads_as_its_tokenizer_class_says(
        tmp_path, monkeypatch):
    """google/mt5-base's layout (spiece.model, no tokenizer.json): transformers 5 converts it
    with protobuf, which xmr did not install, and then failed naming tiktoken."""
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    pieces = sentencepiece.SentencePieceProcessor(model_proto=sentencepiece_only_folder(tmp_path))
    tokenizer = HFTokenizer(name_or_path=str(tmp_path))
    ids = tokenizer([CORPUS[0]])['input_ids'][0]
    assert ids[:len(pieces.encode(CORPUS[0])) + 1].tolist() == pieces.encode(CORPUS[0]) + [1]
    assert tokenizer.pad_id == 0


def test_every_hugging_face_tokenizer_pickles_with_its_ids(shared_data, nllb_folder, tmp_path,
                                                          monkeypatch):
    """A spawned or forkserver dataloader worker (macOS's start method, Python 3.14's on
    Linux) gets the run's tokenizers by pickle; an HFTokenizer held a function defined inside
    its loader, which pickle refuses, on every route."""
    from xmr.models.language.cclm_tokenizer import CCLMTokenizer

    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    xlmr = str(shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json')
    sentencepiece_only_folder(tmp_path)
    captions = ['Ein Hund rennt. ', 'a red circle\n']
    for tokenizer in (HFTokenizer(tokenizer_file=xlmr), HFTokenizer(name_or_path=str(tmp_path)),
                      HFTokenizer(name_or_path=str(nllb_folder)),
                      NLLBTokenizer(name_or_path=str(nllb_folder)),
                      CCLMTokenizer(tokenizer_file=xlmr)):
        copy = pickle.loads(pickle.dumps(tokenizer))
        assert torch.equal(copy(captions)['input_ids'], tokenizer(captions)['input_ids'])


def test_hf_tokenizer_needs_exactly_one_source(tmp_path):
    with pytest.raises(ValueError, match='exactly one'):
        HFTokenizer()
    with pytest.raises(FileNotFoundError, match='absent.json'):
        HFTokenizer(tokenizer_file=str(tmp_path / 'absent.json'))


def test_hf_tokenizer_out_of_reach_names_it_and_the_offline_route(offline_hub, shared_data):
    with pytest.raises(TokenizerOutOfReach) as raised:
        HFTokenizer(name_or_path=UNCACHED_TOKENIZER)
    check_offline_tokenizer_error(raised, '')
    assert 'HF_HUB_OFFLINE=1 fails here at once' in str(raised.value)
    with pytest.raises(TokenizerOutOfReach) as raised:
        build_tokenizer(dict(type='NLLBTokenizer', name_or_path=UNCACHED_TOKENIZER),
                        'model.backbone.tokenizer')
    check_offline_tokenizer_error(raised, 'model.backbone.tokenizer: ', 'NLLBTokenizer')
    # Its own tokenizer.json, or the folder holding it, loads offline.
    local = shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json'
    built = build_tokenizer(dict(type='HFTokenizer', tokenizer_file=str(local)), 'tokenizer')
    assert built.encode('a red circle') == HFTokenizer(tokenizer_file=str(local)).encode(
        'a red circle')


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


# The tiny NLLB vocabulary (tests/models/backbones/open_clip_families.py): '▁' 4, a-z 5-30,
# A-Z 31-56; language codes deu_Latn 102, eng_Latn 107, swh_Latn 228; </s> 2, <pad> 1.
DEU, ENG, SWH, EOS, PAD = 102, 107, 228, 2, 1


@pytest.fixture
def nllb_folder(tmp_path):
    from tests.models.backbones.open_clip_families import nllb_tokenizer_folder

    return nllb_tokenizer_folder(tmp_path / 'nllb')


@pytest.mark.parametrize('source', ['name_or_path', 'tokenizer_file'])
def test_nllb_tokenizer_writes_each_captions_language_code(nllb_folder, source):
    """Mixed languages in one batch: ``[code] pieces </s>``, hand-computed ids."""
    path = nllb_folder if source == 'name_or_path' else nllb_folder / 'tokenizer.json'
    tokenizer = NLLBTokenizer(**{source: str(path)})
    assert tokenizer.writes_language_token and tokenizer.pad_id == PAD
    batch = tokenizer(['ein Kreis', 'a red', 'Kreis'], ['de', 'en', 'swh_Latn'])
    assert batch['input_ids'].tolist() == [
        [DEU, 4, 9, 13, 18, 4, 41, 22, 9, 13, 23, EOS],  # ▁ e i n ▁ K r e i s
        [ENG, 4, 5, 4, 22, 9, 8, EOS, PAD, PAD, PAD, PAD],  # ▁ a ▁ r e d
        [SWH, 4, 41, 22, 9, 13, 23, EOS, PAD, PAD, PAD, PAD]]
    assert batch['eos_index'].tolist() == [11, 7, 7]
    # Without langs: the default language, English as NLLB's own src_lang.
    assert tokenizer(['a red'])['input_ids'][0, 0] == ENG
    assert NLLBTokenizer(tokenizer_file=str(nllb_folder / 'tokenizer.json'),
                         language='sw').encode('a') == [SWH, 4, 5, EOS]


def test_nllb_tokenizer_equals_hugging_faces_with_each_src_lang(nllb_folder):
    """The same ids as transformers' NllbTokenizer given each caption's ``src_lang`` in turn."""
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(nllb_folder))
    tokenizer = NLLBTokenizer(name_or_path=str(nllb_folder), clean=None)
    texts, codes = ['Ein roter Kreis!', 'mraba wa bluu', "l'eau"], ['deu_Latn', 'swh_Latn',
                                                                    'fra_Latn']
    ids = tokenizer(texts, ['de', 'sw', 'fr'])['input_ids']
    for row, (text, code) in enumerate(zip(texts, codes)):
        reference.src_lang = code
        expected = reference(text)['input_ids']
        assert ids[row, :len(expected)].tolist() == expected


def test_nllb_tokenizer_truncation_keeps_the_language_and_end_tokens(nllb_folder):
    tokenizer = NLLBTokenizer(name_or_path=str(nllb_folder), max_length=4)
    assert tokenizer(['abcdef'], ['de'])['input_ids'].tolist() == [[DEU, 4, 5, EOS]]


def test_nllb_tokenizer_refuses_languages_it_cannot_code(nllb_folder):
    from xmr.datasets.languages import LanguageCodeError

    tokenizer = NLLBTokenizer(name_or_path=str(nllb_folder))
    with pytest.raises(LanguageCodeError, match=r"'fil' \('fil'\) is not a FLORES-200 language.*"
                                                r"ISO 639-1 \('sw'\), ISO 639-3 \('swh'\) or "
                                                r"FLORES-200 \('swh_Latn'\) codes"):
        tokenizer(['a', 'b'], ['de', 'fil'])
    with pytest.raises(LanguageCodeError, match=r"unknown language code 'xq'.*Accepted forms: "
                                                r"ISO 639-1 \('sw'\)"):
        tokenizer(['a'], ['xq'])
    # Arabic in Latin script is a FLORES-200 language NLLB's vocabulary has no token for; of
    # NLLB's 202 codes xmr's table names all but sat_Beng.
    with pytest.raises(LanguageCodeError, match=r"language 'ar-Latn' is FLORES-200 'arb_Latn', "
                                                r'which this NLLB vocabulary has no token for; '
                                                r'it codes 201 of the languages'):
        tokenizer(['a'], ['ar-Latn'])
    with pytest.raises(ValueError, match=r'2 captions but 1 languages'):
        tokenizer(['a', 'b'], ['de'])
    with pytest.raises(LanguageCodeError, match="'fil'"):
        NLLBTokenizer(name_or_path=str(nllb_folder), language='fil')


def test_nllb_tokenizer_reads_a_language_without_a_flores_token_by_the_one_given(nllb_folder):
    """Filipino, Cusco Quechua and Norwegian have no FLORES-200 code; nllb-clip's XM3600
    evaluation reads them with Tagalog's, Ayacucho Quechua's and Nynorsk's tokens
    (visheratin/nllb-clip test/lang_map.py). Ids: 61 + the code's place in NLLB's list."""
    tgl, quy, nno = 61 + 173, 61 + 143, 61 + 127
    tokenizer = NLLBTokenizer(name_or_path=str(nllb_folder), language_tokens={
        'fil': 'tgl_Latn', 'quz': 'quy_Latn', 'nor': 'nno_Latn'})
    # Captions' languages in any spelling ('nor' for 'no') find their token.
    batch = tokenizer(['a', 'a', 'a', 'a'], ['fil', 'quz', 'nor', 'deu_Latn'])
    assert batch['input_ids'][:, 0].tolist() == [tgl, quy, nno, DEU]
    from xmr.datasets.languages import LanguageCodeError

    with pytest.raises(LanguageCodeError, match=r"'fil' \('fil'\) is not a FLORES-200 language.*"
                                                r"NLLBTokenizer\(language_tokens=\{'fil': "
                                                r"'<FLORES-200 code>'\}\) reads it with another "
                                                "language's token"):
        NLLBTokenizer(name_or_path=str(nllb_folder))(['a'], ['fil'])
    with pytest.raises(ValueError, match=r"NLLBTokenizer language_tokens: 'fil' -> 'tgl' is no "
                                         'language-code token of .*nllb; give a FLORES-200 code '
                                         r"it holds \(such as 'ace_Arab'\)"):
        NLLBTokenizer(name_or_path=str(nllb_folder), language_tokens={'fil': 'tgl'})
    with pytest.raises(LanguageCodeError, match="NLLBTokenizer language_tokens: unknown "
                                                "language code 'xq'"):
        NLLBTokenizer(name_or_path=str(nllb_folder), language_tokens={'xq': 'tgl_Latn'})


def test_nllb_tokenizer_refuses_a_vocabulary_without_language_codes(shared_data):
    path = str(shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json')
    with pytest.raises(ValueError, match=r'NLLBTokenizer: .*xlm-roberta.tokenizer.json has no '
                                         r"FLORES-200 language-code token \(such as 'eng_Latn'\)"):
        NLLBTokenizer(tokenizer_file=path)


@pytest.fixture(scope='module')
def siglip_t5_folder(tmp_path_factory):
    """A SigLIP (v1) tokenizer folder as open_clip's ``SigLipTokenizer`` writes the ``timm/``
    ones: a T5 vocabulary (``<pad>`` = 0, ``</s>`` = 1) whose padding is set to ``</s>``."""
    from tests.models.backbones.open_clip_families import siglip_t5_tokenizer_folder

    return siglip_t5_tokenizer_folder(tmp_path_factory.mktemp('siglip'))


def test_a_tokenizer_file_pads_with_the_id_its_snapshot_names(siglip_t5_folder, tmp_path):
    """SigLIP pads with </s> = 1, though its vocabulary has <pad> = 0: the tokenizer.json of a
    snapshot reads the pad token from the tokenizer_config.json beside it, as open_clip's
    tokenizer (the hub name) does; a lone file guesses <pad> unless told."""
    import shutil

    from open_clip.tokenizer import HFTokenizer as OpenCLIPHFTokenizer

    texts = ['A dog runs.', 'two men are playing soccer on a big green field today']
    reference = OpenCLIPHFTokenizer(str(siglip_t5_folder), context_length=32,
                                    clean='canonicalize')(texts)
    options = dict(clean='canonicalize', max_length=32, pad_to=32)
    by_file = HFTokenizer(tokenizer_file=str(siglip_t5_folder / 'tokenizer.json'), **options)
    assert by_file.pad_id == 1
    assert torch.equal(by_file(texts)['input_ids'], reference)
    shutil.copy(siglip_t5_folder / 'tokenizer.json', tmp_path / 'tokenizer.json')
    lone = tmp_path / 'tokenizer.json'
    assert HFTokenizer(tokenizer_file=str(lone), **options).pad_id == 0  # <pad>, a guess
    told = HFTokenizer(tokenizer_file=str(lone), pad_id=1, **options)
    assert torch.equal(told(texts)['input_ids'], reference)


@pytest.fixture(scope='module')
def xlmr_tokenizer_files(tmp_path_factory):
    """A function of ``post_processor`` giving a folder with XLM-R's tokenizer.json (without
    its post-processor, which appends ``</s>``, unless ``post_processor``; with this one if it
    is one; its vocabulary cut if ``cut``, :func:`~tests.conftest.xlmr_spec`) and a
    transformers folder of it, ``folder``. Written once per choice in the module: writing and
    reading the 17 MB file again took most of this module's time."""
    from transformers import PreTrainedTokenizerFast

    written = {}

    def files(post_processor: bool | dict, cut: bool = False) -> Path:
        key = json.dumps([post_processor, cut], sort_keys=True)
        if key not in written:
            spec = xlmr_spec(cut)
            if post_processor is not True:
                spec['post_processor'] = post_processor or None
            folder = tmp_path_factory.mktemp('xlmr')
            (folder / 'tokenizer.json').write_text(json.dumps(spec), encoding='utf-8')
            PreTrainedTokenizerFast(tokenizer_file=str(folder / 'tokenizer.json'),
                                    pad_token='<pad>').save_pretrained(folder / 'folder')
            written[key] = folder
        return written[key]

    return files


def open_clip_ids(folder, caption: str) -> list[int]:
    """open_clip's ids of ``caption`` at context 8, by its tokenizer of ``folder``."""
    import open_clip

    return open_clip.tokenizer.HFTokenizer(str(folder), context_length=8)([caption])[0].tolist()


@pytest.mark.parametrize('post_processor', [True, False], ids=['with_end_token', 'without'])
def test_hf_tokenizer_truncates_as_open_clip_with_and_without_an_end_token(
        xlmr_tokenizer_files, post_processor):
    """A tokenizer whose post-processor appends no end token is cut to its first max_length
    ids, as Hugging Face's (and so open_clip's) truncation does; the caption's last piece is no
    end token to keep. XLM-R's own keeps its ``</s>``."""
    files = xlmr_tokenizer_files(post_processor, cut=True)
    caption = 'one two three four five six seven eight nine ten eleven twelve'
    expected = open_clip_ids(files / 'folder', caption)
    assert (expected[-1] == 2) == post_processor  # XLM-R's </s>
    for tokenizer in (HFTokenizer(tokenizer_file=str(files / 'tokenizer.json'), max_length=8),
                      HFTokenizer(name_or_path=str(files / 'folder'), max_length=8)):
        assert tokenizer([caption])['input_ids'][0].tolist() == expected
        assert tokenizer.truncated == 1


def test_two_appended_end_tokens_are_both_kept_by_truncation_as_open_clip_keeps_them(
        xlmr_tokenizer_files):
    """A post-processor appending ``</s>`` and a language code, as mBART-cc25's and legacy
    NLLB's (``pieces </s> en_XX``; ``<mask>`` stands in for the code here): a long caption
    keeps both, as Hugging Face's truncation (and so open_clip's) keeps them, and its pieces
    are those without either."""
    special = {'</s>': [2], '<mask>': [XLMR_CUT_PIECES]}
    template = {'type': 'TemplateProcessing', 'pair': [],
                'single': [{'Sequence': {'id': 'A', 'type_id': 0}},
                           *({'SpecialToken': {'id': t, 'type_id': 0}} for t in special)],
                'special_tokens': {t: {'id': t, 'ids': ids, 'tokens': [t]}
                                   for t, ids in special.items()}}
    files = xlmr_tokenizer_files(template, cut=True)
    caption = 'one two three four five six seven eight nine ten eleven twelve'
    expected = open_clip_ids(files / 'folder', caption)
    assert expected[-2:] == [2, XLMR_CUT_PIECES]
    for tokenizer in (HFTokenizer(tokenizer_file=str(files / 'tokenizer.json'), max_length=8),
                      HFTokenizer(name_or_path=str(files / 'folder'), max_length=8)):
        assert tokenizer([caption])['input_ids'][0].tolist() == expected
        assert tokenizer.pieces('one two') == tokenizer.encode('one two')[:-2]


#: What transformers 4.57.6 (the version of the XLM-R towers' training) writes for XLM-R's
#: tokenizer.json in an ``XLMRobertaTokenizer`` snapshot: each caption's trailing space,
#: newline or U+200F is a '▁' (6), which transformers 5's rebuilt pre-tokenizer drops.
XLMR_TRANSFORMERS_4_IDS = {'A dog runs. ': [0, 62, 10269, 127877, 5, 6, 2],
                           'A dog runs.\n': [0, 62, 10269, 127877, 5, 6, 2],
                           '   ': [0, 6, 2],
                           'Ein Hund\u200f': [0, 2991, 49083, 6, 2],
                           'a dog </s> on grass': [0, 10, 10269, 6, 2, 98, 27689, 7, 2]}


def test_an_xlmr_snapshot_reads_as_transformers_4_ran_its_file_on_both_routes(shared_data,
                                                                              tmp_path):
    folder = tmp_path / 'xlmr'
    folder.mkdir()
    (folder / 'tokenizer.json').write_bytes(
        (shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json').read_bytes())
    (folder / 'tokenizer_config.json').write_text(json.dumps(
        {'tokenizer_class': 'XLMRobertaTokenizer', 'bos_token': '<s>', 'eos_token': '</s>',
         'unk_token': '<unk>', 'sep_token': '</s>', 'pad_token': '<pad>', 'cls_token': '<s>',
         'mask_token': '<mask>'}), encoding='utf-8')
    for route in (dict(name_or_path=str(folder)),
                  dict(tokenizer_file=str(folder / 'tokenizer.json'))):
        tokenizer = HFTokenizer(**route, max_length=16)
        assert {caption: tokenizer.encode(caption)
                for caption in XLMR_TRANSFORMERS_4_IDS} == XLMR_TRANSFORMERS_4_IDS, route


def test_a_caption_ending_in_its_own_special_token_is_cut_as_one_without_an_end_token(
        xlmr_tokenizer_files):
    """A tokenizer whose post-processor appends nothing keeps a caption's first max_length ids
    also when the caption's own last piece is a special token (``<unk>`` of an unknown
    character), as Hugging Face and open_clip cut it: that piece is no end token."""
    files = xlmr_tokenizer_files(post_processor=False, cut=True)
    caption = 'one two three four five six seven eight nine ten eleven \u0378'
    tokenizer = HFTokenizer(tokenizer_file=str(files / 'tokenizer.json'), max_length=8)
    assert tokenizer.encode(caption)[-1] == 3  # XLM-R's <unk>, a special token
    expected = open_clip_ids(files / 'folder', caption)
    assert tokenizer([caption])['input_ids'][0].tolist() == expected
    assert expected[-1] != 3


def test_a_sentencepiece_tokenizer_file_reads_decomposed_text_as_composed(shared_data):
    """XLM-R's ``Precompiled`` normalizer is SentencePiece's NFKC, under which a caption and its
    NFD form are one text; ``tokenizers`` alone drops the second mark of NFD 'ộ' (one con 'mọt')
    and leaves NFD Hangul in jamo. Expected: the file's own ids of the composed caption."""
    import unicodedata

    from tokenizers import Tokenizer

    path = shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json'
    reference = Tokenizer.from_file(str(path))
    tokenizer = HFTokenizer(tokenizer_file=str(path))
    for caption in ('một con mèo trên bãi cỏ', '고양이가 잔디 위에 있다'):
        decomposed = unicodedata.normalize('NFD', caption)
        assert reference.encode(decomposed).ids != reference.encode(caption).ids
        assert tokenizer.encode(decomposed) == reference.encode(caption).ids


def test_a_bert_tokenizer_file_reads_decomposed_text_as_bert_does(tmp_path):
    """mBERT's Python tokenizer NFC-normalises before its WordPiece; ``tokenizers``'
    ``BertNormalizer`` does not, and NFD captions came out ``[UNK]``. Expected: the ids of
    transformers' own (legacy, Python) BertTokenizer on the NFD caption."""
    import unicodedata

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    words = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'Tiếng', 'Việt', 'một', 'con', 'mèo']
    (tmp_path / 'vocab.txt').write_text('\n'.join(words) + '\n', encoding='utf-8')
    fast = Tokenizer(models.WordPiece({w: i for i, w in enumerate(words)}, unk_token='[UNK]'))
    fast.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=None)
    fast.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    fast.post_processor = processors.BertProcessing(('[SEP]', 3), ('[CLS]', 2))
    fast.save(str(tmp_path / 'tokenizer.json'))
    caption = unicodedata.normalize('NFD', 'Tiếng Việt một con mèo')
    expected = BertTokenizerLegacy(str(tmp_path / 'vocab.txt'), do_lower_case=False)(caption)
    assert expected['input_ids'] == [2, 5, 6, 7, 8, 9, 3]
    tokenizer = HFTokenizer(tokenizer_file=str(tmp_path / 'tokenizer.json'))
    assert tokenizer.encode(caption) == expected['input_ids']


def test_pad_batch_refuses_an_empty_batch_and_a_caption_of_no_tokens():
    with pytest.raises(ValueError, match='empty batch of captions'):
        pad_batch([], pad_id=0)
    # An empty caption would pool position -1 (the last padding) as its end token.
    with pytest.raises(ValueError, match='a caption tokenised to zero tokens'):
        pad_batch([[5, 6], []], pad_id=0)


class VocabularyTokenizer(WordTokenizer):
    """:class:`WordTokenizer` naming a given token -> id mapping as its vocabulary."""

    def __init__(self, token_ids: dict[str, int]) -> None:
        super().__init__()
        self.token_ids = token_ids

    def vocabulary(self) -> dict[str, int]:
        return self.token_ids


def test_the_vocabulary_digest_depends_on_the_ids_not_on_the_order_they_are_listed_in():
    """A ``tokenizers`` vocabulary comes from a hash map: the same file may list its tokens in
    another order on every load, and a checkpoint must still find its vocabulary the same."""
    words = {'red': 4, 'circle': 5, 'two': 6}
    digest = VocabularyTokenizer(words).vocabulary_digest()
    assert len(digest) == 16
    assert VocabularyTokenizer(dict(reversed(words.items()))).vocabulary_digest() == digest
    assert VocabularyTokenizer({'red': 5, 'circle': 4, 'two': 6}).vocabulary_digest() != digest
    assert WordTokenizer().vocabulary_digest() is None


def test_hf_tokenizer_lowercases_when_asked(shared_data):
    path = str(shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json')
    plain = HFTokenizer(tokenizer_file=path)
    assert plain.encode('A Red Circle') != plain.encode('a red circle')  # XLM-R is cased
    lowered = HFTokenizer(tokenizer_file=path, lowercase=True)
    assert lowered.encode('A Red Circle') == plain.encode('a red circle')


def test_a_stripped_separator_is_kept_last_by_truncation(shared_data):
    """open_clip's CLIPA tokenizer writes 0 over ``</s>`` after its truncation, which kept the
    ``</s>``: a long caption ends in that 0, not in a piece."""
    path = str(shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json')
    caption = 'one two three four five six seven eight'
    pieces = HFTokenizer(tokenizer_file=path).encode(caption)
    assert len(pieces) > 6 and pieces[-1] == 2  # <s> ... </s>
    stripped = HFTokenizer(tokenizer_file=path, strip_sep_token=True, max_length=6)
    assert stripped([caption])['input_ids'][0].tolist() == pieces[:5] + [0]
    assert stripped.truncated == 1


def test_a_stripped_separator_that_is_the_start_id_is_the_end_pooled(shared_data):
    """XLM-R's ``<s>`` is id 0, the id ``strip_sep_token`` writes over ``</s>``: the end token
    pooled is the stripped separator, where the unstripped ids have their ``</s>``, not the
    ``<s>`` every caption begins with."""
    path = str(shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json')
    captions = ['a dog runs on the grass', 'a cat', 'two </s> dogs']
    plain = HFTokenizer(tokenizer_file=path, clean='whitespace')(captions)
    stripped = HFTokenizer(tokenizer_file=path, clean='whitespace', strip_sep_token=True)
    batch = stripped(captions)
    assert batch['input_ids'][:, 0].tolist() == [0, 0, 0]  # <s>
    assert batch['eos_index'].tolist() == plain['eos_index'].tolist()
    # <s> a dog runs on the grass </s>; <s> a cat </s>; <s> ▁two ▁ </s> (its own) ▁dog s </s>
    assert batch['eos_index'].tolist()[:2] == (plain['attention_mask'].sum(1) - 1).tolist()[:2]
    assert batch['eos_index'][2] == 3


def test_a_tokenizer_file_saved_with_padding_and_truncation_on_pads_with_its_pad_id(tmp_path):
    """A ``tokenizer.json`` written by a tokenizer used with padding and truncation on: its
    pad id is the one of its padding settings (no usual pad token to guess from), and xmr
    itself pads (to the longest caption) and truncates (to ``max_length``, keeping [SEP])."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {'[UNK]': 0, '[CLS]': 1, '[SEP]': 2, '<blank>': 3, 'two': 4, 'red': 5}
    fast = Tokenizer(models.WordLevel(vocab, unk_token='[UNK]'))
    fast.pre_tokenizer = pre_tokenizers.Whitespace()
    fast.post_processor = processors.BertProcessing(('[SEP]', 2), ('[CLS]', 1))
    fast.enable_padding(pad_id=3, pad_token='<blank>', length=10)
    fast.enable_truncation(max_length=3)
    fast.save(str(tmp_path / 'tokenizer.json'))
    tokenizer = HFTokenizer(tokenizer_file=str(tmp_path / 'tokenizer.json'), max_length=5)
    assert tokenizer.pad_id == 3
    batch = tokenizer(['two red', 'red red red red red'])
    assert batch['input_ids'].tolist() == [[1, 4, 5, 2, 3], [1, 5, 5, 5, 2]]
    assert tokenizer.truncated == 1


def test_a_tokenizer_file_is_parsed_and_digested_once_until_it_changes_and_keeps_its_settings(
        tmp_path, monkeypatch):
    """Tokenizers built from one ``tokenizer.json`` share its parse and its vocabulary's digest;
    each still reads the pad id of the file's padding settings, which the first one's build
    turned off in the shared backend; the file rewritten with another vocabulary is parsed and
    digested again. The digest is the one checkpoints record: the SHA-256 of the JSON list of
    the ``[token, id]`` pairs in the pairs' sorted order, by hand here."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from xmr.models.language import tokenizers
    from xmr.models.language.tokenizers import _read_tokenizer_file

    digested, digest = [], tokenizers.vocabulary_digest
    monkeypatch.setattr(tokenizers, 'vocabulary_digest',
                        lambda vocabulary: digested.append(vocabulary) or digest(vocabulary))

    def write(vocab: dict[str, int]) -> str:
        fast = Tokenizer(models.WordLevel(vocab, unk_token='[UNK]'))
        fast.pre_tokenizer = pre_tokenizers.Whitespace()
        fast.enable_padding(pad_id=vocab['<blank>'], pad_token='<blank>', length=10)
        fast.save(str(tmp_path / 'tokenizer.json'))
        return str(tmp_path / 'tokenizer.json')

    _read_tokenizer_file.cache_clear()
    monkeypatch.setattr(tokenizers, 'FILE_VOCABULARY_DIGESTS', RecentResults(8))
    path = write({'[UNK]': 0, '<blank>': 1, 'two': 2, 'red': 3})
    first, second = HFTokenizer(tokenizer_file=path), HFTokenizer(tokenizer_file=path)
    assert _read_tokenizer_file.cache_info().misses == 1
    assert first.pad_id == second.pad_id == 1 and second.encode('two red') == [2, 3]
    expected = hashlib.sha256(b'[["<blank>", 1], ["[UNK]", 0], ["red", 3], ["two", 2]]')
    assert first.vocabulary_digest() == second.vocabulary_digest() == expected.hexdigest()[:16]
    assert len(digested) == 1
    path = write({'[UNK]': 0, 'red': 1, 'two': 2, 'dogs': 3, '<blank>': 4})
    third = HFTokenizer(tokenizer_file=path)
    assert _read_tokenizer_file.cache_info().misses == 2
    assert third.pad_id == 4 and third.encode('two red dogs') == [2, 1, 3]
    expected = hashlib.sha256(
        b'[["<blank>", 4], ["[UNK]", 0], ["dogs", 3], ["red", 1], ["two", 2]]')
    assert third.vocabulary_digest() == expected.hexdigest()[:16] and len(digested) == 2

    class Extended(HFTokenizer):  # a user's tokenizer listing one more token than its file
        def vocabulary(self) -> dict[str, int]:
            return {**self.token_ids, 'cats': 5}

    assert Extended(tokenizer_file=path).vocabulary_digest() == hashlib.sha256(
        b'[["<blank>", 4], ["[UNK]", 0], ["cats", 5], ["dogs", 3], ["red", 1], ["two", 2]]'
    ).hexdigest()[:16]


def test_a_tokenizer_file_names_the_id_its_model_writes_for_an_unknown_piece(shared_data,
                                                                             tmp_path):
    """XLM-R's Unigram model (read from the head of its state) writes ``<unk>`` = 3, as the
    whole state parsed says; a WordPiece model its ``[UNK]``; a byte-level BPE none."""
    import json

    from tokenizers import Tokenizer, models

    xlmr = shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json'
    state = json.loads(Tokenizer.from_file(str(xlmr)).model.__getstate__())
    assert HFTokenizer(tokenizer_file=str(xlmr)).unk_id == state['unk_id'] == 3
    for name, model, unk_id in (
            ('unigram', models.Unigram([('<pad>', 0.0), ('x', -1.0)], unk_id=None), None),
            ('wordpiece', models.WordPiece({'[PAD]': 0, 'a': 1, '[UNK]': 2},
                                           unk_token='[UNK]'), 2),
            ('bpe', models.BPE({'<pad>': 0, 'x': 1}, []), None)):
        Tokenizer(model).save(str(tmp_path / f'{name}.json'))
        assert HFTokenizer(tokenizer_file=str(tmp_path / f'{name}.json')).unk_id == unk_id, name


def test_a_trained_sentencepiece_needs_room_for_its_characters_and_five_pieces():
    """The corpus has 37 distinct characters; pad, unk, BOS, EOS and the word boundary '▁'
    take five more pieces."""
    assert SentencePieceTokenizer(corpus=CORPUS, vocab_size=42).vocab_size == 42
    with pytest.raises(ValueError, match='vocab_size 41 is smaller than the 37 distinct'):
        SentencePieceTokenizer(corpus=CORPUS, vocab_size=41)



def test_a_sentencepiece_trained_as_bpe_learns_merges_as_many_as_asked(tmp_path):
    """model_type='bpe': SentencePiece scores a BPE model's pieces by their merge order (0, -1,
    -2, ... past the specials and characters' own), a unigram model's by log-likelihoods; BPE
    keeps every piece asked for where unigram stops at what the corpus supports. The type
    travels in the model: reloaded from its file, the tokenizer encodes alike."""
    bpe = SentencePieceTokenizer(corpus=CORPUS * 10, vocab_size=64, model_type='bpe')
    unigram = SentencePieceTokenizer(corpus=CORPUS * 10, vocab_size=64)
    learned = range(4, bpe.vocab_size)  # past pad, unk, BOS and EOS
    assert [bpe._sp.get_score(i) for i in learned[:6]] == [0.0, -1.0, -2.0, -3.0, -4.0, -5.0]
    assert not all(float(unigram._sp.get_score(i)).is_integer() for i in learned[:6])
    assert bpe.vocab_size == 64 > unigram.vocab_size
    # Every BPE piece of two characters or more is the merge of two shorter pieces.
    pieces = {bpe._sp.id_to_piece(i) for i in learned}
    assert all(any(p[:cut] in pieces and p[cut:] in pieces for cut in range(1, len(p)))
               for p in pieces if len(p) > 1)
    (tmp_path / 'bpe.model').write_bytes(bpe.vocabulary())
    reloaded = SentencePieceTokenizer(model_file=str(tmp_path / 'bpe.model'))
    assert reloaded.encode('zwei rote Kreise') == bpe.encode('zwei rote Kreise')
    with pytest.raises(ValueError, match=r"model_type='wordpiece': xmr trains 'unigram' or "
                       r"'bpe'"):
        SentencePieceTokenizer(corpus=CORPUS, model_type='wordpiece')


def test_a_trained_sentencepiece_counts_the_characters_it_learns_after_normalising():
    """SentencePiece learns from NFKC-normalised text: decomposed Hangul (NFD, 10 + 5 jamo)
    composes into its 50 syllables, full-width Latin folds into ASCII. The check counted the
    jamo and let SentencePiece stop with its own 'INTERNAL: src/trainer_interface.cc' error,
    and counted full-width letters beside their ASCII ones, refusing room SentencePiece does
    not need. Expected: the counts of the normalised text, as for CORPUS above (37 characters
    and five pieces)."""
    import unicodedata

    syllables = [chr(0xAC00 + (initial * 21 + vowel) * 28)
                 for initial in range(10) for vowel in range(5)]
    decomposed = [unicodedata.normalize('NFD', ' '.join(syllables[i:i + 5]))
                  for i in range(0, 50, 5)]
    with pytest.raises(ValueError, match='vocab_size 40 is smaller than the 50 distinct'):
        SentencePieceTokenizer(corpus=decomposed * 3, vocab_size=40)
    full_width = [''.join(chr(ord(c) + 0xFEE0) if '!' <= c <= '~' else c for c in caption)
                  for caption in CORPUS]
    assert SentencePieceTokenizer(corpus=CORPUS + full_width, vocab_size=42).vocab_size == 42

def test_a_caption_of_exactly_max_length_tokens_is_not_reported_as_truncated(monkeypatch):
    from xmr.models.language import tokenizers

    logged = []
    monkeypatch.setattr(tokenizers, 'print_log', lambda message, **_: logged.append(message))
    options = dict(corpus=CORPUS * 10, vocab_size=64)
    lengths = sorted(len(SentencePieceTokenizer(**options).encode(text)) for text in CORPUS)
    assert lengths[-2] < lengths[-1]  # one longest caption
    SentencePieceTokenizer(**options, max_length=lengths[-1])
    assert '; 0% of them are longer than' in logged[-1]
    SentencePieceTokenizer(**options, max_length=lengths[-1] - 1)
    assert '; 17% of them are longer than' in logged[-1]  # 1 of the 6 captions


def test_open_clip_tokenizer_gives_open_clips_ids_padded_with_zeros():
    import open_clip

    texts = ['a red circle', 'two blue squares on the left of a big green triangle']
    expected = open_clip.get_tokenizer('ViT-B-32')(texts)
    assert torch.equal(OpenCLIPTokenizer(pad_to=77)(texts)['input_ids'], expected)


def test_open_clip_s_tokenizer_is_read_once_per_architecture(monkeypatch):
    """Reading CLIP's BPE merges took 0.13 s a build, every time a model was built (580 builds,
    78 of the 906 s of tests/engine and tests/configs); tokenizers sharing it keep their own
    settings and give open_clip's ids."""
    import open_clip

    from xmr.models.language import tokenizers

    read, real = [], open_clip.get_tokenizer
    monkeypatch.setattr(open_clip, 'get_tokenizer', lambda name: read.append(name) or real(name))
    tokenizers._open_clip_tokenizer.cache_clear()
    texts = ['a red circle', 'two blue squares on the left of a big green triangle']
    try:
        full, short = OpenCLIPTokenizer(pad_to=77), OpenCLIPTokenizer(max_length=5)
        OpenCLIPTokenizer('RN50')
        assert read == ['ViT-B-32', 'RN50']
        assert torch.equal(full(texts)['input_ids'], real('ViT-B-32')(texts))
        # open_clip's first 4 ids, then its end token
        assert short(texts)['input_ids'].tolist() == [
            [*ids[:4], 49407] for ids in real('ViT-B-32')(texts).tolist()]
    finally:
        tokenizers._open_clip_tokenizer.cache_clear()


@pytest.mark.parametrize('texts, langs', [('a dog', None), (['a dog', 'ein Hund'], 'de')])
def test_a_single_string_for_the_captions_or_their_languages_is_refused(texts, langs):
    """A string is a sequence of one-character captions (languages): refused, not split."""
    with pytest.raises(TypeError, match=r'a list of strings, one per caption'):
        OpenCLIPTokenizer()(texts, langs)


def test_nllb_pieces_drop_the_language_code_and_the_end_token(nllb_folder):
    tokenizer = NLLBTokenizer(tokenizer_file=str(nllb_folder / 'tokenizer.json'))
    assert tokenizer.start_tokens == 1 and tokenizer.pieces('a red') == [4, 5, 4, 22, 9, 8]


def test_a_tokenizer_file_that_is_no_tokenizers_json_is_named_with_what_to_pass(tmp_path):
    config = tmp_path / 'tokenizer_config.json'
    config.write_text('{"model_max_length": 512}', encoding='utf-8')
    with pytest.raises(ValueError, match=rf"tokenizer_file {config} is not a `tokenizers` JSON "
                                         r'file \(tokenizer.json\)'):
        HFTokenizer(tokenizer_file=str(config))
    with pytest.raises(FileNotFoundError, match=rf'tokenizer_file {tmp_path} is a folder: pass '
                                                r'it as name_or_path'):
        HFTokenizer(tokenizer_file=str(tmp_path))


def test_a_sentencepiece_model_file_that_is_no_model_is_named(tmp_path):
    path = tmp_path / 'tokenizer.json'
    path.write_text('{}', encoding='utf-8')
    with pytest.raises(ValueError, match=rf'SentencePiece model_file {path} is not a '
                                         'SentencePiece model'):
        SentencePieceTokenizer(model_file=str(path))


def test_open_clip_tokenizer_refuses_other_tokenizers_and_unknown_names_before_any_download(
        monkeypatch):
    """An architecture with a Hugging Face tokenizer is refused from its config (offline its
    tokenizer would first fail to download); a misspelt name is refused, not read as CLIP's."""
    import open_clip

    def no_download(*args, **kwargs):
        raise AssertionError('open_clip.get_tokenizer called')

    monkeypatch.setattr(open_clip, 'get_tokenizer', no_download)
    with pytest.raises(ValueError, match=r"'xlm-roberta-base-ViT-B-32' is the Hugging Face "
                                         r"tokenizer 'xlm-roberta-base'.*use HFTokenizer"):
        OpenCLIPTokenizer('xlm-roberta-base-ViT-B-32')
    with pytest.raises(ValueError, match=r"unknown open_clip architecture 'ViT-B-32-typo'"):
        OpenCLIPTokenizer('ViT-B-32-typo')


@pytest.fixture(scope='module')
def left_truncating_xlmr_folder(tmp_path_factory) -> Path:
    """An XLM-R snapshot (its vocabulary cut) whose config says ``truncation_side='left'``,
    written once."""
    from transformers import XLMRobertaTokenizerFast

    folder = tmp_path_factory.mktemp('xlmr_left')
    (folder / 'cut.json').write_text(json.dumps(xlmr_spec(cut=True)), encoding='utf-8')
    XLMRobertaTokenizerFast(tokenizer_file=str(folder / 'cut.json'),
                            truncation_side='left').save_pretrained(folder)
    return folder


@pytest.mark.parametrize('source', ['name_or_path', 'tokenizer_file'])
def test_a_tokenizer_that_truncates_on_the_left_is_cut_as_hugging_face_cuts_it(
        left_truncating_xlmr_folder, source):
    """``truncation_side='left'`` in the snapshot's config: the start token, the caption's last
    pieces and the end token, the ids transformers' tokenizer gives."""
    from transformers import AutoTokenizer

    folder = left_truncating_xlmr_folder
    path = folder if source == 'name_or_path' else folder / 'tokenizer.json'
    tokenizer = HFTokenizer(**{source: str(path)}, max_length=6)
    reference = AutoTokenizer.from_pretrained(str(folder))
    captions = ['one two three four five six seven eight', '雪の中で遊ぶ二匹の犬と一人の子供', 'a']
    expected = [reference(c, truncation=True, max_length=6)['input_ids'] for c in captions]
    assert expected[0][:2] != reference(captions[0])['input_ids'][:2]  # cut on the left
    batch = tokenizer(captions)
    assert [ids[:n] for ids, n in zip(batch['input_ids'].tolist(),
                                      batch['attention_mask'].sum(1).tolist())] == expected


@pytest.mark.parametrize('caption', [None, float('nan'), 3])
def test_a_caption_that_is_no_string_is_named_with_its_index(caption):
    """An annotation's missing caption (``None``, pandas' NaN) is named, not failed on inside
    the tokenizer's library."""
    with pytest.raises(TypeError, match=rf'texts\[1\] is {caption!r} \({type(caption).__name__}'
                                        r'\), not a string'):
        OpenCLIPTokenizer()(['a dog', caption])


def _real_captions(shared_data) -> list[str]:
    """The first 40 captions of each XTD10 language (Latin, Cyrillic, Hangul, Han, kana) and of
    Multi30K's validation split in en, de, fr, cs, and web-text oddities: HTML entities, runs
    of whitespace, a caption longer than any context, emoji."""
    import gzip

    captions = []
    for path in sorted((shared_data / 'xtd10').glob('test_1kcaptions_*.txt')):
        captions += path.read_text(encoding='utf-8').splitlines()[:40]
    for lang in ('en', 'de', 'fr', 'cs'):
        with gzip.open(shared_data / 'multi30k' / 'raw' / f'val.{lang}.gz', 'rt',
                       encoding='utf-8') as lines:
            captions += [next(lines).rstrip('\n') for _ in range(40)]
    return captions + ['Tom &amp; Jerry', '  two\tdogs \n running ', 'dog ' * 120, 'a cat 🐈‍⬛']


@pytest.mark.parametrize('clean', ['whitespace', 'canonicalize'])
def test_hf_tokenizer_gives_open_clips_ids_on_real_captions(shared_data, xlmr_tokenizer_files,
                                                            clean):
    """open_clip's ``HFTokenizer`` of the XLM-R CLIPs (``'whitespace'``) and of SigLIP
    (``'canonicalize'``) on XLM-R's vocabulary: the same ids, padded to the context, from the
    tokenizer file and from a transformers folder of it."""
    import open_clip

    files = xlmr_tokenizer_files(post_processor=True)
    captions = _real_captions(shared_data)
    expected = open_clip.tokenizer.HFTokenizer(str(files / 'folder'), context_length=77,
                                               clean=clean)(captions)
    for tokenizer in (HFTokenizer(tokenizer_file=str(files / 'tokenizer.json'), clean=clean,
                                  pad_to=77),
                      HFTokenizer(name_or_path=str(files / 'folder'), clean=clean,
                                  pad_to=77)):
        assert torch.equal(tokenizer(captions)['input_ids'], expected)


def test_open_clip_tokenizer_gives_open_clips_ids_on_real_captions(shared_data):
    import open_clip

    captions = _real_captions(shared_data)
    expected = open_clip.get_tokenizer('ViT-B-32')(captions)
    assert torch.equal(OpenCLIPTokenizer(pad_to=77)(captions)['input_ids'], expected)


#: Captions in scripts CLIP-style models read poorly (Amharic, Khmer, Burmese: Gemma's byte
#: fallback, XLM-R's pieces), an empty one, one of spaces only and one past any context.
HARD_CAPTIONS = ['A dog runs.', '', '   ', 'ውሻ በሣር ላይ ይሮጣል', 'ឆ្កែរត់នៅលើស្មៅ',
                 'ခွေးသည် မြက်ခင်းပေါ်တွင် ပြေးနေသည်', 'a dog ' * 60]


def gemma_folder(folder):
    """A SigLIP 2 tokenizer folder as open_clip's ``SigLipTokenizer`` writes the ``timm/`` ones:
    Gemma's layout (``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 2, ``<unk>`` 3, ``<mask>`` 4, the 256
    byte-fallback pieces), no ``<bos>``, ``<eos>`` appended, right padding with ``<pad>``."""
    from transformers import GemmaTokenizerFast

    vocab = {'<pad>': 0, '<eos>': 1, '<bos>': 2, '<unk>': 3, '<mask>': 4,
             **{f'<0x{byte:02X}>': 5 + byte for byte in range(256)}}
    for piece in '\u2581abcdefghijklmnopqrstuvwxyz':
        vocab[piece] = len(vocab)
    tokenizer = GemmaTokenizerFast(vocab=vocab, merges=[], padding_side='right',
                                   add_bos_token=False, add_eos_token=True)
    tokenizer.pad_token_id, tokenizer.eos_token_id = 0, 1
    tokenizer.save_pretrained(folder)
    return folder


def test_a_siglip2_gemma_tokenizer_gives_open_clips_ids_on_both_routes(tmp_path):
    """SigLIP 2's Gemma tokenizer writes no ``<bos>`` and appends ``<eos>`` (1), which a caption
    cut at the 64-token context keeps last, and pads with ``<pad>`` (0), as open_clip's
    ``HFTokenizer`` does; Amharic, Khmer and Burmese come out as byte pieces (5 + byte)."""
    from open_clip.tokenizer import HFTokenizer as OpenCLIPHFTokenizer

    folder = gemma_folder(tmp_path)
    expected = OpenCLIPHFTokenizer(str(folder), context_length=64,
                                   clean='canonicalize')(HARD_CAPTIONS)
    assert expected[1].tolist() == [1] + [0] * 63  # the empty caption: <eos>, then padding
    assert expected[-1, -1] == 1 and 2 not in expected
    assert expected[3, :3].tolist() == [5 + byte for byte in 'ው'.encode()]
    for source in (dict(tokenizer_file=str(folder / 'tokenizer.json')),
                   dict(name_or_path=str(folder))):
        tokenizer = HFTokenizer(clean='canonicalize', max_length=64, pad_to=64, **source)
        assert (tokenizer.end_id, tokenizer.start_tokens, tokenizer.pad_id) == (1, 0, 0)
        assert torch.equal(tokenizer(HARD_CAPTIONS)['input_ids'], expected)


def test_an_xlmr_tokenizer_gives_open_clips_ids_and_end_position_on_hard_captions(
        xlmr_tokenizer_files):
    """MetaCLIP 2's and the XLM-R CLIPs' tokenizer layout (the real XLM-R file): the ids
    open_clip's ``HFTokenizer`` gives at context 77 (its default ``whitespace`` cleaning) on
    both routes, and ``eos_index`` where open_clip's ``eos`` pooling looks (the first ``</s>``,
    2)."""
    from open_clip.tokenizer import HFTokenizer as OpenCLIPHFTokenizer

    files = xlmr_tokenizer_files(post_processor=True)
    expected = OpenCLIPHFTokenizer(str(files / 'folder'), context_length=77)(HARD_CAPTIONS)
    assert expected[1, :3].tolist() == [0, 2, 1] and expected[-1, -1] == 2
    for source in (dict(tokenizer_file=str(files / 'tokenizer.json')),
                   dict(name_or_path=str(files / 'folder'))):
        tokens = HFTokenizer(clean='whitespace', pad_to=77, **source)(HARD_CAPTIONS)
        assert torch.equal(tokens['input_ids'], expected)
        assert torch.equal(tokens['eos_index'], (expected == 2).int().argmax(1))


#: SigLIP 2's tokenizer_config.json fields: no ``<bos>``, ``<eos>`` appended.
SIGLIP2_FLAGS = dict(add_bos_token=False, add_eos_token=True)


def test_siglip2_file_route_equals_the_hub_route_and_open_clip_on_real_captions(shared_data,
                                                                               tmp_path):
    """A Gemma snapshot whose file and config agree: the tokenizer.json alone, its folder through
    ``AutoTokenizer`` (which rebuilds Gemma's pipeline from the vocabulary and merges) and
    open_clip's ``HFTokenizer`` with SigLIP 2's record (``canonicalize``, context 64) give the
    same ids on real captions of XTD10's 11 languages and Multi30K's four, the CJK ones partly as
    byte pieces."""
    from open_clip.tokenizer import HFTokenizer as OpenCLIPHFTokenizer

    captions = _real_captions(shared_data)
    folder = gemma_snapshot(tmp_path / 'siglip2', captions[::2], '$A <eos>', **SIGLIP2_FLAGS)
    expected = OpenCLIPHFTokenizer(str(folder), context_length=64,
                                   clean='canonicalize')(captions)
    assert ((expected >= 5) & (expected < 261)).any() and 2 not in expected
    assert (expected == 1).sum() == len(captions)  # one <eos> each, the long one's kept last
    for source in (dict(tokenizer_file=str(folder / 'tokenizer.json')),
                   dict(name_or_path=str(folder))):
        tokenizer = HFTokenizer(clean='canonicalize', max_length=64, pad_to=64, **source)
        assert torch.equal(tokenizer(captions)['input_ids'], expected)


@pytest.mark.parametrize('flags, post_processor, field', [
    (SIGLIP2_FLAGS, '<bos> $A', 'add_bos_token=false'),
    (dict(add_bos_token=True, add_eos_token=True), '<bos> $A', 'add_eos_token=true'),
    (dict(add_eos_token=True, eos_token='</s>'), '$A <eos>', "'</s>'"),
], ids=['siglip2_config_gemma_file', 'llama_style_eos', 'eos_not_in_vocabulary'])
def test_a_config_whose_bos_eos_flags_contradict_its_file_is_refused_on_both_routes(
        shared_data, tmp_path, flags, post_processor, field):
    """transformers 4 wrote ``<bos>`` / ``<eos>`` as ``tokenizer_config.json``'s
    ``add_bos_token`` / ``add_eos_token`` say; transformers 5.23 (and open_clip with it) keeps
    the ``tokenizer.json``'s post-processor, as the file route does: the ids then hang on the
    library version, so both routes refuse, naming the config file and the field."""
    from transformers import AutoTokenizer

    folder = gemma_snapshot(tmp_path / 'snapshot', _real_captions(shared_data)[:200],
                            post_processor, **flags)
    if field.startswith('add_'):  # transformers 5 keeps the file's ids, ignoring the field
        ids = AutoTokenizer.from_pretrained(str(folder))('a dog')['input_ids']
        assert (ids[0] == 2, ids[-1] == 1) == (post_processor.startswith('<bos>'),
                                                post_processor.endswith('<eos>'))
    for source in (dict(tokenizer_file=str(folder / 'tokenizer.json')),
                   dict(name_or_path=str(folder))):
        with pytest.raises(ValueError, match=rf'tokenizer_config\.json: .*{field}'):
            HFTokenizer(**source)


@pytest.mark.parametrize('tokens_map', [{'bos_token': '<bos>', 'eos_token': '<eos>'}, None],
                         ids=['special_tokens_map', 'no_token_named'])
def test_flags_agreeing_with_the_file_pass_with_their_tokens_named_beside_the_config(
        shared_data, tmp_path, tokens_map):
    """An older snapshot names its specials in ``special_tokens_map.json``, not in
    ``tokenizer_config.json``: its agreeing ``add_eos_token`` was refused as 'its eos_token
    None is no token of the vocabulary' (found in review); a token no file names is not
    compared."""
    folder = gemma_snapshot(tmp_path / 'snapshot', _real_captions(shared_data)[:200],
                            '$A <eos>', bos_token=None, eos_token=None, **SIGLIP2_FLAGS)
    if tokens_map is not None:
        (folder / 'special_tokens_map.json').write_text(json.dumps(tokens_map))
    for source in (dict(tokenizer_file=str(folder / 'tokenizer.json')),
                   dict(name_or_path=str(folder))):
        assert HFTokenizer(**source).encode('x')[-1] == 1


@pytest.mark.parametrize('padding_side, named', [
    (None, "padding_side (unset: GemmaTokenizer's default, 'left')"),
    ('left', "padding_side='left'"),
    ('right', None),
], ids=['gemma_default', 'left', 'right'])
def test_a_snapshot_padded_on_the_left_says_so_on_both_routes(shared_data, tmp_path,
                                                             padding_side, named):
    """A Gemma snapshot whose ``tokenizer_config.json`` sets no ``padding_side`` pads on the left
    in ``AutoTokenizer`` (``GemmaTokenizer``'s default), and so does open_clip's
    ``HFTokenizer``; xmr pads on the right and names what says otherwise, on both routes."""
    from open_clip.tokenizer import HFTokenizer as OpenCLIPHFTokenizer

    folder = gemma_snapshot(tmp_path / 'snapshot', _real_captions(shared_data)[:200],
                            '$A <eos>', padding_side=padding_side, **SIGLIP2_FLAGS)
    open_clip_ids = OpenCLIPHFTokenizer(str(folder), context_length=8,
                                        clean='canonicalize')(['a dog'])[0].tolist()
    assert (open_clip_ids[0] == 0) == (named is not None)  # padding first: on the left
    for source in (dict(tokenizer_file=str(folder / 'tokenizer.json')),
                   dict(name_or_path=str(folder))):
        tokenizer = HFTokenizer(clean='canonicalize', max_length=8, pad_to=8, **source)
        assert tokenizer(['a dog'])['input_ids'][0, -1] == 0  # xmr's padding: on the right
        if named is None:
            assert tokenizer.left_padded_by is None
        else:
            assert tokenizer.left_padded_by == f'{folder / "tokenizer_config.json"} {named}'
