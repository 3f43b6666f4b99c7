"""MLA / DASD released checkpoints -> xmr: a file with the authors' key names and layout is
converted and xmr's r^T equals the authors' computation re-derived here from the raw tensors;
bad files are refused naming the file, the keys and the fix, and nothing is written."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config

import xmr.models.conversion.authors as authors
from tests.conftest import CORPUS, REPO, SHARED_DATA
from tests.zip_records import damage_record
from xmr.apis import encode_texts, init_retriever
from xmr.conversion_cli import main
from xmr.models.conversion import ConversionError, convert_authors_checkpoint
from xmr.models.conversion.authors import build_model
from xmr.models.conversion.dasd import map_dasd
from xmr.models.conversion.mla import map_mla
from xmr.packaged import config_path
from xmr.registry import MODELS
from xmr.version import provenance

#: A real multilingual tokenizer file of the shared data (read in place).
XLMR_TOKENIZER = SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json'
WIDTH, EMBED, HEADS, BLOCKS, CONTEXT, TABLE, D_U, D_Z = 32, 24, 2, 3, 16, 16, 4, 8
LANGS = ['de', 'zh']
TEXTS = ['ein roter Kreis', 'zwei blaue Quadrate links', 'drei grüne Dreiecke oben']


def tiny_clip(patch: int = 16) -> dict:
    return dict(embed_dim=EMBED, quick_gelu=True,
                vision_cfg=dict(image_size=32, layers=1, width=16, patch_size=patch,
                                head_width=16),
                text_cfg=dict(context_length=CONTEXT, vocab_size=49408, width=WIDTH,
                              heads=HEADS, layers=BLOCKS))


def model_cfg(method: str, patch: int = 16) -> dict:
    """The authors' computation on a tiny CLIP (configs/dasd/*_authors.py at small widths)."""
    branch = dict(type='TargetLanguageBranch', languages=LANGS,
                  tokenizer=dict(type='SentencePieceTokenizer', corpus=CORPUS * 20,
                                 vocab_size=48, max_length=CONTEXT, pad_to=CONTEXT),
                  embedding=dict(type='TargetEmbedding', table_width=TABLE),
                  adapters=dict(type='StaticAdapter', hidden=D_U))
    cfg = dict(type='CrossLingualRetriever',
               backbone=dict(type='OpenCLIPBackbone', arch=None, model_cfg=tiny_clip(patch),
                             tokenizer=dict(type='OpenCLIPTokenizer', model_name='ViT-B-32',
                                            max_length=CONTEXT)),
               language_branch=branch,
               losses=dict(cl=dict(type='AlignmentLoss', kind='mse')))
    if method == 'dasd':
        branch['adapters'] = dict(type='DynamicAdapter', hidden=D_U)
        branch['embedding']['padding_idx'] = None
        cfg['disentangler'] = dict(
            type='SemanticsDisentangler', depth=2, stream_adapters=False,
            padding_as_tokens=True, generator=dict(d_z=D_Z, d_u=D_U, activation='quick_gelu'),
            use_adversarial=False)
    return cfg


def write_config(path: Path, method: str, patch: int = 16) -> Path:
    Config(dict(model=model_cfg(method, patch))).dump(path)
    return path


def authors_state_dict(method: str, langs=LANGS) -> dict[str, torch.Tensor]:
    """A state dict with the authors' names and layout: OpenAI CLIP keys + their additions."""
    torch.manual_seed(0)
    clip = MODELS.build(model_cfg(method)).backbone.clip
    state = {k: v + 0.05 * torch.randn_like(v) if v.is_floating_point() else v
             for k, v in clip.state_dict().items()}
    vocab = MODELS.build(model_cfg(method)).language_branch.tokenizer.vocab_size

    def rand(*shape):
        return 0.2 * torch.randn(*shape)

    state.update({'multilingual_embedding.weight': rand(vocab, TABLE),
                  'multilingual_embedding_linear.weight': rand(WIDTH, TABLE),
                  'multilingual_embedding_linear.bias': rand(WIDTH),
                  'logit_scale': torch.tensor(4.6)})
    for block in range(BLOCKS):
        for lang in langs:
            acquirer = f'transformer.resblocks.{block}.acquirer.{lang}.'
            state[acquirer + 'ln.weight'] = torch.ones(WIDTH)
            state[acquirer + 'ln.bias'] = torch.zeros(WIDTH)
            if method == 'mla':
                state.update({acquirer + 'mlp.c_fc.weight': rand(D_U, WIDTH),
                              acquirer + 'mlp.c_fc.bias': rand(D_U),
                              acquirer + 'mlp.c_proj.weight': rand(WIDTH, D_U),
                              acquirer + 'mlp.c_proj.bias': rand(WIDTH)})
                continue
            state.update({acquirer + 'mlp_beforez.c_fc.weight': rand(D_U, WIDTH),
                          acquirer + 'mlp_beforez.c_fc.bias': rand(D_U),
                          acquirer + 'mlp_afterz.c_proj2.weight': rand(WIDTH, D_U),
                          acquirer + 'mlp_afterz.c_proj2.bias': rand(WIDTH),
                          acquirer + 'mlp_sr.c_fc.weight': rand(8, WIDTH),
                          acquirer + 'mlp_sr.c_proj.bias': rand(WIDTH),
                          acquirer + 'mlp_sa.c_fc.weight': rand(8, WIDTH),
                          acquirer + 'mlp_sa.c_proj.bias': rand(WIDTH)})
        if method == 'dasd':
            state[f'transformer.resblocks.{block}.mlp_zi.c_fc1.weight'] = rand(D_U * D_U, D_Z)
            state[f'transformer.resblocks.{block}.mlp_zi.c_fc1.bias'] = rand(D_U * D_U)
    if method == 'dasd':
        state.update({'transformer.zi_adapter_student.c_fc1.weight': rand(D_Z, EMBED + WIDTH),
                      'transformer.zi_adapter_student.c_fc1.bias': rand(D_Z),
                      'ln_mu.weight': 1 + rand(WIDTH), 'ln_mu.bias': rand(WIDTH),
                      'ln_sigma.weight': 1 + rand(WIDTH), 'ln_sigma.bias': rand(WIDTH),
                      'sr_projection': rand(WIDTH, EMBED), 'sigma_projection': rand(WIDTH, EMBED),
                      'target_projection': rand(WIDTH, EMBED),
                      # their Transformer class builds one for the image tower too
                      'visual.transformer.zi_adapter_student.c_fc1.weight': rand(D_Z, 16),
                      'AdvAgent.discriminator.0.weight': rand(256, WIDTH + EMBED)})
    return state


# ---------------------------------------------------------------- the authors' forward, by hand
def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


def layer_norm(x, s, prefix):
    return F.layer_norm(x, (x.shape[-1],), s[prefix + '.weight'], s[prefix + '.bias'])


