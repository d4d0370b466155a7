"""A dataset whose ``.bin`` is not the one its ``.idx`` describes (the files of two datasets put together at one
prefix, or a ``.bin`` cut short by a copy): megatron-core 0.19.2 maps both without comparing them, so a ``.bin``
shorter than its index says stops the run with "buffer is smaller than requested size" whenever a sample of the
missing part comes up, mid-run, and a longer one is read as the index says, another corpus's tokens included. The
entry compares the ``.bin``'s size with the one its index gives (no token is read) and refuses a mismatch at start."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy
import pytest

from megatron.oellm.training import data_sources
from megatron.oellm.training.args import parse_oellm_argv
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain

ARGV = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "16"]
"""The entry's command line here, before its data flags."""

DTYPES = (numpy.uint8, numpy.uint16, numpy.int32, numpy.int64)
"""Token dtypes megatron-core's indexed datasets are written with."""


def random_dataset(folder: Path, rng: random.Random, documents: int, dtype: type[numpy.number]) -> tuple[str, list]:
    """An indexed dataset of ``documents`` random documents, written by megatron-core's own builder into ``folder``:
    its prefix and its documents' tokens."""
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    folder.mkdir(parents=True, exist_ok=True)
    prefix = str(folder / f"c{rng.randrange(10**6)}")
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    tokens = [numpy.array([rng.randrange(250) for _ in range(rng.randint(20, 60))]) for _ in range(documents)]
    for document in tokens:
        builder.add_document(document, [len(document)])
    builder.finalize(f"{prefix}.idx")
    return prefix, tokens


def put_together(folder: Path, index_of: str, bin_of: str) -> str:
    """A prefix in ``folder`` holding dataset ``index_of``'s ``.idx`` and dataset ``bin_of``'s ``.bin``."""
    folder.mkdir(parents=True)
    prefix = str(folder / "mixed")
    shutil.copyfile(f"{index_of}.idx", f"{prefix}.idx")
    shutil.copyfile(f"{bin_of}.bin", f"{prefix}.bin")
    return prefix


def two_datasets(tmp_path: Path) -> tuple[random.Random, tuple[str, list], tuple[str, list]]:
    """A random source and a small and a large random dataset of one random dtype (at most 240 and at least 260
    tokens: their sizes differ)."""
    rng = random.Random(random.random())
    dtype = rng.choice(DTYPES)
    small = random_dataset(tmp_path / "small", rng, rng.randint(2, 4), dtype)
    large = random_dataset(tmp_path / "large", rng, rng.randint(13, 20), dtype)
    return rng, small, large


def test_megatron_core_fails_late_on_a_short_bin_and_reads_another_corpus_from_a_long_one(tmp_path):
    """What the refusal saves: megatron-core opens both mismatches, then fails on the last sequence of the short one
    (when a sample of it comes up, mid-run) and reads the long ``.bin``'s tokens as the small dataset's."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    _rng, (small, small_tokens), (large, large_tokens) = two_datasets(tmp_path)
    short = IndexedDataset(put_together(tmp_path / "short", index_of=large, bin_of=small))
    # past the end of the .bin: numpy's "buffer is smaller than requested size", or a start beyond it
    with pytest.raises(ValueError, match="buffer is smaller than requested size|no greater than buffer length"):
        short[len(short) - 1]
    long = IndexedDataset(put_together(tmp_path / "long", index_of=small, bin_of=large))
    read = long[0].tolist()
    assert read == numpy.concatenate(large_tokens)[:len(read)].tolist()  # the large .bin's first tokens
    assert read != small_tokens[0].tolist()


@pytest.mark.parametrize("index_of_large", [True, False], ids=["short bin", "long bin"])
def test_the_entry_refuses_a_bin_of_another_size_naming_both_files_and_sizes(index_of_large, monkeypatch, capsys,
                                                                             tmp_path):
    _rng, (small, _), (large, _) = two_datasets(tmp_path)
    index_of, bin_of = (large, small) if index_of_large else (small, large)
    prefix = put_together(tmp_path / "mixed", index_of=index_of, bin_of=bin_of)
    entry = entry_up_to_pretrain(monkeypatch)
    assert entry.main([*ARGV, "--data-path", prefix, "--split", "100,0,0"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    actual, described = Path(f"{bin_of}.bin").stat().st_size, Path(f"{index_of}.bin").stat().st_size
    assert actual != described
    assert line.startswith(f"{entry.PROG}: error: dataset {prefix!r}: {prefix}.bin holds {actual} bytes"), line
    assert f"{prefix}.idx" in line and f"{described} bytes" in line
    assert ("shorter" if index_of_large else "longer") in line


@pytest.mark.parametrize("flags", [
    lambda good, bad: ["--data-path", bad, "--split", "100,0,0"],
    lambda good, bad: ["--data-path", "0.5", good, "0.5", bad, "--split", "100,0,0"],
    lambda good, bad: ["--train-data-path", good, "--valid-data-path", bad],
    lambda good, bad: ["--train-data-path", bad],
])
def test_every_local_dataset_of_every_data_source_is_compared(flags, tmp_path):
    """Per-split paths and a blend without its split (megatron fills in the default split) are compared too: the
    check reads every local dataset's index."""
    _rng, (small, _), (large, _) = two_datasets(tmp_path)
    bad = put_together(tmp_path / "mixed", index_of=small, bin_of=large)
    with pytest.raises(ValueError, match=rf"^dataset '{bad}': {bad}\.bin holds "):
        data_sources.check_data_source(parse_oellm_argv(["--seq-length", "16", *flags(small, bad)]))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda dtype: dtype.__name__)
def test_a_bin_of_the_size_its_index_gives_passes(dtype, monkeypatch, tmp_path):
    rng = random.Random(random.random())
    prefix, _ = random_dataset(tmp_path, rng, rng.randint(1, 12), dtype)
    entry = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        entry.main([*ARGV, "--data-path", prefix, "--split", "100,0,0"])
