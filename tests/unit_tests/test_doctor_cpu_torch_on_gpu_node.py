"""``oellm doctor`` on a GPU node whose torch sees no GPU: an error that names the fix, not the login-node warning.

A venv made on a GPU-less login node holds a CPU build of torch; run in a job on a GPU node it used to pass (exit 0)
with a warning advising to run inside a job on a compute node, which it already was. The node's GPUs are told apart
from torch's view by what shows them without torch: ``nvidia-smi -L`` where the NVIDIA driver is loaded, or the GPUs
Slurm gave the job.
"""

from __future__ import annotations

import random
import string

import pytest

from megatron.oellm import cli
from megatron.oellm.commands import doctor as doctor_command
from megatron.oellm.doctor import probes
from megatron.oellm.doctor.report import exit_status
from megatron.oellm.doctor.rules import check_environment, check_gpus
from tests.unit_tests.doctor_reports import make_report


def _word() -> str:
    """A fresh lowercase word: a marker only this run can have produced."""
    return "".join(random.choices(string.ascii_lowercase, k=10))


def _devices() -> str:
    """A fresh device list as Slurm exports it: 1 to 8 indices."""
    return ",".join(str(index) for index in sorted(random.sample(range(8), random.randint(1, 8))))


def _cpu_torch(**changes):
    """A report of a CPU build of torch that sees no GPU."""
    return make_report(gpus=(), cuda_version=None, nccl_version=None, **changes)


@pytest.mark.parametrize("job_variable", ["SLURM_JOB_ID", "SLURM_JOBID"])
@pytest.mark.parametrize("variable", ["SLURM_JOB_GPUS", "SLURM_STEP_GPUS"])
def test_a_cpu_torch_in_a_slurm_job_given_gpus_is_an_error(variable, job_variable):
    """Slurm names the job in SLURM_JOB_ID and, for older scripts, SLURM_JOBID: either one alone makes the job's GPUs
    evidence."""
    job, devices = str(random.randint(10**5, 10**8)), _devices()
    env = {job_variable: job, variable: devices}
    report = _cpu_torch()
    (finding,) = check_gpus(report, env)
    assert finding.severity == "error", finding
    assert "CPU build" in finding.message and job in finding.message and f"{variable}={devices}" in finding.message
    assert "install a CUDA build of torch" in finding.fix and "GPU-less login node" in finding.fix
    assert exit_status(check_environment(report, env)) == 1


def test_a_cpu_torch_where_nvidia_smi_lists_gpus_is_an_error():
    name = f"NVIDIA H{random.randint(100, 999)} {_word()}"
    count = random.randint(1, 8)
    (finding,) = check_gpus(_cpu_torch(driver_gpus=(name,) * count), {})
    assert finding.severity == "error", finding
    assert name in finding.message and f"{count} GPU(s)" in finding.message
    assert "install a CUDA build of torch" in finding.fix


def test_a_cuda_torch_that_sees_no_gpu_on_a_gpu_node_is_an_error_with_the_driver_hint():
    cuda = f"12.{random.randint(1, 9)}"
    devices = _devices()
    env = {"SLURM_JOB_ID": str(random.randint(10**5, 10**8)), "SLURM_JOB_GPUS": devices,
           "CUDA_VISIBLE_DEVICES": devices}
    (finding,) = check_gpus(make_report(gpus=(), cuda_version=cuda), env)
    assert finding.severity == "error", finding
    assert f"CUDA {cuda}" in finding.message
    assert "driver" in finding.fix and f"CUDA_VISIBLE_DEVICES is {devices!r}" in finding.fix
    assert "--nv" in finding.fix and "install a CUDA build" not in finding.fix
    marker = _word()
    (broken,) = check_gpus(make_report(gpus=(), cuda_version=cuda, gpu_probe_error=f"RuntimeError: {marker}"), env)
    assert broken.severity == "error" and marker in broken.message and "driver" in broken.fix


@pytest.mark.parametrize("env", [
    {}, {"CUDA_VISIBLE_DEVICES": "0,1"}, {"SLURM_JOB_ID": "1"}, {"SLURM_JOB_ID": "1", "CUDA_VISIBLE_DEVICES": ""},
    {"SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": "NoDevFiles"}, {"SLURM_JOB_ID": "1", "SLURM_STEP_GPUS": "-1"},
    {"SLURM_JOB_ID": "1", "CUDA_VISIBLE_DEVICES": "0,1"},
], ids=["login node", "devices outside Slurm", "job without GPUs", "empty list", "NoDevFiles", "hidden",
        "an exported device list in a CPU job"])
def test_without_evidence_of_gpus_it_stays_a_warning(env):
    """A login node, a build host, a job given no GPU: nothing shows GPUs torch should see."""
    for report in (_cpu_torch(), make_report(gpus=())):
        (finding,) = check_gpus(report, env)
        assert finding.severity == "warning" and "compute node" in finding.fix, (env, finding)


def test_the_command_fails_for_a_cpu_torch_in_a_gpu_job(monkeypatch, capsys):
    """``oellm doctor`` in a job Slurm gave GPUs (``SLURM_JOB_GPUS``) with a CPU torch."""
    monkeypatch.setattr(doctor_command, "collect_environment", lambda: _cpu_torch())
    monkeypatch.setenv("SLURM_JOB_ID", str(random.randint(10**5, 10**8)))
    monkeypatch.setenv("SLURM_JOB_GPUS", _devices())
    assert cli.main(["doctor"]) == 1
    assert "[error]    gpus: torch 2.9.0 is a CPU build" in capsys.readouterr().out


def _fake_nvidia_smi(folder, stdout: str, status: int = 0) -> None:
    """An ``nvidia-smi`` in ``folder`` that prints ``stdout`` and exits with ``status``."""
    folder.mkdir(exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat <<'END'\n{stdout}END\nexit {status}\n")
    script.chmod(0o755)


def test_the_driver_probe_lists_what_nvidia_smi_lists_where_the_driver_is_loaded(tmp_path):
    names = [f"NVIDIA {_word()}" for _ in range(random.randint(1, 4))]
    listing = "".join(f"GPU {index}: {name} (UUID: GPU-{_word()})\n" for index, name in enumerate(names))
    driver = tmp_path / "version"
    driver.write_text(f"NVRM version: {_word()}\n")
    _fake_nvidia_smi(tmp_path / "bin", listing)
    env = {"PATH": str(tmp_path / "bin")}
    assert probes.nvidia_smi_gpus(env, driver) == tuple(names)
    assert probes.nvidia_smi_gpus(env, tmp_path / "absent") == ()  # no driver loaded: nvidia-smi is not asked
    assert probes.nvidia_smi_gpus({"PATH": str(tmp_path / "empty")}, driver) == ()  # no nvidia-smi
    _fake_nvidia_smi(tmp_path / "failing", listing, status=9)
    assert probes.nvidia_smi_gpus({"PATH": str(tmp_path / "failing")}, driver) == ()
