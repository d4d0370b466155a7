"""Naive float64 references for the torch-native backend modules (loops and explicit softmax, no fused kernels)."""

import math

import torch
import torch.nn.functional as F


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest absolute deviation divided by the largest magnitude of ``expected`` (both taken in float64)."""
    expected = expected.double()
    return ((actual.double() - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


def attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None = None
) -> torch.Tensor:
    """One sequence's attention in float64 with an explicit softmax: ``[s, hq, d]`` x ``[s, hkv, d]`` -> ``[s, hq*d]``.

    Query head h reads key/value head ``h // (hq // hkv)`` (GQA).
    """
    s, hq, d = q.shape
    group = hq // k.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.empty(s, hq, d, dtype=torch.float64, device=q.device)
    for h in range(hq):
        scores = (q[:, h].double() @ k[:, h // group].double().T) * scale
        if causal:
            scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
        out[:, h] = torch.softmax(scores, dim=-1) @ v[:, h // group].double()
    return out.reshape(s, hq * d)


def packed_attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, doc_lengths: list[int], causal: bool, scale: float | None = None
) -> torch.Tensor:
    """Packed ``[t, h, d]`` attention as a loop over documents, each through :func:`attention_reference`."""
    outputs, start = [], 0
    for length in doc_lengths:
        sl = slice(start, start + length)
        outputs.append(attention_reference(q[sl], k[sl], v[sl], causal, scale))
        start += length
    return torch.cat(outputs)


def grouped_mlp_reference(
    hidden: torch.Tensor,
    tokens_per_expert: list[int],
    probs: torch.Tensor,
    fc1: list[torch.Tensor],
    fc2: list[torch.Tensor],
    gated: bool,
    probs_on_input: bool = False,
) -> torch.Tensor:
    """Experts one by one in float64: ``fc2_e( swiglu(fc1_e x) * p )`` on each expert's block of rows, or
    ``fc2_e( swiglu(fc1_e (p * x)) )`` with ``probs_on_input`` (megatron's ``moe_apply_probs_on_input``)."""
    outputs, start = [], 0
    for e, count in enumerate(tokens_per_expert):
        x = hidden[start : start + count].double()
        p = probs[start : start + count].double()[:, None]
        h = (p * x if probs_on_input else x) @ fc1[e].double().T
        if gated:
            gate, linear = h.chunk(2, dim=-1)
            h = F.silu(gate) * linear
        else:
            h = F.silu(h)
        h = h if probs_on_input else h * p
        outputs.append(h @ fc2[e].double().T)
        start += count
    return torch.cat(outputs)


def experts_errors_from_float64(
    experts: torch.nn.Module,
    hidden: torch.Tensor,
    probs: torch.Tensor,
    grad_out: torch.Tensor,
    out: torch.Tensor,
    tokens_per_expert: list[int],
    gated: bool,
    probs_on_input: bool = False,
) -> dict[str, float]:
    """Relative errors of grouped ``experts``' output ``out`` and, after ``out.backward(grad_out)``, of the gradients
    of ``hidden``, ``probs`` and both weights, against :func:`grouped_mlp_reference` in float64 on the same weights."""
    leaves = [t.detach().double().requires_grad_() for t in (hidden, probs)]
    w1 = experts.linear_fc1.weight.detach().double().requires_grad_()
    w2 = experts.linear_fc2.weight.detach().double().requires_grad_()
    expected = grouped_mlp_reference(
        leaves[0], tokens_per_expert, leaves[1], list(w1), list(w2), gated=gated, probs_on_input=probs_on_input
    )
    expected.backward(grad_out.double())
    return {
        "out": relative_error(out, expected),
        "hidden": relative_error(hidden.grad, leaves[0].grad),
        "probs": relative_error(probs.grad, leaves[1].grad),
        "fc1": relative_error(experts.linear_fc1.weight.grad, w1.grad),
        "fc2": relative_error(experts.linear_fc2.weight.grad, w2.grad),
    }
