"""Backbone preprocessing settings read from open_clip's configs, offline."""
from __future__ import annotations

import pytest
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
