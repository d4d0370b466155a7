"""``tools/gpu_acceptance.sh``: a stage list with a stage twice or an empty item, and an ``OELLM_WORK`` folder of
someone else's files, are refused before anything runs (two copies of a stage ran side by side over the same logs,
and the train and resume stages delete and rebuild folders in ``OELLM_WORK``)."""

from __future__ import annotations

import random

import pytest

from tests.unit_tests.gpu_acceptance_helpers import run_acceptance


@pytest.mark.parametrize("stages", ["tests,tests", "bench,train,bench", "train,resume,train"])
def test_a_stage_given_twice_is_refused(tmp_path, stages):
    done, calls = run_acceptance(tmp_path, tmp_path / "out", stages)
    twice = next(stage for stage in stages.split(",") if stages.split(",").count(stage) > 1)
    assert done.returncode == 2 and done.stderr == (f"error: stage '{twice}' given twice in '{stages}'; give each "
                                                    "once\n")
    assert calls == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("stages", ["tests,", ",bench", "tests,,train"])
def test_an_empty_stage_name_is_refused(tmp_path, stages):
    """``read -a`` drops a trailing empty item, so ``tests,`` passed as ``tests``; a typo is refused instead."""
    done, calls = run_acceptance(tmp_path, tmp_path / "out", stages)
    assert done.returncode == 2 and f"empty stage name in '{stages}'" in done.stderr
    assert calls == []


def test_a_work_folder_of_other_files_is_refused_and_kept(tmp_path):
    work = tmp_path / "work"  # run_acceptance's OELLM_WORK
    (work / "runs").mkdir(parents=True)
    keep = work / "runs" / "important.txt"
    content = random.randbytes(16).hex()
    keep.write_text(content)
    done, calls = run_acceptance(tmp_path, tmp_path / "out", random.choice(["train", "resume", "tests,train"]))
    assert done.returncode == 2 and f"OELLM_WORK {work} holds files and no mark of this script" in done.stderr
    assert f"remove it: rm -rf {work}" in done.stderr
    assert keep.read_text() == content and calls == []


def test_the_scripts_own_work_folder_is_reused(tmp_path):
    """A second call on a warm machine finds the folder the first made (its mark) and goes on."""
    first, _ = run_acceptance(tmp_path, tmp_path / "out1", "bench")
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "work" / ".oellm-acceptance-work").exists()
    (tmp_path / "work" / "runs").mkdir()
    second, calls = run_acceptance(tmp_path, tmp_path / "out2", "bench")
    assert second.returncode == 0, second.stderr
    assert any(" bench " in call for call in calls)


def test_a_stage_limit_beyond_bashs_numbers_is_refused(tmp_path, monkeypatch):
    """``OELLM_STAGE_LIMIT_S=99999999999999999999`` printed bash's ``integer expression expected`` and went on."""
    limit = "9" * random.randint(8, 30)
    monkeypatch.setenv("OELLM_STAGE_LIMIT_S", limit)
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "train")
    assert done.returncode == 2 and done.stderr == ("error: OELLM_STAGE_LIMIT_S must be a whole number of seconds "
                                                    f"from 2 to 9999999, got '{limit}'\n")
    assert calls == []


def test_the_logs_archive_is_readable_by_others(tmp_path):
    """It was made with mktemp (mode 0600), unlike the summary beside it."""
    done, _ = run_acceptance(tmp_path, tmp_path / "out", "bench")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "logs.tar.xz").stat().st_mode & 0o777 == 0o644

