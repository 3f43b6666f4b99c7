"""Scene semantics, splits and rendering of the synthetic set."""
import numpy as np
import pytest

from xmr.datasets.synthetic.scenes import (
    PALETTE,
    ObjectGroup,
    Scene,
    all_scenes,
    render_scene,
    sample_scene,
    scene_at,
    scene_split,
    split_sizes,
)

SIZE = 32


def colour_mask(image: np.ndarray, colour: str, tolerance: int = 13) -> np.ndarray:
    """``[H, W]`` pixels within the jitter of a palette colour."""
    reference = np.array(PALETTE[colour])[:, None, None]
    return (np.abs(image.astype(int) - reference) <= tolerance).all(axis=0)


def runs(flags: np.ndarray) -> int:
    """Number of maximal runs of True in a 1-D boolean array."""
    padded = np.concatenate([[False], flags, [False]]).astype(int)
    return int((np.diff(padded) == 1).sum())


def draw(scene: Scene, size: int = SIZE, seed: int = 3) -> np.ndarray:
    return render_scene(scene, size, np.random.default_rng(seed))


def test_group_rejects_unknown_values_naming_the_field():
    with pytest.raises(ValueError, match='colour'):
        ObjectGroup('pink', 'circle', 'small', 1, 'left')
    with pytest.raises(ValueError, match='count'):
        ObjectGroup('red', 'circle', 'small', 4, 'left')


def test_two_groups_must_sit_on_opposite_sides():
    left = ObjectGroup('red', 'circle', 'small', 1, 'left')
    with pytest.raises(ValueError, match='positions'):
        Scene((left, ObjectGroup('blue', 'square', 'small', 1, 'top')))
    with pytest.raises(ValueError, match='1 or 2'):
        Scene((left, ObjectGroup('blue', 'square', 'small', 1, 'right'),
               ObjectGroup('red', 'cross', 'large', 2, 'top')))


def test_description_ignores_mention_order():
    a = ObjectGroup('red', 'circle', 'small', 2, 'left')
    b = ObjectGroup('blue', 'square', 'large', 1, 'right')
    assert Scene((a, b)).description == Scene((b, a)).description
    assert Scene((a, b)).description == 'left: 2 small red circle; right: 1 large blue square'


def test_scene_space_and_split_sizes():
    scenes = all_scenes()
    # 5 positions x 144 groups, plus 2 opposite pairs x 144 x 144.
    assert len(scenes) == 5 * 144 + 2 * 144 * 144
    assert len({scene.description for scene in scenes}) == len(scenes)
    sizes = split_sizes()
    assert sum(sizes.values()) == len(scenes)
    assert 0.75 < sizes['train'] / len(scenes) < 0.85
    assert 0.08 < sizes['val'] / len(scenes) < 0.12


def test_scene_at_is_deterministic_and_in_its_split():
    for split in ('train', 'val', 'test'):
        for index in range(30):
            scene = scene_at(7, split, index)
            assert scene == scene_at.__wrapped__(7, split, index)  # drawn again, uncached
            assert scene_split(scene) == split
    assert [scene_at(0, 'train', i) for i in range(20)] != \
        [scene_at(1, 'train', i) for i in range(20)]


def test_splits_share_no_scene_description():
    descriptions = {split: {scene_at(0, split, i).description for i in range(300)}
                    for split in ('train', 'val', 'test')}
    assert not descriptions['train'] & descriptions['val']
    assert not descriptions['train'] & descriptions['test']
    assert not descriptions['val'] & descriptions['test']


def test_sampling_covers_every_attribute_and_layout():
    rng = np.random.default_rng(0)
    scenes = [sample_scene(rng) for _ in range(600)]
    groups = [group for scene in scenes for group in scene.groups]
    assert {g.colour for g in groups} == set(PALETTE)
    assert {g.shape for g in groups} == {'circle', 'square', 'triangle', 'cross'}
    assert {g.count for g in groups} == {1, 2, 3}
    assert {g.position for g in groups} == {'left', 'right', 'top', 'bottom', 'centre'}
    two_groups = sum(len(scene.groups) == 2 for scene in scenes)
    assert 240 < two_groups < 360


def test_render_is_deterministic_uint8_chw():
    scene = scene_at(0, 'train', 5)
    image = draw(scene)
    assert image.shape == (3, SIZE, SIZE) and image.dtype == np.uint8
    np.testing.assert_array_equal(image, draw(scene))
    assert draw(scene, size=64).shape == (3, 64, 64)
    with pytest.raises(ValueError, match='image_size'):
        draw(scene, size=15)


