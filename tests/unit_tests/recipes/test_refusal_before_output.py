"""``oellm recipe --dry-run`` refuses a recipe before it prints anything: a partition, account or QOS ``#SBATCH``
cannot carry is named as the recipe's, not as its first row's, and a row that does not resolve leaves no header on
stdout that a script could take for the start of a dry run."""

from __future__ import annotations

import random

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main


@pytest.mark.parametrize("option", ["--partition", "--account", "--qos"])
def test_a_directive_value_sbatch_cannot_carry_is_refused_before_any_output(option, capsys):
    value = random.choice(["gpu queue", "acc$HOME", "it's"])
    assert main(["recipe", str(EXAMPLES / "qwen3_30b_a3b_mn5.toml"), "--row", str(random.randint(1, 10)),
                 option, value]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    name = option.removeprefix("--")
    assert captured.err == (f"oellm recipe: error: SLURM {name} {value!r} has characters #SBATCH cannot carry "
                            "(spaces, quotes, $ ...); use letters, digits and . _ - : / % @ + , = ~ only: pass "
                            f"another {option}\n")


def test_a_row_that_does_not_resolve_leaves_no_header(tmp_path, capsys):
    config = tmp_path / "tp0.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\ntitle = "x"\n[parallel]\ntp = 0\n')
    assert main(["recipe", str(config), "--row", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "oellm recipe: error: row 1: tp must be >= 1, got 0\n"


def test_a_dry_run_still_prints_the_header_before_its_rows(capsys):
    assert main(["recipe", str(EXAMPLES / "qwen3_30b_a3b_mn5.toml"), "--row", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("== ") and out.index("recipe qwen3_30b_a3b_mn5") < out.index("#!/bin/bash")
