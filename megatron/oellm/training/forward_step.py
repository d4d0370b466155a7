"""Megatron ``forward_step``: one micro-batch through the model and the masked language-model loss.

The loss follows megatron's token-averaged reporting: ``loss_func`` returns the masked loss sum, the number of
loss tokens and ``{"lm loss": [sum, tokens]}``; megatron divides (per micro-batch, or over the global batch with
``--calculate-per-token-loss``) and averages the report over data-parallel ranks. Nothing here reads a value back
to the host, so the step stays free of GPU synchronisation, except under ``--check-for-spiky-loss``: that check
hands each micro-batch's mean loss to megatron's rerun state machine, which reads it. A NaN or Inf loss is caught by
megatron's gradient check (``--check-for-nan-in-loss-and-grad``, on by default), which runs without a loss check.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from functools import partial

import torch

from megatron.oellm.cards import ModelCard

BATCH_KEYS = ("tokens", "labels", "loss_mask", "position_ids", "attention_mask")
"""Fields of a ``GPTDataset`` sample that the model step uses (``attention_mask`` is None: the entry's arguments turn
the loader's mask off, see :func:`megatron.oellm.training.flags.add_oellm_arguments`)."""


def masked_lm_loss(loss_mask: torch.Tensor, output_tensor: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Sum of the per-token losses where ``loss_mask`` is set, their count, and megatron's ``lm loss`` report."""
    mask = loss_mask.reshape(-1).float()
    loss_sum = torch.sum(output_tensor.reshape(-1).float() * mask)
    num_tokens = mask.sum().to(torch.int)
    report = torch.stack([loss_sum.detach(), num_tokens.float()])
    return loss_sum, num_tokens, {"lm loss": report}


SPIKY_LOSS_FACTOR = 10.0
"""``--check-for-spiky-loss`` rejects a micro-batch whose mean loss exceeds this multiple of the largest seen so far
(the threshold of megatron's own pretrain scripts)."""


def spiky_checked_lm_loss(loss_mask: torch.Tensor, output_tensor: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """:func:`masked_lm_loss`, its mean per token also validated by megatron's rerun state machine as a spiky loss
    (``--check-for-spiky-loss``; not fatal: megatron re-runs the iteration to tell a hardware fault from data)."""
    from megatron.core.rerun_state_machine import get_rerun_state_machine

    loss_sum, num_tokens, report = masked_lm_loss(loss_mask, output_tensor)
    machine = get_rerun_state_machine()
    machine.validate_result(
        result=loss_sum.detach() / num_tokens.clamp(min=1),
        rejection_func=partial(machine.is_unexpectedly_large, threshold=SPIKY_LOSS_FACTOR, context="loss"),
        message="Spiky loss", tolerance=0.0, fatal=False)
    return loss_sum, num_tokens, report


def next_batch(data_iterator: Iterator[dict[str, torch.Tensor | None]]) -> dict[str, torch.Tensor | None]:
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


def check_schedule_support(args: argparse.Namespace, card: ModelCard) -> None:
    """Raise ValueError, before Megatron initialises, for ``--overlap-moe-expert-parallel-comm`` on a model class
    without ``build_schedule_plan``: the combined 1F1B schedule of that flag asks the model for a schedule plan at
    the first step, and megatron-core 0.19.2's HybridModel (Qwen3.5) has none."""
    from megatron.core.models.hybrid.hybrid_model import HybridModel

    if args.overlap_moe_expert_parallel_comm and card.linear_mixer != "none" and not hasattr(
            HybridModel, "build_schedule_plan"):
        raise ValueError(f"--overlap-moe-expert-parallel-comm: {card.name} is a megatron-core HybridModel, which has "
                         "no build_schedule_plan for the combined 1F1B schedule this flag runs; unset it (it works "
                         "for the GPT models: Qwen3 MoE)")


def forward_step(data_iterator: Iterator[dict[str, torch.Tensor | None]] | None, model: torch.nn.Module, *,
                 return_schedule_plan: bool = False) -> tuple[object, Callable[[torch.Tensor], tuple]]:
    """Megatron ``forward_step_func``: run ``model`` on the next micro-batch; return its output and the loss.

    With ``return_schedule_plan`` (what megatron's combined 1F1B schedule passes under
    ``--overlap-moe-expert-parallel-comm``) the first value is the model's schedule plan for the micro-batch
    (``GPTModel.build_schedule_plan``, same inputs) instead of its output; the loss is the same. Keyword-only, so
    that a third positional argument (megatron's per-micro-batch recompute switch, which no megatron-core model
    takes) fails instead of asking for a schedule plan.
    """
    from megatron.core.utils import get_attr_wrapped_model
    from megatron.training import get_args, get_timers
    from megatron.training.training import stimer as straggler_timer
    from megatron.training.utils import is_first_or_last_pipeline_stage

    # megatron's straggler detector, the instance its training loop configures and reports (calling the class again
    # would re-initialise it, disabled): under --log-straggler the report divides by the time spent in these two
    # sections, so they are timed as megatron's own pretrain_gpt times them; otherwise entering them does nothing
    timers = get_timers()
    timers("batch-generator", log_level=2).start()
    with straggler_timer(bdata=True):
        # Only the stages holding the embedding or the loss read a micro-batch (as megatron's pretrain_gpt does):
        # middle stages would copy tokens, labels and masks to the GPU for nothing.
        needs_batch = data_iterator is not None and is_first_or_last_pipeline_stage(
            get_attr_wrapped_model(model, "vp_stage"))
        batch = next_batch(data_iterator) if needs_batch else dict.fromkeys(BATCH_KEYS)
    timers("batch-generator").stop()
    run = model.build_schedule_plan if return_schedule_plan else model
    with straggler_timer:
        output_tensor = run(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"],
                            loss_mask=batch["loss_mask"])
    loss = spiky_checked_lm_loss if get_args().check_for_spiky_loss else masked_lm_loss
    return output_tensor, partial(loss, batch["loss_mask"])
