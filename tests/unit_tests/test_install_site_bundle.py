"""``tools/build_site_bundle.sh``: the wheels it asks pip for match the target's architecture (x86_64 for
MareNostrum 5, aarch64 for Jupiter's GH200), run against a stand-in ``python3`` whose ``-m pip download`` records
its arguments (one line a call), refuses megatron-core for Python 3.11 as pip does (it declares >= 3.12) unless
told ``--ignore-requires-python``, and writes one small wheel instead of downloading."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.unit_tests.site_bundle_helpers import BUNDLE_SCRIPT, run_bundle


@pytest.mark.skipif(sys.platform != "linux", reason="GNU tar and xz")
@pytest.mark.parametrize(("arch", "bundle"), [(None, "site-cp312.tar.xz"), ("aarch64", "site-cp312-aarch64.tar.xz"),
                                             ("arm64", "site-cp312-aarch64.tar.xz")])  # Docker's word, the image's
def test_the_wheels_match_the_targets_architecture(tmp_path: Path, arch: str | None, bundle: str) -> None:
    done, platforms = run_bundle(tmp_path, *(["--arch", arch] if arch else []))
    assert done.returncode == 0, done.stderr
    machine = {"arm64": "aarch64"}.get(arch, arch) or "x86_64"
    assert "any" in platforms
    assert all(p == "any" or p.endswith(f"_{machine}") for p in platforms), platforms
    if machine == "aarch64":  # tilelang 0.1.15 and z3-solver 4.15.4.0 publish aarch64 wheels only as manylinux_2_34
        assert "manylinux_2_34_aarch64" in platforms
    with tarfile.open(tmp_path / "out" / bundle) as archive:
        assert "./stand_in.py" in archive.getnames()
        requires = archive.extractfile("./BUNDLE_REQUIRES.txt").read().decode()
    # the stand-in wheel's one requirement and megatron-oellm's own (setup.py's install_requires; megatron-core's pin
    # is one, as the stand-in bundle lacks megatron-core), which the bundle does not carry: listed, and named on the
    # last line
    lines = requires.splitlines()
    assert lines[0].startswith("einops >=0.8 ") and lines[0].endswith("# asked for by stand-in"), requires
    checkout = {line.split()[0] for line in lines if line.endswith("# asked for by megatron-oellm (checkout)")}
    assert checkout == {"megatron-core", "numpy", "packaging", "psutil", "safetensors", "typing-extensions"}, requires
    assert "the node's Python must provide" in done.stdout.splitlines()[-1]
    assert done.stdout.splitlines()[-1].split("pip check): ")[1].split() == [line.split()[0] for line in lines]


def test_an_unknown_architecture_is_refused(tmp_path: Path) -> None:
    done, platforms = run_bundle(tmp_path, "--arch", "ppc64le")
    assert done.returncode == 2 and "ppc64le" in done.stderr and platforms == []


@pytest.mark.skipif(sys.platform != "linux", reason="GNU tar, xz and sha256sum")
def test_a_rerun_drops_wheels_left_by_an_earlier_run(tmp_path: Path) -> None:
    """A wheel an earlier run downloaded under other pins (an unpinned z3-solver of another libz3) must not be
    unpacked beside the pinned one: the later wheel in name order would overwrite the package's files."""
    wheels = tmp_path / "out" / "wheels-cp312"
    wheels.mkdir(parents=True)
    (wheels / ".oellm-site-bundle-work").touch()  # the earlier run's folder carries the script's mark
    stale = f"z3_solver-4.{random.randint(16, 99)}.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheels / stale, "w") as wheel:
        wheel.writestr("z3/stale.py", "")
    done, _ = run_bundle(tmp_path)
    assert done.returncode == 0, done.stderr
    with tarfile.open(tmp_path / "out" / "site-cp312.tar.xz") as archive:
        names = archive.getnames()
        contents = archive.extractfile("./BUNDLE_CONTENTS.txt").read().decode()
    assert "./z3/stale.py" not in names and stale not in contents
    assert "./stand_in.py" in names


@pytest.mark.skipif(sys.platform != "linux", reason="GNU tar, xz and sha256sum")
def test_the_bundle_comes_with_a_checksum_the_node_can_check(tmp_path: Path) -> None:
    done, _ = run_bundle(tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    assert not list(out.glob("*.partial"))
    check = subprocess.run(["sha256sum", "-c", "site-cp312.tar.xz.sha256"], cwd=out, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    with open(out / "site-cp312.tar.xz", "r+b") as bundle:  # a bundle cut on the way is caught
        bundle.truncate(bundle.seek(0, os.SEEK_END) - 1)
    check = subprocess.run(["sha256sum", "-c", "site-cp312.tar.xz.sha256"], cwd=out, capture_output=True, text=True)
    assert check.returncode != 0


@pytest.mark.parametrize("flag", ["--python-version", "--arch", "--out"])
def test_a_flag_without_its_value_names_the_flag(tmp_path: Path, flag: str) -> None:
    """Also when the next word is another option (``--out --arch aarch64`` took ``--arch`` as the output folder) or
    empty (``--out ""`` would put the wheels and the bundle under ``/``)."""
    for argv in ([flag], [flag, "--arch", "aarch64"], [flag, ""]):
        done = subprocess.run(["bash", str(BUNDLE_SCRIPT), *argv], capture_output=True, text=True, timeout=60,
                              cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.startswith(f"error: {flag} needs a value; usage:"), done.stderr
        assert not (tmp_path / "--arch").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="GNU tar and xz")
def test_python_3_11_gets_megatron_core_past_its_declared_3_12(tmp_path: Path) -> None:
    """megatron-core 0.19.2 declares >= 3.12 but ships cp311 wheels and runs on 3.11 (tools/install.sh installs it
    with --ignore-requires-python); the bundle asks pip to ignore Requires-Python for megatron-core alone."""
    done, _ = run_bundle(tmp_path, "--python-version", "3.11")
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "pip.log").read_text().splitlines()
    ignoring = [call for call in calls if "--ignore-requires-python" in call.split()]
    assert len(ignoring) == 1 and "megatron-core==0.19.2" in ignoring[0].split(), calls
    assert all(len([w for w in call.split() if "==" in w]) == 1 for call in ignoring), ignoring
    assert any("z3-solver==4.15.4.0" in call.split() for call in calls if call not in ignoring), calls
    assert all("--python-version 3.11" in call for call in calls)
    with tarfile.open(tmp_path / "out" / "site-cp311.tar.xz") as archive:
        assert "./stand_in.py" in archive.getnames()


@pytest.mark.parametrize("version", ["3.12.1", "312", "3.10", "3", "three"])
def test_a_python_version_the_bundle_cannot_name_or_serve_is_refused_before_pip(tmp_path: Path, version: str) -> None:
    done, platforms = run_bundle(tmp_path, "--python-version", version)
    assert done.returncode == 2, done.stderr
    assert "--python-version" in done.stderr and repr(version) in done.stderr and "3.11" in done.stderr
    assert not (tmp_path / "pip.log").exists() and platforms == []
