"""``oellm doctor``'s fixes where fla's kernels fail to import because of tilelang or a build for another Python.

fla 0.6.0 imports a tilelang it finds wherever an nvcc is usable (``fla.ops.utils.sinkhorn``), reading neither
FLA_TILELANG nor FLA_DISABLE_BACKEND_DISPATCH: with a tilelang that does not import, the doctor advised
FLA_TILELANG=0 and then said ok. The GDN import error's fix was ``pip install <module>``, which for tilelang's modules
(tvm_ffi, z3) installs unrelated PyPI projects, and it said the site bundle does not carry them; a loader error of a
library built for another Python got "install fla".
"""

from __future__ import annotations

import importlib.util
import os
import random
import string
from pathlib import Path

import pytest

from megatron.oellm.doctor import probes
from megatron.oellm.doctor.rules import (
    TILELANG_STACK_INSTALL,
    check_fla_gdn_imports,
    check_fla_hopper_triton,
    fla_import_error_fix,
    fla_requirement_fix,
)
from tests.unit_tests.doctor_reports import make_report
from tests.unit_tests.training.entry_helpers import fla_raising_attribute_error

TILELANG_MODULES = {"tvm_ffi": "apache-tvm-ffi==0.1.12", "z3": "z3-solver==4.15.4.0"}
"""tilelang's modules whose distribution has another name, with the pin TILELANG_STACK_INSTALL gives."""


def _token() -> str:
    """A fresh word, so that a message is known to come from this test's input."""
    return "".join(random.choices(string.ascii_lowercase, k=10))


def _broken_tilelang_report(triton: str, error: str, fla_gdn_error: str | None = None):
    """A Hopper report with Triton ``triton``, an nvcc, and a tilelang that fails to import with ``error``."""
    return make_report(versions={"triton": triton, "tilelang": "0.1.15"}, tilelang_importable=True,
                       tilelang_import_error=error, nvcc_path="/usr/local/cuda/bin/nvcc",
                       fla_gdn_import_error=fla_gdn_error)


