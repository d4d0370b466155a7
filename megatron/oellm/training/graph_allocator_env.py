"""megatron-core's CUDA-graph allocator guard, for the allocator settings it does not read.

megatron-core 0.19.2's ``validate_args`` refuses ``--cuda-graph-impl transformer_engine`` when
``PYTORCH_CUDA_ALLOC_CONF`` holds the text ``expandable_segments:True`` and ``NCCL_GRAPH_REGISTER`` is not ``0``:
NCCL's registration of the graphs' buffers meets expandable segments in an illegal memory access. torch's allocator
reads more than that text: from torch 2.10 on also ``PYTORCH_ALLOC_CONF`` where ``PYTORCH_CUDA_ALLOC_CONF`` is
absent (the name ``oellm doctor`` suggests to such a torch), and it skips spaces (``expandable_segments: True``).
With either, expandable segments are on and megatron-core's check passes. :func:`check_graph_allocator_env` refuses
those runs at start, as megatron-core refuses the one it reads (``patches/cuda-graph-allocator-guard.md``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from megatron.oellm.doctor.allocator import UNIFIED_ALLOC_CONF_TORCH, allocator_conf, parse_allocator_conf
from megatron.oellm.training.environment_refusal import EnvironmentRefusal

UNKNOWN_TORCH = ".".join(map(str, UNIFIED_ALLOC_CONF_TORCH))
"""The torch a job's environment is judged for where the node's torch is not the one reading it (a recipe resolved
on a login node): one reading both allocator variables, so that no setting enabling expandable segments goes
unchecked."""


def check_graph_allocator_env(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`EnvironmentRefusal` when ``args`` capture Transformer Engine's CUDA graphs while the allocator
    settings torch reads from ``environ`` enable expandable segments and ``NCCL_GRAPH_REGISTER`` is not ``0``: what
    megatron-core's own assertion refuses, for the settings it does not read; ``NCCL_GRAPH_REGISTER`` is read as
    megatron-core reads it (exactly ``0``). ``environ`` None is this process's environment, read as this process's
    torch reads it; a given one (a job's) as torch 2.10 and later read it."""
    if args.cuda_graph_impl != "transformer_engine":
        return
    if environ is None:
        import torch

        environ, torch_version = os.environ, torch.__version__
    else:
        torch_version = UNKNOWN_TORCH
    if environ.get("NCCL_GRAPH_REGISTER", "") == "0":
        return
    found = allocator_conf(environ, torch_version)
    if found is None or not turns_on_expandable_segments(found[1]):
        return
    variable, value = found
    raise EnvironmentRefusal(
        f"Transformer Engine's CUDA graphs (--cuda-graph-impl transformer_engine) with {variable}={value!r}, which "
        "turns on expandable segments, need NCCL_GRAPH_REGISTER=0: NCCL's registration of the graphs' buffers meets "
        "expandable segments in an illegal memory access during training (megatron-core 0.19.2 checks only "
        "PYTORCH_CUDA_ALLOC_CONF, for the text 'expandable_segments:True'); set NCCL_GRAPH_REGISTER=0 in the job's "
        "environment (a recipe's [cluster.env], as the Jupiter recipes do)", (variable, "NCCL_GRAPH_REGISTER"))


def turns_on_expandable_segments(value: str) -> bool:
    """Whether torch's allocator, reading the settings ``value``, turns expandable segments on: its tokenizer drops
    every whitespace character (``expandable_segments: Tr ue`` counts) before it splits the items."""
    return parse_allocator_conf("".join(value.split())).get("expandable_segments") == "True"
