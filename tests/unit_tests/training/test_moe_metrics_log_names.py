"""The run's MoE metrics tracker reporting only the recorded load-balancing losses, on megatron-core's own
``training_log`` run on a one-rank gloo group (``patches/moe-load-balancing-log-names.md``).

Premise: upstream's log line for ``global_aux_loss`` / ``seq_aux_loss`` routing carries ``load_balancing_loss: 0``,
which no router records. With the tracker the entry installs through megatron-core's ``set_moe_metrics_tracker``, the
line carries exactly the losses the routers recorded, each with its value (mean over the MoE layers of the recorded
values over the micro-batch count), ``z_loss`` untouched; megatron-core's ``MoEMetricsTracker`` class stays as it is.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import subprocess
import sys
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch

from megatron.oellm.training import moe_metrics
from megatron.oellm.training.moe_metrics import (
    LOSS_NAME_OF_TYPE,
    RunMoEMetricsTracker,
    install_moe_metrics_tracker,
    unrecorded_loss_names,
)
from tests.unit_tests.cpu_megatron import gloo_world
from tests.unit_tests.training.entry_helpers import (
    TINY_MOE_RUN,
    Reached,
    entry_up_to_throughput_hook,
    validated_tiny_moe_run,
)
from tests.unit_tests.training.moe_tracker_helpers import empty_tracker_slot, upstream_class_attributes

REPO_ROOT = str(Path(__file__).resolve().parents[3])
"""The checkout under test, first on a fresh interpreter's path."""

_LOGGED = re.compile(r" (\w+): ([0-9.E+-]+) \|")


@pytest.fixture
def tracker_slot(monkeypatch):
    """megatron-core's ``moe_logging``, its tracker slot empty for the test and put back after."""
    return empty_tracker_slot(monkeypatch)


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
def test_upstream_logs_a_zero_load_balancing_loss_that_no_router_records(kind, validated_args, tracker_slot,
                                                                          monkeypatch):
    """Premise: megatron-core's own tracker and line, the routers having recorded only ``kind``'s loss."""
    rng = random.Random(random.random())
    args = validated_args
    monkeypatch.setattr(args, "moe_router_load_balancing_type", kind)
    logged = logged_values(args, monkeypatch, {LOSS_NAME_OF_TYPE[kind]: random_losses(rng, args.num_layers)},
                           rng.randrange(1, 5))
    assert type(tracker_slot.get_moe_metrics_tracker()) is tracker_slot.MoEMetricsTracker
    assert logged["load_balancing_loss"] == 0.0
    assert logged[LOSS_NAME_OF_TYPE[kind]] > 0


@pytest.mark.parametrize("kind", ["aux_loss", "seq_aux_loss", "global_aux_loss"])
def test_the_installed_trackers_line_carries_exactly_the_recorded_losses_with_their_values(kind, validated_args,
                                                                                           tracker_slot, monkeypatch):
    rng = random.Random(random.random())
    args = validated_args
    monkeypatch.setattr(args, "moe_router_load_balancing_type", kind)
    monkeypatch.setattr(args, "moe_z_loss_coeff", 1e-3)
    recorded = {LOSS_NAME_OF_TYPE[kind]: random_losses(rng, args.num_layers),
                "z_loss": random_losses(rng, args.num_layers)}
    microbatches = rng.randrange(1, 5)
    assert install_moe_metrics_tracker(kind)
    logged = logged_values(args, monkeypatch, recorded, microbatches)  # through megatron-core's get_moe_metrics_tracker
    assert {name for name in logged if name.endswith("loss")} == set(recorded)
    for name, values in recorded.items():
        assert logged[name] == pytest.approx(sum(values) / len(values) / microbatches, rel=1e-5)


def test_unrecorded_names_compare_whole_types_one_or_several():
    assert unrecorded_loss_names("global_aux_loss") == {"load_balancing_loss", "seq_load_balancing_loss"}
    assert unrecorded_loss_names("seq_aux_loss") == {"load_balancing_loss", "global_load_balancing_loss"}
    assert unrecorded_loss_names(["aux_loss", "global_aux_loss"]) == {"seq_load_balancing_loss"}
    assert unrecorded_loss_names("none") == set(LOSS_NAME_OF_TYPE.values())


class ReportSpy:
    """Stands in for upstream's ``MoEMetricsTracker.report``: records the names and the other arguments each call
    passes on."""

    def __init__(self):
        self.asked: list[list[str] | None] = []
        self.options: list[dict] = []

    def __call__(self, tracker, loss_scale, iteration, writer=None, wandb_writer=None, per_layer_logging=False,
                 force_initialize=False, track_names=None, **options) -> str:
        self.asked.append(track_names)
        self.options.append({"writer": writer, "force_initialize": force_initialize, **options})
        return ""


