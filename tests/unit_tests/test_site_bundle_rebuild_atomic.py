"""``tools/build_site_bundle.sh`` and ``tools/te_site_bundle.sh`` keep the earlier bundle until the new one is
complete: a rebuild that fails while packing (a full disk, a lost network, Ctrl-C) leaves the earlier archive (or
parts) and its checksum file as they were, still passing ``sha256sum -c``, and no temporary file behind; a rebuild
that succeeds replaces both together.

Nothing is downloaded: ``python3`` is a stand-in whose ``-m pip download`` writes one small wheel of random content,
and the TE bundle packs a fake virtual environment. A stand-in ``xz`` ahead on PATH makes a run fail (or hang until
interrupted) after writing part of the archive.
"""

from __future__ import annotations

import hashlib
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit_tests.te_site_venv import fake_venv

TOOLS = Path(__file__).resolve().parents[2] / "tools"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="GNU tar, xz, split and sha256sum")

FAKE_PYTHON3 = """#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  while [ $# -gt 0 ]; do [ "$1" = "-d" ] && WHEELS="$2"; shift; done
  exec REAL_PYTHON -c "import random, sys, zipfile; wheel = zipfile.ZipFile(sys.argv[1], 'w'); \\
wheel.writestr('stand_in.py', random.randbytes(64).hex()); \\
wheel.writestr('stand_in-1.0.dist-info/METADATA', 'Name: stand-in\\n')" "$WHEELS/stand_in-1.0-py3-none-any.whl"
fi
exec REAL_PYTHON "$@"
"""

FAILING_XZ = """#!/usr/bin/env bash
head -c 4096 /dev/urandom
echo "xz: (stdout): Write error: No space left on device" >&2
exit 1
"""
"""Writes part of an archive, then fails as xz does on a full disk."""

HANGING_XZ = """#!/usr/bin/env bash
trap 'kill "$sleeper" 2>/dev/null; exit 130' INT
head -c 4096 /dev/urandom
sleep 60 & sleeper=$!
touch "$XZ_STARTED"
wait "$sleeper"
"""
"""Writes part of an archive, says so, then waits for the interrupt and stops on it (its trap: a child that ends
normally on SIGINT would leave bash to carry on)."""


def stand_ins(tmp_path: Path, xz: str | None) -> dict[str, str]:
    """Environment with the stand-in ``python3`` (and ``xz``, when given) first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    scripts = {"python3": FAKE_PYTHON3.replace("REAL_PYTHON", shlex.quote(sys.executable))}
    if xz is not None:
        scripts["xz"] = xz
    for name in ("python3", "xz"):
        (bin_dir / name).unlink(missing_ok=True)
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "XZ_STARTED": str(tmp_path / "xz-started")}


def site_bundle(tmp_path: Path, out: Path, xz: str | None = None) -> subprocess.CompletedProcess:
    """``build_site_bundle.sh --out out`` with stand-ins; output captured."""
    return subprocess.run(["bash", str(TOOLS / "build_site_bundle.sh"), "--out", str(out)], capture_output=True,
                          text=True, env=stand_ins(tmp_path, xz), timeout=120)


def te_bundle(tmp_path: Path, out: Path, xz: str | None = None) -> subprocess.CompletedProcess:
    """``te_site_bundle.sh`` on the fake environment under ``tmp_path/venv`` with 1 MiB parts; output captured."""
    return subprocess.run(["bash", str(TOOLS / "te_site_bundle.sh"), str(tmp_path / "venv"), str(out), "1"],
                          capture_output=True, text=True, env=stand_ins(tmp_path, xz), timeout=300)


def interrupted(tmp_path: Path, command: list[str]) -> int:
    """Runs ``command`` with the hanging ``xz``, and once that has written part of the archive sends SIGINT to the
    whole process group, as Ctrl-C in a terminal does; returns the exit status."""
    process = subprocess.Popen(command, env=stand_ins(tmp_path, HANGING_XZ), start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "xz-started").exists():
            assert process.poll() is None and time.monotonic() < deadline, "the run ended before packing"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
        return process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def snapshot(out: Path) -> dict[str, str]:
    """SHA-256 of every file directly in ``out`` (no folders), by name."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in out.iterdir() if path.is_file()}


def checks(out: Path, sums: str) -> bool:
    """``sha256sum -c sums`` in ``out`` passes."""
    return subprocess.run(["sha256sum", "-c", sums], cwd=out, capture_output=True).returncode == 0


