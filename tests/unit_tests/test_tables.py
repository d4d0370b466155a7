"""``oellm table``: synthetic Megatron logs in megatron-core 0.19.2's exact print formats -> the reports' table."""

from __future__ import annotations

import csv
import dataclasses
import io
import random
import re
import statistics

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.cli import main
from megatron.oellm.flops import training_flops_per_token
from megatron.oellm.run_log import parse_log_text, read_log
from megatron.oellm.scaling_table import (
    CSV_FIELDS,
    TableError,
    Window,
    format_csv,
    format_markdown,
    plot,
    summarise,
    with_efficiency,
)
from tests.unit_tests.megatron_flag_sets import GPT_PATH_GDN
from tests.unit_tests.megatron_logs import (
    args_block,
    megatron_args,
    megatron_log,
    random_times,
    rows_with_tokens,
)


def _qwen3_5_log(nodes_row: int = 2, centre_ms: float = 75200.0, **kwargs) -> tuple[dict, list[float], str]:
    recipe_nodes = {1: 4, 2: 8, 3: 16, 4: 32, 5: 64, 6: 128}
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", nodes_row, {"world_size": recipe_nodes[nodes_row] * 4})
    times = random_times(10, centre_ms)
    tflops = [round(random.uniform(100, 140), 1) for _ in times]
    return args, times, megatron_log(args, times, tflops, **kwargs)


def test_arguments_block_and_iteration_lines_are_read_exactly():
    args, times, text = _qwen3_5_log(prefix="0: ")
    log = parse_log_text(text)
    (run,) = log.runs
    assert run.args["world_size"] == 32 and run.args["global_batch_size"] == 4096
    assert run.args["hybrid_layer_pattern"] == args["hybrid_layer_pattern"]
    assert run.args["moe_router_load_balancing_type"] == ["global_aux_loss"]
    assert run.args["data_path"] is None and run.args["bf16"] is True
    assert sorted(log.iterations) == list(range(1, 11))
    assert [log.iterations[i].elapsed_ms for i in range(1, 11)] == times
    assert run.failure == "" and run.train_iters == 10 and run.last_iteration == 10


def test_window_medians_tokens_and_both_tflops():
    args, times, text = _qwen3_5_log()
    log = parse_log_text(text, "8n.log")
    calls = []

    def fake_flops(card, seq_length, padded_vocab):
        calls.append((card.hybrid_layer_pattern, card.num_experts, card.vocab_size, seq_length, padded_vocab))
        return 19.5e9

    row = summarise(log, Window(3, 10), gpus_per_node=4, peak_tflops=989.0, flops_per_token=fake_flops)
    step = statistics.median(times[2:10]) / 1000
    tokens = 4096 * 4096 / step / 32
    assert row.status == "ok" and row.model == "qwen3.5-35b-a3b"
    assert (row.nodes, row.gpus, row.global_batch_size, row.micro_batch_size) == (8, 32, 4096, 4)
    assert row.step_time_s == pytest.approx(step) and row.tokens_per_s_per_gpu == pytest.approx(tokens)
    card = get_card("qwen3.5-35b-a3b")
    assert calls == [(card.hybrid_layer_pattern, 256, 262144, 4096, 262144)]
    assert row.tflops_per_gpu == pytest.approx(19.5e9 * tokens / 1e12)
    logged = [log.iterations[i].tflops_per_gpu for i in range(3, 11)]
    flops = [rate * ms for rate, ms in zip(logged, times[2:10], strict=True)]  # megatron's FLOPs per iteration
    assert row.tflops_per_gpu_logged == pytest.approx(statistics.median(flops) / statistics.median(times[2:10]))
    assert row.mfu == pytest.approx(row.tflops_per_gpu / 989.0)
    narrow = summarise(log, Window(5, 6), 4, flops_per_token=fake_flops)
    assert narrow.step_time_s == pytest.approx(statistics.median(times[4:6]) / 1000)
    mean = summarise(log, Window.parse("4-9", "mean"), 4, flops_per_token=fake_flops)
    assert mean.step_time_s == pytest.approx(statistics.mean(times[3:9]) / 1000)
    assert mean.tflops_per_gpu_logged == pytest.approx(statistics.mean(flops[1:7]) / statistics.mean(times[3:9]))


