"""The summary's "train from it" flags are pasted into job scripts: an output path with a space or a quote (a project
share's name) must stay one argument of ``--pretrained-checkpoint`` when a shell reads them."""

from __future__ import annotations

import random
import shlex
from pathlib import Path

import pytest

from megatron.oellm.convert.summary import training_flags


@pytest.mark.parametrize("name", ["mcore dir", "it's mcore", 'say "mcore"', "mcore;rm -rf x", "$HOME/mcore"])
def test_the_output_path_is_one_shell_argument(name: str) -> None:
    out = Path("/scratch", f"proj {random.randrange(10**6)}", name)
    vocab = random.choice([None, random.randrange(1000, 200_000)])
    flags = shlex.split(training_flags("qwen3-30b-a3b", out, vocab))
    assert flags[flags.index("--pretrained-checkpoint") + 1] == str(out)
    assert flags[:2] == ["--oellm-model", "qwen3-30b-a3b"]
    assert ("--vocab-size" in flags) == (vocab is not None)
