"""An ``oellm`` command whose output cannot be written (``oellm plan ... --json > /dev/full``: no space left on the
disk) ends with one ``oellm COMMAND: error: cannot write the output to stdout`` line on stderr and status 1; only a
``BrokenPipeError`` was caught, so it ended in an ``OSError`` traceback (when printing, or when the interpreter
flushed stdout at exit). An ``OSError`` of another file still reaches the caller. A closed stdout (``>&-``) is one
such output."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from megatron.oellm.cli import SIGPIPE_EXIT_STATUS, main
from megatron.oellm.commands import models

REPO = Path(__file__).resolve().parents[3]


def oellm_environment(buffered: bool) -> dict[str, str]:
    """This process's environment with the checkout first on the path; ``PYTHONUNBUFFERED`` set (every write reaches
    the descriptor at once, failing there) or removed (a short output fails only when flushed, as for most users)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTHONUNBUFFERED", None)
    return env if buffered else {**env, "PYTHONUNBUFFERED": "1"}


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("command", [["plan", "qwen3-30b-a3b", "--nodes", "1", "--json"], ["models"],
                                     ["doctor", "--json"], ["--help"]])
def test_output_to_a_full_disk_is_one_error_line(command: list[str], buffered: bool) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "megatron.oellm", *command], stdout=full, stderr=subprocess.PIPE,
                              text=True, env=oellm_environment(buffered), cwd=REPO, timeout=300, check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    named = "oellm" if command[0].startswith("-") else f"oellm {command[0]}"
    assert done.stderr.splitlines()[-1] == (f"{named}: error: cannot write the output to stdout: "
                                            "No space left on device"), done.stderr


@pytest.mark.parametrize(("command", "status", "last_line"), [
    (["models"], 1, "oellm models: error: cannot write the output to stdout: stdout is closed"),
    (["--help"], 1, "oellm: error: cannot write the output to stdout: stdout is closed"),
    (["plan"], 2, "oellm plan: error: the following arguments are required: model, --nodes")])
def test_a_closed_stdout_is_one_error_line(command: list[str], status: int, last_line: str) -> None:
    """Started with stdout closed (``oellm models >&-``), Python makes ``sys.stdout`` None: the stdout wrapper's
    write or flush of it failed with an ``AttributeError`` traceback. A usage error keeps argparse's line and status
    2."""
    done = subprocess.run([sys.executable, "-m", "megatron.oellm", *command], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=oellm_environment(buffered=True), cwd=REPO,
                          timeout=300, check=False, preexec_fn=lambda: os.close(1))
    assert done.returncode == status and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == last_line, done.stderr


class FullStdout(io.StringIO):
    """A stdout whose every write fails as a full disk does."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_stdout_write_error_is_reported_and_another_files_is_raised(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", full := FullStdout())
        assert main(["models"]) == 1
        assert sys.stdout is full  # put back as it was
    assert capsys.readouterr().err == ("oellm models: error: cannot write the output to stdout: "
                                       f"{os.strerror(errno.ENOSPC)}\n")

    def fails_on_its_own_file(args: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "checkpoint.pt")

    monkeypatch.setattr(models, "run", fails_on_its_own_file)
    with pytest.raises(OSError, match="checkpoint.pt"):
        main(["models"])


@pytest.mark.parametrize(("argv", "named"), [(["--help"], "oellm"), (["--version"], "oellm"),
                                             (["models", "--help"], "oellm models")])
def test_help_to_a_full_disk_is_one_error_line(argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    """argparse ignores an ``OSError`` writing ``--help`` or ``--version`` and exits 0: the text was lost silently."""
    monkeypatch.setattr(sys, "stdout", FullStdout())
    assert main(argv) == 1
    assert capsys.readouterr().err == f"{named}: error: cannot write the output to stdout: {os.strerror(errno.ENOSPC)}\n"


class ClosedPipeStdout(io.StringIO):
    """A stdout whose reader has gone (``oellm --help | head -c0``)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def test_help_to_a_closed_pipe_is_quiet(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(sys, "stdout", ClosedPipeStdout())
    assert main(["--help"]) == SIGPIPE_EXIT_STATUS
    assert capsys.readouterr().err == ""
