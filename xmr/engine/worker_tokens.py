"""Tokenisation in the dataloader workers, off the process that drives the GPU.

The model's data preprocessor tokenises a batch's texts when it receives the batch, in the main
process. On a GPU that process is the bottleneck (the step is bound by the host launching
kernels), and CLIP's BPE alone costs about 0.1 ms a caption there: 12 ms for an evaluation batch
of 128 English captions, more than the towers take to embed them. :func:`tokenize_in_workers`
makes a loader's workers do it: their collate runs the preprocessor's
:meth:`~xmr.models.data_preprocessor.RetrievalDataPreprocessor.tokenize` and the batch arrives
with its ``tokens``, which the preprocessor then takes as they are. The tokens are the same;
the work runs in parallel with the model, spread over the workers.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import nn
from torch.utils.data import DataLoader

from xmr.engine.wrappers import unwrap_model


class TokenizingCollate:
    """A loader's collate function followed by the model's tokenisation of the batch.

    Args:
        collate: the loader's own collate function.
        tokenize: the data preprocessor's ``tokenize``; its result goes to the batch's
            ``tokens``. Pickled to the workers with the preprocessor when they are spawned.
    """

    def __init__(self, collate: Callable[[Sequence[Any]], dict],
                 tokenize: Callable[[dict], dict]) -> None:
        self.collate = collate
        self.tokenize = tokenize

    def __call__(self, items: Sequence[Any]) -> dict:
        batch = self.collate(items)
        batch['tokens'] = self.tokenize(batch)
        return batch


def tokenize_in_workers(loader: DataLoader, model: nn.Module) -> bool:
    """Have ``loader``'s workers tokenise its batches with ``model``'s data preprocessor.

    Call it before the loader's workers start. A loader without workers (where the collate runs
    in the main process anyway), a model whose preprocessor does not tokenise, and a loader
    already set are left as they are.

    Returns:
        Whether the loader's workers now tokenise.
    """
    preprocessor = getattr(unwrap_model(model), 'data_preprocessor', None)
    tokenize = getattr(preprocessor, 'tokenize', None)
    if isinstance(loader.collate_fn, TokenizingCollate):
        return True
    if tokenize is None or not isinstance(loader, DataLoader) or loader.num_workers == 0:
        return False
    loader.collate_fn = TokenizingCollate(loader.collate_fn, tokenize)
    return True
