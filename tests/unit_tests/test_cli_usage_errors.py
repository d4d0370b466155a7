"""``oellm``'s usage errors: an unknown subcommand gets a suggestion, and an unknown argument of a subcommand is
that subcommand's error (its prog name, exit 2)."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cli import build_parser, main


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
