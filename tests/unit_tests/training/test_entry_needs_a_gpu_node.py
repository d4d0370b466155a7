"""On a CPU machine (a login node) the training entry refused every command line as "megatron's argument validation
refuses the command line: Torch not compiled with CUDA enabled" (megatron's ``validate_args`` asks the GPU), hiding
the refusal that mattered; then, in one line, that it needs a GPU node, before megatron's validation and every check
after it (data paths, batch grid, parallel sizes, ``--save``...), so that a login node passed over those mistakes.
It now validates as the cluster's GPUs would answer (as ``oellm recipe --dry-run`` does), on rank 0 of the launcher's
``WORLD_SIZE`` (1 without one), runs every later check that needs no GPU, refuses a mistake with its own line, and
says it needs a GPU node only for a command line that passed them, saying so."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from megatron.oellm.training.entry import check_gpu_node
from tests.unit_tests.training.entry_helpers import (
    TINY_MOE_RUN,
    entry_on_a_cpu_node,
    entry_up_to_pretrain,
    refused_line,
)

CARD = "qwen3-30b-a3b-tiny"
PASSED = "the command line passed the checks that can run here"
WORLD_SIZE_HINT = ("on a node without a GPU the world size is $WORLD_SIZE, else 1: export the job's GPU count "
                   "(e.g. WORLD_SIZE=64)")
"""The note of a refusal naming the world size on a node without a GPU and without an exported ``WORLD_SIZE``."""


def _tiny_run(*extra: str, global_batch: int = 8) -> list[str]:
    """:data:`TINY_MOE_RUN` with another ``--global-batch-size`` and ``extra`` flags."""
    run = list(TINY_MOE_RUN)
    run[run.index("--global-batch-size") + 1] = str(global_batch)
    return [*run, *extra]


@pytest.mark.parametrize("cuda_build", [None, "13.0"])
def test_a_correct_line_passes_the_checks_then_needs_a_gpu_node(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 cuda_build: str | None) -> None:
    """The refusal says which checks the line passed (a login node's silence on them was no pass), on which world
    size, and why this node has no GPU."""
    entry = entry_on_a_cpu_node(monkeypatch, cuda_build)
    world = random.choice([1, 2, 4, 8])
    if world > 1 or random.random() < 0.5:
        monkeypatch.setenv("WORLD_SIZE", str(world))
    line = refused_line(entry, capsys, _tiny_run(global_batch=world * random.randint(1, 4)))
    assert "the training entry needs a GPU node" in line and PASSED in line, line
    assert f"validate_args as rank 0 of WORLD_SIZE={world} (" in line and "data, batch grid, parallel layout, --save" in line
    assert "Torch not compiled with CUDA enabled" not in line and "argument validation" not in line
    assert ("a CPU build of torch" in line) == (cuda_build is None)
    assert ("CUDA_VISIBLE_DEVICES" in line) == (cuda_build is not None)


def test_the_te_backend_is_judged_as_the_clusters(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--oellm-backend te`` was refused on a login node because Transformer Engine, which needs a GPU driver, does
    not import there; the cluster image's Transformer Engine is what the line is judged against."""
    from megatron.oellm.backends.selection import transformer_engine_import_error

    if transformer_engine_import_error() is None:
        pytest.skip("Transformer Engine imports here")
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys, _tiny_run("--oellm-backend", "te"))
    assert PASSED in line and "Transformer Engine does not import" not in line, line


def test_a_missing_data_prefix_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / f"corpus_{random.randint(0, 10**6)}"
    run = [flag for flag in _tiny_run("--data-path", str(prefix)) if flag != "--mock-data"]
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys, run)
    assert f"no indexed dataset (PREFIX.bin and PREFIX.idx) at '{prefix}'" in line and "GPU node" not in line, line


def test_a_global_batch_off_the_micro_batch_grid_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The grid is micro batch x data-parallel size, the world size's: 2 ranks of a plain run."""
    entry = entry_on_a_cpu_node(monkeypatch)
    monkeypatch.setenv("WORLD_SIZE", "2")
    micro = random.randint(1, 4)
    global_batch = 2 * micro * random.randint(1, 8) + random.randint(1, 2 * micro - 1)
    line = refused_line(entry, capsys,
                        _tiny_run("--micro-batch-size", str(micro), global_batch=global_batch))
    assert (f"--global-batch-size {global_batch} is not a multiple of --micro-batch-size {micro} x data-parallel "
            f"size 2 = {2 * micro}") in line and "GPU node" not in line, line


