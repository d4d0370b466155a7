"""``requeue = true``: a long run goes on across SLURM jobs. ``#SBATCH --requeue`` alone requeues nothing (a job
that exits 0 ends COMPLETED), so the job script requeues its own job after a start that ended with status 0, but
only when that start moved megatron's checkpoint forward and it is short of ``--train-iters``; the dry run refuses a
row whose job could not resume from its checkpoint or stop before its time limit. The scripts run end to end under
bash with stand-ins (:mod:`sbatch_job_helpers`) for ``scontrol``, ``srun``, ``apptainer`` and ``torchrun``."""

from __future__ import annotations

import dataclasses
import math
import random
import re
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES
from sbatch_job_helpers import mn5_weak_recipe, run_job

from megatron.oellm.cli import main
from megatron.oellm.recipes import RecipeError, RunInputs, resolve_row, sbatch_text
from megatron.oellm.recipes.config import time_limit_seconds
from megatron.oellm.recipes.resolve import exit_duration_minutes
from megatron.oellm.recipes.slurm import CHECKPOINT_TRACKER
from megatron.oellm.recipes.timing import START_UP_S, RunTime

RECIPE = EXAMPLES / "qwen3_30b_a3b_mn5.toml"
"""Row 1 expects 13 minutes: 10 iterations x 17.4 s + 10 minutes start-up."""

SCONTROL_REQUEUE = """#!/bin/bash
if [ "$1" = requeue ]; then printf 'requeue %s\\n' "$2" >> "$FAKE_RECORD"; exit "${FAKE_REQUEUE_STATUS:-0}"; fi
for i in $(seq 1 "$FAKE_NODES"); do echo "node$i"; done
"""
"""``scontrol``: ``requeue ID`` records the id and exits ``$FAKE_REQUEUE_STATUS`` (default 0); ``show hostnames``
prints ``node1`` to ``node$FAKE_NODES``."""

TORCHRUN_SAVES = f"""#!/bin/bash
# megatron's last save in miniature: $FAKE_SAVED (empty: no save) in the --save directory's tracker file
while [ $# -gt 0 ]; do [ "$1" = --save ] && save="$2"; shift; done
if [ -n "$FAKE_SAVED" ]; then mkdir -p "$save" && printf %s "$FAKE_SAVED" > "$save/{CHECKPOINT_TRACKER}"; fi
exit "$FAKE_EXIT"
"""
"""``torchrun``: writes ``$FAKE_SAVED`` as megatron's latest checkpoint in its ``--save`` directory, exits
``$FAKE_EXIT``."""


def _config(tmp_path: Path, text: str = "") -> Path:
    """A recipe config extending :data:`RECIPE` with ``requeue = true`` and ``text``."""
    config = tmp_path / "long_run.toml"
    config.write_text(f'extends = "{RECIPE}"\nrequeue = true\n{text}')
    return config


def test_a_run_longer_than_its_time_limit_is_queued_to_requeue_itself(tmp_path, capsys):
    """The time check refused a run longer than one job; with ``requeue = true`` the job goes on after each stop."""
    iterations = random.randint(1000, 10**5)
    options = ["--dry-run", "--row", "1", "--save-interval", str(random.randint(1, 99)), "--time", "02:00:00"]
    assert main(["recipe", str(_config(tmp_path, f"train_iters = {iterations}\n")), *options]) == 0
    out = capsys.readouterr().out
    assert ", requeued until its last iteration; expected " in out
    assert "#SBATCH --requeue" in out.splitlines()
    assert 'CHECKPOINT_BEFORE="$(checkpoint_iteration "$CHECKPOINT_DIR")"' in out
    assert f"  local before=$2 after last={iterations}" in out
    assert 'requeue_if_progressed "$CHECKPOINT_DIR" "$CHECKPOINT_BEFORE"' in out
    assert '    scontrol requeue "$SLURM_JOB_ID" || {' in out


