"""The entry's own reads of the dataset indices show no megatron-core warning of an unknown rank.

On a login node (no ``RANK``, no ``SLURM_PROCID``) every run with ``--data-path`` printed megatron-core's
"UserWarning: Could not determine rank from torch.distributed, RANK, or SLURM_PROCID. Defaulting to rank 0." (its
index reader's log lines ask for the rank) before the entry's one ``error:`` line.
"""

from __future__ import annotations

import random
import types
import warnings
from pathlib import Path

import pytest

from tests.unit_tests.training.entry_helpers import TINY_MOE_RUN, corpus, entry_on_a_cpu_node, one_error_line


def test_a_login_node_run_on_data_prints_only_its_error_line(monkeypatch: pytest.MonkeyPatch, capsys,
                                                             tmp_path: Path) -> None:
    for name in ("RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    entry = entry_on_a_cpu_node(monkeypatch)
    prefix = corpus(tmp_path, f"docs{random.randrange(10**6)}")
    run = [*TINY_MOE_RUN[:TINY_MOE_RUN.index("--mock-data")], "--data-path", prefix, "--split", "100,0,0",
           "--tokenizer-type", "NullTokenizer", "--vocab-size", "257"]
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")  # a warning shown once per place is shown at every call here
        assert entry.main(run) == 2
    assert "needs a GPU node" in one_error_line(capsys)
    rank_warnings = [str(warning.message) for warning in shown if "Could not determine rank" in str(warning.message)]
    assert not rank_warnings, rank_warnings


def test_other_warnings_of_an_index_read_still_show() -> None:
    """Only the rank warning is left out: another warning megatron-core's reader gives is shown."""
    from megatron.oellm.training.data_sources import _read_index

    other = f"an index reader warning {random.randrange(10**6)}"

    def reader(_path: str, _multimodal: bool) -> str:
        warnings.warn("Could not determine rank from torch.distributed, RANK, or SLURM_PROCID. Defaulting to rank 0.",
                      stacklevel=1)
        warnings.warn(other, stacklevel=1)
        return "index"

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        assert _read_index(types.SimpleNamespace(_IndexReader=reader), "prefix") == "index"
    assert [str(warning.message) for warning in shown] == [other]
