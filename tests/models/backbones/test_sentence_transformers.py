"""xmr.models.backbones.sentence_transformers: a user's own sentence-transformers folder as the
teacher of docs/custom_modules.md (``SentenceEncoder``) embeds as the model's own pipeline does,
its pooling, normalisation and lower-casing read from its files; the reference is transformers'
forward with the pooling done by hand."""
import importlib
import json

import pytest
import torch
import torch.nn.functional as F
from transformers import BertModel, PreTrainedTokenizerFast, XLMRobertaConfig, XLMRobertaModel

from tests.conftest import SHARED_DATA, sentence_transformer_files, tiny_sentence_encoder
from xmr.engine.feature_cache import backbone_fingerprint
from xmr.models.backbones.sentence_transformers import (
    DENSE_ACTIVATIONS,
    read_sentence_transformer,
)

CAPTIONS = ['A man is playing with a red ball', 'two dogs on the grass in the snow',
            'the girl']


def _reference(model, folder, captions, pooling, normalize):
    """transformers' last hidden states, pooled (and normalised) by hand."""
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / 'tokenizer.json'))
    tokenizer.pad_token_id = model.config.pad_token_id
    batch = tokenizer(captions, padding=True, return_tensors='pt')
    with torch.no_grad():
        hidden = model.eval()(**batch).last_hidden_state
    if pooling == 'cls':
        pooled = hidden[:, 0]
    else:
        real = batch['attention_mask'][..., None].float()
        pooled = (hidden * real).sum(1) / real.sum(1)
    return F.normalize(pooled, dim=-1) if normalize else pooled


@pytest.mark.parametrize('pooling, normalize', [('cls', True), ('mean', False), ('mean', True)])
def test_the_docs_teacher_pools_and_normalises_as_its_folder_says(
        tmp_path, sentence_encoder_module, pooling, normalize):
    folder = tiny_sentence_encoder(tmp_path / 'teacher', pooling=pooling, normalize=normalize)
    teacher = sentence_encoder_module.SentenceEncoder(str(folder)).eval()
    with torch.no_grad():
        ours = teacher.encode_source_text(teacher.tokenizer(CAPTIONS))
    model = BertModel.from_pretrained(folder, add_pooling_layer=False)
    expected = _reference(model, folder, CAPTIONS, pooling, normalize)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)


def test_an_xlmr_folder_that_lower_cases_is_read_with_its_own_positions_case_and_ends(
        tmp_path, sentence_encoder_module):
    """XLM-R's real (cased) tokenizer, ``do_lower_case`` in sentence_bert_config.json, captions
    stripped first."""
    tokenizer_file = SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json'
    if not tokenizer_file.is_file():
        pytest.skip(f'{tokenizer_file} not found')
    folder = tmp_path / 'xlmr'
    folder.mkdir()
    (folder / 'tokenizer.json').write_bytes(tokenizer_file.read_bytes())
    torch.manual_seed(0)
    model = XLMRobertaModel(XLMRobertaConfig(
        vocab_size=250_002, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16, max_position_embeddings=66), add_pooling_layer=False)
    model.save_pretrained(folder)
    sentence_transformer_files(folder, 8, pooling='cls', normalize=True)
    (folder / 'sentence_bert_config.json').write_text(json.dumps(
        dict(max_seq_length=64, do_lower_case=True)))
    teacher = sentence_encoder_module.SentenceEncoder(str(folder)).eval()
    # Ends as Multi30K's raw lines leave some: to XLM-R's vocabulary a trailing space is a token.
    captions = [*CAPTIONS, 'A dog runs on the grass. ', ' Two children play\n']
    with torch.no_grad():
        ours = teacher.encode_source_text(teacher.tokenizer(captions))
    # sentence-transformers' Transformer.tokenize: str(caption).strip(), then do_lower_case.
    read = [caption.strip().lower() for caption in captions]
    torch.testing.assert_close(ours, _reference(model, folder, read, 'cls', True),
                               rtol=1e-5, atol=1e-5)


def test_the_fingerprint_changes_with_the_folders_pooling_and_normalisation(
        tmp_path, sentence_encoder_module):
    """Same weights, another pooling or normalisation: cached ``r^S`` are not read back."""
    keys = set()
    for pooling, normalize in [('mean', True), ('cls', True), ('mean', False)]:
        folder = tiny_sentence_encoder(tmp_path / f'{pooling}{normalize}', pooling=pooling,
                                       normalize=normalize)
        keys.add(backbone_fingerprint(sentence_encoder_module.SentenceEncoder(str(folder))))
    assert len(keys) == 3


#: LaBSE's head (768 -> 768, tanh, a bias) and a projection without bias or activation after
#: it (clip-ViT-B-32-multilingual-v1's 768 -> 512), on the tiny width.
DENSE = [dict(in_features=32, out_features=24),
         dict(in_features=24, out_features=16, bias=False,
              activation='torch.nn.modules.linear.Identity', weights='pytorch_model.bin')]


