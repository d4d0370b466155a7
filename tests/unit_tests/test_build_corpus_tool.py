"""``tools/build_corpus.py``: input that would give an empty or no corpus is refused with a message naming the flag
(a non-finite ``--max-mb`` too, instead of a traceback), before a training job would find out, and a corpus already at
the prefix is left as it was (a build without documents used to replace it with an empty one); a valid call still
writes the corpus."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "build_corpus.py"
SUFFIXES = (".bin", ".idx", ".json")


def run_tool(prefix: Path, *args: str) -> subprocess.CompletedProcess:
    """The tool with ``--output-prefix prefix`` and ``args``, this checkout first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, str(SCRIPT), "--output-prefix", str(prefix), *args], capture_output=True,
                          text=True, env=env, timeout=300, check=False)


def test_a_missing_extra_file_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / f"missing-{random.randint(0, 10**6)}.txt"
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", "0.01", "--extra", str(missing))
    assert done.returncode == 2 and "--extra" in done.stderr and str(missing) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("max_mb", ["0", "-1"])
def test_no_source_at_all_is_refused(tmp_path: Path, max_mb: str) -> None:
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", max_mb)
    assert done.returncode == 2 and "--max-mb" in done.stderr, done.stderr
    assert not (tmp_path / "corpus").exists()


def test_extra_files_without_text_give_an_error_not_an_empty_corpus(tmp_path: Path) -> None:
    empty, binary = tmp_path / "empty.txt", tmp_path / "binary.dat"
    empty.write_text("")
    binary.write_bytes(b"\xff\xfe" + os.urandom(64))
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", "0", "--extra", str(empty), str(binary))
    assert done.returncode == 1 and "no document" in done.stderr, done.stdout + done.stderr


def test_an_extra_text_file_is_one_document(tmp_path: Path) -> None:
    text = tmp_path / "text.txt"
    words = " ".join(random.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(random.randint(50, 200)))
    text.write_text(words)
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", "0", "--extra", str(text))
    assert done.returncode == 0, done.stderr
    assert f"1 documents, {len(words.encode()) + 1} tokens" in done.stdout


def test_a_build_without_documents_keeps_the_earlier_corpus(tmp_path: Path) -> None:
    text = tmp_path / "text.txt"
    text.write_text(" ".join(random.choice(["alpha", "beta", "gamma"]) for _ in range(random.randint(20, 200))))
    prefix = tmp_path / "corpus" / "text"
    built = run_tool(prefix, "--max-mb", "0", "--extra", str(text))
    assert built.returncode == 0, built.stderr
    earlier = {suffix: Path(f"{prefix}{suffix}").read_bytes() for suffix in SUFFIXES}
    empty, binary = tmp_path / "empty.txt", tmp_path / "binary.dat"
    empty.write_text("")
    binary.write_bytes(b"\xff\xfe" + os.urandom(random.randint(16, 256)))
    failed = run_tool(prefix, "--max-mb", "0", "--extra", str(empty), str(binary))
    assert failed.returncode == 1 and "no document" in failed.stderr, failed.stdout + failed.stderr
    assert {suffix: Path(f"{prefix}{suffix}").read_bytes() for suffix in SUFFIXES} == earlier
    assert sorted(path.name for path in prefix.parent.iterdir()) == [f"text{suffix}" for suffix in SUFFIXES]


def test_a_build_without_documents_writes_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", "0", "--extra", str(empty))
    assert done.returncode == 1 and "no document" in done.stderr, done.stderr
    assert not (tmp_path / "corpus").exists()


@pytest.mark.parametrize("max_mb", ["nan", "inf", "-inf"])
def test_a_non_finite_max_mb_is_refused(tmp_path: Path, max_mb: str) -> None:
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", max_mb)
    assert done.returncode == 2 and "--max-mb" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "corpus").exists()
