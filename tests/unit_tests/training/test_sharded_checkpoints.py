"""FSDP checkpoint saves of the torch-native experts: Megatron-FSDP's refused before Megatron starts, since
megatron-core 0.19.2's first save stops the run (measured on the H200, docs/benchmarks.md, session 39); FSDP2's where
the experts do not split evenly over the data-parallel ranks (the checkpoint stores equal expert blocks); and FSDP2
resumes of torch's Adam state, which megatron never restores (``KeyError: 'step'`` at the first step on the H200);
FSDP2 saves on torch 2.13, whose ``to_local()`` hides every parameter from megatron's optimizer map; and FSDP2
``torch_dcp`` saves and resumes of MoE models, which megatron's ``torch_dcp`` load cannot resume (``TypeError`` from its
``ChainedOptimizer`` on the H200, session 40)."""

from __future__ import annotations

import argparse
import re

import pytest
import torch
from megatron.core.dist_checkpointing.optimizer import get_param_id_to_sharded_param_map
from megatron.core.utils import make_sharded_tensor_for_checkpoint
from packaging.version import Version
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from megatron.oellm.cards import get_card
from megatron.oellm.training.sharded_checkpoints import (
    FRESH_LOCAL_VIEW_TORCH,
    check_fsdp2_resume,
    check_fsdp2_saves_on_this_torch,
    check_fsdp2_torch_dcp,
    check_sharded_data_parallel_saves,
)
from megatron.oellm.training.stored_checkpoint import StoredCheckpoint
from tests.unit_tests.cpu_megatron import gloo_world
from tests.unit_tests.training.entry_helpers import (
    Reached,
    entry_up_to_pretrain,
    refused_line,
    tiny_moe_run,
    validated_tiny_moe_run,
)

QWEN3, QWEN35 = "qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"
MEGATRON_FSDP = ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params",
                 "--ckpt-format", "fsdp_dtensor"]
TORCH_FSDP2 = ["--use-torch-fsdp2", "--ckpt-format", "torch_dist", "--no-gradient-accumulation-fusion"]


def saving(directory) -> list[str]:
    """Flags of a run that saves checkpoints to ``directory`` every 5 iterations."""
    return ["--save", str(directory), "--save-interval", "5"]


@pytest.fixture(autouse=True)
def fsdp_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """megatron's validation refuses either FSDP under ``CUDA_DEVICE_MAX_CONNECTIONS=1``."""
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8")


@pytest.mark.parametrize("card", [QWEN3, QWEN35])
def test_saves_under_megatron_fsdp_are_refused(card, tmp_path):
    args = validated_tiny_moe_run([*MEGATRON_FSDP, *saving(tmp_path), "--oellm-backend", "torch"], card=card)
    with pytest.raises(ValueError, match=f"^--use-megatron-fsdp with --save: .* {card}'s torch-native MoE experts "
                                         "stops the run with an AssertionError"):
        check_sharded_data_parallel_saves(args, get_card(card))


@pytest.mark.parametrize("card", [QWEN3, QWEN35])
def test_fsdp2_saves_of_evenly_split_experts_pass(card, tmp_path):
    """One data-parallel rank (the H200's save and resume) holds every expert."""
    args = validated_tiny_moe_run([*TORCH_FSDP2, *saving(tmp_path), "--oellm-backend", "torch"], card=card)
    check_sharded_data_parallel_saves(args, get_card(card))


@pytest.mark.parametrize(("dp", "cp", "refused"), [(3, 1, True), (2, 3, True), (2, 1, False), (4, 1, False),
                                                   (2, 2, False)])
