"""The entry's load-directory check names an unfinished save by the flag and folder the user gave (``--load RUN`` or
``--pretrained-checkpoint RUN``, not the iteration directory megatron reads in it), whether ``--ckpt-step`` or the
run's tracker leads to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import TRACKER_FILE, check_load_directory
from tests.unit_tests.training.checkpoint_helpers import run_with_unfinished_save

CARD = "qwen3-30b-a3b-tiny"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    """(run folder, finished iteration, a later iteration stopped before its metadata)."""
    return run_with_unfinished_save(CARD, tmp_path_factory.mktemp("unfinished"), ("metadata.json", ".metadata"))


def _refusal(flag: str, folder: Path, *flags: str) -> str:
    """:func:`check_load_directory`'s refusal of a run loading ``folder`` as ``flag`` with ``flags``."""
    args = parse_oellm_argv(["--oellm-model", CARD, "--ckpt-format", "torch_dist", flag, str(folder), *flags])
    with pytest.raises(ValueError) as raised:
        check_load_directory(args)
    return str(raised.value)


@pytest.mark.parametrize("flag", ["--load", "--pretrained-checkpoint"])
def test_a_ckpt_step_to_an_unfinished_save_is_named_by_its_flag(run: tuple[Path, int, int], flag: str) -> None:
    folder, _, unfinished = run
    message = _refusal(flag, folder, "--ckpt-step", str(unfinished))
    assert message.startswith(f"{flag} {folder}: {folder / f'iter_{unfinished:07d}'} is an unfinished"), message


@pytest.mark.parametrize("flag", ["--load", "--pretrained-checkpoint"])
def test_a_tracker_naming_an_unfinished_save_is_named_by_its_flag(run: tuple[Path, int, int], flag: str) -> None:
    folder, finished, unfinished = run
    tracker = folder / TRACKER_FILE
    tracker.write_text(f"{unfinished}\n")
    try:
        message = _refusal(flag, folder)
    finally:
        tracker.write_text(f"{finished}\n")
    assert message.startswith(f"{flag} {folder}: {folder / f'iter_{unfinished:07d}'} is an unfinished"), message
