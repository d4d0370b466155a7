"""``--local``: a recipe row fitted onto this machine's GPUs (fewer layers and experts, one node, same code path).

The fitted-down run keeps the recipe's training settings and the row's overrides and swaps only what cannot fit:
the card becomes ``<model>-proxy-<N>L`` (full width, the mixer pattern kept), optionally with fewer experts; the
layout becomes TP1 PP1 with the largest expert-parallel size the GPUs allow, up to the row's; MBS 1 and mock data unless a data path
is given (then every document trains: ``--split 100,0,0``). It is started with ``torchrun --standalone`` on the visible GPUs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping

from megatron.oellm.cards import ModelCard, get_card
from megatron.oellm.megatron_args import FlagValue, flags_to_argv
from megatron.oellm.models import missing_spec_builder as family_spec_builder_missing
from megatron.oellm.models.parallel import ParallelLayout, validate_layout
from megatron.oellm.recipes.config import Recipe, RecipeError, TableRow
from megatron.oellm.recipes.resolve import ResolvedRow, RunInputs, assemble_flags, recipe_card, row_layout
from megatron.oellm.recipes.slurm import ENTRY_MODULE

LOCAL_SPLIT = "100,0,0"
"""Megatron ``--split`` of local runs on real data: all documents train (the recipes evaluate nothing)."""

FLEX_ONLY_FLAGS = ("moe-flex-dispatcher-backend", "moe-hybridep-num-sms")
"""Flags that only the flex dispatcher reads; dropped when one GPU forces the all-to-all dispatcher."""

EP_OVERLAP_FLAG = "overlap-moe-expert-parallel-comm"
"""megatron-core's overlap of the expert-parallel all-to-all with computation; its ``TransformerConfig`` needs
EP > 1."""

EP_OVERLAP_ONLY_FLAGS = ("delay-wgrad-compute", "ep-overlap-early-attn-memory-release")
"""Flags megatron-core's ``TransformerConfig`` accepts only beside :data:`EP_OVERLAP_FLAG`; dropped with it."""


def visible_gpus() -> int:
    """CUDA devices torch can see (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def missing_spec_builder(recipe: Recipe) -> str:
    """Why no run of ``recipe`` can build its model ('' if one can): its card's family has no spec builder yet
    (:func:`megatron.oellm.models.missing_spec_builder`)."""
    return family_spec_builder_missing(get_card(recipe.model).family)


def local_blocker(recipe: Recipe, gpus: int) -> str:
    """Why ``--local`` cannot run here ('' if it can): no spec builder for the model family yet (which no GPU would
    change, so it is named first), or no GPU."""
    missing = missing_spec_builder(recipe)
    if missing:
        return f"--local cannot build the model: {missing}"
    return "--local needs a CUDA GPU and torch sees none on this machine" if gpus == 0 else ""


def local_backend_problem(resolved: ResolvedRow) -> str:
    """Why the backend the run would resolve to here cannot run the fitted flags ('' if it can), e.g. FP8 rows
    where Transformer Engine is missing; checked before torchrun starts anything."""
    from megatron.oellm.backends.selection import check_args_support
    from megatron.oellm.training.args import parse_oellm_argv

    args = parse_oellm_argv(resolved.argv)
    try:
        check_args_support(args.oellm_backend, args)
    except ValueError as error:
        return str(error)
    return ""


def local_card(recipe: Recipe, seq_length: int, inputs: RunInputs) -> ModelCard:
    """The proxy card of the local run: ``local.num_layers`` layers, ``local.num_experts`` experts if set, the
    run's vocabulary."""
    card = recipe_card(recipe, f"{recipe.model}-proxy-{recipe.local.num_layers}L", seq_length, inputs)
    if recipe.local.num_experts:
        experts = recipe.local.num_experts
        card = dataclasses.replace(card, num_experts=experts, moe_router_topk=min(card.moe_router_topk, experts))
    return card


def local_expert_parallel(card: ModelCard, gpus: int, row_ep: int) -> int:
    """Largest EP <= the row's (its ``parallel`` over the recipe's ``[parallel]``) that divides both the GPU count
    and the experts."""
    return max(d for d in range(1, min(gpus, row_ep) + 1) if gpus % d == 0 and card.num_experts % d == 0)


