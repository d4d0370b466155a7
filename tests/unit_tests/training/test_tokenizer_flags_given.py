"""A command line without the tokenizer flag its ``--tokenizer-type`` needs is refused in one line naming the flag.

Every login-node check passed a run without ``--tokenizer-model`` (of a type that reads one) or without
``--tokenizer-type``; on the GPU node megatron-core's ``build_tokenizer``, right after ``validate_args``, then stopped
on "Tokenizer path must be specified" (which names no flag) or "tokenizer_type None is not supported". Under
``--use-checkpoint-args`` a checkpoint storing the tokenizer supplies it, and the line passes.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.data_sources import (
    TOKENIZER_MODEL_FORMS,
    VOCAB_SIZE_BUILT_TOKENIZERS,
    check_tokenizer_given,
)
from tests.unit_tests.training.checkpoint_helpers import checkpoint_with_args, finetune_argv
from tests.unit_tests.training.entry_helpers import (
    TINY_MOE_RUN,
    Reached,
    entry_on_a_cpu_node,
    entry_up_to_pretrain,
    refused_line,
)


def _run_with_tokenizer(*tokenizer_flags: str) -> list[str]:
    """:data:`TINY_MOE_RUN` with ``tokenizer_flags`` in place of its own."""
    run = list(TINY_MOE_RUN)
    at = run.index("--tokenizer-type")
    return [*run[:at], *run[at + 2:], *tokenizer_flags]


def _entry(monkeypatch: pytest.MonkeyPatch, node: str):
    """The entry on a GPU node (run up to ``pretrain``) or on a node without one."""
    return entry_up_to_pretrain(monkeypatch) if node == "gpu_node" else entry_on_a_cpu_node(monkeypatch)


@pytest.mark.parametrize("node", ["gpu_node", "login_node"])
@pytest.mark.parametrize("tokenizer_type", sorted(TOKENIZER_MODEL_FORMS))
def test_a_type_without_its_tokenizer_model_is_refused_naming_the_flag(monkeypatch: pytest.MonkeyPatch, capsys,
                                                                       node: str, tokenizer_type: str) -> None:
    line = refused_line(_entry(monkeypatch, node), capsys,
                        _run_with_tokenizer("--tokenizer-type", tokenizer_type))
    assert f"error: --tokenizer-type {tokenizer_type} needs --tokenizer-model: " in line, line
    assert TOKENIZER_MODEL_FORMS[tokenizer_type] in line and "Tokenizer path must be specified" in line


@pytest.mark.parametrize("node", ["gpu_node", "login_node"])
def test_a_line_without_a_tokenizer_type_is_refused(monkeypatch: pytest.MonkeyPatch, capsys, node: str) -> None:
    line = refused_line(_entry(monkeypatch, node), capsys, _run_with_tokenizer())
    assert "error: no --tokenizer-type: " in line and "give --tokenizer-type NullTokenizer" in line, line


def test_the_multimodal_tokenizer_is_refused_with_or_without_a_model(tmp_path: Path) -> None:
    """megatron-core's ``build_tokenizer`` hands MultimodalTokenizer no path, whatever ``--tokenizer-model`` says."""
    model = [] if random.random() < 0.5 else ["--tokenizer-model", str(tmp_path)]
    with pytest.raises(ValueError, match=r"--tokenizer-type MultimodalTokenizer: .* hands it no tokenizer path"):
        check_tokenizer_given(parse_oellm_argv(["--tokenizer-type", "MultimodalTokenizer", *model]), [])


@pytest.mark.parametrize("tokenizer_type", VOCAB_SIZE_BUILT_TOKENIZERS)
def test_a_null_tokenizer_without_a_vocab_size_is_refused(tokenizer_type: str) -> None:
    with pytest.raises(ValueError, match=rf"--tokenizer-type {tokenizer_type} needs --vocab-size"):
        check_tokenizer_given(parse_oellm_argv(["--tokenizer-type", tokenizer_type]), [])
    check_tokenizer_given(parse_oellm_argv(["--tokenizer-type", tokenizer_type,
                                            "--vocab-size", str(random.randint(1, 10**6))]), [])


def _finetune_without_tokenizer(load: Path, *flags: str) -> list[str]:
    """:func:`finetune_argv` of ``load`` without its ``--tokenizer-type``, with ``flags``."""
    run = finetune_argv(load, *flags)
    at = run.index("--tokenizer-type")
    return [*run[:at], *run[at + 2:]]


def test_a_checkpoint_storing_the_tokenizer_supplies_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """megatron's ``load_args_from_checkpoint`` sets the tokenizer type and model from the checkpoint under
    ``--use-checkpoint-args``: the command line needs neither."""
    tokenizer = tmp_path / f"tokenizer{random.randrange(10**6)}"
    load = checkpoint_with_args(tmp_path / "load", tokenizer_type="HuggingFaceTokenizer",
                                tokenizer_model=str(tokenizer))
    with pytest.raises(Reached):
        entry_up_to_pretrain(monkeypatch).main(_finetune_without_tokenizer(load))


def test_a_checkpoint_storing_a_type_without_a_model_is_named(monkeypatch: pytest.MonkeyPatch, capsys,
                                                              tmp_path: Path) -> None:
    load = checkpoint_with_args(tmp_path / "load", tokenizer_type="SentencePieceTokenizer", tokenizer_model=None)
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, finetune_argv(load))
    assert f"--tokenizer-type SentencePieceTokenizer (stored in --load {load}) needs --tokenizer-model" in line, line


def test_the_checkpoints_tokenizer_is_not_taken_when_megatron_is_told_not_to(monkeypatch: pytest.MonkeyPatch,
                                                                            capsys, tmp_path: Path) -> None:
    """The checkpoint's ``NullTokenizer`` replaces the command line's type, unless
    ``--no-use-tokenizer-model-from-checkpoint-args``: then the command line's needs its ``--tokenizer-model``."""
    load = checkpoint_with_args(tmp_path / "load", tokenizer_type="NullTokenizer")
    given = ["--tokenizer-type", random.choice(sorted(TOKENIZER_MODEL_FORMS))]
    with pytest.raises(Reached):
        entry_up_to_pretrain(monkeypatch).main(_finetune_without_tokenizer(load, *given))
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys,
                        _finetune_without_tokenizer(load, *given, "--no-use-tokenizer-model-from-checkpoint-args"))
    assert f"error: {' '.join(given)} needs --tokenizer-model: " in line, line


def test_a_first_job_under_checkpoint_args_without_a_tokenizer_type_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                              capsys, tmp_path: Path) -> None:
    """Nothing saved in ``--load`` yet: no checkpoint supplies the type."""
    folder = tmp_path / f"chain{random.randrange(10**6)}"
    folder.mkdir()
    argv = [arg for arg in _finetune_without_tokenizer(folder, "--seq-length", "64", "--save", str(folder),
                                                       "--save-interval", "5") if arg != "--finetune"]
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, argv)
    assert "error: no --tokenizer-type (nor does a checkpoint --use-checkpoint-args reads store one)" in line, line
