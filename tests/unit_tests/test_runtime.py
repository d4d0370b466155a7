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


def test_shutdown_tears_down_the_process_group_and_megatrons_groups():
    from megatron.core import parallel_state

    from megatron.oellm.runtime import shutdown_single_gpu_runtime

    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    parallel_state.initialize_model_parallel()
    assert parallel_state.model_parallel_is_initialized()
    shutdown_single_gpu_runtime()
    assert not parallel_state.model_parallel_is_initialized()
    assert not torch.distributed.is_initialized()
    shutdown_single_gpu_runtime()  # nothing up: no error
