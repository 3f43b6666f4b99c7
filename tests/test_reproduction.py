"""docs/reproduction.md: every row's config loads with its ablations through tools/train.py's own
loader and builds its model; every paper config and ablation is on the page."""
from __future__ import annotations

import functools
import re
import shlex
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, tiny_backbone_cfg
from xmr.registry import MODELS
from xmr.run_config import load_run_config

sys.path.insert(0, str(REPO / 'tools'))
import train as train_tool  # noqa: E402

PAGE = REPO / 'docs' / 'reproduction.md'
TICKED = re.compile(r'`([^`]+)`')
# Configs of configs/{dasd,pectvlm,cdds} that are no paper's row: the SigLIP 2 backbones, the
# bundled demo.
NOT_PAPER_ROWS = {'dasd_siglip2-vit-b16-256_multi30k_clft',
                  'dasd_siglip2-so400m-16-256_multi30k_clft', 'cdds_tiny-clip_synthetic'}


def table_rows() -> list[list[str]]:
    """The five cells (paper row, config, ``--ablation``, paper, what differs) of every table
    row that names a config."""
    rows = []
    for line in PAGE.read_text(encoding='utf-8').splitlines():
        cells = [cell.strip() for cell in line.strip().strip('|').split('|')]
        if len(cells) == 5 and cells[1].startswith('`configs/'):
            rows.append(cells)
    return rows


def page_rows() -> list[tuple[str, list[str], list[str]]]:
    """``(row label, configs, ablations)`` of every table row that names a config."""
    return [(label, TICKED.findall(configs), TICKED.findall(ablations))
            for label, configs, ablations, _, _ in table_rows()]


ROWS = page_rows()
RUNS = sorted({(config, tuple(ablations)) for _, configs, ablations in ROWS
               for config in configs})


def test_the_page_has_the_three_papers_tables():
    labels = [label for label, _, _ in ROWS]
    assert len(ROWS) > 100
    for expected in ('Table 6, neither `L_sc` nor `L_adv`', 'Figure 4, SDM depth k = 0',
                     'Routine 3 + contrastive alignment', 'FT (full fine-tuning of the text '
                     'encoder)', 'Swin-384, MSCOCO', 'w/o Gau. (noise)'):
        assert expected in labels


def test_every_paper_config_and_ablation_is_on_the_page():
    named = {config for config, _ in RUNS}
    for method in ('dasd', 'pectvlm', 'cdds'):
        for path in sorted((REPO / 'configs' / method).glob('*.py')):
            if path.stem not in NOT_PAPER_ROWS:
                assert str(path.relative_to(REPO)) in named, path.name
        for overlay in sorted((REPO / 'configs' / method / 'ablations').glob('*.py')):
            assert any(f'{method}/{overlay.stem}' in ablations for _, ablations in RUNS), \
                overlay.name


@functools.cache
def cclm_checkpoint(folder: Path) -> str:
    from tests.configs.test_cclm_dasd_configs import IMAGE_SIZE, cclm_checkpoint_helpers

    path = folder / 'cclm_tiny.th'
    torch.save({'model': cclm_checkpoint_helpers().cclm_state_dict(IMAGE_SIZE, 4)}, path)
    return str(path)


def tiny_model(cfg, folder: Path) -> dict:
    """The row's model with a tiny random stand-in for its pretrained towers (each family's
    config tests build it the same way); everything else as configured."""
    backbone = cfg.model.backbone.type
    if backbone == 'MultilingualCLIPBackbone':
        from tests.configs.test_pectvlm_configs import TOKENIZER_FILE, tiny_mclip

        if not TOKENIZER_FILE.is_file():
            pytest.skip(f'XLM-R tokenizer fixture missing: {TOKENIZER_FILE}')
        return tiny_mclip(cfg)
    if backbone == 'CCLMDualStream':
        from tests.configs.test_cclm_dasd_configs import TOKENIZER_FILE, tiny

        if not TOKENIZER_FILE.is_file():
            pytest.skip(f'XLM-R tokenizer fixture missing: {TOKENIZER_FILE}')
        return tiny(cfg, cclm_checkpoint(folder))
    if cfg.model.type == 'DualEncoderRetriever':
        return dict(cfg.model.to_dict(), backbone=tiny_backbone_cfg())
    from tests.configs.test_dasd_configs import tiny_model as tiny_clip_model

    return tiny_clip_model(cfg)


# The CCLM rows load their tiny checkpoint into meta parameters: its keys are matched, its
# values not copied.
@pytest.mark.filterwarnings('ignore:.*copying from a non-meta parameter:UserWarning')
@pytest.mark.parametrize('config, ablations', RUNS,
                         ids=[' '.join((Path(c).stem, *a)) for c, a in RUNS])
def test_each_row_loads_as_its_tool_does_and_builds(config, ablations, tmp_path_factory):
    """A training row as tools/train.py loads it, a zero-shot (test-only) row, which train.py
    refuses, as tools/test.py does."""
    cfg = load_run_config(config, ablations=ablations)
    if cfg.get('train_cfg') is not None:
        args = train_tool.parse_args([config, *(['--ablation', *ablations] if ablations else [])])
        cfg = train_tool.build_config(args)
    for name in ablations:
        assert name.split('/')[-1] in cfg.work_dir
    model_cfg = tiny_model(cfg, tmp_path_factory.getbasetemp())
    # On the meta device: every constructor runs and names its parameters, and no value is
    # drawn (a CDDS row's two 1,024-wide UNets drew 176M, 2 s of the row's 2.5 s).
    with torch.device('meta'):
        model = MODELS.build(model_cfg)
    names = [name for name, _ in model.named_parameters()]
    groups = model.trainable_groups() if hasattr(model, 'trainable_groups') else {}
    for phase in (cfg.get('train_cfg') or {}).get('phases', []):
        for prefix in (p for entry in phase['trainable'] for p in groups.get(entry, [entry])):
            assert any(n == prefix or n.startswith(prefix + '.') for n in names), prefix


def test_the_documented_grid_point_sets_lambda_and_lr():
    text = PAGE.read_text(encoding='utf-8')
    command = next(line for line in re.findall(r'python tools/train\.py [^`]*?--work-dir \S+',
                                               text.replace('\\\n', ' ')))
    args = train_tool.parse_args(shlex.split(command)[2:])
    cfg = train_tool.build_config(args)
    phase = cfg.train_cfg.phases[0]
    assert (phase.loss_weights.align, phase.lr) == (0.1, 5e-5)
    assert phase.loss_weights.cm == 1.0


def test_vsepp_row_states_the_same_image_mask_its_loss_applies():
    """The row said 'no image-id mask' while its config masks, as LAPS does, the other captions
    of a query's image out of its negatives."""
    _, configs, _, _, differs = next(row for row in table_rows() if row[0] == 'VSE++')
    cfg = train_tool.build_config(train_tool.parse_args(TICKED.findall(configs)))
    assert 'image-id mask' in differs
    assert ('no image-id mask' in differs) == (not cfg.model.losses.itc.mask_same_media)
