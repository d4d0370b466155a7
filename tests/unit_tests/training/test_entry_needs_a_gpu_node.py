"""On a CPU machine (a login node) the training entry refused every command line as "megatron's argument validation
refuses the command line: Torch not compiled with CUDA enabled" (megatron's ``validate_args`` asks the GPU), hiding
the refusal that mattered. It now says, in one line, that it needs a GPU node and which command checks a command
line on a login node; its checks that need no GPU still come first."""

from __future__ import annotations

import random

import pytest
import torch

from megatron.oellm.training.entry import CPU_CHECK, check_gpu_node
from tests.unit_tests.training.entry_helpers import entry_up_to_pretrain, one_error_line

CARD = "qwen3-30b-a3b-tiny"


def _entry_on_a_cpu_node(monkeypatch: pytest.MonkeyPatch, cuda_build: str | None):
    """The entry up to ``pretrain`` with its GPU check in place, on a node where torch sees no GPU (``cuda_build``:
    torch's CUDA version, None for a CPU build), and megatron's validation failing as it does there."""
    import megatron.training.arguments

    entry = entry_up_to_pretrain(monkeypatch)
    monkeypatch.setattr(entry, "check_gpu_node", check_gpu_node)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", cuda_build)

    def cpu_validation(**_kwargs):
        raise AssertionError("Torch not compiled with CUDA enabled")

    monkeypatch.setattr(megatron.training.arguments, "parse_and_validate_args", cpu_validation)
    return entry


@pytest.mark.parametrize("cuda_build", [None, "13.0"])
def test_no_gpu_is_one_line_naming_the_login_node_check(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str],
                                                        cuda_build: str | None) -> None:
    entry = _entry_on_a_cpu_node(monkeypatch, cuda_build)
    argv = ["--oellm-model", CARD, "--oellm-backend", "torch", "--mock-data",
            "--seq-length", str(random.choice([32, 64, 128]))]
    assert entry.main(argv) == 2
    line = one_error_line(capsys)
    assert "needs a GPU node" in line and f"`{CPU_CHECK}`" in line, line
    assert "the checks that follow megatron's validation (data paths, batch grid, parallel sizes, --save) did not run" \
        in line  # a login node's silence on them is no pass
    assert "Torch not compiled with CUDA enabled" not in line and "argument validation" not in line
    assert ("a CPU build of torch" in line) == (cuda_build is None)
    assert ("CUDA_VISIBLE_DEVICES" in line) == (cuda_build is not None)


def test_the_checks_before_validation_still_refuse_first(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A command line the entry refuses without a GPU (here a sequence longer than the card's positions) is refused
    for that on a CPU node too."""
    from megatron.oellm.cards import get_card

    entry = _entry_on_a_cpu_node(monkeypatch, None)
    seq = get_card(CARD).max_position_embeddings + random.randint(1, 4096)
    assert entry.main(["--oellm-model", CARD, "--oellm-backend", "torch", "--mock-data", "--seq-length", str(seq)]) == 2
    line = one_error_line(capsys)
    assert f"--seq-length {seq} exceeds" in line and "GPU node" not in line


def test_a_gpu_node_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    check_gpu_node()
