"""uint8 resize/crop against open_clip's own preprocessing, modes, and train augmentation."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from open_clip.transform import AugmentationCfg, PreprocessCfg, image_transform
from PIL import Image
from torchvision.transforms import InterpolationMode, v2
from torchvision.transforms.v2 import functional as F

from xmr.datasets.transforms import MediaTransform


def _image(height: int, width: int) -> torch.Tensor:
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([x * 255 // width, y * 255 // height, (x + y) % 256], -1)
    return torch.from_numpy(pixels.astype(np.uint8)).permute(2, 0, 1)


def test_evaluation_matches_open_clip_preprocessing():
    image = _image(90, 160)
    ours = MediaTransform(backbone=None, size=32, resize_mode='shortest',
                          interpolation='bicubic')(image)
    assert ours.dtype == torch.uint8 and tuple(ours.shape) == (3, 32, 32)
    reference = image_transform(32, is_train=False)(Image.fromarray(
        image.permute(1, 2, 0).numpy()))
    mean = torch.tensor([0.48145466, 0.4578275, 0.40821073]).view(3, 1, 1)
    std = torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(3, 1, 1)
    normalised = (ours.float() / 255 - mean) / std
    # Tensor and PIL bicubic resampling differ by at most a couple of grey levels.
    assert (normalised - reference).abs().max() < 3 / 255 / 0.26


@pytest.mark.parametrize('height, width', [(90, 160), (160, 90)])
def test_shortest_to_a_non_square_size_matches_open_clip_keep_ratio(height, width):
    """A (16, 24) input keeps the aspect ratio and covers the target (open_clip's
    ResizeKeepRatio, then a centre crop); fitting inside it instead would stretch the image."""
    image = _image(height, width)
    ours = MediaTransform(backbone=None, size=(16, 24), resize_mode='shortest',
                          interpolation='bicubic')(image)
    assert tuple(ours.shape) == (3, 16, 24)
    reference = image_transform((16, 24), is_train=False, mean=(0, 0, 0), std=(1, 1, 1))(
        Image.fromarray(image.permute(1, 2, 0).numpy()))
    assert (ours.float() / 255 - reference).abs().max() < 4 / 255


def test_the_record_decides_and_a_contradicting_value_is_refused():
    record = MediaTransform('ViT-B-32', 'openai', size=224, interpolation='bicubic')
    assert (record.size, record.resize_mode) == ((224, 224), 'shortest')
    assert record.interpolation.value == 'bicubic'
    with pytest.raises(ValueError, match=r"MediaTransform size: the config sets 32, the record "
                                         r"of ViT-B-32 \(openai\) says \(224, 224\)"):
        MediaTransform('ViT-B-32', 'openai', size=32)
    with pytest.raises(ValueError, match="interpolation: the config sets 'bilinear'.*'bicubic'"):
        MediaTransform('ViT-B-32', 'openai', interpolation='bilinear')
    squash = MediaTransform('ViT-B-16-SigLIP', 'webli')
    assert squash.resize_mode == 'squash'
    with pytest.raises(ValueError, match="resize_mode: the config sets 'shortest'"):
        MediaTransform('ViT-B-16-SigLIP', 'webli', resize_mode='shortest')


def test_a_local_checkpoint_follows_its_declared_tag(tmp_path):
    path = str(tmp_path / 'ViT-B-16-SigLIP.pt')
    assert MediaTransform('ViT-B-16-SigLIP', path, pretrained_cfg='webli').resize_mode == 'squash'
    with pytest.raises(ValueError, match='is a local file, which records no training settings'):
        MediaTransform('ViT-B-16-SigLIP', path)


def test_backbone_decides_the_size():
    assert MediaTransform('ViT-L-14-336', 'openai')(_image(400, 500)).shape == (3, 336, 336)
    assert MediaTransform(backbone=None, size=(16, 24))(_image(40, 40)).shape == (3, 16, 24)


def test_squash_and_longest_modes():
    squash = MediaTransform(backbone=None, size=8, resize_mode='squash')(_image(10, 40))
    assert squash.shape == (3, 8, 8)
    white = torch.full((3, 10, 40), 255, dtype=torch.uint8)
    padded = MediaTransform(backbone=None, size=8, resize_mode='longest', fill_color=0)(white)
    # 10 x 40 -> 2 x 8, centred vertically in 8 rows: rows 3-4 image, the rest fill.
    assert padded[:, 3:5].eq(255).all() and padded[:, :3].eq(0).all() and padded[:, 5:].eq(0).all()


def test_longest_pads_with_the_fill_color():
    white = torch.full((3, 10, 40), 255, dtype=torch.uint8)
    padded = MediaTransform(backbone=None, size=8, resize_mode='longest', fill_color=128)(white)
    assert padded[:, :3].eq(128).all() and padded[:, 5:].eq(128).all()


def test_random_resized_crop_defaults_to_open_clip_s_training_scale_and_ratio():
    defaults = AugmentationCfg()  # ratio None: torchvision's default (3/4, 4/3)
    transform = MediaTransform(backbone=None, size=8, training=True, random_resized_crop={})
    assert transform.random_resized_crop == {'scale': defaults.scale, 'ratio': (3 / 4, 4 / 3)}


def test_video_frames_share_one_random_crop_and_flip():
    torch.manual_seed(0)
    transform = MediaTransform(backbone=None, size=16, training=True,
                               random_resized_crop=dict(scale=(0.3, 0.6)), hflip_prob=0.5)
    clip = _image(48, 64).unsqueeze(0).repeat(4, 1, 1, 1)
    outputs = [transform(clip) for _ in range(6)]
    for out in outputs:
        assert out.shape == (4, 3, 16, 16)
        assert all(torch.equal(out[0], out[t]) for t in range(1, 4))
    assert len({out[0].float().sum().item() for out in outputs}) > 1


def test_augmentation_is_off_in_evaluation():
    transform = MediaTransform(backbone=None, size=16, training=False,
                               random_resized_crop=dict(scale=(0.3, 0.6)), hflip_prob=1.0)
    image = _image(48, 64)
    assert torch.equal(transform(image), transform(image))
    assert torch.equal(transform(image), MediaTransform(backbone=None, size=16)(image))


def test_bad_input_and_settings_are_rejected():
    with pytest.raises(ValueError, match=r'expects uint8 \[3, H, W\]'):
        MediaTransform(backbone=None, size=8)(torch.zeros(3, 8, 8))
    with pytest.raises(ValueError, match='resize_mode must be one of'):
        MediaTransform(backbone=None, size=8, resize_mode='fit')
    with pytest.raises(ValueError, match='random_resized_crop takes scale and ratio'):
        MediaTransform(backbone=None, size=8, random_resized_crop=dict(size=3))
    with pytest.raises(ValueError, match=r'hflip_prob must lie in \[0, 1\], got 1.5'):
        MediaTransform(backbone=None, size=8, hflip_prob=1.5)


def test_training_flip_follows_its_probability():
    """hflip_prob=1 flips every call (the evaluation geometry mirrored left to right); with 0.5
    about half the calls flip."""
    image = _image(48, 64)
    plain = MediaTransform(backbone=None, size=16)(image)
    always = MediaTransform(backbone=None, size=16, training=True, hflip_prob=1.0)
    assert all(torch.equal(always(image), plain.flip(-1)) for _ in range(5))
    torch.manual_seed(0)
    half = MediaTransform(backbone=None, size=16, training=True, hflip_prob=0.5)
    flipped = sum(torch.equal(half(image), plain.flip(-1)) for _ in range(200))
    assert 60 < flipped < 140


# (32, 5) and (5, 32): the short side is 2.5 pixels, a tie open_clip rounds to the even 2.
@pytest.mark.parametrize('height, width', [(37, 100), (100, 45), (32, 5), (5, 32)])
def test_longest_rounds_the_short_side_and_pads_as_open_clip(height, width):
    """37 x 100 to 16: the short side is 5.92 pixels, rounded to 6 (not cut to 5), then padded
    to the centre as open_clip's ResizeKeepRatio(longest=1) + center_crop_or_pad do."""
    image = _image(height, width)
    ours = MediaTransform(backbone=None, size=16, resize_mode='longest', fill_color=0)(image)
    reference = image_transform(16, is_train=False, mean=(0, 0, 0), std=(1, 1, 1),
                                resize_mode='longest', fill_color=0)(
        Image.fromarray(image.permute(1, 2, 0).numpy()))
    assert (ours.float() / 255 - reference).abs().max() < 4 / 255


