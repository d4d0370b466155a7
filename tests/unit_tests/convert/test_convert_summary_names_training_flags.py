"""hf-to-mcore's summary names the training entry's flags that start a run from its output. The README said
``--pretrained-checkpoint OUT`` alone and ``--help`` "for `--load` of megatron training", while the entry refuses a
converted checkpoint under megatron's default ``--dist-ckpt-strictness`` (its ``_extra_state`` keys are missing).
The printed flags are run through the entry's checks on CPU (up to ``pretrain``)."""

from __future__ import annotations

import random
import shlex

import pytest

from megatron.oellm.cli import main
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, one_error_line

PREFIX = "  train from it: "


def _printed_flags(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The flags of the summary's training line (before its parenthesised note)."""
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith(PREFIX)]
    return shlex.split(line.removeprefix(PREFIX).split(" (")[0])


@pytest.mark.parametrize("own_vocab", [False, True])
def test_the_printed_flags_pass_the_entrys_checks(tiny_hf, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], own_vocab: bool) -> None:
    card, _, tmp = tiny_hf
    vocab = card.vocab_size + random.randint(1, 64) if own_vocab else None
    source = card.with_vocab(vocab) if vocab else card
    write_hf(source, random_hf_tensors(source, seed=random.randrange(10**6)), tmp / "hf")
    out = tmp / f"mcore{random.randrange(10**6)}"
    extra = ["--vocab-size", str(vocab)] if vocab else []
    assert main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(out),
                 *extra]) == 0
    flags = _printed_flags(capsys)
    assert flags[flags.index("--pretrained-checkpoint") + 1] == str(out.resolve())
    assert ("--vocab-size" in flags) == own_vocab
    entry = entry_up_to_pretrain(monkeypatch)
    run = ["--oellm-backend", "torch", "--mock-data", "--tokenizer-type", "NullTokenizer", "--seq-length", "64"]
    with pytest.raises(Reached):
        entry.main([*flags, *run])
    strictness = flags.index("--dist-ckpt-strictness")
    without = flags[:strictness] + flags[strictness + 2:]
    assert entry.main([*without, *run]) == 2  # megatron's default strictness: refused, naming the flag
    assert "--dist-ckpt-strictness log_unexpected" in one_error_line(capsys)


def test_the_help_of_out_names_the_training_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["convert", "hf-to-mcore", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--pretrained-checkpoint DIR --dist-ckpt-strictness log_unexpected" in text
    assert "for `--load` of megatron training" not in text
