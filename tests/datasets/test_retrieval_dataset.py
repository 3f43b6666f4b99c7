"""RetrievalDataset on converted real captions (placeholder images) and the real clips."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader

from tests.datasets.test_media_files import LFS_POINTER_TEXT
from tests.datasets.test_video_containers import audio_only_copy
from xmr.datasets import (
    Annotation,
    CaptionPairDataset,
    MediaReadError,
    MediaRecord,
    MediaSkippedWarning,
    RetrievalDataset,
    SkippedMedia,
    dump_annotation,
    retrieval_collate,
)
from xmr.datasets.converters.multi30k import convert_multi30k
from xmr.datasets.media_files import LFS_POINTER
from xmr.registry import DATASETS

TINY = dict(type='MediaTransform', backbone=None, size=16)
CLIPS = ['flipping_a_pancake.mkv', 'video_0.mov', 'unordered.mov', 'corrupted.mp4']


@pytest.fixture
def multi30k_test(shared_data, tmp_path) -> Path:
    """The real test_2016_flickr annotation with three 8x8 JPEG placeholders."""
    root = shared_data / 'multi30k'
    if not (root / 'raw').is_dir():
        pytest.skip(f'Multi30K fixtures not found under {root}')
    ann = convert_multi30k(root / 'raw', root / 'image_splits', splits=['test'])['test']
    (tmp_path / 'images').mkdir()
    for i, record in enumerate(ann.items[:3]):
        pixels = np.full((8, 8, 3), 40 * (i + 1), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / 'images' / record.media_path, quality=95)
    dump_annotation(ann, tmp_path / 'annotations' / 'multi30k_test.json')
    return tmp_path


@pytest.fixture
def clips(shared_data, tmp_path) -> Path:
    folder = shared_data / 'videos'
    if not (folder / 'corrupted.mp4').is_file():
        pytest.skip(f'video fixtures not found under {folder}')
    ann = Annotation(dataset='clips', split='test', media_type='video', languages=['en', 'de'],
                     items=[MediaRecord(name.split('.')[0], str(folder / name),
                                        {'en': [f'clip {name}'], 'de': [f'Clip {name}']})
                            for name in CLIPS])
    dump_annotation(ann, tmp_path / 'clips.json')
    return tmp_path / 'clips.json'


def test_items_follow_the_contract(multi30k_test):
    dataset = DATASETS.build(dict(type='RetrievalDataset', data_root=str(multi30k_test),
                                  ann_file='annotations/multi30k_test.json',
                                  data_prefix=dict(media='images'), languages=['de', 'cs'],
                                  transform=TINY))
    assert len(dataset) == 1000
    item = dataset[2]
    assert set(item) == {'media', 'media_id', 'captions', 'index'}
    assert item['media'].dtype == torch.uint8 and tuple(item['media'].shape) == (3, 16, 16)
    assert abs(item['media'].float().mean().item() - 120) < 3
    record = dataset.records[2]
    assert item['media_id'] == record.media_id and item['index'] == 2
    assert item['captions'] == {'de': record.captions['de'], 'cs': record.captions['cs']}
    assert dataset.metainfo['languages'] == ['de', 'cs']
    assert dataset.metainfo['dataset'] == 'multi30k'


def test_missing_image_fails_with_its_path(multi30k_test):
    dataset = RetrievalDataset(multi30k_test / 'annotations' / 'multi30k_test.json',
                               data_prefix=dict(media=str(multi30k_test / 'images')),
                               transform=TINY)
    missing = multi30k_test / 'images' / dataset.records[3].media_path
    with pytest.raises(MediaReadError, match=f'{missing}: file not found'):
        dataset[3]


def test_unknown_language_is_rejected(multi30k_test):
    with pytest.raises(ValueError, match=r"has no \['ja'\] captions"):
        RetrievalDataset(multi30k_test / 'annotations' / 'multi30k_test.json',
                         languages=['ja'], transform=TINY)


def test_videos_give_twelve_centre_frames_and_corrupt_raises(clips):
    dataset = RetrievalDataset(clips, transform=TINY)
    item = dataset[0]
    assert item['media'].dtype == torch.uint8 and tuple(item['media'].shape) == (12, 3, 16, 16)
    assert tuple(dataset[2]['media'].shape) == (12, 3, 16, 16)
    with pytest.raises(MediaReadError, match=r'corrupted\.mp4'):
        dataset[3]


def test_a_fractional_num_frames_is_refused_when_the_dataset_is_built(clips):
    # Found at the first read, it stopped evaluation with torch's TypeError naming no option.
    with pytest.raises(ValueError,
                       match=r'clips\.json: num_frames must be a positive int, got 8\.0'):
        RetrievalDataset(clips, transform=TINY, num_frames=8.0)


def test_decode_threads_that_decord_cannot_take_are_refused_when_the_dataset_is_built(clips):
    with pytest.raises(ValueError, match=r'clips\.json: decode_threads must be an int >= 0'):
        RetrievalDataset(clips, transform=TINY, decode_threads=None)


def test_skip_policy_warns_and_the_batch_names_the_file(clips):
    dataset = RetrievalDataset(clips, transform=TINY, num_frames=4, on_corrupt='skip')
    with pytest.warns(MediaSkippedWarning, match=r'skipping item 3: .*corrupted\.mp4') as warned:
        marker = dataset[3]
    assert "set on_corrupt='skip'" not in str(warned[0].message)  # the advice it already took
    assert isinstance(marker, SkippedMedia) and marker.media_path.endswith('corrupted.mp4')
    loader = DataLoader(dataset, batch_size=4, num_workers=1, collate_fn=retrieval_collate)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', MediaSkippedWarning)
        (batch,) = list(loader)
    assert batch['batch_size'] == 3 and tuple(batch['media'].shape) == (3, 4, 3, 16, 16)
    assert batch['media_id'] == ['flipping_a_pancake', 'video_0', 'unordered']
    assert [Path(p).name for p in batch['skipped_media']] == ['corrupted.mp4']


def test_test_mode_decides_frame_offsets_and_augmentation(tmp_path, monkeypatch):
    """Evaluation items (RetrievalDataset, test_mode=True by default) take segment-centre
    frames and an evaluation transform; training pairs (test_mode=False) random offsets and the
    training transform."""
    offsets = []

    def fake_read(path, num_frames, random_offset, **kwargs):
        offsets.append(random_offset)
        return torch.zeros(num_frames, 3, 20, 20, dtype=torch.uint8), None

    monkeypatch.setattr('xmr.datasets.base.read_video_frames', fake_read)
    ann = Annotation(dataset='clips', split='train', media_type='video', languages=['en', 'de'],
                     source_lang='en',
                     items=[MediaRecord('v', 'v.mp4', {'en': ['a clip'], 'de': ['ein Clip']})])
    dump_annotation(ann, tmp_path / 'clips.json')
    evaluation = RetrievalDataset(tmp_path / 'clips.json', transform=TINY, num_frames=4)
    training = CaptionPairDataset(tmp_path / 'clips.json', target_field='captions',
                                  transform=TINY, num_frames=4)
    assert tuple(evaluation[0]['media'].shape) == (4, 3, 16, 16)
    training[0]
    assert offsets == [False, True]
    assert evaluation.transform.training is False and training.transform.training is True
    # test_mode decides even over a transform config that names its own flag.
    told_to_train = RetrievalDataset(tmp_path / 'clips.json', transform={**TINY, 'training': True})
    assert told_to_train.transform.training is False


def test_a_language_asked_for_as_human_and_as_translated_captions_is_refused(tmp_path):
    ann = Annotation(dataset='tiny', split='val', media_type='image', languages=['en', 'de'],
                     source_lang='en', translation_langs=['de'],
                     items=[MediaRecord('a', 'a.jpg', {'en': ['a dog'], 'de': ['ein Hund']},
                                        {'de': ['ein Hund (MT)']})])
    dump_annotation(ann, tmp_path / 'tiny.json')
    with pytest.raises(ValueError, match=r"\['de'\] asked for as human and as translated"):
        RetrievalDataset(tmp_path / 'tiny.json', languages=['en', 'de'],
                         translated_languages=['de'], transform=TINY)


@pytest.fixture
def damaged_clips(shared_data, tmp_path) -> Path:
    """An annotation of a whole clip, an empty file, the first half of flipping_a_pancake.mkv
    (its segment declares 436,346 bytes) and bigbuckbunny.mp4 cut inside its first 'mdat'."""
    folder = shared_data / 'videos'
    if not all((folder / name).is_file() for name in ('video_0.mov', 'flipping_a_pancake.mkv',
                                                      'bigbuckbunny.mp4')):
        pytest.skip(f'video fixtures not found under {folder}')
    (tmp_path / 'empty.mp4').write_bytes(b'')
    (tmp_path / 'half.mkv').write_bytes((folder / 'flipping_a_pancake.mkv').read_bytes()[:218_000])
    (tmp_path / 'cut.mp4').write_bytes((folder / 'bigbuckbunny.mp4').read_bytes()[:520_000])
    names = [str(folder / 'video_0.mov'), 'empty.mp4', 'half.mkv', 'cut.mp4']
    dump_annotation(Annotation(dataset='clips', split='test', media_type='video',
                               languages=['en'],
                               items=[MediaRecord(f'v{i}', name, {'en': [f'clip {i}']})
                                      for i, name in enumerate(names)]), tmp_path / 'ann.json')
    return tmp_path / 'ann.json'


def _damaged_report(folder: Path) -> str:
    return (f'3 of its 4 videos cannot be read whole:\n'
            f'  {folder / "empty.mp4"}: the file is empty (0 bytes)\n'
            f'  {folder / "half.mkv"}: truncated: its Matroska segment ends at byte 436,346 but '
            'the file has 218,000 bytes (a copy or download cut short)\n'
            f'  {folder / "cut.mp4"}: truncated: its \'mdat\' box ends at byte 1,051,507 but the '
            'file has 520,000 bytes (a copy or download cut short)\n'
            'replace them')


def test_every_damaged_video_is_named_before_any_is_read(damaged_clips, monkeypatch):
    """Only a missing file was found before training; the empty and the cut MP4 stopped a run
    when first read, and the cut Matroska file trained as a clip of half its frames."""
    from xmr.datasets import base

    folder = damaged_clips.parent
    dataset = RetrievalDataset(damaged_clips, data_root=folder, num_frames=2, transform=TINY)
    with pytest.raises(MediaReadError) as info:
        dataset.check_media_exist()
    assert str(info.value) == (f'{damaged_clips}: {_damaged_report(folder)}: or set '
                               "on_corrupt='skip' to leave them out")
    said = []
    monkeypatch.setattr(base, 'print_log', lambda message, **_: said.append(message))
    RetrievalDataset(damaged_clips, data_root=folder, num_frames=2, transform=TINY,
                     on_corrupt='skip').check_media_exist()
    assert said == [f"{damaged_clips}: {_damaged_report(folder)}; they are skipped "
                    "(on_corrupt='skip')"]
    # Missing files too: one report of both, as a missing file's error.
    (folder / 'cut.mp4').unlink()
    with pytest.raises(FileNotFoundError) as info:
        dataset.check_media_exist()
    assert str(info.value).startswith(
        f'{damaged_clips}: 1 of its 4 media files are missing, the first {folder / "cut.mp4"}: '
        'check data_root and data_prefix; 2 of its 4 videos cannot be read whole:\n'
        f'  {folder / "empty.mp4"}: the file is empty (0 bytes)\n')


@pytest.fixture
def empty_image(tmp_path) -> Path:
    """Three images, the second a zero-byte file (a failed copy or download)."""
    images = tmp_path / 'images'
    images.mkdir()
    for name in ('a.jpg', 'c.jpg'):
        Image.fromarray(np.full((8, 8, 3), 90, dtype=np.uint8)).save(images / name)
    (images / 'b.jpg').write_bytes(b'')
    dump_annotation(Annotation(dataset='d', split='test', media_type='image', languages=['en'],
                               items=[MediaRecord(n, f'{n}.jpg', {'en': [f'image {n}']})
                                      for n in 'abc']), tmp_path / 'ann.json')
    return tmp_path / 'ann.json'


def _empty_image_report(images: Path) -> str:
    return (f'1 of its 3 images cannot be read whole:\n  {images / "b.jpg"}: the file is empty '
            '(0 bytes)\nreplace them')


def test_an_empty_image_is_named_before_any_is_read(empty_image, monkeypatch):
    """The check listed the folders only: a zero-byte image stopped a toy training run when its
    batch came, at iteration 2 ('not a decodable image (cannot identify image file ...)'), and
    at any iteration of a real one. A stat per file names it before the first step."""
    from xmr.datasets import base

    images = empty_image.parent / 'images'
    dataset = RetrievalDataset(empty_image, data_root=empty_image.parent,
                               data_prefix=dict(media='images'), transform=TINY)
    with pytest.raises(MediaReadError) as info:
        dataset.check_media_exist()
    assert str(info.value) == (f'{empty_image}: {_empty_image_report(images)}: or set '
                               "on_corrupt='skip' to leave them out")
    said = []
    monkeypatch.setattr(base, 'print_log', lambda message, **_: said.append(message))
    RetrievalDataset(empty_image, data_root=empty_image.parent, data_prefix=dict(media='images'),
                     transform=TINY, on_corrupt='skip').check_media_exist()
    assert said == [f"{empty_image}: {_empty_image_report(images)}; they are skipped "
                    "(on_corrupt='skip')"]
    # A missing image is reported as missing, not also as unreadable.
    (images / 'c.jpg').unlink()
    with pytest.raises(FileNotFoundError) as info:
        dataset.check_media_exist()
    assert str(info.value) == (
        f'{empty_image}: 1 of its 3 media files are missing, the first {images / "c.jpg"}: '
        f'check data_root and data_prefix; {_empty_image_report(images)}, or set '
        "on_corrupt='skip' to leave them out")


def test_git_lfs_pointers_are_named_before_any_image_is_read(empty_image):
    """A dataset repository cloned without Git LFS holds a pointer of ~130 bytes under each
    image's name: the size check passed them, and the first batch stopped training with 'not
    a decodable image (cannot identify image file ...)'."""
    images = empty_image.parent / 'images'
    (images / 'b.jpg').write_bytes(LFS_POINTER_TEXT)
    (images / 'c.jpg').write_bytes(LFS_POINTER_TEXT)
    dataset = RetrievalDataset(empty_image, data_root=empty_image.parent,
                               data_prefix=dict(media='images'), transform=TINY)
    with pytest.raises(MediaReadError) as info:
        dataset.check_media_exist()
    assert str(info.value) == (
        f'{empty_image}: 2 of its 3 images cannot be read whole:\n'
        f'  {images / "b.jpg"}: {LFS_POINTER}\n  {images / "c.jpg"}: {LFS_POINTER}\nreplace '
        "them: or set on_corrupt='skip' to leave them out")


