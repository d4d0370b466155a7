"""``oellm models``: the shape columns of the catalogue against the published configurations of the real models, and
its period column in the symbols of megatron's ``--hybrid-layer-pattern``."""

import argparse
import json
import random

import pytest

from megatron.oellm.cards import HYBRID_SYMBOLS, get_card
from megatron.oellm.cli import main
from megatron.oellm.commands import models
from megatron.oellm.params import format_count

PUBLISHED = {
    # name: (layers, period, hidden, experts, vocab) from the models' Hugging Face config.json: Qwen3.5's layer_types
    # are 3 linear_attention (Gated DeltaNet) + 1 full_attention per period of 4; the Qwen3 MoE models attention only
    # (the mixers' period, ``pattern``, in --hybrid-layer-pattern symbols: ``*`` attention)
    "qwen3.5-35b-a3b": (40, "GGG*", 2048, "256x512 top-8 +shared 512", 248320),
    "qwen3-30b-a3b": (48, "*", 2048, "128x768 top-8", 151936),
    "qwen3-235b-a22b": (94, "*", 4096, "128x1536 top-8", 151936),
}


def _rows(capsys: pytest.CaptureFixture, as_json: bool) -> str:
    assert models.run(argparse.Namespace(json=as_json)) == 0
    return capsys.readouterr().out


def _table_lines(capsys: pytest.CaptureFixture) -> list[str]:
    """The table's card lines: its header, rule and the lines after it (legends, notes) left out."""
    return [line for line in _rows(capsys, False).splitlines()[2:]
            if not line.startswith(("period = ", "active* = ", "note: "))]


def test_the_real_models_shapes_are_their_published_ones_in_json_and_in_the_table(capsys):
    rows = {row["name"]: row for row in json.loads(_rows(capsys, True))}
    table = _table_lines(capsys)
    lines = {line.split()[0]: line.split() for line in table}
    assert set(rows) == set(lines)
    for name, (layers, period, hidden, experts, vocab) in PUBLISHED.items():
        row = rows[name]
        assert (row["layers"], row["pattern"], row["hidden"], row["experts"], row["vocab"]) == (
            layers, period, hidden, experts, vocab), name
        assert row["active_params_without_input_embedding"] < row["active_params"] < row["total_params"], name
        words = lines[name]
        assert words[2:5] == [str(layers), row["period"], str(hidden)] and words[-4] == str(vocab), name
        assert " ".join(words[5:-4]) == experts, name
        assert words[-3:] == [format_count(row[key]) for key in (
            "total_params", "active_params", "active_params_without_input_embedding")], name


def test_the_ckda_hybrids_period_is_five_kda_layers_then_attention(capsys):
    """The OEL CKDA hybrid interleaves 5 KDA layers with 1 attention layer; its tiny and proxy cards keep the period."""
    rows = {row["name"]: row for row in json.loads(_rows(capsys, True))}
    ckda = [name for name in rows if name.startswith("oellm-ckda-hybrid")]
    assert ckda and all(rows[name]["pattern"] == "KKKKK*" for name in ckda)


