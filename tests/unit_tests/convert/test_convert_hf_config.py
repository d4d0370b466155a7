"""The HF ``config.json`` / ``generation_config.json``: checked against the card (shapes, RoPE, activation, model
type), kept with the megatron checkpoint and written back unchanged, or taken from ``--hf-config``."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.convert.dist_ckpt import CheckpointReader
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.mcore_checkpoint import HF_CONFIG_KEY, RELEASE
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, edit_json, random_hf_tensors, write_hf

GENERATION = {"bos_token_id": 3, "eos_token_id": [5, 6], "pad_token_id": 5, "temperature": 0.7, "top_p": 0.8}


def _published_like(directory: Path) -> None:
    """Give the config.json of ``directory`` token ids and a field the card does not know (published checkpoints
    have both) and add a generation_config.json."""
    edit_json(directory / "config.json", bos_token_id=3, eos_token_id=5, pad_token_id=5, custom_note="kept")
    (directory / "generation_config.json").write_text(json.dumps(GENERATION, indent=1) + "\n")


@pytest.mark.parametrize(("card_name", "fields", "message"), [
    ("qwen3-30b-a3b-tiny", {"rope_parameters": {"rope_type": "default", "rope_theta": 12345.0}},
     r"rope_parameters\.rope_theta: checkpoint 12345\.0, card 1000000\.0"),
    ("qwen3-30b-a3b-tiny", {"rope_parameters": None, "rope_theta": 12345.0},
     r"rope_parameters\.rope_theta: checkpoint 12345\.0"),
    ("qwen3-30b-a3b-tiny", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                                                "original_max_position_embeddings": 1024}},
     r"rope_parameters\.rope_type: checkpoint 'yarn', card 'default'"),
    ("qwen3.5-35b-a3b-tiny", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e7,
                                                  "partial_rotary_factor": 0.5}},
     r"rope_parameters\.partial_rotary_factor: checkpoint 0\.5, card 0\.25"),
    ("qwen3-30b-a3b-tiny", {"hidden_act": "gelu"}, r"hidden_act: checkpoint 'gelu', card 'silu'"),
    ("qwen3-30b-a3b-tiny", {"model_type": "llama"}, r"model_type: checkpoint 'llama', card 'qwen3_moe'"),
    ("qwen3-30b-a3b-tiny", {"num_local_experts": None, "num_experts": 16}, r"num_experts: checkpoint 16, card 8"),
    ("qwen3-30b-a3b-tiny", {"num_local_experts": 16}, r"num_experts: checkpoint 16, card 8"),
    ("qwen3-30b-a3b-tiny", {"hidden_size": "wide"}, r"cannot be read as a Qwen3MoeConfig"),
    ("qwen3-30b-a3b-tiny", {"use_sliding_window": True, "sliding_window": None},
     r"sliding_window: checkpoint 4096, card None"),
    ("qwen3-30b-a3b-tiny", {"mlp_only_layers": [1]}, r"mlp_only_layers: checkpoint \[1\], card \[\]"),
    ("qwen3-30b-a3b-tiny", {"decoder_sparse_step": 2}, r"decoder_sparse_step: checkpoint 2, card 1"),
    ("qwen3.5-35b-a3b-tiny", {"attention_bias": True}, r"attention_bias: checkpoint True, card False"),
    ("qwen3-30b-a3b-tiny", {"rms_norm_eps": 1e-5}, r"rms_norm_eps: checkpoint 1e-05, card 1e-06"),
    ("qwen3.5-35b-a3b-tiny", {"rms_norm_eps": 1e-5}, r"rms_norm_eps: checkpoint 1e-05, card 1e-06"),
], ids=["rope-theta", "rope-theta-top-level", "rope-scaling", "partial-rotary", "activation", "model-type",
        "experts", "experts-as-transformers-saves-it", "invalid-field", "sliding-window", "dense-layers",
        "sparse-step", "attention-bias", "norm-epsilon", "norm-epsilon-qwen3.5"])
def test_config_that_contradicts_the_card_is_refused(tmp_path: Path, card_name: str, fields: dict,
                                                     message: str) -> None:
    """Tensor shapes cannot show RoPE, activation, model type or a sliding window: without this check the checkpoint
    would convert, megatron would train with the card's values and the export would carry the source's."""
    card = get_card(card_name)
    write_hf(card, random_hf_tensors(card, seed=1), tmp_path / "hf")
    edit_json(tmp_path / "hf" / "config.json", **fields)
    with pytest.raises(ConversionError, match=message):
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert not (tmp_path / "mcore").exists()


def test_published_qwen3_moe_settings_are_accepted(tiny_hf) -> None:
    """The published Qwen3-MoE config states the fields the card cannot change, at the values the card has."""
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    data = json.loads((tmp / "hf" / "config.json").read_text())
    published = {"use_sliding_window": False, "sliding_window": None, "max_window_layers": 48, "mlp_only_layers": [],
                 "decoder_sparse_step": 1, "attention_bias": False}
    (tmp / "hf" / "config.json").write_text(json.dumps({**data, **published}))
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    assert (tmp / "mcore" / RELEASE).is_dir()


@pytest.mark.parametrize(("text", "message"), [("[1, 2]", "holds a JSON list, not an object"),
                                               ('{"text_config": 7}', "'text_config' is a JSON int, not an object"),
                                               ('{"vocab_size": ', "is not valid JSON")])
def test_config_that_is_no_json_object_is_refused(tiny_hf, text: str, message: str) -> None:
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    (tmp / "hf" / "config.json").write_text(text)
    with pytest.raises(ConversionError, match=message):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")


def test_a_lone_kept_config_is_named_in_the_singular(tmp_path: Path) -> None:
    """A model with config.json and no generation_config.json: mcore-to-hf's note says it was kept, not them."""
    card = get_card(random.choice(["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"]))
    write_hf(card, random_hf_tensors(card, seed=random.randrange(1000)), tmp_path / "hf")
    assert not (tmp_path / "hf" / "generation_config.json").exists()
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    summary = mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert "config.json as hf-to-mcore kept it with the checkpoint" in summary.notes[0], summary.notes


