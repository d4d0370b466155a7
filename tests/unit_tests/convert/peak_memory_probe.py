"""Peak resident memory of one conversion direction on a synthetic checkpoint, in a fresh process (run by
``test_convert_memory.py``; a process that converted before may reuse memory its allocator kept, hiding the peak).
``python peak_memory_probe.py DIR write`` writes the HF checkpoint ``DIR/hf`` and its conversion ``DIR/mcore``;
``... DIR hf-to-mcore`` converts ``DIR/hf`` to ``DIR/mcore-again``, ``... DIR mcore-to-hf`` ``DIR/mcore`` to ``DIR/out``
(one 5 GiB shard); both print one JSON object with the conversion's peak over the memory held before it, the largest
unit's and the model's bytes.

The peak is the kernel's high-water mark (``VmHWM``, file-backed pages of memory-mapped files included), reset
through ``/proc/self/clear_refs`` just before the conversion; a conversion of a tiny card first loads every module, so
imports do not count. Linux only.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

from megatron.oellm.cards import ModelCard, get_card
from megatron.oellm.convert.family import unit_shapes, units
from megatron.oellm.convert.safetensors_io import DEFAULT_MAX_SHARD_BYTES
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf


def _status(field: str) -> int:
    """A ``/proc/self/status`` memory field in bytes."""
    return int(re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)[1]) * 1024


def peak_over_baseline(action: Callable[[], object]) -> int:
    """Bytes of resident memory ``action`` added at its peak over what was resident before it."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current resident size
    before = _status("VmRSS")
    action()
    return _status("VmHWM") - before


def card() -> ModelCard:
    """A small Qwen3-MoE card whose largest unit (a layer's 16 experts, about 49 MiB) dwarfs allocator noise."""
    return dataclasses.replace(get_card("qwen3-30b-a3b-tiny"), hidden_size=1024, vocab_size=16384, num_experts=16,
                               moe_ffn_hidden_size=512, num_layers=4)


def _warm_up(work: Path) -> None:
    """Convert a tiny card both ways, so that every module the conversion imports is loaded."""
    tiny = get_card("qwen3-30b-a3b-tiny")
    write_hf(tiny, random_hf_tensors(tiny, seed=1), work / "warm-hf")
    hf_to_mcore_checkpoint(tiny, work / "warm-hf", work / "warm-mcore")
    mcore_to_hf_checkpoint(tiny, work / "warm-mcore", work / "warm-out")


def main(work: Path, step: str) -> None:
    """Run ``step`` (see module doc)."""
    model = card()
    if step == "write":
        write_hf(model, random_hf_tensors(model, seed=2), work / "hf", max_shard_bytes=DEFAULT_MAX_SHARD_BYTES)
        hf_to_mcore_checkpoint(model, work / "hf", work / "mcore")
        return
    _warm_up(work / step)
    if step == "hf-to-mcore":
        peak = peak_over_baseline(lambda: hf_to_mcore_checkpoint(model, work / "hf", work / "mcore-again"))
    else:
        peak = peak_over_baseline(lambda: mcore_to_hf_checkpoint(model, work / "mcore", work / "out"))
    unit_bytes = [sum(math.prod(shape) * 2 for shape in unit_shapes(model, unit)[0].values()) for unit in units(model)]
    print(json.dumps({"peak": peak, "largest_unit": max(unit_bytes), "model": sum(unit_bytes)}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
