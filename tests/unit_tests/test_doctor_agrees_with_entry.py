"""``oellm doctor``'s rules checked against what the training entry and megatron-core 0.19.2 do under the same
environment: a finding says ok exactly where the run starts, and names the runs that are refused and the ways out as
the entry's own checks do (apex's gradient-accumulation extension, the flex dispatcher's HybridEP backends, fla's
kernels failing to import as tilelang cannot load a shared library)."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import os
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.doctor.probes import (
    FLA_GDN_PROBE,
    collect_environment,
    deep_ep_declares_hybrid_ep,
    find_nvcc,
    fresh_import_errors,
)
from megatron.oellm.doctor.report import EnvironmentReport, Finding
from megatron.oellm.doctor.rules import (
    BROKEN_TILELANG_FIX,
    check_fla_gdn_imports,
    check_hybrid_ep,
    check_transformer_engine,
)
from megatron.oellm.training import dispatcher, fla_kernels
from megatron.oellm.training.args import parse_oellm_argv
from tests.unit_tests.doctor_reports import make_report
from tests.unit_tests.training.entry_helpers import tilelang_library_missing, tilelang_raising

TE = {"transformer-engine": "2.20.2"}

# --- apex's fused_weight_gradient_mlp_cuda: megatron-core imports it, a file on sys.path is not enough ------------

GRAD_ACCUM_MODULE = "fused_weight_gradient_mlp_cuda"
MEGATRON_DECIDES = ("import megatron.oellm\nfrom megatron.core.tensor_parallel import layers\n"
                    "print(layers._grad_accum_fusion_available)\n")


def _megatron_grad_accum_fusion_available() -> bool:
    """megatron-core's own decision (``layers._grad_accum_fusion_available``) in a fresh interpreter with this
    process's PYTHONPATH."""
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", MEGATRON_DECIDES], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return {"True": True, "False": False}[done.stdout.strip().splitlines()[-1]]


