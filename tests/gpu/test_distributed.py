"""NCCL on the accelerator: a gathered InfoNCE exchanges its shards' row counts through a gloo
group beside NCCL's, without waiting for the device, and gathers its rows through NCCL."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.engine.test_distributed import free_port
from xmr.models.losses import distributed

pytestmark = pytest.mark.gpu


def test_row_counts_go_beside_nccl_and_never_wait_for_the_device(accelerator):
    if accelerator.type != 'cuda':
        pytest.skip('NCCL needs CUDA')
    torch.cuda.set_device(accelerator.index or 0)  # NCCL binds a rank to an indexed device
    dist.init_process_group('nccl', init_method=f'tcp://127.0.0.1:{free_port()}', rank=0,
                            world_size=1)
    try:
        host = distributed.host_group()
        assert dist.get_backend(host) == 'gloo' and distributed.host_group() is host
        embeddings = torch.randn(5, 8, device=accelerator, requires_grad=True)
        torch.cuda.synchronize(accelerator)
        torch.cuda.set_sync_debug_mode('error')
        try:
            # Counts sent through NCCL would be read back from the device: a wait, an error here.
            counts = distributed.shard_rows((embeddings, embeddings[:2]))
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert counts == [[5, 2]]
        gathered = distributed._GatherRows.apply(embeddings, [5])
        torch.testing.assert_close(gathered, embeddings, rtol=0, atol=0)
        gathered.sum().backward()
        torch.testing.assert_close(embeddings.grad, torch.ones_like(embeddings), rtol=0, atol=0)
    finally:
        dist.destroy_process_group()
