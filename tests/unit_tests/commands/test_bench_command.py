"""``oellm bench`` argument parsing, configuration checks and the refusal without CUDA (CPU)."""

import argparse
import json
import random
from pathlib import Path

import pytest
import torch

from megatron.oellm.bench.harness import BenchConfig
from megatron.oellm.bench.sides import BEST_OURS_SETTINGS
from megatron.oellm.cli import INTERRUPTED_EXIT_STATUS, build_parser, main
from megatron.oellm.commands import bench
from tests.unit_tests.commands.bench_helpers import ours_report


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


def test_defaults() -> None:
    args = parse()
    assert args.model == "qwen3.5-35b-a3b-proxy-4L" and args.seq_length == 4096
    assert args.mbs == (1, 2, 4, 8) and (args.warmup, args.steps) == (3, 10)
    assert args.sides == ("ours", "hf") and args.profile is None and not args.json
    assert args.gpu is None  # the benchmarked GPU's own peak
    assert bench.ours_overrides(args) == BEST_OURS_SETTINGS


def test_lists_and_overrides_are_parsed() -> None:
    args = parse("--mbs", "4,1,2", "--sides", "hf", "--ours-config", "moe_token_dispatcher_type=allgather",
                 "--ours-config", "bias_activation_fusion=False", "--ours-config", "recompute_num_layers=2",
                 "--profile", "prof", "--json")
    assert args.mbs == (4, 1, 2) and args.sides == ("hf",) and args.profile == Path("prof") and args.json
    overrides = bench.ours_overrides(args)
    assert overrides["moe_token_dispatcher_type"] == "allgather"
    assert overrides["bias_activation_fusion"] is False and overrides["recompute_num_layers"] == 2
    assert overrides["cross_entropy_loss_fusion"] is True  # best settings kept underneath


def test_the_te_side_is_parsed_in_the_order_given_and_not_a_default() -> None:
    assert parse("--sides", "te,ours,te").sides == ("te", "ours")
    assert "te" not in parse().sides  # the default does not follow whether Transformer Engine is installed


def test_plain_ours_drops_the_best_settings() -> None:
    args = parse("--plain-ours", "--ours-config", "moe_token_dispatcher_type=allgather")
    assert bench.ours_overrides(args) == {"moe_token_dispatcher_type": "allgather"}


@pytest.mark.parametrize("argv", [["--mbs", "1,x"], ["--mbs", "0,2"], ["--mbs", ""], ["--sides", "ours,tf"],
                                  ["--ours-config", "no_equals_sign"], ["--ours-config", "=3"]])
def test_bad_values_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse(*argv)
    assert exit_info.value.code == 2
    assert "oellm bench: error: argument" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "bad", "least"), [("--seq-length", "1", "2"), ("--seq-length", "-4096", "2"),
                                                   ("--warmup", "0", "1"), ("--steps", "0", "1"),
                                                   ("--steps", "-3", "1"), ("--warmup", "2.5", "1")])
