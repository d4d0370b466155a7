"""Row time limits: a row sets its own, and a row whose report numbers imply a longer run than its limit is refused
before it is queued (it would be killed before its last iteration)."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from recipe_helpers import CONFIGS, EXAMPLES, fake_sbatch, runnable_rows

from megatron.oellm.cli import main
from megatron.oellm.flops import training_flops_per_token
from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row
from megatron.oellm.recipes.config import slurm_time_text, time_limit_seconds, time_limit_text
from megatron.oellm.recipes.timing import START_UP_S, run_time

ROUTING = EXAMPLES / "qwen3_5_35b_a3b_mn5_routing.toml"


def _real_routing_row(tmp_path, time_line: str = ""):
    """A config with the routing table's 40-iteration real-routing row (~87 s per step), the time limit as given."""
    config = tmp_path / "long.toml"
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_5_35b_a3b_mn5.toml"}"\ntitle = "long"\n'
                      '[[rows]]\nnodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\ntrain_iters = 40\n'
                      f'reference = {{ tokens_per_s_per_gpu = 6016 }}\n{time_line}')
    return config


@pytest.mark.parametrize("text, seconds", [("30", 1800), ("30:15", 1815), ("01:20:00", 4800), ("1-0", 86400),
                                           ("1-02:30", 95400), ("0-00:00:45", 45)])
def test_slurm_time_limit_forms(text, seconds):
    assert time_limit_seconds(text) == seconds


def test_the_normalized_form_reads_back_as_the_same_limit():
    """Every limit prints as SLURM's ``[D-]HH:MM:SS``, which sbatch reads back as the same number of seconds."""
    seconds = random.choice([random.randint(1, 86399), random.randint(86400, 30 * 86400)])
    text = slurm_time_text(seconds)
    assert time_limit_seconds(text) == seconds and text == time_limit_text(text)
    assert ("-" in text) == (seconds >= 86400) and len(text.rsplit("-", 1)[-1]) == len("HH:MM:SS")


