"""Spec-builder behaviour a mutation audit found untested (CPU only): the card fields that reach the config only when
a card departs from the shipped ones (tied embeddings, router pre-softmax, GDN head shapes), the runtime defaults of
a config built from a card alone, and the half-precision switches derived from the parameter dtype."""

import dataclasses
import random
import re

import pytest
import torch

import megatron.oellm  # noqa: F401  (3.11 provision before megatron-core imports)
from megatron.oellm.cards import get_card
from megatron.oellm.models import spec_builder
from tests.unit_tests.cpu_megatron import cpu_model_building, cpu_torch_model, gloo_world

TINY = ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"]


@pytest.mark.parametrize("name", TINY)
def test_tied_embeddings_follow_the_card(name: str) -> None:
    """``untie_embeddings`` decides whether the output layer has its own matrix: an untied card's model holds
    ``output_layer.weight`` beside the embedding (what its HF checkpoint has), a tied card's model reuses the
    embedding and has no output-layer weight of its own."""
    card = get_card(name)
    for untie in (True, False):
        variant = dataclasses.replace(card, untie_embeddings=untie)
        with gloo_world(), cpu_model_building():
            model = cpu_torch_model(variant)
        assert model.share_embeddings_and_output_weights is (not untie)
        state = model.state_dict()
        assert ("output_layer.weight" in state) is untie
        assert "embedding.word_embeddings.weight" in state


@pytest.mark.parametrize("name", TINY)
def test_a_config_built_from_a_card_alone_routes_in_fp32(name: str) -> None:
    """Tests and bench build configs from a card alone (no Megatron arguments); their runtime defaults are an fp32
    router, no dropout and no fused kernels the torch backend lacks: a bf16 model's router then gates bf16 inputs in
    fp32 (logits in fp32)."""
    card = get_card(name)
    builder = spec_builder(card.family)
    config = builder.transformer_config(card)
    assert config.moe_router_dtype == "fp32"
    assert config.hidden_dropout == 0.0 and config.attention_dropout == 0.0
    assert not config.bias_activation_fusion and not config.apply_rope_fusion
    with gloo_world(), cpu_model_building():
        model = cpu_torch_model(card, params_dtype=torch.bfloat16)
    router = next(module for name_, module in model.named_modules() if name_.endswith("mlp.router"))
    with torch.no_grad():
        router.weight.normal_()
    logits = router.gating(torch.randn(5, card.hidden_size).bfloat16())
    assert logits.dtype == torch.float32 and logits.shape == (5, card.num_experts)


@pytest.mark.parametrize("name", TINY)
def test_router_and_aux_loss_fields_follow_the_card(name: str) -> None:
    """The router's pre-softmax choice and the auxiliary-loss coefficient are the card's (a card with another value
    than megatron-core's defaults, False and 0, keeps its own), so routing and the load-balancing loss are the
    model's."""
    card = get_card(name)
    coefficient = random.uniform(1e-4, 1e-1)
    for pre_softmax in (True, False):
        variant = dataclasses.replace(card, moe_router_pre_softmax=pre_softmax, moe_aux_loss_coeff=coefficient)
        config = spec_builder(card.family).transformer_config(variant)
        assert config.moe_router_pre_softmax is pre_softmax
        assert config.moe_aux_loss_coeff == pytest.approx(coefficient)


