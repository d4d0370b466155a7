"""The torch-native router's gating product (CPU): values and gradients against float64, dtypes, memory, wiring."""

import pytest
import torch
from backend_setup import moe_config
from megatron.core.models.backends import LocalSpecProvider
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer.moe.router import TopKRouter
from router_checks import FP32_BOUND, assert_same_as_fp32_copies, bf16_router_gradients

from megatron.oellm.backends.torch_native import TorchNativeSpecProvider
from megatron.oellm.backends.torch_native.router import TorchGatingTopKRouter, gating_product
from megatron.oellm.cards import get_card
from megatron.oellm.layers.fp32_products import bf16_terms_matmul
from megatron.oellm.models.building_blocks import moe_builder
from tests.unit_tests.cpu_megatron import cpu_model_building, gloo_world
from tests.unit_tests.models.hf_reference import errors

TOKENS, HIDDEN, EXPERTS = 24, 64, 8
BOUND = {torch.float32: 1e-6, torch.bfloat16: 1e-2}
"""Relative L2 bound of a product computed in each dtype against float64 (operands exact in both)."""
ROUNDED_SHARE = 1e-2
"""Share of bf16 gradients of an fp32 router allowed to differ from the float64 gradient rounded once to bf16: the
fp32 products' round-off moves an element next to a rounding tie (2e-4 of them here, 20 draws). The fp32 gradient
rounded to bf16 before its products (what this router exists to avoid) moves about 40 %, within :data:`BOUND`'s
1e-2."""


def assert_correctly_rounded(bf16_grad: torch.Tensor, float64_grad: torch.Tensor) -> None:
    """``bf16_grad`` is ``float64_grad`` rounded once to bf16 but for a share of at most :data:`ROUNDED_SHARE` (the
    input and weight gradients; a bias gradient's few elements would make one rounding tie a large share)."""
    share = (bf16_grad != float64_grad.bfloat16()).double().mean().item()
    assert share <= ROUNDED_SHARE, f"{share:.2%} of the bf16 gradients are not the correctly rounded float64 value"


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("operand_dtype,compute_dtype", [(torch.bfloat16, torch.float32),
                                                         (torch.float32, torch.float32),
                                                         (torch.bfloat16, torch.bfloat16)])
