"""What a conversion may do to ``--out``: fill it, replace only a previous output of its own, never an input, and
leave it as it was when refused, failing or stopped by SIGTERM / SIGHUP."""

from __future__ import annotations

import errno
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from megatron.oellm.convert import output, to_hf, to_mcore
from megatron.oellm.convert.errors import ConversionError, ConversionInterrupted
from megatron.oellm.convert.mcore_checkpoint import ITERATION_FILE, RELEASE
from megatron.oellm.convert.safetensors_io import INDEX_NAME, SafetensorsSource
from megatron.oellm.convert.summary import ConversionSummary
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, signal_at_layer_one, signal_handler

UNIT_FUNCTION = {"hf-to-mcore": "hf_to_mcore_unit", "mcore-to-hf": "mcore_to_hf_unit"}
UNIT_MODULE = {"hf-to-mcore": to_mcore, "mcore-to-hf": to_hf}
"""The module of each direction and the function it calls there once per unit (where a test makes the conversion
fail half-way, or checks that a refused one never starts)."""


def _convert(direction: str, tmp: Path, card, out: Path, **kwargs) -> ConversionSummary:
    """Run one direction on ``tmp/hf`` (hf-to-mcore) or ``tmp/mcore`` (mcore-to-hf)."""
    if direction == "hf-to-mcore":
        return hf_to_mcore_checkpoint(card, tmp / "hf", out, **kwargs)
    return mcore_to_hf_checkpoint(card, tmp / "mcore", out, **kwargs)


