"""RMSNorm (output, input gradient, weight gradient) against the float64 definition: the eager path on the CPU, the
Triton kernels in Triton's interpreter on the CPU, and the compiled kernels on the GPU at the models' widths, where
the eager path measured in the same test is the bar the kernels must reach."""

import os

import pytest
import torch

from megatron.oellm.layers import rms_norm as rms_norm_module
from megatron.oellm.layers.rms_norm import rms_norm, rms_norm_eager, rms_norm_reference
from tests.unit_tests.models.hf_reference import fresh_seed
from tests.unit_tests.triton_interpreter import INTERPRETING, assert_pass_in_the_interpreter, skip_when_interpreting

EPS = 1e-6


def random_case(rows: int, columns: int, dtype: torch.dtype, zero_centered: bool, seed: int, device: str = "cpu"):
    """Input with rows of different scales (0.1 to 10), a gamma away from the identity, an upstream gradient."""
    generator = torch.Generator(device=device).manual_seed(seed)
    scale = 10 ** (2 * torch.rand(rows, 1, generator=generator, device=device) - 1)
    x = (torch.randn(rows, columns, generator=generator, device=device) * scale).to(dtype)
    weight = 0.3 * torch.randn(columns, generator=generator, device=device) + (0.0 if zero_centered else 1.0)
    grad_y = torch.randn(rows, columns, generator=generator, device=device).to(dtype)
    return x, weight.to(dtype), grad_y


def relative_l2(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Relative L2 error of ``actual`` against ``expected``, in float64."""
    expected = expected.double()
    return float((actual.double() - expected).norm() / expected.norm())


def output_and_grads(norm, x: torch.Tensor, weight: torch.Tensor, grad_y: torch.Tensor, zero_centered: bool):
    """``(y, grad_x, grad_weight)`` of ``norm`` at ``x``, ``weight`` for the upstream gradient ``grad_y``."""
    x = x.detach().requires_grad_()
    weight = weight.detach().requires_grad_()
    y = norm(x, weight, EPS, zero_centered)
    y.backward(grad_y.to(y.dtype))
    return y.detach(), x.grad, weight.grad


def errors_against_definition(norm, x, weight, grad_y, zero_centered) -> list[float]:
    """Relative L2 errors of ``norm``'s output, input gradient and weight gradient from the float64 definition."""
    actual = output_and_grads(norm, x, weight, grad_y, zero_centered)
    expected = output_and_grads(rms_norm_reference, x.double(), weight.double(), grad_y.double(), zero_centered)
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == x.dtype and got.shape == want.shape
    return [relative_l2(got, want) for got, want in zip(actual, expected, strict=True)]


TOLERANCE = {torch.float32: 3e-6 if INTERPRETING else 1e-6, torch.bfloat16: 8e-3}
"""Relative L2 error allowed: fp32 round-off, or one bf16 rounding of each element. In Triton's interpreter the
kernels' backward sums each program's rows one block after another in fp32 (3 programs on the CPU): the weight
gradient of the 300 x 16 case reached 9.3e-7 over 1,200 draws (99th percentile 4.9e-7; the eager path 2.4e-7 over
600), so there 1e-6 had no margin. 3e-6 still fails a weight gradient off by a factor 1 + 1e-5, or rounded through
bf16 (~1e-3)."""


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("zero_centered", [False, True])
@pytest.mark.parametrize(("rows", "columns"), [(37, 48), (5, 130), (300, 16), (1000, 48), (3, 5000)])
def test_rms_norm_matches_the_definition(dtype, zero_centered, rows, columns):
    """Widths that are not a power of two (the kernels pad them), row counts that leave a partial block, and more
    row blocks (16) than the interpreter's backward programs (3), so each program's loop accumulates several, and a
    width padded past 4,096 columns (one row per program); on the CPU this is the eager path, under
    ``TRITON_INTERPRET=1`` the kernels."""
    x, weight, grad_y = random_case(rows, columns, dtype, zero_centered, fresh_seed())
    errors = errors_against_definition(rms_norm, x, weight, grad_y, zero_centered)
    assert max(errors) < TOLERANCE[dtype], errors


def test_the_kernels_run_exactly_when_expected(monkeypatch):
    """CPU tensors take the eager path unless Triton interprets; ``OELLM_EAGER_RMS_NORM=1`` forces it (and run logs
    say so); a weight of the wrong width is refused."""
    calls = []
    monkeypatch.setattr(rms_norm_module._FusedRMSNorm, "apply", lambda *args: calls.append(args) or args[0])
    x, weight, _ = random_case(4, 8, torch.float32, False, seed=1)
    rms_norm(x, weight, EPS, False)
    assert len(calls) == (1 if os.environ.get("TRITON_INTERPRET") == "1" else 0)
    assert rms_norm_module.cuda_path() == "triton"
    monkeypatch.setenv(rms_norm_module.EAGER_ENV, "1")
    assert rms_norm_module.cuda_path() == "eager"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch.testing.assert_close(rms_norm(x, weight, EPS, False), rms_norm_eager(x, weight, EPS, False))
    with pytest.raises(ValueError, match="RMSNorm over 8 features got a weight of 7"):
        rms_norm(x, weight[:7], EPS, False)


@skip_when_interpreting
def test_the_triton_kernels_pass_the_same_tests_in_the_interpreter():
    """This module's CPU tests once more, with ``TRITON_INTERPRET=1``: the kernels run instead of the eager code."""
    assert_pass_in_the_interpreter(__file__)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("rows", "columns", "zero_centered"), [
    (16384, 2048, True),  # Qwen3.5's input norms: hidden 2048, zero-centred
    (131072, 128, True),  # a QK norm or the GDN output norm over 128-wide heads
    (8192, 4096, False),  # Qwen3-235B's hidden 4096
    (3000, 5120, False),  # a width that is not a power of two
])
def test_compiled_kernels_at_model_widths_are_as_close_to_the_definition_as_eager(dtype, rows, columns,
                                                                                   zero_centered):
    """Each error of the kernels within 1.25x the eager path's (same inputs, fresh seed) and within the tolerance."""
    x, weight, grad_y = random_case(rows, columns, dtype, zero_centered, fresh_seed(), device="cuda")
    fused = errors_against_definition(rms_norm, x, weight, grad_y, zero_centered)
    eager = errors_against_definition(rms_norm_eager, x, weight, grad_y, zero_centered)
    print(f"\nrms_norm {rows}x{columns} {dtype}: kernels {fused}, eager {eager}")
    assert max(fused) < TOLERANCE[dtype], fused
    for name, ours, theirs in zip(("output", "grad_x", "grad_weight"), fused, eager, strict=True):
        assert ours <= 1.25 * theirs + 1e-7, (name, ours, theirs)


