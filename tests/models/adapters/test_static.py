from xmr.models.adapters import AdapterPlacement, StaticAdapter


def test_the_default_bottleneck_is_mlas_256_wide():
    """MLA's text adapter: ``x + Linear(256→512)(ReLU(Linear(512→256)(x)))`` on its 512-wide
    text tower (DASD's "Traditional Adapter" takes the same 256)."""
    adapter = StaticAdapter(AdapterPlacement(512, 'block.output'))
    assert (adapter.down.in_features, adapter.down.out_features) == (512, 256)
    assert (adapter.up.in_features, adapter.up.out_features) == (256, 512)
