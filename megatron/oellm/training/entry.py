"""Training entry point: ``torchrun ... -m megatron.oellm.training.entry <Megatron flags> --oellm-model NAME``.

Takes the flags of Megatron-LM's ``pretrain_gpt.py`` / ``pretrain_hybrid.py`` plus the OEL arguments
(:mod:`megatron.oellm.training.args`), fills the named card's architecture flags into the command line (without
``--oellm-model`` the card is read back from Megatron's architecture flags), and runs
``megatron.training``'s pretrain loop with our model provider, data provider and forward step. Checkpoints are
Megatron's (``--save``/``--load``, ``--ckpt-format torch_dist`` for megatron-core distributed checkpointing).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import megatron.oellm  # noqa: F401  (Python 3.11 provision before megatron.training is imported)
from megatron.oellm.training.args import (
    add_oellm_arguments,
    architecture_value,
    check_command_line,
    explicit_destinations,
    merge_card_flags,
    parse_oellm_argv,
    with_backend_implementation,
    with_training_defaults,
)
from megatron.oellm.training.startup_checks import refusal_detail, training_batch_detail

if TYPE_CHECKING:
    from megatron.oellm.cards import ModelCard
    from megatron.oellm.training.stored_checkpoint import StoredCheckpoint

PROG = "megatron.oellm.training.entry"
"""The entry's name in its one-line error messages (what ``python -m`` runs)."""


def flops_and_peak(args: argparse.Namespace, card: ModelCard | None = None) -> tuple[float, float | None]:
    """Training FLOPs per token of the run's card (``card``, else read from ``args``) and the GPU's peak TFLOP/s
    (None when unknown).

    The peak is the dense BF16 one also for FP8 runs, as in the reports' MFU and ``oellm table`` (so a log line and
    a table agree); ``--oellm-peak-tflops`` sets another.
    """
    import torch

    from megatron.oellm.flops import training_flops_per_token
    from megatron.oellm.training.model_provider import card_from_args
    from megatron.oellm.training.throughput import device_peak_tflops

    card = card_from_args(args) if card is None else card
    flops = training_flops_per_token(card, args.seq_length, padded_vocab=args.padded_vocab_size)
    peak = args.oellm_peak_tflops
    if peak is None:
        peak = device_peak_tflops(torch.cuda.get_device_name(), "bf16")
    return flops.total, peak


def check_layout(args: argparse.Namespace, card: ModelCard | None = None) -> None:
    """Raise :class:`megatron.oellm.models.parallel.ParallelLayoutError` when the run's parallel layout does not fit
    its card (``card``, else read from ``args``): the spec builders' own check, made before Megatron initialises
    instead of in the model provider (after process groups and GPU memory are set up, on every rank), with the run's
    world size. Megatron's ``validate_args`` passes, for instance, a hybrid pattern whose ``|`` splits a decoder
    layer between two pipeline stages, and a world size that ETP x EP x PP does not divide."""
    from megatron.oellm.models.parallel import validate_layout
    from megatron.oellm.training.model_provider import card_from_args, check_pipeline_split_flags, layout_from_args

    card = card_from_args(args) if card is None else card
    check_pipeline_split_flags(args, card)
    # with the world size: megatron's validate_args checks TP x PP x CP against it, but not ETP x EP x PP, on which
    # megatron-core's parallel state fails on every rank after torch.distributed is up
    validate_layout(card, layout_from_args(args), world_size=getattr(args, "world_size", None))


def resume_compared_args(args: argparse.Namespace) -> dict[str, list[str]]:
    """Flag -> stored run arguments that megatron-core 0.19.2's ``check_checkpoint_args`` compares with this run's
    when it loads a checkpoint without ``--finetune``, beyond the model shape every checkpoint records: those it
    compares only for some flags, and reads from the checkpoint without a default (a missing one is an
    ``AttributeError`` on every rank after GPU set-up)."""
    compared: dict[str, list[str]] = {}
    if args.vocab_file:
        compared["--vocab-file"] = ["max_position_embeddings", "make_vocab_size_divisible_by", "tokenizer_type"]
        if args.ckpt_format == "torch":
            compared["--vocab-file"].append("padded_vocab_size")
    if args.data_parallel_random_init:
        compared["--data-parallel-random-init"] = ["data_parallel_random_init"]
    if getattr(args, "phase_transition_iterations", None):
        compared["--phase-transition-iterations"] = ["global_batch_size"]
    return compared


