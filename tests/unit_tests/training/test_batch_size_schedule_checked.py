"""A ``--step-batch-size-schedule`` that megatron-core's micro-batch calculator refuses is refused in one line by the
entry's checks of the validated arguments (on every node, so also on a login node and in a recipe's ``--dry-run``):
megatron-core builds the calculator when megatron sets up the run, and its refusal was an ``AssertionError``
traceback on every rank after the tokenizer was built. A schedule it takes passes."""

from __future__ import annotations

import argparse
import random

import pytest

from megatron.oellm.training.pipeline_schedule import check_batch_size_schedule, check_training_batch


def run_args(schedule: str, *, decrease: bool = False) -> argparse.Namespace:
    """Validated arguments of a run of ``schedule`` (thresholds in tokens, megatron's reading with a sequence
    length) on a data-parallel size that divides every size of it."""
    return argparse.Namespace(global_batch_size=None, micro_batch_size=1, data_parallel_size=1,
                              tensor_parallel_num_weight_shards=1, decrease_batch_size_if_needed=decrease,
                              step_batch_size_schedule=schedule, seq_length=random.choice([128, 4096]))


def valid_schedule() -> tuple[list[int], list[int]]:
    """Increasing thresholds from 0 and positive sizes, freshly drawn."""
    thresholds = [0, *sorted(random.sample(range(10**6, 10**9), random.randint(1, 4)))]
    return thresholds, [random.randint(1, 64) for _ in thresholds]


def written(thresholds: list[int], sizes: list[int]) -> str:
    return " ".join(f"{threshold}:{size}" for threshold, size in zip(thresholds, sizes, strict=True))


def test_a_schedule_megatron_core_takes_passes() -> None:
    check_training_batch(run_args(written(*valid_schedule())))


@pytest.mark.parametrize("defect, words", [
    ("first threshold", "first schedule entry must have threshold 0"),
    ("repeated threshold", "strictly increasing"),
    ("size 0", "batch size must be positive"),
])
def test_a_schedule_megatron_core_refuses_is_one_line_naming_the_flag(defect: str, words: str) -> None:
    thresholds, sizes = valid_schedule()
    if defect == "first threshold":
        thresholds[0] = random.randint(10**4, 10**5)  # above one sample of the longest sequence
        thresholds = sorted(set(thresholds))
        sizes = sizes[:len(thresholds)]
    elif defect == "repeated threshold":
        thresholds, sizes = [*thresholds, thresholds[-1]], [*sizes, random.randint(1, 64)]
    else:
        sizes[random.randrange(len(sizes))] = 0
    schedule = written(thresholds, sizes)
    with pytest.raises(ValueError) as refused:
        check_training_batch(run_args(schedule))
    message = str(refused.value)
    assert message.startswith(f"--step-batch-size-schedule {schedule!r}: megatron-core's micro-batch calculator "
                              "refuses it") and words in message and "\n" not in message, message


def test_a_schedule_beside_decrease_batch_size_if_needed_is_refused() -> None:
    with pytest.raises(ValueError, match="decrease"):
        check_batch_size_schedule(run_args(written(*valid_schedule()), decrease=True))
