"""``oellm plan``: validate a parallel layout for a model and print what every GPU holds, with no GPU needed."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from dataclasses import asdict
from typing import Any

from megatron.oellm.cards import CardError, ModelCard, get_card
from megatron.oellm.commands import int_at_least, refuse
from megatron.oellm.flops import CORRECTED_MODE, MEGATRON_VOCAB_DIVISOR, megatron_padded_vocab
from megatron.oellm.models.parallel import (
    HYBRID_STAGES,
    ParallelLayout,
    ParallelLayoutError,
    pipeline_layout_from_hybrid_pattern,
    same_stages_hybrid_pattern,
)
from megatron.oellm.params import parameter_counts
from megatron.oellm.plan import (
    GIB,
    Plan,
    build_plan,
    check_padded_vocab,
    format_plan,
    free_bytes,
    micro_batches_per_step,
    plan_flops,
    plan_notes,
    run_hybrid_layer_pattern,
)
from megatron.oellm.recipes.config import RecipeError
from megatron.oellm.recipes.resolve import check_batch
from megatron.oellm.training.model_provider import hybrid_pattern_stage_layout
from megatron.oellm.training.pipeline_schedule import interleaved_schedule_refusal

HELP = "validate a parallel layout for a model and print parameters and memory per GPU, FLOPs per token"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``oellm plan``."""
    parser.add_argument("model", help="card name, any case (see `oellm models`)")
    parser.add_argument("--nodes", type=int, required=True, help="number of nodes of the run")
    parser.add_argument("--gpus-per-node", type=int, default=4, help="GPUs per node (default 4: MN5, Jupiter)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    parser.add_argument("--pp", type=int, default=1, help="pipeline-parallel size (default 1)")
    parser.add_argument("--vpp", type=int, default=None,
                        help="number of virtual pipeline stages per PP rank (Megatron's "
                             "--num-virtual-stages-per-pipeline-rank), not layers per virtual stage: a config's "
                             "num_layers_per_virtual_pipeline_stage N is --vpp layers / (PP x N), or (layers + 2) / "
                             "(PP x N) where it counts the embedding and the loss as a layer each (Megatron's "
                             "--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split: "
                             "Jupiter's 94 layers at PP 8, N 4 are VPP 3), a split given as --pipeline-layout, e.g. "
                             "'Et*3|(t*4|)*22t*3L' for Jupiter's (default: none; with "
                             "--pipeline-layout: its stage count / PP). Not for a hybrid model (Qwen3.5, the OEL "
                             "hybrid): give --hybrid-layer-pattern with PP x VPP segments")
    parser.add_argument("--ep", type=int, default=1, help="expert-parallel size (default 1)")
    parser.add_argument("--etp", type=int, default=None,
                        help="expert tensor-parallel size (default: --tp, as megatron-core sets it without "
                             "--expert-tensor-parallel-size; with EP, --etp 1 is usual)")
    parser.add_argument("--cp", type=int, default=1, help="context-parallel size (default 1)")
    parser.add_argument("--sp", action="store_true",
                        help="sequence parallelism (megatron-core's MoE layer needs it with TP > 1; at TP 1 it is "
                             "off, with a warning, as megatron's validate_args turns it off)")
    parser.add_argument("--pipeline-layout", default=None,
                        help="Megatron --pipeline-model-parallel-layout string (not for a hybrid model, whose run "
                             "takes its stages as '|' in --hybrid-layer-pattern: give that instead)")
    parser.add_argument("--hybrid-layer-pattern", default=None, metavar="PATTERN",
                        help="a hybrid model's stages as its run takes them: the card's layer pattern (one mixer "
                             "symbol, then E, per layer) with '|' between PP x VPP pipeline stages, as Megatron's "
                             "--hybrid-layer-pattern (default: PP even stages). At PP > 1 a hybrid plan prints the "
                             "pattern its run needs (--json: hybrid_layer_pattern)")
    parser.add_argument("--seq-length", type=int, default=None, help="default: the card's")
    parser.add_argument("--global-batch-size", type=int_at_least(1), default=None, metavar="GBS",
                        help="samples per optimizer step, as Megatron's --global-batch-size; with --micro-batch-size "
                             "(give both or neither): refused unless it is a multiple of micro batch x DP, and the "
                             "plan prints the micro-batches per step (gradient-accumulation steps)")
    parser.add_argument("--micro-batch-size", type=int_at_least(1), default=None, metavar="MBS",
                        help="samples per forward/backward pass on one GPU, as Megatron's --micro-batch-size; "
                             "with --global-batch-size")
    parser.add_argument("--padded-vocab", type=int, default=None,
                        help="the run tokenizer's vocabulary as megatron pads it, a positive multiple of "
                             "--make-vocab-size-divisible-by x TP (it may be below the card's), e.g. 384 for the "
                             "recipes' --tokenizer-model byte at TP 1 (default: the card's padded to that multiple)")
    parser.add_argument("--make-vocab-size-divisible-by", type=int_at_least(1), default=MEGATRON_VOCAB_DIVISOR,
                        metavar="N", help="as Megatron's flag: it pads the vocabulary to a multiple of N x TP "
                                          f"(default {MEGATRON_VOCAB_DIVISOR}, Megatron's and the recipes')")
    parser.add_argument("--gpu-memory-gib", metavar="GIB", default=None,
                        help="memory of one GPU in GiB (2**30 bytes): nvidia-smi's memory.total in MiB / 1024 "
                             "(NVIDIA's 'GB' are close to GiB, not 10**9 bytes: an H100 80GB reports 81559 MiB, "
                             "79.6 GiB). Adds a column of what is left per GPU after the static state (--json: "
                             "gpu_memory_gib, and free_bytes per rank); when a PP rank's static state alone exceeds "
                             "it, prints the plan, then an error line on stderr, and exits 1")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object {model, seq_length, padded_vocab, total_params, active_params, "
                             "world_size, layout, hybrid_layer_pattern, data_parallel, expert_data_parallel, ranks, "
                             "flops {mode, gflops_per_token, breakdown}}, named as in `oellm flops --json` and "
                             "`oellm models --json` (mode: corrected, our count; the parameters with the padded "
                             "vocabulary's embedding rows, as the run holds them, where `oellm models` counts the "
                             "card's vocabulary); hybrid_layer_pattern is the "
                             "--hybrid-layer-pattern a hybrid model's run needs at PP > 1 ('|' between its stages; "
                             "null otherwise); with the batch options also global_batch_size, micro_batch_size, "
                             "micro_batches_per_step")


def check_hybrid_stage_options(card: ModelCard, args: argparse.Namespace) -> None:
    """Raise :class:`ParallelLayoutError` in one line where the plan's stage options are not those the run takes:
    ``--pipeline-layout`` or ``--vpp`` for a hybrid card (megatron-core's ``validate_args`` refuses their flags beside
    ``--hybrid-layer-pattern``; the message names the pattern of the same stages, which the plan takes), or
    ``--hybrid-layer-pattern`` for a card without a hybrid pattern."""
    if card.linear_mixer == "none":
        if args.hybrid_layer_pattern is not None:
            raise ParallelLayoutError(f"--hybrid-layer-pattern: {card.name} is no hybrid model (it runs as a GPT "
                                      "model, every layer attention + MoE); give its stages as --pipeline-layout")
        return
    given = [f"--{name.replace('_', '-')} {value!r}" for name, value in
             (("pipeline_layout", args.pipeline_layout), ("vpp", args.vpp)) if value is not None]
    if given:
        pattern = same_stages_hybrid_pattern(card, ParallelLayout(pp=args.pp, vpp=args.vpp,
                                                                  pipeline_layout=args.pipeline_layout))
        raise ParallelLayoutError(f"{' and '.join(given)}: {card.name} is a hybrid model, {HYBRID_STAGES}; plan (and "
                                  f"run) the same stages with --hybrid-layer-pattern {pattern}")


def hybrid_pattern_layout(card: ModelCard, pattern: str, pp: int) -> str | None:
    """The pipeline layout of a hybrid ``card``'s ``--hybrid-layer-pattern`` ``pattern`` at ``pp`` pipeline ranks (None
    without ``|``: an even split), checked as the training entry checks it: the card's pattern once the ``|`` are
    removed, and stages of whole layers, PP x VPP of them
    (:func:`~megatron.oellm.training.model_provider.hybrid_pattern_stage_layout`, which parses the pattern once)."""
    if pattern.replace("|", "") != card.hybrid_layer_pattern:
        raise ParallelLayoutError(f"--hybrid-layer-pattern {pattern!r}: without its '|' it is not {card.name}'s layer "
                                  f"pattern {card.hybrid_layer_pattern!r}, which the run takes from the card; give "
                                  "that pattern with '|' between the pipeline stages")
    if pp < 1:  # no stage count to check: the layout's own check refuses the pp
        return pipeline_layout_from_hybrid_pattern(pattern)
    return hybrid_pattern_stage_layout(pattern, pp)


def check_plan_batch(plan: Plan, global_batch: int, micro_batch: int) -> None:
    """Raise :class:`ParallelLayoutError` in one line when megatron-core would refuse the batch on this layout: the
    recipes' rule (:func:`~megatron.oellm.recipes.resolve.check_batch`, a whole number of micro-batches on every
    data-parallel rank) and, with virtual stages, the interleaved schedule's (its default micro-batch group of PP)."""
    try:
        check_batch(plan.layout, plan.world_size, global_batch, micro_batch)
    except RecipeError as error:
        raise ParallelLayoutError(f"--global-batch-size / --micro-batch-size: {error}") from None
    pipeline = plan.layout.pp
    if pipeline > 1 and plan.layout.vpp_size > 1:
        micro_batches = micro_batches_per_step(plan, global_batch, micro_batch)
        refusal = interleaved_schedule_refusal(micro_batches, pipeline, pipeline)
        if refusal is not None:
            raise ParallelLayoutError(f"--global-batch-size {global_batch}: megatron-core's interleaved pipeline "
                                      f"schedule (PP{pipeline} x VPP{plan.layout.vpp_size}) would stop at the first "
                                      f"step: {refusal}; use a multiple of PP x micro batch x DP = "
                                      f"{pipeline * micro_batch * plan.data_parallel}")


def planned_seq_length(seq_length: int) -> int:
    """``--seq-length``, refused in one line naming the flag (as ``oellm flops`` does) when not positive: the card
    would refuse it naming its field ``seq_length``, which the user never typed."""
    if seq_length < 1:
        raise ParallelLayoutError(f"--seq-length must be positive, got {seq_length} (a length in tokens; leave it out "
                                  "for the card's)")
    return seq_length


def planned_sequence_parallel(args: argparse.Namespace) -> bool:
    """``--sp`` as megatron's ``validate_args`` takes it: at TP 1 it warns and turns sequence parallelism off (there
    is no tensor-parallel group to split the sequence over), so the plan warns on stderr and plans without it."""
    if args.sp and args.tp == 1:
        print("oellm plan: warning: --sp at --tp 1: sequence parallelism is off, as megatron's validate_args turns it "
              "off without tensor parallelism ('Disabling sequence parallelism because tensor model parallelism is "
              "disabled'); planned without it", file=sys.stderr)
        return False
    return args.sp


def plan_report(plan: Plan, gpu_gib: float | None, batch: tuple[int, int] | None) -> dict[str, Any]:
    """The ``--json`` object of the plan: what the text prints of the card (sequence, padded vocabulary, total and
    active parameters, named as ``oellm flops --json`` and ``oellm models --json`` name them, counted with the padded
    vocabulary as the run holds it, where ``oellm models`` counts the card's own), layout, the hybrid
    pattern its run needs (:func:`~megatron.oellm.plan.run_hybrid_layer_pattern`), groups, ranks and FLOPs with
    their mode (our corrected count, as ``oellm flops`` names it); with ``gpu_gib`` what is left per GPU, with
    ``batch`` (global, micro) the micro-batches per step."""
    card = plan.card
    count = plan_flops(plan, card.seq_length)
    flops = {"mode": CORRECTED_MODE, "gflops_per_token": count.gflops_per_token, "breakdown": count.gflops_breakdown()}
    params = parameter_counts(card)
    layout_fields = {**asdict(plan.layout), "vpp_size": plan.layout.vpp_size}  # vpp as given (None: none), vpp used
    ranks = [asdict(r) for r in plan.ranks]
    extra: dict[str, Any] = {}
    if gpu_gib is not None:
        extra["gpu_memory_gib"] = gpu_gib
        for rank, fields in zip(plan.ranks, ranks, strict=True):
            fields["free_bytes"] = free_bytes(rank, gpu_gib)
    if batch is not None:
        extra.update(global_batch_size=batch[0], micro_batch_size=batch[1],
                     micro_batches_per_step=micro_batches_per_step(plan, *batch))
    return {"model": card.name, "seq_length": card.seq_length, "padded_vocab": card.vocab_size,
            "total_params": params.total, "active_params": params.active, "world_size": plan.world_size,
            "layout": layout_fields,
            "hybrid_layer_pattern": run_hybrid_layer_pattern(plan), "data_parallel": plan.data_parallel,
            "expert_data_parallel": plan.expert_data_parallel, **extra,
            "ranks": ranks, "flops": flops}


def run(args: argparse.Namespace) -> int:
    """Build, validate and print the plan; exit 2 with the reason on stderr on a bad model or layout (stdout, which
    ``--json`` users redirect to a file, holds the plan only); with ``--gpu-memory-gib``, exit 1 after the plan when
    a pipeline rank's static state alone does not fit the GPU."""
    gpu_gib = None
    if args.gpu_memory_gib is not None:
        try:
            gpu_gib = float(args.gpu_memory_gib)
        except ValueError:
            pass
        if gpu_gib is None or not math.isfinite(gpu_gib) or gpu_gib <= 0:
            return refuse("plan", f"--gpu-memory-gib: expected a positive finite number of GiB (nvidia-smi's "
                                  f"memory.total in MiB / 1024), got {args.gpu_memory_gib!r}")
    if (args.global_batch_size is None) != (args.micro_batch_size is None):
        return refuse("plan", "--global-batch-size and --micro-batch-size go together: give both (e.g. "
                              "--global-batch-size 2048 --micro-batch-size 1) or neither")
    try:
        if args.nodes < 1 or args.gpus_per_node < 1:
            raise ParallelLayoutError(f"--nodes {args.nodes} x --gpus-per-node {args.gpus_per_node}: both must be >= 1")
        card = get_card(args.model)
        divisor = args.make_vocab_size_divisible_by
        if args.padded_vocab is not None:
            check_padded_vocab(args.padded_vocab, args.tp, divisor)
            card = card.with_vocab(args.padded_vocab)
        elif args.tp >= 1:  # Megatron pads the vocabulary to N x TP (tp < 1 is refused by the layout check below)
            card = card.with_vocab(megatron_padded_vocab(card.vocab_size, args.tp, divisor))
        if args.seq_length is not None:
            card = dataclasses.replace(card, seq_length=planned_seq_length(args.seq_length))
        check_hybrid_stage_options(card, args)
        pipeline_layout = args.pipeline_layout
        if args.hybrid_layer_pattern is not None:
            pipeline_layout = hybrid_pattern_layout(card, args.hybrid_layer_pattern, args.pp)
        etp = args.tp if args.etp is None else args.etp
        layout = ParallelLayout(tp=args.tp, pp=args.pp, vpp=args.vpp, ep=args.ep, etp=etp, cp=args.cp,
                                sp=planned_sequence_parallel(args), pipeline_layout=pipeline_layout)
        plan = build_plan(card, layout, world_size=args.nodes * args.gpus_per_node)
        batch = None if args.global_batch_size is None else (args.global_batch_size, args.micro_batch_size)
        if batch is not None:
            check_plan_batch(plan, *batch)
    except (CardError, ParallelLayoutError) as error:
        if (args.etp is None and args.tp > 1 and isinstance(error, ParallelLayoutError)
                and re.search(r"\betp\b", str(error))):
            return refuse("plan", f"{error} (etp is {args.tp} because --etp was not given: it defaults to --tp, as "
                                  "megatron-core's expert tensor-parallel size does without "
                                  "--expert-tensor-parallel-size; with EP, --etp 1 is usual)")
        return refuse("plan", error)
    if args.json:
        print(json.dumps(plan_report(plan, gpu_gib, batch), indent=2))
        for line in plan_notes(plan):  # the text output ends with them; here stdout holds the JSON only
            print(line, file=sys.stderr)
    else:
        print(format_plan(plan, card.seq_length, gpu_gib, batch))
    if gpu_gib is not None:
        worst = max(plan.ranks, key=lambda r: r.static_bytes)
        if free_bytes(worst, gpu_gib) < 0:
            over = sum(free_bytes(r, gpu_gib) < 0 for r in plan.ranks)
            return refuse("plan", f"PP rank {worst.pipeline_rank} holds {worst.static_bytes / GIB:.2f} GiB of static "
                                  f"state per GPU, more than the GPU's {gpu_gib:g} GiB ({over} of {len(plan.ranks)} "
                                  "PP ranks do not fit): out of memory at start with bf16 weights, fp32 gradients "
                                  "and the distributed optimizer; shard it over more GPUs (more EP for the experts, "
                                  "more PP for the layers, more DP to split the optimizer state) or use a bigger GPU",
                          status=1)
    return 0
