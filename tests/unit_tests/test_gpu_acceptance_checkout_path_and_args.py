"""``tools/gpu_acceptance.sh``: ``python3 tools/build_corpus.py`` and ``tools/check_interrupt.py`` put tools/, not the
checkout, on ``sys.path``, so without the checkout installed they stopped on ``ModuleNotFoundError: megatron.oellm``:
the script now puts its checkout first on ``PYTHONPATH``, the caller's folders after it. ``BENCH_MBS`` without the
bench stage was ignored without a word (``OELLM_TEST_FOLDERS`` without the tests stage is refused): it is refused the
same way. An empty kernel cache wrote du's ``cannot access '.../cache/*'`` into summary.txt. A stand-in ``python3``
plays the runs without a GPU."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.unit_tests.gpu_acceptance_helpers import FAKE_PYTHON3, ROOT, run_acceptance

PATH_RECORDING_PYTHON3 = FAKE_PYTHON3.replace("\n", '\necho "PYTHONPATH=${PYTHONPATH-(unset)}|$*" >> "$FAKE_LOG"\n', 1)
"""The helpers' stand-in ``python3``, recording also the ``PYTHONPATH`` of each call."""


@pytest.mark.parametrize("callers", [None, "", "two"])
def test_the_checkout_goes_first_on_pythonpath_for_the_tools_scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     callers: str | None) -> None:
    """Unset or empty, the caller's PYTHONPATH adds nothing (an empty entry would put the current folder on
    sys.path); one with folders keeps them, after the checkout."""
    if callers is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        folders = [f"/tmp/site-{random.randbytes(4).hex()}" for _ in range(2)] if callers else []
        monkeypatch.setenv("PYTHONPATH", ":".join(folders))
    expected = ":".join([str(ROOT), *(folders if callers else [])])
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "interrupt", fake_python3=PATH_RECORDING_PYTHON3)
    assert done.returncode == 0, done.stderr
    recorded = [call.split("|", 1) for call in calls if call.startswith("PYTHONPATH=")]
    paths = {args.split()[0]: path for path, args in recorded if args.startswith("tools/")}
    assert paths == {"tools/build_corpus.py": f"PYTHONPATH={expected}",
                     "tools/check_interrupt.py": f"PYTHONPATH={expected}"}, calls


@pytest.mark.parametrize("stages", ["tests", "train,resume", "interrupt"])
def test_bench_mbs_without_the_bench_stage_is_refused(tmp_path: Path, stages: str) -> None:
    mbs = ",".join(str(random.randint(1, 16)) for _ in range(random.randint(1, 3)))
    done, calls = run_acceptance(tmp_path, tmp_path / "out", stages, bench_mbs=mbs)
    assert done.returncode == 2 and done.stderr == (f"error: BENCH_MBS '{mbs}' sets the bench stage's micro-batch "
                                                    f"sizes, which '{stages}' does not run; add bench or leave it "
                                                    "out\n"), done.stderr
    assert calls == [] and not (tmp_path / "out").exists()


def test_bench_mbs_goes_to_the_bench(tmp_path: Path) -> None:
    mbs = ",".join(str(random.randint(1, 16)) for _ in range(random.randint(1, 3)))
    done, calls = run_acceptance(tmp_path, tmp_path / "out", random.choice(["bench", "train,bench"]), bench_mbs=mbs)
    assert done.returncode == 0, done.stderr
    assert any(f" bench --mbs {mbs} " in call for call in calls), calls


def test_the_summary_gets_each_cache_folders_size_and_no_error_for_an_empty_cache(tmp_path: Path) -> None:
    """The cache is empty on a fresh machine until a kernel is compiled (in a checkout without .bundle/kernel-cache/,
    whose archive the script unpacks into it)."""
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", "bench")
    assert done.returncode == 0, done.stderr
    assert "du:" not in (tmp_path / "out" / "summary.txt").read_text()
    cache = tmp_path / "cache"
    folders = random.sample(["triton", "tilelang", "other"], random.randint(1, 3))
    for folder in folders:
        (cache / folder).mkdir(parents=True, exist_ok=True)
        (cache / folder / "kernel.bin").write_bytes(random.randbytes(random.randint(1, 4096)))
    again, _calls = run_acceptance(tmp_path, tmp_path / "again", "bench")
    assert again.returncode == 0, again.stderr
    sizes = [line for line in (tmp_path / "again" / "summary.txt").read_text().splitlines() if "\t" in line]
    # a checkout with .bundle/kernel-cache/ adds the folders of its archive
    assert {str(cache / folder) for folder in folders} <= {line.split("\t")[1] for line in sizes}, sizes
