"""Checks of a megatron checkpoint against the card before mcore-to-hf reads any tensor: the card it records and the
run arguments a training run stored, where no tensor shape would show a difference."""

from __future__ import annotations

from megatron.oellm.cards import CardError, ModelCard, get_card
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.mcore_checkpoint import CARD_KEY
from megatron.oellm.megatron_args import flag_destination, megatron_flag, model_flags
from megatron.oellm.training.card_from_args import CARD_SCOPE, inexpressible_flags

STRUCTURAL_FIELDS = ("family", "num_layers", "hidden_size", "vocab_size", "num_attention_heads", "num_query_groups",
                     "kv_channels", "qk_layernorm", "attention_output_gate", "num_experts", "moe_ffn_hidden_size",
                     "moe_shared_expert_intermediate_size", "moe_shared_expert_gate", "linear_mixer",
                     "full_attention_interval", "linear_num_key_heads", "linear_num_value_heads",
                     "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "zero_centered_norm",
                     "untie_embeddings")
"""Card fields that decide tensor names, shapes or values; a checkpoint made for another card must match them."""
RUN_FLAGS_NO_SHAPE_SHOWS = ("rotary-base", "rotary-percent", "norm-epsilon", "apply-layernorm-1p", "moe-router-topk",
                            "moe-router-pre-softmax")
"""Megatron flags of :func:`megatron_args.model_flags` that change what the model computes but no tensor's name or
shape: RoPE base and rotated fraction, norm epsilon and zero-centring, router top-k and its renormalisation. Stored
run arguments name each by its parser destination (:func:`~megatron.oellm.megatron_args.flag_destination`), which
for the norm's two is not the flag's name."""
INTERLEAVED_GLU_ARGS = (("moe_mlp_glu_interleave_size", "num_experts", None),
                        ("moe_shared_expert_glu_interleave_size", "moe_shared_expert_intermediate_size",
                         "use_grouped_gemm_for_shared_expert"))
"""(run argument, card field, run argument it needs) under which megatron-core 0.19.2 keeps a SwiGLU fc1 weight with
gate and up rows alternating in blocks of that size within each tensor-parallel shard, and saves it so: the routed
experts' (TE's grouped experts), and the shared expert's where ``use_grouped_gemm_for_shared_expert`` builds it
from TE's fused ops. The converter reads fc1 as ``[gate; up]``."""


def check_stored_card(card: ModelCard, common: dict) -> None:
    """If the checkpoint records its card, its structural fields must match ``card``.

    The message names the stored card only when it is another card: a checkpoint written for this card with
    another vocabulary (``with_vocab``, as the recipes' ``--vocab-size`` makes it) keeps the card's name.
    """
    stored = common.get(CARD_KEY)
    if not stored:
        return
    differ = [k for k in STRUCTURAL_FIELDS if k in stored and stored[k] != getattr(card, k)]
    if not differ:
        return
    hint = (f"; pass --vocab-size {stored['vocab_size']} for the vocabulary it was written with"
            if differ == ["vocab_size"] else "")
    wrong = "; ".join(f"{k}: checkpoint {stored[k]!r}, card {getattr(card, k)!r}" for k in differ)
    if stored.get("name") != card.name:
        raise ConversionError(f"checkpoint was written for card {stored.get('name')!r}, not {card.name}: {wrong}; "
                              f"{_stored_card_fix(stored.get('name'))}{hint}")
    if differ == ["vocab_size"]:  # the card's vocabulary, or the --vocab-size the user gave for it
        raise ConversionError(f"the checkpoint's vocab_size {stored['vocab_size']!r} differs from this conversion's "
                              f"{card.vocab_size!r} (card {card.name}'s, or --vocab-size where given){hint}")
    if len(differ) == 1:
        k = differ[0]
        raise ConversionError(f"the checkpoint's {k} {stored[k]!r} differs from card {card.name}'s "
                              f"{getattr(card, k)!r}{hint}")
    raise ConversionError(f"the checkpoint was written for another version of card {card.name}: {wrong}{hint}")


def _stored_card_fix(name: object) -> str:
    """The fix for a ``--model`` other than the card ``name`` a checkpoint stores: omit ``--model`` (mcore-to-hf then
    takes the stored card) or name that card; where ``name`` is no card registered here (renamed since, or a custom
    one), to pass the card the checkpoint was written for."""
    try:
        get_card(str(name))
    except CardError:
        return "pass --model with the card the checkpoint was written for (see `oellm models`)"
    return f"omit --model (the checkpoint's card is used) or pass --model {name}"


def interleaved_glu_flags(card: ModelCard, run_args: object) -> list[str]:
    """``--flag value`` for each of :data:`INTERLEAVED_GLU_ARGS` that ``run_args`` (megatron's arguments, parsed or
    stored) sets for a module ``card`` has: the SwiGLU weights megatron then keeps block-interleaved, where Hugging
    Face models and ``oellm convert`` hold ``[gate; up]``."""
    return [f"{megatron_flag(dest)} {getattr(run_args, dest)}"
            for dest, module_size, needs in INTERLEAVED_GLU_ARGS
            if getattr(run_args, dest, None) is not None and getattr(card, module_size)
            and (needs is None or getattr(run_args, needs, False))]


def check_run_arguments(card: ModelCard, run_args: object) -> None:
    """Raise if the run arguments a training checkpoint stores (megatron's ``args``) give one of
    :data:`RUN_FLAGS_NO_SHAPE_SHOWS` another value than ``card``: the tensors would pass every shape check, and the
    exported ``config.json`` (the card's) would describe a model that computes otherwise than the trained one. A run
    described by megatron's flags alone (no ``--oellm-model``) is free to set them; converted checkpoints store none.
    A run that kept SwiGLU weights block-interleaved (:data:`INTERLEAVED_GLU_ARGS`) is refused too: its checkpoint
    holds them in that order. So is a run with a flag no card describes (a sigmoid router, scaled routing weights,
    interleaved RoPE, ...: :func:`inexpressible_flags`), as Megatron's own training scripts can save one; its
    multi-token-prediction head passes, as the export drops it."""
    inexpressible = inexpressible_flags(run_args, allow_mtp=True)
    if inexpressible:
        raise ConversionError(f"the checkpoint's run trained with {'; '.join(inexpressible)}: {CARD_SCOPE}, and the "
                              f"export would describe it as card {card.name}, another model than the one trained")
    interleaved = interleaved_glu_flags(card, run_args)
    if interleaved:
        raise ConversionError(f"the checkpoint's run trained with {' and '.join(interleaved)}: megatron-core keeps and "
                              "saves those SwiGLU weights with gate and up rows alternating in blocks within each "
                              "tensor-parallel shard, while the Hugging Face model takes [gate; up]; oellm convert "
                              "does not reorder them, and the export would mix gate and up rows")
    card_flags = model_flags(card)
    differ = [f"{dest}: run {getattr(run_args, dest)!r}, card {card_flags[flag]!r}"
              for flag in RUN_FLAGS_NO_SHAPE_SHOWS
              for dest in [flag_destination(f"--{flag}")]
              if hasattr(run_args, dest) and getattr(run_args, dest) != card_flags[flag]]
    if differ:
        raise ConversionError(f"the checkpoint's run arguments differ from card {card.name} where no tensor shape "
                              f"shows it: {'; '.join(differ)}; the export would describe another model than the one "
                              "trained: pass the card the run was trained as with --model")
