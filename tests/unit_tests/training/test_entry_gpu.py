"""End to end on one GPU: the training entry under torchrun on the tiny Qwen3.5 card (torch backend).

Mock data, then a real byte-tokenized corpus with a torch_dist checkpoint, then a resume from that checkpoint:
the loss falls on both data sets, every log interval has a parseable [oellm] line, and the resumed run starts
after the saved iteration. And a Hugging Face checkpoint converted by ``oellm convert hf-to-mcore``, loaded with
``--load`` as the convert README says.
"""

import math
import os
import re
import subprocess
import sys

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from megatron.oellm.training.corpus import build_corpus, stdlib_sources
from megatron.oellm.training.tokenizer import BYTE_TOKENIZER_FLAGS
from tests.unit_tests.training.entry_helpers import GPU_ENTRY_RUN
from tests.unit_tests.training.throughput_lines import parse_throughput_line

_LOSS = re.compile(r" iteration\s+(\d+)/\s*\d+ \|.* lm loss: ([0-9.E+-]+) \|")


def run_entry(extra: list[str], tmp_path) -> tuple[dict[int, float], list]:
    """Run the entry with torchrun on one GPU; return iteration -> lm loss and the [oellm] lines."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
               "-m", "megatron.oellm.training.entry", *GPU_ENTRY_RUN, *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    # the router records only the global aux loss: megatron's phantom load_balancing_loss 0 must not be logged
    log_lines = [line for line in output.splitlines() if _LOSS.search(line)]
    assert all("global_load_balancing_loss:" in line and " load_balancing_loss:" not in line for line in log_lines)
    losses = {int(m[1]): float(m[2]) for m in _LOSS.finditer(output)}
    lines = [t for t in map(parse_throughput_line, output.splitlines()) if t is not None]
    assert_one_basis_line_first(output.splitlines())
    return losses, lines


def assert_one_basis_line_first(output: list[str]) -> None:
    """The run's ``[oellm] throughput basis:`` line is printed once, before megatron's first iteration line, and
    names the peak ``oellm table`` reads back: this GPU's, or n/a on a GPU without a known peak."""
    import torch

    from megatron.oellm.training.throughput import device_peak_tflops, parse_basis

    basis_at = [at for at, line in enumerate(output) if parse_basis(line) is not None]
    first_iteration_at = next(at for at, line in enumerate(output) if _LOSS.search(line))
    assert len(basis_at) == 1 and basis_at[0] < first_iteration_at, basis_at
    assert parse_basis(output[basis_at[0]]).tflops == device_peak_tflops(torch.cuda.get_device_name(), "bf16")


def assert_learns(losses: dict[int, float], lines: list, iterations: int) -> None:
    assert sorted(losses) == list(range(1, iterations + 1))
    first, last = [losses[i] for i in range(1, 4)], [losses[i] for i in range(iterations - 2, iterations + 1)]
    assert sum(last) / 3 < 0.8 * sum(first) / 3, losses
    assert [t.iteration for t in lines] == list(range(1, iterations + 1))
    # the tiny card's TFLOP/s round to 0.00 in the log line; tokens/s are what this run can check
    assert all(t.tokens_per_s_per_gpu > 0 and t.tflops_per_gpu >= 0 for t in lines)


@pytest.mark.gpu
def test_mock_then_corpus_then_resume(tmp_path):
    losses, lines = run_entry(["--mock-data", "--tokenizer-type", "NullTokenizer", "--train-iters", "30"], tmp_path)
    assert_learns(losses, lines, 30)

    prefix = tmp_path / "corpus" / "stdlib"
    build_corpus(stdlib_sources(2_000_000), prefix)
    checkpoint = tmp_path / "checkpoint"
    corpus = ["--data-path", str(prefix), "--split", "100,0,0", *BYTE_TOKENIZER_FLAGS, "--save", str(checkpoint),
              "--load", str(checkpoint), "--ckpt-format", "torch_dist", "--save-interval", "30",
              "--override-opt_param-scheduler"]  # the resumed run is longer: its schedule follows its command line
    losses, lines = run_entry([*corpus, "--train-iters", "30"], tmp_path)
    assert_learns(losses, lines, 30)
    assert (checkpoint / "latest_checkpointed_iteration.txt").read_text().strip() == "30"

    resumed, _ = run_entry([*corpus, "--train-iters", "36"], tmp_path)
    assert sorted(resumed) == list(range(31, 37))
    assert sum(resumed.values()) / 6 < sum(losses[i] for i in range(1, 4)) / 3  # continues, not from scratch


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"])
def test_a_converted_hugging_face_checkpoint_is_what_the_first_iteration_runs(tmp_path, name):
    """``--load`` of an ``oellm convert hf-to-mcore`` output: the run starts from the HF weights.

    The HF model's final norm is zeroed (Qwen3.5 ``(1 + w) * x`` with ``w = -1``, Qwen3 ``w * x`` with ``w = 0``), so
    its logits are exactly 0 and the first iteration's loss is exactly ln(vocabulary) whatever the tokens; a model
    that did not get these weights (a fresh initialisation, or a load that skipped the final norm) sits about 1e-2
    above it (measured: docs/benchmarks.md, session 13).
    """
    from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf

    card = get_card(name)
    tensors = {key: value if "norm" in key else value * 0.02 for key, value in random_hf_tensors(card, seed=5).items()}
    final_norm = tensors["model.norm.weight"]
    tensors["model.norm.weight"] = final_norm.new_full(final_norm.shape, -1.0 if card.zero_centered_norm else 0.0)
    write_hf(card, tensors, tmp_path / "hf")
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
               "-m", "megatron.oellm.training.entry",
               *[card.name if arg == GPU_ENTRY_RUN[1] else arg for arg in GPU_ENTRY_RUN],
               "--mock-data", "--tokenizer-type", "NullTokenizer",
               "--train-iters", "4", "--load", str(tmp_path / "mcore"), "--ckpt-format", "torch_dist",
               "--dist-ckpt-strictness", "log_unexpected"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert re.search(r"successfully loaded checkpoint from .*mcore.* at iteration 0", output), output[-6000:]
    losses = {int(m[1]): float(m[2]) for m in _LOSS.finditer(output)}
    assert abs(losses[1] - math.log(card.vocab_size)) < 1e-4, (losses, math.log(card.vocab_size))
