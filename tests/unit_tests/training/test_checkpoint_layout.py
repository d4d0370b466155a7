"""Resuming with another parallel layout: megatron-core 0.19.2's default ``dp_reshardable`` distributed-optimizer
checkpoint follows only data-parallel changes with unchanged gradient buckets; the entry refuses the others before
Megatron initialises, naming the changed sizes and the ways out."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.training import checkpoint_layout
from megatron.oellm.training.checkpoint_layout import check_rank_file_layout, grad_bucket_size
from megatron.oellm.training.stored_checkpoint import read_stored_checkpoint
from tests.unit_tests.training.checkpoint_helpers import (
    LAYOUT,
    run_args,
    save_dist_checkpoint,
    save_rank_files,
    stored_args,
)
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain


def check_optimizer_resharding(run: argparse.Namespace) -> None:
    """The check on the checkpoint ``run`` loads, read as the entry reads it."""
    checkpoint_layout.check_optimizer_resharding(run, read_stored_checkpoint(Path(run.load), run.ckpt_step))


@pytest.mark.parametrize(("name", "flag", "value"), [
    ("tensor_model_parallel_size", "--tensor-model-parallel-size", 4),
    ("pipeline_model_parallel_size", "--pipeline-model-parallel-size", 1),
    ("virtual_pipeline_model_parallel_size", "--num-virtual-stages-per-pipeline-rank", 2),
    ("expert_model_parallel_size", "--expert-model-parallel-size", 8),
    ("expert_tensor_parallel_size", "--expert-tensor-parallel-size", 1),
])
def test_a_model_space_change_is_refused_naming_it_and_the_ways_out(tmp_path: Path, name: str, flag: str,
                                                                    value: int) -> None:
    """Each size that changes what a rank's optimizer buckets hold is named with both values and its flag."""
    load = save_dist_checkpoint(tmp_path, stored_args())
    with pytest.raises(ValueError) as refused:
        check_optimizer_resharding(run_args(load, **{name: value}))
    message = str(refused.value)
    assert f"{name} ({flag}): checkpoint {LAYOUT[name] or 1}, run {value}" in message
    assert "'dp_reshardable'" in message
    assert "--no-load-optim" in message and "--dist-ckpt-optim-fully-reshardable" in message


def test_an_expert_layout_of_equal_shard_sizes_is_refused(tmp_path: Path) -> None:
    """EP 2 x ETP 2 saved, EP 4 x ETP 1 loaded: the flat buckets keep their shapes, so megatron may slice them by
    another parameter layout without a word."""
    load = save_dist_checkpoint(tmp_path, stored_args())
    with pytest.raises(ValueError, match="expert_model_parallel_size .*expert_tensor_parallel_size"):
        check_optimizer_resharding(run_args(load, expert_model_parallel_size=4, expert_tensor_parallel_size=1))


def test_data_and_context_parallel_changes_with_the_same_buckets_load(tmp_path: Path) -> None:
    """dp_reshardable follows the data-parallel (and context-parallel, part of the optimizer's shard group) size."""
    load = save_dist_checkpoint(tmp_path, stored_args(data_parallel_size=random.randrange(1, 41)))
    check_optimizer_resharding(run_args(load, data_parallel_size=random.randrange(1, 41), context_parallel_size=2))
    overlap = save_dist_checkpoint(tmp_path / "overlap",
                                   stored_args(data_parallel_size=random.randrange(1, 21), overlap_grad_reduce=True))
    check_optimizer_resharding(run_args(overlap, data_parallel_size=random.randrange(1, 21), overlap_grad_reduce=True))


def test_a_default_bucket_size_change_is_refused_naming_the_saved_size(tmp_path: Path) -> None:
    """Under --overlap-grad-reduce the default bucket grows with DP x CP above 40: the buckets no longer match."""
    saved_dp = random.randrange(41, 200)
    load = save_dist_checkpoint(tmp_path, stored_args(data_parallel_size=saved_dp, overlap_grad_reduce=True))
    with pytest.raises(ValueError) as refused:
        check_optimizer_resharding(run_args(load, data_parallel_size=saved_dp * 2, overlap_grad_reduce=True))
    assert f"checkpoint {saved_dp * 1_000_000}, run {saved_dp * 2_000_000}" in str(refused.value)
    assert f"--ddp-bucket-size {saved_dp * 1_000_000}" in str(refused.value)
    with pytest.raises(ValueError, match="drop --overlap-grad-reduce"):
        check_optimizer_resharding(run_args(save_dist_checkpoint(tmp_path / "one", stored_args()),
                                            overlap_grad_reduce=True))
    check_optimizer_resharding(run_args(load, data_parallel_size=saved_dp * 2, overlap_grad_reduce=True,
                                        ddp_bucket_size=saved_dp * 1_000_000))