def temporaries(out: Path, kept: set[str]) -> list[str]:
    """Entries of ``out`` besides ``kept`` (the finished bundle's files and the script's working folders)."""
    return sorted(path.name for path in out.iterdir() if path.name not in kept)


SITE_KEPT = {"site-cp312.tar.xz", "site-cp312.tar.xz.sha256", "wheels-cp312", "site-cp312"}


@pytest.mark.parametrize("how", ["failed", "interrupted"])
def test_a_site_bundle_rebuild_that_stops_keeps_the_earlier_bundle(tmp_path: Path, how: str) -> None:
    out = tmp_path / "out"
    first = site_bundle(tmp_path, out)
    assert first.returncode == 0, first.stderr
    earlier = {name: data for name, data in snapshot(out).items() if name.startswith("site-cp312.tar.xz")}
    assert set(earlier) == {"site-cp312.tar.xz", "site-cp312.tar.xz.sha256"}
    if how == "failed":
        again = site_bundle(tmp_path, out, FAILING_XZ)
        assert again.returncode != 0 and "No space left" in again.stderr
    else:
        assert interrupted(tmp_path, ["bash", str(TOOLS / "build_site_bundle.sh"), "--out", str(out)]) != 0
    assert {name: data for name, data in snapshot(out).items() if name.startswith("site-cp312.tar.xz")} == earlier
    assert checks(out, "site-cp312.tar.xz.sha256")
    assert temporaries(out, SITE_KEPT) == []


def test_a_site_bundle_rebuild_replaces_archive_and_checksum_together(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert site_bundle(tmp_path, out).returncode == 0
    earlier = (out / "site-cp312.tar.xz").read_bytes()
    again = site_bundle(tmp_path, out)  # the stand-in wheel's content is random: another archive
    assert again.returncode == 0, again.stderr
    assert (out / "site-cp312.tar.xz").read_bytes() != earlier
    assert (out / "site-cp312.tar.xz.sha256").read_text().split()[1] == "site-cp312.tar.xz"
    assert checks(out, "site-cp312.tar.xz.sha256")
    assert temporaries(out, SITE_KEPT) == []


def te_parts(out: Path) -> dict[str, str]:
    """SHA-256 of the TE bundle's files in ``out`` (its parts and checksum list), by name."""
    return {name: data for name, data in snapshot(out).items() if name.startswith("te-site.")}


@pytest.mark.parametrize("how", ["failed", "interrupted"])
def test_a_te_bundle_rebuild_that_stops_keeps_the_earlier_parts(tmp_path: Path, how: str) -> None:
    fake_venv(tmp_path / "venv")
    out = tmp_path / "out"
    first = te_bundle(tmp_path, out)
    assert first.returncode == 0, first.stderr
    earlier = te_parts(out)
    assert len(earlier) == 4  # three 1 MiB parts and te-site.sha256
    if how == "failed":
        again = te_bundle(tmp_path, out, FAILING_XZ)
        assert again.returncode != 0 and "No space left" in again.stderr
    else:
        command = ["bash", str(TOOLS / "te_site_bundle.sh"), str(tmp_path / "venv"), str(out), "1"]
        assert interrupted(tmp_path, command) != 0
    assert te_parts(out) == earlier
    assert checks(out, "te-site.sha256")
    assert temporaries(out, set(earlier)) == []


def test_a_te_bundle_rebuild_replaces_every_part_and_the_list_together(tmp_path: Path) -> None:
    """A rebuild in smaller steps (a library of other random bytes, fewer parts) leaves exactly the new parts, all
    listed and checked; an earlier bundle's extra part is gone."""
    site = fake_venv(tmp_path / "venv")
    out = tmp_path / "out"
    assert te_bundle(tmp_path, out).returncode == 0
    earlier = te_parts(out)
    (site / "transformer_engine" / "wheel_lib" / "libtransformer_engine.so").write_bytes(
        random.randbytes(random.randint(1_200_000, 1_900_000)))
    again = te_bundle(tmp_path, out)
    assert again.returncode == 0, again.stderr
    now = te_parts(out)
    listed = [line.split()[1] for line in (out / "te-site.sha256").read_text().splitlines()]
    assert sorted(now) == sorted([*listed, "te-site.sha256"]) and len(listed) == 2
    assert all(now[name] != earlier[name] for name in listed)
    assert checks(out, "te-site.sha256")
    assert temporaries(out, set(now)) == []