@pytest.mark.parametrize(("text", "options", "refusal"), [
    ("", [], "requeue = true needs checkpoints, as each requeued start resumes from the one before: pass "
             "--save-interval N"),
    ('[megatron_flags]\nload = "/elsewhere/checkpoints"\n', ["--save-interval", "5"],
     "requeue = true needs load to be the save directory '{run}/checkpoints', as a requeued start must resume from "
     "what the one before saved; load is '/elsewhere/checkpoints'"),
    ('[megatron_flags]\nsave = "own-checkpoints"\nload = "own-checkpoints"\nsave-interval = 50\n', [],
     "requeue = true needs exit-duration-in-mins (megatron saves and exits with status 0 then)"),
    ("", ["--save-interval", "5", "--time", "00:05:00"], "requeue = true needs exit-duration-in-mins"),
    ("[megatron_flags]\nfinetune = true\n", ["--save-interval", "5"],
     "requeue = true cannot go on with finetune: megatron's --finetune starts every load at iteration 0"),
    ('[megatron_flags]\nsave = false\nload = false\nexit-duration-in-mins = 30\n', [],
     "requeue = true needs checkpoints, as each requeued start resumes from the one before: pass "
     "--save-interval N"),
    ('[megatron_flags]\nsave = "own-checkpoints"\nload = "own-checkpoints"\nsave-interval = 50\n'
     'exit-duration-in-mins = "0"\n', [], "requeue = true needs exit-duration-in-mins (megatron saves and exits with "
                                         "status 0 then)"),
    ('[megatron_flags]\nsave = "own-checkpoints"\nsave-interval = 50\n', [],
     "requeue = true needs load to be the save directory 'own-checkpoints', as a requeued start must resume from what "
     "the one before saved; load is unset: set it to the same directory"),
], ids=["no checkpoints", "load elsewhere", "no stop", "no stop under a short limit", "finetune", "save = false",
        "a stop of '0'", "no load"])
