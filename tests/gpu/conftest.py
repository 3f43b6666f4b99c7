"""The GPU tier (``python -m pytest -m gpu tests``): CUDA results against CPU results.

Every test of ``tests/gpu`` is marked ``gpu`` and skips cleanly without CUDA. Comparisons are in
true fp32: TF32 is switched off inside them (its 10-bit mantissa is a precision choice, not a
defect), so the stated tolerances measure only reduction order. ``XMR_TEST_ACCELERATOR=cpu`` runs
the tier's code paths on the CPU instead; the comparisons then hold trivially. It checks the tier
itself on a machine without a GPU and is no substitute for one.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

#: fp32 on the accelerator against fp32 on the CPU: only the order of reductions differs. On an
#: H200 (torch 2.11) the largest deviation was 2.1e-5 absolute (3.1e-4 relative), one pooled
#: value of 128 of the BERT tower with dynamic adapters; every other comparison held at 1e-5.
FP32_TOLERANCE = dict(rtol=1e-4, atol=5e-5)


@pytest.fixture
def accelerator() -> Iterator[torch.device]:
    """The device under test, with TF32 off for the test's duration."""
    device = torch.device(os.environ.get('XMR_TEST_ACCELERATOR', 'cuda'))
    if device.type == 'cuda' and not torch.cuda.is_available():
        pytest.skip('needs CUDA: run the GPU tier on a GPU machine (python -m pytest -m gpu tests)')
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield device
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
