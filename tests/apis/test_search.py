"""MediaIndex: search results equal a brute-force ranking of the same embeddings."""
from __future__ import annotations

import multiprocessing
import re

import numpy as np
import pytest
import torch

from tests.apis.conftest import random_images
from tests.conftest import tiny_branch_cfg, tiny_retriever_cfg
from xmr.apis import (
    EncodedGallery,
    MediaIndex,
    NoMediaReadError,
    SearchHit,
    encode_media,
    encode_readable_media,
    encode_texts,
)
from xmr.apis.search import written_as_media_index
from xmr.datasets.corrupt_policy import MediaSkippedWarning
from xmr.datasets.media_io import MediaReadError
from xmr.registry import MODELS

QUERIES = {'de': ['ein roter Kreis', 'zwei blaue Quadrate links'],
           'zh': ['一个红色的圆'], 'en': ['three green triangles']}


@pytest.fixture
def image_files(tmp_path):
    return random_images(tmp_path, ('beach', 'forest', 'city', 'desert', 'lake'))


def test_search_equals_brute_force_in_every_language(model, image_files):
    index = MediaIndex.from_media(model, image_files)
    assert len(index) == 5 and index.media_ids == ['beach', 'forest', 'city', 'desert', 'lake']
    gallery = encode_media(model, image_files)
    for lang, queries in QUERIES.items():
        hits = index.search(model, queries, lang=lang, k=3)
        scores = encode_texts(model, queries, lang) @ gallery.T
        best = scores.topk(3, dim=1)
        assert len(hits) == len(queries)
        for row, query_hits in enumerate(hits):
            assert [hit.media_id for hit in query_hits] == [
                index.media_ids[i] for i in best.indices[row].tolist()]
            assert [hit.score for hit in query_hits] == pytest.approx(
                best.values[row].tolist(), abs=1e-5)


def test_k_beyond_the_gallery_returns_it_all_and_one_query_string(model, image_files):
    index = MediaIndex.from_media(model, image_files[:2], media_ids=['x', 'y'])
    hits = index.search(model, 'ein roter Kreis', lang='de', k=10)
    assert len(hits) == 1 and sorted(hit.media_id for hit in hits[0]) == ['x', 'y']
    assert all(isinstance(hit, SearchHit) for hit in hits[0])
    with pytest.raises(ValueError, match='k must be a positive whole number, got 0'):
        index.search(model, 'ein roter Kreis', lang='de', k=0)


def test_approximate_index_returns_k_hits(model, image_files):
    index = MediaIndex.from_media(model, image_files, index='hnsw', hnsw_m=4)
    hits = index.search(model, QUERIES['de'], lang='de', k=4)
    assert [len(row) for row in hits] == [4, 4]


def test_scores_are_cosines_whatever_the_norms_and_queries_may_be_arrays():
    gallery = torch.tensor([[3.0, 4.0], [0.0, -2.0], [10.0, 0.0]])
    index = MediaIndex(gallery, ['a', 'b', 'c'])
    hits = index.search_embeddings(np.array([[0.0, 5.0]], dtype=np.float32), k=3)[0]
    assert [hit.media_id for hit in hits] == ['a', 'c', 'b']
    assert [hit.score for hit in hits] == pytest.approx([0.8, 0.0, -1.0])  # by hand
    for k in (2.5, True, 0):
        with pytest.raises(ValueError, match=rf'k must be a positive whole number, got {k!r}'):
            index.search_embeddings(torch.ones(1, 2), k=k)


def test_the_repr_names_size_dimensions_index_kind_and_the_encoder():
    index = MediaIndex(torch.eye(3, 4), ['a', 'b', 'c'], index='hnsw')
    assert repr(index) == "MediaIndex(3 media, 4 dims, index='hnsw', encoded_by=None)"
    index.encoded_by = {'backbone': 'f00d', 'transform': 'x', 'num_frames': 8}
    assert repr(index) == "MediaIndex(3 media, 4 dims, index='hnsw', backbone='f00d')"


