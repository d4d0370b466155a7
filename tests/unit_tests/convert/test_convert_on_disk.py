"""HF safetensors -> megatron-core distributed checkpoint -> HF safetensors, through files, and the input checks
(among them: a tensor given twice, under two names or in both expert layouts, is refused)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
import transformers
from torch.distributed.checkpoint.metadata import MetadataIndex

from megatron.oellm.cards import get_card
from megatron.oellm.convert import to_hf, to_mcore
from megatron.oellm.convert.dist_ckpt import COMMON_STATE_KEY, CheckpointReader
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import family_module
from megatron.oellm.convert.mcore_checkpoint import CARD_KEY, ITERATION_FILE, RELEASE
from megatron.oellm.convert.safetensors_io import INDEX_NAME, SafetensorsSource
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import (
    assert_bitwise_equal,
    edit_json,
    fuse_experts,
    random_hf_tensors,
    write_hf,
    write_safetensors,
)

TINY_CARDS = ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"]


@pytest.mark.parametrize("name", TINY_CARDS)
def test_round_trip_through_files_is_bit_exact_and_loads_in_transformers(name: str, tmp_path: Path) -> None:
    """Every tensor bit for bit, and the source config's token ids (which the card does not know) survive."""
    card = get_card(name)
    hf = random_hf_tensors(card, seed=3)
    write_hf(card, hf, tmp_path / "hf")
    edit_json(tmp_path / "hf" / "config.json", bos_token_id=3, eos_token_id=5, pad_token_id=4)
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert (tmp_path / "mcore" / ITERATION_FILE).read_text().strip() == RELEASE
    reader = CheckpointReader(tmp_path / "mcore" / RELEASE)
    assert reader.common_state()[CARD_KEY]["name"] == card.name
    mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out", max_shard_bytes=200_000)
    assert (tmp_path / "out" / INDEX_NAME).is_file()
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))
    model = getattr(transformers, card.hf_architecture).from_pretrained(tmp_path / "out", dtype=torch.bfloat16)
    assert_bitwise_equal(fuse_experts(card, hf), dict(model.state_dict()))
    assert (model.config.bos_token_id, model.config.eos_token_id, model.config.pad_token_id) == (3, 5, 4)


def test_published_layout_is_read(tmp_path: Path) -> None:
    """``model.language_model.`` names, fused experts, vision and MTP tensors (skipped), nested text_config."""
    card = get_card("qwen3.5-35b-a3b-tiny")
    hf = random_hf_tensors(card, seed=4)
    published = {("model.language_model." + n[len("model."):] if n.startswith("model.") else n): t
                 for n, t in fuse_experts(card, hf).items()}
    published["model.visual.patch_embed.proj.weight"] = torch.randn(4, 4)
    published["mtp.fc.weight"] = torch.randn(4, 4)
    write_safetensors(tmp_path / "hf", published)
    config = family_module(card).hf_config_from_card(card).to_dict()
    for name in ("architectures", "model_type", "bos_token_id", "eos_token_id"):
        config.pop(name, None)
    multimodal = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
                  "eos_token_id": 7, "text_config": {**config, "bos_token_id": 3}, "vision_config": {"depth": 2}}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(multimodal))
    summary = hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert summary.skipped == ["model.visual.patch_embed.proj.weight", "mtp.fc.weight"]
    summary = mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))
    # the export holds the language model alone: its config is the text model's, with the top-level token id
    assert "text model's part of the multimodal config" in summary.notes[0]
    exported = transformers.AutoConfig.from_pretrained(tmp_path / "out")
    assert type(exported).__name__ == "Qwen3_5MoeTextConfig"
    assert (exported.architectures, exported.bos_token_id, exported.eos_token_id) == (["Qwen3_5MoeForCausalLM"], 3, 7)
    assert not hasattr(exported, "vision_config")


