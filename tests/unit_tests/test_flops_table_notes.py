"""``oellm flops``' table says, under its header, what the corrected count is, that Megatron's is
``--megatron-compatible``, and where the flag sets that reproduce the MN5 report's TFLOP/s are: ``mode corrected``
alone left a reader comparing with the report (15 % more for Qwen3-30B-A3B, 2.6 % for Qwen3.5) without a hint why.
The last line stays the count's (the total, or Megatron's against the corrected one), which scripts read."""

import json
import random
import re
from pathlib import Path

import pytest

from megatron.oellm import cli
from megatron.oellm.commands.flops import CORRECTED_NOTE, REPORTS_SECTION

DOCS = Path(__file__).resolve().parents[2] / "docs" / "flops.md"
MODELS = ["qwen3-30b-a3b", "qwen3.5-35b-a3b", "qwen3-235b-a22b"]


def _table(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert cli.main(["flops", *argv]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_corrected_table_says_what_it_counts_under_its_header_and_ends_with_the_total(capsys):
    lines = _table(capsys, random.choice(MODELS), "--seq-length", str(random.choice([2048, 4096, 8192])))
    assert lines[0].endswith("mode corrected")
    assert lines[1] == CORRECTED_NOTE and "--megatron-compatible" in lines[1]
    assert lines[2] == f"to reproduce the MN5 report's TFLOP/s: --megatron-compatible plus {REPORTS_SECTION}"
    assert lines[-1].startswith("total (training)")


def test_the_note_names_a_section_docs_flops_md_has_and_the_docs_show_it(capsys):
    hint = _table(capsys, "qwen3-30b-a3b", "--seq-length", "4096")[2]
    section = re.search(r'docs/flops.md, "(?P<title>[^"]+)"', hint)["title"]
    assert f"\n## {section}\n" in DOCS.read_text()
    assert f"\n{hint}\n" in DOCS.read_text()


def test_the_throughput_lines_follow_the_total(capsys):
    tokens = random.randint(1000, 9000)
    lines = _table(capsys, "qwen3-30b-a3b", "--seq-length", "4096", "--tokens-per-second-per-gpu", str(tokens))
    mfu = next(i for i, line in enumerate(lines) if " tokens/s/GPU -> " in line)
    assert lines[mfu - 1].startswith("total (training)")


def test_megatron_mode_points_to_the_flag_sets_until_flags_are_given(capsys):
    argv = ["qwen3-30b-a3b", "--seq-length", "4096", "--megatron-compatible"]
    lines = _table(capsys, *argv)
    assert lines[1] == f"to reproduce the MN5 report's TFLOP/s: {REPORTS_SECTION}"  # the mode is already on
    assert not any(line == CORRECTED_NOTE for line in lines) and lines[-1].startswith("corrected count ")
    lines = _table(capsys, *argv, "--megatron-flag", "group-query-attention=false")
    assert not any("MN5 report's" in line for line in lines)


def test_the_json_report_is_unchanged(capsys):
    assert cli.main(["flops", random.choice(MODELS), "--seq-length", "4096", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"model", "seq_length", "padded_vocab", "document_lengths", "mode", "gflops_per_token",
                           "breakdown"}
