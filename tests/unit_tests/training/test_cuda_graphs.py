"""megatron-core's own CUDA graph capture against our models: refused where it failed on the H200 at the first step
(the premises are GPU-only; the runs are in docs/benchmarks.md, sessions 38 and 39) or where the all-to-all
dispatcher's source copies to the host; let through with the all-to-all dispatcher's drop-and-pad routing and bf16
experts, which trained on the H200 to the losses of the same run without graphs (session 39)."""

from __future__ import annotations

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.training.cuda_graphs import check_cuda_graphs
from tests.unit_tests.training.entry_helpers import (
    Reached,
    entry_up_to_pretrain,
    refused_line,
    tiny_moe_run,
    validated_tiny_moe_run,
)

QWEN3, QWEN35 = "qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"
FULL_ITERATION = ["--cuda-graph-impl", "full_iteration", "--no-check-for-nan-in-loss-and-grad"]
DROP_AND_PAD = ["--moe-token-dispatcher-type", "alltoall", "--moe-expert-capacity-factor", "1.0",
                "--moe-pad-expert-input-to-capacity"]


@pytest.mark.parametrize("card", [QWEN3, QWEN35])
@pytest.mark.parametrize("impl", [["--cuda-graph-impl", "local"], FULL_ITERATION,
                                  ["--cuda-graph-impl", "local", "--cuda-graph-modules", "attn", "moe_router"]])
def test_capture_of_dropless_moe_layers_is_refused(card, impl):
    args = validated_tiny_moe_run(impl, card=card)
    if card == QWEN35 and impl[1] == "local":
        message = "Gated DeltaNet layers fail in megatron-core 0.19.2's CUDA graph capture"
    else:
        message = f"--cuda-graph-impl {impl[1]}: {card}'s MoE layers run the allgather token dispatcher"
    with pytest.raises(ValueError, match=message):
        check_cuda_graphs(args, get_card(card))


def test_local_capture_of_a_hybrid_model_is_refused_whatever_the_routing():
    args = validated_tiny_moe_run(["--cuda-graph-impl", "local", *DROP_AND_PAD], card=QWEN35)
    with pytest.raises(ValueError, match="Gated DeltaNet layers"):
        check_cuda_graphs(args, get_card(QWEN35))


@pytest.mark.parametrize("routing", [
    ["--moe-token-dispatcher-type", "allgather", *DROP_AND_PAD[2:]],  # all-gather copies whatever the routing
    ["--moe-token-dispatcher-type", "alltoall"],  # dropless
    ["--moe-token-dispatcher-type", "alltoall", "--moe-expert-capacity-factor", "1.0"],  # drops, does not pad
])
def test_capture_of_moe_layers_whose_dispatcher_copies_to_the_host_is_refused(routing):
    args = validated_tiny_moe_run([*FULL_ITERATION, *routing], card=QWEN3)
    with pytest.raises(ValueError, match="without drop-and-pad routing, which copies the tokens-per-expert counts"):
        check_cuda_graphs(args, get_card(QWEN3))


@pytest.mark.parametrize(("card", "extra"), [
    (QWEN3, []),
    (QWEN3, ["--bf16", "--cuda-graph-impl", "local", *DROP_AND_PAD]),
    (QWEN3, ["--bf16", "--cuda-graph-impl", "local", "--cuda-graph-modules", "attn", "moe_router", *DROP_AND_PAD]),
    (QWEN3, ["--bf16", *FULL_ITERATION, *DROP_AND_PAD]),
    (QWEN35, ["--bf16", *FULL_ITERATION, *DROP_AND_PAD]),
])
def test_what_was_seen_training_passes(card, extra):
    """No CUDA graphs, or the all-to-all dispatcher's drop-and-pad routing with bf16 experts (megatron's documented
    MoE capture): each trained on the H200 (session 39)."""
    check_cuda_graphs(validated_tiny_moe_run(extra, card=card), get_card(card))


@pytest.mark.parametrize("precision", [[], ["--fp16"]], ids=["fp32", "fp16"])
@pytest.mark.parametrize("capture", [
    ["--cuda-graph-impl", "local"],
    ["--cuda-graph-impl", "local", "--cuda-graph-modules", "attn", "moe"],
    ["--cuda-graph-impl", "local", "--cuda-graph-modules", "attn", "moe_router"],
    FULL_ITERATION,
], ids=["whole-layer", "moe", "attn-moe_router", "full_iteration"])
def test_capture_of_torch_native_experts_outside_bf16_is_refused(precision, capture):
    """torch's grouped GEMM reads the offsets on the host for fp16 and fp32, so capturing the experts fails there;
    they ran under capture even with ``attn moe_router`` (session 39), so every scope is refused."""
    args = validated_tiny_moe_run([*precision, *capture, *DROP_AND_PAD], card=QWEN3)
    dtype = "torch.float16" if precision else "torch.float32"
    with pytest.raises(ValueError, match=f"the torch-native experts in {dtype} run torch's grouped GEMM fallback"):
        check_cuda_graphs(args, get_card(QWEN3))


def test_fp32_expert_capture_on_transformer_engine_is_not_refused(monkeypatch):
    """The dtype refusal is the torch-native experts' (TE's grouped GEMM takes host splits by design)."""
    monkeypatch.setattr("megatron.oellm.backends.selection.resolve_backend", lambda name: "te")
    check_cuda_graphs(validated_tiny_moe_run([*FULL_ITERATION, *DROP_AND_PAD]), get_card(QWEN3))


@pytest.mark.parametrize(("backend", "refused"), [("auto", False), ("torch", True)])
def test_recipe_checks_judge_the_backend_the_cluster_resolves(backend, refused):
    """``oellm recipe`` checks on a login node without TE: ``auto`` is the image's Transformer Engine there, so an fp32
    capture of the experts passes; an explicit torch backend is refused as on the cluster."""
    from megatron.oellm.recipes.megatron_validation import check_model_config_on_cluster

    args = validated_tiny_moe_run([*FULL_ITERATION, *DROP_AND_PAD, "--oellm-backend", backend])
    if not refused:
        check_model_config_on_cluster(args, 1, {})
        return
    with pytest.raises(ValueError, match="the torch-native experts in torch.float32"):
        check_model_config_on_cluster(args, 1, {})


def test_the_entry_refuses_it_in_one_line(monkeypatch, capsys):
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*tiny_moe_run(QWEN35), "--cuda-graph-impl", "local"])
    assert "--cuda-graph-impl local: qwen3.5-35b-a3b-tiny's Gated DeltaNet layers" in line
    with pytest.raises(Reached):
        entry.main(tiny_moe_run(QWEN35))
