"""The entry refuses a GDN/KDA model on Hopper with Triton >= 3.7.1 and a tilelang that is installed but does not import.

fla 0.6.0 imports a tilelang it finds wherever an nvcc is usable, whatever FLA_TILELANG or
FLA_DISABLE_BACKEND_DISPATCH say, and does not catch tilelang's import error. The entry checked only Triton in
[3.4, 3.7.1) and let such a run start. Its verdict is now the doctor's (``check_fla_hopper_triton``), naming the fix:
a tilelang that imports, or none (FLA_TILELANG=0, which it once named, does not help).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import random
import string
from types import SimpleNamespace

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.doctor.report import GpuInfo
from megatron.oellm.training import fla_kernels
from tests.unit_tests.training.entry_helpers import (
    entry_up_to_pretrain,
    one_error_line,
    tilelang_import_fails,
    tiny_moe_run,
)

HYBRIDS, MOE = ["qwen3.5-35b-a3b-tiny", "oellm-ckda-hybrid-tiny"], "qwen3-30b-a3b-tiny"
NVCC = "/usr/local/cuda/bin/nvcc"
H200 = GpuInfo(0, "NVIDIA H200", (9, 0), 139.8)


def _fixed_triton() -> str:
    """A Triton release past fla issue 640's range (>= 3.7.1), drawn afresh."""
    return random.choice([f"3.7.{random.randint(1, 9)}", f"3.{random.randint(8, 20)}.{random.randint(0, 9)}"])


def _import_error() -> str:
    """A tilelang import error with a fresh token, as the entry words it."""
    return f"OSError: libz3.so.4.15: cannot open shared object file ({''.join(random.choices(string.ascii_lowercase, k=8))})"


def test_the_problem_names_the_card_triton_error_and_both_fixes() -> None:
    card, triton, error = get_card(random.choice(HYBRIDS)), _fixed_triton(), _import_error()
    report = fla_kernels.doctor_report_here(H200, triton, (True, error, NVCC))
    problem = fla_kernels.fla_tilelang_crash_problem(card, report, {})
    assert problem.startswith(f"--oellm-model {card.name} has {card.linear_mixer.upper()} layers: ")
    assert f"Triton {triton}" in problem and error in problem and "Fix: " in problem
    fix = problem.split("Fix: ", 1)[1]
    assert "tilelang==0.1.15" in fix and "pip uninstall tilelang" in fix and "set FLA_TILELANG=0" not in fix


@pytest.mark.parametrize("switch", ["FLA_TILELANG", "FLA_DISABLE_BACKEND_DISPATCH"])
def test_the_switches_do_not_clear_the_problem(switch: str) -> None:
    card, error = get_card(random.choice(HYBRIDS)), _import_error()
    report = fla_kernels.doctor_report_here(H200, _fixed_triton(), (True, error, NVCC))
    env = {switch: "0" if switch == "FLA_TILELANG" else "1"}
    assert error in fla_kernels.fla_tilelang_crash_problem(card, report, env)


@pytest.mark.parametrize("case", ["no nvcc", "tilelang imports", "no tilelang", "MoE card"])
def test_no_problem_where_fla_would_not_crash(case: str) -> None:
    found, error = case != "no tilelang", None if case in ("tilelang imports", "no tilelang") else _import_error()
    report = fla_kernels.doctor_report_here(H200, _fixed_triton(), (found, error, None if case == "no nvcc" else NVCC))
    env = dict([case.split("=")]) if "=" in case else {}
    card = get_card(MOE if case == "MoE card" else random.choice(HYBRIDS))
    assert fla_kernels.fla_tilelang_crash_problem(card, report, env) == ""


def _hopper_with_broken_tilelang(monkeypatch: pytest.MonkeyPatch, triton: str, error: str) -> None:
    """This process seen as on a Hopper GPU with Triton ``triton``, an nvcc, and a tilelang that is found but raises
    ``error`` on import. fla's GDN kernels are imported first, as a run has them: fla looks for tilelang as it imports,
    which the stand-in would fail."""
    import torch

    pytest.importorskip("fla.ops.gated_delta_rule")

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(fla_kernels, "distribution_version", lambda _probe: triton)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_args: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda *_args: SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=80 * 2**30))
    monkeypatch.setattr(fla_kernels.importlib.util, "find_spec", lambda name, *rest: (
        importlib.machinery.ModuleSpec("tilelang", None) if name == "tilelang" else find_spec(name, *rest)))
    monkeypatch.setattr(fla_kernels, "find_nvcc", lambda _env: NVCC)

    tilelang_import_fails(monkeypatch, OSError(error))


def test_the_check_refuses_it_with_fla_tilelang_0_too(monkeypatch: pytest.MonkeyPatch) -> None:
    message = f"libz3.so.4.15: cannot open shared object file ({random.randint(0, 999)})"
    triton = _fixed_triton()
    _hopper_with_broken_tilelang(monkeypatch, triton, message)
    card = get_card(random.choice(HYBRIDS))
    for env in ({}, {"FLA_TILELANG": "0"}):
        with pytest.raises(ValueError, match="pip uninstall tilelang") as refusal:
            fla_kernels.check_fla_backward(card, env=env)
        assert message in str(refusal.value) and f"Triton {triton}" in str(refusal.value)
    fla_kernels.check_fla_backward(get_card(MOE), env={})


def test_the_entry_refuses_the_run_in_one_line(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    main = entry_up_to_pretrain(monkeypatch)
    message = f"No module named 'ml_dtypes' ({random.randint(0, 999)})"
    _hopper_with_broken_tilelang(monkeypatch, _fixed_triton(), message)
    monkeypatch.delenv("FLA_TILELANG", raising=False)
    monkeypatch.delenv("FLA_DISABLE_BACKEND_DISPATCH", raising=False)
    assert main.main([*tiny_moe_run(HYBRIDS[0]), "--oellm-backend", "torch"]) == 2
    line = one_error_line(capsys)
    assert message in line and "pip uninstall tilelang" in line and "does not import" in line
