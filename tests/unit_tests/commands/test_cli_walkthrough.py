"""What a first-time user of the ``oellm`` command line meets: its output piped into ``head``, help for every option,
``oellm flops --megatron-compatible`` with flag values Megatron's formula cannot count (CPU)."""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from megatron.oellm.cli import SIGPIPE_EXIT_STATUS, build_parser, main

REPO = Path(__file__).resolve().parents[3]


def _subprocess_env() -> dict[str, str]:
    """This checkout first on the path, and no inherited warning filter (the test looks at what stderr gets)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return env


def test_a_reader_that_closes_the_pipe_ends_the_command_without_a_traceback() -> None:
    """``oellm recipe X.toml | head`` ended in a ``BrokenPipeError`` traceback once head had its lines."""
    lines = random.randint(20_000, 40_000)  # well past a pipe buffer, so the writer meets the closed pipe
    code = ("import sys\n"
            "from megatron.oellm.commands import models\n"
            f"models.run = lambda args: [print('row', i) for i in range({lines})] and 0\n"
            "from megatron.oellm.cli import main\n"
            "sys.exit(main(['models']))\n")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=_subprocess_env(), cwd=REPO)
    assert process.stdout.readline() == b"row 0\n"
    process.stdout.close()
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == SIGPIPE_EXIT_STATUS, stderr.decode()
    assert b"Traceback" not in stderr and b"BrokenPipeError" not in stderr, stderr.decode()


def _actions_without_help(name: str, parser: argparse.ArgumentParser) -> list[str]:
    """``"SUBCOMMAND --option"`` for every option of ``parser`` (and its nested subcommands) with no help text."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub_parser in action.choices.items():
                missing += _actions_without_help(f"{name} {sub_name}".strip(), sub_parser)
        elif not action.help:
            missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_option_of_every_subcommand_has_a_help_text() -> None:
    """``oellm plan --help`` listed --nodes, --tp, --pp, --vpp, --ep, --etp, --cp, --sp and --json with no word
    on what they are or their defaults (``oellm bench --help`` likewise --seq-length)."""
    assert _actions_without_help("", build_parser()) == []


@pytest.mark.parametrize("model, flag", [("qwen3-30b-a3b", "num-layers=0"), ("qwen3-235b-a22b", "num-layers=0"),
                                         ("qwen3.5-35b-a3b", "hidden-size=0"),
                                         ("qwen3.5-35b-a3b", "num-attention-heads=0")])
def test_a_megatron_flag_its_formula_cannot_count_is_one_error_line(model: str, flag: str,
                                                                    capsys: pytest.CaptureFixture) -> None:
    """``--megatron-flag num-layers=0`` ended in megatron's IndexError traceback, ``hidden-size=0`` in a
    ZeroDivisionError one."""
    seq_length = random.choice([1024, 2048, 4096, 8192])
    assert main(["flops", model, "--seq-length", str(seq_length), "--megatron-compatible",
                 "--megatron-flag", flag]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oellm flops: error: ") and err.count("\n") == 1, err
    assert f"--megatron-flag {flag}" in err


def test_megatron_compatible_mode_prints_no_import_warnings() -> None:
    """Importing megatron.training for its parser and count printed a dozen UserWarnings (no TE, no Apex, no absl)
    on stderr around a one-number answer."""
    seq_length = random.choice([2048, 4096, 8192])
    result = subprocess.run([sys.executable, "-m", "megatron.oellm", "flops", "qwen3-30b-a3b", "--seq-length",
                             str(seq_length), "--megatron-compatible", "--json"],
                            capture_output=True, text=True, env=_subprocess_env(), cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal without a GPU")
def test_bench_without_a_gpu_is_one_error_line_without_import_warnings() -> None:
    """``oellm bench`` on a CPU node printed a dozen import UserWarnings of megatron-core and fla (no TE, no Apex, no
    GPU for Triton) before its one-line refusal."""
    seq_length = random.choice([1024, 2048, 4096])
    result = subprocess.run([sys.executable, "-m", "megatron.oellm", "bench", "--seq-length", str(seq_length)],
                            capture_output=True, text=True, env=_subprocess_env(), cwd=REPO, timeout=300)
    assert result.returncode == 2
    assert result.stderr == ("oellm bench: error: needs a CUDA GPU (torch.cuda.is_available() is False); run it on "
                             "a GPU node\n"), result.stderr


@pytest.mark.parametrize("module", ["megatron.oellm", "megatron.oellm.cli"])
def test_both_module_forms_run_the_command_line(module: str) -> None:
    """``python -m megatron.oellm.cli recipe X.toml --dry-run`` printed nothing and exited 0: the module had no
    ``__main__`` guard, so a user read the silence as a dry run that passed."""
    card = random.choice(["qwen3-30b-a3b", "qwen3.5-35b-a3b", "qwen3-235b-a22b"])
    result = subprocess.run([sys.executable, "-m", module, "flops", card, "--seq-length", "4096", "--json"],
                            capture_output=True, text=True, env=_subprocess_env(), cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f'"{card}"' in result.stdout, result.stdout
    refused = subprocess.run([sys.executable, "-m", module, "flops", "no-such-card", "--seq-length", "4096"],
                             capture_output=True, text=True, env=_subprocess_env(), cwd=REPO, timeout=300)
    assert refused.returncode == 2 and "no-such-card" in refused.stderr, refused.stderr
