"""The SentencePiece vocabulary a retriever's checkpoint carries, and models built from it.

A vocabulary that :class:`~xmr.models.language.tokenizers.SentencePieceTokenizer` learns from a
corpus as the model is built exists only in the process that learned it. Learned again, from a
moved or edited corpus or by another sentencepiece version (0.2.2 and 0.2.3 learn other pieces
from the same captions), it gives other ids, and the trained embedding table's rows would mean
other tokens: the checkpoint's ``target_vocabulary`` digest then refuses the load, and without
the corpus the model cannot even be built. So every checkpoint of a retriever with such a
tokenizer carries the tokenizer's model (:data:`CARRIED`, in the checkpoint's facts), and a
model built to load that checkpoint reads its vocabulary from it (``model_file=<checkpoint>``,
:func:`read_vocabulary_from`) instead of learning one.
"""
from __future__ import annotations

import base64
import functools
import os
import re
import zipfile
from collections.abc import MutableMapping
from pathlib import Path

import torch
from mmengine.logging import print_log

#: The key of the retriever's facts (``_extra_state``) holding the tokenizer's model, base64.
CARRIED = 'target_tokenizer_model'


def carried_entry(model_proto: bytes) -> dict[str, str]:
    """``{CARRIED: <base64 text>}``: the facts are JSON."""
    return {CARRIED: base64.b64encode(model_proto).decode('ascii')}


def carried_model(checkpoint: str | os.PathLike) -> bytes | None:
    """The SentencePiece model ``checkpoint`` carries; ``None`` for one that carries none
    (written before checkpoints carried it, or of a model whose tokenizer is no
    SentencePieceTokenizer).

    Only the facts are read: the weights stay on disk (``mmap``), and a file's records are
    checked once, by the load of its weights (a multi-GB checkpoint read whole twice was a
    defect of its own). Read once per file and version of it: the build that takes the model
    and :func:`read_vocabulary_from` before it ask for the same file.

    Raises:
        ValueError: a file ``torch.load`` cannot read (a damaged or foreign one, or one saved
            in torch's legacy format), naming it.
    """
    path = Path(checkpoint).resolve()
    stat = path.stat()
    return _carried_model(path, (stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=4)
def _carried_model(path: Path, version: tuple[int, int]) -> bytes | None:
    from xmr.engine.checkpoint import FACTS, allow_mmengine_checkpoint_types
    from xmr.models.retrievers.checkpoint_facts import decode_facts

    allow_mmengine_checkpoint_types()
    try:
        loaded = torch.load(path, map_location='cpu', weights_only=True, mmap=True)
    except Exception as error:  # torch raises many kinds for a damaged or foreign file
        raise ValueError(f'{path}: not a checkpoint whose facts can be read '
                         f'({type(error).__name__}: {error})') from error
    state = loaded.get('state_dict', loaded) if isinstance(loaded, dict) else {}
    facts = next((decode_facts(value) for key, value in state.items()
                  if re.sub(r'^module\.', '', key) == FACTS), None)
    encoded = facts.get(CARRIED) if isinstance(facts, dict) else None
    return None if encoded is None else base64.b64decode(encoded)


def learned_vocabulary(tokenizer: MutableMapping) -> bool:
    """Whether a tokenizer config's vocabulary is one a SentencePieceTokenizer learns: it names
    no ``.model`` file that exists (it learns from its corpus, or reads a checkpoint's, which
    the checkpoint loaded carries too)."""
    from xmr.models.language.tokenizers import SentencePieceTokenizer
    from xmr.registry import TOKENIZERS

    kind = tokenizer.get('type')
    cls = TOKENIZERS.get(kind) if isinstance(kind, str) else kind
    model_file = tokenizer.get('model_file')
    return isinstance(cls, type) and issubclass(cls, SentencePieceTokenizer) and not (
        model_file and Path(model_file).is_file() and not zipfile.is_zipfile(model_file))


def read_vocabulary_from(model_cfg: MutableMapping, checkpoint: str | os.PathLike) -> bool:
    """Point the model config's target tokenizer, when its vocabulary is a learned one
    (:func:`learned_vocabulary`), at the one ``checkpoint`` carries; return whether it did.

    The tokenizer keeps its other options (``max_length``, padding); its ``model_file``
    becomes the checkpoint, so that the config a run dumps names where the vocabulary came
    from, and its ``corpus`` goes: a model is built where the corpus is not. A build from that
    dump for another checkpoint reads that one's; one without a checkpoint, after the file is
    gone, fails naming it, rather than write a vocabulary learned again at its path (where a
    missing ``model_file`` is written).
    """
    branch = model_cfg.get('language_branch')
    tokenizer = branch.get('tokenizer') if isinstance(branch, MutableMapping) else None
    if not isinstance(tokenizer, MutableMapping) or not learned_vocabulary(tokenizer):
        return False
    try:
        if carried_model(checkpoint) is None:
            return False
    except ValueError:
        return False  # the load of its weights names what is wrong with the file
    tokenizer.pop('corpus', None)
    tokenizer['model_file'] = str(checkpoint)
    print_log(f'target tokenizer: the SentencePiece vocabulary {checkpoint} carries, whose '
              'ids its embedding rows were trained on', logger='current')
    return True