def check_converted_load(args: argparse.Namespace, checkpoint: StoredCheckpoint | None) -> None:
    """Raise ``ValueError`` when ``--load`` names an ``oellm convert hf-to-mcore`` checkpoint that megatron would
    check against run arguments it does not store (:func:`resume_compared_args`), naming ``--finetune``.

    ``checkpoint`` is the one the run loads (:func:`megatron.oellm.training.stored_checkpoint.
    read_loaded_checkpoint`). A converted checkpoint stores only the arguments every load compares (its card's
    shape), since which tokenizer, divisor or batch size a run will use is not known when converting. Megatron skips
    the comparison under ``--finetune``, which for a ``release`` checkpoint changes nothing else: it starts at
    iteration 0 and reads no optimizer or RNG state either way.
    """
    from megatron.oellm.training.stored_checkpoint import converted_args

    if checkpoint is None or checkpoint.fine_tunes or args.finetune:
        return
    compared = resume_compared_args(args)
    stored = converted_args(checkpoint)
    if not compared or stored is None:
        return
    missing = {flag: [name for name in names if not hasattr(stored, name)] for flag, names in compared.items()}
    missing = {flag: names for flag, names in missing.items() if names}
    if missing:
        why = "; ".join(f"{', '.join(names)} for {flag}" for flag, names in missing.items())
        raise ValueError(f"--load {args.load} is an `oellm convert hf-to-mcore` checkpoint without the run arguments "
                         f"megatron's check_checkpoint_args compares when it resumes a run ({why}); add --finetune to "
                         "start from it (iteration 0, no optimizer or RNG state: what a converted checkpoint holds "
                         "anyway), or pass it as --pretrained-checkpoint with --load / --save naming the run's own "
                         "directory, so that later jobs of the run resume from their own checkpoints")


CONVERTED_LOAD_STRICTNESS = ("log_unexpected", "log_all", "ignore_all")
"""``--dist-ckpt-strictness`` values under which megatron loads an ``oellm convert hf-to-mcore`` checkpoint. It holds
no ``_extra_state`` objects, which the models of both backends ask for; megatron-core 0.19.2 drops those requests
under these values, while under the default ``assume_ok_unexpected`` PyTorch's loader fails on them ("Missing key in
checkpoint state_dict"), and the ``raise_*`` values raise on them."""
RETURNING_STRICTNESS = ("return_unexpected", "return_all")
"""``--dist-ckpt-strictness`` values under which megatron-core 0.19.2's ``dist_checkpointing.load`` returns (state,
missing keys, unexpected keys): megatron's ``load_checkpoint`` takes that tuple for the state and fails on it."""


def check_load_strictness(args: argparse.Namespace, checkpoint: StoredCheckpoint | None) -> None:
    """Raise ``ValueError`` when megatron would fail to load ``checkpoint`` (the one the run loads, as
    :func:`check_converted_load` takes it) under the run's ``--dist-ckpt-strictness``: a ``torch_dist`` checkpoint
    under :data:`RETURNING_STRICTNESS`, or an ``oellm convert`` one outside :data:`CONVERTED_LOAD_STRICTNESS`. Either
    fails on every rank once the model is on the GPU."""
    from megatron.oellm.training.stored_checkpoint import converted_args

    if checkpoint is None or checkpoint.ckpt_format != "torch_dist":
        return
    strictness = args.dist_ckpt_strictness
    if strictness in RETURNING_STRICTNESS:
        raise ValueError(f"--dist-ckpt-strictness {strictness}: megatron-core's checkpoint loader then returns the "
                         "mismatched keys beside the state, which megatron's load_checkpoint takes for the state and "
                         f"fails on, so {checkpoint.named_by} would not load; use log_unexpected or log_all to see "
                         "mismatched keys")
    if converted_args(checkpoint) is not None and strictness not in CONVERTED_LOAD_STRICTNESS:
        raise ValueError(f"{checkpoint.named_by} is an `oellm convert hf-to-mcore` checkpoint, which holds no "
                         "_extra_state objects (Transformer Engine's FP8 metadata, mirrored by the torch-native "
                         f"modules) while the model asks for them; --dist-ckpt-strictness {strictness} fails on those "
                         "keys once the model is on the GPU: pass --dist-ckpt-strictness log_unexpected (megatron "
                         "logs them and keeps the modules' extra state as built)")


