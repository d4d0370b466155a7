"""An interrupted ``oellm recipe --submit`` says which rows are queued and how to submit the rest: a rerun of the whole
command queued the queued rows again."""

from __future__ import annotations

import random

from recipe_helpers import EXAMPLES, fake_sbatch

import megatron.oellm.commands.recipe as recipe_command
from megatron.oellm.cli import main

CONFIG = str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")


def _image(tmp_path):
    image = tmp_path / "image.sif"
    image.touch()
    return image


def test_an_interrupted_submission_names_the_queued_rows_and_the_rest(tmp_path, monkeypatch, capsys):
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    stop_at = random.randrange(1, 6)  # a call of 1..5 of the table's 6 rows is interrupted
    calls = []
    real_submit = recipe_command.submit

    def submit_until_interrupted(script, directory):
        calls.append(directory)
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        return real_submit(script, directory)

    monkeypatch.setattr(recipe_command, "submit", submit_until_interrupted)
    status = main(["recipe", CONFIG, "--submit", "--output-dir", str(tmp_path / "runs"), "--image",
                   str(_image(tmp_path))])
    assert status == 130
    out, err = capsys.readouterr()
    queued = list(range(1, stop_at))
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("row ")] == [f"row {n}" for n in queued]
    submitted = record.read_text().splitlines() if record.exists() else []
    assert len(submitted) == len(queued)
    rows = ("no row is queued" if not queued else "row 1 is queued (job 7)" if queued == [1]
            else f"rows {', '.join(map(str, queued))} are queued (jobs {', '.join('7' for _ in queued)})")
    assert f"error: interrupted: {rows}; row {stop_at} may be (see squeue --me)" in err
    assert f"`oellm recipe {CONFIG} --submit --row N` and the same options but --nodes" in err
    assert err.rstrip().endswith(f"(N: {', '.join(map(str, range(stop_at, 7)))})")


def test_a_submission_names_the_rows_whose_dispatch_group_spans_nodes(tmp_path, monkeypatch, capsys):
    """The dry run's note that a row's DeepEP group spans nodes (the image then needs DeepEP built for RDMA between
    nodes) was not printed by ``--submit``: a user going straight to it queued 64-node jobs without seeing it."""
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 11")
    config = str(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")
    status = main(["recipe", config, "--submit", "--row", "2", "--account", "a", "--output-dir",
                   str(tmp_path / "runs"), "--image", str(_image(tmp_path))])
    out, err = capsys.readouterr()
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("row 2: note: the deepep expert-parallel group (32 GPUs) spans 8 nodes of 4 GPUs"), out
    assert lines[1].startswith("row 2: Submitted batch job 11 (") and len(record.read_text().splitlines()) == 1


def test_a_submission_within_nodes_prints_no_note(tmp_path, monkeypatch, capsys):
    fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 12")
    status = main(["recipe", CONFIG, "--submit", "--row", "1", "--output-dir", str(tmp_path / "runs"), "--image",
                   str(_image(tmp_path))])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "note:" not in out and out.startswith("row 1: Submitted batch job 12 (")
