"""Spec-builder behaviour a tenth mutation audit found untested (CPU only): the language-model arguments (RoPE,
context, vocabulary, tied output layer) and the config fields of the published cards checked against the published
Hugging Face configs and the reference report's model description, the RoPE and causal attention of a built model,
and the backend check of ``build_model``."""

import dataclasses
import random

import pytest
import torch

import megatron.oellm  # noqa: F401  (3.11 provision before megatron-core imports)
from megatron.oellm.cards import get_card
from megatron.oellm.models import spec_builder
from tests.unit_tests.card_helpers import PUBLISHED_CONFIGS
from tests.unit_tests.cpu_megatron import cpu_model_building, cpu_torch_model, gloo_world

TINY = ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"]

QWEN3_5_REFERENCE = dict(attention_output_gate=True, layernorm_zero_centered_gamma=True, moe_shared_expert_gate=True,
                         moe_router_load_balancing_type="global_aux_loss", moe_aux_loss_coeff=1e-3)
"""What /work/shared/reference's Qwen3.5-35B-A3B description states beyond its config.json: "gated attention",
"zero-centred norm", "gated shared 512", "global aux loss" with "coefficient 1e-3"."""


def _hf_text_config(name: str) -> tuple[dict, dict]:
    """(the published config.json, its language-model part) of card ``name``."""
    published = PUBLISHED_CONFIGS[name]
    return published, published.get("text_config", published)


def _rope(text: dict) -> tuple[float, float]:
    """(rope_theta, partial_rotary_factor) of a published text config (transformers' default factor 1)."""
    parameters = text.get("rope_parameters") or {}
    return parameters.get("rope_theta", text.get("rope_theta")), parameters.get("partial_rotary_factor", 1.0)


@pytest.mark.parametrize("name", sorted(PUBLISHED_CONFIGS))
def test_language_model_arguments_of_the_published_cards_are_the_hf_configs(name: str) -> None:
    """The arguments every built model gets (vocabulary, context length, RoPE base and fraction, tied or untied
    output layer) are those of the published checkpoint: another RoPE base or fraction, or a tied output layer,
    would train a model the published weights do not describe."""
    from megatron.oellm.models.building_blocks import language_model_kwargs

    published, text = _hf_text_config(name)
    pre, post = random.choice([True, False]), random.choice([True, False])
    kwargs = language_model_kwargs(get_card(name), pre, post, None)
    theta, factor = _rope(text)
    assert kwargs["vocab_size"] == text["vocab_size"]
    assert kwargs["max_sequence_length"] == text["max_position_embeddings"]
    assert kwargs["share_embeddings_and_output_weights"] is published["tie_word_embeddings"]
    assert kwargs["position_embedding_type"] == "rope"
    assert kwargs["rotary_base"] == theta and kwargs["rotary_percent"] == factor
    assert (kwargs["pre_process"], kwargs["post_process"]) == (pre, post)


