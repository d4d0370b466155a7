"""The [oellm] throughput hook inside megatron's ``train`` loop: ramp-up, resumed runs, NaN-skipped iterations, a
second ``train`` in one process, inputs on which the hook must not raise into training, and its guard and re-install as
the runtime patches have them (another release keeps megatron's ``training_log``; a second install replaces the
wrapper)."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
import torch

from tests.unit_tests.training.throughput_lines import parse_throughput_line


class FakeMegatron:
    """Megatron's training loop as the hook sees it: args, the interval timer, the micro-batch count, the printer."""

    def __init__(self, monkeypatch, rng: random.Random, log_interval: int, **overrides):
        import megatron.core.num_microbatches_calculator as microbatches
        import megatron.training
        import megatron.training.utils
        from megatron.training import training

        self.args = SimpleNamespace(micro_batch_size=rng.choice([1, 2, 4]), data_parallel_size=rng.choice([1, 2, 8]),
                                    gtp_weight_remat_size=1, seq_length=rng.choice([512, 2048, 4096]),
                                    log_interval=log_interval, world_size=rng.choice([8, 16, 64]))
        vars(self.args).update(overrides)
        self.microbatches = rng.randrange(1, 9)
        self.timer_s = 0.0
        self.printed: list[str] = []
        self.megatron_calls: list[int] = []
        fake = self

        class IntervalTimer:
            def elapsed(self, barrier=False, reset=True):
                value = fake.timer_s
                if reset:
                    fake.timer_s = 0.0
                return value

        def megatron_training_log(loss_dict, iteration, skipped_iter=0, is_first_iteration=False):
            fake.megatron_calls.append(iteration)
            if is_first_iteration or (fake.args.log_interval and iteration % fake.args.log_interval == 0):
                IntervalTimer().elapsed(reset=not is_first_iteration)

        monkeypatch.setattr(training, "training_log", megatron_training_log)
        monkeypatch.setattr(megatron.training, "get_args", lambda: fake.args)
        monkeypatch.setattr(megatron.training, "get_timers", lambda: (lambda name: IntervalTimer()))
        monkeypatch.setattr(microbatches, "get_num_microbatches", lambda: fake.microbatches)
        monkeypatch.setattr(megatron.training.utils, "print_rank_last", self.printed.append)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_args: "NVIDIA H100 80GB HBM3")
        self.training = training

    def tokens(self) -> int:
        """One iteration's global-batch tokens at the current micro-batch count."""
        a = self.args
        return a.micro_batch_size * a.data_parallel_size * a.gtp_weight_remat_size * self.microbatches * a.seq_length

    def step(self, iteration: int, seconds: float, first: bool = False, skipped: int = 0) -> None:
        """One training iteration of ``seconds`` on the interval timer, then megatron's ``training_log`` call."""
        self.timer_s += seconds
        self.training.training_log({}, iteration, skipped_iter=skipped, is_first_iteration=first)

    def lines(self):
        return [parse_throughput_line(line) for line in self.printed if parse_throughput_line(line) is not None]


def install(flops: float = 3e9, peak: float | None = 989.0) -> None:
    from megatron.oellm.training.throughput import ThroughputBasis, install_throughput_logging

    install_throughput_logging(ThroughputBasis(flops, 4096, peak))


def test_rampup_resumed_run_counts_each_iterations_own_batch(monkeypatch):
    """Resumed at a random iteration, the batch growing mid-interval: tokens/s is the sum of the iterations' own
    batches over the timer's seconds (not the log iteration's batch times the iteration count)."""
    rng = random.Random(random.random())
    interval = rng.randrange(3, 8)
    fake = FakeMegatron(monkeypatch, rng, interval)
    install()
    start = rng.randrange(100, 10_000)
    expected, tokens, seconds = [], 0, 0.0
    for iteration in range(start + 1, start + 3 * interval + 1):
        if rng.random() < 0.3:
            fake.microbatches += 1  # ramp-up: megatron updates the count before the step
        step_s = rng.uniform(0.5, 3.0)
        tokens, seconds = tokens + fake.tokens(), seconds + step_s
        first = iteration == start + 1
        fake.step(iteration, step_s, first=first)
        if first or iteration % interval == 0:
            expected.append((iteration, tokens / seconds / fake.args.world_size))
            if not first:
                tokens, seconds = 0, 0.0
    got = fake.lines()
    assert [line.iteration for line in got] == [iteration for iteration, _ in expected]
    for line, (_, rate) in zip(got, expected, strict=True):
        assert line.tokens_per_s_per_gpu == pytest.approx(rate, rel=1e-4, abs=0.06)
        assert line.tflops_per_gpu == pytest.approx(rate * 3e9 / 1e12, rel=1e-4, abs=0.006)
        assert line.mfu == pytest.approx(rate * 3e9 / 1e12 / 989.0, rel=1e-3, abs=6e-5)


