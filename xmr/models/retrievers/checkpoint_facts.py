"""Facts a checkpoint must agree on with the config it is loaded into (a model's extra state).

A retriever returns its facts (backbone type, embedding width, languages, ...) from
``get_extra_state``; loading a checkpoint whose facts differ fails naming each mismatch. MMEngine
broadcasts every ``state_dict`` entry across DDP ranks as a tensor, so the facts travel as JSON
bytes in a uint8 tensor and are a dict again when loaded.
"""
from __future__ import annotations

import json
from typing import Any

import torch

#: Facts that list a set in whatever order a config gives it: a model holds each language's
#: weights under its code, so a checkpoint trained for ``['de', 'zh']`` is the same model in a
#: config that lists ``['zh', 'de']`` (the paper's order against an alphabetical one).
UNORDERED_FACTS = frozenset({'languages'})


def check_checkpoint_facts(checkpoint: dict[str, Any], config: dict[str, Any]) -> None:
    """Raise naming every fact both sides state with different values (those of
    :data:`UNORDERED_FACTS` compared as sets).

    Raises:
        ValueError: ``checkpoint does not match the config: <fact>: checkpoint .. vs config ..``.
    """
    mismatched = {k: _where_different(checkpoint[k], config[k]) for k in config
                  if k in checkpoint and not _same_fact(k, checkpoint[k], config[k])}
    if mismatched:
        details = '; '.join(f'{k}: checkpoint {a!r} vs config {b!r}'
                            for k, (a, b) in mismatched.items())
        raise ValueError(f'checkpoint does not match the config: {details}')


def _same_fact(key: str, first: Any, second: Any) -> bool:
    """Whether fact ``key`` has the same value on both sides; in any order for a list of
    :data:`UNORDERED_FACTS`."""
    if key in UNORDERED_FACTS and isinstance(first, list) and isinstance(second, list):
        return sorted(first) == sorted(second)
    return first == second


def _where_different(first: Any, second: Any, context: int = 24) -> tuple[Any, Any]:
    """Two long texts cut to where they differ, ``context`` characters either side (a
    backbone's settings differ in one field of many); other values as they are."""
    if not (isinstance(first, str) and isinstance(second, str)) or max(
            len(first), len(second)) <= 3 * context:
        return first, second
    start = next((i for i, (a, b) in enumerate(zip(first, second)) if a != b),
                 min(len(first), len(second)))
    same_end, limit = 0, min(len(first), len(second)) - start  # a common end after start
    while same_end < limit and first[-1 - same_end] == second[-1 - same_end]:
        same_end += 1
    cut = max(0, start - context)

    def middle(text: str) -> str:
        end = min(len(text), len(text) - same_end + context)
        return ('…' if cut else '') + text[cut:end] + ('…' if end < len(text) else '')

    return middle(first), middle(second)


def store_facts_as_tensor(module: torch.nn.Module) -> None:
    """Make ``module``'s dict extra state a uint8 tensor in its state dict, and back on load."""
    module.register_state_dict_post_hook(_facts_to_tensor)
    module.register_load_state_dict_pre_hook(_facts_from_tensor)


def _facts_to_tensor(module: torch.nn.Module, state_dict: dict, prefix: str,
                     local_metadata: dict) -> None:
    key = prefix + '_extra_state'
    if isinstance(state_dict.get(key), dict):
        encoded = json.dumps(state_dict[key], sort_keys=True).encode('utf-8')
        # Bytes copied as they are: a list of ints took 25 ms for a carried vocabulary's 332 KB.
        state_dict[key] = torch.frombuffer(bytearray(encoded), dtype=torch.uint8)


def decode_facts(value: Any) -> Any:
    """The facts dict of a state dict's ``_extra_state`` entry (a uint8 tensor of JSON bytes);
    any other value as it is."""
    if isinstance(value, torch.Tensor) and value.dtype == torch.uint8:
        return json.loads(value.cpu().numpy().tobytes().decode('utf-8'))
    return value


def _facts_from_tensor(module: torch.nn.Module, state_dict: dict, prefix: str,
                       *_: Any) -> None:
    key = prefix + '_extra_state'
    if key in state_dict:
        state_dict[key] = decode_facts(state_dict[key])
