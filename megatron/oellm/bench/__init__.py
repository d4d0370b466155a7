"""One-GPU training-step benchmark: our megatron-core model (torch-native backend, and on request the same model on
Transformer Engine's modules) against transformers' model of the same card, same weights and batches, micro-batch
sizes swept (``oellm bench``).

:mod:`measure` holds the arithmetic and sweep bookkeeping (pure, CPU-tested), :mod:`sides` the models and their
step, :mod:`timing` CUDA-event timing and profiling, :mod:`harness` the whole run.
"""

SIDES = ("ours", "te", "hf")
"""Benchmark sides: ``ours`` (megatron-core, torch-native backend), ``te`` (the same megatron-core model on Transformer
Engine's modules) and ``hf`` (transformers)."""

DEFAULT_SIDES = ("ours", "hf")
"""Sides benchmarked unless told: the default does not depend on whether Transformer Engine is installed, so two
machines' reports of the same command compare the same sides."""

BACKEND_OF_SIDE = {"ours": "torch", "te": "te"}
"""Our sides and the ``--oellm-backend`` each builds the model with."""
