"""tools/visualize_features.py: clusters of f^sa / f^sr, the PNG and the caption listing."""
from __future__ import annotations

import re
import runpy
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans

from tests.conftest import CORPUS, tiny_branch_cfg, tiny_retriever_cfg
from xmr.apis import init_retriever
from xmr.utils.cli import UserError

TOOL = Path(__file__).resolve().parents[2] / 'tools' / 'visualize_features.py'
tool = runpy.run_path(str(TOOL))
DISENTANGLER = dict(type='SemanticsDisentangler', adapter=dict(type='StaticAdapter', hidden=8),
                    generator=dict(d_z=16, d_u=4))
CAPTIONS = [f'{prefix} {caption}'.strip() for prefix in ('', 'ja,', 'oui:', 'zwei')
            for caption in CORPUS]


def write_config(tmp_path: Path, **model_overrides) -> Path:
    model = tiny_retriever_cfg(
        language_branch=tiny_branch_cfg(adapters=dict(type='DynamicAdapter', hidden=4)),
        disentangler=DISENTANGLER)
    model.update(model_overrides)
    gallery = dict(type='SyntheticRetrievalDataset', num_scenes=6, languages=['en', 'de'],
                   split='test', image_size=32, seed=0)
    path = tmp_path / 'tiny_dasd.py'
    path.write_text(f'default_scope = "xmr"\nmodel = {model!r}\n'
                    f'test_dataloader = dict(batch_size=4, dataset={gallery!r})\n')
    return path


def run(tmp_path: Path, config: Path, *extra: str) -> dict[str, Path]:
    torch.manual_seed(0)
    return tool['main']([str(config), '--lang', 'de', '--clusters', '3', '--examples', '2',
                         '--out-dir', str(tmp_path / 'out'), *extra])


@pytest.mark.parametrize('feature, per_language', [('sa', False), ('sr', False), ('sa', True)])
def test_clusters_partition_the_captions_as_k_means_on_the_feature(tmp_path, feature,
                                                                   per_language):
    """With per_language=True (every DASD paper config) the language's own module reads its
    captions: the tool refused such models as having no SemanticsDisentangler."""
    captions_file = tmp_path / 'captions.txt'
    captions_file.write_text('\n'.join(CAPTIONS) + '\n\n')
    config = write_config(tmp_path, disentangler=dict(DISENTANGLER, per_language=per_language))
    written = run(tmp_path, config, '--captions', str(captions_file), '--feature', feature)
    assert written['png'].read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    report = written['text'].read_text(encoding='utf-8').split('\n\n')[1:]
    listed = [block.split('\n') for block in report if block.startswith('cluster')]
    assert len(listed) == 3
    sizes = [int(block[0].split('(')[1].split()[0]) for block in listed]
    assert sum(sizes) == len(CAPTIONS)

    # An independent reading: the model's f^sa or f^sr, k-means with the tool's seed.
    torch.manual_seed(0)
    model = init_retriever(config)
    tokens = model.language_branch.tokenize(CAPTIONS)
    disentangler = (model.disentangler.per_language['de'] if per_language
                    else model.disentangler)
    read = dict(sa=disentangler.semantic_agnostic, sr=disentangler.semantic_related)[feature]
    with torch.no_grad():
        features = read(model.language_branch.embed(tokens), tokens)
    kmeans = KMeans(n_clusters=3, n_init=10, random_state=0).fit(features.numpy())
    for label, block in enumerate(listed):
        members = np.flatnonzero(kmeans.labels_ == label)
        assert sizes[label] == len(members)
        distances = np.linalg.norm(features.numpy()[members] - kmeans.cluster_centers_[label],
                                   axis=1)
        nearest = [CAPTIONS[i] for i in members[np.argsort(distances, kind='stable')][:2]]
        assert [line.strip() for line in block[1:3]] == nearest


def test_captions_come_from_the_configs_test_set_without_media(tmp_path):
    config = write_config(tmp_path)
    written = run(tmp_path, config, '--feature', 'sr', '--num-captions', '9')
    assert written['png'].name == 'de_fsr.png'
    from xmr.datasets.dataset_captions import dataset_captions
    from xmr.datasets.synthetic.dataset import SyntheticRetrievalDataset

    dataset = SyntheticRetrievalDataset(num_scenes=6, languages=['en', 'de'], split='test')
    expected = [c for i in range(len(dataset)) for c in dataset.captions_of(i)['de']][:9]
    assert dataset_captions(dataset, 'de', 9) == expected
    listed = [line.strip() for line in written['text'].read_text(encoding='utf-8').splitlines()
              if line.startswith('  ')]
    assert set(listed) <= set(expected)


