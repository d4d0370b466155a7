"""A refusal is one ``error:`` line on stderr, also where its message quotes a library's over several lines: the
training entry and ``oellm COMMAND`` printed the message as it was, so transformers' refusal of a tokenizer folder
without tokenizer files (wrapped by megatron-core, four lines) broke the rule. Each line break, with the white space
around it, is now one space, every word kept; ``sbatch``'s stderr lines, each a message, are joined by ``; ``."""

from __future__ import annotations

import os
import random
import string
from pathlib import Path

import pytest

from megatron.oellm import commands
from megatron.oellm.recipes.config import RecipeError
from megatron.oellm.recipes.submission import submit
from megatron.oellm.training import entry

LINE_BREAKS = ("\n", "\r\n", "\r", "\n\n", " \n  ", "\u2028", "\f")
"""Line breaks a library's message may hold, with blank lines and indentation around them (Python's
``str.splitlines`` ends a line at each; a terminal at the carriage return too)."""


def _word(punctuation: str = "") -> str:
    return "".join(random.choices(string.ascii_letters + string.digits + punctuation, k=random.randint(1, 9)))


def _multi_line_message(path: str) -> str:
    """Random words over several lines, each break one of :data:`LINE_BREAKS`, with ``path`` inside a line."""
    lines = [" ".join(_word("'`:(),.") for _ in range(random.randint(1, 6))) for _ in range(random.randint(3, 7))]
    lines[random.randrange(len(lines))] += f" {path!r}"
    return "".join(line + random.choice(LINE_BREAKS) for line in lines[:-1]) + lines[-1]


def _refusals() -> dict[str, tuple]:
    """Each refusal function -> (how to call it with a message, the prefix of its line)."""
    command = random.choice(["recipe", "plan", "convert hf-to-mcore"])
    return {"entry": (lambda message: entry.refuse(ValueError(message)), f"{entry.PROG}: error: "),
            "oellm": (lambda message: commands.refuse(command, message), f"oellm {command}: error: ")}


@pytest.mark.parametrize("refusal", ["entry", "oellm"])
def test_a_multi_line_message_is_one_stderr_line_with_all_its_words(refusal: str, capsys) -> None:
    refuse, prefix = _refusals()[refusal]
    path = f"/scratch/{_word()}  {_word()}"  # two spaces in a row: spacing within a line is kept
    message = _multi_line_message(path)
    assert refuse(message) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(prefix)
    assert line[len(prefix):].split() == message.split()
    assert repr(path) in line


def test_megatron_cores_refusal_of_a_folder_without_tokenizer_files_is_one_entry_line(monkeypatch, capsys,
                                                                                      tmp_path: Path) -> None:
    """The case that broke the rule: megatron-core's Hugging Face tokenizer on a ``--tokenizer-model`` folder that
    holds no tokenizer files, whose ValueError quotes transformers' message over several lines."""
    from megatron.core.tokenizers.text.libraries.huggingface_tokenizer import HuggingFaceTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = tmp_path / f"tokenizer-{random.randrange(10**6)}"
    folder.mkdir()
    (folder / "README.md").write_text(" ".join(_word() for _ in range(random.randint(1, 20))))
    with pytest.raises(ValueError) as refused:
        HuggingFaceTokenizer(str(folder))
    message = str(refused.value)
    assert "\n" in message and str(folder) in message
    assert entry.refuse(refused.value) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.split()[2:] == message.split()


def test_sbatchs_stderr_lines_are_joined_as_messages(monkeypatch, tmp_path: Path) -> None:
    """``sbatch``'s refusal of a job script names each problem on a line of its own: the refusal joins them by ``; ``
    (as ``sbatch --test-only``'s), not into one run-on sentence."""
    errors = [f"sbatch: error: {_word()} {_word()}" for _ in range(random.randint(2, 4))]
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text("#!/bin/bash\n" + "".join(f"echo {error!r} >&2\necho >&2\n" for error in errors) + "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(RecipeError) as refused:
        submit(f"#!/bin/bash\n#SBATCH --nodes={random.randint(1, 64)}\n", tmp_path)
    assert str(refused.value).endswith(": " + "; ".join(errors) + "; job.sbatch is removed, as nothing was queued "
                                       "(--dry-run prints the script)")


def test_blank_lines_and_indentation_become_no_more_than_one_space():
    """Fourteenth mutation audit: a blank line between two lines, or an indented continuation line, leaves one space
    between their words (not two, nor the indentation)."""
    from megatron.oellm.error_lines import one_line

    first, second = _word(), _word()
    indent = " " * random.randint(1, 8)
    assert one_line(f"{first}\n{random.choice(['', ' ', chr(9)])}\n{second}") == f"{first} {second}"
    assert one_line(f"{first}\n{indent}{second}") == f"{first} {second}"
