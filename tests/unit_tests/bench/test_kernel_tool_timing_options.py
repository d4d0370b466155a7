"""The timing options of the kernel benchmarks in ``tools/`` (``--tokens``, ``--warmup``, ``--steps``): a run without
a warm-up is allowed (:func:`megatron.oellm.bench.timing.median_ms` times every step then), a count that would time
nothing or feed no token is a usage error naming the flag."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.bench.timing import kernel_tool_parser


def test_counts_down_to_each_options_smallest_are_taken() -> None:
    """``--warmup 0`` (time from the first step), ``--steps 1`` and ``--tokens 1`` are runs the tools can time; fresh
    random larger counts too."""
    parser = kernel_tool_parser("Time something.")
    for warmup, steps, tokens in [(0, 1, 1), (random.randint(1, 50), random.randint(2, 100), random.randint(2, 10**6))]:
        args = parser.parse_args(["--warmup", str(warmup), "--steps", str(steps), "--tokens", str(tokens)])
        assert (args.warmup, args.steps, args.tokens) == (warmup, steps, tokens)


@pytest.mark.parametrize(("flag", "smallest"), [("--warmup", 0), ("--steps", 1), ("--tokens", 1)])
def test_a_count_below_the_smallest_is_a_usage_error_naming_the_flag(flag: str, smallest: int,
                                                                      capsys: pytest.CaptureFixture) -> None:
    """A count below each option's smallest (fresh random) stops the tool with argparse's usage error."""
    value = smallest - random.randint(1, 1000)
    with pytest.raises(SystemExit) as stop:
        kernel_tool_parser("Time something.").parse_args([flag, str(value)])
    assert stop.value.code == 2 and f"argument {flag}: expected" in capsys.readouterr().err
