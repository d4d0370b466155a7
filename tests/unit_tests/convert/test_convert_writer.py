"""The streaming safetensors writer: files safetensors reads back bit for bit, shards as planned, order enforced."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from megatron.oellm.convert import to_hf
from megatron.oellm.convert.family import HEAD
from megatron.oellm.convert.safetensors_io import EXPORT_MARK, INDEX_NAME, ShardedSafetensorsWriter, layout_of
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, write_safetensors


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


def _mixed_widths(seed: int) -> dict[str, torch.Tensor]:
    """Fresh random tensors whose arrival order puts wide elements after narrow tensors of odd length (an fp32 after
    407 bf16 values, an fp64 after fp8 and bool bytes): written in that order their data would start misaligned."""
    generator = torch.Generator().manual_seed(seed)
    return {"m.bf16": torch.randn(37, 11, generator=generator).bfloat16(),
            "k.fp32": torch.randn(6, 5, generator=generator),
            "z.e4m3": torch.randn(13, generator=generator).to(torch.float8_e4m3fn),
            "a.bool": torch.rand(5, generator=generator) > 0.5,
            "c.fp64": torch.randn(3, 3, generator=generator).double(),
            "y.e5m2": torch.randn(7, generator=generator).to(torch.float8_e5m2),
            "b.fp16": torch.randn(9, generator=generator).half(),
            "e.empty": torch.empty(0, 4),
            "x.int64": torch.randint(-10**12, 10**12, (3,), generator=generator)}


@pytest.mark.parametrize("max_shard_bytes", [200, 10**9])
def test_each_shard_is_the_file_safetensors_itself_writes(tmp_path: Path, max_shard_bytes: int) -> None:
    """Every shard is what ``safetensors.torch.save_file`` writes for its tensors and metadata (header length and
    JSON, its padding, tensor order, data bytes; save_file orders the metadata's keys at random, so the header is
    compared as JSON), so every tensor's data starts at a multiple of its element size and a zero-copy view of the
    mapped file works for every consumer."""
    tensors = _mixed_widths(seed=int(torch.randint(0, 2**31, ())))
    files = [f for f in write_safetensors(tmp_path / "out", tensors, max_shard_bytes) if f.name != INDEX_NAME]
    assert len(files) == (1 if max_shard_bytes > 10**6 else 3)
    for f in files:
        names = list(load_file(f))
        save_file({n: tensors[n] for n in names}, tmp_path / "reference.safetensors",
                  metadata={"format": "pt", **EXPORT_MARK})
        ours, reference = f.read_bytes(), (tmp_path / "reference.safetensors").read_bytes()
        header_bytes = int.from_bytes(ours[:8], "little")
        assert ours[:8] == reference[:8], f.name
        header, reference_header = (json.loads(data[8:8 + header_bytes]) for data in (ours, reference))
        assert header == reference_header and list(header) == list(reference_header), f.name
        assert ours[8 + header_bytes:] == reference[8 + header_bytes:], f.name
        storage = torch.UntypedStorage.from_file(str(f), shared=False, nbytes=f.stat().st_size)
        mapped = torch.empty(0, dtype=torch.uint8).set_(storage)
        with safe_open(f, framework="pt") as handle:
            for name in names:
                start, end = json.loads(f.read_bytes()[8:8 + header_bytes])[name]["data_offsets"]
                data = mapped[8 + header_bytes + start:8 + header_bytes + end].view(tensors[name].dtype)
                assert_bitwise_equal({name: tensors[name]}, {name: data.reshape(tensors[name].shape)})
                assert_bitwise_equal({name: tensors[name]}, {name: handle.get_tensor(name)})


def test_the_same_tensors_written_twice_give_the_same_bytes(tmp_path: Path) -> None:
    """save_file orders a header's ``__metadata__`` keys differently from call to call; this writer keeps one order
    (``format``, the writer's metadata, the export mark), so two exports of one checkpoint are identical files (the
    README's claim: the shards are save_file's files up to that order)."""
    tensors = _mixed_widths(seed=int(torch.randint(0, 2**31, ())))
    metadata = {"oellm_source": "iter_0000100", "oellm_iteration": "100"}
    written = []
    for attempt in ("first", "second"):
        with ShardedSafetensorsWriter(tmp_path / attempt, layout_of(tensors), 200, metadata) as writer:
            writer.add(tensors)
            written.append(writer.close())
    assert len(written[0]) > 2
    for first, second in zip(*written, strict=True):
        assert first.name == second.name and first.read_bytes() == second.read_bytes(), first.name
        if first.name != INDEX_NAME:
            header = json.loads(first.read_bytes()[8:8 + int.from_bytes(first.read_bytes()[:8], "little")])
            assert list(header["__metadata__"]) == ["format", *metadata, *EXPORT_MARK], first.name


def _open_files_under(directory: Path) -> list[str]:
    """Paths under ``directory`` this process holds open (Linux ``/proc/self/fd``)."""
    links = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            links.append(os.readlink(fd))
        except OSError:  # the descriptor listing the directory itself, closed meanwhile
            continue
    return [link for link in links if link.startswith(f"{directory}{os.sep}")]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="open files are listed from Linux's /proc")
def test_a_failed_export_closes_its_shard_before_the_partial_output_is_removed(converted,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure half-way through a shard (here at the last unit) closes the shard file before the staging
    directory is removed: on NFS a file still open when deleted lives on as ``.nfs*`` and the partial output stays."""
    card, _, tmp = converted
    convert_unit = to_hf.mcore_to_hf_unit

    def fail_at_head(card, unit, mcore, *args):
        if unit == HEAD:
            raise RuntimeError("simulated failure at the head")
        return convert_unit(card, unit, mcore, *args)

    open_at_removal: list[str] = []
    rmtree = shutil.rmtree

    def recording_rmtree(path, *args, **kwargs):
        open_at_removal.extend(_open_files_under(Path(path)))
        rmtree(path, *args, **kwargs)

    monkeypatch.setattr(to_hf, "mcore_to_hf_unit", fail_at_head)
    monkeypatch.setattr(shutil, "rmtree", recording_rmtree)
    with pytest.raises(RuntimeError, match="simulated failure"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert open_at_removal == []
    assert sorted(p.name for p in tmp.iterdir()) == ["hf", "mcore"]


def test_a_tensor_of_another_dtype_than_planned_is_refused(tmp_path: Path) -> None:
    """The header states each tensor's dtype and byte range before its data arrives: a tensor of the planned name and
    shape but another dtype (4 bytes an element where the header planned 2) would spill into its neighbour's bytes."""
    tensors = _tensors(seed=int(torch.randint(0, 2**31, ())))
    writer = ShardedSafetensorsWriter(tmp_path, layout_of(tensors))
    with pytest.raises(ValueError, match=r"'a.bf16' \[37, 11\] torch.float32 arrived where the layout plans "
                                         r"'a.bf16' \[37, 11\] torch.bfloat16"):
        writer.add({"a.bf16": tensors["a.bf16"].float()})


def test_shards_are_numbered_from_one_as_save_pretrained_names_them(tmp_path: Path) -> None:
    """``model-00001-of-0000N.safetensors`` ... ``model-0000N-of-0000N.safetensors`` (transformers' names, counted
    from one): at one byte per shard each of the 8 tensors gets a shard of its own, in layout order."""
    tensors = _tensors(seed=int(torch.randint(0, 2**31, ())))
    files = write_safetensors(tmp_path, tensors, max_shard_bytes=1)
    assert [f.name for f in files] == [f"model-0000{i}-of-00008.safetensors" for i in range(1, 9)] + [INDEX_NAME]
    assert [list(load_file(f)) for f in files[:-1]] == [[name] for name in tensors]


def test_a_shard_filled_exactly_to_the_limit_is_not_split(tmp_path: Path) -> None:
    """``max_shard_bytes`` is the most a shard holds, reached included (as ``save_pretrained`` cuts): tensors whose
    bytes sum to exactly the limit share one file, and no shard of several tensors holds more."""
    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    tensors = {f"t{i}": torch.randn(*torch.randint(1, 9, (2,), generator=generator).tolist(), generator=generator)
               .to(dtypes[int(torch.randint(0, 3, (), generator=generator))]) for i in range(8)}
    together = int(torch.randint(2, 8, (), generator=generator))
    limit = sum(tensor.nbytes for tensor in list(tensors.values())[:together])
    files = write_safetensors(tmp_path, tensors, max_shard_bytes=limit)
    shards = [list(load_file(f)) for f in files if f.name != INDEX_NAME]
    assert sorted(shards[0]) == sorted(list(tensors)[:together]), (limit, shards)
    assert all(len(names) == 1 or sum(tensors[name].nbytes for name in names) <= limit for names in shards), shards
