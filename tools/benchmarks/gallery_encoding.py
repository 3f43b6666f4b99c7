"""Time a gallery's encoding (``xmr.apis.encode_readable_media``, what ``tools/search.py`` and
``MediaIndex.from_media`` run) with its files decoded in turn or by worker processes.

The model is the demo's tiny CLIP (``configs/demo/static_tiny-clip_synthetic.py``, random
weights, 32 px): its forward costs next to nothing, so the figures are those of reading the
files, what a gallery encoded on a GPU waits for. Images are JPEGs written here (smooth
gradients with mild noise, as photos compress); ``--videos`` adds video files, each given
``--video-copies`` times. Every row encodes the same files and must give the same embeddings,
bit for bit (printed).

Example::

    python tools/benchmarks/gallery_encoding.py --images 300 --workers 0,1,2
    python tools/benchmarks/gallery_encoding.py --images 0 --videos ../shared/data/videos/*.mp4 \
        --video-copies 15
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from xmr.utils.cli import (
    GatherAction,
    UserError,
    comma_list,
    given_device,
    given_file,
    int_at_least,
    run_tool,
)

DEMO_CONFIG = Path(__file__).resolve().parents[2] / 'configs/demo/static_tiny-clip_synthetic.py'


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, each checked before the gallery is written (minutes of JPEGs at the
    default sizes): a size, a worker count, a video or the device."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--images', type=int_at_least(0), default=300,
                        help='JPEG files to write')
    parser.add_argument('--size', type=image_size, default='1280x960',
                        help='their width x height')
    parser.add_argument('--videos', nargs='*', action=GatherAction,
                        default=[], help='video files to add')
    parser.add_argument('--video-copies', type=int_at_least(1), default=4,
                        help='copies of each video')
    parser.add_argument('--workers', type=comma_list(int_at_least(0), '0,1,2'), default='0,1,2',
                        help='worker counts, one row each')
    parser.add_argument('--batch-size', type=int_at_least(1), default=32,
                        help='media encoded per call')
    parser.add_argument('--device', default='cpu', help="where the model runs ('cuda': the "
                        'decoding alone is timed, as on a GPU host)')
    args = parser.parse_args(argv)
    try:
        given_device(args.device)
        for video in args.videos:
            given_file(video, '--videos', 'give video files that exist')
    except UserError as error:
        parser.error(str(error))
    return args


def image_size(text: str) -> tuple[int, int]:
    """``--size``: ``'1280x960'`` -> ``(1280, 960)``."""
    try:
        width, height = map(int_at_least(1), text.lower().split('x'))
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(
            f'{text!r} is no WIDTHxHEIGHT of whole numbers >= 1') from None
    return width, height


def write_images(folder: Path, count: int, width: int, height: int) -> list[Path]:
    """``count`` JPEGs of smooth colour gradients with mild noise, seeded."""
    from PIL import Image

    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 1, width)[None, :, None] * np.linspace(0, 1, height)[:, None, None]
    paths = []
    for number in range(count):
        colour = rng.uniform(0, 255, size=3)
        pixels = ramp * colour + rng.normal(0, 6, size=(height, width, 3))
        paths.append(folder / f'image{number:05d}.jpg')
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(paths[-1], quality=90)
    return paths


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from xmr.apis import encode_readable_media, init_retriever

    width, height = args.size
    folder = Path(tempfile.mkdtemp(prefix='xmr_gallery_'))
    try:
        files = write_images(folder, args.images, width, height)
        for video in map(Path, args.videos):
            for copy in range(args.video_copies):
                files.append(shutil.copy(video, folder / f'{video.stem}_{copy}{video.suffix}'))
        model = init_retriever(str(DEMO_CONFIG), device=args.device)
        encode_readable_media(model, files[:2])  # the first call's one-off costs
        print(f'{len(files)} media ({args.images} JPEGs of {width}x{height}, '
              f'{len(files) - args.images} videos), batch {args.batch_size}, '
              f'{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, device '
              f'{args.device}')
        print('| workers | seconds | media/s | vs the first row | same embeddings |')
        print('|---:|---:|---:|---:|---|')
        first = None
        for workers in args.workers:
            started = time.perf_counter()
            embeddings, _ = encode_readable_media(model, files, batch_size=args.batch_size,
                                                  num_workers=workers)
            seconds = time.perf_counter() - started
            first = first or (seconds, embeddings)
            same = 'yes' if torch.equal(embeddings, first[1]) else 'NO'
            print(f'| {workers} | {seconds:.2f} | {len(files) / seconds:.1f} | '
                  f'{first[0] / seconds:.2f}x | {same} |', flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == '__main__':
    run_tool(main)
