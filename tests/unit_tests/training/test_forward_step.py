"""The masked LM loss against a direct computation, and the report shape megatron's train_step reduces."""

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