def test_missing_tensor_fails_before_writing(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    del hf["model.layers.1.mlp.experts.3.up_proj.weight"]
    write_hf(card, hf, tmp / "hf")
    with pytest.raises(ConversionError, match=r"missing tensor 'model\.layers\.1\.mlp\.experts\.3\.up_proj\.weight'"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    assert not (tmp / "mcore").exists()


def test_shape_mismatch_names_tensor_and_card(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    hf["model.layers.0.self_attn.k_proj.weight"] = torch.randn(32, card.hidden_size, dtype=torch.bfloat16)
    write_hf(card, hf, tmp / "hf")
    (tmp / "hf" / "config.json").unlink()
    with pytest.raises(ConversionError, match=r"k_proj\.weight' has shape \[32, 64\], card qwen3-30b-a3b-tiny"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")


def test_config_of_another_model_is_rejected(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    with pytest.raises(ConversionError, match="num_hidden_layers"):
        hf_to_mcore_checkpoint(get_card("qwen3-30b-a3b-proxy-4L"), tmp / "hf", tmp / "mcore")


def test_bad_paths_are_clear_errors(tmp_path: Path) -> None:
    card = get_card("qwen3-30b-a3b-tiny")
    with pytest.raises(ConversionError, match="not a directory"):
        hf_to_mcore_checkpoint(card, tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConversionError, match=r"no \*\.safetensors"):
        hf_to_mcore_checkpoint(card, tmp_path / "empty", tmp_path / "out")
    with pytest.raises(ConversionError, match="not a megatron-core distributed checkpoint"):
        mcore_to_hf_checkpoint(card, tmp_path / "empty", tmp_path / "out")


def test_mcore_checkpoint_of_another_card_is_rejected(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    with pytest.raises(ConversionError, match="num_layers"):
        mcore_to_hf_checkpoint(get_card("qwen3-30b-a3b-proxy-4L"), tmp / "mcore", tmp / "out")


def test_unreadable_hf_files_are_named(tiny_hf) -> None:
    """A truncated shard, a malformed index, an index naming the wrong shard, a tensor in two unindexed files."""
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    index = json.loads((tmp / "hf" / INDEX_NAME).read_text())
    shard = tmp / "hf" / index["weight_map"]["model.norm.weight"]
    data = shard.read_bytes()
    shard.write_bytes(data[:len(data) // 2])
    with pytest.raises(ConversionError, match=f"cannot read {shard}"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    shard.write_bytes(data)
    (tmp / "hf" / INDEX_NAME).write_text('{"weight_map": ')
    with pytest.raises(ConversionError, match="is not a safetensors index"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    other = next(f for f in sorted(set(index["weight_map"].values())) if f != shard.name)
    wrong_map = {**index["weight_map"], "model.norm.weight": other}
    (tmp / "hf" / INDEX_NAME).write_text(json.dumps({"weight_map": wrong_map}))
    with pytest.raises(ConversionError, match=rf"puts tensor 'model\.norm\.weight' in {other}"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    (tmp / "hf" / INDEX_NAME).unlink()
    write_safetensors(tmp / "stale", {"model.norm.weight": hf["model.norm.weight"] + 1})
    (tmp / "stale" / "model.safetensors").rename(tmp / "hf" / "old.safetensors")
    with pytest.raises(ConversionError, match=r"tensor 'model\.norm\.weight' is in both"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    assert not (tmp / "mcore").exists()


@pytest.mark.parametrize(("name", "dtype", "message"), [
    ("model.norm.weight", torch.float8_e4m3fn, "F8_E4M3"),
    ("model.norm.weight", torch.int32, "torch.int32"),
    ("model.layers.0.self_attn.q_proj.weight", torch.float32,
     r"'model\.layers\.0\.self_attn\.q_proj\.weight' is torch\.float32 but megatron fuses it with "
     r"'model\.layers\.0\.self_attn\.k_proj\.weight' \(torch\.bfloat16\)"),
    ("model.layers.0.self_attn.k_proj.weight", torch.float32,
     r"'model\.layers\.0\.self_attn\.k_proj\.weight' is torch\.float32 but megatron fuses it with "
     r"'model\.layers\.0\.self_attn\.q_proj\.weight' \(torch\.bfloat16\)"),
    ("model.layers.1.mlp.experts.2.up_proj.weight", torch.float16,
     r"tensors 'model\.layers\.1\.mlp\.experts\.2\.gate_proj\.weight' \(torch\.bfloat16\), "
     r"'model\.layers\.1\.mlp\.experts\.2\.up_proj\.weight' \(torch\.float16\) differ in dtype"),
    ("model.layers.1.input_layernorm.weight", torch.float32,
     r"^HF tensors in 2 dtypes are stored in one megatron checkpoint tensor "
     r"'decoder\.layers\.self_attention\.linear_qkv\.layer_norm_weight', which has one dtype: 1 in torch\.bfloat16 "
     r"\('model\.layers\.0\.input_layernorm\.weight'\); 1 in torch\.float32 \('model\.layers\.1\.input_layernorm\."
     r"weight'\); save the checkpoint in one dtype$")],
    ids=["fp8", "int", "fused-q-odd", "fused-k-odd", "fused-gate-up", "stacked-layers"])
def test_weights_of_other_dtypes_are_rejected(tiny_hf, name: str, dtype: torch.dtype, message: str) -> None:
    """FP8 (a quantized checkpoint), integers, and tensors megatron fuses stored in different dtypes (``torch.cat``
    would promote them, so the round trip would change a dtype): the message names the odd one out. The same for
    tensors megatron stores in one checkpoint tensor (``GPTModel``'s layers, a layer's experts), named by their HF
    names; the tiny card's two layers in two dtypes are a tie, so neither is called the odd one."""
    card, hf, tmp = tiny_hf
    write_hf(card, {**hf, name: hf[name].to(dtype)}, tmp / "hf")
    with pytest.raises(ConversionError, match=message):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    assert not (tmp / "mcore").exists()


def test_standalone_tensor_may_have_its_own_dtype(tmp_path: Path) -> None:
    card = get_card("qwen3.5-35b-a3b-tiny")
    hf = random_hf_tensors(card, seed=6)
    hf["model.layers.0.linear_attn.A_log"] = hf["model.layers.0.linear_attn.A_log"].float()
    write_hf(card, hf, tmp_path / "hf")
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))


def test_config_with_another_router_top_k_or_broken_json_is_rejected(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    config = json.loads((tmp / "hf" / "config.json").read_text())
    (tmp / "hf" / "config.json").write_text(json.dumps({**config, "num_experts_per_tok": card.moe_router_topk + 1}))
    with pytest.raises(ConversionError, match="num_experts_per_tok"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    (tmp / "hf" / "config.json").write_text('{"vocab_size": ')
    with pytest.raises(ConversionError, match="config.json is not valid JSON"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_failed_conversion_leaves_nothing_behind(tiny_hf, monkeypatch: pytest.MonkeyPatch, direction: str) -> None:
    """A conversion that fails while writing (disk full, Ctrl-C) removes its partial output."""
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    before = sorted(tmp.iterdir())
    convert = to_mcore.hf_to_mcore_unit if direction == "hf-to-mcore" else to_hf.mcore_to_hf_unit

    def fail_at_layer_one(card, unit, tensors):
        if unit == 1:
            raise OSError("No space left on device")
        return convert(card, unit, tensors)

    monkeypatch.setattr(to_mcore if direction == "hf-to-mcore" else to_hf, convert.__name__, fail_at_layer_one)
    with pytest.raises(BaseException, match="No space left"):  # torch wraps it in a CheckpointException(BaseException)
        if direction == "hf-to-mcore":
            hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "out")
        else:
            mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert sorted(tmp.iterdir()) == before


def test_output_into_the_input_iteration_is_refused(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    with pytest.raises(ConversionError, match="would overwrite the input"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "mcore" / RELEASE, overwrite=True)
    assert (tmp / "mcore" / RELEASE / ".metadata").is_file()


def test_output_inside_an_input_folder_is_refused_in_both_directions(tiny_hf) -> None:
    """``--out`` in a subfolder of the HF model (or of the megatron checkpoint) was written there: every later copy or
    upload of the input folder then carried the other model's files along. Refused before anything is written."""
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    inside = tmp / "hf" / f"mcore{random.randrange(100)}"
    with pytest.raises(ConversionError, match=rf"output {inside} lies inside the input folder {tmp / 'hf'}: "):
        hf_to_mcore_checkpoint(card, tmp / "hf", inside)
    assert not inside.exists()
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    inside = tmp / "mcore" / "hf"
    with pytest.raises(ConversionError, match=rf"output {inside} lies inside the input folder {tmp / 'mcore'}: "):
        mcore_to_hf_checkpoint(card, tmp / "mcore", inside)
    assert not inside.exists()


def test_unreadable_iteration_marker_is_a_clear_error(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    (tmp / "mcore" / ITERATION_FILE).write_text("latest\n")
    with pytest.raises(ConversionError, match="holds 'latest'"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")


@pytest.mark.parametrize(("marker", "message"), [
    ("100\n", r"names 100, but .*iter_0000100 is missing \(present: release\); pass the iteration directory"),
    (b"\xff\xfe100", r"cannot read .*latest_checkpointed_iteration\.txt: 'utf-8' codec can't decode")],
    ids=["missing-iteration", "not-text"])
def test_an_iteration_marker_naming_no_directory_is_a_clear_error(converted, marker: str | bytes, message: str) -> None:
    """A marker naming an iteration whose directory is not there (copied without it) is refused naming both and the
    iterations that are there, not as a directory without ``.metadata``; a marker that is not text is refused
    without a traceback."""
    card, _, tmp = converted
    path = tmp / "mcore" / ITERATION_FILE
    path.write_bytes(marker if isinstance(marker, bytes) else marker.encode())
    with pytest.raises(ConversionError, match=message):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert not (tmp / "out").exists()


def test_hybrid_checkpoint_with_more_layers_than_the_card_is_rejected(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint that records no card (as megatron training writes) must not lose layers silently: HybridModel
    keys carry the layer number, so extra layers are extra keys, not a shape mismatch."""
    card = get_card("qwen3.5-35b-a3b-tiny")
    deeper = card.with_layers(2 * card.num_layers, name="deeper")
    write_hf(deeper, random_hf_tensors(deeper, seed=8), tmp_path / "hf")
    (tmp_path / "hf" / "config.json").unlink()
    monkeypatch.setattr(to_mcore, "card_record", lambda card: {})
    hf_to_mcore_checkpoint(deeper, tmp_path / "hf", tmp_path / "mcore")
    with pytest.raises(ConversionError, match=rf"unexpected tensor 'decoder\.layers\.{2 * card.num_layers}\."):
        mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_router_expert_bias_is_refused_with_what_it_would_change(tiny_hf, monkeypatch: pytest.MonkeyPatch) -> None:
    """megatron-core stores --moe-router-enable-expert-bias's bias as a persistent router buffer; dropping it would
    change the routing of the converted model, so it is refused as such (not as a wrong card)."""
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    shapes = CheckpointReader.tensor_shapes
    bias = {"decoder.layers.mlp.router.expert_bias": ((card.num_layers, card.num_experts), torch.float32)}
    monkeypatch.setattr(CheckpointReader, "tensor_shapes", lambda reader: shapes(reader) | bias)
    with pytest.raises(ConversionError, match=r"router state 'decoder\.layers\.mlp\.router\.expert_bias' .* route "
                                              r"differently"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert not (tmp / "out").exists()


def test_multi_token_prediction_block_is_left_out_and_reported(tiny_hf, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run trained with --mtp-num-layers stores an ``mtp.`` block the HF causal LM has no tensors for: the export
    leaves it out and lists every such key in the summary, rather than dropping it unsaid."""
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    shapes = CheckpointReader.tensor_shapes
    hidden = card.hidden_size
    mtp = {"mtp.layers.0.eh_proj.weight": ((hidden, 2 * hidden), torch.bfloat16),
           "mtp.layers.0.enorm.weight": ((hidden,), torch.bfloat16)}
    monkeypatch.setattr(CheckpointReader, "tensor_shapes", lambda reader: shapes(reader) | mtp)
    summary = mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert summary.skipped == sorted(mtp)
    written = list(SafetensorsSource(tmp / "out"))
    assert not [name for name in written if "mtp" in name]
    assert set(written) == set(hf)


def test_output_into_an_empty_current_directory_keeps_that_directory(tiny_hf, monkeypatch: pytest.MonkeyPatch) -> None:
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    (tmp / "here").mkdir()
    monkeypatch.chdir(tmp / "here")
    inode = (tmp / "here").stat().st_ino
    hf_to_mcore_checkpoint(card, tmp / "hf", Path("."))
    assert (tmp / "here").stat().st_ino == inode
    assert sorted(p.name for p in Path(".").iterdir()) == [ITERATION_FILE, RELEASE]


def test_index_next_to_a_single_file_is_ambiguous(tiny_hf) -> None:
    """transformers reads ``model.safetensors`` when both are there, the index otherwise: refuse, naming both."""
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    write_safetensors(tmp / "single", random_hf_tensors(card, seed=9), max_shard_bytes=10**9)
    (tmp / "single" / "model.safetensors").rename(tmp / "hf" / "model.safetensors")
    with pytest.raises(ConversionError, match=f"holds both {INDEX_NAME} and model.safetensors"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")


def test_a_tensor_under_its_published_and_its_short_name_is_refused(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    norm = "model.layers.0.input_layernorm.weight"
    write_hf(card, {**hf, "model.language_model.layers.0.input_layernorm.weight": hf[norm] + 1}, tmp / "hf")
    with pytest.raises(ConversionError, match=r"(?=.*'model\.language_model\.layers\.0\.input_layernorm\.weight')"
                                              rf"(?=.*'{norm}')tensors .* are both '{norm}'"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_experts_in_both_layouts_are_refused(tmp_path: Path, name: str) -> None:
    """Fused ``experts.gate_up_proj`` / ``down_proj`` next to the per-expert tensors of the same layer (two files
    without an index, e.g. a fused dump beside an older save): the converter would read the fused ones and drop the
    per-expert ones without a word; which of the two the user meant is unknown, so it is refused, naming both."""
    card = get_card(name)
    hf = random_hf_tensors(card, seed=24)
    per_expert_changed = {n: (t + 1 if ".mlp.experts." in n else t) for n, t in hf.items()}
    write_hf(card, {**per_expert_changed, **fuse_experts(card, hf)}, tmp_path / "hf")
    with pytest.raises(ConversionError, match=r"'model\.layers\.0\.mlp\.experts\.(gate_up_proj|down_proj)' and "
                                              r"'model\.layers\.0\.mlp\.experts\.0\.(gate|up|down)_proj\.weight' "
                                              r"both hold"):
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert not (tmp_path / "mcore").exists()


def test_each_expert_layout_alone_still_converts(tmp_path: Path) -> None:
    card = get_card("qwen3.5-35b-a3b-tiny")
    hf = random_hf_tensors(card, seed=25)
    write_hf(card, fuse_experts(card, hf), tmp_path / "hf")
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))


def _damage(release: Path, how: str) -> str:
    """Damage the checkpoint in ``release`` as a cut-short or incomplete copy would; the expected message."""
    data = sorted(release.glob("*.distcp"))[-1]
    if how == "truncated-data":
        data.write_bytes(data.read_bytes()[:1000])
        return rf"{data.name} has 1000 bytes, \.metadata stores data up to byte \d+; the file is truncated"
    if how == "missing-data":
        data.unlink()
        return rf"{data.name} is missing"
    if how == "truncated-metadata":
        (release / ".metadata").write_bytes((release / ".metadata").read_bytes()[:100])
        return r"cannot read .*\.metadata: UnpicklingError"
    if how == "garbled-common-state":
        stored = dcp.FileSystemReader(release).read_metadata().storage_data[MetadataIndex(COMMON_STATE_KEY)]
        data = release / stored.relative_path
        content = bytearray(data.read_bytes())
        content[stored.offset:stored.offset + 64] = bytes(64)
        data.write_bytes(bytes(content))
        return r"cannot read the common state of .*; the checkpoint is damaged"
    content = bytearray(data.read_bytes())
    content[:64] = bytes(64)
    data.write_bytes(bytes(content))
    return rf"cannot read the checkpoint data in .*{data.name} \(UnpicklingError\); the checkpoint is damaged"


@pytest.mark.parametrize("how", ["truncated-data", "missing-data", "truncated-metadata", "garbled-data",
                                 "garbled-common-state"])
def test_damaged_mcore_checkpoint_is_a_clear_error(converted, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Cut, lost and garbled files are named; the first three before any tensor is read."""
    card, _, tmp = converted
    message = _damage(tmp / "mcore" / RELEASE, how)
    if not how.startswith("garbled"):
        monkeypatch.setattr(CheckpointReader, "read", lambda reader, pieces: pytest.fail("a tensor was read"))
    with pytest.raises(ConversionError, match=message):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert sorted(p.name for p in tmp.iterdir()) == ["hf", "mcore"]


@pytest.mark.parametrize("given", ["mcore", "mcore/release"])
def test_a_megatron_checkpoint_given_as_hf_names_the_other_direction(converted, given: str) -> None:
    """``--hf`` naming a megatron checkpoint (or its iteration) is the directions swapped: the refusal says so and
    names mcore-to-hf, instead of advising to convert ``.bin`` files."""
    card, _, tmp = converted
    with pytest.raises(ConversionError, match=rf"--hf {re.escape(str(tmp / given))} is a megatron checkpoint .*"
                                              r"oellm convert mcore-to-hf --mcore"):
        hf_to_mcore_checkpoint(card, tmp / given, tmp / "out")
    assert not (tmp / "out").exists()


def test_a_data_file_one_byte_short_is_named_before_any_tensor_is_read(converted) -> None:
    """Each data file ends with its last item (offset + length); one byte cut off the end of the last is refused up
    front, naming the file's size and the byte its data reaches (the complete file's size)."""
    _, _, tmp = converted
    release = tmp / "mcore" / RELEASE
    data = sorted(release.glob("*.distcp"))[-1]
    content = data.read_bytes()
    data.write_bytes(content[:-1])
    with pytest.raises(ConversionError, match=rf"{data.name} has {len(content) - 1} bytes, \.metadata stores data up "
                                              rf"to byte {len(content)}; the file is truncated"):
        CheckpointReader(release)
