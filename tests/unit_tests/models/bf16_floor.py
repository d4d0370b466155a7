"""How far from fp32 does a bf16 forward of a fresh random model stay? transformers' own model, part by part.

The parity test bounds our real-width bf16 logits against an fp32 copy of the same transformers model. This script
measures, for that same kind of model, the distance transformers' own bf16 forward keeps from its fp32 forward
when one kind of sub-module at a time (or all of them) computes in fp32 and only the tensors passed between modules
stay bf16. Every run uses the fp32 model's expert choices (:func:`forced_routing`), so routing near-ties are out of
the picture and what is left is rounding and how the random network amplifies it. The variant "every module fp32,
bf16 between" is the floor of an implementation that rounds where transformers does, the residual stream included;
the last one keeps the residual stream in fp32 as well, and "residual stream fp32, modules bf16" is what
megatron-core's ``fp32_residual_connection`` does to a bf16 model. Hidden states
are transformers' ``output_hidden_states``: after each decoder layer, the last one after the final norm. On the CPU
transformers runs its torch GDN rule, which computes the core in fp32 between bf16 inputs and outputs; on a GPU it
runs fla's kernels, which use TF32 dot products even for fp32 inputs (torch's own TF32 is turned off here).

Run (CPU, about 13 GiB with a reduced vocabulary; or ``--device cuda``):
``python -m tests.unit_tests.models.bf16_floor --card qwen3.5-35b-a3b-proxy-4L --vocab 8192 --seed 1``
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import torch

from megatron.oellm.cards import get_card
from tests.unit_tests.gpu_utils import no_tf32
from tests.unit_tests.models.hf_reference import errors, forced_routing, own_routing, random_hf_model


@contextlib.contextmanager
def fp32_tensors(modules: Sequence[torch.nn.Module]) -> Iterator[None]:
    """Inside the block, every floating parameter and buffer of ``modules`` is an fp32 copy; after it, each gets its
    own original tensor back (so bf16 weights and fp32 buffers such as RoPE frequencies are restored exactly)."""
    originals: list[tuple[dict, str, torch.Tensor]] = []
    seen: set[int] = set()
    for module in modules:
        for sub in module.modules():
            if id(sub) in seen:
                continue
            seen.add(id(sub))
            for store in (sub._parameters, sub._buffers):
                for name, tensor in store.items():
                    if tensor is not None and tensor.is_floating_point():
                        originals.append((store, name, tensor.data))
                        if isinstance(tensor, torch.nn.Parameter):
                            tensor.data = tensor.data.float()
                        else:
                            store[name] = tensor.float()
    try:
        yield
    finally:
        for store, name, original in originals:
            if isinstance(store[name], torch.nn.Parameter):
                store[name].data = original
            else:
                store[name] = original


def fp32_reference(model: torch.nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor],
                                                                          list[torch.Tensor]]:
    """Logits, hidden states and expert choices (boolean maps, as :func:`forced_routing` takes them) of ``model``
    run in fp32 (its tensors restored after)."""
    with torch.no_grad(), fp32_tensors([model]), own_routing(model) as maps:
        out = model(input_ids=tokens, output_hidden_states=True, use_cache=False)
    return out.logits.float(), [h.float() for h in out.hidden_states[1:]], maps


def _cast(value: object, dtype: torch.dtype) -> object:
    """``value`` with its floating tensors (also inside tuples) cast to ``dtype``."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(dtype)
    if isinstance(value, tuple):
        return tuple(_cast(item, dtype) for item in value)
    return value


class Variant(NamedTuple):
    """Which modules of a bf16 model compute in fp32 (their tensors upcast, their inputs cast to fp32)."""

    rounded: list[torch.nn.Module]
    """fp32 modules whose outputs are rounded back to bf16."""
    unrounded: list[torch.nn.Module]
    """fp32 modules whose outputs stay fp32 (a router's scores; the embedding that starts an fp32 residual stream)."""
    bf16_inputs: list[torch.nn.Module]
    """bf16 modules whose inputs are cast to bf16 (they read an fp32 residual stream)."""


