"""The ``oellm`` command line: thin subcommands that parse, call a library function and print.

Each subcommand lives in ``megatron.oellm.commands.<name>`` and provides ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int`` (the exit status).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import sys
from types import ModuleType

import megatron.oellm
from megatron.oellm import commands


def _command_modules() -> dict[str, ModuleType]:
    """Subcommand name (module name with ``_`` as ``-``) -> module, in alphabetical order."""
    found = {}
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            found[info.name.replace("_", "-")] = importlib.import_module(f"{commands.__name__}.{info.name}")
    return found


def build_parser() -> argparse.ArgumentParser:
    """The full ``oellm`` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="oellm", description="megatron-oellm tools")
    parser.add_argument("--version", action="version", version=f"megatron-oellm {megatron.oellm.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in _command_modules().items():
        sub_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_run=module.run)
    return parser


SIGPIPE_EXIT_STATUS = 128 + signal.SIGPIPE
"""Exit status of a command whose reader closed its output (``oellm models | head``), as a shell reports SIGPIPE."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``oellm`` console script; returns the exit status.

    A reader that stops early (``| head``, ``| grep -q``) ends the command quietly with status 141 instead of a
    ``BrokenPipeError`` traceback; stdout is pointed at ``/dev/null`` so the interpreter's final flush cannot raise
    again."""
    args = build_parser().parse_args(argv)
    try:
        return args._run(args)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return SIGPIPE_EXIT_STATUS