def block(x, s, i, prefix='', causal=True, heads=HEADS):
    """OpenAI CLIP's residual block; the text tower's with the causal mask only (padding
    attends like any token), the image tower's without a mask."""
    p = f'{prefix}transformer.resblocks.{i}.'
    b, n, d = x.shape
    q, k, v = (layer_norm(x, s, p + 'ln_1') @ s[p + 'attn.in_proj_weight'].T
               + s[p + 'attn.in_proj_bias']).chunk(3, -1)
    q, k, v = (t.reshape(b, n, heads, d // heads).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / (d // heads) ** 0.5
    if causal:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float('-inf'))
    context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
    x = x + context @ s[p + 'attn.out_proj.weight'].T + s[p + 'attn.out_proj.bias']
    h = layer_norm(x, s, p + 'ln_2') @ s[p + 'mlp.c_fc.weight'].T + s[p + 'mlp.c_fc.bias']
    return x + quick_gelu(h) @ s[p + 'mlp.c_proj.weight'].T + s[p + 'mlp.c_proj.bias']


def linear(x, s, prefix):
    return x @ s[prefix + '.weight'].T + s[prefix + '.bias']


def authors_forward(s, ids, eos, lang, method):
    """``r^T`` as clip/model.py of MLA / DASD computes it, ``[B, E]``."""
    rows = torch.arange(ids.shape[0])
    x = linear(s['multilingual_embedding.weight'][ids], s, 'multilingual_embedding_linear')
    x = x + s['positional_embedding'][:ids.shape[1]]
    if method == 'dasd':
        h = block(block(x, s, 0), s, 1)
        sr = layer_norm(h, s, 'ln_mu')[rows, eos] @ s['sr_projection']
        sa = layer_norm(h, s, 'ln_sigma').mean(1)
        z = quick_gelu(linear(torch.cat([sr, sa], -1), s, 'transformer.zi_adapter_student.c_fc1'))
    for i in range(BLOCKS):
        x = block(x, s, i)
        a = f'transformer.resblocks.{i}.acquirer.{lang}.'
        if method == 'mla':
            x = x + linear(torch.relu(linear(x, s, a + 'mlp.c_fc')), s, a + 'mlp.c_proj')
            continue
        w = linear(z, s, f'transformer.resblocks.{i}.mlp_zi.c_fc1').reshape(-1, D_U, D_U)
        h = linear(x, s, a + 'mlp_beforez.c_fc') @ w
        x = x + linear(torch.relu(h), s, a + 'mlp_afterz.c_proj2')
    return layer_norm(x, s, 'ln_final')[rows, eos] @ s['text_projection']


MAPPINGS = {'mla': map_mla, 'dasd': map_dasd}


@pytest.mark.parametrize('method', ['mla', 'dasd'])
def test_converted_checkpoint_encodes_as_the_authors_code(method, tmp_path):
    state = authors_state_dict(method)
    torch.save(state, tmp_path / 'pytorch_model.bin.18000')
    config = write_config(tmp_path / 'authors.py', method)
    out = tmp_path / 'xmr.pth'
    report = convert_authors_checkpoint(method, tmp_path / 'pytorch_model.bin.18000', config,
                                        out, MAPPINGS[method])
    assert 'logit_scale' in report.used
    assert 'transformer.resblocks.2.acquirer.zh.ln.bias' in report.unused
    if method == 'dasd':
        assert {'AdvAgent.discriminator.0.weight', 'sigma_projection', 'target_projection',
                'visual.transformer.zi_adapter_student.c_fc1.weight'} <= set(report.unused)
        assert not any('mlp_beforez' in k for k in report.unused)
    model = init_retriever(config, out)
    for lang in LANGS:
        tokens = model.language_branch.tokenize(TEXTS)
        assert tokens['input_ids'].shape[1] == CONTEXT  # padded to the context, as theirs
        eos = (tokens['input_ids'] == 3).nonzero()[:, 1]
        expected = F.normalize(authors_forward(state, tokens['input_ids'], eos, lang, method),
                               dim=-1)
        torch.testing.assert_close(encode_texts(model, TEXTS, lang), expected,
                                   atol=2e-5, rtol=1e-4)


def test_generator_rows_are_the_transpose_of_the_authors_matrix(tmp_path):
    state = authors_state_dict('dasd')
    torch.save(state, tmp_path / 'dasd.bin')
    config = write_config(tmp_path / 'authors.py', 'dasd')
    convert_authors_checkpoint('dasd', tmp_path / 'dasd.bin', config, tmp_path / 'x.pth',
                               map_dasd)
    converted = torch.load(tmp_path / 'x.pth')
    assert {key: converted['meta'][key] for key in provenance()} == provenance()
    head = converted['state_dict']['disentangler.generator.heads.1.bias']
    theirs = state['transformer.resblocks.1.mlp_zi.c_fc1.bias'].reshape(D_U, D_U)
    torch.testing.assert_close(head.reshape(D_U, D_U), theirs.T)


def refused(capsys, method, *argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(method, [str(a) for a in argv])
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_a_file_of_the_other_method_is_refused_naming_the_right_tool(tmp_path, capsys):
    torch.save(authors_state_dict('dasd'), tmp_path / 'dasd.bin')
    torch.save(authors_state_dict('mla'), tmp_path / 'mla.bin')
    config = write_config(tmp_path / 'mla.py', 'mla')
    err = refused(capsys, 'mla', tmp_path / 'dasd.bin', config, '--out', tmp_path / 'o.pth')
    assert err.startswith(f'error: {tmp_path / "dasd.bin"}: a DASD checkpoint')
    assert 'tools/convert/dasd_to_xmr.py' in err and 'Traceback' not in err
    err = refused(capsys, 'dasd', tmp_path / 'mla.bin', config, '--out', tmp_path / 'o.pth')
    assert 'an MLA checkpoint' in err and 'tools/convert/mla_to_xmr.py' in err
    assert not (tmp_path / 'o.pth').exists()


def test_run_as_the_xmr_command_the_right_tool_is_named_as_an_xmr_command(tmp_path, capsys,
                                                                           monkeypatch):
    """An installed package has no tools/ folder: 'use tools/convert/mla_to_xmr.py' named a
    script the user cannot run."""
    from xmr.utils import cli

    monkeypatch.setattr(cli, 'command_name', 'xmr convert dasd_to_xmr')
    torch.save(authors_state_dict('mla'), tmp_path / 'mla.bin')
    config = write_config(tmp_path / 'dasd.py', 'dasd')
    err = refused(capsys, 'dasd', tmp_path / 'mla.bin', config, '--out', tmp_path / 'o.pth')
    assert 'an MLA checkpoint' in err and 'use xmr convert mla_to_xmr' in err
    assert 'tools/convert' not in err


def test_missing_language_truncated_file_and_other_architecture_are_refused(tmp_path, capsys):
    out = tmp_path / 'o.pth'
    config = write_config(tmp_path / 'dasd.py', 'dasd')
    torch.save(authors_state_dict('dasd', langs=['de']), tmp_path / 'de.bin')
    err = refused(capsys, 'dasd', tmp_path / 'de.bin', config, '--out', out)
    assert 'no acquirer modules for zh' in err and 'the file has de' in err
    assert 'model.language_branch.languages' in err

    torch.save(authors_state_dict('dasd'), tmp_path / 'full.bin')
    data = (tmp_path / 'full.bin').read_bytes()
    (tmp_path / 'cut.bin').write_bytes(data[:len(data) // 2])
    err = refused(capsys, 'dasd', tmp_path / 'cut.bin', config, '--out', out)
    assert err.startswith(f'error: {tmp_path / "cut.bin"} ({len(data) // 2} bytes) is not a '
                          'readable DASD checkpoint')
    assert 'download the file again' in err

    other = write_config(tmp_path / 'patch8.py', 'dasd', patch=8)
    err = refused(capsys, 'dasd', tmp_path / 'full.bin', other, '--out', out)
    assert 'visual.conv1.weight' in err and 'another architecture' in err

    clip_only = {k: v for k, v in authors_state_dict('dasd').items() if 'acquirer' not in k}
    torch.save(clip_only, tmp_path / 'clip.bin')
    err = refused(capsys, 'dasd', tmp_path / 'clip.bin', config, '--out', out)
    assert 'no per-language acquirer modules' in err
    assert not out.exists() and not list(tmp_path.glob('.o.pth*'))


def test_the_cli_replaces_an_earlier_conversion_alone_and_only_with_overwrite(tmp_path,
                                                                             capsys):
    """--out replaced whatever stood there: a training checkpoint, a test result."""
    torch.save(authors_state_dict('dasd'), tmp_path / 'dasd.bin')
    config = write_config(tmp_path / 'dasd.py', 'dasd')
    trained = tmp_path / 'iter_3000.pth'
    torch.save({'state_dict': {}, 'meta': {'iter': 3000}}, trained)
    kept = trained.read_bytes()
    convert = [tmp_path / 'dasd.bin', config, '--out']
    err = refused(capsys, 'dasd', *convert, trained)
    assert err == (f'error: {trained} (--out): exists and is kept: pass --overwrite '
                   '(overwrite=True) to replace an earlier conversion, or give --out another '
                   'file\n')
    err = refused(capsys, 'dasd', *convert, trained, '--overwrite')
    assert 'exists and is no earlier conversion' in err
    assert trained.read_bytes() == kept
    out = tmp_path / 'x.pth'
    main('dasd', [str(a) for a in [*convert, out]])
    assert 'exists and is kept' in refused(capsys, 'dasd', *convert, out)
    main('dasd', [str(a) for a in [*convert, out, '--overwrite']])
    assert torch.load(out)['meta']['converted_from'] == str(tmp_path / 'dasd.bin')


def test_the_cli_without_out_is_a_usage_error_naming_out(tmp_path, capsys):
    err = refused(capsys, 'mla', tmp_path / 'mla.bin', tmp_path / 'mla.py')
    assert err.endswith('error: the following arguments are required: --out\n')


def test_the_cli_refuses_a_config_path_with_no_file_naming_it(tmp_path, capsys):
    torch.save(authors_state_dict('mla'), tmp_path / 'mla.bin')
    err = refused(capsys, 'mla', tmp_path / 'mla.bin', tmp_path / 'absent.py', '--out',
                  tmp_path / 'o.pth')
    assert err == (f"error: {tmp_path / 'absent.py'} (CONFIG): no such file: give the path of "
                   "a config file, or name a config xmr ships as "
                   "'xmr::demo/static_tiny-clip_synthetic.py'\n")
    assert not (tmp_path / 'o.pth').exists()


def test_the_cli_reads_a_config_xmr_ships_by_its_xmr_name(tmp_path, capsys, monkeypatch):
    """``xmr::<path>``, as tools/train.py and tools/test.py read it: the packaged file."""
    converted = []

    def convert(method, source, config, *rest):
        converted.append(config)
        raise ConversionError('stop here')

    monkeypatch.setattr(authors, 'convert_authors_checkpoint', convert)
    err = refused(capsys, 'dasd', tmp_path / 'dasd.bin',
                  'xmr::dasd/dasd_clip-vit-b16_multi30k_authors.py', '--out', tmp_path / 'o.pth')
    assert err == 'error: stop here\n'
    assert converted == [config_path('xmr::dasd/dasd_clip-vit-b16_multi30k_authors.py')]


def test_the_cli_passes_its_cfg_options_to_the_conversion(tmp_path, capsys):
    """The config names de and zh; the option leaves zh out, and so its acquirers."""
    torch.save(authors_state_dict('dasd'), tmp_path / 'dasd.bin')
    config = write_config(tmp_path / 'dasd.py', 'dasd')
    main('dasd', [str(tmp_path / 'dasd.bin'), str(config), '--out', str(tmp_path / 'x.pth'),
                  '--cfg-options', 'model.language_branch.languages=[de]'])
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        f"{tmp_path / 'x.pth'}: the file's acquirers of zh are left out")


def test_the_api_keeps_a_file_standing_at_out_as_the_cli_does(tmp_path):
    """convert_authors_checkpoint (xmr.models.conversion's API) replaced whatever stood at
    ``out``, a training checkpoint included; only the CLI kept it."""
    torch.save(authors_state_dict('mla'), tmp_path / 'mla.bin')
    config = write_config(tmp_path / 'mla.py', 'mla')
    trained = tmp_path / 'iter_3000.pth'
    torch.save({'state_dict': {}, 'meta': {'iter': 3000}}, trained)
    kept = trained.read_bytes()
    for overwrite, refusal in ((False, 'exists and is kept'),
                               (True, 'exists and is no earlier conversion')):
        with pytest.raises(ConversionError, match=f'^{re.escape(str(trained))} \\(--out\\): '
                           f'{refusal}'):
            convert_authors_checkpoint('mla', tmp_path / 'mla.bin', config, trained, map_mla,
                                       overwrite=overwrite)
    assert trained.read_bytes() == kept
    out = tmp_path / 'x.pth'
    convert_authors_checkpoint('mla', tmp_path / 'mla.bin', config, out, map_mla)
    with pytest.raises(ConversionError, match='exists and is kept'):
        convert_authors_checkpoint('mla', tmp_path / 'mla.bin', config, out, map_mla)
    convert_authors_checkpoint('mla', tmp_path / 'mla.bin', config, out, map_mla,
                               overwrite=True)


def test_an_out_that_is_a_folder_is_refused_before_converting(tmp_path, capsys):
    """It failed once the conversion was done (IsADirectoryError of the final rename)."""
    torch.save(authors_state_dict('mla'), tmp_path / 'mla.bin')
    (tmp_path / 'work_dirs').mkdir()
    err = refused(capsys, 'mla', tmp_path / 'mla.bin', write_config(tmp_path / 'c.py', 'mla'),
                  '--out', tmp_path / 'work_dirs')
    assert err == (f'error: {tmp_path / "work_dirs"} (--out): a folder: give the file to write '
                   f'in it, e.g. --out {tmp_path / "work_dirs" / "mla_converted.pth"}\n')
    assert list((tmp_path / 'work_dirs').iterdir()) == []


def test_the_cli_reports_used_unused_and_kept_keys(tmp_path, capsys):
    torch.save(authors_state_dict('dasd'), tmp_path / 'dasd.bin')
    config = write_config(tmp_path / 'dasd.py', 'dasd')
    main('dasd', [str(tmp_path / 'dasd.bin'), str(config), '--out', str(tmp_path / 'x.pth')])
    line = capsys.readouterr().out
    assert 'keys used' in line and 'AdvAgent.discriminator.0.weight' in line
    assert '0 missing' in line
    # the model's facts (_extra_state) are recorded, not a weight kept from the config: the
    # one kept is the learnt temperature of this config's English loss
    assert line.rstrip().endswith('1 kept from the config: losses.source_cm.log_scale')
    assert (tmp_path / 'x.pth').is_file()


def test_the_cli_names_the_file_languages_the_config_leaves_out(tmp_path, capsys):
    """A file of more languages than the config names lost the others' acquirers, named only
    among hundreds of unused keys ('... and 97 more')."""
    torch.save(authors_state_dict('dasd', langs=['de', 'zh', 'jp', 'fr']), tmp_path / 'dasd.bin')
    config = write_config(tmp_path / 'dasd.py', 'dasd')
    report = convert_authors_checkpoint('dasd', tmp_path / 'dasd.bin', config,
                                        tmp_path / 'x.pth', map_dasd)
    assert report.languages_left == ['fr', 'ja']
    assert 'transformer.resblocks.0.acquirer.jp.mlp_beforez.c_fc.weight' in report.unused
    main('dasd', [str(tmp_path / 'dasd.bin'), str(config), '--out', str(tmp_path / 'y.pth')])
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"{tmp_path / 'y.pth'}: the file's acquirers of fr, ja are left out, the config does "
        'not name them: add them to model.language_branch.languages (--cfg-options) to convert '
        'them too')
    torch.save(authors_state_dict('dasd'), tmp_path / 'same.bin')
    assert convert_authors_checkpoint('dasd', tmp_path / 'same.bin', config, tmp_path / 'z.pth',
                                      map_dasd).languages_left == []


def test_tools_test_evaluates_a_converted_dasd_release(tmp_path, capsys):
    """The issue's path: convert the release, then tools/test.py prints its leaderboard row."""
    from tests.tools.test_test_tool import load_tool
    from tests.tools.test_test_tool import write_config as write_test_config

    torch.save(authors_state_dict('dasd'), tmp_path / 'dasd.bin')
    main('dasd', [str(tmp_path / 'dasd.bin'), str(write_config(tmp_path / 'dasd.py', 'dasd')),
                  '--out', str(tmp_path / 'converted.pth')])
    dataset = dict(type='SyntheticRetrievalDataset', num_scenes=8, languages=['en', *LANGS],
                   split='test', image_size=32, seed=0, captions_per_image=2)
    config = write_test_config(tmp_path / 'test.py', tmp_path / 'work', model_cfg('dasd'),
                               [dataset], [dict(type='RetrievalMetric', prefix='synthetic')])
    capsys.readouterr()
    load_tool().main([str(config), str(tmp_path / 'converted.pth'), '--out',
                      str(tmp_path / 'result.json')])
    out = capsys.readouterr().out
    assert 'test (converted)' in out  # the leaderboard row: config name (checkpoint stem)
    result = json.loads((tmp_path / 'result.json').read_text())
    assert {'synthetic/de/AR', 'synthetic/zh/AR', 'synthetic/en/AR'} <= set(result['metrics'])
    assert result['checkpoint'] == str(tmp_path / 'converted.pth')


def changed_cfg(method: str, change: str, value) -> dict:
    """``model_cfg(method)`` with the dotted key ``change`` set to ``value``."""
    cfg = model_cfg(method)
    *parents, last = change.split('.')
    node = cfg
    for key in parents:
        node = node[key]
    node[last] = value
    return cfg


@pytest.mark.parametrize('method,change,value,named', [
    ('mla', 'backbone.model_cfg.quick_gelu', False, 'model.backbone.arch'),
    ('dasd', 'backbone.model_cfg.quick_gelu', False, 'model.backbone.arch'),
    ('mla', 'language_branch.num_blocks', 2, 'model.language_branch.num_blocks is 2'),
    ('mla', 'language_branch.adapters', dict(type='StaticAdapter', hidden=D_U,
                                             sites=['mlp.output']), 'StaticAdapter at 0:mlp'),
    ('dasd', 'disentangler.depth', 1, 'model.disentangler.depth is 1'),
    ('dasd', 'disentangler.padding_as_tokens', False, 'padding_as_tokens is False'),
    ('dasd', 'disentangler.stream_adapters', True, 'stream_adapters is True'),
    ('dasd', 'disentangler.per_language', True, 'PerLanguageDisentangler'),
    ('dasd', 'disentangler.generator.activation', 'gelu', 'activation is \'GELU\''),
    ('dasd', 'disentangler.features', ['sr'], "model.disentangler.features is ('sr',)"),
    ('dasd', 'language_branch.embedding.padding_idx', 0, 'embedding.padding_idx is 0'),
    pytest.param('dasd', 'language_branch.tokenizer',
                 dict(type='HFTokenizer', max_length=CONTEXT, pad_to=CONTEXT, lowercase=True,
                      tokenizer_file=str(XLMR_TOKENIZER)),
                 'tokenizer.lowercase is True',
                 marks=pytest.mark.skipif(not XLMR_TOKENIZER.is_file(),
                                          reason=f'needs the shared data ({XLMR_TOKENIZER})')),
    ('mla', 'language_branch.adapters', dict(type='StaticAdapter', hidden=D_U, blocks=[0, 1]),
     "adapters is '2 adapters'"),
    pytest.param('mla', 'language_branch.tokenizer',
                 dict(type='HFTokenizer', max_length=CONTEXT, clean='whitespace',
                      tokenizer_file=str(XLMR_TOKENIZER)),
                 "tokenizer.clean is 'whitespace'",
                 marks=pytest.mark.skipif(not XLMR_TOKENIZER.is_file(),
                                          reason=f'needs the shared data ({XLMR_TOKENIZER})')),
])
def test_a_config_that_computes_otherwise_than_the_authors_is_refused(
        method, change, value, named, tmp_path, capsys):
    """Settings without weights (activation, SDM depth, padding, ...) are not in the file: a
    config that differs there would convert and compute something else."""
    torch.save(authors_state_dict(method), tmp_path / 'authors.bin')
    Config(dict(model=changed_cfg(method, change, value))).dump(tmp_path / 'changed.py')
    err = refused(capsys, method, tmp_path / 'authors.bin', tmp_path / 'changed.py', '--out',
                  tmp_path / 'o.pth')
    assert f'does not compute what the {method.upper()} code computes' in err
    assert named in err and f'configs/dasd/{method}_clip-vit-b' in err
    assert 'Traceback' not in err and not (tmp_path / 'o.pth').exists()


@pytest.mark.parametrize('method, change, value, named', [
    # The tower's own table reading another tokenizer's ids.
    ('mla', 'language_branch.embedding', dict(type='TowerTokenEmbedding'),
     "model.language_branch.tokenizer: TowerTokenEmbedding embeds with the text tower's own "
     'table'),
    # The authors' f^sa over padding to each batch's longest caption (refused by the model's
    # config check: a caption's embedding would depend on its batch).
    ('dasd', 'language_branch.tokenizer.pad_to', None,
     'model.disentangler.padding_as_tokens=True averages the padding into f^sa, but '
     'model.language_branch.tokenizer has no pad_to'),
    # Dynamic adapters without the SDM that makes their W^z (MLA's model given DASD's adapters,
    # DASD's without its disentangler): the model's config check refuses both.
    ('mla', 'language_branch.adapters', dict(type='DynamicAdapter', hidden=D_U),
     "adapter DynamicAdapter reads a per-caption condition (DASD's W^z) that only a "
     'disentangler makes'),
    ('dasd', 'disentangler', None, "adapter DynamicAdapter reads a per-caption condition"),
])
def test_a_config_whose_model_cannot_be_built_is_refused_naming_it(method, change, value, named,
                                                                   tmp_path, capsys):
    torch.save(authors_state_dict(method), tmp_path / 'authors.bin')
    Config(dict(model=changed_cfg(method, change, value))).dump(tmp_path / 'changed.py')
    err = refused(capsys, method, tmp_path / 'authors.bin', tmp_path / 'changed.py', '--out',
                  tmp_path / 'o.pth')
    assert f'{tmp_path / "changed.py"}: its model cannot be built: {named}' in err
    assert 'Traceback' not in err and not (tmp_path / 'o.pth').exists()


def test_a_config_of_another_retriever_is_refused_naming_its_type(tmp_path, capsys):
    """CDDS's DualEncoderRetriever has no target branch: the settings check failed on it with
    AttributeError ('DualEncoderRetriever' object has no attribute 'language_branch')."""
    torch.save(authors_state_dict('mla'), tmp_path / 'authors.bin')
    err = refused(capsys, 'mla', tmp_path / 'authors.bin',
                  REPO / 'configs' / 'cdds' / 'cdds_tiny-clip_synthetic.py', '--out',
                  tmp_path / 'o.pth')
    assert ("model.type is 'DualEncoderRetriever', the authors' code: "
            "'CrossLingualRetriever'") in err
    assert 'configs/dasd/mla_clip-vit-b32_multi30k_authors.py' in err
    assert not (tmp_path / 'o.pth').exists()


@pytest.mark.parametrize('method,key', [
    ('mla', 'transformer.resblocks.0.acquirer.de.mlp.c_gate.weight'),
    ('mla', 'target_projection'),  # DASD's, not MLA's
    ('dasd', 'transformer.resblocks.0.mlp_zi.c_fc2.weight'),
    ('dasd', 'optimizer.state.0.exp_avg'),
    # Names that begin as a known unused key does and go on: matched whole, not by prefix.
    ('dasd', 'target_projection.weight'),
    ('mla', 'transformer.resblocks.0.acquirer.de.ln.weight_orig'),
    # A module nested one level below a language's acquirer is not its layer: refused, not
    # dropped as that language's unused mlp.
    ('mla', 'transformer.resblocks.0.acquirer.de.gate.mlp.c_fc.weight'),
])
def test_a_key_the_authors_model_does_not_have_is_refused_naming_it(method, key, tmp_path,
                                                                    capsys):
    """A key left out of the model is reported only when the authors' model has it (a layer
    that takes no part in r^T); any other would be dropped without its part computed."""
    state = authors_state_dict(method)
    state[key] = torch.zeros(3)
    torch.save(state, tmp_path / 'extra.bin')
    config = write_config(tmp_path / 'authors.py', method)
    err = refused(capsys, method, tmp_path / 'extra.bin', config, '--out', tmp_path / 'o.pth')
    assert f"1 keys that the {method.upper()} code's model does not have ({key})" in err
    assert 'Traceback' not in err and not (tmp_path / 'o.pth').exists()


@pytest.mark.parametrize('method,change,value,fix', [
    ('dasd', 'language_branch.tokenizer.vocab_size', 56,
     'model.language_branch.tokenizer.name_or_path'),
    # MLA's static acquirer: a DASD config whose adapters' hidden is not the generator's d_u is
    # refused as it builds, before any weight is compared.
    ('mla', 'language_branch.adapters.hidden', D_U + 1, 'model.language_branch.adapters.hidden'),
    ('dasd', 'disentangler.generator.d_z', D_Z + 1, 'model.disentangler.generator.d_z'),
    ('dasd', 'backbone.model_cfg.text_cfg.width', WIDTH * 2, 'model.backbone.arch'),
    # The table's width: the columns of the table and of W_e, neither the vocabulary (it was
    # named for the table) nor the architecture (named for W_e).
    ('mla', 'language_branch.embedding.table_width', TABLE * 2,
     'model.language_branch.embedding.table_width'),
])
def test_a_shape_difference_names_the_setting_of_its_part(method, change, value, fix, tmp_path,
                                                          capsys):
    """Another vocabulary, acquirer or generator width is not "another architecture": each
    part's difference names the config key that fixes it."""
    torch.save(authors_state_dict(method), tmp_path / 'authors.bin')
    Config(dict(model=changed_cfg(method, change, value))).dump(tmp_path / 'changed.py')
    err = refused(capsys, method, tmp_path / 'authors.bin', tmp_path / 'changed.py', '--out',
                  tmp_path / 'o.pth')
    assert 'differ in shape' in err and fix in err
    assert (fix == 'model.backbone.arch') == ('another architecture' in err)
    assert ('another vocabulary' in err) == (fix == 'model.language_branch.tokenizer.name_or_path')


def test_a_dasd_file_of_another_d_u_is_refused_naming_d_u(tmp_path):
    """The generator's rows were permuted by the config's ``d_u`` before any shape was
    compared: a file of another ``d_u`` failed with a bare ``RuntimeError`` of the reshape."""
    torch.save(authors_state_dict('dasd'), tmp_path / 'dasd.bin')
    cfg = changed_cfg('dasd', 'disentangler.generator.d_u', 2 * D_U)
    cfg['language_branch']['adapters']['hidden'] = 2 * D_U  # the adapters' hidden is d_u
    Config(dict(model=cfg)).dump(tmp_path / 'c.py')
    with pytest.raises(ConversionError) as error:
        convert_authors_checkpoint('dasd', tmp_path / 'dasd.bin', tmp_path / 'c.py',
                                   tmp_path / 'o.pth', map_dasd)
    message = str(error.value)
    assert f'disentangler.generator.heads.0.bias: file ({D_U * D_U},) vs config ' \
        f'({4 * D_U * D_U},)' in message
    assert 'model.disentangler.generator.d_z / d_u' in message
    assert 'model.language_branch.adapters.hidden' in message
    assert not (tmp_path / 'o.pth').exists()


def test_an_option_replaces_a_list_item_as_cfg_options_does(tmp_path):
    """MMEngine's merge failed on a list's item that is no dict ('str' object has no attribute
    'copy')."""
    config = write_config(tmp_path / 'config.py', 'mla')
    model = build_model(config, {'model.language_branch.languages.1': 'fr'})
    assert model.language_branch.languages == ['de', 'fr']


def test_a_logit_scale_saved_as_one_element_converts(tmp_path):
    state = authors_state_dict('mla')
    state['logit_scale'] = torch.tensor([4.6])
    torch.save(state, tmp_path / 'mla.bin')
    convert_authors_checkpoint('mla', tmp_path / 'mla.bin', write_config(tmp_path / 'c.py', 'mla'),
                               tmp_path / 'x.pth', map_mla)
    scale = torch.load(tmp_path / 'x.pth')['state_dict']['backbone.clip.logit_scale']
    assert scale.shape == () and scale.item() == pytest.approx(4.6)


def authors_encode_image(s, images):
    """``r^V``: their ``VisionTransformer.forward`` (class token, positions, ``ln_pre``, the
    blocks without a mask, ``ln_post`` of the class token, ``@ proj``), ``[B, E]``."""
    x = F.conv2d(images, s['visual.conv1.weight'], stride=s['visual.conv1.weight'].shape[-1])
    x = x.flatten(2).transpose(1, 2)
    cls = s['visual.class_embedding'].expand(x.shape[0], 1, -1)
    x = layer_norm(torch.cat([cls, x], 1) + s['visual.positional_embedding'], s, 'visual.ln_pre')
    for i in range(1):  # tiny_clip's one vision layer
        x = block(x, s, i, prefix='visual.', causal=False, heads=1)
    return layer_norm(x[:, 0], s, 'visual.ln_post') @ s['visual.proj']


def authors_encode_english(s, ids):
    """``r^S``: their ``encode_text`` on ``clip.tokenize`` ids, pooled at the highest id (EOT)."""
    x = s['token_embedding.weight'][ids] + s['positional_embedding'][:ids.shape[1]]
    for i in range(BLOCKS):
        x = block(x, s, i)
    return layer_norm(x, s, 'ln_final')[torch.arange(ids.shape[0]), ids.argmax(-1)] \
        @ s['text_projection']


@pytest.mark.parametrize('method', ['mla', 'dasd'])
def test_converted_checkpoint_encodes_images_and_english_as_the_authors_code(method, tmp_path):
    """The other two towers of the file, against their equations; the weights saved in fp16
    where their ``convert_weights`` makes them so (linear, attention, projections)."""
    import open_clip

    state = authors_state_dict(method)
    halved = ('.weight', '.bias', 'in_proj_weight', 'in_proj_bias', 'text_projection',
              'visual.proj')
    state = {k: v.half() if k.endswith(halved) and 'ln' not in k and 'embedding' not in k
             else v for k, v in state.items()}
    torch.save(state, tmp_path / 'authors.bin')
    config = write_config(tmp_path / 'authors.py', method)
    convert_authors_checkpoint(method, tmp_path / 'authors.bin', config, tmp_path / 'x.pth',
                               MAPPINGS[method])
    model = init_retriever(config, tmp_path / 'x.pth')
    s = {k: v.float() for k, v in state.items()}
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model.encode_media(images), authors_encode_image(s, images),
                               atol=2e-5, rtol=1e-4)
    ids = open_clip.tokenize(TEXTS, context_length=CONTEXT)
    expected = F.normalize(authors_encode_english(s, ids), dim=-1)
    torch.testing.assert_close(encode_texts(model, TEXTS, 'en'), expected, atol=2e-5, rtol=1e-4)


def test_mbert_style_tokens_are_the_authors_ids_pooled_at_their_sep(tmp_path):
    """Their target tokens: ``m_toker(texts, padding='max_length', max_length=77,
    truncation=True)``, pooled where ``text == 102`` ([SEP]); a WordPiece tokenizer with
    mBERT's special ids stands in for mBERT (not downloadable here). xmr's ``HFTokenizer`` with
    ``pad_to`` gives the same ids and pools the same position, a truncated caption too."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from xmr.models.language.tokenizers import HFTokenizer

    words = ['ein', 'roter', 'Kreis', 'zwei', 'blaue', 'Quadrate', 'links', 'drei', '##e']
    vocab = {'[PAD]': 0, **{f'[unused{i}]': i for i in range(1, 100)}, '[UNK]': 100,
             '[CLS]': 101, '[SEP]': 102, '[MASK]': 103,
             **{w: 104 + i for i, w in enumerate(words)}}
    fast = Tokenizer(models.WordPiece(vocab, unk_token='[UNK]'))
    fast.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=None)
    fast.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    fast.post_processor = processors.BertProcessing(('[SEP]', 102), ('[CLS]', 101))
    fast.save(str(tmp_path / 'tokenizer.json'))
    texts = ['ein roter Kreis', 'zwei blaue Quadrate links ' * 5, 'drei grüne Dreiecke']
    m_toker = PreTrainedTokenizerFast(tokenizer_object=fast, pad_token='[PAD]')
    theirs = m_toker(texts, padding='max_length', max_length=CONTEXT, truncation=True,
                     return_tensors='pt')['input_ids']
    ours = HFTokenizer(tokenizer_file=str(tmp_path / 'tokenizer.json'), max_length=CONTEXT,
                       pad_to=CONTEXT)(texts)
    assert torch.equal(ours['input_ids'], theirs)
    assert torch.equal(ours['eos_index'], (theirs == 102).nonzero()[:, 1])
    assert theirs[1, -1] == 102  # the long caption is cut with its [SEP] kept


@pytest.mark.parametrize('method', ['mla', 'dasd'])
def test_a_batch_of_mixed_languages_encodes_each_caption_as_the_authors_code(method, tmp_path):
    """Their code runs one language per call; xmr's mixed batch (the grouped adapters of a
    fine-tuning batch, ``batch_sampler=None``) gives each caption its language's ``r^T``."""
    state = authors_state_dict(method)
    torch.save(state, tmp_path / 'authors.bin')
    config = write_config(tmp_path / 'authors.py', method)
    convert_authors_checkpoint(method, tmp_path / 'authors.bin', config, tmp_path / 'x.pth',
                               MAPPINGS[method])
    model = init_retriever(config, tmp_path / 'x.pth')
    langs = ['zh', 'de', 'zh']
    tokens = model.language_branch.tokenize(TEXTS)
    with torch.no_grad():
        mixed, _ = model.encode_target(tokens, langs)
    eos = tokens['eos_index']
    expected = torch.cat([authors_forward(state, tokens['input_ids'][i:i + 1], eos[i:i + 1],
                                          lang, method) for i, lang in enumerate(langs)])
    torch.testing.assert_close(mixed, expected, atol=2e-5, rtol=1e-4)