def test_fsdp2_saves_need_the_fsdp2_ranks_to_divide_the_experts(dp, cp, refused, tmp_path):
    """megatron's FSDP2 shards over data parallel x context parallel: the tiny Qwen3 card's 8 experts split evenly
    over 2 or 4 such ranks, not over 3 or 6."""
    args = validated_tiny_moe_run([*TORCH_FSDP2, *saving(tmp_path), "--oellm-backend", "torch"])
    args.data_parallel_size, args.context_parallel_size = dp, cp
    dcp = validated_tiny_moe_run([*TORCH_FSDP2, *saving(tmp_path), "--oellm-backend", "torch", "--ckpt-format",
                                  "torch_dcp"])
    dcp.data_parallel_size, dcp.context_parallel_size = dp, cp
    check_sharded_data_parallel_saves(dcp, get_card(QWEN3))  # torch_dcp takes no sharded entries (not run here)
    card = get_card(QWEN3)
    assert card.num_experts == 8
    if not refused:
        check_sharded_data_parallel_saves(args, card)
        return
    with pytest.raises(ValueError, match=rf"FSDP2 would split qwen3-30b-a3b-tiny's 8 experts unevenly over its "
                                         rf"{dp * cp} ranks \(data parallel {dp} x context parallel {cp}\)"):
        check_sharded_data_parallel_saves(args, card)


@pytest.mark.parametrize("fsdp", [MEGATRON_FSDP, TORCH_FSDP2], ids=["megatron-fsdp", "torch-fsdp2"])
def test_fsdp_training_without_saves_passes(fsdp):
    """Training under either FSDP ran on the H200; only the save fails."""
    check_sharded_data_parallel_saves(validated_tiny_moe_run([*fsdp, "--oellm-backend", "torch"]), get_card(QWEN3))


def test_saves_with_the_distributed_optimizer_pass(tmp_path):
    """The advised way out saves (the acceptance's resume runs)."""
    args = validated_tiny_moe_run(["--use-distributed-optimizer", *saving(tmp_path), "--oellm-backend", "torch"])
    check_sharded_data_parallel_saves(args, get_card(QWEN3))


def test_transformer_engine_experts_are_left_alone(monkeypatch, tmp_path):
    """TE's per-expert weights are what megatron's FSDP checkpoint code expects; the refusal is the torch backend's."""
    monkeypatch.setattr("megatron.oellm.backends.selection.resolve_backend", lambda name: "te")
    args = validated_tiny_moe_run([*MEGATRON_FSDP, *saving(tmp_path)])
    check_sharded_data_parallel_saves(args, get_card(QWEN3))


def test_the_entry_refuses_it_in_one_line(monkeypatch, capsys, tmp_path):
    entry = entry_up_to_pretrain(monkeypatch)
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8")
    run = [*tiny_moe_run(QWEN3), "--oellm-backend", "torch", *MEGATRON_FSDP]
    line = refused_line(entry, capsys, [*run, *saving(tmp_path)])
    assert line.startswith("megatron.oellm.training.entry: error: --use-megatron-fsdp with --save: ")
    with pytest.raises(Reached):
        entry.main(run)


def stored_torch_dist(tmp_path, flag: str = "--load", name: str = "iter_0000003",
                      stored: argparse.Namespace | None = None) -> StoredCheckpoint:
    """A ``torch_dist`` checkpoint the run loads from directory ``name``, saved with run arguments ``stored``."""
    common = {} if stored is None else {"args": stored}
    return StoredCheckpoint(directory=tmp_path / name, ckpt_format="torch_dist", common=common, metadata=None,
                            flag=flag, given=tmp_path)


@pytest.fixture
def torch_adam(monkeypatch: pytest.MonkeyPatch) -> None:
    """megatron-core trains with torch's own Adam (neither TE nor Apex imports), as on the H200 of the premise."""
    monkeypatch.setattr("megatron.core.optimizer.USING_PYTORCH_OPTIMIZER", True)


def test_an_fsdp2_resume_with_torch_adam_state_is_refused(torch_adam, tmp_path):
    args = validated_tiny_moe_run([*TORCH_FSDP2, "--load", str(tmp_path), "--oellm-backend", "torch"])
    with pytest.raises(ValueError, match=rf"^--use-torch-fsdp2: resuming from --load {tmp_path} fails at the first "
                                         r"step with KeyError: 'step'.*add --no-load-optim"):
        check_fsdp2_resume(args, stored_torch_dist(tmp_path))


