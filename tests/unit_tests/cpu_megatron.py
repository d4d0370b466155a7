"""megatron-core's parallel state and model building on the CPU (gloo), for checkpoint-layout tests.

megatron-core 0.19.2 needs CUDA for two things while it *builds* an MoE layer, neither of which matters for the
sharded state dict: the router allocates its weight on ``torch.cuda.current_device()`` and the all-to-all token
dispatcher creates a class-wide device-to-host ``torch.cuda.Stream``. :func:`cpu_model_building` points the first at
the CPU and fills the second with a placeholder for the duration of a block, so whole models build on the CPU and
their ``sharded_state_dict()`` is megatron's own (nothing here can run a forward pass). Transformer Engine's modules
refuse to be built at all while ``torch.cuda.is_available()`` is False, even with ``use_cpu_initialization`` (their
parameters then live on the CPU): :func:`transformer_engine_building` answers that check True around a build only.
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
def cpu_model_building() -> Iterator[None]:
    """Let megatron-core build MoE layers without CUDA (see the module docstring)."""
    with mock.patch.object(torch.cuda, "current_device", return_value="cpu"), \
            mock.patch.object(MoEAlltoAllTokenDispatcher, "cuda_dtoh_stream", object()):
        yield


def cpu_torch_model(card, params_dtype: torch.dtype = torch.float32, **build_kwargs) -> torch.nn.Module:
    """``card``'s torch-native model as its family's spec builder makes it, parameters on the CPU and left as
    allocated (megatron-core's GDN initialiser needs the CUDA RNG; tests fill what they read); ``build_kwargs`` go
    to ``build_model``. Call inside :func:`gloo_world` and :func:`cpu_model_building`."""
    from megatron.oellm.models import spec_builder

    builder = spec_builder(card.family)
    config = builder.transformer_config(card, params_dtype=params_dtype, use_cpu_initialization=True,
                                        perform_initialization=False)
    return builder.build_model(card, backend="torch", config=config, **build_kwargs)


@contextmanager
def transformer_engine_building(enabled: bool = True) -> Iterator[None]:
    """Let Transformer Engine's modules be built without CUDA (see the module docstring); wrap the model build only,
    so that nothing else (checkpoint loading, comparisons) sees a pretended GPU. ``enabled=False``: no change."""
    with mock.patch.object(torch.cuda, "is_available", return_value=True) if enabled else nullcontext():
        yield


@contextmanager
def cpu_checkpoint_saving() -> Iterator[None]:
    """Let megatron-core's ``dist_checkpointing.save`` write CPU tensors: its file writer synchronizes the CUDA
    device before copying tensors to host memory, a no-op for tensors already there."""
    with mock.patch.object(torch.cuda, "synchronize", lambda *args, **kwargs: None):
        yield
