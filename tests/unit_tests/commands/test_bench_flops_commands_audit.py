"""Gaps a mutation audit of ``oellm bench`` and ``oellm flops`` found: the profile lines and settings of the bench
report, a read-only report file, and the table, the parsing and the peak note of ``oellm flops`` (CPU: the bench's
GPU work is a report built by hand)."""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from megatron.oellm import cli
from megatron.oellm.bench.harness import BenchConfig, BenchReport
from megatron.oellm.bench.measure import StepTimes, summary, throughput
from megatron.oellm.cards import get_card
from megatron.oellm.commands import bench
from megatron.oellm.flops import pad_vocab, training_flops_per_token
from megatron.oellm.peaks import GPU_PEAKS


def _report(**fields) -> BenchReport:
    """A one-side bench report of fresh figures, with ``fields`` over it."""
    config = BenchConfig(sides=("ours",))
    results = [throughput("ours", 1, 4096, StepTimes((random.uniform(80, 120),), 2**30, 12.0), 4.6e9, 989.0)]
    return BenchReport(**{"config": {**asdict(config), "gpu": "h200-sxm", "profile_dir": None}, "device": "GPU",
                          "flops_per_token": 4.6e9, "peak_tflops": 989.0, "settings": {"ours": {}},
                          "results": results, "summary": summary(results, config.sides), **fields})


def test_the_profile_lines_give_each_kernels_share_in_percent_and_at_most_fifteen(capsys) -> None:
    """The top-kernel lines under the table: share of the CUDA time as a percentage (the report holds a fraction),
    milliseconds, calls and the name, for the 15 kernels with the most time."""
    shares = sorted((random.uniform(0.001, 0.05) for _ in range(20)), reverse=True)
    kernels = [{"share": share, "cuda_ms": random.uniform(1, 500), "calls": random.randint(1, 999),
                "name": f"kernel_{number}"} for number, share in enumerate(shares)]
    bench.print_report(_report(profiles={"ours": kernels}))
    out = capsys.readouterr().out
    lines = out.split("top CUDA time, ours (one step at its best MBS):\n")[1].splitlines()
    assert len(lines) == 15
    for line, kernel in zip(lines, kernels[:15], strict=True):
        assert line == (f"  {100 * kernel['share']:5.1f} %  {kernel['cuda_ms']:8.2f} ms  {kernel['calls']:5d}x  "
                        f"{kernel['name']}")


def test_each_sides_settings_are_printed_as_json(capsys) -> None:
    """The settings line of each side (what the figures were measured with) is printed as sorted JSON."""
    settings = {"ours": {"moe_token_dispatcher_type": random.choice(["alltoall", "allgather"]),
                         "recompute_num_layers": random.randint(1, 8)}}
    bench.print_report(_report(settings=settings))
    assert f"ours         {json.dumps(settings['ours'], sort_keys=True)}\n" in capsys.readouterr().out


def test_a_read_only_report_file_is_refused_before_the_gpu_work(tmp_path: Path, monkeypatch, capsys) -> None:
    """An existing ``--output`` file without write permission (its folder writable) would lose the report only after
    the minutes of GPU work: exit status 2 naming it, before the benchmark starts."""
    from megatron.oellm.bench import harness

    output = tmp_path / f"report-{random.randint(0, 999)}.json"
    output.write_text("{}")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    monkeypatch.setattr(harness, "run_benchmark", lambda config: pytest.fail("the GPU work started"))
    monkeypatch.setattr("os.access", lambda path, mode: Path(path) != output)
    assert cli.main(["bench", "--mbs", "1", "--output", str(output)]) == 2
    assert f"--output {output} cannot be written (no write permission)" in capsys.readouterr().err


ARGV = ["flops", "qwen3-30b-a3b"]


def test_the_flops_table_gives_each_components_share_in_percent(capsys) -> None:
    """Each component row: its GFLOP/token and its share of the total in percent; the shares add up to 100."""
    seq_length = random.choice([1024, 2048, 4096, 8192])
    assert cli.main([*ARGV, "--seq-length", str(seq_length)]) == 0
    lines = capsys.readouterr().out.splitlines()
    count = training_flops_per_token(get_card("qwen3-30b-a3b"), seq_length, pad_vocab(get_card("qwen3-30b-a3b")
                                                                                          .vocab_size))
    total = count.gflops_per_token
    for name, value in count.gflops_breakdown().items():
        assert f"{name:<26}{value:>14.4f}{100 * value / total:>8.1f}%" in lines
    shares = [float(line[-7:-1]) for line in lines[lines.index(next(line for line in lines
                                                                if line.startswith("component"))) + 1:-1]]
    assert sum(shares) == pytest.approx(100, abs=0.1 * len(shares))


def test_the_flops_table_counts_the_packed_documents(capsys) -> None:
    """The header says how many documents one sequence packs: one without ``--document-lengths``, else theirs."""
    lengths = [random.randint(1, 512) for _ in range(random.randint(2, 6))]
    assert cli.main([*ARGV, "--seq-length", str(sum(lengths)), "--document-lengths", *map(str, lengths)]) == 0
    assert f"  documents {len(lengths)}  mode corrected" in capsys.readouterr().out.splitlines()[0]
    assert cli.main([*ARGV, "--seq-length", "4096"]) == 0
    assert "  documents 1  mode corrected" in capsys.readouterr().out.splitlines()[0]


