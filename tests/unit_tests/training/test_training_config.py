"""The run's megatron configuration container, built by the training entry before Megatron initialises: megatron-core's
``OptimizerConfig`` refuses optimizer precision flags ``validate_args`` accepts, which was a traceback on every rank
when ``pretrain`` was called and is now one error line."""

import warnings

import pytest

from megatron.oellm.recipes.megatron_validation import validate_args_on_cluster
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.entry import training_config

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
