"""tools/search.py: the hits of xmr.apis on a folder of media, a saved index searched again, and
everything given checked before the model is built."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config
from PIL import Image

from tests.apis.conftest import random_images
from tests.apis.test_dual_encoder import dual_encoder_cfg
from tests.conftest import (
    Interrupt,
    decoded_media,
    terminated_while_held,
    tiny_retriever_cfg,
)
from tests.tools.test_test_tool import save_checkpoint
from xmr.apis import MediaIndex, encode_texts, init_retriever
from xmr.datasets.corrupt_policy import MediaSkippedWarning
from xmr.datasets.media_io import MediaReadError
from xmr.engine.checkpoint import CheckpointReadError
from xmr.registry import MODELS
from xmr.utils.cli import UserError

TOOL = Path(__file__).resolve().parents[2] / 'tools' / 'search.py'


def load_tool():
    spec = importlib.util.spec_from_file_location('xmr_search_tool', TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def gallery(tmp_path, shared_data):
    """A config, its checkpoint, and a folder of images (one nested, one upper-case suffix) and
    a video, beside files that are no media."""
    config, checkpoint = tmp_path / 'tiny.py', tmp_path / 'tiny.pth'
    Config(dict(default_scope='xmr', model=tiny_retriever_cfg())).dump(config)
    save_checkpoint(tiny_retriever_cfg(), checkpoint)
    media = tmp_path / 'media'
    rng = np.random.default_rng(0)
    for name in ('beach.png', 'forest.JPG', 'cities/night.png'):
        (media / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (36, 44, 3), dtype=np.uint8)).save(
            media / name, 'PNG' if name.endswith('.png') else 'JPEG')
    shutil.copy(shared_data / 'videos' / 'video_0.mov', media / 'clip.mov')
    (media / 'notes.txt').write_text('not a medium')
    (media / 'features.h5').write_bytes(b'\x89HDF')
    return config, checkpoint, media


def test_a_folder_is_searched_as_xmr_apis_searches_its_media_and_its_saved_index_again(
        gallery, tmp_path, capsys):
    config, checkpoint, media = gallery
    files = [media / 'beach.png', media / 'cities' / 'night.png', media / 'clip.mov',
             media / 'forest.JPG']
    model = init_retriever(str(config), str(checkpoint))
    expected = MediaIndex.from_media(model, files, media_ids=[str(f) for f in files]).search(
        model, ['ein roter Kreis', 'zwei Quadrate'], 'de', k=3)

    tool = load_tool()
    tool.main([str(config), str(checkpoint), '--media', str(media), '--index',
               str(tmp_path / 'gallery.idx'), '--lang', 'de', '--query', 'ein roter Kreis',
               'zwei Quadrate', '--k', '3', '--out', str(tmp_path / 'hits.json'),
               '--num-workers', '2'])
    captured = capsys.readouterr()
    printed = captured.out
    assert printed.startswith(f"index of 4 media: {tmp_path / 'gallery.idx'}\n")
    assert '] 4/4, ' in captured.err  # the progress, on stderr, apart from the hits
    hit, width = expected[0][0], max(len(hit.media_id) for hit in expected[0])
    assert (f"query (de): ein roter Kreis\n\n| rank | score  | {'media'.ljust(width)} |\n"
            f"|------|--------|{'-' * (width + 2)}|\n"
            f'| 1    | {hit.score:.4f} | {hit.media_id.ljust(width)} |') in printed
    written = json.loads((tmp_path / 'hits.json').read_text())
    assert [[(h['media'], h['score']) for h in row['hits']] for row in written['results']] == [
        [(h.media_id, h.score) for h in row] for row in expected]

    # The saved index: only the queries are encoded.
    (tmp_path / 'queries.txt').write_text('ein roter Kreis\n\nzwei Quadrate\n')
    tool.main([str(config), str(checkpoint), '--index', str(tmp_path / 'gallery.idx'),
               '--lang', 'de', '--queries', str(tmp_path / 'queries.txt'), '--k', '3',
               '--out', str(tmp_path / 'again.json')])
    assert json.loads((tmp_path / 'again.json').read_text())['results'] == written['results']


@pytest.mark.parametrize('flags, refused', [
    (['--media', 'nowhere', '--lang', 'de', '--query', 'x'],
     r'^nowhere \(--media\): no such file or folder$'),
    (['--index', 'missing.idx', '--lang', 'de', '--query', 'x'],
     r'^missing.idx \(--index\): no such file: give the index a search with --media --index '),
    (['--media', 'media', '--index', 'kept.idx'],
     r'^kept.idx \(--index\): exists and is kept: pass --update to add the media it lacks, '
     '--overwrite to replace it'),
    (['--media', 'empty', '--lang', 'de', '--query', 'x'],
     r'^empty \(--media\): holds no image or video file'),
    (['--media', 'media', '--lang', 'de', '--queries', 'none.txt'],
     r'^none.txt \(--queries\): no such file'),
    (['--index', 'kept.idx', '--lang', 'de', '--queries', 'blank.txt'],
     r'^blank.txt \(--queries\): holds no query: write one query a line$'),
    (['--index', 'kept.idx', '--lang', 'de', '--queries', 'latin1.txt'],
     r'^latin1.txt \(--queries\): is not UTF-8 text \(byte 5\): save it as UTF-8$'),
    (['--media', 'media', '--index', 'empty', '--overwrite'],
     r'^empty \(--index\): is a folder, not a file: give --index the path of the index file'),
    (['--media', 'media', '--lang', 'de', '--query', 'x', '--out', 'empty'],
     r'^empty \(--out\): is a folder, not a file: give --out the path of a .json file'),
    (['--index', 'kept.idx', '--lang', 'de', '--query', 'x', '--out', 'kept.idx/hits.json'],
     r'^kept.idx/hits.json \(--out\): cannot be written there \(/.*/kept.idx is a file, '
     r'not a folder\)'),
    (['--index', 'kept.idx', '--lang', 'de', '--query', 'x', '--out', 'hits.csv'],
     r'^hits.csv \(--out\): the hits are written as JSON: give --out a path ending in .json$'),
    (['--media', 'media', '--index', 'gallery.json', '--lang', 'de', '--query', 'x', '--out',
      'media/../gallery.json'],
     r'^media/../gallery.json \(--out\): is also --index \(gallery.json\) of this search: '
     r'give --out another path$'),
    # --overwrite replaced the checkpoint with the index built from it.
    (['--media', 'media', '--index', 'tiny.pth', '--overwrite', '--lang', 'de', '--query', 'x'],
     r'^tiny.pth \(--index\): is also the checkpoint \(/.*/tiny.pth\) of this search: give '
     r'--index another path$'),
    # --overwrite replaced any file with the index: a training checkpoint, a text file.
    (['--media', 'media', '--index', 'iter_3000.pth', '--overwrite'],
     r'^iter_3000.pth \(--index\): exists and is no media index \(a checkpoint, another file: its '
     r'first bytes name no xmr-media-index format\); it is left as it is, --overwrite replacing '
     r'an earlier index alone \(one cut short or damaged too\): give --index another path$'),
    (['--media', 'media', '--index', 'kept.idx', '--overwrite'],
     r'^kept.idx \(--index\): exists and is no media index'),
    (['--index', 'kept.idx', '--lang', 'de', '--query', 'x', '--out', 'result.json',
      '--overwrite'],
     r"^result.json \(--out\): exists and is not an earlier search's hits \(a JSON object of "
     r'index, k, lang, results, skipped\); it is left as it is: give --out another .json path$'),
    (['--index', 'kept.idx', '--lang', 'de', '--query', 'x', '--out', 'cut.json'],
     r"^cut.json \(--out\): exists and is not an earlier search's hits \(cut.json: not a JSON file "
     r'Python reads: .*\); it is left as it is'),
    (['--index', 'kept.idx', '--lang', 'de', '--query', 'x', '--device', 'gpu'],
     r'^--device gpu: is no torch device: give cpu, cuda or cuda:N$'),
    (['--media', 'media', '--lang', 'de', '--query', 'x', '  '],
     r"^--query '  ': is blank or not UTF-8 text: give the words to search for, in UTF-8$"),
    # A byte that is not UTF-8 on the command line (a Latin-1 terminal) reaches argv escaped.
    (['--index', 'kept.idx', '--lang', 'de', '--query', 'caf\udce9'],
     r"^--query 'caf\\udce9': is blank or not UTF-8 text"),
])
def test_what_is_given_is_checked_before_the_model_is_built(
        gallery, tmp_path, monkeypatch, flags, refused):
    config, checkpoint, _ = gallery
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'empty').mkdir()
    (tmp_path / 'kept.idx').write_text('an earlier index')
    (tmp_path / 'blank.txt').write_text('\n  \n')
    (tmp_path / 'latin1.txt').write_bytes('ein Bär'.encode('latin-1'))
    (tmp_path / 'result.json').write_text('{"metrics": {"mAR": 50.0}}')
    (tmp_path / 'cut.json').write_text('{"lang": "de", ')
    save_checkpoint(tiny_retriever_cfg(), tmp_path / 'iter_3000.pth')
    trained = (tmp_path / 'iter_3000.pth').read_bytes()
    tool = load_tool()
    monkeypatch.setattr('xmr.apis.init_retriever', lambda *args, **kwargs: pytest.fail('built'))
    with pytest.raises(UserError, match=refused):
        tool.main([str(config), str(checkpoint), *flags])
    assert (tmp_path / 'kept.idx').read_text() == 'an earlier index'
    assert (tmp_path / 'result.json').read_text() == '{"metrics": {"mAR": 50.0}}'
    assert (tmp_path / 'iter_3000.pth').read_bytes() == trained


@pytest.mark.parametrize('damage', ['whole', 'cut', 'empty'])
def test_overwrite_replaces_an_earlier_index_whole_cut_short_or_empty(gallery, tmp_path, damage):
    """What --overwrite may replace is told by the file's first bytes, which name the index
    format: an index cut short or damaged since, which no load reads, is still replaced."""
    config, checkpoint, media = gallery
    tool = load_tool()
    index = tmp_path / 'gallery.idx'
    build = [str(config), str(checkpoint), '--media', str(media / 'beach.png'), '--index',
             str(index)]
    tool.main(build)
    saved = index.read_bytes()
    index.write_bytes({'whole': saved, 'cut': saved[:len(saved) // 3], 'empty': b''}[damage])
    tool.main([*build, '--overwrite'])
    assert len(MediaIndex.load(index)) == 1


@pytest.mark.parametrize('flags, refused', [
    ([], 'give --media to search'),
    (['--media', 'm'], r'give --query TEXT ... or --queries FILE'),
    (['--media', 'm', '--query', 'x'], "give the queries' language: --lang"),
    (['--index', 'i', '--overwrite', '--lang', 'de', '--query', 'x'],
     '--overwrite lets --media replace a saved index, or --out the hits of an earlier search: '
     'give --media or --out'),
    (['--media', 'm', '--lang', 'de', '--query', 'x', '--k', '0'],
     '--k must be at least 1, got 0'),
    (['--media', 'm', '--update', '--lang', 'de', '--query', 'x'],
     '--update adds --media to the index saved at --index: give both'),
    (['--media', 'm', '--index', 'i', '--update', '--overwrite'],
     'give --update .* or --overwrite .*, not both'),
    (['--media', 'm', '--index', 'i', '--save-every', '0'],
     '--save-every must be at least 1, got 0'),
    (['--media', 'm', '--index', 'i', '--num-workers', '-1'],
     '--num-workers must be at least 0, got -1'),
    (['--media', 'm', '--index', 'i', '--prune'], 'with --media, --update'),
    (['--media', 'm', '--index-option', 'nlist'], "'nlist' is no NAME=N \\(nlist=1024\\)"),
    (['--media', 'm', '--index-option', 'nlist=many'], "'nlist=many' is no NAME=N"),
    (['--media', 'm', '--index', 'i', '--out', 'hits.json'],
     '--out writes the hits of queries: give --query TEXT ... or --queries FILE'),
    (['--index', 'i', '--index-type', 'hnsw', '--lang', 'de', '--query', 'x'],
     '--index-type: read only as --media are encoded into an index'),
    (['--index', 'i', '--num-frames', '3', '--lang', 'de', '--query', 'x'],
     '--num-frames: read only as --media are encoded into an index'),
    # Each was dropped without a word: a saved index is not encoded again.
    (['--index', 'i', '--batch-size', '4', '--on-corrupt', 'skip', '--lang', 'de', '--query',
      'x'], re.escape('--batch-size, --on-corrupt: read only as --media are encoded into an '
                      'index (a saved index searches as it was built; the queries are encoded '
                      'as texts): give --media')),
    (['--index', 'i', '--prune', '--num-workers', '2'],
     '--num-workers: read only as --media are encoded into an index'),
    (['--index', 'i', '--save-every', '8', '--lang', 'de', '--query', 'x'],
     '--save-every: read only as --media are encoded into an index'),
    (['--media', 'm', '--save-every', '8', '--lang', 'de', '--query', 'x'],
     "--save-every saves an --index's embeddings as they are encoded: give --index"),
    (['--media', 'm', '--index', 'i', '--candidates', '5'],
     '--candidates: read only as the hits of queries are ranked: give --query TEXT ... or '
     '--queries FILE'),
    # A saved index keeps the tokens it was built with.
    (['--index', 'i', '--no-media-tokens', '--lang', 'de', '--query', 'x'],
     '--no-media-tokens: read only as --media are encoded into an index'),
    (['--index', 'i', '--token-dtype', 'float16', '--lang', 'de', '--query', 'x'],
     '--token-dtype: read only as --media are encoded into an index'),
    (['--media', 'm', '--index', 'i', '--no-media-tokens', '--token-dtype', 'float16'],
     re.escape("--token-dtype: the dtype of the media's tokens, which --no-media-tokens leaves "
               'out: give one or the other')),
    (['--media', 'm', '--index', 'i', '--token-dtype', 'bfloat16'],
     re.escape("--token-dtype: invalid choice: 'bfloat16' (choose from")),
])
def test_usage_errors_name_what_to_give(capsys, flags, refused):
    with pytest.raises(SystemExit):
        load_tool().parse_args(['c.py', 'c.pth', *flags])
    assert re.search(refused, capsys.readouterr().err)


@pytest.mark.parametrize('lang, refused', [
    ('ko', r"--lang: the model has no adapters for \['ko'\]; it reads \['en', 'de', 'zh'\]"),
    ('xq', r"--lang: unknown language code 'xq'")])
def test_a_query_language_the_model_lacks_is_refused_before_the_model_is_built(
        gallery, tmp_path, monkeypatch, lang, refused):
    """Read from the config: the backbone's weights (seconds to minutes) were loaded first."""
    config, checkpoint, media = gallery
    monkeypatch.setattr('xmr.apis.init_retriever', lambda *args, **kwargs: pytest.fail('built'))
    monkeypatch.setattr(MediaIndex, 'from_media', lambda *args, **kwargs: pytest.fail('encoded'))
    with pytest.raises(ValueError, match=refused):
        load_tool().main([str(config), str(checkpoint), '--media', str(media), '--index',
                          str(tmp_path / 'gallery.idx'), '--lang', lang, '--query', 'x'])
    assert not (tmp_path / 'gallery.idx').exists()