def test_the_bucket_size_is_megatrons(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`grad_bucket_size` agrees with megatron-core's own ``resolve_ddp_bucket_size``."""
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.training.training import resolve_ddp_bucket_size

    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)  # else megatron takes any group as size 1

    class Group:
        """A process group of a given size."""

        def __init__(self, size: int) -> None:
            self._size = size

        def size(self) -> int:
            return self._size

    for _ in range(20):
        dp, cp = random.randrange(1, 300), random.choice([1, 2, 4])
        explicit = random.choice([None, random.randrange(10**6, 10**8)])
        overlap = random.random() < 0.7
        run = stored_args(data_parallel_size=dp, context_parallel_size=cp, overlap_grad_reduce=overlap,
                          ddp_bucket_size=explicit)
        expected = resolve_ddp_bucket_size(DistributedDataParallelConfig(bucket_size=explicit), Group(dp * cp),
                                           overlap, random.randrange(10**6, 10**9))
        assert grad_bucket_size(run) == expected


@pytest.mark.parametrize("sharding", ["fully_reshardable", "fully_sharded_model_space", None])
def test_a_reshardable_or_unrecorded_format_is_left_to_megatron(tmp_path: Path, sharding: str | None) -> None:
    """fully_reshardable state loads into any layout; a checkpoint without a recorded type is megatron's case."""
    load = save_dist_checkpoint(tmp_path, stored_args(), sharding=sharding)
    check_optimizer_resharding(run_args(load, tensor_model_parallel_size=4, expert_model_parallel_size=4))


@pytest.mark.parametrize("changes", [{"no_load_optim": True}, {"finetune": True}, {"use_distributed_optimizer": False}])
def test_runs_that_load_no_distributed_optimizer_state_are_not_refused(tmp_path: Path, changes: dict) -> None:
    """--no-load-optim (the way out), --finetune and a non-distributed optimizer read no such state."""
    load = save_dist_checkpoint(tmp_path, stored_args())
    check_optimizer_resharding(run_args(load, tensor_model_parallel_size=4, **changes))


def test_checkpoints_without_optimizer_state_or_not_ours_are_not_refused(tmp_path: Path) -> None:
    """A release checkpoint, one saved with --no-save-optim, and one without our stored arguments."""
    release = save_dist_checkpoint(tmp_path / "release", stored_args(), iteration=0)
    no_optim = save_dist_checkpoint(tmp_path / "no_optim", stored_args(no_save_optim=True))
    stored = stored_args()
    del stored.oellm_model
    other = save_dist_checkpoint(tmp_path / "other", stored)
    for load in (release, no_optim, other, tmp_path / "missing"):
        check_optimizer_resharding(run_args(load, tensor_model_parallel_size=4))


def test_ckpt_step_selects_the_checked_iteration(tmp_path: Path) -> None:
    """--ckpt-step names the iteration megatron loads; its stored layout is the one compared."""
    save_dist_checkpoint(tmp_path, stored_args(), iteration=5)
    save_dist_checkpoint(tmp_path, stored_args(tensor_model_parallel_size=4), iteration=9)
    check_optimizer_resharding(run_args(tmp_path, tensor_model_parallel_size=4))
    with pytest.raises(ValueError, match="iter_0000005"):
        check_optimizer_resharding(run_args(tmp_path, tensor_model_parallel_size=4, ckpt_step=5))