def test_megatrons_difference_to_the_corrected_count_has_its_sign(capsys) -> None:
    """``corrected count X GFLOP/token: Megatron's is +Y%``: Y is Megatron's total over the corrected one, minus 1."""
    assert cli.main([*ARGV, "--seq-length", str(random.choice([2048, 4096])), "--megatron-compatible", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    megatron, corrected = report["gflops_per_token"], report["corrected_gflops_per_token"]
    assert cli.main([*ARGV, "--seq-length", str(report["seq_length"]), "--megatron-compatible"]) == 0
    table = capsys.readouterr().out
    assert f"corrected count {corrected:.4f} GFLOP/token: Megatron's is {100 * (megatron / corrected - 1):+.1f}%" \
        in table
    assert "Megatron flags changed from the card's: none" in table


def test_the_megatron_flags_a_count_changed_are_listed(capsys) -> None:
    """The table names the ``--megatron-flag`` overrides that the Megatron count used."""
    layers = random.randint(2, 40)
    assert cli.main([*ARGV, "--seq-length", "4096", "--megatron-compatible", "--megatron-flag",
                     f"num-layers={layers}"]) == 0
    assert f"Megatron flags changed from the card's: {{'num-layers': {layers}}}" in capsys.readouterr().out


@pytest.mark.parametrize("word", ["TRUE", "False", "NONE"])
def test_a_megatron_flag_word_is_read_whatever_its_case(word, capsys) -> None:
    """``true`` / ``false`` / ``none`` in any case are a switch's value or a dropped flag, not a string."""
    from megatron.oellm.commands.flops import parse_flag_overrides

    assert parse_flag_overrides([f"group-query-attention={word}"]) == {
        "group-query-attention": {"true": True, "false": False, "none": None}[word.lower()]}


def test_a_megatron_flag_without_a_name_is_one_error_line(capsys) -> None:
    """``--megatron-flag =4`` names no flag: one error line asking for NAME=VALUE, exit status 2."""
    value = random.randint(1, 99)
    assert cli.main([*ARGV, "--seq-length", "4096", "--megatron-compatible", "--megatron-flag", f"={value}"]) == 2
    assert capsys.readouterr().err == (f"oellm flops: error: --megatron-flag '={value}': write NAME=VALUE, e.g. "
                                       "group-query-attention=false\n")


def test_the_peak_note_is_the_gpus_own_and_left_out_for_a_given_peak(capsys) -> None:
    """A GPU whose peak has a note (the GH200's power cap) prints it under the MFU; a ``--peak-tflops`` given by hand
    is not that GPU's peak, so its note is left out."""
    gpu = random.choice([name for name, peak in GPU_PEAKS.items() if peak.note])
    argv = [*ARGV, "--seq-length", "4096", "--tokens-per-second-per-gpu", str(random.randint(1000, 9000)), "--gpu", gpu]
    assert cli.main(argv) == 0
    assert f"note: {GPU_PEAKS[gpu].note}" in capsys.readouterr().out
    assert cli.main([*argv, "--peak-tflops", f"{random.uniform(200, 2000):.1f}"]) == 0
    out = capsys.readouterr().out
    assert "note:" not in out and "MFU" in out


def test_the_throughput_line_gives_tokens_per_second_as_measured(capsys) -> None:
    """The MFU line starts with the throughput given, in tokens/s/GPU, then the TFLOP/s it makes."""
    tokens = random.randint(1000, 20000)
    assert cli.main([*ARGV, "--seq-length", "4096", "--tokens-per-second-per-gpu", str(tokens), "--json"]) == 0
    tflops = json.loads(capsys.readouterr().out)["tflops_per_gpu"]
    assert cli.main([*ARGV, "--seq-length", "4096", "--tokens-per-second-per-gpu", str(tokens)]) == 0
    assert f"{tokens:,.0f} tokens/s/GPU -> {tflops:.1f} TFLOP/s/GPU, MFU" in capsys.readouterr().out


def test_megatrons_count_takes_the_packed_documents(capsys) -> None:
    """``--megatron-compatible --document-lengths``: Megatron's count is that of the packed documents (its THD sum of
    squared lengths), not of one sequence of their total length."""
    from megatron.oellm.flops import megatron_flops_per_token

    card = get_card("qwen3-30b-a3b")
    lengths = [random.randint(64, 1024) for _ in range(random.randint(2, 5))]
    argv = [*ARGV, "--seq-length", str(sum(lengths)), "--megatron-compatible", "--json"]
    assert cli.main([*argv, "--document-lengths", *map(str, lengths)]) == 0
    packed = json.loads(capsys.readouterr().out)["gflops_per_token"]
    assert packed == pytest.approx(megatron_flops_per_token(card, sum(lengths), pad_vocab(card.vocab_size),
                                                            lengths) / 1e9)
    assert cli.main(argv) == 0
    assert packed < json.loads(capsys.readouterr().out)["gflops_per_token"]
