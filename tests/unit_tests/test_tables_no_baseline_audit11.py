"""``oellm table`` over logs none of which gives a row with figures (audit 11): there is no efficiency baseline, so
no baseline note, and the table still prints each log's status (a job that died before training is a common first
look at a scaling study)."""

from __future__ import annotations

import random

from megatron.oellm.cli import main


def test_logs_without_an_ok_row_print_their_statuses_and_no_baseline_note(tmp_path, capsys):
    logs = []
    for number in range(random.randint(1, 3)):
        path = tmp_path / f"slurm-{random.randint(0, 10**6)}-{number}.out"
        path.write_text("".join(f"srun: line {random.random()}\n" for _ in range(random.randint(1, 5))))
        logs.append(str(path))
    assert main(["table", *logs]) == 1  # no row has numbers: said once, no baseline note
    captured = capsys.readouterr()
    assert captured.err == "oellm table: error: no row has numbers: the Status column above says why\n"
    rows = [line for line in captured.out.splitlines() if line.startswith("|  |")]
    assert len(rows) == len(logs)
    assert all("no arguments block" in row for row in rows)
