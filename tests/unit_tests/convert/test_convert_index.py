"""A sharded HF checkpoint whose ``model.safetensors.index.json`` and shards disagree is named, not half-read."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.safetensors_io import INDEX_NAME, SafetensorsSource, checkpoint_files
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import write_hf, write_safetensors


def _sharded(tiny_hf) -> tuple[Path, dict]:
    """The tiny card's random tensors as a sharded checkpoint; (directory, its index)."""
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    index = json.loads((tmp / "hf" / INDEX_NAME).read_text())
    assert len(set(index["weight_map"].values())) > 2
    return tmp / "hf", index


def _convert(tiny_hf) -> None:
    card, _, tmp = tiny_hf
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")


def test_a_tensor_the_index_leaves_out_is_named_with_its_shard(tiny_hf) -> None:
    """The tensor is in a listed shard (transformers would load it): not reported as missing from the checkpoint."""
    hf_dir, index = _sharded(tiny_hf)
    name = "model.layers.0.mlp.gate.weight"
    shard = index["weight_map"].pop(name)
    (hf_dir / INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(ConversionError, match=rf"{shard} holds tensor '{name}' .*does not list"):
        _convert(tiny_hf)
    assert not (tiny_hf[2] / "mcore").exists()


def test_a_shard_the_index_does_not_list_is_named(tiny_hf) -> None:
    """A shard of another save beside the index (an older revision's, a re-download cut short)."""
    hf_dir, index = _sharded(tiny_hf)
    card, hf, tmp = tiny_hf
    written = write_safetensors(tmp / "other", {"model.norm.weight": hf["model.norm.weight"] + 1,
                                                "lm_head.weight": hf["lm_head.weight"]}, max_shard_bytes=1)
    stale = "model-00009-of-00009.safetensors"
    written[0].rename(hf_dir / stale)
    with pytest.raises(ConversionError, match=rf"holds shard\(s\) {stale} that {INDEX_NAME} does not list"):
        _convert(tiny_hf)


def test_a_shard_the_index_lists_that_is_missing_is_named(tiny_hf) -> None:
    hf_dir, index = _sharded(tiny_hf)
    shard = sorted(set(index["weight_map"].values()))[1]
    (hf_dir / shard).unlink()
    with pytest.raises(ConversionError, match=rf"lists 1 shard\(s\) that are not in .*: {shard}; download"):
        _convert(tiny_hf)


@pytest.mark.parametrize("value", [None, 3, "", "..", "../model-00001-of-00002.safetensors", "/etc/passwd",
                                   "sub/model-00001-of-00002.safetensors"])
def test_an_index_entry_that_is_no_file_name_is_a_clear_error(tiny_hf, value: object) -> None:
    hf_dir, index = _sharded(tiny_hf)
    index["weight_map"]["model.norm.weight"] = value
    (hf_dir / INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(ConversionError, match=r"maps tensor 'model\.norm\.weight' to .*not to a safetensors file"):
        _convert(tiny_hf)


def test_the_index_is_looked_up_once_per_source(tiny_hf) -> None:
    """The source decides once whether the checkpoint is indexed: an index replaced or removed after it was read
    (another job re-downloading the model) must not turn off the check of the shards against the index that gave
    the tensor map, nor drop the index from the input files a conversion refuses to write over."""
    hf_dir, index = _sharded(tiny_hf)
    name = "model.layers.0.mlp.gate.weight"
    shard = index["weight_map"].pop(name)
    (hf_dir / INDEX_NAME).write_text(json.dumps(index))
    source = SafetensorsSource(hf_dir)
    (hf_dir / INDEX_NAME).unlink()
    assert hf_dir / INDEX_NAME in source.input_files()
    with pytest.raises(ConversionError, match=rf"{shard} holds tensor '{name}' .*does not list"):
        source.shapes()


def test_a_tensor_also_in_a_shard_the_index_does_not_name_for_it_is_named(tiny_hf) -> None:
    """A shard holding a second copy (other values) of a tensor the index places in another shard: transformers
    and this converter could read different weights for it, so the checkpoint is refused, naming that shard."""
    from safetensors.torch import load_file, save_file

    hf_dir, index = _sharded(tiny_hf)
    name = "model.layers.0.mlp.gate.weight"
    listed_in = index["weight_map"][name]
    other = next(f for f in sorted(set(index["weight_map"].values())) if f != listed_in)
    held = load_file(hf_dir / other)
    held[name] = tiny_hf[1][name] + torch.rand_like(tiny_hf[1][name]) + 0.5
    save_file(held, hf_dir / other, metadata={"format": "pt"})
    with pytest.raises(ConversionError, match=rf"{other} holds tensor '{name}' .*does not list in that file"):
        SafetensorsSource(hf_dir).shapes()


def _shards_without_index(tiny_hf) -> list[str]:
    """:func:`_sharded` with its index deleted (a download that left it out); the shard file names, in order."""
    hf_dir, index = _sharded(tiny_hf)
    (hf_dir / INDEX_NAME).unlink()
    return sorted(set(index["weight_map"].values()))


def test_a_missing_shard_of_a_folder_without_index_is_named(tiny_hf) -> None:
    """``model-0000K-of-0000N`` files without an index, one of them deleted (a download cut short): the missing file
    is named, in one line, before any tensor is read, not its first tensor as missing from the model."""
    shards = _shards_without_index(tiny_hf)
    gone = shards[int(torch.randint(0, len(shards), ()))]
    (tiny_hf[2] / "hf" / gone).unlink()
    with pytest.raises(ConversionError, match=rf"lacks shard\(s\) {gone} of {len(shards)} \(and has no "
                                              rf"{INDEX_NAME}\); download the missing shards") as refusal:
        _convert(tiny_hf)
    assert "\n" not in str(refusal.value)
    assert not (tiny_hf[2] / "mcore").exists()


def test_shards_of_two_saves_in_a_folder_without_index_are_named(tiny_hf) -> None:
    """Shards of two saves with differing totals (``-of-N``) in one folder without an index: named by total, not
    taken for one checkpoint with missing or duplicate tensors."""
    card, hf, tmp = tiny_hf
    shards = _shards_without_index(tiny_hf)
    other = [path for path in write_safetensors(tmp / "other", hf, max_shard_bytes=60_000) if path.name != INDEX_NAME]
    assert len(other) != len(shards)
    stale = other[int(torch.randint(0, len(other), ()))]
    stale.rename(tmp / "hf" / stale.name)
    (tmp / "hf" / shards[int(torch.randint(0, len(shards), ()))]).unlink()
    with pytest.raises(ConversionError, match=rf"holds shards of 2 saves and no {INDEX_NAME} \(.*"
                                              rf"1 of -of-{len(other):05d}: {stale.name}") as refusal:
        _convert(tiny_hf)
    assert "\n" not in str(refusal.value)


def test_a_shard_numbered_beyond_its_total_without_index_is_named(tiny_hf) -> None:
    """A ``model-0000K-of-0000N`` file with K > N beside a complete set (a renamed or hand-made file) and no index:
    named, not read as part of the checkpoint (its tensors were taken as duplicates or extras of the model)."""
    shards = _shards_without_index(tiny_hf)
    total = len(shards)
    beyond = f"model-{total + int(torch.randint(1, 4, ())):05d}-of-{total:05d}.safetensors"
    hf_dir = tiny_hf[2] / "hf"
    (hf_dir / beyond).write_bytes((hf_dir / shards[0]).read_bytes())
    with pytest.raises(ConversionError, match=rf"holds shard\(s\) {beyond} numbered outside the 1 to {total} their names count "
                                              rf"\(and has no {INDEX_NAME}\)") as refusal:
        _convert(tiny_hf)
    assert "\n" not in str(refusal.value)
    assert not (tiny_hf[2] / "mcore").exists()


def _shard_files(directory: Path, names: list[str]) -> None:
    """Files ``names`` in ``directory``, each a safetensors file of one small random tensor."""
    directory.mkdir()
    for name in names:
        save_file({"x": torch.randn(2, 3)}, directory / name)


def test_a_total_past_any_download_is_refused_without_listing_it(tmp_path: Path) -> None:
    """``model-00001-of-99999999999``: the missing shards are named, the first three and how many more, without
    building a list of 99999999999 names (a MemoryError traceback after seconds)."""
    _shard_files(tmp_path / "hf", ["model-00001-of-99999999999.safetensors"])
    with pytest.raises(ConversionError, match=r"lacks shard\(s\) model-00002-of-99999999999\.safetensors, "
                                              r"model-00003-of-99999999999\.safetensors, model-00004-of-99999999999\."
                                              r"safetensors and 99999999995 more of 99999999999 \(and has no "):
        checkpoint_files(tmp_path / "hf")


def test_a_total_of_six_digits_is_read_with_transformers_padding(tmp_path: Path) -> None:
    """transformers pads shard numbers to 5 digits whatever the total (``model-00001-of-100000``): the present
    shards are read as numbers 1 and 3, and the missing ones are named with the same padding."""
    _shard_files(tmp_path / "hf", ["model-00001-of-100000.safetensors", "model-00003-of-100000.safetensors"])
    with pytest.raises(ConversionError, match=r"lacks shard\(s\) model-00002-of-100000\.safetensors, "
                                              r"model-00004-of-100000\.safetensors, model-00005-of-100000\."
                                              r"safetensors and 99995 more of 100000 \("):
        checkpoint_files(tmp_path / "hf")


def test_a_shard_numbered_zero_is_outside_its_total(tmp_path: Path) -> None:
    """``model-00000-of-00002`` beside shards 1 and 2: numbered outside 1 to 2, not "beyond" its total."""
    _shard_files(tmp_path / "hf", [f"model-0000{number}-of-00002.safetensors" for number in range(3)])
    with pytest.raises(ConversionError, match=r"holds shard\(s\) model-00000-of-00002\.safetensors numbered "
                                              r"outside the 1 to 2 their names count"):
        checkpoint_files(tmp_path / "hf")


def test_a_total_of_zero_shards_is_refused_as_such(tmp_path: Path) -> None:
    """``model-00001-of-00000``: no save writes a total of 0; it was reported as "outside the 1 to 0"."""
    _shard_files(tmp_path / "hf", ["model-00001-of-00000.safetensors"])
    with pytest.raises(ConversionError, match=r"holds shard\(s\) model-00001-of-00000\.safetensors of a total of 0 "
                                              r"\(and has no "):
        checkpoint_files(tmp_path / "hf")


def test_one_shard_number_in_two_paddings_is_named(tmp_path: Path) -> None:
    """``model-00001-of-00002`` and ``model-000001-of-00002`` (two saves padding differently) hold shard 1 twice:
    named, not read as one checkpoint whose tensors then clash or double."""
    number = random.choice([1, 2])
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
             f"model-{number:06d}-of-00002.safetensors"]
    _shard_files(tmp_path / "hf", names)
    first, second = sorted([names[number - 1], names[2]])
    with pytest.raises(ConversionError, match=rf"holds shard number {number} of 2 twice, {re.escape(first)} and "
                                              rf"{re.escape(second)} \(and has no "):
        checkpoint_files(tmp_path / "hf")
