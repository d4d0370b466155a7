"""One module per ``oellm`` subcommand (see :mod:`megatron.oellm.cli`)."""

import argparse
import sys
from collections.abc import Callable

from megatron.oellm.error_lines import one_line

MISSING_PACKAGE_WARNINGS = (r"(Transformer Engine and Apex are|Apex is|absl\.logging is) not installed"
                            r"|Triton is not supported on current platform"
                            r"|Only transformer-engine>=1\.7\.0 supports MoE experts")
"""UserWarnings megatron-core and fla give on import where Transformer Engine, Apex, absl or a GPU is missing (a
login node, a TE-free environment): a dozen lines on stderr before a command's own output, none about its input."""


def refuse(command: str, reason: object, status: int = 2) -> int:
    """Print why ``oellm COMMAND`` stops as one ``oellm COMMAND: error: REASON`` line on stderr (argparse's form, and
    out of a ``--json > file`` redirection) and return its exit ``status``. A reason quoting a library's message or
    a tool's output over several lines is joined into one (:func:`~megatron.oellm.error_lines.one_line`)."""
    print(f"oellm {command}: error: {one_line(reason)}", file=sys.stderr)
    return status


def int_at_least(minimum: int, why: str = "") -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum``, so a count that would fail (or silently do nothing) only
    after minutes of work is a usage error naming the flag at once (``argument --steps: expected a positive integer,
    got '0'``). ``why``, when given, follows the expectation in the message (e.g. ``" (one next-token target)"``)."""
    wanted = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected {wanted}{why}, got {text!r}")
        return value

    return parse
