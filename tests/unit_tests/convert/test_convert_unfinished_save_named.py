"""An unfinished torch_dist save (killed while saving, or a copy in progress: ``.distcp`` files and ``.metadata`` but
no ``metadata.json``, which megatron-core writes last) is named as one, with the finished save the run's
``latest_checkpointed_iteration.txt`` names; it was called a ``torch_dcp`` checkpoint to re-save with megatron."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from megatron.oellm.cli import main


def _run_with_unfinished_save(mcore: Path, run: Path, names_finished: bool) -> tuple[Path, Path | None]:
    """A run folder holding a finished save (copied from the converted ``mcore``'s release) and, at a later
    iteration, the same save without ``metadata.json``; its tracker names the finished one where ``names_finished``,
    else the unfinished one (a copy that took the tracker first). Returns (unfinished directory, the finished one
    where the tracker names it)."""
    finished_step = random.randrange(1, 10**6)
    unfinished = run / f"iter_{finished_step + random.randrange(1, 1000):07d}"
    finished = run / f"iter_{finished_step:07d}"
    shutil.copytree(mcore / "release", finished)
    shutil.copytree(mcore / "release", unfinished)
    (unfinished / "metadata.json").unlink()
    named = finished if names_finished else unfinished
    (run / "latest_checkpointed_iteration.txt").write_text(f"{int(named.name.removeprefix('iter_'))}\n")
    return unfinished, finished if names_finished else None


@pytest.mark.parametrize("tracker_names_finished", [True, False])
def test_an_unfinished_save_is_named_with_the_tracked_one(converted, capsys: pytest.CaptureFixture,
                                                          tracker_names_finished: bool) -> None:
    card, _, tmp = converted
    run = tmp / "run"
    unfinished, finished = _run_with_unfinished_save(tmp / "mcore", run, tracker_names_finished)
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--model", card.name, "--mcore", str(unfinished),
                 "--out", str(tmp / "out")]) == 2
    error = capsys.readouterr().err
    assert f"{unfinished} is an unfinished torch_dist save" in error, error
    assert "metadata.json" in error and "torch_dcp" not in error
    if finished is not None:
        assert f"names {finished.name}, the run's last finished save: pass --mcore {run}" in error
    else:
        assert "wait for the copy to finish" in error
    assert not (tmp / "out").exists()
