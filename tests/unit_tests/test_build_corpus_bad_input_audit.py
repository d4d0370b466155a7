"""``tools/build_corpus.py`` refuses, in one line before any work, what a bad-input audit found it mishandling: a
``--max-mb`` whose byte count overflows (``1e303``: a traceback), an ``--output-prefix`` ending in ``/.`` (it wrote
``out.bin`` beside the folder ``out``), an ``--extra`` that is a folder (called "no such file"), and an
``--overwrite`` onto a ``.bin``/``.idx``/``.json`` that is a folder (it failed only after the whole build)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.unit_tests.build_corpus_helpers import run_tool


def one_line_refusal(stderr: str) -> str:
    """The error line of argparse's refusal (after its usage lines), checked to be the only one."""
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert stderr.startswith("usage:") and "Traceback" not in stderr and len(errors) == 1, stderr
    assert errors[0] == stderr.splitlines()[-1] and errors[0].startswith("build_corpus.py: error: "), stderr
    return errors[0]


@pytest.mark.parametrize("exponent", [303, 306])
def test_a_max_mb_whose_byte_count_overflows_is_refused(tmp_path: Path, exponent: int) -> None:
    max_mb = f"{random.randint(1, 9)}e{exponent}"
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", max_mb)
    assert done.returncode == 2 and "--max-mb must be" in one_line_refusal(done.stderr)
    assert not (tmp_path / "corpus").exists()


def test_a_prefix_ending_in_a_dot_component_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "text.txt"
    text.write_text(random.randbytes(32).hex())
    (tmp_path / "out").mkdir()
    done = run_tool(f"{tmp_path}/out/.", "--max-mb", "0", "--extra", str(text))
    assert done.returncode == 2 and "names no file prefix" in one_line_refusal(done.stderr)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out", "text.txt"]


def test_an_extra_folder_is_called_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / f"texts-{random.randint(0, 10**6)}"
    folder.mkdir()
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", "0", "--extra", str(folder))
    line = one_line_refusal(done.stderr)
    assert done.returncode == 2 and "a folder" in line and str(folder) in line and "no such file" not in line


@pytest.mark.parametrize("suffix", [".bin", ".idx", ".json"])
def test_overwriting_a_folder_at_the_prefix_is_refused_before_the_build(tmp_path: Path, suffix: str) -> None:
    text = tmp_path / "text.txt"
    text.write_text(random.randbytes(32).hex())
    prefix = tmp_path / "d" / "a"
    Path(f"{prefix}{suffix}").mkdir(parents=True)
    done = run_tool(prefix, "--max-mb", "0", "--extra", str(text), "--overwrite")
    line = one_line_refusal(done.stderr)
    assert done.returncode == 2 and f"{prefix}{suffix} is a folder" in line
    assert sorted(path.name for path in prefix.parent.iterdir()) == [f"a{suffix}"]
