"""Save, data-phase and profiler flags that megatron's ``validate_args`` accepts and megatron 0.19.2 fails on mid-run:
each premise is shown on megatron's (or torch's) own function on the CPU, then the training entry refuses the run in
one error line before Megatron allocates anything, and lets the neighbouring valid run through."""

import random
import types
from pathlib import Path
from unittest import mock

import pytest
import torch

from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, refused_line

BASE = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "16", "--mock-data",
        "--micro-batch-size", "1", "--global-batch-size", "8", "--lr", "3e-4"]


def _save_checkpoint_error(tmp_path: Path, non_persistent: bool, **megatron_args) -> Exception:
    """What megatron's ``save_checkpoint`` raises before it writes anything, for these arguments (its globals
    stubbed: no process group, no GPU)."""
    from megatron.training import checkpointing

    args = types.SimpleNamespace(save=str(tmp_path / "save"), non_persistent_ckpt_type=None,
                                 non_persistent_global_ckpt_dir=None, use_distributed_optimizer=False,
                                 no_save_optim=False, dataloader_save=None, **megatron_args)
    name = str(tmp_path / "save" / "iter_0000007" / "mp_rank_00" / "model_optim_rng.pt")
    with mock.patch.object(checkpointing, "get_args", lambda: args), \
            mock.patch.object(checkpointing, "get_rng_state", lambda *_args, **_kwargs: None), \
            mock.patch.object(checkpointing, "get_rerun_state_machine",
                              lambda: types.SimpleNamespace(state_dict=lambda **_kwargs: {})), \
            mock.patch.object(checkpointing, "get_checkpoint_name", lambda *_args, **_kwargs: name), \
            pytest.raises(NotImplementedError) as raised:
        checkpointing.save_checkpoint(7, [], None, None, 0, checkpointing_context={}, non_persistent_ckpt=non_persistent,
                                      tp_group=object(), pp_group=object())
    return raised.value


def test_async_save_in_the_torch_format_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    """``validate_args`` turns ``--async-save`` off for the distributed formats without a persistent worker, not for
    the legacy torch format, whose save then raises NotImplementedError after --save-interval iterations."""
    error = _save_checkpoint_error(tmp_path, False, async_save=True, use_dist_ckpt=False, ckpt_format="torch")
    assert "Async checkpoint save not implemented for legacy checkpoints" in str(error)
    entry = entry_up_to_pretrain(monkeypatch)
    save = ["--train-iters", "500", "--save", str(tmp_path / "save"), "--save-interval", str(random.randint(1, 400))]
    line = refused_line(entry, capsys, [*BASE, *save, "--async-save", "--ckpt-format", "torch"])
    assert "--async-save with --ckpt-format torch: megatron-core 0.19.2 saves torch-format checkpoints only" in line
    for passes in (["--ckpt-format", "torch"], ["--async-save", "--ckpt-format", "torch_dist", "--async-strategy", "mcore"]):
        with pytest.raises(Reached):
            entry.main([*BASE, *save, *passes])
    with pytest.raises(Reached):  # nothing is saved
        entry.main([*BASE, "--train-iters", "500", "--async-save", "--ckpt-format", "torch"])


def test_a_non_persistent_save_interval_without_its_type_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    """megatron's ``save_checkpoint`` knows the non-persistent types ``global`` and ``local`` only: without
    ``--non-persistent-ckpt-type`` its first non-persistent save raises NotImplementedError."""
    error = _save_checkpoint_error(tmp_path, True, async_save=False, use_dist_ckpt=True, ckpt_format="torch_dist")
    assert "Please use local or global non-persistent checkpoints (got: None)" in str(error)
    entry = entry_up_to_pretrain(monkeypatch)
    interval = random.randint(1, 99)
    save = ["--train-iters", "500", "--save", str(tmp_path / "save"), "--save-interval", "100",
            "--non-persistent-save-interval", str(interval)]
    line = refused_line(entry, capsys, [*BASE, *save])
    assert (f"--non-persistent-save-interval {interval} without --non-persistent-ckpt-type: megatron-core 0.19.2 "
            f"stops with NotImplementedError at its first non-persistent save (iteration {interval}") in line
    with pytest.raises(Reached):
        entry.main([*BASE, *save, "--non-persistent-ckpt-type", "global"])


