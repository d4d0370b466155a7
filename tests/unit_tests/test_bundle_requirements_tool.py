"""``tools/bundle_requirements.py`` on stand-in unpacked wheels: a requirement is listed once per name with every range
asked for and every package asking, only where its environment marker holds on the node (Linux, the given Python and
CPU architecture, no extras), and never when the bundle carries it under any spelling of its name."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "bundle_requirements.py"


def unpacked(site: Path, name: str, *requires: str) -> None:
    """A distribution ``name`` unpacked into ``site``, declaring ``requires``."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0", *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n\nlong description: Requires-Dist: not-a-header\n")


def run_tool(site: Path, python_version: str = "3.12", arch: str = "x86_64") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), str(site), "--python-version", python_version, "--arch", arch],
                          capture_output=True, text=True, timeout=60)


def test_requirements_the_bundle_lacks_are_listed_with_ranges_and_askers(tmp_path: Path) -> None:
    floor = f"1.{random.randint(2, 30)}"
    unpacked(tmp_path, "kernel-pack", f"numpy>={floor}", "einops", "Fla_Core==0.6.0", "ml-dtypes")
    unpacked(tmp_path, "fla-core", "einops", "numpy<3")
    done = run_tool(tmp_path)
    assert done.returncode == 0, done.stderr
    names = [line.split()[0] for line in done.stdout.splitlines()]
    assert names == ["einops", "ml-dtypes", "numpy"]  # fla-core is bundled (as fla_core, Fla_Core)
    [numpy] = [line for line in done.stdout.splitlines() if line.startswith("numpy")]
    assert numpy.startswith(f"numpy <3,>={floor} ") and numpy.endswith("# asked for by fla-core, kernel-pack")
    assert "not-a-header" not in done.stdout


@pytest.mark.parametrize(("python_version", "arch", "expected"), [
    ("3.12", "x86_64", ["dlpack-ext", "x86-only"]),
    ("3.14", "x86_64", ["x86-only"]),
    ("3.12", "aarch64", ["arm-only", "dlpack-ext"]),
])
def test_markers_are_read_for_the_node(tmp_path: Path, python_version: str, arch: str, expected: list[str]) -> None:
    unpacked(tmp_path, "kernel-pack", 'dlpack-ext; python_version < "3.14"', 'mac-only; platform_system == "Darwin"',
             'old-only; python_version < "3.9"', 'x86-only; platform_machine == "x86_64"',
             'arm-only; platform_machine == "aarch64"', 'test-only; extra == "test"')
    done = run_tool(tmp_path, python_version, arch)
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == expected


def test_a_bundle_that_needs_nothing_prints_nothing(tmp_path: Path) -> None:
    unpacked(tmp_path, "alone")
    done = run_tool(tmp_path)
    assert done.returncode == 0 and done.stdout == ""


@pytest.mark.parametrize(("python_version", "message"), [("3.12", "holds no unpacked distribution"),
                                                         ("3.12.1", "--python-version must be MAJOR.MINOR")])
def test_bad_arguments_are_refused(tmp_path: Path, python_version: str, message: str) -> None:
    done = run_tool(tmp_path, python_version)
    assert done.returncode == 2 and message in done.stderr and done.stdout == ""
