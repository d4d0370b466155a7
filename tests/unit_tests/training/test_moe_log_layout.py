"""A hybrid model's per-layer MoE series, as megatron-core 0.19.2 names them, and the entry's warning about it.

Premise on our built tiny Qwen3.5 (CPU) and megatron's own metrics tracker: the MoE blocks sit at the 'E' positions of
the hybrid pattern among all its layers, and the tracker writes one series per position, so the mixers' series are 0
and an MoE block's series carries the position of its 'E'.
"""

from __future__ import annotations

import random

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.training.moe_log_layout import per_layer_log_warnings
from tests.unit_tests.cpu_megatron import cpu_model_building, cpu_torch_model, gloo_world
from tests.unit_tests.training.entry_helpers import (
    Reached,
    entry_up_to_pretrain,
    tiny_moe_run,
    validated_tiny_moe_run,
)

HYBRID = "qwen3.5-35b-a3b-tiny"


class SeriesWriter:
    """Stands in for TensorBoard's writer: keeps the last value of each series."""

    def __init__(self):
        self.series: dict[str, float] = {}

    def add_scalar(self, name: str, value: float, iteration: int) -> None:
        self.series[name] = float(value)


def test_premise_a_hybrid_models_series_are_numbered_by_pattern_position(monkeypatch):
    from megatron.core.transformer.moe.moe_layer import MoELayer
    from megatron.core.transformer.moe.moe_logging import MoEMetricsTracker

    from tests.unit_tests.patches.upstream import unpatched

    monkeypatch.setattr(MoEMetricsTracker, "report", unpatched(MoEMetricsTracker.report))
    card = get_card("qwen3.5-35b-a3b-tiny")
    pattern = card.hybrid_layer_pattern.replace("|", "")
    with gloo_world(), cpu_model_building():
        model = cpu_torch_model(card)
        moe_layers = [module for module in model.modules() if isinstance(module, MoELayer)]
        assert [layer.layer_number - 1 for layer in moe_layers] == [i for i, s in enumerate(pattern) if s == "E"]
        tracker = MoEMetricsTracker()
        recorded = {layer.layer_number - 1: random.uniform(0.5, 2.0) for layer in moe_layers}
        for layer in moe_layers:
            tracker.record("global_load_balancing_loss", torch.tensor(recorded[layer.layer_number - 1]),
                           layer.layer_number, layer.config.num_layers)
        writer = SeriesWriter()
        tracker.report(loss_scale=1.0, iteration=1, writer=writer, per_layer_logging=True, force_initialize=True,
                       track_names=["global_load_balancing_loss"], num_layers=len(moe_layers), moe_layer_freq=1)
    series = {int(name.rsplit("_", 1)[1]): value for name, value in writer.series.items() if "_layer_" in name}
    assert sorted(series) == list(range(len(pattern)))
    for position, value in series.items():
        assert value == pytest.approx(recorded.get(position, 0.0), rel=1e-6)


def test_the_warning_is_for_hybrid_moe_models_with_per_layer_logging_only():
    assert per_layer_log_warnings(validated_tiny_moe_run(["--moe-per-layer-logging"])) == []  # GPT: layer = block
    assert per_layer_log_warnings(validated_tiny_moe_run([], card=HYBRID)) == []
    (warning,) = per_layer_log_warnings(validated_tiny_moe_run(["--moe-per-layer-logging"], card=HYBRID))
    assert "position of its 'E'" in warning


def test_the_entry_prints_it_on_rank_zero(monkeypatch, capsys):
    entry = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        entry.main([*tiny_moe_run(HYBRID), "--moe-per-layer-logging"])
    err = capsys.readouterr().err
    assert "warning: --moe-per-layer-logging on a hybrid model" in err
