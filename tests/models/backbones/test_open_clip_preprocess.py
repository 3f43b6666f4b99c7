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
    with pytest.raises(ValueError, match="'opanai' is neither a file nor an open_clip tag of "
                                         r"ViT-B-32 \(tags: \['openai'"):
        backbone_preprocess_cfg('ViT-B-32', 'opanai')