def test_the_period_column_is_written_in_the_hybrid_layer_pattern_symbols(capsys):
    """The period column showed ``GGGA`` / ``KKKKKA`` (``A`` for attention), letters of its own, while every
    ``--hybrid-layer-pattern`` (plan, recipes, megatron) writes ``*`` for attention and ``E`` for each MoE block. It
    now shows one repeat of the card's own pattern (``--json``: ``period``; ``pattern`` its mixers), and a
    legend line names the symbols and where the whole pattern comes from, which ``oellm plan`` prints."""
    rows = {row["name"]: row for row in json.loads(_rows(capsys, True))}
    assert {name: rows[name]["period"] for name in ("qwen3.5-35b-a3b", "qwen3-30b-a3b", "oellm-ckda-hybrid")} == {
        "qwen3.5-35b-a3b": "GEGEGE*E", "qwen3-30b-a3b": "*E", "oellm-ckda-hybrid": "KEKEKEKEKE*E"}
    for name, row in rows.items():
        card = get_card(name)
        period = row["period"]
        assert card.hybrid_layer_pattern == period * (2 * card.num_layers // len(period)), name
        assert rows[name]["pattern"] == period[::2], name
    lines = {line.split()[0]: line.split() for line in _table_lines(capsys)}
    assert {name: words[3] for name, words in lines.items()} == {name: row["period"] for name, row in rows.items()}
    legend = [line for line in _rows(capsys, False).splitlines() if line.startswith("period = ")]
    assert len(legend) == 1 and all(f"{symbol} {mixer}".lower() in legend[0].lower()
                                    for mixer, symbol in HYBRID_SYMBOLS.items()), legend
    assert "oellm plan MODEL --nodes N --pp P" in legend[0]
    hybrid = random.choice([name for name, row in rows.items() if row["period"] != "*E"])
    assert main(["plan", hybrid, "--nodes", "1", "--pp", "2"]) == 0
    [pipeline] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pipeline ")]
    printed = pipeline.split()[2].strip("'")
    assert "|" in printed and printed.replace("|", "") == get_card(hybrid).hybrid_layer_pattern


def test_every_column_of_the_table_lines_up_under_its_header(capsys):
    """The period column is as wide as its longest entry (the CKDA hybrid's ``KEKEKEKEKE*E``, 12 symbols), the experts
    column as Qwen3.5's ``256x512 top-8 +shared 512`` and the CKDA hybrid's ``160x768 top-5 +shared 768`` (25
    characters): a narrower one pushed the columns after it right on the lines of the longer entries, out from under
    their headers."""
    header = _rows(capsys, False).splitlines()[0]
    ends = {name: header.index(name) + len(name) for name in ("layers", "hidden", "vocab", "total", "active*")}
    period_start = header.index("period")
    for line in _table_lines(capsys):
        card = get_card(line.split()[0])
        numbers = {"layers": card.num_layers, "hidden": card.hidden_size, "vocab": card.vocab_size}
        for column, end in ends.items():
            assert line[end:end + 1] in ("", " ") and line[end - 1] != " ", (column, line)
            if column in numbers:
                assert line[:end].split()[-1] == str(numbers[column]), (column, line)
        assert line[period_start:].split()[0] == models.layer_period(card), line


def test_the_json_writes_both_periods_in_one_notation_and_says_which_cards_rest_on_placeholders(capsys):
    """``--json`` wrote the mixers' period in letters of its own (``"pattern": "GGGA"``) beside the layers' in
    ``--hybrid-layer-pattern`` symbols (``"period": "GEGEGE*E"``): attention was ``A`` in one and ``*`` in the other.
    Both now use the pattern's symbols, ``pattern`` being ``period`` without the MoE blocks. The placeholder note went
    to stderr only; each row's ``placeholder`` now carries it (``None`` for a complete card)."""
    assert models.run(argparse.Namespace(json=True)) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    row = random.choice(rows)
    card = get_card(row["name"])
    assert row["pattern"] == "".join(HYBRID_SYMBOLS[mixer] for mixer in card.mixer_types[:len(row["period"]) // 2])
    assert row["period"] == "".join(symbol + HYBRID_SYMBOLS["moe"] for symbol in row["pattern"])
    assert set(row["pattern"]) <= set(HYBRID_SYMBOLS.values()) - {HYBRID_SYMBOLS["moe"]}
    assert row["placeholder"] == card.sources.get("placeholder")
    rows_by_name = {row["name"]: row for row in rows}
    noted = {name for name, row in rows_by_name.items() if row["placeholder"] is not None}
    assert noted == {name for name in rows_by_name if "placeholder" in get_card(name).sources}
    assert noted and noted < set(rows_by_name)
    assert all(f"({rows_by_name[name]['placeholder']})" in captured.err for name in noted)
