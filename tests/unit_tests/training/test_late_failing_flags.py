"""Flags megatron-core 0.19.2 accepts and then fails on, or ignores, once the run is under way; found by a
report-only helper hunting TE-free mid-run failures. Each premise is shown on megatron's own code on the CPU, then
the training entry refuses the run in one error line before Megatron starts (or, for ``--inprocess-restart``, hands
megatron's own restart wrapper the run), and lets the fixed command line through."""

from __future__ import annotations

import random
import sys
import types
from unittest import mock

import pytest
import torch

from megatron.oellm.cards import get_card
from tests.unit_tests.cpu_megatron import cpu_model_building, gloo_world
from tests.unit_tests.training.entry_helpers import (
    TINY_MOE_RUN,
    Reached,
    entry_up_to_pretrain,
    entry_up_to_throughput_hook,
    installed_stand_in,
    refused_line,
    tiny_moe_run,
)


def _interval() -> int:
    return random.randint(2, 400)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_premise_meta_device_leaves_the_routers_on_meta(name):
    """Built under ``torch.device("meta")`` as megatron does for ``--init-model-with-meta-device``, our models' MoE
    router weights stay meta tensors (the parallel linears name their device), which megatron later fills with
    ``torch.empty`` and never initialises."""
    from megatron.oellm.models import spec_builder

    card = get_card(name)
    builder = spec_builder(card.family)
    with gloo_world(), cpu_model_building():
        config = builder.transformer_config(card, params_dtype=torch.float32, use_cpu_initialization=False,
                                            perform_initialization=False)  # initialising a meta tensor is a no-op
        with mock.patch.object(torch.cuda, "current_device", return_value="cpu"), torch.device("meta"):
            model = builder.build_model(card, backend="torch", config=config)
    meta = {parameter_name for parameter_name, parameter in model.named_parameters() if parameter.is_meta}
    routers = {parameter_name for parameter_name, _ in model.named_parameters() if "router.weight" in parameter_name}
    assert routers and routers <= meta
    assert len(meta) < len(list(model.parameters())), "the parallel linears are real tensors"


def test_meta_device_initialisation_without_fsdp_is_refused(monkeypatch, capsys):
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*TINY_MOE_RUN, "--init-model-with-meta-device"])
    assert "--init-model-with-meta-device without --use-megatron-fsdp or --use-torch-fsdp2" in line
    assert "qwen3-30b-a3b-tiny's MoE router weights" in line
    with pytest.raises(Reached):
        entry.main(TINY_MOE_RUN)


def test_premise_gradient_and_parameter_dumps_need_a_save_directory(monkeypatch):
    """megatron's ``save_grads`` (what the training loop calls at each dump interval with ``args.save``) asserts a
    directory; ``validate_args`` checks these intervals only beside ``--save``."""
    from megatron.training import checkpointing

    for rank in ("expert_data_parallel", "expert_model_parallel", "pipeline_model_parallel", "tensor_model_parallel"):
        monkeypatch.setattr(checkpointing.mpu, f"get_{rank}_rank", lambda: 0)
    with pytest.raises(AssertionError):
        checkpointing.save_grads(None, {"w": torch.randn(3)}, 1, "wgrads")


@pytest.mark.parametrize("flag", ["--save-wgrads-interval", "--save-dgrads-interval", "--save-params-interval"])
def test_a_dump_interval_without_save_is_refused(monkeypatch, capsys, tmp_path, flag):
    entry = entry_up_to_pretrain(monkeypatch)
    interval = _interval()
    line = refused_line(entry, capsys, [*TINY_MOE_RUN, flag, str(interval)])
    assert f"{flag} {interval} without --save:" in line
    assert f"AssertionError at iteration {interval}" in line
    if flag != "--save-dgrads-interval":  # without TE that one is refused for its module classes (below)
        with pytest.raises(Reached):
            entry.main([*TINY_MOE_RUN, flag, str(interval), "--save", str(tmp_path), "--save-interval", "1000"])


def test_premise_dgrad_logging_classes_include_te_placeholders():
    """Without TE, megatron's activation-gradient logging tests modules against placeholders: ``TypeError``."""
    from megatron.training import dgrad_logging

    if all(isinstance(kind, type) for kind in dgrad_logging.LINEAR_TYPES):
        pytest.skip("Transformer Engine imports here")
    with pytest.raises(TypeError):
        isinstance(torch.nn.ReLU(), dgrad_logging.LINEAR_TYPES)


