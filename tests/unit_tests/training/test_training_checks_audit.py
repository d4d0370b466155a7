"""Start-up checks of the training entry, seventh mutation audit (session 39): behaviour of the CUDA graph, node
package, run schedule, activation log, attention switch, pipeline schedule and card-from-flags checks that a
mutation of their source left every earlier test passing on. Each test names what the user relies on: the fix a
refusal proposes works, a flag with its package installed passes, a warning names the directory megatron writes, a
refusal names the setting at fault, megatron's own refusal is refused before init."""

from __future__ import annotations

import argparse
import os
import random
import re
import types

import pytest
import torch
from megatron.core.transformer.enums import AttnBackend

from megatron.oellm.cards import get_card
from megatron.oellm.megatron_args import flags_to_argv, model_flags, parse_megatron_argv
from megatron.oellm.training.activation_logs import check_activation_logging
from megatron.oellm.training.attention_env import (
    FLASH_GENERATIONS,
    SWITCH_VALUES,
    SWITCHES,
    check_attention_env,
    version_pin,
)
from megatron.oellm.training.card_from_args import card_from_megatron_args, inexpressible_flags, mixer_period
from megatron.oellm.training.cuda_graphs import check_cuda_graphs
from megatron.oellm.training.pipeline_schedule import check_interleaved_microbatches, interleaved_schedule_refusal
from megatron.oellm.training.run_schedule import check_save_flags, profiler_trace_warnings
from tests.unit_tests.training.entry_helpers import (
    TINY_MOE_RUN,
    Reached,
    entry_up_to_pretrain,
    installed_stand_in,
    validated_tiny_moe_run,
)
from tests.unit_tests.training.pipeline_schedule_helpers import interleaved_args, upstream_refusal

QWEN3 = "qwen3-30b-a3b-tiny"
CAPTURES = {"local": ["--cuda-graph-impl", "local"],
            "full_iteration": ["--cuda-graph-impl", "full_iteration", "--no-check-for-nan-in-loss-and-grad"]}


def test_the_cuda_graph_refusals_proposed_routing_is_accepted_by_megatron_and_the_check():
    """The dispatcher refusal ends in a command to capture with instead; those flags, with a capacity factor for its
    ``F``, must be flags megatron's ``validate_args`` accepts and a routing the check then lets through (a misspelt
    flag in the fix would send the user from one refusal into another)."""
    impl = random.choice(sorted(CAPTURES))
    with pytest.raises(ValueError, match="without drop-and-pad routing") as refused:
        check_cuda_graphs(validated_tiny_moe_run(["--bf16", *CAPTURES[impl]]), get_card(QWEN3))
    fix = re.search(r"capture with (--.*?) \(megatron captures", str(refused.value))
    assert fix is not None, str(refused.value)
    capacity = f"{random.uniform(1.0, 2.0):.2f}"
    fixed = [capacity if word == "F" else word for word in fix.group(1).split()]
    assert "F" in fix.group(1).split() and capacity in fixed
    check_cuda_graphs(validated_tiny_moe_run(["--bf16", *CAPTURES[impl], *fixed]), get_card(QWEN3))


@pytest.mark.parametrize("backend", ["deepep", "hybridep"])
def test_capture_with_the_flex_dispatcher_is_left_to_the_dispatcher_check(backend):
    """The module lets the flex dispatcher (DeepEP, HybridEP) through: its counts were not seen copied to the host,
    and a refusal here would stop MoonEP / HybridEP rows that ask for CUDA graphs."""
    impl = random.choice(sorted(CAPTURES))
    flex = ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", backend]
    check_cuda_graphs(validated_tiny_moe_run(["--bf16", *CAPTURES[impl], *flex]), get_card(QWEN3))


@pytest.mark.parametrize(("flag", "modules"), [
    ("--log-energy", ["pynvml"]),
    ("--enable-ft-package", ["nvidia_resiliency_ext", "nvidia_resiliency_ext.fault_tolerance"]),
])
def test_a_flag_whose_package_is_installed_reaches_pretrain(monkeypatch, flag, modules):
    """With the package megatron imports for the flag installed (a stand-in module), the entry goes on to
    ``pretrain``: the check looks for the module megatron imports, not another name."""
    for module in modules:
        installed_stand_in(monkeypatch, module)
    entry = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        entry.main([*TINY_MOE_RUN, flag])