def test_gating_product_and_its_gradients_match_float64(operand_dtype: torch.dtype, compute_dtype: torch.dtype,
                                                        with_bias: bool) -> None:
    """Logits and gradients within each dtype's :data:`BOUND` of float64 for a random fp32 upstream gradient; an fp32
    router's bf16 input and weight gradients are moreover the float64 ones rounded once to bf16."""
    hidden = torch.randn(2, TOKENS // 2, HIDDEN).to(operand_dtype).requires_grad_()
    weight = (0.1 * torch.randn(EXPERTS, HIDDEN)).to(operand_dtype).requires_grad_()
    bias = torch.randn(EXPERTS).to(operand_dtype).requires_grad_() if with_bias else None
    upstream = torch.randn(2, TOKENS // 2, EXPERTS)

    logits = gating_product(hidden, weight, bias, compute_dtype)
    logits.backward(upstream.to(compute_dtype))

    exact = [t.detach().double().requires_grad_() for t in (hidden, weight) + ((bias,) if with_bias else ())]
    expected = exact[0] @ exact[1].t() + (exact[2] if with_bias else 0)
    expected.backward(upstream.to(compute_dtype).double())
    assert logits.dtype == compute_dtype and logits.shape == (2, TOKENS // 2, EXPERTS)
    assert errors(logits, expected)[0] <= BOUND[compute_dtype]
    for given, reference in zip((hidden, weight) + ((bias,) if with_bias else ()), exact, strict=True):
        assert given.grad.dtype == given.dtype
        bound = BOUND[torch.bfloat16 if operand_dtype == torch.bfloat16 else compute_dtype]
        assert errors(given.grad, reference.grad)[0] <= bound
    if (operand_dtype, compute_dtype) == (torch.bfloat16, torch.float32):
        for given, reference in zip((hidden, weight), exact[:2], strict=True):
            assert_correctly_rounded(given.grad, reference.grad)


def test_gating_product_keeps_bf16_activations_for_backward() -> None:
    """An fp32 router on bf16 activations must not keep an fp32 copy of them for the backward pass."""
    hidden = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(EXPERTS, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    saved: list[torch.dtype] = []

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor.dtype)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        gating_product(hidden, weight, None, torch.float32).sum().backward()
    assert saved == [torch.bfloat16, torch.bfloat16]


def build_router(cls: type, params_dtype: torch.dtype, router_dtype: str | None) -> TopKRouter:
    """A router of ``cls`` on the CPU with fresh random weights (megatron-core initialises them to zeros here)."""
    config = moe_config(HIDDEN, 4, EXPERTS, 32, use_cpu_initialization=True, params_dtype=params_dtype,
                        moe_router_dtype=router_dtype, moe_router_topk=2)
    with gloo_world(), cpu_model_building():
        router = cls(config=config, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    with torch.no_grad():
        router.weight.copy_(torch.randn(EXPERTS, HIDDEN))
    return router


@pytest.mark.parametrize(("router_dtype", "expected"), [("fp32", torch.float32), ("fp64", torch.float64),
                                                        (None, torch.bfloat16)])
def test_torch_native_router_gates_in_the_configured_router_dtype(router_dtype: str | None,
                                                                  expected: torch.dtype) -> None:
    router = build_router(TorchGatingTopKRouter, torch.bfloat16, router_dtype)
    hidden = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
    logits = router.gating(hidden)
    assert logits.dtype == expected
    bound = BOUND[torch.bfloat16] if expected == torch.bfloat16 else BOUND[torch.float32]
    assert errors(logits, hidden.double() @ router.weight.double().t())[0] <= bound


@pytest.mark.parametrize("router_dtype", ["fp32", "fp64", None])
def test_torch_native_router_matches_megatron_cores_router_without_transformer_engine(
        router_dtype: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same logits and gradients as megatron-core's own router where it computes with torch (TE absent), so the
    override drops nothing megatron-core's gating does."""
    from megatron.core.transformer.moe import moe_utils

    monkeypatch.setattr(moe_utils, "te_general_gemm", None)
    ours = build_router(TorchGatingTopKRouter, torch.bfloat16, router_dtype)
    theirs = build_router(TopKRouter, torch.bfloat16, router_dtype)
    with torch.no_grad():
        theirs.weight.copy_(ours.weight)
    hidden = torch.randn(2, TOKENS // 2, HIDDEN, dtype=torch.bfloat16)
    upstream = torch.randn(2, TOKENS // 2, EXPERTS)  # not bf16 values: a gradient rounded to bf16 on the way differs
    results = []
    for router in (ours, theirs):
        given = hidden.clone().requires_grad_()
        with cpu_model_building():  # megatron-core's gating moves CPU weights to torch.cuda.current_device()
            logits = router.gating(given)
        logits.backward(upstream.to(logits.dtype))
        results.append((logits, given.grad, router.weight.grad))
    for mine, megatrons in zip(*results, strict=True):
        assert mine.dtype == megatrons.dtype and mine.shape == megatrons.shape
        torch.testing.assert_close(mine, megatrons, rtol=0, atol=0)


def test_torch_native_moe_layers_get_the_torch_router() -> None:
    card = get_card("qwen3.5-35b-a3b-tiny")
    assert moe_builder(TorchNativeSpecProvider(), card).keywords["submodules"].router is TorchGatingTopKRouter
    assert moe_builder(LocalSpecProvider(), card).keywords["submodules"].router is TopKRouter


def test_fp32_router_on_bf16_operands_takes_the_tensor_core_products(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tensor-core path (forced on the CPU, where its products run as upcast arithmetic): three bf16 products
    (the logits and each gradient, the fp32 gradient split once into three exact bf16 terms) and the fp32-copies
    path's results."""
    from megatron.oellm.backends.torch_native import router as router_module
    from megatron.oellm.layers import fp32_products

    tokens = 512  # enough elements that the share of boundary cases is steady (~1e-4; a split into one term: ~50 %)
    hidden = torch.randn(2, tokens // 2, HIDDEN).bfloat16()
    weight = (0.1 * torch.randn(EXPERTS, HIDDEN)).bfloat16()
    upstream = torch.randn(2, tokens // 2, EXPERTS) * 1e-3
    upcast = bf16_router_gradients(hidden, weight, upstream)
    assert not router_module.uses_bf16_tensor_cores(hidden, weight, torch.float32)  # the CPU keeps fp32 copies

    calls: list[tuple[torch.dtype, torch.dtype]] = []
    product = fp32_products.bf16_matmul_in_fp32

    def counted(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        calls.append((a.dtype, b.dtype))
        return product(a, b)

    splits: list[torch.Size] = []
    split = fp32_products.split_into_bf16_terms

    def counted_split(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        splits.append(x.shape)
        return split(x)

    monkeypatch.setattr(router_module, "uses_bf16_tensor_cores", lambda *args: True)
    monkeypatch.setattr(router_module, "bf16_matmul_in_fp32", counted)
    monkeypatch.setattr(fp32_products, "bf16_matmul_in_fp32", counted)
    monkeypatch.setattr(router_module, "split_into_bf16_terms", counted_split)
    monkeypatch.setattr(fp32_products, "split_into_bf16_terms", counted_split)
    tensor_cores = bf16_router_gradients(hidden, weight, upstream)
    assert calls == [(torch.bfloat16, torch.bfloat16)] * 3
    assert splits == [torch.Size([tokens, EXPERTS])]  # the gradient is split once, for both of its products
    assert_same_as_fp32_copies(tensor_cores, upcast, share_bound=1e-2)  # the terms' exactness: test_fp32_products


def test_the_tensor_core_backward_keeps_the_gradient_products_in_fp32_precision(monkeypatch: pytest.MonkeyPatch
                                                                                 ) -> None:
    """The router's backward on the tensor-core path (forced on the CPU) multiplies the whole fp32 gradient: both of
    its fp32 products, before their rounding to bf16, are within fp32 round-off (:data:`router_checks.FP32_BOUND`,
    measured ~1e-7) of float64. A gradient cut to two of its three bf16 terms gives ~2.5e-6, one term (rounded to
    bf16) ~2e-3; the bf16 gradients hide the former (a few per mille of elements rounded the other way)."""
    from megatron.oellm.backends.torch_native import router as router_module

    products: list[torch.Tensor] = []

    def recorded(terms: tuple[torch.Tensor, ...], right: torch.Tensor) -> torch.Tensor:
        products.append(bf16_terms_matmul(terms, right))
        return products[-1]

    monkeypatch.setattr(router_module, "uses_bf16_tensor_cores", lambda *args: True)
    monkeypatch.setattr(router_module, "bf16_terms_matmul", recorded)
    tokens = 512
    hidden = torch.randn(tokens, HIDDEN).bfloat16()
    weight = (0.1 * torch.randn(EXPERTS, HIDDEN)).bfloat16()
    upstream = torch.randn(tokens, EXPERTS)  # fp32 values that need all three bf16 terms
    bf16_router_gradients(hidden, weight, upstream)
    exact = upstream.double()
    expected = (exact @ weight.double(), exact.t() @ hidden.double())  # input gradient, weight gradient
    assert len(products) == len(expected)
    for product, reference in zip(products, expected, strict=True):
        assert product.dtype == torch.float32
        assert errors(product, reference)[0] <= FP32_BOUND


def test_the_router_gemm_path_names_what_a_gpu_run_computes(monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron.oellm.backends.torch_native.router import router_gemm_path

    monkeypatch.delenv("OELLM_FP32_OPERAND_ROUTER", raising=False)
    assert router_gemm_path("fp32", torch.bfloat16) == "tensor cores"
    assert router_gemm_path("fp32", torch.float32) == "fp32"
    assert router_gemm_path("fp64", torch.bfloat16) == "fp64"
    assert router_gemm_path(None, torch.bfloat16) == "bf16"
    monkeypatch.setenv("OELLM_FP32_OPERAND_ROUTER", "1")
    assert router_gemm_path("fp32", torch.bfloat16) == "fp32 copies"
