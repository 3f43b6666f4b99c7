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
