"""The run's MoE metrics tracker in a hybrid model (``patches/hybrid-moe-metrics.md``), on our built tiny Qwen3.5
(CPU), megatron-core's ``get_moe_metrics_tracker()`` and, for pipeline parallelism, two gloo ranks.

Premises: the MoE blocks sit at the 'E' positions of the hybrid pattern among all its layers, and upstream's tracker
writes one series per position, so the mixers' series are 0 and an MoE block's series carries the position of its
'E'; a pipeline rank without MoE blocks pre-creates its metrics with the 'E' count, so the pipeline all-reduce meets
tensors of two sizes. With the tracker the entry installs through ``set_moe_metrics_tracker``: one series per MoE
block, ``layer_<i>`` the i-th block, with the value its router recorded, and every rank's tensors have the routers'
size; megatron-core's ``MoEMetricsTracker`` class stays as it is.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import warnings
from unittest import mock

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.training import moe_metrics
from megatron.oellm.training.moe_metrics import RunMoEMetricsTracker, install_moe_metrics_tracker, moe_positions
from tests.unit_tests.cpu_megatron import cpu_model_building, cpu_torch_model, gloo_world
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_throughput_hook, tiny_moe_run
from tests.unit_tests.training.moe_tracker_helpers import empty_tracker_slot, upstream_class_attributes
from tests.unit_tests.training.pipeline_tracker_ranks import LOAD_BALANCING_TYPE, SeriesWriter

HYBRID = get_card("qwen3.5-35b-a3b-tiny")
METRIC = "global_load_balancing_loss"


@pytest.fixture
def tracker_slot(monkeypatch):
    """megatron-core's ``moe_logging``, its tracker slot empty for the test and put back after."""
    return empty_tracker_slot(monkeypatch)


def installed_tracker(hybrid_layer_pattern: str) -> RunMoEMetricsTracker:
    """The tracker the entry installs for a hybrid run of ``hybrid_layer_pattern``, as megatron-core hands it out."""
    from megatron.core.transformer.moe.moe_logging import get_moe_metrics_tracker

    assert install_moe_metrics_tracker(LOAD_BALANCING_TYPE, hybrid_layer_pattern)
    tracker = get_moe_metrics_tracker()
    assert isinstance(tracker, RunMoEMetricsTracker)
    return tracker


@pytest.fixture(scope="module")
def moe_layer_numbers() -> tuple[list[int], int]:
    """1-based layer numbers of the built tiny Qwen3.5's MoE blocks, and the per-layer tensor size they record with."""
    from megatron.core.transformer.moe.moe_layer import MoELayer

    # module-scoped, so outside the per-test environment restore: megatron exports NVTE_* switches when it builds
    with mock.patch.dict(os.environ), gloo_world(), cpu_model_building():
        model = cpu_torch_model(HYBRID)
        moe_layers = [module for module in model.modules() if isinstance(module, MoELayer)]
        return [layer.layer_number for layer in moe_layers], moe_layers[0].config.num_layers


def _written_series(layer_numbers: list[int], num_layers: int) -> tuple[dict[int, float], list[float]]:
    """Per-layer series megatron-core's current tracker writes after each MoE block recorded a fresh random value (by
    series index), and the recorded values in block order."""
    from megatron.core.transformer.moe.moe_logging import get_moe_metrics_tracker

    tracker = get_moe_metrics_tracker()
    recorded = [random.uniform(0.5, 2.0) for _ in layer_numbers]
    for layer_number, value in zip(layer_numbers, recorded, strict=True):
        tracker.record(METRIC, torch.tensor(value), layer_number, num_layers)
    writer = SeriesWriter()
    with gloo_world():
        line = tracker.report(loss_scale=1.0, iteration=1, writer=writer, per_layer_logging=True,
                              force_initialize=True, track_names=[METRIC], num_layers=len(layer_numbers),
                              moe_layer_freq=1)
    assert writer.series[METRIC] == pytest.approx(sum(recorded) / len(recorded), rel=1e-6), line
    series = {int(name.rsplit("_", 1)[1]): value for name, value in writer.series.items() if "_layer_" in name}
    return series, recorded


def test_premise_upstream_numbers_the_series_by_pattern_position(tracker_slot, moe_layer_numbers):
    layer_numbers, num_layers = moe_layer_numbers
    assert type(tracker_slot.get_moe_metrics_tracker()) is tracker_slot.MoEMetricsTracker
    positions, main_layers = moe_positions(HYBRID.hybrid_layer_pattern)
    assert [number - 1 for number in layer_numbers] == positions and num_layers == main_layers
    series, recorded = _written_series(layer_numbers, num_layers)
    assert sorted(series) == list(range(num_layers))
    by_position = dict(zip(positions, recorded, strict=True))
    for position, value in series.items():
        assert value == pytest.approx(by_position.get(position, 0.0), rel=1e-6)


