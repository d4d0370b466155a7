"""``tools/build_corpus.py --overwrite`` where ``PREFIX.bin`` is a symbolic link to a folder: built, the link replaced
by the corpus file and the folder it pointed to left as it was. Only a folder at the prefix itself is refused (the
final rename cannot replace it); a link to one is renamed over like any file (mutation audit of that check)."""

from __future__ import annotations

import random

from tests.unit_tests.build_corpus_helpers import SUFFIXES, run_tool


def test_a_link_to_a_folder_is_replaced_with_overwrite(tmp_path):
    folder = tmp_path / f"kept{random.randrange(1000)}"
    folder.mkdir()
    data = random.randbytes(random.randint(1, 64))
    (folder / "inside").write_bytes(data)
    prefix = tmp_path / "corpus"
    link = tmp_path / "corpus.bin"
    link.symlink_to(folder)
    done = run_tool(prefix, "--max-mb", "0.01", "--overwrite")
    assert done.returncode == 0, done.stderr
    assert not link.is_symlink() and link.is_file() and link.stat().st_size > 0
    assert all((tmp_path / f"corpus{suffix}").is_file() for suffix in SUFFIXES)
    assert sorted(path.name for path in folder.iterdir()) == ["inside"] and (folder / "inside").read_bytes() == data
