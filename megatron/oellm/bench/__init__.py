"""One-GPU training-step benchmark: our megatron-core model (torch-native backend) against transformers' model of
the same card, same weights and batches, micro-batch sizes swept (``oellm bench``).

:mod:`measure` holds the arithmetic and sweep bookkeeping (pure, CPU-tested), :mod:`sides` the two models and their
step, :mod:`timing` CUDA-event timing and profiling, :mod:`harness` the whole run.
"""

SIDES = ("ours", "hf")
"""Benchmark sides: ``ours`` (megatron-core, torch-native backend) and ``hf`` (transformers)."""
