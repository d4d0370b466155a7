"""``tools/build_site_bundle.sh``: a ``--python-version`` with a leading zero (``3.011`` named the bundle
``site-cp3011``) and an ``--out`` that is a file (mkdir's ``cannot create directory``, exit 1) are refused in one
line before anything is downloaded; the file is left as it was."""

from __future__ import annotations

import random

from tests.unit_tests.site_bundle_helpers import run_bundle


def test_a_version_with_a_leading_zero_is_refused(tmp_path):
    done, platforms = run_bundle(tmp_path, "--python-version", "3.011")
    assert done.returncode == 2 and "--python-version must be the node's MAJOR.MINOR" in done.stderr
    assert "'3.011'" in done.stderr and platforms == []


def test_an_out_that_is_a_file_is_refused_and_kept(tmp_path):
    (tmp_path / "out").write_text(content := random.randbytes(8).hex())
    done, platforms = run_bundle(tmp_path)  # run_bundle passes --out tmp_path/out
    assert done.returncode == 2 and done.stderr.startswith(f"error: --out {tmp_path / 'out'} is a file")
    assert (tmp_path / "out").read_text() == content and platforms == []
