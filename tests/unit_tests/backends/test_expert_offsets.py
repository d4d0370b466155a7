"""The torch-native experts' group offsets from the dispatcher's token counts (:func:`expert_end_offsets`).

Drop-and-pad dispatch hands the experts equal counts on the host; the offsets are then made on the target device
without a host-to-device copy, which CUDA graph capture forbids (``test_expert_offsets_gpu.py`` captures them)."""

import random

import pytest
import torch

from megatron.oellm.backends.torch_native.grouped_mlp import expert_end_offsets


def _running_sum(counts: list[int]) -> list[int]:
    """The reference: each expert's end row, summed in Python."""
    ends, total = [], 0
    for count in counts:
        total += count
        ends.append(total)
    return ends


@pytest.mark.parametrize("experts", [1, 3, 8])
def test_equal_host_counts_give_the_running_sum_without_a_copy(experts: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Equal host counts (a padded capacity) give int32 offsets ``count, 2 count, ...`` and never copy the counts
    tensor to another device."""
    capacity = random.randint(1, 500)
    counts = torch.full((experts,), capacity, dtype=torch.long)
    copies: list[object] = []
    original_to = torch.Tensor.to
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: copies.append(self) or original_to(self, *a, **k))
    offsets = expert_end_offsets(counts, torch.device("cpu"))
    assert not any(copy is counts for copy in copies)
    assert offsets.dtype == torch.int32
    assert offsets.tolist() == _running_sum([capacity] * experts)


def test_equal_host_counts_become_offsets_on_the_target_device() -> None:
    """The offsets are made on the device asked for (the experts' GPU), not where the counts live."""
    counts = torch.full((5,), random.randint(1, 500), dtype=torch.long)
    offsets = expert_end_offsets(counts, torch.device("meta"))
    assert offsets.device.type == "meta" and offsets.dtype == torch.int32 and offsets.shape == (5,)


def test_ragged_host_counts_give_the_running_sum() -> None:
    """Unequal host counts (a dispatcher that synchronised, empty experts included) are summed as given."""
    counts = [random.randint(0, 300) for _ in range(7)] + [0]
    counts[1] = counts[0] + 1  # never all equal
    offsets = expert_end_offsets(torch.tensor(counts), torch.device("cpu"))
    assert offsets.dtype == torch.int32
    assert offsets.tolist() == _running_sum(counts)


def test_zero_equal_counts_give_zero_offsets() -> None:
    """A capacity of zero on every expert (no tokens) gives all-zero ends, not a shifted range."""
    assert expert_end_offsets(torch.zeros(4, dtype=torch.long), torch.device("cpu")).tolist() == [0, 0, 0, 0]
