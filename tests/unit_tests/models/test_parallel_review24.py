"""Layout checks found in review (session 24), each compared with megatron-core 0.19.2 on the CPU."""

import dataclasses

import pytest
import torch

import megatron.oellm  # noqa: F401  (3.11 provision before megatron-core imports)
from megatron.oellm.cards import get_card
from megatron.oellm.models.parallel import ParallelLayout, ParallelLayoutError, validate_layout

CARDS = ["qwen3.5-35b-a3b", "qwen3-30b-a3b", "qwen3-235b-a22b"]


def _megatron_refusal(card, tp: int) -> str | None:
    """What megatron-core's ``TransformerConfig`` says about ``card``'s attention (and GDN) heads at ``tp``: None when
    it accepts them. The GDN checks of 0.19.2 run under ``experimental_attention_variant="gated_delta_net"``."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    gdn = {}
    if card.linear_mixer != "none":
        gdn = dict(experimental_attention_variant="gated_delta_net", linear_attention_freq=4,
                   linear_conv_kernel_dim=card.linear_conv_kernel_dim, linear_key_head_dim=card.linear_key_head_dim,
                   linear_value_head_dim=card.linear_value_head_dim, linear_num_key_heads=card.linear_num_key_heads,
                   linear_num_value_heads=card.linear_num_value_heads)
    try:
        TransformerConfig(num_layers=card.num_layers, hidden_size=card.hidden_size,
                          num_attention_heads=card.num_attention_heads, num_query_groups=card.num_query_groups,
                          kv_channels=card.kv_channels, tensor_model_parallel_size=tp, sequence_parallel=tp > 1,
                          params_dtype=torch.bfloat16, bf16=True, **gdn)
    except (AssertionError, ValueError) as error:
        return str(error)
    return None


@pytest.mark.parametrize("name", CARDS)
def test_tensor_parallel_sizes_match_megatron(name: str) -> None:
    """megatron-core 0.19.2 accepts a TP size that is a multiple of the KV heads (``TransformerConfig``: "must be a
    multiple or divisor"), and ``SelfAttention`` replicates each KV head over ``tp / num_query_groups`` ranks. The
    layout check refused it ("each TP rank needs whole KV heads"): Qwen3-235B-A22B (4 KV heads) at TP 8, Qwen3.5 at
    TP 4."""
    card = get_card(name)
    for tp in range(1, 2 * card.num_attention_heads + 1):
        try:
            validate_layout(card, ParallelLayout(tp=tp, sp=tp > 1))
            ours = None
        except ParallelLayoutError as error:
            ours = str(error)
        theirs = _megatron_refusal(card, tp)
        assert (ours is None) == (theirs is None), f"tp={tp}: ours {ours!r}, megatron {theirs!r}"


def test_tensor_parallel_neither_multiple_nor_divisor_of_kv_heads_is_refused() -> None:
    """12 heads, 4 KV heads: TP 6 splits the heads but neither holds whole KV heads nor replicates them evenly."""
    card = dataclasses.replace(get_card("qwen3-30b-a3b"), name="x", num_attention_heads=12, num_query_groups=4,
                               seq_length=4104)
    assert _megatron_refusal(card, 6) is not None
    with pytest.raises(ParallelLayoutError, match=r"num_query_groups \(KV heads\) \(4\).*tp \(6\).*use tp in \{1, 2, 4, 12\}"):
        validate_layout(card, ParallelLayout(tp=6, sp=True))
    validate_layout(card, ParallelLayout(tp=12, sp=True))
