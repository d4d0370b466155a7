"""A GDN model without fla's kernels is refused before Megatron initialises (:mod:`megatron.oellm.training.fla_kernels`):
megatron-core 0.19.2 swallows the ``ImportError`` of fla's gated delta rule and raises "FLA is not installed" from the
layer's constructor, on every rank after process groups and GPU memory are set up."""

from __future__ import annotations

import builtins
import os
import random
import string
import sys

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.doctor.probes import find_nvcc
from megatron.oellm.doctor.rules import BROKEN_TILELANG_FIX
from megatron.oellm.training import fla_kernels
from tests.unit_tests.training.entry_helpers import (
    entry_up_to_pretrain,
    fla_raising_attribute_error,
    one_error_line,
    tilelang_library_missing,
    tilelang_raising,
    tiny_moe_run,
)

HYBRID, MOE = "qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"


def _without(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """Make importing fla's gated delta rule fail as if ``module`` were not installed."""
    for name in [name for name in sys.modules if name.split(".")[0] in ("fla", module)]:
        monkeypatch.delitem(sys.modules, name)

    class Hide:
        def find_spec(self, name, *_args):
            if name == module or name.startswith(f"{module}."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    monkeypatch.setattr(sys, "meta_path", [Hide(), *sys.meta_path])


@pytest.mark.parametrize("module", ["fla", "einops"])
def test_the_entry_refuses_a_gdn_run_without_fla(monkeypatch, capsys, module: str) -> None:
    main = entry_up_to_pretrain(monkeypatch)
    _without(monkeypatch, module)
    assert main.main([*tiny_moe_run(HYBRID), "--oellm-backend", "torch"]) == 2
    line = one_error_line(capsys)
    assert f"the module {module!r} is missing" in line and "FLA is not installed" in line
    if module == "fla":
        assert "gdn extra" in line and "site bundle" in line
    else:  # a requirement of fla that the site bundle does not carry (the doctor's fix, word for word)
        assert "pip install einops" in line and "a site bundle does not carry it" in line


def test_another_import_error_is_named_in_one_line(monkeypatch) -> None:
    """fla present but failing as it imports (a broken build, numpy's style of message over several lines): the last
    line of its own message is the reason given, on the refusal's one line."""
    message = "".join(random.choices(string.ascii_lowercase, k=12))
    for name in [name for name in sys.modules if name.split(".")[0] == "fla"]:
        monkeypatch.delitem(sys.modules, name)

    class Broken:
        def find_spec(self, name, *_args):
            if name == "fla" or name.startswith("fla."):
                raise ImportError(f"\nIMPORTANT: PLEASE READ THIS\n\n{message}")
            return None

    monkeypatch.setattr(sys, "meta_path", [Broken(), *sys.meta_path])
    problem = fla_kernels.fla_import_problem(get_card(HYBRID))
    assert f"fla.modules.convolution, which does not import here (ImportError: {message})" in problem
    assert "\n" not in problem


def _fla_raising(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """Make importing fla (installed) raise ``error``, as a library it loads or a cache it writes might."""
    for name in [name for name in sys.modules if name.split(".")[0] == "fla"]:
        monkeypatch.delitem(sys.modules, name)

    class Raising:
        def find_spec(self, name, *_args):
            if name == "fla" or name.startswith("fla."):
                raise error
            return None

    monkeypatch.setattr(sys, "meta_path", [Raising(), *sys.meta_path])


def test_a_system_library_fla_cannot_load_is_named_not_fla(monkeypatch) -> None:
    """An OSError of a library outside tilelang's stack (libcuda off a GPU node): fla is installed, so "install fla"
    (the fix it got) would do nothing; the library is named to be made loadable."""
    library = f"lib{''.join(random.choices(string.ascii_lowercase, k=8))}.so.{random.randint(1, 9)}"
    _fla_raising(monkeypatch, OSError(f"{library}: cannot open shared object file: No such file or directory"))
    problem = fla_kernels.fla_import_problem(get_card(HYBRID))
    fix = problem.split("Fix: ", 1)[1]
    assert fix.startswith(f"make {library} loadable") and "install fla" not in fix, problem
    assert "would end every rank in this error's traceback" in problem


def test_another_uncaught_error_gets_its_own_cause_as_the_fix(monkeypatch) -> None:
    """A full disk under Triton's cache as fla imports: not a missing fla; the fix says to remove the error's cause
    and how to see its whole traceback."""
    folder = "".join(random.choices(string.ascii_lowercase, k=10))
    _fla_raising(monkeypatch, OSError(28, "No space left on device", f"/tmp/{folder}/.triton/cache"))
    problem = fla_kernels.fla_import_problem(get_card(HYBRID))
    fix = problem.split("Fix: ", 1)[1]
    assert f"No space left on device: '/tmp/{folder}/.triton/cache'" in problem
    assert fix.startswith("remove the cause of this error") and "install fla" not in fix, problem
    assert "from fla.ops.gated_delta_rule import chunk_gated_delta_rule" in fix


def test_a_model_without_linear_mixers_does_not_import_fla(monkeypatch) -> None:
    _without(monkeypatch, "fla")
    assert fla_kernels.fla_import_problem(get_card(MOE)) == ""
    assert "fla" not in sys.modules


def test_a_tilelang_library_that_does_not_load_is_refused_in_one_line(tmp_path, monkeypatch, capsys) -> None:
    """fla imports tilelang wherever an nvcc is found; a tilelang whose z3 cannot load its libz3 raises OSError there,
    which the check did not catch (nor does megatron-core): the run ended in a traceback. It is refused in one line
    naming the package and the library, with the fix: that library put back by its distribution, or tilelang taken
    out. It stays a refusal: fla's own guard of its Hopper backward needs a tilelang that imports."""
    pytest.importorskip("fla")
    if find_nvcc(os.environ) is None:
        pytest.skip("no nvcc here: fla would not import tilelang")
    main = entry_up_to_pretrain(monkeypatch)
    library = f"libz3.so.4.{random.randint(16, 99)}"
    tilelang_library_missing(monkeypatch, tmp_path, library)
    assert main.main([*tiny_moe_run(HYBRID), "--oellm-backend", "torch"]) == 2
    line = one_error_line(capsys)
    assert f"as fla imported tilelang, importing z3 raised OSError: {library}: cannot open" in line, line
    fix = line.split("Fix: ", 1)[1]
    assert f"put back {library}, which z3-solver==4.15.4.0 ships" in fix and "pip uninstall tilelang" in fix
    assert "FLA is not installed" not in line and "pip install fla-core" not in fix


def _fla_imports_tilelang() -> None:
    """Skip where fla cannot import tilelang here: fla absent, or no nvcc found (fla imports tilelang only then)."""
    pytest.importorskip("fla")
    if find_nvcc(os.environ) is None:
        pytest.skip("no nvcc here: fla would not import tilelang")


@pytest.mark.parametrize("error_type", ["RuntimeError", "ValueError"])
def test_any_error_of_the_tilelang_stack_is_refused_in_one_line(tmp_path, monkeypatch, capsys, error_type) -> None:
    """A TVM whose FFI registry or version parse fails raises RuntimeError or ValueError as fla imports tilelang; the
    check caught only ImportError, AttributeError and OSError, so the run ended in a traceback (megatron-core
    catches none of them either). It is refused in one line naming the package that raised, the error, and the
    broken-tilelang fix."""
    _fla_imports_tilelang()
    main = entry_up_to_pretrain(monkeypatch)
    message = f"Global Function {''.join(random.choices(string.ascii_lowercase, k=12))} is already registered"
    tilelang_raising(monkeypatch, tmp_path, f"{error_type}({message!r})")
    assert main.main([*tiny_moe_run(HYBRID), "--oellm-backend", "torch"]) == 2
    line = one_error_line(capsys)
    assert f"as fla imported tilelang, importing tvm_ffi raised {error_type}: {message}" in line, line
    assert "catches only an ImportError there" in line and "FLA is not installed" not in line
    assert line.split("Fix: ", 1)[1] == BROKEN_TILELANG_FIX


@pytest.mark.parametrize("interrupt", ["KeyboardInterrupt", "SystemExit"])
def test_an_interrupt_as_fla_imports_is_not_taken_for_a_broken_install(tmp_path, monkeypatch, interrupt) -> None:
    """A KeyboardInterrupt (Ctrl-C) or SystemExit as fla imports tilelang stops the entry as it would anywhere: the
    check names Exceptions only, never these."""
    _fla_imports_tilelang()
    main = entry_up_to_pretrain(monkeypatch)
    tilelang_raising(monkeypatch, tmp_path, f"{interrupt}()")
    with pytest.raises(getattr(builtins, interrupt)):
        main.main([*tiny_moe_run(HYBRID), "--oellm-backend", "torch"])


def test_an_attribute_error_inside_flas_import_is_no_missing_fla(tmp_path, monkeypatch, capsys) -> None:
    """An AttributeError raised inside fla's import was told as megatron-core's "FLA is not installed", with "install
    fla" for fix; megatron-core catches only an ImportError there and would end every rank in its traceback. The
    refusal says fla is installed but its import failed, naming the error, with the fix of an uncaught error."""
    main = entry_up_to_pretrain(monkeypatch)
    error = fla_raising_attribute_error(monkeypatch, tmp_path)
    assert main.main([*tiny_moe_run(HYBRID), "--oellm-backend", "torch"]) == 2
    line = one_error_line(capsys)
    assert f"fla is installed, but its import failed here ({error})" in line, line
    assert "catches only an ImportError there" in line and "FLA is not installed" not in line
    fix = line.split("Fix: ", 1)[1]
    assert fix.startswith("remove the cause of this error") and "install fla" not in fix, fix


def test_a_name_fla_lacks_is_the_import_error_megatron_core_catches(monkeypatch) -> None:
    """An fla module without the entry point megatron-core imports from it: its ``from ... import`` raises the
    ImportError it catches ("FLA is not installed"), so the refusal says so, and not that fla's import failed."""
    pytest.importorskip("fla")
    import fla.modules.convolution

    monkeypatch.delattr(fla.modules.convolution, "causal_conv1d")
    problem = fla_kernels.fla_import_problem(get_card(HYBRID))
    assert ("which does not import here (ImportError: cannot import name 'causal_conv1d' from "
            "'fla.modules.convolution')") in problem, problem
    assert "would stop with 'FLA is not installed'" in problem and "its import failed" not in problem
