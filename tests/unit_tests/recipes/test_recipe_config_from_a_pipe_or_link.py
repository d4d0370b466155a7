"""A recipe config read from a pipe (``oellm recipe <(sed ... X.toml)``: ``/dev/fd/N``) is read as a file was refused
as "not a regular file"; one with a relative ``extends`` (no folder to resolve it against) or without a ``name`` (the
pipe's ``63`` would name its runs) is refused in one line. A relative ``extends`` is resolved against the folder of
the real config file, so a symbolic link to a config elsewhere finds the base beside that config. Whether a config
has a name and a folder is decided by its path as given: an open stream (``/dev/stdin``, ``/dev/fd/N``,
``/proc/self/fd/N``, ``/proc/PID/fd/N``) has no name, even where it opens a regular file (whose folder then holds its
base); a named pipe in a folder (``mkfifo configs/X.toml``) has both."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import Recipe, RecipeError, load_recipe

ROW = "[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n"


@contextmanager
def piped(text: str) -> Iterator[str]:
    """The ``/dev/fd/N`` path of a pipe holding ``text`` (written whole, the writing end closed), as a shell's
    ``<(...)`` gives it."""
    reader, writer = os.pipe()
    try:
        os.write(writer, text.encode())
        os.close(writer)
        yield f"/dev/fd/{reader}"
    finally:
        os.close(reader)


def _title() -> str:
    return f"title {random.randrange(10**6)}"


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="needs /dev/fd")
def test_a_config_from_a_pipe_is_read_with_its_name_and_an_absolute_base() -> None:
    name, title = f"piped_{random.randrange(10**6)}", _title()
    with piped(f'name = "{name}"\ntitle = "{title}"\nextends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\n{ROW}') as path:
        recipe = load_recipe(path)
    assert (recipe.name, recipe.title, len(recipe.rows)) == (name, title, 1)


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="needs /dev/fd")
def test_a_config_from_a_pipe_with_a_relative_base_or_no_name_is_one_error_line(capsys) -> None:
    with piped(f'name = "piped"\nextends = "_mn5.toml"\ntitle = "{_title()}"\n{ROW}') as path:
        assert main(["recipe", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "extends = '_mn5.toml' is relative, but this config is read from a pipe" in err
    with piped(f'title = "{_title()}"\nextends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\n{ROW}') as path:
        with pytest.raises(RecipeError, match=r"is an open stream .*its name '\d+' names no recipe.*set name ="):
            load_recipe(path)


def test_a_relative_base_is_beside_the_real_config_not_the_link(tmp_path: Path) -> None:
    """The base was looked up beside the link: a link to a config elsewhere found no base (or another one there)."""
    real, elsewhere = tmp_path / "configs", tmp_path / "elsewhere"
    real.mkdir()
    elsewhere.mkdir()
    base_title, decoy_title = _title(), _title()
    for folder, title in ((real, base_title), (elsewhere, decoy_title)):
        (folder / "_base.toml").write_text(f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\ntitle = "{title}"\n')
    (real / "child.toml").write_text(f'extends = "_base.toml"\n{ROW}')
    link = elsewhere / "child.toml"
    link.symlink_to(real / "child.toml")
    assert load_recipe(link).title == base_title


def _configs_with_a_base(tmp_path: Path) -> tuple[Path, str]:
    """A folder holding ``_base.toml`` (a shipped recipe's settings under a fresh title), and that title."""
    folder, title = tmp_path / "configs", _title()
    folder.mkdir()
    (folder / "_base.toml").write_text(f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\ntitle = "{title}"\n')
    return folder, title


@contextmanager
def fed_fifo(fifo: Path, text: str) -> Iterator[None]:
    """``text`` written into the named pipe ``fifo`` from a thread while the block runs; a block that never opens the
    pipe cannot hang the test: the writer is let through by opening the pipe here for reading once the block ends."""
    def write() -> None:
        with open(fifo, "w", encoding="utf-8") as writer:  # blocks until a reader opens the pipe
            writer.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield
    finally:
        if writer.is_alive():
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            writer.join()
            os.close(reader)
        writer.join()


def loaded_in_time(config: Path) -> Recipe:
    """``load_recipe(config)`` run in a thread given at most a minute: a loader that opened a named pipe a second time
    (its writer gone) would block for ever, so the test fails instead of hanging the suite."""
    loaded: list[Recipe | BaseException] = []

    def load() -> None:
        try:
            loaded.append(load_recipe(config))
        except BaseException as error:  # reraised below, in the test's own thread
            loaded.append(error)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    loader.join(timeout=60)
    assert loaded, f"load_recipe({config}) still waits on its pipe after a minute"
    if isinstance(loaded[0], BaseException):
        raise loaded[0]
    return loaded[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_in_a_folder_keeps_its_name_and_its_folders_base(tmp_path: Path) -> None:
    """A named pipe beside its base (``mkfifo configs/X.toml``) was refused as read from a pipe "which has no folder
    to resolve it against" although it has a folder and a name; both are now its own, as a file's are."""
    folder, base_title = _configs_with_a_base(tmp_path)
    fifo = folder / f"piped_{random.randrange(10**6)}.toml"
    os.mkfifo(fifo)
    with fed_fifo(fifo, f'extends = "_base.toml"\n{ROW}'):
        recipe = loaded_in_time(fifo)
    assert (recipe.name, recipe.title, len(recipe.rows)) == (fifo.stem, base_title, 1)


# a leading "//" names the same file (POSIX lets a path keep it); "//dev/stdin" was read as a file named "stdin"
OPEN_STREAM_FORMS = ["/dev/stdin", "/dev/fd/{fd}", "/proc/self/fd/{fd}", "/proc/{pid}/fd/{fd}", "//dev/stdin",
                     "//dev/fd/{fd}", "//proc/self/fd/{fd}"]


@contextmanager
def opened_as_stream(config: Path, form: str) -> Iterator[str]:
    """``config`` opened for reading and named by the open-stream path ``form`` (``/dev/stdin`` is this process's
    standard input, which the file replaces while the block runs, as ``oellm recipe /dev/stdin < X.toml`` does)."""
    descriptor = os.open(config, os.O_RDONLY)
    saved_stdin = os.dup(0) if form.endswith("/dev/stdin") else None
    try:
        if saved_stdin is not None:
            os.dup2(descriptor, 0)
        yield form.format(fd=descriptor, pid=os.getpid())
    finally:
        if saved_stdin is not None:
            os.dup2(saved_stdin, 0)
            os.close(saved_stdin)
        os.close(descriptor)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("form", OPEN_STREAM_FORMS)
def test_a_regular_file_read_as_an_open_stream_needs_a_name_and_finds_its_base_beside_the_file(
        tmp_path: Path, capsys, form: str) -> None:
    """``oellm recipe /dev/stdin < X.toml`` named its runs ``stdin`` (``oellm-stdin-r1``) and ``/dev/fd/0`` named the
    recipe ``0``: only a pipe was asked for a name. Any open stream is, in one line; its relative ``extends`` is
    resolved beside the file it opens."""
    folder, base_title = _configs_with_a_base(tmp_path)
    unnamed = folder / "unnamed.toml"
    unnamed.write_text(f'extends = "_base.toml"\n{ROW}')
    with opened_as_stream(unnamed, form) as path:
        assert main(["recipe", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"recipe config {path} is an open stream" in err and "set name =" in err
    name = f"streamed_{random.randrange(10**6)}"
    named = folder / "named.toml"
    named.write_text(f'name = "{name}"\nextends = "_base.toml"\n{ROW}')
    with opened_as_stream(named, form) as path:
        recipe = load_recipe(path)
    assert (recipe.name, recipe.title, len(recipe.rows)) == (name, base_title, 1)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_base_config_that_is_a_named_pipe_is_read(tmp_path: Path) -> None:
    """A pipe is read as a config whether it is the one given or the base it extends: a base that was a named pipe
    was refused as "not a regular file (a device, pipe or socket)"."""
    folder, title = tmp_path / "configs", _title()
    folder.mkdir()
    base = folder / f"_piped_base_{random.randrange(10**6)}.toml"
    os.mkfifo(base)
    (folder / "child.toml").write_text(f'extends = "{base.name}"\n{ROW}')
    with fed_fifo(base, f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\ntitle = "{title}"\n'):
        recipe = loaded_in_time(folder / "child.toml")
    assert (recipe.name, recipe.title) == ("child", title)
