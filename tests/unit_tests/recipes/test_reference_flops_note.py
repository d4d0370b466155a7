"""The dry run says when a row's report TFLOP/s were counted with another FLOP count per token than ours, or than
megatron-core's own for the model the row builds (the job log's TFLOP/s).

At the same tokens/s/GPU, a report that counted more FLOPs per token prints a higher TFLOP/s and MFU than
``oellm table``; without a word, a user comparing the two columns reads a gap that is no throughput. The report's
Qwen3-30B-A3B runs (MN5 #438) counted megatron's formula without ``--group-query-attention`` (docs/flops.md).
"""

from __future__ import annotations

import random

from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.commands.recipe import REFERENCE_FLOPS_TOLERANCE, megatron_column_note, reference_flops_note


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
    notes = [line for line in capsys.readouterr().out.splitlines() if "this plan's" in line]
    assert len(notes) == 1 and notes[0].startswith("note: the report's"), notes
    without_gqa = megatron_count(get_card("qwen3-30b-a3b"), 4096, 262144, None, {"group-query-attention": False})
    assert f"count {without_gqa / 1e9:.2f} GFLOP/token" in notes[0], (notes, without_gqa)
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--dry-run"]) == 0
    assert "this plan's" not in capsys.readouterr().out


def test_a_reference_counted_apart_from_megatrons_own_count_is_noted() -> None:
    """The second note compares the report's implied count with megatron-core's for the row's model (the job log's
    own TFLOP/s), above and below alike; none within the tolerance, without tflops, or without a megatron count."""
    theirs = random.uniform(5.0, 50.0)
    tokens = random.randint(1000, 9000)
    for factor in (random.uniform(1.05, 1.3), random.uniform(0.7, 0.95)):
        tflops = round(theirs * factor * tokens / 1e3, 1)
        implied = tflops * 1e3 / tokens
        note = megatron_column_note({"tokens_per_s_per_gpu": tokens, "tflops_per_gpu": tflops}, theirs)
        percent = abs(implied / theirs - 1) * 100
        side, reads = ("above", "higher") if implied > theirs else ("below", "lower")
        assert note.startswith(f"note: the report's {tflops} TFLOP/s/GPU at {tokens} tokens/s/GPU count "
                               f"{implied:.2f} GFLOP/token, {percent:.1f} % {side} megatron-core's {theirs:.2f} for "
                               f"the model this row builds: they read {percent:.1f} % {reads} than the job log's own "
                               "TFLOP/s"), note
        assert note.endswith("\n") and note.count("\n") == 1
    close = theirs * (1 + random.uniform(-0.9, 0.9) * REFERENCE_FLOPS_TOLERANCE) * tokens / 1e3
    assert megatron_column_note({"tokens_per_s_per_gpu": tokens, "tflops_per_gpu": close}, theirs) == ""
    assert megatron_column_note({"tokens_per_s_per_gpu": tokens}, theirs) == ""
    assert megatron_column_note({"tokens_per_s_per_gpu": tokens, "tflops_per_gpu": 2 * close}, None) == ""


def test_the_qwen3_5_rows_are_noted_with_megatrons_hybrid_count(capsys) -> None:
    """The report's Qwen3.5 runs built a GPTModel (19.11 GFLOP/token), the recipes a HybridModel, which megatron-core
    counts without the attention output gate (docs/flops.md: 18.6019): every row with a reference says so."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.flops import megatron_flops_per_token

    hybrid = megatron_flops_per_token(get_card("qwen3.5-35b-a3b"), 4096, 262144) / 1e9
    assert round(hybrid, 4) == 18.6019
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--dry-run"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "megatron-core's" in line]
    assert len(notes) == 6, notes
    assert all(f"megatron-core's {hybrid:.2f} for the model this row builds" in note for note in notes), notes
    assert all(" 2.7 % higher" in note or " 2.8 % higher" in note for note in notes), notes
