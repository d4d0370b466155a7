"""Shared by the interleaved-schedule tests: megatron-core's own schedule run on the CPU up to its micro-batch checks,
and the run arguments of an interleaved pipeline."""

from __future__ import annotations

import types

import pytest
import torch


class _PassedTheChecks(Exception):
    """Raised by the fake config at the first field megatron's schedule reads after its micro-batch checks."""


class _Config(types.SimpleNamespace):
    @property
    def hidden_size(self):
        raise _PassedTheChecks


class _Group:
    def __init__(self, size: int):
        self._size = size

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return 0


def upstream_refusal(microbatches: int, pipeline: int, group: int) -> str | None:
    """What megatron-core 0.19.2's ``forward_backward_pipelining_with_interleaving`` raises for these counts before it
    builds tensor shapes (None when it gets past its checks), run on the CPU with stand-in groups and model chunks."""
    from megatron.core.enums import ModelType
    from megatron.core.pipeline_parallel import schedules

    config = _Config(moe_paged_stash=False, overlap_p2p_comm=False, batch_p2p_comm=False,
                     finalize_model_grads_func=None, timers=None, no_sync_func=None, grad_sync_func=None,
                     param_sync_func=None, microbatch_group_size_per_vp_stage=group)

    class Chunk(torch.nn.Module):
        model_type = ModelType.encoder_or_decoder

        def __init__(self):
            super().__init__()
            self.config = config

    cpu_zeros = torch.zeros
    with pytest.MonkeyPatch.context() as patch:  # its own context: the caller's patches stay
        patch.setattr(torch, "zeros", lambda *shape, device=None, **kwargs: cpu_zeros(*shape, **kwargs))
        try:
            schedules.forward_backward_pipelining_with_interleaving(
                forward_step_func=None, data_iterator=[None, None], model=[Chunk(), Chunk()],
                num_microbatches=microbatches, seq_length=8, micro_batch_size=1,
                p2p_communicator=types.SimpleNamespace(config=config, pp_group=_Group(pipeline)),
                pg_collection=types.SimpleNamespace(tp=_Group(1), cp=_Group(1)))
        except _PassedTheChecks:
            return None
        except (ValueError, RuntimeError) as error:
            return str(error)
    raise AssertionError("megatron's schedule got past the point this harness stops it at")


def interleaved_args(**fields) -> types.SimpleNamespace:
    """Run arguments of PP 4 with 2 virtual stages, DP 4, MBS 1, GBS 64, with ``fields`` replaced."""
    defaults = dict(pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=2, micro_batch_size=1,
                    data_parallel_size=4, global_batch_size=64, microbatch_group_size_per_vp_stage=None,
                    step_batch_size_schedule=None, decrease_batch_size_if_needed=False, full_validation=False,
                    eval_iters=100, eval_global_batch_size=None, eval_micro_batch_size=None)
    return types.SimpleNamespace(**{**defaults, **fields})