def test_a_tensor_parallel_size_not_dividing_the_world_size_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    entry = entry_on_a_cpu_node(monkeypatch)
    world = random.choice([6, 10, 14])
    monkeypatch.setenv("WORLD_SIZE", str(world))
    line = refused_line(entry, capsys,
                        _tiny_run("--tensor-model-parallel-size", "4", global_batch=world))
    assert f"world size ({world}) is not divisible by total_model_size" in line and "GPU node" not in line, line
    assert "$WORLD_SIZE" not in line, line  # the job's world size, exported: the refusal is the command line's


def test_a_world_size_of_one_without_a_launcher_names_how_to_give_the_jobs(monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``WORLD_SIZE`` megatron's refusal of a tensor parallel size named a world size of 1 and no fix: the
    command line may be right for the job's GPUs, which this node cannot know."""
    tp = random.choice([2, 4, 8])
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys,
                        _tiny_run("--tensor-model-parallel-size", str(tp), "--sequence-parallel"))
    assert f"world size (1) is not divisible by total_model_size (total_model_size={tp})" in line, line
    assert WORLD_SIZE_HINT in line, line


def test_an_expert_layout_the_card_refuses_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Expert x pipeline parallel sizes that do not divide the world size: megatron's validation lets them through,
    the card's layout check (the entry's :func:`~megatron.oellm.training.entry.check_layout`) does not."""
    entry = entry_on_a_cpu_node(monkeypatch)
    world = random.choice([2, 6])
    monkeypatch.setenv("WORLD_SIZE", str(world))
    line = refused_line(entry, capsys,
                        _tiny_run("--expert-model-parallel-size", "4", global_batch=world * random.randint(1, 4)))
    assert f"world size {world} is not divisible by etp x ep x pp = 4" in line and "GPU node" not in line, line
    assert "$WORLD_SIZE" not in line, line  # the job's world size, exported: the refusal is the command line's


def test_an_expert_layout_refused_at_the_default_world_size_names_how_to_give_the_jobs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The card's layout check of an expert parallel size against the world size 1 a node without a launcher
    defaults to named 1 and "change the GPU count" without saying that the count was no job's: it gives the same
    ``$WORLD_SIZE`` hint as megatron's refusals of the world size there."""
    ep = random.choice([2, 4, 8])
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys, _tiny_run("--expert-model-parallel-size", str(ep)))
    assert f"world size 1 is not divisible by etp x ep x pp = {ep}; change the GPU count, ep, etp or pp" in line, line
    assert line.endswith(f"change the GPU count, ep, etp or pp; {WORLD_SIZE_HINT}"), line


def test_a_save_that_cannot_be_written_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A ``--save`` under a file (which root cannot write into either)."""
    file = tmp_path / "notes.txt"
    file.write_text(f"run {random.randint(0, 10**6)}")
    save = file / "checkpoints"
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys,
                        _tiny_run("--save", str(save), "--save-interval", str(random.randint(2, 9))))
    assert f"--save {save} lies under {file}, which is a file" in line and "GPU node" not in line, line


def test_the_checks_before_validation_still_refuse_first(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A command line the entry refuses before megatron's validation (here a sequence longer than the card's
    positions) is refused for that on a CPU node too."""
    from megatron.oellm.cards import get_card

    seq = get_card(CARD).max_position_embeddings + random.randint(1, 4096)
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys,
                        ["--oellm-model", CARD, "--oellm-backend", "torch", "--mock-data", "--seq-length", str(seq)])
    assert f"--seq-length {seq} exceeds" in line and "GPU node" not in line


def test_a_gpu_node_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    check_gpu_node(random.choice([1, 2, 4, 8]))


