"""Audit 10 of :mod:`megatron.oellm.training.forward_step` (its CPU part): the samples megatron-core's
``GPTDataset`` really yields (no ``attention_mask`` key once the entry turns the mask off), and the mean loss
``--check-for-spiky-loss`` hands megatron's rerun state machine for a micro-batch without loss tokens."""

from __future__ import annotations

import math
import random

import pytest
import torch


def test_a_sample_without_an_attention_mask_key_reaches_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """megatron-core 0.19.2's ``GPTDataset.__getitem__`` leaves the ``attention_mask`` key out of a sample when
    ``create_attention_mask`` is off (as the entry's arguments set it): the batch still holds every field the model
    step reads, the mask None, the others the sample's tensors."""
    from megatron.core import parallel_state

    from megatron.oellm.training.forward_step import BATCH_KEYS, next_batch

    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, non_blocking=False: self)
    monkeypatch.setattr(parallel_state, "get_context_parallel_world_size", lambda: 1)
    length = random.randrange(4, 32)
    sample = {"tokens": torch.randint(0, 50_000, (2, length)), "labels": torch.randint(0, 50_000, (2, length)),
              "loss_mask": (torch.rand(2, length) > 0.2).float(), "position_ids": torch.arange(length).repeat(2, 1)}
    batch = next_batch(iter([sample]))
    assert set(batch) == set(BATCH_KEYS) and batch["attention_mask"] is None
    assert all(torch.equal(batch[key], sample[key]) for key in sample)


def test_a_micro_batch_without_loss_tokens_hands_a_finite_mean_to_the_spiky_loss_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A micro-batch whose loss mask is empty (every token masked) has a loss sum of 0 over 0 tokens: the mean
    ``--check-for-spiky-loss`` validates is 0, not the NaN of 0 / 0 (megatron's rerun machine compares it with the
    largest loss seen so far)."""
    import megatron.core.rerun_state_machine as rerun

    from megatron.oellm.training import forward_step as module

    validated = []

    class Machine:
        def is_unexpectedly_large(self, result, threshold, context):
            return bool(result > threshold)

        def validate_result(self, result, rejection_func, message, tolerance, fatal):
            validated.append(float(result))

    monkeypatch.setattr(rerun, "get_rerun_state_machine", lambda: Machine())
    losses = torch.rand(2, random.randrange(3, 17)) * 5 + 0.1
    loss_sum, num_tokens, report = module.spiky_checked_lm_loss(torch.zeros_like(losses), losses)
    assert float(loss_sum) == 0.0 and int(num_tokens) == 0
    assert validated == [0.0] and all(math.isfinite(value) for value in report["lm loss"].tolist())
    mask = (torch.rand_like(losses) > 0.5).float()
    mask[0, 0] = 1.0
    module.spiky_checked_lm_loss(mask, losses)
    assert validated[1] == pytest.approx(float((losses * mask).sum() / mask.sum()), rel=1e-6)
