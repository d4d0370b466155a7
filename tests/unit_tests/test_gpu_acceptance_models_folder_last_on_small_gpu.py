"""On a GPU under 100 GiB the tests stage of ``tools/gpu_acceptance.sh`` runs the models folder after the other test
folders have ended: all six side by side ran the real-width parity tests and the entry's GPU test out of memory on an
80 GB H100 (session 49). On a larger GPU all six run side by side. A stand-in ``python3`` records when each pytest
starts and ends; a stand-in ``nvidia-smi`` gives the GPU's memory."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.unit_tests.gpu_acceptance_helpers import fake_nvidia_smi, run_acceptance

TIMED_PYTHON3 = """#!/usr/bin/env bash
[[ $1 == -c ]] && echo "CUDA devices: 1" && exit 0
folder=""
[[ "$*" == *" -m gpu "* ]] && folder=${@: -1}
[ -n "$folder" ] && echo "start $folder" >> "$FAKE_LOG" && sleep 0.4 && echo "end $folder" >> "$FAKE_LOG" \\
  && echo "2 passed in 0.40s"
exit 0
"""
RECORDING_TIMEOUT = """#!/usr/bin/env bash
echo "limit $3 ${@: -1}" >> "$FAKE_LOG"
shift 3
exec "$@"
"""
FOLDERS = {f"tests/unit_tests/{name}" for name in ("layers", "patches", "backends", "models", "training", "bench")}


def _events(calls: list[str]) -> list[tuple[str, str]]:
    return [(kind, folder) for kind, folder in (call.split(" ", 1) for call in calls if call.startswith(("start", "end")))]


def test_models_folder_starts_after_the_others_end_on_an_80gb_gpu(tmp_path: Path) -> None:
    total_mib = random.randint(40_000, 102_399)
    fake_nvidia_smi(tmp_path, total_mib)
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "tests", fake_python3=TIMED_PYTHON3)
    assert done.returncode == 0, done.stderr
    events = _events(calls)
    assert {folder for _kind, folder in events} == FOLDERS
    models_start = events.index(("start", "tests/unit_tests/models"))
    ended_before = {folder for kind, folder in events[:models_start] if kind == "end"}
    assert ended_before == FOLDERS - {"tests/unit_tests/models"}, events
    assert f"(models after the other folders, on a GPU of {total_mib} MiB, within " in (tmp_path / "out" / "summary.txt").read_text()


def test_the_two_waves_share_the_stages_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first wave within 2/3 of OELLM_STAGE_LIMIT_S, the models folder within what is left after it (a stand-in
    ``timeout`` records each pytest's limit)."""
    limit_s = random.randint(150, 900)
    monkeypatch.setenv("OELLM_STAGE_LIMIT_S", str(limit_s))
    fake_nvidia_smi(tmp_path, random.randint(40_000, 102_399))
    (tmp_path / "bin" / "timeout").write_text(RECORDING_TIMEOUT)
    (tmp_path / "bin" / "timeout").chmod(0o755)
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "tests", fake_python3=TIMED_PYTHON3)
    assert done.returncode == 0, done.stderr
    limits = {folder: int(seconds) for _word, seconds, folder in (call.split(" ") for call in calls
                                                                    if call.startswith("limit ") and "/unit_tests/" in call)}
    assert set(limits) == FOLDERS
    assert {limits[folder] for folder in FOLDERS - {"tests/unit_tests/models"}} == {limit_s * 2 // 3}
    # what is left after the first wave (0.4 s here; bash's SECONDS counts whole seconds, so it may read 0)
    assert limit_s - 5 <= limits["tests/unit_tests/models"] <= limit_s
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert f"within {limits['tests/unit_tests/models']} s)" in summary


@pytest.mark.parametrize("total_mib", [102_400, 143_771])
def test_all_folders_side_by_side_on_a_large_gpu(tmp_path: Path, total_mib: int) -> None:
    fake_nvidia_smi(tmp_path, total_mib)
    done, calls = run_acceptance(tmp_path, tmp_path / "out", "tests", fake_python3=TIMED_PYTHON3)
    assert done.returncode == 0, done.stderr
    events = _events(calls)
    first_end = next(index for index, (kind, _folder) in enumerate(events) if kind == "end")
    assert {folder for kind, folder in events[:first_end] if kind == "start"} == FOLDERS, events
    assert "models after the other folders" not in (tmp_path / "out" / "summary.txt").read_text()
