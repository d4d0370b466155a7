"""``latest_checkpointed_iteration.txt`` read as megatron-core 0.19.2's ``read_metadata`` reads it, and the trackers
megatron would fail on only after allocating the model refused before Megatron initialises: one it cannot parse
(megatron prints an error and exits with status 0, a job that looks finished), a negative iteration, an unreadable
tracker, and a ``--load`` it cannot search (megatron sees no tracker and starts without the checkpoint)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from megatron.oellm.training.stored_checkpoint import (
    RELEASE,
    TRACKER_FILE,
    check_load_directory,
    has_tracker,
    persistent_iteration_directory,
    read_loaded_checkpoint,
    tracked_checkpoint,
)
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain


def _tracker_texts() -> list[str]:
    """Tracker contents megatron reads as an iteration, as ``release``, or fails on; fresh numbers each run."""
    n = random.randrange(1, 10**6)
    return [f"{n}", f"{n}\n", f"  {n}  \n", f"0{n}", f"+{n}", "0", "release", "release\n",  # megatron loads these
            f"-{n}", "", "\n", "releases", "Release", f"{n}.0", f"{n} {n + 1}", f"iter_{n:07d}", "latest"]


def _megatron_reads(tracker: Path) -> tuple[str, object]:
    """What megatron-core's ``read_metadata`` makes of ``tracker`` (torch.distributed not initialised): its
    iteration, ``release``, or the way it stops."""
    from megatron.training.checkpointing import read_metadata

    try:
        iteration, release = read_metadata(str(tracker))
    except SystemExit as stop:
        return "exit", stop.code
    except AssertionError:
        return "assertion", None
    return ("release", None) if release else ("iteration", iteration)


@pytest.mark.parametrize("text", _tracker_texts())
def test_a_tracker_is_read_as_megatron_reads_it(tmp_path: Path, text: str) -> None:
    (tmp_path / TRACKER_FILE).write_text(text)
    outcome, value = _megatron_reads(tmp_path / TRACKER_FILE)
    if outcome == "iteration":
        assert tracked_checkpoint(tmp_path) == value
        assert persistent_iteration_directory(tmp_path) == tmp_path / f"iter_{value:07d}"
    elif outcome == "release":
        assert tracked_checkpoint(tmp_path) == RELEASE
    elif outcome == "exit":
        assert value is None  # sys.exit() without a status: the job ends with 0
        with pytest.raises(ValueError, match=r"neither an iteration nor 'release': .*exit status 0"):
            tracked_checkpoint(tmp_path)
    else:
        with pytest.raises(ValueError, match=r"names iteration -\d+: .*assertion"):
            tracked_checkpoint(tmp_path)


def test_a_bad_tracker_fails_under_ckpt_step_too(tmp_path: Path) -> None:
    """megatron reads the tracker whenever it is a file, before it applies --ckpt-step."""
    (tmp_path / TRACKER_FILE).write_text("latest")
    with pytest.raises(ValueError, match="exit status 0"):
        persistent_iteration_directory(tmp_path, random.randrange(1, 100))


def test_an_undecodable_tracker_is_refused(tmp_path: Path) -> None:
    from megatron.training.checkpointing import read_metadata

    (tmp_path / TRACKER_FILE).write_bytes(bytes([0xFF, 0xFE, random.randrange(0x80, 0x100)]))
    with pytest.raises(UnicodeDecodeError):
        read_metadata(str(tmp_path / TRACKER_FILE))
    with pytest.raises(ValueError, match=rf"{TRACKER_FILE} cannot be read \(not text\)"):
        tracked_checkpoint(tmp_path)


def test_a_load_directory_that_cannot_be_searched_is_refused(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Permission denied on the tracker's path (the job's user cannot enter --load): megatron's ``os.path.isfile``
    answers False and the run would start without the checkpoint; ours names the directory."""
    from megatron.training.checkpointing import checkpoint_exists

    from megatron.oellm.training.args import parse_oellm_argv

    (tmp_path / TRACKER_FILE).write_text(f"{random.randrange(1, 100)}\n")
    real_stat = os.stat

    def stat_denied(path, *args, **kwargs):
        if Path(path).parent == tmp_path:
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_denied)
    assert not checkpoint_exists(str(tmp_path))  # megatron's view: no checkpoint to resume
    with pytest.raises(ValueError, match=rf"{tmp_path} cannot be searched \(Permission denied\)"):
        has_tracker(tmp_path)
    for argv in (["--load", str(tmp_path)], ["--load", str(tmp_path), "--pretrained-checkpoint", str(tmp_path.parent)]):
        with pytest.raises(ValueError, match="cannot be searched"):
            read_loaded_checkpoint(parse_oellm_argv(argv))


@pytest.mark.parametrize("flag", ["--load", "--pretrained-checkpoint"])
def test_the_entry_refuses_a_bad_tracker_before_megatron_initialises(
        flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from megatron.oellm.training.args import parse_oellm_argv

    entry = entry_up_to_pretrain(monkeypatch)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data",
            "--seq-length", "64", flag, str(tmp_path)]
    (tmp_path / TRACKER_FILE).write_text(random.choice(["latest", "", f"iter_{random.randrange(1, 100):07d}"]))
    assert entry.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f"{tmp_path / TRACKER_FILE} holds" in line and "exit status 0" in line
    (tmp_path / TRACKER_FILE).unlink()
    if flag == "--load":  # a first job (--load is --save): nothing to load, training starts
        argv += ["--save", str(tmp_path), "--save-interval", "5"]
        check_load_directory(parse_oellm_argv(argv))
        with pytest.raises(Reached):
            entry.main(argv)


@pytest.mark.parametrize("flag", ["--save", "--load", "--pretrained-checkpoint"])
def test_a_checkpoint_folder_in_a_symlink_loop_is_refused_naming_the_flag(
        flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``--save loop1`` where ``loop1`` links to itself was refused as a folder that "cannot be searched", with a
    fix (make it readable) that does not apply and, for --save, words about loading and no flag: the refusal names
    the flag and the loop."""
    entry = entry_up_to_pretrain(monkeypatch)
    loop = tmp_path / f"loop{random.randrange(1, 1000)}"
    loop.symlink_to(loop.name)
    given = loop if random.random() < 0.5 else loop / "checkpoints"
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data",
            "--seq-length", "64", flag, str(given), *(["--save-interval", "5"] if flag == "--save" else [])]
    assert entry.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f"error: {flag} {given} runs into a loop of symbolic links (Too many levels of symbolic links): " in line
    assert line.endswith("; name the folder by a path without one"), line
    with pytest.raises(ValueError, match=f"{loop}/{TRACKER_FILE} runs into a loop of symbolic links"):
        has_tracker(loop)
    folder = tmp_path / "checkpoints"  # a folder that can be searched, whose tracker file is the loop
    folder.mkdir()
    (folder / TRACKER_FILE).symlink_to(TRACKER_FILE)
    with pytest.raises(ValueError, match=f"{folder}/{TRACKER_FILE} runs into a loop of symbolic links") as refusal:
        has_tracker(folder)
    assert "readable" not in str(refusal.value)
