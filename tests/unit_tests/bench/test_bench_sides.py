"""The two sides' training steps on the CPU: transformers' real ``Qwen3_5MoeForCausalLM`` (tiny card, torch
fallbacks of its GDN kernels) and ours with a stand-in model; what each step keeps alive, drops and returns."""

import weakref

import pytest
import torch
import torch.nn.functional as F

from megatron.oellm.bench.sides import HFSide, OursSide, make_batch
from megatron.oellm.cards import get_card

CARD = get_card("qwen3.5-35b-a3b-tiny")


@pytest.fixture
def hf_side(monkeypatch: pytest.MonkeyPatch) -> HFSide:
    """An :class:`HFSide` around a tiny bf16 transformers model on the CPU, built as ``HFSide.__init__`` builds it
    but without the GPU (fla's gated delta rule, picked when ``fla`` imports, needs one: the torch path runs)."""
    pytest.importorskip("transformers")
    from transformers import Qwen3_5MoeForCausalLM
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe

    from megatron.oellm.models.qwen3_5.convert import hf_config_from_card

    rule = modeling_qwen3_5_moe.torch_chunk_gated_delta_rule
    monkeypatch.setattr(modeling_qwen3_5_moe, "torch_chunk_gated_delta_rule", getattr(rule, "__wrapped__", rule))
    torch.manual_seed(0)
    config = hf_config_from_card(CARD)
    config.output_router_logits, config.use_cache = True, False
    side = object.__new__(HFSide)
    side.model = Qwen3_5MoeForCausalLM._from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    side.model.train()
    side.aux_loss_coeff = config.router_aux_loss_coef
    return side


def test_hf_step_drops_the_logits_before_the_backward(hf_side: HFSide) -> None:
    """The ``[mbs, seq, vocab]`` logits are not needed by the backward; a step that keeps the model output alive
    through it charges them to transformers' peak memory (7.6 GiB at MBS 4 of the proxy), which ours never holds."""
    logits: list[weakref.ref] = []
    alive_in_backward: list[bool] = []
    hf_side.model.lm_head.register_forward_hook(lambda module, args, out: logits.append(weakref.ref(out)))
    # The input embedding's gradient is the last one the backward computes.
    hf_side.model.model.embed_tokens.weight.register_hook(
        lambda grad: alive_in_backward.append(logits[-1]() is not None))
    hf_side.step(make_batch(CARD.vocab_size, 2, 16, device="cpu"))
    assert alive_in_backward == [False]


def test_hf_step_returns_the_language_model_loss_and_drops_gradients(hf_side: HFSide) -> None:
    batch = make_batch(CARD.vocab_size, 2, 16, device="cpu")
    captured: list[torch.Tensor] = []
    hf_side.model.lm_head.register_forward_hook(lambda module, args, out: captured.append(out.detach().float()))
    loss = hf_side.step(batch)
    reference = F.cross_entropy(captured[0][:, :-1].flatten(0, 1), batch.tokens[:, 1:].flatten())
    assert not loss.requires_grad
    assert float(loss) == pytest.approx(float(reference), rel=1e-5)  # the aux loss is not in the reported loss
    grads = [p.grad.clone() for p in hf_side.model.parameters()]
    hf_side.step(batch)
    for before, after in zip(grads, (p.grad for p in hf_side.model.parameters()), strict=True):
        assert torch.equal(before, after)  # dropped, not accumulated, from one step to the next


class _PerTokenLossOf(torch.nn.Module):
    """A stand-in for our model: megatron's ``(tokens, position_ids, attention_mask, labels=)`` call returning the
    ``[mbs, seq]`` per-token loss, here of the logits of a transformers model."""

    def __init__(self, hf_model: torch.nn.Module):
        super().__init__()
        self.hf_model = hf_model

    def forward(self, tokens, position_ids, attention_mask, labels):
        logits = self.hf_model(input_ids=tokens, position_ids=position_ids, use_cache=False).logits
        return F.cross_entropy(logits.float().transpose(1, 2), labels, reduction="none")


def test_both_sides_average_the_same_next_token_targets(hf_side: HFSide) -> None:
    """Same weights and batch: our step's masked mean over ``mbs * (seq - 1)`` targets is transformers' loss."""
    batch = make_batch(CARD.vocab_size, 3, 16, seed=1, device="cpu")
    ours = object.__new__(OursSide)
    ours.model = _PerTokenLossOf(hf_side.model)
    assert float(ours.step(batch)) == pytest.approx(float(hf_side.step(batch)), rel=1e-5)
