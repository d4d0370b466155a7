"""``oellm COMMAND`` whose module does not import ends with ONE ``oellm COMMAND: error:`` line, whatever the error's
message: numpy's ImportError runs to a dozen lines (its cause last), and the line printed them all. Now it holds the
message's last non-empty line, and the module that failed where the error names it (``ImportError.name``)."""

from __future__ import annotations

import os
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest

from megatron.oellm.cli import CommandLoadError

ROOT = Path(__file__).resolve().parents[3]


def _word() -> str:
    return "".join(random.choices(string.ascii_lowercase, k=10))


def _numpy_style_message(cause: str) -> str:
    """A multi-line ImportError message with blank lines, advice, and its cause on the last line."""
    advice = "\n".join(f"{_word()} {_word()} {_word()}." for _ in range(random.randint(3, 8)))
    return f"\n\nIMPORTANT: PLEASE READ THIS FOR ADVICE\n\n{advice}\n\nOriginal error was: {cause}\n\n"


@pytest.mark.parametrize("name", [None, "packaging.version"])
def test_the_message_is_the_last_line_and_the_module(name: str | None) -> None:
    cause = f"No module named '{_word()}'"
    message = str(CommandLoadError("doctor", ImportError(_numpy_style_message(cause), name=name)))
    assert "\n" not in message and "IMPORTANT" not in message
    assert message.endswith(f"ImportError: Original error was: {cause}")
    assert (f"importing {name} raised" in message) == (name is not None)


def test_another_error_keeps_its_type_and_message() -> None:
    text = _word()
    assert str(CommandLoadError("plan", AttributeError(text))) == f"AttributeError: {text}"


def test_oellm_doctor_prints_one_line_for_a_multi_line_import_error(tmp_path: Path) -> None:
    """A ``packaging.version`` that raises numpy's kind of ImportError, first on the path (doctor imports it)."""
    cause = f"libfake{random.randrange(10**6)}.so: cannot open shared object file"
    (tmp_path / "packaging").mkdir()
    (tmp_path / "packaging" / "__init__.py").write_text("")
    (tmp_path / "packaging" / "version.py").write_text(
        f"raise ImportError({_numpy_style_message(cause)!r}, name='packaging.version')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "megatron.oellm", "doctor"], capture_output=True, text=True, env=env,
                          timeout=600, check=False, cwd=ROOT)
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("oellm doctor: error: cannot load this command: importing packaging.version raised "
                           f"ImportError: Original error was: {cause}; reinstall"), line
