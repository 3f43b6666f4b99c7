"""tools/benchmarks/token_search.py: a patch-word model's validation gallery searched with its own
captions, its search's recalls printed beside evaluation's on the same encodings."""
from __future__ import annotations

import math
import re

import pytest
import torch
from mmengine.config import Config

from tests.conftest import benchmark_script
from xmr.registry import MODELS
from xmr.utils.cli import UserError

token_search = benchmark_script('token_search')
CONFIG = 'configs/cdds/cdds_tiny-clip_synthetic.py'


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
    """The CDDS demo's model, its disentangler moved away from its init."""
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(CONFIG).model)
    with torch.no_grad():
        for parameter in model.disentangler.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    path = tmp_path_factory.mktemp('cdds') / 'cdds.pth'
    torch.save({'state_dict': model.state_dict()}, path)
    return path


def test_the_search_recalls_are_evaluation_s(checkpoint, capsys):
    token_search.main([CONFIG, str(checkpoint), '--limit', '24', '--candidates', 'all,3,12'])
    out = capsys.readouterr().out
    assert '24 media, 48 en captions, DualEncoderRetriever, cpu' in out
    rows = [line.strip('| ').split(' | ') for line in out.splitlines()
            if line.startswith('| tokens') or line.startswith('| pooled')]
    # A shortlist of 3 re-ranks the 10 hits a search returns.
    assert [row[0] for row in rows] == ['tokens, all', 'tokens, shortlist 10',
                                        'tokens, shortlist 12', 'pooled cosine']
    for row in rows:
        assert row[2:5] == row[5:8]  # R@1, 5, 10 of the hits and of evaluation's ranks
    assert len({tuple(row[2:5]) for row in rows}) > 1  # the rankings differ: each is checked


def test_float16_tokens_halve_the_index_file_and_evaluation_s_recalls_stay_float32_s(
        checkpoint, capsys):
    runs = {}
    for dtype in ('float32', 'float16'):
        token_search.main([CONFIG, str(checkpoint), '--limit', '24', '--candidates', 'all',
                           '--token-dtype', dtype])
        out = capsys.readouterr().out
        shape, stored, size = re.search(
            r'media tokens \((\d+, \d+, \d+)\) (\w+), [\d.]+ MB; index file ([\d,]+) bytes',
            out).groups()
        rows = [line.strip('| ').split(' | ') for line in out.splitlines()
                if line.startswith('| tokens') or line.startswith('| pooled')]
        runs[dtype] = stored, int(size.replace(',', '')), [row[5:8] for row in rows]
    assert [runs[dtype][0] for dtype in runs] == ['float32', 'float16']
    elements = math.prod(map(int, shape.split(', ')))
    # Two bytes less an element, give or take the archive's 64-byte alignment.
    assert abs(runs['float32'][1] - runs['float16'][1] - 2 * elements) <= 64
    assert runs['float32'][2] == runs['float16'][2]  # evaluation ranks the float32 tokens


@pytest.mark.parametrize('argv, message', [
    ([CONFIG, 'missing.pth'], 'missing.pth (checkpoint): no such file'),
    ([CONFIG, CONFIG, '--candidates', '0'], "--candidates: '0' is no whole number >= 1"),
    ([CONFIG, CONFIG, '--limit', '0'], "--limit: '0' is no whole number >= 1"),
    ([CONFIG, CONFIG, '--token-dtype', 'half'], "--token-dtype: invalid choice: 'half'"),
])
def test_an_option_that_fails_the_run_is_refused_before_the_model_is_built(
        monkeypatch, capsys, argv, message):
    monkeypatch.setattr('xmr.apis.init_retriever', lambda *args, **kwargs: pytest.fail('built'))
    with pytest.raises(SystemExit):
        token_search.main(argv)
    assert message in capsys.readouterr().err


def test_a_model_that_scores_by_embeddings_is_named(tmp_path):
    config = 'configs/demo/static_tiny-clip_synthetic.py'
    torch.save({'state_dict': MODELS.build(Config.fromfile(config).model).state_dict()},
               tmp_path / 'static.pth')
    with pytest.raises(UserError, match='CrossLingualRetriever scores by the cosine of its '
                                        r'embeddings \(token_score\(\) is None\)'):
        token_search.main([config, str(tmp_path / 'static.pth')])
