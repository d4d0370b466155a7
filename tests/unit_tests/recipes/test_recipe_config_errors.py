"""Recipe config values ``oellm recipe`` must refuse, or carry safely, before a job is queued: a multi-line title or
label stays inside the sbatch header comment, cluster values a job cannot start with (a port outside 1..65535, no
CPUs, an empty image or bind source) are refused, and a config error (rows that are not tables, a missing, cyclic or
empty ``extends`` or one that names no file, a loop of symbolic links, a bad value) names the file and the key at
fault."""

from __future__ import annotations

import dataclasses
import random
import subprocess
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.commands.recipe import describe_recipe
from megatron.oellm.recipes import RecipeError, RunInputs, load_recipe, resolve_row, sbatch_text

ROW = "[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n"


def _config(tmp_path, text: str, name: str = "config.toml"):
    """A config at ``tmp_path / name`` extending the Qwen3-30B-A3B recipe with ``text`` (rows replace its rows)."""
    config = tmp_path / name
    config.write_text(f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\n{text}')
    return config


def _header(script: str) -> list[str]:
    """The script's lines up to its last ``#SBATCH`` directive: sbatch reads directives only up to the first line
    that is not a comment, so each of these must be one."""
    lines = script.splitlines()
    last = max(number for number, line in enumerate(lines) if line.startswith("#SBATCH"))
    return lines[:last + 1]


def _row_one_sbatch(tmp_path, where: str, text: str) -> str:
    """The sbatch script of row 1 of a config whose ``where`` (title or label) is the TOML string ``text``."""
    if where == "title":
        config = _config(tmp_path, f"title = {text}\n{ROW}")
    else:
        config = _config(tmp_path, f'title = "t"\n{ROW}label = {text}\n')
    recipe = load_recipe(config)
    return sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")


@pytest.mark.parametrize("where", ["title", "label"])
def test_a_multi_line_title_or_label_stays_in_the_comment(tmp_path, where):
    """A TOML multi-line title or label was written verbatim into the header comment: its second line ended the
    comment, so sbatch ignored every ``#SBATCH`` after it (nodes, GPUs, time, log) and bash ran it as a command."""
    marker = f"pwned{random.randrange(10**6)}"
    text = f'"""first line\ntouch {marker}\r\nlast"""'
    script = _row_one_sbatch(tmp_path, where, text)
    header = _header(script)
    assert header[0] == "#!/bin/bash" and all(line.startswith("#") for line in header)
    assert "#SBATCH --nodes=8" in header
    assert f"touch {marker}" in script  # kept, on the comment line
    assert subprocess.run(["bash", "-n"], input=script.encode(), check=False).returncode == 0


@pytest.mark.parametrize("where", ["title", "label"])
def test_the_header_comment_joins_a_title_or_label_as_refusals_join_a_message(tmp_path, where):
    """The header's title and label are :func:`~megatron.oellm.error_lines.one_line`'s joining of them, the one the
    refusals use: line breaks (and the blanks around them) become one space, spacing within a line stays (the
    script's own copy of the helper collapsed ``a  b`` to ``a b``)."""
    words = [f"w{random.randrange(10**6)}" for _ in range(4)]
    text = f'"""{words[0]}  {words[1]}\t{words[2]} \r\n  {words[3]}"""'
    script = _row_one_sbatch(tmp_path, where, text)
    joined = f"{words[0]}  {words[1]}\t{words[2]} {words[3]}"
    expected = f"# {joined}: row 1" if where == "title" else f"# t: row 1 ({joined})"
    assert script.splitlines()[1].startswith(expected + ", 8 nodes x "), script.splitlines()[1]


@pytest.mark.parametrize("key, value, message", [
    ("master_port", 0, "master_port must be a TCP port (1..65535)"),
    ("master_port", random.randrange(65536, 10**6), "master_port must be a TCP port (1..65535)"),
    ("cpus_per_task", 0, "cpus_per_task must be >= 1"),
    ("cpus_per_task", -random.randrange(1, 100), "cpus_per_task must be >= 1"),
])
def test_cluster_values_a_job_cannot_start_with_are_refused(tmp_path, capsys, key, value, message):
    """An out-of-range rendezvous port reached torchrun only after the queue; a zero CPU count went into
    ``#SBATCH --cpus-per-task`` and ``srun``."""
    config = _config(tmp_path, f'title = "t"\n[cluster]\n{key} = {value}\n{ROW}')
    assert main(["recipe", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and str(config) in err


def test_a_valid_port_and_cpu_count_reach_the_script(tmp_path):
    port, cpus = random.randrange(1, 65536), random.randrange(1, 300)
    config = _config(tmp_path, f'title = "t"\n[cluster]\nmaster_port = {port}\ncpus_per_task = {cpus}\n{ROW}')
    recipe = load_recipe(config)
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    assert f"MASTER_PORT={port}\n" in script and f"#SBATCH --cpus-per-task={cpus}\n" in script


@pytest.mark.parametrize("rows", ["rows = 5\n", "rows = [1, 2]\n", 'rows = ["a"]\n'])
def test_rows_that_are_not_tables_are_named(tmp_path, capsys, rows):
    """``rows = 5`` gave "'int' object is not iterable", ``rows = [1]`` a ``**`` mapping error: neither named rows."""
    config = _config(tmp_path, f'title = "t"\n{rows}')
    assert main(["recipe", str(config)]) == 2
    err = capsys.readouterr().err
    assert str(config) in err and "rows" in err and "[[rows]]" in err


def test_a_missing_base_names_the_config_that_extends_it(tmp_path, capsys):
    missing = f"base{random.randrange(10**6)}.toml"
    config = tmp_path / "child.toml"
    config.write_text(f'extends = "{missing}"\ntitle = "t"\n{ROW}')
    assert main(["recipe", str(config)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / missing) in err and f"extends = {missing!r}" in err.replace('"', "'") and str(config) in err


@pytest.mark.parametrize("kind, what", [("folder", "is a folder"), ("empty", "is empty"),
                                        ("device", "is neither a regular file nor a pipe")])
def test_a_base_that_is_no_file_is_named_for_what_it_is(tmp_path, capsys, kind, what):
    """A folder, an empty value (the config's own folder) or a device as ``extends`` was reported as a base config
    that "does not exist"; each is now named for what it is."""
    base = {"folder": f"base{random.randrange(10**6)}", "empty": "", "device": "/dev/null"}[kind]
    if kind == "folder":
        (tmp_path / base).mkdir()
    config = tmp_path / "child.toml"
    config.write_text(f'extends = "{base}"\ntitle = "t"\n{ROW}')
    assert main(["recipe", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"extends = {base!r}" in err and what in err and "does not exist" not in err and str(config) in err


def test_a_config_that_is_a_device_is_named_for_what_it_is(capsys):
    """``oellm recipe /dev/null`` said the config does not exist and offered the shipped configs."""
    assert main(["recipe", "/dev/null"]) == 2
    assert capsys.readouterr().err == ("oellm recipe: error: recipe config /dev/null is neither a regular file nor a "
                                       "pipe (a device or socket); name a .toml recipe config\n")


@pytest.mark.parametrize("where", ["config", "base"])
def test_a_symlink_loop_is_one_error_line(tmp_path, capsys, where):
    """A loop of symbolic links as the config was a ``RuntimeError: Symlink loop`` traceback and exit 1; as its
    ``extends``, a base config that "does not exist"."""
    name = f"loop{random.randrange(10**6)}"
    first, second = tmp_path / f"{name}a.toml", tmp_path / f"{name}b.toml"
    first.symlink_to(second.name)
    second.symlink_to(first.name)
    config = first
    if where == "base":
        config = tmp_path / "child.toml"
        config.write_text(f'extends = "{first.name}"\ntitle = "t"\n{ROW}')
    assert main(["recipe", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"oellm recipe: error: {'recipe config ' if where == 'config' else ''}{config}")
    assert "runs into a loop of symbolic links" in err and err.count("\n") == 1


def test_an_extends_cycle_names_the_chain(tmp_path):
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    first.write_text('extends = "b.toml"\n')
    second.write_text('extends = "a.toml"\n')
    with pytest.raises(RecipeError, match="loops") as caught:
        load_recipe(first)
    assert str(first) in str(caught.value) and str(second) in str(caught.value)


def test_a_value_error_names_the_file(tmp_path, capsys):
    """Errors of the merged recipe named only ``recipe <stem>``; with a ``name`` key, not even the file's stem."""
    nodes = -random.randrange(1, 100)
    config = _config(tmp_path, f'name = "other"\ntitle = "t"\n{ROW.replace("nodes = 8", f"nodes = {nodes}")}')
    assert main(["recipe", str(config)]) == 2
    err = capsys.readouterr().err
    assert str(config) in err and f"nodes must be >= 1, got {nodes}" in err


@pytest.mark.parametrize("cluster", [{"image": ""}, {"binds": (":/data",)}, {"binds": ("",)}])
def test_an_empty_image_or_bind_source_is_refused_before_submission(tmp_path, monkeypatch, cluster):
    """``--image "$SIF"`` with ``SIF`` unset gives an empty path, which ``Path("").exists()`` read as the current
    directory: the submission check passed and the job failed in Apptainer after its wait in the queue."""
    from megatron.oellm.recipes.host_paths import check_host_paths

    monkeypatch.chdir(tmp_path)
    recipe = load_recipe(EXAMPLES / "qwen3_30b_a3b_mn5.toml")
    image = tmp_path / f"image{random.randrange(10**6)}.sif"
    image.touch()
    settings = {"image": str(image), **cluster}
    with pytest.raises(RecipeError, match="empty"):
        check_host_paths(dataclasses.replace(recipe.cluster, **settings))


def test_a_config_that_is_not_utf8_is_one_error_line(tmp_path, capsys):
    """A label typed in a Latin-1 editor ('café') ended ``oellm recipe`` in a UnicodeDecodeError traceback."""
    config = tmp_path / "latin1.toml"
    label = f"caf\xe9 {random.randrange(10**6)}"
    config.write_bytes(f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\ntitle = "t"\n{ROW}label = "{label}"\n'
                       .encode("latin-1"))
    assert main(["recipe", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"oellm recipe: error: {config}: not UTF-8 text" in err
    config.write_bytes(config.read_bytes().decode("latin-1").encode("utf-8"))
    assert load_recipe(config).rows[0].label == label


def test_an_unreadable_config_is_one_error_line(tmp_path, monkeypatch, capsys):
    """A config without read permission (a group's project directory) ended in a PermissionError traceback."""
    config = _config(tmp_path, f'title = "t"\n{ROW}')
    read_text = Path.read_text

    def refused(self, *args, **kwargs):
        if self == config:
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refused)
    assert main(["recipe", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == f"oellm recipe: error: cannot read recipe config {config} (Permission denied)\n"


@pytest.mark.parametrize("where", ["title", "label"])
def test_the_dry_run_shows_a_multi_line_title_or_label_on_one_line(tmp_path, where):
    """The dry run's heading and row table printed a multi-line title or label as it was written, its second line
    splitting the heading or the row's line of the table; it is joined as in the job header."""
    words = [f"w{random.randrange(10**6)}" for _ in range(3)]
    blank = random.choice(["", " ", "\\r"])  # a TOML escape: a carriage return before the line break
    text = f'"""{words[0]}\n{words[1]}{blank}\n  {words[2]}"""'
    config = _config(tmp_path, f"title = {text}\n{ROW}" if where == "title" else f'title = "t"\n{ROW}label = {text}\n')
    lines = describe_recipe(load_recipe(config), RunInputs()).splitlines()
    joined = " ".join(words)
    if where == "title":
        assert lines[0] == f"== {joined} =="
    else:
        assert any(line.startswith("  1 ") and line.endswith(f"  {joined}") for line in lines), lines
    assert not any(line.startswith(tuple(words)) for line in lines), lines