def test_left_and_right_groups_are_drawn_where_described():
    scene = Scene((ObjectGroup('red', 'circle', 'large', 1, 'left'),
                   ObjectGroup('blue', 'square', 'small', 2, 'right')))
    image = draw(scene)
    red, blue = colour_mask(image, 'red'), colour_mask(image, 'blue')
    half = SIZE // 2
    assert red[:, :half].sum() > 0 and red[:, half:].sum() == 0
    assert blue[:, half:].sum() > 0 and blue[:, :half].sum() == 0
    # A large circle (radius 0.13 * 32 = 4.2 px) covers about pi * 4.2^2 = 54 pixels.
    assert 40 <= red.sum() <= 70
    # Two objects stacked vertically: two separate bands of rows hold blue.
    assert runs(blue.any(axis=1)) == 2


def test_top_bottom_and_centre_groups_are_drawn_where_described():
    scene = Scene((ObjectGroup('yellow', 'cross', 'small', 3, 'top'),
                   ObjectGroup('white', 'triangle', 'large', 1, 'bottom')))
    image = draw(scene)
    yellow, white = colour_mask(image, 'yellow'), colour_mask(image, 'white')
    half = SIZE // 2
    assert yellow[:half].sum() > 0 and yellow[half:].sum() == 0
    assert white[half:].sum() > 0 and white[:half].sum() == 0
    assert runs(yellow.any(axis=0)) == 3
    centre = draw(Scene((ObjectGroup('green', 'square', 'large', 1, 'centre'),)))
    assert colour_mask(centre, 'green')[SIZE // 2, SIZE // 2]
    assert not colour_mask(centre, 'green')[:, :SIZE // 4].any()


def test_background_is_dark_grey():
    image = draw(Scene((ObjectGroup('red', 'circle', 'small', 1, 'centre'),)))
    corner = image[:, 0, 0]
    assert corner[0] == corner[1] == corner[2] and 10 <= corner[0] < 70


@pytest.mark.parametrize('shape', ['circle', 'square', 'triangle', 'cross'])
def test_shapes_have_their_own_silhouette(shape):
    image = draw(Scene((ObjectGroup('purple', shape, 'large', 1, 'centre'),)), size=64)
    mask = colour_mask(image, 'purple')
    rows, cols = np.nonzero(mask)
    box = mask[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    fill = box.mean()
    widths = box.sum(axis=1)
    if shape == 'square':
        assert fill == 1.0
    elif shape == 'circle':
        # A disc fills pi / 4 of its bounding box.
        assert 0.7 < fill < 0.86
    elif shape == 'triangle':
        assert widths[0] < widths[-1] / 3
        assert 0.4 < fill < 0.6
    else:
        # Two bars of width 2/3 r across a 2r box: the corners stay empty.
        assert not box[0, 0] and not box[-1, -1] and box[box.shape[0] // 2].all()


class MiddleDraws:
    """A stand-in generator whose every draw is the middle of its range: no nuisance at all
    (background level 39, objects exactly at their centres in their palette colours)."""

    def integers(self, low, high, size=None):
        middle = (low + high - 1) // 2
        return middle if size is None else np.full(size, middle)

    def uniform(self, low, high, size=None):
        return np.full(size, (low + high) / 2)


def still(scene: Scene, size: int = 128) -> np.ndarray:
    return render_scene(scene, size, MiddleDraws())


def centroid(mask: np.ndarray) -> tuple[float, float]:
    """``(x, y)`` of a mask's centre of mass, pixel ``k`` centred at ``k + 0.5``."""
    rows, cols = np.nonzero(mask)
    return float(cols.mean()) + 0.5, float(rows.mean()) + 0.5


@pytest.mark.parametrize('field, value', [('colour', 'pink'), ('shape', 'star'),
                                          ('size', 'medium'), ('count', 0),
                                          ('position', 'middle')])
def test_each_group_attribute_outside_its_values_is_refused_naming_it(field, value):
    attributes = dict(colour='red', shape='circle', size='small', count=1, position='left')
    with pytest.raises(ValueError, match=f'{field}={value!r}'):
        ObjectGroup(**{**attributes, field: value})


def test_a_scene_without_groups_is_refused():
    with pytest.raises(ValueError, match='1 or 2 object groups, got 0'):
        Scene(())


def test_split_sizes_are_the_documented_counts():
    # docs/data_synthetic.md: 33,726 / 4,332 / 4,134 scenes; they pin the hash of a description.
    assert split_sizes() == {'train': 33726, 'val': 4332, 'test': 4134}


def test_scene_at_is_the_first_draw_of_its_documented_stream_in_its_split():
    # docs/data_synthetic.md: scene i of a split comes from default_rng([seed, split_id, i]),
    # the split ids numbering train, val, test.
    for split_id, split in enumerate(('train', 'val', 'test')):
        for index in range(5):
            rng = np.random.default_rng([4, split_id, index])
            expected = sample_scene(rng)
            while scene_split(expected) != split:
                expected = sample_scene(rng)
            assert scene_at(4, split, index) == expected


def test_a_negative_index_or_seed_is_refused_naming_both():
    with pytest.raises(ValueError, match='seed=0, index=-1'):
        scene_at(0, 'train', -1)
    with pytest.raises(ValueError, match='seed=-2, index=0'):
        scene_at(-2, 'train', 0)


def test_the_two_groups_of_a_pair_are_mentioned_in_either_order():
    rng = np.random.default_rng(4)
    first_positions = {scene.groups[0].position for scene in (sample_scene(rng) for _ in range(200))
                       if len(scene.groups) == 2}
    assert first_positions == {'left', 'right', 'top', 'bottom'}


def test_the_smallest_allowed_image_has_sixteen_pixels():
    assert draw(scene_at(0, 'train', 0), size=16).shape == (3, 16, 16)


@pytest.mark.parametrize('shape, width, height', [
    # Radius r = 0.13 * 128 = 16.6 px: a disc 2r across; a square of half-side 0.85 r; a
    # triangle from r above its centre to 0.8 r below; a cross 2r across.
    ('circle', 2, 2), ('square', 1.7, 1.7), ('triangle', None, 1.8), ('cross', 2, 2)])
def test_shapes_span_their_fractions_of_the_radius(shape, width, height):
    radius = 0.13 * 128
    mask = colour_mask(still(Scene((ObjectGroup('red', shape, 'large', 1, 'centre'),))), 'red')
    rows, cols = np.nonzero(mask)
    assert abs(rows.max() + 1 - rows.min() - height * radius) <= 1
    if width is not None:
        assert abs(cols.max() + 1 - cols.min() - width * radius) <= 1


def test_a_square_covers_about_the_area_of_a_circle_of_its_size():
    # Side 1.7 r against a disc of radius r: 2.89 r^2 / 3.14 r^2 = 0.92.
    areas = {shape: colour_mask(still(Scene((ObjectGroup('red', shape, 'large', 1, 'centre'),))),
                                'red').sum() for shape in ('circle', 'square')}
    assert 0.85 < areas['square'] / areas['circle'] < 1.0


def test_a_large_object_has_the_area_of_its_radius_squared_against_a_small_one():
    areas = {size: colour_mask(still(Scene((ObjectGroup('red', 'circle', size, 1, 'left'),))),
                               'red').sum() for size in ('small', 'large')}
    # (0.13 / 0.085)^2 = 2.34.
    assert 2.2 < areas['large'] / areas['small'] < 2.5


@pytest.mark.parametrize('position', ['left', 'right', 'top', 'bottom', 'centre'])
def test_every_object_of_a_group_is_drawn_apart_from_the_others(position):
    def area(count):
        scene = Scene((ObjectGroup('green', 'square', 'large', count, position),))
        return colour_mask(still(scene), 'green').sum()

    # Equal squares at other sub-pixel offsets cover 28 x 28 or 29 x 29 pixels.
    one = area(1)
    assert area(2) == pytest.approx(2 * one, rel=0.1)
    assert area(3) == pytest.approx(3 * one, rel=0.1)


def test_the_background_level_varies_between_renderings_within_its_dark_range():
    scene = Scene((ObjectGroup('red', 'circle', 'small', 1, 'centre'),))
    levels = {int(draw(scene, seed=seed)[0, 0, 0]) for seed in range(30)}
    assert len(levels) > 5 and min(levels) >= 10 and max(levels) < 70


def test_objects_move_along_both_axes_by_at_most_the_position_jitter():
    scene = Scene((ObjectGroup('red', 'circle', 'large', 1, 'centre'),))
    centres = np.array([centroid(colour_mask(draw(scene, size=128, seed=seed), 'red'))
                        for seed in range(30)])
    # Up to 0.025 * 128 = 3.2 px either way of the image centre 64, the centroid within half a
    # pixel of the true centre.
    offsets = centres - 64
    assert np.abs(offsets).max() <= 3.2 + 0.5
    assert (offsets.max(axis=0) - offsets.min(axis=0) > 3).all()
    # The two axes are drawn apart: a shift along the diagonal alone would keep x == y.
    assert not np.allclose(offsets[:, 0], offsets[:, 1])


def test_each_channel_of_an_object_deviates_on_its_own_by_at_most_the_colour_jitter():
    scene = Scene((ObjectGroup('purple', 'square', 'large', 1, 'centre'),))
    deviations = np.array([draw(scene, size=64, seed=seed)[:, 32, 32].astype(int)
                           for seed in range(40)]) - np.array(PALETTE['purple'])
    assert np.abs(deviations).max() <= 12
    assert deviations.min() < -6 and deviations.max() > 6
    assert not (deviations == deviations[:, :1]).all()
