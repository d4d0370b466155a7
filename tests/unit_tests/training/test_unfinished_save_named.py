"""The entry names an unfinished torch_dist save (no ``metadata.json``, which megatron-core writes last) that
``--load`` / ``--pretrained-checkpoint`` with ``--ckpt-step`` leads to, with the finished save the run's tracker names;
it was refused as a torch_dcp checkpoint needing "the --ckpt-format that saved it"."""

from __future__ import annotations

from pathlib import Path

import pytest

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import run_with_unfinished_save

CARD = "qwen3-30b-a3b-tiny"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    """(run folder, finished iteration its tracker names, a later iteration whose save did not finish)."""
    return run_with_unfinished_save(CARD, tmp_path_factory.mktemp("unfinished"), ("metadata.json",))


@pytest.mark.parametrize("flag", ["--load", "--pretrained-checkpoint"])
def test_the_unfinished_save_is_named(run: tuple[Path, int, int], flag: str) -> None:
    folder, finished, unfinished = run
    args = parse_oellm_argv(["--oellm-model", CARD, "--ckpt-format", "torch_dist", flag, str(folder),
                             "--ckpt-step", str(unfinished)])
    with pytest.raises(ValueError) as raised:
        read_loaded_checkpoint(args)
    message = str(raised.value)
    assert message.startswith(f"{flag} {folder}: {folder / f'iter_{unfinished:07d}'} is an unfinished torch_dist "
                              "save"), message
    assert f"names iter_{finished:07d}, the run's last finished save: load it (drop --ckpt-step, or pass " \
           f"--ckpt-step {finished})" in message


def test_the_finished_save_still_loads(run: tuple[Path, int, int]) -> None:
    folder, finished, _ = run
    loaded = read_loaded_checkpoint(parse_oellm_argv(["--oellm-model", CARD, "--load", str(folder)]))
    assert loaded is not None and loaded.directory == folder / f"iter_{finished:07d}"
    assert loaded.ckpt_format == "torch_dist"