@pytest.mark.gpu
def test_compiled_kernels_past_int32_offsets_match_the_definition_at_both_ends():
    """2**31 + 131,072 bf16 elements (hidden 2048): the last rows lie past int32 offsets, where an offset computed
    in int32 would wrap around into the first rows; both ends are checked against the float64 definition."""
    rows, columns, ends = 2**31 // 2048 + 64, 2048, 64
    generator = torch.Generator(device="cuda").manual_seed(fresh_seed())
    x = torch.randn(rows, columns, generator=generator, device="cuda", dtype=torch.bfloat16).requires_grad_()
    weight = (0.3 * torch.randn(columns, generator=generator, device="cuda")).to(torch.bfloat16).requires_grad_()
    grad_y = torch.randn(rows, columns, generator=generator, device="cuda", dtype=torch.bfloat16)
    y = rms_norm(x, weight, EPS, True)
    y.backward(grad_y)
    for part in (slice(0, ends), slice(rows - ends, rows)):
        expected_y, expected_grad_x, _ = output_and_grads(rms_norm_reference, x[part].double(), weight.double(),
                                                          grad_y[part].double(), True)
        assert relative_l2(y[part].detach(), expected_y) < TOLERANCE[torch.bfloat16], part
        assert relative_l2(x.grad[part], expected_grad_x) < TOLERANCE[torch.bfloat16], part


SECOND_ORDER_TOLERANCE = 1e-5
"""Relative L2 error allowed on the eager path's second-order term against float64: fp32 round-off through two
backward passes (5.6e-7 at most over 300 draws of the 6 x 48 case); a first-order gradient off by a dropped term
puts it near 1."""


