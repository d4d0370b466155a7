"""Tensor maps shared by the Qwen families (Hugging Face <-> megatron-core), one block at a time.

Every function is a pure re-arrangement of tensors (views, ``cat``, ``chunk``) except :func:`shift_norm`, which adds
a constant and checks that the inverse reproduces the input bit for bit; HF tensors fused into one megatron tensor
must share a dtype (:func:`take_fused`), so that the round trip gives each back in its own dtype. Names are passed in
as prefixes so the same block maps serve ``GPTModel`` (Qwen3-MoE) and ``HybridModel`` (Qwen3.5) layer numbering.

megatron-core layouts used here (read from megatron/core 0.19.2):

* ``SelfAttention.linear_qkv.weight``: rows grouped per query group ``g``: the ``heads_per_group`` query heads,
  then (with ``attention_output_gate``) the same number of gate heads, then key head ``g``, then value head ``g``
  (``get_query_key_value_tensors`` splits ``[np/ng*hn, np/ng*hn, hn, hn]`` per group in that order).
* ``TEGroupedMLP.linear_fc1.weight{e}``: ``[gate; up]`` rows (megatron's SwiGLU takes ``silu(first half) * second``).
* ``SharedExpertMLP``: ``linear_fc1.weight = [gate; up]``, ``linear_fc2.weight``, ``gate_weight`` ``[1, hidden]``.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Mapping

import torch
from torch import Tensor

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert.errors import ConversionError, ConversionWarning

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bitwise_equal(a: Tensor, b: Tensor) -> bool:
    """True if ``a`` and ``b`` have the same dtype, shape and bytes (NaN payloads and -0.0 included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = _INT_VIEW[a.element_size()]
    return torch.equal(a.contiguous().view(view), b.contiguous().view(view))


def shift_norm(weight: Tensor, delta: float, name: str) -> Tensor:
    """``weight + delta`` in ``weight``'s dtype (computed in float64), for zero-centred <-> plain norm weights.

    The round trip ``(w + d) - d`` is bit-exact whenever ``w + d`` is representable (always for ``w`` in
    ``[0.5, 2]`` with ``d = -1``: Sterbenz); elements where it is not are reported with a warning naming ``name``
    and the largest change of ``w + d``: the gain the norm computes with changes by as much, so the converted model
    computes with other gains there, not only a later round trip. With ``d = +1`` (a trained zero-centred ``w`` near
    0 exported as ``1 + w``) the step is the dtype's near 1 (2^-7 in bfloat16); with ``d = -1`` a gain far below 1
    (e.g. 0.01 becomes 0.0117 in bfloat16) loses its bits in ``w - 1``.
    """
    if delta == 0:
        return weight
    exact = weight.double() + delta
    shifted = exact.to(weight.dtype)
    if weight.is_meta:  # planning pass: shapes and dtypes only
        return shifted
    back = (shifted.double() - delta).to(weight.dtype)
    if not bitwise_equal(back, weight):
        lost = int((back != weight).sum())
        change = float((shifted.double() - exact).abs().max())
        effect = ("the exported model's norm gains differ there from the trained model's" if delta > 0
                  else "the converted model's norm gains differ there from the checkpoint's, and so will a round trip")
        warnings.warn(f"{name}: adding {delta:+g} is not exactly invertible for {lost} of {weight.numel()} "
                      f"elements in {weight.dtype} (each changed by up to {change:.3g}); {effect}",
                      ConversionWarning, stacklevel=2)
    return shifted


def take(tensors: Mapping[str, Tensor], name: str) -> Tensor:
    """``tensors[name]``, or a :class:`ConversionError` naming the missing tensor."""
    if name not in tensors:
        raise ConversionError(f"missing tensor {name!r}")
    return tensors[name]


def check_same_dtype(tensors: Mapping[str, Tensor]) -> None:
    """Raise if ``tensors`` (HF name -> tensor), which megatron fuses into one tensor, differ in dtype, naming the
    odd one out if there is one: ``torch.cat`` would promote them, and the way back would return one of them in
    another dtype."""
    names_by_dtype: dict[torch.dtype, list[str]] = defaultdict(list)
    for name, tensor in tensors.items():
        names_by_dtype[tensor.dtype].append(name)
    if len(names_by_dtype) < 2:
        return
    sizes = sorted(len(names) for names in names_by_dtype.values())
    odd = next(names for names in names_by_dtype.values() if len(names) == sizes[0])
    if len(odd) == 1 and sizes[1] > 1:
        others = ", ".join(f"{name!r} ({tensors[name].dtype})" for name in tensors if name not in odd)
        raise ConversionError(f"tensor {odd[0]!r} is {tensors[odd[0]].dtype} but megatron fuses it with {others} "
                              "into one tensor; save the checkpoint in one dtype")
    listed = ", ".join(f"{name!r} ({tensor.dtype})" for name, tensor in tensors.items())
    raise ConversionError(f"tensors {listed} differ in dtype but megatron fuses them into one tensor; save the "
                          "checkpoint in one dtype")


def take_fused(tensors: Mapping[str, Tensor], names: list[str]) -> list[Tensor]:
    """``tensors[name]`` for each of ``names``, tensors megatron fuses into one: each present, all of one dtype."""
    taken = {name: take(tensors, name) for name in names}
    check_same_dtype(taken)
    return list(taken.values())


def fuse_qkv(card: ModelCard, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """HF ``q_proj`` / ``k_proj`` / ``v_proj`` weights -> megatron ``linear_qkv.weight`` (group-interleaved).

    With ``card.attention_output_gate`` HF's ``q_proj`` rows are per head ``[query (hd); gate (hd)]``; megatron
    wants per group ``[queries of the group; gates of the group; key; value]``.
    """
    groups, heads, hd = card.num_query_groups, card.num_attention_heads, card.kv_channels
    hidden = q.shape[-1]
    per_group = heads // groups * hd
    if card.attention_output_gate:
        query_and_gate = q.reshape(heads, 2, hd, hidden)
        parts = [query_and_gate[:, 0].reshape(groups, per_group, hidden),
                 query_and_gate[:, 1].reshape(groups, per_group, hidden)]
    else:
        parts = [q.reshape(groups, per_group, hidden)]
    parts += [k.reshape(groups, hd, hidden), v.reshape(groups, hd, hidden)]
    return torch.cat(parts, dim=1).reshape(-1, hidden)


def split_qkv(card: ModelCard, qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Inverse of :func:`fuse_qkv`: megatron ``linear_qkv.weight`` -> HF ``(q_proj, k_proj, v_proj)`` weights."""
    groups, heads, hd = card.num_query_groups, card.num_attention_heads, card.kv_channels
    hidden = qkv.shape[-1]
    per_group = heads // groups * hd
    gated = card.attention_output_gate
    sections = [per_group, per_group, hd, hd] if gated else [per_group, hd, hd]
    parts = torch.split(qkv.reshape(groups, sum(sections), hidden), sections, dim=1)
    if gated:
        query, gate, k, v = parts
        q = torch.stack([query.reshape(heads, hd, hidden), gate.reshape(heads, hd, hidden)], dim=1)
    else:
        q, k, v = parts
    return q.reshape(-1, hidden), k.reshape(-1, hidden), v.reshape(-1, hidden)


def attention_hf_to_mcore(card: ModelCard, hf: Mapping[str, Tensor], hf_attn: str, input_norm: str,
                          mc: str) -> dict[str, Tensor]:
    """HF ``self_attn`` + the layer's input norm -> megatron ``SelfAttention`` tensors under prefix ``mc``.

    Norm weights are copied unchanged: HF and megatron agree on zero-centring for a given card.
    """
    q, k, v = take_fused(hf, [f"{hf_attn}{part}_proj.weight" for part in "qkv"])
    out = {
        f"{mc}linear_qkv.weight": fuse_qkv(card, q, k, v),
        f"{mc}linear_qkv.layer_norm_weight": take(hf, input_norm),
        f"{mc}linear_proj.weight": take(hf, f"{hf_attn}o_proj.weight"),
    }
    if card.qk_layernorm:
        out[f"{mc}q_layernorm.weight"] = take(hf, f"{hf_attn}q_norm.weight")
        out[f"{mc}k_layernorm.weight"] = take(hf, f"{hf_attn}k_norm.weight")
    return out


def attention_mcore_to_hf(card: ModelCard, mc_tensors: Mapping[str, Tensor], mc: str, hf_attn: str,
                          input_norm: str) -> dict[str, Tensor]:
    """Inverse of :func:`attention_hf_to_mcore`."""
    q, k, v = split_qkv(card, take(mc_tensors, f"{mc}linear_qkv.weight"))
    out = {f"{hf_attn}q_proj.weight": q, f"{hf_attn}k_proj.weight": k, f"{hf_attn}v_proj.weight": v,
           f"{hf_attn}o_proj.weight": take(mc_tensors, f"{mc}linear_proj.weight"),
           input_norm: take(mc_tensors, f"{mc}linear_qkv.layer_norm_weight")}
    if card.qk_layernorm:
        out[f"{hf_attn}q_norm.weight"] = take(mc_tensors, f"{mc}q_layernorm.weight")
        out[f"{hf_attn}k_norm.weight"] = take(mc_tensors, f"{mc}k_layernorm.weight")
    return out


def attention_shapes(card: ModelCard, hf_attn: str, mc: str) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """Expected (HF, megatron) shapes of one attention block (input norm excluded)."""
    hidden, hd = card.hidden_size, card.kv_channels
    q_rows = card.num_attention_heads * hd * (2 if card.attention_output_gate else 1)
    kv_rows = card.num_query_groups * hd
    hf = {f"{hf_attn}q_proj.weight": (q_rows, hidden), f"{hf_attn}k_proj.weight": (kv_rows, hidden),
          f"{hf_attn}v_proj.weight": (kv_rows, hidden), f"{hf_attn}o_proj.weight": (hidden, card.num_attention_heads * hd)}
    mcore = {f"{mc}linear_qkv.weight": (q_rows + 2 * kv_rows, hidden),
             f"{mc}linear_qkv.layer_norm_weight": (hidden,),
             f"{mc}linear_proj.weight": (hidden, card.num_attention_heads * hd)}
    if card.qk_layernorm:
        hf.update({f"{hf_attn}q_norm.weight": (hd,), f"{hf_attn}k_norm.weight": (hd,)})
        mcore.update({f"{mc}q_layernorm.weight": (hd,), f"{mc}k_layernorm.weight": (hd,)})
    return hf, mcore


def moe_hf_to_mcore(card: ModelCard, hf: Mapping[str, Tensor], hf_mlp: str, mc_mlp: str) -> dict[str, Tensor]:
    """HF sparse-MoE block (prefix ``hf_mlp``) -> megatron ``MoELayer`` tensors (prefix ``mc_mlp``).

    Experts are read fused (``experts.gate_up_proj`` ``[E, 2F, H]`` / ``experts.down_proj`` ``[E, H, F]``, the
    transformers 5.x in-memory layout) or per expert (``experts.{e}.gate_proj.weight`` ..., the published and
    ``save_pretrained`` layout), whichever is present.
    """
    out = {f"{mc_mlp}router.weight": take(hf, f"{hf_mlp}gate.weight")}
    experts = f"{hf_mlp}experts."
    fused = f"{experts}gate_up_proj" in hf
    gate_up = take(hf, f"{experts}gate_up_proj") if fused else None
    down = take(hf, f"{experts}down_proj") if fused else None
    for e in range(card.num_experts):
        if fused:
            fc1, fc2 = gate_up[e], down[e]
        else:
            fc1 = torch.cat(take_fused(hf, [f"{experts}{e}.gate_proj.weight", f"{experts}{e}.up_proj.weight"]))
            fc2 = take(hf, f"{experts}{e}.down_proj.weight")
        out[f"{mc_mlp}experts.linear_fc1.weight{e}"] = fc1
        out[f"{mc_mlp}experts.linear_fc2.weight{e}"] = fc2
    if card.moe_shared_expert_intermediate_size:
        shared, mc_shared = f"{hf_mlp}shared_expert.", f"{mc_mlp}shared_experts."
        out[f"{mc_shared}linear_fc1.weight"] = torch.cat(take_fused(hf, [f"{shared}gate_proj.weight",
                                                                        f"{shared}up_proj.weight"]))
        out[f"{mc_shared}linear_fc2.weight"] = take(hf, f"{shared}down_proj.weight")
        if card.moe_shared_expert_gate:
            out[f"{mc_shared}gate_weight"] = take(hf, f"{hf_mlp}shared_expert_gate.weight")
    return out


def moe_mcore_to_hf(card: ModelCard, mc_tensors: Mapping[str, Tensor], mc_mlp: str, hf_mlp: str,
                    fused_experts: bool) -> dict[str, Tensor]:
    """Inverse of :func:`moe_hf_to_mcore`; ``fused_experts`` picks transformers' in-memory expert layout."""
    out = {f"{hf_mlp}gate.weight": take(mc_tensors, f"{mc_mlp}router.weight")}
    experts = f"{hf_mlp}experts."
    fc1 = [take(mc_tensors, f"{mc_mlp}experts.linear_fc1.weight{e}") for e in range(card.num_experts)]
    fc2 = [take(mc_tensors, f"{mc_mlp}experts.linear_fc2.weight{e}") for e in range(card.num_experts)]
    if fused_experts:
        out[f"{experts}gate_up_proj"] = torch.stack(fc1)
        out[f"{experts}down_proj"] = torch.stack(fc2)
    else:
        for e, (w1, w2) in enumerate(zip(fc1, fc2, strict=True)):
            gate, up = torch.chunk(w1, 2, dim=0)
            out.update({f"{experts}{e}.gate_proj.weight": gate, f"{experts}{e}.up_proj.weight": up,
                        f"{experts}{e}.down_proj.weight": w2})
    if card.moe_shared_expert_intermediate_size:
        shared, mc_shared = f"{hf_mlp}shared_expert.", f"{mc_mlp}shared_experts."
        gate, up = torch.chunk(take(mc_tensors, f"{mc_shared}linear_fc1.weight"), 2, dim=0)
        out.update({f"{shared}gate_proj.weight": gate, f"{shared}up_proj.weight": up,
                    f"{shared}down_proj.weight": take(mc_tensors, f"{mc_shared}linear_fc2.weight")})
        if card.moe_shared_expert_gate:
            out[f"{hf_mlp}shared_expert_gate.weight"] = take(mc_tensors, f"{mc_shared}gate_weight")
    return out


def moe_shapes(card: ModelCard, hf_mlp: str, mc_mlp: str) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """Expected (HF per-expert layout, megatron) shapes of one MoE block (pre-MLP norm excluded)."""
    hidden, ffn, shared = card.hidden_size, card.moe_ffn_hidden_size, card.moe_shared_expert_intermediate_size
    hf = {f"{hf_mlp}gate.weight": (card.num_experts, hidden)}
    mcore = {f"{mc_mlp}router.weight": (card.num_experts, hidden)}
    for e in range(card.num_experts):
        hf.update({f"{hf_mlp}experts.{e}.gate_proj.weight": (ffn, hidden),
                   f"{hf_mlp}experts.{e}.up_proj.weight": (ffn, hidden),
                   f"{hf_mlp}experts.{e}.down_proj.weight": (hidden, ffn)})
        mcore.update({f"{mc_mlp}experts.linear_fc1.weight{e}": (2 * ffn, hidden),
                      f"{mc_mlp}experts.linear_fc2.weight{e}": (hidden, ffn)})
    if shared:
        hf.update({f"{hf_mlp}shared_expert.gate_proj.weight": (shared, hidden),
                   f"{hf_mlp}shared_expert.up_proj.weight": (shared, hidden),
                   f"{hf_mlp}shared_expert.down_proj.weight": (hidden, shared)})
        mcore.update({f"{mc_mlp}shared_experts.linear_fc1.weight": (2 * shared, hidden),
                      f"{mc_mlp}shared_experts.linear_fc2.weight": (hidden, shared)})
        if card.moe_shared_expert_gate:
            hf[f"{hf_mlp}shared_expert_gate.weight"] = (1, hidden)
            mcore[f"{mc_mlp}shared_experts.gate_weight"] = (1, hidden)
    return hf, mcore


def embedding_hf_to_mcore(card: ModelCard, hf: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Input embedding: ``model.embed_tokens.weight`` -> ``embedding.word_embeddings.weight``."""
    return {"embedding.word_embeddings.weight": take(hf, "model.embed_tokens.weight")}


def embedding_mcore_to_hf(card: ModelCard, mc_tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Inverse of :func:`embedding_hf_to_mcore`."""
    return {"model.embed_tokens.weight": take(mc_tensors, "embedding.word_embeddings.weight")}


def head_hf_to_mcore(card: ModelCard, hf: Mapping[str, Tensor], final_norm: str) -> dict[str, Tensor]:
    """Final norm (megatron name ``final_norm``) and, with untied embeddings, ``lm_head`` -> ``output_layer``."""
    out = {final_norm: take(hf, "model.norm.weight")}
    if card.untie_embeddings:
        out["output_layer.weight"] = take(hf, "lm_head.weight")
    return out


def head_mcore_to_hf(card: ModelCard, mc_tensors: Mapping[str, Tensor], final_norm: str) -> dict[str, Tensor]:
    """Inverse of :func:`head_hf_to_mcore`."""
    out = {"model.norm.weight": take(mc_tensors, final_norm)}
    if card.untie_embeddings:
        out["lm_head.weight"] = take(mc_tensors, "output_layer.weight")
    return out


def embedding_shapes(card: ModelCard) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """Expected (HF, megatron) shapes of the input embedding."""
    shape = (card.vocab_size, card.hidden_size)
    return {"model.embed_tokens.weight": shape}, {"embedding.word_embeddings.weight": shape}


def head_shapes(card: ModelCard, final_norm: str) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """Expected (HF, megatron) shapes of the final norm and output layer."""
    hf, mcore = {"model.norm.weight": (card.hidden_size,)}, {final_norm: (card.hidden_size,)}
    if card.untie_embeddings:
        hf["lm_head.weight"] = mcore["output_layer.weight"] = (card.vocab_size, card.hidden_size)
    return hf, mcore