def test_counts_below_their_minimum_are_usage_errors_naming_the_flag(flag: str, bad: str, least: str,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """``--warmup 0`` (and a too short ``--seq-length``, ``--steps 0``) got past argparse and was refused by
    BenchConfig as ``need warmup >= 1 ...``, naming the field, not the flag; now argparse names the flag."""
    with pytest.raises(SystemExit) as exit_info:
        parse(flag, bad)
    assert exit_info.value.code == 2
    assert f"oellm bench: error: argument {flag}: expected a" in capsys.readouterr().err
    assert getattr(parse(flag, least), flag[2:].replace("-", "_")) == int(least)


def test_refuses_without_cuda(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The refusal is on stderr as ``oellm bench: error: ...`` (the form of flops/recipe/table); stdout, which a
    ``--json`` user redirects to a file, stays empty."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "--mbs", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("oellm bench: error: needs a CUDA GPU")


@pytest.mark.parametrize(("device", "argv", "gpu"), [("NVIDIA H100 PCIe", [], "h100-pcie"),
                                                     ("NVIDIA H200", [], "h200-sxm"),
                                                     ("NVIDIA H100 PCIe", ["--gpu", "h100-sxm"], "h100-sxm")])
def test_mfu_peak_is_the_gpus_own_unless_given(device: str, argv: list[str], gpu: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron.oellm.bench import harness

    configs = []

    def capture(config: BenchConfig):
        configs.append(config)
        raise KeyboardInterrupt  # stop before any GPU work

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: device)
    monkeypatch.setattr(harness, "run_benchmark", capture)
    assert main(["bench", "--mbs", "1", *argv]) == INTERRUPTED_EXIT_STATUS
    assert configs[0].gpu == gpu


@pytest.mark.parametrize("outcome", ["interrupted", "error"])
def test_the_runtime_is_shut_down_after_the_measurements(outcome: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's one-rank NCCL group is destroyed before the process exits, also when the measurements fail or are
    interrupted (a finished report needs a GPU; the GPU test covers it)."""
    from megatron.oellm import runtime
    from megatron.oellm.bench import harness

    events = []

    def measure(config: BenchConfig):
        events.append("measured")
        if outcome == "error":
            raise RuntimeError("a side failed")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    monkeypatch.setattr(harness, "run_benchmark", measure)
    monkeypatch.setattr(runtime, "shutdown_single_gpu_runtime", lambda: events.append("shut down"))
    if outcome == "error":
        with pytest.raises(RuntimeError):
            main(["bench", "--mbs", "1"])
    else:
        assert main(["bench", "--mbs", "1"]) == INTERRUPTED_EXIT_STATUS
    assert events == ["measured", "shut down"]


def test_unknown_gpu_without_a_peak_option_is_measured_all_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """It was refused (MFU is n/a there: tests/unit_tests/bench/test_bench_peak_of_an_unknown_gpu.py)."""
    from megatron.oellm.bench import harness

    configs = []

    def capture(config: BenchConfig):
        configs.append(config)
        raise KeyboardInterrupt  # stop before any GPU work

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA B200")
    monkeypatch.setattr(harness, "run_benchmark", capture)
    assert main(["bench", "--mbs", "1"]) == INTERRUPTED_EXIT_STATUS
    assert configs[0].gpu is None and configs[0].mfu_peak() is None


@pytest.mark.parametrize("kind", ["directory", "read-only folder", "file in the way"])
def test_an_output_the_report_cannot_be_written_to_is_refused_before_the_gpu_work(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The bench runs for minutes; an --output it could not write at the end is refused before it starts."""
    from megatron.oellm.bench import harness

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    monkeypatch.setattr(harness, "run_benchmark", lambda config: pytest.fail("the GPU work started"))
    if kind == "directory":
        output = tmp_path
    elif kind == "read-only folder":
        (tmp_path / "ro").mkdir()
        monkeypatch.setattr("os.access", lambda path, mode: Path(path) != tmp_path / "ro")
        output = tmp_path / "ro" / "report.json"
    else:
        (tmp_path / "plain").write_text("a file where a folder should be")
        output = tmp_path / "plain" / "report.json"
    assert main(["bench", "--mbs", "1", "--output", str(output)]) == 2
    assert f"--output {output}" in capsys.readouterr().err


def test_config_rejects_cards_transformers_cannot_mirror_and_bad_values() -> None:
    with pytest.raises(ValueError, match="qwen3.5-35b-a3b flavour"):
        BenchConfig(model="qwen3-30b-a3b-proxy-2L")
    with pytest.raises(ValueError, match="unknown sides"):
        BenchConfig(sides=("ours", "deepspeed"))
    with pytest.raises(ValueError, match="warmup"):
        BenchConfig(warmup=0)
    with pytest.raises(ValueError, match="steps >= 1, got 3 and 0"):
        BenchConfig(steps=0)
    with pytest.raises(ValueError, match="seq_length"):
        BenchConfig(seq_length=1)
    assert BenchConfig(model="qwen3.5-35b-a3b-tiny", seq_length=128).mbs == (1, 2, 4, 8)


def test_report_prints_table_and_ratio_and_is_json(capsys: pytest.CaptureFixture) -> None:
    from dataclasses import asdict

    from megatron.oellm.bench.harness import BenchReport
    from megatron.oellm.bench.measure import Measurement, StepTimes, summary, throughput

    config = BenchConfig()
    results = [throughput("ours", 2, 4096, StepTimes((100.0, 110.0, 90.0), 40 * 2**30, 12.4), 4.6e9, 989.0),
               Measurement("ours", 4, "oom", 4 * 4096),
               throughput("hf", 1, 4096, StepTimes((150.0,), 30 * 2**30, 12.4), 4.6e9, 989.0)]
    report = BenchReport(config={**asdict(config), "profile_dir": None}, device="GPU", flops_per_token=4.6e9,
                         peak_tflops=989.0, settings={"ours": {"backend": "torch"}, "hf": {}}, results=results,
                         summary=summary(results, config.sides))
    bench.print_report(report)
    out = capsys.readouterr().out
    ratio = (2 * 4096 / 0.1) / (4096 / 0.15)
    assert f"ours / hf = {ratio:.2f}x" in out and "oom" in out
    assert json.loads(json.dumps(report.to_dict()))["summary"]["best_hf"]["mbs"] == 1


def test_report_prints_one_ratio_line_per_pair_that_measured(capsys: pytest.CaptureFixture) -> None:
    from megatron.oellm.bench.measure import Measurement, StepTimes, summary, throughput

    results = [throughput("ours", 2, 4096, StepTimes((100.0,), 2**30, 12.4), 4.6e9, 989.0),
               throughput("te", 4, 4096, StepTimes((160.0,), 2**30, 12.4), 4.6e9, 989.0),
               Measurement("hf", 1, "oom", 4096)]
    bench.print_ratios(summary(results, ["ours", "te", "hf"]))
    lines = capsys.readouterr().out.strip().splitlines()
    ratio = (2 * 4096 / 0.1) / (4 * 4096 / 0.16)
    assert lines == [f"best MBS: ours 2 ({2 * 4096 / 0.1:,.0f} tokens/s), te 4 ({4 * 4096 / 0.16:,.0f} tokens/s): "
                     f"ours / te = {ratio:.2f}x"]  # hf measured nothing: no ratio against it


def test_a_report_file_that_cannot_be_written_keeps_the_printed_figures(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture,
                                                                        tmp_path) -> None:
    """The figures are printed before the ``--output`` file is written: a write failing after the run (a full disk,
    a lost quota) is one error line with exit status 1, and the table is on stdout instead of lost to a traceback."""
    from pathlib import Path

    from megatron.oellm import runtime
    from megatron.oellm.bench import harness

    step_ms = random.uniform(80.0, 120.0)
    report = ours_report(step_ms)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    monkeypatch.setattr(harness, "run_benchmark", lambda config: report)
    monkeypatch.setattr(runtime, "shutdown_single_gpu_runtime", lambda: None)

    def disk_full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", disk_full)
    assert main(["bench", "--sides", "ours", "--mbs", "1", "--output", str(tmp_path / "report.json")]) == 1
    captured = capsys.readouterr()
    assert f"{4096 / (step_ms / 1000):,.0f}" in captured.out
    assert captured.err.count("\n") == 1 and "No space left on device" in captured.err


def test_a_refused_run_creates_no_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture) -> None:
    """On a node without a GPU the bench refuses to start; the folders its --output and --profile would need are
    checked there but made only once the run starts, so a refused run leaves no empty folders behind."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    output = tmp_path / "reports" / f"run-{random.randint(0, 999)}" / "bench.json"
    profile = tmp_path / "profiles" / "deep"
    assert main(["bench", "--mbs", "1", "--output", str(output), "--profile", str(profile)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == []


def test_the_folders_are_made_when_the_run_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once nothing refuses the run, the missing folders of --output and --profile exist before the GPU work, so
    the profile tables and the report can be written into them."""
    from megatron.oellm.bench import harness

    output = tmp_path / "reports" / "bench.json"
    profile = tmp_path / "profiles" / "deep"
    seen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")

    def measure(config: BenchConfig):
        seen.append((output.parent.is_dir(), profile.is_dir()))
        raise KeyboardInterrupt

    monkeypatch.setattr(harness, "run_benchmark", measure)
    assert main(["bench", "--mbs", "1", "--output", str(output), "--profile", str(profile)]) == INTERRUPTED_EXIT_STATUS
    assert seen == [(True, True)]


def test_a_folder_that_cannot_be_made_names_the_read_only_ancestor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """A report two folders below a read-only one is refused before the run, naming the folder that lacks the
    permission (the one the user has to fix), not only the file."""
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr("os.access", lambda path, mode: Path(path) != locked)
    output = locked / "a" / "b" / "bench.json"
    assert main(["bench", "--mbs", "1", "--output", str(output)]) == 2
    assert f"--output {output}: its folder cannot be created (no write permission in {locked})" in \
        capsys.readouterr().err
    assert list(locked.iterdir()) == []
