"""``measure`` refuses a time or GPU count that gives no throughput with its own ValueError (found by mutation
testing: a zero time raised ZeroDivisionError instead)."""

import random

import pytest

from megatron.oellm.training.throughput import measure


@pytest.mark.parametrize("elapsed_s, num_gpus", [
    (0.0, 4), (-random.uniform(0.1, 100), 4), (float("nan"), 4), (float("inf"), 4),
    (random.uniform(0.1, 100), 0), (random.uniform(0.1, 100), -random.randint(1, 8))])
def test_no_positive_finite_time_or_gpu_count_is_a_value_error(elapsed_s, num_gpus):
    with pytest.raises(ValueError, match="elapsed time and GPU count must be positive"):
        measure(10, random.randrange(1, 10**8), elapsed_s, num_gpus, random.uniform(1e8, 1e11), 989.0)