def fit_local(recipe: Recipe, row: TableRow, gpus: int, inputs: RunInputs | None = None) -> ResolvedRow:
    """``row`` fitted onto ``gpus`` GPUs of one node (see module docstring); the layout is validated."""
    local = recipe.local
    inputs = inputs or RunInputs()
    seq_length = local.seq_length if local.seq_length else recipe.row_seq_length(row)  # [local] 0: the row's
    card = local_card(recipe, seq_length, inputs)
    layout = ParallelLayout(ep=local_expert_parallel(card, gpus, row_layout(recipe, row).ep))
    validate_layout(card, layout, world_size=gpus)
    global_batch = gpus * local.global_batch_size_per_dp_rank
    fitted = dataclasses.replace(row, nodes=1, global_batch_size=global_batch, micro_batch_size=1, parallel={})
    flags = assemble_flags(recipe, fitted, card, layout, local.train_iters, inputs)
    if inputs.save_interval > 0:
        # A second, longer local run resumes from the first one's checkpoint: the scheduler follows this command
        # line (megatron otherwise refuses a decay length that differs from the checkpoint's).
        flags["override-opt_param-scheduler"] = True
    changes = {**data_split_changes(flags, inputs), **dispatcher_changes(flags, layout, gpus),
               **expert_overlap_changes(flags, layout, gpus),
               **machine_adjustments(flags, local_environment(recipe, row))}
    notes = tuple(_note(name, value, flags.get(name), why) for name, (value, why) in changes.items() if why)
    for name, (value, _why) in changes.items():
        if value is None:
            flags.pop(name, None)
        else:
            flags[name] = value
    return ResolvedRow(fitted, card, layout, gpus, flags, notes)


def data_split_changes(flags: Mapping[str, FlagValue], inputs: RunInputs) -> dict[str, tuple[FlagValue, str]]:
    """``--split`` :data:`LOCAL_SPLIT` on real data (why '' when the row left megatron's default): every document
    trains. With the default 969,30,1 a small corpus leaves the test split without a document; on the H200,
    megatron-core 0.19.2 sat in building that split's indices for a minute (246 documents) until the run was killed."""
    if not inputs.data_path:
        return {}
    given = flags.get("split")
    why = ("every document of a local corpus trains (a small corpus can leave a split without a document)"
           if given not in (None, False, LOCAL_SPLIT) else "")
    return {"split": (LOCAL_SPLIT, why)}


def dispatcher_changes(flags: Mapping[str, FlagValue], layout: ParallelLayout,
                       gpus: int) -> dict[str, tuple[FlagValue, str]]:
    """The all-to-all dispatcher, without the flex-only flags (value None: dropped), for a row's flex dispatcher
    when the fit has TP x EP = 1: megatron-core's flex dispatcher needs TP x EP > 1."""
    if layout.ep * layout.tp != 1 or flags.get("moe-token-dispatcher-type") != "flex":
        return {}
    changes: dict[str, tuple[FlagValue, str]] = {
        "moe-token-dispatcher-type": ("alltoall", f"megatron-core's flex dispatcher needs TP x EP > 1, and {gpus} "
                                                  "GPU(s) give TP 1, EP 1 here")}
    for name in FLEX_ONLY_FLAGS:
        if flags.get(name) not in (None, False):
            changes[name] = (None, "only the flex dispatcher reads it")
    return changes


def expert_overlap_changes(flags: Mapping[str, FlagValue], layout: ParallelLayout,
                           gpus: int) -> dict[str, tuple[FlagValue, str]]:
    """A row's :data:`EP_OVERLAP_FLAG` dropped (value None), with the :data:`EP_OVERLAP_ONLY_FLAGS` it sets, when the
    fit comes down to EP 1 (one GPU, or no common divisor > 1 of the GPUs, the experts and the row's EP):
    megatron-core's ``TransformerConfig`` refuses the overlap without expert parallelism, which the training entry
    reports on every rank only after torchrun has started."""
    if layout.ep != 1 or flags.get(EP_OVERLAP_FLAG) in (None, False):
        return {}
    changes: dict[str, tuple[FlagValue, str]] = {
        EP_OVERLAP_FLAG: (None, f"megatron-core overlaps expert-parallel communication only with EP > 1, and the fit "
                                f"has EP 1 on {gpus} GPU(s)")}
    for name in EP_OVERLAP_ONLY_FLAGS:
        if flags.get(name) not in (None, False):
            changes[name] = (None, f"megatron-core needs --{EP_OVERLAP_FLAG} beside it")
    return changes


