"""GTP weight sharding (``--tensor-parallel-num-weight-shards`` / ``--expert-tensor-parallel-num-weight-shards``)
on the torch-native backend: weight sharding beyond tensor parallelism is refused before Megatron initialises
(each refusal test fails if the torch backend accepts it); the passing case keeps the check from refusing shard
counts that add no GTP group (CPU only).

megatron-core 0.19.2 shards weights beyond tensor parallelism over a GTP group and gathers them with Transformer
Engine (its ``gtp_api``: "GTP depends on TransformerEngine"); the torch-native grouped experts keep whole weights.
The torch backend used to pass every start-up check with either flag and then build experts that ignore the expert
sharding (the whole stacked weights on every rank of the GTP group, under replica ids that do not tell the group's
ranks apart) and dense linears whose first forward step fails, after Megatron had initialised.
"""

import random

import pytest
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.oellm.backends import selection

CARD = "qwen3-30b-a3b-tiny"


def _parsed(*flags: str):
    """Megatron's parsed arguments of the tiny Qwen3 card's flags plus ``flags`` (not validated)."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.megatron_args import flags_to_argv, megatron_parser, model_flags

    return megatron_parser().parse_args([*flags_to_argv(model_flags(get_card(CARD))), *flags])


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--tensor-parallel-num-weight-shards", "2"], "--tensor-parallel-num-weight-shards 2"),
        (["--expert-tensor-parallel-num-weight-shards", "2"], "--expert-tensor-parallel-num-weight-shards 2"),
        (["--tensor-model-parallel-size", "2", "--tensor-parallel-num-weight-shards", "4"],
         "--tensor-parallel-num-weight-shards 4"),
    ],
)
def test_torch_backend_refuses_weight_sharding_beyond_tensor_parallelism(flags: list[str], named: str) -> None:
    """Either flag above its tensor-parallel size is refused from the arguments, naming the flag and its value."""
    with pytest.raises(ValueError, match=rf"weights sharded beyond tensor parallelism \({named}:.*drop it"):
        selection.check_args_support("torch", _parsed(*flags))


def test_shards_equal_to_the_tensor_parallel_size_shard_nothing_more_and_pass() -> None:
    """A shard count equal to its tensor-parallel size (the default it resolves to) adds no GTP group."""
    selection.check_args_support("torch", _parsed("--tensor-model-parallel-size", "2", "--sequence-parallel",
                                                  "--tensor-parallel-num-weight-shards", "2",
                                                  "--expert-tensor-parallel-size", "2",
                                                  "--expert-tensor-parallel-num-weight-shards", "2"))
    selection.check_args_support("torch", _parsed())


def test_expert_shards_equal_to_the_tensor_parallel_size_pass_with_the_expert_size_unset() -> None:
    """The entry checks the arguments before Megatron resolves an unset ``--expert-tensor-parallel-size`` to the
    tensor-parallel size, so expert shards equal to that size (megatron-core's validation accepts them: no GTP group)
    must be compared with it, not with 1."""
    tp = random.choice([2, 4])
    args = _parsed("--tensor-model-parallel-size", str(tp), "--sequence-parallel",
                   "--expert-tensor-parallel-num-weight-shards", str(tp))
    assert args.expert_tensor_parallel_size is None
    selection.check_args_support("torch", args)


def test_config_support_refuses_the_resolved_gtp_sizes() -> None:
    """A TransformerConfig (megatron-core resolves the shard counts into GTP sizes) is judged the same way."""
    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4, normalization="RMSNorm",
                apply_rope_fusion=False, gradient_accumulation_fusion=False)
    selection.check_config_support("torch", TransformerConfig(**base))
    config = TransformerConfig(**base, expert_tensor_parallel_num_weight_shards=2)
    assert config.expert_gtp_weight_remat_size == 2
    with pytest.raises(ValueError, match=r"--expert-tensor-parallel-num-weight-shards 2"):
        selection.check_config_support("torch", config)


def test_the_entry_refuses_weight_sharding_before_megatron_initialises() -> None:
    """The training entry's own argument check (parsed and validated, two GPUs) carries the refusal."""
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster

    with pytest.raises(ValueError, match=r"--expert-tensor-parallel-num-weight-shards 2"):
        validate_on_cluster(
            ["--oellm-model", CARD, "--oellm-backend", "torch", "--expert-tensor-parallel-num-weight-shards", "2",
             "--micro-batch-size", "1", "--global-batch-size", "8", "--seq-length", "128", "--bf16"],
            2, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
        )
