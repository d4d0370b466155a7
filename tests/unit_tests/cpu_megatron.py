"""megatron-core's parallel state and model building on the CPU (gloo), for checkpoint-layout tests.

megatron-core 0.19.2 needs CUDA for two things while it *builds* an MoE layer, neither of which matters for the
sharded state dict: the router allocates its weight on ``torch.cuda.current_device()`` and the all-to-all token
dispatcher creates a class-wide device-to-host ``torch.cuda.Stream``. :func:`cpu_model_building` points the first at
the CPU and fills the second with a placeholder for the duration of a block, so whole models build on the CPU and
their ``sharded_state_dict()`` is megatron's own (nothing here can run a forward pass). Transformer Engine's modules
refuse to be built at all while ``torch.cuda.is_available()`` is False, even with ``use_cpu_initialization`` (their
parameters then live on the CPU): with ``transformer_engine=True`` that check is answered True for the block.
"""

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from unittest import mock

import torch
from megatron.core import parallel_state
from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher

from megatron.oellm.runtime import free_port


@contextmanager
def gloo_world(rank: int = 0, world: int = 1, port: int | None = None, **parallel_sizes) -> Iterator[None]:
    """A gloo process group of ``world`` ranks (this process: ``rank``) with megatron's parallel state
    (``parallel_sizes``: ``initialize_model_parallel`` keywords) for the duration of the block."""
    init = f"tcp://127.0.0.1:{port or free_port()}"
    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        parallel_state.initialize_model_parallel(**parallel_sizes)
        yield
    finally:
        parallel_state.destroy_model_parallel()
        torch.distributed.destroy_process_group()


@contextmanager
def cpu_model_building(transformer_engine: bool = False) -> Iterator[None]:
    """Let megatron-core build MoE layers, and with ``transformer_engine`` TE's modules, without CUDA (see the module
    docstring)."""
    with mock.patch.object(torch.cuda, "current_device", return_value="cpu"), \
            mock.patch.object(MoEAlltoAllTokenDispatcher, "cuda_dtoh_stream", object()), \
            mock.patch.object(torch.cuda, "is_available", return_value=True) if transformer_engine else nullcontext():
        yield
