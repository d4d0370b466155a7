"""The entry's check of fla's GDN/KDA backward on a Hopper GPU with a Triton of fla issue 640's range
(:mod:`megatron.oellm.training.fla_kernels`): fla 0.6.0 raises in the first backward pass there unless it can run its
TileLang backward, after the model and optimizer are on every GPU; the entry refuses the run first, in one line."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import random

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.doctor.rules import FLA_TILELANG_FIX
from megatron.oellm.training import fla_kernels
from tests.unit_tests.training.entry_helpers import (
    entry_up_to_pretrain,
    one_error_line,
    tilelang_import_fails,
    tiny_moe_run,
)

HYBRID, MOE = "qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"


def affected_triton() -> str:
    """A Triton release in [3.4, 3.7.1), drawn afresh."""
    return random.choice([f"3.{random.randint(4, 6)}.{random.randint(0, 3)}", "3.7.0"])


def test_the_problem_names_the_card_gpu_triton_blocker_and_fix() -> None:
    triton, minor = affected_triton(), random.randint(0, 1)
    problem = fla_kernels.fla_backward_problem(get_card(HYBRID), (9, minor), triton, "tilelang is not installed")
    assert f"--oellm-model {HYBRID} has GDN layers" in problem
    assert f"compute capability 9.{minor}" in problem and f"Triton {triton}" in problem
    assert "tilelang is not installed" in problem and problem.endswith(FLA_TILELANG_FIX)


@pytest.mark.parametrize(("card", "capability", "triton", "blocker"), [
    (MOE, (9, 0), "3.6.0", "tilelang is not installed"),  # no fla kernel in the model
    (HYBRID, (8, 0), "3.6.0", "tilelang is not installed"),  # not Hopper
    (HYBRID, (10, 0), "3.6.0", "tilelang is not installed"),
    (HYBRID, (9, 0), "3.7.1", "tilelang is not installed"),  # the fixed Triton
    (HYBRID, (9, 0), "3.3.1", "tilelang is not installed"),
    (HYBRID, (9, 0), "3.6.0", None),  # fla takes its TileLang backward
    (HYBRID, None, "3.6.0", "tilelang is not installed"),  # no GPU
])
def test_no_problem_outside_the_rule(card: str, capability, triton: str, blocker) -> None:
    assert fla_kernels.fla_backward_problem(get_card(card), capability, triton, blocker) == ""


def _hopper_with(monkeypatch: pytest.MonkeyPatch, triton: str, tilelang: bool) -> None:
    """This process seen as on a Hopper GPU with Triton ``triton``, tilelang found (a spec; importing it is the
    test's to answer) or not, and no nvcc."""
    import torch

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(fla_kernels, "distribution_version", lambda _probe: triton)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_args: (9, 0))
    spec = importlib.machinery.ModuleSpec("tilelang", None) if tilelang else None
    monkeypatch.setattr(fla_kernels.importlib.util, "find_spec",
                        lambda name, *rest: spec if name == "tilelang" else find_spec(name, *rest))
    monkeypatch.setattr(fla_kernels, "find_nvcc", lambda _env: None)


def test_the_entry_refuses_a_hybrid_run_without_tilelang(monkeypatch, capsys) -> None:
    main = entry_up_to_pretrain(monkeypatch)
    triton = affected_triton()
    _hopper_with(monkeypatch, triton, tilelang=False)
    assert main.main([*tiny_moe_run(HYBRID), "--oellm-backend", "torch"]) == 2
    line = one_error_line(capsys)
    assert f"Triton {triton}" in line and "tilelang is not installed" in line and "fla issue 640" in line


def test_the_entry_names_a_missing_nvcc(monkeypatch) -> None:
    """tilelang found (a stand-in that imports) but no nvcc to compile its kernels: fla cannot take that path."""
    _hopper_with(monkeypatch, affected_triton(), tilelang=True)
    import_module = importlib.import_module  # the stand-in tilelang imports; fla's own modules import as they are
    monkeypatch.setattr(fla_kernels.importlib, "import_module",
                        lambda name, *rest: None if name == "tilelang" else import_module(name, *rest))
    with pytest.raises(ValueError, match="no nvcc was found"):
        fla_kernels.check_fla_backward(get_card(HYBRID), env={})
    monkeypatch.setattr(fla_kernels, "find_nvcc", lambda _env: "/usr/local/cuda/bin/nvcc")
    fla_kernels.check_fla_backward(get_card(HYBRID), env={})
    with pytest.raises(ValueError, match="FLA_TILELANG=0"):
        fla_kernels.check_fla_backward(get_card(HYBRID), env={"FLA_TILELANG": "0"})


def test_a_tilelang_that_does_not_import_is_named(monkeypatch) -> None:
    _hopper_with(monkeypatch, affected_triton(), tilelang=True)
    message = f"libz3.so.4.15: cannot open shared object file ({random.randint(0, 999)})"
    tilelang_import_fails(monkeypatch, OSError(message))
    with pytest.raises(ValueError, match="does not import") as refusal:
        fla_kernels.check_fla_backward(get_card(HYBRID), env={})
    assert message in str(refusal.value)


def test_the_moe_model_and_a_triton_before_3_4_read_nothing(monkeypatch) -> None:
    """Runs the rule cannot concern pay nothing: neither the GPU nor tilelang is asked. (A fixed Triton >= 3.7.1 is
    no longer among them: fla still takes its TileLang backward there, test_fla_broken_tilelang_with_fixed_triton.)"""
    import torch

    def asked(*_args, **_kwargs):
        raise AssertionError("asked")

    monkeypatch.setattr(torch.cuda, "get_device_capability", asked)
    monkeypatch.setattr(fla_kernels, "tilelang_blocker_here", asked)
    monkeypatch.setattr(fla_kernels, "distribution_version", lambda _probe: "3.6.0")
    fla_kernels.check_fla_backward(get_card(MOE), env={})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fla_kernels, "distribution_version", lambda _probe: f"3.{random.randint(0, 3)}.1")
    fla_kernels.check_fla_backward(get_card(HYBRID), env={})
