"""Mutation audit of the ``oellm`` command line (:mod:`megatron.oellm.cli` and its subcommands): exit statuses,
refusals and defaults the existing tests let change unnoticed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import megatron.oellm
from megatron.oellm.cli import main

REPO = Path(__file__).resolve().parents[3]


def test_oellm_without_a_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture) -> None:
    """``oellm`` alone must print the usage and exit 2 naming the missing COMMAND, not fail with an
    ``AttributeError`` traceback on the namespace that no subcommand filled in."""
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "oellm: error: the following arguments are required: COMMAND", err


def test_version_names_the_package_and_its_version(capsys: pytest.CaptureFixture) -> None:
    """``oellm --version`` is what a bug report quotes: ``megatron-oellm X.Y.Z`` on stdout, exit 0."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"megatron-oellm {megatron.oellm.__version__}\n"


def test_a_closed_pipe_exits_with_the_shells_sigpipe_status() -> None:
    """``oellm models | head`` ends with 141 (128 + SIGPIPE), the status a shell reports for a writer whose reader
    left, so that ``set -o pipefail`` scripts tell it from a failure of the command."""
    code = ("import sys\n"
            "from megatron.oellm.commands import models\n"
            "def run(args):\n"
            "    raise BrokenPipeError\n"
            "models.run = run\n"
            "from megatron.oellm.cli import main\n"
            "sys.exit(main(['models']))\n")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    process = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, cwd=REPO, timeout=120,
                             check=False)
    assert process.returncode == 128 + signal.SIGPIPE == 141, process.stderr.decode()
    assert b"Traceback" not in process.stderr, process.stderr.decode()


@pytest.mark.parametrize("unit, power", [("kb", 1), ("Mb", 2), ("gB", 3), ("tib", 4), ("G", 3)])
def test_a_shard_size_is_read_whatever_the_case_of_its_unit(unit: str, power: int) -> None:
    """``--max-shard-size 500mb`` (as ``huggingface_hub`` and ``save_pretrained`` accept it) is the same size as
    ``500MB``: a lower-case unit must not be refused."""
    from megatron.oellm.commands.convert import byte_size

    count = random.randint(1024 if power == 1 else 1, 999_999)  # at least the 1 MiB minimum
    assert byte_size(f"{count}{unit}") == count * 1024 ** power


@pytest.mark.parametrize("direction, source", [("hf-to-mcore", "--hf"), ("mcore-to-hf", "--mcore")])
def test_a_vocabulary_of_no_token_is_a_usage_error_of_either_direction(direction: str, source: str, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """``--vocab-size 0`` (or negative) names the option at once (exit 2), before any checkpoint is read."""
    value = random.choice(["0", str(-random.randint(1, 10**6))])
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", direction, "--model", "qwen3-30b-a3b-tiny", source, str(tmp_path / "in"),
              "--out", str(tmp_path / "out"), "--vocab-size", value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (f"oellm convert {direction}: error: argument --vocab-size: expected a positive "
                                    f"integer, got {value!r}"), err
    assert not (tmp_path / "out").exists()


def test_the_default_shard_size_is_5_gib() -> None:
    """``mcore-to-hf`` without ``--max-shard-size`` writes shards of up to 5 GiB, as its help says (and as
    ``save_pretrained`` does): a smaller default would silently split a checkpoint into more files."""
    from megatron.oellm.cli import build_parser

    args = build_parser().parse_args(["convert", "mcore-to-hf", "--model", "qwen3-30b-a3b-tiny", "--mcore", "in",
                                      "--out", "out"])
    assert args.max_shard_size == 5 * 2**30


def test_overwrite_reaches_both_conversions(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A second conversion into the same ``--out`` is refused without ``--overwrite`` (exit 2, the option named) and
    replaces the first with it, in both directions: the option must reach the conversion."""
    from megatron.oellm.cards import get_card
    from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf

    card = get_card("qwen3-30b-a3b-tiny")
    write_hf(card, random_hf_tensors(card, seed=random.randrange(2**31)), tmp_path / "hf")
    to_mcore = ["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp_path / "hf"),
                "--out", str(tmp_path / "mcore")]
    to_hf = ["convert", "mcore-to-hf", "--model", card.name, "--mcore", str(tmp_path / "mcore"),
             "--out", str(tmp_path / "out")]
    for argv in (to_mcore, to_hf):
        assert main(argv) == 0
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"oellm convert {argv[1]}: error: ") and "pass --overwrite" in err, err
        assert main([*argv, "--overwrite"]) == 0, capsys.readouterr().err


def test_the_table_takes_the_median_by_default(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``oellm table LOG`` with no ``--statistic`` takes the median of the window's iteration times (as the reports
    do, and as its help says): one slow iteration inside the window (a checkpoint save, a straggler) must not move
    the step time, which the mean would."""
    import csv
    import io
    import statistics

    from tests.unit_tests.megatron_logs import megatron_args, megatron_log, random_times

    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    times[random.randrange(3, 9)] *= random.uniform(2.0, 4.0)  # one slow iteration inside the default window 3-10
    log = tmp_path / "8n.log"
    log.write_text(megatron_log(args, times, [round(random.uniform(90, 140), 1)] * 10))
    assert main(["table", str(log), "--format", "csv"]) == 0
    [row] = csv.DictReader(io.StringIO(capsys.readouterr().out))
    window = times[2:10]
    assert float(row["step_time_s"]) == pytest.approx(statistics.median(window) / 1000, rel=1e-9)
    assert float(row["step_time_s"]) != pytest.approx(statistics.mean(window) / 1000, rel=1e-3)
    assert main(["table", str(log)]) == 0
    assert "Medians over iterations 3-10" in capsys.readouterr().out


def test_the_summary_names_tensors_left_out_of_the_conversion(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An HF checkpoint with a multi-token-prediction head: ``hf-to-mcore`` converts the causal LM and its summary
    says how many tensors it left out, naming one, so that a user does not take the output for the whole model."""
    import torch

    from megatron.oellm.cards import get_card
    from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf

    card = get_card("qwen3-30b-a3b-tiny")
    hf = random_hf_tensors(card, seed=random.randrange(2**31))
    extra = sorted(f"mtp.layers.0.{name}.weight" for name in random.sample(["fc", "enorm", "hnorm", "eh_proj"],
                                                                           random.randint(1, 4)))
    write_hf(card, {**hf, **{name: torch.randn(card.hidden_size) for name in extra}}, tmp_path / "hf")
    assert main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp_path / "hf"),
                 "--out", str(tmp_path / "mcore")]) == 0
    out = capsys.readouterr().out
    assert (f"  skipped {len(extra)} tensors outside the causal-LM text model (vision tower, multi-token-prediction "
            f"head; e.g. {extra[0]})") in out.splitlines(), out
