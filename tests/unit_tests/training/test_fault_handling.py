"""Fault-handling flags megatron-core 0.19.2 accepts and does not act on, and flags it ignores.

Each premise is shown on megatron's own code on the CPU: the SIGTERM handler its ``set_global_variables`` leaves
installed, its rerun state machine injecting an error or not, the rerun mode its parser offers and its state machine
lacks, and the one place its sources name the data loader's signal flag. Then the entry refuses the combination in one line, ``oellm recipe``'s validation refuses it too, and the
entry warns about flags megatron ignores.
"""

from __future__ import annotations

import random
import signal
from pathlib import Path
from unittest import mock

import pytest
import torch

from megatron.oellm.recipes.megatron_validation import megatron_refusal
from megatron.oellm.training.args import explicit_destinations, merge_card_flags
from megatron.oellm.training.fault_handling import (
    check_error_injection,
    check_exit_signal_handlers,
    check_rerun_mode,
)
from megatron.oellm.training.ignored_flags import DYNAMIC_LOSS_SCALER_FLAGS, ignored_flag_warnings
from tests.unit_tests.training.entry_helpers import (
    TINY_MOE_RUN,
    Reached,
    entry_up_to_pretrain,
    refused_line,
    validated_tiny_moe_run,
)

BOTH_HANDLERS = ["--exit-signal-handler", "--exit-signal-handler-for-training"]


def command(extra: list[str]) -> list[str]:
    return merge_card_flags([*TINY_MOE_RUN, *extra]).argv


@pytest.fixture
def signal_handlers():
    """The process's SIGINT, SIGTERM and SIGUSR1 handlers, put back after the test."""
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    handlers = {sig: signal.getsignal(sig) for sig in signals}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def handler_after_megatron_setup(monkeypatch, args, sig: signal.Signals) -> str:
    """The qualified name of ``sig``'s handler after megatron's ``set_global_variables(args)`` (its globals unset
    before, and put back after the test)."""
    from megatron.core import num_microbatches_calculator
    from megatron.training import global_vars

    for name in ("_GLOBAL_ARGS", "_GLOBAL_TOKENIZER", "_GLOBAL_TENSORBOARD_WRITER", "_GLOBAL_WANDB_WRITER",
                 "_GLOBAL_ONE_LOGGER", "_GLOBAL_ADLR_AUTORESUME", "_GLOBAL_TIMERS", "_GLOBAL_ENERGY_MONITOR",
                 "_GLOBAL_SIGNAL_HANDLER"):
        monkeypatch.setattr(global_vars, name, None)
    monkeypatch.setattr(num_microbatches_calculator, "_GLOBAL_NUM_MICROBATCHES_CALCULATOR", None)
    global_vars.set_global_variables(args, build_tokenizer=False)
    return getattr(signal.getsignal(sig), "__qualname__", str(signal.getsignal(sig)))


SAVING_HANDLER = "DistributedSignalHandler.__enter__"
"""The start of the qualified name of megatron's handler whose received signal makes the loop save and exit."""


def test_premise_the_training_shutdown_handler_replaces_the_checkpoint_saving_one(monkeypatch, signal_handlers):
    assert handler_after_megatron_setup(monkeypatch, validated_tiny_moe_run(["--exit-signal-handler"]), signal.SIGTERM
                                        ).startswith(SAVING_HANDLER)
    assert not handler_after_megatron_setup(monkeypatch, validated_tiny_moe_run(BOTH_HANDLERS), signal.SIGTERM
                                            ).startswith(SAVING_HANDLER)
    other_signal = validated_tiny_moe_run([*BOTH_HANDLERS, "--exit-signal", "SIGUSR1"])
    assert handler_after_megatron_setup(monkeypatch, other_signal, signal.SIGUSR1).startswith(SAVING_HANDLER)


@pytest.mark.parametrize("exit_signal", ["SIGTERM", "SIGINT"])
def test_both_signal_handlers_on_a_signal_the_shutdown_takes_over_are_refused(exit_signal):
    with pytest.raises(ValueError, match=rf"--exit-signal-handler-for-training.*on {exit_signal} the run exits "
                                         "with status 0 without saving"):
        check_exit_signal_handlers(validated_tiny_moe_run([*BOTH_HANDLERS, "--exit-signal", exit_signal]))


@pytest.mark.parametrize("extra", [["--exit-signal-handler"], ["--exit-signal-handler-for-training"],
                                   [*BOTH_HANDLERS, "--exit-signal", "SIGUSR1"]])
