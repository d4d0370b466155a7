"""The naive gated delta rule against closed forms on CPU, and fla's chunked kernel against it on the GPU."""

import random

import pytest
import torch

from megatron.oellm.layers.gated_delta_rule_reference import gated_delta_rule_reference, l2_normalize


def _random_inputs(batch, steps, key_heads, heads, key_dim, value_dim, dtype, device, seed=None, decay="mild"):
    """Random q, k (unit norm), v, g, beta. ``decay``: "mild" draws g in [-0.2, 0]; "qwen3.5-init" draws it as a
    freshly initialised Qwen3.5 GDN layer makes it, ``-A * softplus(a + 1)`` with ``A ~ U(0.01, 16)`` per head and
    ``a ~ N(0, 1)`` (down to about -20 per token: most heads forget within a step)."""
    gen = torch.Generator().manual_seed(seed if seed is not None else random.randrange(2**31))
    q = torch.randn(batch, steps, key_heads, key_dim, generator=gen, dtype=torch.float64)
    k = l2_normalize(torch.randn(batch, steps, key_heads, key_dim, generator=gen, dtype=torch.float64))
    v = torch.randn(batch, steps, heads, value_dim, generator=gen, dtype=torch.float64)
    if decay == "mild":
        g = -torch.rand(batch, steps, heads, generator=gen, dtype=torch.float64) * 0.2
    else:
        decay_rate = 0.01 + 15.99 * torch.rand(heads, generator=gen, dtype=torch.float64)
        g = -decay_rate * torch.nn.functional.softplus(
            torch.randn(batch, steps, heads, generator=gen, dtype=torch.float64) + 1)
    beta = torch.rand(batch, steps, heads, generator=gen, dtype=torch.float64)
    return [t.to(dtype=dtype, device=device) for t in (q, k, v, g, beta)]


def test_single_step_closed_form():
    """One step from the zero state: ``S = beta k v^T`` and ``o = scale beta (q . k) v``, with the scale given or the
    default ``K**-0.5``, and with q and k L2-normalised first when asked (here k is unit already, q is not)."""
    q, k, v, g, beta = _random_inputs(2, 1, 3, 3, 8, 5, torch.float64, "cpu")
    out, state = gated_delta_rule_reference(q, k, v, g, beta, scale=0.5)
    expected = 0.5 * beta[..., None] * (q * k).sum(-1, keepdim=True) * v
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(state, (beta[:, 0, :, None, None] * k[:, 0, :, :, None] * v[:, 0, :, None, :]))
    out, _ = gated_delta_rule_reference(q, k, v, g, beta)
    torch.testing.assert_close(out, expected / 0.5 * 8 ** -0.5, rtol=1e-12, atol=1e-12)
    unit_q = torch.nn.functional.normalize(q, dim=-1)
    out, _ = gated_delta_rule_reference(3 * q, 2 * k, v, g, beta, scale=0.5, qk_l2norm=True)
    torch.testing.assert_close(out, 0.5 * beta[..., None] * (unit_q * k).sum(-1, keepdim=True) * v, rtol=1e-6,
                               atol=1e-6)


def test_delta_rule_replaces_instead_of_accumulating():
    """Orthonormal keys, beta = 1, no decay: the memory holds exactly the last value written under each key."""
    key_dim, steps = 8, 6
    keys = torch.linalg.qr(torch.randn(key_dim, key_dim, dtype=torch.float64))[0][:3]
    order = [0, 1, 2, 0, 1, 0]
    k = keys[order].reshape(1, steps, 1, key_dim)
    v = torch.randn(1, steps, 1, 4, dtype=torch.float64)
    zeros, ones = torch.zeros(1, steps, 1, dtype=torch.float64), torch.ones(1, steps, 1, dtype=torch.float64)
    _, state = gated_delta_rule_reference(k, k, v, zeros, ones, scale=1.0)
    for key_index, last_write in ((0, 5), (1, 4), (2, 2)):
        torch.testing.assert_close(keys[key_index] @ state[0, 0], v[0, last_write, 0], rtol=1e-10, atol=1e-10)


def test_decay_scales_the_previous_state():
    q, k, v, g, beta = _random_inputs(1, 2, 2, 2, 4, 3, torch.float64, "cpu")
    _, state_one = gated_delta_rule_reference(q[:, :1], k[:, :1], v[:, :1], g[:, :1], beta[:, :1])
    beta_two = beta.clone()
    beta_two[:, 1] = 0.0
    _, state_two = gated_delta_rule_reference(q, k, v, g, beta_two)
    torch.testing.assert_close(state_two, state_one * g[:, 1].exp()[..., None, None])


