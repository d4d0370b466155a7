"""``oellm table`` on a run that megatron's rerun state machine stopped on a NaN or Inf result.

megatron-core 0.19.2 (default ``--rerun-mode validate_results``) logs ``Unexpected result nan on rank R at iteration
#N invocation #K (message='...')``, re-runs the step, then logs one of its ``Exiting now`` messages and ends the job
with ``sys.exit(16|17)``: no traceback, and the rejected iteration prints no line. The row read ``truncated at
iteration N-1/M`` (as if the log had been cut), or, with the window already logged, ``ok``.
"""

from __future__ import annotations

import random

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args

EXIT_MESSAGES = [
    "Saving a checkpoint and exiting now. Please resume the job from the checkpoint to rerun the last iteration and "
    "establish a diagnostic",
    "Exiting now. The job can be resumed from a previous checkpoint",
    "Exiting now. A checkpoint at the last iteration already exists if further examination is needed",
    "Exiting now. Please resume the job from the same checkpoint to rerun the last iteration and establish a "
    "diagnostic",
]
"""megatron-core 0.19.2's ``RerunStateMachine.should_checkpoint_and_exit`` messages of an exit."""


def _log(last_line: int, total: int, tail: list[str]) -> str:
    """A log whose iteration lines stop at ``last_line`` of ``total``, then ``tail`` (with srun's ``0: `` label)."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": total})
    lines = ["using world size: 32", *args_block(args)]
    lines += [iteration_line(i, total, 4096, round(random.uniform(74000, 76000), 1), 130.0)
              for i in range(1, last_line + 1)]
    return "\n".join(f"0: {line}" for line in lines + tail) + "\n"


def _rejection(iteration: int, result: str, message: str) -> list[str]:
    """The rerun state machine's log lines for a rejected result at ``iteration``, up to its exit message."""
    rank = random.randint(0, 31)
    return [f"ERROR:megatron.core.rerun_state_machine:Unexpected result {result} on rank {rank} at iteration "
            f"#{iteration} invocation #{random.randint(1, 4)} (message='{message}')",
            f"ERROR:megatron.core.rerun_state_machine:Rank {rank}, node as01r1b0{rank % 8}, device {rank % 4}, "
            f"iteration #{iteration}: First rerun: unexpected result is reproducible within the tolerance "
            f"({result} = {result}). Need to rerun on a different GPU to verify correctness.!",
            f"WARNING:megatron.core.rerun_state_machine:{random.choice(EXIT_MESSAGES)}"]


def test_a_nan_exit_inside_the_window_says_so_instead_of_truncated():
    stop = random.randint(4, 10)  # the rejected iteration: it prints no line
    result, kind = random.choice([("nan", "NaN"), ("inf", "Inf")])
    message = f"found {kind} in local grad norm for bucket #{random.randint(0, 3)} in backward pass"
    row = summarise(parse_log_text(_log(stop - 1, 10, _rejection(stop, result, message)), "nan.log"),
                    Window(3, 10), 4)
    assert row.status == (f"stopped by megatron's result validation ({result}: {message[:57 - len(result) - 2]}...) "
                          f"at iteration {stop - 1}")
    assert row.step_time_s is None and row.tokens_per_s_per_gpu is None


def test_a_nan_exit_after_the_window_keeps_the_numbers_and_says_so():
    """The rejected result came after the window's last line (whose skipped and NaN counts are 0): the window's
    numbers stand, and the status names the exit."""
    stop = random.randint(12, 40)
    tail = _rejection(stop, "nan", "found NaN in local forward loss calculation")
    row = summarise(parse_log_text(_log(stop - 1, 50, tail), "nan.log"), Window(3, 10), 4)
    assert row.status.startswith("ok (stopped by megatron's result validation (nan: found NaN in local forward loss")
    assert row.status.endswith(f" at iteration {stop - 1}, after the window)") and row.tokens_per_s_per_gpu > 0


def test_a_rejected_result_the_run_went_on_after_is_no_failure():
    """A non-fatal check (``--check-for-spiky-loss``) logs the rejected result and no exit: training goes on."""
    stop = random.randint(4, 8)
    text = _log(stop - 1, 10, [])
    rejected = (f"0: WARNING:megatron.core.rerun_state_machine:Unexpected result 97.5 on rank 0 at iteration #{stop} "
                "invocation #1 (message='Spiky loss')")
    rest = [f"0: {iteration_line(i, 10, 4096, 75000.0, 130.0)}" for i in range(stop, 11)]
    text += "\n".join([rejected, *rest]) + "\n"
    row = summarise(parse_log_text(text, "spiky.log"), Window(3, 10), 4)
    assert row.status == "ok" and row.tokens_per_s_per_gpu is not None
