"""The entry's start-up line naming the code that runs (:func:`~megatron.oellm.training.entry.provenance`) is printed
by rank 0 alone (``RANK`` unset counts as rank 0): one line per job, not one per GPU."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.training.entry import provenance
from tests.unit_tests.training.entry_helpers import TINY_MOE_RUN, Reached, entry_up_to_pretrain


def _provenance_lines(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], rank: str | None) -> int:
    """How many provenance lines the entry prints on stdout, run up to ``pretrain`` as rank ``rank`` (None:
    ``RANK`` unset)."""
    entry = entry_up_to_pretrain(monkeypatch)
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    capsys.readouterr()
    with pytest.raises(Reached):
        entry.main([*TINY_MOE_RUN, "--oellm-backend", "torch"])
    return capsys.readouterr().out.splitlines().count(provenance())


def test_rank_zero_prints_the_provenance_line(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``RANK=0``, or no ``RANK``: one provenance line."""
    assert _provenance_lines(monkeypatch, capsys, random.choice(["0", None])) == 1


def test_other_ranks_print_no_provenance_line(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Any other rank: none."""
    assert _provenance_lines(monkeypatch, capsys, str(random.randrange(1, 1024))) == 0