def test_the_docs_teacher_runs_the_folders_dense_layers(tmp_path, sentence_encoder_module):
    """LaBSE (Transformer, CLS Pooling, Dense tanh, Normalize) was refused for its Dense."""
    from safetensors.torch import load_file

    folder = tiny_sentence_encoder(tmp_path / 'teacher', pooling='cls', dense=DENSE)
    teacher = sentence_encoder_module.SentenceEncoder(str(folder)).eval()
    with torch.no_grad():
        ours = teacher.encode_source_text(teacher.tokenizer(CAPTIONS))
    model = BertModel.from_pretrained(folder, add_pooling_layer=False)
    pooled = _reference(model, folder, CAPTIONS, 'cls', normalize=False)
    first = load_file(str(folder / '2_Dense' / 'model.safetensors'))
    second = torch.load(folder / '3_Dense' / 'pytorch_model.bin', weights_only=True)
    hidden = torch.tanh(pooled @ first['linear.weight'].T + first['linear.bias'])
    expected = F.normalize(hidden @ second['linear.weight'].T, dim=-1)
    assert teacher.embed_dim == 16 and ours.shape == (3, 16)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
    assert not any(parameter.requires_grad for parameter in teacher.parameters())


@pytest.mark.parametrize('edit, message', [
    (lambda dense: _edit(dense / 'config.json',
                         activation_function='torch.nn.modules.activation.LeakyReLU'),
     r"2_Dense/config.json: activation_function='torch.nn.modules.activation.LeakyReLU'; xmr "
     r"runs torch.nn.modules.linear.Identity, torch.nn.modules.activation.Tanh"),
    (lambda dense: _edit(dense / 'config.json', in_features=30),
     r'2_Dense/config.json: in_features=30 but the module before it gives 32$'),
    (lambda dense: _edit(dense / 'config.json', bias=False),
     r'2_Dense does not fit the Dense layer its config.json describes \(32 -> 24, bias=False\): '
     r'1 unexpected \(linear.bias\)'),
    (lambda dense: (dense / 'model.safetensors').unlink(),
     r"Dense weights folder .*2_Dense holds none of \['model.safetensors', 'pytorch_model.bin'\]"),
], ids=['activation', 'in-features', 'bias', 'no-weights'])
def test_a_dense_layer_xmr_cannot_run_as_saved_is_refused_naming_it(
        tmp_path, sentence_encoder_module, edit, message):
    folder = tiny_sentence_encoder(tmp_path / 'teacher', dense=DENSE[:1])
    edit(folder / '2_Dense')
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        sentence_encoder_module.SentenceEncoder(str(folder))


def _edit(path, **changes):
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize('edit, message', [
    (lambda folder: _edit(folder / '1_Pooling' / 'config.json', pooling_mode_mean_tokens=False,
                          pooling_mode_max_tokens=True),
     r"1_Pooling/config.json: pooling modes \['pooling_mode_max_tokens'\] set"),
    *[(lambda folder, mode=mode: _edit(folder / '1_Pooling' / 'config.json',
                                       pooling_mode_mean_tokens=False, **{mode: True}),
       rf"1_Pooling/config.json: pooling modes \['{mode}'\] set; xmr runs exactly one")
      for mode in ('pooling_mode_mean_sqrt_len_tokens', 'pooling_mode_weightedmean_tokens',
                   'pooling_mode_lasttoken')],
    (lambda folder: _edit(folder / '1_Pooling' / 'config.json', pooling_mode_cls_token=True),
     r"1_Pooling/config.json: pooling modes \['pooling_mode_mean_tokens', "
     r"'pooling_mode_cls_token'\] set"),
    (lambda folder: _edit(folder / '1_Pooling' / 'config.json', word_embedding_dimension=16),
     r'1_Pooling/config.json: word_embedding_dimension=16 .* hidden_size=32'),
    (lambda folder: (folder / 'modules.json').write_text(json.dumps(
        [*json.loads((folder / 'modules.json').read_text()),
         dict(idx=3, name='3', path='3_Dense', type='sentence_transformers.models.Dense')])),
     r"modules.json: modules \['Transformer', 'Pooling', 'Normalize', 'Dense'\]"),
    (lambda folder: (folder / 'modules.json').write_text(json.dumps(
        [module for module in json.loads((folder / 'modules.json').read_text())
         if module['path'] != '1_Pooling'])),
     r"modules.json: modules \['Transformer', 'Normalize'\]; xmr runs Transformer, Pooling"),
    (lambda folder: (folder / 'modules.json').unlink(), r'modules.json not found'),
    (lambda folder: _edit(folder / 'config.json', model_type='distilbert'),
     r"config.json: model_type='distilbert'"),
    # A bare JSONDecodeError named no file.
    (lambda folder: (folder / 'modules.json').write_text('[{"idx": 0,'),
     r'modules.json: not a JSON file Python reads: Expecting property name enclosed in double '
     r'quotes: line 1 column 12 \(char 11\)$'),
    (lambda folder: (folder / 'config.json').write_bytes(b'{"model_type": "b\xe9rt"}'),
     r"config.json: not UTF-8: invalid bytes b'\\xe9' on line 1, byte 17; save it as UTF-8$"),
], ids=['max', 'mean-sqrt-len', 'weighted-mean', 'last-token', 'two-modes', 'width',
        'dense-after-normalize', 'no-pooling', 'no-modules', 'distilbert',
        'cut-off', 'latin-1'])