def test_a_job_that_could_not_go_on_is_refused(tmp_path, capsys, text, options, refusal):
    config = _config(tmp_path, f'[cluster]\noutput_dir = "{tmp_path}"\n{text}')
    assert main(["recipe", str(config), "--dry-run", "--row", "1", *options]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"row 1: {refusal.format(run=tmp_path / 'long_run' / 'row01-8n')}" in captured.err


def test_a_requeued_run_keeps_one_iteration_between_its_stop_and_its_time_limit():
    """Requeued or not, an iteration begun before the stop must end before SLURM's kill, or the start's save is lost
    and the job fails; only the run's length may exceed one job."""
    step_s = random.uniform(60, 600)
    stop = random.randint(math.ceil((START_UP_S + step_s) / 60), 100)  # after each start's first iteration
    iterations = random.randint(10**3, 10**5)
    long_run = RunTime(f"{stop + 1}", 60 * (stop + 1), iterations, step_s, "step_time_s", stop, saves=True,
                       requeues=True)
    with pytest.raises(RecipeError, match="no more than one iteration"):
        long_run.check()
    dataclasses.replace(long_run, limit=f"{stop + 2 + int(step_s) // 60}", limit_s=60 * (stop + 2) + int(step_s)).check()
    with pytest.raises(RecipeError, match="would reach its time limit"):
        dataclasses.replace(long_run, requeues=False).check()


@pytest.mark.parametrize("row", [1, 3], ids=["reference throughput", "no reference"])
def test_an_own_stop_at_or_after_the_time_limit_is_refused_with_or_without_a_reference(tmp_path, capsys, row):
    """The stop check ran only with a step time: a row without a reference throughput was let through with a stop
    at or after its limit, whose job SLURM then killed at the limit before its final save, never to requeue; a row
    with one was refused as stopping a negative number of seconds before its limit."""
    limit_minutes = random.randint(30, 240)
    stop = limit_minutes + random.randint(0, 120)
    limit = f"{limit_minutes // 60:02d}:{limit_minutes % 60:02d}:00"
    checkpoints = tmp_path / "own-checkpoints"

    def dry_run(stop_minutes: int) -> int:
        """``--dry-run`` of ``row`` with the recipe's own checkpoints and a stop at ``stop_minutes``."""
        text = (f'[cluster]\noutput_dir = "{tmp_path}"\n[megatron_flags]\nsave = "{checkpoints}"\n'
                f'load = "{checkpoints}"\nsave-interval = {random.randint(1, 99)}\n'
                f"exit-duration-in-mins = {stop_minutes}\n")
        return main(["recipe", str(_config(tmp_path, text)), "--dry-run", "--row", str(row), "--time", limit])

    assert dry_run(stop) == 2
    err = capsys.readouterr().err
    assert (f"row {row}: the run's own stop (--exit-duration-in-mins {stop}) is not before its time limit {limit} "
            f"({limit_minutes} min): SLURM kills the job at the limit before megatron stops and saves") in err
    assert "the killed job fails and is never requeued; set exit-duration-in-mins to at most " in err
    assert " s before its time limit" not in err
    assert dry_run(limit_minutes - 1) == 0  # a minute before the limit: more than row 1's 17 s step
    assert ", requeued until its last iteration" in capsys.readouterr().out


def _minutes_limit(minutes: int) -> str:
    """A time limit of ``minutes`` as ``HH:MM:00``."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def _suggested_limit(message: str) -> str:
    """The time limit a refusal tells to take."""
    return re.search(r"give it a time limit of at least (\d\d:\d\d:00)", message).group(1)


def test_a_derived_stop_before_the_start_up_and_one_iteration_is_refused_naming_the_least_limit(tmp_path, capsys):
    """``--time 00:06:00`` (the run stops after 1 min) was queued, requeued until its last iteration, though the
    tool itself expects 10 minutes of start-up: SLURM killed the start before its first iteration, a killed start is
    never requeued, and the job failed with no progress. The least limit the refusal names passes; a minute less
    does not."""
    config = _config(tmp_path, f'[cluster]\noutput_dir = "{tmp_path}"\n')
    short = random.randint(6, 15)  # a derived stop of 1 to 10 minutes; row 1 (a 17 s step) needs one of 11

    def dry_run(limit: str) -> int:
        return main(["recipe", str(config), "--dry-run", "--row", "1", "--save-interval", str(random.randint(1, 9)),
                     "--time", limit])

    assert dry_run(_minutes_limit(short)) == 2
    captured = capsys.readouterr()
    stop = exit_duration_minutes(60 * short)
    assert captured.out == "" and captured.err.count("\n") == 1
    assert (f"row 1: each start of the job (requeue = true) would stop (--exit-duration-in-mins {stop}: it exits and "
            f"saves after {stop} min) before its first iteration ends: expected ") in captured.err
    assert "a start that runs past its stop into its time limit is killed and never requeued; give it a time limit" \
        in captured.err
    least = _suggested_limit(captured.err)
    assert least == "00:16:00"
    assert dry_run(least) == 0
    assert ", requeued until its last iteration; " in capsys.readouterr().out
    assert dry_run(_minutes_limit(time_limit_seconds(least) // 60 - 1)) == 2


@pytest.mark.parametrize("stop_kind", ["derived", "own"])
def test_every_start_gets_past_its_first_iteration_or_is_refused(stop_kind):
    """Drawn steps and limits of a requeueing run with a stop before its start-up and one iteration, derived from
    the limit or the recipe's own: it is refused in those words, and following the refusal's suggestion (the least
    limit, or a later own stop with a limit where one is needed) passes; a minute less than the least limit does
    not."""
    step_s = random.uniform(1, 900)
    least_minutes = math.ceil((START_UP_S + step_s) / 60)  # the first whole-minute stop after the first iteration
    if stop_kind == "derived":  # limits of 6 minutes up to the last whose derived stop is before the first iteration
        limit_minutes = random.choice([m for m in range(6, least_minutes + 10)
                                       if 60 * exit_duration_minutes(60 * m) < START_UP_S + step_s])
        stop = exit_duration_minutes(60 * limit_minutes)
    else:
        stop = random.randint(1, least_minutes - 1)
        limit_minutes = random.randint(stop + 1, least_minutes + 30)
    run = RunTime(_minutes_limit(limit_minutes), 60 * limit_minutes, random.randint(10, 10**5), step_s,
                  "step_time_s", stop, saves=True, requeues=True, own_stop=stop_kind == "own")
    with pytest.raises(RecipeError) as refused:
        run.check()
    message = str(refused.value)
    assert message.startswith(f"each start of the job (requeue = true) would stop (--exit-duration-in-mins {stop}: "
                              f"it exits and saves after {stop} min) before its first iteration ends: expected "
                              f"{START_UP_S + step_s:.0f} s = {START_UP_S // 60} min start-up + 1 iteration x "
                              f"{step_s:.1f} s (from the report's step_time_s)"), message
    limit = _suggested_limit(message) if "give it a time limit" in message else run.limit
    limit_s = time_limit_seconds(limit)
    if stop_kind == "derived":
        dataclasses.replace(run, limit=limit, limit_s=limit_s, stop_minutes=exit_duration_minutes(limit_s)).check()
        shorter = limit_s - 60
        with pytest.raises(RecipeError):
            dataclasses.replace(run, limit=_minutes_limit(shorter // 60), limit_s=shorter,
                                stop_minutes=exit_duration_minutes(shorter)).check()
    else:
        later = re.search(r"set exit-duration-in-mins to (?:at least )?(\d+) in the recipe", message)
        assert later is not None and int(later.group(1)) == least_minutes
        dataclasses.replace(run, limit=limit, limit_s=limit_s, stop_minutes=least_minutes).check()


def test_an_own_stop_equal_to_the_derived_one_is_told_to_move_not_given_a_longer_limit():
    """A recipe's own ``exit-duration-in-mins`` that happens to equal the stop ``oellm recipe`` derives from the time
    limit was taken for the derived one: the refusal asked for a longer limit, which does not move a recipe's stop,
    and the next refusal then asked for a later stop."""
    step_s = random.uniform(1, 900)
    least_minutes = math.ceil((START_UP_S + step_s) / 60)
    limit_minutes = random.choice([m for m in range(6, least_minutes + 10)
                                   if 60 * exit_duration_minutes(60 * m) < START_UP_S + step_s])
    stop = exit_duration_minutes(60 * limit_minutes)
    run = RunTime(_minutes_limit(limit_minutes), 60 * limit_minutes, random.randint(10, 10**5), step_s,
                  "step_time_s", stop, saves=True, requeues=True, own_stop=True)
    with pytest.raises(RecipeError) as refused:
        run.check()
    later = re.search(r"set exit-duration-in-mins to (?:at least )?(\d+) in the recipe", str(refused.value))
    assert later is not None and int(later.group(1)) == least_minutes, refused.value
    limit = _suggested_limit(str(refused.value)) if "give it a time limit" in str(refused.value) else run.limit
    dataclasses.replace(run, limit=limit, limit_s=time_limit_seconds(limit), stop_minutes=least_minutes).check()


def test_a_requeueing_runs_margin_refusal_names_a_limit_for_one_start_not_the_whole_run():
    """A long requeueing run whose derived stop leaves less than one iteration before its limit was told to take a
    limit covering every iteration (487 days for 10**5 steps of 400 s); the least limit for one start passes."""
    step_s = random.uniform(301, 900)  # more than the 5 minutes a one-hour limit keeps after its derived stop
    run = RunTime("01:00:00", 3600, random.randint(10**4, 10**6), step_s, "step_time_s", exit_duration_minutes(3600),
                  saves=True, requeues=True)
    with pytest.raises(RecipeError, match="no more than one iteration") as refused:
        run.check()
    limit_s = time_limit_seconds(_suggested_limit(str(refused.value)))
    assert limit_s < run.expected_s / 100
    dataclasses.replace(run, limit=_minutes_limit(limit_s // 60), limit_s=limit_s,
                        stop_minutes=exit_duration_minutes(limit_s)).check()
    with pytest.raises(RecipeError, match="no more than one iteration"):  # the least limit: a minute less is refused
        dataclasses.replace(run, limit=_minutes_limit(limit_s // 60 - 1), limit_s=limit_s - 60,
                            stop_minutes=exit_duration_minutes(limit_s - 60)).check()


def _requeue_job(tmp_path: Path, iterations: int, before: str | None, saved: str, exit_status: int = 0,
                 requeue_status: int = 0) -> tuple[int, int, list[str]]:
    """Run the job of row 1 of the MN5 weak-scaling recipe with ``requeue = true``, ``iterations`` and checkpoints,
    after an earlier start left ``before`` (None: nothing) in the job's checkpoint directory, with a ``torchrun`` that
    saves ``saved`` there (empty: nothing) and exits ``exit_status``, and an ``scontrol requeue`` that exits
    ``requeue_status``. Returns the job's exit status, its id and the `scontrol requeue` calls the stand-in recorded."""
    (tmp_path / "image.sif").touch()
    recipe = dataclasses.replace(mn5_weak_recipe(image=str(tmp_path / "image.sif")), requeue=True,
                                 train_iters=iterations)
    run = tmp_path / "run"
    inputs = RunInputs(checkpoint_dir=str(run / "checkpoints"), save_interval=random.randint(1, 99),
                       time_limit_s=random.randint(600, 86400))
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0], inputs), run)
    job_id = random.randint(1, 10**6)
    if before is not None:
        (run / "checkpoints" / f"job-{job_id}").mkdir(parents=True)
        (run / "checkpoints" / f"job-{job_id}" / CHECKPOINT_TRACKER).write_text(before)
    status, record = run_job(script, tmp_path, tmp_path, 4, exit_status, job_id, torchrun=TORCHRUN_SAVES,
                             scontrol=SCONTROL_REQUEUE,
                             env={"FAKE_SAVED": saved, "FAKE_REQUEUE_STATUS": str(requeue_status)})
    return status, job_id, [line for line in record if line.startswith("requeue ")]


