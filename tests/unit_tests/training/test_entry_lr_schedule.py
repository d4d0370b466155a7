"""Command lines whose learning-rate schedule megatron-core refuses only after allocating the model and optimizer on
every rank (``OptimizerParamScheduler``, built in ``setup_model_and_optimizer``) are one ``error:`` line at the
training entry's start, and ``oellm recipe``'s validation refuses them before the job is queued."""

import random
import types

import pytest

from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, one_error_line

BASE = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "128", "--mock-data",
        "--micro-batch-size", "1", "--global-batch-size", "8"]


def entry_up_to_throughput(monkeypatch):
    """The entry up to :func:`entry_up_to_pretrain`'s stand-ins, except that the FLOP count answers (the throughput
    hook raises :class:`Reached`), so that the checks after it run."""
    entry = entry_up_to_pretrain(monkeypatch)
    monkeypatch.setattr(entry, "flops_and_peak", lambda *_args: (1e9, None))
    return entry


def megatron_schedule(argv: list[str]) -> None:
    """megatron-core 0.19.2's own learning-rate schedule of ``argv`` (its ``get_optimizer_param_scheduler`` on an
    optimizer without parameter groups): raises what megatron raises after allocating the model and optimizer."""
    from unittest import mock

    from megatron.training import training

    from megatron.oellm.training.args import parse_oellm_argv

    args = parse_oellm_argv(argv)
    if args.weight_decay_incr_style == "constant":  # what validate_args fills in
        args.start_weight_decay = args.end_weight_decay = args.weight_decay
    with mock.patch.object(training, "get_args", lambda: args), mock.patch.object(training, "print_rank_0"):
        training.get_optimizer_param_scheduler(types.SimpleNamespace(param_groups=[]))


