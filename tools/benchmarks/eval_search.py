"""Time retrieval evaluation and faiss search on synthetic embeddings.

Each (case, method) row runs in a fresh subprocess, so its peak RSS (``resource``) is its own.
Gallery rows are random unit vectors; query ``i`` is gallery row ``i mod G`` plus Gaussian noise,
renormalised, so every query has a true positive and neighbours are meaningful.

Quality: R@1 of the true positive; for approximate indexes also the share of the exact top-k
they return (on random data, the worst case for IVF: beyond the positive, neighbours have no
cluster structure to exploit).

Methods:
  ranks   exact ranks of every query's positive by chunked inner products (what
          RetrievalMetric does with the default ``search=dict(index='flat')``)
  flat    faiss IndexFlatIP top-k (exact)
  ivf     faiss IndexIVFFlat top-k (approximate)
  hnsw    faiss IndexHNSWFlat top-k (approximate; skipped above --hnsw-max-gallery)
  metric  RetrievalMetric end to end, both directions, Q/G captions per media (Q a multiple
          of G only); queries/s counts captions and media

Example (the full sizes of the issue, then a quick reduced run)::

    python tools/benchmarks/eval_search.py
    python tools/benchmarks/eval_search.py --cases 25000x5000,1000x100000 --dim 256
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time

import torch

from xmr.utils.cli import int_at_least, run_tool

METHODS = ('ranks', 'flat', 'ivf', 'hnsw', 'metric')


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--cases', default='25000x5000,10000x1000000',
                        help='comma-separated QUERIESxGALLERY sizes')
    parser.add_argument('--dim', type=int, default=512, help='embedding width E')
    parser.add_argument('--methods', default=','.join(METHODS),
                        help=f'comma-separated subset of {METHODS}')
    parser.add_argument('--k', type=int_at_least(1), default=10,
                        help='neighbours per query (top-k methods)')
    parser.add_argument('--noise', type=float, default=1.0,
                        help='std of the per-dimension query noise, in units of 1/sqrt(E)')
    parser.add_argument('--chunk-size', type=int, default=None,
                        help='queries per block (ranks) or per faiss call; default: automatic')
    parser.add_argument('--nlist', type=int, default=None,
                        help='IVF cells; default 4*sqrt(G) capped at 1024')
    parser.add_argument('--nprobe', type=int, default=16, help='IVF cells visited per query')
    parser.add_argument('--hnsw-m', type=int, default=32, help='HNSW links per node')
    parser.add_argument('--ef-search', type=int, default=128, help='HNSW search list')
    parser.add_argument('--hnsw-max-gallery', type=int, default=200_000,
                        help='skip HNSW above this gallery size (its build is slow on few cores)')
    parser.add_argument('--quality-queries', type=int, default=256,
                        help='queries whose approximate top-k is compared with brute force')
    parser.add_argument('--seed', type=int, default=0, help='seed of the embeddings drawn')
    parser.add_argument('--worker', nargs=2, metavar=('CASE', 'METHOD'), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def parse_case(case: str) -> tuple[int, int]:
    try:
        queries, gallery = (int(part) for part in case.lower().split('x'))
    except ValueError as error:
        raise SystemExit(f"bad case '{case}': expected QUERIESxGALLERY, e.g. 25000x5000") from error
    if queries < 1 or gallery < 1:
        raise SystemExit(f"bad case '{case}': sizes must be positive.")
    return queries, gallery


def make_data(num_queries: int, gallery_size: int, dim: int, noise: float,
              seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unit gallery ``[G, E]``, noisy unit queries ``[Q, E]``, each query's positive row ``[Q]``."""
    generator = torch.Generator().manual_seed(seed)
    gallery = torch.empty(gallery_size, dim)
    # Filled in slices so that a 1M gallery never needs a second full-size temporary.
    for start in range(0, gallery_size, 65536):
        rows = gallery[start:start + 65536]
        rows.normal_(generator=generator)
        rows /= rows.norm(dim=1, keepdim=True)
    positives = torch.arange(num_queries) % gallery_size
    queries = gallery[positives] + noise / math.sqrt(dim) * torch.randn(
        num_queries, dim, generator=generator)
    queries /= queries.norm(dim=1, keepdim=True)
    return gallery, queries, positives