def test_dgrad_logging_without_te_is_refused(monkeypatch, capsys, tmp_path):
    from megatron.training import dgrad_logging

    if all(isinstance(kind, type) for kind in dgrad_logging.LINEAR_TYPES):
        pytest.skip("Transformer Engine imports here")
    entry = entry_up_to_pretrain(monkeypatch)
    interval = _interval()
    line = refused_line(entry, capsys, [*TINY_MOE_RUN, "--save-dgrads-interval", str(interval), "--save",
                                        str(tmp_path), "--save-interval", "1000"])
    assert f"--save-dgrads-interval {interval}: megatron-core 0.19.2 picks the modules to log by class" in line


def test_premise_energy_monitor_reads_zero_without_pynvml():
    """Without pynvml megatron's energy monitor measures nothing and reports 0 J."""
    from megatron.core import energy_monitor

    if energy_monitor.has_nvml:
        pytest.skip("pynvml imports here")
    monitor = energy_monitor.EnergyMonitor()
    monitor.setup()
    monitor.resume()
    assert monitor.lap() == 0.0 and monitor.get_total() == 0.0


@pytest.mark.parametrize(("flags", "package", "module"), [
    (["--log-straggler"], "nvidia-ml-py", "pynvml"),
    (["--log-energy"], "nvidia-ml-py", "pynvml"),
    (["--enable-ft-package"], "nvidia-resiliency-ext", "nvidia_resiliency_ext"),
    (["--inprocess-restart"], "nvidia-resiliency-ext", "nvidia_resiliency_ext"),
])
def test_flags_needing_a_package_are_refused_without_it(monkeypatch, capsys, flags, package, module):
    monkeypatch.setitem(sys.modules, module, None)
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*TINY_MOE_RUN, *flags])
    assert f"{flags[0]} needs the {package} package, which is not installed in this environment" in line


def test_log_straggler_passes_with_pynvml(monkeypatch):
    installed_stand_in(monkeypatch, "pynvml")
    entry = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        entry.main([*TINY_MOE_RUN, "--log-straggler"])


def _pretrain_recorder(monkeypatch) -> list[tuple[object, dict]]:
    """Let the entry of :func:`entry_up_to_throughput_hook` reach ``pretrain`` (its throughput hook stood in too) and
    record each call's function and keywords."""
    import megatron.training

    from megatron.oellm.training import throughput

    calls: list[tuple[object, dict]] = []

    def pretrain(*_args, **kwargs):
        calls.append((pretrain, kwargs))

    monkeypatch.setattr(throughput, "install_throughput_logging", lambda *_args: None)
    monkeypatch.setattr(megatron.training, "pretrain", pretrain)
    return calls


def test_inprocess_restart_runs_pretrain_through_megatrons_wrapper(monkeypatch):
    """With ``--inprocess-restart`` the entry calls what megatron's ``maybe_wrap_for_inprocess_restart`` returns,
    with its store, as megatron's own launcher does; without it, ``pretrain`` itself without a store."""
    from megatron.training import inprocess_restart

    for name in ("nvidia_resiliency_ext", "nvidia_resiliency_ext.inprocess",
                 "nvidia_resiliency_ext.fault_tolerance"):
        installed_stand_in(monkeypatch, name)
    entry = entry_up_to_throughput_hook(monkeypatch)
    calls = _pretrain_recorder(monkeypatch)
    store = types.SimpleNamespace(name=f"store-{random.random()}")
    wrapped_calls = []

    def wrap(pretrain):
        def wrapped(*args, **kwargs):
            wrapped_calls.append(kwargs)
            return pretrain(*args, **kwargs)
        return wrapped, store

    monkeypatch.setattr(inprocess_restart, "maybe_wrap_for_inprocess_restart", wrap)
    assert entry.main([*tiny_moe_run(), "--inprocess-restart"]) == 0
    assert [kwargs["store"] for kwargs in wrapped_calls] == [store]
    assert [kwargs["store"] for _, kwargs in calls] == [store]
    assert entry.main(tiny_moe_run()) == 0
    assert len(wrapped_calls) == 1 and calls[-1][1]["store"] is None