def _user_files(directory: Path) -> dict[str, str]:
    """A working directory's own files: a script and a data folder (relative path -> content), created."""
    files = {"run.sh": "echo train\n", "data/x.txt": "1\n", "tokenizer.json": "{}"}
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    return files


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_overwrite_refuses_a_directory_holding_anything_else(converted, direction: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``--out . --overwrite`` in a working directory, or a re-export into an HF directory that also holds the
    tokenizer: refused, naming what it would delete; nothing is touched. Without --overwrite: refused too."""
    card, _, tmp = converted
    work = tmp / "work"
    _convert(direction, tmp, card, work)
    files = _user_files(work)
    before = sorted(p.relative_to(work) for p in work.rglob("*"))
    monkeypatch.chdir(work)
    for overwrite in (True, False):  # named at once: no second try with --overwrite to learn what stands in the way
        with pytest.raises(ConversionError, match=r"holds data, run\.sh, tokenizer\.json, which this conversion does "
                                                  r"not write; --overwrite replaces only a previous output"):
            _convert(direction, tmp, card, Path("."), overwrite=overwrite)
    assert sorted(p.relative_to(work) for p in work.rglob("*")) == before
    assert all((work / name).read_text() == text for name, text in files.items())


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_a_previous_output_is_replaced_only_with_overwrite(converted, direction: str) -> None:
    """Without --overwrite a previous output is named as such and kept; the refusal says how to replace it."""
    card, _, tmp = converted
    out = tmp / "again"
    _convert(direction, tmp, card, out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ConversionError, match="holds a previous output of this conversion; pass --overwrite to "
                                              "replace it"):
        _convert(direction, tmp, card, out)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("max_shard_bytes", [100_000, 10**9])
def test_overwrite_never_replaces_a_hugging_face_checkpoint(converted, max_shard_bytes: int) -> None:
    """``mcore-to-hf --out <the HF model> --overwrite`` (the export's source, or any download, given as ``--out`` by
    mistake) deleted that model and put the export in its place: its files have the names an export writes. They
    carry no export mark, so the model is refused and kept, plain or as a cache snapshot's links into its blobs;
    a marked export of either layout is still replaced."""
    card, hf, tmp = converted
    original = tmp / "original"
    mcore_to_hf_checkpoint(card, tmp / "mcore", original, max_shard_bytes=max_shard_bytes)
    for path in original.iterdir():  # the same files as transformers' save_pretrained writes them: no mark
        if path.suffix == ".safetensors":
            tensors = load_file(path)
            save_file(tensors, path, metadata={"format": "pt"})
        elif path.name == INDEX_NAME:
            index = json.loads(path.read_text())
            index["metadata"] = {"total_size": index["metadata"]["total_size"]}
            path.write_text(json.dumps(index))
    snapshot = tmp / "snapshot"
    snapshot.mkdir()
    for path in original.iterdir():
        (snapshot / path.name).symlink_to(path)
    refusals = {original: r"holds a model \(model[-.].*\) without the oellm_export mark that mcore-to-hf writes into "
                          r"its files: another model's",
                snapshot: r"holds config\.json \(a link\), model[-.].* \(a link\)"}
    for model, refusal in refusals.items():
        before = {p.name: p.read_bytes() for p in model.iterdir()}
        with pytest.raises(ConversionError, match=refusal):
            mcore_to_hf_checkpoint(card, tmp / "mcore", model, overwrite=True, max_shard_bytes=max_shard_bytes)
        assert {p.name: p.read_bytes() for p in model.iterdir()} == before
        assert all(p.is_symlink() for p in snapshot.iterdir())
    export = tmp / "export"
    mcore_to_hf_checkpoint(card, tmp / "mcore", export, max_shard_bytes=max_shard_bytes)
    mcore_to_hf_checkpoint(card, tmp / "mcore", export, overwrite=True, max_shard_bytes=max_shard_bytes)
    assert_bitwise_equal(hf, dict(SafetensorsSource(export)))


def test_overwrite_replaces_a_previous_output_and_keeps_the_directory(converted) -> None:
    """A sharded export replaced by a one-file export: the old shards and index go (no stale files), the directory
    itself (inode) stays."""
    card, hf, tmp = converted
    mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", max_shard_bytes=100_000)
    assert (tmp / "out" / INDEX_NAME).is_file()
    inode = (tmp / "out").stat().st_ino
    mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", overwrite=True, max_shard_bytes=10**9)
    assert sorted(p.name for p in (tmp / "out").iterdir()) == ["config.json", "model.safetensors"]
    assert (tmp / "out").stat().st_ino == inode
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp / "out")))
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore", overwrite=True)
    assert sorted(p.name for p in (tmp / "mcore").iterdir()) == [ITERATION_FILE, RELEASE]


def test_overwrite_keeps_a_users_file_inside_release(converted) -> None:
    """``--overwrite`` replaces a previous hf-to-mcore output, but ``release/`` replaced as a whole would delete a
    file the user put there (notes, an eval result): refused, naming it, and the file stays."""
    card, _, tmp = converted
    notes = tmp / "mcore" / RELEASE / "eval_results.txt"
    notes.write_text("loss 1.23\n")
    with pytest.raises(ConversionError, match=r"holds release/eval_results\.txt, which this conversion does not write"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore", overwrite=True)
    assert notes.read_text() == "loss 1.23\n"


def test_overwrite_keeps_a_training_checkpoint_under_release(converted) -> None:
    """A ``release/`` directory megatron training saved (its ``common.pt`` / ``mp_rank_00``) is not a previous output
    of the conversion: refused rather than deleted."""
    card, _, tmp = converted
    (tmp / "mcore" / RELEASE / "mp_rank_00").mkdir()
    (tmp / "mcore" / RELEASE / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"weights")
    with pytest.raises(ConversionError, match=r"holds release/mp_rank_00"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore", overwrite=True)
    assert (tmp / "mcore" / RELEASE / "mp_rank_00" / "model_optim_rng.pt").read_bytes() == b"weights"


def test_overwrite_of_a_previous_mcore_output_still_works(converted) -> None:
    """The nested check does not refuse what hf-to-mcore itself wrote."""
    card, _, tmp = converted
    summary = hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore", overwrite=True)
    assert summary.tensors_written > 0
    assert sorted(p.name for p in (tmp / "mcore").iterdir()) == ["latest_checkpointed_iteration.txt", RELEASE]


@pytest.mark.parametrize("says", ["100\n", "release-candidate\n"])
def test_overwrite_keeps_a_training_runs_tracker(converted, says: str) -> None:
    """A ``latest_checkpointed_iteration.txt`` saying anything but ``release`` is a training run's tracker, not the
    one hf-to-mcore wrote: ``--overwrite`` refuses it in one line naming the file and what it says, and keeps it."""
    card, _, tmp = converted
    (tmp / "mcore" / ITERATION_FILE).write_text(says)
    with pytest.raises(ConversionError, match=rf"holds {re.escape(ITERATION_FILE)} \(saying "
                                              rf"{re.escape(repr(says.strip()))} rather than 'release'\), which this "
                                              "conversion does not write") as refusal:
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore", overwrite=True)
    assert "\n" not in str(refusal.value)
    assert (tmp / "mcore" / ITERATION_FILE).read_text() == says


def test_a_file_named_release_is_not_a_previous_output(converted, tmp_path: Path) -> None:
    """``release`` as a plain file of the user's is not the checkpoint directory hf-to-mcore writes."""
    card, _, tmp = converted
    out = tmp / "work"
    out.mkdir()
    (out / RELEASE).write_text("v1.0 notes\n")
    with pytest.raises(ConversionError, match=r"holds release, which this conversion does not write"):
        hf_to_mcore_checkpoint(card, tmp / "hf", out, overwrite=True)
    assert (out / RELEASE).read_text() == "v1.0 notes\n"


@pytest.mark.parametrize(("direction", "overwrite"), [("hf-to-mcore", False), ("mcore-to-hf", True)])
def test_a_file_written_into_out_during_the_conversion_is_kept(converted, monkeypatch: pytest.MonkeyPatch,
                                                               direction: str, overwrite: bool) -> None:
    """The rules are applied again when the output is moved into place: a user's file that appeared meanwhile (in
    an empty --out, or next to a previous output with --overwrite) refuses the move; staging is removed."""
    card, _, tmp = converted
    out = tmp / "out"
    if overwrite:
        _convert(direction, tmp, card, out)
    else:
        out.mkdir()
    convert = getattr(UNIT_MODULE[direction], UNIT_FUNCTION[direction])

    def user_writes_at_layer_one(card, unit, tensors):
        if unit == 1:
            (out / "tokenizer.json").write_text('{"user": "data"}')
        return convert(card, unit, tensors)

    monkeypatch.setattr(UNIT_MODULE[direction], convert.__name__, user_writes_at_layer_one)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(ConversionError, match="holds tokenizer.json, which this conversion does not write"):
        _convert(direction, tmp, card, out, overwrite=overwrite)
    assert (out / "tokenizer.json").read_text() == '{"user": "data"}'
    assert sorted(p.name for p in out.iterdir()) == sorted([*before, "tokenizer.json"])
    assert [p.name for p in tmp.iterdir() if p.name.startswith(".")] == []


def test_out_holding_an_input_through_links_is_refused(converted) -> None:
    """The Hugging Face cache layout: the snapshot's files are links into ``../blobs``. Writing to ``blobs`` would
    delete the weights the snapshot links to; the same for a megatron checkpoint whose files are links."""
    card, _, tmp = converted
    snapshot, blobs = tmp / "cache" / "snapshot", tmp / "cache" / "blobs"
    snapshot.mkdir(parents=True)
    (tmp / "hf").rename(blobs)
    for target in blobs.iterdir():
        (snapshot / target.name).symlink_to(Path("..") / "blobs" / target.name)
    with pytest.raises(ConversionError, match=r"would overwrite the input .*snapshot/.* \(a link to .*blobs/"):
        hf_to_mcore_checkpoint(card, snapshot, blobs, overwrite=True)
    assert len(list(blobs.iterdir())) == len(list(snapshot.iterdir()))
    linked = tmp / "linked" / RELEASE
    linked.mkdir(parents=True)
    for target in (tmp / "mcore" / RELEASE).iterdir():
        (linked / target.name).symlink_to(target)
    with pytest.raises(ConversionError, match=r"would overwrite the input .*linked/release/"):
        mcore_to_hf_checkpoint(card, linked, tmp / "mcore" / RELEASE, overwrite=True)
    assert (tmp / "mcore" / RELEASE / ".metadata").is_file()


def test_unusable_out_paths_are_named(converted) -> None:
    card, _, tmp = converted
    (tmp / "a_file").write_text("x")
    with pytest.raises(ConversionError, match=r"output .*a_file is a file; pass a directory"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "a_file", overwrite=True)
    with pytest.raises(ConversionError, match=r"cannot write the output .*a_file/sub: \[Errno 20\] Not a directory"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "a_file" / "sub")
    with pytest.raises(ConversionError, match=r"cannot write the output /proc/oellm_out: "):
        hf_to_mcore_checkpoint(card, tmp / "hf", Path("/proc/oellm_out"))
    assert (tmp / "a_file").read_text() == "x"


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_out_on_another_file_system_than_its_parent_is_refused_up_front(converted, direction: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``--out`` that is a mount point (a container's bind mount, a job's scratch mount) cannot receive the staging
    directory beside it by rename: refused before the conversion, and a previous output there is kept (it used to be
    deleted, then the move failed with EXDEV and the new output was removed too)."""
    card, _, tmp = converted
    out = tmp / "mounted"
    to_mcore = direction == "hf-to-mcore"
    run = (hf_to_mcore_checkpoint, tmp / "hf") if to_mcore else (mcore_to_hf_checkpoint, tmp / "mcore")
    run[0](card, run[1], out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real_file_system = output.file_system_of
    monkeypatch.setattr(output, "file_system_of", lambda path: real_file_system(path) + (path == out.resolve()))
    called = []
    monkeypatch.setattr(UNIT_MODULE[direction], UNIT_FUNCTION[direction], lambda *a, **k: called.append(1))
    with pytest.raises(ConversionError, match=rf"{out} is on another file system than .*; pass a directory inside it"):
        run[0](card, run[1], out, overwrite=True)
    assert not called
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not list(tmp.glob(".mounted.partial-*"))


class _NotHandled(Exception):
    """Raised by the test's own handler: the conversion did not handle the signal (and pytest lives on)."""


def _raise_not_handled(signum: int, frame: object) -> None:
    """A previous handler the conversion's own must replace while it runs."""
    raise _NotHandled


@pytest.mark.parametrize(("direction", "signum"), [("hf-to-mcore", signal.SIGTERM), ("mcore-to-hf", signal.SIGHUP)])
def test_sigterm_and_sighup_remove_the_partial_output(converted, monkeypatch: pytest.MonkeyPatch, direction: str,
                                                      signum: int) -> None:
    """``scancel`` / a Slurm time limit (SIGTERM) or a closed terminal (SIGHUP) half-way: the staging directory and
    the parent directory of --out it created are removed, the exit status is the shell's for the signal, the old
    handler is back."""
    card, _, tmp = converted
    signal_at_layer_one(monkeypatch, UNIT_FUNCTION[direction], signum)
    with signal_handler(signum, _raise_not_handled):
        before = sorted(tmp.iterdir())
        with pytest.raises(ConversionInterrupted, match=f"stopped by {signal.Signals(signum).name}") as raised:
            _convert(direction, tmp, card, tmp / "new" / "out")  # hf-to-mcore: DCP's writer wraps the signal's error
        assert raised.value.exit_status == 128 + signum
        assert sorted(tmp.iterdir()) == before
        assert signal.getsignal(signum) is _raise_not_handled


def test_output_to_a_new_directory_is_a_rename(converted) -> None:
    """No --out yet: the finished staging directory becomes --out, and nothing is left beside it."""
    card, hf, tmp = converted
    mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "new" / "out")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp / "new" / "out")))
    assert [p.name for p in (tmp / "new").iterdir()] == ["out"]