def test_a_second_order_gradient_is_refused_not_wrong():
    """The kernels' backward is first order: a gradient penalty through it raises instead of silently dropping the
    second-order term (the eager path, on the CPU, differentiates twice: its penalty gradient is the float64
    definition's)."""
    generator = torch.Generator().manual_seed(fresh_seed())
    x, weight = torch.randn(6, 48, generator=generator), torch.randn(48, generator=generator)

    def penalty_gradient(norm, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Gradient of ``|d sum(norm(x)^2) / dx|^2 + sum(x)`` in ``x`` (the sum keeps ``x`` in the second graph)."""
        leaf = x.clone().requires_grad_()
        (grad_x,) = torch.autograd.grad(norm(leaf, weight, EPS, False).pow(2).sum(), leaf, create_graph=True)
        return torch.autograd.grad(grad_x.pow(2).sum() + leaf.sum(), leaf)[0]

    if not INTERPRETING:  # the eager path: the second-order term (the penalty gradient less the sum's 1) is exact
        expected = penalty_gradient(rms_norm_reference, x.double(), weight.double()) - 1
        assert relative_l2(penalty_gradient(rms_norm, x, weight) - 1, expected) < SECOND_ORDER_TOLERANCE
        return
    with pytest.raises(RuntimeError, match="backward is first order: for a second derivative .*OELLM_EAGER_RMS_NORM=1"):
        penalty_gradient(rms_norm, x, weight)


def test_a_first_order_backward_called_with_grad_enabled_runs():
    """Activation recompute (megatron's and torch's reentrant checkpoint) calls ``backward`` inside
    ``torch.enable_grad()``; without ``create_graph`` that is a first-order backward and must not be refused, and its
    gradients are the float64 definition's."""
    x, weight, grad_y = random_case(40, 48, torch.float32, True, seed=fresh_seed())
    expected = output_and_grads(rms_norm_reference, x.double(), weight.double(), grad_y.double(), True)
    x, weight = x.clone().requires_grad_(), weight.clone().requires_grad_()
    with torch.enable_grad():
        torch.autograd.backward(rms_norm(x, weight, EPS, True), grad_y)
    for name, got, want in zip(("grad_x", "grad_weight"), (x.grad, weight.grad), expected[1:], strict=True):
        assert relative_l2(got, want) < TOLERANCE[torch.float32], name


def test_a_frozen_weight_skips_the_weight_gradient_sums_and_the_input_gradient_is_unchanged(monkeypatch):
    """With ``weight.requires_grad`` off the kernels are asked for no weight-gradient sums, and the input gradient
    is still the definition's (the interpreter run covers the kernels' branch, the plain run the eager path)."""
    from megatron.oellm.layers import rms_norm_kernels

    asked = []
    backward = rms_norm_kernels.backward
    monkeypatch.setattr(rms_norm_kernels, "backward", lambda *args: asked.append(args[-1]) or backward(*args))
    x, weight, grad_y = random_case(700, 48, torch.float32, True, seed=fresh_seed())
    leaf = x.clone().requires_grad_()
    rms_norm(leaf, weight, EPS, True).backward(grad_y)
    expected = output_and_grads(rms_norm_reference, x.double(), weight.double(), grad_y.double(), True)[1]
    assert relative_l2(leaf.grad, expected) < TOLERANCE[torch.float32]
    assert asked == ([False] if os.environ.get("TRITON_INTERPRET") == "1" else [])


@pytest.mark.parametrize("zero_centered", [False, True])
def test_bf16_output_is_the_correctly_rounded_float64_result(zero_centered):
    """The arithmetic is fp32 for bf16 inputs, so the bf16 output is the float64 RMSNorm rounded once to bf16 for all
    but a rare element next to a rounding tie. Square, mean and rsqrt done in bf16 instead round the normalised values
    a second time and change about a third of the outputs by one bf16 step, which the relative-error tolerance of
    :func:`test_rms_norm_matches_the_definition` (one bf16 rounding, 8e-3) cannot tell apart. The eager path only:
    Triton's interpreter casts fp32 to bf16 by truncation, so there the kernels' outputs are one step off for half
    the elements (Triton's compiled casts round to nearest by default)."""
    x, weight, _ = random_case(64, 2048, torch.bfloat16, zero_centered, fresh_seed())
    x64 = x.double()
    gamma64 = weight.double() + (1.0 if zero_centered else 0.0)
    mean_square = (x64 * x64).sum(dim=-1, keepdim=True) / x64.shape[-1]
    expected = (x64 / torch.sqrt(mean_square + EPS) * gamma64).to(torch.bfloat16)
    actual = rms_norm_eager(x, weight, EPS, zero_centered)
    assert actual.dtype == torch.bfloat16
    mismatched = (actual != expected).double().mean().item()
    assert mismatched < 1e-3, f"{mismatched:.2%} of the bf16 outputs are not the correctly rounded result"
