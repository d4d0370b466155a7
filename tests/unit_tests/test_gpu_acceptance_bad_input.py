"""``tools/gpu_acceptance.sh`` given a machine or folders it cannot work with: no CUDA device (every GPU test skipped,
pytest returning 0, the acceptance passing), relative ``OELLM_WORK`` / ``OELLM_KERNEL_CACHE`` (read after the script
moved to the repository root), an OUT_DIR inside ``OELLM_WORK`` (deleted by a stage, the script exiting 0) or
overlapping ``OELLM_KERNEL_CACHE`` (the cache packed into the logs and deleted), and a cache in a folder of
``OELLM_WORK`` a stage deletes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.unit_tests.gpu_acceptance_helpers import ROOT, run_acceptance

NO_TORCH_PYTHON3 = """#!/usr/bin/env bash
echo "$PWD|$*" >> "$FAKE_LOG"
echo "ModuleNotFoundError: No module named 'torch'" >&2
exit 1
"""
"""A ``python3`` without torch: the CUDA check fails with an import error."""
REMOVING_PYTHON3 = """#!/usr/bin/env bash
[[ $1 == -c ]] && echo "CUDA devices: 1"
[[ "$*" == *" bench "* ]] && rm -rf "$FAKE_REMOVE"
exit 0
"""
"""A ``python3`` on a GPU machine whose ``oellm bench`` removes the folder ``$FAKE_REMOVE``."""
TEST_FOLDERS = ("layers", "patches", "backends", "training", "bench", "models")


def test_a_machine_without_a_cuda_device_is_refused_before_any_stage(tmp_path: Path) -> None:
    """A CPU-only torch skipped every GPU test, pytest returned 0 and the acceptance passed."""
    stages = random.choice(["tests", "tests,bench", "train,interrupt"])
    done, calls = run_acceptance(tmp_path, tmp_path / "out", stages, environment={"FAKE_CUDA_DEVICES": "0"})
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("error: python3's torch sees no CUDA device (CUDA devices: 0): the GPU tests would all be "
                           "skipped; run this on a machine with a GPU\n")
    assert [call.split("|", 1)[1].split(" ", 1)[0] for call in calls] == ["-c"], calls
    assert not (tmp_path / "out").exists()


def test_a_python3_without_torch_is_refused_with_its_error(tmp_path: Path) -> None:
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "tests", fake_python3=NO_TORCH_PYTHON3)
    assert done.returncode == 2 and len(calls) == 1, (done.stderr, calls)
    assert done.stderr.startswith("error: python3's torch sees no CUDA device (ModuleNotFoundError: No module named "
                                  "'torch'): "), done.stderr


@pytest.mark.parametrize("result", ["5 skipped in 0.31s", "4 skipped, 2 deselected in 0.20s",
                                    "2 xpassed, 1 skipped in 0.12s", "===== 7 deselected in 0.05s ====="])
def test_a_test_folder_where_nothing_passed_fails_the_acceptance(tmp_path: Path, result: str) -> None:
    """Every test skipped or deselected returns 0: the folder's GPU tests did not run, so it counts as failed."""
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", "tests", environment={"FAKE_PYTEST_RESULT": result})
    assert done.returncode == 1, done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    for folder in TEST_FOLDERS:
        assert f"pytest {folder}: rc 1 (no test passed) {result}\n" in summary, summary
    assert f"acceptance failed: {len(TEST_FOLDERS)} run(s) with a non-zero rc" in summary, summary


def test_relative_work_and_cache_folders_are_read_from_the_callers_folder(tmp_path: Path) -> None:
    """They were used after the script moved to the repository root: corpora and runs landed in the checkout."""
    names = {"OELLM_WORK": f"work-{random.randbytes(4).hex()}", "OELLM_KERNEL_CACHE": f"cache-{random.randbytes(4).hex()}"}
    try:
        done, calls = run_acceptance(tmp_path, tmp_path / "out", "train", environment=names)
        assert done.returncode == 0, done.stderr
        work, cache = (tmp_path.resolve() / names[key] for key in ("OELLM_WORK", "OELLM_KERNEL_CACHE"))
        [build] = [call for call in calls if "tools/build_corpus.py" in call]
        assert f" --output-prefix {work}/corpus/stdlib " in build, build
        assert (work / ".oellm-acceptance-work").is_file() and cache.is_dir()
        assert not any((ROOT / name).exists() for name in names.values())
    finally:  # without the fix the folders land in the checkout: leave it clean
        for name in names.values():
            for path in sorted((ROOT / name).rglob("*"), reverse=True) if (ROOT / name).exists() else []:
                path.rmdir() if path.is_dir() else path.unlink()
            if (ROOT / name).exists():
                (ROOT / name).rmdir()


def test_a_relative_work_folder_of_other_files_is_named_by_its_absolute_path(tmp_path: Path) -> None:
    """``OELLM_WORK=docs`` was checked against the repository's docs/ and the refusal said ``rm -rf docs``, which the
    user reads in their own folder."""
    (tmp_path / "docs").mkdir()
    keep = tmp_path / "docs" / "notes.txt"
    content = random.randbytes(16).hex()
    keep.write_text(content)
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "train", environment={"OELLM_WORK": "docs"})
    work = tmp_path.resolve() / "docs"
    assert done.returncode == 2 and f"error: OELLM_WORK {work} holds files" in done.stderr, done.stderr
    assert f"remove it: rm -rf {work}\n" in done.stderr and keep.read_text() == content and calls == []


