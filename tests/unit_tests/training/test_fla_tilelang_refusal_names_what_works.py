"""The entry's refusal of a broken tilelang on Hopper with a Triton past fla issue 640's range names what works.

It told the user to ``pip install 'triton>=3.7.1'`` although Triton already was, and carried the doctor's note that
the Qwen3 MoE models use no fla kernel, although the refused run's model has fla layers; later it led with
``FLA_TILELANG=0``, which does not help (fla imports a tilelang it finds whatever that switch says). It now says: make
tilelang import, or take it out. The doctor's text for Triton in [3.4, 3.7.1) is kept.
"""

from __future__ import annotations

import random
import string

from megatron.oellm.cards import get_card
from megatron.oellm.doctor.report import GpuInfo
from megatron.oellm.doctor.rules import check_fla_hopper_triton
from megatron.oellm.training import fla_kernels

HYBRIDS = ["qwen3.5-35b-a3b-tiny", "oellm-ckda-hybrid-tiny"]
NVCC = "/usr/local/cuda/bin/nvcc"
H100 = GpuInfo(0, "NVIDIA H100 80GB HBM3", (9, 0), 79.6)
MOE_NOTE = "Qwen3 MoE models use no fla kernel"


def _import_error() -> str:
    """A tilelang import error with a fresh token."""
    return f"OSError: libz3.so.4.15: cannot open ({''.join(random.choices(string.ascii_lowercase, k=10))})"


def _problem(triton: str, error: str) -> str:
    card = get_card(random.choice(HYBRIDS))
    return fla_kernels.fla_tilelang_crash_problem(card, fla_kernels.doctor_report_here(H100, triton, (True, error, NVCC)),
                                                  {})


def test_with_a_fixed_triton_the_fix_is_a_tilelang_that_imports_or_none_and_no_triton() -> None:
    triton, error = f"3.{random.randint(8, 20)}.{random.randint(0, 9)}", _import_error()
    problem = _problem(triton, error)
    message, fix = problem.split(" Fix: ", 1)
    assert error in message and f"Triton {triton}" in message
    assert fix.startswith("make `import tilelang` work")
    assert fix.index("tilelang==0.1.15") < fix.index("pip uninstall tilelang") and "set FLA_TILELANG=0" not in fix
    assert "triton>=" not in problem and "pip install 'triton" not in problem
    assert MOE_NOTE not in problem
    assert len(problem) < 1200


def test_in_issue_640s_range_the_entry_drops_only_the_moe_note() -> None:
    triton, error = f"3.{random.randint(4, 6)}.{random.randint(0, 9)}", _import_error()
    problem = _problem(triton, error)
    assert error in problem and "pip install 'triton>=3.7.1'" in problem and MOE_NOTE not in problem
    report = fla_kernels.doctor_report_here(H100, triton, (True, error, NVCC))
    (finding,) = check_fla_hopper_triton(report, {})
    assert finding.severity == "error" and MOE_NOTE in finding.message
    assert finding.fix.startswith("pip install tilelang==0.1.15") and "pip install 'triton>=3.7.1'" in finding.fix