@pytest.mark.parametrize("name", ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"])
def test_config_files_survive_the_round_trip_byte_for_byte(name: str, tmp_path: Path) -> None:
    """config.json (token ids, unknown fields) and generation_config.json come back as they were, with the
    tensors bit for bit; the checkpoint's common state carries them, read back by our reader."""
    card = get_card(name)
    hf = random_hf_tensors(card, seed=2)
    write_hf(card, hf, tmp_path / "hf")
    _published_like(tmp_path / "hf")
    summary = hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert summary.notes == ["kept config.json and generation_config.json with the checkpoint for mcore-to-hf"]
    stored = CheckpointReader(tmp_path / "mcore" / RELEASE).common_state()[HF_CONFIG_KEY]
    assert stored["config.json"] == (tmp_path / "hf" / "config.json").read_text()
    summary = mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert "as hf-to-mcore kept them" in summary.notes[0]
    for file in ("config.json", "generation_config.json"):
        assert (tmp_path / "out" / file).read_bytes() == (tmp_path / "hf" / file).read_bytes()
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (3, 5, 5)
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))


def test_hf_config_option_supplies_the_config_of_a_training_checkpoint(tiny_hf) -> None:
    """A checkpoint without HF config (as training saves it) exports the card's config and says so; ``--hf-config``
    takes the original's files instead, after the same check against the card."""
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    (tmp / "hf" / "config.json").rename(tmp / "config.json")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "bare")
    (tmp / "config.json").rename(tmp / "hf" / "config.json")
    _published_like(tmp / "hf")
    original = {f: (tmp / "hf" / f).read_bytes() for f in ("config.json", "generation_config.json")}
    summary = mcore_to_hf_checkpoint(card, tmp / "bare", tmp / "card_config")
    assert summary.notes[0].startswith("config.json derived from the card") and "--hf-config" in summary.notes[0]
    assert sorted(p.name for p in (tmp / "card_config").iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((tmp / "card_config" / "config.json").read_text())["eos_token_id"] is None
    summary = mcore_to_hf_checkpoint(card, tmp / "bare", tmp / "out", hf_config_dir=tmp / "hf")
    assert summary.notes[0] == f"config.json and generation_config.json from --hf-config {tmp / 'hf'}"
    assert [note for note in summary.notes[1:] if "tokenizer" not in note] == []  # no --tokenizer: noted
    assert {f: (tmp / "out" / f).read_bytes() for f in original} == original
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp / "out")))
    edit_json(tmp / "hf" / "config.json", num_hidden_layers=card.num_layers + 1)
    with pytest.raises(ConversionError, match=r"hf/config\.json does not describe card .*num_hidden_layers"):
        mcore_to_hf_checkpoint(card, tmp / "bare", tmp / "out2", hf_config_dir=tmp / "hf")
    (tmp / "hf" / "config.json").unlink()
    with pytest.raises(ConversionError, match=r"--hf-config .*hf has no config\.json"):
        mcore_to_hf_checkpoint(card, tmp / "bare", tmp / "out2", hf_config_dir=tmp / "hf")
    assert not (tmp / "out2").exists()


