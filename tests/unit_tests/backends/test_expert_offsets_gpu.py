"""The torch-native experts inside a CUDA graph with drop-and-pad counts: the mode in which megatron-core captures
MoE layers (``--cuda-graph-impl``). The dispatcher hands equal counts on the host; copying them to the GPU stopped
the capture with ``Cannot copy between CPU and CUDA tensors during CUDA graph capture`` (session 39)."""

import random

import pytest
import torch
from backend_references import relative_error
from backend_setup import build_experts, moe_config
from megatron.core.process_groups_config import ProcessGroupCollection

pytestmark = pytest.mark.gpu

HIDDEN, FFN, NUM_EXPERTS = 128, 96, 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_captured_experts_replay_what_eager_experts_compute(megatron_runtime: None, dtype: torch.dtype) -> None:
    """Forward of the experts captured with host capacity counts, replayed on fresh inputs, equals an eager forward
    on the same inputs with the counts on the GPU (same kernels: bit-identical)."""
    config = moe_config(HIDDEN, 8, NUM_EXPERTS, FFN, params_dtype=dtype, bf16=dtype == torch.bfloat16)
    experts = build_experts(config, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    capacity = random.randint(16, 64)
    host_counts = torch.full((NUM_EXPERTS,), capacity, dtype=torch.long)
    rows = capacity * NUM_EXPERTS
    hidden = torch.randn(rows, HIDDEN, device="cuda", dtype=dtype)
    probs = torch.rand(rows, device="cuda")

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        experts(hidden, host_counts, probs)  # warm-up outside the graph, as capture requires
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        captured, _ = experts(hidden, host_counts, probs)

    for _ in range(2):
        hidden.copy_(torch.randn_like(hidden))
        probs.copy_(torch.rand_like(probs))
        graph.replay()
        with torch.no_grad():
            eager, _ = experts(hidden, host_counts.cuda(), probs)
        assert eager.abs().mean() > 0
        assert relative_error(captured, eager) == 0