@pytest.mark.skipif(importlib.util.find_spec("fla") is None, reason="fla is not installed here")
@pytest.mark.parametrize("switch", ["FLA_TILELANG=0", "FLA_DISABLE_BACKEND_DISPATCH=1"])
def test_fla_imports_a_broken_tilelang_whatever_the_switch(tmp_path: Path, monkeypatch, switch: str) -> None:
    """The premise, on the installed fla: a tilelang that fails importing tvm_ffi, found on PYTHONPATH with an nvcc,
    fails the import of fla's GDN kernels with either switch set; the doctor then says error, not ok, and its fix
    names the stack and taking tilelang out, not the switch."""
    if probes.find_nvcc(os.environ) is None:
        pytest.skip("no nvcc here: fla would not look for tilelang")
    (tmp_path / "tilelang").mkdir()
    (tmp_path / "tilelang" / "__init__.py").write_text("import tvm_ffi\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    variable, value = switch.split("=")
    monkeypatch.setenv(variable, value)
    error = probes.fresh_import_facts(None, fla_installed=True).fla_gdn_error
    assert error is not None and "tvm_ffi" in error, error
    triton = random.choice([f"3.{random.randint(0, 3)}.{random.randint(0, 9)}", f"3.{random.randint(8, 20)}.0"])
    report = _broken_tilelang_report(triton, "ModuleNotFoundError: No module named 'tvm_ffi'", error)
    for finding in (*check_fla_gdn_imports(report, {variable: value}), *check_fla_hopper_triton(report, {variable: value})):
        assert finding.severity == "error", finding
        assert TILELANG_STACK_INSTALL in finding.fix and "pip uninstall tilelang" in finding.fix, finding.fix
        assert "set FLA_TILELANG=0" not in finding.fix and "pip install tvm_ffi" not in finding.fix


@pytest.mark.parametrize("module", sorted(TILELANG_MODULES))
def test_a_missing_tilelang_module_is_named_by_its_distribution(module: str) -> None:
    fix = fla_requirement_fix(module)
    assert TILELANG_MODULES[module] in fix and f"pip install {module} " not in f"{fix} "
    assert "the site bundle carries it" in fix and "does not carry" not in fix


def test_an_affected_triton_with_a_broken_tilelang_takes_tilelang_out_with_the_fixed_triton() -> None:
    triton = f"3.{random.randint(4, 6)}.{random.randint(0, 9)}"
    error = f"OSError: libz3.so.4.15: cannot open shared object file ({_token()})"
    (finding,) = check_fla_hopper_triton(_broken_tilelang_report(triton, error), {"FLA_TILELANG": "0"})
    assert finding.severity == "error" and error in finding.message
    assert "pip install 'triton>=3.7.1' and take tilelang out" in finding.fix


@pytest.mark.parametrize("loader_error", [
    "/usr/bin/python3: symbol lookup error: {site}/tvm_ffi/core.abi3.so: undefined symbol: PyType_FromMetaclass",
    "ImportError: {site}/tvm_ffi/core.abi3.so: undefined symbol: PyErr_GetRaisedException",
    "ImportError: {site}/tilelang/lib/libtvm_compiler.so: wrong ELF class: ELFCLASS32",
])
def test_a_library_built_for_another_python_gets_a_build_for_this_one(loader_error: str) -> None:
    """A cp312 abi3 tvm_ffi loaded by Python 3.11 (the fla probe's interpreter dies in the loader) and the like."""
    error = loader_error.format(site=f"/tmp/{_token()}/site-cp312")
    minor = f"3.{random.randint(10, 11)}"
    report = make_report(python_version=f"{minor}.{random.randint(0, 9)}", machine="x86_64",
                         fla_gdn_import_error=error)
    (finding,) = check_fla_gdn_imports(report, {})
    assert finding.severity == "error" and error in finding.message
    assert f"built for this Python {minor} on x86_64" in finding.fix
    assert f"build_site_bundle.sh --python-version {minor} --arch x86_64" in finding.fix
    assert "pip install fla-core" not in finding.fix


def test_a_gdn_import_error_other_than_a_missing_module_gets_the_broken_tilelang_fix() -> None:
    """With a tilelang that does not import and an nvcc, fla's kernels fail as they import tilelang, whatever error
    their own import shows: the fix makes tilelang import or takes it out (it said "install fla")."""
    error = f"ImportError: cannot import name '{_token()}' from 'fla.ops.utils.sinkhorn'"
    triton = f"3.{random.randint(8, 20)}.0"
    report = _broken_tilelang_report(triton, f"OSError: libz3.so: cannot open shared object file ({_token()})", error)
    (finding,) = check_fla_gdn_imports(report, {})
    assert finding.severity == "error" and "pip uninstall tilelang" in finding.fix
    assert TILELANG_STACK_INSTALL in finding.fix and "pip install fla-core" not in finding.fix


@pytest.mark.parametrize("error, expected", [
    ("/x/{token}/tvm_ffi/lib/libtvm_ffi.so: undefined symbol: PyUnicode_AsUTF8AndSize", "built for this Python and CPU"),
    ("cannot import name '{token}' from 'tilelang.language' (/x/tilelang/language/__init__.py)",
     "make `import tilelang` work"),
])
def test_the_training_entry_names_the_fix_of_the_import_error_it_sees(monkeypatch, error: str, expected: str) -> None:
    """The entry's refusal of a GDN model whose fla kernels do not import gave "install fla" for a loader error of a
    library built for another Python and for a tilelang that does not import, where fla is installed and
    reinstalling it changes nothing."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.training import fla_kernels

    message = error.format(token=_token())

    def failing_import(name: str, *_args, **_kwargs):
        raise ImportError(message)

    monkeypatch.setattr(fla_kernels.importlib, "import_module", failing_import)
    problem = fla_kernels.fla_import_problem(get_card("qwen3.5-35b-a3b"))
    assert message in problem and expected in problem.split("Fix: ", 1)[1]
    assert "pip install fla-core" not in problem


@pytest.mark.parametrize(("library", "expected"), [
    ("libtvm_ffi.so", "put back libtvm_ffi.so, which apache-tvm-ffi==0.1.12 ships"),
    ("libtvm_runtime.so", "put back libtvm_runtime.so, which tilelang==0.1.15 ships"),
    ("libz3.so.4.15", "put back libz3.so.4.15, which z3-solver==4.15.4.0 ships"),
    ("libcudart.so.13", "make libcudart.so.13 loadable"),
])
def test_a_shared_library_tilelang_cannot_load_is_named_first_in_the_fix(library: str, expected: str) -> None:
    """tilelang's import raising OSError for a shared library the loader cannot find (fla's kernels then fail with
    it): both findings gave the general broken-tilelang fix, and fla-gdn-imports said "FLA is not installed", which
    megatron-core says only of an ImportError. The library comes first, by the distribution that ships it."""
    error = f"OSError: /tmp/{_token()}/{library}: cannot open shared object file: No such file or directory"
    report = _broken_tilelang_report(f"3.{random.randint(8, 20)}.0", error, error)
    (gdn,) = check_fla_gdn_imports(report, {})
    (hopper,) = check_fla_hopper_triton(report, {})
    assert gdn.fix == hopper.fix and gdn.fix.startswith(expected), gdn.fix
    assert "pip uninstall tilelang" in gdn.fix and TILELANG_STACK_INSTALL in gdn.fix
    assert "catches only an ImportError there" in gdn.message and "FLA is not installed" not in gdn.message


def test_an_error_megatron_core_does_not_catch_gets_its_own_fix_not_install_fla() -> None:
    """fla installed, its kernels' import failing with an OSError of a system library or a full disk (no tilelang in
    it): "install fla" (the fix it got) would do nothing; the library or the error's own cause is named, as the
    training entry names it (:func:`fla_import_error_fix`)."""
    library = f"lib{_token()}.so.1"
    for error, expected in [
            (f"OSError: {library}: cannot open shared object file: No such file or directory",
             f"make {library} loadable"),
            (f"OSError: [Errno 28] No space left on device: '/tmp/{_token()}/.triton/cache'",
             "remove the cause of this error")]:
        report = make_report(versions={"fla": "0.6.0", "triton": f"3.{random.randint(8, 20)}.0"},
                             fla_gdn_import_error=error)
        (gdn,) = check_fla_gdn_imports(report, {})
        assert gdn.fix.startswith(expected) and "install fla" not in gdn.fix, gdn.fix
        assert gdn.fix == fla_import_error_fix(error, None)
        assert "end in this error's traceback" in gdn.message


def test_an_import_error_naming_its_module_is_one_megatron_core_catches() -> None:
    """``importing MODULE raised ImportError: ...`` (an ImportError that names its module) is caught by megatron-core
    ("FLA is not installed"): the line's type is read after its ``importing ... raised``, not from its first word."""
    error = f"importing fla.ops.{_token()} raised ImportError: cannot import name '{_token()}'"
    report = make_report(versions={"fla": "0.6.0"}, fla_gdn_import_error=error)
    (gdn,) = check_fla_gdn_imports(report, {})
    assert "FLA is not installed" in gdn.message and "traceback" not in gdn.message, gdn.message