def test_a_second_train_in_one_process_starts_its_count_afresh(monkeypatch):
    """A train() that stopped mid-interval (or in-process restart) left tokens in the count; megatron's next first
    iteration times that one iteration only, so the [oellm] line overstated tokens/s."""
    rng = random.Random(random.random())
    fake = FakeMegatron(monkeypatch, rng, log_interval=10)
    install()
    fake.step(1, 1.0, first=True)
    for iteration in range(2, 2 + rng.randrange(1, 8)):  # stops before its log iteration
        fake.step(iteration, 1.0)
    fake.timer_s = 0.0  # the next train() starts the interval timer afresh
    step_s = rng.uniform(0.5, 3.0)
    fake.step(1, step_s, first=True)
    assert fake.lines()[-1].tokens_per_s_per_gpu == pytest.approx(
        fake.tokens() / step_s / fake.args.world_size, rel=1e-4, abs=0.06)


def test_nan_skipped_iterations_count_as_megatron_times_them(monkeypatch):
    """Megatron's interval time includes iterations whose step was skipped (inf/NaN grads): their batch was run."""
    rng = random.Random(random.random())
    fake = FakeMegatron(monkeypatch, rng, log_interval=4)
    install()
    fake.step(1, 2.0, first=True)
    for iteration in range(2, 9):
        fake.step(iteration, 2.0, skipped=int(rng.random() < 0.5))
    assert fake.lines()[-1].tokens_per_s_per_gpu == pytest.approx(fake.tokens() / 2.0 / fake.args.world_size,
                                                                  rel=1e-4, abs=0.06)


@pytest.mark.parametrize("breakage", ["zero_time", "nan_time", "no_gpus", "timer_raises", "args_missing",
                                      "no_log_interval", "microbatches_raise", "print_raises"])