def test_a_file_that_cannot_be_read_stops_the_search_or_is_left_out_and_named(
        gallery, tmp_path, capsys):
    config, checkpoint, media = gallery
    (media / 'cut.png').write_bytes(b'')
    tool = load_tool()
    flags = [str(config), str(checkpoint), '--media', str(media), '--lang', 'de', '--query',
             'ein roter Kreis', '--k', '10', '--out', str(tmp_path / 'hits.json')]
    with pytest.raises(MediaReadError, match=re.escape(f"{media / 'cut.png'}: the file is empty")):
        tool.main(flags)
    assert not (tmp_path / 'hits.json').exists()
    capsys.readouterr()
    with pytest.warns(MediaSkippedWarning, match='cut.png'):
        tool.main([*flags, '--on-corrupt', 'skip'])
    # The log's lines go to stderr with the warnings: stdout holds the hits (`> hits.md`).
    captured = capsys.readouterr()
    assert '1 of the media given cannot be read and are left out' in captured.err
    assert captured.out.startswith('query (de): ein roter Kreis\n')
    assert 'mmengine' not in captured.out
    written = json.loads((tmp_path / 'hits.json').read_text())
    assert written['skipped'] == [dict(media=str(media / 'cut.png'),
                                       reason='the file is empty (0 bytes) (media[3])')]
    assert sorted(hit['media'] for hit in written['results'][0]['hits']) == sorted(
        str(path) for path in (media / 'beach.png', media / 'cities' / 'night.png',
                               media / 'clip.mov', media / 'forest.JPG'))