def check_converted_glu_layout(args: argparse.Namespace, checkpoint: StoredCheckpoint | None, card: ModelCard) -> None:
    """Raise ``ValueError`` when the run loads an ``oellm convert hf-to-mcore`` checkpoint (``checkpoint``, as
    :func:`check_converted_load` takes it) with block-interleaved SwiGLU weights
    (:func:`megatron.oellm.convert.pipeline.interleaved_glu_flags`):
    megatron would load the ``[gate; up]`` rows into the interleaved layout, and every expert would compute with gate
    and up rows mixed, without an error."""
    from megatron.oellm.convert.pipeline import interleaved_glu_flags
    from megatron.oellm.training.stored_checkpoint import converted_args

    if converted_args(checkpoint) is None:
        return
    interleaved = interleaved_glu_flags(card, args)
    if interleaved:
        raise ValueError(f"{checkpoint.named_by} is an `oellm convert hf-to-mcore` checkpoint, whose SwiGLU weights "
                         f"are stored as [gate; up], while {' and '.join(interleaved)} makes the model read them with "
                         "gate and up rows alternating in blocks: the loaded experts would mix the two; drop "
                         f"{' and '.join(flag.split()[0] for flag in interleaved)}")


CARD_ARCHITECTURE_ARGS = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "group_query_attention",
    "num_query_groups", "kv_channels", "max_position_embeddings", "position_embedding_type", "rotary_base",
    "rotary_percent", "add_bias_linear", "swiglu", "untie_embeddings_and_output_weights", "apply_layernorm_1p",
    "normalization", "num_experts", "moe_ffn_hidden_size", "moe_router_topk", "moe_router_pre_softmax",
    "moe_shared_expert_intermediate_size", "hybrid_layer_pattern",
)
"""Architecture arguments a card's flags set that megatron-core 0.19.2's ``load_args_from_checkpoint`` takes from
the checkpoint under ``--use-checkpoint-args`` (most of them over the command line's value)."""


def check_checkpoint_architecture(args: argparse.Namespace, loaded: StoredCheckpoint | None) -> None:
    """Raise ``ValueError`` when ``--use-checkpoint-args`` with ``--oellm-model`` would take architecture arguments
    from a megatron-oellm checkpoint that disagree with the card.

    ``args`` are the run's arguments as parsed, before megatron reads the checkpoint, ``loaded`` the checkpoint
    the run loads (:func:`megatron.oellm.training.stored_checkpoint.read_loaded_checkpoint`; the one of
    ``--pretrained-checkpoint`` is read here): megatron's ``load_args_from_checkpoint`` then overwrites the card's
    values (:data:`CARD_ARCHITECTURE_ARGS`) with the checkpoint's while the model is still built from the card, so
    the arguments, the FLOP count and the checkpoint load would describe other models without a word. A hybrid
    pattern's ``|`` (pipeline stages) may differ, as megatron lets a run re-split the checkpoint's layers (a
    resumed optimizer state may not follow: :mod:`megatron.oellm.training.checkpoint_layout`). Checkpoints of other
    programs and ones without stored arguments are left to megatron.
    """
    from megatron.oellm.training.stored_checkpoint import (
        LOAD,
        PRETRAINED,
        load_source,
        oellm_run_args,
        read_checkpoint_of,
    )

    if not (args.use_checkpoint_args and args.oellm_model):
        return
    # megatron reads the arguments of each flag's own checkpoint, --pretrained-checkpoint's first, --load's also
    # when the run fine-tunes from the former (a non-persistent or --ckpt-step checkpoint needs no tracker there);
    # the one the run loads is ``loaded``, already read
    loaded_flag = (load_source(args) or (None,))[0]
    for flag in (PRETRAINED, LOAD):
        checkpoint = loaded if flag == loaded_flag else read_checkpoint_of(args, flag)
        found = oellm_run_args(checkpoint.common) if checkpoint is not None else None
        if found is None:
            continue
        stored, saved_with = found
        differ = [(name, getattr(stored, name), getattr(args, name)) for name in CARD_ARCHITECTURE_ARGS
                  if getattr(stored, name, None) is not None and hasattr(args, name)
                  and architecture_value(name, getattr(stored, name)) != architecture_value(name, getattr(args, name))]
        if not differ:
            continue
        match = f"--oellm-model {saved_with}" if saved_with else "the --oellm-model of the checkpoint's card"
        fields = "; ".join(f"{name}: checkpoint {ckpt!r}, card {card!r}" for name, ckpt, card in differ)
        raise ValueError(f"--use-checkpoint-args would take architecture arguments from {checkpoint.named_by} that "
                         f"differ from --oellm-model {args.oellm_model}'s while the model is built from the card "
                         f"({fields}); pass {match} to train the checkpoint's model, or drop --use-checkpoint-args")


