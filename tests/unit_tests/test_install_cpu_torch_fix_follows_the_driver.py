"""``tools/install.sh`` refusing a CPU build of torch on a GPU node suggests a CUDA build the node's driver runs: PyPI's
CUDA 13.0 build (``+cu130``) from driver 580 on, otherwise a ``cuXYZ`` build of PyTorch's index that the driver
supports, the index ``TORCH_INDEX_URL`` names. It suggested ``+cu130`` whatever the driver, although the same script
says a driver below 580 cannot run CUDA 13. Same stand-ins as test_install_script (pip only records its arguments)."""

from __future__ import annotations

import random
from pathlib import Path

from tests.unit_tests.install_helpers import run_install


def _driver(low: int, high: int) -> str:
    return f"{random.randint(low, high)}.{random.randint(10, 99)}.{random.randint(1, 20):02d}"


def test_an_older_driver_gets_no_cuda13_build(tmp_path: Path) -> None:
    driver = _driver(450, 579)
    done, calls = run_install(tmp_path, torch="None", triton=True, driver=driver)
    assert done.returncode == 1 and calls == []
    assert "CPU build" in done.stderr and driver in done.stderr
    assert "cu130" not in done.stderr
    assert "'torch==2.13.0+cu1XX' --index-url https://download.pytorch.org/whl/cu1XX" in done.stderr
    assert "CUDA 13 needs a driver >= 580" in done.stderr and "TORCH_INDEX_URL" in done.stderr


def test_a_cuda13_driver_gets_pypis_cuda13_build(tmp_path: Path) -> None:
    driver = _driver(580, 650)
    done, calls = run_install(tmp_path, torch="None", triton=True, driver=driver)
    assert done.returncode == 1 and calls == []
    assert driver in done.stderr
    assert "'torch==2.13.0+cu130' --index-url https://download.pytorch.org/whl/cu130" in done.stderr
    assert "cu1XX" not in done.stderr