def test_acquirers_under_another_code_of_the_language_are_converted(tmp_path):
    """A file's ``acquirer.jp`` is the config's ``ja`` (xmr's canonical code, which a config's
    ``jp`` becomes too): converted, encoding as their code, the report naming the file's keys."""
    state = {k.replace('.acquirer.zh.', '.acquirer.jp.'): v
             for k, v in authors_state_dict('dasd').items()}
    torch.save(state, tmp_path / 'dasd.bin')
    cfg = changed_cfg('dasd', 'language_branch.languages', ['de', 'jp'])
    Config(dict(model=cfg)).dump(tmp_path / 'c.py')
    report = convert_authors_checkpoint('dasd', tmp_path / 'dasd.bin', tmp_path / 'c.py',
                                        tmp_path / 'x.pth', map_dasd)
    assert 'transformer.resblocks.0.acquirer.jp.mlp_beforez.c_fc.weight' in report.used
    assert 'transformer.resblocks.0.acquirer.jp.ln.weight' in report.unused
    model = init_retriever(tmp_path / 'c.py', tmp_path / 'x.pth')
    tokens = model.language_branch.tokenize(TEXTS)
    expected = authors_forward(state, tokens['input_ids'], tokens['eos_index'], 'jp', 'dasd')
    torch.testing.assert_close(encode_texts(model, TEXTS, 'ja'), F.normalize(expected, dim=-1),
                               atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize('rename,message', [
    ('.acquirer.', 'acquirers without a language (transformer.resblocks.0.acquirer.'),
    ('.acquirer.ja.', "two codes of 'ja'"),
])
def test_acquirers_without_a_language_or_under_two_codes_are_refused(rename, message, tmp_path,
                                                                     capsys):
    state = authors_state_dict('mla', langs=['de', 'zh', 'jp'])
    state = {k.replace('.acquirer.zh.', rename): v for k, v in state.items()}
    torch.save(state, tmp_path / 'mla.bin')
    err = refused(capsys, 'mla', tmp_path / 'mla.bin', write_config(tmp_path / 'c.py', 'mla'),
                  '--out', tmp_path / 'o.pth')
    assert message in err and not (tmp_path / 'o.pth').exists()


def test_mla_fine_tuned_clip_from_a_second_file_as_their_inference(tmp_path, capsys):
    """MLA's ``inference.sh CLIP_CKPT ACQ_CKPT``: CLIP from the English fine-tuned file, only
    the acquirers and the embedding block from the LE file; their r^T on that mix."""
    le = authors_state_dict('mla')
    torch.manual_seed(1)
    clip_names = [k for k in le if 'acquirer' not in k and 'multilingual' not in k]
    finetuned = {k: le[k] + 0.05 * torch.randn_like(le[k]) for k in clip_names}
    torch.save(le, tmp_path / 'le.bin')
    torch.save(finetuned, tmp_path / 'finetune-en.bin')
    config = write_config(tmp_path / 'mla.py', 'mla')
    main('mla', [str(tmp_path / 'le.bin'), str(config), '--out', str(tmp_path / 'x.pth'),
                 '--clip-checkpoint', str(tmp_path / 'finetune-en.bin')])
    assert f'{tmp_path / "le.bin"}:ln_final.bias' in capsys.readouterr().out
    model = init_retriever(config, tmp_path / 'x.pth')
    theirs = {**le, **finetuned}
    tokens = model.language_branch.tokenize(TEXTS)
    expected = authors_forward(theirs, tokens['input_ids'], tokens['eos_index'], 'de', 'mla')
    torch.testing.assert_close(encode_texts(model, TEXTS, 'de'), F.normalize(expected, dim=-1),
                               atol=2e-5, rtol=1e-4)
    images = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model.encode_media(images), authors_encode_image(theirs, images),
                               atol=2e-5, rtol=1e-4)

    # A NaN of the CLIP file is that file's, not the acquirers' file's to download again.
    nan = dict(finetuned, **{'visual.proj': finetuned['visual.proj'].clone()})
    nan['visual.proj'][0, 0] = float('nan')
    torch.save(nan, tmp_path / 'nan.bin')
    err = refused(capsys, 'mla', tmp_path / 'le.bin', config, '--out', tmp_path / 'o.pth',
                  '--clip-checkpoint', tmp_path / 'nan.bin')
    assert err.startswith(f'error: {tmp_path / "nan.bin"}: 1 weights hold NaN or infinite '
                          'values (backbone.clip.visual.proj)')

    del finetuned['visual.proj']
    torch.save(finetuned, tmp_path / 'partial.bin')
    err = refused(capsys, 'mla', tmp_path / 'le.bin', config, '--out', tmp_path / 'o.pth',
                  '--clip-checkpoint', tmp_path / 'partial.bin')
    assert f'{tmp_path / "partial.bin"}: 1 weights of the config\'s CLIP' in err
    assert 'visual.proj' in err and not (tmp_path / 'o.pth').exists()