def test_a_save_path_that_cannot_be_a_folder_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    """``--save`` naming a file, or a path under one, passed every check; megatron creates the folder only at its
    first save and stopped there, after --save-interval iterations of training. A new folder, or one under an
    existing folder, passes."""
    entry = entry_up_to_pretrain(monkeypatch)
    afile = tmp_path / f"notes-{random.randrange(10**6)}.txt"
    afile.write_text("a user's file")
    save = ["--train-iters", "500", "--save-interval", str(random.randint(1, 400))]
    line = refused_line(entry, capsys, [*BASE, *save, "--save", str(afile)])
    assert f"--save {afile} is a file: megatron-core saves each checkpoint into a folder there" in line
    line = refused_line(entry, capsys, [*BASE, *save, "--save", str(afile / "checkpoints")])
    assert f"--save {afile / 'checkpoints'} lies under {afile}, which is a file" in line
    assert afile.read_text() == "a user's file"
    for folder in (tmp_path / "new" / "checkpoints", tmp_path):
        with pytest.raises(Reached):
            entry.main([*BASE, *save, "--save", str(folder)])


def test_phase_transitions_in_a_run_sized_by_iterations_are_refused_in_one_line(monkeypatch, capsys):
    """megatron sizes each data phase up to ``args.train_samples``; with ``--train-iters`` it is None and building
    the datasets raises a TypeError (comparing None with the current sample)."""
    from megatron.training import training

    iters, transition = 500, random.randint(1, 499)
    megatron_args = types.SimpleNamespace(train_samples=None, train_iters=iters, global_batch_size=8,
                                          full_validation=False, skip_train=False, eval_interval=100,
                                          start_eval_at_iter=None, eval_iters=10,
                                          phase_transition_iterations=[transition], iteration=0)
    with mock.patch.object(training, "get_args", lambda: megatron_args), pytest.raises(TypeError, match="NoneType"):
        training.get_train_valid_test_num_samples()
    entry = entry_up_to_pretrain(monkeypatch)
    phases = ["--phase-transition-iterations", str(transition)]
    line = refused_line(entry, capsys, [*BASE, "--train-iters", str(iters), *phases])
    assert "--phase-transition-iterations needs the run's length as --train-samples" in line
    with pytest.raises(Reached):
        entry.main([*BASE, "--train-samples", str(iters * 8), "--lr-decay-samples", str(iters * 8), *phases])


@pytest.mark.parametrize("steps_after_start", [0, -1])
def test_a_pytorch_profiler_window_without_a_step_is_refused_in_one_line(monkeypatch, capsys, steps_after_start):
    """megatron hands torch's profiler schedule ``--profile-step-end`` minus ``--profile-step-start`` active steps,
    which torch refuses below 1 when training starts."""
    start = random.randint(2, 50)
    end = start + steps_after_start
    with pytest.raises(AssertionError, match="active"):
        torch.profiler.schedule(wait=start - 1, warmup=1, active=end - start, repeat=1)
    entry = entry_up_to_pretrain(monkeypatch)
    profile = ["--train-iters", "500", "--profile", "--profile-step-start", str(start)]
    line = refused_line(entry, capsys, [*BASE, *profile, "--profile-step-end", str(end), "--use-pytorch-profiler"])
    assert f"--profile-step-end {end} is not after --profile-step-start {start}" in line
    with pytest.raises(Reached):
        entry.main([*BASE, *profile, "--profile-step-end", str(start + 1), "--use-pytorch-profiler"])
    with pytest.raises(Reached):  # nsys profiling (no torch profiler schedule)
        entry.main([*BASE, *profile, "--profile-step-end", str(end)])


def test_fewer_training_samples_than_one_global_batch_are_refused_in_one_line(monkeypatch, capsys):
    """megatron rounds a ``--train-samples`` run down to whole global batches; below one batch that is 0 iterations,
    and ``pretrain`` then skips training (``args.train_iters > 0`` is false) and returns as if it had finished."""
    from megatron.training import training

    batch = 8
    samples = random.randint(1, batch - 1)
    megatron_args = types.SimpleNamespace(train_iters=None, train_samples=samples, global_batch_size=batch,
                                          step_batch_size_schedule=None)
    with mock.patch.object(training, "print_rank_0"):
        training.update_train_iters(megatron_args)
    assert megatron_args.train_iters == 0
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*BASE, "--train-samples", str(samples)])
    assert (f"--train-samples {samples} is less than one step of --global-batch-size {batch}: megatron-core 0.19.2 "
            f"rounds the run down to {samples} // {batch} = 0 iterations") in line
    for passes in (["--train-samples", str(batch)], ["--train-samples", str(samples), "--skip-train"]):
        with pytest.raises(Reached):
            entry.main([*BASE, *passes])


