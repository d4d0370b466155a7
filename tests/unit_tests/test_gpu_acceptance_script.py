"""``tools/gpu_acceptance.sh`` without a GPU: a stand-in ``python3`` records where and how it is called, so the
script's own logic (argument checks, the folder it runs in, what it does to OUT_DIR) is tested on CPU."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from tests.unit_tests.gpu_acceptance_helpers import ROOT, SCRIPT, run_acceptance


def test_a_non_empty_out_dir_is_refused_and_left_alone(tmp_path: Path) -> None:
    """The run ends by packing OUT_DIR into logs.tar.xz and deleting the rest: a user's folder must not go."""
    out_dir = tmp_path / "results"
    out_dir.mkdir()
    keep = out_dir / "earlier-results.txt"
    content = random.randbytes(32).hex()
    keep.write_text(content)
    done, calls = run_acceptance(tmp_path, out_dir, "bench")
    assert done.returncode == 2 and "not empty" in done.stderr, done.stderr
    assert keep.read_text() == content and sorted(os.listdir(out_dir)) == ["earlier-results.txt"]
    assert calls == []


@pytest.mark.parametrize("stages", ["bench,typo", "Tests"])
def test_an_unknown_stage_is_refused_before_anything_runs(tmp_path: Path, stages: str) -> None:
    done, calls = run_acceptance(tmp_path, tmp_path / "out", stages)
    assert done.returncode == 2 and "unknown stage" in done.stderr
    assert calls == []


def test_it_runs_from_the_repository_root_wherever_it_is_called(tmp_path: Path) -> None:
    """The test folders, recipes and .bundle/ are named relative to the repository root."""
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "bench")
    assert done.returncode == 0, done.stderr
    assert calls and all(call.split("|")[0] == str(ROOT) for call in calls), calls
    assert any("megatron.oellm doctor" in call for call in calls) and any("bench" in call for call in calls)
    assert (tmp_path / "out" / "summary.txt").is_file()


def test_a_failed_run_is_summarised_with_its_first_exception(tmp_path: Path) -> None:
    """A stage's summary line names why a run stopped (its first exception line, rank 0's or the launcher's), so the
    device call's output says it without unpacking the logs; the arguments block's ``*_error*`` names do not count."""
    output = ("  logits_load_ignore_errors ....... False\\n  error_injection_type ... transient_error\\n"
              "[rank0]: ValueError: No dot product attention backend is available\\n"
              "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \\n"
              " > successfully loaded checkpoint from /x [ t 1/1, p 1/1 ] at iteration 6\\n")
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", "resume", run_output=output)
    assert done.returncode == 0, done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    [line] = [line for line in summary.splitlines() if line.startswith("first run (save at 3 and 6)")]
    assert line.endswith("rc 0 [rank0]: ValueError: No dot product attention backend is available"), line


@pytest.mark.parametrize("limit", ["0", "1", "-300", "abc", "nan", "8m", ""])
def test_a_stage_limit_that_sets_no_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     limit: str) -> None:
    """``timeout 0`` sets no limit, and bash arithmetic reads a non-number as 0 (``$((LIMIT_S / 2))``): with
    ``OELLM_STAGE_LIMIT_S=0`` or ``abc`` the train stage ran unbounded, past the device call that packs its logs."""
    monkeypatch.setenv("OELLM_STAGE_LIMIT_S", limit)
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "train")
    if limit == "":  # unset in effect: the default limit
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2 and "error: OELLM_STAGE_LIMIT_S must be" in done.stderr, done.stderr
    assert f"'{limit}'" in done.stderr and calls == [] and not (tmp_path / "out").exists()


def test_the_stages_rebuild_their_corpus_on_a_warm_machine(tmp_path: Path) -> None:
    """A warm machine keeps the corpus of an earlier call: the stages ask build_corpus to replace it."""
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "train,resume",
                                 run_output=" > successfully loaded checkpoint from /x at iteration 6\\n")
    assert done.returncode == 0, done.stderr
    builds = [call for call in calls if "tools/build_corpus.py" in call]
    assert len(builds) == 2 and all(call.endswith(" --overwrite") for call in builds), builds