def test_installed_series_are_the_moe_blocks_in_order(tracker_slot, moe_layer_numbers):
    """One series per MoE block, numbered 0.. in block order, each with its recorded value; the tracker's own
    tensor keeps its pattern-position layout (the all-reduces and the next interval use it)."""
    layer_numbers, num_layers = moe_layer_numbers
    tracker = installed_tracker(HYBRID.hybrid_layer_pattern)
    series, recorded = _written_series(layer_numbers, num_layers)
    assert sorted(series) == list(range(len(layer_numbers)))
    assert [series[index] for index in range(len(layer_numbers))] == pytest.approx(recorded, rel=1e-6)
    tracker.record(METRIC, torch.tensor(1.0), layer_numbers[-1], num_layers)
    tracker._log_per_layer(1.0, [METRIC], 1, SeriesWriter(), None)
    assert tracker.metrics[METRIC].values.numel() == num_layers
    assert tracker.metrics[METRIC].values[layer_numbers[-1] - 1].item() == 1.0


@pytest.mark.parametrize(("pattern", "positions", "main_layers"), [
    ("GEGE*E", [1, 3, 5], 6),
    ("GE|GE|*E", [1, 3, 5], 6),  # pipeline boundaries are not layers
    ("GEGE/*E", [1, 3], 4),  # the multi-token-prediction part is not in the main pattern
    ("EEE", [0, 1, 2], 3),
])
def test_moe_positions(pattern: str, positions: list[int], main_layers: int):
    assert moe_positions(pattern) == (positions, main_layers)


def test_entries_after_the_main_pattern_are_kept_behind_the_moe_blocks(tracker_slot):
    """A multi-token-prediction block records past the main pattern's layers: its series follows the MoE blocks'."""
    tracker = installed_tracker("GE*E/E")
    values = [random.uniform(0.5, 2.0) for _ in range(3)]
    for layer_number, value in zip([2, 4, 5], values, strict=True):
        tracker.record(METRIC, torch.tensor(value), layer_number, 5)
    writer = SeriesWriter()
    tracker._log_per_layer(1.0, [METRIC], 1, writer, None)
    assert writer.series == pytest.approx({f"moe/{METRIC}_layer_{index}": value for index, value in enumerate(values)})


def test_unrecorded_metrics_get_the_routers_size(tracker_slot):
    """A metric no router of this rank recorded is pre-created with the all-layer size the routers record with (six
    main layers plus the multi-token-prediction layer), not with the 'E' count ``training_log`` passes (its
    ``get_hybrid_layer_counts``: three main blocks and the MTP one)."""
    from megatron.core.models.hybrid.hybrid_layer_allocation import get_hybrid_layer_counts

    pattern = "GEGE*E/E"
    tracker = installed_tracker(pattern)
    with gloo_world():
        tracker.report(loss_scale=1.0, iteration=1, force_initialize=True, track_names=[METRIC],
                       num_layers=get_hybrid_layer_counts(pattern)["E"], moe_layer_freq=1, mtp_num_layers=1)
    assert tracker._metrics[METRIC].values.numel() == 7


def _pipeline_ranks(*options: str) -> subprocess.CompletedProcess:
    """:mod:`tests.unit_tests.training.pipeline_tracker_ranks` run with ``options`` (two gloo ranks)."""
    return subprocess.run([sys.executable, "-m", "tests.unit_tests.training.pipeline_tracker_ranks", *options],
                          capture_output=True, text=True, timeout=120, check=False)


def _reports(run: subprocess.CompletedProcess) -> dict[int, dict]:
    """Each rank's JSON report line, by rank."""
    reports = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return {report["rank"]: report for report in reports}


def test_premise_a_pipeline_rank_without_moe_blocks_breaks_the_all_reduce():
    """Upstream: rank 0 (no MoE block) all-reduces a 2-entry tensor against rank 1's 4 entries. Rank 1 never
    finishes (gloo stops it on the size mismatch, or on rank 0 leaving), and rank 0's average, where it prints one,
    is not the mean of the recorded values (it read the first two of rank 1's four entries)."""
    values = [random.uniform(0.5, 2.0) for _ in range(2)]
    run = _pipeline_ranks(*map(str, values))
    assert run.returncode != 0
    reports = _reports(run)
    assert 1 not in reports
    assert "size doesn't match" in run.stderr or "Connection closed by peer" in run.stderr, run.stderr[-2000:]
    if 0 in reports:
        assert reports[0]["series"][METRIC] != pytest.approx(sum(values) / 2, rel=1e-6)