def test_a_tower_without_a_backbone_defaults_to_open_clip_s_preprocessing_settings():
    """open_clip's PreprocessCfg: shortest side, bicubic, black padding."""
    defaults = PreprocessCfg()
    transform = MediaTransform(backbone=None, size=16)
    assert (transform.resize_mode, transform.interpolation.value) == (
        defaults.resize_mode, defaults.interpolation)
    image = _image(48, 64)
    explicit = MediaTransform(backbone=None, size=16, resize_mode='shortest',
                              interpolation='bicubic')
    assert torch.equal(transform(image), explicit(image))
    white = torch.full((3, 10, 40), 255, dtype=torch.uint8)
    padded = MediaTransform(backbone=None, size=8, resize_mode='longest')(white)
    assert padded[:, :3].eq(defaults.fill_color).all()
    assert padded[:, 5:].eq(defaults.fill_color).all()


@pytest.mark.parametrize('seed', range(4))
def test_the_training_crop_matches_open_clip_s_random_resized_crop_drawn_from_the_same_seed(
        seed):
    """open_clip's training transform draws its crop from torch's stream as ours does: the same
    seed cuts the same window of a 48 x 64 image (PIL and tensor bicubic a few levels apart),
    and torchvision's RandomResizedCrop on the tensor gives the very pixels (bilinear would be
    a level or two away)."""
    image = _image(48, 64)
    transform = MediaTransform(backbone=None, size=16, training=True,
                               random_resized_crop=dict(scale=(0.3, 0.6)))
    reference_transform = image_transform(16, is_train=True, mean=(0, 0, 0), std=(1, 1, 1),
                                          aug_cfg=AugmentationCfg(scale=(0.3, 0.6)))
    torch.manual_seed(seed)
    ours = transform(image)
    torch.manual_seed(seed)
    reference = reference_transform(Image.fromarray(image.permute(1, 2, 0).numpy()))
    assert (ours.float() / 255 - reference).abs().max() < 4 / 255
    torch.manual_seed(seed)
    assert torch.equal(ours, v2.RandomResizedCrop(16, scale=(0.3, 0.6),
                                                  interpolation=InterpolationMode.BICUBIC,
                                                  antialias=True)(image))