ALL_NAMES = ["load_balancing_loss", "seq_load_balancing_loss", "global_load_balancing_loss", "z_loss"]


def spied_report(monkeypatch) -> ReportSpy:
    """A :class:`ReportSpy` as upstream's ``report`` for the test (the installed tracker's ``super().report``)."""
    from megatron.core.transformer.moe.moe_logging import MoEMetricsTracker

    spy = ReportSpy()
    monkeypatch.setattr(MoEMetricsTracker, "report", lambda tracker, *args, **kwargs: spy(tracker, *args, **kwargs))
    return spy


def test_installing_again_sets_a_fresh_tracker_with_the_new_filter(tracker_slot, monkeypatch):
    """A second run in one process: its tracker filters for its own type only; the other arguments and every call
    form reach upstream unchanged."""
    assert install_moe_metrics_tracker("global_aux_loss")
    first = tracker_slot.get_moe_metrics_tracker()
    assert install_moe_metrics_tracker("aux_loss")
    tracker = tracker_slot.get_moe_metrics_tracker()
    assert isinstance(tracker, RunMoEMetricsTracker) and tracker is not first
    spy = spied_report(monkeypatch)
    layers = random.randint(2, 64)
    tracker.report(1.0, 7, track_names=ALL_NAMES, force_initialize=True, num_layers=layers, mtp_num_layers=1)
    tracker.report(1.0, 8, None, None, False, False, "z_loss")  # positional names, a single string
    tracker.report(1.0, 9)  # None: upstream reports every metric it has
    assert spy.asked == [["load_balancing_loss", "z_loss"], ["z_loss"], None]
    assert spy.options[0] == {"writer": None, "force_initialize": True, "num_layers": layers, "mtp_num_layers": 1}


def test_another_release_keeps_upstreams_tracker_and_says_so_at_the_caller(tracker_slot, monkeypatch):
    """The warning names the release and the note, and is attributed to the code that installed the tracker (the
    training entry), not to the package's own ``release`` module."""
    release = f"0.{random.randint(20, 60)}.{random.randint(0, 9)}"
    attributes = upstream_class_attributes()
    monkeypatch.setattr(moe_metrics, "megatron_core_release", lambda: release)
    with pytest.warns(RuntimeWarning, match=rf"megatron-core {release} .*patches/moe-load-balancing-log-names\.md") \
            as record:
        assert not install_moe_metrics_tracker("global_aux_loss")
    assert [warning.filename for warning in record] == [__file__]
    # the tracker subclass is no runtime patch (patches/README.md): the warning names neither
    assert str(record[0].message) == (f"megatron-core {release} is not 0.19.2: the change of "
                                      "patches/moe-load-balancing-log-names.md is not made, upstream's code runs "
                                      "unchanged")
    assert type(tracker_slot.get_moe_metrics_tracker()) is tracker_slot.MoEMetricsTracker
    assert upstream_class_attributes() == attributes


def test_the_training_entry_installs_it_with_the_runs_type_before_training(tracker_slot, monkeypatch):
    """The entry sets the tracker in megatron-core's slot; megatron-core's ``MoEMetricsTracker`` class is left as it
    was."""
    attributes = upstream_class_attributes()
    entry = entry_up_to_throughput_hook(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(Reached):  # the throughput hook, installed after the tracker
            entry.main(TINY_MOE_RUN)
    assert upstream_class_attributes() == attributes
    tracker = tracker_slot.get_moe_metrics_tracker()
    assert isinstance(tracker, RunMoEMetricsTracker) and tracker.hybrid is None
    spy = spied_report(monkeypatch)
    tracker.report(1.0, 1, track_names=ALL_NAMES)
    assert spy.asked == [["global_load_balancing_loss", "z_loss"]]  # the card's global_aux_loss


def test_a_release_without_the_setter_warns_instead_of_failing_at_import() -> None:
    """A release whose ``moe_logging`` has no ``set_moe_metrics_tracker`` (one handing its tracker out otherwise) gets
    the release warning, as any other release, not an ImportError when the entry imports the module (a fresh
    interpreter: the module reads megatron-core's names when it is first imported)."""
    code = (
        "import warnings\n"
        "import megatron.core.transformer.moe.moe_logging as moe_logging\n"
        "del moe_logging.set_moe_metrics_tracker\n"
        "from megatron.oellm.training import moe_metrics\n"
        "moe_metrics.megatron_core_release = lambda: '0.20.0'\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    installed = moe_metrics.install_moe_metrics_tracker('global_aux_loss')\n"
        "print(installed, any('0.20.0' in str(w.message) for w in caught))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([REPO_ROOT, os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["False", "True"]