def test_report_row_is_reproduced_from_its_step_time():
    """MN5 #438, 8 nodes: 75.2 s per step at GBS 4096 x 4096 on 32 GPUs is 6,971 tokens/s/GPU."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    text = megatron_log(args, [75200.0] * 10, [133.2] * 10)
    row = summarise(parse_log_text(text), Window(), 4)
    assert row.tokens_per_s_per_gpu == pytest.approx(6971, abs=5)  # the report rounds the step time to 0.1 s
    assert row.step_time_s == pytest.approx(75.2)
    assert row.tflops_per_gpu_logged == pytest.approx(133.2)
    assert row.tflops_per_gpu is not None and row.tflops_per_gpu > 0


@pytest.mark.parametrize("tail, status", [
    ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n", "out of memory"),
    ("[rank5]:[E ProcessGroupNCCL.cpp:632] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
     "OpType=SEND, Timeout(ms)=1800000) ran for 1800046 milliseconds before timing out.\n", "NCCL timeout"),
    ("Traceback (most recent call last):\n  File \"entry.py\", line 3, in <module>\n"
     "RuntimeError: expected all tensors to be on the same device\n",
     "crashed (RuntimeError: expected all tensors to be on the same device)"),
])
def test_failed_runs_give_a_status_and_no_numbers(tail, status):
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    text = megatron_log(args, random_times(10, 75000.0)[:4], [130.0] * 4, tail=tail)
    row = summarise(parse_log_text(text), Window(), 4)
    assert row.status == f"{status} at iteration 4" and not row.ok
    assert all(getattr(row, name) is None for name in
               ("step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "tflops_per_gpu_logged", "mfu"))


def test_a_crash_after_the_window_keeps_the_numbers_and_names_the_crash():
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    text = megatron_log(args, random_times(10, 75000.0), [130.0] * 10,
                        tail="Traceback (most recent call last):\nValueError: bad checkpoint\n")
    row = summarise(parse_log_text(text), Window(), 4)
    assert row.status == "ok (crashed (ValueError: bad checkpoint) at iteration 10, after the window)"
    assert row.step_time_s > 0


def test_truncated_logs_say_where_they_stop():
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    cut = megatron_log(args, random_times(10, 75000.0)[:7], [130.0] * 7)
    assert summarise(parse_log_text(cut), Window(), 4).status == "truncated at iteration 7/10"
    head_only = "\n".join(args_block(args)[:40])
    assert summarise(parse_log_text(head_only), Window(), 4).status == "truncated inside the arguments block"
    assert summarise(parse_log_text("srun: error"), Window(), 4).status.startswith("no arguments block")
    assert summarise(parse_log_text(cut), Window(3, 6), 4).ok
    short = megatron_log({**args, "train_iters": 2}, [1000.0] * 2, [1.0] * 2, total=2)
    assert summarise(parse_log_text(short), Window(), 4).status == "run of 2 iterations ends before the window 3-10"


FROM_FLAGS = {"oellm_model": None}
"""A run without ``--oellm-model``: its card is rebuilt from Megatron's flags."""


def test_unknown_model_has_megatrons_tflops_but_no_tflops_or_mfu_of_ours():
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "hidden_size": 1000, **FROM_FLAGS})
    row = summarise(parse_log_text(megatron_log(args, [75000.0] * 10, [120.0] * 10)), Window(), 4)
    assert row.ok and row.model == "unregistered model (qwen3.5-35b-a3b but hidden_size 1000)" and row.tflops_per_gpu > 0
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "num_experts": None, **FROM_FLAGS})
    row = summarise(parse_log_text(megatron_log(args, [75000.0] * 10, [120.0] * 10)), Window(), 4, peak_tflops=1000.0)
    assert row.ok and row.model == "unknown model" and row.tflops_per_gpu is None and row.mfu is None
    assert row.tflops_per_gpu_logged == pytest.approx(120.0)
    assert "| n/a | 120.0 | n/a |" in format_markdown([row], None, Window())