def _bad_schedules() -> list[tuple[list[str], str]]:
    """(flags, what the refusal names) of schedules megatron refuses, with fresh random numbers."""
    iters, samples = random.randint(5, 500), random.randint(50, 5000)
    longer_decay = 2 * iters + random.randint(0, iters)
    lr = random.uniform(1e-5, 1e-3)
    return [
        (["--lr", str(lr)], "--train-iters N or --train-samples N"),
        (["--train-iters", str(iters)], "peak learning rate as --lr:"),
        (["--train-iters", str(iters), "--lr", str(lr), "--lr-warmup-iters", str(iters + random.randint(0, 50))],
         "--lr-warmup-iters"),
        (["--train-iters", str(iters), "--lr", str(lr), "--lr-decay-iters", str(iters // 2),
          "--lr-warmup-iters", str(iters // 2)], f"--lr-decay-iters {iters // 2}"),
        (["--train-iters", str(iters), "--lr", str(lr), "--lr-warmup-fraction", str(random.uniform(1, 2))],
         "--lr-warmup-fraction"),
        (["--train-iters", str(iters), "--lr", str(lr), "--lr-decay-iters", "0"], "--lr-decay-iters 0"),
        # megatron takes the warm-up fraction of the decay, not of the run: a fraction above 1 of a decay 2-3x the run
        # is a warm-up longer than the decay, though shorter than the run
        (["--train-iters", str(iters), "--lr", str(lr), "--lr-decay-iters", str(longer_decay),
          "--lr-warmup-fraction", str(random.uniform(1.05, 1.9))], f"--lr-decay-iters {longer_decay}"),
        (["--train-samples", str(samples), "--lr", str(lr), "--lr-warmup-samples", str(samples)],
         f"--train-samples {samples}"),
        (["--train-iters", str(iters), "--lr", str(lr), "--lr-decay-style", "WSD"], "--lr-wsd-decay-iters"),
        (["--train-samples", str(samples), "--lr", str(lr), "--lr-decay-style", "WSD"], "--lr-wsd-decay-samples"),
        (["--train-iters", str(iters), "--lr", str(lr), "--lr-warmup-init", str(lr * random.uniform(1.5, 10))],
         "--lr-warmup-init"),
        (["--train-iters", str(iters), "--lr", str(lr), "--weight-decay-incr-style", "linear",
          "--start-weight-decay", "0.1", "--end-weight-decay", str(random.uniform(0, 0.09))], "--start-weight-decay"),
        # megatron's parser takes a negative number only as --flag=-x; OptimizerParamScheduler asserts min_lr >= 0,
        # start_wd >= 0 and not both override and use-checkpoint, which the check let through
        (["--train-iters", str(iters), "--lr", str(lr), f"--min-lr=-{lr * random.uniform(0.01, 0.5)}"], "--min-lr -"),
        (["--train-iters", str(iters), "--lr", str(lr), "--weight-decay-incr-style", "linear",
          f"--start-weight-decay=-{random.uniform(0.01, 0.1)}", "--end-weight-decay", "0.1"], "--start-weight-decay -"),
        (["--train-iters", str(iters), "--lr", str(lr), "--override-opt_param-scheduler",
          "--use-checkpoint-opt_param-scheduler"], "--override-opt_param-scheduler and --use-checkpoint"),
        # under --train-samples megatron decays over --lr-decay-samples when given, not over the run: a warm-up
        # shorter than the run but not than that decay
        (["--train-samples", str(samples), "--lr", str(lr), "--lr-decay-samples", str(samples // 2),
          "--lr-warmup-samples", str(samples // 2 + random.randint(0, samples // 4))],
         f"--lr-decay-samples {samples // 2}"),
    ]


def _good_schedules() -> list[list[str]]:
    """Schedules megatron builds, with fresh random numbers."""
    iters, samples = random.randint(5, 500), random.randint(50, 5000)
    long_run = random.randint(20, 500)
    lr = random.uniform(1e-5, 1e-3)
    return [
        ["--train-iters", str(iters), "--lr", str(lr), "--lr-warmup-iters", str(iters - 1)],
        ["--train-iters", str(iters), "--lr", str(lr), "--lr-warmup-fraction", str(random.uniform(0, 0.99))],
        # a fraction below 1 of a decay a quarter of the run: shorter than the decay, though longer than a quarter run
        ["--train-iters", str(long_run), "--lr", str(lr), "--lr-decay-iters", str(long_run // 4),
         "--lr-warmup-fraction", str(random.uniform(0.5, 0.99))],
        ["--train-samples", str(samples), "--lr", str(lr), "--lr-warmup-samples", str(samples - 1)],
        ["--train-iters", str(iters), "--lr", str(lr), "--lr-warmup-init", str(lr)],
        ["--train-iters", str(iters), "--lr", str(lr), "--lr-decay-style", "WSD", "--lr-wsd-decay-iters",
         str(random.randint(1, iters))],
        ["--train-samples", str(samples), "--lr", str(lr), "--lr-decay-style", "WSD", "--lr-wsd-decay-samples",
         str(random.randint(1, samples))],
        ["--train-iters", str(iters), "--lr", str(lr), "--weight-decay-incr-style", "linear",
         "--start-weight-decay", "0.01", "--end-weight-decay", "0.1"],
        # a weight decay rising from 0: megatron asserts only start >= 0
        ["--train-iters", str(iters), "--lr", str(lr), "--weight-decay-incr-style", "linear",
         "--start-weight-decay", "0", "--end-weight-decay", str(random.uniform(0.01, 0.1))],
        # a warm-up longer than a --train-samples run but shorter than its --lr-decay-samples (2-3x the run)
        ["--train-samples", str(samples), "--lr", str(lr), "--lr-decay-samples", str(2 * samples + 2),
         "--lr-warmup-samples", str(samples + random.randint(1, samples))],
        # megatron-core asserts only against both together: either alone picks where a resumed run's schedule comes from
        ["--train-iters", str(iters), "--lr", str(lr), "--override-opt_param-scheduler"],
        ["--train-samples", str(samples), "--lr", str(lr), "--use-checkpoint-opt_param-scheduler"],
    ]


@pytest.mark.parametrize("case", range(len(_bad_schedules())))
def test_a_schedule_megatron_refuses_after_allocation_is_one_error_line(monkeypatch, capsys, case):
    """Each of these reached ``pretrain``, where megatron stopped (mostly on an assert without a message) after
    building the model and optimizer on every rank."""
    flags, named = _bad_schedules()[case]
    with pytest.raises(Exception):  # noqa: B017 - an assert, a TypeError or a bare Exception
        megatron_schedule([*BASE, *flags])  # megatron's own schedule refuses them
    entry = entry_up_to_throughput(monkeypatch)
    assert entry.main([*BASE, *flags]) == 2
    line = one_error_line(capsys)
    assert named in line and "learning-rate schedule" in line


@pytest.mark.parametrize("case", range(len(_good_schedules())))
def test_a_schedule_megatron_builds_is_let_through(monkeypatch, case):
    flags = _good_schedules()[case]
    megatron_schedule([*BASE, *flags])
    entry = entry_up_to_throughput(monkeypatch)
    with pytest.raises(Reached):
        entry.main([*BASE, *flags])


def test_skip_train_needs_no_schedule(monkeypatch):
    """megatron builds no optimizer (nor schedule) under ``--skip-train``."""
    entry = entry_up_to_throughput(monkeypatch)
    with pytest.raises(Reached):
        entry.main([*BASE, "--skip-train"])


def test_recipe_validation_refuses_a_warm_up_as_long_as_the_run():
    """``oellm recipe --dry-run`` / ``--submit`` run the same schedule check, so such a row is refused before it is
    queued rather than when its job starts."""
    from pathlib import Path

    from megatron.oellm.recipes.megatron_validation import megatron_refusal
    from megatron.oellm.recipes.resolve import resolve_row
    from megatron.oellm.recipes.toml_loading import load_recipe

    recipe = load_recipe(Path(__file__).parents[3] / "examples/oellm/qwen3_30b_a3b_mn5.toml")
    resolved = resolve_row(recipe, recipe.rows[0])
    iters = int(resolved.argv[resolved.argv.index("--train-iters") + 1])
    assert megatron_refusal(resolved.argv, resolved.world_size, recipe.cluster.env) is None
    refusal = megatron_refusal([*resolved.argv, "--lr-warmup-iters", str(iters + random.randint(0, 50))],
                               resolved.world_size, recipe.cluster.env)
    assert refusal is not None and "is not shorter than the decay" in refusal


def test_recipe_validation_refuses_a_negative_constant_weight_decay():
    """Under the default ``--weight-decay-incr-style constant`` megatron's ``validate_args`` starts the weight decay
    at ``--weight-decay``, which ``OptimizerParamScheduler`` asserts is >= 0 after allocating the model: the refusal
    names the flag the user gave. (The entry tests above parse without ``validate_args``, which fills it in.)"""
    from pathlib import Path

    from megatron.oellm.recipes.megatron_validation import megatron_refusal
    from megatron.oellm.recipes.resolve import resolve_row
    from megatron.oellm.recipes.toml_loading import load_recipe

    recipe = load_recipe(Path(__file__).parents[3] / "examples/oellm/qwen3_30b_a3b_mn5.toml")
    resolved = resolve_row(recipe, recipe.rows[0])
    decay = random.uniform(0.01, 0.1)
    with pytest.raises(AssertionError):
        megatron_schedule([*BASE, "--train-iters", "10", "--lr", "1e-4", f"--weight-decay=-{decay}"])
    refusal = megatron_refusal([*resolved.argv, f"--weight-decay=-{decay}"], resolved.world_size, recipe.cluster.env)
    assert refusal is not None and f"--weight-decay -{decay} is negative" in refusal


def test_recipe_validation_lets_a_zero_weight_decay_through():
    """``--weight-decay 0`` (no weight decay) under the default constant style: ``validate_args`` starts and ends the
    decay at 0, which megatron-core's ``OptimizerParamScheduler`` accepts (it asserts start >= 0)."""
    from pathlib import Path

    from megatron.oellm.recipes.megatron_validation import megatron_refusal
    from megatron.oellm.recipes.resolve import resolve_row
    from megatron.oellm.recipes.toml_loading import load_recipe

    megatron_schedule([*BASE, "--train-iters", str(random.randint(5, 500)), "--lr", "1e-4", "--weight-decay", "0"])
    recipe = load_recipe(Path(__file__).parents[3] / "examples/oellm/qwen3_30b_a3b_mn5.toml")
    resolved = resolve_row(recipe, recipe.rows[0])
    assert megatron_refusal([*resolved.argv, "--weight-decay", "0"], resolved.world_size, recipe.cluster.env) is None