def test_one_handler_or_a_signal_the_shutdown_leaves_alone_is_accepted(extra):
    check_exit_signal_handlers(validated_tiny_moe_run(extra))


def test_the_entry_and_recipe_validation_refuse_both_handlers(monkeypatch, capsys):
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*TINY_MOE_RUN, *BOTH_HANDLERS])
    assert "--exit-signal-handler-for-training" in line and "SIGTERM" in line
    refusal = megatron_refusal(command(BOTH_HANDLERS), 8, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    assert refusal is not None and "without saving a checkpoint" in refusal


def injects_into_a_validation(mode: str) -> bool:
    """Whether megatron's rerun state machine in ``mode``, at error-injection rate 1, injects an error into one
    validation of a finite result after the first iteration (CUDA's RNG state, which it saves, answered on the CPU)."""
    from megatron.core.rerun_state_machine import (
        RerunDiagnostic,
        RerunErrorInjector,
        RerunMode,
        RerunStateMachine,
    )

    injector = RerunErrorInjector(error_injection_rate=1, error_injection_type=RerunDiagnostic.TRANSIENT_ERROR)
    machine = RerunStateMachine(mode=RerunMode(mode), error_injector=injector)
    machine.first_iteration_complete = True  # megatron validates nothing in the first iteration
    with mock.patch.object(torch.cuda, "get_rng_state", return_value=torch.zeros(16, dtype=torch.uint8)):
        machine.should_run_forward_backward(None)
        machine.validate_result(result=torch.tensor(random.uniform(0.5, 5.0)), rejection_func=torch.isnan,
                                message="finite loss", tolerance=0.0, fatal=False)
    return injector.injected_error_type is not None and machine.rerun_requested


def test_premise_megatron_injects_errors_only_into_validations_it_makes():
    assert injects_into_a_validation("validate_results")
    assert not injects_into_a_validation("disabled")


def test_error_injection_with_reruns_disabled_is_refused():
    rate = random.randrange(1, 1000)
    with pytest.raises(ValueError, match=rf"--error-injection-rate {rate} with --rerun-mode disabled.*injects "
                                         "nothing"):
        check_error_injection(validated_tiny_moe_run(["--error-injection-rate", str(rate), "--rerun-mode", "disabled"]))


@pytest.mark.parametrize(("extra", "why"), [
    (["--no-check-for-nan-in-loss-and-grad"], ""),
    (["--fp16"], "--fp16 without --loss-scale turned the NaN check off"),
])
def test_error_injection_into_a_run_that_validates_nothing_is_refused(extra, why):
    rate = random.randrange(1, 1000)
    with pytest.raises(ValueError, match=rf"--error-injection-rate {rate}: .*validates none.*injects nothing") as error:
        check_error_injection(validated_tiny_moe_run(["--error-injection-rate", str(rate), *extra]))
    assert why in str(error.value)


@pytest.mark.parametrize("extra", [[], ["--fp16", "--loss-scale", "1024"], ["--fp16", "--check-for-spiky-loss"],
                                   ["--no-check-for-nan-in-loss-and-grad", "--check-for-large-grads"]])
def test_error_injection_into_a_run_that_validates_results_is_accepted(extra):
    check_error_injection(validated_tiny_moe_run(["--error-injection-rate", str(random.randrange(1, 1000)), *extra]))


def test_premise_megatron_parses_a_rerun_mode_its_state_machine_has_no_member_for():
    """The value ``validate_args`` passes on is the one ``initialize_megatron`` hands to ``RerunMode``."""
    from megatron.core.rerun_state_machine import RerunMode

    args = validated_tiny_moe_run(["--rerun-mode", "report_stats"])
    assert args.rerun_mode == "report_stats"
    with pytest.raises(ValueError, match="report_stats"):
        RerunMode(args.rerun_mode)


def test_the_rerun_mode_megatron_cannot_start_is_refused_and_its_modes_pass(monkeypatch, capsys):
    with pytest.raises(ValueError, match=r"--rerun-mode report_stats: .*no rerun mode of that name.*"
                                         "report_determinism_stats"):
        check_rerun_mode(validated_tiny_moe_run(["--rerun-mode", "report_stats"]))
    for mode in ("validate_results", "disabled"):
        check_rerun_mode(validated_tiny_moe_run(["--rerun-mode", mode]))
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, [*TINY_MOE_RUN, "--rerun-mode", "report_stats"])
    assert "--rerun-mode report_stats" in line


