"""Converter maps checked against what users rely on and no round trip can see (gaps found by a mutation audit).

A map that is wrong the same way in both directions (router rows permuted, a checkpoint of another norm convention
taken for this card's) still round-trips bit for bit; these tests compare the converted tensors with an expectation
built independently: transformers' own modules on fresh random float64 weights, or the card the checkpoint was
written for.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert import to_mcore
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import family_module
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, fuse_experts, random_hf_tensors, write_hf

QWEN3, QWEN35 = "qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"
MOE_BLOCKS = {QWEN3: ("qwen3_moe", "Qwen3MoeSparseMoeBlock"), QWEN35: ("qwen3_5_moe", "Qwen3_5MoeSparseMoeBlock")}
"""transformers module and class of each tiny card's sparse-MoE block."""
def router_tolerance(expected: torch.Tensor) -> dict:
    """transformers' router takes its softmax in float32 whatever the weights' dtype, so the routing weights agree to
    float32 precision only: each output may be off by a few float32 steps of the largest expert output (random
    weights give outputs from O(10) to O(1000); 2e-6 is about 16 steps). A token sent to another expert differs by a
    sizeable part of that output."""
    return {"rtol": 1e-5, "atol": 2e-6 * expected.abs().max().item()}


def _megatron_moe(card, mcore: dict, prefix: str, x: torch.Tensor) -> torch.Tensor:
    """The MoE block's output as megatron-core computes it from its tensors under ``prefix`` (``...mlp.``): router
    logits ``x @ router.T``, top-k of them, softmax over the k chosen (``moe_router_pre_softmax=False``), each
    chosen expert's SwiGLU (``silu(first half of fc1) * second half``, then fc2), and with a shared expert its
    output times ``sigmoid(x @ gate_weight.T)``."""
    assert not card.moe_router_pre_softmax
    scores, chosen = torch.topk(x @ mcore[f"{prefix}router.weight"].T, card.moe_router_topk, dim=-1)
    probs = torch.softmax(scores, dim=-1)

    def swiglu(fc1: torch.Tensor, fc2: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        first, second = torch.chunk(rows @ fc1.T, 2, dim=-1)
        return (torch.nn.functional.silu(first) * second) @ fc2.T

    out = torch.zeros_like(x)
    for token in range(x.shape[0]):
        for slot in range(card.moe_router_topk):
            e = int(chosen[token, slot])
            out[token] += probs[token, slot] * swiglu(mcore[f"{prefix}experts.linear_fc1.weight{e}"],
                                                      mcore[f"{prefix}experts.linear_fc2.weight{e}"], x[token])
    if card.moe_shared_expert_intermediate_size:
        shared = f"{prefix}shared_experts."
        out += (torch.sigmoid(x @ mcore[f"{shared}gate_weight"].T)
                * swiglu(mcore[f"{shared}linear_fc1.weight"], mcore[f"{shared}linear_fc2.weight"], x))
    return out


@pytest.mark.parametrize("name", [QWEN3, QWEN35])
def test_every_moe_block_computes_what_the_hf_block_computes(name: str) -> None:
    """Each converted MoE layer (router, routed experts, shared expert) against transformers' own sparse-MoE block
    loaded with the HF tensors, on fresh random float64 weights and tokens. The router's rows must stay with their
    experts: rows permuted the same way in both directions round-trip bit for bit and load into megatron, yet send
    every token to other experts than the HF model does."""
    import importlib

    card = get_card(name)
    module = family_module(card)
    seed = int(torch.randint(0, 2**31, ()))
    hf = random_hf_tensors(card, dtype=torch.float64, seed=seed)
    mcore = module.hf_to_mcore(card, hf)
    fused = fuse_experts(card, hf)
    package, block_class = MOE_BLOCKS[name]
    block_type = getattr(importlib.import_module(f"transformers.models.{package}.modeling_{package}"), block_class)
    x = torch.randn(7, card.hidden_size, dtype=torch.float64)
    for layer in range(card.num_layers):
        hp, _, moe = module.layer_prefixes(layer)
        block = block_type(module.hf_config_from_card(card)).double()
        block.load_state_dict({k: fused[f"{hp}mlp.{k}"] for k in block.state_dict()})
        with torch.no_grad():
            expected = block(x.unsqueeze(0)).squeeze(0)
        actual = _megatron_moe(card, mcore, f"{moe}mlp.", x)
        torch.testing.assert_close(actual, expected, **router_tolerance(expected), msg=f"layer {layer}, seed {seed}")


@pytest.mark.parametrize("name", [QWEN3, QWEN35])
def test_a_checkpoint_of_the_other_norm_convention_is_refused(name: str, tmp_path: Path) -> None:
    """A checkpoint written for a version of the card with the other ``zero_centered_norm`` has every tensor name
    and shape of this card's, but its norm weights mean ``w`` where this card reads ``1 + w`` (or the other way
    round): exporting it as this card would give a model with shifted norms. mcore-to-hf must refuse it, naming the
    field, and write nothing."""
    card = get_card(name)
    other = dataclasses.replace(card, zero_centered_norm=not card.zero_centered_norm)
    hf = random_hf_tensors(card, seed=int(torch.randint(0, 2**31, ())))
    write_hf(card, hf, tmp_path / "hf")
    hf_to_mcore_checkpoint(other, tmp_path / "hf", tmp_path / "mcore")
    with pytest.raises(ConversionError, match=rf"zero_centered_norm {other.zero_centered_norm!r} differs from card "
                                              rf"{card.name}'s {card.zero_centered_norm!r}"):
        mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_gdn_tensors_follow_transformers_when_key_and_value_head_dims_differ() -> None:
    """Every published Qwen3.5 card has equal GDN key and value head widths, so a map that takes one for the other
    (the gated output norm is one value head wide) passes every test on them. A card with other widths must still
    name and shape its HF tensors as transformers' model of the card's config does, and convert them to megatron's
    tensors and back bit for bit."""
    base = get_card(QWEN35)
    card = dataclasses.replace(base, linear_value_head_dim=base.linear_key_head_dim // 2)
    assert card.linear_value_head_dim != card.linear_key_head_dim
    module = family_module(card)
    import transformers

    model = getattr(transformers, card.hf_architecture)(module.hf_config_from_card(card))
    hf = random_hf_tensors(card, seed=int(torch.randint(0, 2**31, ())))
    fused = fuse_experts(card, hf)
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == {k: tuple(v.shape) for k, v in fused.items()}
    assert_bitwise_equal(hf, module.mcore_to_hf(card, module.hf_to_mcore(card, hf)))


@pytest.mark.parametrize("name", [QWEN3, QWEN35])
def test_the_exported_config_gives_transformers_the_cards_rope(name: str) -> None:
    """The config.json written for a card (``hf_config_from_card``) is what transformers builds the exported model
    from, and hf-to-mcore checks a checkpoint's config against it too, so a RoPE setting it drops or misstates is
    compared with itself and passes. Checked here against the rotary frequencies transformers' own rotary embedding
    derives from it: megatron rotates ``kv_channels * rotary_percent`` channels at ``base ** (-2i / dim)``. A fresh
    random base, and a rotated fraction other than the published cards' (transformers' default for Qwen3.5 is theirs,
    so leaving it out would go unseen)."""
    import importlib
    import random

    base = get_card(name)
    percent = random.choice([0.5, 1.0]) if base.rotary_percent < 1 else base.rotary_percent
    card = dataclasses.replace(base, rotary_base=float(random.randint(10_000, 50_000_000)), rotary_percent=percent)
    package, _ = MOE_BLOCKS[name]
    modeling = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    rotary_type = next(getattr(modeling, k) for k in dir(modeling)
                       if k.endswith("RotaryEmbedding") and "Vision" not in k)
    rotary = rotary_type(family_module(card).hf_config_from_card(card))
    dim = int(card.kv_channels * card.rotary_percent)
    expected = 1.0 / card.rotary_base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    torch.testing.assert_close(rotary.inv_freq.double(), expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", [QWEN3, QWEN35])
def test_hf_tensors_of_a_model_of_other_depth_are_refused_before_writing(name: str, tmp_path: Path) -> None:
    """An HF checkpoint without config.json is checked against the card by its tensors alone. One of a deeper model
    must not convert by silently dropping the extra layers, nor a bias tensor the card has no place for; one of a
    shallower model is refused counting what is missing (a whole layer's worth, not one damaged tensor), so that the
    user looks for another card. Nothing is written."""
    card = get_card(name)
    deeper = card.with_layers(card.num_layers + card.full_attention_interval, name="deeper")
    bias = {"model.layers.0.self_attn.q_proj.bias": torch.randn(card.num_attention_heads * card.kv_channels)}
    extra_layers = [n for n in random_hf_tensors(deeper)
                    if n.startswith("model.layers.") and int(n.split(".")[2]) >= card.num_layers]
    cases = [(deeper, card, {}, rf"unexpected tensor 'model\.layers\.{card.num_layers}\..*' \(\d+ unexpected\) for "
                                rf"card {card.name}; is --model the right card\?"),
             (card, card, bias, rf"unexpected tensor 'model\.layers\.0\.self_attn\.q_proj\.bias' \(1 unexpected\) "
                                rf"for card {card.name}"),
             (card, deeper, {}, rf"missing tensor 'model\.layers\.{card.num_layers}\..*' \({len(extra_layers)} "
                                rf"missing\) for card {deeper.name}")]
    for i, (source, target, extra, message) in enumerate(cases):
        hf = random_hf_tensors(source, seed=int(torch.randint(0, 2**31, ()))) | extra
        write_hf(source, hf, tmp_path / f"hf{i}")
        (tmp_path / f"hf{i}" / "config.json").unlink()
        with pytest.raises(ConversionError, match=message):
            hf_to_mcore_checkpoint(target, tmp_path / f"hf{i}", tmp_path / f"mcore{i}")
        assert not (tmp_path / f"mcore{i}").exists()


@pytest.mark.parametrize("name", [QWEN3, QWEN35])
def test_one_expert_of_another_dtype_is_the_one_named(name: str, tmp_path: Path) -> None:
    """megatron stores a layer's experts in one checkpoint tensor of one dtype, so an HF checkpoint with one expert's
    ``down_proj`` in float32 among bfloat16 ones is refused; the message must name that expert (a random one) as the
    odd one out, stored with a bfloat16 one, not the other way round, by the HF names the files hold. Nothing is
    written."""
    import random

    card = get_card(name)
    layer, expert = random.randrange(card.num_layers), random.randrange(card.num_experts)
    hf = random_hf_tensors(card, seed=int(torch.randint(0, 2**31, ())))
    odd = f"model.layers.{layer}.mlp.experts.{expert}.down_proj.weight"
    hf[odd] = hf[odd].float()
    write_hf(card, hf, tmp_path / "hf")
    with pytest.raises(ConversionError, match=rf"^'{re.escape(odd)}' is torch\.float32 but is stored with "
                                              r"'model\.layers\.\d+\.mlp\.experts\.\d+\.down_proj\.weight' "
                                              r"\(torch\.bfloat16\) in one megatron checkpoint tensor"):
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert not (tmp_path / "mcore").exists()


@pytest.mark.parametrize("name", [QWEN3, QWEN35])
def test_a_checkpoint_tensor_of_another_shape_is_refused_before_writing(name: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint that records no card (as megatron training writes it) of a model with wider experts has every
    tensor name this card expects; exporting it as this card must not read the card's shape out of the larger
    tensors (a silently cut model) but refuse, naming a tensor and both shapes. Nothing is written."""
    card = get_card(name)
    wider = dataclasses.replace(card, name="wider", moe_ffn_hidden_size=2 * card.moe_ffn_hidden_size)
    write_hf(wider, random_hf_tensors(wider, seed=int(torch.randint(0, 2**31, ()))), tmp_path / "hf")
    (tmp_path / "hf" / "config.json").unlink()  # training stores no HF config either
    monkeypatch.setattr(to_mcore, "card_record", lambda card: {})
    hf_to_mcore_checkpoint(wider, tmp_path / "hf", tmp_path / "mcore")
    monkeypatch.undo()
    with pytest.raises(ConversionError, match=rf"tensor '[^']*experts[^']*' has shape \[[\d, ]+\], card {card.name} "
                                              r"expects \[[\d, ]+\]"):
        mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert not (tmp_path / "out").exists()