def test_out_replaces_an_earlier_searchs_hits_only_with_overwrite(gallery, tmp_path):
    """--out wrote over any file: a checkpoint, a test result, the index it had just saved."""
    config, checkpoint, media = gallery
    tool = load_tool()
    index, hits = tmp_path / 'gallery.idx', tmp_path / 'hits.json'
    search = [str(config), str(checkpoint), '--index', str(index), '--lang', 'de', '--out',
              str(hits)]
    tool.main([*search, '--media', str(media), '--query', 'ein roter Kreis', '--k', '2'])
    earlier = hits.read_text()
    with pytest.raises(UserError, match=re.escape(
            f"{hits} (--out): holds an earlier search's hits; it is kept: pass --overwrite to "
            'replace it, or give --out another .json path')):
        tool.main([*search, '--query', 'zwei Quadrate'])
    assert hits.read_text() == earlier
    tool.main([*search, '--query', 'zwei Quadrate', '--overwrite'])
    assert json.loads(hits.read_text())['results'][0]['query'] == 'zwei Quadrate'
    # Adding to the index, --overwrite can mean the hits alone.
    tool.main([*search, '--media', str(media), '--update', '--overwrite', '--query', 'x'])
    assert json.loads(hits.read_text())['results'][0]['query'] == 'x'


def hits_of(path):
    return [[(hit['media'], hit['score']) for hit in row['hits']]
            for row in json.loads(path.read_text())['results']]