def test_a_bare_number_of_minutes_prints_with_its_unit(capsys):
    """``--time 30`` printed ``time limit 30;`` in --dry-run (SLURM reads a bare number as minutes; nothing said so)
    and ``30`` in the rows' time column: the line adds SLURM's normalized form, the column shows it, and sbatch still
    gets the limit as written."""
    minutes = random.randint(100, 1439)  # the routing rows' longest expected run is 68 min
    normalized = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
    assert time_limit_text(str(minutes)) == f"{minutes} (= {normalized})"
    assert main(["recipe", str(ROUTING), "--time", str(minutes), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"time limit {minutes} (= {normalized}); expected " in out and f"time limit {minutes};" not in out
    assert f"#SBATCH --time={minutes}\n" in out
    rows = [line for line in out.splitlines() if line[:3].strip().isdigit()]
    assert rows and all(f"  {normalized}  " in line for line in rows)


def test_the_rows_time_column_fits_a_limit_of_days(capsys):
    """A limit of a day or more prints as ``D-HH:MM:SS``, wider than the column's eight characters: the column widens
    with it, so every row's label still starts where the header's does."""
    days = random.randint(1, 9)
    assert main(["recipe", str(ROUTING), "--time", f"{days}-{random.randint(0, 23)}", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.endswith("label / overrides"))
    rows = [line for line in lines if line[:3].strip().isdigit()]
    start = header.index("label / overrides")
    assert rows and all(line[start - 2:start] == "  " and line[start] != " " for line in rows), [header, *rows]
    assert all(f"  {days}-" in line[:start] for line in rows)


@pytest.mark.parametrize("text, message", [("1h", "not a SLURM time limit"), ("1:2:3:4", "not a SLURM time limit"),
                                           ("00:00:00", "is zero")])
def test_bad_time_limits_are_refused(text, message):
    with pytest.raises(RecipeError, match=message):
        time_limit_seconds(text)


def test_a_row_that_outlasts_its_time_limit_is_refused_by_dry_run_and_submit(tmp_path, monkeypatch, capsys):
    """40 iterations at ~87 s (6,016 tokens/s/GPU on 32 GPUs) are ~58 min: the base's 30 minutes kill the job."""
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    image = tmp_path / "image.sif"
    image.touch()
    config = _real_routing_row(tmp_path)
    for mode in (["--dry-run"], ["--submit", "--image", str(image), "--output-dir", str(tmp_path / "runs")]):
        assert main(["recipe", str(config), *mode]) == 2
        err = capsys.readouterr().err
        assert ("row 1: the job would reach its time limit 00:30:00 before its last iteration: expected 68 min = "
                "40 iterations x 87.1 s (from the report's tokens_per_s_per_gpu 6016) + 10 min start-up; give it at "
                "least 01:09:00 (the row's time = \"...\", or --time, which overrides it)") in err
    assert not record.exists()
    assert main(["recipe", str(_real_routing_row(tmp_path, 'time = "01:20:00"\n')), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --time=01:20:00" in out and "time limit 01:20:00; expected 68 min" in out


def test_the_command_line_time_limit_is_every_selected_rows(capsys):
    assert main(["recipe", str(ROUTING), "--row", "2", "--time", "00:30:00"]) == 2
    assert "time limit 00:30:00 before its last iteration" in capsys.readouterr().err
    assert main(["recipe", str(ROUTING), "--time", "02:00:00"]) == 0
    out = capsys.readouterr().out
    assert out.count("#SBATCH --time=02:00:00") == len(load_recipe(ROUTING).rows) and "01:20:00" not in out


@pytest.mark.parametrize("text, problem", [("1h", "is not a SLURM time limit"), ("00:00", "is zero")])
def test_a_bad_command_line_time_limit_is_blamed_on_the_option(text, problem, capsys):
    """``--time 1h`` names the option, not the recipe's ``[cluster]`` time the user never wrote."""
    assert main(["recipe", str(ROUTING), "--time", text]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"oellm recipe: error: --time {text!r} {problem}")
    assert "[cluster]" not in err


def test_a_tflops_reference_gives_the_step_time_from_the_flop_count():
    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")
    resolved = resolve_row(recipe, recipe.rows[0])
    timing = run_time(resolved.row, recipe.row_time(resolved.row), 10, resolved.world_size, resolved.built_card)
    tokens = 2048 * 4096
    assert timing.step_s == pytest.approx(tokens * 148.34e9 / (170e12 * 256), rel=1e-3)
    assert timing.source == "tflops_per_gpu_low 170" and timing.expected_s == pytest.approx(10 * timing.step_s
                                                                                               + START_UP_S)


def test_a_row_without_reference_throughput_is_not_estimated():
    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter_sweep.toml")
    resolved = resolve_row(recipe, recipe.rows[1])
    timing = run_time(resolved.row, "00:01:00", 10, resolved.world_size, resolved.built_card)
    timing.check()
    assert timing.expected_s is None and "run time not estimated" in timing.describe()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_every_shipped_row_fits_its_time_limit(config):
    recipe = load_recipe(config)
    for row in runnable_rows(config, recipe):
        resolved = resolve_row(recipe, row)
        timing = run_time(row, recipe.row_time(row), recipe.row_train_iters(row), resolved.world_size,
                          resolved.built_card)
        timing.check()
        if timing.expected_s is not None:
            assert timing.expected_s <= timing.limit_s


def test_the_long_shipped_rows_have_their_own_time_limits():
    """The routing table's 40-iteration row (~58 min of steps) and the 4-node rows (10 x ~167 s)."""
    routing = load_recipe(ROUTING)
    assert [row.time for row in routing.rows] == [None, "01:20:00"] + [None] * (len(routing.rows) - 2)
    for stem in ("qwen3_5_35b_a3b_mn5_strong", "qwen3_5_35b_a3b_mn5_attention"):
        recipe = load_recipe(EXAMPLES / f"{stem}.toml")
        assert all(row.time == "00:50:00" for row in recipe.rows if row.nodes == 4)
    assert routing.row_time(routing.rows[0]) == routing.cluster.time == "00:30:00"


def test_a_misspelt_reference_throughput_is_refused_not_left_unchecked(tmp_path, capsys):
    """A reference key the timing does not read left the 40-iteration row (~68 min) under the base's 30 minutes."""
    config = tmp_path / "typo.toml"
    config.write_text(_real_routing_row(tmp_path).read_text().replace("tokens_per_s_per_gpu", "tokens_per_sec_per_gpu"))
    assert main(["recipe", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "row 1: reference key 'tokens_per_sec_per_gpu' is not one of" in err and "'tokens_per_s_per_gpu'" in err


def test_the_suggested_time_limit_covers_the_expected_run_time():
    """The suggestion rounded the expected seconds down before rounding up to minutes: 68 min + 0.5 s got
    "01:08:00", which the same check then refused."""
    import re

    from megatron.oellm.recipes.timing import RunTime

    rng = random.Random(random.random())
    for _ in range(20):
        iterations = rng.randint(5, 50)
        expected = 60 * rng.randint(40, 300) + rng.uniform(0.01, 0.99)
        step = (expected - START_UP_S) / iterations
        with pytest.raises(RecipeError) as refused:
            RunTime("00:30:00", 1800, iterations, step, "step_time_s").check()
        suggested = re.search(r"at least (\d\d:\d\d:00)", str(refused.value)).group(1)
        RunTime(suggested, time_limit_seconds(suggested), iterations, step, "step_time_s").check()
        assert time_limit_seconds(suggested) - expected < 60


def _jupiter_row():
    """(row, world size, card) of the Qwen3-235B-A22B Jupiter recipe's first row (2048 x 4096 tokens, 256 GPUs)."""
    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")
    resolved = resolve_row(recipe, recipe.rows[0])
    return resolved.row, resolved.world_size, resolved.built_card


@pytest.mark.parametrize("key", ["tflops_per_gpu", "tflops_per_gpu_low", "tflops_per_gpu_high"])
def test_a_tflops_only_reference_gives_the_step_from_the_flop_count(key):
    """A row whose reference gives TFLOP/s per GPU only: its step time comes from the FLOP count of
    :mod:`megatron.oellm.flops`, whichever TFLOP/s key it gives."""
    row, world_size, card = _jupiter_row()
    rng = random.Random(random.random())
    for _ in range(5):
        tflops, iterations = rng.uniform(50, 400), rng.randint(5, 40)
        timed = dataclasses.replace(row, reference={key: tflops})
        timing = run_time(timed, "09:00:00", iterations, world_size, card)
        flops = training_flops_per_token(card, card.seq_length, card.vocab_size).total
        step = row.global_batch_size * card.seq_length * flops / (tflops * 1e12 * world_size)
        assert timing.step_s == pytest.approx(step, rel=1e-12)
        assert timing.expected_s == pytest.approx(iterations * step + START_UP_S, rel=1e-12)
        assert timing.source == f"{key} {tflops}"


def test_the_low_end_still_wins_over_the_high_end():
    row, world_size, card = _jupiter_row()
    timed = dataclasses.replace(row, reference={"tflops_per_gpu_high": 175, "tflops_per_gpu_low": 170})
    assert run_time(timed, "02:00:00", 10, world_size, card).source == "tflops_per_gpu_low 170"


def test_a_high_end_only_row_that_outlasts_its_limit_is_refused(tmp_path, capsys):
    """The high end of a range given alone was read as no throughput at all, so the row's time limit went unchecked.
    At 150 TFLOP/s a step of the Jupiter row is ~32 s: 40 iterations + start-up outlast 20 minutes."""
    config = tmp_path / "high.toml"
    text = (EXAMPLES / "qwen3_235b_a22b_jupiter.toml").read_text()
    text = text.replace('extends = "_qwen3_235b_a22b_jupiter.toml"',
                        f'extends = "{EXAMPLES / "_qwen3_235b_a22b_jupiter.toml"}"')
    config.write_text(text.replace("reference = { tflops_per_gpu_low = 170, tflops_per_gpu_high = 175 }",
                                   'reference = { tflops_per_gpu_high = 150 }\ntrain_iters = 40\ntime = "00:20:00"', 1))
    assert main(["recipe", str(config), "--dry-run", "--row", "1"]) == 2
    err = capsys.readouterr().err
    assert "row 1: the job would reach its time limit 00:20:00" in err and "tflops_per_gpu_high 150" in err


def test_a_tflops_range_is_timed_at_its_low_end():
    """The low end gives the longer step: the one a time limit has to cover."""
    row, world_size, card = _jupiter_row()
    row = dataclasses.replace(row, reference={"tflops_per_gpu": 200, "tflops_per_gpu_low": 170})
    timing = run_time(row, "02:00:00", 10, world_size, card)
    assert timing.source == "tflops_per_gpu_low 170"
    assert timing.step_s == pytest.approx(2048 * 4096 * 148.34e9 / (170e12 * 256), rel=1e-3)


def test_the_step_time_follows_the_runs_sequence_length():
    """8192 tokens per sequence: twice the tokens of 4096 and more FLOPs per token (attention grows with the
    sequence: 94 layers x 64 heads x 128 dims add 1.9e10-3.8e10 training FLOPs per token over 148.3e9, causal or
    not), so the step is 2.25x-2.52x the 4096 one; a tokens/s reference gives exactly 2x."""
    row, world_size, card = _jupiter_row()
    longer = dataclasses.replace(card, seq_length=8192)
    for reference, low, high in (({"tflops_per_gpu_low": 170}, 2.25, 2.52), ({"tokens_per_s_per_gpu": 900}, 2, 2)):
        row = dataclasses.replace(row, reference=reference)
        short, long = (run_time(row, "02:00:00", 10, world_size, c).step_s for c in (card, longer))
        assert low - 1e-9 <= long / short <= high + 1e-9
    assert long == pytest.approx(2048 * 8192 / (900 * 256), rel=1e-12)


def _saving_run(limit_s: int, step: float, stop_minutes: int | None = None):
    """A checkpointing RunTime of one iteration of ``step`` seconds under ``limit_s``, stopping at ``stop_minutes``
    (default: the stop ``oellm recipe`` derives from the limit)."""
    from megatron.oellm.recipes.resolve import exit_duration_minutes
    from megatron.oellm.recipes.timing import RunTime

    limit = f"{limit_s // 3600:02d}:{limit_s % 3600 // 60:02d}:00"
    stop = exit_duration_minutes(limit_s) if stop_minutes is None else stop_minutes
    return RunTime(limit, limit_s, 1, step, "step_time_s", stop, saves=True)


def test_a_stop_that_leaves_less_than_one_iteration_is_refused_with_a_limit_that_does():
    """megatron checks its clock after each iteration: with steps longer than the time between the stop and the
    time limit, the iteration begun before the stop ran into the limit and the job was killed before its final save
    (the stop margin, 5 minutes or 5 %, did not look at the step time)."""
    import re

    from megatron.oellm.recipes.resolve import exit_duration_minutes

    rng = random.Random(random.random())
    for _ in range(10):
        limit_s = 60 * rng.randint(60, 180)
        margin = limit_s - 60 * exit_duration_minutes(limit_s)  # what the job keeps after its stop
        step = margin + rng.uniform(0, 400)
        with pytest.raises(RecipeError) as refused:
            _saving_run(limit_s, step).check()
        message = str(refused.value)
        assert f"{margin} s before its time limit" in message and f"no more than one iteration ({step:.0f} s" in message
        suggested = time_limit_seconds(re.search(r"at least (\d\d:\d\d:00)", message).group(1))
        _saving_run(suggested, step).check()
        with pytest.raises(RecipeError):
            _saving_run(suggested - 60, step).check()  # the suggestion is the shortest such limit
        _saving_run(limit_s, margin - rng.uniform(1, 60)).check()
        dataclasses.replace(_saving_run(limit_s, step), saves=False).check()  # nothing to lose without saves


def test_an_own_stop_too_close_to_the_limit_is_refused_with_the_latest_stop_that_fits():
    import re

    rng = random.Random(random.random())
    from megatron.oellm.recipes.resolve import exit_duration_minutes

    limit_s, step = 60 * rng.randint(60, 180), rng.uniform(100, 900)
    own = math.ceil((limit_s - step) / 60) + rng.randint(0, 3)  # leaves at most one step before the limit
    if own == exit_duration_minutes(limit_s):  # the stop oellm recipe derives: a longer limit would move it
        own += 1
    with pytest.raises(RecipeError) as refused:
        _saving_run(limit_s, step, own).check()
    latest = int(re.search(r"exit-duration-in-mins to at most (\d+) in the recipe", str(refused.value)).group(1))
    _saving_run(limit_s, step, latest).check()
    with pytest.raises(RecipeError):
        _saving_run(limit_s, step, latest + 1).check()


@pytest.mark.parametrize("step", [None, "drawn"], ids=["no reference", "reference step"])
def test_a_saving_runs_stop_at_or_after_its_limit_is_refused_in_its_own_words(step):
    """A stop at or after the time limit was told it stopped a negative number of seconds before the limit (with a
    step time) or let through (without one): SLURM kills such a job before megatron stops and saves. Following each of
    the refusal's suggestions (the stop, or the limit) passes the check; a run that saves nothing loses nothing."""
    from megatron.oellm.recipes.timing import RunTime

    limit_minutes = random.randint(10, 600)
    step_s = None if step is None else random.uniform(1, 900)
    stop = limit_minutes + random.randint(0, 60)
    limit = f"{limit_minutes // 60:02d}:{limit_minutes % 60:02d}:00"
    run = RunTime(limit, 60 * limit_minutes, 1, step_s, "" if step_s is None else "step_time_s", stop, saves=True)
    message = _refusal(run)
    assert message.startswith(f"the run's own stop (--exit-duration-in-mins {stop}) is not before its time limit "
                              f"{limit} ({limit_minutes} min): SLURM kills the job at the limit before megatron "
                              "stops and saves, so the iterations since its last periodic save are lost; ")
    _follow_each_suggestion(run, message)
    unsaved = dataclasses.replace(run, saves=False)
    if unsaved.expected_s is None or unsaved.expected_s <= unsaved.limit_s:
        unsaved.check()
    else:  # a run too long for its limit is refused for that, not for its stop
        with pytest.raises(RecipeError, match="would reach its time limit"):
            unsaved.check()


def _refusal(run) -> str:
    """The message of the :class:`RecipeError` that ``run.check()`` raises, with no negative number in it."""
    import re

    with pytest.raises(RecipeError) as refused:
        run.check()
    message = str(refused.value)
    assert re.search(r"-\d", message) is None  # no negative number of seconds before the limit
    return message


LEAST_STOP = "(?:the expected run time|start-up and one iteration)"
"""How a refusal names the earliest stop a run fits: one job's whole run, or a requeueing start's first iteration."""


def _follow_each_suggestion(run, message: str) -> None:
    """Follow each suggestion of a stop-before-limit refusal on its own (an earlier stop; a longer time limit, with
    the stop it names when it names one) and check that the run then passes."""
    import re

    latest = re.search(r"exit-duration-in-mins to at most (\d+) in the recipe", message)
    if latest is not None:
        dataclasses.replace(run, stop_minutes=int(latest.group(1))).check()
    earliest = re.search(rf"in the recipe \(and at least (\d+), {LEAST_STOP}\)", message)
    if earliest is not None:  # the other end of the range of stops the run fits
        dataclasses.replace(run, stop_minutes=int(earliest.group(1))).check()
    raised = re.search(rf"exit-duration-in-mins to (\d+) in the recipe \({LEAST_STOP}", message)
    stop = run.stop_minutes if raised is None else int(raised.group(1))
    suggested = re.search(r"time limit of at least (\d\d:\d\d:00)", message).group(1)
    dataclasses.replace(run, limit=suggested, limit_s=time_limit_seconds(suggested), stop_minutes=stop).check()


@pytest.mark.parametrize("stop", [45, 21])
def test_an_earlier_stop_is_offered_only_when_the_run_still_fits_it(stop):
    """A one-iteration run of 669 s (21.2 min expected) under a 21-minute limit with its stop at or after the limit
    (OELLM_TEST_SEED=2's draw) was told to stop after 9 min, which the one-job check then refused. It is told only of
    a longer limit (and, with a stop before the expected run time, a later stop), each passing when followed. So is
    a requeueing run, whose every start must get past its start-up and first iteration (21.2 min) before it stops:
    it was told to stop after 9 min, before its first iteration ended."""
    from megatron.oellm.recipes.timing import RunTime

    run = RunTime("00:21:00", 1260, 1, 669.02, "step_time_s", stop, saves=True)
    message = _refusal(run)
    assert "at most" not in message
    assert ("exit-duration-in-mins to 22 in the recipe" in message) == (stop == 21)
    _follow_each_suggestion(run, message)
    requeued = dataclasses.replace(run, requeues=True)
    message = _refusal(requeued)
    assert "at most" not in message
    assert ("exit-duration-in-mins to 22 in the recipe (start-up and one iteration: " in message) == (stop == 21)
    _follow_each_suggestion(requeued, message)


def test_a_saving_runs_stop_exactly_at_its_limit_is_refused_without_a_reference():
    """A stop at the limit's very minute is no stop before it: SLURM's kill and megatron's stop race, and the kill
    wins before the final save (the check compared with ``<``, a drawn stop past the limit did not tell)."""
    from megatron.oellm.recipes.timing import RunTime

    limit_minutes = random.randint(10, 600)
    limit = f"{limit_minutes // 60:02d}:{limit_minutes % 60:02d}:00"
    run = RunTime(limit, 60 * limit_minutes, random.randint(1, 10**5), None, "", limit_minutes, saves=True)
    with pytest.raises(RecipeError, match=rf"^the run's own stop \(--exit-duration-in-mins {limit_minutes}\) is not "
                                          rf"before its time limit {limit} \({limit_minutes} min\)"):
        run.check()
    dataclasses.replace(run, stop_minutes=limit_minutes - 1).check()


@pytest.mark.parametrize("step", [None, "drawn"], ids=["no reference", "reference step"])
def test_the_time_limit_a_late_stop_is_told_to_take_is_the_shortest_that_passes(step):
    """The limit the refusal of a stop at or after the limit suggests passes the check, and a minute less does not:
    with a step time that is no whole number of minutes, a limit rounded up from it was a minute longer than needed."""
    import re

    from megatron.oellm.recipes.timing import RunTime

    limit_minutes = random.randint(10, 600)
    step_s = None if step is None else random.uniform(1, 900)
    stop = limit_minutes + random.randint(0, 60)
    limit = f"{limit_minutes // 60:02d}:{limit_minutes % 60:02d}:00"
    run = RunTime(limit, 60 * limit_minutes, 1, step_s, "" if step_s is None else "step_time_s", stop, saves=True)
    with pytest.raises(RecipeError) as refused:
        run.check()
    suggested = re.search(r"time limit of at least (\d\d:\d\d:00)", str(refused.value)).group(1)
    # a stop earlier than the run itself (a short limit, a long step) is told to move too: follow both changes
    later_stop = re.search(r"set exit-duration-in-mins to (\d+) in the recipe \(the expected", str(refused.value))
    if later_stop:
        run = dataclasses.replace(run, stop_minutes=int(later_stop.group(1)))
    dataclasses.replace(run, limit=suggested, limit_s=time_limit_seconds(suggested)).check()
    shorter_s = time_limit_seconds(suggested) - 60
    shorter = f"{shorter_s // 3600:02d}:{shorter_s // 60 % 60:02d}:00"
    with pytest.raises(RecipeError):
        dataclasses.replace(run, limit=shorter, limit_s=shorter_s).check()


def test_a_late_stop_within_one_step_of_a_short_limit_is_told_only_to_take_a_longer_limit():
    """Where no stop of a whole minute or more leaves one iteration before the limit, the refusal names no such stop
    (an ``exit-duration-in-mins`` of 0 is no stop at all), only a longer limit."""
    from megatron.oellm.recipes.timing import RunTime

    limit_minutes = random.randint(10, 600)
    step_s = random.uniform(60 * limit_minutes - 59, 60 * limit_minutes - 1)
    stop = limit_minutes + random.randint(0, 60)
    limit = f"{limit_minutes // 60:02d}:{limit_minutes % 60:02d}:00"
    run = RunTime(limit, 60 * limit_minutes, 1, step_s, "step_time_s", stop, saves=True)
    with pytest.raises(RecipeError) as refused:
        run.check()
    message = str(refused.value)
    assert "set exit-duration-in-mins to at most" not in message
    assert message.endswith("(the row's time = \"...\", or --time, which overrides it)")
    assert " give it a time limit of at least " in message  # after raising the stop where the run needs that


def test_dry_run_refuses_a_checkpointing_row_whose_step_outlasts_the_stop_margin(tmp_path, capsys):
    """The routing table's real-routing row at 1500 tokens/s/GPU: 350 s per step, more than the 5 minutes a
    one-hour limit keeps after the stop."""
    config = _real_routing_row(tmp_path, 'time = "01:00:00"')
    config.write_text(config.read_text().replace("tokens_per_s_per_gpu = 6016", "tokens_per_s_per_gpu = 1500")
                      .replace("train_iters = 40", "train_iters = 5"))
    assert main(["recipe", str(config), "--dry-run"]) == 0  # a benchmark row saves nothing: no stop
    capsys.readouterr()
    assert main(["recipe", str(config), "--dry-run", "--save-interval", "2"]) == 2
    err = capsys.readouterr().err
    assert "row 1: the job stops (--exit-duration-in-mins 55) 300 s before its time limit 01:00:00" in err
    assert "no more than one iteration (350 s, from the report's tokens_per_s_per_gpu 1500)" in err


def test_a_run_expected_to_end_exactly_at_its_own_stop_is_let_through():
    """The stop check refuses a run expected to outlast ``--exit-duration-in-mins``; one expected to take exactly
    that long is let through (megatron exits only once its clock passes the stop), as the time-limit check lets
    through a run expected to take exactly its limit. A stop a minute earlier is refused."""
    from megatron.oellm.recipes.timing import RunTime

    rng = random.Random(random.random())
    iterations, step_minutes = rng.randint(5, 50), rng.randint(1, 5)
    stop = iterations * step_minutes + START_UP_S // 60  # the expected minutes, exactly
    limit = f"{(stop + 60) // 60:02d}:{(stop + 60) % 60:02d}:00"
    run = RunTime(limit, time_limit_seconds(limit), iterations, 60.0 * step_minutes, "step_time_s", stop)
    assert run.expected_s == 60 * stop
    run.check()
    with pytest.raises(RecipeError, match=rf"--exit-duration-in-mins {stop - 1}: it exits after"):
        dataclasses.replace(run, stop_minutes=stop - 1).check()


def test_the_limit_suggested_for_a_derived_stop_is_the_shortest_whose_stop_the_run_reaches():
    """A run expected to outlast the stop ``oellm recipe`` derives from its limit is told the shortest limit whose
    derived stop it reaches; a run expected to take exactly that stop's minutes reaches it (as the stop check lets
    it through), so the suggestion is that limit, not one a minute longer."""
    import re

    from megatron.oellm.recipes.resolve import exit_duration_minutes
    from megatron.oellm.recipes.timing import RunTime

    rng = random.Random(random.random())
    limit_minutes = rng.randint(60, 90)  # the 5-minute margin: each minute more moves the stop by one
    shortest = limit_minutes + rng.randint(1, 3)
    expected_minutes = exit_duration_minutes(60 * shortest)
    iterations = expected_minutes - START_UP_S // 60

    def run(minutes: int) -> RunTime:
        limit = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
        return RunTime(limit, 60 * minutes, iterations, 60.0, "step_time_s", exit_duration_minutes(60 * minutes))

    assert run(limit_minutes).expected_s == 60 * expected_minutes
    with pytest.raises(RecipeError) as refused:
        run(limit_minutes).check()
    suggested = re.search(r"give it a time limit of at least (\d\d:\d\d:00)", str(refused.value)).group(1)
    assert time_limit_seconds(suggested) == 60 * shortest
    run(shortest).check()
    with pytest.raises(RecipeError):
        run(shortest - 1).check()


def test_a_suggested_time_limit_passes_both_stop_checks():
    """Seven iterations of 400 s under one hour: the stop check suggested 01:02:00, which covered the run but left
    less than one iteration after its stop, so the margin check then refused it and suggested 02:01:00 (and the time
    limit check of a longer run suggested a limit covering the run but not its stop)."""
    import re

    rng = random.Random(random.random())
    for _ in range(10):
        step = rng.uniform(301, 700)
        run = dataclasses.replace(_saving_run(3600, step), iterations=rng.randint(5, 9))
        with pytest.raises(RecipeError) as refused:
            run.check()
        suggested = time_limit_seconds(re.search(r"at least (\d\d:\d\d:00)", str(refused.value)).group(1))
        dataclasses.replace(_saving_run(suggested, step), iterations=run.iterations).check()


def test_a_run_longer_than_its_limit_and_its_own_stop_is_told_to_raise_both():
    """A recipe's own stop earlier than the expected run time, under a limit shorter than that run: the refusal gave
    only a longer limit, which the stop then refused (it stops before the last iteration); it now names the stop to
    raise as well, and the two together pass."""
    from megatron.oellm.recipes.timing import RunTime

    iterations, step_s = random.randint(20, 40), random.uniform(300, 600)
    expected_minutes = math.ceil((iterations * step_s + 600) / 60)
    limit_minutes = random.randint(10, expected_minutes - 1)
    stop = random.randint(1, limit_minutes // 2 - 1)  # the recipe's own: below the stop oellm recipe derives
    limit = f"{limit_minutes // 60:02d}:{limit_minutes % 60:02d}:00"
    run = RunTime(limit, 60 * limit_minutes, iterations, step_s, "step_time_s", stop, saves=random.choice([True, False]))
    with pytest.raises(RecipeError) as refused:
        run.check()
    message = str(refused.value)
    assert f"set exit-duration-in-mins to {expected_minutes} in the recipe (the expected run time" in message, message
    hours, minutes = message.split("time limit of at least ", 1)[1][:5].split(":")
    suggested = f"{hours}:{minutes}:00"
    dataclasses.replace(run, limit=suggested, limit_s=time_limit_seconds(suggested),
                        stop_minutes=expected_minutes).check()
