"""``oellm recipe --submit`` on a machine without SLURM: refused before any run directory is created."""

from __future__ import annotations

import random

from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main


def test_submit_without_sbatch_leaves_no_run_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no sbatch anywhere on it
    image = tmp_path / "image.sif"
    image.touch()
    runs = tmp_path / f"runs-{random.randint(0, 10**6)}"
    status = main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--submit", "--row", "2",
                   "--image", str(image), "--output-dir", str(runs)])
    assert status == 2
    assert "sbatch not found: submit from a SLURM login node" in capsys.readouterr().err
    assert not runs.exists()