def test_the_size_check_can_be_left_to_the_reads_which_say_the_image_is_empty(empty_image):
    dataset = RetrievalDataset(empty_image, data_root=empty_image.parent,
                               data_prefix=dict(media='images'), transform=TINY,
                               check_containers=False)
    dataset.check_media_exist()
    with pytest.raises(MediaReadError, match=r'b\.jpg: the file is empty \(0 bytes\): replace'):
        dataset[1]


def test_an_audio_only_clip_is_named_before_any_is_read_and_skipped_when_read(shared_data,
                                                                              tmp_path):
    """A clip's sound stream downloaded alone passed the check and stopped the run at its
    batch, with decord's 'Check failed: st_nb >= 0 (-1381258232 vs. 0) ERROR cannot find video
    stream with wanted index: -1'."""
    source = shared_data / 'videos' / 'bigbuckbunny.mp4'
    if not source.is_file():
        pytest.skip(f'{source} not found')
    audio_only_copy(source, tmp_path / 'sound.mp4')
    dump_annotation(Annotation(dataset='clips', split='test', media_type='video',
                               languages=['en'], items=[MediaRecord('s', 'sound.mp4',
                                                                    {'en': ['a clip']})]),
                    tmp_path / 'ann.json')
    reason = ("no video track: its index ('moov') lists sound tracks alone (an audio-only file, "
              'as a download of the sound stream alone gives)')
    dataset = RetrievalDataset(tmp_path / 'ann.json', data_root=tmp_path, num_frames=2,
                               transform=TINY)
    with pytest.raises(MediaReadError) as info:
        dataset.check_media_exist()
    assert f'1 of its 1 videos cannot be read whole:\n  {tmp_path / "sound.mp4"}: {reason}' \
        in str(info.value)
    skipping = RetrievalDataset(tmp_path / 'ann.json', data_root=tmp_path, num_frames=2,
                                transform=TINY, on_corrupt='skip')
    with pytest.warns(MediaSkippedWarning, match='sound.mp4: no video track'):
        assert skipping[0] == SkippedMedia(0, str(tmp_path / 'sound.mp4'), reason)


