"""``tools/build_site_bundle.sh`` empties its ``wheels-<tag>`` and ``site-<tag>`` folders on every run: it did so
to any folder of that name under ``--out``, so ``--out /tmp`` removed ``/tmp/site-cp312``, the folder its header
tells users to unpack the bundle into. Now only a folder it made (its mark inside), a new or an empty one is
emptied; another is refused in one line before anything is downloaded, and left as it was. The mark is not packed
into the bundle, so a bundle unpacked under ``--out`` is not taken for the script's own folder.

Nothing is downloaded: ``python3`` is the stand-in of ``site_bundle_helpers``.
"""

from __future__ import annotations

import random
import subprocess
import sys
import tarfile

import pytest

from tests.unit_tests.site_bundle_helpers import run_bundle

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="GNU tar, xz and sha256sum")


@pytest.mark.parametrize("folder", ["site-cp312", "wheels-cp312"])
def test_a_folder_of_the_users_own_under_out_is_refused_and_kept(tmp_path, folder):
    users = tmp_path / "out" / folder
    users.mkdir(parents=True)
    (users / "mine.py").write_text(content := random.randbytes(8).hex())
    done, platforms = run_bundle(tmp_path)  # run_bundle passes --out tmp_path/out
    assert done.returncode == 2 and platforms == []
    assert done.stderr.startswith(f"error: {users} holds files and no mark of this script")
    assert f"rm -rf {users}" in done.stderr and len(done.stderr.splitlines()) == 1
    assert (users / "mine.py").read_text() == content


def test_own_folders_are_rebuilt_and_an_unpacked_bundle_is_not_taken_for_them(tmp_path):
    """An empty folder is taken, the script's own folders are rebuilt on the next run; the header's unpack step, with
    ``--out`` the folder the bundle was unpacked in, is refused."""
    (tmp_path / "out" / "site-cp312").mkdir(parents=True)
    first, _ = run_bundle(tmp_path)
    assert first.returncode == 0, first.stderr
    (tmp_path / "bin").rename(tmp_path / "bin-before")
    again, _ = run_bundle(tmp_path)
    assert again.returncode == 0, again.stderr
    with tarfile.open(tmp_path / "out" / "site-cp312.tar.xz") as bundle:
        names = bundle.getnames()
    assert "./stand_in.py" in names and not any(".oellm" in name for name in names)
    unpacked = tmp_path / "unpacked"
    (unpacked / "site-cp312").mkdir(parents=True)
    subprocess.run(["tar", "-xJf", str(tmp_path / "out" / "site-cp312.tar.xz"), "-C", str(unpacked / "site-cp312")],
                   check=True)
    (tmp_path / "bin").rename(tmp_path / "bin-first")
    (tmp_path / "out").rename(tmp_path / "out-first")
    (tmp_path / "pip.log").unlink()
    unpacked.rename(tmp_path / "out")
    done, platforms = run_bundle(tmp_path)
    assert done.returncode == 2 and platforms == []
    assert (tmp_path / "out" / "site-cp312" / "stand_in.py").exists()