def test_gpt_path_gated_deltanet_run_is_counted_as_qwen3_5():
    """MN5 #438's HybridEP runs: a GPTModel with GDN layers (no hybrid pattern) is Qwen3.5, not all-attention Qwen3
    MoE (which counted 144.4 instead of 133.4 TFLOP/s/GPU at 75.2 s per step on 8 nodes)."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, **GPT_PATH_GDN, **FROM_FLAGS})
    row = summarise(parse_log_text(megatron_log(args, [75200.0] * 10, [133.2] * 10)), Window(), 4)
    assert row.ok and row.model == "qwen3.5-35b-a3b"
    gflops = training_flops_per_token(get_card("qwen3.5-35b-a3b"), 4096, 262144).gflops_per_token
    assert gflops == pytest.approx(19.14, abs=0.01)
    assert row.tflops_per_gpu == pytest.approx(gflops * row.tokens_per_s_per_gpu / 1e3)
    assert row.tflops_per_gpu == pytest.approx(133.4, abs=0.1)


def test_architecture_flags_no_card_describes_give_no_tflops_of_ours():
    """A dense first layer (moe_layer_freq) was counted as an all-MoE qwen3-30b-a3b."""
    args = megatron_args("qwen3_30b_a3b_mn5", 1, {"world_size": 32, "moe_layer_freq": [0] + [1] * 47,
                                                  **FROM_FLAGS})
    row = summarise(parse_log_text(megatron_log(args, [17400.0] * 10, [215.0] * 10)), Window(), 4)
    assert row.ok and row.model == "unknown model" and row.tflops_per_gpu is None and row.mfu is None
    assert row.tflops_per_gpu_logged == pytest.approx(215.0)


def test_proxy_runs_are_named_after_their_card():
    args = megatron_args("qwen3_30b_a3b_mn5", 1, {"world_size": 4, "num_layers": 2,
                                                  "pipeline_model_parallel_layout": None, **FROM_FLAGS})
    row = summarise(parse_log_text(megatron_log(args, [10_000.0] * 10, [50.0] * 10)), Window(), 4)
    assert row.model == "qwen3-30b-a3b-proxy-2L" and row.nodes == 1


def test_efficiency_against_the_chosen_baseline():
    tokens = {4: random.uniform(5000, 7000), 8: random.uniform(5000, 7000), 16: random.uniform(5000, 7000)}
    rows = rows_with_tokens(tokens)
    by_nodes, baseline = with_efficiency(rows, baseline_nodes=8)
    assert baseline.nodes == 8
    for row in by_nodes:
        assert row.efficiency == pytest.approx(tokens[int(row.nodes)] / tokens[8], rel=1e-4)
    default, baseline = with_efficiency(rows)
    assert baseline.nodes == 4 and default[0].efficiency == 1.0
    assert with_efficiency(rows, baseline_row=3)[1].nodes == 16
    with pytest.raises(TableError, match=r"^--baseline-nodes 32: no ok row on that many nodes \(the ok rows run on "
                                         r"4, 8, 16 nodes\)$"):  # node counts as the table prints them, not 4.0
        with_efficiency(rows, baseline_nodes=32)


def test_markdown_and_csv_formats():
    rows, baseline = with_efficiency(rows_with_tokens({4: 6270.0, 8: 6971.0}), baseline_nodes=8)
    failed = summarise(parse_log_text("nothing"), Window(), 4)
    markdown = format_markdown([*rows, failed], baseline, Window())
    lines = markdown.splitlines()
    assert lines[0].startswith("| Nodes | GPUs | Seq | GBS | MBS | Step time (s) | Tokens/s/GPU | TFLOP/s/GPU |")
    assert "Efficiency vs 8 nodes" in lines[0]
    assert "| 4 | 16 | 4096 | 4096 | 4 | 167.2 | 6,270 |" in lines[2] and "| 89.9% |" in lines[2]
    assert "| 8 | 32 | 4096 | 4096 | 4 | 75.2 | 6,971 |" in lines[3] and "| 100.0% |" in lines[3]
    assert lines[4].endswith("no arguments block (not a Megatron log, or truncated before it) |")
    parsed = list(csv.DictReader(io.StringIO(format_csv([*rows, failed], baseline, Window()))))
    assert float(parsed[1]["tokens_per_s_per_gpu"]) == pytest.approx(6971.0)
    assert parsed[2]["step_time_s"] == "" and parsed[2]["status"].startswith("no arguments block")
    assert [row["nodes"] for row in parsed[:2]] == ["4", "8"]  # whole nodes as integers, not 4.0


def test_csv_keeps_a_partial_node_as_its_fraction():
    (row,) = rows_with_tokens({4: 6270.0})
    partial = dataclasses.replace(row, nodes=0.25, gpus=1)
    assert list(csv.DictReader(io.StringIO(format_csv([partial], None, Window()))))[0]["nodes"] == "0.25"


def test_a_run_on_part_of_a_node_or_not_whole_nodes_is_refused_naming_gpus_per_node():
    """A smoke run on 1-3 GPUs of a 4-GPU node, or on 6 GPUs, is no whole number of nodes: its row names
    ``--gpus-per-node`` (it was 0.25-0.75 or 1.5 nodes, which a world_size cut short by another rank's output also
    gave); with the run's GPUs per node it is a row of whole nodes (nodes = GPUs / GPUs per node)."""
    world_size = random.choice([1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15])
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": world_size})
    log = parse_log_text(megatron_log(args, random_times(10, 75000.0 * 32 / world_size), [130.0] * 10))
    row = summarise(log, Window(), 4)
    assert not row.ok and row.nodes is None and row.gpus == world_size and "--gpus-per-node" in row.status
    per_node = random.choice([n for n in range(1, world_size + 1) if world_size % n == 0])
    row = summarise(log, Window(), per_node)
    assert row.ok and row.gpus == world_size and row.nodes == world_size // per_node
    assert f"| {world_size // per_node} | {world_size} |" in format_markdown([row], row, Window())


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    rows, _ = with_efficiency(rows_with_tokens({4: 6000.0, 8: 6900.0, 16: 6800.0}))
    plot(rows, str(tmp_path / "scaling.png"), "test")
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(TableError, match=r"megatron-oellm\[plot\]"):
        plot(rows_with_tokens({4: 6000.0}), str(tmp_path / "x.png"))


