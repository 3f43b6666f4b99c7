import sys
import textwrap

import mmengine.registry as mm_registry
import pytest
import torch
from mmengine.config import Config

import xmr  # noqa: F401
from tests.conftest import tiny_retriever_cfg
from xmr import registry
from xmr.registry import ADAPTERS, MODELS


def test_every_mmengine_root_has_an_xmr_child():
    roots = [n for n in dir(mm_registry) if n.isupper() and
             isinstance(getattr(mm_registry, n), mm_registry.Registry)]
    assert len(roots) >= 20
    for name in roots:
        child = getattr(registry, name)
        assert child.parent is getattr(mm_registry, name), name
        assert child.scope == 'xmr'


def test_registries_build_xmr_and_mmengine_types():
    assert type(MODELS.build(dict(type='AlignmentLoss'))).__name__ == 'AlignmentLoss'
    assert registry.OPTIMIZERS.get('AdamW') is torch.optim.AdamW
    assert ADAPTERS.get('StaticAdapter').__name__ == 'StaticAdapter'


def test_unknown_type_lists_the_closest_registered_names():
    with pytest.raises(KeyError, match="'StaticAdaptor' is not a registered type.*StaticAdapter"):
        ADAPTERS.build(dict(type='StaticAdaptor', width=8))
    with pytest.raises(KeyError, match='CrossLingualRetriever'):
        MODELS.build(dict(type='CrossLingualRetreiver'))
    assert 'StaticAdaptor' not in ADAPTERS and 'StaticAdapter' in ADAPTERS


def test_unknown_type_through_the_mmengine_root_also_suggests():
    with mm_registry.DefaultScope.overwrite_default_scope('xmr'):
        with pytest.raises(KeyError, match='Closest registered names: InfoNCELoss'):
            mm_registry.MODELS.build(dict(type='InfoNCELos'))


USER_MODULE = '''
import torch
from xmr.models.adapters import BaseAdapter
from xmr.registry import ADAPTERS


@ADAPTERS.register_module()
class ScaledIdentityAdapter(BaseAdapter):
    def __init__(self, placement, scale=2.0):
        super().__init__(placement)
        self.scale = torch.nn.Parameter(torch.tensor(scale))

    def forward(self, x, ctx):
        return x * self.scale
'''


def test_user_adapter_loaded_with_custom_imports(tmp_path, monkeypatch):
    (tmp_path / 'my_adapters.py').write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg_path = tmp_path / 'config.py'
    model = tiny_retriever_cfg()
    model['language_branch']['adapters'] = dict(type='ScaledIdentityAdapter', scale=3.0)
    cfg_path.write_text(textwrap.dedent(f'''
        custom_imports = dict(imports=['my_adapters'], allow_failed_imports=False)
        model = {model!r}
    '''))
    try:
        cfg = Config.fromfile(str(cfg_path))
        built = MODELS.build(cfg.model)
        adapter = built.language_branch.adapters.sets['de']['0:block_output']
        assert type(adapter).__name__ == 'ScaledIdentityAdapter'
        assert adapter.scale.item() == 3.0
    finally:
        ADAPTERS.module_dict.pop('ScaledIdentityAdapter', None)
        sys.modules.pop('my_adapters', None)
