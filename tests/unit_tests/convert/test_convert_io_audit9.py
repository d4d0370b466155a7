"""Mutation audit of the conversion's file handling (session 41): safetensors shard planning at the size limit, the
truncation check of megatron data files whatever order ``.metadata`` lists their items in, stripping a single
padding row and the advice for a run's shorter vocabulary, a weight file whose link leads nowhere, a staging
directory a killed run of the same process id left, and which errors count as the storage's refusal. Each test pins a behaviour no earlier test held."""

from __future__ import annotations

import argparse
import errno
import os
import pickle
import random
import re
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from megatron.oellm.convert.dist_ckpt import CheckpointReader
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.output import staged_output, staging_directory, storage_error_behind
from megatron.oellm.convert.safetensors_io import INDEX_NAME, SafetensorsSource
from megatron.oellm.convert.vocab_padding import VOCAB_TENSORS, stored_padded_vocab, strip_vocab_rows
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, raised_while_writing, write_safetensors


def test_a_shard_may_reach_exactly_the_size_limit(tmp_path: Path) -> None:
    """``--max-shard-size`` is the most a shard may hold, as in ``save_pretrained``: two tensors that fill the limit
    exactly share a shard and the third starts the next one (a strict ``<`` limit would write three shards)."""
    rows = random.randint(2, 50)
    tensors = {name: torch.randn(rows, 3) for name in ("a", "b", "c")}
    files = write_safetensors(tmp_path, tensors, max_shard_bytes=2 * rows * 3 * 4)
    assert [f.name for f in files] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                       INDEX_NAME]
    assert [sorted(load_file(f)) for f in files[:-1]] == [["a", "b"], ["c"]]
    assert_bitwise_equal(tensors, {name: t for f in files[:-1] for name, t in load_file(f).items()})


def test_a_weight_file_linking_to_a_missing_blob_is_named_with_the_advice_to_download_it(tmp_path: Path) -> None:
    """A Hugging Face cache snapshot links each file to ``../../blobs/<hash>``; a blob lost to a cut download or a
    cache cleanup leaves a dangling link, which is named with the advice to download it again (a ConversionError, not
    an ``OSError`` traceback)."""
    snapshot = tmp_path / "snapshots" / "rev"
    write_safetensors(snapshot, {"model.norm.weight": torch.randn(random.randint(2, 9))})
    (snapshot / "model.safetensors").rename(snapshot / "model-a.safetensors")
    dangling = snapshot / "model-b.safetensors"
    dangling.symlink_to(f"../../blobs/{random.getrandbits(64):016x}")
    with pytest.raises(ConversionError, match=rf"cannot read {re.escape(str(dangling))}: .*re-download it"):
        SafetensorsSource(snapshot)


def test_a_truncated_data_file_is_named_whatever_order_the_metadata_lists_its_items_in(converted) -> None:
    """The bound a data file must reach is the end of its last item in the file, not of the item ``.metadata`` happens
    to list last: with the items listed in reverse (DCP's metadata is a dict with no order promised), a file one byte
    short is still named before anything is read."""
    _, _, tmp = converted
    directory = tmp / "mcore" / "release"
    path = directory / ".metadata"
    metadata = pickle.loads(path.read_bytes())
    metadata.storage_data = dict(reversed(list(metadata.storage_data.items())))
    path.write_bytes(pickle.dumps(metadata))
    ends: dict[str, list[int]] = {}
    for info in metadata.storage_data.values():
        ends.setdefault(info.relative_path, []).append(info.offset + info.length)
    name = random.choice(sorted(name for name, item_ends in ends.items() if len(item_ends) > 1))
    end = max(ends[name])
    data = directory / name
    assert data.stat().st_size == end
    with data.open("r+b") as handle:
        handle.truncate(end - 1)
    with pytest.raises(ConversionError, match=rf"{re.escape(str(data))} has {end - 1} bytes, \.metadata stores data "
                                              rf"up to byte {end}; the file is truncated"):
        CheckpointReader(directory)


