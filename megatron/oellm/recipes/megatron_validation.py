"""megatron-core's own start-up checks of a recipe row, run where the recipe is resolved (a login node, no GPU).

The training entry hands its argv to megatron's ``validate_args`` first thing; that refuses combinations the
parser accepts (``--recompute-granularity selective`` beside ``--recompute-method``, two data sources, ...). Running
it before ``--submit`` turns a job that would wait in the queue to die at start into an error now. ``validate_args``
asks the GPU's compute capability and Transformer Engine's version: :func:`validate_on_cluster` answers as the
recipes' clusters would (MareNostrum 5's H100 and Jupiter's GH200 are sm_90; the image's Transformer Engine is
recent enough for every version gate and brings the fused RoPE and MoE permutation kernels megatron-core's
``TransformerConfig`` asks for; ``--oellm-backend auto`` resolves to it), on rank 0 of the row's world size with the
cluster's environment exported, and undoes those answers afterwards. The training entry, started on a node without
a GPU, validates its command line the same way (:func:`parse_and_validate_on_cluster`) before it refuses to train
there, with that shell's environment (it cannot know the job's): its refusals name what megatron read there
(:data:`VALIDATION_ENVIRONMENT`, :func:`environment_read_here`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import io
import logging
import os
import shlex
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn
from unittest import mock

if TYPE_CHECKING:
    from megatron.oellm.models.parallel import ParallelLayout

CLUSTER_COMPUTE_CAPABILITY = (9, 0)
"""Compute capability of the recipes' GPUs (H100 and GH200: Hopper, sm_90)."""


_CLUSTER_KERNELS = {
    "megatron.core.models.common.embeddings.rope_utils": (
        "fused_apply_rotary_pos_emb", "fused_apply_rotary_pos_emb_thd"),
    "megatron.core.transformer.moe.moe_utils": (
        "fused_permute", "fused_permute_with_probs", "fused_sort_chunks_by_index",
        "fused_sort_chunks_by_index_with_probs", "fused_unpermute"),
}
"""megatron-core's Transformer Engine kernels (module -> names, None where TE does not import) whose presence its
``TransformerConfig`` checks: the image's Transformer Engine has them."""


VALIDATION_ENVIRONMENT = ("CUDA_DEVICE_MAX_CONNECTIONS", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
                          "NCCL_GRAPH_REGISTER", "NVTE_CPU_OFFLOAD_V1")
"""The environment variables on whose values megatron-core 0.19.2's ``validate_args`` refuses a command line on the
recipes' clusters: ``CUDA_DEVICE_MAX_CONNECTIONS`` (1 for tensor or context parallelism, not 1 for FSDP), both
``PYTORCH_CUDA_ALLOC_CONF`` and ``NCCL_GRAPH_REGISTER`` (expandable segments under Transformer Engine's CUDA graphs
only with ``NCCL_GRAPH_REGISTER=0``; the entry's check of the allocator settings megatron-core does not read adds
``PYTORCH_ALLOC_CONF``, :mod:`megatron.oellm.training.graph_allocator_env`) and ``NVTE_CPU_OFFLOAD_V1`` (1 for
fine-grained activation offloading). Its
``CUDA_GRAPHS_USE_NODE_PRIORITY`` check is asked only on Blackwell and later, not on these Hopper GPUs. A job exports
them from its recipe's ``[cluster.env]``; validated elsewhere, the refusal is that shell's."""


def environment_read_here(names: Sequence[str] = VALIDATION_ENVIRONMENT) -> str:
    """The values of the environment variables ``names`` in this process, as one phrase
    (``CUDA_DEVICE_MAX_CONNECTIONS unset, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``): what megatron's
    validation read where it ran, for a refusal (or a pass) to say which environment decided it."""
    return ", ".join(f"{name}={shlex.quote(os.environ[name])}" if name in os.environ else f"{name} unset"
                     for name in names)


def _cluster_kernel(*_args: object, **_kwargs: object) -> NoReturn:
    """Stands in for a Transformer Engine kernel of the image while a config is checked; never called."""
    raise RuntimeError("a stand-in for the cluster image's Transformer Engine kernel was called")


def _cluster_backend(name: str) -> str:
    """``--oellm-backend`` as the image resolves it: ``auto`` (and ``te``) is its Transformer Engine."""
    return "torch" if name == "torch" else "te"


@contextlib.contextmanager
def cluster_backend() -> Iterator[None]:
    """While inside: ``--oellm-backend`` resolves as on the cluster image (``auto`` and ``te`` to its Transformer
    Engine, which imports only where a GPU driver is), for every caller that looks the resolver up when it runs."""
    from megatron.oellm.backends import selection

    with mock.patch.object(selection, "resolve_backend", _cluster_backend):
        yield


def _exported(env: Mapping[str, object]) -> dict[str, str]:
    """``env`` as a process environment holds it: each value as text (a recipe's TOML may give numbers)."""
    return {name: str(value) for name, value in env.items()}


