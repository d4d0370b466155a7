"""``--load`` of an ``oellm convert hf-to-mcore`` checkpoint with flags that make megatron compare run arguments the
converted checkpoint does not store: refused before Megatron starts, naming ``--finetune``."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from megatron.oellm.training import load_checks
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
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
    argv = ["--oellm-model", CARD, "--load", str(load), "--ckpt-format", "torch_dist", *flags]
    return parse_oellm_argv(merge_card_flags(argv).argv)


def check_converted_load(run) -> None:
    """The check with ``--load``'s checkpoint read as the entry reads it (once, for every check)."""
    load_checks.check_converted_load(run, read_stored_checkpoint(Path(run.load), run.ckpt_step))


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


class _RecordedArgs(argparse.Namespace):
    """Stored run arguments that hold each field megatron asks for, with the run's value (so that every comparison
    passes), and record which it asked for."""

    def __init__(self, run: argparse.Namespace) -> None:
        super().__init__()
        object.__setattr__(self, "_run", run)
        object.__setattr__(self, "asked", set())

    def __getattr__(self, name: str) -> object:
        self.asked.add(name)
        return getattr(self._run, name)


def _fields_megatron_compares(run: argparse.Namespace) -> set[str]:
    """The stored run arguments megatron-core's own ``check_checkpoint_args`` reads for ``run``, whose
    ``use_dist_ckpt`` megatron's ``update_use_dist_ckpt`` sets as its ``validate_args`` does."""
    from megatron.training import checkpointing, global_vars
    from megatron.training.utils import update_use_dist_ckpt

    update_use_dist_ckpt(run)
    stored = _RecordedArgs(run)
    global_vars.set_args(run)
    checkpointing.set_checkpoint_version(3.0)
    try:
        checkpointing.check_checkpoint_args(stored)
    finally:
        global_vars.unset_global_variables()
    return stored.asked


@pytest.mark.parametrize("auto_detect", [[], ["--auto-detect-ckpt-format"]])
@pytest.mark.parametrize("ckpt_format", ["torch", "torch_dist", "torch_dcp", "fsdp_dtensor"])
def test_the_fields_compared_for_a_vocab_file_are_megatrons_for_each_format(converted: Path, ckpt_format: str,
                                                                           auto_detect: list[str]) -> None:
    """What ``resume_compared_args`` lists for ``--vocab-file`` is what megatron-core's ``check_checkpoint_args`` reads
    because of that flag, under each ``--ckpt-format`` (``padded_vocab_size`` outside distributed checkpointing
    only): the fields it reads with the flag less those it reads without it."""
    def run(*flags: str) -> argparse.Namespace:
        return parse_oellm_argv(merge_card_flags(["--oellm-model", CARD, "--load", str(converted), "--ckpt-format",
                                                  ckpt_format, *auto_detect, *flags]).argv)

    with_vocab_file = run("--vocab-file", "vocab.json")
    because_of_the_flag = _fields_megatron_compares(with_vocab_file) - _fields_megatron_compares(run())
    assert set(load_checks.resume_compared_args(with_vocab_file)["--vocab-file"]) == because_of_the_flag
    assert ("padded_vocab_size" in because_of_the_flag) == (ckpt_format == "torch")


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
    load_checks.check_converted_load(run, checkpoint)