@pytest.mark.parametrize("case", ["first job", "no-load-optim", "finetune", "pretrained", "release", "no-save-optim",
                                  "fused adam", "no fsdp2", "torch_dcp format", "sgd"])
def test_fsdp2_resumes_megatron_does_not_break_pass(torch_adam, monkeypatch, tmp_path, case):
    """No checkpoint yet, no optimizer state loaded (by flag, fine-tuning, a converted ``release`` checkpoint, one
    saved without it), an Adam that keeps its step with the parameter groups, or no in-place FSDP2 load: nothing to
    refuse."""
    flags = {"no fsdp2": ["--use-distributed-optimizer"],
             "torch_dcp format": ["--use-torch-fsdp2", "--ckpt-format", "torch_dcp", "--no-gradient-accumulation-fusion"]}
    extra = {"no-load-optim": ["--no-load-optim"], "finetune": ["--finetune"], "sgd": ["--optimizer", "sgd"]}
    args = validated_tiny_moe_run([*flags.get(case, TORCH_FSDP2), *extra.get(case, []), "--load", str(tmp_path)])
    if case == "fused adam":
        monkeypatch.setattr("megatron.core.optimizer.USING_PYTORCH_OPTIMIZER", False)
    checkpoint = {"first job": None, "pretrained": stored_torch_dist(tmp_path, "--pretrained-checkpoint"),
                  "release": stored_torch_dist(tmp_path, name="release"),
                  "no-save-optim": stored_torch_dist(tmp_path, stored=argparse.Namespace(no_save_optim=True)),
                  }.get(case, stored_torch_dist(tmp_path, stored=argparse.Namespace(no_save_optim=None)))
    check_fsdp2_resume(args, checkpoint)


def test_megatrons_fsdp2_checkpoint_entries_are_found_only_before_torch_2_13():
    """The premise of the torch refusal, on megatron's own helper: an FSDP2 parameter's checkpoint entry is found by
    megatron's optimizer map on torch 2.11 (the H200 saved with it) and not on torch 2.13 (this CPU), where
    ``to_local()`` returns a fresh view."""
    with gloo_world():
        mesh = init_device_mesh("cpu", (1,))
        parameter = torch.nn.Parameter(distribute_tensor(torch.randn(4, 3), mesh, [Shard(0)]))
        parameter.is_torch_fsdp2_param = True
        entry = {"weight": make_sharded_tensor_for_checkpoint(parameter, "weight")}
        found = get_param_id_to_sharded_param_map(entry, [parameter])
    assert bool(found) == (Version(torch.__version__).release[:2] < FRESH_LOCAL_VIEW_TORCH)


@pytest.mark.parametrize(("version", "extra", "refused"), [
    ("2.13.0+cpu", [], True), ("2.14.1", [], True), ("2.11.0+cu130", [], False), ("2.13.0", None, False),
    ("2.13.0", ["--no-save-optim"], False), ("2.13.0", ["--ckpt-format", "torch_dcp"], False)])
def test_fsdp2_saves_are_refused_from_torch_2_13(monkeypatch, tmp_path, version, extra, refused):
    """Only ``torch_dist`` saves with optimizer state go through megatron's identity map (``extra`` None: no save)."""
    args = validated_tiny_moe_run([*TORCH_FSDP2, *([] if extra is None else [*saving(tmp_path), *extra])])
    monkeypatch.setattr(torch, "__version__", version)
    if not refused:
        check_fsdp2_saves_on_this_torch(args)
        return
    with pytest.raises(ValueError, match=rf"^--use-torch-fsdp2 with --save: on torch {re.escape(version)} "
                                         r"DTensor.to_local\(\) returns a new view"):
        check_fsdp2_saves_on_this_torch(args)


TORCH_DCP_FSDP2 = ["--use-torch-fsdp2", "--ckpt-format", "torch_dcp", "--no-gradient-accumulation-fusion"]