def test_the_refusal_names_the_world_size_the_entry_read_once(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``check_gpu_node`` read ``WORLD_SIZE`` from the environment again, though :func:`main` had read it for the
    validation: one value, read once, is the one the validation ran on and the refusal names."""
    entry = entry_on_a_cpu_node(monkeypatch)
    world = random.choice([2, 4, 8])
    monkeypatch.setenv("WORLD_SIZE", str(world))
    reads = []
    read_world_size = entry.launcher_world_size

    def counted_read() -> int:
        reads.append(world)
        return read_world_size()

    monkeypatch.setattr(entry, "launcher_world_size", counted_read)
    line = refused_line(entry, capsys, _tiny_run(global_batch=world * random.randint(1, 4)))
    assert f"validate_args as rank 0 of WORLD_SIZE={world} (" in line and PASSED in line, line
    assert reads == [world]


def test_the_gpu_node_check_names_the_world_size_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not the environment's: a ``WORLD_SIZE`` exported here is not the one the caller validated on."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    given, exported = random.sample([2, 4, 8, 16], 2)
    monkeypatch.setenv("WORLD_SIZE", str(exported))
    with pytest.raises(ValueError, match=f"rank 0 of WORLD_SIZE={given} \\(the launcher's"):
        check_gpu_node(given)


def test_megatrons_training_configuration_is_built(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Its optimizer checks need no GPU: a main-gradient, main-parameter or Adam-moment dtype other than fp32 without
    the precision-aware optimizer."""
    flag, dtype = random.choice([("--main-grads-dtype", "bf16"), ("--main-params-dtype", "fp16"),
                                 ("--exp-avg-dtype", "bf16"), ("--exp-avg-sq-dtype", "fp16")])
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys, _tiny_run("--bf16", flag, dtype))
    assert (f"megatron's training configuration refuses the run's arguments: {flag[2:].replace('-', '_')} can only "
            "be fp32") in line and "GPU node" not in line, line


def test_the_precision_aware_optimizers_fused_adam_is_left_to_the_gpu_node(monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """megatron-core's configuration of it imports Transformer Engine's FusedAdam, which a CPU node lacks: a line
    its other checks pass (its own optimizer-state dtypes included) passes here."""
    dtypes = random.choice([[], ["--main-params-dtype", "fp16"], ["--exp-avg-dtype", "bf16"],
                            ["--exp-avg-sq-dtype", "fp16"]])
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys,
                        _tiny_run("--bf16", "--use-distributed-optimizer", "--use-precision-aware-optimizer", *dtypes))
    assert PASSED in line and "FusedAdam" not in line, line


def test_the_precision_aware_optimizer_without_the_distributed_optimizer_is_refused(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """megatron-core's ``OptimizerConfig`` refuses it on a GPU node; the login node skipped that container along with
    its FusedAdam question and passed the line."""
    dtypes = random.choice([[], ["--main-params-dtype", "fp16"], ["--exp-avg-dtype", "bf16"]])
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys,
                        _tiny_run("--bf16", "--use-precision-aware-optimizer", *dtypes))
    assert ("megatron's training configuration refuses the run's arguments: --use-precision-aware-optimizer only "
            "supported with distributed optimizer") in line and "GPU node" not in line, line


def test_the_precision_aware_optimizer_with_another_optimizer_than_adam_is_refused(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys,
                        _tiny_run("--bf16", "--optimizer", "sgd", "--use-distributed-optimizer",
                                  "--use-precision-aware-optimizer"))
    assert ("megatron's training configuration refuses the run's arguments: --use-precision-aware-optimizer only "
            "supported with adam") in line and "GPU node" not in line, line


def test_the_torch_backends_feature_check_runs(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """An explicit torch backend is the same on every node: what it cannot run is refused here too."""
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys,
                        _tiny_run("--bf16", "--oellm-backend", "torch", "--fp8-format", "hybrid"))
    assert "the torch-native backend cannot run: fp8 training" in line and "GPU node" not in line, line


