"""The acceptance script's tests stage runs every GPU test: a ``gpu``-marked test in a folder the stage does not
name (the tests root, a new folder) would never run on the lent GPU, and its check would pass unseen."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests" / "unit_tests"


def stage_folders() -> set[Path]:
    """The test folders the tests stage of ``tools/gpu_acceptance.sh`` gives to pytest."""
    script = (ROOT / "tools" / "gpu_acceptance.sh").read_text()
    return {ROOT / folder for folder in re.findall(r"gpu_pytest \w+ (tests/unit_tests/\w+) ", script)}


def test_the_stage_names_test_folders() -> None:
    """The parse above finds the folders (it would otherwise make the next test pass on nothing)."""
    assert {path.name for path in stage_folders()} >= {"layers", "backends", "models", "training"}
    assert all(path.is_dir() for path in stage_folders())


def test_every_gpu_test_lies_in_a_folder_of_the_tests_stage() -> None:
    folders = stage_folders()
    marked = [path for path in TESTS.rglob("test_*.py")
              if re.search(r"\bpytest\.mark\.gpu\b", path.read_text()) and path != Path(__file__).resolve()]
    assert marked, "no gpu-marked test found: the marker's spelling changed?"
    outside = [str(path.relative_to(ROOT)) for path in marked if not any(path.is_relative_to(f) for f in folders)]
    assert not outside, f"GPU tests the acceptance stage never runs: {outside}; move them into one of {sorted(folders)}"