def test_grouped_values_read_their_key_head():
    q, k, v, g, beta = _random_inputs(1, 5, 2, 4, 4, 3, torch.float64, "cpu")
    out, _ = gated_delta_rule_reference(q, k, v, g, beta)
    expanded, _ = gated_delta_rule_reference(q.repeat_interleave(2, 2), k.repeat_interleave(2, 2), v, g, beta)
    torch.testing.assert_close(out, expanded)
    with pytest.raises(ValueError, match="shape mismatch"):
        gated_delta_rule_reference(q, k, v[:, :, :3], g[:, :, :3], beta[:, :, :3])


def _relative_error(actual, expected):
    return ((actual.double() - expected).norm() / expected.norm()).item()


def _on_hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


FLA_FP32_STRONG_DECAY = pytest.mark.xfail(
    condition=_on_hopper(), raises=AssertionError, strict=True, reason=(
        "fla 0.6.0, fp32, decay of a fresh Qwen3.5 layer, on Hopper (TileLang backward, Triton 3.6): dg 0.7-1.4e-2 "
        "relative to float64 (1.8e-3 with mild decay, 3-7e-3 in bf16) and what A_log receives, the sum over tokens "
        "of dg*g, 0.19-0.94 off (H200, docs/benchmarks.md); strict: a fixed fla makes this test fail, so the mark "
        "gets removed; it passes only if three fresh draws are all within the bound (one draw landed within it despite "
        "the defect in session 18; 40 others did not)"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, tolerance, decay, draws", [
    (torch.float32, 2e-3, "mild", 1),
    pytest.param(torch.float32, 2e-3, "qwen3.5-init", 3, marks=FLA_FP32_STRONG_DECAY),
    (torch.bfloat16, 2e-2, "mild", 1),
    (torch.bfloat16, 2e-2, "qwen3.5-init", 1),
])
def test_fla_chunk_kernel_matches_reference_forward_and_backward(dtype, tolerance, decay, draws):
    """fla's chunked GDN kernel (the fast path megatron-core's GatedDeltaNet calls) vs the float64 recurrence,
    with grouped values (2 key heads, 4 value heads) and a length that is not a multiple of the chunk size; each of
    ``draws`` fresh draws must be within the bounds."""
    fla_gdn = pytest.importorskip("fla.ops.gated_delta_rule")
    for _ in range(draws):
        _check_fla_draw(fla_gdn, dtype, tolerance, decay)


def _check_fla_draw(fla_gdn, dtype: torch.dtype, tolerance: float, decay: str) -> None:
    """One fresh draw of :func:`test_fla_chunk_kernel_matches_reference_forward_and_backward`; prints its errors."""
    seed = random.randrange(2**31)
    inputs = _random_inputs(2, 200, 2, 4, 64, 64, torch.float64, "cpu", seed=seed, decay=decay)
    reference_inputs = [t.clone().requires_grad_(True) for t in inputs]
    kernel_inputs = [t.to(device="cuda", dtype=dtype).requires_grad_(True) for t in inputs]
    reference_out, _ = gated_delta_rule_reference(*reference_inputs)
    kernel_out = fla_gdn.chunk_gated_delta_rule(*kernel_inputs)[0]
    grad = torch.randn_like(reference_out)
    reference_out.backward(grad)
    kernel_out.backward(grad.to(device="cuda", dtype=dtype))
    errors = {"out": _relative_error(kernel_out.detach().cpu(), reference_out.detach())}
    for name, ours, ref in zip("q k v g beta".split(), kernel_inputs, reference_inputs, strict=True):
        errors[f"d{name}"] = _relative_error(ours.grad.cpu(), ref.grad)
    # what a decay parameter such as A_log receives: per value head, the sum over tokens of dg * dg/dA_log = dg * g.
    # Reported relative to itself (what an optimiser sees; it varies with the seed, as the terms cancel) and bounded
    # relative to the sum of the terms' magnitudes (the same absolute error, without the seed-dependent cancellation)
    g_kernel, g_reference = kernel_inputs[3], reference_inputs[3]
    terms = g_reference.grad * g_reference.detach()
    decay_error = (g_kernel.grad * g_kernel.detach()).sum((0, 1)).cpu().double() - terms.sum((0, 1))
    decay_sum = (decay_error.norm() / terms.sum((0, 1)).norm()).item()
    decay_scale = (decay_error.norm() / terms.abs().sum((0, 1)).norm()).item()
    report = (", ".join(f"{name} {error:.2e}" for name, error in errors.items())
              + f"; sum(dg*g) {decay_sum:.2e} (of the terms' size {decay_scale:.2e}); seed {seed}")
    print(f"fla chunk_gated_delta_rule vs float64 reference ({dtype}, {decay} decay): {report}")
    assert errors["out"] < tolerance, report
    assert all(error < 2 * tolerance for error in errors.values()), report
    assert decay_scale < 2 * tolerance, report


