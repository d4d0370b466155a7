"""Tokenizer files that are not there are refused before megatron's argument validation: megatron-core 0.19.2 builds
the tokenizer right after ``validate_args``, where a missing ``--vocab-file`` / ``--merge-file`` or a path-like
``--tokenizer-model`` waited out the Hugging Face hub's retries and was refused under a hub name."""

from __future__ import annotations

import random
import string

import pytest

from tests.unit_tests.training.before_validation import entry_refusing_before_validation
from tests.unit_tests.training.entry_helpers import one_error_line, tiny_moe_run


def _run(*tokenizer: str) -> list[str]:
    """The tiny MoE run with ``tokenizer`` flags instead of the null tokenizer."""
    run = tiny_moe_run()
    at = run.index("--tokenizer-type")
    return [*run[:at], *run[at + 2:], *tokenizer]


def _absent(tmp_path, suffix: str) -> str:
    """A fresh path under ``tmp_path`` where nothing is."""
    return str(tmp_path / ("".join(random.choices(string.ascii_lowercase, k=10)) + suffix))


def test_missing_bpe_files_are_refused_before_validation(monkeypatch, capsys, tmp_path) -> None:
    entry = entry_refusing_before_validation(monkeypatch)
    vocab = _absent(tmp_path, ".json")
    merges = tmp_path / "merges.txt"
    merges.write_text("#version: 0.2\n")
    assert entry.main(_run("--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab,
                           "--merge-file", str(merges))) == 2
    assert f"--vocab-file {vocab!r} is no file" in one_error_line(capsys)


@pytest.mark.parametrize("tokenizer_type", ["HuggingFaceTokenizer", "SentencePieceTokenizer"])
def test_a_path_like_tokenizer_model_that_is_absent_is_refused_before_validation(monkeypatch, capsys, tmp_path,
                                                                                 tokenizer_type: str) -> None:
    entry = entry_refusing_before_validation(monkeypatch)
    model = _absent(tmp_path, ".model")
    assert entry.main(_run("--tokenizer-type", tokenizer_type, "--tokenizer-model", model)) == 2
    assert f"--tokenizer-model {model!r} does not exist" in one_error_line(capsys)