@contextlib.contextmanager
def computing_as(variant: Variant) -> Iterator[None]:
    """Inside the block, ``model`` computes as ``variant`` says (hooks and fp32 copies removed after)."""
    def cast_inputs(dtype: torch.dtype):
        return lambda _m, args, kwargs: (_cast(args, dtype), {k: _cast(v, dtype) for k, v in kwargs.items()})

    handles = [module.register_forward_pre_hook(cast_inputs(torch.float32), with_kwargs=True)
               for module in [*variant.rounded, *variant.unrounded]]
    handles += [module.register_forward_pre_hook(cast_inputs(torch.bfloat16), with_kwargs=True)
                for module in variant.bf16_inputs]
    handles += [module.register_forward_hook(lambda _m, _a, output: _cast(output, torch.bfloat16))
                for module in variant.rounded]
    try:
        with fp32_tensors([*variant.rounded, *variant.unrounded]):
            yield
    finally:
        for handle in handles:
            handle.remove()


def variants(model: torch.nn.Module) -> dict[str, Variant]:
    """The measured variants of ``model`` by name (those without modules of their kind, e.g. GDN in Qwen3, left
    out)."""
    layers = list(model.model.layers)
    mixers = [getattr(layer, "linear_attn", None) or layer.self_attn for layer in layers]
    gdn = [layer.linear_attn for layer in layers if hasattr(layer, "linear_attn")]
    attention = [layer.self_attn for layer in layers if hasattr(layer, "self_attn")]
    moe = [layer.mlp for layer in layers]
    inside_mixers = {id(sub) for mixer in mixers for sub in mixer.modules()}
    norms = [module for module in model.modules()
             if type(module).__name__.endswith("RMSNorm") and id(module) not in inside_mixers]  # decoder norms
    every_module = mixers + moe + norms + [model.lm_head]
    embedding = [model.model.embed_tokens]
    chosen = {
        "all bf16": Variant([], [], []),
        "residual stream fp32, modules bf16": Variant([], embedding, every_module),
        "routers fp32 (scores not rounded)": Variant([], [mlp.gate for mlp in moe if hasattr(mlp, "gate")], []),
        "MoE blocks fp32": Variant(moe, [], []),
        "GDN blocks fp32": Variant(gdn, [], []),
        "attention blocks fp32": Variant(attention, [], []),
        "decoder norms fp32": Variant(norms, [], []),
        "output layer fp32": Variant([model.lm_head], [], []),
        "every module fp32, bf16 between": Variant(every_module, [], []),
        "same, residual stream fp32": Variant(every_module, embedding, []),
    }
    return {name: variant for name, variant in chosen.items() if name == "all bf16" or any(variant)}


def main(argv: list[str] | None = None) -> int:
    """Print, per variant, the logits' and each layer's hidden states' relative L2 distance from fp32."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--card", default="qwen3.5-35b-a3b-proxy-4L")
    parser.add_argument("--vocab", type=int, default=None, help="reduced vocabulary (memory); default: the card's")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args(argv)
    if args.device == "cpu":
        sys.modules.setdefault("fla", None)  # transformers' torch GDN rule; fla's Triton kernels need a GPU
    no_tf32()
    torch.manual_seed(args.seed)
    card = get_card(args.card)
    model = random_hf_model(dataclasses.replace(card, vocab_size=args.vocab or card.vocab_size), torch.bfloat16,
                            args.device)
    tokens = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), device=args.device)
    reference_logits, reference_hidden, maps = fp32_reference(model, tokens)
    print(f"{args.card}, seed {args.seed}, tokens {args.batch} x {args.seq}, {args.device}; relative L2 from fp32 "
          "on the fp32 model's expert choices\n| variant | logits | hidden state after each layer |\n|---|---|---|")
    for name, variant in variants(model).items():
        with torch.no_grad(), computing_as(variant), forced_routing(model, maps):
            out = model(input_ids=tokens, output_hidden_states=True, use_cache=False)
        hidden = ", ".join(f"{errors(h, r)[0]:.2e}"
                           for h, r in zip(out.hidden_states[1:], reference_hidden, strict=True))
        print(f"| {name} | {errors(out.logits, reference_logits)[0]:.2e} | {hidden} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
