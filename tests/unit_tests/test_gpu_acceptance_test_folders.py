"""``OELLM_TEST_FOLDERS`` runs a subset of the tests stage's folders, so a fresh machine without the kernel cache can
split the stage over two device calls; a bad list is refused before anything runs. A stand-in ``python3`` records
each pytest; a stand-in ``nvidia-smi`` gives the GPU's memory."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.unit_tests.gpu_acceptance_helpers import fake_nvidia_smi, run_acceptance

NAMES = ["layers", "patches", "backends", "training", "bench", "models"]


def _pytest_folders(calls: list[str]) -> list[str]:
    """The test folders the stand-in ``python3`` was asked to run, in call order."""
    return [call.rsplit("/", 1)[-1] for call in calls if " -m gpu " in call]


@pytest.mark.parametrize("total_mib", [81_559, 143_771])
def test_only_the_named_folders_run(tmp_path: Path, total_mib: int) -> None:
    chosen = random.sample(NAMES, random.randint(1, len(NAMES)))
    fake_nvidia_smi(tmp_path, total_mib)
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "tests",
                                 environment={"OELLM_TEST_FOLDERS": ",".join(chosen)})
    assert done.returncode == 0, done.stderr
    assert sorted(_pytest_folders(calls)) == sorted(chosen)
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert {line.split(":")[0].removeprefix("pytest ") for line in summary.splitlines()
            if line.startswith("pytest ")} == set(chosen)
    # the models folder waits for others only on a small GPU, and only where others run
    assert ("models after the other folders" in summary) == (total_mib < 102_400 and "models" in chosen
                                                             and len(chosen) > 1), summary


def test_the_models_folder_alone_gets_the_whole_limit(tmp_path: Path) -> None:
    """On an 80 GB GPU the first wave's share (2/3) is kept for the folders beside the models folder only."""
    limit_s = random.randint(150, 900)
    fake_nvidia_smi(tmp_path, 81_559)
    (tmp_path / "bin" / "timeout").write_text('#!/usr/bin/env bash\necho "limit $3 ${@: -1}" >> "$FAKE_LOG"\n'
                                              'shift 3\nexec "$@"\n')
    (tmp_path / "bin" / "timeout").chmod(0o755)
    others = random.sample(NAMES[:-1], random.randint(1, len(NAMES) - 1))
    for run, chosen in enumerate((["models"], others)):
        out = tmp_path / f"out-{run}"
        done, calls = run_acceptance(tmp_path, out, "tests",
                                     environment={"OELLM_TEST_FOLDERS": ",".join(chosen),
                                                  "OELLM_STAGE_LIMIT_S": str(limit_s)})
        assert done.returncode == 0, done.stderr
        limits = {call.split(" ")[2].rsplit("/", 1)[-1]: int(call.split(" ")[1]) for call in calls
                  if call.startswith("limit ") and "/unit_tests/" in call}
        assert limits == dict.fromkeys(chosen, limit_s), calls
        (tmp_path / "python3.log").unlink()


@pytest.mark.parametrize("value, refusal", [
    ("models,", "has an empty folder name"),
    ("", "has an empty folder name"),
    ("layers,,bench", "has an empty folder name"),
    ("model", "names 'model', not a test folder of the stage"),
    ("training,Bench", "names 'Bench', not a test folder of the stage"),
    ("bench,layers,bench", "names 'bench' twice"),
])
def test_a_bad_list_is_refused_before_anything_runs(tmp_path: Path, value: str, refusal: str) -> None:
    fake_nvidia_smi(tmp_path, random.choice([81_559, 143_771]))
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "tests", environment={"OELLM_TEST_FOLDERS": value})
    assert done.returncode == 2, done.stderr
    assert refusal in done.stderr, done.stderr
    if "twice" not in refusal:  # the other refusals name the folders to choose from
        assert "layers,patches,backends,training,bench,models" in done.stderr, done.stderr
    assert calls == [] and not (tmp_path / "out").exists()


def test_a_list_without_the_tests_stage_is_refused(tmp_path: Path) -> None:
    """The variable has no effect on the other stages: a user who set it meant the tests stage to run."""
    stage = random.choice(["train", "resume", "interrupt", "bench"])
    done, calls = run_acceptance(tmp_path, tmp_path / "out", stage, environment={"OELLM_TEST_FOLDERS": "models"})
    assert done.returncode == 2
    assert f"which '{stage}' does not run; add tests or unset it" in done.stderr, done.stderr
    assert calls == []
