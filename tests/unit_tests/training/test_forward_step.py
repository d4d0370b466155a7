"""The masked LM loss against a direct computation, the report shape megatron's train_step reduces, and which
pipeline stages read micro-batches."""

import pytest
import torch

from megatron.oellm.training.forward_step import masked_lm_loss


def test_masked_loss_sum_count_and_report():
    losses = torch.rand(3, 17) * 5
    mask = (torch.rand(3, 17) > 0.3).float()
    loss_sum, num_tokens, report = masked_lm_loss(mask, losses)
    expected = sum(float(losses[i, j]) for i in range(3) for j in range(17) if mask[i, j] > 0)
    assert torch.isclose(loss_sum, torch.tensor(expected), rtol=1e-5)
    assert int(num_tokens) == int((mask > 0).sum()) and num_tokens.dtype == torch.int
    assert report["lm loss"].shape == (2,)  # [sum, tokens]: megatron sums over micro-batches, then divides
    assert torch.allclose(report["lm loss"], torch.stack([loss_sum, num_tokens.float()]))


def test_loss_keeps_the_graph_but_report_is_detached():
    losses = (torch.rand(2, 5) + 1).requires_grad_()
    mask = torch.ones(2, 5)
    loss_sum, _, report = masked_lm_loss(mask, losses)
    loss_sum.backward()
    assert torch.equal(losses.grad, mask) and not report["lm loss"].requires_grad


class _Timer:
    def start(self):
        return None

    def stop(self):
        return None


@pytest.mark.parametrize("holds_embedding_or_loss", [True, False])
def test_only_first_and_last_stages_read_a_micro_batch(holds_embedding_or_loss, monkeypatch):
    import megatron.training
    import megatron.training.utils

    from megatron.oellm.training import forward_step as module

    monkeypatch.setattr(megatron.training, "get_timers", lambda: (lambda *args, **kwargs: _Timer()))
    monkeypatch.setattr(megatron.training.utils, "is_first_or_last_pipeline_stage",
                        lambda vp_stage: holds_embedding_or_loss)
    monkeypatch.setattr(module, "next_batch", lambda iterator: dict.fromkeys(module.BATCH_KEYS, next(iterator)))
    seen = {}

    class Model(torch.nn.Module):
        vp_stage = None  # as megatron's GPTModel / HybridModel carry it

        def forward(self, tokens, position_ids, attention_mask, labels=None, loss_mask=None):
            seen["tokens"] = tokens
            return "output"

    model = Model()

    iterator = iter([torch.ones(2, 3)])
    output, _ = module.forward_step(iterator, model)
    assert output == "output"
    assert (seen["tokens"] is not None) == holds_embedding_or_loss
    assert (next(iterator, None) is None) == holds_embedding_or_loss  # middle stages leave the iterator alone
