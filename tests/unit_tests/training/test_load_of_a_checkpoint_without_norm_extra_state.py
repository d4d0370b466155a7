"""A ``torch_dist`` checkpoint the torch-native backend saved before its RMSNorm carried Transformer Engine's
``_extra_state``: the models of both backends ask for that state, and megatron-core 0.19.2 stops with "Missing key in
checkpoint state_dict" on every rank under ``--dist-ckpt-strictness assume_ok_unexpected`` (megatron's default) or a
``raise_*`` value (``backends/test_norm_extra_state_across_backends.py`` asks its loader). The entry refuses it before
Megatron initialises, naming ``log_unexpected``, and passes checkpoints that carry the state or another backend saved.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest
from megatron.core import dist_checkpointing

from megatron.oellm.cards import get_card
from megatron.oellm.training import load_checks
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.cpu_megatron import cpu_checkpoint_saving, cpu_model_building, cpu_torch_model, gloo_world
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain

CARD = "qwen3-30b-a3b-tiny"
FAILING = ("assume_ok_unexpected", "raise_unexpected", "raise_all")
"""The ``--dist-ckpt-strictness`` values under which megatron-core fails on keys the checkpoint lacks (the
``return_*`` ones :func:`load_checks.check_load_strictness` refuses for every checkpoint)."""
SAVED_BY = {"torch": ("torch", "local"), "auto-torch": ("auto", "local"), "te": ("te", "transformer_engine"),
            "auto-te": ("auto", "transformer_engine")}
"""How a run of each backend stores it: ``--oellm-backend`` as given and the ``--transformer-impl`` the entry set."""


def save_checkpoint(folder: Path, saved_by: str, with_norm_extra_state: bool) -> Path:
    """The tiny card's torch-native model saved by megatron-core's writer into ``folder``'s iteration directory, with a
    tracker and run arguments as ``saved_by`` (:data:`SAVED_BY`) stores them; without its norms' extra state unless
    ``with_norm_extra_state`` (what this backend wrote before it had one). Returns ``folder``."""
    iteration = random.randrange(1, 10**6)
    backend, impl = SAVED_BY[saved_by]
    stored = argparse.Namespace(oellm_model=CARD, oellm_backend=backend, transformer_impl=impl,
                                num_layers=get_card(CARD).num_layers)
    with gloo_world(), cpu_model_building(), cpu_checkpoint_saving():
        state = cpu_torch_model(get_card(CARD)).sharded_state_dict()
        if not with_norm_extra_state:
            state = {name: entry for name, entry in state.items()
                     if not getattr(entry, "key", "").endswith(load_checks.NORM_EXTRA_STATE_SUFFIX)}
        (folder / f"iter_{iteration:07d}").mkdir(parents=True)
        dist_checkpointing.save({**state, "args": stored, "iteration": iteration},
                                str(folder / f"iter_{iteration:07d}"))
    (folder / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    return folder


@pytest.fixture(scope="module")
def earlier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of the torch-native backend without the norms' extra state."""
    return save_checkpoint(tmp_path_factory.mktemp("earlier"), "torch", with_norm_extra_state=False)


def run_args(load: Path, backend: str, *flags: str) -> argparse.Namespace:
    """A run's arguments as the entry parses them, loading ``load`` with ``--oellm-backend backend``."""
    argv = ["--oellm-model", CARD, "--oellm-backend", backend, "--load", str(load), "--ckpt-format", "torch_dist",
            *flags]
    return parse_oellm_argv(merge_card_flags(argv).argv)


def check(run: argparse.Namespace) -> None:
    """The check, with the checkpoint read as the entry reads it."""
    load_checks.check_norm_extra_state(run, read_loaded_checkpoint(run))


@pytest.mark.parametrize("backend", ["te", "torch"])
@pytest.mark.parametrize("strictness", FAILING)
def test_a_strictness_that_fails_on_missing_keys_is_refused(earlier: Path, backend: str, strictness: str) -> None:
    run = run_args(earlier, backend, "--dist-ckpt-strictness", strictness)
    with pytest.raises(ValueError, match=rf"--load {earlier} was saved by the torch-native backend before its RMSNorm "
                                         r"carried Transformer Engine's _extra_state.*decoder\.final_layernorm\."
                                         rf"_extra_state.*--dist-ckpt-strictness {strictness} .*pass "
                                         "--dist-ckpt-strictness log_unexpected"):
        check(run)


@pytest.mark.parametrize("backend", ["te", "torch"])
def test_a_strictness_that_drops_missing_keys_passes(earlier: Path, backend: str) -> None:
    for strictness in load_checks.CONVERTED_LOAD_STRICTNESS:
        check(run_args(earlier, backend, "--dist-ckpt-strictness", strictness))


def test_an_auto_run_that_resolved_to_torch_is_read_as_torch_native(tmp_path: Path) -> None:
    load = save_checkpoint(tmp_path, "auto-torch", with_norm_extra_state=False)
    with pytest.raises(ValueError, match="saved by the torch-native backend"):
        check(run_args(load, "te"))


@pytest.mark.parametrize("saved_by", ["te", "auto-te"])
def test_a_checkpoint_of_the_te_backend_is_left_to_megatron(tmp_path: Path, saved_by: str) -> None:
    """Its norms carried the state; nothing of megatron-oellm's doing is missing (the models here are torch-native,
    so the keys are dropped to show the stored backend decides)."""
    check(run_args(save_checkpoint(tmp_path, saved_by, with_norm_extra_state=False), "te"))


def test_a_checkpoint_with_the_norm_extra_state_passes(tmp_path: Path) -> None:
    check(run_args(save_checkpoint(tmp_path, "torch", with_norm_extra_state=True), "te"))


def test_no_checkpoint_passes(tmp_path: Path) -> None:
    check(run_args(tmp_path / "empty", "torch"))


def test_the_entry_refuses_before_it_starts_anything(earlier: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """One error line and exit status 2 before ``pretrain``; with ``log_unexpected`` it goes on."""
    main = entry_up_to_pretrain(monkeypatch)
    argv = ["--oellm-model", CARD, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--load", str(earlier), "--ckpt-format", "torch_dist",
            "--mock-data", "--seq-length", "64"]
    assert main.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{main.PROG}: error: --load {earlier} was saved by the torch-native backend")
    with pytest.raises(Reached):
        main.main([*argv, "--dist-ckpt-strictness", "log_unexpected"])