def test_missing_config_is_reported(tiny_hf) -> None:
    """Without config.json the conversion goes on from the tensor shapes and the report says so; the export writes
    the card's config.json next to the kept generation_config.json."""
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    (tmp / "hf" / "config.json").unlink()
    (tmp / "hf" / "generation_config.json").write_text(json.dumps(GENERATION))
    summary = hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    assert summary.notes == ["kept generation_config.json with the checkpoint for mcore-to-hf",
                             f"no config.json in {tmp / 'hf'}: checked against the card by tensor shapes only; "
                             "mcore-to-hf will write the card's config"]
    summary = mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert summary.notes[0].startswith("config.json derived from the card (generation_config.json as kept with the "
                                       "checkpoint)")
    assert json.loads((tmp / "out" / "config.json").read_text())["num_hidden_layers"] == card.num_layers
    assert json.loads((tmp / "out" / "generation_config.json").read_text()) == GENERATION


@pytest.mark.parametrize("name", ["config.json", "generation_config.json"])
def test_a_config_file_that_is_a_folder_is_refused_before_anything_is_written(name, tiny_hf, capsys) -> None:
    """``--hf h3`` where ``h3/config.json`` is a folder: it was skipped as missing, the conversion exited 0 having
    checked the weights by tensor shapes only, saying only that there was no config.json. One line, exit 2, no
    ``--out``."""
    from megatron.oellm.cli import main

    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    (tmp / "hf" / name).unlink(missing_ok=True)
    (tmp / "hf" / name / f"sub{random.randrange(1000)}").mkdir(parents=True)
    out = tmp / "mcore"
    assert main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        f"{tmp / 'hf' / name} is a folder, not the JSON file {name}: put the model's {name} there, or remove it to "
        "convert without one")
    assert not out.exists()


@pytest.mark.parametrize(("stored", "message"), [
    (["config.json"], "is not a map of config.json"),
    ({"config.json": "[1]"}, "holds a JSON list"),
    # no config.json: the card's is written, so only this check keeps a damaged one from being exported as it is
    ({"generation_config.json": '{"eos_token_id": 5,'}, "the generation_config.json stored with .* is not valid JSON"),
], ids=["not-a-map", "config-list", "generation-config-cut"])
def test_damaged_stored_config_is_refused(converted, monkeypatch: pytest.MonkeyPatch, stored: object,
                                          message: str) -> None:
    card, _, tmp = converted
    common = CheckpointReader(tmp / "mcore" / RELEASE).common_state()
    monkeypatch.setattr(CheckpointReader, "common_state", lambda reader: {**common, HF_CONFIG_KEY: stored})
    with pytest.raises(ConversionError, match=message):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert not (tmp / "out").exists()


@pytest.mark.parametrize("name", ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"])
def test_stored_run_arguments_are_those_the_training_entry_runs_with(name: str, tmp_path: Path) -> None:
    """megatron's ``load_checkpoint`` compares ``num_layers``, ``hidden_size`` and ``num_attention_heads`` of the
    checkpoint's ``args`` with the run's, and loads a checkpoint without ``hybrid_layer_pattern`` into a HybridModel
    as a GPT checkpoint (refusing GDN layers): the stored ones must equal the entry's, the pattern for hybrids."""
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster

    card = get_card(name)
    write_hf(card, random_hf_tensors(card, seed=3), tmp_path / "hf")
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    stored = CheckpointReader(tmp_path / "mcore" / RELEASE).common_state()["args"]
    run = validate_on_cluster(["--oellm-model", name, "--micro-batch-size", "1", "--global-batch-size", "1",
                               "--seq-length", "64", "--train-iters", "1", "--lr", "1e-4", "--mock-data",
                               "--tokenizer-type", "NullTokenizer"], world_size=1, env={})
    for field in ("num_layers", "hidden_size", "num_attention_heads"):
        assert getattr(stored, field) == getattr(run, field), field
    assert bool(getattr(stored, "hybrid_layer_pattern", None)) == bool(run.hybrid_layer_pattern)


@pytest.mark.parametrize("card_name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_a_config_whose_vocabulary_contradicts_its_own_embedding_is_named_as_such(tmp_path: Path,
                                                                                    card_name: str) -> None:
    """A config.json stating another vocab_size than its embedding's rows got "pass --vocab-size <config's>", and
    with that "pass --vocab-size <rows>", and so on in turn: neither fits both. The refusal names the contradiction;
    with the config's count set to the rows, --vocab-size converts it."""
    card = get_card(card_name)
    stated = card.vocab_size * random.choice([2, 3])
    hf = random_hf_tensors(card, seed=random.randrange(2**31))
    write_hf(card, hf, tmp_path / "hf")
    edit_json(tmp_path / "hf" / "config.json", vocab_size=stated)
    for vocab in (None, stated, card.vocab_size):
        chosen = card if vocab is None else dataclasses.replace(card, vocab_size=vocab)
        with pytest.raises(ConversionError, match=rf"says vocab_size {stated}, but the checkpoint's "
                                                  rf"model\.embed_tokens\.weight has {card.vocab_size} rows: the config "
                                                  r"contradicts its own weights"):
            hf_to_mcore_checkpoint(chosen, tmp_path / "hf", tmp_path / "mcore")
    assert not (tmp_path / "mcore").exists()
    edit_json(tmp_path / "hf" / "config.json", vocab_size=card.vocab_size)
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "back")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "back")))


