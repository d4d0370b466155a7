"""``tools/te_site_bundle.sh``: bad input refused with a clear message; a bundle's parts reassemble into the packed
site-packages tree, byte for byte.

A stand-in virtual environment holds small fake copies of every package and distribution the script packs, and a
torch distribution record (the version the script reports); the bundle is cut into 1 MiB parts.
"""

from __future__ import annotations

import hashlib
import io
import random
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.unit_tests.te_site_venv import fake_venv

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "te_site_bundle.sh"


def run_script(*args: str | Path) -> subprocess.CompletedProcess:
    """The script with ``args``; output captured."""
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("venv", ["no-venv", "missing/parent/venv"])
def test_missing_environment_is_refused(tmp_path: Path, venv: str) -> None:
    """Also a VENV_DIR under a missing folder, which printed realpath's own error instead of naming te_cpu_env.sh."""
    result = run_script(tmp_path / venv, tmp_path / "out")
    assert result.returncode == 2
    assert result.stderr == f"error: {tmp_path / venv} has no bin/python (make it with tools/te_cpu_env.sh)\n"
    assert not (tmp_path / "out").exists()


def _remove_extension(site: Path) -> None:
    for extension in (site / "transformer_engine" / "wheel_lib").glob("transformer_engine_torch*"):
        extension.unlink()


def _extension_for_another_python(site: Path) -> None:
    wheel_lib = site / "transformer_engine" / "wheel_lib"
    for extension in wheel_lib.glob("transformer_engine_torch*"):
        extension.rename(wheel_lib / "transformer_engine_torch.cpython-39-x86_64-linux-gnu.so")


BROKEN_ENVIRONMENTS = {
    "no compiled extension": (_remove_extension, "no transformer_engine_torch compiled for"),
    "extension for another python": (_extension_for_another_python, "no transformer_engine_torch compiled for cp3"),
    "a requirement missing": (lambda site: shutil.rmtree(site / "nvdlfw_inspect"), "nvdlfw_inspect missing"),
    "no torch": (lambda site: shutil.rmtree(site / "torch-2.11.0.dist-info"), "no torch in"),
}
"""How each refused environment is broken from the complete fake one, and the message the script gives."""


@pytest.mark.parametrize("case", BROKEN_ENVIRONMENTS)
def test_broken_environment_is_refused(tmp_path: Path, case: str) -> None:
    breakage, message = BROKEN_ENVIRONMENTS[case]
    breakage(fake_venv(tmp_path / "venv"))
    result = run_script(tmp_path / "venv", tmp_path / "out")
    assert result.returncode == 2
    assert message in result.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="GNU tar, split and sha256sum")
def test_parts_reassemble_into_the_packed_tree(tmp_path: Path) -> None:
    site = fake_venv(tmp_path / "venv")
    result = run_script(tmp_path / "venv", tmp_path / "out", 1)
    assert result.returncode == 0, result.stderr
    parts = sorted((tmp_path / "out").glob("te-site.tar.xz.part-*"))
    assert len(parts) == 3, [p.name for p in parts]
    assert all(p.stat().st_size <= 1024 * 1024 for p in parts)
    checked = subprocess.run(["sha256sum", "-c", "te-site.sha256"], cwd=tmp_path / "out", capture_output=True,
                             text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "transformer_engine 2.20.2" in result.stdout and "torch 2.11.0" in result.stdout

    archive = tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts)), mode="r:xz")
    members = {m.name: m for m in archive.getmembers() if m.isfile()}
    expected = {str(path.relative_to(site)) for path in site.rglob("*")
                if path.is_file() and "__pycache__" not in path.parts and not path.parts[-2].startswith("torch-")}
    assert set(members) == expected
    for name in ("transformer_engine/wheel_lib/libtransformer_engine.so", "cudnn/__init__.py"):
        packed = archive.extractfile(members[name]).read()
        assert hashlib.sha256(packed).digest() == hashlib.sha256((site / name).read_bytes()).digest()


