"""``oellm bench`` inputs that only failed, or misled, after the GPU work (CPU: CUDA and the benchmark are faked):
a sequence longer than the card's positions, and an ``--output`` file that ``--profile`` turns into a folder."""

from pathlib import Path

import pytest
import torch

from megatron.oellm.bench import harness
from megatron.oellm.cards import get_card
from megatron.oellm.cli import main

TINY = "qwen3.5-35b-a3b-tiny"


class GpuWorkStarted(Exception):
    """Raised where the benchmark's GPU work would start."""


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> list[harness.BenchConfig]:
    """An H200 whose benchmark only records its configuration and stops where the GPU work would start."""
    configs: list[harness.BenchConfig] = []

    def capture(config: harness.BenchConfig) -> None:
        configs.append(config)
        raise GpuWorkStarted

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    monkeypatch.setattr(harness, "run_benchmark", capture)
    return configs


def test_a_sequence_longer_than_the_cards_positions_is_refused_before_the_gpu_work(
        fake_gpu: list, capsys: pytest.CaptureFixture) -> None:
    """The tiny card holds 1024 positions and the bench's default length is 4096: the bench timed a length that
    megatron's ``validate_args`` (and ``oellm`` training) refuse, with nothing said (RoPE takes any position)."""
    limit = get_card(TINY).max_position_embeddings
    with pytest.raises(ValueError, match=f"--seq-length {limit + 1} exceeds {TINY}'s max_position_embeddings {limit}"):
        harness.BenchConfig(model=TINY, seq_length=limit + 1)
    assert harness.BenchConfig(model=TINY, seq_length=limit).seq_length == limit
    assert main(["bench", "--model", TINY, "--mbs", "1"]) == 2  # the default --seq-length 4096
    err = capsys.readouterr().err
    assert err.startswith("oellm bench: error: ") and "--seq-length 4096" in err and str(limit) in err
    assert len(err.strip().splitlines()) == 1 and not fake_gpu


@pytest.mark.parametrize("layout", ["same path", "output above the profile folder"])
def test_an_output_that_the_profile_folder_would_be_is_refused_before_the_gpu_work(
        layout: str, tmp_path: Path, fake_gpu: list, capsys: pytest.CaptureFixture) -> None:
    """``--output`` was checked before ``--profile`` created its folder: ``--output X --profile X`` passed both
    checks, and at the end of the run writing the report to the folder X raised ``IsADirectoryError`` before the
    table was printed, losing every figure of the run."""
    output = tmp_path / "bench"
    profile = output if layout == "same path" else output / "prof"
    status = main(["bench", "--model", TINY, "--seq-length", "128", "--mbs", "1", "--output", str(output),
                   "--profile", str(profile)])
    assert status == 2 and not fake_gpu
    assert f"oellm bench: error: --output {output} is a directory" in capsys.readouterr().err


def test_a_report_file_inside_the_profile_folder_is_accepted(tmp_path: Path, fake_gpu: list) -> None:
    profile = tmp_path / "bench"
    with pytest.raises(GpuWorkStarted):
        main(["bench", "--model", TINY, "--seq-length", "128", "--mbs", "1", "--output", str(profile / "r.json"),
              "--profile", str(profile)])
    assert profile.is_dir() and fake_gpu[0].profile_dir == profile