@pytest.mark.parametrize('media', [torch.zeros(1, 2, 3, 8, 8, dtype=torch.uint8),
                                   torch.zeros(4, 8, 8, dtype=torch.uint8),
                                   torch.zeros(2, 1, 8, 8, dtype=torch.uint8)],
                         ids=['5-d', '4-channel image', 'grey frames'])
def test_media_of_another_rank_or_channel_count_are_refused_with_their_shape(media):
    expected = f'expects uint8 [3, H, W] or [T, 3, H, W], got torch.uint8 {tuple(media.shape)}'
    with pytest.raises(ValueError, match=re.escape(expected)):
        MediaTransform(backbone=None, size=8)(media)


@pytest.mark.parametrize('settings, message', [
    (dict(size=0), r'size must be a positive int or \(H, W\), got 0'),
    (dict(size=(8, 0)), r'size must be a positive int or \(H, W\), got \(8, 0\)'),
    (dict(size=(8, 8, 8)), r'size must be a positive int or \(H, W\), got \(8, 8, 8\)'),
    (dict(size=8, interpolation='nearest'),
     r"interpolation must be one of \('bicubic', 'bilinear'\), got 'nearest'"),
    (dict(size=8, hflip_prob=-0.1), r'hflip_prob must lie in \[0, 1\], got -0.1'),
])
def test_settings_out_of_range_are_refused_naming_the_value(settings, message):
    with pytest.raises(ValueError, match=message):
        MediaTransform(backbone=None, **settings)


