"""``mcore-to-hf`` without ``--tokenizer`` writes an export without tokenizer files, which AutoTokenizer, lm-eval and
vLLM fail on; its summary said nothing of it. It now notes it, with the flag that adds them; with ``--tokenizer`` the
summary names the files copied and no such note."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cli import main
from tests.unit_tests.convert.convert_helpers import save_tiny_tokenizer

NOTE = ("  note: no tokenizer files were written (no --tokenizer given); pass --tokenizer DIR (the HF model's folder) "
        "for an export that AutoTokenizer, lm-eval and vLLM load as is")


@pytest.mark.parametrize("with_model", [True, False])
def test_an_export_without_tokenizer_is_noted_once(with_model: bool, converted,
                                                   capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = converted
    model = ["--model", card.name] if with_model else []
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", *model, "--mcore", str(tmp / "mcore"), "--out", str(tmp / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines.count(NOTE) == 1, lines
    assert not any(line.startswith("  copied ") for line in lines), lines
    assert not [path.name for path in (tmp / "out").iterdir() if "token" in path.name]


def test_an_export_with_tokenizer_names_the_files_and_no_note(converted, capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = converted
    save_tiny_tokenizer(tmp / "tok", card.vocab_size - random.randrange(0, 200), seed=random.randrange(2**31))
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--mcore", str(tmp / "mcore"), "--out", str(tmp / "out"),
                 "--tokenizer", str(tmp / "tok")]) == 0
    out = capsys.readouterr().out
    assert f"  copied 2 tokenizer files from --tokenizer {tmp / 'tok'}: " in out, out
    assert "no tokenizer files" not in out and "note:" not in out, out