def test_models_without_the_feature_are_refused(tmp_path):
    with pytest.raises(ValueError, match='no SemanticsDisentangler'):
        run(tmp_path, write_config(tmp_path, disentangler=None,
                                   language_branch=tiny_branch_cfg()))
    only_sr = dict(DISENTANGLER, features=['sr'], use_adversarial=False)
    with pytest.raises(ValueError, match=r"computes only \['sr'\], not 'sa'"):
        run(tmp_path, write_config(tmp_path, disentangler=only_sr))


def test_a_language_the_config_lacks_is_refused_before_the_model_is_built(tmp_path,
                                                                          monkeypatch):
    """'--lang fr' on a de/zh model was refused only once the model stood (a paper's backbone
    loads for minutes), though the config names the model's languages."""
    config = write_config(tmp_path)
    _refuse_building(monkeypatch)
    with pytest.raises(ValueError, match=re.escape(
            "--lang: the model has no adapters for ['fr']; it reads ['en', 'de', 'zh'] "
            "(the config's source_language and model.language_branch.languages)")):
        run(tmp_path, config, '--lang', 'fr')
    assert not (tmp_path / 'out').exists()


def test_the_source_language_is_refused_before_the_model_is_built(tmp_path, monkeypatch):
    """'--lang en' is read by the model but has no f^sa / f^sr: it was refused only once the
    model stood."""
    config = write_config(tmp_path)
    _refuse_building(monkeypatch)
    with pytest.raises(ValueError, match=re.escape(
            "--lang: 'en' is the model's source language, read by its frozen tower with no "
            "module of its own; give one of its target languages ['de', 'zh'] (the config's "
            'source_language and model.language_branch.languages)')):
        run(tmp_path, config, '--lang', 'en')
    assert not (tmp_path / 'out').exists()


def test_more_clusters_than_captions_is_refused_and_as_many_is_accepted(capsys):
    base = ['config.py', '--lang', 'de', '--num-captions', '5']
    assert tool['parse_args']([*base, '--clusters', '5']).clusters == 5
    with pytest.raises(SystemExit) as exit_info:
        tool['parse_args']([*base, '--clusters', '6'])
    assert exit_info.value.code == 2
    assert '--clusters 6 exceeds --num-captions 5' in capsys.readouterr().err


@pytest.mark.parametrize('flags, message', [
    (['--num-captions', '1', '--clusters', '1'], '--num-captions must be at least 2'),
    (['--perplexity', '0'], '--perplexity must be positive, got 0.0')])
def test_a_map_of_one_point_or_no_perplexity_is_refused_before_the_model(capsys, flags,
                                                                         message):
    """Refused by scikit-learn once the model had embedded the captions, naming no flag."""
    with pytest.raises(SystemExit):
        tool['parse_args'](['config.py', '--lang', 'de', *flags])
    assert message in capsys.readouterr().err


def test_tsne_perplexity_is_capped_so_that_3_perplexity_fits_in_n_minus_1(monkeypatch):
    """Barnes-Hut t-SNE needs N - 1 >= 3 * perplexity: 7 captions allow 2, 2 captions 1."""
    import sklearn.manifold

    asked = []

    class RecordingTSNE:
        def __init__(self, perplexity, **kwargs):
            asked.append(perplexity)

        def fit_transform(self, features):
            return np.zeros((len(features), 2))

    monkeypatch.setattr(sklearn.manifold, 'TSNE', RecordingTSNE)
    for n in (7, 2, 200):
        tool['tsne'](np.zeros((n, 3)), 30.0, 0)
    assert asked == [2.0, 1.0, 30.0]


def test_a_caption_file_gives_its_first_non_empty_lines_gzipped_or_not(tmp_path):
    import gzip

    text = 'ein Hund\n\n  eine Katze \nein Vogel\n'
    (tmp_path / 'de.txt').write_text(text, encoding='utf-8')
    with gzip.open(tmp_path / 'de.txt.gz', 'wt', encoding='utf-8') as handle:
        handle.write(text)
    for name in ('de.txt', 'de.txt.gz'):
        assert tool['read_caption_file'](tmp_path / name, 2) == ['ein Hund', 'eine Katze']


