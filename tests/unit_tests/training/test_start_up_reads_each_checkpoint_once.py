"""The training entry's start-up checks read each checkpoint they look at once: the ``.metadata`` of the checkpoint
the run loads serves its reader and the check of its norms' extra state, a ``torch_dcp`` checkpoint's reader and its
unfinished-save check, and the checkpoints ``--use-checkpoint-args`` takes arguments from serve the architecture and
the sequence-length checks. Each was read again there (``.metadata`` and the common state unpickled twice). DCP's own
loads of a ``torch_dcp`` checkpoint's stored arguments and of a ``torch_dist`` one's common state take the
``.metadata`` already read too: torch's reader opened the file a second time."""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

import pytest

from megatron.oellm.convert import dist_ckpt
from megatron.oellm.convert.mcore_checkpoint import CARD_KEY
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint, read_stored_checkpoint
from tests.unit_tests.training.checkpoint_helpers import (
    converted_random_checkpoint,
    counted_metadata_opens,
    save_args_checkpoint,
    save_dist_checkpoint,
)
from tests.unit_tests.training.entry_helpers import entry_up_to_pretrain, refused_line

CARD = "qwen3-30b-a3b-tiny"


def _counted_metadata_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[Path]:
    """Iteration directory -> how many times its ``.metadata`` is read (megatron-oellm's one reader of it, patched)."""
    reads: Counter[Path] = Counter()
    read_metadata = dist_ckpt.read_metadata

    def counted(directory: Path):
        reads[Path(directory)] += 1
        return read_metadata(directory)

    monkeypatch.setattr(dist_ckpt, "read_metadata", counted)
    return reads


def _stored_by_the_torch_backend() -> argparse.Namespace:
    """The card's run arguments as a run of the torch-native backend stores them, its sequence length included."""
    stored = parse_oellm_argv(merge_card_flags(["--oellm-model", CARD, "--seq-length",
                                                str(random.choice([64, 128]))]).argv)
    stored.oellm_backend, stored.transformer_impl = "torch", "local"
    return stored


@pytest.mark.parametrize("checkpoint_args", [True, False], ids=["use_checkpoint_args", "without"])
def test_the_entry_reads_each_checkpoint_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str], checkpoint_args: bool) -> None:
    """Resuming ``--load`` beside ``--pretrained-checkpoint``. With ``--use-checkpoint-args`` (and no
    ``--seq-length``) both are read for the architecture and the sequence-length checks, and the loaded one, saved by
    the torch-native backend without its norms' extra state, for the refusal under megatron's default strictness too;
    each once. Without it no checkpoint gives arguments (megatron-core loads ``--load`` and takes nothing from the
    other), so only the loaded one is read."""
    load = save_dist_checkpoint(tmp_path / "run", _stored_by_the_torch_backend())
    pretrained = save_dist_checkpoint(tmp_path / "pretrained", _stored_by_the_torch_backend())
    entry = entry_up_to_pretrain(monkeypatch)
    reads = _counted_metadata_reads(monkeypatch)
    line = refused_line(entry, capsys, ["--oellm-model", CARD, "--oellm-backend", "torch", "--ckpt-format",
                                        "torch_dist", "--mock-data", "--tokenizer-type", "NullTokenizer", "--load",
                                        str(load), "--pretrained-checkpoint", str(pretrained),
                                        *(["--use-checkpoint-args"] if checkpoint_args else ["--seq-length", "64"])])
    assert f"--load {load} was saved by the torch-native backend before its RMSNorm" in line
    expected = {load: 1, pretrained: 1} if checkpoint_args else {load: 1}
    assert {directory.parent: count for directory, count in reads.items()} == expected


def test_a_dcp_checkpoint_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``torch_dcp`` checkpoint's ``.metadata`` serves the unfinished-save check and the read of its arguments."""
    stored = _stored_by_the_torch_backend()
    directory = save_args_checkpoint("torch_dcp", tmp_path / "run", stored, random.randrange(1, 10**6))
    reads = _counted_metadata_reads(monkeypatch)
    run = parse_oellm_argv(merge_card_flags(["--oellm-model", CARD, "--ckpt-format", "torch_dcp", "--load",
                                             str(tmp_path / "run")]).argv)
    loaded = read_loaded_checkpoint(run)
    assert loaded is not None and loaded.common["args"].seq_length == stored.seq_length
    assert reads == Counter({directory: 1})


def test_a_dcp_checkpoints_metadata_file_is_opened_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``.metadata`` read for the unfinished-save check serves DCP's load of the stored arguments
    (``GivenMetadataReader``), which opened the file again."""
    stored = _stored_by_the_torch_backend()
    iteration = random.randrange(1, 10**6)
    directory = save_args_checkpoint("torch_dcp", tmp_path / "run", stored, iteration)
    opens = counted_metadata_opens(monkeypatch)
    run = parse_oellm_argv(merge_card_flags(["--oellm-model", CARD, "--ckpt-format", "torch_dcp", "--load",
                                             str(tmp_path / "run")]).argv)
    loaded = read_loaded_checkpoint(run)
    assert loaded is not None and loaded.common == {"args": stored, "iteration": iteration}
    assert opens == Counter({directory: 1})


def test_a_converted_checkpoints_metadata_file_is_opened_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``torch_dist`` checkpoint that stores its common state in DCP (as ``oellm convert`` writes it): the
    ``.metadata`` read for the checks of the stored keys serves DCP's load of the common state, which opened it
    again."""
    card = random.choice(["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
    load = converted_random_checkpoint(card, tmp_path)
    opens = counted_metadata_opens(monkeypatch)
    loaded = read_stored_checkpoint(load)
    assert loaded is not None and loaded.ckpt_format == "torch_dist" and loaded.common[CARD_KEY]["name"] == card
    assert opens == Counter({load / "release": 1})
