"""A missing source (``--hf`` / ``--mcore``) is reported before a loop of symbolic links in ``--out``, as every other
refusal of the output is: the loop was named first, and fixing it only revealed the next error."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cli import main


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_a_missing_source_is_named_before_an_out_loop(converted, capsys: pytest.CaptureFixture,
                                                      direction: str) -> None:
    card, _, tmp = converted
    loop = tmp / f"loop{random.randrange(10**6)}"
    loop.symlink_to(loop.name)
    missing = tmp / f"missing{random.randrange(10**6)}"
    source = ["--hf" if direction == "hf-to-mcore" else "--mcore", str(missing)]
    capsys.readouterr()
    assert main(["convert", direction, "--model", card.name, *source, "--out", str(loop)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"oellm convert {direction}: error: ") and err.count("\n") == 1
    assert str(missing) in err and "loop of symbolic links" not in err