def test_bad_input_is_named(model, image_files):
    index = MediaIndex.from_media(model, image_files[:1])
    with pytest.raises(ValueError, match=r"has no adapters for \['fr'\]; it reads "
                       r"\['en', 'de', 'zh'\]"):
        index.search(model, 'un cercle rouge', lang='fr')
    with pytest.raises(ValueError, match="media_ids 0 and 1 are both 'a'"):
        MediaIndex(torch.eye(2), ['a', 'a'])
    with pytest.raises(ValueError, match='1 media_ids for 2 media'):
        MediaIndex.from_media(model, image_files[:2], media_ids=['a'])
    with pytest.raises(ValueError, match='0 media_ids for 2 media'):  # not the default ids
        MediaIndex.from_media(model, image_files[:2], media_ids=[])
    (image_files[0].parent / 'other').mkdir()
    twin = image_files[0].parent / 'other' / image_files[0].name
    twin.write_bytes(image_files[0].read_bytes())
    with pytest.raises(ValueError, match=r"media 0 \(.*beach\.png\) and 1 \(.*other/beach\.png\) "
                       r"would both be called 'beach' .*: pass media_ids"):
        MediaIndex.from_media(model, [image_files[0], twin])
    queries = torch.eye(3, 32)
    queries[1, 0] = float('nan')
    with pytest.raises(ValueError, match=r'query embeddings \[1\] hold NaN or infinite values'):
        index.search_embeddings(queries)
    with pytest.raises(ValueError, match=re.escape(
            "text 1 ('ein \\udc80Kreis') holds a lone surrogate '\\udc80' at character 4")):
        index.search(model, ['ein Kreis', 'ein \udc80Kreis'], lang='de')


def test_an_approximate_index_leaves_out_what_its_probed_cells_do_not_hold():
    """Two cells of two media each, one probed: a query finds the two media of its cell, not
    the padding faiss returns for the hits it lacks."""
    gallery = torch.tensor([[1.0, 0.1], [1.0, -0.1], [0.1, 1.0], [-0.1, 1.0]])
    index = MediaIndex(gallery, ['a', 'b', 'c', 'd'], index='ivf', nlist=2, nprobe=1)
    hits = index.search_embeddings(torch.tensor([[1.0, 0.0]]), k=4)[0]
    assert sorted(hit.media_id for hit in hits) == ['a', 'b']
    assert [hit.score for hit in hits] == pytest.approx([1 / 1.01 ** 0.5] * 2)  # cos, by hand


def test_integer_embeddings_are_refused_by_name():
    with pytest.raises(ValueError, match='^embeddings must be floating-point vectors, got '
                       'torch.int64$'):
        MediaIndex(torch.eye(2, dtype=torch.long), ['a', 'b'])
    index = MediaIndex(torch.eye(2), ['a', 'b'])
    with pytest.raises(ValueError, match='^queries must be floating-point vectors, got torch.int'):
        index.search_embeddings(np.eye(2, dtype=np.int32))


def test_tensors_are_named_by_their_position_and_files_by_their_stem(model, image_files):
    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    index = MediaIndex.from_media(model, [image, image_files[1], image])
    assert index.media_ids == ['0', 'forest', '2']


def test_one_media_file_given_alone_is_a_gallery_of_one(model, image_files):
    for alone in (image_files[0], str(image_files[0])):
        index = MediaIndex.from_media(model, alone)
        assert index.media_ids == ['beach']


def test_one_video_tensor_given_alone_is_a_gallery_of_one(model):
    """Its frames were iterated: a gallery of its 4 frames as images '0' to '3'."""
    video = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(0))
    index = MediaIndex.from_media(model, video)
    assert index.media_ids == ['0'] and len(index) == 1
    torch.testing.assert_close(encode_media(model, video), encode_media(model, [video]),
                               rtol=0, atol=0)


