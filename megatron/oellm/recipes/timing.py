"""A row's expected run time from the report's throughput, checked against the row's SLURM time limit.

A job that reaches its time limit is killed before it logs all its iterations, after its wait in the queue. The
report's numbers of a row give its step time: ``step_time_s`` directly; ``tokens_per_s_per_gpu`` as the step's
tokens (global batch x sequence) over the GPUs' throughput; ``tflops_per_gpu`` (the low end of a range when
given, its high end when that is all the row gives) as the step's training FLOPs (our count,
:func:`megatron.oellm.flops.training_flops_per_token`) over the GPUs' throughput. The expected run time is the
iterations x that step time plus :data:`START_UP_S` for the job's start, the model build and the slower first
iterations. Rows without a reference throughput are not timed; a checkpointing run whose own stop
(``--exit-duration-in-mins``) is not before its time limit is refused with or without one. A run that requeues its
job after each stop (``requeue = true``) may take more than one job: its stop is checked to come before the time limit
and, with a reference throughput, after the start-up and one iteration.
Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from megatron.oellm.cards import ModelCard
from megatron.oellm.flops import training_flops_per_token
from megatron.oellm.recipes.config import (
    RecipeError,
    TableRow,
    slurm_time_text,
    time_limit_seconds,
    time_limit_text,
)
from megatron.oellm.recipes.resolve import exit_duration_minutes

START_UP_S = 600
"""Seconds allowed for everything but the timed iterations: the job's start, imports, process groups, the model
build and distributed optimizer, and the first iterations (slower than the report's medians)."""

TFLOPS_KEYS = ("tflops_per_gpu_low", "tflops_per_gpu", "tflops_per_gpu_high")
"""Reference keys of a TFLOP/s per GPU throughput, in the order they are used (the low end of a range first: it
gives the longest step; the high end only when the reference gives nothing else, rather than no check at all)."""


@dataclass(frozen=True)
class RunTime:
    """A row's time limit and, when its reference gives a throughput, the run time expected from it."""

    limit: str
    """The SLURM time limit of the row's job, as written."""
    limit_s: int
    """The time limit in seconds."""
    iterations: int
    """Training iterations of the row."""
    step_s: float | None
    """Seconds per iteration implied by the reference; None without a reference throughput."""
    source: str
    """Which reference number gave ``step_s`` ('' without one)."""
    stop_minutes: int | None = None
    """megatron's ``--exit-duration-in-mins`` of the run (a checkpointing job stops and saves then, before its time
    limit); None without one."""
    saves: bool = False
    """Whether the run saves checkpoints (``--save``): megatron saves one when it stops at ``stop_minutes``."""
    requeues: bool = False
    """Whether the job requeues itself after a stop that moved its checkpoint forward (``requeue = true``), so the
    run goes on in the next start of the job: it may take longer than one time limit."""
    own_stop: bool = False
    """Whether ``stop_minutes`` is the recipe's own (its ``[megatron_flags]`` or the row's flags), not the one ``oellm
    recipe`` derives from the time limit: a longer limit does not move it, even where it equals the derived one."""

    @property
    def limit_text(self) -> str:
        """The time limit as written, with SLURM's normalized form where that differs (:func:`time_limit_text`):
        ``30`` alone gave no unit."""
        return time_limit_text(self.limit)

    @property
    def expected_s(self) -> float | None:
        """Iterations x step time + :data:`START_UP_S`; None without a reference throughput."""
        return None if self.step_s is None else self.iterations * self.step_s + START_UP_S

    @property
    def least_stop_s(self) -> float | None:
        """The earliest the run's stop may come, in seconds after its start: the expected run time for a run in one
        job; :data:`START_UP_S` and one iteration for a run that :attr:`requeues`, whose every start must get past its
        first iteration before it stops (one that ends after the stop runs into the margin the stop leaves for the
        save before the time limit). None without a reference throughput."""
        if self.step_s is None:
            return None
        return START_UP_S + self.step_s if self.requeues else self.expected_s

    @property
    def _least_stop_reason(self) -> str:
        """What :attr:`least_stop_s` is, for the suggestions that name it."""
        return "start-up and one iteration" if self.requeues else "the expected run time"

    def estimate(self) -> str:
        """How the expected run time comes about, e.g. ``expected 23 min = 10 iterations x 75.2 s (...) + ...``."""
        if self.expected_s is None:
            return "no reference throughput, run time not estimated"
        return (f"expected {self.expected_s / 60:.0f} min = {self.iterations} iterations x {self.step_s:.1f} s "
                f"(from the report's {self.source}) + {START_UP_S // 60} min start-up")

    def describe(self) -> str:
        """One line for ``--dry-run``: the time limit (and the run's own stop before it) and the expected run time."""
        stop = "" if self.stop_minutes is None else f" (the run stops{self._saving} after {self.stop_minutes} min)"
        if self.requeues:
            stop += ", requeued until its last iteration"
        return f"time limit {self.limit_text}{stop}; {self.estimate()}"

    def check(self) -> None:
        """Raise :class:`RecipeError` when a checkpointing run's stop is not before the time limit (with or without a
        reference throughput), when the expected run time exceeds the time limit or the run's stop (not for a run that
        :attr:`requeues`), when a requeueing run's stop comes before its start-up and one iteration, or when the stop
        leaves no more than one iteration before the limit."""
        self._check_stop_before_limit()
        if self.requeues:
            self._check_first_iteration()
        else:
            self._check_one_job()
        after_stop = None if self.stop_minutes is None else self._after_stop_s(self.limit_s, self.stop_minutes)
        if self.saves and self.step_s is not None and after_stop is not None and self.step_s >= after_stop:
            raise RecipeError(f"the job stops (--exit-duration-in-mins {self.stop_minutes}) {after_stop} s before its "
                              f"time limit {self.limit_text}, no more than one iteration ({self.step_s:.0f} s, from the report's "
                              f"{self.source}): megatron checks the clock after each iteration, so one begun just "
                              f"before the stop runs into the limit and the job is killed before its final save; "
                              f"{self._margin_fix()}")

    def _check_stop_before_limit(self) -> None:
        """Raise :class:`RecipeError` when a run that saves stops (``--exit-duration-in-mins``) at or after its time
        limit: SLURM kills the job at the limit before megatron stops and saves, so the final save is lost, and a
        requeueing job, killed rather than ended with status 0, is never requeued. Needs no step time: a row without
        a reference throughput is refused too."""
        if not self.saves or self.stop_minutes is None or 60 * self.stop_minutes < self.limit_s:
            return
        lost = ", and the killed job fails and is never requeued" if self.requeues else ""
        raise RecipeError(f"the run's own stop (--exit-duration-in-mins {self.stop_minutes}) is not before its time "
                          f"limit {self.limit_text} ({self.limit_s / 60:g} min): SLURM kills the job at the limit before "
                          f"megatron stops and saves, so the iterations since its last periodic save are lost{lost}; "
                          f"{self._stop_before_limit_fix()}")

    def _stop_before_limit_fix(self) -> str:
        """How to stop before the time limit: with a step time, the latest stop more than one iteration before the
        limit (as :meth:`_margin_fix` gives it); without one, the stop ``oellm recipe`` derives, which keeps its save
        margin (:func:`~megatron.oellm.recipes.resolve.exit_duration_minutes`); no earlier than
        :attr:`least_stop_s`. Or the shortest time limit that the run's own stop fits
        (:meth:`_own_stop_limit_fix`). Each suggestion, followed, passes :meth:`check`."""
        longer = self._own_stop_limit_fix()
        latest = (exit_duration_minutes(self.limit_s) if self.step_s is None
                  else self._latest_stop_before_one_step())
        if latest is None or latest < 1 or not self._stop_fits(self.limit_s, latest):
            return longer
        earliest = ("" if self.least_stop_s is None
                    else f" (and at least {math.ceil(self.least_stop_s / 60)}, {self._least_stop_reason})")
        return f"set exit-duration-in-mins to at most {latest} in the recipe{earliest}, or {longer}"

    def _own_stop_limit_fix(self) -> str:
        """``give it a time limit of at least HH:MM:00``: the shortest limit the recipe's own stop fits
        (:meth:`_stop_fits`: a minute after it, more than one iteration after it for a run that saves), with the stop
        first raised to :attr:`least_stop_s` where it is earlier."""
        stop = self.stop_minutes
        if self.least_stop_s is not None and self.least_stop_s > 60 * stop:
            stop = math.ceil(self.least_stop_s / 60)
        minutes = stop + 1 + (math.floor(self.step_s / 60) if self.saves and self.step_s is not None else 0)
        longer = f"give it a time limit of at least {_time_limit_text(minutes)}"
        if stop != self.stop_minutes:
            why = ("each start must get past its first iteration" if self.requeues
                   else "one job must run every iteration")
            longer = f"set exit-duration-in-mins to {stop} in the recipe ({self._least_stop_reason}: {why}) and {longer}"
        return longer

    def _stop_fits(self, limit_s: int, stop_minutes: int) -> bool:
        """Whether the stop ``stop_minutes`` under the time limit ``limit_s`` passes every check of :meth:`check`:
        before the limit, more than one iteration before it for a run that saves, and no earlier than
        :attr:`least_stop_s`."""
        after_stop = self._after_stop_s(limit_s, stop_minutes)
        if after_stop <= 0 or (self.saves and self.step_s is not None and after_stop <= self.step_s):
            return False
        return self.least_stop_s is None or self.least_stop_s <= 60 * stop_minutes

    def _check_one_job(self) -> None:
        """Raise :class:`RecipeError` when the expected run time exceeds the time limit, or the run's own stop: one
        job must run every iteration."""
        if self.expected_s is not None and self.expected_s > self.limit_s:
            minutes = math.ceil(self.expected_s / 60)  # whole minutes at least the expected run time
            if self._stop_is_derived:
                fix = self._derived_limit_fix()
            elif self.stop_minutes is not None:  # the recipe's own stop must then cover the run too
                fix = self._own_stop_limit_fix()
            else:
                fix = f"give it at least {_time_limit_text(minutes)}"
            raise RecipeError(f"the job would reach its time limit {self.limit_text} before its last iteration: "
                              f"{self.estimate()}; {fix}")
        if self.expected_s is not None and self.stop_minutes is not None and self.expected_s > 60 * self.stop_minutes:
            raise RecipeError(f"the job would stop (--exit-duration-in-mins {self.stop_minutes}: it exits"
                              f"{self._saving} after {self.stop_minutes} min) before its last iteration: "
                              f"{self.estimate()}; {self._stop_fix()}")

    def _check_first_iteration(self) -> None:
        """Raise :class:`RecipeError` when a requeueing run's stop comes before its start-up and one iteration
        (:attr:`least_stop_s`): the first iteration of every start would end after the stop, in the margin it leaves
        for the save before the time limit, and a start SLURM kills at the limit is never requeued."""
        least = self.least_stop_s
        if least is None or self.stop_minutes is None or 60 * self.stop_minutes >= least:
            return
        raise RecipeError(f"each start of the job (requeue = true) would stop (--exit-duration-in-mins "
                          f"{self.stop_minutes}: it exits{self._saving} after {self.stop_minutes} min) before its first "
                          f"iteration ends: expected {least:.0f} s = {START_UP_S // 60} min start-up + 1 iteration x "
                          f"{self.step_s:.1f} s (from the report's {self.source}), and a start that runs past its stop "
                          f"into its time limit is killed and never requeued; {self._first_iteration_fix()}")

    def _first_iteration_fix(self) -> str:
        """How to let every start get past its first iteration: a longer time limit when the stop is the one ``oellm
        recipe`` derives from it; else the recipe's own stop moved to :attr:`least_stop_s` where that fits the time
        limit (:meth:`_stop_fits`), or a longer limit with it (:meth:`_own_stop_limit_fix`)."""
        if self._stop_is_derived:
            return self._derived_limit_fix()
        earliest = math.ceil(self.least_stop_s / 60)
        if self._stop_fits(self.limit_s, earliest):
            return f"set exit-duration-in-mins to at least {earliest} in the recipe ({self._least_stop_reason})"
        return self._own_stop_limit_fix()

    @property
    def _stop_is_derived(self) -> bool:
        """Whether the run's stop is the one ``oellm recipe`` derives from its time limit (a longer limit moves it)."""
        return (self.stop_minutes is not None and not self.own_stop
                and self.stop_minutes == exit_duration_minutes(self.limit_s))

    @staticmethod
    def _after_stop_s(limit_s: int, stop_minutes: int) -> int:
        """Seconds a job under the time limit ``limit_s`` has left when megatron's clock reaches ``stop_minutes``
        (the clock starts with the training process, a little after the job)."""
        return limit_s - 60 * stop_minutes

    def _margin_fix(self) -> str:
        """How to leave more than one iteration between the stop and the time limit: a longer time limit when the
        stop is the one ``oellm recipe`` derives from it (its margin grows with the limit), else an earlier stop where
        one passes the other checks (:meth:`_stop_fits`), or the shortest limit the recipe's own stop fits."""
        if not self._stop_is_derived:
            latest = self._latest_stop_before_one_step()
            return (f"set exit-duration-in-mins to at most {latest} in the recipe"
                    if latest >= 1 and self._stop_fits(self.limit_s, latest) else self._own_stop_limit_fix())
        return self._derived_limit_fix()

    def _latest_stop_before_one_step(self) -> int:
        """The latest whole-minute stop that leaves more than one iteration (:attr:`step_s`, which must be known)
        before the time limit."""
        return math.ceil((self.limit_s - self.step_s) / 60) - 1

    def _derived_limit_fix(self) -> str:
        """``give it a time limit of at least HH:MM:00``: the shortest limit whose derived stop
        (:func:`~megatron.oellm.recipes.resolve.exit_duration_minutes`) passes both stop checks of :meth:`check`, so
        that following the suggestion of one is not refused by the other."""
        minutes = math.ceil(self.least_stop_s / 60)
        while not self._derived_stop_fits(60 * minutes):
            minutes += 1
        return f"give it a time limit of at least {_time_limit_text(minutes)}"

    def _derived_stop_fits(self, limit_s: int) -> bool:
        """Whether the stop ``oellm recipe`` derives from the time limit ``limit_s`` comes no earlier than
        :attr:`least_stop_s` and, for a run that saves, leaves more than one iteration before the limit."""
        stop = exit_duration_minutes(limit_s)
        if stop is None or 60 * stop < self.least_stop_s:
            return False
        return not self.saves or self._after_stop_s(limit_s, stop) > self.step_s

    @property
    def _saving(self) -> str:
        """`` and saves`` for a run that saves checkpoints (megatron saves one when it stops), else ''."""
        return " and saves" if self.saves else ""

    def _stop_fix(self) -> str:
        """How to let the run reach its last iteration before its own stop: a time limit whose
        :func:`~megatron.oellm.recipes.resolve.exit_duration_minutes` covers the expected run time when the stop is
        the one ``oellm recipe`` derives from the limit, else a later stop."""
        if not self._stop_is_derived:
            return "set a later exit-duration-in-mins in the recipe, or none"
        return self._derived_limit_fix()


def reference_step(row: TableRow, world_size: int, card: ModelCard) -> tuple[float, str] | None:
    """(seconds per iteration, the reference it came from) of ``row`` on ``world_size`` GPUs; ``card`` carries the
    run's sequence length and vocabulary (for a TFLOP/s reference). None when the reference has no throughput."""
    reference = row.reference
    if "step_time_s" in reference:
        return reference["step_time_s"], f"step_time_s {reference['step_time_s']}"
    tokens = row.global_batch_size * card.seq_length
    if "tokens_per_s_per_gpu" in reference:
        rate = reference["tokens_per_s_per_gpu"]
        return tokens / (rate * world_size), f"tokens_per_s_per_gpu {rate}"
    for key in TFLOPS_KEYS:
        if key in reference:
            flops = tokens * training_flops_per_token(card, card.seq_length, card.vocab_size).total
            return flops / (reference[key] * 1e12 * world_size), f"{key} {reference[key]}"
    return None


def run_time(row: TableRow, limit: str, iterations: int, world_size: int, card: ModelCard,
             stop_minutes: int | None = None, saves: bool = False, requeues: bool = False,
             own_stop: bool = False) -> RunTime:
    """The :class:`RunTime` of ``row`` under the time limit ``limit`` and megatron's ``--exit-duration-in-mins``
    ``stop_minutes`` (the recipe's own, ``own_stop``, or derived from the limit), for a run that saves checkpoints or
    not, and whose job requeues itself or not (see :func:`reference_step`)."""
    step = reference_step(row, world_size, card)
    return RunTime(limit, time_limit_seconds(limit), iterations, None if step is None else step[0],
                   "" if step is None else step[1], stop_minutes, saves, requeues, own_stop)


def _time_limit_text(minutes: int) -> str:
    """A suggested time limit of ``minutes`` in SLURM's normalized form (:func:`slurm_time_text`), with where the user
    sets it: one text for every refusal that asks for a longer limit."""
    return f"{slurm_time_text(60 * minutes)} (the row's time = \"...\", or --time, which overrides it)"