def test_a_clip_checkpoint_of_another_architecture_is_refused_naming_that_file(tmp_path,
                                                                             capsys):
    """--clip-checkpoint of another patch size (an open_clip training save: epoch_N.pt with
    DDP's module. prefix): its shapes are refused as conversion reads it, naming that file, not
    the acquirers' file whose CLIP it replaces."""
    torch.save(authors_state_dict('mla'), tmp_path / 'le.bin')
    config = write_config(tmp_path / 'mla.py', 'mla')
    patch8 = MODELS.build(model_cfg('mla', patch=8)).backbone.clip.state_dict()
    torch.save({'epoch': 2, 'name': 'ft', 'optimizer': {'state': {}, 'param_groups': []},
                'state_dict': {f'module.{k}': v for k, v in patch8.items()}},
               tmp_path / 'epoch_2.pt')
    err = refused(capsys, 'mla', tmp_path / 'le.bin', config, '--out', tmp_path / 'o.pth',
                  '--clip-checkpoint', tmp_path / 'epoch_2.pt')
    assert err.startswith(f'error: {tmp_path / "epoch_2.pt"}: 2 parameters differ in shape')
    assert 'backbone.clip.visual.conv1.weight: file (16, 3, 8, 8) vs config (16, 3, 16, 16)' in err
    assert 'another architecture' in err and 'le.bin' not in err
    assert not (tmp_path / 'o.pth').exists()


