"""Scenes of the synthetic image–caption set: their semantics, sampling, splits and rendering.

A scene is one or two *object groups*. A group is ``count`` (1-3) objects of one colour, shape
and size, placed together at one position of the image. Two groups always sit on opposite sides
(left and right, or top and bottom), so that every object keeps a slot of its own.

Everything is a pure function of integers: the scene at index ``i`` of a split is drawn from
``np.random.default_rng([seed, split_id, i])``, so two processes (dataloader workers, a resumed
run) see the same data without sharing any state.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache, lru_cache
from itertools import product

import numpy as np

COLOURS = ('red', 'green', 'blue', 'yellow', 'purple', 'white')
SHAPES = ('circle', 'square', 'triangle', 'cross')
SIZES = ('small', 'large')
POSITIONS = ('left', 'right', 'top', 'bottom', 'centre')
COUNTS = (1, 2, 3)
SPLITS = ('train', 'val', 'test')

# RGB of each colour name; a rendered object deviates from it by at most COLOUR_JITTER per channel.
PALETTE: dict[str, tuple[int, int, int]] = {
    'red': (220, 40, 40),
    'green': (40, 180, 60),
    'blue': (50, 90, 230),
    'yellow': (235, 215, 40),
    'purple': (150, 60, 200),
    'white': (240, 240, 240),
}
COLOUR_JITTER = 12
# Background grey levels stay dark so that every palette colour contrasts with them.
BACKGROUND_LEVELS = (10, 70)

# Which positions two groups may take together (opposite sides never share pixels).
GROUP_PAIRS = (('left', 'right'), ('top', 'bottom'))
# Layouts a scene is drawn from: each single position, then each opposite pair; half of the
# scenes have one group, half two.
_LAYOUTS = tuple((position,) for position in POSITIONS) + GROUP_PAIRS
_LAYOUT_PROBABILITIES = np.array([0.5 / len(POSITIONS)] * len(POSITIONS)
                                 + [0.5 / len(GROUP_PAIRS)] * len(GROUP_PAIRS))
_LAYOUT_EDGES = np.cumsum(_LAYOUT_PROBABILITIES)

# Semantic split of the scene space: a description hashes to one of ten buckets, so a validation
# or test scene is a combination that training never showed (compositional generalisation, no
# memorised pairs).
_SPLIT_BUCKETS = {'train': range(0, 8), 'val': range(8, 9), 'test': range(9, 10)}
SPLIT_IDS = {name: index for index, name in enumerate(SPLITS)}

# Geometry as fractions of the image side. Radii: the large object's diameter (0.26) plus twice
# the jitter stays below the closest spacing of two objects of one group (0.32).
RADIUS = {'small': 0.085, 'large': 0.13}
POSITION_JITTER = 0.025
_STRIP_OFFSETS = {1: (0.5,), 2: (0.3, 0.7), 3: (0.17, 0.5, 0.83)}
_STRIP_LINE = {'left': 0.2, 'right': 0.8, 'top': 0.2, 'bottom': 0.8}
_CENTRE_CLUSTERS = {
    1: ((0.5, 0.5),),
    2: ((0.37, 0.37), (0.63, 0.63)),
    3: ((0.5, 0.33), (0.34, 0.64), (0.66, 0.64)),
}


@dataclass(frozen=True)
class ObjectGroup:
    """``count`` objects of one colour, shape and size at one position."""

    colour: str
    shape: str
    size: str
    count: int
    position: str

    def __post_init__(self) -> None:
        for field, value, allowed in (('colour', self.colour, COLOURS),
                                      ('shape', self.shape, SHAPES),
                                      ('size', self.size, SIZES),
                                      ('count', self.count, COUNTS),
                                      ('position', self.position, POSITIONS)):
            if value not in allowed:
                raise ValueError(f'ObjectGroup {field}={value!r} is not one of {allowed}')

    @property
    def description(self) -> str:
        """Canonical text of the group, e.g. ``'left: 2 small red circle'``."""
        return f'{self.position}: {self.count} {self.size} {self.colour} {self.shape}'


@dataclass(frozen=True)
class Scene:
    """One or two object groups; two groups sit on opposite sides (see ``GROUP_PAIRS``).

    The order of ``groups`` is the order captions mention them in; it carries no meaning, so
    :attr:`description` sorts it away.
    """

    groups: tuple[ObjectGroup, ...]

    def __post_init__(self) -> None:
        if len(self.groups) not in (1, 2):
            raise ValueError(f'a Scene has 1 or 2 object groups, got {len(self.groups)}')
        if len(self.groups) == 2:
            pair = tuple(sorted(group.position for group in self.groups))
            if pair not in {tuple(sorted(allowed)) for allowed in GROUP_PAIRS}:
                raise ValueError(f'two groups of a Scene must sit at one of {GROUP_PAIRS}, '
                                 f'got positions {pair}')

    @property
    def description(self) -> str:
        """Canonical description: equal for two scenes exactly when they mean the same."""
        return '; '.join(sorted(group.description for group in self.groups))


def scene_split(scene: Scene) -> str:
    """The split (``'train'``, ``'val'`` or ``'test'``) a scene's semantics belong to."""
    digest = hashlib.blake2b(scene.description.encode('utf-8'), digest_size=8).digest()
    bucket = int.from_bytes(digest, 'little') % 10
    return next(name for name, buckets in _SPLIT_BUCKETS.items() if bucket in buckets)