def _log(tmp_path: Path) -> str:
    """The job's stdout and stderr, as its SLURM log holds them."""
    return (tmp_path / "stdout").read_text() + (tmp_path / "stderr").read_text()


@pytest.mark.parametrize("before", ["none", "earlier", "release", "spaced"])
def test_a_start_that_moved_the_checkpoint_requeues_the_job(tmp_path, before):
    """From no checkpoint, an earlier start's, a converted one (``release``: megatron loads it as iteration 0), or
    one whose tracker holds spaces and line ends around the iteration (megatron strips them as it reads it)."""
    iterations = random.randint(100, 10**5)
    earlier = random.randint(1, iterations - 2)
    spaces = " " * random.randint(1, 4)
    before_text, shown = {"none": (None, "none"), "earlier": (f"{earlier}\n", str(earlier)),
                          "release": ("release", "0"), "spaced": (f"{spaces}{earlier}\r\n{spaces}", str(earlier))}[before]
    saved = str(random.randint(earlier + 1, iterations - 1))
    status, job_id, record = _requeue_job(tmp_path, iterations, before_text, saved)
    assert status == 0, _log(tmp_path)
    assert record == [f"requeue {job_id}"]
    log = _log(tmp_path)
    assert f"oellm requeue: start 0 of job {job_id}; checkpoint before it: {shown} (--train-iters {iterations})" in log
    assert (f"oellm requeue: requeueing job {job_id}: this start moved the checkpoint from {shown} to iteration "
            f"{saved} of {iterations}; the next start resumes there") in log


