"""Naive gated delta rule: the token-by-token recurrence that chunked GDN kernels must reproduce.

Per head, with state ``S`` of shape ``[key_dim, value_dim]`` starting at zero (or ``initial_state``)::

    S   <- exp(g_t) * S                          decay (g_t <= 0 is a log-space gate)
    u_t  = v_t - S^T k_t                         delta-rule error of the current memory
    S   <- S + beta_t * k_t u_t^T                write
    o_t  = scale * S^T q_t                       read

This is the definition fla's ``chunk_gated_delta_rule`` and megatron-core's GatedDeltaNet compute (q and k
L2-normalised per head beforehand when asked). It runs in whatever dtype it is given; tests call it in float64 on
the CPU as the independent reference. It is O(T) sequential: for tests only.
"""

from __future__ import annotations

import torch
from torch import Tensor


def l2_normalize(x: Tensor, eps: float = 1e-6) -> Tensor:
    """Normalise the last dimension to unit L2 norm (the ``use_qk_l2norm_in_kernel`` convention)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def gated_delta_rule_reference(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float | None = None,
                               initial_state: Tensor | None = None, qk_l2norm: bool = False,
                               ) -> tuple[Tensor, Tensor]:
    """Outputs ``[B, T, HV, V]`` and final state ``[B, HV, K, V]`` of the gated delta rule.

    Shapes: ``q, k: [B, T, H, K]``, ``v: [B, T, HV, V]``, ``g, beta: [B, T, HV]`` with ``HV`` a multiple of ``H``
    (grouped values: value head ``j`` reads key head ``j // (HV / H)``, as Qwen3.5's 16 key / 32 value heads).
    ``scale`` defaults to ``K**-0.5``; ``initial_state``, when given, is ``[B, HV, K, V]``.
    """
    batch, steps, key_heads, key_dim = q.shape
    heads, value_dim = v.shape[2], v.shape[3]
    if (k.shape != q.shape or v.shape[:2] != q.shape[:2] or heads % key_heads
            or g.shape != v.shape[:3] or beta.shape != v.shape[:3]):
        raise ValueError(f"shape mismatch: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, "
                         f"g {tuple(g.shape)}, beta {tuple(beta.shape)}")
    if initial_state is not None and initial_state.shape != (batch, heads, key_dim, value_dim):
        # checked, not broadcast: a state without its batch axis would silently start every sequence alike
        raise ValueError(f"initial_state must be [B, HV, K, V] = {(batch, heads, key_dim, value_dim)}, "
                         f"got {tuple(initial_state.shape)}")
    scale = key_dim ** -0.5 if scale is None else scale
    if qk_l2norm:
        q, k = l2_normalize(q), l2_normalize(k)
    q, k = q.repeat_interleave(heads // key_heads, dim=2), k.repeat_interleave(heads // key_heads, dim=2)
    state = (torch.zeros(batch, heads, key_dim, value_dim, dtype=q.dtype, device=q.device)
             if initial_state is None else initial_state.to(q.dtype))
    outputs = []
    for t in range(steps):
        state = state * g[:, t].exp()[..., None, None]
        k_t, v_t = k[:, t], v[:, t]
        error = v_t - torch.einsum("bhkv,bhk->bhv", state, k_t)
        state = state + beta[:, t][..., None, None] * torch.einsum("bhk,bhv->bhkv", k_t, error)
        outputs.append(scale * torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    return torch.stack(outputs, dim=1), state
