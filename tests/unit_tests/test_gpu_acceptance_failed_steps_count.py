"""``tools/gpu_acceptance.sh`` steps whose failure did not fail the acceptance: a corpus build (``tools/build_corpus.py``)
that failed left an earlier call's corpus on a warm machine, which the train, resume and interrupt stages trained on,
the script reporting a pass; the train stage's resume to iteration 35 passed with no checkpoint loaded (trained from
scratch, ``first iteration 1/``), as the resume stage's did not; and ``oellm doctor`` crashing (a traceback, exit 1)
was not counted. Each now counts as a failed run (``: rc N`` in summary.txt, exit 1); a stage whose corpus build
failed runs nothing on the corpus. A stand-in ``python3`` plays the runs without a GPU."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from tests.unit_tests.gpu_acceptance_helpers import FAKE_PYTHON3, run_acceptance

FAILING = '[[ "$*" == *"{match}"* ]] && {{ echo "OSError: [Errno 28] No space left on device" >&2; exit {rc}; }}\n'
"""A line ahead of the stand-in's others: a call whose arguments hold ``match`` fails with ``rc``."""
CORPORA = {"train": "stdlib", "resume": "small", "interrupt": "interrupt"}
"""The corpus each stage builds under OELLM_WORK/corpus/."""


def failing_python3(match: str, rc: int) -> str:
    """The helpers' stand-in ``python3``, whose calls with ``match`` in their arguments fail with ``rc``."""
    return FAKE_PYTHON3.replace("\n", "\n" + FAILING.format(match=match, rc=rc), 1)


@pytest.mark.parametrize("stage", sorted(CORPORA))
def test_a_failed_corpus_build_fails_the_acceptance_and_its_stage_trains_on_nothing(tmp_path: Path,
                                                                                   stage: str) -> None:
    """A warm machine's corpus of an earlier call is left in OELLM_WORK; the build fails: no run of the stage may use
    the corpus, and the acceptance fails."""
    corpus = tmp_path / "work" / "corpus"
    corpus.mkdir(parents=True)
    (tmp_path / "work" / ".oellm-acceptance-work").touch()  # the folder an earlier call made
    prefix = corpus / CORPORA[stage]
    for suffix in (".bin", ".idx"):  # the earlier call's corpus
        prefix.with_name(prefix.name + suffix).write_bytes(random.randbytes(64))
    rc = random.randint(1, 125)
    done, calls = run_acceptance(tmp_path, tmp_path / "out", stage,
                                 fake_python3=failing_python3(f"--output-prefix {prefix} ", rc))
    assert done.returncode == 1, done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert (f"corpus {CORPORA[stage]} (tools/build_corpus.py): rc {rc} OSError: [Errno 28] No space left on "
            "device\n") in summary, summary
    assert "acceptance failed: 1 run(s) with a non-zero rc" in summary, summary
    assert not any(str(prefix) in call for call in calls if "tools/build_corpus.py" not in call), calls
    assert not any(word in call for call in calls for word in ("check_interrupt", " recipe ", " table ")), calls


def test_the_corpus_builds_that_pass_are_summarised(tmp_path: Path) -> None:
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", "train,resume,interrupt")
    assert done.returncode == 0, done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    for name in CORPORA.values():
        assert f"corpus {name} (tools/build_corpus.py): rc 0 \n" in summary, summary


def test_the_train_stages_resume_that_loaded_nothing_fails_the_acceptance(tmp_path: Path) -> None:
    """The resume to 35 started at iteration 1 (no checkpoint loaded): its rc 0 passed; now it reads
    ``rc 1 (no checkpoint loaded)`` as the resume stage's does."""
    iterations = random.randint(1, 35)
    output = "".join(f" [2026-12-07 12:00:00] iteration {i:>5}/      35 | lm loss: {random.uniform(2, 9):.6E} |\\n"
                     for i in range(1, iterations + 1))
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", "train", run_output=output)
    assert done.returncode == 1, done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert re.search(f"^resume qwen3.5: rc 1 \\(no checkpoint loaded\\) {iterations} iteration lines, first +"
                     "iteration 1/", summary, re.MULTILINE), summary
    assert "acceptance failed: 1 run(s) with a non-zero rc" in summary, summary


@pytest.mark.parametrize("stages", ["bench", "resume", "train,interrupt"])
def test_a_doctor_that_failed_fails_the_acceptance(tmp_path: Path, stages: str) -> None:
    """``oellm doctor`` exits 1 on an error it finds, and a crash (a traceback) too: neither was counted."""
    rc = random.randint(1, 125)
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", stages,
                                  fake_python3=failing_python3("-m megatron.oellm doctor", rc))
    assert done.returncode == 1, done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert summary.startswith("OSError: [Errno 28] No space left on device\n") or \
        "\nOSError: [Errno 28] No space left on device\n" in summary, summary  # the doctor's last line
    assert f"oellm doctor: rc {rc}\n" in summary, summary
    assert "acceptance failed: 1 run(s) with a non-zero rc" in summary, summary


def test_a_doctor_that_passed_is_summarised(tmp_path: Path) -> None:
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", "bench")
    assert done.returncode == 0, done.stderr
    assert "oellm doctor: rc 0\n" in (tmp_path / "out" / "summary.txt").read_text()
