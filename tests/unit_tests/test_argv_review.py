"""Review of the argv rendering and the ``oellm`` command line: values argparse would misread, subcommand errors."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cli import build_parser, main
from megatron.oellm.megatron_args import flags_to_argv, parse_megatron_argv


@pytest.mark.parametrize("value", [float("-inf"), -random.uniform(1, 1e6) * 10.0 ** -random.randint(5, 300),
                                   -random.uniform(1, 9) * 10.0 ** random.randint(16, 300)])
def test_negative_floats_argparse_cannot_read_positionally_are_values(value: float) -> None:
    """``-inf`` was rendered as ``--weight-decay -inf``, which argparse takes for an unknown option (exit 2)."""
    assert parse_megatron_argv(flags_to_argv({"weight-decay": value})).weight_decay == value


def test_a_string_value_starting_with_a_dash_is_a_value() -> None:
    """A string value such as a run name ``-abc`` was rendered as a separate token that argparse reads as an option."""
    name = f"-run{random.randint(0, 10**6)}"
    assert parse_megatron_argv(flags_to_argv({"wandb-exp-name": name})).wandb_exp_name == name


def test_a_list_element_argparse_would_read_as_an_option_is_refused() -> None:
    """A list can only be written as separate tokens: one argparse would take for an option is refused by name."""
    with pytest.raises(ValueError, match="--moe-aux-loss-coeff"):
        flags_to_argv({"moe-aux-loss-coeff": [random.random(), float("-inf")]})
    coeffs = [-random.random() * 1e-9, random.random()]
    assert parse_megatron_argv(flags_to_argv({"moe-aux-loss-coeff": coeffs})).moe_aux_loss_coeff == coeffs


def _error_lines(capsys: pytest.CaptureFixture, argv: list[str]) -> list[str]:
    """The ``error:`` lines ``oellm ARGV`` prints; asserts it exits 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    return [line for line in capsys.readouterr().err.splitlines() if "error:" in line]


def test_an_unknown_subcommand_gets_a_suggestion(capsys: pytest.CaptureFixture) -> None:
    """``oellm modles`` listed the choices but did not say which one was probably meant."""
    name = random.choice(sorted(build_parser()._subparsers._group_actions[0].choices))
    typo = name[0] + name[2] + name[1] + name[3:]  # two letters swapped
    [line] = _error_lines(capsys, [typo])
    assert line.startswith("oellm: error: ") and f"(did you mean '{name}'?)" in line, line


@pytest.mark.parametrize("argv", [["models", "--bogus"], ["models", "--json", "extra"], ["doctor", "--nope"]])
def test_an_unknown_argument_of_a_subcommand_is_that_subcommands_error(argv: list[str],
                                                                       capsys: pytest.CaptureFixture) -> None:
    """``oellm models --bogus`` printed the top-level usage and ``oellm: error:``, not the subcommand's."""
    [line] = _error_lines(capsys, argv)
    assert line == f"oellm {argv[0]}: error: unrecognized arguments: {' '.join(argv[1:])}".replace(
        "--json ", ""), line