def test_an_initial_state_continues_the_recurrence_and_must_have_its_batch_axis():
    """Running the second half of a sequence from the first half's final state gives the whole run's outputs and
    state; a state of another shape (no batch axis, which would broadcast) is refused, not silently shared."""
    q, k, v, g, beta = _random_inputs(2, 9, 2, 4, 4, 3, torch.float64, "cpu")
    out, state = gated_delta_rule_reference(q, k, v, g, beta)
    _, half_state = gated_delta_rule_reference(q[:, :4], k[:, :4], v[:, :4], g[:, :4], beta[:, :4])
    rest_out, rest_state = gated_delta_rule_reference(q[:, 4:], k[:, 4:], v[:, 4:], g[:, 4:], beta[:, 4:],
                                                      initial_state=half_state)
    torch.testing.assert_close(rest_out, out[:, 4:], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rest_state, state, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"initial_state must be \[B, HV, K, V\] = \(2, 4, 4, 3\), got \(4, 4, 3\)"):
        gated_delta_rule_reference(q, k, v, g, beta, initial_state=half_state[0])


def test_two_steps_with_decay_and_partial_writes_match_the_written_out_recurrence():
    """Two steps from the zero state with a real decay (g in [-2, -0.1]), beta in (0.2, 1) and keys that overlap,
    against the recurrence expanded by hand per head: ``S1 = b1 k1 v1^T``, ``o1 = s b1 (q1.k1) v1``; the second step
    decays first, ``u2 = v2 - e^g2 b1 (k1.k2) v1``, ``o2 = s (e^g2 b1 (k1.q2) v1 + b2 (k2.q2) u2)`` and
    ``S2 = e^g2 S1 + b2 k2 u2^T``. The other tests have no decay before a write that reads the memory (the delta rule
    test has g = 0 and beta = 1, the decay test beta = 0 at its second step), so a decay applied after the error, or a
    beta on the read, passed them."""
    generator = torch.Generator().manual_seed(random.randrange(2**31))
    batch, heads, key_dim, value_dim, scale = 2, 3, 5, 4, 0.7
    q = torch.randn(batch, 2, heads, key_dim, generator=generator, dtype=torch.float64)
    k = l2_normalize(torch.randn(batch, 2, heads, key_dim, generator=generator, dtype=torch.float64))
    v = torch.randn(batch, 2, heads, value_dim, generator=generator, dtype=torch.float64)
    g = -0.1 - 1.9 * torch.rand(batch, 2, heads, generator=generator, dtype=torch.float64)
    beta = 0.2 + 0.8 * torch.rand(batch, 2, heads, generator=generator, dtype=torch.float64)
    out, state = gated_delta_rule_reference(q, k, v, g, beta, scale=scale)
    for b in range(batch):
        for h in range(heads):
            (q1, q2), (k1, k2), (v1, v2) = q[b, :, h], k[b, :, h], v[b, :, h]
            (g2,), (b1, b2) = g[b, 1:, h].exp(), beta[b, :, h]
            u2 = v2 - g2 * b1 * torch.dot(k1, k2) * v1
            expected_out = torch.stack([scale * b1 * torch.dot(q1, k1) * v1,
                                        scale * (g2 * b1 * torch.dot(k1, q2) * v1 + b2 * torch.dot(k2, q2) * u2)])
            expected_state = g2 * b1 * torch.outer(k1, v1) + b2 * torch.outer(k2, u2)
            torch.testing.assert_close(out[b, :, h], expected_out, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(state[b, h], expected_state, rtol=1e-12, atol=1e-12)