@pytest.mark.parametrize('height, width', [(90, 160), (160, 90)])
def test_squash_to_a_non_square_size_matches_open_clip(height, width):
    """(16, 24) is 16 rows of 24 columns whatever the image's aspect ratio."""
    image = _image(height, width)
    ours = MediaTransform(backbone=None, size=(16, 24), resize_mode='squash')(image)
    reference = image_transform((16, 24), is_train=False, mean=(0, 0, 0), std=(1, 1, 1),
                                resize_mode='squash')(
        Image.fromarray(image.permute(1, 2, 0).numpy()))
    assert ours.shape == reference.shape == (3, 16, 24)
    assert (ours.float() / 255 - reference).abs().max() < 4 / 255


@pytest.mark.parametrize('height, width, size, resized_size, top, left', [
    (35, 100, (16, 24), [16, 46], 0, 11), (100, 35, (24, 16), [46, 16], 11, 0)])
def test_shortest_to_a_non_square_size_rounds_the_scaled_side_before_cropping(
        height, width, size, resized_size, top, left):
    """35 x 100 to (16, 24): the 16 rows set the scale, 100 columns become 45.7, rounded to 46
    as open_clip's ResizeKeepRatio does (not cut to 45), of which the centre 24 from column 11
    are kept; likewise the rows of 100 x 35 to (24, 16)."""
    image = _image(height, width)
    ours = MediaTransform(backbone=None, size=size)(image)
    resized = F.resize(image, resized_size, interpolation=InterpolationMode.BICUBIC,
                       antialias=True)
    assert torch.equal(ours, resized[:, top:top + size[0], left:left + size[1]])


def test_a_centre_crop_comes_out_holding_only_its_own_pixels():
    """A crop left as a view of the resized frame would carry the whole frame from a loader
    worker to the main process."""
    ours = MediaTransform(backbone=None, size=16)(_image(48, 64))
    assert ours.is_contiguous() and ours.untyped_storage().nbytes() == 3 * 16 * 16


def test_a_sliver_keeps_one_row_when_the_long_side_decides():
    """2 x 200 to 16: 0.16 rows would round to none; one row is kept, centred in the padding."""
    white = torch.full((3, 2, 200), 255, dtype=torch.uint8)
    padded = MediaTransform(backbone=None, size=16, resize_mode='longest')(white)
    assert padded.shape == (3, 16, 16)
    assert padded[:, 7].eq(255).all() and padded[:, :7].eq(0).all() and padded[:, 8:].eq(0).all()


def test_downscaling_fine_stripes_is_antialiased_as_open_clip_s_pil_resize():
    """Alternate black and white columns shrunk 3 times are mid grey with an antialiasing
    filter, as PIL's resize in open_clip's transform is; point sampling keeps black and white."""
    stripes = torch.zeros(3, 96, 96, dtype=torch.uint8)
    stripes[..., ::2] = 255
    ours = MediaTransform(backbone=None, size=32)(stripes)
    reference = image_transform(32, is_train=False, mean=(0, 0, 0), std=(1, 1, 1))(
        Image.fromarray(stripes.permute(1, 2, 0).numpy()))
    assert (ours.float() / 255 - reference).abs().max() < 8 / 255


def test_the_repr_names_the_padding_colour_only_where_it_decides_pixels():
    """A feature cache is keyed by the repr: shortest and squash keep the key they had."""
    assert repr(MediaTransform(backbone=None, size=16)) == (
        "MediaTransform(size=(16, 16), resize_mode='shortest', interpolation='bicubic', "
        'training=False, random_resized_crop=None, hflip_prob=0.0)')
    assert repr(MediaTransform(backbone=None, size=(8, 12), resize_mode='longest',
                               fill_color=7, training=True, random_resized_crop={},
                               hflip_prob=0.5)) == (
        "MediaTransform(size=(8, 12), resize_mode='longest', fill_color=7, "
        "interpolation='bicubic', training=True, random_resized_crop={'scale': (0.9, 1.0), "
        "'ratio': (0.75, 1.3333333333333333)}, hflip_prob=0.5)")
