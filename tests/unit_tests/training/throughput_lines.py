"""Reading back the ``[oellm]`` throughput lines the training entry prints, for the tests that check what was
printed (``oellm table`` reads Megatron's own lines, not these)."""

from __future__ import annotations

import re

from megatron.oellm.training.throughput import Throughput

THROUGHPUT_LINE = re.compile(r"\[oellm\] iteration (?P<iteration>\d+) \| tokens/s/GPU: (?P<tokens>[0-9.]+) \| "
                             r"TFLOP/s/GPU: (?P<tflops>[0-9.]+) \| MFU: (?P<mfu>[0-9.]+%|n/a)")
"""One ``[oellm]`` line as :meth:`Throughput.format` writes it, anywhere in a log line."""


def parse_throughput_line(line: str) -> Throughput | None:
    """The :class:`Throughput` of an ``[oellm]`` log line (None for any other line), rounded as printed."""
    match = THROUGHPUT_LINE.search(line)
    if match is None:
        return None
    mfu = None if match["mfu"] == "n/a" else float(match["mfu"].rstrip("%")) / 100
    return Throughput(int(match["iteration"]), float(match["tokens"]), float(match["tflops"]), mfu)