def _note(name: str, value: FlagValue | None, row_value: FlagValue | None, why: str) -> str:
    """One ``note:`` text: the flag as the local run has it (``without --name`` when dropped), the row's, why."""
    local = f"with {_flag_text(name, value)}" if value is not None else f"without --{name}"
    return f"--local runs {local} here (the row: {_flag_text(name, row_value)}): {why}"


def machine_adjustments(flags: dict, environ: Mapping[str, str]) -> dict[str, tuple[FlagValue, str]]:
    """Flag -> (value, why) that the fitted run sets because this machine lacks a kernel the row's flags need on the
    te backend (:func:`megatron.oellm.backends.selection.te_missing_kernels`), which the training entry would
    otherwise refuse: ``--no-gradient-accumulation-fusion`` without apex's extension, ``--attention-backend auto``
    for a row's ``flash`` where Transformer Engine would keep no flash attention (none it supports installed, or
    dropped by a pin in ``environ``, the run's environment, by the row's dtype or ``--flash-attention-version``, or
    by the GPU). On the torch backend, whose attention reads no ``--attention-backend``, a row's other than ``auto``
    runs with ``auto``."""
    from megatron.oellm.backends.selection import resolve_backend, te_missing_kernels, training_dtype

    try:
        backend = resolve_backend(str(flags.get("oellm-backend", "auto")))
    except ValueError:  # te asked for but missing: local_backend_problem reports it
        return {}
    if backend != "te":
        return torch_attention_changes(flags)
    missing = te_missing_kernels(gradient_accumulation_fusion=not flags.get("no-gradient-accumulation-fusion"),
                                 flash_attention_only=flags.get("attention-backend") == "flash",
                                 dtype=training_dtype(bool(flags.get("bf16")), bool(flags.get("fp16"))),
                                 flash_attention_version=_int_or_none(flags.get("flash-attention-version")),
                                 environ=environ)
    return {kernel.flag: (kernel.value, kernel.why) for kernel in missing.values()}


def torch_attention_changes(flags: Mapping[str, FlagValue]) -> dict[str, tuple[FlagValue, str]]:
    """``--attention-backend auto`` for a row's other attention backend on the torch-native backend, which runs SDPA
    / varlen attention whatever the flag says and which the training entry refuses other values on."""
    given = flags.get("attention-backend")
    if given in (None, False, "auto"):
        return {}
    return {"attention-backend": ("auto", "the torch-native backend runs SDPA / varlen attention and reads no "
                                          "--attention-backend")}


def _int_or_none(value: FlagValue | None) -> int | None:
    """An integer flag's value, None when unset or not an integer (Megatron's parser then names the bad value)."""
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _flag_text(name: str, value: FlagValue) -> str:
    """``--name value`` as a command line has it, "unset" for an absent flag."""
    return " ".join(flags_to_argv({name: value})) or "unset"


def torchrun_command(resolved: ResolvedRow) -> list[str]:
    """``torchrun --standalone`` on the local GPUs running the training entry with the fitted flags.

    torchrun is started as ``python -m torch.distributed.run`` of this interpreter, so the run sees the same
    packages (a virtual environment or ``PYTHONPATH`` bundle) as ``oellm recipe`` itself.
    """
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={resolved.world_size}", "-m", ENTRY_MODULE,
            *resolved.argv]


def local_environment(recipe: Recipe, row: TableRow) -> dict[str, str]:
    """This process's environment plus the exports of ``row``'s job (:meth:`Recipe.row_env`: connections, NCCL
    channels, allocator). A value with a ``$`` is refused: a SLURM job's container runtime evaluates its
    ``APPTAINERENV_`` copy in the container (``"$TMPDIR/triton"`` becomes the node's folder), but torchrun here gets
    the text as written."""
    exports = {name: str(value) for name, value in recipe.row_env(row).items()}
    for name, value in exports.items():
        if "$" in value:
            raise RecipeError(f"--local: {name} = {value!r} in the recipe's env is handed to torchrun as written (only "
                              "a SLURM job's container runtime evaluates it), so the run would see that text; export "
                              f"{name} in your shell and leave it out of the recipe, or write the value out")
    return {**os.environ, **exports}