def test_ids_given_twice_are_refused_before_anything_is_encoded(model, image_files,
                                                                 monkeypatch):
    """Refused by the index once every media was encoded."""
    monkeypatch.setattr('xmr.apis.search.encode_gallery', None)
    with pytest.raises(ValueError, match=re.escape(
            f"media 0 ({image_files[0]}) and 2 ({image_files[2]}) would both be called 'x' in "
            'media_ids: give each its own')):
        MediaIndex.from_media(model, image_files[:3], media_ids=['x', 'y', 'x'])
    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    with pytest.raises(ValueError, match=re.escape(
            "media 0 (a tensor (3, 32, 32)) and 1 (a tensor (3, 32, 32)) would both be called "
            "'a' in media_ids")):
        MediaIndex.from_media(model, [image, image], media_ids=['a', 'a'])


@pytest.mark.parametrize('index', [dict(index='flat'), dict(index='ivf', nlist=1)])
def test_gallery_embeddings_with_nan_are_refused_by_media_id(index):
    """A NaN row was indexed and never returned (flat: k=3 on three media gave two hits), or
    failed IVF's training on "'!(std::isfinite(x[i]))' fail"."""
    gallery = torch.eye(3)
    gallery[1, 2] = float('nan')
    gallery[2, 0] = float('inf')
    with pytest.raises(ValueError, match=r"embeddings of media \['b', 'c'\] hold NaN or "
                       'infinite values'):
        MediaIndex(gallery, ['a', 'b', 'c'], **index)


@pytest.mark.parametrize('index', [dict(index='flat'), dict(index='ivf', nlist=2, nprobe=1),
                                   dict(index='hnsw', hnsw_m=4, ef_search=4)])
def test_a_saved_index_searches_as_the_one_it_was_built(model, image_files, tmp_path, index):
    """An approximate index loads as it was built (IVF's cells and HNSW's graph are not built
    again), so its misses stay its misses."""
    built = MediaIndex.from_media(model, image_files, **index)
    killed = tmp_path / '.gallery.idx.999999999.tmp'  # a save killed as it wrote: removed
    killed.write_bytes(b'partial')
    assert built.save(tmp_path / 'gallery.idx') == tmp_path / 'gallery.idx'
    assert sorted(path.name for path in tmp_path.glob('.*.tmp')) == []
    loaded = MediaIndex.load(tmp_path / 'gallery.idx', model=model)
    assert loaded.media_ids == built.media_ids and loaded.encoded_by == built.encoded_by
    assert loaded.encoded_by == dict(backbone=model.backbone.fingerprint(), transform=None,
                                     num_frames=12)
    for lang, queries in QUERIES.items():
        assert loaded.search(model, queries, lang, k=5) == built.search(model, queries, lang, k=5)


def test_a_loaded_index_refuses_a_model_of_other_weights_and_takes_one_of_more_languages(
        model, image_files, tmp_path):
    MediaIndex.from_media(model, image_files).save(tmp_path / 'gallery.idx')
    torch.manual_seed(1)
    other = MODELS.build(tiny_retriever_cfg()).eval()
    with pytest.raises(ValueError, match=re.escape(
            f"{tmp_path / 'gallery.idx'}: its media were encoded by backbone "
            f"{model.backbone.fingerprint()}, the model's is {other.backbone.fingerprint()} "
            '(other weights): encode the gallery with this model')):
        MediaIndex.load(tmp_path / 'gallery.idx', model=other)
    # A language added on the same backbone leaves every media embedding as it was.
    more = MODELS.build(tiny_retriever_cfg(
        language_branch=tiny_branch_cfg(languages=('de', 'zh', 'fr')))).eval()
    more.backbone.load_state_dict(model.backbone.state_dict())
    loaded = MediaIndex.load(tmp_path / 'gallery.idx', model=more)
    assert len(loaded.search(more, 'un cercle rouge', lang='fr', k=2)[0]) == 2
    # An index of embeddings given cannot tell; it takes any model embedding in its width.
    MediaIndex(torch.eye(other.backbone.embed_dim)[:2], ['a', 'b']).save(tmp_path / 'given.idx')
    assert MediaIndex.load(tmp_path / 'given.idx', model=other).encoded_by is None


