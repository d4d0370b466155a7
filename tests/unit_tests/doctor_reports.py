"""Synthetic ``oellm doctor`` environment reports shared by the doctor tests."""

from __future__ import annotations

import dataclasses

from megatron.oellm import MEGATRON_CORE_VERSION
from megatron.oellm.doctor.report import EnvironmentReport, GpuInfo

H100 = GpuInfo(0, "NVIDIA H100 80GB HBM3", (9, 0), 79.1)
"""The Hopper GPU of :func:`make_report`'s healthy node."""


def make_report(**changes) -> EnvironmentReport:
    """A healthy Hopper node in the recipes' image (DeepEP with HybridEP; no findings above ok), with ``changes``
    applied; ``versions`` entries are merged."""
    versions = {
        "torch": "2.9.0",
        "triton": "3.7.1",
        "megatron-core": MEGATRON_CORE_VERSION,
        "fla": "0.6.0",
        "tilelang": None,
        "deep-ep": "1.2.1+7febc6e",
    }
    versions.update(changes.pop("versions", {}))
    base = EnvironmentReport(
        python_version="3.12.3",
        typing_override_provided=False,
        versions=versions,
        cuda_version="12.8",
        nccl_version="2.27.3",
        gpus=(H100,),
        tilelang_importable=False,
        nvcc_path=None,
        hybrid_ep=True,
    )
    return dataclasses.replace(base, **changes)


TORCH_REFUSES = """
import json, sys, torch
setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
if setter is None:
    sys.exit(3)
refused = {}
for value in sys.argv[1:]:
    setter("large_segment_size_mb:20")  # torch's default; parsing a value does not reset it
    try:
        setter(value)
        refused[value] = False
    except (ValueError, RuntimeError, IndexError):  # IndexError: a std::out_of_range (a number that overflows)
        refused[value] = True
print(json.dumps(refused))
"""
"""A script for a fresh interpreter: which of its arguments this torch's allocator-settings parser refuses (a JSON
object value -> bool; exit status 3 where torch has no such parser)."""
