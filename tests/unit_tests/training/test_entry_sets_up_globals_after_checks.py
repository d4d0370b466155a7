"""On a GPU node the entry runs megatron's ``parse_and_validate_args`` without the ``set_global_variables`` it ends
with, builds only the tokenizer there (its padded vocabulary is what the checks read), and sets up the rest (the
TensorBoard writer, ``wandb.init`` on the last rank, timers, signal handlers) once every check has passed: a launch
refused by a check after validation opened a W&B run and a TensorBoard event file first."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from megatron.oellm.training.args import parse_oellm_argv
from tests.unit_tests.training.entry_helpers import (
    TINY_MOE_RUN,
    Reached,
    entry_up_to_throughput_hook,
    installed_stand_in,
    with_validated_fields,
)


def recorded_setup(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What megatron's set-up steps were called, in order: the tokenizer build, and ``set_global_variables`` with its
    ``build_tokenizer`` argument. Validation is a stand-in that, like megatron's ``parse_and_validate_args``, ends by
    calling ``megatron.training.arguments.set_global_variables``."""
    import megatron.training.arguments as arguments
    import megatron.training.global_vars as global_vars

    calls: list[str] = []

    def set_global_variables(_args, build_tokenizer: bool = True) -> None:
        calls.append(f"set_global_variables(build_tokenizer={build_tokenizer})")

    def parse_and_validate_args(**_kwargs):
        args = with_validated_fields(parse_oellm_argv(sys.argv[1:]))
        arguments.set_global_variables(args)  # as megatron's own function ends
        return args

    monkeypatch.setattr(arguments, "parse_and_validate_args", parse_and_validate_args)
    monkeypatch.setattr(arguments, "set_global_variables", set_global_variables)
    monkeypatch.setattr(global_vars, "set_global_variables", set_global_variables)
    monkeypatch.setattr(global_vars, "rebuild_tokenizer", lambda _args: calls.append("tokenizer"))
    return calls


def test_a_launch_refused_after_validation_sets_up_nothing_but_the_tokenizer(monkeypatch, capsys, tmp_path: Path):
    entry = entry_up_to_throughput_hook(monkeypatch)
    calls = recorded_setup(monkeypatch)
    installed_stand_in(monkeypatch, "wandb")  # the job image's: the entry checks it is there
    missing = tmp_path / f"corpus-{random.randrange(10**6)}" / "text_document"
    argv = [arg for arg in TINY_MOE_RUN if arg != "--mock-data"]
    assert entry.main([*argv, "--data-path", str(missing), "--wandb-project", "p", "--wandb-save-dir",
                       str(tmp_path / "wandb"), "--tensorboard-dir",
                       str(tmp_path / "tb")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and str(missing) in err[0], err
    assert calls == ["tokenizer"]


def test_a_checked_launch_sets_up_megatrons_globals_once_without_a_second_tokenizer(monkeypatch):
    entry = entry_up_to_throughput_hook(monkeypatch)
    calls = recorded_setup(monkeypatch)
    with pytest.raises(Reached):  # the throughput hook, after the set-up
        entry.main(TINY_MOE_RUN)
    assert calls == ["tokenizer", "set_global_variables(build_tokenizer=False)"]


def test_a_refusal_of_megatrons_set_up_is_one_error_line(monkeypatch, capsys):
    """An ``assert`` of megatron's set-up that no check of the entry foresaw ends the launch in one line (exit
    status 2), not in a traceback on every rank."""
    import megatron.training.global_vars as global_vars

    entry = entry_up_to_throughput_hook(monkeypatch)
    recorded_setup(monkeypatch)
    reason = f"threshold {random.randrange(1, 10**6)} is not what the set-up takes"

    def refusing_set_up(_args, build_tokenizer: bool = True) -> None:
        raise AssertionError(reason)

    monkeypatch.setattr(global_vars, "set_global_variables", refusing_set_up)
    assert entry.main(TINY_MOE_RUN) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"megatron.oellm.training.entry: error: megatron's set-up of the run refuses its arguments: {reason}"]


def test_an_empty_wandb_experiment_name_is_refused_before_megatron_starts(monkeypatch, capsys, tmp_path: Path):
    entry = entry_up_to_throughput_hook(monkeypatch)
    calls = recorded_setup(monkeypatch)
    installed_stand_in(monkeypatch, "wandb")
    project = f"p{random.randrange(10**6)}"
    assert entry.main([*TINY_MOE_RUN, "--wandb-project", project, "--wandb-save-dir", str(tmp_path),
                       "--wandb-exp-name", ""]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"--wandb-project {project} with an empty --wandb-exp-name" in err[0], err
    assert calls == []


def test_megatrons_own_steps_leave_what_pretrain_reads(monkeypatch):
    """The two halves run with megatron-core's own functions (its validation answered as a cluster GPU node would):
    validation and the tokenizer first, with no global set, then the set-up, after which the globals ``pretrain``
    reads are there: the arguments, the tokenizer built once, the micro-batch calculator and the timers."""
    from megatron.core.num_microbatches_calculator import get_num_microbatches
    from megatron.training import global_vars

    from megatron.oellm.recipes.megatron_validation import _as_cluster_rank0
    from megatron.oellm.training import entry
    from megatron.oellm.training.args import add_oellm_arguments

    micro, steps = random.choice([1, 2]), random.randint(1, 4)
    run = [*TINY_MOE_RUN, "--micro-batch-size", str(micro), "--global-batch-size", str(micro * steps)]
    global_vars.unset_global_variables()
    try:
        with _as_cluster_rank0(1, {}):
            stated, _merged = entry.stated_argv(run)
            monkeypatch.setattr(sys, "argv", ["entry", *entry.expanded_argv(stated)])
            args = entry.parse_validate_and_tokenize(extra_args_provider=add_oellm_arguments)
        tokenizer = global_vars.get_tokenizer()
        assert args.padded_vocab_size >= args.vocab_size
        with pytest.raises(AssertionError, match="args is not initialized"):
            global_vars.get_args()
        entry.set_up_training_globals(args)
        assert global_vars.get_args() is args and global_vars.get_tokenizer() is tokenizer
        assert get_num_microbatches() == steps and global_vars.get_timers() is not None
    finally:
        global_vars.unset_global_variables()
