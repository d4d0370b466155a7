"""The hybrid MoE metrics patch (``patches/hybrid-moe-metrics.md``), on our built tiny Qwen3.5 (CPU), megatron-core's
own metrics tracker and, for pipeline parallelism, two gloo ranks.

Premises: the MoE blocks sit at the 'E' positions of the hybrid pattern among all its layers, and upstream's tracker
writes one series per position, so the mixers' series are 0 and an MoE block's series carries the position of its
'E'; a pipeline rank without MoE blocks pre-creates its metrics with the 'E' count, so the pipeline all-reduce meets
tensors of two sizes. Patched: one series per MoE block, ``layer_<i>`` the i-th block, with the value its router
recorded, and every rank's tensors have the routers' size.
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
from megatron.oellm.patches import hybrid_moe_metrics
from megatron.oellm.patches.hybrid_moe_metrics import moe_positions
from tests.unit_tests.cpu_megatron import cpu_model_building, cpu_torch_model, gloo_world
from tests.unit_tests.patches.pipeline_tracker_ranks import SeriesWriter
from tests.unit_tests.patches.upstream import unpatched
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_throughput_hook, tiny_moe_run

HYBRID = get_card("qwen3.5-35b-a3b-tiny")
METRIC = "global_load_balancing_loss"


@pytest.fixture
def upstream_tracker(monkeypatch):
    """megatron-core's ``MoEMetricsTracker`` with its own ``_log_per_layer``, ``ensure_initialized`` and ``report``
    for the test; whatever was installed is put back after."""
    from megatron.core.transformer.moe.moe_logging import MoEMetricsTracker

    monkeypatch.setattr(MoEMetricsTracker, "_log_per_layer", unpatched(MoEMetricsTracker._log_per_layer))
    monkeypatch.setattr(MoEMetricsTracker, "ensure_initialized", unpatched(MoEMetricsTracker.ensure_initialized))
    monkeypatch.setattr(MoEMetricsTracker, "report", unpatched(MoEMetricsTracker.report))
    return MoEMetricsTracker


@pytest.fixture(scope="module")
def moe_layer_numbers() -> tuple[list[int], int]:
    """1-based layer numbers of the built tiny Qwen3.5's MoE blocks, and the per-layer tensor size they record with."""
    from megatron.core.transformer.moe.moe_layer import MoELayer

    # module-scoped, so outside the per-test environment restore: megatron exports NVTE_* switches when it builds
    with mock.patch.dict(os.environ), gloo_world(), cpu_model_building():
        model = cpu_torch_model(HYBRID)
        moe_layers = [module for module in model.modules() if isinstance(module, MoELayer)]
        return [layer.layer_number for layer in moe_layers], moe_layers[0].config.num_layers


def _written_series(tracker_cls, layer_numbers: list[int], num_layers: int) -> tuple[dict[int, float], list[float]]:
    """Per-layer series the tracker writes after each MoE block recorded a fresh random value (by series index),
    and the recorded values in block order."""
    tracker = tracker_cls()
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


def test_premise_upstream_numbers_the_series_by_pattern_position(upstream_tracker, moe_layer_numbers):
    layer_numbers, num_layers = moe_layer_numbers
    positions, main_layers = moe_positions(HYBRID.hybrid_layer_pattern)
    assert [number - 1 for number in layer_numbers] == positions and num_layers == main_layers
    series, recorded = _written_series(upstream_tracker, layer_numbers, num_layers)
    assert sorted(series) == list(range(num_layers))
    by_position = dict(zip(positions, recorded, strict=True))
    for position, value in series.items():
        assert value == pytest.approx(by_position.get(position, 0.0), rel=1e-6)


def test_patched_series_are_the_moe_blocks_in_order(upstream_tracker, moe_layer_numbers):
    """One series per MoE block, numbered 0.. in block order, each with its recorded value; the tracker's own
    tensor keeps its pattern-position layout (the all-reduces and the next interval use it)."""
    layer_numbers, num_layers = moe_layer_numbers
    assert hybrid_moe_metrics.apply(HYBRID.hybrid_layer_pattern)
    series, recorded = _written_series(upstream_tracker, layer_numbers, num_layers)
    assert sorted(series) == list(range(len(layer_numbers)))
    assert [series[index] for index in range(len(layer_numbers))] == pytest.approx(recorded, rel=1e-6)
    tracker = upstream_tracker()
    tracker.record(METRIC, torch.tensor(1.0), layer_numbers[-1], num_layers)
    tracker._log_per_layer(1.0, [METRIC], 1, SeriesWriter(), None)
    assert tracker._metrics[METRIC].values.numel() == num_layers
    assert tracker._metrics[METRIC].values[layer_numbers[-1] - 1].item() == 1.0


@pytest.mark.parametrize(("pattern", "positions", "main_layers"), [
    ("GEGE*E", [1, 3, 5], 6),
    ("GE|GE|*E", [1, 3, 5], 6),  # pipeline boundaries are not layers
    ("GEGE/*E", [1, 3], 4),  # the multi-token-prediction part is not in the main pattern
    ("EEE", [0, 1, 2], 3),
])
def test_moe_positions(pattern: str, positions: list[int], main_layers: int):
    assert moe_positions(pattern) == (positions, main_layers)