def test_gdn_head_shapes_follow_the_card_field_by_field() -> None:
    """The Gated DeltaNet's key and value head dimensions, head counts and convolution width reach the config each
    from its own card field (the shipped cards have equal key and value dimensions and megatron-core's default
    width, which would hide a swap or a dropped field)."""
    card = get_card("qwen3.5-35b-a3b-tiny")
    key_dim, value_dim = random.sample([8, 16, 24, 32], 2)
    kernel = random.choice([2, 3, 5, 6])  # not megatron-core's default 4, which the shipped cards use
    variant = dataclasses.replace(card, linear_key_head_dim=key_dim, linear_value_head_dim=value_dim,
                                  linear_conv_kernel_dim=kernel)
    config = spec_builder(card.family).transformer_config(variant)
    assert (config.linear_key_head_dim, config.linear_value_head_dim) == (key_dim, value_dim)
    assert (config.linear_num_key_heads, config.linear_num_value_heads) == (card.linear_num_key_heads,
                                                                            card.linear_num_value_heads)
    assert config.linear_conv_kernel_dim == kernel


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("params_dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_the_half_precision_switches_follow_the_parameter_dtype(name: str, params_dtype: torch.dtype) -> None:
    """``params_dtype`` sets megatron's ``fp16`` / ``bf16`` switches (which pick the loss scaler and the attention's
    input dtype) and the pipeline's communication dtype: fp16 parameters train as fp16, not as fp32."""
    card = get_card(name)
    config = spec_builder(card.family).transformer_config(card, params_dtype=params_dtype)
    assert config.params_dtype == config.pipeline_dtype == params_dtype
    assert config.fp16 is (params_dtype == torch.float16)
    assert config.bf16 is (params_dtype == torch.bfloat16)


@pytest.mark.parametrize("name", TINY)
def test_a_card_without_qk_norm_builds_attention_without_qk_norms(name: str) -> None:
    """``qk_layernorm=False`` leaves the query/key norm slots empty: megatron-core builds whatever module the spec
    names there, so a card without QK-norm would otherwise get norm weights its checkpoint lacks. The card with it
    (as shipped) has them."""
    card = get_card(name)
    for qk_norm in (False, True):
        variant = dataclasses.replace(card, qk_layernorm=qk_norm)
        with gloo_world(), cpu_model_building():
            model = cpu_torch_model(variant)
        names = [key for key in model.state_dict() if "self_attention" in key]
        assert any(".linear_qkv." in key for key in names)
        assert any(key.endswith("q_layernorm.weight") for key in names) is qk_norm
        assert any(key.endswith("k_layernorm.weight") for key in names) is qk_norm


def test_a_layout_of_exactly_the_expansion_limit_is_parsed() -> None:
    """The expansion limit is inclusive: a layout that expands to exactly ``MAX_EXPANDED_LAYOUT`` symbols (a repeat
    after a random prefix that fills it up) parses, one symbol more is refused naming the limit."""
    from megatron.oellm.models.parallel import MAX_EXPANDED_LAYOUT, ParallelLayoutError, parse_pipeline_layout

    prefix = "E" * random.randint(0, 3)
    count = MAX_EXPANDED_LAYOUT - len(prefix)
    (stage,) = parse_pipeline_layout(f"{prefix}t*{count}")
    assert len(stage) == MAX_EXPANDED_LAYOUT and stage.count("decoder") == count
    with pytest.raises(ParallelLayoutError, match=f"expands it past {MAX_EXPANDED_LAYOUT:,} symbols"):
        parse_pipeline_layout(f"{prefix}t*{count + 1}")


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "qwen3.5-35b-a3b"])
def test_an_explicit_vpp_of_one_is_the_same_as_unset(name: str) -> None:
    """``vpp=1`` (one virtual stage per pipeline rank, what a recipe may write out) is valid and builds the same
    config as leaving it unset: no interleaving."""
    from megatron.oellm.models.parallel import ParallelLayout, validate_layout

    card = get_card(name)
    pp = random.choice([1, 2, 4])
    explicit, unset = ParallelLayout(pp=pp, vpp=1), ParallelLayout(pp=pp)
    validate_layout(card, explicit)
    assert explicit.vpp_size == 1
    assert explicit.decoder_layers_per_stage(card.num_layers) == unset.decoder_layers_per_stage(card.num_layers)
    builder = spec_builder(card.family)
    for layout in (explicit, unset):
        assert builder.transformer_config(card, layout).virtual_pipeline_model_parallel_size is None


def test_a_hybrid_stage_of_half_a_decoder_layer_is_refused() -> None:
    """Each decoder layer of a hybrid pattern is two symbols (mixer, then its MoE block ``E``): a stage boundary
    inside a layer cannot become a pipeline layout and is refused, naming the stage; whole layers give the layout
    with the embedding first and the loss last."""
    from megatron.oellm.models.parallel import ParallelLayoutError, pipeline_layout_from_hybrid_pattern

    layers = [random.choice("G*") + "E" for _ in range(random.randint(2, 5))]
    cut = random.randint(1, len(layers) - 1)
    whole = "".join(layers[:cut]) + "|" + "".join(layers[cut:])
    assert pipeline_layout_from_hybrid_pattern(whole) == f"Et*{cut}|t*{len(layers) - cut}L"
    assert pipeline_layout_from_hybrid_pattern(whole.replace("|", "")) is None
    split = "".join(layers)[: 2 * cut + 1]
    rest = "".join(layers)[2 * cut + 1:]
    with pytest.raises(ParallelLayoutError, match=re.escape(f"hybrid pattern stage {split!r} is not whole decoder layers")):
        pipeline_layout_from_hybrid_pattern(f"{split}|{rest}")