def test_window_option_is_checked():
    assert Window.parse("11-40") == Window(11, 40)
    assert Window.parse("11-40", "mean") == Window(11, 40, "mean")
    with pytest.raises(TableError, match="statistic"):
        Window.parse("3-10", "max")
    for bad in ("3", "10-3", "a-b", "0-4"):
        with pytest.raises(TableError):
            Window.parse(bad)


def test_command_prints_the_table(tmp_path, capsys):
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    good, oom = tmp_path / "8n.log", tmp_path / "16n.log"
    good.write_text(megatron_log(args, random_times(10, 75200.0), [133.0] * 10))
    oom.write_text(megatron_log({**args, "world_size": 64}, [1.0], [1.0],
                                tail="torch.OutOfMemoryError: CUDA out of memory\n"))
    assert main(["table", str(good), str(oom), "--baseline-nodes", "8"]) == 0
    out = capsys.readouterr().out
    assert "out of memory at iteration 1" in out and "| 8 | 32 | 4096 | 4096 | 4 |" in out
    assert main(["table", str(good), "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("log,model,status,nodes")
    assert main(["table", str(good), "--window", "9-2"]) == 2
    assert main(["table", str(tmp_path / "missing.log")]) == 2
    assert read_log(good).runs[-1].last_iteration == 10


def test_a_garbled_vocabulary_padding_argument_marks_only_its_row(tmp_path, capsys):
    """Another rank's output cut into ``tensor_model_parallel_size``: int() raised and the whole table was lost."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    good, garbled = tmp_path / "good.log", tmp_path / "garbled.log"
    good.write_text(megatron_log(args, [75200.0] * 10, [133.2] * 10))
    garbled.write_text(megatron_log({**args, "tensor_model_parallel_size": "1[rank7]: W1019 warning"}, [75200.0] * 10,
                                    [133.2] * 10))
    status = ("arguments block has a tensor_model_parallel_size that is no positive integer: "
              "'1[rank7]: W1019 warning'")
    assert summarise(read_log(garbled), Window(), 4).status == status
    assert main(["table", str(garbled), str(good)]) == 0
    out = capsys.readouterr().out
    assert f"| {status} |" in out and "| 8 | 32 | 4096 | 4096 | 4 | 75.2 | 6,972 |" in out


def test_a_log_that_cannot_be_read_keeps_the_other_rows(tmp_path, capsys, monkeypatch):
    from megatron.oellm.commands import table

    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    good, bad = tmp_path / "good.log", tmp_path / "bad.log"
    good.write_text(megatron_log(args, [75200.0] * 10, [133.2] * 10))
    bad.write_text("anything")
    real = table.summarise

    def summarise_failing_on_bad(log, *rest):
        if log.path.endswith("bad.log"):
            raise ValueError("a value no parser foresaw")
        return real(log, *rest)

    monkeypatch.setattr(table, "summarise", summarise_failing_on_bad)
    assert main(["table", str(bad), str(good)]) == 0
    out = capsys.readouterr().out
    assert "| log not readable: a value no parser foresaw |" in out and "| 6,972 |" in out


def test_rows_are_sorted_by_model_batch_and_nodes_failed_rows_last(tmp_path, capsys):
    """Shell glob order (128, 16, 32, 4, 64, 8 nodes) was printed as given; --baseline-row counts printed rows."""
    paths = []
    for nodes in (128, 16, 4, 8):
        args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": nodes * 4})
        paths.append(tmp_path / f"{nodes}n.log")
        paths[-1].write_text(megatron_log(args, [4096 * 4096 / 6900 / (nodes * 4) * 1000] * 10, [130.0] * 10))
    failed = tmp_path / "oom.log"
    failed.write_text("torch.OutOfMemoryError: CUDA out of memory\n")
    small_batch = tmp_path / "gbs1024.log"
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 64, "global_batch_size": 1024})
    small_batch.write_text(megatron_log(args, [1024 * 4096 / 6900 / 64 * 1000] * 10, [130.0] * 10))
    assert main(["table", str(failed), *map(str, paths), str(small_batch), "--baseline-row", "3",
                 "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(row["global_batch_size"], row["nodes"]) for row in rows] == [
        ("1024", "16"), ("4096", "4"), ("4096", "8"), ("4096", "16"), ("4096", "128"), ("", "")]
    assert rows[-1]["status"].startswith("out of memory")
    assert float(rows[2]["efficiency_fraction"]) == pytest.approx(1.0)


def test_a_one_iteration_window_is_accepted():
    assert Window.parse("7-7") == Window(7, 7)


def _strong_args(overrides: dict | None = None) -> dict:
    """The 8-node Qwen3.5 strong-scaling row's arguments with ``overrides``."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, **(overrides or {})})


def test_tokens_use_the_logged_global_batch_size_over_the_arguments():
    """During a batch-size ramp-up the arguments hold the final batch; the window's lines log the one it ran."""
    args = _strong_args()
    times = random_times(10, 75000.0)
    text = megatron_log(args, times, [130.0] * 10).replace("global batch size:  4096 |", "global batch size:  2048 |")
    row = summarise(parse_log_text(text), Window(), 4)
    step_s = statistics.median(times[2:]) / 1000
    assert row.global_batch_size == 2048
    assert row.tokens_per_s_per_gpu == pytest.approx(2048 * 4096 / step_s / 32, rel=1e-12)


@pytest.mark.parametrize("tp, padded", [(1, 262016), (2, 262144)])
def test_our_flops_use_the_vocabulary_padded_at_the_runs_tensor_parallel_size(tp, padded):
    """Without a ``padded vocab`` line the vocabulary is padded as megatron does: 262,000 tokens to a multiple of
    128 x TP (2047 x 128 at TP 1, 1024 x 256 at TP 2)."""
    args = _strong_args({"vocab_size": 262000, "tensor_model_parallel_size": tp})
    seen = []

    def flops(card, seq_length, vocab):
        seen.append(vocab)
        return 1e9

    summarise(parse_log_text(megatron_log(args, random_times(10, 75000.0), [130.0] * 10)), Window(), 4,
              flops_per_token=flops)
    assert seen == [padded]


def test_mfu_uses_the_given_peak():
    peak = random.uniform(300.0, 900.0)
    text = megatron_log(_strong_args(), random_times(10, 75000.0), [130.0] * 10)
    row = summarise(parse_log_text(text), Window(), 4, peak_tflops=peak)
    assert row.mfu == pytest.approx(row.tflops_per_gpu / peak, rel=1e-12)


def test_a_run_one_iteration_short_of_the_window_says_so():
    args = _strong_args({"train_iters": 9})
    text = megatron_log(args, random_times(9, 75000.0), [130.0] * 9, total=9,
                        tail="[after training is done] datetime: 2026-10-19 12:00:00\n")
    assert summarise(parse_log_text(text), Window(), 4).status == (
        "run of 9 iterations ends inside the window 3-10: its numbers would cover only 3-9; give --window 3-9 for "
        "them")


def _row(overrides: dict, nodes: int, tokens: float, path: str):
    """The row of a run of the MN5 Qwen3.5 recipe with ``overrides`` on ``nodes`` nodes at ``tokens`` tokens/s/GPU."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": nodes * 4, **overrides})
    step_ms = args["global_batch_size"] * args["seq_length"] / tokens / (nodes * 4) * 1000
    return summarise(parse_log_text(megatron_log(args, [step_ms] * 10, [100.0] * 10), path), Window(), 4)


def test_two_different_unregistered_models_get_no_efficiency_against_each_other():
    """Two models that match no registry card were both named ``unregistered model`` and compared: a 2-layer and
    an 8-layer MoE read as a 300% "scaling efficiency"."""
    small = _row({"hidden_size": 1000, **FROM_FLAGS}, 1, random.uniform(5000, 7000), "small.log")
    other = _row({"hidden_size": 1200, **FROM_FLAGS}, 2, random.uniform(15000, 20000), "other.log")
    same = _row({"hidden_size": 1000, **FROM_FLAGS}, 4, random.uniform(5000, 7000), "same.log")
    assert small.model.startswith("unregistered model") and other.model.startswith("unregistered model")
    rows, baseline = with_efficiency([small, other, same])
    assert baseline.log == "small.log"
    by_log = {row.log: row for row in rows}
    assert by_log["other.log"].efficiency is None
    assert by_log["same.log"].efficiency == same.tokens_per_s_per_gpu / small.tokens_per_s_per_gpu


def test_two_different_unknown_models_get_no_efficiency_against_each_other():
    """Models no card describes (``unknown model``) differ as their architecture flags do."""
    dense = {"num_experts": None, **FROM_FLAGS}
    small = _row({**dense, "hidden_size": 1024}, 1, random.uniform(5000, 7000), "small.log")
    other = _row({**dense, "hidden_size": 2048}, 2, random.uniform(5000, 7000), "other.log")
    same = _row({**dense, "hidden_size": 1024}, 2, random.uniform(5000, 7000), "same.log")
    assert small.model == other.model == "unknown model"
    rows, _ = with_efficiency([small, other, same])
    by_log = {row.log: row for row in rows}
    assert by_log["other.log"].efficiency is None
    assert by_log["same.log"].efficiency == same.tokens_per_s_per_gpu / small.tokens_per_s_per_gpu


def _qwen3_row(nodes: int, layers: int, path: str):
    """The row of a run of a small Qwen3 MoE that matches no registry card, ``layers`` deep on ``nodes`` nodes, at
    fresh random step times."""
    args = megatron_args("qwen3_30b_a3b_mn5", 1, {
        "world_size": nodes * 4, "hidden_size": 1024, "ffn_hidden_size": 3000, "moe_ffn_hidden_size": 300,
        "moe_shared_expert_intermediate_size": 300, "num_layers": layers, **FROM_FLAGS})
    times = random_times(10, random.uniform(50_000.0, 70_000.0))
    return summarise(parse_log_text(megatron_log(args, times, [100.0] * 10), path), Window(), 4)


def test_two_unregistered_models_of_different_depth_get_no_efficiency_against_each_other():
    """Two runs of one unregistered architecture at two depths (e.g. 4 layers on 8 nodes, 8 layers on 16 nodes) are
    two models: the deeper run's row had an "efficiency" against the shallower baseline; a row of the baseline's depth
    still has one."""
    layers = random.randint(2, 8)
    shallow, deep, same = _qwen3_row(8, layers, "shallow.log"), _qwen3_row(16, 2 * layers, "deep.log"), \
        _qwen3_row(16, layers, "same.log")
    assert shallow.model == deep.model == "unregistered model"
    rows, baseline = with_efficiency([shallow, deep, same])
    assert baseline.log == "shallow.log"
    by_log = {row.log: row for row in rows}
    assert by_log["deep.log"].efficiency is None
    assert by_log["same.log"].efficiency == same.tokens_per_s_per_gpu / shallow.tokens_per_s_per_gpu


def test_csv_keeps_its_columns():
    """The key that tells models apart is no CSV column."""
    row = _row(FROM_FLAGS, 1, random.uniform(5000, 7000), "a.log")
    assert format_csv([row], None, Window()).splitlines()[0].split(",") == CSV_FIELDS
    assert "model_key" not in CSV_FIELDS


def _resumed_log(args: dict, start: int, total: int) -> str:
    """A log of a run resumed from a checkpoint at iteration ``start - 1``: its lines are ``start..total``."""
    times = [round(random.uniform(70_000, 80_000), 1) for _ in range(start, total + 1)]  # a plausible MFU
    text = megatron_log({**args, "train_iters": total}, times, [100.0] * len(times), total=total)
    for old, new in zip(range(1, total + 1), range(start, total + 1), strict=False):
        text = text.replace(f"iteration {old:8d}/", f"iteration #{new:8d}/", 1)
    return text.replace("iteration #", "iteration ") + "[after training is done] datetime: 2026-10-19 12:00:00\n"


def test_a_resumed_run_that_starts_after_the_window_says_so():
    """A log of a run resumed at iteration 31 read with the default window 3-10 blamed the log interval."""
    start = random.randint(20, 40)
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    log = parse_log_text(_resumed_log(args, start, start + 9))
    assert log.runs[-1].start == start
    row = summarise(log, Window(), 4)
    assert not row.ok and "log interval" not in row.status
    assert f"begins at iteration {start}" in row.status


@pytest.mark.parametrize("interval", [1, 5])
def test_a_resumed_runs_window_advice_leaves_out_its_warm_up_and_gives_a_row(interval):
    """The advice for a resumed run names a window that starts two iterations after the restart (as 3-10 does after
    iteration 1) and that the table then reads without complaint."""
    start = random.randint(21, 39)
    total = start + 30
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "log_interval": interval})
    # megatron prints the run's first iteration, then every multiple of the interval
    kept = [line for line in _resumed_log(args, start, total).splitlines(keepends=True)
            if (found := re.search(r"iteration\s+(\d+)/", line)) is None
            or int(found[1]) == start or int(found[1]) % interval == 0]
    log = parse_log_text("".join(kept))
    status = summarise(log, Window(), 4).status
    # interval 1: iterations start, start+1 are the warm-up; interval 5: the line at the first multiple of 5 after
    # the start averages from the start, so the next interval is the first without it
    first = start + 2 if interval == 1 else 5 * (start // 5 + 1) + 1
    last = first + 7 if interval == 1 else first + 4
    assert f"e.g. --window {first}-{last}," in status, status
    assert summarise(log, Window(first, last), 4).ok


def _cells(markdown_row: str) -> list[str]:
    """The cells of a markdown table row, ``\\|`` being a pipe inside a cell."""
    return [cell.strip() for cell in markdown_row.replace("\\|", "\0").strip().strip("|").split("|")]


def test_a_pipe_in_a_crash_message_or_path_stays_in_its_cell():
    """A hybrid layer pattern marks pipeline stages with ``|``; a crash message quoting one (or a log path with a
    pipe) split the row into more cells than the header has, shifting the status into no column."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    stages = "|".join("GEGE" for _ in range(random.randint(2, 4)))  # short enough to be shown whole
    crash = f"Traceback (most recent call last):\nValueError: hybrid layer pattern '{stages}' is not periodic\n"
    times = [round(random.uniform(900, 1100), 1) for _ in range(5)]
    row = summarise(parse_log_text(megatron_log(args, times, [100.0] * 5, tail=crash), "runs|a.log"), Window(), 4)
    assert stages in row.status
    table = format_markdown([row], None, Window()).splitlines()
    assert len(_cells(table[2])) == len(_cells(table[0]))
    assert _cells(table[2])[-2:] == ["runs\0a.log", row.status.replace("|", "\0")]


@pytest.mark.parametrize("garbled", ["{}[rank3]: W1019 12:00:00", "[{}, {}]"])
def test_a_garbled_architecture_argument_is_an_unknown_model_not_a_traceback(garbled, tmp_path, capsys):
    """Another rank's output cut into the block's ``moe_shared_expert_intermediate_size``: the card rebuilt from the
    flags carried the text, and the FLOP count raised a TypeError out of ``oellm table`` (every row lost)."""
    width = random.choice([256, 512, 1024])
    value = garbled.format(width, width)
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, **FROM_FLAGS,
                                                           "moe_shared_expert_intermediate_size": value})
    times = [round(random.uniform(70000, 80000), 1) for _ in range(10)]
    tflops = [round(random.uniform(120, 140), 1) for _ in range(10)]
    path = tmp_path / "garbled.log"
    path.write_text(megatron_log(args, times, tflops))
    row = summarise(read_log(path), Window(), 4)
    assert row.ok and row.model == "unknown model" and row.tflops_per_gpu is None
    flops = [rate * ms for rate, ms in zip(tflops[2:], times[2:], strict=True)]
    assert row.tflops_per_gpu_logged == pytest.approx(statistics.median(flops) / statistics.median(times[2:]))
    assert main(["table", str(path), "--format", "csv"]) == 0
    assert "unknown model" in capsys.readouterr().out


