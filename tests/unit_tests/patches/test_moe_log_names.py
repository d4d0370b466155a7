"""The load-balancing log-name patch, on megatron-core's own ``training_log`` run on a one-rank gloo group.

Premise: upstream's log line for ``global_aux_loss`` / ``seq_aux_loss`` routing carries ``load_balancing_loss: 0``,
which no router records. Patched: the line carries exactly the losses the routers recorded, each with its value
(mean over the MoE layers of the recorded values over the micro-batch count), ``z_loss`` untouched.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
import warnings
from unittest import mock

import pytest
import torch

from megatron.oellm.patches import moe_log_names
from megatron.oellm.patches.moe_log_names import LOSS_NAME_OF_TYPE, unrecorded_loss_names
from tests.unit_tests.cpu_megatron import gloo_world
from tests.unit_tests.patches.upstream import unpatched
from tests.unit_tests.training.entry_helpers import (
    TINY_MOE_RUN,
    Reached,
    entry_up_to_throughput_hook,
    validated_tiny_moe_run,
)

_LOGGED = re.compile(r" (\w+): ([0-9.E+-]+) \|")


@pytest.fixture
def upstream_report(monkeypatch):
    """megatron-core's own ``MoEMetricsTracker.report`` for the test; whatever was installed is put back after."""
    from megatron.core.transformer.moe.moe_logging import MoEMetricsTracker

    monkeypatch.setattr(MoEMetricsTracker, "report", unpatched(MoEMetricsTracker.report))
    return MoEMetricsTracker


@pytest.fixture(scope="module")
def validated_args():
    """Megatron's validated arguments of the tiny Qwen3 MoE card (validate_args answered as on an H100 node)."""
    return validated_tiny_moe_run(["--log-interval", "1"])


def logged_values(args, monkeypatch, recorded: dict[str, list[float]], microbatches: int) -> dict[str, float]:
    """Name -> value of the line megatron's ``training_log`` prints for the first iteration after the routers
    recorded ``recorded`` (name -> one value per layer); ``training_log``'s CUDA calls answered on the CPU."""
    from megatron.core import num_microbatches_calculator as calculator
    from megatron.core.timers import Timers
    from megatron.core.transformer.moe.moe_logging import get_moe_metrics_tracker
    from megatron.training import global_vars, training

    monkeypatch.setattr(global_vars, "_GLOBAL_ARGS", args)
    monkeypatch.setattr(global_vars, "_GLOBAL_TIMERS", Timers(0, "minmax"))
    monkeypatch.setattr(calculator, "_GLOBAL_NUM_MICROBATCHES_CALCULATOR", None)
    calculator.init_num_microbatches_calculator(0, None, microbatches, 1, 1)
    monkeypatch.setattr(training, "get_energy_monitor", lambda: None)
    monkeypatch.setattr(training, "get_one_logger", lambda: None)
    printed = io.StringIO()
    with gloo_world(), mock.patch.object(torch.cuda, "current_device", return_value="cpu"), \
            mock.patch.object(torch.cuda, "synchronize"), contextlib.redirect_stdout(printed):
        tracker = get_moe_metrics_tracker()
        for name, values in recorded.items():
            for layer, value in enumerate(values, start=1):
                tracker.record(name, torch.tensor(value), layer, args.num_layers)
        timer = global_vars.get_timers()("interval-time", log_level=0)
        timer.start()
        timer.stop()
        training.training_log({}, {}, 1e-4, 1, 1.0, False, 0, 1.0, None, None, None, is_first_iteration=True)
    lines = [line for line in printed.getvalue().splitlines() if " iteration " in line]
    assert len(lines) == 1, printed.getvalue()
    return {name: float(value) for name, value in _LOGGED.findall(lines[0])}


def random_losses(rng: random.Random, layers: int) -> list[float]:
    return [rng.uniform(0.1, 3.0) for _ in range(layers)]


@pytest.mark.parametrize("kind", ["global_aux_loss", "seq_aux_loss"])
def test_upstream_logs_a_zero_load_balancing_loss_that_no_router_records(kind, validated_args, upstream_report,
                                                                          monkeypatch):
    """Premise: megatron-core's own line, the routers having recorded only ``kind``'s loss."""
    rng = random.Random(random.random())
    args = validated_args
    monkeypatch.setattr(args, "moe_router_load_balancing_type", kind)
    logged = logged_values(args, monkeypatch, {LOSS_NAME_OF_TYPE[kind]: random_losses(rng, args.num_layers)},
                           rng.randrange(1, 5))
    assert logged["load_balancing_loss"] == 0.0
    assert logged[LOSS_NAME_OF_TYPE[kind]] > 0


