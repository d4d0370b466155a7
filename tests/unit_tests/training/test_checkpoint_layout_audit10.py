"""Audit 10 of :mod:`megatron.oellm.training.checkpoint_layout`: the layout refusals' edges that the first tests left
open: which changes count (no virtual pipeline is one stage, a model without experts has no expert layout, a changed
number of stages or layers is no re-split), the ways out each refusal names (a stored layout, several changes at
once, the conversion of a ``--pretrained-checkpoint``), hybrid patterns with a multi-token-prediction suffix, and the
format refusal's wording for the DCP formats."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.training import checkpoint_layout
from megatron.oellm.training.checkpoint_layout import check_checkpoint_format, check_rank_file_layout
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint, read_stored_checkpoint
from tests.unit_tests.training.checkpoint_helpers import (
    run_args,
    save_dist_checkpoint,
    save_rank_files,
    stored_args,
)

HYBRID = "qwen3.5-35b-a3b-tiny"


def check_optimizer_resharding(run) -> None:
    """The optimizer check on the checkpoint ``run`` loads from ``--load``, read as the entry reads it."""
    checkpoint_layout.check_optimizer_resharding(run, read_stored_checkpoint(Path(run.load)))


def test_no_virtual_pipeline_and_one_virtual_stage_are_the_same_layout(tmp_path: Path) -> None:
    """A checkpoint saved without a virtual pipeline (None) resumed by a run with one virtual stage per rank places
    the same parameters on each rank: neither the optimizer nor the rank-file check refuses it."""
    dp = random.randrange(1, 9)
    load = save_dist_checkpoint(tmp_path / "dist", stored_args(virtual_pipeline_model_parallel_size=None))
    check_optimizer_resharding(run_args(load, virtual_pipeline_model_parallel_size=1, data_parallel_size=dp))
    files = save_rank_files(tmp_path / "files", stored_args(virtual_pipeline_model_parallel_size=None),
                            random.randrange(1, 10**6))
    check_rank_file_layout(run_args(files, virtual_pipeline_model_parallel_size=1, data_parallel_size=dp),
                           read_stored_checkpoint(files))


def test_expert_sizes_of_a_model_without_experts_are_not_a_layout_change(tmp_path: Path) -> None:
    """A ``--ckpt-format torch`` checkpoint of a model without experts (megatron's own GPT, say) holds no expert
    parameters: another ``--expert-tensor-parallel-size`` or ``--expert-model-parallel-size`` changes no rank's
    parameters and is not refused; a tensor size change still is, named once."""
    stored = stored_args(num_experts=None, expert_model_parallel_size=1, expert_tensor_parallel_size=2)
    del stored.oellm_model
    load = save_rank_files(tmp_path, stored, random.randrange(1, 10**6))
    checkpoint = read_stored_checkpoint(load)
    check_rank_file_layout(run_args(load, expert_tensor_parallel_size=1, expert_model_parallel_size=random.choice([2, 4])),
                           checkpoint)
    with pytest.raises(ValueError) as refused:
        check_rank_file_layout(run_args(load, tensor_model_parallel_size=4, expert_tensor_parallel_size=4), checkpoint)
    message = str(refused.value)
    assert "tensor_model_parallel_size (--tensor-model-parallel-size): checkpoint 2, run 4" in message
    assert "expert_tensor_parallel_size" not in message


def test_a_stored_pipeline_layout_is_named_as_the_way_back(tmp_path: Path) -> None:
    """A checkpoint saved with ``--pipeline-model-parallel-layout`` resumed with another split of the same stages:
    the refusal gives the checkpoint's own layout back (not the even split's advice to drop the flag)."""
    from megatron.oellm.models.parallel import layout_from_counts

    layers = random.randrange(3, 12)
    saved_first, run_first = random.sample(range(layers + 1), 2)
    saved_layout, run_layout = (layout_from_counts([first, layers - first]) for first in (saved_first, run_first))
    load = save_dist_checkpoint(tmp_path, stored_args(num_layers=layers, pipeline_model_parallel_layout=saved_layout))
    with pytest.raises(ValueError) as refused:
        check_optimizer_resharding(run_args(load, num_layers=layers, pipeline_model_parallel_layout=run_layout))
    message = str(refused.value)
    assert f"pass --pipeline-model-parallel-layout {saved_layout!r} (the checkpoint's stages)" in message
    assert "drop --pipeline-model-parallel-layout" not in message


def test_a_resplit_with_a_bucket_change_names_both_ways_out(tmp_path: Path) -> None:
    """Two changes at once (the hybrid pattern's '|' moved and ``--overlap-grad-reduce`` added): the refusal names
    both, and both ways out, the checkpoint's pattern among them."""
    pattern = get_card(HYBRID).hybrid_layer_pattern
    saved_cut, run_cut = random.sample(range(2, len(pattern), 2), 2)
    saved_pattern, run_pattern = (f"{pattern[:cut]}|{pattern[cut:]}" for cut in (saved_cut, run_cut))
    load = save_dist_checkpoint(tmp_path, stored_args(hybrid_layer_pattern=saved_pattern))
    with pytest.raises(ValueError) as refused:
        check_optimizer_resharding(run_args(load, hybrid_layer_pattern=run_pattern, overlap_grad_reduce=True))
    message = str(refused.value)
    assert "pipeline stage split (" in message and "gradient bucket size (" in message
    assert "drop --overlap-grad-reduce" in message
    assert f"pass --hybrid-layer-pattern {saved_pattern!r}" in message


def test_other_stage_or_layer_counts_are_no_resplit(tmp_path: Path) -> None:
    """A changed pipeline size is named as that size alone (its stages differ in number, not split), and a changed
    number of layers at the same sizes is megatron's model change to name, not a re-split refused here."""
    layers = 2 * random.randrange(2, 8)
    load = save_dist_checkpoint(tmp_path / "pp", stored_args(num_layers=layers, pipeline_model_parallel_size=2))
    with pytest.raises(ValueError) as refused:
        check_optimizer_resharding(run_args(load, num_layers=layers, pipeline_model_parallel_size=1))
    assert "pipeline_model_parallel_size (--pipeline-model-parallel-size): checkpoint 2, run 1" in str(refused.value)
    assert "pipeline stage split" not in str(refused.value)
    more = save_dist_checkpoint(tmp_path / "layers", stored_args(num_layers=layers, pipeline_model_parallel_size=2))
    check_optimizer_resharding(run_args(more, num_layers=layers + 2, pipeline_model_parallel_size=2))


def test_a_multi_token_prediction_suffix_is_not_a_decoder_layer(tmp_path: Path) -> None:
    """A hybrid pattern's multi-token-prediction part (after ``/``) places no decoder layer on a stage: the same
    stages with it resume, and a re-split of a pattern without '|' (the even split) is still refused."""
    pattern = get_card(HYBRID).hybrid_layer_pattern
    suffix = "/" + "GE" * random.randrange(2, 5)
    cut = random.choice([c for c in range(2, len(pattern), 2) if c != len(pattern) // 2])
    split = f"{pattern[:cut]}|{pattern[cut:]}{suffix}"
    load = save_dist_checkpoint(tmp_path / "split", stored_args(hybrid_layer_pattern=split))
    check_optimizer_resharding(run_args(load, hybrid_layer_pattern=split, data_parallel_size=random.randrange(1, 9)))
    even = save_dist_checkpoint(tmp_path / "even", stored_args(hybrid_layer_pattern=pattern + suffix))
    with pytest.raises(ValueError, match=r"pipeline stage split .*: checkpoint 'Et\*2\|t\*2L'"):
        check_optimizer_resharding(run_args(even, hybrid_layer_pattern=split))


def test_the_rank_file_conversion_names_the_directory_and_flag_the_user_gave(tmp_path: Path) -> None:
    """The conversion the rank-file refusal spells out loads the directory the user gave (megatron refuses an
    iteration directory as ``--load``) and hands the converted checkpoint back under the same flag:
    ``--pretrained-checkpoint`` for a pretrained one."""
    iteration = random.randrange(1, 10**6)
    given = save_rank_files(tmp_path / "given", stored_args(), iteration)
    for flag, run in (("--load", run_args(given, tensor_model_parallel_size=1, pretrained_checkpoint=None)),
                      ("--pretrained-checkpoint", run_args(tmp_path / "empty", tensor_model_parallel_size=1,
                                                           pretrained_checkpoint=str(given)))):
        with pytest.raises(ValueError) as refused:
            check_rank_file_layout(run, read_loaded_checkpoint(run))
        message = str(refused.value)
        assert message.startswith(f"{flag} {given} (iter_{iteration:07d}) is a --ckpt-format torch checkpoint")
        assert f"--load {given}, --ckpt-convert-format torch_dist" in message
        assert f"then {flag} DIR/torch_dist --ckpt-format torch_dist" in message


@pytest.mark.parametrize("run_format", ["torch_dcp", "fsdp_dtensor"])
def test_a_torch_dist_refusal_names_the_runs_format(tmp_path: Path, run_format: str) -> None:
    """Under a DCP format megatron builds the state dict for that format: the refusal says so, not ``torch``."""
    load = save_dist_checkpoint(tmp_path, stored_args())
    with pytest.raises(ValueError) as refused:
        check_checkpoint_format(run_args(load, ckpt_format=run_format), read_stored_checkpoint(load))
    assert f"megatron still builds the state dict for {run_format})" in str(refused.value)


@pytest.mark.parametrize("run_format", ["torch", "torch_dist"])
def test_a_dcp_checkpoint_is_named_as_one(tmp_path: Path, run_format: str) -> None:
    """A ``torch_dcp`` (or ``fsdp_dtensor``) checkpoint has no ``metadata.json``: the refusal names it so, and the
    formats that saved it."""
    import torch
    import torch.distributed.checkpoint as dcp

    iteration = random.randrange(1, 10**6)
    directory = tmp_path / f"iter_{iteration:07d}"
    dcp.save({"args": argparse.Namespace(tensor_model_parallel_size=1), "iteration": iteration, "model": {"x": torch.randn(random.randrange(2, 9))}},
             storage_writer=dcp.FileSystemWriter(directory), no_dist=True)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    checkpoint = read_stored_checkpoint(tmp_path)
    assert checkpoint is not None and checkpoint.ckpt_format == "torch_dcp"
    with pytest.raises(ValueError) as refused:
        check_checkpoint_format(run_args(tmp_path, ckpt_format=run_format), checkpoint)
    assert (f"--load {tmp_path} (iter_{iteration:07d}) is a DCP checkpoint without metadata.json, which "
            f"--ckpt-format {run_format} cannot load") in str(refused.value)
    assert "pass the --ckpt-format that saved it (torch_dcp, or fsdp_dtensor" in str(refused.value)


def test_a_bucket_way_out_turns_bucketing_back_on(tmp_path: Path) -> None:
    """A checkpoint bucketed under ``--overlap-grad-reduce`` resumed without it: the way out passes
    ``--overlap-grad-reduce`` with the saved size or count (``--ddp-bucket-size`` or ``--ddp-num-buckets`` alone
    leaves one bucket per buffer)."""
    saved_dp = random.randrange(41, 200)
    sized = save_dist_checkpoint(tmp_path / "sized", stored_args(data_parallel_size=saved_dp, overlap_grad_reduce=True))
    with pytest.raises(ValueError) as refused:
        check_optimizer_resharding(run_args(sized, data_parallel_size=saved_dp))
    assert f"checkpoint {saved_dp * 1_000_000}, run one bucket" in str(refused.value)
    assert f"pass --overlap-grad-reduce --ddp-bucket-size {saved_dp * 1_000_000}" in str(refused.value)
    buckets = random.randrange(2, 16)
    counted = save_dist_checkpoint(tmp_path / "counted", stored_args(overlap_grad_reduce=True, ddp_num_buckets=buckets))
    with pytest.raises(ValueError, match=f"pass --overlap-grad-reduce --ddp-num-buckets {buckets}"):
        check_optimizer_resharding(run_args(counted))


def test_a_dcp_checkpoint_is_left_to_its_resharding_state(tmp_path: Path) -> None:
    """A ``torch_dcp`` checkpoint (DTensor state, which reshards) is neither the rank-file check's nor the
    ``dp_reshardable`` check's, even where its stored state names that format and the run changes the tensor
    size."""
    from megatron.oellm.training.stored_checkpoint import StoredCheckpoint

    common = {"args": stored_args(), "iteration": random.randrange(1, 10**6),
              "content_metadata": {"distrib_optim_sharding_type": "dp_reshardable"}}
    checkpoint = StoredCheckpoint(directory=tmp_path / f"iter_{common['iteration']:07d}", ckpt_format="torch_dcp",
                                  common=common, metadata=None, flag="--load", given=tmp_path)
    run = run_args(tmp_path, tensor_model_parallel_size=4, ckpt_format="torch_dcp")
    check_rank_file_layout(run, checkpoint)
    checkpoint_layout.check_optimizer_resharding(run, checkpoint)
