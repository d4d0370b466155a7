"""The path flags of ``oellm convert``: an empty value (an unset variable in an sbatch script) is a usage error
naming the flag, and a leading ``~`` is the home directory even where no shell expanded it (``--out=~/x``): they used
to read or write the current directory, or create a folder literally named ``~``."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest

from megatron.oellm.cli import build_parser, main

_REQUIRED = {"hf-to-mcore": ["--hf", "in", "--out", "out"], "mcore-to-hf": ["--mcore", "in", "--out", "out"]}
_FLAGS = [("hf-to-mcore", "--hf"), ("hf-to-mcore", "--out"), ("mcore-to-hf", "--mcore"), ("mcore-to-hf", "--out"),
          ("mcore-to-hf", "--hf-config")]


def _argv(direction: str, flag: str, value: str) -> list[str]:
    """A command line of ``direction`` with ``flag`` given ``value`` as ``--flag=value`` (the form no shell expands)."""
    required = _REQUIRED[direction]
    others = [item for pair in zip(required[::2], required[1::2], strict=True) if pair[0] != flag for item in pair]
    return ["convert", direction, "--model", "qwen3-30b-a3b-tiny", *others, f"{flag}={value}"]


@pytest.mark.parametrize("value", ["", " "])
@pytest.mark.parametrize(("direction", "flag"), _FLAGS)
def test_an_empty_path_is_refused_naming_the_flag(direction: str, flag: str, value: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(_argv(direction, flag, value))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"oellm convert {direction}: error: argument {flag}: empty path (an unset shell variable?); give a directory")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("direction", "flag"), _FLAGS)
def test_a_leading_tilde_is_the_home_directory(direction: str, flag: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    name = "".join(random.choices(string.ascii_lowercase, k=8))
    args = build_parser().parse_args(_argv(direction, flag, f"~/{name}"))
    assert getattr(args, flag.lstrip("-").replace("-", "_")) == tmp_path / "home" / name
