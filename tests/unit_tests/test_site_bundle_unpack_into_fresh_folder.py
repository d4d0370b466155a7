"""The node-side commands for the offline site bundle, as ``tools/build_site_bundle.sh``'s header and README's
"Air-gapped nodes" give them, run as written (with /tmp/ moved under the test's folder). They unpacked a new bundle
over the folder of an earlier one, which then held two versions of a package (two dist-infos), and unpacked a bundle
whose checksum failed. Now they unpack into a fresh folder named after the bundle, only once ``sha256sum -c`` passes."""

from __future__ import annotations

import io
import random
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = "site-cp312.tar.xz"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="GNU tar, xz and sha256sum")


def header_text() -> str:
    """build_site_bundle.sh's header comment, without its ``#`` marks."""
    lines = (ROOT / "tools" / "build_site_bundle.sh").read_text().splitlines()[1:]
    return "\n".join(line[2:] for line in lines[:next(i for i, line in enumerate(lines) if not line.startswith("#"))])


def readme_text() -> str:
    """README's "Air-gapped nodes" section."""
    text = (ROOT / "README.md").read_text()
    return text[text.index("### Air-gapped nodes"):].split("\n## ", 1)[0]


def unpack_commands(text: str) -> str:
    """The commands from the one with ``sha256sum -c`` up to the ``pip check`` line (not included)."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if "sha256sum -c" in line)
    last = next(i for i in range(first, len(lines)) if "pip check" in lines[i])
    commands = [lines[first][lines[first].index("sha256sum -c"):], *lines[first + 1:last]]
    return "\n".join(commands)


def write_bundle(folder: Path, version: str) -> None:
    """A bundle holding a package at ``version`` (its module and dist-info), with its checksum file, in ``folder``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as archive:
        for name, data in [("./pkg/__init__.py", f"__version__ = {version!r}\n"),
                           (f"./pkg-{version}.dist-info/METADATA", f"Name: pkg\nVersion: {version}\n")]:
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data.encode()))
    (folder / BUNDLE).write_bytes(buffer.getvalue())
    summed = subprocess.run(["sha256sum", BUNDLE], cwd=folder, capture_output=True, text=True, check=True)
    (folder / f"{BUNDLE}.sha256").write_text(summed.stdout)


def unpack(commands: str, folder: Path, node: Path) -> tuple[int, Path]:
    """``commands`` run by bash in ``folder`` with /tmp/ as ``node``; their exit status and the first PYTHONPATH
    entry they exported (the unpacked bundle)."""
    script = ("{\n" + commands.replace("/tmp/", f"{node}/") + "\n} >&2\nstatus=$?\n"
              'printf %s "${PYTHONPATH%%:*}"\nexit $status\n')
    done = subprocess.run(["bash", "-c", script], cwd=folder, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    return done.returncode, Path(done.stdout)


def _carried_and_node(tmp_path: Path) -> tuple[Path, Path]:
    """The folder the bundle was carried into and the node's folder the commands unpack it under."""
    folder, node = tmp_path / "carried", tmp_path / "node"
    folder.mkdir()
    node.mkdir()
    return folder, node


@pytest.mark.parametrize("source", [header_text, readme_text])
def test_a_new_bundle_replaces_the_earlier_one(tmp_path: Path, source) -> None:
    commands = unpack_commands(source())
    folder, node = _carried_and_node(tmp_path)
    old, new = sorted(random.sample(range(1, 100), 2))
    write_bundle(folder, f"1.{old}")
    status, site = unpack(commands, folder, node)
    assert status == 0 and site.parent == node
    assert sorted(path.name for path in site.glob("*.dist-info")) == [f"pkg-1.{old}.dist-info"]
    write_bundle(folder, f"1.{new}")
    assert unpack(commands, folder, node) == (0, site)
    assert sorted(path.name for path in site.glob("*.dist-info")) == [f"pkg-1.{new}.dist-info"]
    assert (site / "pkg" / "__init__.py").read_text() == f"__version__ = '1.{new}'\n"
    assert site.name == BUNDLE.removesuffix(".tar.xz")


@pytest.mark.parametrize("source", [header_text, readme_text])
def test_a_bundle_failing_its_checksum_is_not_unpacked(tmp_path: Path, source) -> None:
    """A bundle changed on the way (another whole archive under its name): the folder keeps the bundle that checked."""
    commands = unpack_commands(source())
    folder, node = _carried_and_node(tmp_path)
    version = f"2.{random.randint(0, 99)}"
    write_bundle(folder, version)
    status, site = unpack(commands, folder, node)
    assert status == 0
    checksum = (folder / f"{BUNDLE}.sha256").read_text()
    write_bundle(folder, f"3.{random.randint(0, 99)}")
    (folder / f"{BUNDLE}.sha256").write_text(checksum)
    status, _ = unpack(commands, folder, node)
    assert status != 0
    assert sorted(path.name for path in site.glob("*.dist-info")) == [f"pkg-{version}.dist-info"]