@pytest.mark.parametrize("case", ["no progress", "no checkpoint", "unreadable checkpoint", "blank checkpoint",
                                  "complete"])
def test_a_start_without_progress_or_the_last_one_ends_the_job(tmp_path, case):
    """A start that did not move the checkpoint would be followed by one that ends the same way (requeueing it would
    loop until someone cancels the job); the start that saved the last iteration ends the run."""
    iterations = random.randint(100, 10**5)
    earlier = str(random.randint(1, iterations - 1))
    before, saved, decision = {
        "no progress": (earlier, earlier, f"the checkpoint did not move forward in this start (iteration {earlier} "
                                          f"before it, {earlier} after it)"),
        "no checkpoint": (None, "", "this start left no checkpoint in {checkpoints}, so another would start over"),
        "unreadable checkpoint": (earlier, f"{earlier}x", f"{{checkpoints}}/{CHECKPOINT_TRACKER} holds neither an "
                                                          "iteration nor 'release', so megatron would not resume from it"),
        "blank checkpoint": (earlier, " " * random.randint(1, 4) + "\n", f"{{checkpoints}}/{CHECKPOINT_TRACKER} holds "
                             "neither an iteration nor 'release', so megatron would not resume from it"),
        "complete": (earlier, str(iterations), f"the checkpoint is at iteration {iterations} of {iterations}: the run "
                                               "is complete"),
    }[case]
    status, job_id, record = _requeue_job(tmp_path, iterations, before, saved)
    assert status == 0, _log(tmp_path)
    assert record == []
    checkpoints = tmp_path / "run" / "checkpoints" / f"job-{job_id}"
    assert f"oellm requeue: not requeued: {decision.format(checkpoints=checkpoints)}" in _log(tmp_path)


def test_a_failed_start_keeps_its_status_and_is_not_requeued(tmp_path):
    iterations = random.randint(100, 10**5)
    failure = random.randint(1, 120)
    earlier = random.randint(1, iterations - 2)
    status, _job_id, record = _requeue_job(tmp_path, iterations, str(earlier),
                                           str(random.randint(earlier + 1, iterations - 1)), exit_status=failure)
    assert status == failure
    assert record == []
    assert (f"oellm requeue: not requeued: srun ended with status {failure}, and a failed start is not repeated"
            in _log(tmp_path))


def test_a_refused_requeue_fails_the_job(tmp_path):
    """A job that ended COMPLETED after SLURM refused its ``scontrol requeue`` would look like a finished run."""
    iterations = random.randint(100, 10**5)
    earlier = random.randint(1, iterations - 2)
    status, job_id, record = _requeue_job(tmp_path, iterations, str(earlier),
                                          str(random.randint(earlier + 1, iterations - 1)),
                                          requeue_status=random.randint(1, 120))
    assert status == 1
    assert record == [f"requeue {job_id}"]
    assert f"oellm requeue: scontrol requeue failed: requeue the job by hand (scontrol requeue {job_id})" in (
        _log(tmp_path))
