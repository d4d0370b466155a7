"""A signal that arrives while ``--overwrite`` moves the new output in, when that move fails and putting the previous
output back fails too, keeps the error that says where each part is, with the signal named: it said "the partial
output was removed, --out is as it was" while the previous output sat in the ``.replaced-`` folder."""

from __future__ import annotations

import errno
import os
import random
import signal
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert import output
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, signal_handler, write_hf


def _files(directory: Path) -> dict[Path, bytes]:
    """Relative path -> bytes of every file under ``directory``."""
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _fail_moves_with_signal(monkeypatch: pytest.MonkeyPatch, out: Path, signum: int) -> None:
    """Make the first move of a new entry from the staging directory into ``out`` send ``signum`` to this process and
    fail with EIO, and every move after it fail too (putting the previous output back fails)."""
    rename = Path.rename
    staging = output.staging_directory(out)
    failing: list[bool] = []

    def failing_rename(self: Path, target: Path) -> Path:
        if not failing and self.parent == staging and Path(target).parent == out:
            failing.append(True)
            os.kill(os.getpid(), signum)
        if failing:
            raise OSError(errno.EIO, "Input/output error", str(target))
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing_rename)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_the_error_says_where_each_part_is_and_names_the_signal(converted, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture, direction: str,
                                                                signum: int) -> None:
    card, _, tmp = converted
    out = (tmp / "out").resolve()
    if direction == "hf-to-mcore":
        write_hf(card, random_hf_tensors(card, seed=random.randrange(2**31)), tmp / "hf2")
        source = ["--hf", str(tmp / "hf2")]
    else:
        source = ["--mcore", str(tmp / "mcore")]
    args = ["convert", direction, "--model", card.name, *source, "--out", str(out)]
    assert main(args) == 0
    previous = _files(out)
    _fail_moves_with_signal(monkeypatch, out, signum)

    def not_handled(number, frame):
        raise RuntimeError(f"signal {number} reached the test's handler")

    capsys.readouterr()
    with signal_handler(signum, not_handled):
        status = main([*args, "--overwrite"])
    err = capsys.readouterr().err
    trash, staging = output.trash_directory(out), output.staging_directory(out)
    assert err.count("\n") == 1 and "as it was" not in err
    assert f"Nothing was deleted: the previous output's entries missing from {out} are in {trash}" in err
    assert f"the new output's entries missing from {out} are in {staging}" in err
    assert signal.Signals(signum).name in err
    assert status == 128 + signum
    assert _files(trash) == previous and not list(out.iterdir()) and any(staging.iterdir())
