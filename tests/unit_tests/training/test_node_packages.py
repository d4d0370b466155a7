"""Flags that need a package megatron-core 0.19.2 imports only late (wandb, emerging-optimizers,
nvidia-resiliency-ext): each premise is shown on megatron's own function with the package made missing
(``sys.modules[name] = None``), then the training entry refuses the run in one error line before Megatron starts and
lets it through once the package is there (a stand-in module) or the flag is changed."""

import inspect
import random
import sys
import types
import warnings

import pytest

from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, installed_stand_in, refused_line

BASE = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "16", "--mock-data",
        "--micro-batch-size", "1", "--global-batch-size", "8", "--lr", "3e-4", "--train-iters", "500"]
RESILIENCY = "nvidia_resiliency_ext"


def _project() -> str:
    return f"oellm-{random.randint(0, 10**6)}"


def test_a_wandb_project_without_a_directory_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    """megatron puts the wandb files under ``--save``'s ``wandb`` directory by default; with neither ``--save`` nor
    ``--wandb-save-dir`` it joins None while it validates the arguments, a TypeError on the last rank."""
    from megatron.training import global_vars

    installed_stand_in(monkeypatch, "wandb")
    project = _project()
    megatron_args = types.SimpleNamespace(wandb_project=project, wandb_exp_name="run", wandb_save_dir=None, save=None,
                                          rank=3, world_size=4)
    monkeypatch.setattr(global_vars, "_GLOBAL_WANDB_WRITER", None)
    with pytest.raises(TypeError, match="NoneType"):
        global_vars._set_wandb_writer(megatron_args)
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*BASE, "--wandb-project", project])
    assert f"--wandb-project {project} without --wandb-save-dir or --save: megatron-core 0.19.2 writes" in line
    for directory in (["--wandb-save-dir", str(tmp_path / "wandb")],
                      ["--save", str(tmp_path / "save"), "--save-interval", "100"]):
        with pytest.raises(Reached):
            entry.main([*BASE, "--wandb-project", project, *directory])


def test_a_wandb_project_without_the_wandb_package_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    """megatron imports wandb on the last rank while it validates the arguments: without the package that rank
    stops with an ImportError and the others wait."""
    from megatron.training import global_vars

    monkeypatch.setitem(sys.modules, "wandb", None)
    project = _project()
    megatron_args = types.SimpleNamespace(wandb_project=project, wandb_exp_name="run",
                                          wandb_save_dir=str(tmp_path / "wandb"), save=None, rank=1, world_size=2)
    monkeypatch.setattr(global_vars, "_GLOBAL_WANDB_WRITER", None)
    with pytest.raises(ImportError):
        global_vars._set_wandb_writer(megatron_args)
    entry = entry_up_to_pretrain(monkeypatch)
    argv = [*BASE, "--wandb-project", project, "--wandb-save-dir", str(tmp_path / "wandb")]
    line = refused_line(entry, capsys, argv)
    assert f"--wandb-project {project}: the wandb package is not installed in this environment" in line
    installed_stand_in(monkeypatch, "wandb")
    with pytest.raises(Reached):
        entry.main(argv)


@pytest.mark.parametrize("name", ["muon", "dist_muon", "lion", "soap", "adaptive_muon"])
def test_an_emerging_optimizer_without_its_package_is_refused_in_one_line(monkeypatch, capsys, name):
    """megatron builds every optimizer but adam and sgd from emerging-optimizers, and raises ImportError there, after
    the model is built, when its own test of the package (``HAVE_EMERGING_OPTIMIZERS``) failed."""
    from megatron.core import optimizer

    monkeypatch.setattr(optimizer, "HAVE_EMERGING_OPTIMIZERS", False)
    config = types.SimpleNamespace(optimizer=name, use_layer_wise_distributed_optimizer=False)
    with warnings.catch_warnings(), pytest.raises(ImportError, match="emerging-optimizers package is required"):
        warnings.simplefilter("ignore", DeprecationWarning)  # dist_muon's deprecation, before the import check
        optimizer._get_megatron_emerging_optimizer(config, [])
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*BASE, "--optimizer", name])
    assert f"--optimizer {name} needs the emerging-optimizers package (0.2 or later), which is not installed" in line
    for standard in ("adam", "sgd"):
        with pytest.raises(Reached):
            entry.main([*BASE, "--optimizer", standard])
    monkeypatch.setattr(optimizer, "HAVE_EMERGING_OPTIMIZERS", True)
    with pytest.raises(Reached):
        entry.main([*BASE, "--optimizer", name])


def test_an_async_save_strategy_megatron_cannot_load_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    """``--async-strategy`` defaults to nvrx, whose loader megatron asks for at initialisation when the persistent
    checkpoint worker starts: without nvidia-resiliency-ext it raises ModuleNotFoundError; mcore loads everywhere."""
    from megatron.core.dist_checkpointing.strategies.torch import get_async_strategy

    monkeypatch.setitem(sys.modules, RESILIENCY, None)
    with pytest.raises(ModuleNotFoundError, match="nvidia-resiliency-ext"):
        get_async_strategy("nvrx")
    entry = entry_up_to_pretrain(monkeypatch)
    save = ["--save", str(tmp_path / "save"), "--save-interval", str(random.randint(1, 400)), "--async-save",
            "--ckpt-format", "torch_dist", "--use-persistent-ckpt-worker"]
    line = refused_line(entry, capsys, [*BASE, *save])
    assert "--async-save with --async-strategy nvrx: megatron-core 0.19.2 cannot load that strategy" in line
    assert "add --async-strategy mcore or install nvidia-resiliency-ext" in line
    with pytest.raises(Reached):
        entry.main([*BASE, *save, "--async-strategy", "mcore"])
    worker_only = ["--async-save", "--ckpt-format", "torch_dist", "--use-persistent-ckpt-worker"]
    assert "cannot load that strategy" in refused_line(entry, capsys, [*BASE, *worker_only])  # started at init
    with pytest.raises(Reached):  # no worker, nothing saved: megatron never loads the strategy
        entry.main([*BASE, "--async-save", "--ckpt-format", "torch_dist"])


def test_local_non_persistent_checkpoints_without_nvidia_resiliency_ext_are_refused_in_one_line(monkeypatch, capsys, tmp_path):
    """megatron builds the local checkpoint manager from nvidia-resiliency-ext once the process groups are up and
    raises RuntimeError without it; global non-persistent checkpoints need no package."""
    from megatron.training import training

    assert "from nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager import" in inspect.getsource(
        training.pretrain)
    monkeypatch.setitem(sys.modules, RESILIENCY, None)
    entry = entry_up_to_pretrain(monkeypatch)
    save = ["--save", str(tmp_path / "save"), "--save-interval", "100", "--non-persistent-save-interval",
            str(random.randint(1, 99)), "--non-persistent-local-ckpt-dir", str(tmp_path / "local")]
    line = refused_line(entry, capsys, [*BASE, *save, "--non-persistent-ckpt-type", "local"])
    assert line.endswith("--non-persistent-ckpt-type local needs the nvidia-resiliency-ext package, which is not "
                         "installed in this environment: megatron-core 0.19.2 stops with a RuntimeError once the "
                         "process groups are up; install nvidia-resiliency-ext or use --non-persistent-ckpt-type "
                         "global")
    with pytest.raises(Reached):
        entry.main([*BASE, *save, "--non-persistent-ckpt-type", "global"])
