"""The export's safetensors headers and index record the source iteration directory by its name in the run folder
(``iter_XXXXXXX``) and its iteration, not its absolute path: the files go to the Hugging Face Hub, and the path named
the cluster's project, account and user. The printed summary still names the full path."""

from __future__ import annotations

import json
import random
import shutil
import struct
from pathlib import Path

from megatron.oellm.convert.safetensors_io import INDEX_NAME
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint


def _header(path: Path) -> str:
    """A safetensors file's JSON header as text (read here, not by the converter's reader)."""
    with open(path, "rb") as file:
        return file.read(struct.unpack("<Q", file.read(8))[0]).decode("utf-8")


def test_no_file_records_the_source_path(converted) -> None:
    card, _, tmp = converted
    step = random.randrange(1, 10**6)
    run = tmp / f"account{random.randrange(10**6)}" / "run"
    shutil.copytree(tmp / "mcore" / "release", run / f"iter_{step:07d}")
    (run / "latest_checkpointed_iteration.txt").write_text(f"{step}\n")
    summary = mcore_to_hf_checkpoint(card, run, tmp / "out", max_shard_bytes=random.randrange(50_000, 150_000))
    assert str(run.absolute() / f"iter_{step:07d}") in summary.source
    out = summary.output
    files = sorted(out.glob("*.safetensors"))
    assert len(files) > 1
    for text in [*map(_header, files), (out / INDEX_NAME).read_text()]:
        assert run.parent.name not in text and str(tmp) not in text, text[:300]
        metadata = json.loads(text).get("__metadata__") or json.loads(text)["metadata"]
        assert metadata["oellm_source"] == f"iter_{step:07d}" and metadata["oellm_iteration"] == str(step)