def test_dasd_trains_the_padding_row_of_the_table_as_the_authors(tmp_path):
    """Their table has no padding_idx and f^sa averages the padding in: fine-tuning a converted
    DASD model moves the padding's row too."""
    torch.save(authors_state_dict('dasd'), tmp_path / 'dasd.bin')
    config = write_config(tmp_path / 'dasd.py', 'dasd')
    convert_authors_checkpoint('dasd', tmp_path / 'dasd.bin', config, tmp_path / 'x.pth',
                               map_dasd)
    model = init_retriever(config, tmp_path / 'x.pth')
    tokens = model.language_branch.tokenize(TEXTS)
    r_target, _ = model.encode_target(tokens, ['de'] * len(TEXTS))
    r_target.sum().backward()
    table = model.language_branch.embedding.table.weight
    assert table.grad[model.language_branch.tokenizer.pad_id].abs().sum() > 0


@pytest.mark.parametrize('damaged', ['checkpoint', 'clip'])
def test_a_damaged_tensor_record_is_refused_not_converted(damaged, tmp_path, capsys):
    """torch.load checks no CRC-32: a damaged download loaded as other numbers."""
    torch.save(authors_state_dict('mla'), tmp_path / 'checkpoint.bin')
    torch.save(authors_state_dict('mla'), tmp_path / 'clip.bin')
    damage_record(tmp_path / f'{damaged}.bin', '/data/')
    err = refused(capsys, 'mla', tmp_path / 'checkpoint.bin',
                  write_config(tmp_path / 'c.py', 'mla'), '--out', tmp_path / 'o.pth',
                  '--clip-checkpoint', tmp_path / 'clip.bin')
    what = {'checkpoint': 'MLA', 'clip': 'CLIP'}[damaged]
    assert err.startswith(f'error: {tmp_path / f"{damaged}.bin"}: truncated or corrupt {what} '
                          'checkpoint')
    assert 'Bad CRC-32' in err and not (tmp_path / 'o.pth').exists()