def check_split(split: str) -> int:
    """The id of ``split``; raises a ValueError naming the allowed splits otherwise."""
    if split not in SPLIT_IDS:
        raise ValueError(f'split={split!r} is not one of {SPLITS}')
    return SPLIT_IDS[split]


def sample_scene(rng: np.random.Generator) -> Scene:
    """Draw a scene: one group (at any position) or two (on opposite sides), half each.

    Attributes are uniform; the two groups of a pair are mentioned in random order.
    """
    layout_draw, order_draw = rng.random(2)
    layout = _LAYOUTS[int(np.searchsorted(_LAYOUT_EDGES, layout_draw, side='right'))]
    if order_draw < 0.5:
        layout = layout[::-1]
    attributes = rng.integers(0, (len(COLOURS), len(SHAPES), len(SIZES), len(COUNTS)),
                              size=(len(layout), 4))
    return Scene(tuple(
        ObjectGroup(colour=COLOURS[colour], shape=SHAPES[shape], size=SIZES[size],
                    count=COUNTS[count], position=position)
        for position, (colour, shape, size, count) in zip(layout, attributes.tolist())))


# A pair dataset asks for each scene once per language and epoch, in shuffled order: the cache
# holds a whole split of the demo (its 20,000 training scenes and 1,500 evaluation ones, about
# 10 MB), so each is drawn once (a cache of 1,024 missed 38,366 of 38,400 reads in training,
# 0.05 ms a miss: about 17 of the demo's 350 CPU-seconds).
@lru_cache(maxsize=1 << 15)
def scene_at(seed: int, split: str, index: int) -> Scene:
    """The scene at ``index`` of ``split``: the first draw of its stream that belongs to the split.

    Args:
        seed: non-negative seed of the whole set.
        split: ``'train'``, ``'val'`` or ``'test'``.
        index: non-negative position in the split's stream.
    """
    split_id = check_split(split)
    if seed < 0 or index < 0:
        raise ValueError(f'seed and index must be non-negative, got seed={seed}, index={index}')
    rng = np.random.default_rng([seed, split_id, index])
    while True:
        scene = sample_scene(rng)
        if scene_split(scene) == split:
            return scene


