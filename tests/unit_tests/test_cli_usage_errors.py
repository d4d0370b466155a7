"""``oellm``'s usage errors: an unknown subcommand gets a suggestion, and an unknown argument of a subcommand is
that subcommand's error (its prog name and usage, exit 2), of the deepest one given where subcommands nest."""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator

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


def _subcommand_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
                      ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(names, parser) of every subcommand at any depth below ``parser``: ``("convert", "hf-to-mcore")``..."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield (*path, name), child
                yield from _subcommand_paths(child, (*path, name))


def _required_arguments(parser: argparse.ArgumentParser) -> list[str] | None:
    """Arguments that satisfy ``parser``'s required options (``--model 1``...), or None where it takes a subcommand
    (which must then be given)."""
    argv = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return None
        if action.required and action.option_strings:
            argv += [action.option_strings[0], str(next(iter(action.choices))) if action.choices else "1"]
    return argv


_NESTED = [path for path, child in _subcommand_paths(build_parser())
           if len(path) > 1 and _required_arguments(child) is not None]
"""Every subcommand below another one (``convert hf-to-mcore``, ``convert mcore-to-hf``) that takes no subcommand."""


@pytest.mark.parametrize("path", _NESTED, ids=" ".join)
def test_an_unknown_argument_of_a_nested_subcommand_is_the_deepest_ones_error(path: tuple[str, ...],
                                                                              capsys: pytest.CaptureFixture) -> None:
    """``oellm convert hf-to-mcore ... --dtype fp16`` printed ``usage: oellm convert [-h] DIRECTION ...`` and
    ``oellm convert: error:``, the usage of the direction's parent."""
    parser = dict(_subcommand_paths(build_parser()))[path]
    unknown = random.choice([["--dtype", "fp16"], [f"--bogus-{random.randrange(10**6)}"], ["extra"]])
    with pytest.raises(SystemExit) as exit_info:
        main([*path, *_required_arguments(parser), *unknown])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: oellm {' '.join(path)} [-h]"), err
    assert err.splitlines()[-1] == f"oellm {' '.join(path)}: error: unrecognized arguments: {' '.join(unknown)}", err


def test_nested_subcommands_are_tested() -> None:
    """The parametrization above finds convert's two directions (a walk of the parser tree that finds none passes
    vacuously)."""
    assert {("convert", "hf-to-mcore"), ("convert", "mcore-to-hf")} <= set(_NESTED)
