"""``--use-checkpoint-args`` with ``--oellm-model``: megatron's ``load_args_from_checkpoint`` overwrites the card's
architecture arguments with the checkpoint's while the model is built from the card. The entry refuses a
megatron-oellm checkpoint whose stored architecture differs from the card, before megatron reads it."""

from __future__ import annotations

import argparse
import random
import shutil
from pathlib import Path

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from megatron.oellm.training import load_checks
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf
from tests.unit_tests.training.checkpoint_helpers import save_args_checkpoint
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain

CARD = "qwen3-30b-a3b-tiny"
OTHER = "qwen3-30b-a3b"
"""A card of another shape (only stored arguments and the checkpoint's metadata are read, not its tensors)."""
CONVERTED = "qwen3.5-35b-a3b-tiny"


def _card_args(card: str, *flags: str) -> argparse.Namespace:
    """A run's arguments as the entry parses them before megatron reads the checkpoint."""
    return parse_oellm_argv(merge_card_flags(["--oellm-model", card, *flags]).argv)


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``CONVERTED``'s random HF weights converted to a megatron checkpoint directory."""
    card = get_card(CONVERTED)
    tmp = tmp_path_factory.mktemp("converted")
    write_hf(card, random_hf_tensors(card, seed=random.randrange(1000)), tmp / "hf")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    return tmp / "mcore"