def test_weights_with_nan_are_refused_naming_them(tmp_path, capsys):
    state = authors_state_dict('dasd')
    state['sr_projection'][0, 0] = float('nan')  # theirs is torch.empty, never initialised
    state['AdvAgent.discriminator.0.weight'][0, 0] = float('inf')  # unused: not a fault
    torch.save(state, tmp_path / 'dasd.bin')
    err = refused(capsys, 'dasd', tmp_path / 'dasd.bin', write_config(tmp_path / 'c.py', 'dasd'),
                  '--out', tmp_path / 'o.pth')
    assert '1 weights hold NaN or infinite values (disentangler.sr_projection.weight)' in err
    assert not (tmp_path / 'o.pth').exists()


@pytest.mark.parametrize('method, key, named', [
    ('dasd', 'transformer.resblocks.1.acquirer.zh.mlp_afterz.c_proj2.bias',
     'transformer.resblocks.1.acquirer.zh.mlp_afterz.c_proj2.bias'),  # the authors' name
    # A CLIP key the file lacks would keep the config's random initialisation.
    ('mla', 'visual.proj', 'backbone.clip.visual.proj'),
])
def test_a_key_missing_from_the_file_is_refused_naming_it(method, key, named, tmp_path,
                                                         capsys):
    state = authors_state_dict(method)
    del state[key]
    torch.save(state, tmp_path / 'authors.bin')
    err = refused(capsys, method, tmp_path / 'authors.bin',
                  write_config(tmp_path / 'c.py', method), '--out', tmp_path / 'o.pth')
    assert f'1 parameters of the c.py model are not in the file ({named})' in err
    assert not (tmp_path / 'o.pth').exists()


