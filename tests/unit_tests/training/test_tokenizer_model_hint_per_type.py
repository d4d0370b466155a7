"""The refusal of a ``--tokenizer-model`` path where nothing is says what the run's ``--tokenizer-type`` loads from it.
It said "give an existing tokenizer directory or file, or a hub name" for every type, but megatron-core 0.19.2 builds
``HuggingFaceTokenizer`` (and ``SFTTokenizer``) with transformers' ``AutoTokenizer.from_pretrained``, which loads a
folder or a hub name and takes a file path for a malformed hub name, while the SentencePiece types and
``TikTokenizer`` read one file and no hub name. A type that never reads the flag (Null, GPT-2 BPE, BERT, multimodal)
lets a left-over path pass, as it lets left-over ``--vocab-file`` / ``--merge-file`` paths pass.
For the SentencePiece types and ``TikTokenizer`` any value that is no file is refused: a hub-like ``org/name`` or a
bare word passed and failed at megatron init on every rank, since their libraries open a local file only."""

from __future__ import annotations

import importlib
import random
from pathlib import Path

import pytest

from megatron.oellm.recipes.host_paths import missing_tokenizer_problems
from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.data_sources import check_tokenizer_files

HINT_WORDS = {
    "HuggingFaceTokenizer": ("existing tokenizer directory", "hub name (org/name"),
    "SFTTokenizer": ("existing tokenizer directory", "hub name (org/name"),
    "SentencePieceTokenizer": ("existing SentencePiece model file",),
    "GPTSentencePieceTokenizer": ("existing SentencePiece model file",),
    "Llama2Tokenizer": ("existing SentencePiece model file",),
    "TikTokenizer": ("existing tiktoken vocabulary file (a .json file)",),
}
"""Each ``--tokenizer-type`` that reads ``--tokenizer-model`` -> what its refusal's hint must say."""


def _absent_path(tmp_path: Path) -> str:
    """A ``--tokenizer-model`` written as a path where nothing is, in one of the forms a path takes."""
    name = f"tokenizer{random.randrange(10**6)}"
    return random.choice([str(tmp_path / name / name), f"./{name}", f"../{name}/{name}"])


def _refusal(tokenizer_type: str, model: str) -> str:
    args = parse_oellm_argv(["--mock-data", "--tokenizer-type", tokenizer_type, "--tokenizer-model", model,
                             "--vocab-size", str(random.randint(256, 4096))])
    with pytest.raises(ValueError) as refused:
        check_tokenizer_files(args)
    return str(refused.value)


