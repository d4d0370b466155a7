"""A training plan for one model at one parallel layout: what each GPU holds, before any GPU is touched.

``oellm plan`` prints it: the card, the validated layout, parameters and static memory per pipeline rank (weights,
gradients, distributed-optimizer state), and FLOPs per token. Pure Python (no torch, no megatron-core).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from megatron.oellm.cards import CardError, ModelCard, placeholder_notes
from megatron.oellm.flops import (
    CORRECTED_MODE,
    FlopCount,
    megatron_counts,
    megatron_padded_vocab,
    training_flops_per_token,
)
from megatron.oellm.models.parallel import (
    ParallelLayout,
    ParallelLayoutError,
    layout_from_counts,
    pipelined_hybrid_pattern,
    validate_layout,
)
from megatron.oellm.params import format_count, layer_params, parameter_counts, tp_replicated_layer_params

BYTES_PER_PARAM_WEIGHT = 2
"""bf16 weights."""
BYTES_PER_PARAM_GRAD = 4
"""fp32 main gradients (megatron's default with the distributed optimizer)."""
BYTES_PER_PARAM_OPTIMIZER = 12
"""fp32 master weights + Adam's two moments, sharded by the distributed optimizer over the data-parallel group
(with context parallelism: DP x CP for dense parameters; the expert data-parallel group for experts)."""


@dataclass(frozen=True)
class RankPlan:
    """What one pipeline rank holds on each of its GPUs."""

    pipeline_rank: int
    decoder_layers: tuple[int, ...]
    """Global decoder-layer indices on this rank, over all its virtual stages."""
    has_embedding: bool
    has_output_layer: bool
    dense_params: int
    """Non-expert parameters per GPU: TP splits the matrices and the embedding / output layer; the norms, the router
    and the shared expert's gate are whole on every TP rank (:func:`~megatron.oellm.params.tp_replicated_layer_params`)."""
    expert_params: int
    """Routed-expert parameters per GPU (after EP x ETP sharding)."""
    static_bytes: int
    """Weights + gradients + sharded optimizer state per GPU."""


@dataclass(frozen=True)
class Plan:
    """A validated layout and its per-rank contents."""

    card: ModelCard
    layout: ParallelLayout
    world_size: int
    data_parallel: int
    expert_data_parallel: int
    ranks: tuple[RankPlan, ...]


def _stage_layers(card: ModelCard, layout: ParallelLayout) -> list[tuple[list[int], bool, bool]]:
    """Per virtual stage (layout order): decoder-layer indices, has embedding, has output layer."""
    counts = layout.decoder_layers_per_stage(card.num_layers)
    if layout.custom_stages is not None:
        flags = [("embedding" in s, "loss" in s) for s in layout.custom_stages]
    else:
        flags = [(i == 0, i == len(counts) - 1) for i in range(len(counts))]
    out, start = [], 0
    for count, (embedding, loss) in zip(counts, flags, strict=True):
        out.append((list(range(start, start + count)), embedding, loss))
        start += count
    return out


def check_padded_vocab(padded_vocab: int, tp: int, divisor: int) -> None:
    """Raise :class:`ParallelLayoutError` in one line unless megatron can pad a tokenizer's vocabulary to
    ``padded_vocab`` at tensor-parallel size ``tp`` and ``--make-vocab-size-divisible-by`` ``divisor``: it rounds the
    vocabulary up to a multiple of ``divisor`` x ``tp``, so only a positive multiple of that is one (which also splits
    the embedding and output layer rows evenly over TP, as megatron-core's vocab-parallel layers require). It may be
    below the card's own vocabulary (the run's tokenizer is not the card's: the recipes' byte tokenizer pads to 384).
    A checkpoint read with ``--use-checkpoint-args`` keeps the size it was saved with, which ``divisor`` 1 plans; at
    a TP that does not divide it the refusal says the checkpoint cannot run there (:func:`rows_not_split_over_tp`).
    A ``tp`` below 1 is left for the layout's own check."""
    multiple = divisor * tp
    if tp >= 1 and (padded_vocab < 1 or padded_vocab % multiple):
        nearest = megatron_padded_vocab(max(padded_vocab, 1), tp, divisor)
        if divisor == 1 and padded_vocab >= 1:
            raise rows_not_split_over_tp(padded_vocab, tp, nearest)
        raise ParallelLayoutError(
            f"--padded-vocab {padded_vocab}: megatron pads the tokenizer's vocabulary up to a multiple of "
            f"--make-vocab-size-divisible-by ({divisor}) x TP ({tp}) = {multiple}, so a padded vocabulary is a "
            f"positive multiple of {multiple}; give the run's padded vocabulary (its log's 'padded vocab ... new "
            f"size'; the multiple at or above {padded_vocab} is {nearest}), and the run's "
            "--make-vocab-size-divisible-by where it sets one (a checkpoint loaded with --use-checkpoint-args keeps "
            "the padded size it was saved with, e.g. saved at TP 1 and resumed at TP 2: plan that with "
            "--make-vocab-size-divisible-by 1)")


def rows_not_split_over_tp(padded_vocab: int, tp: int, nearest: int) -> ParallelLayoutError:
    """The refusal of ``padded_vocab`` rows that do not split evenly over ``tp`` ranks at
    ``--make-vocab-size-divisible-by 1``, naming both runs such a plan stands for: one loading a checkpoint with
    ``--use-checkpoint-args``, where megatron keeps the checkpoint's padded vocabulary at any TP and divisor and
    megatron-core's vocab-parallel embedding and output layer then fail to split it (an assertion when the model is
    built), so the checkpoint cannot run at this TP; and one padding its own tokenizer's vocabulary to a multiple of
    TP, to ``nearest``."""
    return ParallelLayoutError(
        f"--padded-vocab {padded_vocab} {checkpoint_vocab_not_split(tp)}; plan (and run) it at a TP that divides "
        f"{padded_vocab}; a run that pads its own tokenizer's vocabulary with --make-vocab-size-divisible-by 1 pads "
        f"it to a multiple of TP ({nearest} at or above {padded_vocab})")


def checkpoint_vocab_not_split(tp: int) -> str:
    """Why a padded vocabulary that ``tp`` does not divide cannot run at that TP when it is a checkpoint's, as a
    predicate of the vocabulary ("does not split evenly over TP ..."): megatron-core's vocab-parallel embedding and
    output layer assert that their rows split evenly when the model is built, and ``--use-checkpoint-args`` keeps
    the checkpoint's padded size at any TP. Shared by this refusal and the training entry's
    (:func:`megatron.oellm.training.load_checks.check_checkpoint_padded_vocabulary`), so that both say it alike."""
    return (f"does not split evenly over TP ({tp}), as megatron-core's vocab-parallel embedding and output layer "
            "require (they assert it when the model is built): a checkpoint loaded with --use-checkpoint-args keeps "
            f"the padded size it was saved with at any TP, so it cannot run at TP {tp}")


def _check_sequence_fits_positions(card: ModelCard) -> None:
    """The planned sequence must fit the card's ``max_position_embeddings``: megatron's ``validate_args`` asserts it,
    and the training entry refuses a longer ``--seq-length`` beside the card (whose limit is an architecture flag)."""
    if card.seq_length > card.max_position_embeddings:
        raise CardError(f"seq_length {card.seq_length} exceeds {card.name}'s max_position_embeddings "
                        f"{card.max_position_embeddings}: megatron and the training entry refuse a longer sequence; "
                        f"plan with --seq-length {card.max_position_embeddings} or less")


def build_plan(card: ModelCard, layout: ParallelLayout, world_size: int) -> Plan:
    """Validate ``layout`` for ``card`` on ``world_size`` GPUs and compute what each pipeline rank holds. The card's
    vocabulary is taken as megatron pads it (:func:`check_padded_vocab`'s rule; the callers pad it or check it)."""
    if world_size < 1:
        raise ParallelLayoutError(f"world size {world_size}: a plan needs at least one GPU (nodes x GPUs per node)")
    validate_layout(card, layout, world_size=world_size)
    _check_sequence_fits_positions(card)
    dp = world_size // (layout.tp * layout.pp * layout.cp)
    edp = world_size // (layout.etp * layout.ep * layout.pp)
    per_rank: dict[int, list] = {r: [[], False, False] for r in range(layout.pp)}
    for stage, (layers, embedding, loss) in enumerate(_stage_layers(card, layout)):
        entry = per_rank[stage % layout.pp]
        entry[0] += layers
        entry[1] |= embedding
        entry[2] |= loss
    per_layer = [layer_params(card, mixer) for mixer in card.mixer_types]
    replicated = [tp_replicated_layer_params(card, mixer) for mixer in card.mixer_types]
    vocab_params = card.vocab_size * card.hidden_size
    ranks = []
    for rank, (layers, embedding, loss) in per_rank.items():
        dense = sum(per_layer[i][0] for i in layers)
        experts = sum(per_layer[i][1] for i in layers)
        whole = sum(replicated[i] for i in layers) + (card.hidden_size if loss else 0)  # + the final norm
        dense += vocab_params * embedding
        if loss:
            dense += card.hidden_size + (vocab_params if card.untie_embeddings or not embedding else 0)
        dense = (dense - whole) // layout.tp + whole
        experts //= layout.ep * layout.etp
        static = ((dense + experts) * (BYTES_PER_PARAM_WEIGHT + BYTES_PER_PARAM_GRAD)
                  + dense * BYTES_PER_PARAM_OPTIMIZER // (dp * layout.cp)
                  + experts * BYTES_PER_PARAM_OPTIMIZER // edp)
        ranks.append(RankPlan(rank, tuple(layers), embedding, loss, dense, experts, static))
    return Plan(card, layout, world_size, dp, edp, tuple(ranks))


def run_hybrid_layer_pattern(plan: Plan) -> str | None:
    """The ``--hybrid-layer-pattern`` a run of the plan needs when its card is hybrid (GDN or CKDA layers) and PP > 1:
    the card's pattern with ``|`` between the plan's pipeline stages, as the recipes pass it
    (:func:`~megatron.oellm.models.parallel.pipelined_hybrid_pattern`). megatron refuses
    ``--pipeline-model-parallel-layout`` and the virtual-stage flags beside a hybrid pattern: its ``|`` segments are
    the stages, pp x vpp of them. None for a card without a hybrid pattern, or at PP 1 (the card's own pattern)."""
    if plan.card.linear_mixer == "none" or plan.layout.pp == 1:
        return None
    return pipelined_hybrid_pattern(plan.card, plan.layout)


def _pipeline_line(plan: Plan) -> str | None:
    """The text's ``pipeline`` line: a hybrid run's ``--hybrid-layer-pattern`` (quoted for a shell) with its stages in
    layout form, else the custom pipeline layout given; None when there is neither."""
    pattern = run_hybrid_layer_pattern(plan)
    if pattern is not None:
        stages = plan.layout.pipeline_layout or layout_from_counts(
            plan.layout.decoder_layers_per_stage(plan.card.num_layers))
        return f"pipeline     --hybrid-layer-pattern {shlex.quote(pattern)}  (stages {stages})"
    if plan.layout.pipeline_layout:
        return f"pipeline     {plan.layout.pipeline_layout}"
    return None


def plan_flops(plan: Plan, seq_length: int) -> FlopCount:
    """Training FLOPs per token of the planned model: logits over the vocabulary the plan's embedding holds (already
    padded as megatron pads it, or as given), not that vocabulary rounded up to 128 once more."""
    return training_flops_per_token(plan.card, seq_length, padded_vocab=plan.card.vocab_size)


def flops_mode_label(card: ModelCard) -> str:
    """Which count the plan's FLOPs are, as ``oellm flops`` names it (mode :data:`~megatron.oellm.flops.CORRECTED_MODE`,
    our count of the matrix work), and where Megatron's own count is: ``oellm flops --megatron-compatible``, except
    for a CKDA card, which megatron-core cannot count (:func:`~megatron.oellm.flops.megatron_counts`)."""
    megatron = ("Megatron's count: oellm flops --megatron-compatible" if megatron_counts(card)
                else "megatron-core 0.19.2 has no CKDA layer to count")
    return f"mode {CORRECTED_MODE}: our count of the matrix work, docs/flops.md; {megatron}"


def idle_stage_warnings(plan: Plan) -> list[str]:
    """One ``warning:`` line per pipeline stage (virtual stages included) that holds no decoder layer, no embedding and
    no loss: megatron-core accepts such a stage, whose GPUs then only wait and pass activations on, which a layout
    means only by mistake (``||``)."""
    layout = plan.layout
    stages = _stage_layers(plan.card, layout)
    lines = []
    for index, (layers, embedding, loss) in enumerate(stages):
        if layers or embedding or loss:
            continue
        virtual = f", virtual stage {index // layout.pp}" if layout.vpp_size > 1 else ""
        lines.append(f"warning: PP rank {index % layout.pp}{virtual} (stage {index + 1} of {len(stages)} of the "
                     f"pipeline layout {layout.pipeline_layout!r}) holds no decoder layer, no embedding and no loss: "
                     "its GPUs would idle through every step; an empty stage ('||') is likely a typo")
    return lines


def plan_notes(plan: Plan) -> list[str]:
    """The ``note:`` and ``warning:`` lines that follow the plan: placeholder values of its card
    (:func:`~megatron.oellm.cards.placeholder_notes`), then idle pipeline stages (:func:`idle_stage_warnings`)."""
    return placeholder_notes([plan.card]) + idle_stage_warnings(plan)


def micro_batches_per_step(plan: Plan, global_batch: int, micro_batch: int) -> int:
    """Micro-batches each data-parallel rank runs per optimizer step (the gradient-accumulation steps): ``global_batch``
    over ``micro_batch`` x DP; a batch that does not divide is refused by the callers first (``oellm plan``, the
    recipes: :func:`megatron.oellm.recipes.resolve.check_batch`)."""
    return global_batch // (micro_batch * plan.data_parallel)


GIB = 2**30
"""Bytes per GiB: the plan's memory columns and ``--gpu-memory-gib`` are binary, as nvidia-smi's MiB / 1024."""


def free_bytes(rank: RankPlan, gpu_memory_gib: float) -> int:
    """What is left on each GPU of ``rank`` (``gpu_memory_gib``, in whole bytes rounded down) after its static state;
    negative when the static state alone does not fit (out of memory before the first step)."""
    return int(gpu_memory_gib * GIB) - rank.static_bytes


def format_plan(plan: Plan, seq_length: int, gpu_memory_gib: float | None = None,
                batch: tuple[int, int] | None = None) -> str:
    """The plan as text: card, layout, pipeline stages (for a hybrid card at PP > 1 as the run's
    ``--hybrid-layer-pattern``, :func:`run_hybrid_layer_pattern`) and checks, FLOPs per token (which count:
    :func:`flops_mode_label`), one line per pipeline rank, then its notes and warnings (:func:`plan_notes`); with
    ``gpu_memory_gib``, a column of what is left per GPU after the static state; with ``batch`` (global, micro), how
    it splits into micro-batches per step."""
    card, layout = plan.card, plan.layout
    counts = parameter_counts(card)
    flops = plan_flops(plan, seq_length)
    lines = [
        f"model        {card.name}  ({card.family}; {card.num_layers} layers, hidden {card.hidden_size}, "
        f"{card.num_experts}x{card.moe_ffn_hidden_size} top-{card.moe_router_topk}, padded vocab {card.vocab_size})",
        f"parameters   total {format_count(counts.total)}, active {format_count(counts.active)}",
        f"layout       {layout.sizes_label()} on {plan.world_size} GPUs: DP {plan.data_parallel}, "
        f"expert DP {plan.expert_data_parallel}",
    ]
    pipeline = _pipeline_line(plan)
    if pipeline is not None:
        lines.append(pipeline)
    if batch is not None:
        global_batch, micro_batch = batch
        lines.append(f"batch        global {global_batch} = micro {micro_batch} x DP {plan.data_parallel} x "
                     f"{micro_batches_per_step(plan, global_batch, micro_batch)} micro-batches per step (gradient "
                     "accumulation)")
    lines += [
        "checks       heads/groups vs TP, experts vs EP, expert width vs ETP, layers vs PP x VPP layout, "
        "world size: OK",
        f"FLOPs        {flops.total / 1e9:.2f} GFLOP/token (training, seq {seq_length}, {flops_mode_label(card)}): "
        + ", ".join(f"{k} {v / 1e9:.2f}" for k, v in flops.breakdown.items()),
        "",
        f"{'PP rank':>7} {'layers':>6} {'emb':>3} {'head':>4} {'dense/GPU':>10} {'experts/GPU':>11} {'static GiB':>10}"
        + ("" if gpu_memory_gib is None else f" {'free GiB':>9}"),
    ]
    for r in plan.ranks:
        lines.append(f"{r.pipeline_rank:>7} {len(r.decoder_layers):>6} {'y' if r.has_embedding else '':>3} "
                     f"{'y' if r.has_output_layer else '':>4} {format_count(r.dense_params):>10} "
                     f"{format_count(r.expert_params):>11} {r.static_bytes / GIB:>10.1f}"
                     + ("" if gpu_memory_gib is None else f" {free_bytes(r, gpu_memory_gib) / GIB:>9.1f}"))
    lines.append("static = bf16 weights + fp32 grads + distributed-optimizer state (fp32 master + 2 moments / DP); "
                 "activations not included")
    if gpu_memory_gib is not None:
        lines.append(f"free = {gpu_memory_gib:g} GiB per GPU - static: activations, NCCL buffers and the CUDA context "
                     "must fit in it")
    return "\n".join(lines + plan_notes(plan))