def test_a_caption_file_is_read_only_as_far_as_the_captions_taken(tmp_path):
    """The whole file was read and split to keep its first --num-captions lines (a training
    set's translations: millions of lines, for 500)."""
    path = tmp_path / 'de.txt'
    path.write_text(''.join(f'ein Hund läuft über die Wiese {n}\n' for n in range(50000)),
                    encoding='utf-8')
    tracemalloc.start()
    try:
        captions = tool['read_caption_file'](path, 3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert captions == [f'ein Hund läuft über die Wiese {n}' for n in range(3)]
    assert peak < path.stat().st_size / 10


def test_the_language_is_read_in_any_spelling_of_its_code(capsys):
    """'--lang DE' was refused as "not a target language of the model (['de', 'zh'])"."""
    assert tool['parse_args'](['config.py', '--lang', 'deu_Latn']).lang == 'de'
    with pytest.raises(SystemExit):
        tool['parse_args'](['config.py', '--lang', 'klingon'])
    assert "--lang: unknown language code 'klingon'" in capsys.readouterr().err


def test_a_caption_file_not_in_utf_8_is_named_with_its_line_and_a_bom_is_dropped(tmp_path):
    """Bytes that are no UTF-8 stopped the tool on "'utf-8' codec can't decode byte 0xff in
    position 9", naming neither file nor line; a byte order mark began the first caption."""
    (tmp_path / 'latin1.txt').write_bytes('ein Hund\nzwei Bären\n'.encode('latin-1'))
    with pytest.raises(ValueError, match=r'latin1\.txt is not UTF-8 \(invalid bytes on line 2\)'):
        tool['read_caption_file'](tmp_path / 'latin1.txt', 5)
    (tmp_path / 'bom.txt').write_text('\ufeffein Hund\n', encoding='utf-8')
    assert tool['read_caption_file'](tmp_path / 'bom.txt', 5) == ['ein Hund']


@pytest.mark.parametrize('flag, value, message', [
    ('--device', 'foo', '--device foo: is no torch device: give cpu, cuda or cuda:N'),
    ('--device', 'cuda:64', '--device cuda:64: this machine has'),
    ('--out-dir', 'afile', 'afile (--out-dir): is a file, not a folder'),
    ('--out-dir', 'afile/maps', 'afile/maps (--out-dir): cannot be made there '
     '({afile} is a file, not a folder): give a folder (made if missing) for the map'),
])
def test_a_device_or_out_dir_it_cannot_use_is_refused_before_the_model(tmp_path, monkeypatch,
                                                                       flag, value, message):
    """Each failed once the captions were embedded and mapped (an unexpected RuntimeError, or
    the OS's 'File exists' or 'Not a directory'), naming no flag."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'afile').write_text('notes')
    _refuse_building(monkeypatch)
    with pytest.raises(UserError, match=re.escape(message.format(afile=tmp_path / 'afile'))):
        tool['main']([str(write_config(tmp_path)), '--lang', 'de', flag, value])
    assert (tmp_path / 'afile').read_text() == 'notes'


def test_an_interrupted_map_leaves_the_earlier_one_whole(tmp_path, monkeypatch):
    """The image was drawn straight into its file: a run stopped while writing it left a cut
    PNG over the earlier map."""
    import matplotlib.figure

    captions = tmp_path / 'captions.txt'
    captions.write_text('\n'.join(CAPTIONS) + '\n')
    written = run(tmp_path, write_config(tmp_path), '--captions', str(captions))
    before = {path: path.read_bytes() for path in written.values()}

    def cut_short(figure, target, **kwargs):
        if isinstance(target, (str, Path)):
            Path(target).write_bytes(b'\x89PN')
        else:
            target.write(b'\x89PN')
        raise KeyboardInterrupt

    monkeypatch.setattr(matplotlib.figure.Figure, 'savefig', cut_short)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, write_config(tmp_path), '--captions', str(captions), '--seed', '3',
            '--overwrite')
    assert {path: path.read_bytes() for path in written.values()} == before


def test_an_earlier_map_is_kept_unless_overwrite_replaces_it(tmp_path, monkeypatch):
    """A second run of one language and feature (another checkpoint's map) replaced the
    first's files without a word."""
    captions = tmp_path / 'captions.txt'
    captions.write_text('\n'.join(CAPTIONS) + '\n')
    config = write_config(tmp_path)
    written = run(tmp_path, config, '--captions', str(captions))
    before = {path: path.read_bytes() for path in written.values()}
    monkeypatch.setitem(tool['main'].__globals__, 'extract_features',
                        lambda *args: pytest.fail('encoded'))
    with pytest.raises(UserError, match=re.escape(
            f"{written['png']} (--out-dir): holds the output of an earlier run; it is kept: "
            'pass --overwrite to replace it, or give another --out-dir')):
        run(tmp_path, config, '--captions', str(captions), '--clusters', '2')
    assert {path: path.read_bytes() for path in written.values()} == before

    monkeypatch.undo()
    run(tmp_path, config, '--captions', str(captions), '--clusters', '2', '--overwrite')
    listing = written['text'].read_text(encoding='utf-8')
    assert listing.startswith(f'f^sa of {len(CAPTIONS)} de captions, k-means k=2 (tiny_dasd)')
    assert sum(line.startswith('cluster ') for line in listing.split('\n')) == 2


@pytest.mark.parametrize('name, content', [
    ('de_fsa_clusters.txt', b'my notes on the clusters\n'),
    ('de_fsa.png', b'PK\x03\x04 a zip archive'),
])
def test_a_file_the_tool_did_not_write_is_kept_even_with_overwrite(tmp_path, name, content):
    (tmp_path / 'out').mkdir()
    (tmp_path / 'out' / name).write_bytes(content)
    with pytest.raises(UserError, match=re.escape(
            f"{tmp_path / 'out' / name} (--out-dir): exists and is not a map or cluster listing "
            'this tool wrote; it is left as it is: give another --out-dir')):
        run(tmp_path, write_config(tmp_path), '--overwrite')
    assert (tmp_path / 'out' / name).read_bytes() == content


def test_the_config_test_set_is_read_and_refused_before_the_model_is_built(tmp_path,
                                                                           monkeypatch):
    """Captions taken from the config's test set were read once the model stood (a paper's
    backbone loads for minutes): a test set without captions of --lang, or a config with
    several test sets (a list: which one?), was refused only then."""
    config = write_config(tmp_path)
    _refuse_building(monkeypatch)
    with pytest.raises(ValueError, match=r'^0 zh captions found, fewer than --clusters 3'):
        run(tmp_path, config, '--lang', 'zh')
    several = tmp_path / 'several.py'
    several.write_text(config.read_text().replace(
        'test_dataloader = dict(', 'test_dataloader = [dict(').rstrip() + ']\n')
    with pytest.raises(ValueError, match=re.escape(
            f'config {several} has no single test_dataloader to take captions from; pass '
            '--captions FILE')):
        run(tmp_path, several)
    assert not (tmp_path / 'out').exists()


def test_a_caption_file_shorter_than_the_clusters_is_refused_before_anything_is_encoded(
        tmp_path, monkeypatch):
    """k-means refused it after the captions were encoded, in sklearn's words, naming no
    flag."""
    (tmp_path / 'de.txt').write_text('ein Hund\neine Katze\n', encoding='utf-8')
    _refuse_building(monkeypatch)
    with pytest.raises(ValueError, match=r'^2 de captions found, fewer than --clusters 3 or the '
                                         '2 a map needs$'):
        run(tmp_path, write_config(tmp_path), '--captions', str(tmp_path / 'de.txt'))
    assert not (tmp_path / 'out').exists()


def _refuse_building(monkeypatch) -> None:
    """Any model build fails the test: what it checks must be refused before it."""
    import xmr.apis

    monkeypatch.setattr(xmr.apis, 'init_retriever',
                        lambda *args, **kwargs: pytest.fail('the model was built first'))


@pytest.mark.parametrize('content, message', [
    (None, 'de_typo.txt (--captions): no such file: give a text file, one caption a line'),
    ('folder', 'de_typo.txt (--captions): is a folder, not a file: give a text file'),
    (b'ein Hund\n\xe4\n', 'de_typo.txt is not UTF-8 (invalid bytes on line 2)'),
])
def test_a_caption_file_it_cannot_read_is_refused_before_the_model_is_built(
        tmp_path, monkeypatch, content, message):
    """A paper's backbone loads for minutes; a mistyped --captions path, or a file not in
    UTF-8, was named once it stood. A folder was said not to exist, and neither named the
    flag."""
    if content == 'folder':
        (tmp_path / 'de_typo.txt').mkdir()
    elif content is not None:
        (tmp_path / 'de_typo.txt').write_bytes(content)
    _refuse_building(monkeypatch)
    with pytest.raises((UserError, ValueError), match=re.escape(message)):
        run(tmp_path, write_config(tmp_path), '--captions', str(tmp_path / 'de_typo.txt'))
    assert not (tmp_path / 'out').exists()


def test_a_truncated_checkpoint_is_refused_before_the_model_is_built(tmp_path, monkeypatch):
    """A checkpoint copy cut short was refused once the backbone had loaded."""
    torch.save(dict(state_dict={'w': torch.zeros(64)}), tmp_path / 'whole.pth')
    (tmp_path / 'cut.pth').write_bytes((tmp_path / 'whole.pth').read_bytes()[:300])
    _refuse_building(monkeypatch)
    with pytest.raises(ValueError, match=rf'^{re.escape(str(tmp_path / "cut.pth"))}: truncated'):
        run(tmp_path, write_config(tmp_path), '--checkpoint', str(tmp_path / 'cut.pth'))
    with pytest.raises(UserError, match=re.escape(f'{tmp_path / "gone.pth"} (--checkpoint): no '
                                                  'such file')):
        run(tmp_path, write_config(tmp_path), '--checkpoint', str(tmp_path / 'gone.pth'))
