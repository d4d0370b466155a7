"""A tokenizer file that is a Git LFS pointer (a Hugging Face model repository cloned without git-lfs: its
``tokenizer.json`` is one) is refused naming the file and the fix, by the training entry's tokenizer check and a
recipe's: the tokenizer's library failed on it on every rank when megatron initialised, with a parse error naming
neither. A file that only starts like a pointer, or a real tokenizer file, passes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from megatron.oellm.recipes.host_paths import missing_tokenizer_problems
from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.data_sources import check_tokenizer_files


def lfs_pointer(path: Path) -> Path:
    """Write at ``path`` the Git LFS pointer a clone without git-lfs leaves for a large file."""
    path.write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{random.getrandbits(256):064x}\n"
                    f"size {random.randint(10**6, 10**8)}\n")
    return path


def tokenizer_folder(tmp_path: Path, pointer_name: str | None) -> Path:
    """A tokenizer folder with a configuration and a ``tokenizer.json``; ``pointer_name`` (one of them) a pointer."""
    folder = tmp_path / f"tokenizer-{random.randrange(10**6)}"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": random.randint(512, 8192)}))
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    if pointer_name is not None:
        lfs_pointer(folder / pointer_name)
    return folder


def check(*flags: str) -> None:
    check_tokenizer_files(parse_oellm_argv(["--mock-data", *flags]))


@pytest.mark.parametrize("pointer_name", ["tokenizer.json", "tokenizer_config.json"])
def test_a_hugging_face_folder_with_a_pointer_is_refused_naming_it(tmp_path: Path, pointer_name: str) -> None:
    folder = tokenizer_folder(tmp_path, pointer_name)
    with pytest.raises(ValueError) as refused:
        check("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(folder))
    message = str(refused.value)
    assert f"{folder / pointer_name} is a Git LFS pointer file" in message and "`git lfs pull`" in message, message
    assert missing_tokenizer_problems(str(folder)) == [message]


def test_a_hugging_face_folder_without_pointers_passes(tmp_path: Path) -> None:
    folder = tokenizer_folder(tmp_path, None)
    check("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(folder))
    assert missing_tokenizer_problems(str(folder)) == []


@pytest.mark.parametrize("slow_file", ["tokenizer.model", "vocab.json", "merges.txt"])
def test_a_slow_tokenizer_file_in_lfs_beside_a_fast_one_passes_unless_the_slow_one_loads(tmp_path: Path,
                                                                                       slow_file: str) -> None:
    """A Mistral-style clone without git-lfs: its small ``tokenizer.json`` is in git, its ``tokenizer.model`` a
    pointer. The fast tokenizer (megatron-core's default) reads only the first; ``--tokenizer-hf-no-use-fast`` the
    second."""
    folder = tokenizer_folder(tmp_path, None)
    pointer = lfs_pointer(folder / slow_file)
    check("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(folder))
    assert missing_tokenizer_problems(str(folder)) == []
    with pytest.raises(ValueError, match=f"--tokenizer-model: {pointer} is a Git LFS pointer file"):
        check("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(folder),
              "--tokenizer-hf-no-use-fast")


def test_a_fast_tokenizer_file_in_lfs_is_not_read_by_the_slow_tokenizer(tmp_path: Path) -> None:
    folder = tokenizer_folder(tmp_path, "tokenizer.json")
    (folder / "tokenizer.model").write_bytes(random.randbytes(256))
    check("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(folder), "--tokenizer-hf-no-use-fast")


def test_a_sentencepiece_model_that_is_a_pointer_is_refused(tmp_path: Path) -> None:
    model = lfs_pointer(tmp_path / "tokenizer.model")
    with pytest.raises(ValueError, match=f"--tokenizer-model: {model} is a Git LFS pointer file"):
        check("--tokenizer-type", random.choice(["SentencePieceTokenizer", "Llama2Tokenizer"]), "--tokenizer-model",
              str(model))


@pytest.mark.parametrize("flag", ["--vocab-file", "--merge-file"])
def test_a_vocabulary_or_merges_file_that_is_a_pointer_is_refused(tmp_path: Path, flag: str) -> None:
    files = {name: tmp_path / name for name in ("vocab.json", "merges.txt")}
    files["vocab.json"].write_text(json.dumps({"a": 0, "b": 1}))
    files["merges.txt"].write_text("#version: 0.2\na b\n")
    pointer = lfs_pointer(files["vocab.json" if flag == "--vocab-file" else "merges.txt"])
    with pytest.raises(ValueError, match=f"{flag}: {pointer} is a Git LFS pointer file"):
        check("--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", str(files["vocab.json"]), "--merge-file",
              str(files["merges.txt"]))


def test_a_file_that_only_starts_like_a_pointer_passes(tmp_path: Path) -> None:
    model = tmp_path / "tokenizer.model"
    start = "version https://git-lfs.github.com/spec/v1"
    model.write_bytes(start[:random.randint(1, len(start) - 1)].encode() + random.randbytes(64))
    check("--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model", str(model))