def test_captions_cut_before_the_context_are_refused(tmp_path):
    """Their m_toker cuts captions at 77 (the context): a shorter max_length would cut long
    captions elsewhere."""
    torch.save(authors_state_dict('mla'), tmp_path / 'mla.bin')
    cfg = changed_cfg('mla', 'language_branch.tokenizer.max_length', CONTEXT - 4)
    Config(dict(model=cfg)).dump(tmp_path / 'c.py')
    with pytest.raises(ConversionError, match=f'tokenizer.max_length is {CONTEXT - 4}, the '
                       f"authors' code: {CONTEXT}"):
        convert_authors_checkpoint('mla', tmp_path / 'mla.bin', tmp_path / 'c.py',
                                   tmp_path / 'o.pth', map_mla)
    assert not (tmp_path / 'o.pth').exists()


def test_a_converted_file_is_refused_by_a_config_that_computes_otherwise(tmp_path):
    """The converter refuses such a config; tools/test.py and xmr.apis load the converted file
    into the config they are given, which the weights alone cannot tell apart."""
    from xmr.apis import CheckpointMismatchError, load_trained_checkpoint

    torch.save(authors_state_dict('dasd'), tmp_path / 'dasd.bin')
    main('dasd', [str(tmp_path / 'dasd.bin'), str(write_config(tmp_path / 'dasd.py', 'dasd')),
                  '--out', str(tmp_path / 'converted.pth')])
    torch.manual_seed(0)
    load_trained_checkpoint(MODELS.build(model_cfg('dasd')), tmp_path / 'converted.pth')
    shallower = MODELS.build(changed_cfg('dasd', 'disentangler.depth', 1))
    with pytest.raises(CheckpointMismatchError, match=(
            rf"^checkpoint {re.escape(str(tmp_path / 'converted.pth'))}, converted from "
            rf"DASD's {re.escape(str(tmp_path / 'dasd.bin'))}: the config's model does not "
            r'compute what the DASD code computes \(model.disentangler.depth is 1, the '
            r"authors' code: 2\)")):
        load_trained_checkpoint(shallower, tmp_path / 'converted.pth')


def test_a_file_saved_from_a_data_parallel_model_converts_as_its_plain_save(tmp_path):
    state = authors_state_dict('mla')
    torch.save({f'module.{key}': value for key, value in state.items()}, tmp_path / 'dp.bin')
    report = convert_authors_checkpoint('mla', tmp_path / 'dp.bin',
                                        write_config(tmp_path / 'c.py', 'mla'), tmp_path / 'x.pth',
                                        map_mla)
    assert 'transformer.resblocks.2.acquirer.zh.mlp.c_proj.bias' in report.used
    converted = torch.load(tmp_path / 'x.pth')['state_dict']
    assert torch.equal(converted['language_branch.adapters.sets.zh.2:block_output.up.bias'],
                       state['transformer.resblocks.2.acquirer.zh.mlp.c_proj.bias'])


@pytest.mark.parametrize('save', ['model_wrapper', 'safetensors'])
def test_a_release_saved_in_another_wrapping_converts_as_its_plain_save(save, tmp_path):
    """The file re-saved under ``{'model': ...}`` (with its step), or as ``.safetensors``: the
    formats ``--clip-checkpoint`` and every other weight file of xmr are read in
    (docs/pretrained_weights.md, Formats read) were refused as no state dict or no torch file."""
    from safetensors.torch import save_file

    state = authors_state_dict('mla')
    path = tmp_path / ('mla.safetensors' if save == 'safetensors' else 'mla.bin')
    if save == 'safetensors':
        save_file(state, str(path))
    else:
        torch.save({'model': state, 'step': 18000}, path)
    convert_authors_checkpoint('mla', path, write_config(tmp_path / 'c.py', 'mla'),
                               tmp_path / 'x.pth', map_mla)
    converted = torch.load(tmp_path / 'x.pth')['state_dict']
    assert torch.equal(converted['language_branch.adapters.sets.de.1:block_output.down.weight'],
                       state['transformer.resblocks.1.acquirer.de.mlp.c_fc.weight'])


def test_an_entry_that_is_no_tensor_is_refused_naming_it(tmp_path, capsys):
    torch.save({**authors_state_dict('mla'), 'global_step': 18000}, tmp_path / 'mla.bin')
    err = refused(capsys, 'mla', tmp_path / 'mla.bin', write_config(tmp_path / 'c.py', 'mla'),
                  '--out', tmp_path / 'o.pth')
    assert err.startswith(f'error: {tmp_path / "mla.bin"} is not a MLA checkpoint: 1 of its '
                          'entries are not tensors by name (global_step)')
    assert not (tmp_path / 'o.pth').exists()


def test_the_cli_counts_every_key_of_the_file_as_used_or_unused(tmp_path, capsys):
    state = authors_state_dict('dasd')
    torch.save(state, tmp_path / 'dasd.bin')
    config = write_config(tmp_path / 'dasd.py', 'dasd')
    main('dasd', [str(tmp_path / 'dasd.bin'), str(config), '--out', str(tmp_path / 'x.pth')])
    used, unused = map(int, re.search(r'(\d+) keys used; (\d+) unused',
                                      capsys.readouterr().out).groups())
    assert used + unused == len(state) and unused > 0


@pytest.mark.parametrize('over', ['checkpoint', 'clip', 'config'])
def test_an_out_that_is_an_input_is_refused_and_the_release_kept(over, tmp_path, capsys):
    """--out naming the released file replaced it with the conversion, which no tool turns
    back into the authors' file (and naming the config, the user's own)."""
    torch.save(authors_state_dict('mla'), tmp_path / 'le.bin')
    torch.save({k: v for k, v in authors_state_dict('mla').items() if 'acquirer' not in k},
               tmp_path / 'clip.bin')
    config = write_config(tmp_path / 'mla.py', 'mla')
    out = tmp_path / {'checkpoint': 'le.bin', 'clip': 'clip.bin', 'config': 'mla.py'}[over]
    before = out.read_bytes()
    err = refused(capsys, 'mla', tmp_path / 'le.bin', config, '--out', out,
                  '--clip-checkpoint', tmp_path / 'clip.bin')
    assert err == (f'error: {out}: the output (--out) is a file the conversion reads: write '
                   'the xmr checkpoint to another file\n')
    assert out.read_bytes() == before