@pytest.mark.parametrize(("source", "available"), [
    # an extension built against another torch: the loader raises ImportError, which megatron-core catches
    ("raise ImportError('fused_weight_gradient_mlp_cuda.so: undefined symbol: _ZN3c10oellm_doctor_test')\n", False),
    ("", True),
])
def test_the_apex_extension_counts_as_megatron_core_imports_it(tmp_path, monkeypatch, source, available):
    """The te-backend warning about apex's extension follows megatron-core, which imports it (an ImportError makes
    gradient accumulation fusion unavailable, and the training entry refuses te-backend runs without
    --no-gradient-accumulation-fusion): an extension that is on sys.path but does not import (built against another
    torch) got ok."""
    (tmp_path / f"{GRAD_ACCUM_MODULE}.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert _megatron_grad_accum_fusion_available() is available
    report = collect_environment()
    te_imports = dataclasses.replace(report, versions={**report.versions, **TE}, transformer_engine_import_error=None)
    (finding,) = check_transformer_engine(te_imports, {})
    assert finding.severity == ("ok" if available else "warning"), finding.message
    if not available:
        assert "--no-gradient-accumulation-fusion" in finding.fix


# --- HybridEP: the doctor names the flex backends the entry refuses, and the ones it lets through ----------------

FLEX = ["--moe-token-dispatcher-type", "flex", "--expert-model-parallel-size", "2", "--moe-flex-dispatcher-backend"]


def _deep_ep_state(state: str, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``deep_ep`` absent (``missing``), DeepEP's main branch (``main``: no HybridEPBuffer), or an installed
    package whose ``__init__`` cannot be read as text (``compiled``: an extension module)."""
    real_find_spec = importlib.util.find_spec
    if state == "missing":
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *rest: None if name == "deep_ep" else real_find_spec(name, *rest))
        return
    if state == "main":
        (root / "deep_ep").mkdir()
        (root / "deep_ep" / "__init__.py").write_text("from .buffer import Buffer\n")
    else:
        (root / f"deep_ep{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"not loaded by find_spec")
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()


@pytest.mark.parametrize("state", ["missing", "main", "compiled"])
def test_the_hybrid_ep_warning_says_what_the_entry_does_with_each_flex_backend(tmp_path, monkeypatch, state):
    """The entry (``dispatcher.flex_dispatcher_problem``) refuses hybridep at start without deep_ep or with DeepEP's
    main branch, deepep only without deep_ep, and lets both through where deep_ep's ``__init__`` cannot be read
    (megatron-core then fails as it builds the MoE layers, after start-up, if HybridEP is missing). The warning
    said "hybridep ... refused at start" in all three cases, named the recipes' deepep rows as refused where they
    run, and never offered the deepep backend as a way out."""
    _deep_ep_state(state, tmp_path, monkeypatch)
    refused = {backend: dispatcher.flex_dispatcher_problem(parse_oellm_argv([*FLEX, backend])) is not None
               for backend in ("hybridep", "deepep")}
    assert refused == {"missing": {"hybridep": True, "deepep": True}, "main": {"hybridep": True, "deepep": False},
                       "compiled": {"hybridep": False, "deepep": False}}[state]
    report = EnvironmentReport(python_version="3.12.3", typing_override_provided=False,
                               versions={"deep-ep": None if state == "missing" else "1.2.1"},
                               hybrid_ep=deep_ep_declares_hybrid_ep())
    (finding,) = check_hybrid_ep(report, {})
    assert finding.severity == "warning"
    claimed_refused = finding.message.partition(" are refused at start")[0] if "refused at start" in (
        finding.message) else ""
    assert ("hybridep" in claimed_refused) is refused["hybridep"], finding.message
    assert ("deepep" in claimed_refused) is refused["deepep"], finding.message
    if not refused["hybridep"]:
        assert "when megatron-core builds the MoE layers" in finding.message, finding.message
    assert ('moe-flex-dispatcher-backend = "deepep"' in finding.fix) is not refused["deepep"], finding.fix
    assert 'moe-token-dispatcher-type = "alltoall"' in finding.fix


# --- fla's kernels, where tilelang cannot load a shared library: one fix from both -----------------------------


def _uncaught_by_both(nvcc: str, error: str) -> tuple[Finding, str]:
    """The doctor's fla-gdn-imports finding (from fresh interpreters) and the entry's refusal where tilelang's stack,
    set up by the test, fails fla's import with an error megatron-core does not catch, starting ``error``: both name
    it and say megatron-core ends in its traceback."""
    errors = fresh_import_errors({"tilelang": "import tilelang", "fla-gdn": FLA_GDN_PROBE})
    report = make_report(versions={"tilelang": "0.1.15"}, tilelang_importable=True, nvcc_path=nvcc,
                         tilelang_import_error=errors["tilelang"], fla_gdn_import_error=errors["fla-gdn"])
    (finding,) = check_fla_gdn_imports(report, {})
    assert finding.severity == "error" and error in finding.message, finding
    problem = fla_kernels.fla_import_problem(get_card("qwen3.5-35b-a3b-tiny"))
    assert error in problem
    assert "catches only an ImportError there" in finding.message and "catches only an ImportError there" in problem
    return finding, problem


def test_a_tilelang_library_that_does_not_load_gets_the_same_fix_from_both(tmp_path, monkeypatch):
    """A tilelang whose z3 cannot load its libz3 fails fla's import with an OSError: the doctor's fla-gdn-imports
    finding named it with the broken-tilelang fix, and the entry's check did not catch it (a traceback on every rank).
    Both now name the library, and the entry's fix is the doctor's, word for word."""
    pytest.importorskip("fla")
    nvcc = find_nvcc(os.environ)
    if nvcc is None:
        pytest.skip("no nvcc here: fla would not import tilelang")
    library = f"libz3.so.4.{random.randint(16, 99)}"
    tilelang_library_missing(monkeypatch, tmp_path, library)
    finding, problem = _uncaught_by_both(nvcc, f"OSError: {library}: cannot open")
    assert problem.split("Fix: ", 1)[1] == finding.fix
    assert f"put back {library}, which z3-solver==4.15.4.0 ships" in finding.fix


def test_a_tvm_runtime_error_gets_the_same_outcome_and_fix_from_both(tmp_path, monkeypatch):
    """A TVM whose FFI registry fails raises RuntimeError as fla imports tilelang: the doctor's finding said
    "FLA is not installed" (it named a traceback for an OSError only), and the entry's check did not catch it (a
    traceback on every rank). Both now say megatron-core ends in its traceback, with the same fix."""
    pytest.importorskip("fla")
    nvcc = find_nvcc(os.environ)
    if nvcc is None:
        pytest.skip("no nvcc here: fla would not import tilelang")
    message = f"Global Function {''.join(random.choices(string.ascii_lowercase, k=12))} is already registered"
    tilelang_raising(monkeypatch, tmp_path, f"RuntimeError({message!r})")
    finding, problem = _uncaught_by_both(nvcc, f"RuntimeError: {message}")
    assert problem.split("Fix: ", 1)[1] == finding.fix == BROKEN_TILELANG_FIX