@pytest.mark.parametrize("overrides, name", [
    ({"num_experts": 32}, "qwen3.5-35b-a3b, 32 experts"),
    ({"num_experts": 32, "num_layers": 8, "hybrid_layer_pattern": "GEGEGE*E"}, "qwen3.5-35b-a3b-proxy-4L, 32 experts"),
    ({"num_experts": 32, "hidden_size": 1000}, "unregistered model (qwen3.5-35b-a3b but hidden_size 1000, num_experts 32)"),
])
def test_a_local_fit_with_fewer_experts_is_named_after_its_card(overrides, name):
    """``oellm recipe --local`` runs a recipe's card with ``[local] num_experts`` experts: its table row said
    ``unregistered model``; it now names the card, the depth of a proxy and the expert count. Another change (the
    hidden size) is still no registry card's."""
    row = _row({**overrides, **FROM_FLAGS}, 1, random.uniform(5000, 7000), "local.log")
    assert row.ok and row.model == name


def test_a_mean_tables_footnote_says_how_each_column_is_averaged():
    """The footnote says that the Megatron column is summarised like the step time (the logged FLOPs per iteration
    over it), and a mean table's that the reports' mean rows average the rates instead, which a median table's does
    not need to."""
    args, times, text = _qwen3_5_log()
    log = parse_log_text(text, "8n.log")
    sentence = "The reports' mean rows give the mean of the logged rates"
    for statistic in ("mean", "median"):
        window = Window.parse("3-10", statistic)
        row = summarise(log, window, 4)
        assert row.ok
        footnote = format_markdown([row], row, window)
        assert "as FLOPs per iteration (rate x iteration time), summarised like the step time" in footnote
        assert (sentence in footnote) is (statistic == "mean")