@pytest.mark.parametrize("tokenizer_type", sorted(HINT_WORDS))
def test_each_types_hint_says_what_it_loads(tokenizer_type: str, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    model = _absent_path(tmp_path)
    message = _refusal(tokenizer_type, model)
    assert message.startswith(f"--tokenizer-model {model!r} does not exist (relative to {tmp_path})")
    assert f"build the {tokenizer_type} " in message
    assert all(words in message for words in HINT_WORDS[tokenizer_type]), message
    assert "directory or file" not in message
    reads_a_file = "directory" not in HINT_WORDS[tokenizer_type][0]
    assert ("hub name" in message) != reads_a_file  # no hub name for a type that reads one file


FILE_READING_TYPES = sorted(name for name, words in HINT_WORDS.items() if "directory" not in words[0])
"""The ``--tokenizer-type`` values whose library (sentencepiece, tiktoken) opens ``--tokenizer-model`` as a file."""


def _no_file_values(tmp_path: Path) -> list[str]:
    """``--tokenizer-model`` values that are no file, none written as a path: a hub-like ``org/name``, a bare word,
    and a folder here (with a file inside, so that it would load as a Hugging Face tokenizer's folder)."""
    number = random.randrange(10**6)
    folder = tmp_path / f"tokenizer{number}"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(random.randbytes(random.randint(8, 64)))
    return [f"org{number}/name{number}", f"word{number}", folder.name]


@pytest.mark.parametrize("tokenizer_type", FILE_READING_TYPES)
def test_a_file_reading_type_refuses_a_value_that_is_no_file(tokenizer_type: str, monkeypatch,
                                                             tmp_path: Path) -> None:
    """A hub-like name, a bare word or a folder passed the check (only a value written as a path was looked up) and
    failed at megatron init on every rank: refused with the type's hint; an existing file passes."""
    monkeypatch.chdir(tmp_path)
    for model in _no_file_values(tmp_path):
        message = _refusal(tokenizer_type, model)
        assert message.startswith(f"--tokenizer-model {model!r} is no file (relative to {tmp_path})"), message
        assert f"megatron-core's {tokenizer_type} opens it as a local file" in message
        assert all(words in message for words in HINT_WORDS[tokenizer_type]), message
    file = tmp_path / f"tokenizer{random.randrange(10**6)}.model"
    file.write_bytes(random.randbytes(random.randint(8, 64)))
    check_tokenizer_files(parse_oellm_argv(["--mock-data", "--tokenizer-type", tokenizer_type, "--tokenizer-model",
                                            file.name, "--vocab-size", str(random.randint(256, 4096))]))


@pytest.mark.parametrize("library", ["sentencepiece_tokenizer.SentencePieceTokenizer",
                                     "tiktoken_tokenizer.TikTokenTokenizer"])
def test_megatron_cores_file_tokenizers_open_no_hub_name(library: str, monkeypatch, tmp_path: Path) -> None:
    """Why a hub-like name is refused for these types: megatron-core's sentencepiece and tiktoken tokenizers take
    ``--tokenizer-model`` as a local path, and a name where no file is fails."""
    module, name = library.split(".")
    tokenizer_class = getattr(importlib.import_module(f"megatron.core.tokenizers.text.libraries.{module}"), name)
    monkeypatch.chdir(tmp_path)
    number = random.randrange(10**6)
    for model in (f"org{number}/name{number}", f"word{number}"):
        with pytest.raises(ValueError, match="is invalid"):
            tokenizer_class(model)


def test_megatron_cores_hugging_face_tokenizer_refuses_a_file(monkeypatch, tmp_path: Path) -> None:
    """Why the Hugging Face hint names a directory only: megatron-core's tokenizer takes an existing file for a
    malformed hub name."""
    from megatron.core.tokenizers.text.libraries.huggingface_tokenizer import HuggingFaceTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    file = tmp_path / f"tokenizer{random.randrange(10**6)}.json"
    file.write_text("{}")
    with pytest.raises(ValueError, match="Repo id must be in the form"):
        HuggingFaceTokenizer(str(file))
    message = _refusal("HuggingFaceTokenizer", str(tmp_path / f"absent{random.randrange(10**6)}"))
    assert "AutoTokenizer loads no single file" in message


@pytest.mark.parametrize("tokenizer_type", ["NullTokenizer", "NullMultimodalTokenizer", "MultimodalTokenizer",
                                            "GPT2BPETokenizer", "BertWordPieceLowerCase"])
def test_a_type_that_never_reads_the_flag_lets_a_left_over_path_pass(tokenizer_type: str, monkeypatch,
                                                                      tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    vocab, merges = tmp_path / "vocab.json", tmp_path / "merges.txt"
    vocab.write_text(f'{{"a": {random.randint(0, 9)}}}')
    merges.write_text("#version: 0.2\n")
    args = parse_oellm_argv(["--mock-data", "--tokenizer-type", tokenizer_type, "--tokenizer-model",
                             _absent_path(tmp_path), "--vocab-size", str(random.randint(256, 4096)),
                             "--vocab-file", str(vocab), "--merge-file", str(merges)])
    check_tokenizer_files(args)


def test_the_recipes_hint_names_a_hugging_face_directory(monkeypatch, tmp_path: Path) -> None:
    """A recipe hands ``--tokenizer-model`` (other than ``byte``) to ``HuggingFaceTokenizer``."""
    monkeypatch.chdir(tmp_path)
    model = _absent_path(tmp_path)
    (problem,) = missing_tokenizer_problems(model)
    assert "Hugging Face tokenizer directory on the shared file system" in problem
    assert "directory or file" not in problem and problem.endswith("or 'byte'")
