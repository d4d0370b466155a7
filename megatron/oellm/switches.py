"""Environment switches that trade speed for a reference path (A/B runs, debugging), in one torch-free place.

Each is read where it takes effect (:mod:`megatron.oellm.layers.rms_norm`,
:mod:`megatron.oellm.patches.moe_permutation`, :mod:`megatron.oellm.backends.torch_native.router`) and checked by
``oellm doctor``, which warns when one is left on: a switch forgotten in a job script silently costs a production run
its speed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

EAGER_RMS_NORM = "OELLM_EAGER_RMS_NORM"
"""``1``: the torch-native RMSNorm runs its eager fp32 torch code instead of the Triton kernels."""
UPSTREAM_MOE_PERMUTATION = "OELLM_UPSTREAM_MOE_PERMUTATION"
"""``1``: MoE layers keep megatron-core's unfused token permutation (atomic adds) instead of the sorted sums."""
FP32_OPERAND_ROUTER = "OELLM_FP32_OPERAND_ROUTER"
"""``1``: the torch-native fp32 router on bf16 operands computes its GEMMs on fp32 copies (CUDA cores) instead of
exact bf16 tensor-core products accumulated in fp32."""

SLOW_PATH_SWITCHES: dict[str, str] = {
    EAGER_RMS_NORM: "the torch-native RMSNorm runs eagerly instead of its Triton kernels (3.7x to 9x slower per norm "
                    "on an H200)",
    UPSTREAM_MOE_PERMUTATION: "MoE layers keep megatron-core's atomic token permutation (5.6 % of a torch-native "
                              "Qwen3.5 proxy step on an H200)",
    FP32_OPERAND_ROUTER: "the torch-native fp32 router computes on fp32 copies on the CUDA cores instead of the tensor "
                         "cores (2.2 % of a torch-native Qwen3.5 proxy step on an H200)",
}
"""Switch -> what it costs when set to ``1`` (measured, docs/benchmarks.md sessions 14, 15 and 16)."""


def is_on(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether switch ``name`` is set to ``1`` in ``environ`` (``os.environ`` when None)."""
    return (os.environ if environ is None else environ).get(name) == "1"
