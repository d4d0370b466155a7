"""Gaps a tenth mutation audit of :mod:`megatron.oellm.commands.plan` and :mod:`megatron.oellm.commands.table`
found: ``oellm plan``'s world size from ``--gpus-per-node``, its JSON expert data-parallel size, and the defaulted-etp
hint given exactly where the defaulted etp is the cause; ``oellm table``'s refusal of a plot the system cannot
write."""

from __future__ import annotations

import json
import random

import pytest

from megatron.oellm.cli import main
from tests.unit_tests.megatron_logs import megatron_log, random_times


def test_plan_world_size_is_nodes_times_the_given_gpus_per_node(capsys):
    """``--gpus-per-node`` (a cluster other than MN5 / Jupiter's 4) sets the world size the layout is checked and the
    data-parallel size counted for: nodes x GPUs per node."""
    nodes, gpus_per_node = random.randint(1, 8), random.choice([2, 3, 6, 8])
    assert main(["plan", "qwen3-30b-a3b", "--nodes", str(nodes), "--gpus-per-node", str(gpus_per_node),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["world_size"] == report["data_parallel"] == nodes * gpus_per_node


def test_plan_json_gives_the_expert_data_parallel_size_apart_from_the_data_parallel_size(capsys):
    """With experts split over EP, the expert data-parallel group (world / (etp x ep x pp)) is smaller than the
    data-parallel group (world / (tp x pp x cp)); the JSON holds both, each its own."""
    nodes, ep = random.choice([2, 4, 8]), random.choice([2, 4])
    world = 4 * nodes
    assert main(["plan", "qwen3-30b-a3b", "--nodes", str(nodes), "--ep", str(ep), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["data_parallel"] == world and report["expert_data_parallel"] == world // ep


def test_plan_hints_at_the_defaulted_etp_at_tp_2_and_only_for_an_etp_refusal(capsys):
    """At ``--tp 2`` without ``--etp`` an expert layout that does not fit is refused with the hint that etp defaulted
    to TP; a refusal that is not about etp (tp x pp x cp not dividing the GPUs) gets no such hint, since the
    defaulted etp is not its cause."""
    nodes = random.choice([1, 2])
    world = 4 * nodes
    assert main(["plan", "qwen3-30b-a3b", "--nodes", str(nodes), "--tp", "2", "--sp", "--ep", str(world)]) == 2
    err = capsys.readouterr().err
    assert f"etp x ep x pp = {2 * world}" in err and "etp is 2 because --etp was not given" in err
    cp = 2 * world  # tp x cp = 4 x world: does not divide the world
    assert main(["plan", "qwen3-30b-a3b", "--nodes", str(nodes), "--tp", "2", "--sp", "--cp", str(cp)]) == 2
    err = capsys.readouterr().err
    assert f"world size {world} is not divisible by tp x pp x cp = {2 * cp}" in err
    assert "--etp was not given" not in err


def test_plan_a_gpu_exactly_the_size_of_the_static_state_fits_and_one_byte_less_does_not(capsys):
    """``--gpu-memory-gib`` refuses a plan whose worst PP rank's static state exceeds the GPU: a GPU of exactly that
    many bytes fits (exit 0, free 0), one byte less is out of memory (exit 1, the rank named)."""
    pp, ep = random.choice([2, 4]), random.choice([2, 4, 8])
    flags = ["qwen3-30b-a3b", "--nodes", str(pp * ep // 4 * random.choice([1, 2]) or 1), "--pp", str(pp), "--ep",
             str(ep)]
    assert main(["plan", *flags, "--json"]) == 0
    static = [rank["static_bytes"] for rank in json.loads(capsys.readouterr().out)["ranks"]]
    worst = max(range(pp), key=lambda rank: static[rank])
    exact = static[worst] / 2**30  # exact in binary: a whole number of bytes over a power of two
    assert main(["plan", *flags, "--gpu-memory-gib", repr(exact), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ranks"][worst]["free_bytes"] == 0
    assert main(["plan", *flags, "--gpu-memory-gib", repr((static[worst] - 1) / 2**30)]) == 1
    assert capsys.readouterr().err.startswith(f"oellm plan: error: PP rank {worst} holds ")


def test_table_a_plot_the_file_system_refuses_is_one_error_line_not_a_traceback(tmp_path, capsys):
    """A ``--plot`` name the file system refuses (longer than its 255-byte limit) passes the path checks and fails
    only when matplotlib writes it, after the table is printed: ``oellm table`` must end with one ``error:`` line
    naming --plot and the system's reason and exit 1 (the table stands), not a traceback."""
    pytest.importorskip("matplotlib")
    # enough of an arguments block for a row with numbers (no card: no TFLOP/s of ours)
    args = {"world_size": 4 * random.randint(1, 64), "global_batch_size": 256, "micro_batch_size": 1,
            "seq_length": 4096, "log_interval": 1, "train_iters": 10}
    log = tmp_path / "slurm-1.out"
    log.write_text(megatron_log(args, random_times(10, random.uniform(60_000.0, 90_000.0)), [130.0] * 10))
    name = "s" * random.randint(260, 400) + ".png"
    assert main(["table", str(log), "--plot", str(tmp_path / name)]) == 1
    out, err = capsys.readouterr()
    assert "| ok |" in out  # the row had numbers: the failure is the file system's
    assert err == (f"oellm table: error: cannot write --plot {tmp_path / name} (File name too long); the table is "
                   "printed above\n")


def test_table_hands_the_title_and_the_plot_path_to_the_plot(tmp_path, monkeypatch, capsys):
    """``--title`` is the plot's title (it is refused without ``--plot``): it must reach the plot with the path given,
    as must the table's rows."""
    from megatron.oellm.commands import table

    pytest.importorskip("matplotlib")  # --plot checks for it before any log is read
    drawn = []
    monkeypatch.setattr(table, "plot", lambda rows, path, title: drawn.append((len(rows), path, title)))
    args = {"world_size": 4 * random.randint(1, 64), "global_batch_size": 256, "micro_batch_size": 1,
            "seq_length": 4096, "log_interval": 1, "train_iters": 10}
    log = tmp_path / "slurm-1.out"
    log.write_text(megatron_log(args, random_times(10, random.uniform(60_000.0, 90_000.0)), [130.0] * 10))
    title = f"strong scaling {random.randrange(10**6)}"
    path = str(tmp_path / "scaling.png")
    assert main(["table", str(log), "--plot", path, "--title", title]) == 0
    assert drawn == [(1, path, title)]
