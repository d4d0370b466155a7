"""Conversions stream: a unit's read buffers are released before the next unit is read, and neither direction's
peak memory grows with the model or the output shard size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from safetensors.torch import load_file

from megatron.oellm.convert.dist_ckpt import CheckpointReader
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from tests.unit_tests.convert import peak_memory_probe
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, random_hf_tensors


@pytest.mark.parametrize("max_shard_bytes", [10_000, 5 * 2**30])
def test_mcore_to_hf_holds_one_unit_of_read_buffers(converted, monkeypatch: pytest.MonkeyPatch,
                                                    max_shard_bytes: int) -> None:
    """Every read buffer of a unit (the storage its tensors view) is freed when the next unit is read, whatever the
    shard size: otherwise the largest unit is held twice, the documented streaming is
    not. The output is still the input, bit for bit."""
    card, hf, tmp = converted
    read = CheckpointReader.read
    alive: list[weakref.ref] = []
    held_over: list[int] = []

    def tracked_read(self: CheckpointReader, pieces) -> dict:
        held_over.append(sum(ref() is not None for ref in alive))
        tensors = read(self, pieces)
        alive[:] = [weakref.ref(t if t._base is None else t._base) for t in tensors.values()]
        return tensors

    monkeypatch.setattr(CheckpointReader, "read", tracked_read)
    mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", max_shard_bytes=max_shard_bytes)
    assert len(held_over) == card.num_layers + 2
    assert held_over == [0] * len(held_over), "read buffers of the previous unit still alive at the next read"
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp / "out")))


def _probe(work: Path, step: str) -> dict:
    """Run ``peak_memory_probe.py``'s ``step`` in a fresh process; its JSON report (None for ``write``)."""
    here = Path(__file__).parent
    path = os.pathsep.join([str(here.parents[2]), os.environ.get("PYTHONPATH", "")])  # the root: tests.unit_tests
    done = subprocess.run([sys.executable, str(here / "peak_memory_probe.py"), str(work), step], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout) if done.stdout.strip() else None


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the probe's synthetic HF checkpoint ``hf/`` and its megatron conversion ``mcore/``."""
    work = tmp_path_factory.mktemp("peak")
    _probe(work, "write")
    return work


def _in_units(report: dict) -> str:
    """A probe report's peak in units of its largest unit, with the model's size, for a failure message."""
    return f"peak {report['peak'] / report['largest_unit']:.2f} units (model {report['model'] / report['largest_unit']:.1f})"


_LINUX_PROC = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(),
                                 reason="peak memory is read from Linux's /proc")


@_LINUX_PROC
def test_hf_to_mcore_peak_memory_stays_near_one_unit(synthetic: Path) -> None:
    """On a model of over five units the peak resident memory over the start, memory-mapped pages of the source
    included, stays under three units' bytes (a unit as mapped, its converted tensors, small buffers), not the
    model's: the source files are closed after each unit, so pages read earlier leave."""
    report = _probe(synthetic, "hf-to-mcore")
    assert report["model"] > 5 * report["largest_unit"]
    assert report["peak"] < 3 * report["largest_unit"], _in_units(report)


@_LINUX_PROC
def test_mcore_to_hf_peak_memory_stays_near_one_unit_with_a_large_shard(synthetic: Path) -> None:
    """The whole model of over five units into one 5 GiB shard: the peak resident memory over the start stays under
    three units' bytes (a unit as read, its converted tensors, small buffers), not the shard's, since each tensor is
    written straight to the file. The output is a valid safetensors file holding the input bit for bit."""
    report = _probe(synthetic, "mcore-to-hf")
    assert report["model"] > 5 * report["largest_unit"]
    assert report["peak"] < 3 * report["largest_unit"], _in_units(report)
    assert sorted(p.name for p in (synthetic / "out").glob("*.safetensors")) == ["model.safetensors"]
    assert_bitwise_equal(random_hf_tensors(peak_memory_probe.card(), seed=2),
                         load_file(synthetic / "out" / "model.safetensors"))