def test_the_entry_refuses_before_it_starts_anything(converted: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """One error line and exit status 2 before the throughput hook and ``pretrain`` (for the resume, then for
    megatron's default strictness); with --finetune and ``log_unexpected`` it goes on."""
    main = entry_up_to_pretrain(monkeypatch)
    vocab = tmp_path / "vocab.json"  # the entry refuses a --vocab-file that is not there
    vocab.write_text(json.dumps({f"t{number}": number for number in range(random.randint(2, 9))}))
    argv = ["--oellm-model", CARD, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--load", str(converted), "--ckpt-format",
            "torch_dist", "--vocab-file", str(vocab), "--mock-data",
            "--seq-length", "64", "--dist-ckpt-strictness", "log_unexpected"]
    assert main.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{main.PROG}: error: --load {converted} is an `oellm convert hf-to-mcore` checkpoint")
    assert main.main([*argv[:-2], "--finetune"]) == 2  # megatron's default strictness
    [line] = capsys.readouterr().err.splitlines()
    assert "--dist-ckpt-strictness assume_ok_unexpected fails on those keys" in line
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
    argv = ["--oellm-model", CARD, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--load", str(converted), "--ckpt-format",
            "torch_dist", "--use-checkpoint-args", "--use-distributed-optimizer", "--vocab-file", "vocab.json",
            "--mock-data", "--seq-length", "64"]
    assert main.main(argv) == 2
    assert reads == [converted / "release"]


def test_a_strictness_megatron_cannot_load_a_converted_checkpoint_with_is_refused(converted: Path) -> None:
    """The converted checkpoint holds no ``_extra_state`` objects: megatron-core fails on them under the default
    strictness and the ``raise_*`` values (``test_convert_megatron_load.py`` asks its loader), after the model is on
    the GPU; the entry refuses first, naming ``log_unexpected``, and passes the values that load it."""
    for strictness in ("assume_ok_unexpected", "raise_unexpected", "raise_all"):
        run = _run_args(converted, "--finetune", "--dist-ckpt-strictness", strictness)
        with pytest.raises(ValueError, match=rf"--load {converted} is an `oellm convert hf-to-mcore` checkpoint.*"
                                             rf"--dist-ckpt-strictness {strictness} fails.*pass "
                                             "--dist-ckpt-strictness log_unexpected"):
            load_checks.check_load_strictness(run, read_loaded_checkpoint(run))
    for strictness in load_checks.CONVERTED_LOAD_STRICTNESS:
        run = _run_args(converted, "--finetune", "--dist-ckpt-strictness", strictness)
        load_checks.check_load_strictness(run, read_loaded_checkpoint(run))


def test_a_returning_strictness_is_refused_for_any_distributed_checkpoint(converted: Path, tmp_path: Path) -> None:
    """Under ``return_*`` megatron-core's loader returns a tuple, which megatron's ``load_checkpoint`` takes for the
    state: every ``torch_dist`` load fails, a training run's own as well; the default loads a run's own."""
    saved = save_dist_checkpoint(tmp_path / "saved", stored_args(), iteration=random.randrange(1, 10**6))
    for load in (converted, saved):
        for strictness in load_checks.RETURNING_STRICTNESS:
            run = _run_args(load, "--dist-ckpt-strictness", strictness)
            with pytest.raises(ValueError, match=rf"--dist-ckpt-strictness {strictness}: .*--load {load} would not "
                                                 "load; use log_unexpected or log_all"):
                load_checks.check_load_strictness(run, read_loaded_checkpoint(run))
    load_checks.check_load_strictness(_run_args(saved), read_loaded_checkpoint(_run_args(saved)))
    load_checks.check_load_strictness(_run_args(tmp_path / "empty", "--dist-ckpt-strictness", "return_all"), None)


@pytest.mark.parametrize("flags", [["--moe-mlp-glu-interleave-size", "BLOCK"],
                                   ["--moe-shared-expert-glu-interleave-size", "BLOCK",
                                    "--use-grouped-gemm-for-shared-expert"]])
def test_block_interleaved_swiglu_weights_are_refused_for_a_converted_checkpoint(converted: Path, tmp_path: Path,
                                                                                flags: list[str]) -> None:
    """The converter writes each SwiGLU fc1 as [gate; up]; a run that reads them block-interleaved would mix gate and
    up rows without an error. A training run's own checkpoint was saved in the run's layout: left to megatron. The
    tiny Qwen3.5 card has a shared expert (the Qwen3 one, ``CARD``, has none: its shared flag is not refused)."""
    block = str(random.choice([8, 16, 32]))
    flags = [block if flag == "BLOCK" else flag for flag in flags]
    name = "qwen3.5-35b-a3b-tiny"
    card = get_card(name)
    write_hf(card, random_hf_tensors(card, seed=random.randrange(10**6)), tmp_path / "hf")
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    run = parse_oellm_argv(merge_card_flags(["--oellm-model", name, "--load", str(tmp_path / "mcore"), "--finetune",
                                             *flags]).argv)
    with pytest.raises(ValueError, match=rf"is an `oellm convert hf-to-mcore` checkpoint, whose SwiGLU weights are "
                                         rf"stored as \[gate; up\], while {flags[0]} {block} .*drop {flags[0]}"):
        load_checks.check_converted_glu_layout(run, read_loaded_checkpoint(run), card)
    saved = save_dist_checkpoint(tmp_path / "saved", stored_args(), iteration=random.randrange(1, 10**6))
    own = parse_oellm_argv(merge_card_flags(["--oellm-model", name, "--load", str(saved), *flags]).argv)
    load_checks.check_converted_glu_layout(own, read_loaded_checkpoint(own), card)
    shared_on_qwen3 = _run_args(converted, "--finetune", *flags)
    if flags[0] == "--moe-shared-expert-glu-interleave-size":
        load_checks.check_converted_glu_layout(shared_on_qwen3, read_loaded_checkpoint(shared_on_qwen3), get_card(CARD))