@pytest.mark.parametrize("chakra", [False, True])
def test_pytorch_profiler_traces_without_a_tensorboard_dir_are_warned_of_once_on_rank_0(monkeypatch, capsys, tmp_path,
                                                                                         chakra):
    """megatron writes the torch profiler's traces to ``<tensorboard_dir>/../torch_profile`` (Chakra's to
    ``../chakra``); without ``--tensorboard-dir`` that is ``None/../torch_profile``, which lands under the working
    directory beside an empty ``None`` directory. The entry names the place in one warning and goes on."""
    import inspect

    from megatron.training import training

    source = inspect.getsource(training.train)
    assert 'Path(f"{args.tensorboard_dir}/../torch_profile")' in source
    assert 'Path(f"{args.tensorboard_dir}/../chakra")' in source
    monkeypatch.chdir(tmp_path)
    Path(f"{None}/../torch_profile").mkdir(parents=True, exist_ok=True)  # what megatron does with the default
    assert sorted(path.name for path in tmp_path.iterdir()) == ["None", "torch_profile"]
    entry = entry_up_to_pretrain(monkeypatch)
    start = random.randint(2, 50)
    profile = ["--train-iters", "500", "--profile", "--use-pytorch-profiler", "--profile-step-start", str(start),
               "--profile-step-end", str(start + random.randint(1, 5)),
               *(["--pytorch-profiler-collect-chakra"] if chakra else [])]
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(Reached):
        entry.main([*BASE, *profile])
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: warning: --use-pytorch-profiler without --tensorboard-dir: megatron-core "
                           f"0.19.2 writes the profiler traces to {tmp_path / 'torch_profile'}")
    assert f"leaves an empty directory {tmp_path / 'None'} there" in line
    assert (f"(and the Chakra execution traces to {tmp_path / 'chakra'})" in line) == chakra
    for quiet_rank, quiet in (("1", profile), ("0", [*profile, "--tensorboard-dir", str(tmp_path / "tb")]),
                              ("0", ["--train-iters", "500", "--profile", "--profile-step-start", str(start),
                                     "--profile-step-end", str(start + 1)])):
        monkeypatch.setenv("RANK", quiet_rank)
        with pytest.raises(Reached):
            entry.main([*BASE, *quiet])
        assert capsys.readouterr().err == ""


@pytest.mark.parametrize("torch_profiler", [False, True])
def test_profile_steps_past_the_runs_end_are_refused_in_one_line(monkeypatch, capsys, tmp_path, torch_profiler):
    """megatron starts profiling (nsys or torch) when the iteration reaches ``--profile-step-start`` and stops torch's
    profiler, which then writes the trace, only when it reaches ``--profile-step-end``; both compare the iteration
    for equality inside the loop ``while iteration < train_iters``. A start at or past the run's last iteration
    profiles nothing, and a torch-profiler end past it writes no trace, without a word."""
    import inspect

    from megatron.training import training

    source = inspect.getsource(training.train)
    assert "while iteration < args.train_iters:" in source
    assert "iteration == args.profile_step_start" in source
    assert "and iteration == args.profile_step_end" in inspect.getsource(training.post_training_step_callbacks)
    iterations = random.randint(5, 60)
    kind = ["--use-pytorch-profiler", "--tensorboard-dir", str(tmp_path / "tb")] if torch_profiler else []
    for length in (["--train-iters", str(iterations)], ["--train-samples", str(iterations * 8 + random.randint(0, 7))]):
        entry = entry_up_to_pretrain(monkeypatch)
        start = iterations  # the first step past the run: the loop ends at iteration == train_iters
        line = refused_line(entry, capsys, [*BASE, *length, "--profile", *kind, "--profile-step-start", str(start),
                                        "--profile-step-end", str(start + 2)])
        assert f"--profile-step-start {start} is not before the run's end at iteration {iterations}" in line
        late_end = ["--profile", *kind, "--profile-step-start", str(iterations - 2), "--profile-step-end",
                    str(iterations + random.randint(1, 3))]
        if torch_profiler:
            line = refused_line(entry, capsys, [*BASE, *length, *late_end])
            assert f"is past the run's end at iteration {iterations}: megatron-core 0.19.2 stops torch's" in line
        else:  # nsys records from the start step to the end of the process
            with pytest.raises(Reached):
                entry.main([*BASE, *length, *late_end])
        for passes in (["--profile", *kind, "--profile-step-start", str(iterations - 2), "--profile-step-end",
                        str(iterations)], [*late_end, "--skip-train"]):
            with pytest.raises(Reached):
                entry.main([*BASE, *length, *passes])