def test_the_interrupt_stage_presses_ctrl_c_on_a_local_run_of_its_own_corpus(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The interrupted run trains on the stage's own corpus in its own folder (the train stage, side by side, runs
    on another), and the check's waits fit the stage's limit: two thirds of it to reach the iteration, a sixth to
    stop."""
    monkeypatch.setenv("OELLM_STAGE_LIMIT_S", "400")
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "interrupt,train")
    assert done.returncode == 0, done.stderr
    work = tmp_path / "work"
    [build] = [call for call in calls if f"--output-prefix {work}/corpus/interrupt " in call]
    [check] = [call for call in calls if "tools/check_interrupt.py" in call]
    assert " --after-iteration 3 --start-timeout 266 --grace 66 -- " in check, check
    run = check.split(" -- ", 1)[1]
    assert run.startswith("bash examples/oellm/qwen3_5_35b_a3b_mn5_strong.sh --local --row 1 "), run
    assert f"--data-path {work}/corpus/interrupt " in run and f"--output-dir {work}/interrupt " in run, run
    assert not any(f"{work}/corpus/interrupt" in call for call in calls if call not in (build, check)), calls
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "interrupt (Ctrl-C at iteration 3 of a --local run): rc 0" in summary, summary


def test_a_failed_run_fails_the_acceptance(tmp_path: Path) -> None:
    """The script exited 0 whatever its runs returned (its last command was the summary's ``tee``), so nothing could
    gate on it; a run with a non-zero rc now makes it exit 1 with a line saying how many, after packing the logs."""
    rc = random.randint(1, 125)
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", "bench", bench_rc=rc)
    assert done.returncode == 1, done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert f"bench: rc {rc}\nacceptance failed: 1 run(s) with a non-zero rc\n" in summary, summary
    assert done.stderr.endswith("acceptance failed: 1 run(s) with a non-zero rc\n"), done.stderr
    assert (tmp_path / "out" / "logs.tar.xz").is_file()
    again, _calls = run_acceptance(tmp_path, tmp_path / "again", "bench", bench_rc=0)
    assert again.returncode == 0 and "acceptance failed" not in (tmp_path / "again" / "summary.txt").read_text()


@pytest.mark.parametrize("argv", [[], ["out"], ["out", "tests", "1,2", "extra"], ["", "tests"], ["out", ""]])
def test_a_wrong_argument_count_gets_the_usage_line(tmp_path: Path, argv: list[str]) -> None:
    """A missing argument printed bash's ``line N: 2: stages ...``; now the usage line and exit 2, before anything
    runs or is created."""
    done = subprocess.run(["bash", str(SCRIPT), *argv], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.stderr == "usage: tools/gpu_acceptance.sh OUT_DIR STAGE[,STAGE...] [BENCH_MBS]  (stages: tests, " \
                          "train, resume, interrupt, bench)\n"
    assert done.returncode == 2 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_prints_the_whole_header(tmp_path: Path, flag: str) -> None:
    """``--help`` printed only the usage line, on stderr: the stages, exit statuses and environment variables were in
    the script's header alone. Now the header, on stdout, exit 0, nothing created."""
    done = subprocess.run(["bash", str(SCRIPT), flag, "out"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    header = []
    for line in SCRIPT.read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        header.append(line)
    assert done.returncode == 0 and done.stderr == "" and done.stdout == "\n".join(header) + "\n"
    for text in ("interrupt  Ctrl-C", "OELLM_STAGE_LIMIT_S", "OELLM_WORK", "130 on Ctrl-C"):
        assert text in done.stdout, text
    assert os.listdir(tmp_path) == []


def test_an_out_dir_that_is_a_file_is_named_as_one(tmp_path: Path) -> None:
    """A file given as OUT_DIR was reported as a folder that "is not empty"."""
    target = tmp_path / "results.txt"
    target.write_text(random.randbytes(8).hex())
    done, calls = run_acceptance(tmp_path, target, "bench")
    assert done.returncode == 2 and f"error: OUT_DIR {target} is a file, not a folder" in done.stderr
    assert calls == [] and target.is_file()


def test_a_resume_that_loaded_nothing_fails_the_acceptance(tmp_path: Path) -> None:
    """A resume run that returned 0 but loaded no checkpoint trained from scratch: the stage counts it as failed
    (``rc 1 (no checkpoint loaded)``), and the script exits 1."""
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", "resume", run_output="")
    assert done.returncode == 1, done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "resumed run to 8: rc 1 (no checkpoint loaded); loaded: 0" in summary, summary


def test_the_background_qwen3_run_and_the_table_report_their_rc(tmp_path: Path) -> None:
    """The train stage's Qwen3 run ran in the background and its exit status was never printed, so a crash there
    could not fail the acceptance; it and the table command now print theirs."""
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", "train")
    assert done.returncode == 0, done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "train qwen3 (recipe qwen3_30b_a3b_mn5 --local): rc 0 " in summary
    assert "table of the qwen3.5 logs: rc 0" in summary
