"""The bf16-floor diagnostic on the CPU: its fp32 copies are undone exactly (bf16 weights and fp32 RoPE buffers get
their own tensors back), its hooks are removed, and its report on a tiny card is what the variants promise."""

from __future__ import annotations

import re
import sys

import pytest
import torch

from megatron.oellm.cards import get_card
from tests.unit_tests.models import bf16_floor
from tests.unit_tests.models.hf_reference import random_hf_model

pytest.importorskip("transformers")


@pytest.fixture
def tiny_bf16_model() -> torch.nn.Module:
    """A random bf16 transformers model of the tiny Qwen3.5 card (GDN, attention, MoE) on the CPU."""
    torch.manual_seed(0)
    return random_hf_model(get_card("qwen3.5-35b-a3b-tiny"), torch.bfloat16, "cpu")


def floating_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every floating parameter's data and floating buffer of ``model`` by name (views of their storage)."""
    tensors = {name: parameter.data for name, parameter in model.named_parameters()}
    tensors.update({name: buffer for name, buffer in model.named_buffers() if buffer.is_floating_point()})
    return tensors


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are the same tensor data: dtype, shape and memory."""
    return a.dtype == b.dtype and a.shape == b.shape and a.data_ptr() == b.data_ptr()


def test_fp32_copies_are_undone_with_the_original_tensors(tiny_bf16_model: torch.nn.Module) -> None:
    before = floating_tensors(tiny_bf16_model)
    assert {t.dtype for t in before.values()} == {torch.bfloat16, torch.float32}  # RoPE frequencies are fp32
    values = {name: tensor.clone() for name, tensor in before.items()}
    with bf16_floor.fp32_tensors([tiny_bf16_model]):
        inside = floating_tensors(tiny_bf16_model)
        assert {t.dtype for t in inside.values()} == {torch.float32}
        assert all(torch.equal(inside[name].to(values[name].dtype), values[name]) for name in values)
    after = floating_tensors(tiny_bf16_model)
    assert all(same_storage(after[name], before[name]) for name in before)
    assert all(torch.equal(after[name], values[name]) for name in values)


def test_every_variant_leaves_no_hook_and_no_fp32_copy_behind(tiny_bf16_model: torch.nn.Module) -> None:
    before = floating_tensors(tiny_bf16_model)
    variants = bf16_floor.variants(tiny_bf16_model)
    assert "GDN blocks fp32" in variants and "attention blocks fp32" in variants
    for variant in variants.values():
        with bf16_floor.computing_as(variant):
            assert any(m._forward_pre_hooks for m in tiny_bf16_model.modules()) == any(variant)
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in tiny_bf16_model.modules())
    after = floating_tensors(tiny_bf16_model)
    assert all(same_storage(after[name], before[name]) for name in before)


def test_decoder_norms_leave_out_the_attention_q_and_k_norms(tiny_bf16_model: torch.nn.Module) -> None:
    norms = bf16_floor.variants(tiny_bf16_model)["decoder norms fp32"].rounded
    layers = len(tiny_bf16_model.model.layers)
    assert len(norms) == 2 * layers + 1  # input and post-attention norm of each layer, the final norm
    assert not any(norm is attention.q_norm or norm is attention.k_norm for norm in norms
                   for attention in [layer.self_attn for layer in tiny_bf16_model.model.layers
                                     if hasattr(layer, "self_attn")])


def test_report_on_a_tiny_card(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fla", None)  # restored after the test whatever main does
    assert bf16_floor.main(["--card", "qwen3-30b-a3b-tiny", "--seq", "32", "--seed", "3"]) == 0
    rows = dict(re.findall(r"^\| ([^|]+?) \| ([0-9.e+-]+) \|", capsys.readouterr().out, flags=re.MULTILINE))
    assert "GDN blocks fp32" not in rows  # no GDN in Qwen3
    assert set(rows) == {"all bf16", "residual stream fp32, modules bf16", "routers fp32 (scores not rounded)",
                         "MoE blocks fp32", "attention blocks fp32", "decoder norms fp32", "output layer fp32",
                         "every module fp32, bf16 between", "same, residual stream fp32"}
    errors = {name: float(value) for name, value in rows.items()}
    assert 1e-4 < errors["all bf16"] < 5e-2  # bf16 rounding shows, and nothing diverged
    assert errors["same, residual stream fp32"] < errors["every module fp32, bf16 between"] < errors["all bf16"]
