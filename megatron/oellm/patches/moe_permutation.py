"""MoE token permutation without atomic adds (see ``patches/moe-permutation-without-atomics.md``).

megatron-core 0.19.2's token dispatchers move tokens to their experts' rows with ``moe_utils.permute`` and back with
``moe_utils.unpermute``. Without ``moe_permute_fusion`` (Transformer Engine's kernels, refused on the torch-native
backend) the copy is an ``index_select`` whose backward adds bf16 row gradients atomically (``index_add_``), and the
way back a ``scatter_add_`` of bf16 rows: non-deterministic, rounded after every add, and the largest non-GEMM items
of a torch-native Qwen3.5 step (20 ms + 8 ms of 363 ms at MBS 8 on an H200). No configuration or spec slot selects
another implementation, so this patch wraps the two names the dispatchers call (``token_dispatcher.permute`` and
``token_dispatcher.unpermute``):

* ``permute`` (not fused): upstream computes the permutation and the permuted probabilities as before, on a
  zero-width tensor with the tokens' row count, and the tokens are copied by :func:`megatron.oellm.layers.token_permutation.
  gather_rows`, whose backward sums each token's row gradients in fp32 (one rounding, no atomics);
* ``unpermute`` (not fused, no probabilities to merge, which the all-to-all and all-gather dispatchers never pass):
  :func:`~megatron.oellm.layers.token_permutation.scatter_sum_rows`, the same fp32 per-token sum.

Every other call (fused, merging probabilities, padded offsets) goes to upstream unchanged. Exactly 0.19.2 (another
release keeps upstream's functions, with a warning); ``OELLM_UPSTREAM_MOE_PERMUTATION=1`` keeps them too (A/B runs).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from megatron.oellm import switches
from megatron.oellm.layers.token_permutation import gather_rows, scatter_sum_rows
from megatron.oellm.patches.release import PATCHED_RELEASE, megatron_core_release, warn_not_applied

UPSTREAM_ENV = switches.UPSTREAM_MOE_PERMUTATION
"""Set to ``1`` to keep megatron-core's own permutation (A/B measurements, debugging)."""


def enabled() -> bool:
    """Whether :func:`apply` patches in this process: megatron-core is :data:`PATCHED_RELEASE` and
    ``OELLM_UPSTREAM_MOE_PERMUTATION`` is not ``1``."""
    return not switches.is_on(UPSTREAM_ENV) and megatron_core_release() == PATCHED_RELEASE


def describe(num_experts: int | None, permute_fusion: bool, dispatcher: str, flex_backend: str = "deepep") -> str:
    """Which token permutation a model's MoE layers run, for run logs (the fields of Megatron's arguments or of a
    TransformerConfig): ``"none"`` without experts, ``"fused"`` with ``moe_permute_fusion`` (Transformer Engine's),
    ``"in the <backend> dispatcher"`` for a flex dispatcher that permutes by itself (hybridep, ncclep), else
    ``"sorted"`` where this patch runs and ``"upstream"`` where it does not."""
    if not num_experts:
        return "none"
    if permute_fusion:
        return "fused"
    if dispatcher == "flex" and flex_backend != "deepep":
        return f"in the {flex_backend} dispatcher"
    return "sorted" if enabled() or is_applied() else "upstream"


def apply() -> bool:
    """Wrap the dispatchers' ``permute`` / ``unpermute`` where :func:`enabled`; True if applied (idempotent).

    The MoE spec builder (:func:`megatron.oellm.models.building_blocks.moe_builder`) calls it, so the MoE models
    built by this package's spec builders run it wherever megatron-core's unfused permutation would run. Another
    release than :data:`PATCHED_RELEASE` keeps upstream's functions with a warning, as the other patches do.
    """
    if not enabled():
        release = megatron_core_release()
        if release != PATCHED_RELEASE and not switches.is_on(UPSTREAM_ENV):
            warn_not_applied(release, "moe-permutation-without-atomics")
        return False
    from megatron.core.transformer.moe import token_dispatcher

    if is_applied():
        return True
    token_dispatcher.permute = _permute_without_atomics(token_dispatcher.permute)
    token_dispatcher.unpermute = _unpermute_without_atomics(token_dispatcher.unpermute)
    return True


def is_applied() -> bool:
    """Whether the dispatchers call this patch's permutation now."""
    from megatron.core.transformer.moe import token_dispatcher

    return getattr(token_dispatcher.permute, "oellm_patched", False)


def _permute_without_atomics(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def permute(tokens: torch.Tensor, routing_map: torch.Tensor, probs: torch.Tensor | None = None,
                num_out_tokens: int | None = None, fused: bool = False, drop_and_pad: bool = False,
                tokens_per_expert: torch.Tensor | None = None, align_size: int = 0) -> tuple[Any, ...]:
        arguments = dict(probs=probs, num_out_tokens=num_out_tokens, fused=fused, drop_and_pad=drop_and_pad,
                         tokens_per_expert=tokens_per_expert, align_size=align_size)
        if fused:
            return original(tokens, routing_map, **arguments)
        indices_only = tokens.new_empty(tokens.shape[0], 0)
        _, permuted_probs, sorted_indices, pad_offsets, counts = original(indices_only, routing_map, **arguments)
        return gather_rows(tokens, sorted_indices), permuted_probs, sorted_indices, pad_offsets, counts

    permute.__doc__ = f"megatron.oellm patch: unfused, the tokens move by gather_rows.\n\n{original.__doc__}"
    permute.oellm_patched = True
    return permute


def _unpermute_without_atomics(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def unpermute(permuted_tokens: torch.Tensor, sorted_indices: torch.Tensor, restore_shape: torch.Size,
                  probs: torch.Tensor | None = None, routing_map: torch.Tensor | None = None, fused: bool = False,
                  drop_and_pad: bool = False, pad_offsets: torch.Tensor | None = None) -> torch.Tensor:
        if fused or probs is not None or pad_offsets is not None:
            return original(permuted_tokens, sorted_indices, restore_shape, probs=probs, routing_map=routing_map,
                            fused=fused, drop_and_pad=drop_and_pad, pad_offsets=pad_offsets)
        return scatter_sum_rows(permuted_tokens, sorted_indices, restore_shape[0]).view(restore_shape)

    unpermute.__doc__ = ("megatron.oellm patch: unfused without probabilities, scatter_sum_rows.\n\n"
                         f"{original.__doc__}")
    unpermute.oellm_patched = True
    return unpermute
