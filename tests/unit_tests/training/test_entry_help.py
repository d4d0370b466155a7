"""The training entry's ``--help`` printed megatron's whole parser (about 3,800 lines), the entry's own flags last,
and what a run needs nowhere. ``--help`` (``-h``) now prints a short page of the flags the entry's
``extra_args_provider`` adds to megatron's, what a run needs and an example, before torch or megatron is imported;
``--help-all`` prints the whole parser."""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from megatron.oellm.megatron_args import megatron_parser
from megatron.oellm.training import entry
from megatron.oellm.training.args import full_help_parser, oellm_parser
from megatron.oellm.training.flags import (
    ENTRY_MODULE,
    FULL_HELP,
    FULL_PAGE_DESCRIPTION,
    RUN_NEEDS,
    SHORT_HELP,
    SHORT_PAGE_HELP,
    asked_help,
    short_help,
)
from tests.unit_tests.training.entry_helpers import TINY_MOE_RUN, entry_on_a_cpu_node, refused_line

NEEDS_A_GPU_NODE = "the training entry needs a GPU node"
"""The refusal of a command line that passed every check a node without a GPU can run."""


def flag_groups(argv: list[str]) -> list[list[str]]:
    """``argv`` cut into its flags, each with the values that follow it."""
    groups: list[list[str]] = []
    for arg in argv:
        if arg.startswith("--"):
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


def among_flags(option: str) -> list[str]:
    """``option`` at a random place between a random choice of :data:`TINY_MOE_RUN`'s flags: a help option is
    answered wherever it stands, before any check of the others."""
    groups = random.sample(flag_groups(TINY_MOE_RUN), random.randint(0, len(flag_groups(TINY_MOE_RUN))))
    groups.insert(random.randint(0, len(groups)), [option])
    return [arg for group in groups for arg in group]


def added_actions() -> list:
    """The actions the entry's ``extra_args_provider`` adds to megatron's parser: the entry's parser's options that
    megatron's own parser lacks."""
    megatron_options = {option for action in megatron_parser()._actions for option in action.option_strings}
    return [action for action in oellm_parser()._actions if set(action.option_strings) - megatron_options]


def words(text: str) -> str:
    """``text`` with each run of white space one space (argparse wraps help texts to the terminal's width)."""
    return " ".join(text.split())


def example_argv() -> list[str]:
    """The command line of the example on the short page, after the entry's module."""
    example = RUN_NEEDS.split("\nexample", 1)[1].split("\n", 1)[1]
    line = example.replace("\\\n", " ").split()
    return line[line.index(ENTRY_MODULE) + 1:]


@pytest.mark.parametrize("option", SHORT_HELP)
def test_help_prints_every_flag_the_entry_adds_and_exits_0(capsys: pytest.CaptureFixture[str], option: str) -> None:
    """Each flag the ``extra_args_provider`` adds, with its help text, is on a page of a few dozen lines (not the
    whole parser's thousands), whose last line says how to see megatron's flags."""
    assert entry.main(among_flags(option)) == 0
    page = capsys.readouterr().out
    assert page == short_help()
    added = added_actions()
    assert added, "the entry's parser has no flag of its own"
    for action in added:
        assert all(re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", page) for flag in action.option_strings)
        assert action.help is None or words(action.help) in words(page), action.option_strings
    assert len(page.splitlines()) < 60
    assert FULL_HELP in page.rstrip().splitlines()[-1]


def test_help_all_prints_megatrons_whole_parser_with_the_entrys_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """The pointer's option prints the parser the entry parses with: megatron's flags and the entry's. The page
    named ``entry.py`` in its usage, said ``-h, --help  show this help message and exit`` (``-h`` prints the short
    page) and did not list ``--help-all``: its usage names the ``python -m`` line, and it says which option prints
    which page."""
    assert entry.main(among_flags(FULL_HELP)) == 0
    page = capsys.readouterr().out
    parser = oellm_parser()
    options = [option for action in parser._actions if action.help != argparse.SUPPRESS
               for option in action.option_strings]
    assert all(option in page for option in random.sample(options, 50))
    assert page == full_help_parser().format_help()
    assert parser.prog != f"python -m {ENTRY_MODULE}" and FULL_HELP not in parser._option_string_actions  # as it was
    assert page.startswith(f"usage: python -m {ENTRY_MODULE} ") and "entry.py" not in page
    assert "show this help message" not in page
    assert "".join(FULL_PAGE_DESCRIPTION.split()) in "".join(page.split())  # argparse may wrap after a hyphen
    text = words(page)
    assert f"-h, --help {SHORT_PAGE_HELP}" in text and f"{FULL_HELP} show this page and exit" in text


@pytest.mark.parametrize("first", [*SHORT_HELP, FULL_HELP])
def test_the_first_help_option_of_the_line_chooses_the_page(first: str) -> None:
    """A line asking for both pages gets the page of its first help option, as argparse answers the first one it
    meets, wherever the other stands after it (a flag's value included)."""
    others = [option for option in (*SHORT_HELP, FULL_HELP) if (option == FULL_HELP) != (first == FULL_HELP)]
    argv = among_flags(first)
    argv.insert(random.randint(argv.index(first) + 1, len(argv)), random.choice(others))
    assert asked_help(argv) == (FULL_HELP if first == FULL_HELP else "--help"), argv


def test_python_m_answers_help_before_importing_torch_or_megatron(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m megatron.oellm.training.entry --help`` prints the page, exits 0 and imports neither torch nor
    megatron-core nor megatron.training (``-X importtime`` names every module the process imported)."""
    columns = str(random.randint(60, 160))
    monkeypatch.setenv("COLUMNS", columns)  # the width argparse wraps to, here and in the child
    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-X", "importtime", "-m", ENTRY_MODULE, *among_flags(random.choice(SHORT_HELP))]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == short_help()
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "megatron.oellm.training.flags" in imported  # the child's imports were read
    heavy = {name for name in imported if name.split(".")[0] == "torch"
             or name.startswith(("megatron.core", "megatron.training"))}
    assert not heavy, sorted(heavy)[:5]


def test_the_pages_example_passes_the_checks_a_node_without_a_gpu_runs(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The page's example is a command line the entry takes, and each of its flags is one a run needs (as the page
    says): left out, the entry refuses the line before it gets to the node's missing GPU."""
    run = entry_on_a_cpu_node(monkeypatch)
    assert NEEDS_A_GPU_NODE in refused_line(run, capsys, example_argv())
    groups = flag_groups(example_argv())
    for left_out in groups:
        line = refused_line(run, capsys, [arg for group in groups if group is not left_out for arg in group])
        assert NEEDS_A_GPU_NODE not in line, left_out
