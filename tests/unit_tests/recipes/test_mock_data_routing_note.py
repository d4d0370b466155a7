"""Real routing on mock data: a row whose router picks the experts (``moe-router-force-load-balancing`` off) and
that trains on megatron's mock tokens gets a note in the dry run and before its ``--submit`` line, since its expert
loads, and so its throughput, do not compare with the report's runs on text (CPU)."""

from __future__ import annotations

import random
import re

from recipe_helpers import EXAMPLES, fake_sbatch

from megatron.oellm.cli import main

ROUTING = str(EXAMPLES / "qwen3_5_35b_a3b_mn5_routing.toml")
NOTE = "note: real routing on mock data: the router spreads megatron's mock tokens, not text, over the experts"


def _noted_rows(out: str) -> list[int]:
    """The rows of a dry run's output whose block carries the note."""
    blocks = re.split(r"^-- row (\d+):", out, flags=re.MULTILINE)[1:]
    return [int(number) for number, block in zip(blocks[::2], blocks[1::2], strict=True) if NOTE in block]


def test_the_dry_run_notes_the_real_routing_rows_on_mock_data_and_only_those(capsys) -> None:
    assert main(["recipe", ROUTING, "--dry-run"]) == 0
    assert _noted_rows(capsys.readouterr().out) == [2, 3, 4, 5]  # row 1 forces balanced loads: data-independent


def test_no_note_where_the_row_trains_on_text(tmp_path, capsys) -> None:
    row = random.randint(2, 5)
    assert main(["recipe", ROUTING, "--dry-run", "--row", str(row), "--data-path", str(tmp_path / "corpus"),
                 "--tokenizer-model", "byte"]) == 0
    out = capsys.readouterr().out
    assert f"-- row {row}:" in out and NOTE not in out


def test_submit_prints_the_note_before_the_rows_submitted_line(tmp_path, monkeypatch, capsys) -> None:
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 11")
    image = tmp_path / "image.sif"
    image.touch()
    row = random.randint(2, 5)
    assert main(["recipe", ROUTING, "--submit", "--row", str(row), "--image", str(image),
                 "--output-dir", str(tmp_path / "runs")]) == 0
    lines = capsys.readouterr().out.splitlines()
    submitted = next(index for index, line in enumerate(lines) if "Submitted batch job 11" in line)
    assert lines[submitted - 1].startswith(f"row {row}: {NOTE}")
    assert len(record.read_text().splitlines()) == 1
