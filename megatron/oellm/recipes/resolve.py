"""A recipe row -> the Megatron flags of its run: model, parallel layout, batch, data, training settings, overrides.

The model flags come from :func:`megatron.oellm.megatron_args.model_flags`; the layout is checked by
:func:`megatron.oellm.models.parallel.validate_layout` (the same check the spec builders use) before any flag is
emitted, so a bad layout never reaches a cluster queue. Hybrid models (a linear mixer) carry their pipeline split as
``|`` in ``--hybrid-layer-pattern`` (megatron-core rejects ``--pipeline-model-parallel-layout`` for them); GPT models
get ``--pipeline-model-parallel-layout``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from megatron.oellm.cards import CardError, ModelCard, get_card
from megatron.oellm.flops import megatron_padded_vocab
from megatron.oellm.megatron_args import FlagValue, flags_to_argv, model_flags
from megatron.oellm.models.parallel import ParallelLayout, pipelined_hybrid_pattern, validate_layout
from megatron.oellm.recipes.config import Recipe, RecipeError, TableRow, layout_overrides
from megatron.oellm.recipes.flag_names import apply_flags, check_flag_names, check_flag_values, check_removals
from megatron.oellm.training.data_sources import UNWIRED_DATA_FLAGS
from megatron.oellm.training.tokenizer import ByteTokenizer

BYTE_TOKENIZER = "byte"
"""``--tokenizer-model`` value that selects the byte tokenizer of ``tools/build_corpus.py`` corpora."""


URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
"""The start of a URL (``s3://``, ``msc://``, ``https://``): a ``--data-path`` entry no file system holds."""


@dataclass(frozen=True)
class RunInputs:
    """What a run reads and writes besides the recipe: data, tokenizer and checkpoints."""

    data_path: tuple[str, ...] = ()
    """Megatron ``--data-path`` values (prefixes, optionally with weights); empty = mock data."""
    tokenizer_model: str = ""
    """Tokenizer of the real data, needed with ``data_path``: a Hugging Face tokenizer (name or directory), or
    ``byte`` for corpora built by ``tools/build_corpus.py`` (UTF-8 bytes, no file needed)."""
    checkpoint_dir: str = ""
    """Where checkpoints are saved and resumed from; used only with ``save_interval`` > 0."""
    save_interval: int = 0
    """Iterations between checkpoints; 0 = benchmark run, no checkpoints."""
    time_limit_s: int | None = None
    """The job's SLURM time limit; with checkpoints, the job stops and saves before it (:func:`exit_duration_minutes`).
    None = no limit (``--local``)."""


SAVE_MARGIN_S = 300
"""The least time a checkpointing job keeps before its time limit for its last iteration, its final save and the
job's start before Python runs (SLURM kills it at the limit; megatron's clock starts with the training process)."""

SAVE_MARGIN_FRACTION = 0.05
"""The share of a longer time limit kept for the same (a larger model, whose saves take longer, runs longer jobs;
a 4-hour job keeps 12 minutes)."""


def exit_duration_minutes(time_limit_s: int) -> int | None:
    """megatron's ``--exit-duration-in-mins`` for a checkpointing job under ``time_limit_s``: the limit less the larger
    of :data:`SAVE_MARGIN_S` and :data:`SAVE_MARGIN_FRACTION` of it, so the job saves and exits instead of being
    killed with everything since its last periodic save lost; None when the limit leaves no whole minute."""
    minutes = int((time_limit_s - max(SAVE_MARGIN_S, SAVE_MARGIN_FRACTION * time_limit_s)) // 60)
    return minutes if minutes >= 1 else None


@dataclass(frozen=True)
class ResolvedRow:
    """One row fully resolved: its card, layout, GPU count and the Megatron flags of the run."""

    row: TableRow
    card: ModelCard
    layout: ParallelLayout
    world_size: int
    flags: dict[str, FlagValue]
    notes: tuple[str, ...] = ()
    """What a ``--local`` fit set differently from the row for this machine (printed before the run)."""

    @property
    def argv(self) -> list[str]:
        """The flags as a Megatron argv list."""
        return flags_to_argv(self.flags)

    @property
    def built_card(self) -> ModelCard:
        """The card as megatron builds it: the run's vocabulary padded to a multiple of
        ``--make-vocab-size-divisible-by`` (megatron's default 128 unless the flags set it) x TP, as the embedding
        and output layer hold it; what the plan's memory and FLOPs count. (A Hugging Face tokenizer's own
        vocabulary is known only to the run.)"""
        divisor = self.flags.get("make-vocab-size-divisible-by")
        return self.card.with_vocab(megatron_padded_vocab(self.card.vocab_size, self.layout.tp,
                                                          int(divisor) if divisor else None))


def run_vocab_size(recipe: Recipe, inputs: RunInputs) -> int | None:
    """Vocabulary of the run's ``--vocab-size``: the byte tokenizer's with ``--tokenizer-model byte`` (its ids are
    bytes, whatever the recipe's vocabulary), else the recipe's override (None: the card's)."""
    if inputs.tokenizer_model == BYTE_TOKENIZER:
        return ByteTokenizer.vocab_size
    return recipe.vocab_size


def recipe_card(recipe: Recipe, name: str, seq_length: int, inputs: RunInputs) -> ModelCard:
    """Card ``name`` with the run's vocabulary (:func:`run_vocab_size`) and ``seq_length``."""
    card = get_card(name)
    vocab_size = run_vocab_size(recipe, inputs)
    if vocab_size is not None:
        card = card.with_vocab(vocab_size)
    return dataclasses.replace(card, seq_length=seq_length)


def row_card(recipe: Recipe, row: TableRow, inputs: RunInputs) -> ModelCard:
    """The recipe's card with the run's vocabulary and the row's sequence length."""
    return recipe_card(recipe, recipe.model, recipe.row_seq_length(row), inputs)


def row_layout(recipe: Recipe, row: TableRow) -> ParallelLayout:
    """The recipe's parallel layout with the row's overrides."""
    return dataclasses.replace(recipe.parallel, **layout_overrides(row.parallel))


def check_batch(layout: ParallelLayout, world_size: int, global_batch: int, micro_batch: int) -> None:
    """The global batch must be a whole number of micro-batches on every data-parallel rank."""
    data_parallel = world_size // (layout.tp * layout.pp * layout.cp)
    if global_batch % (micro_batch * data_parallel):
        raise RecipeError(f"global batch {global_batch} is not divisible by micro batch ({micro_batch}) x "
                          f"data-parallel size ({data_parallel} = {world_size} GPUs / tp x pp x cp); "
                          f"use a multiple of {micro_batch * data_parallel}")


CONNECTIONS_EXEMPT_FLAGS = ("use-torch-fsdp2", "use-megatron-fsdp", "overlap-moe-expert-parallel-comm")
"""Flags under which megatron-core 0.19.2 only warns about ``CUDA_DEVICE_MAX_CONNECTIONS`` with TP or CP > 1 on
Hopper (FSDP even requires it to be other than 1)."""


def check_connections(layout: ParallelLayout, env: Mapping[str, str], flags: Mapping[str, FlagValue]) -> None:
    """megatron-core requires ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with TP or CP > 1 on Hopper (MN5, Jupiter) unless
    FSDP or EP communication overlap is on (:data:`CONNECTIONS_EXEMPT_FLAGS`), and a value other than 1 for the UCC
    pipeline backend (asserted where it builds the pipeline groups); refuse the row here rather than after the job
    has waited in the queue."""
    connections = env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    needs_one = not (layout.tp == 1 and layout.cp == 1 or any(flags.get(name) for name in CONNECTIONS_EXEMPT_FLAGS))
    if flags.get("pipeline-model-parallel-comm-backend") == "ucc":
        if needs_one:
            raise RecipeError(f"--pipeline-model-parallel-comm-backend ucc with tp={layout.tp}, cp={layout.cp}: "
                              "megatron-core asserts CUDA_DEVICE_MAX_CONNECTIONS=1 for this tensor/context "
                              "parallelism and a value other than 1 for UCC; use the nccl backend, tp=1 and cp=1, or "
                              "one of --" + ", --".join(CONNECTIONS_EXEMPT_FLAGS))
        if connections == "1":
            raise RecipeError("--pipeline-model-parallel-comm-backend ucc needs CUDA_DEVICE_MAX_CONNECTIONS unset or "
                              "other than 1 (megatron-core asserts it), the job's env sets '1'; change it in "
                              "[cluster.env] (or the row's env) or use the nccl backend")
    if needs_one and connections != "1":
        raise RecipeError(f"tp={layout.tp}, cp={layout.cp} on Hopper needs CUDA_DEVICE_MAX_CONNECTIONS=1 (megatron-core "
                          f"asserts it), the job's env sets {connections!r}; set it to "
                          "\"1\" in [cluster.env] (or the row's env) or use tp=1 and cp=1")


def parallel_flags(card: ModelCard, layout: ParallelLayout) -> dict[str, FlagValue]:
    """Megatron flags of ``layout`` (already validated against ``card``).

    Every pipeline-placement flag is listed, None where this layout does not pass it, so that the layout owns it
    (see :func:`check_overrides`).
    """
    flags: dict[str, FlagValue] = {
        "tensor-model-parallel-size": layout.tp,
        "pipeline-model-parallel-size": layout.pp,
        "expert-model-parallel-size": layout.ep,
        "expert-tensor-parallel-size": layout.etp,
        "context-parallel-size": layout.cp,
        "sequence-parallel": layout.sp,
        "pipeline-model-parallel-layout": None,
        "num-virtual-stages-per-pipeline-rank": None,
        "num-layers-per-virtual-pipeline-stage": None,
        "decoder-first-pipeline-num-layers": None,
        "decoder-last-pipeline-num-layers": None,
        "account-for-embedding-in-pipeline-split": None,
        "account-for-loss-in-pipeline-split": None,
    }
    if card.linear_mixer != "none":
        flags["hybrid-layer-pattern"] = pipelined_hybrid_pattern(card, layout)
    elif layout.pipeline_layout is not None:
        flags["pipeline-model-parallel-layout"] = layout.pipeline_layout
    elif layout.vpp_size > 1:
        flags["num-virtual-stages-per-pipeline-rank"] = layout.vpp_size
    return flags


DATA_SOURCE_FLAGS = ("mock-data", "data-path", "train-data-path", "valid-data-path", "test-data-path",
                     "data-args-path", "per-split-data-args-path", "tokenizer-type", "tokenizer-model")
"""Megatron flags that choose the training data and its tokenizer: only ``--data-path`` / ``--tokenizer-model`` of
``oellm recipe`` set them, so a recipe's flag cannot add a second data source beside the mock data."""


def check_file_system_data(data_path: Sequence[str]) -> None:
    """Refuse ``--data-path`` entries that are URLs (``s3://``, ``msc://``): a recipe binds each prefix's directory
    into the container and checks its files on the login node, so it reads a shared file system only (megatron-core's
    object storage also needs ``--object-storage-cache-path``, which the recipes do not set)."""
    if urls := [entry for entry in data_path if URL_SCHEME.match(entry)]:
        raise RecipeError(f"--data-path {' '.join(urls)}: the recipes read datasets from the file system the compute "
                          "nodes share (each prefix's directory is bound into the container), not from object storage "
                          "or URLs; copy the dataset there, or run python -m megatron.oellm.training.entry with "
                          "megatron-core's --object-storage-cache-path")


def data_flags(inputs: RunInputs) -> dict[str, FlagValue]:
    """Mock data with Megatron's null tokenizer, or the given data prefixes with the byte or a Hugging Face tokenizer.

    Every :data:`DATA_SOURCE_FLAGS` is listed, None where unused, so that the run inputs own them (see
    :func:`check_overrides`); the byte tokenizer's vocabulary is the card's (:func:`run_vocab_size`).
    """
    flags: dict[str, FlagValue] = dict.fromkeys(DATA_SOURCE_FLAGS)
    if not inputs.data_path:
        if inputs.tokenizer_model:
            raise RecipeError(f"--tokenizer-model needs --data-path (without it the run trains on mock data and "
                              f"ignores the tokenizer {inputs.tokenizer_model!r})")
        return {**flags, "mock-data": True, "tokenizer-type": "NullTokenizer"}
    if not inputs.tokenizer_model:
        raise RecipeError("--data-path needs --tokenizer-model (a Hugging Face tokenizer name or directory, or "
                          f"{BYTE_TOKENIZER!r} for a corpus built by tools/build_corpus.py)")
    check_file_system_data(inputs.data_path)
    if inputs.tokenizer_model == BYTE_TOKENIZER:
        return {**flags, "data-path": list(inputs.data_path), "tokenizer-type": "NullTokenizer"}
    return {**flags, "data-path": list(inputs.data_path), "tokenizer-type": "HuggingFaceTokenizer",
            "tokenizer-model": inputs.tokenizer_model}


def checkpoint_flags(inputs: RunInputs) -> dict[str, FlagValue]:
    """``--save/--load/--save-interval`` when checkpoints are wanted (benchmark rows save none), and under a time
    limit ``--exit-duration-in-mins`` (:func:`exit_duration_minutes`)."""
    if inputs.save_interval < 0:
        raise RecipeError(f"--save-interval must be >= 0 (0: no checkpoints), got {inputs.save_interval}")
    if inputs.save_interval == 0:
        return {}
    if not inputs.checkpoint_dir:
        raise RecipeError("save_interval > 0 needs a checkpoint directory")
    flags: dict[str, FlagValue] = {"save": inputs.checkpoint_dir, "load": inputs.checkpoint_dir,
                                   "save-interval": inputs.save_interval}
    exit_minutes = None if inputs.time_limit_s is None else exit_duration_minutes(inputs.time_limit_s)
    if exit_minutes is not None:
        flags["exit-duration-in-mins"] = exit_minutes
    return flags


def with_own_checkpoint_paths(checkpoint: dict[str, FlagValue], flags: Mapping[str, FlagValue]) -> dict[str, FlagValue]:
    """``checkpoint`` (:func:`checkpoint_flags`) without the ``save`` / ``load`` / ``exit-duration-in-mins`` the
    recipe or row already sets: a ``--save-interval`` given on the command line asks for checkpoints, not for another
    start or save folder than the row's own (a converted checkpoint to start from, a shared folder), nor for another
    stop."""
    return {name: value for name, value in checkpoint.items()
            if name not in ("save", "load", "exit-duration-in-mins") or flags.get(name) in (None, False)}


def resolve_row(recipe: Recipe, row: TableRow, inputs: RunInputs | None = None) -> ResolvedRow:
    """Validate ``row``'s layout and batch on its GPUs, then build its Megatron flags (later groups override)."""
    inputs = inputs or RunInputs()
    card = row_card(recipe, row, inputs)
    layout = row_layout(recipe, row)
    world_size = row.nodes * recipe.cluster.gpus_per_node
    validate_layout(card, layout, world_size=world_size)
    check_batch(layout, world_size, row.global_batch_size, row.micro_batch_size)
    flags = assemble_flags(recipe, row, card, layout, recipe.row_train_iters(row), inputs)
    check_connections(layout, recipe.row_env(row), flags)
    return ResolvedRow(row, card, layout, world_size, flags)


def card_name_flag(card: ModelCard) -> dict[str, FlagValue]:
    """``--oellm-model`` naming ``card`` when the registry card of its name, with the run's vocabulary and sequence
    length, is ``card`` (None otherwise, e.g. a local proxy with fewer experts).

    With the name the training entry builds exactly this card; without it the entry rebuilds a card from Megatron's
    architecture flags, which cannot carry every card field (a CKDA card's gate rank, for one).
    """
    try:
        registered = get_card(card.name)
    except CardError:
        return {"oellm-model": None}
    same = dataclasses.replace(registered.with_vocab(card.vocab_size), seq_length=card.seq_length) == card
    return {"oellm-model": card.name if same else None}


def check_unwired(flags: Mapping[str, FlagValue]) -> None:
    """Refuse a set flag the training entry parses but does not honour
    (:data:`megatron.oellm.training.data_sources.UNWIRED_DATA_FLAGS`): the job would run, but not what the row says."""
    for name, reason in UNWIRED_DATA_FLAGS.items():
        if flags.get(name) not in (None, False):
            raise RecipeError(reason)


def assemble_flags(recipe: Recipe, row: TableRow, card: ModelCard, layout: ParallelLayout, train_iters: int,
                   inputs: RunInputs) -> dict[str, FlagValue]:
    """Model, layout, batch, data, recipe, row and checkpoint flags in that order (a later group overrides an earlier
    one, under whichever spelling of a setting: :func:`apply_flags`); the recipe's and the row's flags may not change
    a flag of the first four groups (:func:`check_overrides`): the card owns every flag it fills in, since the run
    builds the card ``--oellm-model`` names. Their values must read as meant (:func:`check_flag_values`)."""
    card_flags = {**card_name_flag(card), **model_flags(card, vocab_size=card.vocab_size)}
    owned: dict[str, dict[str, FlagValue]] = {
        "the model card (model, vocab_size)": card_flags,
        "the parallel layout ([parallel], a row's parallel)": parallel_flags(card, layout),
        "the row (seq_length, micro_batch_size, global_batch_size, train_iters)": {
            "seq-length": card.seq_length, "micro-batch-size": row.micro_batch_size,
            "global-batch-size": row.global_batch_size, "train-iters": train_iters, "train-samples": None},
        "the run inputs (--data-path, --tokenizer-model)": data_flags(inputs),
    }
    check_flag_names("[megatron_flags]", recipe.megatron_flags)
    check_flag_names("the row's flags", row.flags)
    check_flag_values("[megatron_flags]", recipe.megatron_flags)
    check_flag_values("the row's flags", row.flags)
    check_argv_tokens("[megatron_flags]", recipe.megatron_flags)
    check_argv_tokens("the row's flags", row.flags)
    check_overrides("[megatron_flags]", recipe.megatron_flags, owned)
    check_overrides("the row's flags", row.flags, owned)
    flags = dict(card_flags)
    for group in owned.values():
        flags.update(group)
    apply_flags(flags, recipe.megatron_flags)
    apply_flags(flags, row.flags)
    apply_flags(flags, with_own_checkpoint_paths(checkpoint_flags(inputs), flags))
    check_removals(flags)
    check_unwired(flags)
    check_save_target(flags)
    return flags


def check_argv_tokens(where: str, given: Mapping[str, FlagValue]) -> None:
    """Refuse a flag of ``given`` that cannot be written as argv tokens (a list element such as ``"-inf"``, which
    argparse would read as an option): :func:`flags_to_argv` raises ``ValueError`` for it, which ended ``oellm
    recipe`` with a traceback instead of a message naming where the flag was set."""
    for name, value in given.items():
        try:
            flags_to_argv({name: value})
        except ValueError as err:
            raise RecipeError(f"{err} (in {where})") from err


SAVE_INTERVAL_FLAGS = ("save-interval", "persistent-save-interval")
"""The spellings of megatron's checkpoint interval (one ``save_interval`` setting)."""


def check_save_target(flags: Mapping[str, FlagValue]) -> None:
    """Refuse a checkpoint interval without ``--save``: megatron-core saves only when ``--save`` names a directory,
    so a ``save-interval`` set in a recipe or row alone would train without saving a checkpoint, silently."""
    for name in SAVE_INTERVAL_FLAGS:
        interval = flags.get(name)
        if interval not in (None, False, 0, "0") and flags.get("save") in (None, False):
            raise RecipeError(f"--{name} {interval!r} saves nothing without --save (megatron-core saves only to a "
                              f"--save directory); pass `oellm recipe --save-interval {interval}` instead (checkpoints "
                              "in the run directory), or set save as well")


def check_overrides(where: str, given: Mapping[str, FlagValue], owned: Mapping[str, Mapping[str, FlagValue]]) -> None:
    """Refuse a flag of ``given`` that changes a flag set by one of the ``owned`` groups (the last group naming it
    owns it): such an override would bypass the layout and batch checks, or contradict the model card. Restating the
    same value is allowed."""
    for name, value in given.items():
        owners = [(owner, group[name]) for owner, group in owned.items() if name in group]
        if not owners:
            continue
        owner, expected = owners[-1]
        if flags_to_argv({name: value}) != flags_to_argv({name: expected}):
            shown = "leaves it unset" if expected is None or expected is False else f"sets it to {expected!r}"
            pattern = owned[owner].get("hybrid-layer-pattern")
            if name == "num-layers" and isinstance(pattern, str):  # a card's pattern: a mixer and an MoE per layer
                layers = len(pattern) // 2
                shown += (f" (megatron counts each symbol of the hybrid pattern {pattern!r} as a layer: "
                          f"{layers} mixer and {layers} MoE layers)")
            fix = "change it there, not as a Megatron flag"
            if name == "train-samples":  # megatron's validate_args asserts iteration-based training beside it
                shown += " (the run's length is the row's train_iters, and megatron refuses --train-samples beside it)"
                fix = "remove it, and give the row's train_iters instead"
            given_text = (f"removing --{name} ({name} = false)" if value is False
                          else f"--{name} {value!r}")
            raise RecipeError(f"{given_text} in {where} contradicts {owner}, which {shown}; {fix}")


def select_rows(recipe: Recipe, row: int | None = None, nodes: int | None = None) -> list[int]:
    """1-based row numbers chosen by ``--row`` or ``--nodes`` (all rows if neither)."""
    if row is not None and nodes is not None:
        raise RecipeError("give --row or --nodes, not both")
    if row is not None:
        recipe.row(row)
        return [row]
    if nodes is None:
        return list(range(1, len(recipe.rows) + 1))
    numbers = recipe.row_numbers_with_nodes(nodes)
    if not numbers:
        raise RecipeError(f"recipe {recipe.name} has no row on {nodes} nodes; rows run on "
                          f"{sorted({r.nodes for r in recipe.rows})} nodes")
    return numbers

