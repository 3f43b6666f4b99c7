"""What the converters' command lines share: converting, writing and reporting in one step."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from xmr.datasets.annotation import Annotation, AnnotationError, dump_annotations
from xmr.datasets.converters.errors import ConversionError

__all__ = ['write_converted']


def write_converted(convert: Callable[[], Mapping[str, Annotation]], out_dir: Path,
                    unit: str) -> None:
    """Run a conversion, write each annotation to ``<out_dir>/<name>.json``, report each file.

    Args:
        convert: the conversion; returns output name -> annotation.
        out_dir: where the files go (written atomically, all or none).
        unit: what an item is, for the report line (``'images'``, ``'videos'``).

    Raises:
        SystemExit: on a bad input, with the converter's message; nothing is written then.
    """
    try:
        outputs = convert()
        written = dump_annotations({out_dir / f'{name}.json': ann
                                    for name, ann in outputs.items()})
    except (ConversionError, AnnotationError) as err:
        raise SystemExit(f'error: {err}') from err
    for path, ann in zip(written, outputs.values()):
        print(f'{path}: {len(ann.items)} {unit}, languages {", ".join(ann.languages)}')
