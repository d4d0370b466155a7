"""Megatron ``forward_step``: one micro-batch through the model and the masked language-model loss.

The loss follows megatron's token-averaged reporting: ``loss_func`` returns the masked loss sum, the number of
loss tokens and ``{"lm loss": [sum, tokens]}``; megatron divides (per micro-batch, or over the global batch with
``--calculate-per-token-loss``) and averages the report over data-parallel ranks. Nothing here reads a value back
to the host, so the step stays free of GPU synchronisation.
"""

from __future__ import annotations

from functools import partial

import torch

BATCH_KEYS = ("tokens", "labels", "loss_mask", "position_ids", "attention_mask")
"""Fields of a ``GPTDataset`` sample that the model step uses (``attention_mask`` only when the loader makes it)."""


def masked_lm_loss(loss_mask: torch.Tensor, output_tensor: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Sum of the per-token losses where ``loss_mask`` is set, their count, and megatron's ``lm loss`` report."""
    mask = loss_mask.reshape(-1).float()
    loss_sum = torch.sum(output_tensor.reshape(-1).float() * mask)
    num_tokens = mask.sum().to(torch.int)
    report = torch.stack([loss_sum.detach(), num_tokens.float()])
    return loss_sum, num_tokens, {"lm loss": report}


def next_batch(data_iterator) -> dict[str, torch.Tensor | None]:
    """The next micro-batch on this GPU (non-blocking copies), split along the sequence for context parallelism."""
    from megatron.core import parallel_state
    from megatron.core.utils import get_batch_on_this_cp_rank

    sample = next(data_iterator)
    batch = {key: sample[key].cuda(non_blocking=True) if sample.get(key) is not None else None
             for key in BATCH_KEYS}
    if parallel_state.get_context_parallel_world_size() > 1:
        batch = get_batch_on_this_cp_rank(batch, is_hybrid_cp=False,
                                          cp_group=parallel_state.get_context_parallel_group())
    return batch


def forward_step(data_iterator, model):
    """Megatron ``forward_step_func``: run ``model`` on the next micro-batch; return its output and the loss."""
    from megatron.core.utils import get_attr_wrapped_model
    from megatron.training import get_timers
    from megatron.training.utils import is_first_or_last_pipeline_stage

    timers = get_timers()
    timers("batch-generator", log_level=2).start()
    # Only the stages holding the embedding or the loss read a micro-batch (as megatron's pretrain_gpt does):
    # middle stages would copy tokens, labels and masks to the GPU for nothing.
    needs_batch = data_iterator is not None and is_first_or_last_pipeline_stage(
        get_attr_wrapped_model(model, "vp_stage"))
    batch = next_batch(data_iterator) if needs_batch else dict.fromkeys(BATCH_KEYS)
    timers("batch-generator").stop()
    output_tensor = model(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"],
                          loss_mask=batch["loss_mask"])
    return output_tensor, partial(masked_lm_loss, batch["loss_mask"])
