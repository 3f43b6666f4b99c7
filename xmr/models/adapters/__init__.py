"""Trainable modules placed in frozen text towers, one set per target language."""
from xmr.models.adapters.base import AdapterContext, AdapterPlacement, AdapterSite, BaseAdapter
from xmr.models.adapters.compacter import CompacterAdapter, PHMLinear, PHMRule
from xmr.models.adapters.dynamic import DynamicAdapter
from xmr.models.adapters.grouped import GroupedAdapter, LanguageMembership
from xmr.models.adapters.houlsby import HoulsbyAdapter
from xmr.models.adapters.language_adapters import LanguageAdapters
from xmr.models.adapters.lora import LoRA
from xmr.models.adapters.prompt import HardPrompt, SoftPrompt
from xmr.models.adapters.static import StaticAdapter

__all__ = ['AdapterContext', 'AdapterPlacement', 'AdapterSite', 'BaseAdapter',
           'CompacterAdapter', 'DynamicAdapter', 'GroupedAdapter', 'HardPrompt',
           'HoulsbyAdapter', 'LanguageAdapters', 'LanguageMembership', 'LoRA', 'PHMLinear',
           'PHMRule', 'SoftPrompt', 'StaticAdapter']