@pytest.mark.parametrize(("out", "work"), [("work", "work"), ("work/short", "work"), ("out", "out/work")])
def test_an_out_dir_overlapping_the_work_folder_is_refused(tmp_path: Path, out: str, work: str) -> None:
    """``OUT_DIR=$OELLM_WORK/short``: the resume stage's ``rm -rf $OELLM_WORK/short`` deleted the output and the script
    exited 0; an OUT_DIR holding OELLM_WORK would pack and delete the corpora and runs."""
    out_dir, work_dir = tmp_path / out, tmp_path / work
    done, calls = run_acceptance(tmp_path, out_dir, "resume", environment={"OELLM_WORK": str(work_dir)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: OUT_DIR {out_dir.resolve()} and OELLM_WORK {work_dir.resolve()} overlap ")
    assert calls == [] and not out_dir.exists() and not work_dir.exists()


@pytest.mark.parametrize(("out", "cache"), [("cache", "cache"), ("out", "out/cache"), ("cache/tilelang/out", "cache"),
                                            ("cache/triton", "cache")])
def test_an_out_dir_overlapping_the_kernel_cache_is_refused(tmp_path: Path, out: str, cache: str) -> None:
    """``OELLM_KERNEL_CACHE=$OUT_DIR/cache``: the end packed the cache into logs.tar.xz and deleted it before making
    kernel-cache.tar.xz, and the script exited 0; an OUT_DIR in the cache's tilelang/ put the logs into that archive,
    and one that is its triton/ deleted the compiled kernels and autotuning choices before they were archived."""
    out_dir, cache_dir = tmp_path / out, tmp_path / cache
    stages = random.choice(["tests", "bench", "train,resume"])
    done, calls = run_acceptance(tmp_path, out_dir, stages, environment={"OELLM_KERNEL_CACHE": str(cache_dir)})
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"error: OUT_DIR {out_dir.resolve()} and OELLM_KERNEL_CACHE {cache_dir.resolve()} overlap "
                           "(the end packs and deletes OUT_DIR's contents, then archives the cache's tilelang/ and "
                           "triton/ autotuning choices); give OUT_DIR apart from them\n")
    assert calls == [] and not out_dir.exists() and not cache_dir.exists()


@pytest.mark.parametrize(("cache", "work"), [("work/runs/cache", "work"), ("work/interrupt", "work"),
                                             ("cache", "cache/tilelang/work"), ("cache", "cache/tilelang")])
def test_a_kernel_cache_overlapping_the_work_folders_deleted_parts_is_refused(tmp_path: Path, cache: str,
                                                                              work: str) -> None:
    """``OELLM_KERNEL_CACHE=$OELLM_WORK/runs/cache``: the train stage's ``rm -rf $OELLM_WORK/runs`` deleted the cache
    it was using; a work folder in the cache's tilelang/ put the corpora and checkpoints into kernel-cache.tar.xz."""
    cache_dir, work_dir, out_dir = tmp_path / cache, tmp_path / work, tmp_path / "out"
    stages = random.choice(["tests", "train", "resume,interrupt"])
    done, calls = run_acceptance(tmp_path, out_dir, stages,
                                 environment={"OELLM_KERNEL_CACHE": str(cache_dir), "OELLM_WORK": str(work_dir)})
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"error: OELLM_KERNEL_CACHE {cache_dir.resolve()} and OELLM_WORK {work_dir.resolve()} "
                           "overlap (the stages delete OELLM_WORK's runs/, short/ and interrupt/, and the end archives "
                           "the cache's tilelang/); give them apart\n")
    assert calls == [] and not cache_dir.exists() and not work_dir.exists()


@pytest.mark.parametrize(("out", "cache", "work"), [("scratch/out", "scratch", "scratch/acceptance"),
                                                    ("out", "work/cache", "work"), ("out", "same", "same"),
                                                    ("out", "work/corpus", "work"),
                                                    ("cache/triton/out", "cache", "cache/triton/work")])
def test_folders_that_share_a_parent_but_lose_nothing_are_accepted(tmp_path: Path, out: str, cache: str,
                                                                   work: str) -> None:
    """One scratch folder holding the cache, OUT_DIR and the work folder loses no file: only the cache's tilelang/
    and triton/'s autotuning choices are archived, only the work folder's runs/, short/ and interrupt/ deleted
    (its corpus/ is written over file by file)."""
    out_dir, cache_dir, work_dir = tmp_path / out, tmp_path / cache, tmp_path / work
    done, calls = run_acceptance(tmp_path, out_dir, "train",
                                 environment={"OELLM_KERNEL_CACHE": str(cache_dir), "OELLM_WORK": str(work_dir)})
    assert done.returncode == 0, done.stderr
    assert any("tools/build_corpus.py" in call for call in calls), calls
    assert (out_dir / "summary.txt").is_file() and (work_dir / ".oellm-acceptance-work").is_file()


def test_a_missing_summary_fails_the_acceptance(tmp_path: Path) -> None:
    """With OUT_DIR removed during the run the failed-run count came back empty, ``[ "" -gt 0 ]`` erred and the
    script exited 0."""
    out_dir = tmp_path / "out"
    done, _calls = run_acceptance(tmp_path, out_dir, "bench", fake_python3=REMOVING_PYTHON3,
                                  environment={"FAKE_REMOVE": str(out_dir)})
    assert done.returncode == 1, done.stderr
    assert f"acceptance failed: {out_dir.resolve()}/summary.txt is missing (OUT_DIR removed during the run?)\n" \
        in done.stderr, done.stderr