def test_the_container_check_can_be_left_to_the_reads(damaged_clips):
    dataset = RetrievalDataset(damaged_clips, data_root=damaged_clips.parent, num_frames=2,
                               transform=TINY, check_containers=False)
    dataset.check_media_exist()  # the folders list every file
    with pytest.raises(MediaReadError, match=r'empty\.mp4: the file is empty'):
        dataset[1]


@pytest.fixture
def cut_images(tmp_path) -> Path:
    """A whole JPEG, then a JPEG and a PNG cut to half their bytes (a copy cut short)."""
    images = tmp_path / 'images'
    images.mkdir()
    pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    for name in ('a.jpg', 'b.jpg', 'c.png'):
        Image.fromarray(pixels).save(images / name)
    for name in ('b.jpg', 'c.png'):
        data = (images / name).read_bytes()
        (images / name).write_bytes(data[:len(data) // 2])
    dump_annotation(Annotation(dataset='d', split='test', media_type='image', languages=['en'],
                               items=[MediaRecord(n[0], n, {'en': [f'image {n}']})
                                      for n in ('a.jpg', 'b.jpg', 'c.png')]), tmp_path / 'ann.json')
    return tmp_path / 'ann.json'


def test_images_cut_short_are_named_before_any_is_read_when_decoding_is_checked(cut_images,
                                                                                monkeypatch):
    """The stat check passes an image cut short, which stopped training when its batch came;
    check_decode=True names every such file with its read's reason, in one report."""
    from xmr.datasets import base

    images = cut_images.parent / 'images'
    options = dict(data_root=cut_images.parent, data_prefix=dict(media='images'), transform=TINY)
    RetrievalDataset(cut_images, **options).check_media_exist()  # opt-in: passes by default
    reasons = []
    for index in (1, 2):
        with pytest.raises(MediaReadError) as read:
            RetrievalDataset(cut_images, **options)[index]
        reasons.append(f'\n  {read.value.path}: {read.value.reason}')
    report = f'2 of its 3 images cannot be read whole:{"".join(reasons)}\nreplace them'
    assert 'truncated' in report and str(images / 'c.png') in report
    with pytest.raises(MediaReadError) as info:
        RetrievalDataset(cut_images, **options, check_decode=True).check_media_exist()
    assert str(info.value) == f"{cut_images}: {report}: or set on_corrupt='skip' to leave them out"
    said = []
    monkeypatch.setattr(base, 'print_log', lambda message, **_: said.append(message))
    RetrievalDataset(cut_images, **options, check_decode=True,
                     on_corrupt='skip').check_media_exist()
    assert said == [f"{cut_images}: {report}; they are skipped (on_corrupt='skip')"]


@pytest.mark.parametrize('on_corrupt', ['raise', 'skip'])
def test_pillow_set_to_read_images_cut_short_is_refused_before_any_is_read(cut_images,
                                                                          monkeypatch, on_corrupt):
    """With LOAD_TRUNCATED_IMAGES the check passed and both cut images trained padded with
    grey, under either policy."""
    from PIL import ImageFile

    monkeypatch.setattr(ImageFile, 'LOAD_TRUNCATED_IMAGES', True)
    dataset = RetrievalDataset(cut_images, data_root=cut_images.parent,
                               data_prefix=dict(media='images'), transform=TINY,
                               on_corrupt=on_corrupt)
    with pytest.raises(RuntimeError, match=r'^PIL\.ImageFile\.LOAD_TRUNCATED_IMAGES is True'):
        dataset.check_media_exist()


def test_a_video_damaged_inside_is_named_before_any_is_read_when_decoding_is_checked(clips):
    """corrupted.mp4's container is whole: the container check passes it, and a read fails."""
    RetrievalDataset(clips, num_frames=2, transform=TINY).check_media_exist()
    dataset = RetrievalDataset(clips, num_frames=2, transform=TINY, check_decode=True)
    with pytest.raises(MediaReadError) as info:
        dataset.check_media_exist()
    damaged = dataset.media_path(dataset.records[CLIPS.index('corrupted.mp4')])
    assert str(info.value).startswith(f'{clips}: 1 of its 4 videos cannot be read whole:\n'
                                      f'  {damaged}: decoding failed (')


@pytest.mark.parametrize('page', ['page.mp4', 'page.avi', 'page.MPG'])
def test_a_web_page_under_a_video_s_name_is_named_and_a_misnamed_video_is_not(shared_data,
                                                                              tmp_path, page):
    """A page a failed download saved as 'page.mp4' passed the check and stopped the run when
    read; as 'page.avi' (MSVD's clips are AVI files) or 'page.mpg' it still did. A Matroska clip
    named '.mp4' is sound to FFmpeg, which reads the bytes, not the name: decord opens both, and
    only the page fails."""
    clip = shared_data / 'videos' / 'flipping_a_pancake.mkv'
    if not clip.is_file():
        pytest.skip(f'video fixture not found: {clip}')
    (tmp_path / page).write_bytes(b'<!DOCTYPE html><title>404 Not Found</title>')
    (tmp_path / 'pancake.mp4').write_bytes(clip.read_bytes())
    dump_annotation(Annotation(dataset='clips', split='test', media_type='video',
                               languages=['en'],
                               items=[MediaRecord(f'v{i}', name, {'en': [f'clip {i}']})
                                      for i, name in enumerate(['pancake.mp4', page])]),
                    tmp_path / 'ann.json')
    dataset = RetrievalDataset(tmp_path / 'ann.json', data_root=tmp_path, num_frames=2,
                               transform=TINY)
    with pytest.raises(MediaReadError) as info:
        dataset.check_media_exist()
    assert str(info.value).startswith(
        f'{tmp_path / "ann.json"}: 1 of its 2 videos cannot be read whole:\n'
        f'  {tmp_path / page}: no video container FFmpeg knows: its first bytes '
        '(3c 21 44 4f 43 54 59 50) begin none')
    assert 'pancake' not in str(info.value)



def _reference_clip(path: Path, preprocess, num_frames: int) -> torch.Tensor:
    """``[T, 3, S, S]``: decord's frames at the segment centres ``floor((i + 1/2) N / T)``,
    each through open_clip's own (PIL) preprocessing."""
    import decord

    reader = decord.VideoReader(str(path))
    count = len(reader)
    return torch.stack([
        preprocess(Image.fromarray(reader[(2 * i + 1) * count // (2 * num_frames)].asnumpy()))
        for i in range(num_frames)])


def test_a_real_clip_embeds_as_decord_open_clip_and_the_papers_mean_pooling_do(
        shared_data, tmp_path, tiny_retriever):
    """The whole test-time video path (RetrievalDataset, retrieval_collate, the model's
    preprocessor and predict) against a reference written here: decord's frames at the segment
    centres, open_clip's PIL preprocessing with the backbone's mean and std, each frame
    embedding L2-normalised, then their mean (CLIP4Clip's meanP, DASD's 12 frames)."""
    from open_clip.transform import image_transform

    names = ['bigbuckbunny.mp4', 'flipping_a_pancake.mkv', 'video_0.mov', 'unordered.mov']
    folder = shared_data / 'videos'
    if not all((folder / name).is_file() for name in names):
        pytest.skip(f'video fixtures not found under {folder}')
    dump_annotation(Annotation(dataset='clips', split='test', media_type='video',
                               languages=['en'],
                               items=[MediaRecord(name, str(folder / name), {'en': [name]})
                                      for name in names]), tmp_path / 'clips.json')
    model = tiny_retriever.eval()
    size = int(model.backbone.image_size[0])
    dataset = RetrievalDataset(tmp_path / 'clips.json', transform=dict(
        type='MediaTransform', backbone=None, size=size))
    batch = model.data_preprocessor(retrieval_collate([dataset[i] for i in range(len(names))]))
    embedded = torch.stack([item['media_embedding'] for item in model.predict(**batch)])

    preprocess = image_transform(size, is_train=False, mean=model.backbone.image_mean,
                                 std=model.backbone.image_std)
    pixels = torch.stack([_reference_clip(folder / name, preprocess, 12) for name in names])
    with torch.no_grad():
        frames = model.backbone.encode_image(pixels.flatten(0, 1)).view(len(names), 12, -1)
    expected = F.normalize(F.normalize(frames, dim=-1).mean(1), dim=-1)
    # Tensor and PIL bicubic resampling differ by a grey level at most (std ~0.26).
    assert (batch['media'] - pixels).abs().max() < 1.5 / 255 / 0.26
    # 2.5e-5 apart (the resampling); the mean of frame embeddings not normalised first is
    # 7.8e-4 away from the reference, a frame one off a centre further.
    torch.testing.assert_close(embedded, expected, rtol=0, atol=1e-4)
