"""The ``oellm`` command line: thin subcommands that parse, call a library function and print.

Each subcommand lives in ``megatron.oellm.commands.<name>`` and provides ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int`` (the exit status). Only the module of the subcommand being run is
imported: the list in ``oellm --help`` reads each ``HELP`` from its module's source, so a package that one command
needs and that is broken (``packaging`` for ``doctor``) stops only that command, with one error line.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import errno
import importlib
import importlib.util
import io
import os
import pkgutil
import re
import signal
import sys
from collections.abc import Collection
from pathlib import Path
from types import ModuleType
from typing import NoReturn, TextIO

import megatron.oellm
from megatron.oellm import commands
from megatron.oellm.error_lines import one_line_error


def _command_names() -> list[str]:
    """Subcommand names (module names with ``_`` as ``-``), in alphabetical order; nothing is imported."""
    infos = sorted(pkgutil.iter_modules(commands.__path__), key=lambda info: info.name)
    return [info.name.replace("_", "-") for info in infos if not info.name.startswith("_")]


def _module_name(command: str) -> str:
    """The module of subcommand ``command`` (``megatron.oellm.commands.NAME``)."""
    return f"{commands.__name__}.{command.replace('-', '_')}"


def _command_help(command: str) -> str:
    """The ``HELP`` line of subcommand ``command``, read from its module's source without importing it (its imports
    may fail); empty where the source cannot be read or has no literal ``HELP``."""
    spec = importlib.util.find_spec(_module_name(command))
    try:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except (AttributeError, TypeError, OSError, SyntaxError, ValueError):  # no spec or origin, unreadable source
        return ""
    values = [node.value for node in tree.body if isinstance(node, ast.Assign)
              and any(isinstance(target, ast.Name) and target.id == "HELP" for target in node.targets)]
    try:
        return str(ast.literal_eval(values[0])) if values else ""
    except ValueError:  # HELP built by an expression: no help line rather than an import
        return ""


class CommandLoadError(Exception):
    """A subcommand's module raised on import (a broken or missing package it needs); its message is one line."""

    def __init__(self, command: str, error: Exception) -> None:
        super().__init__(one_line_error(error))
        self.command = command


def _load_command(command: str) -> ModuleType:
    """Import the module of subcommand ``command``; :class:`CommandLoadError` naming what failed where it raises."""
    try:
        return importlib.import_module(_module_name(command))
    except Exception as error:  # noqa: BLE001  (any import failure of a dependency: one error line, not a traceback)
        raise CommandLoadError(command, error) from error


def _chosen_command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is no option (the top-level options take no value); None
    where it names none (``oellm --help``) or one that does not exist."""
    word = next((arg for arg in argv if not arg.startswith("-")), None)
    return word if word in _command_names() else None


_INVALID_COMMAND = re.compile(r"argument COMMAND: invalid choice: '(?P<name>.*?)'")
"""argparse's (Python 3.11) message for a subcommand name that is none of the choices."""


class _OellmParser(argparse.ArgumentParser):
    """The top-level parser; an unknown subcommand's error line names the closest one (``oellm modles``: did you
    mean 'models'?), as the card and flag errors do, which argparse before Python 3.14 does not."""

    def error(self, message: str) -> NoReturn:
        """Print usage and ``oellm: error: MESSAGE`` (with a suggestion for a mistyped subcommand); exit 2."""
        match = _INVALID_COMMAND.match(message)
        if match:
            close = difflib.get_close_matches(match["name"], _command_names(), n=1)
            message += f" (did you mean {close[0]!r}?)" if close else ""
        super().error(message)


