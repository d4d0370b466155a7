"""``oellm doctor`` on broken installs: each probe turns what it meets into a finding, never a traceback, and a
half-installed package is reported as what the training entry will meet."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import os
import pathlib
import random
import sys
import types
from pathlib import Path

import pytest

from megatron.oellm.doctor import probes as doctor_probes
from megatron.oellm.doctor.probes import PackageProbe, collect_environment
from megatron.oellm.doctor.report import UNKNOWN_VERSION, EnvironmentReport
from megatron.oellm.doctor.rules import check_hybrid_ep, check_transformer_engine


def _fake_cuda_torch(nccl_version: object) -> types.ModuleType:
    """A torch stand-in: a CUDA 12.8 build that sees one GPU and whose ``torch.cuda.nccl.version`` is
    ``nccl_version`` (a callable that may raise, as on a build without NCCL where ``torch._C`` lacks it)."""
    props = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, total_memory=80 * 2**30)
    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 1,
                                 get_device_properties=lambda index: props,
                                 nccl=types.SimpleNamespace(version=nccl_version))
    torch = types.ModuleType("torch")
    torch.__spec__ = importlib.machinery.ModuleSpec("torch", None)  # found by find_spec, as an imported torch is
    torch.version, torch.cuda = types.SimpleNamespace(cuda="12.8"), cuda
    return torch


def _raise(error: BaseException):
    """A callable that raises ``error``."""
    def call(*args, **kwargs):
        raise error
    return call


@pytest.mark.parametrize("error", [AttributeError("module 'torch._C' has no attribute '_nccl_version'"),
                                   AssertionError("Torch not compiled with CUDA enabled"),
                                   OSError("libnccl.so.2: cannot open shared object file")])
def test_a_gpu_probe_that_raises_anything_is_a_probe_error_not_a_traceback(monkeypatch, error):
    """torch imports, but listing its NCCL / GPUs raises something other than RuntimeError: a probe error."""
    monkeypatch.setitem(sys.modules, "torch", _fake_cuda_torch(_raise(error)))
    cuda, nccl, gpus, probe_error, import_error = doctor_probes._torch_cuda_facts()
    assert cuda == "12.8" and gpus == () and import_error is None
    assert probe_error is not None and str(error) in probe_error


def test_the_gpu_probe_still_lists_gpus_when_nothing_raises(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _fake_cuda_torch(lambda: (2, 27, 3)))
    cuda, nccl, gpus, probe_error, _ = doctor_probes._torch_cuda_facts()
    assert (cuda, nccl, probe_error) == ("12.8", "2.27.3", None) and gpus[0].capability == (9, 0)


def test_the_gpu_probe_reports_memory_in_gib(monkeypatch):
    """torch gives ``total_memory`` in bytes; the report's memory (the table's "GiB", the JSON's memory_gib) is in
    GiB of 2**30 bytes: (2n + 1) * 2**29 bytes are n + 0.5 GiB (fresh random n), not n + 0.5 decimal GB."""
    gib = random.randint(16, 191)
    torch = _fake_cuda_torch(lambda: (2, 27, 3))
    props = types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, total_memory=(2 * gib + 1) * 2**29)
    torch.cuda.get_device_properties = lambda index: props
    monkeypatch.setitem(sys.modules, "torch", torch)
    _, _, (gpu,), _, _ = doctor_probes._torch_cuda_facts()
    assert gpu.memory_gib == gib + 0.5


def test_an_unreadable_deep_ep_init_is_unknown_not_a_traceback(tmp_path, monkeypatch):
    """deep_ep whose ``__init__.py`` cannot be read (permissions on a shared install): HybridEP is 'could not be
    read', a warning, rather than a PermissionError out of ``oellm doctor``."""
    package = tmp_path / "deep_ep"
    package.mkdir()
    init = package / "__init__.py"
    init.write_text("from .hybrid import HybridEPBuffer\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    read_text = pathlib.Path.read_text

    def unreadable(self: Path, *args, **kwargs) -> str:
        if self == init:
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_text", unreadable)
    assert doctor_probes.deep_ep_declares_hybrid_ep() is None


def test_a_probe_whose_stderr_is_not_utf8_reports_its_last_line(monkeypatch):
    """A native library's error in another encoding (a Latin-1 path) must not raise UnicodeDecodeError here."""
    code = "import sys; sys.stderr.buffer.write(b'OSError: /opt/caf\\xe9/libz3.so: cannot open\\n'); sys.exit(1)"
    stdout, error = doctor_probes._run_in_fresh_interpreter(code, "the probe", 60)
    assert error is not None and "libz3.so: cannot open" in error


def _dist_info(site: Path, name: str, version: str | None) -> None:
    """A ``NAME-VERSION.dist-info`` folder in ``site``; without METADATA when ``version`` is None (a pip install that
    was cut off, or a package folder deleted by hand)."""
    folder = site / f"{name}-{version or '0'}.dist-info"
    folder.mkdir(parents=True)
    if version is not None:
        (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_a_dist_info_without_metadata_does_not_hide_the_module(tmp_path, monkeypatch):
    """A left-over dist-info without METADATA makes importlib.metadata return None: the next distribution name, then
    the module, still count; the package is not reported absent."""
    _dist_info(tmp_path, "oellm_doctor_half", None)
    (tmp_path / "oellm_doctor_half_module.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    probe = PackageProbe("half", ("oellm_doctor_half", "no-such-distribution-for-doctor"), "oellm_doctor_half_module")
    assert doctor_probes.distribution_version(probe) == UNKNOWN_VERSION
    _dist_info(tmp_path, "oellm_doctor_whole", "1.2")
    importlib.invalidate_caches()
    probe = PackageProbe("half", ("oellm_doctor_half", "oellm_doctor_whole"), None)
    assert doctor_probes.distribution_version(probe) == "1.2"


@pytest.mark.skipif(importlib.util.find_spec("transformer_engine") is not None, reason="TE is installed here")
def test_transformer_engine_metadata_without_its_package_is_not_reported_as_importing(tmp_path, monkeypatch):
    """TE's distribution is installed but its package folder is gone (a half-removed install): the training entry's
    ``auto`` falls back to the torch-native backend, so the doctor must not say that TE imports and auto uses it."""
    _dist_info(tmp_path, "transformer_engine", "2.20.2")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    report = collect_environment()
    assert report.versions["transformer-engine"] == "2.20.2"
    assert report.transformer_engine_import_error is not None
    assert "transformer_engine" in report.transformer_engine_import_error
    finding = check_transformer_engine(report, {})[0]
    assert finding.severity == "error" and "imports:" not in finding.message


def test_hybrid_ep_unreadable_is_the_could_not_be_read_warning():
    """What :func:`deep_ep_declares_hybrid_ep` returns for an unreadable file maps to a warning, not an ok."""
    report = EnvironmentReport(python_version="3.12.3", typing_override_provided=False,
                               versions={"deep-ep": "1.2.1"}, hybrid_ep=None)
    finding = check_hybrid_ep(dataclasses.replace(report), {})[0]
    assert finding.severity == "warning" and "could not be read" in finding.message


def test_an_nvcc_under_a_folder_this_user_may_not_enter_is_not_found_rather_than_a_traceback(tmp_path, monkeypatch):
    """CUDA_HOME in a folder without search permission: ``Path.is_file`` raises PermissionError on Python < 3.14
    (root, which runs the tests, is not refused, so the refusal is simulated); the next candidate is taken."""
    locked = tmp_path / "locked" / "bin" / "nvcc"
    usable = tmp_path / "usable" / "nvcc"
    for nvcc in (locked, usable):
        nvcc.parent.mkdir(parents=True)
        nvcc.write_text("")
    is_file = pathlib.Path.is_file

    def refusing(self: Path) -> bool:
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return is_file(self)

    monkeypatch.setattr(pathlib.Path, "is_file", refusing)
    env = {"CUDA_HOME": str(tmp_path / "locked"), "PATH": str(usable.parent)}
    usable.chmod(0o755)
    assert doctor_probes.find_nvcc(env) == str(usable)
