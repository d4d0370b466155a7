"""The streaming safetensors writer: files safetensors reads back bit for bit, shards as planned, order enforced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from convert_helpers import assert_bitwise_equal, write_safetensors
from safetensors.torch import load_file

from megatron.oellm.convert.safetensors_io import INDEX_NAME, ShardedSafetensorsWriter, layout_of


def _tensors(seed: int) -> dict[str, torch.Tensor]:
    """Fresh random tensors of every kind the writer meets: dtypes of several widths, a transposed (non-contiguous)
    view, a row slice sharing its base, a scalar, an empty tensor."""
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(48, 40, generator=generator)
    return {"a.bf16": torch.randn(37, 11, generator=generator).bfloat16(),
            "b.transposed": base.t(),
            "c.rows": base[5:17],
            "d.scalar": torch.randn((), generator=generator).double(),
            "e.empty": torch.empty(0, 8, dtype=torch.float16),
            "f.int": torch.randint(-1000, 1000, (13,), generator=generator, dtype=torch.int32),
            "g.bool": torch.rand(9, generator=generator) > 0.5,
            "h.fp16": torch.randn(3, 5, 7, generator=generator).half()}


@pytest.mark.parametrize("max_shard_bytes", [1, 2_000, 10**9])
def test_written_files_load_back_bit_for_bit(tmp_path: Path, max_shard_bytes: int) -> None:
    """Every tensor comes back from ``safetensors.torch.load_file`` identical (dtype, shape, bits); the index maps
    each to the file holding it and totals the bytes."""
    tensors = _tensors(seed=int(torch.randint(0, 2**31, ())))
    files = write_safetensors(tmp_path, tensors, max_shard_bytes)
    shards = [f for f in files if f.name != INDEX_NAME]
    loaded = {name: tensor for f in shards for name, tensor in load_file(f).items()}
    assert_bitwise_equal({n: t.contiguous() for n, t in tensors.items()}, loaded)
    if len(shards) > 1:
        index = json.loads((tmp_path / INDEX_NAME).read_text())
        assert index["weight_map"] == {name: f.name for f in shards for name in load_file(f)}
        assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors.values())
    else:
        assert [f.name for f in files] == ["model.safetensors"]


def test_a_tensor_out_of_the_planned_order_is_refused(tmp_path: Path) -> None:
    """The headers are written before the data, so a tensor the layout does not plan there cannot be written."""
    tensors = _tensors(seed=3)
    writer = ShardedSafetensorsWriter(tmp_path, layout_of(tensors))
    with pytest.raises(ValueError, match="'b.transposed' .* arrived where the layout plans 'a.bf16'"):
        writer.add({"b.transposed": tensors["b.transposed"]})
    writer.add({"a.bf16": tensors["a.bf16"]})
    with pytest.raises(ValueError, match=r"7 tensors of the layout were not written, the first 'b.transposed'"):
        writer.close()
