"""Frozen text-only and vision-language towers behind one interface."""
from xmr.models.backbones.base import (
    SiteHooks,
    TextBackbone,
    TextTower,
    TokenOutput,
    VisionLanguageBackbone,
)
from xmr.models.backbones.bert import BertTextTower
from xmr.models.backbones.cclm import CCLMDualStream
from xmr.models.backbones.mclip import MultilingualCLIPBackbone, MultilingualCLIPTextTower
from xmr.models.backbones.open_clip import OpenCLIPBackbone, OpenCLIPTextTower
from xmr.models.backbones.vit_bert import ViTBERTBackbone

__all__ = ['SiteHooks', 'TextBackbone', 'TextTower', 'TokenOutput', 'VisionLanguageBackbone',
           'OpenCLIPBackbone', 'OpenCLIPTextTower', 'CCLMDualStream', 'BertTextTower',
           'MultilingualCLIPBackbone', 'MultilingualCLIPTextTower', 'ViTBERTBackbone']