@pytest.mark.parametrize("part_mib", ["58M", "0", "-1", "1.5", "abc"])
def test_a_bad_part_size_is_refused_before_the_earlier_bundle_is_removed(tmp_path: Path, part_mib: str) -> None:
    """A part size split cannot use is refused at once, and the parts of an earlier bundle in OUT_DIR stay."""
    fake_venv(tmp_path / "venv")
    out = tmp_path / "out"
    out.mkdir()
    earlier = {name: random.randbytes(64) for name in ("te-site.tar.xz.part-aa", "te-site.tar.xz.part-ab")}
    for name, data in earlier.items():
        (out / name).write_bytes(data)
    result = run_script(tmp_path / "venv", out, part_mib)
    assert result.returncode == 2 and "PART_MIB" in result.stderr and part_mib in result.stderr, result.stderr
    assert {path.name: path.read_bytes() for path in out.iterdir()} == earlier


def documented_unpack(out: Path, target: Path) -> str:
    """The unpack commands of the script's header (the lines after "On the target:" up to the blank comment line),
    with OUT_DIR and /tmp/te-site replaced by ``out`` and ``target``: the test runs what a user pastes."""
    header = [line[1:] for line in SCRIPT.read_text().splitlines() if line.startswith("#")]
    start = next(i for i, line in enumerate(header) if line.rstrip().endswith("On the target:")) + 2
    end = header.index("", start)
    commands = "\n".join(header[start:end])
    return commands.replace("OUT_DIR", shlex.quote(str(out))).replace("/tmp/te-site", shlex.quote(str(target)))


@pytest.mark.skipif(sys.platform != "linux", reason="GNU tar, split, xargs and sha256sum")
def test_the_documented_unpack_ignores_a_part_left_by_an_earlier_bundle(tmp_path: Path) -> None:
    """A longer earlier bundle's last part in OUT_DIR (landed there on the target before this bundle's three) is
    neither joined into the archive nor able to fail the unpack; the unpacked tree is the packed one."""
    site = fake_venv(tmp_path / "venv")
    out = tmp_path / "out"
    result = run_script(tmp_path / "venv", out, 1)
    assert result.returncode == 0, result.stderr
    assert len(list(out.glob("te-site.tar.xz.part-*"))) == 3
    (out / "te-site.tar.xz.part-ad").write_bytes(random.randbytes(random.randint(1000, 5000)))
    target = tmp_path / "te-site"
    unpacked = subprocess.run(["bash", "-euo", "pipefail", "-c", documented_unpack(out, target)],
                              capture_output=True, text=True, timeout=120)
    assert unpacked.returncode == 0, unpacked.stdout + unpacked.stderr
    name = "transformer_engine/wheel_lib/libtransformer_engine.so"
    assert (target / name).read_bytes() == (site / name).read_bytes()
    assert (target / "cudnn" / "__init__.py").read_text() == "NAME = 'cudnn'\n"


@pytest.mark.skipif(sys.platform != "linux", reason="GNU tar, split, xargs and sha256sum")
def test_the_documented_unpack_leaves_nothing_of_an_earlier_bundle(tmp_path: Path) -> None:
    """Unpacked into a folder an earlier bundle left, the two would mix (a package's files of both versions): the
    documented commands empty the folder first."""
    fake_venv(tmp_path / "venv")
    out = tmp_path / "out"
    assert run_script(tmp_path / "venv", out, 1).returncode == 0
    target = tmp_path / "te-site"
    stale = target / "transformer_engine" / f"stale_{random.randint(0, 10**6)}.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("left by an earlier bundle\n")
    unpacked = subprocess.run(["bash", "-euo", "pipefail", "-c", documented_unpack(out, target)],
                              capture_output=True, text=True, timeout=120)
    assert unpacked.returncode == 0, unpacked.stdout + unpacked.stderr
    assert not stale.exists() and (target / "transformer_engine" / "wheel_lib" / "libtransformer_engine.so").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="GNU tar, split, xargs and sha256sum")
def test_the_documented_unpack_stops_at_a_cut_part(tmp_path: Path) -> None:
    """A part cut on the way fails the checksum line, and nothing is unpacked after it."""
    fake_venv(tmp_path / "venv")
    out = tmp_path / "out"
    assert run_script(tmp_path / "venv", out, 1).returncode == 0
    part = random.choice(sorted(out.glob("te-site.tar.xz.part-*")))
    part.write_bytes(part.read_bytes()[:-1])
    target = tmp_path / "te-site"
    unpacked = subprocess.run(["bash", "-c", documented_unpack(out, target)], capture_output=True, text=True,
                              timeout=120)
    assert "FAILED" in unpacked.stdout + unpacked.stderr
    assert not target.exists()  # the export line still runs (its status is the block's); the unpack did not
