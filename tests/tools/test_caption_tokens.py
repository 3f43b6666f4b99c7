"""tools/caption_tokens.py: each language's captions as the config's model tokenizes them."""
from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
from open_clip.tokenizer import SimpleTokenizer

from tests.conftest import tiny_retriever_cfg
from xmr.datasets.synthetic.dataset import SyntheticRetrievalDataset
from xmr.utils.cli import UserError

TOOL = Path(__file__).resolve().parents[2] / 'tools' / 'caption_tokens.py'
tool = runpy.run_path(str(TOOL))
GALLERY = dict(type='SyntheticRetrievalDataset', num_scenes=5, languages=['en', 'de'],
               split='test', image_size=32, seed=0)


def write_config(tmp_path: Path, loader: str = 'test_dataloader') -> Path:
    path = tmp_path / 'tiny.py'
    path.write_text(f'default_scope = "xmr"\nmodel = {tiny_retriever_cfg()!r}\n'
                    f'{loader} = dict(batch_size=4, dataset={GALLERY!r})\n')
    return path


def _refuse_building(monkeypatch) -> None:
    import xmr.apis

    monkeypatch.setattr(xmr.apis, 'init_retriever',
                        lambda *args, **kwargs: pytest.fail('the model was built first'))


def test_each_language_of_the_model_is_counted_on_the_split_s_captions(tmp_path, capsys):
    rows = tool['main']([str(write_config(tmp_path)), '--out', str(tmp_path / 'counts.json')])
    printed = capsys.readouterr().out.splitlines()
    assert [row['lang'] for row in rows] == ['en', 'de']  # the model's zh: no test captions
    assert printed[-2:] == ['no test_dataloader captions in: zh',
                            f'wrote {tmp_path / "counts.json"}']
    assert json.loads((tmp_path / 'counts.json').read_text()) == rows

    # English through the tiny CLIP's tokenizer: open_clip's BPE with its start and end tokens.
    gallery = SyntheticRetrievalDataset(**{k: v for k, v in GALLERY.items() if k != 'type'})
    english = [caption for i in range(5) for caption in gallery.captions_of(i)['en']]
    lengths = [len(SimpleTokenizer().encode(caption)) + 2 for caption in english]
    assert rows[0] == dict(lang='en', captions=10, mean_tokens=sum(lengths) / 10,
                           p95_tokens=sorted(lengths)[9], max_tokens=max(lengths), context=32,
                           cut=sum(n > 32 for n in lengths), pieces=sum(lengths) - 20,
                           unknown=None, cut_share=rows[0]['cut'] / 10, unknown_share=None,
                           dataset=0)
    # The tiny SentencePiece model, learned from six captions, lacks much of the set's German.
    assert (rows[1]['captions'], rows[1]['context']) == (10, 32) and rows[1]['unknown'] > 0
    table = [line for line in printed if line.startswith('|')]
    assert table[2].startswith(f'| en | 10 | {sum(lengths) / 10:.1f} | 1.00 |')


def test_languages_and_the_number_of_captions_can_be_chosen(tmp_path):
    rows = tool['main']([str(write_config(tmp_path)), '--langs', 'DE', '--max-captions', '3'])
    assert [(row['lang'], row['captions']) for row in rows] == [('de', 3)]


def test_what_the_config_refuses_is_refused_before_the_model_is_built(tmp_path, monkeypatch):
    _refuse_building(monkeypatch)
    config = write_config(tmp_path, loader='val_dataloader')
    with pytest.raises(ValueError, match="'ja'"):
        tool['main']([str(config), '--split', 'val', '--langs', 'ja'])
    with pytest.raises(ValueError, match=f'^config {config} has no test_dataloader with a dataset'):
        tool['main']([str(config)])
    with pytest.raises(UserError, match='is a folder, not a file'):
        tool['main']([str(config), '--split', 'val', '--out', str(tmp_path)])


def test_a_split_without_captions_in_any_language_asked_for_is_refused(tmp_path):
    with pytest.raises(UserError, match=r'tiny.py: its test data has no captions in zh: '
                                        'give --split or --langs of languages it holds$'):
        tool['main']([str(write_config(tmp_path)), '--langs', 'zh'])


def test_a_config_of_several_test_sets_gets_a_table_per_set(tmp_path, capsys):
    """A paper's config scores several test sets (MultiDatasetTestLoop): the tool named none
    of them alone, where each set's languages are read by the one model."""
    config = write_config(tmp_path)
    second = dict(GALLERY, languages=['zh'], num_scenes=2)
    config.write_text(config.read_text().replace(
        'test_dataloader = dict(', 'test_dataloader = [dict(').rstrip()
        + f', dict(batch_size=4, dataset={second!r})]\n')
    rows = tool['main']([str(config)])
    assert [(row['dataset'], row['lang'], row['captions']) for row in rows] == [
        (0, 'en', 10), (0, 'de', 10), (1, 'zh', 4)]
    printed = capsys.readouterr().out.splitlines()
    assert 'no test_dataloader[0] captions in: zh' in printed
    assert 'no test_dataloader[1] captions in: en, de' in printed
    assert printed.index('test_dataloader[0]: synthetic') < printed.index(
        'test_dataloader[1]: synthetic')
