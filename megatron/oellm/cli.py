"""The ``oellm`` command line: thin subcommands that parse, call a library function and print.

Each subcommand lives in ``megatron.oellm.commands.<name>`` and provides ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int`` (the exit status).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import pkgutil
import re
import signal
import sys
from types import ModuleType
from typing import NoReturn

import megatron.oellm
from megatron.oellm import commands


def _command_modules() -> dict[str, ModuleType]:
    """Subcommand name (module name with ``_`` as ``-``) -> module, in alphabetical order."""
    found = {}
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            found[info.name.replace("_", "-")] = importlib.import_module(f"{commands.__name__}.{info.name}")
    return found


_INVALID_COMMAND = re.compile(r"argument COMMAND: invalid choice: '(?P<name>.*?)'")
"""argparse's (Python 3.11) message for a subcommand name that is none of the choices."""


class _OellmParser(argparse.ArgumentParser):
    """The top-level parser; an unknown subcommand's error line names the closest one (``oellm modles``: did you
    mean 'models'?), as the card and flag errors do, which argparse before Python 3.14 does not."""

    def error(self, message: str) -> NoReturn:
        """Print usage and ``oellm: error: MESSAGE`` (with a suggestion for a mistyped subcommand); exit 2."""
        match = _INVALID_COMMAND.match(message)
        if match:
            close = difflib.get_close_matches(match["name"], _command_modules(), n=1)
            message += f" (did you mean {close[0]!r}?)" if close else ""
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    """The full ``oellm`` argument parser with every subcommand."""
    parser = _OellmParser(prog="oellm", description="megatron-oellm tools")
    parser.add_argument("--version", action="version", version=f"megatron-oellm {megatron.oellm.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in _command_modules().items():
        sub_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_run=module.run, _oellm_parser=sub_parser)
    return parser


def parse_command_line(argv: list[str] | None) -> argparse.Namespace:
    """``argv`` parsed; an argument no option takes is the subcommand's usage error (``oellm models: error:
    unrecognized arguments: --bogus``, exit 2), not the top-level parser's, which pointed at the wrong usage."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "_oellm_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


SIGPIPE_EXIT_STATUS = 128 + signal.SIGPIPE
"""Exit status of a command whose reader closed its output (``oellm models | head``), as a shell reports SIGPIPE."""
INTERRUPTED_EXIT_STATUS = 128 + signal.SIGINT
"""Exit status of a command stopped by Ctrl-C (SIGINT), as a shell reports it."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``oellm`` console script; returns the exit status.

    A reader that stops early (``| head``, ``| grep -q``) ends the command quietly with status 141 instead of a
    ``BrokenPipeError`` traceback; stdout is pointed at ``/dev/null`` so the interpreter's final flush cannot raise
    again. Ctrl-C that reaches here (a subcommand with no handling of its own, or any one while it imports torch) ends
    it with one ``oellm COMMAND: error: interrupted`` line and status 130 instead of a traceback; a subcommand that
    cleans up on Ctrl-C (``convert`` removes its partial output) does so first and reports it itself."""
    command = "oellm"
    try:
        args = parse_command_line(argv)
        command = f"oellm {args.command}"
        return args._run(args)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return SIGPIPE_EXIT_STATUS
    except KeyboardInterrupt:
        print(f"{command}: error: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT_STATUS


if __name__ == "__main__":  # ``python -m megatron.oellm.cli``, beside the documented ``python -m megatron.oellm``
    sys.exit(main())