def test_sigterm_while_the_output_is_moved_into_place_lets_the_move_finish(converted,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal during the final move is held back: the output is complete, and the error says so."""
    card, hf, tmp = converted
    (tmp / "out").mkdir()
    commit = output._commit_output

    def terminated_while_moving(staging, out_dir, owned):
        os.kill(os.getpid(), signal.SIGTERM)
        commit(staging, out_dir, owned)

    monkeypatch.setattr(output, "_commit_output", terminated_while_moving)
    with signal_handler(signal.SIGTERM, _raise_not_handled), \
            pytest.raises(ConversionInterrupted, match="the output is complete"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp / "out")))



def test_a_signal_the_process_ignores_stays_ignored(converted, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``nohup`` SIGHUP is ignored: a closed terminal must not stop the conversion."""
    card, hf, tmp = converted
    signal_at_layer_one(monkeypatch, "mcore_to_hf_unit", signal.SIGHUP)
    with signal_handler(signal.SIGHUP, signal.SIG_IGN):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp / "out")))


def test_a_signal_while_a_failed_conversion_cleans_up_does_not_cut_the_cleanup_short(
        converted, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM arriving while the staging directory of a failed conversion is being removed: it is removed all the
    same, and the error that ended the run is kept, the signal named (it came after the error)."""
    card, _, tmp = converted
    real_rmtree = output.shutil.rmtree

    def failing_unit(card, unit, tensors):
        raise ConversionError("a unit failed")

    def terminated_while_removing(path, *args, **kwargs):
        if ".partial-" in str(path) and Path(path).exists():
            os.kill(os.getpid(), signal.SIGTERM)
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(to_hf, "mcore_to_hf_unit", failing_unit)
    monkeypatch.setattr(output.shutil, "rmtree", terminated_while_removing)
    with signal_handler(signal.SIGTERM, _raise_not_handled), \
            pytest.raises(ConversionInterrupted, match=r"^a unit failed \(SIGTERM also arrived meanwhile\)$"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert sorted(p.name for p in tmp.iterdir()) == ["hf", "mcore"]


def in_kib(count: int) -> str:
    """``count`` bytes as the messages give a size between 1 KiB and 1 MiB (the tiny card's weights are ~420 KiB),
    written out here rather than by :func:`output.format_bytes`, whose messages are under test."""
    assert 2**10 <= count < 2**20, count
    return f"{count / 1024:.1f} KiB"


@pytest.mark.parametrize(("count", "text"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
                                             (456 * 2**20, "456.0 MiB"), (2**20 + 2**19, "1.5 MiB"),
                                             (int(12.34 * 2**30), "12.3 GiB"), (3 * 2**40 + 2**39, "3.5 TiB")])
def test_sizes_are_written_in_binary_units(count: int, text: str) -> None:
    """The disk sizes of the refusals, against sizes written out by hand (the message tests only see KiB)."""
    assert output.format_bytes(count) == text


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_an_output_that_does_not_fit_is_refused_before_anything_is_written(converted, monkeypatch: pytest.MonkeyPatch,
                                                                            direction: str) -> None:
    """The output's size (the weights, both directions) against the file system's free space, before the first
    tensor is written (the empty staging directory exists by then and is removed with the refusal)."""
    card, hf, tmp = converted
    weights = sum(tensor.numel() * tensor.element_size() for tensor in hf.values())
    free, real_usage = weights - 1, shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real_usage(path)._replace(free=free))
    before = sorted(tmp.iterdir())
    with pytest.raises(ConversionError, match=rf"needs about {re.escape(in_kib(weights))} but the file "
                                              rf"system of {re.escape(str(tmp))} has {re.escape(in_kib(free))} free"):
        _convert(direction, tmp, card, tmp / "out")
    assert sorted(tmp.iterdir()) == before
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real_usage(path)._replace(free=weights))
    _convert(direction, tmp, card, tmp / "out")


def _limit_file_size(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` capping the size of any file the child writes (writes past it fail with EFBIG, as on a full
    disk, instead of the default SIGXFSZ killing the child)."""
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    return apply


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_a_write_the_operating_system_refuses_ends_in_one_line(converted, direction: str) -> None:
    """A real failing write (a file-size limit, so that no disk needs filling) through torch's checkpoint writer and
    safetensors: exit 2, one line naming the system's error, no traceback, the partial output removed."""
    card, _, tmp = converted
    source = ["--hf", str(tmp / "hf")] if direction == "hf-to-mcore" else ["--mcore", str(tmp / "mcore")]
    before = sorted(tmp.iterdir())
    done = subprocess.run([sys.executable, "-m", "megatron.oellm", "convert", direction, "--model", card.name, *source,
                           "--out", str(tmp / "out")], capture_output=True, text=True, timeout=300,
                          preexec_fn=_limit_file_size(20_000))
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout == ""
    written = {"hf-to-mcore": RELEASE, "mcore-to-hf": "shard-00000.tmp"}[direction]  # torch's writer names no file
    staged = re.escape(str(tmp)) + r"/\.out\.partial-\d+/" + re.escape(written)
    assert re.fullmatch(
        re.escape(f"oellm convert {direction}: error: the conversion failed: [Errno 27] File too large writing "
                  f"{tmp / 'out' / written} (") + staged + re.escape(
            ", where the output is written beside --out before it is moved in); the partial output was removed, "
            "--out is as it was (one file may not grow that large there: see `ulimit -f` and the file system's "
            "largest file; mcore-to-hf writes smaller files with --max-shard-size)"), done.stderr.splitlines()[-1])
    assert "Traceback" not in done.stderr
    assert sorted(tmp.iterdir()) == before


def test_megatron_cores_import_warnings_do_not_reach_the_user(converted) -> None:
    """hf-to-mcore imports megatron-core to write its checkpoint config; without Transformer Engine and apex (a CPU
    node, where conversions run) that import warned ten lines on stderr (TE, apex, absl fallbacks), none about the
    conversion: a successful run printed them, a refused one put them before its one-line error."""
    card, _, tmp = converted
    command = [sys.executable, "-m", "megatron.oellm", "convert", "hf-to-mcore", "--model", card.name,
               "--hf", str(tmp / "hf")]
    done = subprocess.run([*command, "--out", str(tmp / "out")], capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr) == (0, "")
    refused = subprocess.run([*command, "--out", str(tmp / "limited")], capture_output=True, text=True, timeout=300,
                             preexec_fn=_limit_file_size(20_000))
    assert refused.returncode == 2
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("oellm convert hf-to-mcore: error: the conversion failed: [Errno 27]")


@pytest.mark.parametrize("direction", list(UNIT_FUNCTION))
def test_a_defect_of_the_code_raising_file_not_found_keeps_its_traceback(converted, monkeypatch: pytest.MonkeyPatch,
                                                                         direction: str) -> None:
    """A FileNotFoundError from our own code (not the storage refusing a write) is a defect: its traceback is the
    report, not a one-line 'the conversion failed: [Errno 2] ...' that blames the operating system."""
    card, _, tmp = converted

    def buggy(*args: object) -> object:
        raise FileNotFoundError(2, "No such file or directory", "/opt/oellm/internal-table.json")

    monkeypatch.setattr(UNIT_MODULE[direction], UNIT_FUNCTION[direction], buggy)
    with pytest.raises(BaseException) as raised:  # hf-to-mcore: DCP wraps it in a CheckpointException (a BaseException)
        _convert(direction, tmp, card, tmp / "out")
    assert not isinstance(raised.value, ConversionError), raised.value


def test_a_defect_raised_while_handling_an_os_error_is_not_reported_as_that_os_error(
        converted, monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyError raised in an ``except OSError`` fallback is the failure, not the OSError it was handling."""
    card, _, tmp = converted

    def buggy(*args: object) -> object:
        try:
            (tmp / "no-such-cache.json").read_text()
        except FileNotFoundError:
            return {}["layers"]  # the real defect

    monkeypatch.setattr(to_hf, "mcore_to_hf_unit", buggy)
    with pytest.raises(KeyError):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")


def test_an_output_that_does_not_fit_leaves_no_new_directories(converted, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal removes the missing parents of --out it created."""
    card, _, tmp = converted
    real_usage = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real_usage(path)._replace(free=1))
    with pytest.raises(ConversionError, match="needs about"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "new" / "deeper" / "out")
    assert not (tmp / "new").exists()


@pytest.mark.parametrize("direction", list(UNIT_FUNCTION))
def test_a_full_disk_is_reported_with_the_output_size_and_the_free_space(converted, monkeypatch: pytest.MonkeyPatch,
                                                                         direction: str) -> None:
    """ENOSPC half-way (hf-to-mcore: inside DCP's writer, which wraps it): one line with both sizes, nothing left."""
    card, hf, tmp = converted

    def disk_full(*args: object) -> object:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(UNIT_MODULE[direction], UNIT_FUNCTION[direction], disk_full)
    weights = in_kib(sum(tensor.numel() * tensor.element_size() for tensor in hf.values()))
    before = sorted(tmp.iterdir())
    with pytest.raises(ConversionError, match=rf"^the conversion failed: \[Errno 28\] No space left on device; the "
                                              rf"partial output was removed, --out is as it was \(the output needs "
                                              rf"about {re.escape(weights)}; the file system of {re.escape(str(tmp))} "
                                              rf"has [0-9.]+ [KMGT]?i?B free now\); free some space there or "
                                              rf"choose another --out$"):
        _convert(direction, tmp, card, tmp / "new" / "out")
    assert sorted(tmp.iterdir()) == before


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_partial_outputs_of_killed_conversions_are_named(converted, monkeypatch: pytest.MonkeyPatch,
                                                         direction: str) -> None:
    """SIGKILL (the OOM killer, Slurm after a time limit's grace period) leaves the hidden staging directory behind;
    the next conversion into the same --out names it, in its report and when the disk is too full."""
    card, hf, tmp = converted
    killed = tmp / f".out.partial-{os.getpid() + 1}"
    (killed / RELEASE).mkdir(parents=True)
    (killed / RELEASE / "__0_3.distcp").write_bytes(random.randbytes(64))
    (tmp / ".out.partial-notes").mkdir()  # not a staging directory: no process id
    summary = _convert(direction, tmp, card, tmp / "out")
    assert any(str(killed) in note and "killed" in note for note in summary.notes), summary.notes
    assert not any(".out.partial-notes" in note for note in summary.notes)
    assert killed.is_dir()  # named, never removed: another node may still be writing it
    weights = sum(tensor.numel() * tensor.element_size() for tensor in hf.values())
    real_usage = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real_usage(path)._replace(free=weights - 1))
    with pytest.raises(ConversionError, match=rf"free some space.*killed hold disk space beside --out: "
                                              rf"{re.escape(str(killed))}"):
        _convert(direction, tmp, card, tmp / "out", overwrite=True)


def test_a_full_disk_under_several_new_parents_names_the_nearest_existing_directory(
        converted, monkeypatch: pytest.MonkeyPatch) -> None:
    """--out two missing levels deep (tmp/new/deeper/out): the failed conversion removes the parents it created,
    then reports the free space of the file system of tmp, the nearest directory that still exists, in one line."""
    card, _, tmp = converted

    def disk_full(*args: object) -> object:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(UNIT_MODULE["hf-to-mcore"], UNIT_FUNCTION["hf-to-mcore"], disk_full)
    with pytest.raises(ConversionError, match=rf"No space left on device; .* the file system of {re.escape(str(tmp))} "
                                              rf"has [0-9.]+ [KMGT]?i?B free now\); free some space there or "
                                              rf"choose another --out$"):
        _convert("hf-to-mcore", tmp, card, tmp / "new" / "deeper" / "out")
    assert not (tmp / "new").exists()


def test_a_previous_output_a_killed_overwrite_moved_aside_is_named_with_what_to_check(tmp_path):
    """SIGKILL during ``--overwrite`` may leave the previous output in ``.NAME.replaced-PID`` (moved aside while the
    new one moved in): the note on leftovers named only ``.partial-`` folders, so that one went unseen."""
    import random

    from megatron.oellm.convert.output import leftover_staging, leftover_staging_note, trash_directory

    out = tmp_path / "out"
    out.mkdir()
    pids = random.sample([pid for pid in range(2, 10**5) if pid != os.getpid()], 2)
    replaced = tmp_path / f".out.replaced-{pids[0]}"
    partial = tmp_path / f".out.partial-{pids[1]}"
    for folder in (replaced, partial, tmp_path / ".out.replaced-x", tmp_path / ".other.replaced-1"):
        folder.mkdir()
    trash_directory(out).mkdir()  # this process's own: not a leftover
    assert leftover_staging(out) == sorted([partial, replaced])
    note = leftover_staging_note(out)
    assert replaced.name in note and partial.name in note and "check first that --out is whole" in note


def test_overwrite_keeps_config_files_without_marked_weights_and_links_to_an_export(converted) -> None:
    """A folder holding only a config.json and generation_config.json (a model's config kept apart, or the rest of a
    download) is no previous export: --overwrite refused it before, by name, and must still. A link to a marked
    export's file is no previous output either: replacing it would write through or drop a file elsewhere."""
    card, _, tmp = converted
    configs = tmp / "configs"
    configs.mkdir()
    for name in ("config.json", "generation_config.json"):
        (configs / name).write_text((tmp / "hf" / name).read_text() if (tmp / "hf" / name).exists() else "{}\n")
    before = {p.name: p.read_bytes() for p in configs.iterdir()}
    with pytest.raises(ConversionError, match=r"holds config\.json \(no marked model\.safetensors or "
                                              r"model\.safetensors\.index\.json beside it\)"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", configs, overwrite=True)
    assert {p.name: p.read_bytes() for p in configs.iterdir()} == before
    export = tmp / "export"
    mcore_to_hf_checkpoint(card, tmp / "mcore", export)
    linked = tmp / "linked"
    linked.mkdir()
    for path in export.iterdir():
        (linked / path.name).symlink_to(path)
    with pytest.raises(ConversionError, match=r"holds config\.json \(a link\), .*model\.safetensors \(a link\)"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", linked, overwrite=True)
    assert all(p.is_symlink() for p in linked.iterdir())
    assert sorted(p.name for p in linked.iterdir()) == sorted(p.name for p in export.iterdir())



def _tracker_text(kind: str) -> tuple[str, str]:
    """(what a tracker says, its quote in the refusal) for ``kind``: ``padded``, a short number padded with whitespace
    past 40 bytes (nothing cut: no "..."); ``multibyte``, 21 to 40 two-byte characters (none split, nothing cut);
    ``multibyte-cut``, 41 to 60 of them (cut at 40 characters, with "...")."""
    if kind == "padded":
        return "1234\n" + " " * 40 + "\n", "1234"
    count = int(torch.randint(21, 41, ())) if kind == "multibyte" else int(torch.randint(41, 61, ()))
    return "é" * count + "\n", "é" * min(count, 40) + ("..." if count > 40 else "")


@pytest.mark.parametrize("kind", ["padded", "multibyte", "multibyte-cut"])
def test_a_foreign_tracker_is_quoted_whole_characters_and_dots_only_if_cut(converted, kind: str) -> None:
    """The refusal quotes the tracker stripped of whitespace, up to 40 characters (never half a UTF-8 one), with
    "..." only where it cut something: it read 41 bytes and compared their count before the strip."""
    card, _, tmp = converted
    says, quoted = _tracker_text(kind)
    (tmp / "mcore" / ITERATION_FILE).write_text(says, encoding="utf-8")
    with pytest.raises(ConversionError, match=rf"\(saying {re.escape(repr(quoted))} rather than 'release'\)"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore", overwrite=True)
