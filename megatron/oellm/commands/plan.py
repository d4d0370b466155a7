"""``oellm plan``: validate a parallel layout for a model and print what every GPU holds, with no GPU needed."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from megatron.oellm.cards import CardError, get_card
from megatron.oellm.models.parallel import ParallelLayout, ParallelLayoutError
from megatron.oellm.params import format_count, parameter_counts
from megatron.oellm.plan import Plan, build_plan

HELP = "validate a parallel layout for a model and print parameters and memory per GPU, FLOPs per token"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``oellm plan``."""
    parser.add_argument("model", help="card name (see `oellm models`)")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--vpp", type=int, default=None)
    parser.add_argument("--ep", type=int, default=1)
    parser.add_argument("--etp", type=int, default=1)
    parser.add_argument("--cp", type=int, default=1)
    parser.add_argument("--sp", action="store_true")
    parser.add_argument("--pipeline-layout", default=None, help="Megatron --pipeline-model-parallel-layout string")
    parser.add_argument("--seq-length", type=int, default=None, help="default: the card's")
    parser.add_argument("--padded-vocab", type=int, default=None, help="default: the card's vocabulary")
    parser.add_argument("--json", action="store_true")


def _print_plan(plan: Plan, flops: dict[str, float], seq_length: int) -> None:
    card, layout = plan.card, plan.layout
    counts = parameter_counts(card)
    print(f"model        {card.name}  ({card.family}; {card.num_layers} layers, hidden {card.hidden_size}, "
          f"{card.num_experts}x{card.moe_ffn_hidden_size} top-{card.moe_router_topk}, vocab {card.vocab_size})")
    print(f"parameters   total {format_count(counts.total)}, active {format_count(counts.active)}")
    print(f"layout       TP{layout.tp} PP{layout.pp} VPP{layout.vpp_size} EP{layout.ep} ETP{layout.etp} "
          f"CP{layout.cp}{' SP' if layout.sp else ''} on {plan.world_size} GPUs: DP {plan.data_parallel}, "
          f"expert DP {plan.expert_data_parallel}")
    if layout.pipeline_layout:
        print(f"pipeline     {layout.pipeline_layout}")
    print("checks       heads/groups vs TP, experts vs EP, expert width vs ETP, layers vs PP x VPP layout, "
          "world size: OK")
    print(f"FLOPs        {flops['gflops_per_token']:.2f} GFLOP/token (training, seq {seq_length}); "
          + ", ".join(f"{k} {v:.2f}" for k, v in flops["breakdown"].items()))
    print()
    print(f"{'PP rank':>7} {'layers':>6} {'first-last':>11} {'emb':>3} {'head':>4} {'dense/GPU':>10} "
          f"{'experts/GPU':>11} {'static GiB':>10}")
    for r in plan.ranks:
        span = f"{min(r.decoder_layers)}-{max(r.decoder_layers)}" if r.decoder_layers else "-"
        print(f"{r.pipeline_rank:>7} {len(r.decoder_layers):>6} {span:>11} {'y' if r.has_embedding else '':>3} "
              f"{'y' if r.has_output_layer else '':>4} {format_count(r.dense_params):>10} "
              f"{format_count(r.expert_params):>11} {r.static_bytes / 2**30:>10.1f}")
    print("static = bf16 weights + fp32 grads + distributed-optimizer state (fp32 master + 2 moments / DP); "
          "activations not included")


def run(args: argparse.Namespace) -> int:
    """Build, validate and print the plan; exit 2 with the reason on a bad model or layout."""
    from megatron.oellm.flops import training_flops_per_token

    try:
        card = get_card(args.model)
        if args.padded_vocab:
            card = card.with_vocab(args.padded_vocab)
        layout = ParallelLayout(tp=args.tp, pp=args.pp, vpp=args.vpp, ep=args.ep, etp=args.etp, cp=args.cp,
                                sp=args.sp, pipeline_layout=args.pipeline_layout)
        plan = build_plan(card, layout, world_size=args.nodes * args.gpus_per_node)
    except (CardError, ParallelLayoutError) as error:
        print(f"oellm plan: {error}")
        return 2
    seq_length = args.seq_length or card.seq_length
    count = training_flops_per_token(card, seq_length)
    flops = {"gflops_per_token": count.total / 1e9, "breakdown": {k: v / 1e9 for k, v in count.breakdown.items()}}
    if args.json:
        print(json.dumps({"model": card.name, "world_size": plan.world_size, "layout": asdict(layout),
                          "data_parallel": plan.data_parallel, "expert_data_parallel": plan.expert_data_parallel,
                          "ranks": [asdict(r) for r in plan.ranks], "flops": flops}, indent=2))
    else:
        _print_plan(plan, flops, seq_length)
    return 0
