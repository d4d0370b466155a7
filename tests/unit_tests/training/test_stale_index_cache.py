"""Index caches older than their dataset: megatron-core 0.19.2 reuses a GPTDataset index cache whose description
matches the run without looking at the dataset, so a dataset rewritten at the same prefix (by any tool) is read
through the old indices. The entry names such caches in a warning on rank 0 before megatron builds the datasets."""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import pytest

from megatron.oellm.training import index_cache
from megatron.oellm.training.corpus import build_corpus
from tests.unit_tests.gpt_dataset_samples import gpt_train_samples
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain

SEQUENCE = 16
"""Tokens per sample of the runs here: short, so that a small corpus gives many samples."""


def random_corpus(folder: Path, documents: int, rng: random.Random) -> str:
    """A byte corpus of ``documents`` random ASCII documents at ``folder / "text"``; returns its prefix."""
    folder.mkdir(parents=True)
    files = []
    for number in range(documents):
        files.append(folder / f"doc{number}.txt")
        files[-1].write_text("".join(rng.choice("abcdefghij ") for _ in range(rng.randint(40, 120))))
    return build_corpus(files, folder / "text").prefix


def rewrite_at(prefix: str, other: str) -> None:
    """Write dataset ``other``'s files over ``prefix``'s, later than anything before (as a rebuild by any tool)."""
    time.sleep(0.01)
    for suffix in (".bin", ".idx"):
        shutil.copyfile(f"{other}{suffix}", f"{prefix}{suffix}")
    later = time.time() + 5
    os.utime(f"{prefix}.idx", (later, later))


@pytest.mark.parametrize("own_cache_dir", [False, True])
def test_a_cache_built_before_the_dataset_was_rewritten_is_named_and_is_really_stale(tmp_path, own_cache_dir):
    rng = random.Random(random.random())
    prefix = random_corpus(tmp_path / "data", rng.randint(30, 50), rng)
    bystander = random_corpus(tmp_path / "bystander", rng.randint(5, 10), rng)
    cache = str(tmp_path / "cache") if own_cache_dir else None
    cache_dir = Path(cache) if cache else index_cache.default_index_cache(prefix)
    samples = rng.randint(10, 20)
    gpt_train_samples(prefix, samples, SEQUENCE, cache)
    gpt_train_samples(bystander, samples, SEQUENCE, cache if own_cache_dir else None)
    assert index_cache.stale_index_caches(prefix, cache_dir) == []

    rewrite_at(prefix, random_corpus(tmp_path / "new", rng.randint(31, 50), rng))
    [stale] = index_cache.stale_index_caches(prefix, cache_dir)
    assert stale.parent == cache_dir and stale.name.endswith("-GPTDataset-train-description.txt")
    if own_cache_dir:  # the bystander's cache in the same folder is not named: its dataset did not change
        assert index_cache.stale_index_caches(bystander, cache_dir) == []
    # the warning is real: megatron-core reads the rewritten dataset through the old indices, which fails or gives
    # other samples than a cache built for it
    try:
        through_old_indices = gpt_train_samples(prefix, samples, SEQUENCE, cache)
    except (IndexError, ValueError, RuntimeError):
        through_old_indices = None
    assert through_old_indices != gpt_train_samples(prefix, samples, SEQUENCE, str(tmp_path / "fresh-cache"))


def test_the_entry_warns_once_on_rank_0_and_goes_on(monkeypatch, capsys, tmp_path):
    rng = random.Random(random.random())
    prefix = random_corpus(tmp_path / "data", rng.randint(30, 50), rng)
    gpt_train_samples(prefix, rng.randint(10, 20), SEQUENCE)
    rewrite_at(prefix, random_corpus(tmp_path / "new", rng.randint(5, 10), rng))
    entry = entry_up_to_pretrain(monkeypatch)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "128",
            "--data-path", prefix, "--split", "100,0,0"]
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(Reached):
        entry.main(argv)
    [line] = capsys.readouterr().err.splitlines()
    cache_dir = index_cache.default_index_cache(prefix)
    assert line.startswith(f"{entry.PROG}: warning: dataset {prefix!r} was written after 1 of its index caches")
    assert f"({cache_dir}/" in line and "-GPTDataset-train-*)" in line and "delete those files" in line
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(Reached):
        entry.main(argv)
    assert capsys.readouterr().err == ""


def test_the_entry_looks_for_stale_caches_in_the_runs_data_cache_path(monkeypatch, capsys, tmp_path):
    """With ``--data-cache-path`` megatron-core keeps (and reuses) the caches there, not beside the dataset."""
    rng = random.Random(random.random())
    prefix = random_corpus(tmp_path / "data", rng.randint(30, 50), rng)
    cache = tmp_path / f"cache-{rng.randrange(10**6)}"
    gpt_train_samples(prefix, rng.randint(10, 20), SEQUENCE, str(cache))
    rewrite_at(prefix, random_corpus(tmp_path / "new", rng.randint(5, 10), rng))
    entry = entry_up_to_pretrain(monkeypatch)
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(Reached):
        entry.main(["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "128",
                    "--data-path", prefix, "--split", "100,0,0", "--data-cache-path", str(cache)])
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: warning: dataset {prefix!r} was written after 1 of its index caches")
    assert f"({cache}/" in line and "-GPTDataset-train-*)" in line


def test_each_dataset_of_a_blend_is_looked_at(tmp_path):
    """A blend whose later dataset was rewritten: the warning names that one (not only the blend's first)."""
    import argparse

    rng = random.Random(random.random())
    first = random_corpus(tmp_path / "first", rng.randint(5, 10), rng)
    later = random_corpus(tmp_path / "later", rng.randint(30, 50), rng)
    for prefix in (first, later):
        gpt_train_samples(prefix, rng.randint(10, 20), SEQUENCE)
    rewrite_at(later, random_corpus(tmp_path / "new", rng.randint(5, 10), rng))
    [line] = index_cache.stale_cache_warnings(argparse.Namespace(data_cache_path=None), [first, later])
    assert line.startswith(f"dataset {later!r} was written after 1 of its index caches")
