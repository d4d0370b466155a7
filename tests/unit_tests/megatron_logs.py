"""Synthetic Megatron stdout logs in megatron-core 0.19.2's exact print formats, shared by the ``oellm table`` and
run-log tests."""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path

from megatron.oellm.recipes import load_recipe, resolve_row
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from megatron.oellm.training.args import parse_oellm_argv

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "oellm"
"""The recipe folder whose rows give the logs' argument namespaces."""

_ARGS_CACHE: dict[tuple, dict] = {}


def megatron_args(stem: str, row: int, overrides: dict | None = None) -> dict:
    """The argument namespace Megatron would print for a recipe row (parsed by the training entry's parser:
    megatron-core's flags and ``--oellm-*``), with the sizes megatron-core 0.19.2's ``validate_args`` sets before
    ``_print_args``: ``world_size`` (the row's nodes x the cluster's GPUs per node, or the one ``overrides`` gives) and,
    where the layout divides it, ``data_parallel_size`` and ``gtp_weight_remat_size`` (:func:`validated_sizes`), so
    that ``oellm table``'s world-size product check runs on the recipes' real layouts, and ``encoder_seq_length``
    (:func:`validated_lengths`). ``overrides`` win."""
    key = (stem, row)
    if key not in _ARGS_CACHE:
        recipe = load_recipe(EXAMPLES / f"{stem}.toml")
        recipe_row = recipe.rows[row - 1]
        parsed = vars(parse_oellm_argv(resolve_row(recipe, recipe_row).argv))
        _ARGS_CACHE[key] = {**parsed, "world_size": recipe_row.nodes * recipe.cluster.gpus_per_node}
    args = {**_ARGS_CACHE[key], **(overrides or {})}
    return {**args, **validated_sizes(args), **validated_lengths(args), **(overrides or {})}


def validated_lengths(args: dict) -> dict:
    """``encoder_seq_length`` equal to ``seq_length``, as megatron-core 0.19.2's ``validate_args`` sets it before
    ``_print_args`` (the parser's default is None); empty when the run gives no ``seq_length``."""
    return {} if args.get("seq_length") is None else {"encoder_seq_length": args["seq_length"]}


def validated_sizes(args: dict) -> dict:
    """``data_parallel_size`` = world size / (TP x PP x CP) and ``gtp_weight_remat_size`` 1 (no
    ``--tensor-parallel-num-weight-shards``), as megatron-core 0.19.2's ``validate_args`` sets them; empty when the
    layout does not divide the world size (megatron refuses to start) or a size is not an integer."""
    world = args.get("world_size")
    model = [args.get(name) for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                         "context_parallel_size")]
    if not all(isinstance(size, int) and size > 0 for size in (world, *model)):
        return {}
    product = model[0] * model[1] * model[2]
    return {"data_parallel_size": world // product, "gtp_weight_remat_size": 1} if world % product == 0 else {}


def resized(args: dict, world_size: int) -> dict:
    """``args`` of the same run on ``world_size`` GPUs: its ``data_parallel_size`` follows (:func:`validated_sizes`;
    none where the layout does not divide the world size)."""
    kept = {name: value for name, value in args.items() if name not in ("data_parallel_size", "gtp_weight_remat_size")}
    return {**kept, "world_size": world_size, **validated_sizes({**kept, "world_size": world_size})}


def args_block(args: dict) -> list[str]:
    """``_print_args('arguments', args)`` as megatron-core 0.19.2 prints it: dots pad names to 48, sorted."""
    lines = [f"  {name} {'.' * (48 - len(name))} {value}" for name, value in args.items()]
    return (["------------------------ arguments ------------------------"]
            + sorted(lines, key=lambda line: line.lower())
            + ["-------------------- end of arguments ---------------------"])


def iteration_line(iteration: int, total: int, gbs: int, ms: float, tflops: float,
                   printed_at: datetime | None = None) -> str:
    """One ``training_log`` line in megatron-core 0.19.2's format (MoE metrics left out), its timestamp
    ``printed_at`` (a naive local time, as megatron prints ``datetime.now()``; default 12:00:``iteration`` on
    2026-10-19)."""
    stamp = (printed_at or datetime(2026, 10, 19, 12, 0, iteration)).strftime("%Y-%m-%d %H:%M:%S.%f")
    return (f" [{stamp}] iteration {iteration:8d}/{total:8d} | consumed samples: {iteration * gbs:12d} | "
            f"elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tflops:.1f} | "
            f"learning rate: {3e-4:.6E} | global batch size: {gbs:5d} | lm loss: {random.uniform(9, 12):.6E} | "
            f"loss scale: 1.0 | grad norm: {random.uniform(0.5, 5):.3f} | number of skipped iterations:   0 | "
            "number of nan iterations:   0 |")


def megatron_log(args: dict, times_ms: list[float], tflops: list[float], total: int = 10, tail: str = "",
                 prefix: str = "") -> str:
    """A whole stdout log: noise, the arguments block, the iteration lines, then ``tail``."""
    lines = [f"using world size: {args['world_size']}", *args_block(args), "> building datasets ..."]
    lines += [iteration_line(i, total, args["global_batch_size"], ms, tf)
              for i, (ms, tf) in enumerate(zip(times_ms, tflops, strict=True), start=1)]
    return "\n".join(prefix + line for line in lines) + "\n" + tail


def random_times(n: int, centre_ms: float) -> list[float]:
    """Iteration times: two slow warm-up iterations, then noise around ``centre_ms`` (rounded as Megatron prints)."""
    return [round(centre_ms * 3, 1), round(centre_ms * 1.5, 1)] + [
        round(centre_ms * random.uniform(0.97, 1.03), 1) for _ in range(n - 2)]


def rows_with_tokens(tokens_by_nodes: dict[int, float]) -> list:
    """Rows of fake runs with the given tokens/s/GPU (step time solved for it)."""
    rows = []
    for nodes, tokens in tokens_by_nodes.items():
        args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": nodes * 4})
        step_ms = 4096 * 4096 / tokens / (nodes * 4) * 1000
        rows.append(summarise(parse_log_text(megatron_log(args, [step_ms] * 10, [100.0] * 10), f"{nodes}n.log"),
                              Window(), 4))
    return rows


def ignored_at_shutdown(label: str) -> list[str]:
    """What PyTorch's DataLoader prints at interpreter shutdown on one rank: an exception Python ignored."""
    return [f"{label}Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3a2c1e8ca0>",
            f"{label}Traceback (most recent call last):",
            f'{label}  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1479, in __del__',
            f"{label}    self._shutdown_workers()",
            f"{label}AssertionError: can only test a child process"]


def eight_node_strong_args(train_iters: int = 1000) -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, ``train_iters`` asked for (the
    runs SLURM stops in the failure-reading tests)."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": train_iters})


def log_then(args: dict, last: int, tail: list[str]) -> str:
    """A log of ``args``' run: the arguments block, iteration lines 1..``last`` (fresh random times), then the lines
    ``tail`` (how the job ended)."""
    times = random_times(last, random.uniform(60_000.0, 90_000.0))
    lines = [*args_block(args), "> building datasets ..."]
    lines += [iteration_line(i, args["train_iters"], args["global_batch_size"], ms, 130.0)
              for i, ms in enumerate(times, 1)]
    return "\n".join(lines + tail) + "\n"
