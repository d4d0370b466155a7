"""One module per ``oellm`` subcommand (see :mod:`megatron.oellm.cli`)."""

import sys


def refuse(command: str, reason: object, status: int = 2) -> int:
    """Print why ``oellm COMMAND`` stops as one ``oellm COMMAND: error: REASON`` line on stderr (argparse's form, and
    out of a ``--json > file`` redirection) and return its exit ``status``."""
    print(f"oellm {command}: error: {reason}", file=sys.stderr)
    return status