def build_parser(loaded: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``oellm`` argument parser: every subcommand with its help line, and the options of those in ``loaded``
    (default: all of them), whose modules are imported (which may raise :class:`CommandLoadError`)."""
    parser = _OellmParser(prog="oellm", description="megatron-oellm tools")
    parser.add_argument("--version", action="version", version=f"megatron-oellm {megatron.oellm.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _command_names():
        help_line = _command_help(name)
        sub_parser = sub.add_parser(name, help=help_line, description=help_line)
        if loaded is None or name in loaded:
            module = _load_command(name)
            module.add_arguments(sub_parser)
            sub_parser.set_defaults(_run=module.run)
            _name_usage_parsers(sub_parser)
    return parser


def _name_usage_parsers(parser: argparse.ArgumentParser) -> None:
    """Set ``_oellm_parser`` to ``parser`` in its own defaults and, likewise, in those of every subcommand parser
    below it (``oellm convert hf-to-mcore``): argparse copies a subcommand's defaults over its parent's, so the parsed
    arguments name the deepest subcommand given, whose usage an unknown argument's error then prints (not its
    parent's ``oellm convert [-h] DIRECTION ...``)."""
    parser.set_defaults(_oellm_parser=parser)
    for action in parser._actions:  # argparse keeps its actions, subcommand choices included, only privately
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _name_usage_parsers(child)


def parse_command_line(argv: list[str] | None) -> argparse.Namespace:
    """``argv`` parsed; an argument no option takes is the subcommand's usage error (``oellm models: error:
    unrecognized arguments: --bogus``, exit 2), not the top-level parser's, which pointed at the wrong usage."""
    argv = sys.argv[1:] if argv is None else argv
    command = _chosen_command(argv)
    parser = build_parser([command] if command else [])  # only the module of the command being run
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "_oellm_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


SIGPIPE_EXIT_STATUS = 128 + signal.SIGPIPE
"""Exit status of a command whose reader closed its output (``oellm models | head``), as a shell reports SIGPIPE."""
INTERRUPTED_EXIT_STATUS = 128 + signal.SIGINT
"""Exit status of a command stopped by Ctrl-C (SIGINT), as a shell reports it."""


class WatchedStdout:
    """Stands in for ``sys.stdout`` while a command runs and notes whether writing to it raised ``OSError``: tells a
    full disk or I/O error of stdout (``--json > /dev/full``) from one of a file the command itself reads or writes.
    Everything else is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.error: OSError | None = None
        """The first error writing to the stream raised; kept, as argparse's ``--help`` swallows it."""

    def write(self, text: str) -> int:
        """Write ``text`` to the stream, noting a failure."""
        try:
            return self.stream.write(text)
        except OSError as error:
            self.error = self.error or error
            raise

    def flush(self) -> None:
        """Flush the stream, noting a failure."""
        try:
            self.stream.flush()
        except OSError as error:
            self.error = self.error or error
            raise

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


class ClosedStdout(io.TextIOBase):
    """Stands in for the ``None`` Python makes ``sys.stdout`` when the process started with it closed (``oellm ...
    >&-``): a write fails as one to a closed descriptor does, so the output is reported lost (one error line, status
    1) instead of ``print`` dropping it silently or the stdout wrapper failing with an ``AttributeError``."""

    def write(self, text: str) -> int:
        """Fail as a write to a closed file descriptor does."""
        raise OSError(errno.EBADF, "stdout is closed")


def _discard_stdout() -> None:
    """Point stdout at ``/dev/null``, so that the interpreter's final flush of output that cannot be written does not
    raise again (a second error, printed after the command's own line). A stdout with no file descriptor (a
    stand-in of Python's own) is left as it is: no final flush of the interpreter's reaches it."""
    try:
        descriptor = sys.stdout.fileno()
    except (OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)


def _output_error(stdout: WatchedStdout) -> OSError | None:
    """The error that kept what was written to ``stdout`` from being written (a write failed, or flushing what is
    left does); None where all of it was. argparse's ``--help`` and ``--version`` ignore an ``OSError`` of their
    write and exit 0, so ``oellm --help > /dev/full`` lost the help text silently (or, once buffered, at the
    interpreter's final flush)."""
    with contextlib.suppress(OSError):  # the failure is noted in stdout.error
        stdout.flush()
    return stdout.error


def _named_command(argv: list[str] | None) -> str:
    """``oellm COMMAND`` for the subcommand ``argv`` (the process's arguments where None) names, ``oellm`` for
    none: the name of an error line before the arguments are parsed whole (``oellm plan --help``)."""
    command = _chosen_command(sys.argv[1:] if argv is None else argv)
    return f"oellm {command}" if command else "oellm"


def _unwritable_stdout_status(command: str, error: OSError) -> int:
    """The exit status of ``command`` whose output to stdout failed with ``error``, stdout pointed at ``/dev/null``:
    :data:`SIGPIPE_EXIT_STATUS` for a reader that stopped early, else 1 after one error line on stderr."""
    _discard_stdout()
    if isinstance(error, BrokenPipeError):
        return SIGPIPE_EXIT_STATUS
    print(f"{command}: error: cannot write the output to stdout: {error.strerror or error}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``oellm`` console script; returns the exit status.

    A reader that stops early (``| head``, ``| grep -q``) ends the command quietly with status 141 instead of a
    ``BrokenPipeError`` traceback; stdout is pointed at ``/dev/null`` so the interpreter's final flush cannot raise
    again. Output that cannot be written (``--json`` or ``--help > /dev/full``: no space left) ends it with one
    ``oellm COMMAND: error: cannot write the output to stdout`` line on stderr and status 1 instead of a traceback
    (or, for ``--help``, argparse's silent status 0); so does a closed stdout (``>&-``). Ctrl-C that reaches here (a
    subcommand with no handling of its own, or any one while it imports torch) ends it with one ``oellm COMMAND:
    error: interrupted`` line and status 130 instead of a traceback; a subcommand that cleans up on Ctrl-C
    (``convert`` removes its partial output) does so first and reports it itself. A subcommand
    whose module does not import (a broken package it needs) ends with one ``oellm COMMAND: error:`` line naming the
    failure and status 1."""
    command = "oellm"
    given_stdout = sys.stdout
    stdout = sys.stdout = WatchedStdout(ClosedStdout() if given_stdout is None else given_stdout)
    try:
        args = parse_command_line(argv)
        command = f"oellm {args.command}"
        status = args._run(args)
        sys.stdout.flush()  # here, not at exit: a full disk (``> /dev/full``) is reported below, not ignored
        return status
    except CommandLoadError as error:
        return commands.refuse(error.command, f"cannot load this command: {error}; reinstall the package it names, "
                               "or take a broken copy of it off PYTHONPATH (`python3 -m pip check` names broken "
                               "requirements)", status=1)
    except SystemExit:  # --help, --version, a usage error: argparse prints and exits, ignoring a failed write
        lost = _output_error(stdout)
        if lost is None:
            raise
        return _unwritable_stdout_status(_named_command(argv), lost)
    except BrokenPipeError:
        _discard_stdout()
        return SIGPIPE_EXIT_STATUS
    except OSError as error:
        if stdout.error is None:
            raise
        return _unwritable_stdout_status(command, error)
    except KeyboardInterrupt:
        print(f"{command}: error: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT_STATUS
    finally:
        if sys.stdout is stdout:
            sys.stdout = given_stdout


if __name__ == "__main__":  # ``python -m megatron.oellm.cli``, beside the documented ``python -m megatron.oellm``
    sys.exit(main())
