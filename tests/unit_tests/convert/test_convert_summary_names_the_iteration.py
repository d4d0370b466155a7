"""mcore-to-hf says which iteration it exported: a run folder whose tracker names one iteration while a newer one
exists printed only its tensor counts. The summary names the iteration directory and iteration read, and every
output file records them (safetensors ``__metadata__``, the index's ``metadata``; the directory by its name only)."""

from __future__ import annotations

import json
import random
import shutil
import struct
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert.safetensors_io import INDEX_NAME
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint


def _file_metadata(path: Path) -> dict:
    """A safetensors file's ``__metadata__`` (read from its header here, not by the converter's reader)."""
    with open(path, "rb") as file:
        length = struct.unpack("<Q", file.read(8))[0]
        return json.loads(file.read(length))["__metadata__"]


def _run(tmp: Path) -> tuple[Path, int]:
    """A run folder whose tracker names a random iteration while a newer one exists (both copies of the converted
    checkpoint); (folder, tracked iteration)."""
    run = tmp / "run"
    tracked = random.randrange(1, 10**6)
    for step in (tracked, tracked + random.randrange(1, 1000)):
        shutil.copytree(tmp / "mcore" / "release", run / f"iter_{step:07d}")
    (run / "latest_checkpointed_iteration.txt").write_text(f"{tracked}\n")
    return run, tracked


def test_the_summary_and_the_file_name_the_tracked_iteration(converted, capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = converted
    run, tracked = _run(tmp)
    capsys.readouterr()
    out = tmp / "out"
    assert main(["convert", "mcore-to-hf", "--model", card.name, "--mcore", str(run), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    source = run.absolute() / f"iter_{tracked:07d}"
    assert lines[1] == (f"  exported iteration {tracked} from {source} (the one latest_checkpointed_iteration.txt "
                        "names)"), lines
    metadata = _file_metadata(out / "model.safetensors")
    assert metadata["oellm_iteration"] == str(tracked) and metadata["oellm_source"] == source.name


def test_every_shard_and_the_index_record_the_source(converted) -> None:
    card, _, tmp = converted
    run, tracked = _run(tmp)
    out = mcore_to_hf_checkpoint(card, run, tmp / "out", max_shard_bytes=random.randrange(50_000, 150_000)).output
    source = f"iter_{tracked:07d}"
    files = sorted(out.glob("*.safetensors"))
    assert len(files) > 1
    for metadata in [*map(_file_metadata, files), json.loads((out / INDEX_NAME).read_text())["metadata"]]:
        assert metadata["oellm_iteration"] == str(tracked) and metadata["oellm_source"] == source
        assert metadata["oellm_export"] == "mcore-to-hf"


def test_an_iteration_given_itself_is_named_as_given(converted, capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = converted
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--model", card.name, "--mcore", str(tmp / "mcore" / "release"),
                 "--out", str(tmp / "out")]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        f"  exported the release checkpoint from {(tmp / 'mcore' / 'release').absolute()} (as given with --mcore)")
