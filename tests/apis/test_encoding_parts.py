"""An encoding saved in parts: interrupted, run again, it encodes only what it had not saved and
returns what one uninterrupted encoding returns."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import xmr.apis.inference as inference
from tests.apis.conftest import random_images
from tests.conftest import Interrupt, decoded_media, tiny_retriever_cfg
from xmr.apis import EncodingParts, encode_media, encode_media_in_parts, media_encoding
from xmr.apis.encoding_parts import PART_FORMAT
from xmr.datasets.corrupt_policy import MediaSkippedWarning
from xmr.engine.feature_cache.key import jsonable
from xmr.registry import MODELS


@pytest.fixture
def image_files(tmp_path):
    return random_images(tmp_path, [f'photo{number}' for number in range(7)])


def ids_of(files):
    return [file.stem for file in files]


def test_an_interrupted_encoding_goes_on_from_its_parts_and_equals_an_uninterrupted_one(
        model, image_files, tmp_path, monkeypatch):
    whole, whole_skipped = encode_media_in_parts(model, image_files, ids_of(image_files),
                                                 tmp_path / 'whole', part_size=2, batch_size=2)
    assert whole_skipped == []
    torch.testing.assert_close(whole, encode_media(model, image_files), rtol=0, atol=1e-6)

    decoded_media(monkeypatch, interrupt_at=image_files[5])
    with pytest.raises(Interrupt):
        encode_media_in_parts(model, image_files, ids_of(image_files), tmp_path / 'parts',
                              part_size=2, batch_size=2)
    parts = EncodingParts(tmp_path / 'parts', media_encoding(model, None, 12))
    assert [path.name for path in parts.files()] == ['part-000001.pt', 'part-000002.pt']
    assert list(parts.read()) == ids_of(image_files[:4])

    decoded = decoded_media(monkeypatch)
    resumed, skipped = encode_media_in_parts(model, image_files, ids_of(image_files),
                                             tmp_path / 'parts', part_size=2, batch_size=2)
    assert decoded == image_files[4:] and skipped == []
    torch.testing.assert_close(resumed, whole, rtol=0, atol=0)
    assert len(parts.files()) == 4
    # Run again once whole, nothing is decoded; another order of the media is served too.
    decoded.clear()
    again, _ = encode_media_in_parts(model, image_files[::-1], ids_of(image_files[::-1]),
                                     tmp_path / 'parts', part_size=2, batch_size=2)
    assert decoded == []
    torch.testing.assert_close(again, whole.flip(0), rtol=0, atol=0)


@pytest.mark.parametrize('unread', [2, 4], ids=['last of a part', 'inside a later part'])
def test_media_that_cannot_be_read_are_not_saved_and_are_tried_again(
        model, image_files, tmp_path, monkeypatch, unread):
    """Media ``unread`` of six, in parts of three, cannot be read: it is reported by its
    position in the media, not in its part, and each other id keeps its own embedding (inside
    the second part, the next one's was saved under the unread one's id); once the file is
    repaired, the run that goes on decodes it alone and returns what an encoding of every
    media at once returns."""
    readable = image_files[unread].read_bytes()
    image_files[unread].write_bytes(b'')
    with pytest.warns(MediaSkippedWarning,
                      match=re.escape(f'skipping item {unread}: {image_files[unread]}')):
        embeddings, skipped = encode_media_in_parts(
            model, image_files, ids_of(image_files), tmp_path / 'parts', part_size=3,
            on_corrupt='skip')
    assert [(marker.index, marker.media_path) for marker in skipped] == [
        (unread, str(image_files[unread]))]
    expected = encode_media(model, image_files[:unread] + image_files[unread + 1:])
    torch.testing.assert_close(embeddings, expected, rtol=0, atol=1e-6)
    image_files[unread].write_bytes(readable)
    decoded = decoded_media(monkeypatch)
    embeddings, skipped = encode_media_in_parts(model, image_files, ids_of(image_files),
                                                tmp_path / 'parts', part_size=3)
    assert decoded == [image_files[unread]] and skipped == []
    torch.testing.assert_close(embeddings, encode_media(model, image_files), rtol=0, atol=1e-6)


def test_a_part_in_which_no_media_can_be_read_is_not_the_end(model, image_files, tmp_path):
    """Only an encoding that reads no media at all fails, as encode_readable_media does."""
    for path in image_files[:2]:
        path.write_bytes(b'')
    with pytest.warns(MediaSkippedWarning):
        embeddings, skipped = encode_media_in_parts(model, image_files[:4],
                                                    ids_of(image_files[:4]), tmp_path / 'parts',
                                                    part_size=2, on_corrupt='skip')
    assert embeddings.shape[0] == 2 and [marker.index for marker in skipped] == [0, 1]
    with pytest.warns(MediaSkippedWarning), pytest.raises(
            inference.MediaReadError, match='none of the 2 media can be read'):
        encode_media_in_parts(model, image_files[:2], ids_of(image_files[:2]),
                              tmp_path / 'none', part_size=1, on_corrupt='skip')


def test_parts_encoded_otherwise_are_refused_naming_the_part_and_the_value(
        model, image_files, tmp_path):
    encode_media_in_parts(model, image_files[:2], ids_of(image_files[:2]), tmp_path / 'parts',
                          num_frames=8)
    part = tmp_path / 'parts' / 'part-000001.pt'
    with pytest.raises(ValueError, match=re.escape(
            f'{part}: its media were encoded with num_frames 8, this encoding has 12: encode '
            f"with the num_frames that wrote it to go on, or remove {tmp_path / 'parts'}")):
        encode_media_in_parts(model, image_files, ids_of(image_files), tmp_path / 'parts')
    squash = dict(type='MediaTransform', backbone=None, size=32, resize_mode='squash')
    with pytest.raises(ValueError, match=re.escape(
            f'{part}: its media were encoded with transform None, this encoding has '
            f"{jsonable(squash)!r}")):
        encode_media_in_parts(model, image_files, ids_of(image_files), tmp_path / 'parts',
                              num_frames=8, transform=squash)
    torch.manual_seed(1)
    other = MODELS.build(tiny_retriever_cfg()).eval()
    with pytest.raises(ValueError, match=re.escape(
            f"{part}: its media were encoded with backbone '{model.backbone.fingerprint()}'")):
        encode_media_in_parts(other, image_files, ids_of(image_files), tmp_path / 'parts',
                              num_frames=8)
    torch.save({'weights': torch.zeros(1)}, tmp_path / 'parts' / 'part-000002.pt')
    with pytest.raises(ValueError, match=re.escape(
            f"{tmp_path / 'parts' / 'part-000002.pt'}: is not a part of a media encoding "
            f"(no format '{PART_FORMAT}')")):
        encode_media_in_parts(model, image_files, ids_of(image_files), tmp_path / 'parts',
                              num_frames=8)


def test_bad_arguments_are_named(model, image_files, tmp_path):
    with pytest.raises(ValueError, match=r'media_ids must be 3 unique ids, one per media, got '
                       r'3 \(2 unique\)'):
        encode_media_in_parts(model, image_files[:3], ['a', 'b', 'a'], tmp_path / 'parts')
    with pytest.raises(ValueError, match='part_size must be a positive int, got 0'):
        encode_media_in_parts(model, image_files[:3], ['a', 'b', 'c'], tmp_path / 'parts',
                              part_size=0)
    (tmp_path / 'file').write_text('')
    with pytest.raises(ValueError, match='is a file, not a folder of encoding parts'):
        encode_media_in_parts(model, image_files[:3], ['a', 'b', 'c'], tmp_path / 'file')
    # Saved, a Path id was refused by the weights-only read of the run that goes on.
    with pytest.raises(ValueError, match=r"media_ids\[1\] is a PosixPath \(PosixPath\('b'\)\): "
                                         'the parts keep ids as str; give str ids'):
        encode_media_in_parts(model, image_files[:3], ['a', Path('b'), 'c'], tmp_path / 'parts')
    assert not (tmp_path / 'parts').exists()
    # Random crops and flips would embed each media otherwise at every run.
    with pytest.raises(ValueError, match='training=True crops and flips each media at random'):
        encode_media(model, image_files[:1], transform=dict(
            model.backbone.media_transform(), training=True))


def test_remove_deletes_the_parts_and_keeps_what_else_is_in_the_folder(tmp_path):
    parts = EncodingParts(tmp_path / 'parts', dict(num_frames=12))
    parts.write(['a', 'b'], torch.eye(2))
    parts.write(['c'], torch.ones(1, 2))
    assert sorted(parts.read()) == ['a', 'b', 'c']
    (tmp_path / 'parts' / '.part-000003.pt.999999999.tmp').write_bytes(b'left by a kill')
    parts.remove()
    assert not (tmp_path / 'parts').exists()
    parts.write(['a'], torch.eye(1, 2))
    (tmp_path / 'parts' / 'notes.txt').write_text('mine')
    parts.remove()
    assert [path.name for path in (tmp_path / 'parts').iterdir()] == ['notes.txt']


def test_parts_are_numbered_on_from_the_folder_read_once(tmp_path, monkeypatch):
    """Each part listed the folder to name itself: a 1M-media gallery (3,907 parts) spent
    159 s in the listing alone."""
    (tmp_path / 'parts').mkdir()
    EncodingParts(tmp_path / 'parts', {}).write(['a'], torch.eye(1, 2))  # an earlier run's
    parts = EncodingParts(tmp_path / 'parts', {})
    listed, iterdir = [], Path.iterdir

    def listing(folder: Path):
        listed.append(folder)
        return iterdir(folder)

    with monkeypatch.context() as patch:
        patch.setattr(Path, 'iterdir', listing)
        for number in range(4):
            parts.write([f'id{number}'], torch.ones(1, 2))
    assert listed == [tmp_path / 'parts']
    assert [path.name for path in parts.files()] == [
        f'part-{number:06d}.pt' for number in range(1, 6)]
    assert list(parts.read()) == ['a', 'id0', 'id1', 'id2', 'id3']
    parts.remove()
    parts.write(['b'], torch.eye(1, 2))
    assert [path.name for path in parts.files()] == ['part-000001.pt']


def test_parts_past_the_millionth_are_read_in_the_order_written(tmp_path):
    """Part names have six digits at least: by name, part-1000000.pt came before
    part-999999.pt, and an earlier part's rows replaced a later one's."""
    parts = EncodingParts(tmp_path, {})
    parts.write(['a'], torch.zeros(1, 2))
    (tmp_path / 'part-000001.pt').rename(tmp_path / 'part-999999.pt')
    parts = EncodingParts(tmp_path, {})
    parts.write(['a'], torch.ones(1, 2))
    assert [path.name for path in parts.files()] == ['part-999999.pt', 'part-1000000.pt']
    assert torch.equal(parts.read()['a'].embedding, torch.ones(2))


def test_parts_decoded_by_workers_equal_those_decoded_in_turn_and_start_them_once(
        model, image_files, tmp_path, monkeypatch):
    loaders = []

    class CountedLoader(inference.DataLoader):
        def __init__(self, *args, **kwargs):
            loaders.append(kwargs['num_workers'])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(inference, 'DataLoader', CountedLoader)
    in_turn, _ = encode_media_in_parts(model, image_files, ids_of(image_files),
                                       tmp_path / 'in_turn', part_size=2, batch_size=2)
    by_workers, _ = encode_media_in_parts(model, image_files, ids_of(image_files),
                                          tmp_path / 'by_workers', part_size=2, batch_size=2,
                                          num_workers=2)
    torch.testing.assert_close(by_workers, in_turn, rtol=0, atol=0)
    assert loaders == [2]
    assert len(EncodingParts(tmp_path / 'by_workers', {}).files()) == 4


def test_parts_keep_their_tokens_and_their_own_rows_and_only_part_files_are_parts(tmp_path):
    """An embedding written from a view of a larger tensor saves its rows alone (torch.save
    of a view saves the storage whole); a file whose name holds a part's name is no part; a
    part cut by a kill is removed when the parts are read."""
    parts = EncodingParts(tmp_path / 'parts', dict(num_frames=12))
    gallery = torch.randn(10_000, 8)
    parts.write(['a', 'b'], gallery[:2], tokens=[torch.ones(3, 4), torch.zeros(1, 4)])
    parts.write(['c'], gallery[2:3])
    assert (tmp_path / 'parts' / 'part-000001.pt').stat().st_size < 10_000 * 8 * 4 / 10
    for name in ('extra.pt', 'part-000003.pt.bak', 'old-part-000004.pt'):
        torch.save({'weights': torch.zeros(1)}, tmp_path / 'parts' / name)
    (tmp_path / 'parts' / '.part-000003.pt.999999999.tmp').write_bytes(b'left by a kill')
    assert [(ids, tokens) for ids, _, tokens in parts.parts()][1] == (['c'], None)
    read = parts.read()
    assert not (tmp_path / 'parts' / '.part-000003.pt.999999999.tmp').exists()
    assert list(read) == ['a', 'b', 'c']
    assert torch.equal(read['a'].embedding, gallery[0]) and read['c'].tokens is None
    assert torch.equal(read['a'].tokens, torch.ones(3, 4))
    assert torch.equal(read['b'].tokens, torch.zeros(1, 4))


def test_of_several_values_encoded_otherwise_the_first_is_named(tmp_path):
    EncodingParts(tmp_path, dict(num_frames=8, transform='a')).write(['a'], torch.eye(1, 2))
    with pytest.raises(ValueError, match=' encoded with num_frames 8, this encoding has 12'):
        next(EncodingParts(tmp_path, dict(num_frames=12, transform='b')).parts())
