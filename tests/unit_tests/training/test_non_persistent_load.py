"""Which checkpoint the entry checks when the run keeps non-persistent checkpoints: megatron-core 0.19.2's
``_load_base_checkpoint`` loads a global non-persistent checkpoint (``--non-persistent-ckpt-type global``, under
``--non-persistent-global-ckpt-dir`` or ``--load``/non_persistent) when it is at least as new as the persistent one,
so the entry's checks read that one, not the older persistent checkpoint."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import iteration_directory_loaded
from tests.unit_tests.training.checkpoint_helpers import save_dist_checkpoint, stored_args
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain

SINGLE = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1,
          "expert_tensor_parallel_size": 1}
"""The layout of a one-GPU run of the tiny card (what the entry's argv below resolves to)."""


def _checkpoints(tmp_path: Path, persistent: int, non_persistent: int, global_dir: Path | None) -> Path:
    """``--load`` with a persistent checkpoint saved at TP 2 and a global non-persistent one saved at this run's
    layout (in ``global_dir``, else ``--load``/non_persistent), both ``dp_reshardable``."""
    load = save_dist_checkpoint(tmp_path / "run", stored_args(**{**SINGLE, "tensor_model_parallel_size": 2}),
                                iteration=persistent)
    save_dist_checkpoint(global_dir or load / "non_persistent", stored_args(**SINGLE), iteration=non_persistent)
    return load


def _argv(load: Path, global_dir: Path | None) -> list[str]:
    """A one-GPU resume of the tiny card from ``load`` keeping global non-persistent checkpoints (in
    ``global_dir``, else megatron's default ``--load``/non_persistent)."""
    return ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--load", str(load),
            "--ckpt-format", "torch_dist", "--use-distributed-optimizer", "--mock-data", "--seq-length", "64",
            "--non-persistent-ckpt-type", "global",
            *(["--non-persistent-global-ckpt-dir", str(global_dir)] if global_dir else [])]


@pytest.mark.parametrize("own_dir", [False, True])
def test_a_newer_non_persistent_checkpoint_is_the_checked_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              own_dir: bool) -> None:
    """A resume whose newer non-persistent checkpoint has the run's layout goes on (megatron loads that one); an
    older one leaves the persistent checkpoint checked, and its layout change refused."""
    entry = entry_up_to_pretrain(monkeypatch)
    persistent = random.randrange(2, 10**5)
    newer_dir, older_dir = (tmp_path / "newer_np", tmp_path / "older_np") if own_dir else (None, None)
    newer = _checkpoints(tmp_path / "newer", persistent, persistent + random.randrange(0, 100), newer_dir)
    with pytest.raises(Reached):
        entry.main(_argv(newer, newer_dir))
    older = _checkpoints(tmp_path / "older", persistent, random.randrange(1, persistent), older_dir)
    assert entry.main(_argv(older, older_dir)) == 2


def test_the_loaded_directory_follows_megatron(tmp_path: Path) -> None:
    """``iteration_directory_loaded`` names the directory megatron-core's ``_load_base_checkpoint`` reads: the
    non-persistent iteration when at least as new (also over --ckpt-step and a release), the persistent one
    otherwise, none for a local non-persistent checkpoint (its manager is not read here)."""
    persistent = random.randrange(10, 10**5)
    load = _checkpoints(tmp_path, persistent, persistent + random.randrange(0, 100), None)
    newer = int((load / "non_persistent" / "latest_checkpointed_iteration.txt").read_text())
    args = parse_oellm_argv(["--load", str(load), "--non-persistent-ckpt-type", "global"])
    assert iteration_directory_loaded(args) == load / "non_persistent" / f"iter_{newer:07d}"
    args.ckpt_step = newer + 1
    assert iteration_directory_loaded(args) == load / f"iter_{newer + 1:07d}"
    args.non_persistent_ckpt_type, args.ckpt_step = None, None
    assert iteration_directory_loaded(args) == load / f"iter_{persistent:07d}"
    args.non_persistent_ckpt_type = "local"
    assert iteration_directory_loaded(args) is None


def test_a_non_persistent_checkpoint_of_the_same_iteration_is_the_loaded_one(tmp_path: Path) -> None:
    """megatron-core loads the non-persistent checkpoint when its iteration is at least the persistent one's
    (``non_persistent_iteration >= iteration``): at equal iterations that one, not the persistent one."""
    iteration = random.randrange(1, 10**5)
    load = _checkpoints(tmp_path, iteration, iteration, None)
    args = parse_oellm_argv(["--load", str(load), "--non-persistent-ckpt-type", "global"])
    assert iteration_directory_loaded(args) == load / "non_persistent" / f"iter_{iteration:07d}"


def test_a_release_non_persistent_tracker_leaves_the_persistent_checkpoint(tmp_path: Path) -> None:
    """megatron-core refuses a ``release`` non-persistent checkpoint itself (RuntimeError); the entry checks the
    persistent one rather than failing on the tracker."""
    iteration = random.randrange(1, 10**5)
    load = save_dist_checkpoint(tmp_path / "run", stored_args(**SINGLE), iteration=iteration)
    (load / "non_persistent").mkdir()
    (load / "non_persistent" / "latest_checkpointed_iteration.txt").write_text("release\n")
    args = parse_oellm_argv(["--load", str(load), "--non-persistent-ckpt-type", "global"])
    assert iteration_directory_loaded(args) == load / f"iter_{iteration:07d}"