def refuse(error: ValueError) -> int:
    """Print a refused command line as one ``error:`` line on stderr (argparse's form) and return its exit status 2.

    The refusals before Megatron allocates anything (a card conflict, an unknown model, a backend or data flag the
    run cannot honour, flags no card describes) are messages naming the fix; under torchrun a traceback per rank
    would bury them.
    """
    print(f"{PROG}: error: {error}", file=sys.stderr)
    return 2


def provenance() -> str:
    """The start-up line naming the code that runs: megatron-oellm's and megatron-core's versions and the directories
    they were imported from. A recipe job made from a source checkout puts that checkout first on the image's
    ``PYTHONPATH``, ahead of the image's installed copy; the log says which one ran. megatron-core's release is
    printed without the ``+<commit>`` its ``__version__`` gets from whatever git repository encloses its folder
    (pyenv's, or a checkout holding the virtual environment: not megatron-core's own commit)."""
    import megatron.core

    import megatron.oellm as oellm
    from megatron.oellm.patches.release import megatron_core_release

    return (f"> megatron-oellm {oellm.__version__} from {Path(oellm.__file__).resolve().parent}, "
            f"megatron-core {megatron_core_release()} from {Path(megatron.core.__file__).resolve().parent}")


def expanded_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the named card's flags, the training defaults and the backend's implementation filled in
    (``ValueError`` for a command line the parser refuses: :func:`check_command_line`)."""
    check_command_line(argv)
    merged = merge_card_flags(argv)
    return with_backend_implementation(with_training_defaults(merged.argv if merged else argv))


def training_config(args: argparse.Namespace) -> object:
    """megatron's configuration container of the run (what ``pretrain`` takes), its refusals raised as one
    ``ValueError``. Building it runs megatron-core's ``OptimizerConfig`` checks, which ``validate_args`` leaves to it
    (optimizer state and main-parameter dtypes other than fp32 without ``--use-precision-aware-optimizer``, that
    optimizer without ``--use-distributed-optimizer`` or without Transformer Engine's FusedAdam on this node): built
    here, before Megatron initialises, they end in one line instead of a traceback on every rank."""
    from megatron.training.argument_utils import pretrain_cfg_container_from_args

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"\s*It is recommended to use a ModelConfig")
            return pretrain_cfg_container_from_args(args)
    except (AssertionError, ValueError, RuntimeError) as error:
        detail = " ".join(str(error).split()) or f"{type(error).__name__} without a message"
        raise ValueError(f"megatron's training configuration refuses the run's arguments: {detail}") from error


def validated_args(parse_and_validate: Callable[..., argparse.Namespace],
                   parsed: argparse.Namespace) -> argparse.Namespace:
    """Megatron's ``parse_and_validate_args`` (passed in: importing it imports ``megatron.training``) with the OEL
    arguments; its refusals are ``assert`` statements, raised here as ``ValueError`` naming the failed condition.
    So is a ``TypeError`` raised while an ``assert`` evaluates its condition (``--attention-backend local`` without
    ``--spec``: ``assert args.spec[0] == 'local', ...`` on None), named by that statement, message included. A
    training batch megatron refuses through the evaluation batch sizes is named as the training batch of ``parsed``
    (the command line before validation; :func:`training_batch_detail`).

    It runs before Megatron sets up any GPU or process group, so a refusal there is a bad command line, which under
    torchrun was an assertion traceback per rank."""
    try:
        return parse_and_validate(extra_args_provider=add_oellm_arguments)
    except (AssertionError, TypeError) as error:
        detail = refusal_detail(error)
        if detail is None:
            raise  # not a refusal: a defect, with its traceback
        raise ValueError("megatron's argument validation refuses the command line: "
                         f"{training_batch_detail(detail, parsed)}") from error


def main(argv: Sequence[str] | None = None) -> int:
    """Merge the card (if named) and the backend's implementation into the command line, parse it with Megatron's
    parser, train; return 0, or 2 after a one-line :func:`refuse` of a command line refused before training."""
    try:
        argv = expanded_argv(list(sys.argv[1:] if argv is None else argv))
    except ValueError as error:
        return refuse(error)
    sys.argv = [sys.argv[0], *argv]  # Megatron reads sys.argv
    if os.environ.get("RANK", "0") == "0":
        print(provenance(), flush=True)

    from megatron.core.enums import ModelType
    from megatron.training import pretrain
    from megatron.training.arguments import parse_and_validate_args

    from megatron.oellm.backends.selection import check_args_support, resolve_backend
    from megatron.oellm.patches import dataset_helpers, distrib_optimizer_step, hybrid_moe_metrics, moe_log_names
    from megatron.oellm.training.activation_logs import check_activation_logging
    from megatron.oellm.training.checkpoint_layout import (
        check_checkpoint_format,
        check_optimizer_resharding,
        check_rank_file_layout,
    )
    from megatron.oellm.training.data import train_valid_test_datasets
    from megatron.oellm.training.data_sources import check_data_source
    from megatron.oellm.training.dispatcher import check_flex_dispatcher
    from megatron.oellm.training.forward_step import forward_step
    from megatron.oellm.training.ignored_flags import ignored_flag_warnings
    from megatron.oellm.training.index_cache import stale_cache_warnings
    from megatron.oellm.training.lr_schedule import check_lr_schedule
    from megatron.oellm.training.model_provider import card_from_args, model_provider
    from megatron.oellm.training.node_packages import check_parsed_packages, check_validated_packages
    from megatron.oellm.training.run_schedule import profiler_trace_warnings
    from megatron.oellm.training.sharded_checkpoints import (
        check_fsdp2_resume,
        check_fsdp2_saves_on_this_torch,
        check_fsdp2_torch_dcp,
    )
    from megatron.oellm.training.startup_checks import check_model_args, check_parsed_args, check_validated_args
    from megatron.oellm.training.stored_checkpoint import (
        check_exit_on_missing_checkpoint,
        check_load_directory,
        read_loaded_checkpoint,
    )
    from megatron.oellm.training.throughput import install_throughput_logging

    dataset_helpers.apply()
    distrib_optimizer_step.apply()
    try:
        parsed = parse_oellm_argv(argv)
        check_parsed_args(parsed)
        check_parsed_packages(parsed)  # before validate_args: it imports wandb on the last rank
        loaded = read_loaded_checkpoint(parsed)  # once, for every check
        check_load_directory(parsed)
        check_checkpoint_architecture(parsed, loaded)  # before megatron overwrites the card's arguments
        args = validated_args(parse_and_validate_args, parsed)
    except ValueError as error:
        return refuse(error)
    try:
        backend = resolve_backend(args.oellm_backend)
        check_args_support(backend, args)
        check_flex_dispatcher(args)
        check_validated_args(args)
        check_validated_packages(args)
        check_activation_logging(args, backend)
        local_prefixes = check_data_source(args)
        if os.environ.get("RANK", "0") == "0":  # stale index caches, misplaced traces, ignored flags
            for warning in [*stale_cache_warnings(args, local_prefixes), *profiler_trace_warnings(args, Path.cwd()),
                            *ignored_flag_warnings(args, explicit_destinations(argv))]:
                print(f"{PROG}: warning: {warning}", file=sys.stderr, flush=True)
        check_exit_on_missing_checkpoint(args)
        check_converted_load(args, loaded)
        check_load_strictness(args, loaded)
        check_checkpoint_format(args, loaded)
        check_rank_file_layout(args, loaded)
        check_optimizer_resharding(args, loaded)
        check_fsdp2_resume(args, loaded)
        check_fsdp2_saves_on_this_torch(args)
        card = card_from_args(args)  # the run's card, read once for the checks and the FLOP count
        check_layout(args, card)
        check_converted_glu_layout(args, loaded, card)
        check_fsdp2_torch_dcp(args, card, loaded)
        check_model_args(args, card)
        flops_per_token, peak_tflops = flops_and_peak(args, card)
        check_lr_schedule(args)
        config_container = training_config(args)
    except ValueError as error:
        return refuse(error)
    if args.num_experts:
        moe_log_names.apply(args.moe_router_load_balancing_type)
        if getattr(args, "hybrid_layer_pattern", None):
            hybrid_moe_metrics.apply(args.hybrid_layer_pattern)
    install_throughput_logging(flops_per_token, peak_tflops)
    store = None
    if args.inprocess_restart:  # megatron's own restart wrapper, which its pretrain_gpt.py launcher applies too
        from megatron.training.inprocess_restart import maybe_wrap_for_inprocess_restart

        pretrain, store = maybe_wrap_for_inprocess_restart(pretrain)
    pretrain(
        config_container,
        train_valid_test_datasets,
        ModelType.encoder_or_decoder,
        forward_step,
        model_provider=model_provider,
        store=store,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
