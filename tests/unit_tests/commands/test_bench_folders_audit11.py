"""``oellm bench``: the ``--output`` / ``--profile`` folder checks that run before the GPU work (audit 11).

Each test pins one refusal a user relies on: it comes before the CUDA check (so a login node says what is wrong with
the path), it names the path the user has to fix, and the folders made once the run starts take the report as a
file."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch

from megatron.oellm.cli import main
from tests.unit_tests.commands.bench_helpers import ours_report


def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron.oellm import runtime

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    monkeypatch.setattr(runtime, "shutdown_single_gpu_runtime", lambda: None)


def _nested(base: Path) -> Path:
    """A random chain of one to three folder names below ``base``."""
    return base.joinpath(*(f"d{random.randint(0, 999)}" for _ in range(random.randint(1, 3))))


def test_a_file_in_the_way_of_the_output_folder_is_named_before_the_cuda_check(tmp_path, monkeypatch, capsys):
    """``--output plain/x/report.json`` where ``plain`` is a file: refused on a node without a GPU too (checked
    before the CUDA test), naming the file that blocks the folder rather than a missing GPU or a permission."""
    _no_gpu(monkeypatch)
    plain = tmp_path / f"notes-{random.randint(0, 999)}.txt"
    plain.write_text(f"{random.random()}\n")
    output = _nested(plain) / "report.json"
    assert main(["bench", "--mbs", "1", "--output", str(output)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"error: --output {output}: its folder cannot be created ({plain} is a file)")


def test_a_folder_that_can_be_written_but_not_entered_is_refused(tmp_path, monkeypatch, capsys):
    """A folder with write but no search (x) permission (mode rw-) cannot take a new entry: the report's folder
    below it could never be made, so it is refused before the run like a read-only one."""
    _no_gpu(monkeypatch)
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: not (Path(path) == locked and mode & os.X_OK))
    output = _nested(locked) / "bench.json"
    assert main(["bench", "--mbs", "1", "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert f"--output {output}: its folder cannot be created (no write permission in {locked})" in err, err
    assert list(locked.iterdir()) == []


@pytest.mark.parametrize("overlap", ["same path", "output above the profile folder"])
def test_a_relative_output_where_an_absolute_profile_goes_is_refused(overlap, tmp_path, monkeypatch, capsys):
    """``--output bench --profile $PWD/bench``: the same path spelt once relative, once absolute, is still the
    folder the profile tables go to."""
    _no_gpu(monkeypatch)
    monkeypatch.chdir(tmp_path)
    output = f"bench-{random.randint(0, 999)}"
    profile = tmp_path / output if overlap == "same path" else tmp_path / output / "tables"
    assert main(["bench", "--mbs", "1", "--output", output, "--profile", str(profile)]) == 2
    assert f"--output {output} is where --profile {profile} puts its folder" in capsys.readouterr().err
    assert not (tmp_path / output).exists()


def test_a_read_only_profile_folder_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    """An existing ``--profile`` folder the user cannot write is refused before the run (its parent being writable
    does not help: the tables go into the folder itself)."""
    _no_gpu(monkeypatch)
    profile = tmp_path / f"profile-{random.randint(0, 999)}"
    profile.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != profile)
    assert main(["bench", "--mbs", "1", "--profile", str(profile)]) == 2
    assert capsys.readouterr().err.strip().endswith(f"error: --profile {profile} cannot be written (no write "
                                                    "permission)")


def test_the_report_is_written_as_a_file_into_the_folders_made_for_it(tmp_path, monkeypatch, capsys):
    """Missing folders of ``--output`` are made when the run starts, and the report lands in them as a JSON file
    (the folder made is the report's parent, never the report path itself)."""
    from megatron.oellm.bench import harness

    report = ours_report(random.uniform(80.0, 120.0))
    _gpu(monkeypatch)
    monkeypatch.setattr(harness, "run_benchmark", lambda config: report)
    output = _nested(tmp_path) / "report.json"
    assert main(["bench", "--sides", "ours", "--mbs", "1", "--output", str(output)]) == 0
    assert output.is_file()
    assert json.loads(output.read_text())["device"] == "GPU"


def test_a_folder_that_cannot_be_made_when_the_run_starts_is_refused_naming_the_flag(tmp_path, monkeypatch, capsys):
    """A folder that passed the check but cannot be made at the start (made read-only, or its file system full, in
    between) is one refusal naming ``--output``, before any GPU work, not a traceback."""
    from megatron.oellm.bench import harness

    _gpu(monkeypatch)
    monkeypatch.setattr(harness, "run_benchmark", lambda config: pytest.fail("the GPU work started"))

    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "mkdir", refused)
    output = _nested(tmp_path) / "report.json"
    assert main(["bench", "--mbs", "1", "--output", str(output)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"error: --output {output}: its folder cannot be created (Permission denied)")


@pytest.mark.parametrize("below", [False, True])
def test_a_symlink_loop_is_refused_before_the_cuda_check(below, tmp_path, monkeypatch, capsys):
    """``--output loop`` (or ``loop/report.json``) where ``loop`` links to itself: ``exists`` and ``is_dir`` answer
    False on it, so it passed the checks and the write failed only after the whole benchmark."""
    _no_gpu(monkeypatch)
    loop = tmp_path / f"loop{random.randint(0, 999)}"
    loop.symlink_to(loop.name)
    output = loop / "report.json" if below else loop
    assert main(["bench", "--mbs", "1", "--output", str(output)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"error: --output {output} runs into a loop of symbolic links (Too many levels of symbolic links); give a "
        "path without one")


@pytest.mark.parametrize("kind", ["slurm log", "other JSON", "JSON list"])
def test_an_existing_file_that_is_no_bench_report_is_refused_and_kept(kind, tmp_path, monkeypatch, capsys):
    """``--output slurm-123.out`` replaced the log with the report; a file that is not an earlier report (a JSON
    object with the report's keys) is refused before any GPU work, and left as it was. An empty file, then an
    earlier report, is replaced."""
    from megatron.oellm.bench import harness

    _gpu(monkeypatch)
    monkeypatch.setattr(harness, "run_benchmark", lambda config: pytest.fail("the GPU work started"))
    number = random.uniform(1.0, 9.0)
    text = {"slurm log": f"iteration 10 | lm loss: {number:.4f}\n", "other JSON": json.dumps({"loss": number}),
            "JSON list": json.dumps([number])}[kind]
    output = tmp_path / f"slurm-{random.randint(1, 99999)}.out"
    output.write_text(text)
    assert main(["bench", "--mbs", "1", "--output", str(output)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"error: --output {output} exists and is not an earlier bench report (a JSON object with the report's keys), "
        "which the report would replace; give another file name, or remove it")
    assert output.read_text() == text
    reports = [ours_report(random.uniform(80.0, 120.0)) for _ in range(2)]
    output.write_text("")
    for report in reports:
        monkeypatch.setattr(harness, "run_benchmark", lambda config, report=report: report)
        assert main(["bench", "--sides", "ours", "--mbs", "1", "--output", str(output)]) == 0
        assert json.loads(output.read_text()) == json.loads(json.dumps(report.to_dict()))


def test_a_failure_mid_write_keeps_the_earlier_report(tmp_path, monkeypatch, capsys):
    """A full disk while the report is written leaves the earlier report whole (the new one is written beside it and
    renamed over it only once complete) and no partial file behind; the figures are on stdout."""
    from megatron.oellm.bench import harness

    _gpu(monkeypatch)
    monkeypatch.setattr(harness, "run_benchmark", lambda config: ours_report(random.uniform(80.0, 120.0)))
    output = tmp_path / "bench.json"
    earlier = json.dumps(ours_report(random.uniform(80.0, 120.0)).to_dict(), indent=2)
    output.write_text(earlier)

    def full_disk(self, text, *args, **kwargs):
        with open(self, "w") as file:
            file.write(text[:len(text) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    assert main(["bench", "--sides", "ours", "--mbs", "1", "--output", str(output)]) == 1
    assert "cannot write the report to --output" in capsys.readouterr().err
    assert output.read_text() == earlier
    assert list(tmp_path.iterdir()) == [output]


def test_a_device_output_is_written_in_place_and_a_blank_file_replaced(tmp_path, monkeypatch, capsys):
    """``--output /dev/null`` read as an empty file and was replaced by a renamed temporary file: as root a regular
    file took the device's place. A device is written as it is (the replacement is a stand-in here, so a regression
    fails the test without touching the device); a file of only blank lines counts as empty and is replaced."""
    from megatron.oellm.bench import harness
    from megatron.oellm.commands import bench

    _gpu(monkeypatch)
    monkeypatch.setattr(harness, "run_benchmark", lambda config: ours_report(random.uniform(80.0, 120.0)))
    replaced = []
    monkeypatch.setattr(bench, "replace_atomically", lambda path, write: replaced.append(Path(path)))
    assert main(["bench", "--sides", "ours", "--mbs", "1", "--output", os.devnull]) == 0
    assert replaced == [] and Path(os.devnull).is_char_device()
    blank = tmp_path / "report.json"
    blank.write_text("\n" * random.randint(1, 3))
    assert main(["bench", "--sides", "ours", "--mbs", "1", "--output", str(blank)]) == 0
    assert replaced == [blank]


def test_a_link_whose_target_folder_cannot_be_written_is_refused_before_the_gpu_work(tmp_path, monkeypatch, capsys):
    """The report replaces a link's target through a temporary file in the target's folder: a link in a writable
    folder to a report in a read-only one passed the checks (made on the link's folder) and failed after the whole
    benchmark. The target's folder is checked."""
    from megatron.oellm.bench import harness

    _gpu(monkeypatch)
    monkeypatch.setattr(harness, "run_benchmark", lambda config: pytest.fail("the GPU work started"))
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "report.json").write_text(json.dumps(ours_report(random.uniform(80.0, 120.0)).to_dict()))
    link = tmp_path / "mine" / "report.json"
    link.parent.mkdir()
    link.symlink_to(shared / "report.json")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != shared and real_access(path, mode))
    assert main(["bench", "--mbs", "1", "--output", str(link)]) == 2
    assert capsys.readouterr().err.strip().endswith(f"error: --output {link} cannot be written (no write permission)")


def test_a_file_too_large_for_a_report_is_refused_unread(tmp_path, monkeypatch, capsys):
    """A file larger than any report (a long Slurm log) is refused as no earlier report without being read into
    memory."""
    from megatron.oellm.commands import bench

    _no_gpu(monkeypatch)
    output = tmp_path / "slurm-1.out"
    output.write_text("x" * random.randint(65, 200))
    monkeypatch.setattr(bench, "REPORT_MAX_BYTES", 64)
    real_read_text = Path.read_text

    def read_text(self: Path, *args, **kwargs) -> str:
        if self == output:
            pytest.fail(f"{self} was read")
        return real_read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    assert main(["bench", "--mbs", "1", "--output", str(output)]) == 2
    assert "exists and is not an earlier bench report" in capsys.readouterr().err