@pytest.mark.parametrize("node", ["cpu", "gpu"])
@pytest.mark.parametrize("given", ["eight", "0", "-2", "2.5", "32.0", "", "\u00b2"])
def test_a_world_size_that_is_no_process_count_is_refused_by_name(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  given: str, node: str) -> None:
    """An exported ``WORLD_SIZE``: ``int()``'s bare "invalid literal" (or a world of 0 ranks reaching megatron's
    validation) named neither the variable nor the fix. megatron's parser reads it with ``int()`` while it is built,
    which the entry's first checks do: the parser is built afresh here, as in a new process (an earlier test's
    cached one would hide that), and the check comes before it on every node."""
    from megatron.oellm.training import args

    entry = entry_on_a_cpu_node(monkeypatch) if node == "cpu" else entry_up_to_pretrain(monkeypatch)
    monkeypatch.setenv("WORLD_SIZE", given)
    args.oellm_parser.cache_clear()
    args._sentinel_parser.cache_clear()
    line = refused_line(entry, capsys, _tiny_run())
    assert f"WORLD_SIZE={given!r} in the environment is not a number of processes" in line, line


@pytest.mark.parametrize("backend", ["deepep", "ncclep"])
def test_a_flex_backend_without_an_expert_group_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str], backend: str) -> None:
    """The dispatcher's layout rule (TP x EP > 1 for deepep and ncclep) holds on every node; only the libraries it
    needs are the GPU node's to check, so a login node without DeepEP still refuses the layout."""
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys,
                        _tiny_run("--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", backend))
    assert f"--moe-flex-dispatcher-backend {backend} needs more than one rank in the expert tensor x expert" in line, line
    assert "GPU node" not in line and "DeepEP" not in line, line


JOB_ENVIRONMENT = "`oellm recipe RECIPE.toml --dry-run` prints a recipe's [cluster.env] exports"


