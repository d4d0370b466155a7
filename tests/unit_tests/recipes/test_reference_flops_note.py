"""The dry run says when a row's report TFLOP/s were counted with another FLOP count per token than ours.

At the same tokens/s/GPU, a report that counted more FLOPs per token prints a higher TFLOP/s and MFU than
``oellm table``; without a word, a user comparing the two columns reads a gap that is no throughput. The report's
Qwen3-30B-A3B runs (MN5 #438) counted megatron's formula without ``--group-query-attention`` (docs/flops.md).
"""

from __future__ import annotations

import random

from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.commands.recipe import REFERENCE_FLOPS_TOLERANCE, reference_flops_note


def test_a_reference_counted_with_more_flops_is_noted_with_both_counts() -> None:
    """The note gives the report's implied count, ours and how far apart, above and below alike."""
    ours = random.uniform(5.0, 50.0)
    tokens = random.randint(1000, 9000)
    for factor in (random.uniform(1.05, 1.3), random.uniform(0.7, 0.95)):
        tflops = round(ours * factor * tokens / 1e3, 1)
        implied = tflops * 1e3 / tokens
        note = reference_flops_note({"tokens_per_s_per_gpu": tokens, "tflops_per_gpu": tflops}, ours)
        percent = abs(implied / ours - 1) * 100
        side, reads = ("above", "higher") if implied > ours else ("below", "lower")
        assert note.startswith(f"note: the report's {tflops} TFLOP/s/GPU at {tokens} tokens/s/GPU count "
                               f"{implied:.2f} GFLOP/token, {percent:.1f} % {side} this plan's {ours:.2f}: its "
                               f"TFLOP/s and MFU read {percent:.1f} % {reads} than oellm table's"), note
        assert note.endswith("\n") and note.count("\n") == 1


def test_a_reference_within_the_tolerance_or_without_tflops_gets_no_note() -> None:
    ours = random.uniform(5.0, 50.0)
    tokens = random.randint(1000, 9000)
    close = ours * (1 + random.uniform(-0.9, 0.9) * REFERENCE_FLOPS_TOLERANCE) * tokens / 1e3
    assert reference_flops_note({"tokens_per_s_per_gpu": tokens, "tflops_per_gpu": close}, ours) == ""
    assert reference_flops_note({"tokens_per_s_per_gpu": tokens}, ours) == ""
    assert reference_flops_note({"tflops_per_gpu": 2 * close, "step_time_s": 10.0}, ours) == ""


def test_the_qwen3_30b_rows_are_noted_with_megatrons_count_without_gqa(capsys) -> None:
    """The Qwen3-30B-A3B rows' reference implies megatron's own count without --group-query-attention (its
    function, run here), which is what the note's docs/flops.md section explains; ibaucells' Qwen3.5 rows counted
    within 1 % of ours and get no note."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.commands.flops import megatron_count

    assert main(["recipe", str(EXAMPLES / "qwen3_30b_a3b_mn5.toml"), "--dry-run", "--row", "1"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: the report's")]
    assert len(notes) == 1, notes
    without_gqa = megatron_count(get_card("qwen3-30b-a3b"), 4096, 262144, None, {"group-query-attention": False})
    assert f"count {without_gqa / 1e9:.2f} GFLOP/token" in notes[0], (notes, without_gqa)
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--dry-run"]) == 0
    assert "note: the report's" not in capsys.readouterr().out