def test_async_save_in_a_format_megatron_saves_asynchronously_is_let_through(tmp_path):
    """megatron-core 0.19.2's ``save_checkpoint`` refuses an asynchronous save only for the legacy ``torch`` format
    (and formats outside torch_dist / torch_dcp / fsdp_dtensor); Megatron-FSDP's ``fsdp_dtensor`` with the persistent
    worker saves asynchronously and must not be refused."""
    save = ["--save", str(tmp_path / "save"), "--save-interval", str(random.randint(1, 400)), "--async-save",
            "--use-persistent-ckpt-worker", "--async-strategy", "mcore"]
    fsdp = validated_tiny_moe_run([*save, "--use-megatron-fsdp", "--ckpt-format", "fsdp_dtensor"])
    assert fsdp.async_save and fsdp.ckpt_format == "fsdp_dtensor"
    check_save_flags(fsdp)
    check_save_flags(validated_tiny_moe_run([*save, "--ckpt-format", "torch_dist"]))
    with pytest.raises(ValueError, match="--async-save with --ckpt-format torch"):
        check_save_flags(validated_tiny_moe_run([*save, "--ckpt-format", "torch"]))


def _named_path(text: str, before: str, after: str) -> str:
    found = re.search(re.escape(before) + r"(\S+?)" + re.escape(after), text)
    assert found is not None, (before, text)
    return found.group(1)


@pytest.mark.parametrize("chakra", [False, True])
def test_the_profiler_warning_names_exactly_the_directories_megatron_writes(tmp_path, chakra):
    """megatron writes the traces to ``Path(f"{args.tensorboard_dir}/../torch_profile")`` (Chakra's to
    ``../chakra``); without ``--tensorboard-dir`` these are relative to the working directory. Each path the warning
    names must be that directory, whole (not a longer name starting with it), so that a user can go there."""
    cwd = tmp_path / f"run{random.randint(0, 10**6)}"
    start = random.randint(2, 50)
    args = validated_tiny_moe_run(["--profile", "--use-pytorch-profiler", "--profile-step-start", str(start),
                                   "--profile-step-end", str(start + random.randint(1, 5)),
                                   *(["--pytorch-profiler-collect-chakra"] if chakra else [])])
    [warning] = profiler_trace_warnings(args, cwd)

    def megatrons(name: str) -> str:
        return os.path.normpath(cwd / f"{args.tensorboard_dir}/../{name}")

    assert _named_path(warning, "writes the profiler traces to ", "," if not chakra else " (") == megatrons(
        "torch_profile")
    assert _named_path(warning, "leaves an empty directory ", " there") == str(cwd / f"{args.tensorboard_dir}")
    if chakra:
        assert _named_path(warning, "the Chakra execution traces to ", ")") == megatrons("chakra")


def test_an_attention_switch_conflict_names_only_the_setting_megatron_asserts_for():
    """A preset version pin is megatron's assertion for ``--flash-attention-version``, a preset backend switch its
    assertion for ``--attention-backend``: the refusal names the one the user has to look at."""
    backend = random.choice(list(AttnBackend))
    version = random.choice(FLASH_GENERATIONS)
    args = types.SimpleNamespace(attention_backend=backend, flash_attention_version=version)
    other = random.choice([generation for generation in FLASH_GENERATIONS if generation != version])
    with pytest.raises(ValueError) as pinned:
        check_attention_env(args, {version_pin(other): "1"})
    assert f"asserts against for --flash-attention-version {version} when it builds" in str(pinned.value)
    index = random.randrange(len(SWITCHES))
    wrong = str(1 - SWITCH_VALUES[backend.name][index])
    with pytest.raises(ValueError) as switched:
        check_attention_env(args, {SWITCHES[index]: wrong})
    assert f"asserts against for --attention-backend {backend.name} when it builds" in str(switched.value)
    with pytest.raises(ValueError) as both:
        check_attention_env(args, {SWITCHES[index]: wrong, version_pin(other): "1"})
    assert (f"for --attention-backend {backend.name} and --flash-attention-version {version} when"
            in str(both.value))


