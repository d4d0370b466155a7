"""``tools/build_site_bundle.sh`` empties its ``wheels-<tag>`` and ``site-<tag>`` folders with ``rm -rf``, then makes
them again: those steps were an ``&&`` list, which ``set -e`` does not stop on, so an ``rm`` that failed (a file of
another user, NFS's ``.nfsXXXX`` of an open file) left an earlier run's wheels and files to land in the bundle, and
an ``--out`` that cannot be made printed mkdir's error and went on to download. Each now stops the run in one
``error:`` line naming the folder, exit 1, the earlier bundle left as it was.

Nothing is downloaded: ``python3`` is the stand-in of ``site_bundle_helpers``; a stand-in ``rm`` ahead on PATH fails
for one folder, as rm does on a file it may not remove.
"""

from __future__ import annotations

import os
import random
import shlex
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from tests.unit_tests.site_bundle_helpers import run_bundle

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="GNU tar, xz and sha256sum")

FAILING_RM = """#!/usr/bin/env bash
for arg; do
  [ "$arg" = "$FAKE_RM_FAIL" ] && { echo "rm: cannot remove '$arg/.nfs0000000001': Device or resource busy" >&2
                                    exit 1; }
done
exec REAL_RM "$@"
"""
"""An ``rm`` that fails for the folder ``$FAKE_RM_FAIL``, leaving it as it was, and is the real one otherwise."""


def fail_rm_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Put :data:`FAILING_RM`, failing for ``folder``, first on PATH."""
    stand_in = tmp_path / "rm-bin" / "rm"
    stand_in.parent.mkdir()
    stand_in.write_text(FAILING_RM.replace("REAL_RM", shlex.quote(shutil.which("rm"))))
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_RM_FAIL", str(folder))


@pytest.mark.parametrize("kind", ["wheels", "site"])
def test_a_folder_rm_cannot_empty_stops_the_run_before_its_files_are_packed(tmp_path, monkeypatch, kind):
    """An earlier run's wheel (other pins) or unpacked file left in the folder: the header promises it never lands in
    the bundle, and it did, the script exiting 0."""
    first, _ = run_bundle(tmp_path)
    assert first.returncode == 0, first.stderr
    out = tmp_path / "out"
    bundle = (out / "site-cp312.tar.xz").read_bytes()
    stale = f"stale_{random.randbytes(4).hex()}"
    folder = out / f"{kind}-cp312"
    if kind == "wheels":
        with zipfile.ZipFile(folder / f"{stale}-0.9-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"{stale}.py", "")
    else:
        (folder / f"{stale}.py").write_text("")
    (tmp_path / "bin").rename(tmp_path / "bin-first")
    (tmp_path / "pip.log").unlink()
    fail_rm_for(tmp_path, monkeypatch, folder)
    done, platforms = run_bundle(tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (f"error: cannot empty and remake {folder} (rm: cannot remove '{folder}/.nfs0000000001': "
                           "Device or resource busy); remove it by hand or give another --out\n")
    assert (platforms == []) == (kind == "wheels"), platforms  # the wheels folder is emptied before the downloads
    assert (out / "site-cp312.tar.xz").read_bytes() == bundle


def test_an_out_that_cannot_be_made_stops_before_downloading(tmp_path):
    """``--out /proc/nope`` printed mkdir's error and went on to pip download into a folder that is not there."""
    blocker = tmp_path / "a-file"
    blocker.write_text(random.randbytes(8).hex())
    out = blocker / "out"
    done, platforms = run_bundle(tmp_path, out=out)
    assert done.returncode == 1 and platforms == [], done.stderr
    assert done.stderr.startswith(f"error: cannot empty and remake {out}/wheels-cp312 (mkdir: "), done.stderr
    assert done.stderr.endswith("; remove it by hand or give another --out\n") and len(done.stderr.splitlines()) == 1
