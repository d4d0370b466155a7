"""``oellm table`` on the log shapes megatron-core 0.19.2's ``training_log`` prints beyond one clean run: a batch-size
schedule with ``log_interval`` > 1, ``srun --label`` prefixes, appended jobs. Generated logs, fresh random numbers."""

from __future__ import annotations

import random
import re
import statistics

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, sorted_rows, summarise, with_efficiency
from tests.unit_tests.megatron_logs import args_block, ignored_at_shutdown, iteration_line, megatron_args, resized


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})


def _scheduled_log(args: dict, small: int, large: int, switch: int, interval: int, total: int,
                   schedule: bool = True) -> tuple[str, dict[int, float]]:
    """A run whose batch grows from ``small`` to ``large`` at iteration ``switch`` (``--step-batch-size-schedule``),
    logging every ``interval`` iterations as megatron does: each line's time is the mean over its interval, its
    batch size the last iteration's, its consumed samples the running count. Returns the log and each iteration's
    time (ms)."""
    run_args = {**args, "log_interval": interval, "train_iters": total,
                "step_batch_size_schedule": f"0:{small} {(switch - 1) * small}:{large}" if schedule else None}
    times = {i: random.uniform(15000, 25000) * (large / small if i >= switch else 1) for i in range(1, total + 1)}
    lines, consumed, pending = args_block(run_args), 0, []
    for i in range(1, total + 1):
        batch = large if i >= switch else small
        consumed += batch
        pending.append(times[i])
        if i == 1 or i % interval == 0:
            line = iteration_line(i, total, batch, statistics.mean(pending), 130.0)
            lines.append(re.sub(r"consumed samples: +\d+", f"consumed samples: {consumed:12d}", line))
            pending = [] if i > 1 else pending  # megatron does not reset its timer after the first iteration
    return "\n".join(lines), times


def test_a_batch_change_inside_a_lines_interval_marks_the_row(args):
    """Every line of the window printed the new batch size, but the first one's time also averaged iterations of
    the smaller batch: the row was 'ok' with tokens/s/GPU too high by the batch ratio."""
    interval = random.choice([4, 5, 10])
    small = random.choice([256, 512, 1024])
    large = small * random.choice([2, 4])
    switch = 2 * interval + random.randint(2, interval)  # inside the third line's interval
    text, _ = _scheduled_log(args, small, large, switch, interval, total=5 * interval)
    window = Window(2 * interval + 1, 5 * interval)
    log = parse_log_text(text)
    assert {log.iterations[i].global_batch_size for i in range(3 * interval, 5 * interval + 1, interval)} == {large}
    row = summarise(log, window, 4)
    before = (switch - 2 * interval - 1) * small
    assert row.status == (f"global batch size changes inside the line of iteration {3 * interval}: iterations "
                          f"{2 * interval + 1}-{3 * interval} consumed {before + (3 * interval - switch + 1) * large} "
                          f"samples, not {interval} x {large} (batch-size schedule?)")
    assert row.tokens_per_s_per_gpu is None


def test_a_window_after_the_batch_change_is_summarised(args):
    interval = random.choice([4, 5, 10])
    small, large = 512, 2048
    switch = 2 * interval + 1  # the first iteration of the third line's interval
    text, times = _scheduled_log(args, small, large, switch, interval, total=5 * interval)
    row = summarise(parse_log_text(text), Window(switch, 5 * interval), 4)
    assert row.status == "ok" and row.global_batch_size == large
    lines = [statistics.mean(times[i] for i in range(end - interval + 1, end + 1))
             for end in range(3 * interval, 5 * interval + 1, interval)]
    step = statistics.median([round(ms, 1) for ms in lines]) / 1000
    assert row.tokens_per_s_per_gpu == pytest.approx(large * 4096 / step / 32)


def test_a_schedule_interval_whose_start_no_line_shows_marks_the_row(args):
    """Under a batch-size schedule, a line whose interval start cannot be read (the line before it cut) may hide a
    change; without a schedule the batch is constant and the row stays ok."""
    interval = random.choice([4, 5])
    for schedule, ok in ((True, False), (False, True)):
        text, _ = _scheduled_log(args, 1024, 1024, 2, interval, total=4 * interval, schedule=schedule)
        cut = re.sub(rf"(iteration {2 * interval:8d}/.*elapsed time per iteration \(ms\): \d+).*", r"\1", text)
        assert cut != text
        status = summarise(parse_log_text(cut), Window(2 * interval + 1, 4 * interval), 4).status
        assert (status == "ok") == ok, status
        if not ok:
            assert status.startswith(f"the line of iteration {3 * interval} averages iterations "
                                     f"{2 * interval + 1}-{3 * interval} of a batch-size schedule")