def test_update_encodes_only_the_media_the_index_lacks(gallery, tmp_path, monkeypatch, capsys):
    config, checkpoint, media = gallery
    tool = load_tool()
    index = tmp_path / 'gallery.idx'
    search = [str(config), str(checkpoint), '--lang', 'de', '--query', 'ein roter Kreis',
              '--k', '6']
    monkeypatch.chdir(tmp_path)
    tool.main([*search, '--media', 'media', '--index', str(index), '--num-frames', '4'])
    Image.fromarray(np.zeros((40, 40, 3), dtype=np.uint8)).save(media / 'black.png')
    decoded = decoded_media(monkeypatch)
    capsys.readouterr()
    # Run from another folder, the media given by another relative path are known again.
    monkeypatch.chdir(media / 'cities')
    tool.main([*search, '--media', '..', '--index', str(index), '--update', '--out',
               str(tmp_path / 'grown.json')])
    assert decoded == [media / 'black.png']
    assert f'{index}: 4 media indexed, 1 of the 5 given to add\n' in capsys.readouterr().out
    tool.main([*search, '--media', str(media), '--index', str(tmp_path / 'whole.idx'),
               '--num-frames', '4', '--out', str(tmp_path / 'whole.json')])
    for found, expected in zip(hits_of(tmp_path / 'grown.json'),
                               hits_of(tmp_path / 'whole.json')):
        assert [media_id for media_id, _ in found] == [media_id for media_id, _ in expected]
        np.testing.assert_allclose([score for _, score in found],
                                   [score for _, score in expected], rtol=0, atol=1e-6)
    decoded.clear()
    tool.main([*search, '--media', str(media), '--index', str(index), '--update'])
    assert decoded == []
    # Through a link to the folder, the same files: known, not added again.
    (tmp_path / 'linked').symlink_to(media)
    tool.main([*search, '--media', str(tmp_path / 'linked'), '--index', str(index), '--update'])
    assert decoded == [] and len(MediaIndex.load(index)) == 5
    # Encoded otherwise, the new media would not be comparable: refused before the model is
    # built, as is a file that is no index.
    monkeypatch.setattr('xmr.apis.init_retriever', lambda *args, **kwargs: pytest.fail('built'))
    (tmp_path / 'notes.idx').write_text('my notes')
    with pytest.raises(CheckpointReadError, match=re.escape(
            f"{tmp_path / 'notes.idx'}: not a media index: neither a torch zip archive nor a "
            'pickle; give a file MediaIndex.save wrote (tools/search.py --index)')):
        tool.main([*search, '--media', str(media), '--index', str(tmp_path / 'notes.idx'),
                   '--update'])
    assert (tmp_path / 'notes.idx').read_text() == 'my notes'
    with pytest.raises(UserError, match=re.escape(
            f'{index} (--update): was built with --num-frames 4, not 12: leave out '
            '--num-frames, or pass --overwrite')):
        tool.main([*search, '--media', str(media), '--index', str(index), '--update',
                   '--num-frames', '12'])


def test_an_index_another_run_is_writing_is_refused_and_its_lock_freed_after(
        gallery, tmp_path, monkeypatch, capsys):
    """Two --update runs on one index each saved the index they had loaded: the media the
    first added were lost. A run writing the index holds its lock; a search alone takes none."""
    from xmr.engine.work_dir import process_start_time

    config, checkpoint, media = gallery
    tool = load_tool()
    index = tmp_path / 'gallery.idx'
    search = [str(config), str(checkpoint), '--lang', 'de', '--query', 'ein roter Kreis']
    tool.main([*search, '--media', str(media), '--index', str(index), '--num-frames', '4'])
    lock = tmp_path / '.gallery.idx.lock'
    assert not lock.exists()
    other = subprocess.Popen(['sleep', '60'])
    try:
        lock.write_text(f'{other.pid} {socket.gethostname()} {process_start_time(other.pid)}\n')
        saved = index.read_bytes()
        for writes in (['--media', str(media), '--update'], ['--prune']):
            with pytest.raises(UserError, match=re.escape(
                    f'{index} (--index): another tools/search.py (PID {other.pid}) is writing '
                    f'this index (lock file {lock}): wait for it, or give --index another '
                    'path')):
                tool.main([*search, '--index', str(index), *writes])
        assert index.read_bytes() == saved
        tool.main([*search, '--index', str(index)])  # reading it needs no lock
    finally:
        other.kill()
        other.wait()
    tool.main([*search, '--media', str(media), '--index', str(index), '--update'])
    assert not lock.exists()


def test_an_interrupted_index_goes_on_from_what_it_saved_when_run_again(
        gallery, tmp_path, monkeypatch):
    config, checkpoint, media = gallery
    tool = load_tool()
    index, parts = tmp_path / 'gallery.idx', tmp_path / 'gallery.idx.parts'
    command = [str(config), str(checkpoint), '--media', str(media), '--index', str(index),
               '--save-every', '2', '--batch-size', '1', '--lang', 'de', '--query',
               'ein roter Kreis', '--k', '4', '--out', str(tmp_path / 'hits.json')]
    said = []

    def log(message, **_):
        if str(parts) in message:  # not the registries' debug lines
            said.append(message)

    monkeypatch.setattr('mmengine.logging.print_log', log)
    monkeypatch.setattr('xmr.apis.inference.print_log', log)
    decoded_media(monkeypatch, interrupt_at=media / 'clip.mov')
    with pytest.raises(Interrupt):
        tool.main(command)
    assert said == [f'the media encoded so far are saved in {parts}: run the same command '
                    'again to go on from there']
    assert not index.exists() and [path.name for path in parts.iterdir()] == ['part-000001.pt']
    # Encoded otherwise, the saved parts are refused; running the same command again would not
    # get past that, and is not advised.
    with pytest.raises(ValueError, match=re.escape(
            'part-000001.pt: its media were encoded with num_frames 12, this encoding has 4')):
        tool.main([*command, '--num-frames', '4'])
    assert len(said) == 1

    decoded = decoded_media(monkeypatch)
    tool.main(command)
    assert said[1:] == [f'{parts}: 2 of the 4 media were encoded before and are taken from '
                        'there; 2 to encode']
    assert decoded == [media / 'clip.mov', media / 'forest.JPG']
    assert index.exists() and not parts.exists()
    model = init_retriever(str(config), str(checkpoint))
    files = sorted([media / 'beach.png', media / 'cities' / 'night.png', media / 'clip.mov',
                    media / 'forest.JPG'])
    expected = MediaIndex.from_media(model, files, media_ids=[str(f) for f in files]).search(
        model, 'ein roter Kreis', 'de', k=4)[0]
    found = hits_of(tmp_path / 'hits.json')[0]
    assert [media_id for media_id, _ in found] == [hit.media_id for hit in expected]
    np.testing.assert_allclose([score for _, score in found], [hit.score for hit in expected],
                               rtol=0, atol=1e-6)


