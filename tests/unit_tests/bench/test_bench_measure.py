"""Benchmark bookkeeping on the CPU: throughput arithmetic, the MBS sweep with OOM handling, best/speedup, tables."""

import math
import random
import weakref

import pytest
import torch

from megatron.oellm.bench.measure import Measurement, StepTimes, best, format_table, speedup, summary, sweep, throughput


def reference_median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@pytest.mark.parametrize("steps", [1, 4, 7])
def test_throughput_from_median_step_time(steps: int) -> None:
    rng = random.Random(random.random())
    step_ms = [rng.uniform(50.0, 500.0) for _ in range(steps)]
    mbs, seq, flops, peak = rng.randint(1, 8), rng.choice([128, 4096]), rng.uniform(1e9, 1e10), 989.0
    peak_bytes = rng.randint(1, 100) * 2**30 + rng.randint(0, 2**20)
    loss = rng.uniform(1.0, 12.0)
    m = throughput("ours", mbs, seq, StepTimes(tuple(step_ms), peak_bytes, loss), flops, peak)
    median_s = reference_median(step_ms) / 1000
    assert m.status == "ok" and m.tokens_per_step == mbs * seq
    assert m.step_ms_median == pytest.approx(median_s * 1000)
    assert (m.step_ms_min, m.step_ms_max) == (min(step_ms), max(step_ms))
    assert m.tokens_per_s == pytest.approx(mbs * seq / median_s)
    assert m.tflops == pytest.approx(mbs * seq * flops / median_s / 1e12)
    assert m.mfu == pytest.approx(m.tflops / peak)
    assert m.peak_memory_gib == pytest.approx(peak_bytes / 1024**3)
    assert m.loss == loss  # what the report compares between the sides


def test_median_ignores_one_slow_step() -> None:
    fast = [100.0, 101.0, 99.0, 100.5, 3000.0]
    m = throughput("hf", 1, 4096, StepTimes(tuple(fast), 0, 0.0), 1e9, 989.0)
    assert m.step_ms_median == 100.5 and m.step_ms_max == 3000.0


def test_no_timed_steps_is_an_error() -> None:
    with pytest.raises(ValueError, match="--steps"):
        throughput("ours", 1, 16, StepTimes((), 0, 0.0), 1e9, 989.0)


def test_sweep_stops_at_first_oom_and_frees() -> None:
    rng = random.Random(random.random())
    limit = rng.choice([2, 4, 8])  # the first MBS that no longer fits
    calls, freed, held = [], [], []

    def run(mbs: int) -> StepTimes:
        calls.append(mbs)
        tensor = torch.empty(mbs)  # a tensor the failed step referenced, as a real OOM would leave behind
        held.append(weakref.ref(tensor))
        if mbs >= limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory ({tensor.numel()} elements)")
        return StepTimes((10.0 * mbs, 11.0 * mbs, 12.0 * mbs), mbs * 2**30, 5.0)

    def free() -> None:  # the exception and the failed step's frames are gone before the side frees and the cache empties
        freed.append(held[-1]() is None)

    results = sweep("ours", [8, 1, 4, 2, 16, 4], 128, run, 1e9, 989.0, free=free)
    assert [r.mbs for r in results] == [1, 2, 4, 8, 16]  # sorted, duplicates removed
    assert calls == [m for m in (1, 2, 4, 8) if m <= limit]  # nothing attempted past the OOM
    assert [r.status for r in results] == ["ok" if m < limit else "oom" if m == limit else "skipped"
                                           for m in (1, 2, 4, 8, 16)]
    assert freed == [True]
    for r in results:
        assert r.tokens_per_step == r.mbs * 128
        if r.status == "ok":
            assert r.step_ms_median == 11.0 * r.mbs
        else:
            assert r.tokens_per_s is None and r.tflops is None and r.peak_memory_gib is None


def test_sweep_other_errors_propagate() -> None:
    def run(mbs: int) -> StepTimes:
        raise RuntimeError("a real bug, not memory")

    with pytest.raises(RuntimeError, match="real bug"):
        sweep("hf", [1], 128, run, 1e9, 989.0)


def _measured(side: str, mbs: int, tokens_per_s: float) -> Measurement:
    return Measurement(side, mbs, "ok", mbs * 4096, tokens_per_s=tokens_per_s)