def test_entries_after_the_main_pattern_are_kept_behind_the_moe_blocks(upstream_tracker):
    """A multi-token-prediction block records past the main pattern's layers: its series follows the MoE blocks'."""
    assert hybrid_moe_metrics.apply("GE*E/E")
    values = [random.uniform(0.5, 2.0) for _ in range(3)]
    tracker = upstream_tracker()
    for layer_number, value in zip([2, 4, 5], values, strict=True):
        tracker.record(METRIC, torch.tensor(value), layer_number, 5)
    writer = SeriesWriter()
    tracker._log_per_layer(1.0, [METRIC], 1, writer, None)
    assert writer.series == pytest.approx({f"moe/{METRIC}_layer_{index}": value for index, value in enumerate(values)})


def test_unrecorded_metrics_get_the_routers_size(upstream_tracker):
    """A metric no router of this rank recorded is pre-created with the all-layer size the routers record with (six
    main layers plus the multi-token-prediction layer), not with the 'E' count ``training_log`` passes (its
    ``get_hybrid_layer_counts``: three main blocks and the MTP one)."""
    from megatron.core.models.hybrid.hybrid_layer_allocation import get_hybrid_layer_counts

    pattern = "GEGE*E/E"
    assert hybrid_moe_metrics.apply(pattern)
    tracker = upstream_tracker()
    with gloo_world():
        tracker.report(loss_scale=1.0, iteration=1, force_initialize=True, track_names=[METRIC],
                       num_layers=get_hybrid_layer_counts(pattern)["E"], moe_layer_freq=1, mtp_num_layers=1)
    assert tracker._metrics[METRIC].values.numel() == 7


def _pipeline_ranks(*options: str) -> subprocess.CompletedProcess:
    """:mod:`tests.unit_tests.patches.pipeline_tracker_ranks` run with ``options`` (two gloo ranks)."""
    return subprocess.run([sys.executable, "-m", "tests.unit_tests.patches.pipeline_tracker_ranks", *options],
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


def test_patched_pipeline_ranks_agree_on_the_recorded_values():
    """Patched: both ranks finish, each with the mean of the recorded values and one series per MoE block."""
    values = [random.uniform(0.5, 2.0) for _ in range(2)]
    run = _pipeline_ranks("--patched", *map(str, values))
    assert run.returncode == 0, run.stderr[-2000:]
    reports = _reports(run)
    assert sorted(reports) == [0, 1]
    for report in reports.values():
        series = report["series"]
        assert series[METRIC] == pytest.approx(sum(values) / 2, rel=1e-6)
        assert [series[f"moe/{METRIC}_layer_{index}"] for index in range(2)] == pytest.approx(values, rel=1e-6)
        assert len(series) == 3


def test_reapplying_replaces_the_pattern(upstream_tracker):
    upstream = upstream_tracker._log_per_layer
    assert hybrid_moe_metrics.apply("GEGE")
    assert hybrid_moe_metrics.apply("EGEG")
    assert upstream_tracker._log_per_layer.__wrapped__ is upstream
    tracker = upstream_tracker()
    tracker.record(METRIC, torch.tensor(3.0), 3, 4)  # the second MoE block of EGEG
    writer = SeriesWriter()
    tracker._log_per_layer(1.0, [METRIC], 1, writer, None)
    assert writer.series == {f"moe/{METRIC}_layer_0": 0.0, f"moe/{METRIC}_layer_1": 3.0}


def test_other_release_keeps_upstream_and_warns(upstream_tracker, monkeypatch):
    upstream = upstream_tracker._log_per_layer, upstream_tracker.ensure_initialized
    monkeypatch.setattr(hybrid_moe_metrics, "megatron_core_release", lambda: "0.20.0")
    with pytest.warns(RuntimeWarning, match="hybrid-moe-metrics"):
        assert not hybrid_moe_metrics.apply("GEGE")
    assert (upstream_tracker._log_per_layer, upstream_tracker.ensure_initialized) == upstream


@pytest.mark.parametrize(("card", "per_layer", "applied"), [
    ("qwen3.5-35b-a3b-tiny", True, True),
    ("qwen3.5-35b-a3b-tiny", False, True),  # the pipeline sizes matter without per-layer logging too
    ("qwen3-30b-a3b-tiny", True, False),  # a GPT model's layers are its MoE blocks already
])
def test_the_training_entry_applies_it_for_hybrid_models(upstream_tracker, monkeypatch, card, per_layer, applied):
    entry = entry_up_to_throughput_hook(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(Reached):  # the throughput hook, installed after the patches
            entry.main([*tiny_moe_run(card), *(["--moe-per-layer-logging"] if per_layer else [])])
    assert getattr(upstream_tracker._log_per_layer, "oellm_patched", False) is applied
    assert getattr(upstream_tracker.ensure_initialized, "oellm_patched", False) is applied