@contextlib.contextmanager
def _as_cluster_rank0(world_size: int, env: Mapping[str, object]) -> Iterator[None]:
    """While inside: megatron sees a Hopper GPU with a recent Transformer Engine, rank 0 of ``world_size`` and
    ``env`` exported (:func:`_exported`); its printout of the arguments, its INFO log lines and its warnings are
    swallowed."""
    import torch
    from megatron.core.transformer import transformer_config
    from megatron.training import arguments

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch.cuda, "get_device_capability",
                                              lambda *_: CLUSTER_COMPUTE_CAPABILITY))
        stack.enter_context(mock.patch.object(arguments, "get_device_arch_version",
                                              lambda: CLUSTER_COMPUTE_CAPABILITY[0]))
        for module in (arguments, transformer_config):
            stack.enter_context(mock.patch.object(module, "is_te_min_version", lambda *_args, **_kwargs: True))
        # TransformerConfig refuses apply_rope_fusion / moe_permute_fusion where these kernels did not import; a
        # release without one of these names does not check it
        for module, names in _CLUSTER_KERNELS.items():
            kernels = importlib.import_module(module)
            for name in names:
                if getattr(kernels, name, False) is None:
                    stack.enter_context(mock.patch.object(kernels, name, _cluster_kernel))
        stack.enter_context(cluster_backend())
        stack.enter_context(mock.patch.dict(os.environ, {**_exported(env), "WORLD_SIZE": str(world_size), "RANK": "0"}))
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        # megatron's root log handler holds the real stdout: its INFO lines (a pipeline layout's table) stay out too
        stack.callback(logging.disable, logging.root.manager.disable)
        logging.disable(logging.INFO)
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        yield


def validate_on_cluster(argv: Sequence[str], world_size: int, env: Mapping[str, object]) -> argparse.Namespace:
    """``argv`` as the training entry reads it (the ``--oellm-model`` card filled in, the training defaults added),
    after megatron's ``validate_args`` on rank 0 of ``world_size`` cluster GPUs with ``env`` exported. Raises what
    the entry would raise at start: before the validation, the entry's checks of the parsed command line
    (:func:`megatron.oellm.training.startup_checks.check_parsed_args`); after it, those of the validated arguments
    (:func:`megatron.oellm.training.startup_checks.check_validated_args`), with the environment the job inherits as
    megatron's validation reads it here: this shell's, ``env`` over it (sbatch exports the submitting shell's
    environment, and the job script's ``srun --export=ALL`` keeps it). The module backend is the image's Transformer
    Engine unless ``argv`` chooses ``--oellm-backend torch``, whose feature check then runs too (``auto`` resolves on
    the cluster, not here)."""
    from megatron.oellm.backends.selection import check_args_support
    from megatron.oellm.training.args import (
        merge_card_flags,
        parse_oellm_argv,
        with_backend_implementation,
        with_training_defaults,
    )
    from megatron.oellm.training.startup_checks import check_parsed_args, check_validated_args

    merged = merge_card_flags(argv)
    argv = with_training_defaults(merged.argv if merged else argv)
    # an explicit torch backend is the same on every machine: the entry's steps for it apply here too
    torch_backend = parse_oellm_argv(argv).oellm_backend == "torch"
    if torch_backend:
        argv = with_backend_implementation(argv)
    parsed = parse_oellm_argv(argv)
    check_parsed_args(parsed)
    args = validate_args_on_cluster(parsed, world_size, env)
    if torch_backend:
        check_args_support("torch", args)
    check_validated_args(args, {**os.environ, **_exported(env)})
    return args


def check_model_config_on_cluster(args: argparse.Namespace, world_size: int, env: Mapping[str, object],
                                  layout: ParallelLayout | None = None) -> None:
    """The training entry's checks of validated ``args`` against the run's model card
    (:func:`megatron.oellm.training.startup_checks.check_model_args`: the pipeline schedule, layer offloading, and
    megatron-core's ``TransformerConfig``, whose ``__post_init__`` refuses combinations ``validate_args`` lets through,
    e.g. ``--moe-pad-expert-input-to-capacity`` without ``--moe-expert-capacity-factor``), with the card the entry reads
    from them (:func:`megatron.oellm.training.model_provider.card_from_args`), as the cluster builds it (see the module
    docstring); the card's layout is checked where the row is resolved. Builds a config only: no CUDA, no process
    group, no tensor.

    Megatron sets ``padded_vocab_size`` once it builds the tokenizer, after its validation; the card gets the
    embedding rows :func:`pad_vocab_as_megatron` sets in its place (``embedded_vocabulary``'s where ``args`` tell
    them, else a padded ``--vocab-size`` stand-in; the vocabulary is no ``TransformerConfig`` field). ``layout`` is
    the run's layout where the caller holds it (the training entry's checked one), else read from ``args``."""
    from megatron.oellm.training.model_provider import card_from_args
    from megatron.oellm.training.startup_checks import check_model_args

    probe = copy.copy(args)
    pad_vocab_as_megatron(probe)
    with _as_cluster_rank0(world_size, env):
        check_model_args(probe, card_from_args(probe), layout)


