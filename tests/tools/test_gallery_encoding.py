"""tools/benchmarks/gallery_encoding.py: its options checked before the gallery is written."""
from __future__ import annotations

import pytest
import torch

from tests.conftest import benchmark_script

gallery_encoding = benchmark_script('gallery_encoding')


@pytest.mark.parametrize('argv, message', [
    (['--device', 'cuda'], '--device cuda: this machine has 0 CUDA device(s)'),
    (['--size', '1280'], "--size: '1280' is no WIDTHxHEIGHT of whole numbers >= 1"),
    (['--workers', '0,two'], "--workers: 'two' is no whole number >= 0"),
    (['--workers', ''], "--workers: '' lists nothing: give one or more comma-separated, e.g. "
                        '0,1,2'),
    (['--workers', ','], "--workers: ',' lists nothing"),
    (['--videos', 'missing.mp4'], 'missing.mp4 (--videos): no such file'),
    (['--images', '-1'], "--images: '-1' is no whole number >= 0"),
    (['--batch-size', '0'], "--batch-size: '0' is no whole number >= 1"),
])
def test_an_option_that_fails_the_run_is_refused_before_the_images_are_written(
        monkeypatch, capsys, argv, message):
    """Each failed once the gallery's JPEGs were written (300 at 1280x960 by default), or, a
    worker count, once the model was built and warmed up."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(gallery_encoding, 'write_images',
                        lambda *args: pytest.fail('the images were written'))
    with pytest.raises(SystemExit):
        gallery_encoding.main(argv)
    assert message in capsys.readouterr().err


def test_a_tiny_gallery_is_encoded_alike_by_every_worker_count(capsys):
    gallery_encoding.main(['--images', '3', '--size', '40x30', '--workers', '0,1',
                           '--batch-size', '2'])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith('| ')]
    assert [row.split(' | ')[0] for row in rows[1:]] == ['| 0', '| 1']
    assert all(row.endswith('| yes |') for row in rows[1:])
