"""The entry's checkpoint, save and tokenizer checks on set-ups clusters have and megatron-core 0.19.2 runs: one folder
reached through two mount points, tokenizer file flags left over for a type that never reads them, megatron's filled
download cache, a legacy (non-zip) ``torch`` rank file, object storage under ``--enable-msc``; and an explicit flag
equal to an entry default that ``--use-checkpoint-args`` would replace."""

from __future__ import annotations

import argparse
import random
import subprocess
from pathlib import Path

import pytest
import torch

from megatron.oellm.training import data_sources, run_schedule
from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import (
    check_exit_on_missing_checkpoint,
    check_load_directory,
    read_loaded_checkpoint,
    same_directory,
)
from tests.unit_tests.training.checkpoint_helpers import checkpoint_with_args, finetune_argv
from tests.unit_tests.training.entry_helpers import entry_up_to_pretrain, refused_line


@pytest.fixture
def bind_mounted(tmp_path: Path):
    """``(folder, the same folder through a bind mount)``; skipped where this process may not mount."""
    source, target = tmp_path / "scratch", tmp_path / "bound"
    source.mkdir()
    target.mkdir()
    if subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True).returncode != 0:
        pytest.skip("this process cannot bind-mount")
    try:
        yield source, target
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_one_folder_through_two_mount_points_is_one_folder(bind_mounted) -> None:
    source, target = bind_mounted
    run = source / f"run{random.randrange(1000)}"
    run.mkdir()
    assert target.joinpath(run.name).resolve() != run.resolve()  # no path rule can tell: only device and inode
    assert same_directory(target / run.name, run)
    check_load_directory(parse_oellm_argv(["--load", str(target / run.name), "--save", str(run)]))


def test_a_first_jobs_folder_through_two_mount_points_is_one_folder(bind_mounted) -> None:
    """Before the first job creates it: the deepest existing folders are compared by device and inode."""
    source, target = bind_mounted
    name = f"run{random.randrange(1000)}"
    assert same_directory(target / name / "checkpoints", source / name / "checkpoints")
    assert not same_directory(target / name, source / f"{name}-other")
    check_load_directory(parse_oellm_argv(["--load", str(target / name), "--save", str(source / name)]))


def test_a_missing_folder_is_compared_by_its_path(tmp_path: Path) -> None:
    assert same_directory(tmp_path / "new" / "run", tmp_path / "new" / ".." / "new" / "run/")
    assert not same_directory(tmp_path / "new" / "run", tmp_path / "new" / "other")


def _tokenizer_args(*flags: str) -> argparse.Namespace:
    return parse_oellm_argv(["--mock-data", *flags])


@pytest.mark.parametrize("tokenizer", [["NullTokenizer", "--vocab-size", "1024"],
                                       ["TikTokenizer", "--tokenizer-model", __file__]])
def test_tokenizer_file_flags_a_type_never_reads_are_no_error(tmp_path: Path, tokenizer: list[str]) -> None:
    """Templates keep ``--vocab-file`` / ``--merge-file`` after a switch of tokenizer: megatron-core hands them only
    to its own types and HuggingFaceTokenizer."""
    left_over = ["--vocab-file", str(tmp_path / "gpt2-vocab.json"), "--merge-file", str(tmp_path / "merges.txt")]
    data_sources.check_tokenizer_files(_tokenizer_args("--tokenizer-type", *tokenizer, *left_over))
    with pytest.raises(ValueError, match="--vocab-file .* is no file"):
        data_sources.check_tokenizer_files(_tokenizer_args("--tokenizer-type", "GPT2BPETokenizer", *left_over))


def test_megatrons_filled_download_cache_serves_gpt2bpe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron.core.tokenizers.text.libraries import megatron_hf_tokenizer

    monkeypatch.setattr(megatron_hf_tokenizer, "MEGATRON_CACHE", str(tmp_path))
    args = _tokenizer_args("--tokenizer-type", "GPT2BPETokenizer")
    with pytest.raises(ValueError, match="needs --vocab-file and --merge-file"):
        data_sources.check_tokenizer_files(args)
    (tmp_path / "GPT2BPETokenizer_vocab").write_text("{}")
    with pytest.raises(ValueError, match="needs --merge-file:"):
        data_sources.check_tokenizer_files(args)
    (tmp_path / "GPT2BPETokenizer_merges").write_text("#version: 0.2\n")
    data_sources.check_tokenizer_files(args)