def stored_torch_dcp(tmp_path) -> StoredCheckpoint:
    """A ``torch_dcp`` checkpoint the run loads from ``--load tmp_path``."""
    return StoredCheckpoint(directory=tmp_path / "iter_0000003", ckpt_format="torch_dcp", common={}, metadata=None,
                            flag="--load", given=tmp_path)


@pytest.mark.parametrize("card", [QWEN3, QWEN35])
@pytest.mark.parametrize("extra", [[], ["--no-load-optim"], ["--finetune"]], ids=["optimizer", "no-load-optim",
                                                                                    "finetune"])
def test_fsdp2_torch_dcp_resumes_of_moe_models_are_refused(card, extra, tmp_path):
    """megatron's ``torch_dcp`` load calls ``state_dict(is_loading=True)`` whatever optimizer state it then reads."""
    args = validated_tiny_moe_run([*TORCH_DCP_FSDP2, "--load", str(tmp_path), *extra], card=card)
    with pytest.raises(ValueError, match=rf"^--use-torch-fsdp2 --ckpt-format torch_dcp: resuming {re.escape(card)} "
                                         rf"from --load {tmp_path} fails: .*ChainedOptimizer.*after the model is built"
                                         r".*use --ckpt-format torch_dist"):
        check_fsdp2_torch_dcp(args, get_card(card), stored_torch_dcp(tmp_path))


def test_fsdp2_torch_dcp_saves_of_moe_models_are_refused(tmp_path):
    """A checkpoint no run can resume from is refused when the run would start writing it (a run that loads nothing:
    with ``--load`` too, the load's refusal comes first)."""
    args = validated_tiny_moe_run([*TORCH_DCP_FSDP2, *saving(tmp_path)])
    with pytest.raises(ValueError, match=rf"^--use-torch-fsdp2 --ckpt-format torch_dcp with --save: no run could "
                                         rf"resume from {QWEN3}'s checkpoints: .*TypeError"):
        check_fsdp2_torch_dcp(args, get_card(QWEN3), None)


@pytest.mark.parametrize("flag", ["--load", "--pretrained-checkpoint"])
def test_an_fsdp2_torch_dcp_load_of_an_empty_directory_is_refused(flag, tmp_path):
    """megatron's torch_dcp load builds the optimizer's state dict before it finds that there is nothing to load."""
    args = validated_tiny_moe_run([*TORCH_DCP_FSDP2, flag, str(tmp_path)])
    with pytest.raises(ValueError, match=rf"^--use-torch-fsdp2 --ckpt-format torch_dcp with {flag} {tmp_path}: the "
                                         r"load fails before megatron finds that there is no checkpoint to load yet"):
        check_fsdp2_torch_dcp(args, get_card(QWEN3), None)


@pytest.mark.parametrize("case", ["no save, no checkpoint", "torch_dist", "distributed optimizer"])
def test_fsdp2_torch_dcp_runs_megatron_can_resume_pass(case, tmp_path):
    """Training without checkpoints, and checkpoints in the formats megatron resumes (FSDP2 ``torch_dist``, the
    distributed optimizer's ``torch_dist``), are left alone."""
    flags = {"no save, no checkpoint": TORCH_DCP_FSDP2, "torch_dist": [*TORCH_FSDP2, *saving(tmp_path)],
             "distributed optimizer": ["--use-distributed-optimizer", *saving(tmp_path)]}[case]
    args = validated_tiny_moe_run(flags)
    check_fsdp2_torch_dcp(args, get_card(QWEN3), stored_torch_dist(tmp_path) if case != "no save, no checkpoint"
                          else None)


def test_the_entry_refuses_an_fsdp2_torch_dcp_save_in_one_line(monkeypatch, capsys, tmp_path):
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*tiny_moe_run(QWEN35), *TORCH_DCP_FSDP2, *saving(tmp_path)])
    assert line.startswith("megatron.oellm.training.entry: error: --use-torch-fsdp2 --ckpt-format torch_dcp with "
                           "--save: ")
