"""The masked LM loss against a direct computation, the report shape megatron's train_step reduces, and which
pipeline stages read micro-batches."""


import random

import pytest
import torch

from megatron.oellm.training.forward_step import BATCH_KEYS, masked_lm_loss
from tests.unit_tests.training.forward_step_helpers import forward_step_stand_ins


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


@pytest.mark.parametrize("holds_embedding_or_loss", [True, False])
def test_only_first_and_last_stages_read_a_micro_batch(holds_embedding_or_loss, monkeypatch):

    from megatron.oellm.training import forward_step as module

    forward_step_stand_ins(monkeypatch, reads_batch=lambda vp_stage: holds_embedding_or_loss)
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


class _Model(torch.nn.Module):
    """Per-token losses of a micro-batch: the model's output when megatron passes labels."""

    vp_stage = None

    def forward(self, tokens, position_ids, attention_mask, labels=None, loss_mask=None):
        return tokens.float()


@pytest.mark.parametrize("check", [True, False])
def test_check_for_spiky_loss_hands_the_mean_loss_to_megatrons_rerun_machine(check, monkeypatch):
    """--check-for-spiky-loss was accepted and silently ignored: the loss function never asked megatron's rerun state
    machine to validate the loss."""
    from functools import partial as partial_type

    import megatron.core.rerun_state_machine as rerun

    from megatron.oellm.training import forward_step as module

    calls = []

    class Machine:
        def is_unexpectedly_large(self, result, threshold, context):
            return bool(result > threshold)

        def validate_result(self, result, rejection_func, message, tolerance, fatal):
            calls.append((float(result), rejection_func, message, fatal, tolerance))

    monkeypatch.setattr(rerun, "get_rerun_state_machine", lambda: Machine())
    forward_step_stand_ins(monkeypatch, check_for_spiky_loss=check)
    losses, mask = torch.rand(2, 9) * 4 + 0.5, (torch.rand(2, 9) > 0.4).float()
    mask[0, 0] = 1.0
    monkeypatch.setattr(module, "next_batch", lambda iterator: {**dict.fromkeys(module.BATCH_KEYS), "tokens": losses,
                                                               "loss_mask": mask})
    output, loss_func = module.forward_step(iter([None]), _Model())
    loss_sum, num_tokens, _ = loss_func(output)
    assert float(loss_sum) == pytest.approx(float((losses * mask).sum()), rel=1e-6)
    if not check:
        assert calls == []
        return
    ((result, rejection, message, fatal, tolerance),) = calls
    assert result == pytest.approx(float((losses * mask).sum() / mask.sum()), rel=1e-6)
    assert message == "Spiky loss" and fatal is False
    # megatron's own spiky-loss check (RerunStateMachine.validate_result's docstring, pretrain_gpt): a loss 10x the
    # largest so far is rejected, and the re-run must reproduce the loss exactly (tolerance 0)
    assert isinstance(rejection, partial_type) and rejection.keywords == {"threshold": 10, "context": "loss"}
    assert tolerance == 0.0


def test_the_combined_1f1b_schedule_gets_the_models_schedule_plan(monkeypatch):
    """--overlap-moe-expert-parallel-comm (the Qwen3-235B Jupiter sweep's overlap row): megatron's combined 1F1B
    schedule calls forward_step_func(data_iterator, model, return_schedule_plan=True), which raised TypeError at the
    first step, after the model and optimizer were on the GPUs."""
    import inspect

    import megatron.core.pipeline_parallel.combined_1f1b as combined_1f1b

    from megatron.oellm.training import forward_step as module

    assert "return_schedule_plan=True" in inspect.getsource(combined_1f1b)  # the call this test stands in for
    forward_step_stand_ins(monkeypatch)
    batch = {key: torch.rand(2, 7) for key in module.BATCH_KEYS}
    monkeypatch.setattr(module, "next_batch", lambda iterator: next(iterator))

    class Model(_Model):
        def build_schedule_plan(self, input_ids, position_ids, attention_mask, labels=None, loss_mask=None):
            return ("plan", input_ids, position_ids, attention_mask, labels, loss_mask)

    plan, loss_func = module.forward_step(iter([batch]), Model(), return_schedule_plan=True)
    assert plan[0] == "plan" and all(got is batch[key] for got, key in zip(
        plan[1:], ("tokens", "position_ids", "attention_mask", "labels", "loss_mask"), strict=True))
    losses = torch.rand(2, 7) + 0.1
    assert float(loss_func(losses)[0]) == pytest.approx(float((losses * batch["loss_mask"]).sum()), rel=1e-6)
    output, _ = module.forward_step(iter([batch]), Model())
    assert torch.equal(output, batch["tokens"])