def test_prune_drops_the_media_whose_files_are_gone_without_the_model(gallery, tmp_path,
                                                                      monkeypatch, capsys):
    config, checkpoint, media = gallery
    tool = load_tool()
    index = tmp_path / 'gallery.idx'
    tool.main([str(config), str(checkpoint), '--media', str(media), '--index', str(index)])
    (media / 'forest.JPG').unlink()
    capsys.readouterr()
    monkeypatch.setattr('xmr.apis.init_retriever', lambda *args, **kwargs: pytest.fail('built'))
    tool.main([str(config), str(checkpoint), '--index', str(index), '--prune'])
    assert capsys.readouterr().out == (f'{index}: 1 media whose files are gone dropped, 3 '
                                       'kept\n\n')
    assert MediaIndex.load(index).media_ids == [
        str(media / name) for name in ('beach.png', 'cities/night.png', 'clip.mov')]
    # An index of other ids (the API's file stems) would have every media added again.
    model = init_retriever(str(config), str(checkpoint))
    MediaIndex.from_media(model, [media / 'beach.png']).save(tmp_path / 'stems.idx')
    with pytest.raises(UserError, match=re.escape(
            f"{tmp_path / 'stems.idx'} (--update, --prune): names its media by ids that are no "
            "absolute paths, such as 'beach'")):
        tool.main([str(config), str(checkpoint), '--index', str(tmp_path / 'stems.idx'),
                   '--media', str(media), '--update'])
    shutil.move(media, tmp_path / 'unmounted')
    with pytest.raises(UserError, match=re.escape(
            f'{index} (--prune): none of its 3 media files is there, the first '
            f"{media / 'beach.png'}: check that their disk is mounted")):
        tool.main([str(config), str(checkpoint), '--index', str(index), '--prune'])
    assert len(MediaIndex.load(index)) == 3


def test_media_given_twice_unreadable_new_media_and_a_prune_make_one_saved_index(
        gallery, tmp_path, capsys):
    """A file given again (in a folder given too) stopped the index with ids given twice; a new
    file that cannot be read stopped --update, and the --prune given with it was never saved."""
    config, checkpoint, media = gallery
    tool = load_tool()
    index = tmp_path / 'gallery.idx'
    tool.main([str(config), str(checkpoint), '--media', str(media), str(media / 'beach.png'),
               str(media / 'cities'), '--index', str(index)])
    assert capsys.readouterr().out.startswith(f'index of 4 media: {index}')
    (media / 'cut.png').write_bytes(b'')
    (media / 'forest.JPG').unlink()
    with pytest.warns(MediaSkippedWarning, match='cut.png'):
        tool.main([str(config), str(checkpoint), '--media', str(media), '--index', str(index),
                   '--update', '--prune', '--on-corrupt', 'skip'])
    assert MediaIndex.load(index).media_ids == [
        str(media / name) for name in ('beach.png', 'cities/night.png', 'clip.mov')]


def test_hits_of_a_file_whose_name_is_no_utf_8_are_written_and_read_back_as_its_name(
        gallery, tmp_path):
    """UTF-8 cannot write the name's lone surrogate: --out failed once the search was done."""
    config, checkpoint, _ = gallery
    photos = tmp_path / 'photos'
    photos.mkdir()
    latin1 = photos / os.fsdecode(b'caf\xe9.png')  # a name written by a Latin-1 system
    Image.fromarray(np.zeros((40, 40, 3), dtype=np.uint8)).save(latin1, 'PNG')
    tool = load_tool()
    tool.main([str(config), str(checkpoint), '--media', str(photos), '--lang', 'de', '--query',
               'ein Café', '--out', str(tmp_path / 'hits.json')])
    written = (tmp_path / 'hits.json').read_text(encoding='utf-8')
    assert '"ein Café"' in written and 'caf\\udce9.png' in written
    assert hits_of(tmp_path / 'hits.json')[0][0][0] == str(latin1)


def test_index_options_build_an_approximate_index_and_tune_a_saved_one(gallery, tmp_path,
                                                                       monkeypatch):
    """The docs' advice for a large gallery on a CPU (pass nlist and train_size) is taken from
    the command line, and a saved IVF index probes more cells for one search without being
    built again or saved."""
    config, checkpoint, media = gallery
    tool = load_tool()
    index = tmp_path / 'gallery.idx'
    search = [str(config), str(checkpoint), '--lang', 'de', '--query', 'ein roter Kreis',
              'zwei Quadrate', '--k', '4']
    tool.main([*search, '--media', str(media), '--out', str(tmp_path / 'exact.json')])
    tool.main([*search, '--media', str(media), '--index', str(index), '--index-type', 'ivf',
               '--index-option', 'nlist=2', 'nprobe=1', '--index-option', 'train_size=3',
               '--out', str(tmp_path / 'one_cell.json')])
    built = MediaIndex.load(index).searcher.index
    assert (built.nlist, built.nprobe) == (2, 1)
    assert all(len(row) < 4 for row in hits_of(tmp_path / 'one_cell.json'))
    saved = index.read_bytes()
    tool.main([*search, '--index', str(index), '--index-option', 'nprobe=2',
               '--out', str(tmp_path / 'every_cell.json')])
    for probed, exact in zip(hits_of(tmp_path / 'every_cell.json'),
                             hits_of(tmp_path / 'exact.json')):
        assert [media_id for media_id, _ in probed] == [media_id for media_id, _ in exact]
        np.testing.assert_allclose([s for _, s in probed], [s for _, s in exact], atol=1e-6)
    assert index.read_bytes() == saved

    monkeypatch.setattr('xmr.apis.init_retriever', lambda *args, **kwargs: pytest.fail('built'))
    for flags, refused in [
            (['--index', str(index), '--index-option', 'nlist=4'],
             f"{index} (--index-option): options ['nlist'] shape the ivf index as it is built; "
             "a built one takes ('chunk_size', 'nprobe'): see docs/evaluation.md"),
            (['--media', str(media), '--index-type', 'hnsw', '--index-option', 'nprobe=4'],
             "--index-option: search options ['nprobe'] do not apply to index 'hnsw'; it takes "
             "('chunk_size', 'hnsw_m', 'ef_construction', 'ef_search'): see"),
            (['--media', str(media), '--index-option', 'nlist=4'],
             "--index-option: search options ['nlist'] do not apply to index 'flat'"),
            (['--media', str(media), '--index-type', 'ivf', '--index-option', 'nlist=4',
              'train_size=2'],
             '--index-option: IVF train_size 2 is smaller than nlist 4: k-means needs a '
             'training row per cell'),
            (['--index', str(index), '--index-option', 'ef_search=8'],
             f"{index} (--index-option): search options ['ef_search'] do not apply to index "
             "'ivf'")]:
        with pytest.raises(UserError, match=re.escape(refused)):
            tool.main([*search, *flags])