def test_hook_never_raises_into_megatrons_training_loop(breakage, monkeypatch):
    """Anything wrong on our side must cost the [oellm] line, not the training run: megatron's own training_log is
    still called every iteration and the next intervals are measured right."""
    import megatron.core.num_microbatches_calculator as microbatches
    import megatron.training
    import megatron.training.utils

    rng = random.Random(random.random())
    fake = FakeMegatron(monkeypatch, rng, log_interval=2)
    broken = {}
    if breakage == "zero_time":
        broken = {"timer_s": 0.0}
    elif breakage == "nan_time":
        broken = {"timer_s": math.nan}
    elif breakage == "no_gpus":
        fake.args.world_size = 0
    elif breakage == "timer_raises":
        monkeypatch.setattr(megatron.training, "get_timers", lambda: (lambda name: None))
    elif breakage == "args_missing":
        del fake.args.gtp_weight_remat_size
    elif breakage == "no_log_interval":
        fake.args.log_interval = 0
    elif breakage == "microbatches_raise":
        monkeypatch.setattr(microbatches, "get_num_microbatches", lambda: 1 // 0)
    elif breakage == "print_raises":
        monkeypatch.setattr(megatron.training.utils, "print_rank_last", lambda line: 1 // 0)
    install()

    calls = []

    def step(iteration, seconds, first=False):
        fake.timer_s = broken.get("timer_s", fake.timer_s + seconds)
        calls.append(iteration)
        fake.training.training_log({}, iteration, is_first_iteration=first)

    fake.step = step
    with pytest.warns(RuntimeWarning, match=r"\[oellm\] throughput"):
        fake.step(1, 1.0, first=True)
        fake.step(2, 1.0)
    assert calls == fake.megatron_calls == [1, 2]


def test_hook_recovers_after_a_broken_interval(monkeypatch):
    """A bad timer reading at one log iteration drops that line only; the next interval's count starts afresh."""
    rng = random.Random(random.random())
    fake = FakeMegatron(monkeypatch, rng, log_interval=3)
    install()
    fake.step(1, 1.0, first=True)
    fake.step(2, 1.0)
    fake.timer_s = -fake.timer_s  # a reading no interval can have
    with pytest.warns(RuntimeWarning, match=r"\[oellm\] throughput"):
        fake.step(3, 0.0)
    fake.timer_s = 0.0
    step_s = rng.uniform(0.5, 2.0)
    for iteration in (4, 5, 6):
        fake.step(iteration, step_s)
    assert [line.iteration for line in fake.lines()] == [1, 6]
    assert fake.lines()[-1].tokens_per_s_per_gpu == pytest.approx(fake.tokens() / step_s / fake.args.world_size,
                                                                  rel=1e-4, abs=0.06)


def test_an_iteration_the_hook_could_not_count_drops_its_intervals_line(monkeypatch):
    """An iteration whose tokens could not be read (here an argument the count reads was missing) is in megatron's
    interval time but not in the count: that interval's line is left out rather than printed with too few tokens,
    and the next interval is measured whole."""
    rng = random.Random(random.random())
    interval = rng.randrange(3, 7)
    fake = FakeMegatron(monkeypatch, rng, log_interval=interval)
    install()
    fake.step(1, rng.uniform(0.5, 2.0), first=True)
    broken = rng.randrange(2, interval)  # a non-log iteration inside the first interval
    for iteration in range(2, interval + 1):
        if iteration == broken:
            seq_length = fake.args.seq_length
            del fake.args.seq_length
            with pytest.warns(RuntimeWarning, match=r"\[oellm\] throughput"):
                fake.step(iteration, 1.0)
            fake.args.seq_length = seq_length
        else:
            fake.step(iteration, 1.0)
    step_s = rng.uniform(0.5, 2.0)
    for iteration in range(interval + 1, 2 * interval + 1):
        fake.step(iteration, step_s)
    assert [line.iteration for line in fake.lines()] == [1, 2 * interval]
    # the second interval: `interval` iterations of fake.tokens() each in interval * step_s seconds on world_size GPUs
    assert fake.lines()[-1].tokens_per_s_per_gpu == pytest.approx(fake.tokens() / step_s / fake.args.world_size,
                                                                  rel=1e-4, abs=0.06)


def test_a_failure_that_persists_is_reported_once(monkeypatch):
    """A hook failure on every iteration (here the micro-batch count) is one warning, not one per iteration on every
    rank for the rest of the run."""
    import warnings

    import megatron.core.num_microbatches_calculator as microbatches

    rng = random.Random(random.random())
    fake = FakeMegatron(monkeypatch, rng, log_interval=rng.randrange(2, 5))
    monkeypatch.setattr(microbatches, "get_num_microbatches", lambda: 1 // 0)
    install()
    steps = rng.randrange(6, 20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fake.step(1, 1.0, first=True)
        for iteration in range(2, steps + 1):
            fake.step(iteration, 1.0)
    assert fake.megatron_calls == list(range(1, steps + 1))
    assert [str(warning.message) for warning in caught] == [
        "[oellm] throughput line left out: ZeroDivisionError('integer division or modulo by zero')"]


def test_another_release_keeps_megatrons_training_log_and_warns_naming_the_release_and_the_note(monkeypatch):
    """The hook is a runtime replacement of megatron-core 0.19.2's ``training_log``, guarded as the patches are: on
    another release megatron's own function stays (its lines still print, no ``[oellm]`` line) and a RuntimeWarning
    names the release and the note."""
    from megatron.oellm.training import throughput

    rng = random.Random(random.random())
    fake = FakeMegatron(monkeypatch, rng, log_interval=rng.randrange(2, 5))
    megatrons = fake.training.training_log
    release = f"0.{rng.randint(20, 60)}.{rng.randint(0, 9)}"
    monkeypatch.setattr(throughput, "megatron_core_release", lambda: release)
    with pytest.warns(RuntimeWarning, match=rf"megatron-core {release} is not 0\.19\.2.*patches/training-log-hook\.md"):
        assert not throughput.install_throughput_logging(throughput.ThroughputBasis(3e9, 4096, 989.0))
    assert fake.training.training_log is megatrons
    fake.step(1, 1.0, first=True)
    for iteration in range(2, 9):
        fake.step(iteration, 1.0)
    assert fake.megatron_calls == list(range(1, 9)) and fake.printed == []


def test_installing_again_replaces_the_wrapper_with_the_new_flops_and_peak(monkeypatch):
    """A second install (another model's FLOPs, a corrected peak) must print with its own numbers, one line per log
    iteration, and leave one wrapper over megatron's function, which the tests' ``unpatched`` peels off."""
    from megatron.oellm.training import throughput
    from tests.unit_tests.patches.upstream import unpatched

    rng = random.Random(random.random())  # 4096+ tokens a step on 8 GPUs: the two installs differ in print
    fake = FakeMegatron(monkeypatch, rng, log_interval=rng.randrange(2, 5), seq_length=4096, world_size=8)
    megatrons = fake.training.training_log
    monkeypatch.setattr(throughput, "megatron_core_release", lambda: "0.19.2")
    first_flops, first_peak = rng.uniform(1e9, 5e9), rng.uniform(300.0, 600.0)
    flops, peak = first_flops * rng.uniform(1.5, 3.0), first_peak * rng.uniform(1.5, 3.0)
    assert throughput.install_throughput_logging(throughput.ThroughputBasis(first_flops, 4096, first_peak))
    assert throughput.install_throughput_logging(throughput.ThroughputBasis(flops, 4096, peak))
    assert fake.training.training_log.__wrapped__ is megatrons and unpatched(fake.training.training_log) is megatrons
    step_s = rng.uniform(0.5, 3.0)
    fake.step(1, step_s, first=True)
    for iteration in range(2, 2 * fake.args.log_interval + 1):
        fake.step(iteration, step_s)
    lines = fake.lines()
    assert [line.iteration for line in lines] == [1, fake.args.log_interval, 2 * fake.args.log_interval]
    tflops = fake.tokens() / step_s / fake.args.world_size * flops / 1e12
    for line in lines:
        assert line.tflops_per_gpu == pytest.approx(tflops, rel=1e-4, abs=0.006)
        assert line.mfu == pytest.approx(tflops / peak, rel=1e-3, abs=6e-5)
