"""uint8 resize/crop against open_clip's own preprocessing, modes, and train augmentation."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from open_clip.transform import AugmentationCfg, image_transform
from PIL import Image

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