def test_a_legacy_torch_rank_file_is_read(tmp_path: Path) -> None:
    """``torch.save(..., _use_new_zipfile_serialization=False)``, as older Megatron-LM checkpoints are: megatron loads
    it (without memory-mapping), so it is no damaged checkpoint."""
    iteration = random.randrange(1, 10**5)
    rank_file = tmp_path / f"iter_{iteration:07d}" / "mp_rank_00" / "model_optim_rng.pt"
    rank_file.parent.mkdir(parents=True)
    state = {"args": parse_oellm_argv([]), "iteration": iteration, "checkpoint_version": 3.0,
             "model": {"weight": torch.randn(random.randrange(8, 64), 4)}}
    torch.save(state, rank_file, _use_new_zipfile_serialization=False)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    loaded = read_loaded_checkpoint(parse_oellm_argv(["--load", str(tmp_path), "--ckpt-format", "torch"]))
    assert loaded is not None and loaded.common["iteration"] == iteration
    rank_file.write_bytes(rank_file.read_bytes()[:random.randrange(50, 200)])  # still named when it is cut short
    with pytest.raises(ValueError, match="cannot be read"):
        read_loaded_checkpoint(parse_oellm_argv(["--load", str(tmp_path), "--ckpt-format", "torch"]))


def test_object_storage_paths_under_enable_msc_are_left_to_megatron() -> None:
    bucket = f"msc://profile/run{random.randrange(1000)}"
    args = parse_oellm_argv(["--enable-msc", "--load", bucket, "--save", bucket + "-new"])
    check_load_directory(args)
    run_schedule.check_save_directory(args)
    with pytest.raises(ValueError, match="does not exist"):  # without --enable-msc megatron reads a local path
        check_load_directory(parse_oellm_argv(["--load", bucket, "--save", "/tmp/elsewhere"]))


def test_a_local_load_beside_an_object_storage_pretrained_checkpoint_is_checked(tmp_path: Path) -> None:
    """Fine-tuning from a base model in object storage, resuming from a local --load: the local folder keeps its
    checks (a file there is still refused), the object-storage one is megatron's to read."""
    bucket = f"msc://profile/base{random.randrange(1000)}"
    a_file = tmp_path / "model_optim_rng.pt"
    a_file.write_bytes(b"not a folder")
    with pytest.raises(ValueError, match="is a file"):
        check_load_directory(parse_oellm_argv(["--enable-msc", "--pretrained-checkpoint", bucket, "--load",
                                               str(a_file), "--save", str(tmp_path / "run")]))
    run = tmp_path / "run"
    check_load_directory(parse_oellm_argv(["--enable-msc", "--pretrained-checkpoint", bucket, "--load", str(run),
                                           "--save", str(run)]))


def test_an_explicit_flag_equal_to_an_entry_default_is_still_the_users(tmp_path: Path, monkeypatch, capsys) -> None:
    """``--hidden-dropout 0.0`` written by the user (the entry's training default too) over a checkpoint storing
    another dropout: megatron would train with the checkpoint's."""
    entry = entry_up_to_pretrain(monkeypatch)
    stored = round(random.uniform(0.05, 0.2), 3)
    load = checkpoint_with_args(tmp_path, hidden_dropout=stored, attention_dropout=stored)
    line = refused_line(entry, capsys, finetune_argv(load, "--hidden-dropout", "0.0"))
    assert f"hidden_dropout to {stored!r}" in line and "--hidden-dropout's 0.0" in line


def test_exit_on_missing_checkpoint_leaves_object_storage_to_megatron(tmp_path: Path) -> None:
    bucket = f"msc://profile/run{random.randrange(1000)}"
    for flags in (["--load", bucket], ["--pretrained-checkpoint", bucket, "--load", str(tmp_path / "run")]):
        args = parse_oellm_argv(["--enable-msc", "--exit-on-missing-checkpoint", *flags])
        args.ckpt_convert_format = None
        check_exit_on_missing_checkpoint(args)
    args = parse_oellm_argv(["--exit-on-missing-checkpoint", "--load", str(tmp_path / "run")])
    args.ckpt_convert_format = None
    with pytest.raises(ValueError, match="holds no checkpoint"):
        check_exit_on_missing_checkpoint(args)


def test_a_symbolic_link_loop_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(ValueError, match="loop of symbolic links"):
        same_directory(tmp_path / "a" / "run", tmp_path / "run")
