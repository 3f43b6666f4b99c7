"""Search a model's validation gallery with its own captions, ranked as ``MediaIndex.search``
ranks: time per query, recall, and the same recalls from evaluation's ranking functions.

The validation set of ``CONFIG`` (its ``val_dataloader``'s dataset, the first when it lists
several) is written as PNG files, the gallery ``MediaIndex.from_media`` encodes (with its media
tokens for a model that scores by them, and again without), and each of its captions in
``--lang`` is a query whose one positive is its image. Per ranking (``--candidates``: the token
score of the whole gallery, ``all``, or of the pooled cosine's best N, at least the 10 hits
each search returns; then the pooled cosine, as a gallery without tokens ranks), a row gives
the queries a second (encoding included), t2i R@1/5/10 of the search's hits, and the same
recalls from evaluation's ranks (``token_ranks`` / ``exact_ranks``) on the same encodings,
which must agree (ties aside, which evaluation counts against the query).
``--token-dtype float16`` stores the index's media tokens in float16
(``MediaIndex(token_dtype=...)``): the search's recalls are then those of the float16 store,
evaluation's still those of the model's float32 tokens, and the header gives the size of the
index file it saves (``MediaIndex.save``).

Example (the CDDS demo, ``docs/methods/cdds.md``)::

    python tools/train.py configs/cdds/cdds_tiny-clip_synthetic.py --work-dir work_dirs/cdds_demo
    python tools/benchmarks/token_search.py configs/cdds/cdds_tiny-clip_synthetic.py \
        work_dirs/cdds_demo/iter_900.pth --candidates all,100,10
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from xmr.utils.cli import (
    UserError,
    comma_list,
    given_device,
    given_file,
    int_at_least,
    run_tool,
)

#: The recalls printed, ``R@K``.
RECALLS = (1, 5, 10)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked before the model is built."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config', help='the config of a model that scores by tokens')
    parser.add_argument('checkpoint', help='its trained checkpoint')
    parser.add_argument('--lang', default='en', help="the captions' language (default: en)")
    parser.add_argument('--candidates', type=comma_list(candidate_count, 'all,100'),
                        default='all,100', help="rankings by the token score: 'all' (the whole "
                        'gallery) or a shortlist length, one row each (default: all,100)')
    parser.add_argument('--limit', type=int_at_least(1),
                        help='the first N media of the validation set only')
    parser.add_argument('--token-dtype', choices=('float32', 'float16'), default='float32',
                        help="what the index stores its media tokens in (default: float32, "
                        "evaluation's)")
    parser.add_argument('--device', default='cpu', help='where the model runs and scores')
    args = parser.parse_args(argv)
    try:
        given_device(args.device)
        for name in ('config', 'checkpoint'):
            given_file(getattr(args, name), name, f'give the {name} of a trained model')
    except UserError as error:
        parser.error(str(error))
    return args


def candidate_count(text: str) -> int | None:
    """One ``--candidates`` entry: ``'all'`` (``None``) or a shortlist length >= 1."""
    return None if text == 'all' else int_at_least(1)(text)


def write_gallery(model, folder: Path, lang: str, limit: int | None
                  ) -> tuple[list[Path], list[str], list[int]]:
    """The validation images as PNG files, the captions in ``lang`` and each one's image."""
    from mmengine.registry import DefaultScope
    from PIL import Image

    from xmr.registry import DATASETS
    from xmr.run_config import loader_datasets

    with DefaultScope.overwrite_default_scope('xmr'):
        dataset = DATASETS.build(loader_datasets(model.cfg, 'val')[0])
    files, captions, owners = [], [], []
    for row in range(min(len(dataset), limit or len(dataset))):
        item = dataset[row]
        if item['media'].dim() != 3:
            raise UserError(f"{model.cfg.filename}: val media {item['media_id']}",
                            f"is a video {tuple(item['media'].shape)}", 'give an image gallery')
        files.append(folder / f'{row:06d}.png')
        Image.fromarray(item['media'].permute(1, 2, 0).numpy()).save(files[-1])
        captions += item['captions'][lang]
        owners += [row] * len(item['captions'][lang])
    return files, captions, owners


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from xmr.apis import (
        MediaIndex,
        encode_gallery,
        encode_text_tokens,
        encode_texts,
        init_retriever,
    )
    from xmr.evaluation.search import exact_ranks
    from xmr.evaluation.token_scoring import TokenScoring, token_ranks

    model = init_retriever(args.config, args.checkpoint, device=args.device)
    if model.token_score() is None:
        raise UserError(args.config, f'{type(model).__name__} scores by the cosine of its '
                        'embeddings (token_score() is None)', 'give a model that scores by '
                        "tokens (CDDS: retrieval_score='patch_word')")
    folder = Path(tempfile.mkdtemp(prefix='xmr_token_search_'))
    try:
        files, captions, owners = write_gallery(model, folder, args.lang, args.limit)
        gallery = encode_gallery(model, files, tokens=True)
        index = MediaIndex(gallery.embeddings, [str(row) for row in range(len(files))],
                           tokens=gallery.tokens, token_dtype=getattr(torch, args.token_dtype))
        index_bytes = index.save(folder / 'gallery.idx').stat().st_size
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    embeddings, tokens = encode_text_tokens(model, captions, args.lang)
    owner, media_rows = torch.tensor(owners), torch.arange(len(files))
    stored = index.tokens.tokens
    print(f'{len(files)} media, {len(captions)} {args.lang} captions, {type(model).__name__}, '
          f'{args.device}; media tokens {tuple(stored.shape)} {args.token_dtype}, '
          f'{stored.numel() * stored.element_size() / 1e6:.1f} MB; index file '
          f'{index_bytes:,} bytes')
    print('| ranking | queries/s | ' + ' | '.join(f'R@{k}' for k in RECALLS) + ' | '
          + ' | '.join(f'evaluation R@{k}' for k in RECALLS) + ' |')
    print('|---|---:|' + '---:|' * 2 * len(RECALLS))
    for candidates in [*args.candidates, 'pooled']:
        started = time.perf_counter()
        if candidates == 'pooled':  # the gallery without tokens: MediaIndex's pooled ranking
            hits = index.search_embeddings(encode_texts(model, captions, args.lang),
                                           k=max(RECALLS))
            expected = exact_ranks(embeddings, gallery.embeddings, owner, media_rows)
            name = 'pooled cosine'
        else:
            hits = index.search(model, captions, args.lang, k=max(RECALLS),
                                candidates=candidates)
            # The search re-ranks at least the k hits it returns.
            shortlist = None if candidates is None else max(candidates, max(RECALLS))
            scoring = TokenScoring(model.token_score(), 'tokens' if candidates is None
                                   else 'tokens_rerank', shortlist or 1, args.device)
            expected = token_ranks(scoring, 't2i', gallery.tokens, tokens, gallery.embeddings,
                                   embeddings, owner)
            name = 'tokens, all' if candidates is None else f'tokens, shortlist {shortlist}'
        per_second = len(captions) / (time.perf_counter() - started)
        found = [[int(hit.media_id) for hit in row] for row in hits]
        recalls = [100 * sum(image in row[:k] for row, image in zip(found, owners))
                   / len(owners) for k in RECALLS]
        evaluated = [100 * float((expected <= k).float().mean()) for k in RECALLS]
        print(f'| {name} | {per_second:.1f} | '
              + ' | '.join(f'{value:.2f}' for value in recalls + evaluated) + ' |', flush=True)


if __name__ == '__main__':
    run_tool(main)
