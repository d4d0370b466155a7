"""``tools/install.sh`` on an environment that is already complete (pip is never called, so a compute node without a
package index runs the README's commands), on a GPU node whose torch is a CPU build (refused), and on a Hopper node
whose Triton fla 0.6.0 refuses for its GDN backward (TileLang is installed). Same stand-ins as test_install_script."""

from __future__ import annotations

import random
from pathlib import Path

from tests.unit_tests.test_install_needs import TILELANG_PINS, base_versions
from tests.unit_tests.test_install_script import run_install


def test_a_complete_environment_runs_no_pip(tmp_path: Path) -> None:
    done, calls = run_install(tmp_path, torch="'13.0'", triton=True, driver="590.48.01", extras="dev,hf,gdn",
                              installed=base_versions())
    assert done.returncode == 0, done.stderr
    assert calls == []
    assert "nothing to install" in done.stdout


def test_one_unmet_requirement_reinstalls_the_package_only(tmp_path: Path) -> None:
    done, calls = run_install(tmp_path, torch="None", triton=True, extras="dev,hf",
                              installed={**base_versions(), "transformers": "4.57.0"})
    assert done.returncode == 0, done.stderr
    assert calls == [["-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", ".[dev,hf]"]]


def test_a_cpu_torch_on_a_gpu_node_is_refused_before_pip(tmp_path: Path) -> None:
    """A venv made on a GPU-less login node and reused in a job: its torch cannot see the node's GPUs."""
    driver = f"{random.randint(580, 600)}.{random.randint(10, 99)}.01"
    done, calls = run_install(tmp_path, torch="None", triton=True, driver=driver)
    assert done.returncode == 1
    assert "CPU build" in done.stderr and driver in done.stderr and "pip uninstall torch" in done.stderr
    assert calls == []


def test_hopper_with_triton_3_6_gets_tilelang(tmp_path: Path) -> None:
    installed = {**base_versions(), "triton": f"3.{random.randint(4, 6)}.0"}
    done, calls = run_install(tmp_path, torch="'13.0'", triton=True, driver="590.48.01", extras="hf,gdn",
                              installed=installed, FAKE_COMPUTE_CAP="9.0")
    assert done.returncode == 0, done.stderr
    assert calls == [["-m", "pip", "install", "-q", "--disable-pip-version-check", *TILELANG_PINS]]
    (tmp_path / "ampere").mkdir()
    done, calls = run_install(tmp_path / "ampere", torch="'13.0'", triton=True, driver="590.48.01", extras="hf,gdn",
                              installed=installed, FAKE_COMPUTE_CAP="8.0")
    assert done.returncode == 0, done.stderr
    assert calls == []


def test_the_te_extra_is_built_against_the_installed_torch(tmp_path: Path) -> None:
    """TE's PyTorch extension is an sdist: built in pip's isolated environment it would compile against another
    torch."""
    done, calls = run_install(tmp_path, torch="'13.0'", triton=True, driver="590.48.01", extras="te")
    assert done.returncode == 0, done.stderr
    (te,) = [call for call in calls if any(arg.startswith("transformer-engine") for arg in call)]
    assert "--no-build-isolation" in te and te[-1] == "transformer-engine[core_cu13,pytorch]==2.20.2"
    assert calls[-1][-2:] == ["-e", ".[te]"]