def test_premise_megatron_never_reads_the_data_loaders_signal_flag():
    """Its one mention in megatron's installed sources is the configuration field that defines it."""
    import megatron.training

    root = Path(megatron.training.__file__).parents[1]
    mentions = [path.relative_to(root).as_posix() for path in root.rglob("*.py")
                if "exit_signal_handler_for_dataloader" in path.read_text(errors="replace")]
    assert mentions == ["training/config/training_config.py"]


def warnings_for(extra: list[str]) -> list[str]:
    argv = command(extra)
    return ignored_flag_warnings(validated_tiny_moe_run(extra), explicit_destinations(argv))


def test_the_data_loaders_signal_flag_is_named_as_doing_nothing():
    assert warnings_for([]) == []
    (warning,) = warnings_for(["--exit-signal-handler-for-dataloader"])
    assert warning.startswith("--exit-signal-handler-for-dataloader does nothing")


def test_loss_scaler_flags_without_the_dynamic_scaler_are_named_as_ignored():
    given = random.sample(sorted(DYNAMIC_LOSS_SCALER_FLAGS.values()), k=random.randrange(1, 5))
    values = {"--hysteresis": "4", "--initial-loss-scale": "65536", "--min-loss-scale": "2",
              "--loss-scale-window": "500"}
    flags = [word for flag in given for word in (flag, values[flag])]
    (bf16,) = warnings_for(["--bf16", *flags])
    assert "only --fp16 runs scale the loss" in bf16 and all(flag in bf16 for flag in given)
    (constant,) = warnings_for(["--fp16", "--loss-scale", "1024", *flags])
    assert "--loss-scale 1024 sets a constant scale" in constant
    assert warnings_for(["--fp16", *flags]) == []  # the dynamic scaler reads them


def test_the_entry_prints_the_warnings_on_rank_zero_and_goes_on(monkeypatch, capsys):
    entry = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        entry.main([*TINY_MOE_RUN, "--bf16", "--hysteresis", "3", "--exit-signal-handler-for-dataloader"])
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if line.startswith("megatron.oellm.training.entry: warning: ")]
    assert len(warnings) == 2 and "--hysteresis" in warnings[1] and "for-dataloader" in warnings[0]
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(Reached):
        entry.main([*TINY_MOE_RUN, "--bf16", "--hysteresis", "3"])
    assert "warning" not in capsys.readouterr().err


def test_a_token_drop_policy_without_a_capacity_is_named_as_ignored():
    """megatron's router reads the drop policy only when ``--moe-expert-capacity-factor`` is set."""
    policy = random.choice(["probs", "position"])
    (warning,) = warnings_for(["--moe-token-drop-policy", policy])
    assert warning.startswith(f"--moe-token-drop-policy {policy} does nothing without --moe-expert-capacity-factor")
    assert warnings_for(["--moe-token-drop-policy", policy, "--moe-expert-capacity-factor", "1.5"]) == []


def test_recompute_flags_without_a_granularity_are_named_as_ignored():
    """megatron-core's config checks ``--recompute-method``, ``--recompute-num-layers`` and ``--recompute-modules``
    only under a ``--recompute-granularity``, and without one nothing is recomputed: the run that meant to save
    memory found out by running out of it. ``--recompute-modules`` under ``full`` is selective recompute's list."""
    given = random.sample([["--recompute-method", "uniform"], ["--recompute-num-layers", "1"],
                           ["--recompute-modules", "moe_act"]], k=random.randint(1, 3))
    (warning,) = warnings_for([word for flag in given for word in flag])
    names = ", ".join(flag for flag, _value in sorted(given, key=lambda f: ["--recompute-method",
                                                                           "--recompute-num-layers",
                                                                           "--recompute-modules"].index(f[0])))
    assert warning.startswith(f"{names} do{'es' if len(given) == 1 else ''} nothing without --recompute-granularity "
                              "(full or selective): this run recomputes no activations"), warning
    full = ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    assert warnings_for(full) == []
    (modules,) = warnings_for([*full, "--recompute-modules", "moe_act"])
    assert modules.startswith("--recompute-modules does nothing under --recompute-granularity full")
    assert warnings_for(["--recompute-granularity", "selective", "--recompute-modules", "moe_act"]) == []