def test_a_file_that_is_no_media_index_is_named(tmp_path):
    torch.save({'state_dict': {}}, tmp_path / 'model.pth')
    with pytest.raises(ValueError, match=re.escape(
            f"{tmp_path / 'model.pth'}: is not a media index (a dict without a format, not "
            "'xmr-media-index/2'); MediaIndex.save writes one")):
        MediaIndex.load(tmp_path / 'model.pth')
    with pytest.raises(FileNotFoundError, match='gallery.idx'):
        MediaIndex.load(tmp_path / 'gallery.idx')


REBUILD = ('build it again from its media: python tools/search.py CONFIG CHECKPOINT --media '
           'MEDIA... --index {path} --overwrite, or MediaIndex.from_media(model, media).save() '
           '(docs/evaluation.md, "From the command line")')


def test_a_missing_index_names_the_file_or_its_missing_folder_and_how_to_build_one(tmp_path):
    """'media index not found: <path>' said neither which part is missing nor what to do."""
    build = 'or build one: python tools/search.py CONFIG CHECKPOINT --media MEDIA... --index'
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"{tmp_path / 'gallery.idx'}: no media index there; give the file MediaIndex.save or "
            f"tools/search.py --index wrote, {build} {tmp_path / 'gallery.idx'}")):
        MediaIndex.load(tmp_path / 'gallery.idx')
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"{tmp_path / 'gone' / 'gallery.idx'}: no media index there: the folder "
            f"{tmp_path / 'gone'} does not exist; ")):
        MediaIndex.load(tmp_path / 'gone' / 'gallery.idx')


