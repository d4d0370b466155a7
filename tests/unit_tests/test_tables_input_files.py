"""``oellm table``: the ``--plot`` image never replaces one of the logs, and a log the file system cannot read is
named in the refusal."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from tests.unit_tests.megatron_logs import megatron_args, megatron_log, random_times


def _log(path: Path, nodes: int) -> str:
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": nodes * 4})
    path.write_text(megatron_log(args, random_times(10, random.uniform(70000, 80000)), [133.0] * 10))
    return str(path)


@pytest.mark.parametrize("how", ["same name", "through a link"])
def test_a_plot_named_like_one_of_the_logs_is_refused_and_the_log_kept(how, tmp_path, capsys):
    """``oellm table r1.png r2.png --plot r1.png`` (logs named by a glob that also matched images) replaced the first
    log with the plot; it is refused before any log is read, the log untouched."""
    pytest.importorskip("matplotlib")
    first, second = _log(tmp_path / "r1.png", 8), _log(tmp_path / "r2.png", 16)
    before = Path(first).read_text()
    plot = first
    if how == "through a link":
        plot = str(tmp_path / "scaling.png")
        Path(plot).symlink_to(first)
    assert main(["table", first, second, "--plot", plot]) == 2
    err = capsys.readouterr().err
    assert f"--plot {plot!r} is the log {first!r}: the plot would replace it" in err, err
    assert Path(first).read_text() == before


def test_a_plot_beside_the_logs_is_written(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    logs = [_log(tmp_path / f"slurm-{nodes}.out", nodes) for nodes in (8, 16)]
    assert main(["table", *logs, "--plot", str(tmp_path / "scaling.png")]) == 0
    assert (tmp_path / "scaling.png").stat().st_size > 0


def test_a_log_the_system_cannot_read_is_named(tmp_path, monkeypatch, capsys):
    """An I/O error (a failing disk, a file system gone away) printed only ``[Errno 5] Input/output error``."""
    good, bad = _log(tmp_path / "good.out", 8), _log(tmp_path / "bad.out", 16)
    real = Path.open

    def open_(self, *args, **kwargs):
        if str(self) == bad:
            raise OSError(5, "Input/output error")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", open_)
    assert main(["table", good, bad]) == 2
    assert capsys.readouterr().err.strip().endswith(f"error: log {bad!r} cannot be read (Input/output error)")


def test_a_plot_through_a_symlink_loop_is_refused_before_any_log_is_read(tmp_path, monkeypatch, capsys):
    """``--plot fig.png`` where ``fig.png -> fig.png`` passed the checks as a new file: the logs were read, the table
    printed, and the image replaced the looping link."""
    pytest.importorskip("matplotlib")
    from megatron.oellm.commands import table

    logs = [_log(tmp_path / f"slurm-{nodes}.out", nodes) for nodes in (8, 16)]
    plot = tmp_path / "fig.png"
    plot.symlink_to(plot.name)

    def no_read(path: str) -> None:
        raise AssertionError(f"{path} read before the --plot path was checked")

    monkeypatch.setattr(table, "read_log", no_read)
    assert main(["table", *logs, "--plot", str(plot)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert f"--plot {str(plot)!r} cannot be resolved: it goes through a symlink loop" in captured.err
    assert plot.is_symlink() and plot.readlink() == Path(plot.name)