def test_a_micro_batch_group_below_the_pipeline_size_is_refused_as_megatrons_schedule_refuses_it():
    """megatron-core's interleaved schedule refuses ``--microbatch-group-size-per-virtual-pipeline-stage`` below the
    pipeline size at the first step, whatever the micro-batch count; the check refuses it before init."""
    pipeline = random.choice([4, 8])
    group = random.randint(1, pipeline - 1)
    microbatches = pipeline * random.randint(2, 4)  # a count the default group (the pipeline size) runs
    assert upstream_refusal(microbatches, pipeline, pipeline) is None
    assert upstream_refusal(microbatches, pipeline, group) is not None
    assert interleaved_schedule_refusal(microbatches, pipeline, group) is not None
    args = interleaved_args(pipeline_model_parallel_size=pipeline, microbatch_group_size_per_vp_stage=group,
                            data_parallel_size=1, global_batch_size=microbatches, eval_iters=0)
    with pytest.raises(ValueError, match=rf"micro-batch group per virtual stage \({group}\) must lie between the "
                                         rf"pipeline size \({pipeline}\)"):
        check_interleaved_microbatches(args)


def _card_args(name: str = QWEN3) -> argparse.Namespace:
    card = get_card(name)
    return parse_megatron_argv(flags_to_argv(model_flags(card)) + ["--seq-length", str(card.seq_length)])


def test_per_layer_moe_values_that_differ_are_refused_from_flags():
    """Megatron parses ``--moe-aux-loss-coeff`` and ``--moe-router-load-balancing-type`` per layer; a card holds one
    value, so differing values are refused (not silently replaced by the first), and equal ones are read as one."""
    coeffs = random.sample([1e-4, 1e-3, 2e-3, 1e-2], k=random.randint(2, 3))
    args = _card_args()
    args.moe_aux_loss_coeff = coeffs
    with pytest.raises(ValueError, match=r"per-layer values .* cannot be expressed by a model card"):
        card_from_megatron_args(args)
    args.moe_aux_loss_coeff = [coeffs[0]] * len(coeffs)
    assert card_from_megatron_args(args).moe_aux_loss_coeff == coeffs[0]
    args.moe_router_load_balancing_type = ["aux_loss", "seq_aux_loss"]
    with pytest.raises(ValueError, match="per-layer values"):
        card_from_megatron_args(args)


@pytest.mark.parametrize("period", ["GE", "*E", "GEKE*E"], ids=["gdn-only", "attention-only", "two-linear-mixers"])
def test_a_hybrid_pattern_without_one_linear_mixer_beside_attention_is_refused_by_that_rule(period):
    """A pattern of Gated DeltaNet alone, attention alone, or two linear mixers is no card's: refused with the rule
    it breaks (not an index error, nor a periodicity complaint)."""
    pattern = period * random.randint(1, 4)
    with pytest.raises(ValueError, match=r"must mix exactly one linear mixer with attention"):
        mixer_period(pattern)


@pytest.mark.parametrize("flag", ["--save-activations-interval", "--save-dgrads-interval"])
def test_each_log_is_judged_by_its_own_megatron_module_classes(monkeypatch, flag):
    """megatron keeps separate class lists for activation logging and for activation-gradient logging: each flag is
    refused where its own list holds a placeholder (not a class) and let through where its own list is real."""
    from megatron.training import activation_logging, dgrad_logging

    real, placeholder = (torch.nn.Linear, torch.nn.Embedding), (torch.nn.Linear, object())
    own, other = ((activation_logging, dgrad_logging) if flag == "--save-activations-interval"
                  else (dgrad_logging, activation_logging))
    interval = random.randint(1, 50)
    args = validated_tiny_moe_run([flag, str(interval)])
    monkeypatch.setattr(own, "LINEAR_TYPES", placeholder)
    monkeypatch.setattr(other, "LINEAR_TYPES", real)
    with pytest.raises(ValueError, match=rf"{flag} {interval}: megatron-core 0.19.2 picks the modules"):
        check_activation_logging(args, "te")
    monkeypatch.setattr(own, "LINEAR_TYPES", real)
    monkeypatch.setattr(other, "LINEAR_TYPES", placeholder)
    check_activation_logging(args, "te")