def test_the_entry_refuses_before_it_starts_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """One error line and exit status 2 from main(), before the steps that set up GPUs; --no-load-optim passes."""
    entry = entry_up_to_pretrain(monkeypatch)
    load = save_dist_checkpoint(tmp_path, stored_args(tensor_model_parallel_size=2, pipeline_model_parallel_size=1,
                                                      expert_model_parallel_size=1, expert_tensor_parallel_size=1))
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--load", str(load),
            "--ckpt-format", "torch_dist", "--use-distributed-optimizer", "--mock-data", "--seq-length", "64"]
    assert entry.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: error: --load {load} (")
    assert "tensor_model_parallel_size (--tensor-model-parallel-size): checkpoint 2, run 1" in line
    with pytest.raises(Reached):
        entry.main([*argv, "--no-load-optim"])


def test_a_hybrid_pipeline_resplit_at_the_same_sizes_is_refused(tmp_path: Path) -> None:
    """Moving a hybrid pattern's '|' moves layers (and their optimizer buckets) between stages at the same PP size:
    refused naming the two splits and the checkpoint's pattern; the same split with another DP size loads."""
    pattern = get_card("qwen3.5-35b-a3b-tiny").hybrid_layer_pattern
    saved_cut, run_cut = random.sample(range(2, len(pattern), 2), 2)
    saved_pattern, run_pattern = (f"{pattern[:cut]}|{pattern[cut:]}" for cut in (saved_cut, run_cut))
    stored = stored_args(hybrid_layer_pattern=saved_pattern, num_experts=8)
    load = save_dist_checkpoint(tmp_path, stored)
    with pytest.raises(ValueError) as refused:
        check_optimizer_resharding(run_args(load, hybrid_layer_pattern=run_pattern))
    message = str(refused.value)
    assert (f"pipeline stage split (the '|' of --hybrid-layer-pattern, or --pipeline-model-parallel-layout): "
            f"checkpoint '{layout_text(saved_cut // 2, len(pattern) // 2)}', run "
            f"'{layout_text(run_cut // 2, len(pattern) // 2)}'") in message
    assert f"pass --hybrid-layer-pattern {saved_pattern!r}" in message
    check_optimizer_resharding(run_args(load, hybrid_layer_pattern=saved_pattern,
                                        data_parallel_size=random.randrange(1, 9)))


def layout_text(first: int, layers: int) -> str:
    """The two-stage layout with ``first`` of ``layers`` decoder layers on the first stage."""
    def run(count: int) -> str:
        return "" if not count else "t" if count == 1 else f"t*{count}"
    return f"E{run(first)}|{run(layers - first)}L"


def test_a_gpt_pipeline_layout_change_is_refused_but_the_spelled_out_even_split_is_not(tmp_path: Path) -> None:
    """--pipeline-model-parallel-layout placing other layers on a stage than the checkpoint's even split is refused;
    a layout that spells out the even split places the same layers and loads."""
    layers = get_card("qwen3-30b-a3b-tiny").num_layers
    load = save_dist_checkpoint(tmp_path, stored_args(pipeline_model_parallel_size=2))
    with pytest.raises(ValueError, match=r"pipeline stage split .*drop --pipeline-model-parallel-layout"):
        check_optimizer_resharding(run_args(load, pipeline_model_parallel_layout=f"Et*{layers}|L"))
    check_optimizer_resharding(run_args(load, pipeline_model_parallel_layout=layout_text(layers // 2, layers)))


@pytest.mark.parametrize("changes", [{}, {"finetune": True}, {"no_load_optim": True},
                                     {"use_distributed_optimizer": False}])
def test_a_rank_file_checkpoint_refuses_any_model_parallel_change(tmp_path: Path, changes: dict) -> None:
    """--ckpt-format torch weights are per model-parallel rank: another TP, EP or stage split is refused whatever
    the optimizer (megatron would exit, crash or load layers into other ones), naming the conversion; another DP
    size with the checkpoint's layout is not."""
    iteration = random.randrange(1, 10**6)
    load = save_rank_files(tmp_path, stored_args(), iteration)
    checkpoint = read_stored_checkpoint(load)
    assert checkpoint is not None and checkpoint.ckpt_format == "torch"
    assert checkpoint.common["iteration"] == iteration
    name, value = random.choice([("tensor_model_parallel_size", 1), ("expert_model_parallel_size", 4),
                                 ("virtual_pipeline_model_parallel_size", 2)])
    with pytest.raises(ValueError) as refused:
        check_rank_file_layout(run_args(load, **{name: value}, **changes), checkpoint)
    message = str(refused.value)
    assert f"--load {load} (iter_{iteration:07d}) is a --ckpt-format torch checkpoint" in message
    assert f"{name} (" in message and f"checkpoint {LAYOUT[name] or 1}, run {value}" in message
    assert "--ckpt-convert-format torch_dist --ckpt-convert-save DIR" in message
    check_rank_file_layout(run_args(load, data_parallel_size=random.randrange(1, 64), **changes), checkpoint)
    checkpoint_layout.check_optimizer_resharding(run_args(load, tensor_model_parallel_size=1, **changes), checkpoint)


def test_the_rank_file_is_read_as_megatron_finds_it(tmp_path: Path) -> None:
    """megatron-core's own rank-0 lookup (``find_checkpoint_rank_0``) opens the file whose arguments are read."""
    from megatron.training.checkpointing import find_checkpoint_rank_0

    iteration = random.randrange(1, 10**6)
    for pp, ep in ((1, 1), (2, 1), (1, 2), (2, 2)):
        stored = stored_args(pipeline_model_parallel_size=pp, expert_model_parallel_size=ep,
                             tensor_model_parallel_size=1, data_parallel_size=random.randrange(1, 9))
        load = save_rank_files(tmp_path / f"{pp}_{ep}", stored, iteration)
        megatron_state = torch.load(find_checkpoint_rank_0(str(load), iteration), weights_only=False)
        read = read_stored_checkpoint(load)
        assert read is not None and vars(read.common["args"]) == vars(megatron_state["args"])


def test_the_entry_refuses_a_rank_file_layout_change_before_it_starts_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """One error line and exit status 2 from main(), also under --finetune; the checkpoint's layout goes on."""
    entry = entry_up_to_pretrain(monkeypatch)
    load = save_rank_files(tmp_path, stored_args(tensor_model_parallel_size=2, pipeline_model_parallel_size=1,
                                                 expert_model_parallel_size=1, expert_tensor_parallel_size=1), 7)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--load", str(load),
            "--ckpt-format", "torch", "--mock-data", "--seq-length", "64", "--finetune"]
    assert entry.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: error: --load {load} (iter_0000007) is a --ckpt-format torch checkpoint")
    with pytest.raises(Reached):
        entry.main([*argv, "--tensor-model-parallel-size", "2", "--sequence-parallel"])


def _save_rank_zero_file(directory: Path, stored: argparse.Namespace) -> Path:
    """A one-rank ``--ckpt-format torch`` checkpoint at a random iteration storing ``stored`` as its arguments."""
    iteration = random.randrange(1, 10**6)
    (directory / f"iter_{iteration:07d}" / "mp_rank_00").mkdir(parents=True)
    torch.save({"args": stored, "iteration": iteration, "model": {"w": torch.randn(random.randrange(2, 9))}},
               directory / f"iter_{iteration:07d}" / "mp_rank_00" / "model_optim_rng.pt")
    (directory / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    return directory


def test_an_unset_stored_expert_tensor_size_is_the_tensor_size(tmp_path: Path) -> None:
    """A rank-file checkpoint whose arguments leave the expert tensor size unset sharded its experts over the tensor
    group (megatron-core resolves an unset size to the tensor size): the same layout resumes, another is refused."""
    tp = random.choice([2, 4])
    stored = stored_args(tensor_model_parallel_size=tp, expert_tensor_parallel_size=None,
                         pipeline_model_parallel_size=1, expert_model_parallel_size=1)
    del stored.expert_tensor_parallel_size
    load = _save_rank_zero_file(tmp_path, stored)
    checkpoint = read_stored_checkpoint(load)
    run = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1}
    check_rank_file_layout(run_args(load, **run, expert_tensor_parallel_size=tp), checkpoint)
    with pytest.raises(ValueError, match=f"expert_tensor_parallel_size .*checkpoint {tp}, run 1"):
        check_rank_file_layout(run_args(load, **run, expert_tensor_parallel_size=1), checkpoint)


@pytest.mark.parametrize("kept", [("iteration",), ("tensor_model_parallel_size", "iteration"),
                                  ("tensor_model_parallel_size", "pipeline_model_parallel_size", "num_layers")])
def test_a_rank_file_checkpoint_storing_too_few_arguments_is_left_to_megatron(tmp_path: Path,
                                                                              kept: tuple[str, ...]) -> None:
    """Arguments of another program, too few to tell its layout (the last: no number of layers, as a hybrid
    checkpoint without its pattern): no guess, no crash on the missing ones; megatron's own checks decide."""
    stored = argparse.Namespace(**{name: getattr(stored_args(), name, 7) for name in kept})
    if "num_layers" in kept:
        stored.num_layers = None
    load = _save_rank_zero_file(tmp_path, stored)
    checkpoint = read_stored_checkpoint(load)
    assert checkpoint is not None and checkpoint.ckpt_format == "torch"
    check_rank_file_layout(run_args(load), checkpoint)
    other_tp = run_args(load, tensor_model_parallel_size=LAYOUT["tensor_model_parallel_size"] * 2)
    if "pipeline_model_parallel_size" in kept:  # the sizes are known: a change of them is still refused
        with pytest.raises(ValueError, match="tensor_model_parallel_size"):
            check_rank_file_layout(other_tp, checkpoint)
    else:
        check_rank_file_layout(other_tp, checkpoint)


def test_a_ddp_num_buckets_change_is_refused_naming_that_flag(tmp_path: Path) -> None:
    """megatron-core's ``resolve_ddp_bucket_size`` takes ``--ddp-num-buckets`` first (parameters // N): buckets
    saved that way differ from the default size of a run without it; the way out passes the saved count back."""
    buckets = random.randrange(2, 16)
    saved_dp = random.randrange(1, 9)
    load = save_dist_checkpoint(tmp_path, stored_args(data_parallel_size=saved_dp, overlap_grad_reduce=True,
                                                      ddp_num_buckets=buckets))
    with pytest.raises(ValueError) as refused:
        check_optimizer_resharding(run_args(load, overlap_grad_reduce=True))
    message = str(refused.value)
    assert f"checkpoint {buckets} buckets, run 40000000" in message  # max(40M, 1M x DP x CP) at DP x CP <= 40
    assert f"pass --overlap-grad-reduce --ddp-num-buckets {buckets}" in message
    check_optimizer_resharding(run_args(load, data_parallel_size=random.randrange(1, 9), overlap_grad_reduce=True,
                                        ddp_num_buckets=buckets))


def test_overlap_param_gather_with_optimizer_step_saves_one_bucket(tmp_path: Path) -> None:
    """megatron-core 0.19.2's ``get_model`` disables bucketing of every chunk under
    ``--overlap-param-gather-with-optimizer-step`` (``per_chunk_disable_bucketing``), whatever
    ``--overlap-grad-reduce`` gives: a checkpoint saved so holds one bucket per buffer, which a run bucketing by the
    default size does not load."""
    load = save_dist_checkpoint(tmp_path, stored_args(overlap_grad_reduce=True,
                                                      overlap_param_gather_with_optimizer_step=True))
    with pytest.raises(ValueError, match="checkpoint one bucket, run 40000000"):
        check_optimizer_resharding(run_args(load, overlap_grad_reduce=True))
    check_optimizer_resharding(run_args(load, overlap_grad_reduce=True, overlap_param_gather_with_optimizer_step=True,
                                        data_parallel_size=random.randrange(1, 41)))


def test_a_pretrained_checkpoint_is_fine_tuned_so_its_optimizer_state_is_not_checked(tmp_path: Path) -> None:
    """megatron-core loads --pretrained-checkpoint in place of an empty --load with --finetune set by itself (no
    optimizer state read): its dp_reshardable state does not refuse another TP/EP, though the run's own
    ``args.finetune`` is still False when the entry checks."""
    from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint

    pretrained = save_dist_checkpoint(tmp_path / "pretrained", stored_args())
    run = run_args(tmp_path / "fresh", tensor_model_parallel_size=4, expert_model_parallel_size=4,
                   pretrained_checkpoint=str(pretrained))
    checkpoint = read_loaded_checkpoint(run)
    assert checkpoint is not None and checkpoint.fine_tunes and not run.finetune
    checkpoint_layout.check_optimizer_resharding(run, checkpoint)


def test_an_interleaved_even_split_is_compared_over_all_virtual_stages(tmp_path: Path) -> None:
    """PP 2 x VPP 2 without a layout places 8 layers as 2 per virtual stage (Et*2|t*2|t*2|t*2L); a run's layout of
    the same 4 stages that moves a layer is refused, one spelling out that even split loads."""
    stored = stored_args(num_layers=8, virtual_pipeline_model_parallel_size=2)
    load = save_dist_checkpoint(tmp_path, stored)
    with pytest.raises(ValueError) as refused:
        check_optimizer_resharding(run_args(load, num_layers=8, virtual_pipeline_model_parallel_size=2,
                                            pipeline_model_parallel_layout="Et*3|t|t*2|t*2L"))
    assert "checkpoint 'Et*2|t*2|t*2|t*2L', run 'Et*3|t|t*2|t*2L'" in str(refused.value)
    check_optimizer_resharding(run_args(load, num_layers=8, virtual_pipeline_model_parallel_size=2,
                                        pipeline_model_parallel_layout="Et*2|t*2|t*2|t*2L"))


def test_ddp_num_buckets_wins_over_ddp_bucket_size(tmp_path: Path) -> None:
    """megatron-core 0.19.2's ``resolve_ddp_bucket_size`` takes ``--ddp-num-buckets`` before ``--ddp-bucket-size``
    when both are given (parameters // N): a checkpoint saved with both is not loaded by a run giving the same
    ``--ddp-bucket-size`` alone."""
    buckets, size = random.randrange(2, 16), random.randrange(10**6, 10**8)
    both = stored_args(overlap_grad_reduce=True, ddp_num_buckets=buckets, ddp_bucket_size=size)
    assert grad_bucket_size(both) == f"{buckets} buckets"
    load = save_dist_checkpoint(tmp_path, both)
    with pytest.raises(ValueError, match=f"checkpoint {buckets} buckets, run {size}"):
        check_optimizer_resharding(run_args(load, overlap_grad_reduce=True, ddp_bucket_size=size))
