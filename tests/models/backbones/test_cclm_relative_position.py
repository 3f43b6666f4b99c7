"""Resizing Swin bias tables (window 7 -> 12 is CCLM's 224 -> 384 step)."""
import pytest
import torch

from xmr.models.backbones.relative_position import geometric_offsets, resize_relative_position_bias

MODES = ['bicubic', 'geometric']


@pytest.mark.parametrize('mode', MODES)
def test_window_7_to_12_gives_23_by_23_offsets_per_head(mode):
    table = torch.randn(13 * 13, 4, dtype=torch.float64)
    resized = resize_relative_position_bias(table, 12, mode)
    assert resized.shape == (23 * 23, 4) and resized.dtype == torch.float64


def test_same_window_returns_the_table_itself():
    table = torch.randn(13 * 13, 4)
    assert resize_relative_position_bias(table, 7) is table


@pytest.mark.parametrize('mode', MODES)
def test_each_head_keeps_its_own_constant(mode):
    table = torch.tensor([1.0, -2.0, 3.5]).repeat(13 * 13, 1)
    resized = resize_relative_position_bias(table, 12, mode)
    torch.testing.assert_close(resized, torch.tensor([1.0, -2.0, 3.5]).repeat(23 * 23, 1))


@pytest.mark.parametrize('mode', MODES)
def test_row_offsets_stay_rows(mode):
    # Row r of the table is the vertical offset r - 6; a bias that depends on it alone must
    # still depend on the vertical offset alone after resizing.
    vertical = torch.arange(13, dtype=torch.float32).repeat_interleave(13)
    table = torch.stack([vertical, -vertical], dim=1)
    grid = resize_relative_position_bias(table, 12, mode).view(23, 23, 2)
    torch.testing.assert_close(grid, grid[:, :1].expand_as(grid))
    assert (grid[1:, 0, 0] > grid[:-1, 0, 0]).all()


def test_bicubic_resizing_is_timms_simple_resize_of_the_offset_grid():
    from timm.layers.pos_embed_rel import resize_rel_pos_bias_table_simple

    table = torch.randn(13 * 13, 4, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(resize_relative_position_bias(table, 12, 'bicubic'),
                               resize_rel_pos_bias_table_simple(table, (12, 12), (23 * 23, 4)))


def test_geometric_offsets_reach_the_new_largest_offset():
    positions = geometric_offsets(13, 23)
    assert len(positions) == 13 and positions[6] == 0.0 and positions[7] == 1.0
    assert positions == [-p for p in reversed(positions)]
    assert positions[-1] == pytest.approx(11.0, abs=1e-4)
    steps = [b - a for a, b in zip(positions[7:], positions[8:])]
    ratios = [b / a for a, b in zip(steps, steps[1:])]
    assert ratios == pytest.approx([ratios[0]] * len(ratios)) and ratios[0] > 1


def test_geometric_resizing_is_exact_on_a_plane_over_the_stretched_offsets():
    # A cubic spline through samples of a plane is that plane; evaluated on the new integer
    # offsets it gives 2 dh - 3 dw + 1 exactly.
    positions = torch.tensor(geometric_offsets(13, 23), dtype=torch.float64)
    plane = 2 * positions[:, None] - 3 * positions[None, :] + 1
    resized = resize_relative_position_bias(plane.reshape(-1, 1), 12, 'geometric').view(23, 23)
    offsets = torch.arange(-11, 12, dtype=torch.float64)
    torch.testing.assert_close(resized, 2 * offsets[:, None] - 3 * offsets[None, :] + 1,
                               rtol=0, atol=1e-3)


def test_bad_tables_and_modes_are_refused():
    with pytest.raises(ValueError, match='has 170 rows, not'):
        resize_relative_position_bias(torch.zeros(170, 4), 12)
    # 16 = 4 x 4, but a window's offsets -(w-1)..w-1 always number an odd 2w - 1.
    with pytest.raises(ValueError, match='has 16 rows, not'):
        resize_relative_position_bias(torch.zeros(16, 4), 12)
    with pytest.raises(ValueError, match="unknown bias interpolation 'linear'"):
        resize_relative_position_bias(torch.zeros(169, 4), 12, 'linear')
    with pytest.raises(ValueError, match='only enlarges'):
        resize_relative_position_bias(torch.zeros(529, 4), 7, 'geometric')