def _saved(converted: Path, target: Path, stored: argparse.Namespace, iteration: int) -> Path:
    """A checkpoint directory as a training run saves it: ``iter_XXXXXXX`` with a legacy ``common.pt`` holding the
    run's arguments ``stored`` (what megatron and the entry read from it)."""
    shutil.copytree(converted / "release", target / f"iter_{iteration:07d}")
    torch.save({"args": stored, "iteration": iteration, "checkpoint_version": 3.0},
               target / f"iter_{iteration:07d}" / "common.pt")
    (target / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    return target


def check_checkpoint_architecture(run: argparse.Namespace) -> None:
    """The check with the loaded checkpoint read as the entry reads it (once, for every check)."""
    load_checks.check_checkpoint_architecture(run, read_loaded_checkpoint(run))


def _megatron_loaded_args(run: argparse.Namespace) -> argparse.Namespace:
    """``run`` after megatron-core's own ``load_args_from_checkpoint`` (what ``--use-checkpoint-args`` does)."""
    from megatron.training import checkpointing

    run.use_dist_ckpt = run.ckpt_format != "torch"
    checkpointing.load_args_from_checkpoint(run)
    return run


def test_a_checkpoint_saved_for_another_card_is_refused(converted: Path, tmp_path: Path) -> None:
    """Megatron silently takes the other card's experts (and more) over the card's; the entry refuses first, naming
    the fields with both values and the fix, and lets the matching card through. Without the flag the checkpoint of
    another model is refused too (megatron would fail to load it into the card's model)."""
    iteration = random.randrange(1, 10_000)
    saved = _saved(converted, tmp_path, _card_args(OTHER), iteration)
    flags = ("--load", str(saved), "--use-checkpoint-args")
    mine, other = get_card(CARD), get_card(OTHER)
    assert mine.num_experts != other.num_experts
    assert _megatron_loaded_args(_card_args(CARD, *flags)).num_experts == other.num_experts
    with pytest.raises(ValueError, match=rf"from --load {saved} .*--oellm-model {CARD}'s.*num_experts: checkpoint "
                                         rf"{other.num_experts}, card {mine.num_experts}.*pass --oellm-model {OTHER}"
                                         r".*or drop --use-checkpoint-args"):
        check_checkpoint_architecture(_card_args(CARD, *flags))
    check_checkpoint_architecture(_card_args(OTHER, *flags))
    with pytest.raises(ValueError, match=rf"--load {saved} holds a checkpoint of another model .*num_experts: "
                                         rf"checkpoint {other.num_experts}, run {mine.num_experts}"):
        check_checkpoint_architecture(_card_args(CARD, "--load", str(saved)))


def test_one_changed_architecture_argument_is_named(converted: Path, tmp_path: Path) -> None:
    """A checkpoint of the card's own name whose stored rotary base differs (another version of the card) is
    refused naming that field with both values; ``--pretrained-checkpoint`` is read like ``--load``."""
    stored = _card_args(CARD)
    stored.rotary_base = stored.rotary_base + random.randrange(1, 10_000)
    saved = _saved(converted, tmp_path, stored, random.randrange(1, 10_000))
    run = _card_args(CARD, "--pretrained-checkpoint", str(saved), "--use-checkpoint-args")
    assert _megatron_loaded_args(_card_args(CARD, "--load", str(saved))).rotary_base == stored.rotary_base
    with pytest.raises(ValueError, match=rf"--pretrained-checkpoint {saved} .*\(rotary_base: checkpoint "
                                         rf"{stored.rotary_base}, card {run.rotary_base}\)"):
        check_checkpoint_architecture(run)


def test_a_converted_checkpoint_of_another_card_is_refused(converted: Path) -> None:
    """An ``hf-to-mcore`` checkpoint stores its card's shape and name: another card is refused naming it."""
    run = _card_args(CARD, "--load", str(converted), "--use-checkpoint-args")
    layers = len(get_card(CONVERTED).hybrid_layer_pattern)
    with pytest.raises(ValueError, match=rf"num_layers: checkpoint {layers}, card {get_card(CARD).num_layers}.*"
                                         rf"--oellm-model {CONVERTED}"):
        check_checkpoint_architecture(run)
    check_checkpoint_architecture(_card_args(CONVERTED, "--load", str(converted), "--use-checkpoint-args"))


def test_another_pipeline_split_of_the_hybrid_pattern_is_not_refused(converted: Path) -> None:
    """A hybrid pattern's ``|`` marks pipeline stages, which megatron lets a run choose anew: not a disagreement."""
    pattern = get_card(CONVERTED).hybrid_layer_pattern
    cut = 2 * random.randrange(1, len(pattern) // 2)
    run = _card_args(CONVERTED, "--hybrid-layer-pattern", f"{pattern[:cut]}|{pattern[cut:]}", "--load",
                     str(converted), "--use-checkpoint-args")
    check_checkpoint_architecture(run)


def test_other_checkpoints_are_left_to_megatron(converted: Path, tmp_path: Path) -> None:
    """Arguments another program saved (no ``oellm_model``), no stored arguments, a missing or empty directory:
    not refused."""
    foreign = _card_args(OTHER)
    del foreign.oellm_model
    loads = [_saved(converted, tmp_path / "foreign", foreign, 5), tmp_path / "missing", tmp_path]
    no_args = tmp_path / "no_args"
    shutil.copytree(converted / "release", no_args / "iter_0000007")
    torch.save({"iteration": 7}, no_args / "iter_0000007" / "common.pt")
    (no_args / "latest_checkpointed_iteration.txt").write_text("7\n")
    for load in [*loads, no_args]:
        check_checkpoint_architecture(_card_args(CARD, "--load", str(load), "--use-checkpoint-args"))


def test_the_entry_refuses_before_megatron_reads_the_checkpoint(converted: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """One error line and exit status 2 before Megatron parses (and overwrites) the arguments; without
    --use-checkpoint-args the other card's checkpoint is refused as well, and the checkpoint's own card goes on."""
    entry = entry_up_to_pretrain(monkeypatch)
    saved = _saved(converted, tmp_path, _card_args(OTHER), 3)
    argv = ["--oellm-model", CARD, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--load", str(saved), "--use-checkpoint-args",
            "--ckpt-format", "torch_dist", "--mock-data", "--seq-length", "64"]
    assert entry.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: error: --use-checkpoint-args would take architecture arguments")
    assert entry.main([arg for arg in argv if arg != "--use-checkpoint-args"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: error: --load {saved} holds a checkpoint of another model")
    with pytest.raises(Reached):
        entry.main(["--oellm-model", OTHER, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--load", str(saved), "--ckpt-format",
                    "torch_dist", "--mock-data", "--seq-length", "64"])


@pytest.mark.parametrize("fmt", ["torch", "torch_dcp"])
def test_checkpoints_of_the_other_formats_are_checked(tmp_path: Path, fmt: str) -> None:
    """A ``--ckpt-format torch`` or ``torch_dcp`` checkpoint of another card, whose arguments megatron's
    ``load_args_from_checkpoint`` takes as it does a ``torch_dist`` one's, is refused as well."""
    saved = tmp_path
    save_args_checkpoint(fmt, saved, _card_args(OTHER), random.randrange(1, 10_000))
    flags = ("--load", str(saved), "--use-checkpoint-args", "--ckpt-format", fmt)
    assert _megatron_loaded_args(_card_args(CARD, *flags)).num_experts == get_card(OTHER).num_experts
    with pytest.raises(ValueError, match=rf"from --load {saved} .*num_experts: checkpoint "
                                         rf"{get_card(OTHER).num_experts}, card {get_card(CARD).num_experts}"):
        check_checkpoint_architecture(_card_args(CARD, *flags))
    check_checkpoint_architecture(_card_args(OTHER, *flags))
