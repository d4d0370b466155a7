"""Another rank's output cutting the ``seq_length`` value in two (``0:   seq_length ..... 40`` / ``5: [rank21]:
...`` / ``96``) gave an ok row at a hundredth of the real throughput, which could become the efficiency baseline;
``world_size`` was cross-checked, ``seq_length`` was not. megatron-core 0.19.2's ``validate_args`` sets
``encoder_seq_length`` to ``seq_length`` before printing the block: the row now refuses a ``seq_length`` that differs
from it, naming both. The test logs print ``encoder_seq_length`` as megatron does (it printed None). Generated logs,
fresh random sizes, cuts and times."""

from __future__ import annotations

import random
import re

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import megatron_args, megatron_log, random_times


def _cut(text: str, name: str, value: int) -> tuple[str, int]:
    """``text`` with the value of argument ``name`` cut in two by another rank's line, and the first part's value."""
    digits = str(value)
    cut = random.randint(1, len(digits) - 1)
    rank = random.randint(1, 31)
    garbled = re.sub(rf"(0:   {name} \.+ ){value}\n", rf"\g<1>{digits[:cut]}\n{rank % 8}: [rank{rank}]: some warning\n"
                     rf"{digits[cut:]} \n", text)
    assert garbled != text
    return garbled, int(digits[:cut])


@pytest.mark.parametrize("name", ["seq_length", "encoder_seq_length"])
def test_a_sequence_length_cut_short_gives_no_row(name):
    length = random.choice([2048, 4096, 8192, 24576])
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "seq_length": length})
    assert args["encoder_seq_length"] == length  # as megatron prints it
    step_ms = random.uniform(60_000.0, 90_000.0) * length / 4096
    text = megatron_log(args, random_times(10, step_ms), [130.0] * 10, prefix="0: ")
    assert summarise(parse_log_text(text), Window(), 4).ok
    garbled, read = _cut(text, name, length)
    row = summarise(parse_log_text(garbled, "cut.log"), Window(), 4)
    assert not row.ok and row.tokens_per_s_per_gpu is None and row.seq_length is None
    seq, encoder = (read, length) if name == "seq_length" else (length, read)
    assert row.status == (f"implausible arguments: seq_length {seq} is not encoder_seq_length {encoder}, which megatron "
                          "sets equal to it (a value cut by another rank's output?)")
