"""``oellm models``: the shape columns of the catalogue against the published configurations of the real models."""

import argparse
import json

import pytest

from megatron.oellm.commands import models
from megatron.oellm.params import format_count

PUBLISHED = {
    # name: (layers, period, hidden, experts, vocab) from the models' Hugging Face config.json: Qwen3.5's layer_types
    # are 3 linear_attention (Gated DeltaNet) + 1 full_attention per period of 4; the Qwen3 MoE models attention only
    "qwen3.5-35b-a3b": (40, "GGGA", 2048, "256x512 top-8 +shared 512", 248320),
    "qwen3-30b-a3b": (48, "A", 2048, "128x768 top-8", 151936),
    "qwen3-235b-a22b": (94, "A", 4096, "128x1536 top-8", 151936),
}


def _rows(capsys: pytest.CaptureFixture, as_json: bool) -> str:
    assert models.run(argparse.Namespace(json=as_json)) == 0
    return capsys.readouterr().out


def test_the_real_models_shapes_are_their_published_ones_in_json_and_in_the_table(capsys):
    rows = {row["name"]: row for row in json.loads(_rows(capsys, True))}
    table = [line for line in _rows(capsys, False).splitlines()[2:] if not line.startswith(("active* = ", "note: "))]
    lines = {line.split()[0]: line.split() for line in table}
    assert set(rows) == set(lines)
    for name, (layers, period, hidden, experts, vocab) in PUBLISHED.items():
        row = rows[name]
        assert (row["layers"], row["pattern"], row["hidden"], row["experts"], row["vocab"]) == (
            layers, period, hidden, experts, vocab), name
        assert row["active_params_without_input_embedding"] < row["active_params"] < row["total_params"], name
        words = lines[name]
        assert words[2:5] == [str(layers), period, str(hidden)] and words[-4] == str(vocab), name
        assert " ".join(words[5:-4]) == experts, name
        assert words[-3:] == [format_count(row[key]) for key in (
            "total_params", "active_params", "active_params_without_input_embedding")], name


def test_the_ckda_hybrids_period_is_five_kda_layers_then_attention(capsys):
    """The OEL CKDA hybrid interleaves 5 KDA layers with 1 attention layer; its tiny and proxy cards keep the period."""
    rows = {row["name"]: row for row in json.loads(_rows(capsys, True))}
    ckda = [name for name in rows if name.startswith("oellm-ckda-hybrid")]
    assert ckda and all(rows[name]["pattern"] == "KKKKKA" for name in ckda)
