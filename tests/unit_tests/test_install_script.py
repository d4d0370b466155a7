"""``tools/install.sh``: which torch it asks pip for on a CPU machine, an x86_64 or GH200 GPU node and a container
with torch, run against a stand-in Python whose ``-m pip`` only records its arguments (nothing is installed).

The stand-in runs every other command with this interpreter under ``-S`` (no site-packages), so ``import torch``
and ``import triton`` see only the fake modules of the test's folder (and a ``PYTHONPATH`` the test passes, after it);
its pip fails, printing ``FAKE_PIP_FAILURE``, where that is set; a recorded ``pip install torch==...`` writes
a fake torch there (a CUDA or a CPU build, as the case says), and ``nvidia-smi`` is a stand-in printing a driver
version or failing as on a machine without an NVIDIA driver.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from tests.unit_tests.install_helpers import INSTALL_SCRIPT, run_install

CPU_INDEX = "https://download.pytorch.org/whl/cpu"

def torch_installs(calls: list[list[str]]) -> list[list[str]]:
    return [call for call in calls if any(arg.startswith("torch==") for arg in call)]


def test_an_importable_torch_and_triton_are_kept(tmp_path: Path) -> None:
    """A container's torch and Triton: neither is reinstalled (pip would replace a pytorch-triton's module)."""
    done, calls = run_install(tmp_path, torch="'12.9'", triton=True, driver="570.86.15")
    assert done.returncode == 0, done.stderr
    assert torch_installs(calls) == []
    assert not any("triton" in call for call in calls)
    assert any("megatron-core==0.19.2" in call for call in calls)
    assert calls[-1][-2:] == ["-e", ".[dev]"]


def test_cpu_machine_gets_the_cpu_build_from_its_configured_indexes(tmp_path: Path) -> None:
    done, calls = run_install(tmp_path)
    assert done.returncode == 0, done.stderr
    (install,) = torch_installs(calls)
    assert "torch==2.13.0+cpu" in install and "--extra-index-url" not in install
    assert any(call[-1] == "triton" for call in calls)  # the CPU build does not bring Triton; the kernels need it


def test_cpu_machine_falls_back_to_pytorchs_cpu_index(tmp_path: Path) -> None:
    done, calls = run_install(tmp_path, FAKE_LOCAL_CPU_WHEEL="0")
    assert done.returncode == 0, done.stderr
    first, second = torch_installs(calls)
    assert "--extra-index-url" not in first
    assert second[second.index("--extra-index-url") + 1] == CPU_INDEX and "torch==2.13.0+cpu" in second


@pytest.mark.parametrize("driver", ["580.65.06", "590.48.01"])
def test_gpu_node_with_a_cuda13_driver_gets_pypis_cuda_build(tmp_path: Path, driver: str) -> None:
    """x86_64 and aarch64 (GH200) alike: PyPI's Linux torch 2.13.0 wheel is the CUDA 13.0 build."""
    done, calls = run_install(tmp_path, driver=driver, FAKE_TORCH_CUDA="'13.0'")
    assert done.returncode == 0, done.stderr
    (install,) = torch_installs(calls)
    assert "torch==2.13.0" in install and "--extra-index-url" not in install


def test_gpu_node_with_an_older_driver_is_refused_before_installing(tmp_path: Path) -> None:
    done, calls = run_install(tmp_path, driver="570.86.15", FAKE_TORCH_CUDA="'13.0'")
    assert done.returncode == 1
    assert "580" in done.stderr and "570.86.15" in done.stderr and "TORCH_INDEX_URL" in done.stderr
    assert calls == []


def test_gpu_node_with_an_older_driver_and_a_chosen_index(tmp_path: Path) -> None:
    index = "https://download.pytorch.org/whl/cu126"
    done, calls = run_install(tmp_path, driver="560.35.03", FAKE_TORCH_CUDA="'12.6'", TORCH_INDEX_URL=index)
    assert done.returncode == 0, done.stderr
    (install,) = torch_installs(calls)
    assert install[install.index("--extra-index-url") + 1] == index and "torch==2.13.0" in install


def test_gpu_node_that_got_a_cpu_build_is_an_error(tmp_path: Path) -> None:
    """A find-links folder with torch 2.13.0+cpu (as on the CI machine) wins over PyPI's CUDA wheel."""
    done, calls = run_install(tmp_path, driver="590.48.01", FAKE_TORCH_CUDA="None")
    assert done.returncode == 1
    assert "CPU build" in done.stderr
    assert not any("megatron-core==0.19.2" in call for call in calls)


@pytest.mark.parametrize(
    ("failure", "status"),
    [("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
      "driver is installed and running.", 9),
     ("No devices were found", 6)],
)
def test_nvidia_smi_failing_on_stdout_means_no_gpu(tmp_path: Path, failure: str, status: int) -> None:
    """nvidia-smi prints its failures on stdout (a login node with the tool but no driver, a node without GPUs): that
    is a machine without a usable GPU, which gets the CPU build, not a refusal for a driver "older than 580"."""
    done, calls = run_install(tmp_path, FAKE_SMI_FAILURE=failure, FAKE_SMI_STATUS=str(status))
    assert done.returncode == 0, done.stderr
    (install,) = torch_installs(calls)
    assert "torch==2.13.0+cpu" in install


def test_a_python_that_does_not_exist_is_one_error_line(tmp_path: Path) -> None:
    """``PYTHON=python3.21`` (a typo, or a version the machine lacks) ended in bash's ``command not found`` with
    status 127; it is now one ``error:`` line naming the interpreter and how to pick another, status 2."""
    name = f"python3.{random.randint(20, 99)}"
    done = subprocess.run(["bash", str(INSTALL_SCRIPT), "dev"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHON": name}, check=False)
    assert done.returncode == 2 and done.stderr == (f"error: install.sh: no Python '{name}' (PYTHON names the "
                                                    "interpreter to install into, e.g. PYTHON=python3.12)\n")
