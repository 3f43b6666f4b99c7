"""Random streams captured and restored as one; the GPU's is the current device's alone."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from xmr.engine import rng
from xmr.engine.rng import capture_rng_state, restore_rng_state


def draws() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), random.random()


def test_a_restored_state_draws_again_what_followed_the_capture():
    state = capture_rng_state()
    first = draws()
    draws()
    restore_rng_state(state)
    assert draws() == first


class FakeCuda:
    """One process's view of its GPUs: ``device`` current, a stream state per visible GPU."""

    def __init__(self, monkeypatch, device: int, visible: int) -> None:
        self.device, self.restored = device, {}
        self.states = {d: torch.full((4,), d, dtype=torch.uint8) for d in range(visible)}
        for name, value in dict(is_available=lambda: True, is_initialized=lambda: True,
                                current_device=lambda: self.device,
                                get_rng_state=self.get, set_rng_state=self.set).items():
            monkeypatch.setattr(rng.torch.cuda, name, value)

    def get(self, device: str | int = 'cuda') -> torch.Tensor:
        assert device == 'cuda'  # torch's default: the current device
        return self.states[self.device]

    def set(self, state: torch.Tensor, device: str | int = 'cuda') -> None:
        assert device == 'cuda' and state.device.type == 'cpu'
        self.restored[self.device] = state


def test_the_gpu_stream_is_the_current_devices_and_goes_back_onto_the_current_device(
        monkeypatch):
    # Rank 1 of a torchrun job sees 2 GPUs and trains on cuda:1.
    gpus = FakeCuda(monkeypatch, device=1, visible=2)
    saved = capture_rng_state()
    assert torch.equal(saved['cuda'], torch.full((4,), 1, dtype=torch.uint8))
    # Resumed on a machine showing one GPU: onto cuda:0, no IndexError.
    gpus.device, gpus.states = 0, {0: gpus.states[0]}
    restore_rng_state(saved)
    assert list(gpus.restored) == [0] and torch.equal(gpus.restored[0], saved['cuda'])


@pytest.mark.parametrize('device, visible_then, restored', [(0, 2, 0), (1, 2, 1), (1, 1, None)])
def test_an_earlier_checkpoints_state_per_device_gives_the_current_devices(
        monkeypatch, device, visible_then, restored):
    state = dict(capture_rng_state(), cuda=[torch.full((4,), d, dtype=torch.uint8)
                                            for d in range(visible_then)])
    gpus = FakeCuda(monkeypatch, device=device, visible=2)
    restore_rng_state(state)
    if restored is None:  # that checkpoint held no stream of this device
        assert gpus.restored == {}
    else:
        assert torch.equal(gpus.restored[device], state['cuda'][restored])


def test_no_gpu_stream_is_captured_before_cuda_is_initialised(monkeypatch):
    FakeCuda(monkeypatch, device=0, visible=1)
    monkeypatch.setattr(rng.torch.cuda, 'is_initialized', lambda: False)
    assert 'cuda' not in capture_rng_state()


def test_a_saved_gpu_stream_is_left_where_no_gpu_is_available_and_the_rest_restored(
        monkeypatch):
    gpus = FakeCuda(monkeypatch, device=0, visible=1)
    saved = capture_rng_state()
    first = draws()
    monkeypatch.setattr(rng.torch.cuda, 'is_available', lambda: False)
    restore_rng_state(saved)
    assert gpus.restored == {}
    assert draws() == first


class LoadedOnGpu:
    """A state tensor that ``torch.load`` put on a GPU; its CPU copy is the tensor held."""

    device = torch.device('cuda')

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def cpu(self) -> torch.Tensor:
        return self.tensor


def test_states_loaded_onto_the_gpu_are_restored_from_their_cpu_copies(monkeypatch):
    gpus = FakeCuda(monkeypatch, device=0, visible=1)
    saved = capture_rng_state()
    first = draws()
    restore_rng_state(dict(saved, torch=LoadedOnGpu(saved['torch']),
                           cuda=LoadedOnGpu(saved['cuda'])))
    assert draws() == first
    assert torch.equal(gpus.restored[0], saved['cuda'])