@pytest.mark.parametrize('cut', [0, 2], ids=['empty', 'truncated'])
def test_an_index_file_cut_short_is_named_with_the_command_that_builds_it_again(tmp_path, cut):
    MediaIndex(torch.eye(4), list('abcd')).save(tmp_path / 'gallery.idx')
    data = (tmp_path / 'gallery.idx').read_bytes()
    (tmp_path / 'gallery.idx').write_bytes(data[:len(data) // cut] if cut else b'')
    with pytest.raises(ValueError) as error:
        MediaIndex.load(tmp_path / 'gallery.idx')
    assert str(error.value).startswith(f"{tmp_path / 'gallery.idx'}: ")
    assert str(error.value).endswith(REBUILD.format(path=tmp_path / 'gallery.idx'))


@pytest.mark.parametrize('written', [b'hello world, not an index', None], ids=['text', 'head'])
def test_a_file_no_media_index_wrote_is_not_to_be_rebuilt_over(tmp_path, written):
    """A text file, or an index cut before the bytes that name its format, was to be built
    again with `--index <it> --overwrite`, which tools/search.py then refused as no media
    index: the command given must be one the tool runs."""
    path = tmp_path / 'notes.idx'
    MediaIndex(torch.eye(4), list('abcd')).save(path)
    path.write_bytes(written if written is not None else path.read_bytes()[:60])
    assert not written_as_media_index(path)
    with pytest.raises(ValueError) as error:
        MediaIndex.load(path)
    assert str(error.value).endswith(
        REBUILD.format(path='ANOTHER.idx').replace(' --overwrite', '')
        + f' ({path} itself is kept: its first bytes name no media index)')


@pytest.mark.parametrize(('edit', 'damage'), [
    (lambda state: state['searcher'].update(index=state['searcher']['index'][:40].clone()),
     "faiss cannot read its index (Error: 'ret == (1)' failed: read error in : 0 != 1"),
    (lambda state: state['searcher'].update(index=torch.zeros(200, dtype=torch.uint8)),
     'faiss cannot read its index (Index type 0x00000000'),
    (lambda state: state.update(media_ids=['a', 'b', 'c']),
     'its faiss index holds 4 embeddings and it names 3 media'),
], ids=['faiss truncated', 'faiss garbage', 'fewer ids'])
def test_a_damaged_index_file_is_named_with_its_fault_and_the_command_that_builds_it_again(
        tmp_path, edit, damage):
    """faiss's C++ error named no file; an index naming fewer media than its rows loaded, and
    its searches named other media than the embeddings'."""
    path = tmp_path / 'gallery.idx'
    MediaIndex(torch.eye(4), list('abcd')).save(path)
    state = torch.load(path, weights_only=True)
    edit(state)
    torch.save(state, path)
    with pytest.raises(ValueError) as error:
        MediaIndex.load(path)
    message = str(error.value)
    assert message.startswith(f'{path}: a damaged media index: {damage}')
    assert message.endswith(f'; {REBUILD.format(path=path)}')


def test_an_index_of_another_format_version_names_the_xmr_that_wrote_it(tmp_path):
    """It was called no media index at all ('MediaIndex.save writes one')."""
    path = tmp_path / 'gallery.idx'
    MediaIndex(torch.eye(2), ['a', 'b']).save(path)
    state = torch.load(path, weights_only=True)
    torch.save({**state, 'format': 'xmr-media-index/3', 'xmr_version': '9.0.0',
                'xmr_commit': None}, path)
    with pytest.raises(ValueError) as error:
        MediaIndex.load(path)
    assert str(error.value).startswith(
        f"{path}: a media index of format 'xmr-media-index/3' (written by xmr 9.0.0 (an "
        'installed copy); read by xmr ')
    assert str(error.value).endswith(
        "which reads 'xmr-media-index/1' and 'xmr-media-index/2': search it with the xmr that "
        'wrote it, or '
        + REBUILD.format(path=path))


def test_a_model_embedding_in_other_dimensions_than_the_gallery_is_refused_naming_both(
        model, tmp_path):
    """An index of embeddings given passed any model, whose queries then stopped in faiss
    ('queries have dimension 8, the gallery 2.') naming no index."""
    path = tmp_path / 'given.idx'
    MediaIndex(torch.eye(2), ['a', 'b']).save(path)
    width = model.backbone.embed_dim
    assert width != 2
    with pytest.raises(ValueError, match=re.escape(
            f'{path}: its media embeddings have 2 dimensions, the model embeds in {width}: '
            'encode the gallery with this model')):
        MediaIndex.load(path, model=model)
    with pytest.raises(ValueError, match=re.escape(
            f'the index: its media embeddings have 2 dimensions, the model embeds in {width}: '
            'encode the gallery with this model')):
        MediaIndex.load(path).search(model, 'ein roter Kreis', 'de', k=1)


def test_a_search_by_a_model_that_did_not_encode_the_gallery_is_refused(model, image_files,
                                                                        tmp_path):
    """MediaIndex.load(path) takes no model; its searches by a model of other weights (one
    trained again) ranked queries of one embedding space against media of another."""
    MediaIndex.from_media(model, image_files).save(tmp_path / 'gallery.idx')
    torch.manual_seed(1)
    other = MODELS.build(tiny_retriever_cfg()).eval()
    loaded = MediaIndex.load(tmp_path / 'gallery.idx')
    for index in (loaded, MediaIndex.from_media(model, image_files)):
        with pytest.raises(ValueError, match=re.escape(
                f'the index: its media were encoded by backbone {model.backbone.fingerprint()}, '
                f"the model's is {other.backbone.fingerprint()} (other weights)")):
            index.search(other, 'ein roter Kreis', 'de', k=1)
    assert len(loaded.search(model, 'ein roter Kreis', 'de', k=1)[0]) == 1


def test_media_that_cannot_be_read_are_left_out_when_asked_and_stop_the_index_otherwise(
        model, image_files, tmp_path):
    empty, garbled = tmp_path / 'empty.png', tmp_path / 'garbled.jpg'
    empty.write_bytes(b'')
    garbled.write_bytes(b'\xff\xd8 not a jpeg')
    media = [image_files[0], empty, image_files[1], garbled, image_files[2]]
    with pytest.raises(MediaReadError, match=re.escape(str(empty))):
        MediaIndex.from_media(model, media)
    with pytest.warns(MediaSkippedWarning) as warned:
        index = MediaIndex.from_media(model, media, on_corrupt='skip')
    assert [str(w.message).split(':')[0] for w in warned] == ['skipping item 1', 'skipping item 3']
    assert [(marker.index, marker.media_path) for marker in index.skipped] == [
        (1, str(empty)), (3, str(garbled))]
    readable = MediaIndex.from_media(model, image_files[:3])
    assert index.media_ids == readable.media_ids == ['beach', 'forest', 'city']
    assert index.search(model, QUERIES['de'], 'de', k=3) == readable.search(
        model, QUERIES['de'], 'de', k=3)
    with pytest.warns(MediaSkippedWarning):
        embeddings, skipped = encode_readable_media(model, media)
    torch.testing.assert_close(embeddings, encode_media(model, image_files[:3]), rtol=0, atol=0)
    assert skipped == index.skipped
    with pytest.raises(MediaReadError, match=r'none of the 2 media can be read, this one: '), \
            pytest.warns(MediaSkippedWarning):
        MediaIndex.from_media(model, [empty, garbled], on_corrupt='skip')


def test_progress_follows_the_batches_on_stderr(model, image_files, capsys):
    MediaIndex.from_media(model, image_files, batch_size=2, progress=True)
    shown = capsys.readouterr()
    assert [count for count in re.findall(r'\] (\d)/5, ', shown.err)] == ['0', '2', '4', '5']
    assert shown.out == ''


def assert_same_hits(model, found: MediaIndex, expected: MediaIndex) -> None:
    """Every query of :data:`QUERIES` finds in ``found`` the media ``expected`` finds, in the
    same order, with the same scores (to float32 rounding)."""
    for lang, queries in QUERIES.items():
        for hits, expected_hits in zip(found.search(model, queries, lang, k=len(expected)),
                                       expected.search(model, queries, lang, k=len(expected))):
            assert [hit.media_id for hit in hits] == [hit.media_id for hit in expected_hits]
            np.testing.assert_allclose([hit.score for hit in hits],
                                       [hit.score for hit in expected_hits], rtol=0, atol=1e-6)


@pytest.mark.parametrize('index', [dict(index='flat'), dict(index='ivf', nlist=1),
                                   dict(index='hnsw')])
def test_a_gallery_grown_by_add_media_searches_as_one_built_at_once(
        model, image_files, tmp_path, index):
    """Grown after a save and a load, as tools/search.py --update grows it; an IVF index of one
    cell and an HNSW graph as large as its candidate list are exact, as is the flat one."""
    whole = MediaIndex.from_media(model, image_files, **index)
    MediaIndex.from_media(model, image_files[:2], **index).save(tmp_path / 'gallery.idx')
    grown = MediaIndex.load(tmp_path / 'gallery.idx', model=model)
    grown.add_media(model, image_files[2:], batch_size=2)
    assert grown.media_ids == whole.media_ids == ['beach', 'forest', 'city', 'desert', 'lake']
    assert len(grown) == 5 and grown.skipped == []
    assert_same_hits(model, grown, whole)
    grown.save(tmp_path / 'gallery.idx')
    assert MediaIndex.load(tmp_path / 'gallery.idx').media_ids == whole.media_ids


def test_add_media_encodes_as_the_gallery_was_encoded(model, image_files, monkeypatch):
    squash = dict(type='MediaTransform', backbone=None, size=32, resize_mode='squash')
    gallery = MediaIndex.from_media(model, image_files[:2], transform=squash, num_frames=4)
    encoded = []
    monkeypatch.setattr('xmr.apis.search.encode_gallery',
                        lambda *args: encoded.append(args) or EncodedGallery(torch.eye(1, 32),
                                                                            None, []))
    gallery.add_media(model, image_files[2:3])
    assert encoded[0][2:4] == (squash, 4)  # the gallery's transform and frames


def test_what_a_gallery_cannot_take_is_named(model, image_files):
    gallery = MediaIndex.from_media(model, image_files[:2])
    with pytest.raises(ValueError, match=r"media \['forest'\] are in the gallery already: add "
                       'only new media'):
        gallery.add_media(model, image_files[1:3], media_ids=['forest', 'city'])
    assert gallery.media_ids == ['beach', 'forest'] and len(gallery) == 2
    with pytest.raises(ValueError, match=r"embeddings of media \['x'\] hold NaN"):
        gallery.add(torch.full((1, 32), float('nan')), ['x'])
    with pytest.raises(ValueError, match='added items have dimension 3, the gallery 32'):
        gallery.add(torch.eye(3), ['x', 'y', 'z'])
    torch.manual_seed(1)
    other = MODELS.build(tiny_retriever_cfg()).eval()
    with pytest.raises(ValueError, match='its media were encoded by backbone'):
        gallery.add_media(other, image_files[2:])
    with pytest.raises(ValueError, match='this gallery was built from embeddings given'):
        MediaIndex(torch.eye(2), ['a', 'b']).add_media(model, image_files[2:])
    assert len(gallery) == 2


def test_the_ids_made_of_new_media_that_the_gallery_holds_are_refused_before_encoding(
        model, image_files, monkeypatch):
    """Tensors are named by their position, so a second batch of them always met the first's
    ids: refused once encoded, as if the media were in the gallery already."""
    images = [torch.full((3, 32, 32), value, dtype=torch.uint8) for value in (0, 80, 160)]
    gallery = MediaIndex.from_media(model, images[:2])
    encoded = []
    monkeypatch.setattr('xmr.apis.search.encode_gallery',
                        lambda *args: encoded.append(args) or EncodedGallery(torch.eye(1, 32),
                                                                            None, []))
    with pytest.raises(ValueError, match=re.escape(
            "media ['0'] are in the gallery already: they are the ids made of the media (file "
            'names without suffix, positions for tensors): pass media_ids')):
        gallery.add_media(model, images[2:])
    assert encoded == []
    gallery.add_media(model, images[2:], media_ids=['2'])
    assert gallery.media_ids == ['0', '1', '2'] and len(encoded) == 1


def test_new_media_none_of_which_can_be_read_add_nothing_when_skipped(model, image_files,
                                                                      tmp_path):
    """They raised 'none of the 1 media can be read', which stopped tools/search.py --update
    at every run while such a file lay in the folder."""
    gallery = MediaIndex.from_media(model, image_files[:2])
    (tmp_path / 'cut.png').write_bytes(b'')
    with pytest.warns(MediaSkippedWarning, match='skipping item 0'):
        gallery.add_media(model, [tmp_path / 'cut.png'], on_corrupt='skip')
    assert gallery.media_ids == ['beach', 'forest'] and len(gallery) == 2
    assert [(marker.index, marker.media_path) for marker in gallery.skipped] == [
        (0, str(tmp_path / 'cut.png'))]
    with pytest.raises(MediaReadError, match=re.escape(str(tmp_path / 'cut.png'))):
        gallery.add_media(model, [tmp_path / 'cut.png'])
    with pytest.raises(NoMediaReadError, match='none of the 1 media can be read'), \
            pytest.warns(MediaSkippedWarning):
        MediaIndex.from_media(model, [tmp_path / 'cut.png'], on_corrupt='skip')


def test_media_decoded_by_workers_are_encoded_as_in_turn(model, image_files, tmp_path):
    """The same rows and the same markers in the same order, a file that cannot be read in the
    middle (its error sent back from a worker by its fields)."""
    (tmp_path / 'cut.png').write_bytes(b'')
    media = [*image_files[:2], tmp_path / 'cut.png', *image_files[2:],
             torch.zeros(2, 3, 36, 44, dtype=torch.uint8)]
    with pytest.warns(MediaSkippedWarning):
        in_turn = encode_readable_media(model, media, batch_size=2, num_frames=2)
    with pytest.warns(MediaSkippedWarning, match=re.escape(
            f"skipping item 2: {tmp_path / 'cut.png'}: the file is empty (0 bytes) "
            '(media[2])')):
        by_workers = encode_readable_media(model, media, batch_size=2, num_frames=2,
                                           num_workers=2)
    torch.testing.assert_close(by_workers[0], in_turn[0], rtol=0, atol=0)
    assert by_workers[1] == in_turn[1] and len(by_workers[0]) == 6
    with pytest.raises(MediaReadError, match=re.escape(
            f"{tmp_path / 'cut.png'}: the file is empty (0 bytes) (media[2]): replace the "
            'file, or leave it out of the media')):
        encode_media(model, media, num_workers=2)
    # The error's traceback held the loader: its workers, which ignore SIGTERM, outlived it
    # and kept the process (tools/search.py --num-workers) from exiting.
    assert not multiprocessing.active_children()
    with pytest.raises(ValueError, match='num_workers must be an int >= 0, got -1'):
        encode_media(model, media, num_workers=-1)


def test_media_removed_are_found_no_more_and_the_rest_as_before(model, image_files, tmp_path):
    gallery = MediaIndex.from_media(model, image_files)
    gallery.remove(['forest', 'lake'])
    assert gallery.media_ids == ['beach', 'city', 'desert'] and len(gallery) == 3
    kept = MediaIndex.from_media(model, [image_files[0], image_files[2], image_files[3]])
    gallery.save(tmp_path / 'gallery.idx')
    loaded = MediaIndex.load(tmp_path / 'gallery.idx', model=model)
    assert_same_hits(model, loaded, kept)
    with pytest.raises(ValueError, match=r"media \['forest'\] are not in the gallery"):
        loaded.remove(['forest'])
    with pytest.raises(ValueError, match='removing all 3 media would leave the gallery empty'):
        loaded.remove(loaded.media_ids)
    assert len(loaded) == 3
    loaded.remove('city')  # one id alone, not its characters 'c', 'i', 't', 'y'
    assert loaded.media_ids == ['beach', 'desert']


def test_query_embeddings_with_an_infinity_are_refused_by_row():
    """An infinite element is no NaN, but normalising its row makes NaNs of it: checked for
    NaN alone, the query reached faiss and was answered with hits of no meaning."""
    index = MediaIndex(torch.eye(3), ['a', 'b', 'c'])
    queries = torch.eye(3)
    queries[2, 1] = float('inf')
    with pytest.raises(ValueError, match=r'query embeddings \[2\] hold NaN or infinite values'):
        index.search_embeddings(queries)


def test_embeddings_added_under_an_id_the_gallery_holds_are_refused_and_it_stays_as_it_was():
    """Two media of one id would both be found under it, and removing it would drop both:
    add refuses the ids before touching the index."""
    index = MediaIndex(torch.eye(3)[:2], ['a', 'b'])
    with pytest.raises(ValueError, match=r"media \['b'\] are in the gallery already: add only "
                       'new media'):
        index.add(torch.eye(3)[1:], ['c', 'b'])
    assert index.media_ids == ['a', 'b'] and len(index) == 2


def test_a_file_saved_as_an_index_of_either_format_is_one_and_a_checkpoint_is_not(tmp_path):
    """tools/search.py --overwrite replaces only what written_as_media_index calls an index:
    one written in format /1 (before galleries kept tokens) is one too, not only /2."""
    index = MediaIndex(torch.eye(2), ['a', 'b'])
    index.save(tmp_path / 'new.idx')
    state = torch.load(tmp_path / 'new.idx', weights_only=True)
    torch.save({**state, 'format': 'xmr-media-index/1'}, tmp_path / 'old.idx')
    torch.save({'state_dict': {'weight': torch.eye(2)}}, tmp_path / 'model.pth')
    assert written_as_media_index(tmp_path / 'new.idx')
    assert written_as_media_index(tmp_path / 'old.idx')
    assert not written_as_media_index(tmp_path / 'model.pth')


def test_ids_given_as_numbers_are_kept_as_strings_and_removed_by_either():
    """Ids are strings whatever was given (a hit's media_id is one, and a saved index names
    its media so): media given ids 10, 20, 30 are found as '10', ... and removed by 20."""
    index = MediaIndex(torch.eye(3), [10, 20, 30])
    assert index.media_ids == ['10', '20', '30']
    hit, = index.search_embeddings(torch.eye(3)[:1], k=1)[0]
    assert hit.media_id == '10' and hit.score == pytest.approx(1.0)
    index.remove([20])
    assert index.media_ids == ['10', '30'] and len(index) == 2
