"""Run-log parsing the mutation audit (round 8) found unchecked: NCCL's aborted communicator named as the NCCL failure
it is, a negative number read as the number it is, and an arguments block whose value is no Python literal kept as
text. Megatron-core 0.19.2's print formats (:mod:`tests.unit_tests.megatron_logs`); fresh random step times."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})


def _text(args: dict, times: list[float], tail: list[str] = ()) -> str:
    """The arguments block, the lines of iterations 1..len(times) of 10, then ``tail``."""
    lines = args_block(args) + [iteration_line(i, 10, args["global_batch_size"], ms, 130.0)
                                for i, ms in enumerate(times, start=1)]
    return "\n".join([*lines, *tail])


def _aborted_communicator(rank: int) -> list[str]:
    """What PyTorch's NCCL watchdog prints on a rank whose communicator another rank's failure aborted: its error
    line, the C++ stack, then the abort of the ``c10::DistBackendError`` it throws."""
    stamp = f"E1019 12:31:{random.randint(10, 59)}.{random.randint(0, 999999):06d}"
    reason = (f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread terminated with exception: "
              f"NCCL communicator was aborted on rank {rank}.")
    return [f"[rank{rank}]:[{stamp} ProcessGroupNCCL.cpp:1834] {reason}",
            f"[rank{rank}]:Exception raised from checkForNCCLErrorsInternal at "
            "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2027 (most recent call first):",
            f"[rank{rank}]:frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f2b8c1a4446 in "
            "/usr/local/lib/python3.12/dist-packages/torch/lib/libc10.so)",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            f"  what():  {reason}"]


def test_an_aborted_nccl_communicator_is_reported_as_the_nccl_failure(args):
    """A rank's watchdog finding its NCCL communicator aborted (the collective of a dead peer) ends the job with a C++
    abort of ``c10::DistBackendError``: the row names the NCCL failure, as the watchdog's timeout line would, not the
    abort that follows from it."""
    times = random_times(random.randint(4, 9), random.uniform(60_000.0, 90_000.0))
    log = parse_log_text(_text(args, times, _aborted_communicator(random.randrange(32))))
    assert log.runs[-1].failure == "NCCL timeout"
    assert summarise(log, Window(), 4).status.startswith("NCCL timeout")


def test_a_negative_number_in_an_iteration_line_is_read_as_printed(args):
    """A negative elapsed time or TFLOP/s (a clock or counter gone wrong) is read as the number Megatron printed, so
    the row says which number at which iteration is wrong rather than calling the whole line missing or cut."""
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    iteration = random.randint(3, 10)
    bad = -round(random.uniform(1.0, 500.0), 1)
    lines = _text(args, times).split("\n")
    index = next(k for k, line in enumerate(lines) if f"iteration {iteration:8d}/" in line)
    lines[index] = lines[index].replace(f"(ms): {times[iteration - 1]:.1f} |", f"(ms): {bad:.1f} |")
    log = parse_log_text("\n".join(lines))
    assert log.iterations[iteration].elapsed_ms == bad
    assert summarise(log, Window(), 4).status == f"elapsed time per iteration {bad} ms at iteration {iteration}"
    tflops = -round(random.uniform(1.0, 300.0), 1)
    lines[index] = lines[index].replace("(TFLOP/s/GPU): 130.0 |", f"(TFLOP/s/GPU): {tflops:.1f} |")
    assert parse_log_text("\n".join(lines)).iterations[iteration].tflops_per_gpu == tflops


@pytest.mark.parametrize("value", ["{[0, 1]: 2}", "{[1], [2]}", "{'ranks': {[0]: 1}}"])
def test_an_argument_value_that_is_no_python_literal_is_kept_as_text(args, value):
    """An arguments-block value that reads as Python syntax but cannot be evaluated (an unhashable key, e.g. another
    rank's output run into the line) is kept as the printed text; the log still gives its row."""
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    block = args_block({**args, "oellm_note": value})
    text = "\n".join(block + [iteration_line(i, 10, args["global_batch_size"], ms, 130.0)
                              for i, ms in enumerate(times, start=1)])
    log = parse_log_text(text)
    assert log.runs[-1].args["oellm_note"] == value
    assert log.runs[-1].args["global_batch_size"] == args["global_batch_size"]
    assert summarise(log, Window(), 4).ok
