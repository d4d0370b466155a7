"""``tools/install.sh`` on an environment that is already complete (pip is never called, so a compute node without a
package index runs the README's commands), on a GPU node whose torch is a CPU build (refused), with the gdn extra and a
Triton fla 0.6.0 refuses on Hopper (TileLang is installed), and with the te extra (an importable Transformer Engine
is kept, none is refused: install.sh does not build it). Same stand-ins as test_install_script."""

from __future__ import annotations

import random
from pathlib import Path

from tests.unit_tests.fake_site import base_versions
from tests.unit_tests.install_helpers import TILELANG_PINS, run_install


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
    assert "CPU build" in done.stderr and driver in done.stderr and "login node with internet" in done.stderr
    assert "pip uninstall" not in done.stderr  # on an air-gapped GPU node nothing could be installed in its place
    assert calls == []


def test_gdn_with_triton_3_6_gets_tilelang_on_a_login_node_too(tmp_path: Path) -> None:
    installed = {**base_versions(), "triton": f"3.{random.randint(4, 6)}.0"}
    done, calls = run_install(tmp_path, torch="None", triton=True, extras="hf,GDN", installed=installed)
    assert done.returncode == 0, done.stderr
    assert calls == [["-m", "pip", "install", "-q", "--disable-pip-version-check", *TILELANG_PINS]]


def test_gdn_on_a_node_of_other_gpus_needs_no_tilelang(tmp_path: Path) -> None:
    """An A100 node (compute capability 8.0) of a complete environment: nothing to install, offline too."""
    installed = {**base_versions(), "triton": f"3.{random.randint(4, 6)}.0"}
    done, calls = run_install(tmp_path, torch="'13.0'", triton=True, driver="590.48.01", extras="hf,gdn",
                              installed=installed, FAKE_COMPUTE_CAP=random.choice(["8.0", "8.9", "10.0"]))
    assert done.returncode == 0, done.stderr
    assert calls == []


def test_the_te_extra_keeps_an_importable_transformer_engine(tmp_path: Path) -> None:
    site = tmp_path / "pre"
    (site / "transformer_engine" / "pytorch").mkdir(parents=True)
    (site / "transformer_engine" / "__init__.py").write_text("")
    (site / "transformer_engine" / "pytorch" / "__init__.py").write_text("")
    done, calls = run_install(tmp_path, torch="'13.0'", triton=True, driver="590.48.01", extras="dev,TE",
                              extra_site=site)
    assert done.returncode == 0, done.stderr
    assert "keeping the Transformer Engine" in done.stdout
    assert calls[-1][-2:] == ["-e", ".[dev]"]


def test_the_te_extra_without_transformer_engine_is_refused_before_pip(tmp_path: Path) -> None:
    done, calls = run_install(tmp_path, torch="'13.0'", triton=True, driver="590.48.01", extras="te")
    assert done.returncode == 2
    assert "No module named 'transformer_engine'" in done.stderr
    assert "does not build it" in done.stderr and "te_cpu_env.sh" in done.stderr
    assert calls == []


def test_a_transformer_engine_that_needs_the_driver_is_named_so(tmp_path: Path) -> None:
    """A container's TE imported on a GPU-less login node: installed, it only needs the driver there."""
    site = tmp_path / "pre"
    (site / "transformer_engine" / "pytorch").mkdir(parents=True)
    (site / "transformer_engine" / "__init__.py").write_text("")
    error = f"libcuda.so.1: cannot open shared object file ({random.randrange(1000)})"
    (site / "transformer_engine" / "pytorch" / "__init__.py").write_text(  # a warning printed after the error
        f"import atexit, sys\natexit.register(lambda: print('[W] shutting down', file=sys.stderr))\n"
        f"raise OSError({error!r})\n")
    done, calls = run_install(tmp_path, torch="None", triton=True, extras="hf,te", extra_site=site)
    assert done.returncode == 2 and calls == []
    assert "needs the NVIDIA driver to import" in done.stderr and error in done.stderr