@pytest.mark.parametrize(("fields", "says", "not_says"), [
    ({"model_type": "llama"}, r"oellm convert converts 'qwen3_5_moe_text' and 'qwen3_moe' checkpoints only \(for a "
                              r"multimodal one, the model_type of its text_config\): this is another model",
     "pick the card"),
    ({"tie_word_embeddings": True}, r"no card of megatron-oellm ties the output layer to the embedding, so no --model "
                                    r"converts this checkpoint", "pick the card"),
    ({"moe_intermediate_size": 4096}, r"moe_intermediate_size: checkpoint 4096, card \d+; pick the card of this "
                                      r"checkpoint with --model \(every tensor of the checkpoint has card "
                                      r"qwen3-30b-a3b-tiny's shape: its config\.json may contradict its own weights\)",
     None),
    ({"rope_parameters": None, "rope_theta": 1234.0}, r"rope_parameters\.rope_theta: checkpoint 1234\.0",
     "its own weights"),
], ids=["another-model-type", "tied-embeddings", "sizes-the-weights-contradict", "rope-the-weights-cannot-show"])
def test_a_refusal_no_card_can_answer_says_why(tmp_path: Path, fields: dict, says: str, not_says: str | None) -> None:
    """"pick the card of this checkpoint with --model" sent the user looking for a card that does not exist: for
    another model type, for tied embeddings (no card ties them), and for a config whose sizes contradict its own
    weights (which have the card's shapes). A field tensor shapes cannot show (RoPE) keeps the plain refusal."""
    card = get_card("qwen3-30b-a3b-tiny")
    write_hf(card, random_hf_tensors(card, seed=random.randrange(2**31)), tmp_path / "hf")
    edit_json(tmp_path / "hf" / "config.json", **fields)
    with pytest.raises(ConversionError, match=says) as refused:
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert not_says is None or not_says not in str(refused.value)
    assert not (tmp_path / "mcore").exists()


@pytest.mark.parametrize("fields", [{"model_type": "llama"}, {"tie_word_embeddings": True}],
                         ids=["another-model-type", "tied-embeddings"])
def test_an_hf_config_of_another_model_is_blamed_not_the_checkpoint(converted, fields: dict) -> None:
    """With --hf-config the megatron checkpoint is fine and the folder given is another model's: the refusal says to
    give the checkpoint's own config, not that no card converts the checkpoint."""
    card, _, tmp = converted
    other = tmp / "other"
    other.mkdir()
    (other / "config.json").write_text((tmp / "hf" / "config.json").read_text())
    edit_json(other / "config.json", **fields)
    with pytest.raises(ConversionError, match="give --hf-config the directory of this checkpoint's own HF model") as refused:
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "back", hf_config_dir=other)
    assert "no card" not in str(refused.value) and "checkpoints only" not in str(refused.value)
    assert not (tmp / "back").exists()


def test_a_config_and_weights_that_both_differ_from_the_card_get_no_contradiction_note(tmp_path: Path) -> None:
    """Only weights of the card's shapes make a size refusal the config's fault; weights of another width point to
    another model, and the refusal must not say the config contradicts them."""
    card = get_card("qwen3-30b-a3b-tiny")
    other = dataclasses.replace(card, moe_ffn_hidden_size=card.moe_ffn_hidden_size * 2)
    write_hf(card, random_hf_tensors(other, seed=random.randrange(2**31)), tmp_path / "hf")
    edit_json(tmp_path / "hf" / "config.json", moe_intermediate_size=other.moe_ffn_hidden_size)
    with pytest.raises(ConversionError, match=rf"moe_intermediate_size: checkpoint {other.moe_ffn_hidden_size}, "
                                              rf"card {card.moe_ffn_hidden_size}; pick the card") as refused:
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert "its own weights" not in str(refused.value)