def test_the_expert_dtype_refusals_proposed_fix_is_let_through():
    """The torch-native experts' dtype refusal proposes ``--bf16``: the same capture with it must pass the check."""
    impl = random.choice(sorted(CAPTURES))
    drop_and_pad = ["--moe-token-dispatcher-type", "alltoall", "--moe-expert-capacity-factor",
                    f"{random.uniform(1.0, 2.0):.2f}", "--moe-pad-expert-input-to-capacity"]
    with pytest.raises(ValueError, match="the torch-native experts in torch.float32") as refused:
        check_cuda_graphs(validated_tiny_moe_run([*CAPTURES[impl], *drop_and_pad]), get_card(QWEN3))
    assert str(refused.value).endswith("train with --bf16")
    check_cuda_graphs(validated_tiny_moe_run(["--bf16", *CAPTURES[impl], *drop_and_pad]), get_card(QWEN3))


def test_the_expert_width_is_read_from_the_moe_flag_not_the_dense_one():
    """Megatron's own MoE scripts give ``--ffn-hidden-size`` (the dense width, unused when every layer is MoE) beside
    ``--moe-ffn-hidden-size``: the card's expert width is the MoE flag's, and the dense one only where that is
    unset, as megatron-core builds the experts."""
    args = _card_args()
    card = get_card(QWEN3)
    args.ffn_hidden_size = card.moe_ffn_hidden_size * random.randint(2, 8)
    assert card_from_megatron_args(args).moe_ffn_hidden_size == card.moe_ffn_hidden_size
    args.moe_ffn_hidden_size = None
    assert card_from_megatron_args(args).moe_ffn_hidden_size == args.ffn_hidden_size


def test_pipeline_stage_separators_in_a_hybrid_pattern_leave_the_card_unchanged():
    """``|`` in ``--hybrid-layer-pattern`` marks pipeline stages, not layers: a pattern split into several stages
    describes the same card (layer count included) as the unsplit one."""
    args = _card_args("qwen3.5-35b-a3b-proxy-8L")
    whole = card_from_megatron_args(args)
    pattern = args.hybrid_layer_pattern
    layers = len(pattern) // 2
    cuts = sorted(random.sample(range(1, layers), k=random.randint(2, layers - 1)))
    args.hybrid_layer_pattern = "|".join(pattern[2 * start:2 * end] for start, end in
                                         zip([0, *cuts], [*cuts, layers], strict=True))
    assert args.hybrid_layer_pattern.count("|") == len(cuts) >= 2
    assert card_from_megatron_args(args) == whole
    assert whole.num_layers == layers


def test_an_export_reader_passes_multi_token_prediction_the_entry_refuses():
    """``allow_mtp`` (``oellm convert`` mcore-to-hf, which drops the head) leaves out ``--mtp-num-layers`` and a
    hybrid pattern's ``/`` part; without it both are named."""
    args = _card_args("qwen3.5-35b-a3b-proxy-8L")
    depth = random.randint(1, 3)
    args.mtp_num_layers = depth
    args.hybrid_layer_pattern += "/" + "*E" * depth
    assert inexpressible_flags(args, allow_mtp=True) == []
    refused = inexpressible_flags(args)
    assert len(refused) == 2 and refused[0].startswith(f"--mtp-num-layers {depth} ")
    assert "(multi-token prediction layers after '/')" in refused[1]


def test_query_groups_without_group_query_attention_are_read_as_megatron_builds_them():
    """megatron-core builds the attention with ``--num-query-groups`` only under ``--group-query-attention``
    (``num_query_groups=None``, one group per head, otherwise): the card read back from such flags has one key/value
    head per query head, so that its FLOP and parameter counts are those of the model megatron trains."""
    args = _card_args()
    heads = args.num_attention_heads
    args.group_query_attention = False
    args.num_query_groups = random.choice([groups for groups in range(1, heads) if heads % groups == 0])
    assert card_from_megatron_args(args).num_query_groups == heads
    args.group_query_attention = True
    assert card_from_megatron_args(args).num_query_groups == args.num_query_groups