@pytest.mark.parametrize("name", sorted(PUBLISHED_CONFIGS))
def test_config_of_the_published_cards_is_the_hf_config(name: str) -> None:
    """The TransformerConfig of each published card computes the published model: norm epsilon, attention and
    expert shapes, the SwiGLU activation (``hidden_act`` applied to fresh random inputs, so a GELU in its place
    shows), and for Qwen3.5 the features the reference report names (gated attention, zero-centred norms, gated
    shared expert, global aux loss of coefficient 1e-3); Qwen3-MoE has none of them."""
    from transformers.activations import ACT2FN

    _, text = _hf_text_config(name)
    card = get_card(name)
    config = spec_builder(card.family).transformer_config(card)
    assert config.layernorm_epsilon == text["rms_norm_eps"] and config.normalization == "RMSNorm"
    assert (config.hidden_size, config.num_attention_heads, config.num_query_groups, config.kv_channels) == (
        text["hidden_size"], text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"])
    assert (config.num_moe_experts, config.moe_router_topk, config.moe_ffn_hidden_size) == (
        text["num_experts"], text["num_experts_per_tok"], text["moe_intermediate_size"])
    assert config.moe_shared_expert_intermediate_size == text.get("shared_expert_intermediate_size")
    assert config.gated_linear_unit and not config.add_bias_linear and config.qk_layernorm
    x = torch.randn(64) * 4
    torch.testing.assert_close(config.activation_func(x), ACT2FN[text["hidden_act"]](x), rtol=0, atol=0)
    if card.family == "qwen3_5":
        assert {field: getattr(config, field) for field in QWEN3_5_REFERENCE} == pytest.approx(QWEN3_5_REFERENCE)
    else:
        assert not (config.attention_output_gate or config.layernorm_zero_centered_gamma
                    or config.moe_shared_expert_gate)
        assert config.moe_aux_loss_coeff == pytest.approx(text["router_aux_loss_coef"])


@pytest.mark.parametrize("name", TINY)
def test_a_card_without_qk_norm_gets_a_config_without_it(name: str) -> None:
    """``qk_layernorm`` reaches the config from the card (megatron-core reads the config's flag, e.g. in its own
    spec helpers): a card without QK-norm must not be described as having it, nor a card with it as not."""
    card = get_card(name)
    for qk_norm in random.sample([True, False], 2):
        config = spec_builder(card.family).transformer_config(dataclasses.replace(card, qk_layernorm=qk_norm))
        assert config.qk_layernorm is qk_norm


@pytest.mark.parametrize("name", TINY)
def test_the_built_models_rope_is_the_hf_models(name: str) -> None:
    """A built model rotates queries and keys as the transformers model of its card does: the same inverse
    frequencies (RoPE base and, for Qwen3.5, partial rotary fraction, both drawn at random and off the
    transformers defaults) and the card's context
    length. A fixed fraction or base would pass every config test and still train another model."""
    from transformers import AutoModelForCausalLM

    from megatron.oellm.convert.family import family_module

    card = get_card(name)
    fraction = random.choice([0.5, 0.75]) if card.family == "qwen3_5" else 1.0  # not transformers' 0.25 default
    variant = dataclasses.replace(card, rotary_percent=fraction, rotary_base=float(random.randint(5_000, 5_000_000)),
                                  max_position_embeddings=random.randint(64, 4096))
    with gloo_world(), cpu_model_building():
        model = cpu_torch_model(variant)
    hf = AutoModelForCausalLM.from_config(family_module(variant).hf_config_from_card(variant))
    hf_inv_freq = hf.model.rotary_emb.inv_freq
    assert model.position_embedding_type == "rope"
    assert model.max_sequence_length == variant.max_position_embeddings
    assert model.rotary_pos_emb.inv_freq.shape == hf_inv_freq.shape == (int(card.kv_channels * fraction) // 2,)
    torch.testing.assert_close(model.rotary_pos_emb.inv_freq.float(), hf_inv_freq.float(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", TINY)
def test_the_built_models_attention_is_causal(name: str) -> None:
    """Softmax attention of a built model is causal: changing the token at a random position leaves every earlier
    position's output exactly as it was and changes that position's (fresh random weights and inputs). An
    unmasked attention would let each token see the ones it is trained to predict."""
    card = get_card(name)
    layer = card.hybrid_layer_pattern.index("*") if card.family == "qwen3_5" else 0
    with gloo_world(), cpu_model_building():
        model = cpu_torch_model(card)
        attention = model.decoder.layers[layer].self_attention
        with torch.no_grad():
            for parameter in attention.parameters():
                parameter.normal_(0.0, 0.1)
            tokens = random.randint(4, 12)
            changed = random.randrange(1, tokens)
            hidden = torch.randn(tokens, 1, card.hidden_size)
            other = hidden.clone()
            other[changed] = torch.randn(card.hidden_size)
            rope = model.rotary_pos_emb(tokens)
            before = attention(hidden, attention_mask=None, rotary_pos_emb=rope)[0]
            after = attention(other, attention_mask=None, rotary_pos_emb=rope)[0]
    assert torch.equal(before[:changed], after[:changed])
    assert not torch.allclose(before[changed], after[changed])


@pytest.mark.parametrize("name", TINY)
def test_build_model_refuses_a_config_its_backend_cannot_run(name: str) -> None:
    """``build_model`` checks a given config against the named backend before building: a sliding window on the
    torch backend stops with the backend's refusal naming the setting, not with a model that ignores it."""
    card = get_card(name)
    builder = spec_builder(card.family)
    config = builder.transformer_config(card, window_size=(random.randint(16, 512), 0), use_cpu_initialization=True,
                                        perform_initialization=False)
    with gloo_world(), cpu_model_building():
        with pytest.raises(ValueError, match=r"the torch-native backend cannot run: sliding-window attention "
                                             r"\(window_size\)"):
            builder.build_model(card, backend="torch", config=config)


@pytest.mark.parametrize("name", TINY)
def test_every_norm_of_the_built_model_uses_the_hf_models_epsilon(name: str) -> None:
    """Each RMSNorm of a built model (input norms fused into linears, QK norms, pre-MLP norms, Gated DeltaNet output
    norms, the final norm) divides by ``sqrt(mean + eps)`` with the epsilon of the transformers model of its card
    (drawn at random): a norm left at its module default (1e-5) computes another function than the HF norm."""
    from transformers import AutoModelForCausalLM

    from megatron.oellm.convert.family import family_module

    card = get_card(name)
    variant = dataclasses.replace(card, norm_epsilon=random.choice([1e-7, 3e-6, 2e-5]))
    with gloo_world(), cpu_model_building():
        model = cpu_torch_model(variant)
    hf = AutoModelForCausalLM.from_config(family_module(variant).hf_config_from_card(variant))
    hf_eps = {module.variance_epsilon for module in hf.modules() if hasattr(module, "variance_epsilon")}
    eps = {name_: getattr(module, "eps", getattr(module, "layer_norm_eps", None)) for name_, module in
           model.named_modules() if hasattr(module, "eps") or hasattr(module, "layer_norm_eps")}
    final = "decoder.final_norm" if card.family == "qwen3_5" else "decoder.final_layernorm"
    assert final in eps and len(eps) > card.num_layers
    assert hf_eps == {variant.norm_epsilon}
    assert set(eps.values()) == hf_eps, {key: value for key, value in eps.items() if value not in hf_eps}


def test_build_model_gives_the_hybrid_model_the_pattern_with_its_pipeline_stages(monkeypatch) -> None:
    """A pipelined Qwen3.5 model is split by the ``|`` of its hybrid pattern (megatron-core reads no other layout for
    a ``HybridModel``): ``build_model`` must hand the model the pattern with the layout's stage boundaries, else
    every pipeline rank would build the whole model."""
    from megatron.core.models.backends import LocalSpecProvider

    from megatron.oellm.models.parallel import ParallelLayout
    from megatron.oellm.models.qwen3_5 import spec

    card = get_card("qwen3.5-35b-a3b-tiny")
    cut = random.randint(1, card.num_layers - 1)
    layout = ParallelLayout(pp=2, pipeline_layout=f"Et*{cut}|t*{card.num_layers - cut}L")
    built = {}
    monkeypatch.setattr(spec, "OellmHybridModel", lambda **kwargs: built.update(kwargs))
    spec.build_model(card, layout, LocalSpecProvider())
    stages = built["hybrid_layer_pattern"].split("|")
    assert [len(stage) // 2 for stage in stages] == [cut, card.num_layers - cut]
    assert "".join(stages) == card.hybrid_layer_pattern
