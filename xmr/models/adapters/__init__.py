"""Trainable modules placed in frozen text towers, one set per target language."""
from xmr.models.adapters.base import AdapterContext, AdapterSite, BaseAdapter
from xmr.models.adapters.dynamic import DynamicAdapter
from xmr.models.adapters.generator import ParameterGenerator
from xmr.models.adapters.slots import LanguageAdapters
from xmr.models.adapters.static import StaticAdapter

__all__ = ['AdapterContext', 'AdapterSite', 'BaseAdapter', 'DynamicAdapter', 'LanguageAdapters',
           'ParameterGenerator', 'StaticAdapter']
