"""How far from fp32 can *any* bf16 run of a fresh random model be? transformers' own model, measured part by part.

The parity test bounds our real-width bf16 logits against an fp32 copy of the same transformers model. This script
measures, for that same kind of model, the distance transformers' own bf16 forward keeps from its fp32 forward
when one kind of sub-module at a time (or all of them) computes in fp32 and only the tensors passed between modules
stay bf16. Every run uses the fp32 model's expert choices (:func:`forced_routing`), so routing near-ties are out of
the picture and what is left is rounding and how the random network amplifies it. The last variant is the floor of
any implementation whose activations between modules are bf16.

Run (CPU, about 13 GiB with a reduced vocabulary; or ``--device cuda``):
``python -m tests.unit_tests.models.bf16_floor --card qwen3.5-35b-a3b-proxy-4L --vocab 8192 --seed 1``
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence

import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert.family import family_module
from tests.unit_tests.models.hf_reference import errors, forced_routing


def random_model(card_name: str, vocab: int | None, device: str) -> torch.nn.Module:
    """A fresh bf16 transformers model of the card (1-D parameters perturbed as in the parity test)."""
    from transformers import AutoModelForCausalLM

    card = get_card(card_name)
    config = family_module(card).hf_config_from_card(card)
    if vocab:
        config.vocab_size = vocab
    config._attn_implementation = "sdpa"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """transformers' MoE routers of ``model``, in layer order."""
    return [module for module in model.modules() if type(module).__name__.endswith("TopKRouter")]


def fp32_reference(model: torch.nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor],
                                                                          list[torch.Tensor]]:
    """Logits, hidden states and expert choices (boolean maps, as :func:`forced_routing` takes them) of ``model``
    run in fp32; the model is returned to bf16 after (exactly: its weights are bf16 values)."""
    maps: list[torch.Tensor] = []

    def record(_module: torch.nn.Module, _inputs: tuple, output: tuple) -> None:
        maps.append(torch.zeros_like(output[0], dtype=torch.bool).scatter_(1, output[2], True))

    handles = [router.register_forward_hook(record) for router in routers(model)]
    model.float()
    try:
        with torch.no_grad():
            out = model(input_ids=tokens, output_hidden_states=True, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
        model.to(torch.bfloat16)
    return out.logits.float(), [h.float() for h in out.hidden_states[1:]], maps


def _cast(value: object, dtype: torch.dtype) -> object:
    """``value`` with its floating tensors (also inside tuples) cast to ``dtype``."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(dtype)
    if isinstance(value, tuple):
        return tuple(_cast(item, dtype) for item in value)
    return value


@contextlib.contextmanager
def computing_in_fp32(modules: Sequence[torch.nn.Module], round_outputs: bool = True) -> Iterator[None]:
    """Inside the block, ``modules`` hold fp32 weights and compute in fp32 on fp32 copies of their inputs; their
    outputs are rounded to bf16 unless ``round_outputs`` is False (a router's scores, say)."""
    handles = []
    for module in modules:
        module.float()
        handles.append(module.register_forward_pre_hook(
            lambda _m, args, kwargs: (_cast(args, torch.float32),
                                      {k: _cast(v, torch.float32) for k, v in kwargs.items()}), with_kwargs=True))
        if round_outputs:
            handles.append(module.register_forward_hook(lambda _m, _a, output: _cast(output, torch.bfloat16)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for module in modules:
            module.to(torch.bfloat16)


def variants(model: torch.nn.Module) -> dict[str, tuple[list[torch.nn.Module], bool]]:
    """Name -> (modules computed in fp32, whether their outputs are rounded to bf16)."""
    layers = list(model.model.layers)
    mixers = [getattr(layer, "linear_attn", None) or layer.self_attn for layer in layers]
    gdn = [layer.linear_attn for layer in layers if hasattr(layer, "linear_attn")]
    attention = [layer.self_attn for layer in layers if hasattr(layer, "self_attn")]
    moe = [layer.mlp for layer in layers]
    norms = [module for module in model.modules() if type(module).__name__.endswith("RMSNorm")]
    chosen = {
        "all bf16": ([], True),
        "routers fp32": ([mlp.gate for mlp in moe if hasattr(mlp, "gate")], False),
        "MoE blocks fp32": (moe, True),
        "GDN blocks fp32": (gdn, True),
        "attention blocks fp32": (attention, True),
        "every module fp32, bf16 between": (mixers + moe + norms + [model.lm_head], True),
    }
    return {name: value for name, value in chosen.items() if value[0] or name == "all bf16"}


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
    torch.manual_seed(args.seed)
    model = random_model(args.card, args.vocab, args.device)
    tokens = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), device=args.device)
    reference_logits, reference_hidden, maps = fp32_reference(model, tokens)
    print(f"{args.card}, seed {args.seed}, tokens {args.batch} x {args.seq}, {args.device}; relative L2 from fp32 "
          "on the fp32 model's expert choices\n| variant | logits | hidden state after each layer |\n|---|---|---|")
    for name, (modules, round_outputs) in variants(model).items():
        with torch.no_grad(), computing_in_fp32(modules, round_outputs), forced_routing(model, maps):
            out = model(input_ids=tokens, output_hidden_states=True, use_cache=False)
        hidden = ", ".join(f"{errors(h, r)[0]:.2e}" for h, r in zip(out.hidden_states[1:], reference_hidden, strict=True))
        print(f"| {name} | {errors(out.logits, reference_logits)[0]:.2e} | {hidden} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
