"""Each backend trains: ~30 Adam steps on one fixed batch of random tokens make the loss fall.

A smoke test of learning only: memorising one batch halves the loss under many a wrong forward or gradient, so it
shows that gradients reach the parameters and the optimizer moves them, not that either is right. Correctness rests
on the parity tests (``test_parity_gpu.py``: logits, loss and gradients against transformers; the layers' and
backends' tests against their definitions and each other).

Built by the spec builders with the card's own settings (global auxiliary load-balancing loss included), for the
tiny flavour of each family, fresh seed each run; the Transformer Engine backend where TE imports.
"""

from __future__ import annotations

import random

import pytest
import torch

from megatron.oellm.cards import get_card
from tests.unit_tests.gpu_utils import BACKENDS, init_megatron_runtime, reseed

pytestmark = pytest.mark.gpu

STEPS, BATCH, SEQ = 30, 4, 64


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"])
def test_loss_falls_with_adam(name: str, backend: str) -> None:
    from megatron.oellm.models import spec_builder

    init_megatron_runtime()
    seed = int.from_bytes(random.randbytes(4), "little")
    reseed(seed)
    card = get_card(name)
    builder = spec_builder(card.family)
    model = builder.build_model(card, backend=backend, params_dtype=torch.float32).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, card.vocab_size, (BATCH, SEQ), device="cuda")
    positions = torch.arange(SEQ, device="cuda").expand(BATCH, SEQ)
    labels = torch.roll(tokens, -1, dims=1)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        loss = model(tokens, positions, None, labels=labels)[:, :-1].mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(f"\n{name} ({backend}) seed {seed}: loss {losses[0]:.3f} -> {losses[-1]:.3f} after {STEPS} Adam steps")
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.5 * losses[0], losses