def test_a_folder_xmr_cannot_run_as_trained_is_refused_naming_file_and_field(
        tmp_path, edit, message):
    folder = tiny_sentence_encoder(tmp_path / 'teacher')
    edit(folder)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        read_sentence_transformer(folder)


def test_a_caption_longer_than_the_folders_max_seq_length_is_cut_where_the_model_cuts_it(
        tmp_path, sentence_encoder_module):
    """sentence-transformers tokenises with ``truncation=True, max_length=max_seq_length``: the
    docs' teacher had read 64 tokens of every folder's captions."""
    folder = tiny_sentence_encoder(tmp_path / 'teacher')
    (folder / 'sentence_bert_config.json').write_text(json.dumps(
        dict(max_seq_length=6, do_lower_case=False)))
    teacher = sentence_encoder_module.SentenceEncoder(str(folder)).eval()
    assert teacher.tokenizer(CAPTIONS)['input_ids'].shape[1] == 6
    with torch.no_grad():
        ours = teacher.encode_source_text(teacher.tokenizer(CAPTIONS))
    model = BertModel.from_pretrained(folder, add_pooling_layer=False).eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / 'tokenizer.json'))
    tokenizer.pad_token_id = model.config.pad_token_id
    batch = tokenizer(CAPTIONS, padding=True, truncation=True, max_length=6,
                      return_tensors='pt')
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    real = batch['attention_mask'][..., None].float()
    expected = F.normalize((hidden * real).sum(1) / real.sum(1), dim=-1)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(
        ours, _reference(model, folder, CAPTIONS, 'mean', True), atol=1e-3)


@pytest.mark.parametrize('settings, tokenizer_config, expected', [
    (dict(max_seq_length=128), dict(model_max_length=512), 128),
    (dict(max_seq_length=None), dict(model_max_length=40), 40),
    ({}, dict(model_max_length=int(1e30)), 64),   # transformers' "no limit"
    (None, None, 64),                              # config.json's max_position_embeddings
])
def test_the_tokens_read_fall_back_as_sentence_transformers_falls_back(
        tmp_path, settings, tokenizer_config, expected):
    folder = tiny_sentence_encoder(tmp_path / 'teacher')
    if settings is not None:
        (folder / 'sentence_bert_config.json').write_text(json.dumps(settings))
    if tokenizer_config is not None:
        (folder / 'tokenizer_config.json').write_text(json.dumps(tokenizer_config))
    assert read_sentence_transformer(folder).max_length == expected


def test_each_dense_activation_is_the_class_its_name_imports():
    """sentence-transformers imports ``activation_function`` by its dotted name."""
    for name, module in DENSE_ACTIVATIONS.items():
        path, cls = name.rsplit('.', 1)
        assert getattr(importlib.import_module(path), cls) is module, name


def test_a_dense_config_giving_only_its_widths_runs_with_dense_defaults(tmp_path):
    """``Dense(in_features, out_features)``: a bias and tanh."""
    folder = tiny_sentence_encoder(tmp_path / 'teacher', dense=DENSE[:1])
    (folder / '2_Dense' / 'config.json').write_text(json.dumps(
        dict(in_features=32, out_features=24)))
    (layer,) = read_sentence_transformer(folder).dense
    assert (layer.bias, layer.activation) == (True, 'torch.nn.modules.activation.Tanh')


def test_the_pooling_module_is_read_from_the_path_modules_json_gives(tmp_path):
    folder = tiny_sentence_encoder(tmp_path / 'teacher', pooling='cls')
    (folder / '1_Pooling').rename(folder / 'pooling')
    modules = json.loads((folder / 'modules.json').read_text())
    modules[1]['path'] = 'pooling'
    (folder / 'modules.json').write_text(json.dumps(modules))
    assert read_sentence_transformer(folder).pooling == 'cls'


def test_the_tokenizer_config_strips_keeps_case_by_default_and_takes_a_shorter_length(
        tmp_path):
    folder = tiny_sentence_encoder(tmp_path / 'teacher')
    (folder / 'sentence_bert_config.json').write_text(json.dumps(dict(max_seq_length=48)))
    pipeline = read_sentence_transformer(folder)
    expected = dict(type='HFTokenizer', tokenizer_file='tok.json', strip=True, lowercase=False,
                    max_length=48)
    assert pipeline.tokenizer_cfg('tok.json') == expected
    assert pipeline.tokenizer_cfg('tok.json', 8) == dict(expected, max_length=8)