@pytest.mark.parametrize("kind", ["aux_loss", "seq_aux_loss", "global_aux_loss"])
def test_the_patched_line_carries_exactly_the_recorded_losses_with_their_values(kind, validated_args,
                                                                                upstream_report, monkeypatch):
    rng = random.Random(random.random())
    args = validated_args
    monkeypatch.setattr(args, "moe_router_load_balancing_type", kind)
    monkeypatch.setattr(args, "moe_z_loss_coeff", 1e-3)
    recorded = {LOSS_NAME_OF_TYPE[kind]: random_losses(rng, args.num_layers),
                "z_loss": random_losses(rng, args.num_layers)}
    microbatches = rng.randrange(1, 5)
    assert moe_log_names.apply(kind)
    logged = logged_values(args, monkeypatch, recorded, microbatches)
    assert {name for name in logged if name.endswith("loss")} == set(recorded)
    for name, values in recorded.items():
        assert logged[name] == pytest.approx(sum(values) / len(values) / microbatches, rel=1e-5)


def test_unrecorded_names_compare_whole_types_one_or_several():
    assert unrecorded_loss_names("global_aux_loss") == {"load_balancing_loss", "seq_load_balancing_loss"}
    assert unrecorded_loss_names("seq_aux_loss") == {"load_balancing_loss", "global_load_balancing_loss"}
    assert unrecorded_loss_names(["aux_loss", "global_aux_loss"]) == {"seq_load_balancing_loss"}
    assert unrecorded_loss_names("none") == set(LOSS_NAME_OF_TYPE.values())


class ReportSpy:
    """Stands in for upstream's ``report``: records the names each call asks for."""

    def __init__(self):
        self.asked: list[list[str] | None] = []

    def __call__(self, tracker, loss_scale, iteration, writer=None, track_names=None, **kwargs) -> str:
        self.asked.append(track_names)
        return ""


ALL_NAMES = ["load_balancing_loss", "seq_load_balancing_loss", "global_load_balancing_loss", "z_loss"]


def installed_filter(tracker_class, monkeypatch) -> ReportSpy:
    """A :class:`ReportSpy` installed as upstream's ``report`` (the patch wraps what it finds)."""
    spy = ReportSpy()
    monkeypatch.setattr(tracker_class, "report", spy)
    return spy


def test_applying_again_replaces_the_filter_instead_of_stacking_one(upstream_report, monkeypatch):
    spy = installed_filter(upstream_report, monkeypatch)
    assert moe_log_names.apply("global_aux_loss") and moe_log_names.apply("aux_loss")
    assert upstream_report.report.__wrapped__ is spy
    upstream_report.report(None, 1.0, 7, track_names=ALL_NAMES)
    upstream_report.report(None, 1.0, 8, None, "z_loss")  # positional names, a single string
    upstream_report.report(None, 1.0, 9)  # None: upstream reports every metric it has
    assert spy.asked == [["load_balancing_loss", "z_loss"], ["z_loss"], None]


def test_another_release_keeps_upstreams_report_and_says_so(upstream_report, monkeypatch):
    upstream = upstream_report.report
    monkeypatch.setattr(moe_log_names, "megatron_core_release", lambda: "0.20.0")
    with pytest.warns(RuntimeWarning, match=r"megatron-core 0\.20\.0 .*patches/moe-load-balancing-log-names\.md"):
        assert not moe_log_names.apply("global_aux_loss")
    assert upstream_report.report is upstream


def test_the_training_entry_applies_it_with_the_runs_type_before_training(upstream_report, monkeypatch):
    spy = installed_filter(upstream_report, monkeypatch)
    entry = entry_up_to_throughput_hook(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(Reached):  # the throughput hook, installed after the patch
            entry.main(TINY_MOE_RUN)
    assert upstream_report.report.__wrapped__ is spy
    upstream_report.report(None, 1.0, 1, track_names=ALL_NAMES)
    assert spy.asked == [["global_load_balancing_loss", "z_loss"]]  # the card's global_aux_loss