def test_a_query_file_is_cut_at_newlines_only_without_its_byte_order_mark(tmp_path):
    """str.splitlines cut one query in three at a U+2028 and a form feed, and the byte order
    mark Notepad writes stayed in the first query."""
    queries = tmp_path / 'queries.txt'
    queries.write_text('\ufeffሁለት ውሻዎች\r\nदो लड़के\u2028फुटबॉल खेल\x0crahe\n\n lá\x85 \n',
                       encoding='utf-8')
    args = load_tool().parse_args(['c.py', 'c.pth', '--media', 'm', '--lang', 'am', '--query',
                                   'given', '--queries', str(queries)])
    assert load_tool().read_queries(args) == [
        'given', 'ሁለት ውሻዎች', 'दो लड़के\u2028फुटबॉल खेल\x0crahe', 'lá']


def test_a_query_file_may_be_a_pipe(tmp_path):
    """`--queries <(cut -f2 captions.tsv)`: the shell gives a pipe, read once like a file; it
    was refused as 'no such file'."""
    pipe = tmp_path / 'queries'
    os.mkfifo(pipe)
    writer = threading.Thread(target=pipe.write_text, args=('ein roter Kreis\n\nzwei Quadrate\n',),
                              daemon=True)  # blocked in open() if the tool never reads
    writer.start()
    args = load_tool().parse_args(['c.py', 'c.pth', '--index', 'g.idx', '--lang', 'de',
                                   '--queries', str(pipe)])
    try:
        assert load_tool().read_queries(args) == ['ein roter Kreis', 'zwei Quadrate']
    finally:
        writer.join(timeout=10)


def test_a_hit_s_file_name_with_a_bar_keeps_the_table_of_three_columns():
    hit = type('Hit', (), dict(score=0.91, media_id='/photos/ምሳሌ | 2024/a.jpg'))
    table = load_tool().hits_table('ሁለት ውሻዎች', 'am', [hit])
    assert table.splitlines()[2:] == ['| rank | score  | media                     |',
                                      '|------|--------|---------------------------|',
                                      '| 1    | 0.9100 | /photos/ምሳሌ \\| 2024/a.jpg |']


def test_a_file_reached_again_through_a_link_is_one_media_named_as_first_met(tmp_path):
    """Files were told apart by the names given: an image reached through a linked folder was
    indexed twice and came back twice in the hits."""
    photos = tmp_path / 'photos'
    photos.mkdir()
    for name in ('a.png', 'b.png'):
        Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(photos / name)
    (tmp_path / 'photos link').symlink_to(photos)
    files = load_tool().media_files([str(photos / 'b.png'), str(tmp_path / 'photos link'),
                                     str(photos)])
    assert files == [photos / 'b.png', tmp_path / 'photos link' / 'a.png']
    # A linked folder inside one given is searched too (Path.rglob passed it by), and a link
    # back up is not followed round.
    (tmp_path / 'more').mkdir()
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(tmp_path / 'more' / 'c.png')
    (photos / 'more').symlink_to(tmp_path / 'more')
    (photos / 'more' / 'up').symlink_to(photos)
    assert load_tool().media_files([str(photos)]) == [
        photos / 'a.png', photos / 'b.png', photos / 'more' / 'c.png']


def test_a_folder_reached_again_through_links_back_up_is_walked_once(tmp_path):
    """Two links back up made os.walk's walk grow without end (each link every other's way
    in), and --media hung."""
    photos = tmp_path / 'photos'
    photos.mkdir()
    (photos / 'a.png').write_bytes(b'x')
    (photos / 'up').symlink_to(photos)
    (photos / 'up2').symlink_to(photos)
    assert list(load_tool().files_below(photos)) == [photos / 'a.png']


def test_real_paths_resolve_as_realpath_does_each_folder_once(tmp_path, monkeypatch):
    """os.path.realpath of every file took ~8 lstat calls a file (2.5 min for 1M files at
    every --update); the paths found must stay those realpath finds."""
    (tmp_path / 'photos' / 'trip').mkdir(parents=True)
    (tmp_path / 'photos' / 'trip' / 'a.png').write_bytes(b'x')
    (tmp_path / 'elsewhere').mkdir()
    (tmp_path / 'elsewhere' / 'b.png').write_bytes(b'y')
    (tmp_path / 'photos' / 'b.png').symlink_to(tmp_path / 'elsewhere' / 'b.png')
    (tmp_path / 'linked').symlink_to(tmp_path / 'photos')
    (tmp_path / 'photos' / 'gone.png').symlink_to(tmp_path / 'nowhere.png')
    monkeypatch.chdir(tmp_path / 'photos')
    paths = [tmp_path / 'linked' / 'trip' / 'a.png', tmp_path / 'photos' / 'b.png',
             str(tmp_path / 'linked' / 'trip' / '..' / 'b.png'), tmp_path / 'linked' / 'gone.png',
             tmp_path / 'photos' / 'missing.png', 'b.png', 'trip/a.png']
    tool = load_tool()
    assert tool.real_paths(paths) == [os.path.realpath(path) for path in paths]
    plain = [tmp_path / 'linked' / 'trip' / f'{number}.png' for number in range(50)]
    resolved = []
    with monkeypatch.context() as patch:
        patch.setattr(os.path, 'realpath', lambda path, realpath=os.path.realpath: (
            resolved.append(path), realpath(path))[1])
        found = tool.real_paths(plain)
    assert found == [str(tmp_path / 'photos' / 'trip' / f'{n}.png') for n in range(50)]
    assert resolved == [str(tmp_path / 'linked' / 'trip')]  # their one folder, once