def test_best_speedup_and_summary() -> None:
    rng = random.Random(random.random())
    ours = [_measured("ours", m, rng.uniform(1e4, 1e5)) for m in (1, 2, 4)] + [Measurement("ours", 8, "oom", 8 * 4096)]
    hf = [_measured("hf", m, rng.uniform(1e4, 1e5)) for m in (1, 2)] + [Measurement("hf", 4, "oom", 4 * 4096)]
    best_ours = max(ours[:3], key=lambda r: r.tokens_per_s)
    best_hf = max(hf[:2], key=lambda r: r.tokens_per_s)
    assert best(ours) == best_ours and best(hf) == best_hf
    assert speedup(best_ours, best_hf) == pytest.approx(best_ours.tokens_per_s / best_hf.tokens_per_s)
    out = summary(ours + hf, ["ours", "hf"])
    assert out["best_ours"]["mbs"] == best_ours.mbs and out["best_hf"]["mbs"] == best_hf.mbs
    assert out["speedup_ours_over_hf"] == pytest.approx(best_ours.tokens_per_s / best_hf.tokens_per_s)


def test_summary_gives_a_ratio_for_each_pair_benchmarked() -> None:
    rng = random.Random(random.random())
    speeds = {side: rng.uniform(1e4, 1e5) for side in ("ours", "te", "hf")}
    results = [_measured(side, 2, speed) for side, speed in speeds.items()]
    out = summary(results, ["te", "ours", "hf"])
    assert {key for key in out if key.startswith("speedup_")} == {
        "speedup_ours_over_hf", "speedup_te_over_hf", "speedup_ours_over_te"}
    for a, b in (("ours", "hf"), ("te", "hf"), ("ours", "te")):
        assert out[f"speedup_{a}_over_{b}"] == pytest.approx(speeds[a] / speeds[b])
    two = summary([r for r in results if r.side != "hf"], ["ours", "te"])
    assert [key for key in two if key.startswith("speedup_")] == ["speedup_ours_over_te"]


def test_nothing_measured_gives_no_best_and_no_ratio() -> None:
    assert best([Measurement("hf", 1, "oom", 4096)]) is None
    assert speedup(None, _measured("hf", 1, 1.0)) is None
    assert "speedup_ours_over_hf" not in summary([_measured("ours", 1, 5.0)], ["ours"])


def test_table_has_one_row_per_result_with_its_figures() -> None:
    m = throughput("ours", 2, 4096, StepTimes((200.0,), 3 * 2**30, 12.5), 4.6e9, 989.0)
    table = format_table([m, Measurement("hf", 4, "oom", 4 * 4096)]).splitlines()
    assert len(table) == 4
    assert table[2].split()[:4] == ["ours", "2", "ok", "200.0"]
    assert f"{2 * 4096 / 0.2:,.0f}" in table[2] and "3.0" in table[2]
    assert table[3].split()[:4] == ["hf", "4", "oom", "-"]
    assert not math.isnan(m.mfu)


def test_table_mfu_column_is_a_percentage_of_the_peak() -> None:
    """The ``MFU %`` column (``Measurement.mfu`` is a fraction): 2 x 4096 tokens in ``step`` ms at 4.6 GFLOP/token
    against 989 TFLOP/s, by hand, is 100 * 8192 / step_s * 4.6e9 / 1e12 / 989 percent (19.05 % at 200 ms)."""
    step = random.uniform(150.0, 250.0)  # 15.2 % to 25.4 %: a fraction printed as is would read 0.2
    m = throughput("ours", 2, 4096, StepTimes((step,), 2**30, 11.0), 4.6e9, 989.0)
    mfu_percent = 100 * (8192 / (step / 1000)) * 4.6e9 / 1e12 / 989.0
    row = format_table([m]).splitlines()[2].split()
    assert row[6] == f"{mfu_percent:.1f}" and 15.0 < mfu_percent < 26.0


@pytest.mark.parametrize("peak", [None, 989.0])
def test_table_mfu_of_a_row_not_measured_is_a_dash_not_n_a(peak: float | None) -> None:
    """``n/a`` in the MFU column says a measured row has no peak to be quoted against (a GPU missing from the peak
    table); a row that ran out of memory or was skipped has no figures at all, ``-`` as in its other columns, with or
    without a peak. Fresh random sizes and the size that runs out of memory."""
    sizes = sorted(random.sample(range(1, 33), random.randint(2, 6)))
    limit = random.choice(sizes[1:])

    def run(mbs: int) -> StepTimes:
        if mbs >= limit:
            raise torch.OutOfMemoryError("fake")
        return StepTimes((random.uniform(50.0, 500.0),), 2**30, 11.0)

    rows = format_table(sweep("ours", sizes, 4096, run, 4.6e9, peak)).splitlines()[2:]
    mfu = {int(row.split()[1]): (row.split()[2], row.split()[6]) for row in rows}
    for mbs, (status, cell) in mfu.items():
        if mbs < limit:
            assert status == "ok" and (cell == "n/a") == (peak is None) and cell != "-", (mbs, status, cell)
        else:
            assert status in ("oom", "skipped") and cell == "-", (mbs, status, cell)
