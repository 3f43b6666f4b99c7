"""The memory a training dataset holds for its annotation, and what its loader workers copy.

Writes a synthetic annotation of the size asked for (CC3M: 3M images, one caption each, one
translation; CC300K: 300k images, six translations), then, in a fresh process per mode, builds
a ``CaptionPairDataset`` on it (text only) and forks ``--workers`` processes that read the items
as a ``DataLoader``'s workers would (worker ``w`` the items ``i`` with ``i % workers == w``)::

    python tools/benchmarks/annotation_memory.py --items 3000000 --translations 1
    python tools/benchmarks/annotation_memory.py --items 300000 --translations 6

Modes: ``packed``, the records in a :class:`~xmr.datasets.record_store.RecordStore` (what a
dataset holds); ``objects``, the records as Python objects in a list (what a dataset held
before the store; both read the file a chunk at a time, one item at a time). Figures per mode:
the dataset's build time (wall and CPU), the
process's resident memory the dataset adds (``VmRSS`` after the build less before it), the
process's peak (``VmHWM``), and each worker's private dirty memory grown over its pass
(``Private_Dirty`` of ``/proc/<pid>/smaps_rollup``: the pages it copied). Linux only.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from xmr.utils.cli import UserError, given_file, run_tool

MODES = ('packed', 'objects')
LANGUAGES = ('de', 'fr', 'cs', 'zh', 'ja', 'vi', 'es', 'it', 'ru')


def write_annotation(path: Path, items: int, translations: int) -> None:
    """A text annotation of ``items`` records: one English caption of about CC3M's length
    (10 words) and its translation into each of the first ``translations`` languages."""
    from xmr.datasets import Annotation, MediaRecord, dump_annotation

    langs = list(LANGUAGES[:translations])
    records = [MediaRecord(f'{i:08d}', None,
                           {'en': [f'photo {i} of a young dog running across the green grass']},
                           {lang: [f'{lang} {i} traduction du chien qui court sur l’herbe verte']
                            for lang in langs})
               for i in range(items)]
    dump_annotation(Annotation(dataset='synthetic', split='train', media_type='text',
                               languages=['en'], source_lang='en', translation_langs=langs,
                               items=records), path)


def _status(pid: int | str = 'self') -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of ``/proc/<pid>/status``, in KiB."""
    fields = {}
    for line in Path(f'/proc/{pid}/status').read_text(encoding='utf-8').splitlines():
        key, _, value = line.partition(':')
        if key in ('VmRSS', 'VmHWM'):
            fields[key] = int(value.split()[0])
    return fields


def _private_dirty() -> int:
    """This process's ``Private_Dirty`` in KiB: the pages only it holds written."""
    for line in Path('/proc/self/smaps_rollup').read_text(encoding='utf-8').splitlines():
        if line.startswith('Private_Dirty:'):
            return int(line.split()[1])
    raise RuntimeError('/proc/self/smaps_rollup has no Private_Dirty')


def _worker(dataset, worker: int, workers: int, out) -> None:
    before = _private_dirty()
    for index in range(worker, len(dataset), workers):
        dataset[index]
    out.put((worker, _private_dirty() - before))


def measure(ann_file: Path, mode: str, workers: int) -> dict[str, float]:
    """Build the dataset in this process in ``mode`` and fork the workers (run it in a fresh
    process: the figures are this process's)."""
    import xmr.datasets.base as base
    from xmr.datasets import CaptionPairDataset

    def build(path: Path) -> CaptionPairDataset:
        return CaptionPairDataset(path, with_media=False,
                                  transform=dict(type='MediaTransform', backbone=None, size=8))

    if mode == 'objects':
        base.RecordStore = list  # the dataset loads its annotation with items=RecordStore
    with tempfile.TemporaryDirectory() as folder:  # the imports' and registries' own memory
        write_annotation(Path(folder) / 'one.json', 1, 1)
        build(Path(folder) / 'one.json')
    rss_before = _status()['VmRSS']
    wall, cpu = time.perf_counter(), time.process_time()
    dataset = build(ann_file)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    status = _status()
    context = multiprocessing.get_context('fork')
    out = context.Queue()
    processes = [context.Process(target=_worker, args=(dataset, w, workers, out))
                 for w in range(workers)]
    for process in processes:
        process.start()
    copied = dict(out.get() for _ in processes)
    for process in processes:
        process.join()
    return {'items': len(dataset), 'build_s': wall, 'build_cpu_s': cpu,
            'rss_mib': (status['VmRSS'] - rss_before) / 1024, 'peak_mib': status['VmHWM'] / 1024,
            'worker_copied_mib': [copied[w] / 1024 for w in range(workers)]}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--items', type=int, default=300_000, help='records (images)')
    parser.add_argument('--translations', type=int, default=6,
                        help=f'translation languages, at most {len(LANGUAGES)}')
    parser.add_argument('--workers', type=int, default=2, help='forked readers')
    parser.add_argument('--modes', default=','.join(MODES), help=f'of {MODES}')
    parser.add_argument('--ann-file', type=Path, help='an annotation to read instead of writing '
                        'a synthetic one')
    parser.add_argument('--measure', choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure is not None:
        print(json.dumps(measure(args.ann_file, args.measure, args.workers)))
        return
    modes = args.modes.split(',')
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ValueError(f'--modes {unknown} unknown; choose from {MODES}')
    if not 0 <= args.translations <= len(LANGUAGES):
        raise ValueError(f'--translations {args.translations} must be 0 to {len(LANGUAGES)}')
    if args.ann_file is not None:
        try:
            given_file(args.ann_file, '--ann-file', 'give an xmr annotation (docs/data.md)')
        except UserError as error:
            parser.error(str(error))
    with tempfile.TemporaryDirectory() as folder:
        ann_file = args.ann_file
        if ann_file is None:
            ann_file = Path(folder) / 'synthetic.json'
            write_annotation(ann_file, args.items, args.translations)
        print(f'{ann_file.name}: {ann_file.stat().st_size / 2**20:.0f} MiB, '
              f'{args.workers} workers\n')
        print('| mode | items | build s (CPU s) | dataset RSS MiB | peak MiB | each worker '
              'copied MiB |')
        print('|---|---:|---:|---:|---:|---|')
        for mode in modes:
            result = subprocess.run(
                [sys.executable, __file__, '--measure', mode, '--ann-file', str(ann_file),
                 '--workers', str(args.workers)], capture_output=True, text=True,
                env={**os.environ, 'OMP_NUM_THREADS': '1'})
            if result.returncode != 0:  # its error, captured, is the one to show
                raise RuntimeError(f'annotation_memory row {mode} failed:\n'
                                   f'{result.stderr[-4000:]}')
            row = json.loads(result.stdout.splitlines()[-1])
            copied = ', '.join(f'{value:.0f}' for value in row['worker_copied_mib'])
            print(f"| {mode} | {row['items']:,} | {row['build_s']:.1f} "
                  f"({row['build_cpu_s']:.1f}) | {row['rss_mib']:.0f} | {row['peak_mib']:.0f} | "
                  f'{copied} |')


if __name__ == '__main__':
    run_tool(main)
