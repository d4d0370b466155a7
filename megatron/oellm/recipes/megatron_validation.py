"""megatron-core's own start-up checks of a recipe row, run where the recipe is resolved (a login node, no GPU).

The training entry hands its argv to megatron's ``validate_args`` first thing; that refuses combinations the
parser accepts (``--recompute-granularity selective`` beside ``--recompute-method``, two data sources, ...). Running
it before ``--submit`` turns a job that would wait in the queue to die at start into an error now. ``validate_args``
asks the GPU's compute capability and Transformer Engine's version: :func:`validate_on_cluster` answers as the
recipes' clusters would (MareNostrum 5's H100 and Jupiter's GH200 are sm_90; the image's Transformer Engine is
recent enough for every version gate), on rank 0 of the row's world size with the cluster's environment exported,
and undoes those answers afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from unittest import mock

CLUSTER_COMPUTE_CAPABILITY = (9, 0)
"""Compute capability of the recipes' GPUs (H100 and GH200: Hopper, sm_90)."""


@contextlib.contextmanager
def _as_cluster_rank0(world_size: int, env: Mapping[str, str]) -> Iterator[None]:
    """While inside: megatron sees a Hopper GPU with a recent Transformer Engine, rank 0 of ``world_size`` and
    ``env`` exported; its printout of the arguments and its warnings are swallowed."""
    import torch
    from megatron.training import arguments

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch.cuda, "get_device_capability",
                                              lambda *_: CLUSTER_COMPUTE_CAPABILITY))
        stack.enter_context(mock.patch.object(arguments, "get_device_arch_version",
                                              lambda: CLUSTER_COMPUTE_CAPABILITY[0]))
        stack.enter_context(mock.patch.object(arguments, "is_te_min_version", lambda *_args, **_kwargs: True))
        stack.enter_context(mock.patch.dict(os.environ, {**env, "WORLD_SIZE": str(world_size), "RANK": "0"}))
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        yield


def validate_on_cluster(argv: Sequence[str], world_size: int, env: Mapping[str, str]) -> argparse.Namespace:
    """``argv`` as the training entry reads it (the ``--oellm-model`` card filled in, the training defaults added),
    after megatron's ``validate_args`` on rank 0 of ``world_size`` cluster GPUs with ``env`` exported. Raises what
    the entry would raise at start. The module backend is the image's Transformer Engine unless ``argv`` chooses
    ``--oellm-backend torch``, whose feature check then runs too (``auto`` resolves on the cluster, not here). The
    NVTE attention switches ``env`` exports are checked against the row's attention settings as the entry checks
    them (:func:`megatron.oellm.training.attention_env.check_attention_env`), and so are its data sources and
    sequence length (:func:`megatron.oellm.training.data.check_single_data_source`,
    :func:`megatron.oellm.training.args.check_sequence_length`), its iteration intervals and recompute layer count
    (:func:`megatron.oellm.training.args.check_intervals`), its micro-batches per step against the
    interleaved pipeline schedule (:func:`megatron.oellm.training.pipeline_schedule.check_interleaved_microbatches`),
    a ``--spec`` the model provider would not read (:func:`megatron.oellm.training.model_provider.check_layer_spec`)
    and a ``gdn_norm_out`` recompute megatron-core's config would refuse
    (:func:`megatron.oellm.training.model_provider.check_recompute_modules`)."""
    from megatron.oellm.backends.selection import check_args_support
    from megatron.oellm.training.args import (
        check_intervals,
        check_sequence_length,
        merge_card_flags,
        parse_oellm_argv,
        with_backend_implementation,
        with_training_defaults,
    )
    from megatron.oellm.training.attention_env import check_attention_env
    from megatron.oellm.training.data import check_single_data_source
    from megatron.oellm.training.model_provider import check_layer_spec, check_recompute_modules
    from megatron.oellm.training.pipeline_schedule import check_interleaved_microbatches

    merged = merge_card_flags(argv)
    argv = with_training_defaults(merged.argv if merged else argv)
    # an explicit torch backend is the same on every machine: the entry's steps for it apply here too
    torch_backend = parse_oellm_argv(argv).oellm_backend == "torch"
    if torch_backend:
        argv = with_backend_implementation(argv)
    parsed = parse_oellm_argv(argv)
    check_single_data_source(parsed)
    check_sequence_length(parsed)
    check_intervals(parsed)
    args = validate_args_on_cluster(parsed, world_size, env)
    if torch_backend:
        check_args_support("torch", args)
    check_attention_env(args, {name: str(value) for name, value in env.items()})
    check_interleaved_microbatches(args)
    check_layer_spec(args)
    check_recompute_modules(args)
    return args


def validate_args_on_cluster(args: argparse.Namespace, world_size: int = 1,
                             env: Mapping[str, object] | None = None) -> argparse.Namespace:
    """``args`` (parsed, not yet validated) after megatron's ``validate_args`` on rank 0 of ``world_size`` cluster
    GPUs with ``env`` exported (see the module docstring)."""
    from megatron.training import arguments

    args.rank, args.world_size = 0, world_size
    with _as_cluster_rank0(world_size, {name: str(value) for name, value in (env or {}).items()}):
        arguments.validate_args(args)
    return args


def megatron_refusal(argv: Sequence[str], world_size: int, env: Mapping[str, str]) -> str | None:
    """What :func:`validate_on_cluster`, then the learning-rate schedule check of a training run
    (:func:`megatron.oellm.training.lr_schedule.check_lr_schedule`), raise against ``argv`` (type and message), or
    None when both pass."""
    from megatron.oellm.training.lr_schedule import check_lr_schedule

    try:
        check_lr_schedule(validate_on_cluster(argv, world_size, env))
    except Exception as error:  # noqa: BLE001 - whatever validate_args raises would stop the job at start
        return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return None
