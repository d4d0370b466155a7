"""The one-process runtime helpers that work without a GPU."""

import socket

import pytest
import torch

from megatron.oellm.runtime import free_port, init_single_gpu_runtime


def test_free_port_can_be_bound():
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
    assert 0 < port < 65536


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_runtime_refuses_without_cuda_before_touching_torch_distributed():
    with pytest.raises(RuntimeError, match="CUDA"):
        init_single_gpu_runtime()
    assert not torch.distributed.is_initialized()
