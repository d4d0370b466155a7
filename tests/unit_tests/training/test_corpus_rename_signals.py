"""``build_corpus`` puts its three files in place one rename at a time: a stopping signal between two renames (its
handler raising, as ``tools/build_corpus.py``'s does) left the new ``.bin`` beside the earlier corpus's ``.idx``, a
pair megatron's reader trusts. The signal is now held during the renames and delivered once the corpus is whole."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import pytest

from megatron.oellm.training import corpus
from megatron.oellm.training.corpus import CORPUS_SUFFIXES, build_corpus


class Stopped(BaseException):
    """What the test's signal handler raises."""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda signum: signum.name)
def test_a_signal_during_the_renames_leaves_a_whole_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           signum: signal.Signals) -> None:
    rng = random.Random(random.random())
    prefix = tmp_path / "corpus" / "text"
    prefix.parent.mkdir()
    for suffix in CORPUS_SUFFIXES:  # an earlier corpus the build replaces
        Path(f"{prefix}{suffix}").write_bytes(random.randbytes(rng.randint(1, 512)))
    text = tmp_path / "doc.txt"
    text.write_text("".join(rng.choice("abc é中\n") for _ in range(rng.randint(1, 300))), encoding="utf-8")
    renamed = []
    rename = os.replace

    def replace_then_signal(source: str, target: str) -> None:
        rename(source, target)
        renamed.append(target)
        if len(renamed) == 1:  # after the .bin: Python runs a handler at the next bytecode boundary
            os.kill(os.getpid(), signum)

    def stop(number: int, frame: object) -> None:
        raise Stopped(number)

    monkeypatch.setattr(corpus.os, "replace", replace_then_signal)
    previous = signal.signal(signum, stop)
    try:
        with pytest.raises(Stopped):
            build_corpus([text], prefix)
    finally:
        signal.signal(signum, previous)
    assert renamed == [f"{prefix}{suffix}" for suffix in CORPUS_SUFFIXES]
    assert json.loads(Path(f"{prefix}.json").read_text())["tokens"] == len(text.read_bytes()) + 1
    assert Path(f"{prefix}.bin").stat().st_size == 2 * (len(text.read_bytes()) + 1)  # uint16 tokens
    assert sorted(path.name for path in prefix.parent.iterdir()) == [f"text{suffix}" for suffix in CORPUS_SUFFIXES]