def all_scenes() -> list[Scene]:
    """Every distinct scene (one per description): 720 with one group, 41,472 with two."""
    groups_at = {
        position: [ObjectGroup(colour, shape, size, count, position)
                   for colour, shape, size, count in product(COLOURS, SHAPES, SIZES, COUNTS)]
        for position in POSITIONS}
    scenes = [Scene((group,)) for position in POSITIONS for group in groups_at[position]]
    for first, second in GROUP_PAIRS:
        scenes.extend(Scene((a, b)) for a in groups_at[first] for b in groups_at[second])
    return scenes


@cache
def split_sizes() -> dict[str, int]:
    """Number of distinct scenes (descriptions) each split holds: about 80% / 10% / 10%."""
    sizes = dict.fromkeys(SPLITS, 0)
    for scene in all_scenes():
        sizes[scene_split(scene)] += 1
    return sizes


def object_centres(group: ObjectGroup) -> tuple[tuple[float, float], ...]:
    """Centres ``(x, y)`` of a group's objects before jitter, as fractions of the image side.

    Groups at the sides line their objects up along the edge; a centre group forms a compact
    cluster, which a pair of side groups can never imitate.
    """
    if group.position == 'centre':
        return _CENTRE_CLUSTERS[group.count]
    line = _STRIP_LINE[group.position]
    offsets = _STRIP_OFFSETS[group.count]
    if group.position in ('left', 'right'):
        return tuple((line, offset) for offset in offsets)
    return tuple((offset, line) for offset in offsets)


def _shape_mask(shape: str, dx: np.ndarray, dy: np.ndarray, radius: float) -> np.ndarray:
    """Pixels of one shape, from pixel offsets ``dx``, ``dy`` ``[H, W]`` to its centre."""
    if shape == 'circle':
        return dx * dx + dy * dy <= radius * radius
    if shape == 'square':
        # A slightly smaller half-side than the radius keeps the two shapes' areas comparable,
        # so size never betrays the shape.
        half = 0.85 * radius
        return (np.abs(dx) <= half) & (np.abs(dy) <= half)
    if shape == 'triangle':
        # Apex up; the half-width grows linearly from the apex to the base.
        return (dy >= -radius) & (dy <= 0.8 * radius) & (np.abs(dx) <= 0.62 * (dy + radius))
    bar = 0.33 * radius
    inside = (np.abs(dx) <= radius) & (np.abs(dy) <= radius)
    return inside & ((np.abs(dx) <= bar) | (np.abs(dy) <= bar))


def render_scene(scene: Scene, image_size: int, rng: np.random.Generator) -> np.ndarray:
    """Draw a scene on a dark grey background.

    ``rng`` only draws what carries no meaning: the background level, each object's offset (up
    to ``POSITION_JITTER`` of the side) and colour deviation (up to ``COLOUR_JITTER``).

    Args:
        scene: what to draw.
        image_size: side ``S`` in pixels (at least 16).
        rng: source of the nuisance variation.

    Returns:
        ``[3, S, S]`` uint8 RGB image.
    """
    if image_size < 16:
        raise ValueError(f'image_size must be at least 16 pixels, got {image_size}')
    coords = np.arange(image_size, dtype=np.float32) + 0.5
    background = int(rng.integers(*BACKGROUND_LEVELS))
    image = np.full((image_size, image_size, 3), background, dtype=np.uint8)
    for group in scene.groups:
        radius = RADIUS[group.size] * image_size
        base_colour = np.array(PALETTE[group.colour])
        for centre_x, centre_y in object_centres(group):
            jitter = rng.uniform(-POSITION_JITTER, POSITION_JITTER, size=2) * image_size
            colour = base_colour + rng.integers(-COLOUR_JITTER, COLOUR_JITTER + 1, size=3)
            dx = coords[None, :] - (centre_x * image_size + jitter[0])
            dy = coords[:, None] - (centre_y * image_size + jitter[1])
            image[_shape_mask(group.shape, dx, dy, radius)] = np.clip(colour, 0, 255)
    return np.ascontiguousarray(image.transpose(2, 0, 1))