#: Holds the decoding of the third media (:func:`~tests.conftest.terminated_while_held`).
HELD_AT_THE_THIRD_MEDIA = '''
import xmr.apis.inference as inference
decode = inference._decode
def held(item, num_frames, position):
    if position == 2:
        ready.write_text('decoding the third media')
        time.sleep(60)
    return decode(item, num_frames, position)
inference._decode = held
'''


def test_sigterm_ends_a_build_as_ctrl_c_does_saying_what_it_kept_and_freeing_the_lock(
        gallery, tmp_path):
    """SIGTERM (a scheduler's stop) killed the run silently, its index's lock file left
    behind: the next run was refused until the dead holder was found out."""
    config, checkpoint, media = gallery
    index, parts, hits = tmp_path / 'gallery.idx', tmp_path / 'gallery.idx.parts', \
        tmp_path / 'hits.json'

    def locked() -> None:
        assert (tmp_path / '.gallery.idx.lock').exists()

    said = terminated_while_held(
        HELD_AT_THE_THIRD_MEDIA, TOOL,
        [str(config), str(checkpoint), '--media', str(media), '--index', str(index),
         '--save-every', '2', '--batch-size', '1', '--lang', 'de', '--query', 'ein roter Kreis',
         '--out', str(hits)], tmp_path / 'ready', at_ready=locked)
    assert f'the media encoded so far are saved in {parts}: run the same command again' in said
    assert f'stopped: {index} (--index) is not written\n' in said
    assert f'stopped: {hits} (--out) is not written\n' in said
    assert not (tmp_path / '.gallery.idx.lock').exists()
    assert not index.exists() and [path.name for path in parts.iterdir()] == ['part-000001.pt']


def test_the_help_of_index_option_names_every_option_an_index_takes(capsys):
    """It left out chunk_size, which every index takes."""
    from xmr.evaluation.search import INDEX_OPTIONS

    with pytest.raises(SystemExit):
        load_tool().parse_args(['--help'])
    shown = ' '.join(capsys.readouterr().out.split())
    listed = shown[shown.index('--index-option NAME=N [NAME=N ...] faiss'):]
    listed = listed[:listed.index('--num-frames')]
    assert {'chunk_size', *(name for names in INDEX_OPTIONS.values() for name in names)} <= set(
        re.findall(r'[a-z_]+', listed))


#: Queries of the patch-word dual encoder's tests (it trains English and German).
TOKEN_QUERIES = ['ein roter Kreis', 'zwei blaue Quadrate']


@pytest.fixture
def token_gallery(tmp_path):
    """A config and checkpoint of a CDDS dual encoder that scores pairs by patch-word matching
    (its disentangler moved away from its init), and a folder of six images."""
    config, checkpoint, photos = tmp_path / 'cdds.py', tmp_path / 'cdds.pth', tmp_path / 'photos'
    cfg = dual_encoder_cfg(retrieval_score='patch_word')
    Config(dict(default_scope='xmr', model=cfg)).dump(config)
    torch.manual_seed(0)
    model = MODELS.build(cfg)
    with torch.no_grad():
        for parameter in model.disentangler.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    torch.save({'state_dict': model.state_dict()}, checkpoint)
    photos.mkdir()
    random_images(photos, ('beach', 'forest', 'city', 'desert', 'lake', 'field'))
    return config, checkpoint, photos


def assert_same_hits(found, expected):
    """``found`` (:func:`hits_of`) are the API's ``expected`` hits, scores to float32's
    rounding."""
    assert [[media_id for media_id, _ in row] for row in found] == [
        [hit.media_id for hit in row] for row in expected]
    for row, want in zip(found, expected):
        np.testing.assert_allclose([score for _, score in row], [hit.score for hit in want],
                                   rtol=0, atol=1e-6)


def ranking_of(path):
    return {key: value for key, value in json.loads(path.read_text()).items()
            if key in ('scoring', 'rerank_candidates')}


@pytest.mark.parametrize('candidates, searched, ranking', [
    ('2', 2, dict(scoring='tokens_rerank', rerank_candidates=2)),
    ('all', None, dict(scoring='tokens'))])
def test_a_token_scoring_model_ranks_by_its_token_score_as_xmr_apis_does_and_again_when_saved(
        token_gallery, tmp_path, capsys, candidates, searched, ranking):
    """The tool ranked every model by the pooled cosine, which a patch-word model's evaluation
    does not report."""
    config, checkpoint, photos = token_gallery
    files = sorted(photos.iterdir())
    model = init_retriever(str(config), str(checkpoint))
    api = MediaIndex.from_media(model, files, media_ids=[str(path) for path in files])
    ranked = {count: api.search(model, TOKEN_QUERIES, 'de', k=2, candidates=count)
              for count in (2, None)}
    # The shortlist of 2 misses a media the whole gallery's ranking finds: the two tell apart
    # which of them the tool searched.
    assert [[hit.media_id for hit in row] for row in ranked[2]] != [
        [hit.media_id for hit in row] for row in ranked[None]]
    expected = ranked[searched]

    tool = load_tool()
    index, hits = tmp_path / 'gallery.idx', tmp_path / 'hits.json'
    search = [str(config), str(checkpoint), '--lang', 'de', '--query', *TOKEN_QUERIES, '--k', '2',
              '--candidates', candidates]
    tool.main([*search, '--media', str(photos), '--index', str(index), '--out', str(hits)])
    assert_same_hits(hits_of(hits), expected)
    assert ranking_of(hits) == ranking
    assert f'| 1    | {expected[0][0].score:.4f} | {expected[0][0].media_id} ' in (
        capsys.readouterr().out)
    assert len(MediaIndex.load(index).tokens) == len(files)

    tool.main([*search, '--index', str(index), '--out', str(tmp_path / 'again.json')])
    assert hits_of(tmp_path / 'again.json') == hits_of(hits)
    assert ranking_of(tmp_path / 'again.json') == ranking


