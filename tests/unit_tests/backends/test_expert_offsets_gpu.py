"""The torch-native experts inside a CUDA graph with drop-and-pad counts: the mode in which megatron-core captures
MoE layers (``--cuda-graph-impl``). The dispatcher hands equal counts on the host; copying them to the GPU stopped
the capture with ``Cannot copy between CPU and CUDA tensors during CUDA graph capture`` (session 39). Only bf16 experts
capture: torch's grouped GEMM reads the offsets on the host in fp16 and fp32, which the training entry refuses to
capture (``megatron.oellm.training.cuda_graphs``)."""

import random

import pytest
import torch
from backend_references import relative_error
from backend_setup import build_experts, moe_config
from megatron.core.process_groups_config import ProcessGroupCollection

pytestmark = pytest.mark.gpu

HIDDEN, FFN, NUM_EXPERTS = 128, 96, 8


def test_captured_experts_replay_what_eager_experts_compute(megatron_runtime: None) -> None:
    """Forward of bf16 experts captured with host capacity counts, replayed on fresh inputs, equals an eager forward
    on the same inputs with the counts on the GPU (same kernels: bit-identical)."""
    config = moe_config(HIDDEN, 8, NUM_EXPERTS, FFN, params_dtype=torch.bfloat16, bf16=True)
    experts = build_experts(config, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    capacity = random.randint(16, 64)
    host_counts = torch.full((NUM_EXPERTS,), capacity, dtype=torch.long)
    rows = capacity * NUM_EXPERTS
    hidden = torch.randn(rows, HIDDEN, device="cuda", dtype=torch.bfloat16)
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


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_grouped_gemm_outside_bf16_cannot_be_captured(dtype: torch.dtype) -> None:
    """The premise of the training entry's refusal: torch's grouped GEMM in fp16 and fp32 copies the offsets to the
    host, which capture forbids (torch 2.11). Should torch capture it one day, this fails: lift the refusal then."""
    x = torch.randn(64, 32, device="cuda", dtype=dtype)
    weight = torch.randn(4, 48, 32, device="cuda", dtype=dtype)
    offsets = torch.tensor([16, 32, 48, 64], device="cuda", dtype=torch.int32)
    torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets)
    torch.cuda.synchronize()
    with pytest.raises(RuntimeError, match="Cannot copy between CPU and CUDA tensors during CUDA graph capture"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets)
