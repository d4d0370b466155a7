"""``--dry-run`` noted the ``sbatch`` options ``--submit`` will need, but said nothing of an image, bind source,
``--data-path`` prefix or ``--tokenizer-model`` path that does not exist here, which ``--submit`` refuses: a user
saw a clean dry run, then a refusal. It now prints one ``note:`` per missing path, in ``--submit``'s own words, and
still prints the rows (a dry run away from the cluster is expected to miss them)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES, fake_sbatch

from megatron.oellm.cli import main
from megatron.oellm.recipes import load_recipe
from megatron.oellm.recipes.slurm import run_dir

NOTE = "note: --submit will refuse this: "


def _config(tmp_path, bind_source: str):
    """A config extending the Qwen3-30B-A3B MN5 recipe with a bind of ``bind_source``."""
    config = tmp_path / "binds.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\n[cluster]\nbinds = ["{bind_source}:/x"]\n')
    return config


def _dry_run_notes(capsys, argv: list[str]) -> list[str]:
    """The ``--submit will refuse`` notes of a dry run of ``argv``, which must print its rows."""
    assert main(["recipe", *argv, "--dry-run", "--row", "1"]) == 0
    out = capsys.readouterr().out
    assert "\n-- row 1: layout ok" in out
    return [line.removeprefix(NOTE) for line in out.splitlines() if line.startswith(NOTE)]


def test_each_missing_input_is_noted_in_the_words_submit_refuses_it_with(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    tag = random.randrange(10**6)
    image, bind, tokenizer = f"image{tag}.sif", str(tmp_path / f"bind{tag}"), f"./tokenizer{tag}"
    prefixes = [f"data/first{tag}", str(tmp_path / f"second{tag}")]
    argv = [str(_config(tmp_path, bind)), "--image", image, "--data-path", *prefixes, "--tokenizer-model", tokenizer]
    notes = _dry_run_notes(capsys, argv)
    assert notes == [
        f"container image {image!r} does not exist (relative to {tmp_path}); build it (docs/container.md) or pass "
        "--image PATH",
        f"bind source {bind!r} of cluster.binds entry '{bind}:/x' does not exist",
        *(f"--data-path prefix {prefix!r}: '{prefix}.bin' and '{prefix}.idx' not found (relative to {tmp_path}); "
          "give the prefix of a Megatron dataset, without .bin/.idx" for prefix in prefixes),
        f"--tokenizer-model {tokenizer!r} does not exist (relative to {tmp_path}); give a Hugging Face tokenizer "
        "directory on the shared file system (AutoTokenizer loads no single file), a hub name (org/name; compute "
        "nodes without network need the directory), or 'byte'"]
    assert main(["recipe", *argv, "--submit", "--row", "1"]) == 2  # refused on the first, before any sbatch call
    assert capsys.readouterr().err == f"oellm recipe: error: {notes[0]}\n"

    for path in (image, bind, tokenizer):
        (tmp_path / path).mkdir()
    (tmp_path / tokenizer / "tokenizer.json").write_text("{}")  # a tokenizer folder, as AutoTokenizer needs
    for prefix in prefixes:
        (tmp_path / prefix).parent.mkdir(exist_ok=True)
        for suffix in (".bin", ".idx"):
            (tmp_path / f"{prefix}{suffix}").write_bytes(random.randbytes(8))
    assert _dry_run_notes(capsys, argv) == []


@pytest.mark.parametrize("depth", [0, random.randrange(1, 4)])
def test_an_output_dir_in_a_file_is_noted_in_the_words_submit_refuses_it_with(tmp_path, monkeypatch, capsys, depth):
    """``--output-dir`` naming a file, or a folder under one, gave a clean dry run; ``--submit`` then could not create
    the run directory. One note for the whole table, whose rows the same file blocks."""
    monkeypatch.chdir(tmp_path)
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    image = tmp_path / "image.sif"
    image.touch()
    blocker = tmp_path / f"runs{random.randrange(10**6)}"
    blocker.write_bytes(random.randbytes(8))
    output = blocker.joinpath(*(f"sub{level}" for level in range(depth)))
    config = EXAMPLES / "qwen3_30b_a3b_mn5.toml"
    argv = [str(config), "--image", str(image), "--output-dir", str(output)]
    directory = run_dir(load_recipe(config), 1).relative_to(Path("oellm-runs").absolute())
    notes = _dry_run_notes(capsys, argv)
    assert notes == [f"cannot create the run directory {str(output / directory)!r} ({blocker} is a file); pass "
                     "--output-dir DIR (or set cluster.output_dir) to a directory you can write"]
    assert main(["recipe", *argv, "--dry-run"]) == 0  # every row: the same file blocks each, noted once
    assert capsys.readouterr().out.count(NOTE) == 1
    assert main(["recipe", *argv, "--submit", "--row", "1"]) == 2
    assert capsys.readouterr().err == f"oellm recipe: error: {notes[0]}\n" and not record.exists()

    blocker.unlink()
    assert _dry_run_notes(capsys, argv) == []