def test_pipeline_ranks_with_the_installed_tracker_agree_on_the_recorded_values():
    """Installed: both ranks finish, each with the mean of the recorded values and one series per MoE block."""
    values = [random.uniform(0.5, 2.0) for _ in range(2)]
    run = _pipeline_ranks("--installed", *map(str, values))
    assert run.returncode == 0, run.stderr[-2000:]
    reports = _reports(run)
    assert sorted(reports) == [0, 1]
    for report in reports.values():
        series = report["series"]
        assert series[METRIC] == pytest.approx(sum(values) / 2, rel=1e-6)
        assert [series[f"moe/{METRIC}_layer_{index}"] for index in range(2)] == pytest.approx(values, rel=1e-6)
        assert len(series) == 3


def test_installing_again_sets_a_tracker_for_the_new_pattern(tracker_slot):
    first = installed_tracker("GEGE")
    tracker = installed_tracker("EGEG")
    assert tracker is not first and tracker.metrics == {}
    tracker.record(METRIC, torch.tensor(3.0), 3, 4)  # the second MoE block of EGEG
    writer = SeriesWriter()
    tracker._log_per_layer(1.0, [METRIC], 1, writer, None)
    assert writer.series == {f"moe/{METRIC}_layer_0": 0.0, f"moe/{METRIC}_layer_1": 3.0}


def test_reinstalling_for_another_pattern_sizes_unrecorded_metrics_for_that_pattern_only(tracker_slot):
    """A second run in one process with another hybrid pattern: the pre-created size is the new pattern's all-layer
    size, not the first correction stacked on the second (a size no router records, which breaks the pipeline
    all-reduce the tracker's sizing exists for)."""
    from megatron.core.models.hybrid.hybrid_layer_allocation import get_hybrid_layer_counts

    mixers = random.randint(2, 4)
    first, second = "GE" * 3, ("G" * mixers + "E") * 2
    installed_tracker(first)
    tracker = installed_tracker(second)
    with gloo_world():
        tracker.report(loss_scale=1.0, iteration=1, force_initialize=True, track_names=[METRIC],
                       num_layers=get_hybrid_layer_counts(second)["E"], moe_layer_freq=1)
    assert tracker.metrics[METRIC].values.numel() == len(second)


def test_per_layer_series_skip_a_metric_this_rank_never_recorded(tracker_slot):
    """``_log_per_layer`` is asked for every tracked name, some of which no router of this rank recorded (``z_loss``
    with a zero coefficient): those are skipped, as upstream does, and the recorded metric's series are written by
    MoE block."""
    tracker = installed_tracker("GEGE")
    values = [random.uniform(0.5, 2.0) for _ in range(2)]
    for layer_number, value in zip((2, 4), values, strict=True):
        tracker.record(METRIC, torch.tensor(value), layer_number, 4)
    writer = SeriesWriter()
    tracker._log_per_layer(1.0, ["z_loss", METRIC], 1, writer, None)
    assert writer.series == pytest.approx({f"moe/{METRIC}_layer_{index}": value for index, value in enumerate(values)})


def test_other_release_keeps_upstreams_tracker_and_warns_for_both_notes(tracker_slot, monkeypatch):
    attributes = upstream_class_attributes()
    monkeypatch.setattr(moe_metrics, "megatron_core_release", lambda: "0.20.0")
    with pytest.warns(RuntimeWarning) as record:
        assert not install_moe_metrics_tracker(LOAD_BALANCING_TYPE, "GEGE")
    assert sorted(str(warning.message).split("patches/")[1].split(".md")[0] for warning in record) == [
        "hybrid-moe-metrics", "moe-load-balancing-log-names"]
    assert type(tracker_slot.get_moe_metrics_tracker()) is tracker_slot.MoEMetricsTracker
    assert upstream_class_attributes() == attributes


@pytest.mark.parametrize(("card", "per_layer", "hybrid"), [
    ("qwen3.5-35b-a3b-tiny", True, True),
    ("qwen3.5-35b-a3b-tiny", False, True),  # the pipeline sizes matter without per-layer logging too
    ("qwen3-30b-a3b-tiny", True, False),  # a GPT model's layers are its MoE blocks already
])
def test_the_training_entry_installs_it_for_hybrid_models(tracker_slot, monkeypatch, card, per_layer, hybrid):
    """The entry sets the tracker in megatron-core's slot, with the card's hybrid layout where it has one;
    megatron-core's ``MoEMetricsTracker`` class is left as it was."""
    attributes = upstream_class_attributes()
    entry = entry_up_to_throughput_hook(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(Reached):  # the throughput hook, installed after the tracker
            entry.main([*tiny_moe_run(card), *(["--moe-per-layer-logging"] if per_layer else [])])
    assert upstream_class_attributes() == attributes
    tracker = tracker_slot.get_moe_metrics_tracker()
    assert isinstance(tracker, RunMoEMetricsTracker)
    if hybrid:
        positions, main_layers = moe_positions(HYBRID.hybrid_layer_pattern)
        assert (list(tracker.hybrid.positions), tracker.hybrid.main_layers) == (positions, main_layers)
        assert tracker.hybrid.moe_blocks == len(positions)
    else:
        assert tracker.hybrid is None
