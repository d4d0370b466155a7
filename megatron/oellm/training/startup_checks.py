"""The start-up checks of a training command line that need neither its data, nor a checkpoint, nor a GPU.

The training entry runs them before Megatron sets anything up; ``oellm recipe`` runs the same ones on every row where
the recipe is resolved (a login node, :mod:`megatron.oellm.recipes.megatron_validation`), so a row the entry would
refuse at start is refused before it waits in the queue. Keeping the one list here stops the two from drifting apart:
a check added to a phase below runs in both places. The entry adds what needs its node (the backend it resolves, the
dispatcher's kernels, the ``--load`` checkpoint, the data), and the recipe checks the row's layout where it resolves
it. Both run :func:`megatron.oellm.training.lr_schedule.check_lr_schedule` after these phases.

Three phases, in the order the entry runs them: the parsed command line (before megatron's ``validate_args``),
megatron's validated arguments, then those with the run's model card.
"""

from __future__ import annotations

import argparse
import re
import traceback
from collections.abc import Mapping

from megatron.oellm.cards import ModelCard
from megatron.oellm.models.parallel import ParallelLayout


def check_parsed_args(parsed: argparse.Namespace) -> None:
    """Raise ``ValueError`` for what the parsed (not yet validated) command line holds that megatron's
    ``validate_args`` asserts with a traceback on every rank, lets through, or divides by: ``--yaml-cfg``, two data
    sources, a size below 1 (sequence length, parallel sizes), pipeline stages that are malformed or not pp x vpp,
    no sequence length, a sequence longer than the positions, intervals megatron takes a modulo by, a ``--save``
    without a save interval, ``--fp16`` beside ``--bf16``, a wandb project without a directory or with an empty
    experiment name, optimizer, initialisation and loader values out of their range (:mod:`.value_ranges`)."""
    from megatron.oellm.training.args import (
        check_intervals,
        check_positive_sizes,
        check_precision,
        check_save_interval,
        check_sequence_given,
        check_sequence_length,
        check_wandb_directory,
        check_wandb_experiment_name,
        check_yaml_cfg,
    )
    from megatron.oellm.training.data_sources import check_single_data_source
    from megatron.oellm.training.model_provider import check_pipeline_stage_flags
    from megatron.oellm.training.value_ranges import check_value_ranges

    check_yaml_cfg(parsed)
    check_single_data_source(parsed)  # validate_args asserts some pairs and lets others through
    check_positive_sizes(parsed)  # before validate_args: it takes the world size modulo the parallel sizes
    check_pipeline_stage_flags(parsed)  # before validate_args: it expands a layout as written
    check_sequence_given(parsed)  # validate_args asserts it without a message
    check_sequence_length(parsed)
    check_intervals(parsed)  # before validate_args: its modulo by --log-interval (with --log-memory-interval)
    check_save_interval(parsed)  # validate_args asserts it without a message
    check_precision(parsed)  # likewise
    check_wandb_directory(parsed)  # megatron's set-up opens the wandb run on the last rank only
    check_wandb_experiment_name(parsed)
    check_value_ranges(parsed)  # torch's optimizer, dropout and init, megatron's seeding refuse these late


def check_parsed_node_args(parsed: argparse.Namespace) -> None:
    """Raise ``ValueError`` for what the parsed command line asks of this node's file system that megatron reaches
    while it parses and validates the arguments: tokenizer files that are not there (:func:`~.data_sources.check_tokenizer_files`: megatron-core 0.19.2 builds the tokenizer
    right after ``validate_args``, where a missing file waited out the Hugging Face hub's retries and was refused
    under a hub name), and output folders megatron's writers could not create at job start
    (:func:`~.run_schedule.check_output_directories`). The training entry's only: ``oellm recipe`` resolves rows away
    from the node's files and packages, and checks the tokenizer with the data (``read_data``)."""
    from megatron.oellm.training.data_sources import check_tokenizer_files
    from megatron.oellm.training.run_schedule import check_output_directories

    check_tokenizer_files(parsed)
    check_output_directories(parsed)