def test_an_mla_file_of_more_languages_than_the_config_converts_the_configs_ones(tmp_path):
    """A released MLA file holds the acquirers of every language it was trained on; a config
    naming fewer converts those, and the others' ``mlp`` layers are reported unused (the
    languages left named), not refused as keys the authors' model does not have."""
    state = authors_state_dict('mla', langs=['de', 'zh', 'fr'])
    torch.save(state, tmp_path / 'mla.bin')
    report = convert_authors_checkpoint('mla', tmp_path / 'mla.bin',
                                        write_config(tmp_path / 'c.py', 'mla'),
                                        tmp_path / 'x.pth', map_mla)
    assert report.languages_left == ['fr']
    assert {'transformer.resblocks.0.acquirer.fr.mlp.c_fc.weight',
            'transformer.resblocks.2.acquirer.fr.mlp.c_proj.bias'} <= set(report.unused)
    assert not any('.acquirer.fr.' in key for key in report.used)


def test_a_config_with_pretrained_weights_converts_without_reading_them(tmp_path):
    """A config inheriting a training config's ``pretrained`` (CLIP's, the mBERT table's):
    every weight comes from the release, so those files are never read; one that is not
    there does not stop the conversion."""
    torch.save(authors_state_dict('mla'), tmp_path / 'mla.bin')
    cfg = model_cfg('mla')
    cfg['backbone']['pretrained'] = str(tmp_path / 'absent' / 'ViT-B-32.pt')
    cfg['language_branch']['embedding']['pretrained'] = str(tmp_path / 'absent' / 'mbert.bin')
    Config(dict(model=cfg)).dump(tmp_path / 'c.py')
    report = convert_authors_checkpoint('mla', tmp_path / 'mla.bin', tmp_path / 'c.py',
                                        tmp_path / 'x.pth', map_mla)
    assert 'multilingual_embedding.weight' in report.used


def test_a_file_under_another_code_of_a_language_counts_each_key_once(tmp_path):
    """The file's ``acquirer.jp`` keys, read as the config's ``ja``, are each reported once
    under the file's name: used or unused, never both, every key of the file counted."""
    state = {k.replace('.acquirer.zh.', '.acquirer.jp.'): v
             for k, v in authors_state_dict('mla').items()}
    torch.save(state, tmp_path / 'mla.bin')
    Config(dict(model=changed_cfg('mla', 'language_branch.languages', ['de', 'ja']))).dump(
        tmp_path / 'c.py')
    report = convert_authors_checkpoint('mla', tmp_path / 'mla.bin', tmp_path / 'c.py',
                                        tmp_path / 'x.pth', map_mla)
    assert not set(report.used) & set(report.unused)
    assert sorted(report.used + report.unused) == sorted(state)


def test_a_key_missing_from_a_file_under_another_code_is_named_as_the_file_names_it(tmp_path):
    """A layer missing from a file whose Japanese acquirers are ``jp``: the error names the
    key the file lacks, under ``jp``, not the ``ja`` name no file of the authors holds."""
    state = {k.replace('.acquirer.zh.', '.acquirer.jp.'): v
             for k, v in authors_state_dict('mla').items()}
    del state['transformer.resblocks.0.acquirer.jp.mlp.c_proj.bias']
    torch.save(state, tmp_path / 'mla.bin')
    Config(dict(model=changed_cfg('mla', 'language_branch.languages', ['de', 'ja']))).dump(
        tmp_path / 'c.py')
    with pytest.raises(ConversionError,
                       match=r'not in the file \(transformer\.resblocks\.0\.acquirer\.jp\.mlp\.'
                             r'c_proj\.bias\)'):
        convert_authors_checkpoint('mla', tmp_path / 'mla.bin', tmp_path / 'c.py',
                                   tmp_path / 'x.pth', map_mla)


def test_acquirers_of_a_code_xmr_does_not_know_are_left_out_not_refused(tmp_path):
    """A file also holding acquirers under a code that is no language xmr knows (``xx``): the
    config's languages convert, the unknown code is named among the languages left out and
    its keys are unused, rather than the whole file being refused on that code."""
    torch.save(authors_state_dict('mla', langs=['de', 'zh', 'xx']), tmp_path / 'mla.bin')
    report = convert_authors_checkpoint('mla', tmp_path / 'mla.bin',
                                        write_config(tmp_path / 'c.py', 'mla'),
                                        tmp_path / 'x.pth', map_mla)
    assert report.languages_left == ['xx']
    assert 'transformer.resblocks.1.acquirer.xx.mlp.c_fc.bias' in report.unused


def test_a_table_of_another_vocabulary_and_width_names_both_fixes(tmp_path, capsys):
    """The table's rows (the vocabulary) and columns (its width) both differ from the file's:
    both settings are named, not only the width's."""
    torch.save(authors_state_dict('mla'), tmp_path / 'authors.bin')
    cfg = changed_cfg('mla', 'language_branch.embedding.table_width', TABLE * 2)
    cfg['language_branch']['tokenizer']['vocab_size'] = 56
    Config(dict(model=cfg)).dump(tmp_path / 'changed.py')
    err = refused(capsys, 'mla', tmp_path / 'authors.bin', tmp_path / 'changed.py', '--out',
                  tmp_path / 'o.pth')
    assert 'model.language_branch.embedding.table_width' in err
    assert 'model.language_branch.tokenizer.name_or_path' in err


def test_the_meta_records_the_inputs_and_the_report_of_the_conversion(tmp_path):
    """The converted file's ``meta`` names the release, the CLIP file, the method (which
    loading it re-checks the config against) and the config, and counts the keys as the
    report does; a key of the CLIP file that is not a weight of the config's CLIP is reported
    unused under that file's name."""
    le = authors_state_dict('mla')
    clip = {k: v for k, v in le.items() if 'acquirer' not in k and 'multilingual' not in k}
    clip['visual.head.weight'] = torch.zeros(3)  # not in the config's CLIP
    torch.save(le, tmp_path / 'le.bin')
    torch.save(clip, tmp_path / 'clip.bin')
    config = write_config(tmp_path / 'mla.py', 'mla')
    report = convert_authors_checkpoint('mla', tmp_path / 'le.bin', config, tmp_path / 'x.pth',
                                        map_mla, clip_source=tmp_path / 'clip.bin')
    assert f'{tmp_path / "clip.bin"}:visual.head.weight' in report.unused
    assert f'{tmp_path / "le.bin"}:visual.proj' in report.unused
    meta = torch.load(tmp_path / 'x.pth')['meta']
    assert {key: meta[key] for key in ('converted_from', 'clip_from', 'method', 'config')} == {
        'converted_from': str(tmp_path / 'le.bin'), 'clip_from': str(tmp_path / 'clip.bin'),
        'method': 'mla', 'config': str(config)}
    assert meta['used_keys'] == len(report.used) > 0
    assert meta['unused_keys'] == report.unused and meta['kept_keys'] == report.kept
    assert meta['kept_keys'] == ['losses.source_cm.log_scale']

    torch.save(authors_state_dict('dasd'), tmp_path / 'dasd.bin')
    convert_authors_checkpoint('dasd', tmp_path / 'dasd.bin',
                               write_config(tmp_path / 'dasd.py', 'dasd'), tmp_path / 'y.pth',
                               map_dasd)
    meta = torch.load(tmp_path / 'y.pth')['meta']
    assert meta['method'] == 'dasd' and meta['clip_from'] is None


def test_a_release_path_with_no_file_is_refused_as_a_conversion_error(tmp_path):
    """The API raises its own error for a release that is not there, naming the path and
    what to give, before the config's model is built."""
    with pytest.raises(ConversionError, match=rf'^{re.escape(str(tmp_path / "absent.bin"))}: no '
                       'such file: give the path of the released checkpoint'):
        convert_authors_checkpoint('mla', tmp_path / 'absent.bin',
                                   write_config(tmp_path / 'c.py', 'mla'), tmp_path / 'o.pth',
                                   map_mla)
    assert not (tmp_path / 'o.pth').exists()


def test_a_clip_checkpoint_path_with_no_file_is_refused_as_a_conversion_error(tmp_path):
    """``--clip-checkpoint`` naming no file: the API's own error, saying which file to give,
    and nothing written."""
    torch.save(authors_state_dict('mla'), tmp_path / 'le.bin')
    with pytest.raises(ConversionError, match='give the CLIP file the acquirers were evaluated '
                       r'with \(their --clip_ckpt\)'):
        convert_authors_checkpoint('mla', tmp_path / 'le.bin',
                                   write_config(tmp_path / 'c.py', 'mla'), tmp_path / 'o.pth',
                                   map_mla, clip_source=tmp_path / 'absent.bin')
    assert not (tmp_path / 'o.pth').exists()
