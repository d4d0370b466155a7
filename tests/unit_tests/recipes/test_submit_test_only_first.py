"""``oellm recipe --submit`` runs ``sbatch --test-only`` on every selected row before it queues any: a row over a QOS
node limit (sbatch: QOSMaxNodePerJobLimit) stopped the submission at that row with the earlier rows queued, exit 2
and no ``oellm table`` command. A submission ``sbatch`` still refuses midway names the queued rows with their job
ids and prints the table command of their logs."""

from __future__ import annotations

import os
import random
import shlex

from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import load_recipe

STRONG = EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"
LIMIT_ERROR = "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (QOSMaxNodePerJobLimit)"


def _limited_sbatch(tmp_path, monkeypatch, *, test_only_checks_limit: bool) -> tuple:
    """A fake ``sbatch`` that rejects a job of more than $LIMIT nodes (at ``--test-only`` too, unless
    ``test_only_checks_limit`` is false: a limit the test does not see), records each call and replies with a
    random job id; return (calls record, job ids record)."""
    calls, ids = tmp_path / "calls", tmp_path / "ids"
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    test_only = '[ "$1" = --test-only ] && ' if test_only_checks_limit else '[ "$1" != --test-only ] && '
    fake.write_text(f"""#!/bin/bash
echo "$*" >> {shlex.quote(str(calls))}
if [ "$1" = --test-only ]; then script="$(cat)"; else script="$(cat "$1")"; fi
nodes="$(printf '%s\\n' "$script" | sed -n 's/^#SBATCH --nodes=//p')"
if {test_only}[ "$nodes" -gt "$LIMIT" ]; then echo "{LIMIT_ERROR}" >&2; exit 1; fi
[ "$1" = --test-only ] && {{ echo "sbatch: Job 3 to start at 2026-01-01T00:00:00" >&2; exit 0; }}
id=$RANDOM$RANDOM; echo "$id" >> {shlex.quote(str(ids))}; echo "Submitted batch job $id"
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    return calls, ids


def _submit(tmp_path, monkeypatch, limit: int) -> int:
    image = tmp_path / "image.sif"
    image.touch()
    monkeypatch.setenv("LIMIT", str(limit))  # read by the fake sbatch
    return main(["recipe", str(STRONG), "--submit", "--account", "a", "--qos", "q", "--image", str(image),
                 "--output-dir", str(tmp_path / "runs")])


def _over(limit: int) -> list[int]:
    return [number for number, row in enumerate(load_recipe(STRONG).rows, start=1) if row.nodes > limit]


def test_a_row_over_a_qos_limit_refuses_the_whole_submission(tmp_path, monkeypatch, capsys):
    calls, ids = _limited_sbatch(tmp_path, monkeypatch, test_only_checks_limit=True)
    limit = random.choice([4, 8, 16, 32, 64])  # the strong table runs on 4 .. 128 nodes
    over = _over(limit)
    assert _submit(tmp_path, monkeypatch, limit) == 2
    out, err = capsys.readouterr()
    assert out == "" and not ids.exists()  # nothing queued
    rows = len(load_recipe(STRONG).rows)
    assert [line.split()[0] for line in calls.read_text().splitlines()] == ["--test-only"] * rows
    others = "" if len(over) == 1 else f" (row{'s' if len(over) > 2 else ''} {', '.join(map(str, over[1:]))} too)"
    assert err.startswith(f"oellm recipe: error: sbatch --test-only rejects row {over[0]}{others}: {LIMIT_ERROR}; "
                          "nothing was submitted") and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()


def test_a_submission_refused_midway_names_the_queued_rows_and_their_table(tmp_path, monkeypatch, capsys):
    _calls, ids = _limited_sbatch(tmp_path, monkeypatch, test_only_checks_limit=False)
    limit = random.choice([8, 16, 32, 64])
    first_refused = _over(limit)[0]
    assert _submit(tmp_path, monkeypatch, limit) == 2
    out, err = capsys.readouterr()
    queued = list(range(1, first_refused))
    job_ids = ids.read_text().split()
    assert len(job_ids) == len(queued)
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [f"row {n}" for n in queued]
    table = shlex.split(lines[-1].removeprefix("table of the jobs' logs once they have run: "))
    assert table[:2] == ["oellm", "table"]
    assert [word.rsplit("/", 2)[1] for word in table if word.endswith("slurm-*.out")] == \
        [f"row{n:02d}-*" for n in queued]
    rows = f"rows {', '.join(map(str, queued))} are queued (jobs {', '.join(job_ids)})"
    assert (f"failed (1): {LIMIT_ERROR}; job.sbatch is removed, as nothing was queued (--dry-run prints the script); "
            f"{rows}; submit each remaining row with") in err and err.count("\n") == 1
    assert err.rstrip().endswith(f"(N: {', '.join(map(str, range(first_refused, 7)))})")