def test_overlapped_expert_communication_is_refused_for_the_hybrid_model_only():
    """megatron-core's HybridModel has no build_schedule_plan, which the combined 1F1B schedule of
    --overlap-moe-expert-parallel-comm calls at the first step; the GPT models have it."""
    import argparse

    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.models.hybrid.hybrid_model import HybridModel

    from megatron.oellm.cards import get_card
    from megatron.oellm.training.forward_step import check_schedule_support

    assert hasattr(GPTModel, "build_schedule_plan") and not hasattr(HybridModel, "build_schedule_plan")
    overlapped, plain = argparse.Namespace(overlap_moe_expert_parallel_comm=True), argparse.Namespace(
        overlap_moe_expert_parallel_comm=False)
    with pytest.raises(ValueError, match="--overlap-moe-expert-parallel-comm: qwen3.5-35b-a3b is a megatron-core "
                                         "HybridModel"):
        check_schedule_support(overlapped, get_card("qwen3.5-35b-a3b"))
    check_schedule_support(plain, get_card("qwen3.5-35b-a3b"))
    check_schedule_support(overlapped, get_card("qwen3-235b-a22b"))


def test_a_third_positional_argument_is_not_taken_for_the_schedule_plan_switch():
    """megatron passes a per-micro-batch recompute switch as a third positional argument in one configuration;
    bound to ``return_schedule_plan`` it would silently ask for a schedule plan."""
    import inspect

    from megatron.oellm.training.forward_step import forward_step

    parameter = inspect.signature(forward_step).parameters["return_schedule_plan"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("vp_stage", [None, 1])
def test_the_stage_check_gets_the_chunks_virtual_stage_and_no_iterator_reads_nothing(vp_stage, monkeypatch):
    """Under virtual pipelining the first/last-stage test must be asked about this model chunk's ``vp_stage`` (a middle
    chunk on the first rank reads no micro-batch); a stage without a data iterator (None) reads none either."""

    from megatron.oellm.training import forward_step as module

    asked = []
    forward_step_stand_ins(monkeypatch, reads_batch=lambda vp_stage: asked.append(vp_stage) or True)
    monkeypatch.setattr(module, "next_batch", lambda iterator: dict.fromkeys(module.BATCH_KEYS, next(iterator)))

    class Model(_Model):
        def forward(self, tokens, position_ids, attention_mask, labels=None, loss_mask=None):
            return tokens

    model = Model()
    model.vp_stage = vp_stage
    tokens = torch.rand(2, 3)
    output, _ = module.forward_step(iter([tokens]), model)
    assert output is tokens and asked == [vp_stage]
    output, _ = module.forward_step(None, model)
    assert output is None and asked == [vp_stage]  # not asked again: no iterator, no micro-batch


@pytest.mark.parametrize(("cp_size", "cp_rank"), [(1, 0), (2, 0), (2, 1)])
def test_next_batch_moves_every_field_and_splits_the_sequence_for_context_parallelism(cp_size, cp_rank, monkeypatch):
    """Every field of the sample reaches the model (``attention_mask`` stays None); under context parallelism 2 the
    sequence of 8 is cut into 4 chunks of 2 and rank 0 keeps chunks 0 and 3, rank 1 chunks 1 and 2 (megatron's
    load-balanced layout for causal attention), the same columns of every field."""
    import torch.distributed
    from megatron.core import parallel_state

    from megatron.oellm.training.forward_step import next_batch

    moved = []
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, non_blocking=False: moved.append(non_blocking) or self)
    monkeypatch.setattr(parallel_state, "get_context_parallel_world_size", lambda: cp_size)
    monkeypatch.setattr(parallel_state, "get_context_parallel_group", lambda: "cp group")
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: cp_size)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: cp_rank)
    generator = torch.Generator().manual_seed(random.randrange(2**31))
    sample = {"tokens": torch.randint(0, 1000, (2, 8), generator=generator),
              "labels": torch.randint(0, 1000, (2, 8), generator=generator),
              "loss_mask": (torch.rand(2, 8, generator=generator) > 0.3).float(),
              "position_ids": torch.arange(8).repeat(2, 1), "attention_mask": None, "unused": torch.ones(2, 8)}
    batch = next_batch(iter([sample]))
    assert set(batch) == set(BATCH_KEYS) and batch["attention_mask"] is None
    assert moved == [True] * 4  # non-blocking copies of the four tensors the model step uses
    columns = {(1, 0): list(range(8)), (2, 0): [0, 1, 6, 7], (2, 1): [2, 3, 4, 5]}[(cp_size, cp_rank)]
    for key in ("tokens", "labels", "loss_mask", "position_ids"):
        assert torch.equal(batch[key], sample[key][:, columns]), key
