"""A job script ``sbatch`` refuses is removed: kept, it took the row's next name, so the next ``--submit`` wrote
``job-2.sbatch`` though no job of ``job.sbatch`` was ever queued. The scripts of queued jobs stay, and the refusal
says the script is removed."""

from __future__ import annotations

import os
import random

import pytest

from megatron.oellm.recipes import RecipeError
from megatron.oellm.recipes.submission import submit

SBATCH = """#!/bin/bash
# refuses while the file $FAKE_REFUSE exists (its text is the reason), else queues: says which script it was given
if [ -e "$FAKE_REFUSE" ]; then cat "$FAKE_REFUSE" >&2; {refusal}; exit 1; fi
echo "Submitted batch job $RANDOM from $1"
"""
"""``sbatch``: refuses while ``$FAKE_REFUSE`` exists after running ``{refusal}`` (a shell command), else queues."""


def _sbatch(tmp_path, monkeypatch, refusal: str = ":"):
    """Put the :data:`SBATCH` stand-in first on PATH; return the file whose existence makes it refuse."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(SBATCH.format(refusal=refusal))
    (bin_dir / "sbatch").chmod(0o755)
    refuse = tmp_path / "refuse"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_REFUSE", str(refuse))
    return refuse


def _script() -> str:
    return f"#!/bin/bash\necho {random.randint(0, 10**6)}\n"


def test_a_refused_script_is_removed_and_the_next_submission_takes_its_name(tmp_path, monkeypatch):
    refuse = _sbatch(tmp_path, monkeypatch)
    directory = tmp_path / "run"
    queued = random.randint(0, 3)  # earlier submissions of the row that were queued
    kept = [_script() for _ in range(queued)]
    for text in kept:
        submit(text, directory)
    names = ["job.sbatch", *(f"job-{n}.sbatch" for n in range(2, queued + 2))]
    reason = f"sbatch: error: Socket timed out {random.randint(0, 999)}"
    refuse.write_text(reason)
    for _ in range(random.randint(1, 3)):  # each refused submission leaves nothing behind
        with pytest.raises(RecipeError) as refused:
            submit(_script(), directory)
        assert str(refused.value) == (f"sbatch {directory / names[queued]} failed (1): {reason}; {names[queued]} is "
                                      "removed, as nothing was queued (--dry-run prints the script)")
        assert sorted(path.name for path in directory.iterdir()) == sorted(names[:queued])
    refuse.unlink()
    text = _script()
    assert submit(text, directory).endswith(f" from {directory / names[queued]}")
    assert (directory / names[queued]).read_text() == text
    assert [(directory / name).read_text() for name in names[:queued]] == kept


def test_a_refused_script_that_cannot_be_removed_is_named_as_staying(tmp_path, monkeypatch):
    """Where the script cannot be removed (here sbatch put a folder in its place), the refusal says it stays and
    why, instead of a traceback."""
    refuse = _sbatch(tmp_path, monkeypatch, refusal='rm "$1" && mkdir "$1" && touch "$1/inside"')
    refuse.write_text("sbatch: error: refused")
    with pytest.raises(RecipeError) as refused:
        submit(_script(), tmp_path / "run")
    message = str(refused.value)
    assert message.startswith(f"sbatch {tmp_path / 'run' / 'job.sbatch'} failed (1): sbatch: error: refused; "
                              "job.sbatch stays (")
    assert message.endswith("), though nothing was queued: remove it")