def test_no_media_tokens_builds_a_smaller_gallery_ranked_by_the_pooled_cosine(
        token_gallery, tmp_path, monkeypatch):
    config, checkpoint, photos = token_gallery
    files = sorted(photos.iterdir())
    tool = load_tool()
    pooled, tokens = tmp_path / 'pooled.idx', tmp_path / 'tokens.idx'
    search = [str(config), str(checkpoint), '--lang', 'de', '--query', *TOKEN_QUERIES, '--k', '3']
    tool.main([*search, '--media', str(photos), '--index', str(tokens), '--out',
               str(tmp_path / 'tokens.json')])
    with warnings.catch_warnings():  # left out on purpose: nothing to warn of
        warnings.simplefilter('error')
        tool.main([*search, '--media', str(photos), '--index', str(pooled), '--no-media-tokens',
                   '--out', str(tmp_path / 'pooled.json')])
    model = init_retriever(str(config), str(checkpoint))
    expected = MediaIndex.from_media(model, files, media_ids=[str(path) for path in files],
                                     tokens=False).search_embeddings(
        encode_texts(model, TOKEN_QUERIES, 'de'), k=3)
    assert_same_hits(hits_of(tmp_path / 'pooled.json'), expected)
    assert hits_of(tmp_path / 'pooled.json') != hits_of(tmp_path / 'tokens.json')
    assert ranking_of(tmp_path / 'pooled.json') == dict(scoring='embedding')
    assert MediaIndex.load(pooled).tokens is None
    assert pooled.stat().st_size < tokens.stat().st_size

    # --update encodes as the saved index's media were: without tokens, unless refused.
    Image.fromarray(np.zeros((40, 40, 3), dtype=np.uint8)).save(photos / 'black.png')
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        tool.main([*search, '--media', str(photos), '--index', str(pooled), '--update'])
    grown = MediaIndex.load(pooled)
    assert len(grown) == len(files) + 1 and grown.tokens is None
    monkeypatch.setattr('xmr.apis.init_retriever', lambda *args, **kwargs: pytest.fail('built'))
    saved = tokens.read_bytes()
    with pytest.raises(UserError, match=re.escape(
            f"{tokens} (--update): keeps its media's tokens (built without --no-media-tokens): "
            'leave out --no-media-tokens, or pass --overwrite to build it anew without them')):
        tool.main([*search, '--media', str(photos), '--index', str(tokens), '--update',
                   '--no-media-tokens'])
    assert tokens.read_bytes() == saved
    with pytest.raises(UserError, match=re.escape(
            f'{pooled} (--update): keeps no media tokens, to store in float16: leave out '
            '--token-dtype')):
        tool.main([*search, '--media', str(photos), '--index', str(pooled), '--update',
                   '--token-dtype', 'float16'])


@pytest.mark.parametrize('given', ['0', '-1', 'x', '2.5'])
def test_a_candidate_count_that_is_none_is_refused_before_the_model_is_built(
        gallery, monkeypatch, capsys, given):
    config, checkpoint, media = gallery
    monkeypatch.setattr('xmr.apis.init_retriever', lambda *args, **kwargs: pytest.fail('built'))
    with pytest.raises(SystemExit) as exited:
        load_tool().main([str(config), str(checkpoint), '--media', str(media), '--lang', 'de',
                          '--query', 'x', '--candidates', given])
    assert exited.value.code == 2
    assert (f"error: argument --candidates: {given!r} is no count of media: give a whole number "
            "of at least 1, or 'all'") in capsys.readouterr().err


def test_candidates_given_to_a_model_ranking_by_embeddings_are_said_to_be_unused(
        gallery, tmp_path, monkeypatch):
    config, checkpoint, media = gallery
    said = []

    def log(message, **_):
        if ': unused: ' in message:  # not the registries' debug lines
            said.append(message)

    monkeypatch.setattr('mmengine.logging.print_log', log)
    load_tool().main([str(config), str(checkpoint), '--media', str(media), '--lang', 'de',
                      '--query', 'ein roter Kreis', '--candidates', '5', '--token-dtype',
                      'float16', '--out', str(tmp_path / 'hits.json')])
    assert said == [f'{flag}: unused: CrossLingualRetriever ranks by the cosine of the '
                    'embeddings (its token_score() is None)'
                    for flag in ('--candidates 5', '--token-dtype float16')]
    assert ranking_of(tmp_path / 'hits.json') == dict(scoring='embedding')


def test_token_dtype_float16_stores_half_the_token_bytes_and_update_keeps_it(
        token_gallery, tmp_path, monkeypatch):
    config, checkpoint, photos = token_gallery
    tool = load_tool()
    search = [str(config), str(checkpoint), '--lang', 'de', '--query', *TOKEN_QUERIES, '--k', '3',
              '--candidates', 'all', '--media', str(photos)]
    full, half = tmp_path / 'full.idx', tmp_path / 'half.idx'
    tool.main([*search, '--index', str(full), '--out', str(tmp_path / 'full.json')])
    tool.main([*search, '--index', str(half), '--token-dtype', 'float16', '--out',
               str(tmp_path / 'half.json')])
    stored = MediaIndex.load(full).tokens.tokens
    assert MediaIndex.load(half).token_dtype == torch.float16
    # Half the tokens' bytes, give or take the archive's 64-byte alignment.
    assert abs(full.stat().st_size - half.stat().st_size - 2 * stored.numel()) <= 64
    assert [json.loads((tmp_path / name).read_text())['token_dtype']
            for name in ('full.json', 'half.json')] == ['float32', 'float16']
    for (media, score), (media_half, score_half) in zip(
            sum(hits_of(tmp_path / 'full.json'), []), sum(hits_of(tmp_path / 'half.json'), [])):
        # tests/apis/test_token_search.py derives the bound: 2 x 2^-11, and float32's rounding.
        assert media == media_half and abs(score - score_half) <= 2 * 2 ** -11 + 1e-5

    # --update stores the new media's tokens as the index's; another dtype is refused.
    Image.fromarray(np.zeros((40, 40, 3), dtype=np.uint8)).save(photos / 'black.png')
    tool.main([*search, '--index', str(half), '--update'])
    grown = MediaIndex.load(half)
    assert len(grown) == 7 and grown.token_dtype == torch.float16
    monkeypatch.setattr('xmr.apis.init_retriever', lambda *args, **kwargs: pytest.fail('built'))
    saved = half.read_bytes()
    with pytest.raises(UserError, match=re.escape(
            f'{half} (--update): stores its media tokens in float16, not float32: leave out '
            "--token-dtype (new media are stored as the index's), or pass --overwrite to build "
            'it anew')):
        tool.main([*search, '--index', str(half), '--update', '--token-dtype', 'float32'])
    assert half.read_bytes() == saved
