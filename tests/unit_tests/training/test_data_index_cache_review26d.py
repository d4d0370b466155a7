"""A ``--data-path`` in a directory the run cannot write (a shared, read-only dataset) and no ``--data-cache-path``:
megatron-core 0.19.2 writes the dataset index cache under the prefix on rank 0 when it builds the datasets, after
the model and optimizer are set up, and stops with a permission error. The entry refuses it at start, unless a cache
is already there to reuse."""

import os
import random
import sys
from pathlib import Path

import pytest

from megatron.oellm.training import data

sys.path.insert(0, str(Path(__file__).parent))

from test_data import _corpus, _Reached, entry_up_to_pretrain  # noqa: E402
from test_data_review24 import build_train_dataset, null_tokenizer, validated  # noqa: E402, F401

ARGV = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--seq-length", "128"]


def _name() -> str:
    return f"corpus{random.randrange(10**6)}"


def test_the_check_looks_where_megatron_core_writes_and_reuses_the_cache(tmp_path, null_tokenizer):  # noqa: F811
    prefix = _corpus(tmp_path, _name())
    cache = data.default_index_cache(prefix)
    assert data.lacks_index_cache(cache)
    build_train_dataset(validated(["--data-path", prefix, "--split", "100,0,0"]))
    assert any(name.endswith("-GPTDataset-train-shuffle_index.npy") for name in os.listdir(cache))
    assert not data.lacks_index_cache(cache)
    for name in os.listdir(cache):
        if name.endswith("sample_index.npy"):
            (cache / name).unlink()  # incomplete: megatron-core would build the indices again
    assert data.lacks_index_cache(cache)


def _unwritable_under(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.access`` denies writing anywhere under ``root`` (as a read-only mount does, even to root)."""
    real = os.access

    def access(path, mode, *args, **kwargs):
        inside = Path(os.path.abspath(path)).is_relative_to(root)
        return False if inside and mode & os.W_OK else real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


def test_the_entry_refuses_an_unwritable_dataset_directory_without_a_cache(monkeypatch, capsys, tmp_path,
                                                                            null_tokenizer):  # noqa: F811
    entry = entry_up_to_pretrain(monkeypatch)
    shared = tmp_path / "shared"
    shared.mkdir()
    prefix = _corpus(shared, _name())
    _unwritable_under(shared, monkeypatch)
    assert entry.main([*ARGV, "--data-path", prefix]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f"dataset {prefix!r}" in line and str(data.default_index_cache(prefix)) in line
    assert "give --data-cache-path DIR" in line
    assert entry.main([*ARGV, "--train-data-path", prefix, "--valid-data-path", prefix]) == 2
    with pytest.raises(_Reached):
        entry.main([*ARGV, "--data-path", prefix, "--data-cache-path", str(tmp_path / "cache")])
    with pytest.raises(_Reached):  # a writable dataset directory: megatron-core writes the cache there
        entry.main([*ARGV, "--data-path", _corpus(tmp_path, _name())])


def test_an_unwritable_dataset_directory_with_a_built_cache_passes(monkeypatch, tmp_path,
                                                                   null_tokenizer):  # noqa: F811
    entry = entry_up_to_pretrain(monkeypatch)
    prefix = _corpus(tmp_path, _name())
    build_train_dataset(validated(["--data-path", prefix, "--split", "100,0,0"]))
    _unwritable_under(tmp_path, monkeypatch)
    with pytest.raises(_Reached):
        entry.main([*ARGV, "--data-path", prefix])


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only (chmod) directory")
def test_the_refusal_agrees_with_megatron_core_on_a_read_only_directory(tmp_path, null_tokenizer):  # noqa: F811
    shared = tmp_path / "shared"
    shared.mkdir()
    prefix = _corpus(shared, _name())
    args = validated(["--data-path", prefix, "--split", "100,0,0"])
    shared.chmod(0o555)
    try:
        with pytest.raises(ValueError, match="--data-cache-path"):
            data.check_data_source(args)
        with pytest.raises(PermissionError):
            build_train_dataset(args)
    finally:
        shared.chmod(0o755)
    build_train_dataset(args)
    shared.chmod(0o555)
    try:
        data.check_data_source(args)
        build_train_dataset(args)
    finally:
        shared.chmod(0o755)
