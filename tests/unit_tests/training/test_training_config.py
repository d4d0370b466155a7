"""The run's megatron configuration container, built by the training entry before Megatron initialises: megatron-core's
``OptimizerConfig`` refuses optimizer precision flags ``validate_args`` accepts, which was a traceback on every rank
when ``pretrain`` was called and is now one error line."""

import argparse
import itertools
import sys
import types
import warnings

import pytest
import torch

from megatron.oellm.recipes.megatron_validation import validate_args_on_cluster
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.entry import training_config, with_fused_adam_answered

BASE = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--micro-batch-size", "1",
        "--global-batch-size", "8", "--seq-length", "64", "--train-iters", "10", "--lr", "1e-4", "--mock-data", "--bf16"]


def _validated(extra: list[str]):
    """megatron's validated arguments of ``BASE`` + ``extra`` (``validate_args`` accepts each case below)."""
    from megatron.core.num_microbatches_calculator import unset_num_microbatches_calculator

    argv = [*BASE, *extra]
    merged = merge_card_flags(argv)
    args = validate_args_on_cluster(parse_oellm_argv(merged.argv if merged else argv), world_size=1)
    unset_num_microbatches_calculator()
    return args


@pytest.mark.parametrize(("extra", "message"), [
    (["--exp-avg-dtype", "bf16"], "exp_avg_dtype can only be fp32 when not using precision-aware optimizer"),
    (["--exp-avg-sq-dtype", "fp16"], "exp_avg_sq_dtype can only be fp32 when not using precision-aware optimizer"),
    (["--main-params-dtype", "fp16"], "main_params_dtype can only be fp32 when not using precision-aware optimizer"),
    (["--use-precision-aware-optimizer"], "--use-precision-aware-optimizer only supported with distributed optimizer"),
])
def test_optimizer_precision_flags_megatron_core_refuses_are_one_error(extra, message):
    """Each passes ``validate_args``; building the container raises the entry's one-line ``ValueError``, megatron-core's
    reason inside."""
    args = _validated(extra)
    with pytest.raises(ValueError, match="^megatron's training configuration refuses the run's arguments: ") as refused:
        training_config(args)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_the_valid_run_gets_megatrons_container_without_its_model_config_warning():
    """The plain run and the precision-aware optimizer's own dtypes with the distributed optimizer build (the latter
    needs Transformer Engine's FusedAdam: refused, naming it, where Transformer Engine is absent); megatron's advice to
    pass a ModelConfig (the entry builds its models through a provider on purpose) is not printed."""
    from megatron.training.config import PretrainConfigContainer

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        container = training_config(_validated([]))
    assert isinstance(container, PretrainConfigContainer)
    assert not [w for w in caught if "ModelConfig" in str(w.message)]
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="requires FusedAdam from TransformerEngine"):
            training_config(_validated(["--use-precision-aware-optimizer", "--use-distributed-optimizer"]))


TE_OPTIMIZERS = "transformer_engine.pytorch.optimizers"
"""The module megatron-core's ``OptimizerConfig`` imports Transformer Engine's FusedAdam from."""

OPTIMIZER_GRID = {
    "optimizer": ["adam", "sgd"],
    "use_distributed_optimizer": [False, True],
    "use_precision_aware_optimizer": [False, True],
    "optimizer_cpu_offload": [False, True],
    "main_grads_dtype": [torch.float32, torch.bfloat16],
    "main_params_dtype": [torch.float32, torch.float16],
    "exp_avg_dtype": [torch.float32, torch.bfloat16],
    "exp_avg_sq_dtype": [torch.float32, torch.uint8],
    "fp8_recipe": [None, "delayed", "mxfp8"],
    "reuse_grad_buf_for_mxfp8_param_ag": [False, True],
    "overlap_param_gather_with_optimizer_step": [False, True],
}
"""Values of the optimizer fields megatron-core's ``OptimizerConfig`` checks (its dtype fields as ``validate_args``
leaves them: torch dtypes); every combination is compared."""


def _fused_adam_stand_in(master_weight_dtype=torch.float32, exp_avg_dtype=torch.float32,
                         exp_avg_sq_dtype=torch.float32, use_decoupled_grad=False) -> None:
    """The signature of the cluster's Transformer Engine FusedAdam, as megatron-core inspects it for the
    precision-aware optimizer (its precision arguments); never called."""


def _optimizer_verdict(args: argparse.Namespace) -> str | None:
    """megatron-core's refusal of the optimizer configuration of ``args`` (None where it accepts them), built as
    ``pretrain``'s container builds it."""
    from megatron.training.training import get_megatron_optimizer_config

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the mxfp8 advice
            get_megatron_optimizer_config(args)
    except (AssertionError, ValueError, RuntimeError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def test_off_a_gpu_node_megatrons_optimizer_checks_give_the_gpu_nodes_verdicts(monkeypatch: pytest.MonkeyPatch):
    """The login node builds megatron's container from :func:`with_fused_adam_answered` with no Transformer Engine to
    import; a GPU node builds it from the arguments as given, its Transformer Engine's FusedAdam importing. On every
    combination of the grid the two verdicts of megatron-core's ``OptimizerConfig`` are the same: a megatron-core
    that checks more than FusedAdam's import behind its ``optimizer_cpu_offload`` question fails this test."""
    combinations = [argparse.Namespace(**dict(zip(OPTIMIZER_GRID, values, strict=True)))
                    for values in itertools.product(*OPTIMIZER_GRID.values())]
    given = [dict(vars(args)) for args in combinations]
    monkeypatch.setitem(sys.modules, TE_OPTIMIZERS, None)  # a login node: the import fails
    off_gpu = [_optimizer_verdict(with_fused_adam_answered(args)) for args in combinations]
    assert [vars(args) for args in combinations] == given  # answered on a copy: the run's arguments are as given
    cluster_te = types.ModuleType(TE_OPTIMIZERS)
    cluster_te.FusedAdam = _fused_adam_stand_in
    monkeypatch.setitem(sys.modules, TE_OPTIMIZERS, cluster_te)
    on_gpu = [_optimizer_verdict(args) for args in combinations]
    disagreements = [(vars(args), here, there) for args, here, there in zip(combinations, off_gpu, on_gpu, strict=True)
                     if here != there]
    assert not disagreements, disagreements[:3]
    refusals = {verdict for verdict in on_gpu if verdict is not None}
    assert len(refusals) >= 6 and None in on_gpu, refusals  # the grid reaches megatron-core's refusals and passes