def run_worker(args: argparse.Namespace) -> dict:
    from xmr.evaluation import FaissSearcher, RetrievalMetric, exact_ranks

    case, method = args.worker
    num_queries, gallery_size = parse_case(case)
    gallery, queries, positives = make_data(num_queries, gallery_size, args.dim, args.noise,
                                            args.seed)
    row = {'case': case, 'method': method, 'build_s': 0.0, 'quality': ''}
    if method == 'ranks':
        start = time.perf_counter()
        ranks = exact_ranks(queries, gallery, positives, torch.arange(gallery_size),
                            chunk_size=args.chunk_size)
        row['run_s'] = time.perf_counter() - start
        row['queries'] = num_queries
        row['quality'] = f'R@1 {100 * (ranks == 1).double().mean():.1f}%'
    elif method == 'metric':
        row.update(time_metric(queries, gallery, positives, RetrievalMetric))
    else:
        options = {'chunk_size': args.chunk_size or 4096}
        if method == 'ivf':
            nlist = args.nlist or max(1, min(1024, round(4 * math.sqrt(gallery_size)),
                                            gallery_size // 39))
            options.update(nlist=nlist, nprobe=args.nprobe, train_size=64 * nlist)
        elif method == 'hnsw':
            options.update(hnsw_m=args.hnsw_m, ef_search=args.ef_search)
        start = time.perf_counter()
        searcher = FaissSearcher(gallery, index=method, **options)
        row['build_s'] = time.perf_counter() - start
        start = time.perf_counter()
        _, indices = searcher.search(queries, args.k)
        row['run_s'] = time.perf_counter() - start
        row['queries'] = num_queries
        row['quality'] = f'R@1 {100 * (indices[:, 0] == positives).double().mean():.1f}%'
        if method != 'flat':
            sample = min(args.quality_queries, num_queries)
            truth = (queries[:sample] @ gallery.T).topk(args.k, dim=1).indices
            overlap = sum(len(set(a.tolist()) & set(t.tolist()))
                          for a, t in zip(indices[:sample], truth))
            row['quality'] += f', overlap@{args.k} with exact {overlap / truth.numel():.3f}'
    row['queries_per_s'] = row['queries'] / row['run_s']
    row['peak_rss_mib'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def time_metric(queries: torch.Tensor, gallery: torch.Tensor, positives: torch.Tensor,
                metric_class: type) -> dict:
    per_media = queries.shape[0] // gallery.shape[0]
    order = positives.argsort(stable=True)
    captions = queries[order].view(gallery.shape[0], per_media, -1)
    samples = [{'media_id': str(i), 'media_embedding': gallery[i],
                'caption_embeddings': {'de': captions[i]}} for i in range(gallery.shape[0])]
    metric = metric_class(recall_ks=(1, 5, 10))
    start = time.perf_counter()
    for begin in range(0, len(samples), 256):
        metric.process({}, samples[begin:begin + 256])
    result = metric.compute_metrics(metric.results)
    return {'run_s': time.perf_counter() - start,
            'queries': queries.shape[0] + gallery.shape[0],
            'quality': f"t2i R@1 {result['de/t2i_R@1']:.1f}%, AR {result['de/AR']:.1f}"}


def skip_reason(method: str, num_queries: int, gallery_size: int,
                args: argparse.Namespace) -> str | None:
    if method == 'hnsw' and gallery_size > args.hnsw_max_gallery:
        return f'skipped: gallery > --hnsw-max-gallery {args.hnsw_max_gallery}'
    if method == 'metric' and (num_queries < gallery_size or num_queries % gallery_size):
        return 'skipped: needs queries = a multiple of the gallery (captions per media)'
    if method in ('flat', 'ivf', 'hnsw') and args.k > gallery_size:
        return f'skipped: k = {args.k} > gallery'
    return None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args)))
        return
    methods = [m for m in args.methods.split(',') if m]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise SystemExit(f'unknown methods {unknown}; choose from {METHODS}.')
    # Every case read before the first row: a bad one later on failed after minutes of rows.
    cases = [(case, *parse_case(case)) for case in args.cases.split(',') if case]
    forwarded = list(argv if argv is not None else sys.argv[1:])
    rows = []
    for case, num_queries, gallery_size in cases:
        for method in methods:
            reason = skip_reason(method, num_queries, gallery_size, args)
            if reason:
                rows.append({'case': case, 'method': method, 'quality': reason})
                continue
            command = [sys.executable, __file__, *forwarded, '--worker', case, method]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f'{case} {method} failed:\n{done.stderr}')
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f'done: {case} {method}', file=sys.stderr, flush=True)
    print(f'E = {args.dim}, k = {args.k}, torch threads = {torch.get_num_threads()}\n')
    print('| queries × gallery | method | build s | run s | queries/s | peak RSS MiB | quality |')
    print('|---|---|---|---|---|---|---|')
    for row in rows:
        if 'run_s' not in row:
            print(f"| {row['case']} | {row['method']} | | | | | {row['quality']} |")
            continue
        print(f"| {row['case']} | {row['method']} | {row['build_s']:.2f} | {row['run_s']:.2f} | "
              f"{row['queries_per_s']:,.0f} | {row['peak_rss_mib']:,.0f} | {row['quality']} |")


if __name__ == '__main__':
    run_tool(main)
