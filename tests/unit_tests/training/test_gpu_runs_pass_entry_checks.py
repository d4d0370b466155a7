"""The command lines of the entry's GPU tests (test_entry_gpu.py) pass the entry's checks on the CPU, so a new check
that refused one of them (a converted checkpoint given as ``--load``, a first job whose ``--load`` is its own
``--save``) fails here, not only in a GPU call."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.training.corpus import build_corpus, stdlib_sources
from megatron.oellm.training.tokenizer import BYTE_TOKENIZER_FLAGS
from tests.unit_tests.training.checkpoint_helpers import converted_random_checkpoint
from tests.unit_tests.training.entry_helpers import GPU_ENTRY_RUN, Reached, entry_up_to_pretrain


@pytest.mark.parametrize("name", ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"])
def test_a_converted_checkpoint_as_load_reaches_pretrain(monkeypatch, tmp_path: Path, name: str) -> None:
    card = get_card(name)
    converted = converted_random_checkpoint(name, tmp_path)
    main = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        main.main([*[card.name if arg == GPU_ENTRY_RUN[1] else arg for arg in GPU_ENTRY_RUN], "--mock-data",
                   "--tokenizer-type", "NullTokenizer", "--train-iters", "4", "--load", str(converted), "--ckpt-format",
                   "torch_dist", "--dist-ckpt-strictness", "log_unexpected"])


def test_a_first_job_saving_where_it_loads_reaches_pretrain(monkeypatch, tmp_path: Path) -> None:
    prefix = tmp_path / "corpus" / "stdlib"
    build_corpus(stdlib_sources(random.randint(100_000, 200_000)), prefix)
    checkpoint = tmp_path / "checkpoint"
    main = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        main.main([*GPU_ENTRY_RUN, "--data-path", str(prefix), "--split", "100,0,0", *BYTE_TOKENIZER_FLAGS, "--save",
                   str(checkpoint), "--load", str(checkpoint), "--ckpt-format", "torch_dist", "--save-interval", "30",
                   "--override-opt_param-scheduler", "--train-iters", "30"])