def pad_vocab_as_megatron(args: argparse.Namespace) -> None:
    """Set validated ``args``' ``padded_vocab_size``, where megatron has not (it does when it builds the tokenizer,
    after its validation), for the card the checks after validation read from ``args``: the embedding rows the GPU
    node will build where ``args`` tell them (:func:`~megatron.oellm.training.data_sources.embedded_vocabulary`: a
    tokenizer whose vocabulary is ``--vocab-size``, with the rows it adds), else a stand-in, ``--vocab-size`` (1
    without one) padded as megatron pads it: that tokenizer's vocabulary is not known before it is built."""
    from megatron.oellm.flops import megatron_padded_vocab
    from megatron.oellm.training.data_sources import embedded_vocabulary

    embedded = embedded_vocabulary(args)
    args.padded_vocab_size = embedded if embedded is not None else megatron_padded_vocab(
        args.vocab_size or 1, args.tensor_model_parallel_size, args.make_vocab_size_divisible_by)


def parse_and_validate_on_cluster(world_size: int, *,
                                  extra_args_provider: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
                                  ) -> argparse.Namespace:
    """megatron's ``parse_and_validate_args`` of ``sys.argv`` (with ``extra_args_provider``'s flags; the arguments
    of a ``--use-checkpoint-args`` checkpoint read in, as on a GPU node) on rank 0 of ``world_size`` cluster GPUs
    with this process's environment (see the module docstring: :data:`VALIDATION_ENVIRONMENT` is this shell's, not
    the job's). What megatron sets up for training after validating is left out (``set_global_variables``: the
    global arguments, the tokenizer, the TensorBoard and W&B writers, signal handlers): a node without a GPU only
    checks the command line. So ``padded_vocab_size`` stays unset, as the tokenizer would set it; a caller that
    needs a stand-in for the checks that read the card pads it (:func:`pad_vocab_as_megatron`) once the checks that
    must not take a stand-in for the tokenizer's vocabulary (the corpus's token ids) have run."""
    with _as_cluster_rank0(world_size, {}):
        return parse_and_validate_without_setup(extra_args_provider=extra_args_provider)


def parse_and_validate_without_setup(*, extra_args_provider: Callable[[argparse.ArgumentParser],
                                                                      argparse.ArgumentParser]
                                     ) -> argparse.Namespace:
    """megatron's ``parse_and_validate_args`` of ``sys.argv`` (with ``extra_args_provider``'s flags and the arguments
    of a ``--use-checkpoint-args`` checkpoint) without the ``set_global_variables`` it ends with: the global
    arguments, the tokenizer, the TensorBoard and W&B writers, timers and signal handlers are a training job's
    set-up, not part of checking its command line. megatron's own function runs, so its parse, checkpoint reads and
    validation stay as megatron-core has them; the caller sets up what it needs once its own checks pass."""
    from megatron.training import arguments

    with mock.patch.object(arguments, "set_global_variables", lambda *_args, **_kwargs: None):
        return arguments.parse_and_validate_args(extra_args_provider=extra_args_provider)


def validate_args_on_cluster(args: argparse.Namespace, world_size: int = 1,
                             env: Mapping[str, object] | None = None) -> argparse.Namespace:
    """``args`` (parsed, not yet validated) after megatron's ``validate_args`` on rank 0 of ``world_size`` cluster
    GPUs with ``env`` exported (see the module docstring)."""
    from megatron.training import arguments

    args.rank, args.world_size = 0, world_size
    with _as_cluster_rank0(world_size, env or {}):
        arguments.validate_args(args)
    return args


def megatron_refusal(argv: Sequence[str], world_size: int, env: Mapping[str, object], *,
                     read_data: bool = False) -> str | None:
    """What :func:`validate_on_cluster`, then the training entry's check of the model's ``TransformerConfig``
    (:func:`check_model_config_on_cluster`) and of the learning-rate schedule
    (:func:`megatron.oellm.training.lr_schedule.check_lr_schedule`), raise against ``argv`` (type and message), or
    None when all pass. With ``read_data`` (``--submit`` and ``--local``: the data is where the job reads it), also the
    entry's check of the data itself (:func:`megatron.oellm.training.data_sources.check_data_source`: a ``--split`` that
    leaves a dataset's split empty, on which megatron-core would hang, no training data, an index cache it could not
    write)."""
    from megatron.oellm.training.data_sources import check_data_source
    from megatron.oellm.training.lr_schedule import check_lr_schedule
    from megatron.oellm.training.startup_checks import refusal_detail

    try:
        args = validate_on_cluster(argv, world_size, env)
        check_model_config_on_cluster(args, world_size, env)
        check_lr_schedule(args)
        if read_data:
            with _as_cluster_rank0(world_size, env):
                check_data_source(args)  # as rank 0, which megatron's dataset code asks for (else it warns)
    except Exception as error:  # noqa: BLE001 - whatever validate_args raises would stop the job at start
        detail = refusal_detail(error) if isinstance(error, (AssertionError, TypeError)) else None
        if detail is None:
            detail = str(error)
        return f"{type(error).__name__}: {detail}" if detail else type(error).__name__
    return None
