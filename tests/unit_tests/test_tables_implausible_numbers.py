"""``oellm table`` refuses a row whose numbers cannot be right: another rank's output cut the ``world_size`` value in
two (``0:   world_size ..... 3`` / ``5: [rank21]: ...`` / ``2``), and the row read 0.75 nodes, 10.7x the real
throughput and an MFU of 143.9 %, status ok. The row now says which values disagree (the parallel sizes megatron-core
0.19.2 prints, whole nodes, an MFU above 100 %) and carries no numbers. Generated logs, fresh random sizes and times."""

from __future__ import annotations

import random
import re

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import megatron_args, megatron_log, random_times

MODEL_PARALLEL = 4
"""tensor (1) x pipeline (4) x context (1) parallel size of the strong recipe's rows."""


def _args(nodes: int, **overrides) -> dict:
    """A strong-recipe row's arguments as megatron prints them after validate_args: world and data-parallel size."""
    world = nodes * 4
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": world,
                                                           "data_parallel_size": world // MODEL_PARALLEL, **overrides})


def _cut_world_size(text: str, world: int) -> tuple[str, int]:
    """``text`` with its ``world_size`` value cut in two by another rank's line, and the first part's value."""
    digits = str(world)
    cut = random.randint(1, len(digits) - 1)
    rank = random.randint(1, world - 1)
    garbled = re.sub(rf"(0:   world_size \.+ ){world}\n",
                     rf"\g<1>{digits[:cut]}\n{rank % 8}: [rank{rank}]: some warning\n{digits[cut:]} \n", text)
    assert garbled != text
    return garbled, int(digits[:cut])


def test_a_world_size_cut_short_gives_no_row():
    nodes = random.choice([8, 16, 32, 64])
    args = _args(nodes)
    text = megatron_log(args, random_times(10, random.uniform(60_000.0, 90_000.0)), [133.2] * 10, prefix="0: ")
    assert summarise(parse_log_text(text), Window(), 4).ok
    garbled, read = _cut_world_size(text, nodes * 4)
    row = summarise(parse_log_text(garbled, "cut.log"), Window(), 4)
    assert not row.ok and row.tokens_per_s_per_gpu is None and row.nodes is None and row.mfu is None
    assert row.status == (f"implausible arguments: world_size {read} is not tensor_model_parallel_size 1 x "
                          f"pipeline_model_parallel_size 4 x context_parallel_size 1 x data_parallel_size "
                          f"{nodes} = {nodes * 4} (a value cut by another rank's output?)")


def test_without_the_parallel_sizes_a_world_size_of_part_of_a_node_is_refused():
    """A log without data_parallel_size (the sizes check is skipped, not failed) still gets the whole-nodes check."""
    world = random.choice([n for n in range(1, 64) if n % 4])
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": world})
    assert "data_parallel_size" not in args
    text = megatron_log(args, random_times(10, 75_000.0 * 32 / world), [130.0] * 10)  # a plausible MFU
    row = summarise(parse_log_text(text), Window(), 4)
    assert row.status == (f"implausible arguments: world_size {world} is no whole number of 4-GPU nodes; give "
                          "--gpus-per-node with the GPUs of one of the run's nodes")
    gpus_per_node = random.choice([g for g in (1, 2, 3, 4, 5, 6, 7) if world % g == 0])
    assert summarise(parse_log_text(text), Window(), gpus_per_node).ok


@pytest.mark.parametrize("absent", ["tensor_model_parallel_size", "pipeline_model_parallel_size",
                                    "context_parallel_size", "data_parallel_size"])
def test_a_parallel_size_the_block_lacks_skips_that_check(absent):
    """A log of another megatron version may lack a name: the row keeps its numbers (no KeyError, no refusal)."""
    nodes = random.choice([8, 16])
    args = _args(nodes, data_parallel_size=random.choice([3, 5, 7]))  # would disagree with world_size
    del args[absent]
    row = summarise(parse_log_text(megatron_log(args, random_times(10, 75_000.0 * 8 / nodes), [130.0] * 10)),
                    Window(), 4)
    assert row.ok and row.gpus == nodes * 4


def test_a_garbled_parallel_size_is_named():
    args = _args(8, data_parallel_size="8[rank5]: W1019 warning")
    row = summarise(parse_log_text(megatron_log(args, random_times(10, 75_000.0), [130.0] * 10)), Window(), 4)
    assert row.status == ("arguments block has a data_parallel_size that is no positive integer: "
                          "'8[rank5]: W1019 warning'")


def test_an_mfu_above_100_percent_is_refused_naming_the_peak_options():
    nodes = random.choice([8, 16, 32])
    args = _args(nodes)
    step_ms = round(random.uniform(60_000.0, 90_000.0) * 8 / nodes, 1)  # as megatron prints it
    good = summarise(parse_log_text(megatron_log(args, [step_ms] * 10, [130.0] * 10)), Window(), 4)
    assert good.ok and 0 < good.mfu < 1
    wanted = random.uniform(1.05, 3.0)
    fast = round(step_ms * good.mfu / wanted, 1)
    text = megatron_log(args, [fast] * 10, [130.0] * 10)
    row = summarise(parse_log_text(text), Window(), 4)
    percent = 100 * good.mfu * step_ms / fast
    tflops = good.tflops_per_gpu * step_ms / fast
    assert row.status == (f"implausible numbers: MFU {percent:.1f}% is above 100% ({tflops:.1f} TFLOP/s/GPU against "
                          f"a peak of 989; world_size {nodes * 4}, seq_length 4096, global batch size 4096, step time "
                          f"{fast / 1000:.3f} s): a value cut by another rank's output, or give the GPU's peak with "
                          "--gpu or --peak-tflops")
    assert row.tokens_per_s_per_gpu is None
    higher = summarise(parse_log_text(text), Window(), 4, peak_tflops=989.0 * wanted * 1.01)
    assert higher.ok and higher.mfu < 1
