"""``oellm table`` exited 0 when no row had numbers (every job failed or had not reached the window), so a script
read an empty table as a result; with ``--plot`` it died with a traceback. It now prints the table (its Status column
says why) and exits 1, naming the reason on stderr and writing no plot. Fresh random step times."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cli import main
from tests.unit_tests.megatron_logs import megatron_args, megatron_log, random_times

OOM = "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"


def _log(tmp_path, name: str, count: int, tail: str = "") -> str:
    """A generated 8-node log of the strong-scaling recipe with iteration lines 1..``count``, then ``tail``."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    times = random_times(count, random.uniform(60_000.0, 90_000.0))
    path = tmp_path / name
    path.write_text(megatron_log(args, times, [130.0] * count, tail=tail))
    return str(path)


def _failed_logs(tmp_path) -> list[str]:
    """Logs of one to three jobs that ran out of memory inside the window."""
    return [_log(tmp_path, f"oom_{k}.out", random.randint(3, 9), OOM) for k in range(random.randint(1, 3))]


def test_a_table_without_numbers_is_printed_and_exits_1(tmp_path, capsys):
    logs = _failed_logs(tmp_path)
    assert main(["table", *logs]) == 1
    out, err = capsys.readouterr()
    assert sum(".out |" in line for line in out.splitlines()) == len(logs)
    assert "oellm table: error: no row has numbers: the Status column above says why" in err


def test_no_plot_is_written_and_no_traceback(tmp_path, capsys):
    plot = tmp_path / "scaling.png"
    assert main(["table", *_failed_logs(tmp_path), "--plot", str(plot)]) == 1
    assert not plot.exists()
    assert f"no row has numbers: the Status column above says why; --plot {plot} not written" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["md", "csv"])
def test_one_row_with_numbers_is_enough(tmp_path, capsys, fmt):
    logs = [*_failed_logs(tmp_path), _log(tmp_path, "ok.out", 10)]
    assert main(["table", *logs, "--format", fmt]) == 0
    assert "no row has numbers" not in capsys.readouterr().err


def test_the_help_states_the_exit_status(capsys):
    with pytest.raises(SystemExit):
        main(["table", "--help"])
    assert "Exit status 1 when no row has numbers" in " ".join(capsys.readouterr().out.split())
