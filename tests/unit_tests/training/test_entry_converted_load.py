"""``--load`` of an ``oellm convert hf-to-mcore`` checkpoint with flags that make megatron compare run arguments the
converted checkpoint does not store: refused before Megatron starts, naming ``--finetune``."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.convert.pipeline import hf_to_mcore_checkpoint
from megatron.oellm.training import entry
from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import (
    converted_args,
    read_loaded_checkpoint,
    read_stored_checkpoint,
)
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf
from tests.unit_tests.training.checkpoint_helpers import save_dist_checkpoint, stored_args
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain

CARD = "qwen3-30b-a3b-tiny"


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny card's random HF weights converted to a megatron checkpoint directory (what ``--load`` names)."""
    card = get_card(CARD)
    tmp = tmp_path_factory.mktemp("converted")
    write_hf(card, random_hf_tensors(card, seed=11), tmp / "hf")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    return tmp / "mcore"


def _run_args(load: Path, *flags: str):
    """The run's arguments as the entry parses them (the card's flags filled in by ``--oellm-model``)."""
    from megatron.oellm.training.args import merge_card_flags

    argv = ["--oellm-model", CARD, "--load", str(load), "--ckpt-format", "torch_dist", *flags]
    return parse_oellm_argv(merge_card_flags(argv).argv)


def check_converted_load(run) -> None:
    """The check with ``--load``'s checkpoint read as the entry reads it (once, for every check)."""
    entry.check_converted_load(run, read_stored_checkpoint(Path(run.load), run.ckpt_step))


def converted_checkpoint_args(load: Path):
    """The run arguments of ``--load load``'s checkpoint if ``hf-to-mcore`` wrote it, read as the entry reads them."""
    return converted_args(read_stored_checkpoint(load))


def _megatron_accepts(stored, run) -> bool:
    """Whether megatron-core's own ``check_checkpoint_args`` passes ``stored`` for ``run`` (a missing stored argument
    raises AttributeError, a different one AssertionError)."""
    from megatron.training import checkpointing, global_vars

    run.use_dist_ckpt = run.ckpt_format != "torch"
    global_vars.set_args(run)
    checkpointing.set_checkpoint_version(3.0)
    try:
        checkpointing.check_checkpoint_args(stored)
    except (AttributeError, AssertionError):
        return False
    finally:
        global_vars.unset_global_variables()
    return True


@pytest.mark.parametrize("flags", [["--vocab-file", "vocab.json", "--merge-file", "merges.txt",
                                    "--tokenizer-type", "GPT2BPETokenizer"],
                                   ["--data-parallel-random-init"],
                                   ["--phase-transition-iterations", "10,20"]])
def test_a_resume_megatron_cannot_check_is_refused_naming_finetune(converted: Path, flags: list[str]) -> None:
    """Megatron itself fails on these (after GPU set-up, on every rank); the entry refuses first, naming the flag
    and the fix, and with ``--finetune`` (which megatron honours by skipping the comparison) it does not refuse."""
    run = _run_args(converted, *flags)
    stored = converted_checkpoint_args(converted)
    assert stored is not None
    assert not _megatron_accepts(stored, run)
    with pytest.raises(ValueError, match=rf"--load {converted} is an `oellm convert hf-to-mcore` checkpoint.*"
                                         rf"for {flags[0]}.*add --finetune"):
        check_converted_load(run)
    check_converted_load(_run_args(converted, *flags, "--finetune"))


def test_ckpt_step_does_not_skip_the_check_of_a_release_checkpoint(converted: Path) -> None:
    """megatron keeps a ``release`` tracker's checkpoint under --ckpt-step (it reads ``release``, not iter_<step>),
    and compares the run arguments all the same: megatron's own check fails, so the entry refuses."""
    run = _run_args(converted, "--vocab-file", "vocab.json", "--ckpt-step", str(random.randrange(1, 10**6)))
    assert not _megatron_accepts(converted_checkpoint_args(converted), run)
    with pytest.raises(ValueError, match="for --vocab-file.*add --finetune"):
        check_converted_load(run)


def test_a_plain_load_of_a_converted_checkpoint_is_not_refused(converted: Path) -> None:
    """Without those flags megatron compares only the shape the converted checkpoint stores: no refusal, and
    megatron's own check passes."""
    run = _run_args(converted)
    check_converted_load(run)
    assert _megatron_accepts(converted_checkpoint_args(converted), run)


def test_other_checkpoints_are_left_to_megatron(tmp_path: Path) -> None:
    """An empty or missing ``--load``, and checkpoints a training run saved (an iteration, or a ``release`` without
    a card), are not read as converted ones: megatron's own checks decide."""
    saved = save_dist_checkpoint(tmp_path / "saved", stored_args(), iteration=random.randrange(1, 10**6))
    release = save_dist_checkpoint(tmp_path / "release", stored_args(), iteration=0)
    for load in (saved, release):
        assert read_stored_checkpoint(load) is not None  # read: the rest of the test can fail
    (tmp_path / "empty").mkdir()
    for load in (tmp_path / "empty", tmp_path / "missing", saved, release):
        assert converted_checkpoint_args(load) is None
        check_converted_load(_run_args(load, "--vocab-file", "vocab.json"))


def test_a_converted_checkpoint_given_as_pretrained_is_not_refused(converted: Path, tmp_path: Path) -> None:
    """megatron-core loads ``--pretrained-checkpoint`` in place of an empty ``--load`` with ``--finetune`` set, which
    skips the comparison of run arguments (the entry reads the arguments before megatron sets it)."""
    run = _run_args(tmp_path / "run", "--vocab-file", "vocab.json", "--pretrained-checkpoint", str(converted))
    checkpoint = read_loaded_checkpoint(run)
    assert checkpoint is not None and checkpoint.fine_tunes and not run.finetune
    assert converted_args(checkpoint) is not None
    entry.check_converted_load(run, checkpoint)


def test_the_entry_refuses_before_it_starts_anything(converted: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """One error line and exit status 2 before the throughput hook and ``pretrain``; with --finetune it goes on."""
    main = entry_up_to_pretrain(monkeypatch)
    argv = ["--oellm-model", CARD, "--oellm-backend", "torch", "--load", str(converted), "--ckpt-format",
            "torch_dist", "--vocab-file", "vocab.json", "--mock-data"]
    assert main.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{main.PROG}: error: --load {converted} is an `oellm convert hf-to-mcore` checkpoint")
    with pytest.raises(Reached):
        main.main([*argv, "--finetune"])


def test_the_entry_reads_the_checkpoint_once(converted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three checkpoint checks (architecture, converted load, optimizer layout) share one read of the common
    state; each used to read it again."""
    from megatron.oellm.convert.dist_ckpt import CheckpointReader

    main = entry_up_to_pretrain(monkeypatch)
    reads = []
    common_state = CheckpointReader.common_state
    monkeypatch.setattr(CheckpointReader, "common_state", lambda self: reads.append(self.directory)
                        or common_state(self))
    argv = ["--oellm-model", CARD, "--oellm-backend", "torch", "--load", str(converted), "--ckpt-format",
            "torch_dist", "--use-checkpoint-args", "--use-distributed-optimizer", "--vocab-file", "vocab.json",
            "--mock-data"]
    assert main.main(argv) == 2
    assert reads == [converted / "release"]
