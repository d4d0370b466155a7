"""The Transformer Engine backend's specs, on the CPU, where Transformer Engine imports.

Skipped where it does not (CI). ``tools/te_cpu_env.sh`` builds a virtual environment on a CPU-only machine where it
does (CUDA torch wheel, TE's core wheel, TE's PyTorch extension compiled from its sdist) and runs these tests. The
same environment runs ``tests/unit_tests/convert/test_convert_megatron_load.py`` with whole TE-built models.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest

from megatron.oellm.backends.selection import resolve_backend, transformer_engine_import_error
from megatron.oellm.cards import get_card, list_card_names
from megatron.oellm.models import spec_builder

pytestmark = pytest.mark.skipif(transformer_engine_import_error() is not None,
                                reason="Transformer Engine does not import here (tools/te_cpu_env.sh builds it)")

CARDS = [name for name in list_card_names() if get_card(name).family in ("qwen3_5", "qwen3_moe")]
"""Every registered Qwen card: published, tiny and proxy flavours."""

ATTENTION_SLOTS = {
    "self_attention.core_attention": "TEDotProductAttention",
    "self_attention.linear_qkv": "TELayerNormColumnParallelLinear",
    "self_attention.linear_proj": "TERowParallelLinear",
    "self_attention.q_layernorm": "TENorm",
    "self_attention.k_layernorm": "TENorm",
}
MOE_SLOTS = {
    "pre_mlp_layernorm": "TENorm",
    "mlp.router": "TopKRouter",  # megatron-core's, whose gating GEMM is TE's; the torch-native one computes it in torch
    "mlp.experts": "TEGroupedMLP",
    "mlp.experts.linear_fc1": "TEColumnParallelGroupedLinear",
    "mlp.experts.linear_fc2": "TERowParallelGroupedLinear",
    "mlp.shared_experts.linear_fc1": "TEColumnParallelLinear",
    "mlp.shared_experts.linear_fc2": "TERowParallelLinear",
}
GDN_SLOTS = {
    "self_attention.in_proj": "TELayerNormColumnParallelLinear",
    "self_attention.out_norm": "TENorm",
    "self_attention.out_proj": "TERowParallelLinear",
}


def expected_te_slots(family: str) -> dict[str, str]:
    """Spec path -> the TE class it must hold: Qwen3's layer has attention and MoE; Qwen3.5's hybrid stack has an
    attention layer, a GDN layer and an MoE layer."""
    if family == "qwen3_moe":
        return ATTENTION_SLOTS | MOE_SLOTS
    return ({f"attention_layer.{k}": v for k, v in ATTENTION_SLOTS.items()}
            | {f"moe_layer.{k}": v for k, v in MOE_SLOTS.items()}
            | {f"gdn_layer.{k}": v for k, v in GDN_SLOTS.items()})


def flatten_spec(node: Any, path: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every class a spec tree names, by dotted slot path (``""`` = the root): ModuleSpecs, the ``partial``s
    megatron uses for MoE layers and shared experts, and submodule dataclasses are walked."""
    from megatron.core.transformer.spec_utils import ModuleSpec

    out = {} if out is None else out
    if isinstance(node, ModuleSpec):
        out[path] = node.module
        if node.submodules is not None:
            flatten_spec(node.submodules, path, out)
    elif isinstance(node, functools.partial):
        out[path] = node.func
        if "submodules" in node.keywords:
            flatten_spec(node.keywords["submodules"], path, out)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for field in dataclasses.fields(node):
            flatten_spec(getattr(node, field.name), f"{path}.{field.name}".lstrip("."), out)
    elif node is not None:
        out[path] = node
    return out


def backend_spec(name: str, backend: str) -> dict[str, Any]:
    """The flattened spec of card ``name``'s repeated unit (Qwen3.5: the hybrid stack, Qwen3: one layer)."""
    card = get_card(name)
    builder = spec_builder(card.family)
    spec = builder.hybrid_stack_spec(card, backend) if card.family == "qwen3_5" else builder.layer_spec(card, backend)
    return flatten_spec(spec)


def test_auto_chooses_transformer_engine_where_it_imports() -> None:
    assert resolve_backend("auto") == "te"


@pytest.mark.parametrize("name", CARDS)
def test_te_spec_has_the_torch_specs_slots_with_te_classes_in_every_compute_slot(name: str) -> None:
    te, torch_native = backend_spec(name, "te"), backend_spec(name, "torch")
    # the torch-native experts compute their activation inside; TE's take an activation op
    assert te.keys() - torch_native.keys() == {p for p in te if p.endswith("experts.activation_func")}
    assert torch_native.keys() <= te.keys()

    expected = expected_te_slots(get_card(name).family)
    assert {path: getattr(te.get(path), "__name__", None) for path in expected} == expected

    for path, cls in te.items():
        assert not getattr(cls, "__module__", "").startswith("megatron.oellm.backends"), (path, cls)
        if path not in expected and path in torch_native:  # shared megatron-core modules, the same in both
            assert cls == torch_native[path], (path, cls, torch_native[path])

