"""Weights holding NaN or infinity convert as they are, each tensor named in a warning with how many elements: a
run from them would stop at its first NaN loss only after its wait in the queue (CPU)."""

from __future__ import annotations

import random
import re
import warnings
from pathlib import Path

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from megatron.oellm.convert.tensor_checks import warn_non_finite
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, random_hf_tensors, write_hf


def _messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(warning.message) for warning in caught if "NaN or infinite" in str(warning.message)]


def test_damaged_weights_are_named_in_both_directions_and_kept(tmp_path: Path) -> None:
    card = get_card("qwen3-30b-a3b-tiny")
    hf = random_hf_tensors(card, seed=random.randrange(2**31))
    name = random.choice([n for n, tensor in hf.items() if tensor.dim() == 2 and "embed" not in n])
    flat = hf[name].view(-1)
    positions = random.sample(range(flat.numel()), k=random.randint(1, 5))
    for position in positions:
        flat[position] = random.choice([float("nan"), float("inf"), float("-inf")])
    write_hf(card, hf, tmp_path / "hf")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    imported = _messages(caught)  # megatron's names and shapes (gate and up fused, experts split): counts add up
    assert imported and sum(int(re.search(r": (\d+) of \d+ elements", m).group(1)) for m in imported) == len(positions)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "back")
    exported = _messages(caught)
    assert exported == [f"{name}: {len(positions)} of {hf[name].numel()} elements are NaN or infinite (kept as they "
                        "are: a run from these weights stops at its first NaN loss); check the source checkpoint"]
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "back")))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_weights_give_no_warning_and_a_large_float16_sum_is_no_damage(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(random.randrange(2**31))
    tensors = {"w": torch.randn(64, 48, generator=generator).to(dtype),
               "big": torch.full((4096,), 60000.0 if dtype == torch.float16 else 1e30, dtype=dtype)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_non_finite(tensors)
    tensors["w"][3, 7] = float("nan")
    with pytest.warns(UserWarning, match=r"^w: 1 of 3072 elements are NaN or infinite"):
        warn_non_finite(tensors)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_weights_are_checked_without_a_traceback(dtype: torch.dtype) -> None:
    """FP8 has no sum or isfinite kernel on the CPU: the check stopped an export with a NotImplementedError."""
    tensor = (torch.randn(300, generator=torch.Generator().manual_seed(random.randrange(2**31))) * 4).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_non_finite({"w": tensor})
    position = random.randrange(tensor.numel())
    raw = tensor.view(torch.uint8)
    raw[position] = 0x7F if dtype == torch.float8_e4m3fn else 0x7C  # e4m3fn: NaN; e5m2: +inf
    with pytest.warns(UserWarning, match=r"^w: 1 of 300 elements are NaN or infinite"):
        warn_non_finite({"w": tensor})