def test_a_single_padding_row_is_padding_and_is_stripped() -> None:
    """A vocabulary one token short of megatron's multiple (here ``128 k - 1`` tokens) is saved with one padding row:
    it passes as padding and the export cuts exactly that row from both vocabulary tensors."""
    vocab = 128 * random.randint(1, 8) - 1
    original = {name: torch.randn(vocab, 4) for name in VOCAB_TENSORS}
    padded = {name: torch.cat([t, torch.randn(1, 4)]) for name, t in original.items()}
    assert stored_padded_vocab(vocab, {name: len(t) for name, t in padded.items()}) == vocab + 1
    assert_bitwise_equal(original, strip_vocab_rows(padded, vocab))


@pytest.mark.parametrize("number", [errno.ENOSPC, errno.EIO])
def test_a_runtime_error_subclass_raised_while_handling_a_storage_error_is_a_defect(number: int) -> None:
    """Only torch's plain ``RuntimeError`` re-raise of a failed write is looked behind: a ``NotImplementedError`` (a
    ``RuntimeError`` subclass: the code's defect) raised while handling a full disk keeps its traceback instead of
    being reported as the disk's refusal; the plain re-raise of the same error is the storage's."""
    def raised_while_handling(kind: type[RuntimeError]) -> RuntimeError:
        return raised_while_writing(number, f"/scratch/out/model-{random.randrange(99)}.safetensors", kind,
                                    "while handling the write failure")

    assert storage_error_behind(raised_while_handling(NotImplementedError)) is None
    assert storage_error_behind(raised_while_handling(RuntimeError))[0] == number


def test_fewer_rows_than_the_card_name_the_vocab_size_that_exports_every_row() -> None:
    """Vocabulary tensors megatron sized from a shorter tokenizer: the refusal gives both ways out, the tokenizer's
    length or the stored row count (which exports every row the run trained)."""
    padded = 128 * random.randint(2, 1000)
    vocab = padded + 128 * random.randint(1, 4)
    run = argparse.Namespace(make_vocab_size_divisible_by=128, tensor_model_parallel_size=1, padded_vocab_size=padded)
    with pytest.raises(ConversionError, match=rf"pass the run's vocabulary with --vocab-size: the tokenizer's length, "
                                              rf"or {padded} for every row"):
        stored_padded_vocab(vocab, dict.fromkeys(VOCAB_TENSORS, padded), run)


def test_a_staging_directory_left_under_this_process_id_is_replaced(tmp_path: Path) -> None:
    """A conversion killed by SIGKILL leaves ``.<out>.partial-<pid>``; in a container the next run often gets the same
    process id. Its staging directory is then made afresh: the conversion succeeds and the output holds only what
    this run wrote, none of the killed run's files."""
    out = tmp_path / "out"
    stale = staging_directory(out.resolve())
    stale.mkdir()
    (stale / f"stale-{random.randrange(99)}.distcp").write_bytes(random.randbytes(16))
    content = random.randbytes(random.randint(1, 64))
    with staged_output(out, overwrite=False, foreign_in=lambda entry: [entry.name], needed_bytes=0) as staging:
        (staging / "model.safetensors").write_bytes(content)
    assert [p.name for p in out.iterdir()] == ["model.safetensors"]
    assert (out / "model.safetensors").read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_storage_error_given_as_the_explicit_cause_is_the_storages() -> None:
    """A failure raised ``from`` the storage's refusal (a wrapper naming what it was writing) is reported as that
    refusal, one line with its errno, not as a defect of the code."""
    number = random.choice([errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS])
    try:
        try:
            raise OSError(number, os.strerror(number), f"/scratch/out/__{random.randrange(99)}_0.distcp")
        except OSError as error:
            raise ValueError("writing the unit failed") from error
    except ValueError as wrapped:
        found = storage_error_behind(wrapped)
    assert found is not None and found[0] == number and os.strerror(number) in found[1]


def test_a_storage_error_quoted_by_safetensors_is_the_storages() -> None:
    """safetensors (Rust) raises its own error quoting the operating system's as ``(os error N)``: a storage refusal
    quoted there is reported as that errno in Python's words; another quoted error (a missing file) is not."""
    number = random.choice([errno.ENOSPC, errno.EDQUOT, errno.EIO])
    found = storage_error_behind(SafetensorError(f"Error while serializing: IoError(Os {{ code: {number} }}) "
                                                 f"(os error {number})"))
    assert found == (number, f"[Errno {number}] {os.strerror(number)}")
    assert storage_error_behind(SafetensorError(f"No such file (os error {errno.ENOENT})")) is None