def _row(args: dict, nodes: int, batch: int, tokens: float):
    """The row of a fake run on ``nodes`` nodes at global batch ``batch`` with ``tokens`` tokens/s/GPU."""
    run_args = {**resized(args, nodes * 4), "global_batch_size": batch}
    step_ms = batch * 4096 / tokens / (nodes * 4) * 1000
    text = "\n".join(args_block(run_args) + [iteration_line(i, 10, batch, step_ms, 120.0) for i in range(1, 11)])
    return summarise(parse_log_text(text, f"{nodes}n-gbs{batch}.log"), Window(), 4)


def test_efficiency_compares_a_strong_and_a_weak_series_only_within_each(args):
    """The report's strong (GBS 4096) and weak (64 sequences per node) series in one table: the default baseline is
    the weak series' 4-node run, and the strong runs got an 'efficiency' of their tokens/s/GPU over that GBS-256
    run's (e.g. 116 % for 8 nodes), another workload."""
    tokens = {(nodes, batch): random.uniform(5000, 7500) for nodes in (4, 8, 16) for batch in (4096, 64 * nodes)}
    table = sorted_rows([_row(args, nodes, batch, value) for (nodes, batch), value in tokens.items()])
    assert all(row.ok for row in table)
    rows, baseline = with_efficiency(table)
    assert (baseline.nodes, baseline.global_batch_size) == (4, 256)
    efficiency = {(row.nodes, row.global_batch_size): row.efficiency for row in rows}
    for nodes in (4, 8, 16):
        assert efficiency[(nodes, 64 * nodes)] == pytest.approx(tokens[(nodes, 64 * nodes)] / tokens[(4, 256)],
                                                                rel=1e-4)
        assert efficiency[(nodes, 4096)] is None
    strong_base = 1 + next(k for k, row in enumerate(table) if (row.nodes, row.global_batch_size) == (4, 4096))
    rows, baseline = with_efficiency(table, baseline_row=strong_base)
    for row in rows:
        expected = tokens[(row.nodes, 4096)] / tokens[(4, 4096)] if row.global_batch_size == 4096 else None
        assert row.efficiency == (pytest.approx(expected, rel=1e-4) if expected else None)


def _interleaved(blocks: list[list[str]]) -> list[str]:
    """The blocks' lines as ranks printing at once reach srun's output: every block's first line, then the rest in
    random order, each block's own order kept (so each header is followed by another rank's line)."""
    out, rest = [block[0] for block in blocks], [block[1:] for block in blocks]
    while any(rest):
        block = random.choice([block for block in rest if block])
        out.append(block.pop(0))
    return out


def test_ignored_exceptions_of_ranks_shutting_down_together_are_no_crash(args):
    """Every rank's DataLoader reports its ignored exception at shutdown; under ``srun --label`` their lines
    interleave, so a rank's traceback no longer follows its own header line: the finished run was 'crashed
    (AssertionError: can only test a child process)' and lost its numbers."""
    labels = [f"{rank:2d}: " for rank in random.sample(range(32), 4)]
    blocks = [ignored_at_shutdown(label) for label in labels]
    times = [random.uniform(60_000.0, 90_000.0) for _ in range(10)]
    lines = [f" 0: {line}" for line in args_block(args)]
    lines += [f"31: {iteration_line(i, 10, 4096, ms, 130.0)}" for i, ms in enumerate(times, start=1)]
    done = " 0: [after training is done] datetime: 2026-10-19 12:00:00"
    row = summarise(parse_log_text("\n".join([*lines, done, *_interleaved(blocks)])), Window(), 4)
    assert row.ok, row.status
    assert row.step_time_s == pytest.approx(statistics.median(round(ms, 1) for ms in times[2:]) / 1000)
    crash = [f"{labels[0]}Traceback (most recent call last):", f'{labels[0]}  File "train.py", line 1',
             f"{labels[0]}RuntimeError: boom"]
    status = summarise(parse_log_text("\n".join([*lines, *_interleaved([*blocks[1:], crash])])), Window(), 4).status
    assert status == "ok (crashed (RuntimeError: boom) at iteration 10, after the window)"