def test_tensor_parallelism_refused_by_this_shells_environment_says_so(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """megatron asks for ``CUDA_DEVICE_MAX_CONNECTIONS=1`` beside tensor parallelism, which a job exports from its
    recipe's ``[cluster.env]``: a login shell without it was refused as if the command line were wrong."""
    entry = entry_on_a_cpu_node(monkeypatch)
    world = random.choice([2, 4, 8])
    monkeypatch.setenv("WORLD_SIZE", str(world))
    line = refused_line(entry, capsys, _tiny_run("--tensor-model-parallel-size", "2", "--sequence-parallel",
                                                 global_batch=world // 2 * random.randint(1, 4)))
    assert "require setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1" in line, line
    assert ("megatron read CUDA_DEVICE_MAX_CONNECTIONS unset from this shell, not the job's environment: export the "
            "job's environment") in line and JOB_ENVIRONMENT in line, line


def test_a_line_the_environment_refuses_names_every_variable_it_read(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Transformer Engine's CUDA graphs under expandable segments need ``NCCL_GRAPH_REGISTER=0``: the refusal names
    both values this shell gave."""
    entry = entry_on_a_cpu_node(monkeypatch)
    conf = random.choice(["expandable_segments:True", "expandable_segments:True,garbage_collection_threshold:0.8"])
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", conf)
    line = refused_line(entry, capsys, _tiny_run("--cuda-graph-impl", "transformer_engine"))
    assert f"megatron read PYTORCH_CUDA_ALLOC_CONF={conf}, NCCL_GRAPH_REGISTER unset from this shell" in line, line
    assert JOB_ENVIRONMENT in line, line


def test_a_line_passing_with_this_shells_environment_names_it(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The tensor-parallel line passes with ``CUDA_DEVICE_MAX_CONNECTIONS=1`` exported; the pass is this shell's, so
    the line names the values read (a job exporting expandable segments would refuse CUDA graphs this shell passes)."""
    entry = entry_on_a_cpu_node(monkeypatch)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    register = str(random.randint(0, 1))
    monkeypatch.setenv("NCCL_GRAPH_REGISTER", register)
    line = refused_line(entry, capsys, _tiny_run("--tensor-model-parallel-size", "2", "--sequence-parallel"))
    assert PASSED in line, line
    assert (f"the checks read CUDA_DEVICE_MAX_CONNECTIONS=1, PYTORCH_CUDA_ALLOC_CONF unset, PYTORCH_ALLOC_CONF unset, "
            f"NCCL_GRAPH_REGISTER="
            f"{register}, NVTE_CPU_OFFLOAD_V1 unset from this shell, not the job's environment") in line, line
    assert JOB_ENVIRONMENT in line, line


def test_a_cpu_node_prints_the_refusal_alone(tmp_path: Path) -> None:
    """megatron-core's and fla's import warnings of a missing Transformer Engine, Apex, absl or GPU were a dozen lines
    on stderr before the one refusal, about the login node, not the cluster's image. The entry runs as a program
    (warnings reach stderr there, not pytest's record), its GPUs hidden."""
    repo = Path(__file__).resolve().parents[3]
    env = {name: value for name, value in os.environ.items() if name not in ("WORLD_SIZE", "PYTHONWARNINGS")}
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "megatron.oellm.training.entry",
                           *_tiny_run(global_batch=random.randint(1, 16))],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("megatron.oellm.training.entry: error: the training entry needs a GPU node"), lines


def test_a_runtime_error_of_megatrons_validation_is_one_refusal_line(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """megatron-core's ``validate_args`` raises ``RuntimeError`` (not an assertion) for local non-persistent
    checkpoints without nvidia-resiliency-ext: a traceback instead of the entry's one line."""
    import importlib.util

    if importlib.util.find_spec("nvidia_resiliency_ext") is not None:
        pytest.skip("nvidia-resiliency-ext is installed here")
    interval = str(random.randint(1, 9))
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys,
                        _tiny_run("--non-persistent-ckpt-type", "local", "--non-persistent-save-interval", interval))
    assert "megatron's argument validation refuses the command line: nvidia_resiliency_ext is required" in line, line


@pytest.mark.parametrize("flag", ["--log-straggler", "--enable-ft-package"])
def test_the_job_images_packages_are_left_to_the_gpu_node(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """A package this login node lacks says nothing of the job's image: a flag that needs one reaches the GPU-node
    line instead of a refusal naming this node's environment."""
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys, _tiny_run(flag))
    assert PASSED in line and "not installed in this environment" not in line, line


def test_wandb_is_the_job_images_package(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    """``--wandb-project`` on a login node without wandb: the job image's package, not this node's, so the line
    reaches the GPU-node refusal."""
    import importlib.util

    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys,
                        _tiny_run("--wandb-project", f"p{random.randrange(100)}", "--wandb-save-dir",
                                  str(tmp_path / "wandb")))
    assert PASSED in line and "wandb" not in line.split(PASSED)[0], line


def test_an_attention_switch_refused_off_a_gpu_node_names_this_shells_value(monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A TE attention switch this shell exports against ``--attention-backend`` was refused on a login node as on a
    GPU node, though the job's environment (its recipe's ``[cluster.env]``, its modules) may not export it: the
    refusal is the GPU node's, followed by the value the entry read from this shell and how to check the job's."""
    from megatron.oellm.training.attention_env import SWITCHES

    name = random.choice(SWITCHES)
    value = random.choice(["0", "true", "yes"])  # megatron-core sets 1 for each under --attention-backend auto
    run = _tiny_run("--oellm-backend", "torch")
    gpu_entry = entry_up_to_pretrain(monkeypatch)
    monkeypatch.setenv(name, value)
    gpu_line = refused_line(gpu_entry, capsys, run)
    assert f"the environment sets {name}={value!r} (megatron-core sets 1)" in gpu_line, gpu_line
    monkeypatch.undo()
    cpu_entry = entry_on_a_cpu_node(monkeypatch)
    monkeypatch.setenv(name, value)
    cpu_line = refused_line(cpu_entry, capsys, run)
    assert cpu_line == (f"{gpu_line}; the entry read {name}={value} from this shell, not the job's environment: "
                        f"export the job's environment ({JOB_ENVIRONMENT}) to check the line as the job runs"), cpu_line


# Fourteenth mutation audit: each test below failed with one mutant of session 53's validation off a GPU node applied.


def test_a_value_read_here_is_quoted_as_a_shell_would_take_it(monkeypatch):
    """A value with a space is named shell-quoted, so the phrase shows where it ends and can be exported as shown."""
    from megatron.oellm.recipes.megatron_validation import environment_read_here

    value = f"expandable_segments:True garbage_collection_threshold:0.{random.randint(1, 9)}"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", value)
    monkeypatch.delenv("NCCL_GRAPH_REGISTER", raising=False)
    assert environment_read_here(["PYTORCH_CUDA_ALLOC_CONF", "NCCL_GRAPH_REGISTER"]) == (
        f"PYTORCH_CUDA_ALLOC_CONF='{value}', NCCL_GRAPH_REGISTER unset")


def test_the_torch_backend_stays_torch_off_a_gpu_node(monkeypatch, capsys):
    """The cluster image resolves ``--oellm-backend torch`` to torch, whose ``--transformer-impl local`` conflicts
    with a ``transformer_engine`` given: refused off a GPU node as on one."""
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys,
                        _tiny_run("--oellm-backend", "torch", "--transformer-impl", "transformer_engine"))
    assert "--oellm-backend torch resolves to the torch backend, which needs --transformer-impl local" in line, line


def test_the_vocabulary_stand_in_is_the_embedded_vocabulary_where_the_arguments_tell_it():
    """megatron-core's null multimodal tokenizer has ``--vocab-size`` + 1 rows (its end-of-document token), which the
    GPU node pads; the stand-in, padded on its own beside ``embedded_vocabulary``, padded ``--vocab-size`` alone: a
    multiple of the divisor x TP short there. A tokenizer that gives its own vocabulary keeps the stand-in."""
    import argparse

    from megatron.oellm.recipes.megatron_validation import pad_vocab_as_megatron

    tp, divisor = random.choice([1, 2, 4]), random.choice([64, 128])
    vocab = divisor * tp * random.randint(2, 400)
    args = argparse.Namespace(padded_vocab_size=None, vocab_size=vocab, tokenizer_type="NullMultimodalTokenizer",
                              tensor_model_parallel_size=tp, make_vocab_size_divisible_by=divisor)
    pad_vocab_as_megatron(args)
    assert args.padded_vocab_size == vocab + divisor * tp
    args = argparse.Namespace(padded_vocab_size=None, vocab_size=vocab + random.randint(1, divisor * tp - 1),
                              tokenizer_type="HuggingFaceTokenizer", tensor_model_parallel_size=tp,
                              make_vocab_size_divisible_by=divisor)
    pad_vocab_as_megatron(args)
    assert args.padded_vocab_size == vocab + divisor * tp


def test_the_vocabulary_stand_in_keeps_a_padded_vocabulary_and_pads_one_row_without_a_vocab_size():
    """A ``padded_vocab_size`` already set (a checkpoint's) is kept; without ``--vocab-size`` the stand-in is one row
    padded to ``--make-vocab-size-divisible-by`` x TP, as megatron pads."""
    import argparse

    from megatron.oellm.recipes.megatron_validation import pad_vocab_as_megatron

    padded = random.randint(1000, 200000)
    args = argparse.Namespace(padded_vocab_size=padded, vocab_size=random.randint(2, 999),
                              tensor_model_parallel_size=random.choice([1, 2, 4]), make_vocab_size_divisible_by=128)
    pad_vocab_as_megatron(args)
    assert args.padded_vocab_size == padded
    divisor, tp = random.choice([3, 5, 7, 9, 11, 13, 33, 63]), random.choice([1, 2])
    args = argparse.Namespace(padded_vocab_size=None, vocab_size=None, tensor_model_parallel_size=tp,
                              make_vocab_size_divisible_by=divisor)
    pad_vocab_as_megatron(args)
    assert args.padded_vocab_size == divisor * tp


def test_megatrons_validation_off_a_gpu_node_is_rank_0s(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a GPU node megatron's ``parse_and_validate_args`` runs as rank 0 of the job's world size, as the job's
    rank 0 validates the line (megatron reads its rank from ``RANK``): the validated arguments say rank 0, whatever
    ``RANK`` this shell exports (mutation audit 17)."""
    from megatron.oellm.recipes.megatron_validation import parse_and_validate_on_cluster
    from megatron.oellm.training.args import add_oellm_arguments, merge_card_flags

    world_size = random.choice([2, 4, 8])  # data-parallel sizes the tiny run's global batch of 8 divides into
    monkeypatch.setenv("RANK", str(random.randint(1, world_size - 1)))
    monkeypatch.setattr(sys, "argv", ["pretrain", *merge_card_flags(_tiny_run()).argv])
    args = parse_and_validate_on_cluster(world_size, extra_args_provider=add_oellm_arguments)
    assert (args.rank, args.world_size) == (0, world_size)