def test_an_attribute_error_inside_flas_import_is_no_missing_fla(tmp_path: Path, monkeypatch) -> None:
    """fla installed, its ``__init__`` raising AttributeError (fla built against another torch): fla-gdn-imports said
    megatron-core takes fla as absent ("FLA is not installed"), but megatron-core catches only an ImportError there
    and ends in the error's traceback. The doctor (from its fresh interpreter) and the training entry now both say fla
    is installed, name the error, and give the fix of an error megatron-core does not catch."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.training import fla_kernels

    error = fla_raising_attribute_error(monkeypatch, tmp_path)
    assert probes.fresh_import_facts(None, fla_installed=True).fla_gdn_error == error
    (finding,) = check_fla_gdn_imports(make_report(fla_gdn_import_error=error), {})
    assert finding.severity == "error" and "fla 0.6.0 is installed, but" in finding.message
    assert f"({error})" in finding.message and "end in this error's traceback" in finding.message, finding.message
    assert "FLA is not installed" not in finding.message
    assert finding.fix.startswith("remove the cause of this error") and "install fla" not in finding.fix
    problem = fla_kernels.fla_import_problem(get_card("qwen3.5-35b-a3b-tiny"))
    assert f"fla is installed, but its import failed here ({error})" in problem
    assert problem.split("Fix: ", 1)[1] == finding.fix
