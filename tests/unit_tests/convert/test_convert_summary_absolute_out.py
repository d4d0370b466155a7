"""The summary line names ``--out`` as a resolved absolute path in both directions, as a Slurm log read later from
another folder must say where the checkpoint went: it printed ``--out`` as typed (``../rc/rel1``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cli import main


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_the_summary_names_the_absolute_output(converted, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture, direction: str) -> None:
    card, _, tmp = converted
    (tmp / "work").mkdir()
    (tmp / "linked").symlink_to(tmp / "work")
    monkeypatch.chdir(tmp / "linked")
    typed = f"../linked/out{random.randrange(10**6)}"
    source = ["--hf", "../hf"] if direction == "hf-to-mcore" else ["--mcore", "../mcore"]
    capsys.readouterr()
    assert main(["convert", direction, "--model", card.name, *source, "--out", typed]) == 0
    summary = capsys.readouterr().out.splitlines()[0]
    where = (tmp / "work" / Path(typed).name).resolve()
    assert f" to {where} in " in summary, summary
    assert where.is_dir()
