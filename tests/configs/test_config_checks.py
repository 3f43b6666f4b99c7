"""Every config xmr ships passes the checks it meets as it loads (xmr.run_config), those that
read the text tower's width and depth from the backbone's config among them; so does every
DASD ablation row on the ViT-B/32 model whose 12 blocks its sweeps span."""
from pathlib import Path

import pytest
from mmengine.config import Config

from xmr.ablations import apply_ablations
from xmr.run_config import check_run_values

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
LEAVES = sorted(path for path in CONFIGS.rglob('*.py')
                if not {'_base_', 'ablations'} & set(path.parts))
DASD_ROWS = sorted(path.stem for path in (CONFIGS / 'dasd' / 'ablations').glob('*.py'))


@pytest.mark.parametrize('path', LEAVES, ids=lambda path: str(path.relative_to(CONFIGS)))
def test_a_shipped_config_passes_the_checks_of_its_load(path):
    check_run_values(Config.fromfile(str(path)))


@pytest.mark.parametrize('row', DASD_ROWS)
def test_a_dasd_ablation_row_passes_the_checks_on_the_model_it_was_written_for(row):
    cfg = Config.fromfile(str(CONFIGS / 'dasd' / 'dasd_clip-vit-b32_multi30k_clft.py'))
    check_run_values(apply_ablations(cfg, [f'dasd/{row}']))
