"""Where each megatron-core state-dict tensor lives in a ``torch_dist`` distributed checkpoint.

A distributed checkpoint stores global tensors under *sharded keys*, not state-dict names; a model at any
TP/PP/EP loads its shards from them by global offset. The keys and global shapes below are what the models'
``sharded_state_dict()`` produces (read from megatron-core 0.19.2, training metadata
``singleton_local_shards=False``), so a checkpoint written from TP=PP=EP=1 tensors loads at any parallelism:

* ``GPTModel`` (``TransformerBlock``, homogeneous layers): ``decoder.layers.{i}.X`` is stored under
  ``decoder.layers.X`` with a leading layer axis ``[num_layers, ...]`` (offset ``i``).
* ``HybridModel`` (``HybridStack``): layer tensors keep their key ``decoder.layers.{j}.X``, no layer axis.
* ``TEGroupedMLP`` experts: ``...mlp.experts.linear_fc{1,2}.weight{e}`` are stored under
  ``...mlp.experts.experts.linear_fc{1,2}.weight`` (the module prefix ``mlp.experts.`` plus SequentialMLP's
  ``experts.``, so both expert implementations share one layout) with an expert axis ``[num_experts, ...]`` after
  the layer axis. The SwiGLU factory of ``linear_fc1`` keeps the
  ``[gate; up]`` global layout at every TP, so it needs nothing here.
* ``GatedDeltaNet`` splits ``in_proj.weight`` into keys ``in_proj.weight.{query,key,value,z,beta,alpha}`` and
  ``conv1d.weight`` into ``conv1d.weight.{query,key,value}`` (``_split_tensor_factory``): each section is its own
  global tensor so that TP shards every section separately.

Transformer Engine ``_extra_state`` objects (FP8 metadata) are not part of a converted checkpoint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from megatron.oellm.cards import ModelCard

_GPT_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_EXPERT = re.compile(r"^(.*\.experts\.)(linear_fc[12]\.weight)(\d+)$")
GDN_IN_PROJ_SECTIONS = ("query", "key", "value", "z", "beta", "alpha")
GDN_CONV_SECTIONS = ("query", "key", "value")


@dataclass(frozen=True)
class Piece:
    """One chunk of a checkpoint tensor: rows ``rows`` (dim 0) of state-dict tensor ``name``, stored in global
    tensor ``key`` of ``global_shape`` at ``offset``; ``chunk_shape`` is those rows with ``lead_axes`` leading
    (layer / expert) axes of size 1 in front."""

    name: str
    key: str
    global_shape: tuple[int, ...]
    offset: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    rows: tuple[int, int]
    lead_axes: int


def _gdn_sections(card: ModelCard, name: str) -> list[tuple[str, int]] | None:
    """(suffix, rows) sections of a GDN tensor split by megatron, or None if ``name`` is not split."""
    qk, v = card.linear_key_width, card.linear_value_width
    if name.endswith(".self_attention.in_proj.weight"):
        sizes = (qk, qk, v, v, card.linear_num_value_heads, card.linear_num_value_heads)
        return list(zip(GDN_IN_PROJ_SECTIONS, sizes, strict=True))
    if name.endswith(".self_attention.conv1d.weight"):
        return list(zip(GDN_CONV_SECTIONS, (qk, qk, v), strict=True))
    return None


def pieces(card: ModelCard, model: str, name: str, shape: tuple[int, ...]) -> list[Piece]:
    """The checkpoint chunks of state-dict tensor ``name`` (``shape`` at TP=PP=EP=1) for ``model``
    (``"gpt"`` or ``"hybrid"``)."""
    key, lead_shape, lead_offset = name, (), ()
    layer = _GPT_LAYER.match(name) if model == "gpt" else None
    if layer:
        key = f"decoder.layers.{layer[2]}"
        lead_shape, lead_offset = (card.num_layers,), (int(layer[1]),)
    expert = _EXPERT.match(key)
    if expert:
        key = f"{expert[1]}experts.{expert[2]}"
        lead_shape, lead_offset = (*lead_shape, card.num_experts), (*lead_offset, int(expert[3]))
    ones = (1,) * len(lead_shape)
    sections = _gdn_sections(card, name) if model == "hybrid" else None
    if sections is None:
        return [Piece(name, key, (*lead_shape, *shape), (*lead_offset, *(0,) * len(shape)), (*ones, *shape),
                      (0, shape[0]), len(ones))]
    out, start = [], 0
    for suffix, rows in sections:
        section_shape = (rows, *shape[1:])
        out.append(Piece(name, f"{key}.{suffix}", (*lead_shape, *section_shape),
                         (*lead_offset, *(0,) * len(shape)), (*ones, *section_shape), (start, start + rows), len(ones)))
        start += rows
    return out