def check_validated_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> None:
    """Raise ``ValueError`` for what megatron's validated ``args`` hold that megatron-core refuses later, after GPU
    set-up or at the first step: NVTE attention switches in ``environ`` (default: this process's) against the
    attention backend, data and validation-set flags, a ``--spec`` the model provider would not read, a recompute
    megatron-core's config refuses without naming the flag, a global batch megatron-core's micro-batch calculator
    refuses, micro-batches per step the interleaved pipeline schedule refuses, a run length megatron rounds to no
    step, save, data-phase and profiler flags megatron fails on mid-run (:mod:`.run_schedule`), fault-handling flags
    it does not act on (:mod:`.fault_handling`), Transformer Engine's CUDA graphs with expandable segments that
    megatron-core's own check of the allocator settings misses (:mod:`.graph_allocator_env`)."""
    from megatron.oellm.training.attention_env import check_attention_env
    from megatron.oellm.training.data_sources import check_data_args, check_validation_sets
    from megatron.oellm.training.fault_handling import (
        check_error_injection,
        check_exit_signal_handlers,
        check_rerun_mode,
    )
    from megatron.oellm.training.graph_allocator_env import check_graph_allocator_env
    from megatron.oellm.training.model_provider import check_layer_spec, check_recompute_modules
    from megatron.oellm.training.pipeline_schedule import check_interleaved_microbatches, check_training_batch
    from megatron.oellm.training.run_schedule import (
        check_dump_directory,
        check_phase_transitions,
        check_profiler_steps,
        check_run_length,
        check_save_flags,
    )

    check_attention_env(args, environ)
    check_graph_allocator_env(args, environ)
    check_data_args(args)
    check_validation_sets(args)
    check_layer_spec(args)
    check_recompute_modules(args)  # before check_model_config: megatron-core's refusal names no flag
    check_training_batch(args)  # validate_args checks the evaluation batch only
    check_interleaved_microbatches(args)
    check_run_length(args)
    check_save_flags(args)
    check_dump_directory(args)
    check_phase_transitions(args)
    check_profiler_steps(args)
    check_exit_signal_handlers(args)
    check_rerun_mode(args)
    check_error_injection(args)


def check_model_args(args: argparse.Namespace, card: ModelCard, layout: ParallelLayout | None = None) -> None:
    """Raise ``ValueError`` for what validated ``args`` ask of the run's model ``card`` that megatron-core refuses or
    ignores once it builds it: a pipeline schedule the model class lacks, layer offloading the hybrid stack never
    applies, meta-device initialisation that leaves the routers uninitialised, CUDA graph capture the model's layers
    fail in (:mod:`.cuda_graphs`), FSDP checkpoint saves of the torch-native experts (:mod:`.sharded_checkpoints`),
    a ``TransformerConfig`` its ``__post_init__`` refuses (with ``layout``, the run's layout where the caller holds
    it: :func:`~.model_provider.check_model_config`). Builds a config only: no CUDA, no tensor."""
    from megatron.oellm.training.cuda_graphs import check_cuda_graphs
    from megatron.oellm.training.forward_step import check_schedule_support
    from megatron.oellm.training.model_provider import (
        check_layer_offloading,
        check_meta_device_init,
        check_model_config,
    )
    from megatron.oellm.training.sharded_checkpoints import check_sharded_data_parallel_saves

    check_schedule_support(args, card)
    check_layer_offloading(args, card)
    check_meta_device_init(args, card)
    check_cuda_graphs(args, card)
    check_sharded_data_parallel_saves(args, card)
    check_model_config(args, card, layout)


def refusal_detail(error: AssertionError | TypeError | RuntimeError) -> str | None:
    """What megatron's ``validate_args`` refused in ``error``: an assertion's message, else the failed ``assert``
    statement itself (many of megatron's have no message, and the bare ``AssertionError`` names nothing); for a
    ``TypeError``, raised while an ``assert`` evaluates its condition (``assert args.spec[0] == ...`` on None), that
    statement; a ``RuntimeError``'s message (``--non-persistent-ckpt-type local`` without nvidia-resiliency-ext). None
    for a ``TypeError`` outside an ``assert`` or a ``RuntimeError`` without a message: a defect, not a refusal."""
    if isinstance(error, RuntimeError):
        return " ".join(str(error).split()) or None
    frames = traceback.extract_tb(error.__traceback__)
    statement = frames[-1].line if frames and frames[-1].line else ""
    if isinstance(error, TypeError):
        return statement if statement.startswith("assert ") else None
    return " ".join(str(error).split()) or statement or "an assertion without a message"


_EVAL_BATCH_REFUSAL = re.compile(r"eval_global_batch_size \((\d+)\) must be divisible by eval_micro_batch_size "
                                 r"\((\d+)\) \* data_parallel_size \((\d+)\)")


def training_batch_detail(detail: str, parsed: argparse.Namespace) -> str:
    """``detail`` of a ``validate_args`` refusal, said of the training batch where megatron-core 0.19.2 checks it
    through the evaluation batch sizes: those default to ``--global-batch-size`` and ``--micro-batch-size`` and are
    checked first, so a command line whose evaluation sizes are unset (or the training ones) was told of an
    evaluation batch it never wrote, and fixing that alone left the training batch to fail. ``parsed`` is the command
    line before validation. Any other ``detail`` is returned as it is, as is the refusal under
    ``--decrease-batch-size-if-needed`` (megatron rounds the training batch down; only the evaluation batch must
    divide) or with evaluation sizes of their own (the refusal is theirs)."""
    match = _EVAL_BATCH_REFUSAL.search(detail)
    if (match is None or parsed.decrease_batch_size_if_needed
            or parsed.eval_global_batch_size not in (None, parsed.global_batch_size)
            or parsed.eval_micro_batch_size not in (None, parsed.micro_batch_size)):
        return detail
    from megatron.oellm.training.pipeline_schedule import off_grid_batch_refusal

    return off_grid_batch_refusal(*map(int, match.groups()))
