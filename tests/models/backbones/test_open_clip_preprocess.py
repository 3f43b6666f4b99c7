"""Backbone preprocessing settings read from open_clip's configs, offline."""
from __future__ import annotations

import open_clip
import pytest
import torch
from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

from xmr.models.backbones.open_clip_preprocess import backbone_mean_std, backbone_preprocess_cfg


def test_openai_clip_settings():
    assert backbone_preprocess_cfg('ViT-B-32', 'openai') == dict(
        size=(224, 224), mean=tuple(OPENAI_DATASET_MEAN), std=tuple(OPENAI_DATASET_STD),
        interpolation='bicubic', resize_mode='shortest', fill_color=0)
    assert backbone_mean_std('ViT-B-32', 'openai') == (tuple(OPENAI_DATASET_MEAN),
                                                       tuple(OPENAI_DATASET_STD))
    assert backbone_preprocess_cfg('ViT-L-14-336', 'openai')['size'] == (336, 336)


def test_tag_specific_normalisation_and_resize_mode():
    cfg = backbone_preprocess_cfg('ViT-B-16-SigLIP', 'webli')
    assert cfg['mean'] == (0.5, 0.5, 0.5) and cfg['std'] == (0.5, 0.5, 0.5)
    assert cfg['resize_mode'] == 'squash'


def test_checkpoint_path_follows_its_declared_record_and_unknown_names_fail():
    declared = backbone_preprocess_cfg('ViT-B-16-SigLIP', 'work_dirs/clip.pt', 'webli')
    assert declared == backbone_preprocess_cfg('ViT-B-16-SigLIP', 'webli')
    explicit = backbone_preprocess_cfg('ViT-B-32', 'work_dirs/clip.pt', dict(mean=(0.5,) * 3))
    assert explicit['mean'] == (0.5,) * 3 and explicit['std'] == tuple(OPENAI_DATASET_STD)
    with pytest.raises(ValueError, match="pretrained='work_dirs/clip.pt' is a local file"):
        backbone_preprocess_cfg('ViT-B-32', 'work_dirs/clip.pt')
    with pytest.raises(ValueError, match='closest: .*ViT-B-32'):
        backbone_preprocess_cfg('ViT-B-32x')
    with pytest.raises(ValueError, match="^pretrained='opanai' is neither a file nor an "
                                         r"open_clip tag of ViT-B-32 \(closest: \['openai'\]; "
                                         r"tags: \['openai', 'laion400m_e31'"):
        backbone_preprocess_cfg('ViT-B-32', 'opanai')


def test_every_tag_gets_the_preprocessing_open_clips_factory_sets_on_its_model():
    """``open_clip.create_model(arch, pretrained=tag)``: ``PreprocessCfg``'s defaults, the tag's
    record over them, then the input size of the built image tower (its ``vision_cfg``)."""
    from dataclasses import asdict

    import open_clip
    from open_clip.transform import PreprocessCfg, merge_preprocess_dict
    from timm.layers import to_2tuple

    def comparable(cfg: dict) -> dict:
        return {key: tuple(value) if isinstance(value, (list, tuple)) else value
                for key, value in cfg.items() if key != 'mode'}

    pairs = open_clip.list_pretrained()
    assert len(pairs) > 100
    for arch, tag in pairs:
        expected = merge_preprocess_dict(asdict(PreprocessCfg()),
                                         open_clip.get_pretrained_cfg(arch, tag))
        expected['size'] = to_2tuple(open_clip.get_model_config(arch)['vision_cfg']['image_size'])
        assert comparable(backbone_preprocess_cfg(arch, tag)) == comparable(expected), (arch, tag)


#: Every SigLIP and SigLIP 2 checkpoint open_clip records: the configs' (dasd_siglip2-*: the
#: B/16 and SO400M/16 at 256 px) among them.
SIGLIP_TAGS = sorted((arch, tag) for arch, tag in open_clip.list_pretrained()
                     if 'SigLIP' in arch)


def test_the_configs_siglip_checkpoints_are_among_those_compared():
    assert {('ViT-B-16-SigLIP2-256', 'webli'), ('ViT-SO400M-16-SigLIP2-256', 'webli'),
            ('ViT-B-16-SigLIP', 'webli')} <= set(SIGLIP_TAGS)


@pytest.fixture
def real_frame(shared_data) -> torch.Tensor:
    """A frame of real footage, uint8 ``[240, 426, 3]`` (decord, as the datasets read video)."""
    import decord

    path = shared_data / 'videos' / 'flipping_a_pancake.mkv'
    if not path.is_file():
        pytest.skip(f'real video fixture not found at {path}')
    return torch.from_numpy(decord.VideoReader(str(path))[150].asnumpy())


@pytest.mark.parametrize('arch, tag', SIGLIP_TAGS)
def test_a_siglip_image_is_what_open_clips_recorded_transform_makes_of_it(arch, tag,
                                                                         real_frame):
    """The images a SigLIP (2) checkpoint reads: xmr's dataset transform (uint8 tensors) then
    the data preprocessor's normalisation, against open_clip's PIL ``image_transform`` built
    from open_clip's own record of the checkpoint (``PreprocessCfg`` defaults, the tag's
    ``mean``/``std``/``interpolation``/``resize_mode``, the model config's ``image_size``:
    bicubic, squash, 0.5/0.5), on a landscape frame and the same frame turned portrait.

    Both resample separably in uint8 with the same bicubic kernel; they differ where a
    rounding or a clipped overshoot falls otherwise, and Pillow 13 runs the vertical pass
    first for some shapes, the portrait frame's (torchvision always the horizontal one): at
    most 5 grey levels, 0.1 on average. Bilinear (the other record value) is 12 or more
    levels and 0.39 on average away."""
    from dataclasses import asdict

    from open_clip.transform import PreprocessCfg, image_transform_v2, merge_preprocess_dict
    from PIL import Image

    from xmr.datasets.transforms import MediaTransform

    recorded = merge_preprocess_dict(asdict(PreprocessCfg()),
                                     open_clip.get_pretrained_cfg(arch, tag))
    recorded['size'] = open_clip.get_model_config(arch)['vision_cfg']['image_size']
    reference = image_transform_v2(PreprocessCfg(**recorded), is_train=False)
    transform = MediaTransform(arch, tag)
    mean, std = (torch.tensor(values).view(3, 1, 1) for values in backbone_mean_std(arch, tag))
    grey_level = 1 / 255 / std
    for pixels in (real_frame, real_frame.transpose(0, 1)):
        expected = reference(Image.fromarray(pixels.numpy()))
        ours = (transform(pixels.permute(2, 0, 1).contiguous()).float() / 255 - mean) / std
        assert ours.shape == expected.shape == (3, *transform.size)
        difference = (ours - expected).abs() / grey_level
        assert difference.max() <= 6, (arch, tag, difference.max())
        assert difference.mean() < 0.2, (arch, tag, difference.mean())
