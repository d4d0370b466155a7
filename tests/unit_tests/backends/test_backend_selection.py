"""Backend choice, spec-provider contents and unsupported-combination errors (CPU only)."""

import importlib
import inspect
import random
import warnings

import pytest
import torch
import torch.nn.functional as F
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.enums import AttnBackend
from megatron.core.transformer.moe.experts import SequentialMLP
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.oellm.backends import selection
from megatron.oellm.backends import te_flash_attention as te_flash
from megatron.oellm.backends.torch_native import TorchNativeSpecProvider
from megatron.oellm.backends.torch_native.attention import SDPACoreAttention
from megatron.oellm.backends.torch_native.grouped_mlp import (
    ColumnParallelStackedGroupedLinear,
    RowParallelStackedGroupedLinear,
    TorchGroupedMLP,
)
from megatron.oellm.backends.torch_native.norm_linear import RMSNormColumnParallelLinear
from megatron.oellm.backends.torch_native.norms import RMSNorm
from megatron.oellm.training.args import parse_oellm_argv


@pytest.fixture
def te_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend Transformer Engine fails to import."""
    monkeypatch.setattr(selection, "transformer_engine_import_error", lambda: "ModuleNotFoundError: no TE")


@pytest.fixture
def te_present(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend Transformer Engine imports."""
    monkeypatch.setattr(selection, "transformer_engine_import_error", lambda: None)


def test_auto_prefers_te_when_importable(te_present: None) -> None:
    assert selection.resolve_backend("auto") == "te"
    assert selection.resolve_backend("torch") == "torch"


def test_auto_falls_back_to_torch_without_te(te_missing: None) -> None:
    assert selection.resolve_backend("auto") == "torch"
    assert isinstance(selection.backend_spec_provider("auto"), TorchNativeSpecProvider)


def _pretend_te_installed(monkeypatch: pytest.MonkeyPatch, installed: bool) -> None:
    """``find_spec("transformer_engine")`` as if TE were (or were not) installed; other modules unchanged."""
    real_find_spec = selection.importlib.util.find_spec
    monkeypatch.setattr(
        selection.importlib.util,
        "find_spec",
        lambda name, *args: (
            (object() if installed else None) if name == "transformer_engine" else real_find_spec(name, *args)
        ),
    )
    selection._warn_broken_transformer_engine.cache_clear()


def test_auto_warns_once_when_te_is_installed_but_broken(te_missing: None, monkeypatch: pytest.MonkeyPatch) -> None:
    _pretend_te_installed(monkeypatch, installed=True)
    with pytest.warns(UserWarning, match=r"installed but does not import \(ModuleNotFoundError: no TE\)") as caught:
        assert selection.resolve_backend("auto") == "torch"
        assert selection.resolve_backend("auto") == "torch"
    assert len(caught) == 1


def test_auto_is_silent_when_te_is_not_installed(te_missing: None, monkeypatch: pytest.MonkeyPatch) -> None:
    _pretend_te_installed(monkeypatch, installed=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert selection.resolve_backend("auto") == "torch"


def test_te_requested_without_te_names_the_fix(te_missing: None) -> None:
    with pytest.raises(ValueError, match=r"transformer-engine\[core_cu13,pytorch\].*--oellm-backend torch"):
        selection.resolve_backend("te")


def test_unknown_backend_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        selection.resolve_backend("cuda")


def test_torch_provider_classes() -> None:
    provider = selection.backend_spec_provider("torch")
    assert provider.column_parallel_linear() is ColumnParallelLinear
    assert provider.row_parallel_linear() is RowParallelLinear
    assert provider.fuse_layernorm_and_linear() is True
    assert provider.column_parallel_layer_norm_linear() is RMSNormColumnParallelLinear
    assert provider.layer_norm(rms_norm=True, for_qk=True) is RMSNorm
    assert provider.core_attention() is SDPACoreAttention
    assert provider.activation_func() is None
    grouped = provider.grouped_mlp_modules(True)
    assert grouped.func is TorchGroupedMLP
    assert grouped.keywords["submodules"].linear_fc1 is ColumnParallelStackedGroupedLinear
    assert grouped.keywords["submodules"].linear_fc2 is RowParallelStackedGroupedLinear
    assert provider.grouped_mlp_modules(False).func is SequentialMLP


@pytest.mark.parametrize(
    ("features", "message"),
    [
        ({"fp8": True}, "fp8"),
        ({"fp4": True}, "fp4"),
        ({"context_parallel_size": 2}, "context parallelism"),
        ({"normalization": "LayerNorm"}, "only RMSNorm"),
        ({"sliding_window": True}, "sliding-window"),
        ({"softmax_type": "off-by-one"}, "softmax_type='off-by-one'"),
        ({"max_attention_logit": True}, "qk_clip / log_max_attention_logit"),
        ({"fused_residual_rmsnorm": True}, "fused_residual_rmsnorm"),
        ({"moe_expert_bias": True}, "add_bias_linear=False"),
        ({"moe_glu_interleave": True}, "moe_mlp_glu_interleave_size"),
        ({"moe_latent": True}, r"latent MoE projections \(moe_latent_size\)"),
        ({"offloaded_expert_activations": ("expert_fc1", "moe_act")}, "offload_modules expert_fc1, moe_act"),
        (
            {"te_kernel_settings": ("moe_permute_fusion=True",)},
            r"Transformer Engine's kernels \(moe_permute_fusion=True\)",
        ),
        ({"te_rng_tracker": True}, "Transformer Engine's RNG tracker"),
        ({"cpu_offloading": True}, r"offloading whole layers to the CPU .*drop --cpu-offloading-num-layers"),
        ({"disabled_fusions": ("gradient_accumulation_fusion",)}, r"gradient_accumulation_fusion=True: apex's"),
        ({"deferred_wgrad": ("delay_wgrad_compute",)}, r"deferred weight gradients.*drop --delay-wgrad-compute"),
    ],
)
def test_torch_backend_rejects_unsupported_features(features: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        selection.check_backend_support("torch", **features)


def test_supported_combinations_pass(te_present: None) -> None:
    selection.check_backend_support("torch")
    selection.check_backend_support(
        "te", fp8=True, context_parallel_size=4, te_kernel_settings=("moe_router_fusion=True",), te_rng_tracker=True
    )


def test_config_support_reads_transformer_config() -> None:
    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4, normalization="RMSNorm")
    selection.check_config_support("torch", TransformerConfig(**base))
    moe_with_bias = TransformerConfig(
        **base, num_moe_experts=4, add_bias_linear=True, activation_func=F.silu, gated_linear_unit=True
    )
    with pytest.raises(ValueError, match="add_bias_linear"):
        selection.check_config_support("torch", moe_with_bias)
    with pytest.raises(ValueError, match="context parallelism"):
        selection.check_config_support("torch", TransformerConfig(**base, context_parallel_size=2))
    with pytest.raises(ValueError, match="RNG tracker"):
        selection.check_config_support("torch", TransformerConfig(**base, use_te_rng_tracker=True))
    with pytest.raises(ValueError, match="softmax_type='learnable'"):
        selection.check_config_support("torch", TransformerConfig(**base, softmax_type="learnable"))
    with pytest.raises(ValueError, match="qk_clip"):
        selection.check_config_support("torch", TransformerConfig(**base, log_max_attention_logit=True))
    rope_fusion = TransformerConfig(**base)  # without TE, TransformerConfig itself refuses apply_rope_fusion=True
    rope_fusion.apply_rope_fusion = True
    with pytest.raises(ValueError, match=r"apply_rope_fusion=True: Transformer Engine's fused RoPE"):
        selection.check_config_support("torch", rope_fusion)


def test_args_support_reads_megatron_arguments() -> None:
    from megatron.oellm.cards import get_card
    from megatron.oellm.megatron_args import flags_to_argv, megatron_parser, model_flags

    card_argv = flags_to_argv(model_flags(get_card("qwen3-30b-a3b-tiny")))
    parser = megatron_parser()
    selection.check_args_support("torch", parser.parse_args(card_argv))
    with pytest.raises(ValueError, match="fp8 training.*context parallelism"):
        selection.check_args_support(
            "torch", parser.parse_args([*card_argv, "--fp8-format", "hybrid", "--context-parallel-size", "2"])
        )
    with pytest.raises(
        ValueError,
        match=r"kernels \(moe_permute_fusion=True, moe_router_fusion=True, "
        r"cross_entropy_fusion_impl='te', cuda_graph_impl='transformer_engine'\)",
    ):
        selection.check_args_support(
            "torch",
            parser.parse_args(
                [
                    *card_argv,
                    "--moe-permute-fusion",
                    "--moe-router-fusion",
                    "--cross-entropy-loss-fusion",
                    "--cross-entropy-fusion-impl",
                    "te",
                    "--cuda-graph-impl",
                    "transformer_engine",
                ]
            ),
        )
    with pytest.raises(ValueError, match="RNG tracker"):
        selection.check_args_support("torch", parser.parse_args([*card_argv, "--te-rng-tracker"]))
    with pytest.raises(ValueError, match=r"softmax_type='off-by-one'.*qk_clip"):
        selection.check_args_support(
            "torch", parser.parse_args([*card_argv, "--softmax-type", "off-by-one", "--qk-clip"])
        )


def test_args_support_passes_a_te_cross_entropy_choice_without_the_fusion() -> None:
    """``--cross-entropy-fusion-impl te`` without ``--cross-entropy-loss-fusion`` chooses no kernel: megatron-core's
    loss then runs its unfused vocab-parallel cross entropy (no Transformer Engine), and Megatron's own validate_args
    refuses the te choice with the fusion. The torch backend refused it as a TE kernel setting."""
    from megatron.core.models.common.language_module import language_module

    from megatron.oellm.cards import get_card
    from megatron.oellm.megatron_args import flags_to_argv, megatron_parser, model_flags

    card_argv = flags_to_argv(model_flags(get_card("qwen3-30b-a3b-tiny")))
    parser = megatron_parser()
    selection.check_args_support("torch", parser.parse_args([*card_argv, "--cross-entropy-fusion-impl", "te"]))
    with pytest.raises(ValueError, match=r"kernels \(cross_entropy_fusion_impl='te'\)"):
        selection.check_args_support("torch", parser.parse_args(
            [*card_argv, "--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te"]))
    # megatron-core's loss reads the choice only under the fusion (the premise of the pass above)
    source = inspect.getsource(language_module.LanguageModule.compute_language_model_loss)
    assert source.index("if self.config.cross_entropy_loss_fusion:") < source.index("cross_entropy_fusion_impl == 'te'")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tp-comm-overlap"], r"kernels \(tp_comm_overlap=True\)"),
        (["--use-te-activation-func"], r"kernels \(use_te_activation_func=True\)"),
        (["--use-transformer-engine-op-fuser"], r"kernels \(use_transformer_engine_op_fuser=True\)"),
        (["--use-grouped-gemm-for-shared-expert"], r"kernels \(use_grouped_gemm_for_shared_expert=True\)"),
        (["--moe-latent-size", "32"], r"latent MoE projections \(moe_latent_size\)"),
        (
            ["--fine-grained-activation-offloading", "--offload-modules", "core_attn", "expert_fc1", "moe_act"],
            r"offload_modules expert_fc1, moe_act;",
        ),
    ],
)
def test_args_support_refuses_settings_the_torch_modules_would_ignore(flags: list[str], message: str) -> None:
    """TE-only settings the torch-native modules would silently ignore (or crash on at the first forward: a gated
    shared expert under use_te_activation_func gets SiLU over its whole fc1 output) are refused from the arguments,
    before Megatron initialises; offloading only non-expert activations stays allowed."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.megatron_args import flags_to_argv, megatron_parser, model_flags

    card_argv = flags_to_argv(model_flags(get_card("qwen3-30b-a3b-tiny")))
    parser = megatron_parser()
    with pytest.raises(ValueError, match=message):
        selection.check_args_support("torch", parser.parse_args([*card_argv, *flags]))
    selection.check_args_support(
        "torch", parser.parse_args([*card_argv, "--fine-grained-activation-offloading", "--offload-modules", "core_attn"])
    )


def test_config_support_refuses_te_activation_and_latent_moe() -> None:
    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4, normalization="RMSNorm")
    with pytest.raises(ValueError, match=r"use_te_activation_func=True"):
        selection.check_config_support("torch", TransformerConfig(**base, use_te_activation_func=True))
    with pytest.raises(ValueError, match=r"moe_latent_size"):
        selection.check_config_support(
            "torch", TransformerConfig(**base, num_moe_experts=4, moe_ffn_hidden_size=32, moe_latent_size=16)
        )


def _tiny_config(**overrides) -> TransformerConfig:
    """A small bf16 MoE TransformerConfig built by hand (no TE needed), ``overrides`` on top."""
    fields = dict(num_layers=2, hidden_size=64, num_attention_heads=4, normalization="RMSNorm", num_moe_experts=4,
                  moe_ffn_hidden_size=32, bf16=True, params_dtype=torch.bfloat16)
    return TransformerConfig(**{**fields, **overrides})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # megatron-core's local linears need apex for it (else they raise once building has allocated memory)
        ({"gradient_accumulation_fusion": True}, r"\(gradient_accumulation_fusion=True: apex's fused"),
        # accepted by TransformerConfig without TE; the torch-native modules' backward_dw does nothing
        (
            {"delay_wgrad_compute": True, "overlap_moe_expert_parallel_comm": True, "expert_model_parallel_size": 2,
             "moe_token_dispatcher_type": "alltoall"},
            r"deferred weight gradients \(delay_wgrad_compute: .*drop --delay-wgrad-compute\.",
        ),
        (
            {"defer_embedding_wgrad_compute": True, "gradient_accumulation_fusion": True,
             "pipeline_model_parallel_size": 2, "pipeline_dtype": torch.bfloat16},
            r"defer_embedding_wgrad_compute: .*drop --defer-embedding-wgrad-compute",
        ),
    ],
)
def test_config_support_refuses_wgrad_fusion_and_deferral(overrides: dict, message: str) -> None:
    """A config built by hand asking for fused or deferred weight gradients, which the torch-native modules would not
    honour (or would fail on after allocating), is refused before building."""
    with pytest.raises(ValueError, match=message):
        selection.check_config_support("torch", _tiny_config(**overrides))


def test_torch_backend_refuses_layer_cpu_offloading() -> None:
    """``--cpu-offloading-num-layers`` passed every start-up check on the torch backend; megatron-core's transformer
    block then offloads through Transformer Engine's context, or without TE stops building the model (after Megatron
    initialised and the embedding was allocated) with 'CPU Offloading is enabled when TE is not present'."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.megatron_args import flags_to_argv, megatron_parser, model_flags
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster

    layers = 1  # the tiny card has 2 layers: megatron-core takes fewer than that
    card_argv = flags_to_argv(model_flags(get_card("qwen3-30b-a3b-tiny")))
    with pytest.raises(ValueError, match="drop --cpu-offloading-num-layers"):
        selection.check_args_support("torch", megatron_parser().parse_args(
            [*card_argv, "--cpu-offloading-num-layers", str(layers)]))
    with pytest.raises(ValueError, match="drop --cpu-offloading-num-layers"):
        validate_on_cluster(["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch",
                             "--cpu-offloading-num-layers", str(layers), "--micro-batch-size", "1",
                             "--global-batch-size", "8", "--seq-length", "128", "--bf16"],
                            1, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    with pytest.raises(ValueError, match="offloading whole layers to the CPU"):
        selection.check_config_support("torch", _tiny_config(cpu_offloading=True, cpu_offloading_num_layers=layers))
    selection.check_args_support("torch", megatron_parser().parse_args(card_argv))  # the default: no offloading


@pytest.mark.parametrize(
    ("config", "flags", "message"),
    [
        ({"window_size": (128, 0)}, ["--window-size", "128,0"], r"sliding-window attention \(window_size\)"),
        ({"fused_residual_rmsnorm": True}, ["--fused-residual-rmsnorm"], r"fused_residual_rmsnorm: set it to False"),
        ({"moe_mlp_glu_interleave_size": 16}, ["--moe-mlp-glu-interleave-size", "16"],
         r"moe_mlp_glu_interleave_size: unset it"),
    ],
)
def test_settings_the_torch_modules_refuse_at_build_time_are_read_from_config_and_arguments(
        config: dict, flags: list[str], message: str) -> None:
    """Sliding windows and a fused residual norm are refused by the torch-native attention and RMSNorm only when the
    model is built (after Megatron initialised); interleaved GLU halves would be read by the grouped experts as plain
    halves (a silently different activation). Each must be read from a TransformerConfig and from the arguments, so
    the check that runs before anything is allocated refuses it."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.megatron_args import flags_to_argv, megatron_parser, model_flags

    with pytest.raises(ValueError, match=message):
        selection.check_config_support("torch", _tiny_config(add_bias_linear=False, **config))
    card_argv = flags_to_argv(model_flags(get_card("qwen3-30b-a3b-tiny")))
    with pytest.raises(ValueError, match=message):
        selection.check_args_support("torch", megatron_parser().parse_args([*card_argv, *flags]))


def test_expert_offload_modules_without_fine_grained_offloading_pass() -> None:
    """``--offload-modules`` is read only under ``--fine-grained-activation-offloading`` (megatron-core's validation
    accepts the list alone and offloads nothing): a job script that switched offloading off but kept the list is a
    run the torch backend can do."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.megatron_args import flags_to_argv, megatron_parser, model_flags

    card_argv = flags_to_argv(model_flags(get_card("qwen3-30b-a3b-tiny")))
    modules = random.sample(list(selection.EXPERT_OFFLOAD_MODULES), 2)
    selection.check_args_support("torch", megatron_parser().parse_args([*card_argv, "--offload-modules", *modules]))
    selection.check_config_support("torch", _tiny_config(add_bias_linear=False, offload_modules=modules))


def test_a_config_of_bf16_parameters_is_judged_as_bf16_training(te_present: None, no_flash_pins: None,
                                                                monkeypatch) -> None:
    """A TransformerConfig built by hand with ``params_dtype=torch.bfloat16`` and the ``bf16`` switch left off feeds
    bf16 attention inputs to Transformer Engine, so flash attention runs with a flash-attn 2 taken up; judging it
    by the switch alone refused it as fp32 training."""
    monkeypatch.setattr(selection, "gradient_accumulation_fusion_available", lambda: True)
    _pretend_flash_found(monkeypatch, FLASH_ATTN_2)
    config = _tiny_config(bf16=False, attention_backend=AttnBackend.flash)
    assert config.params_dtype == torch.bfloat16 and not config.bf16
    selection.check_config_support("te", config)


def test_config_support_keeps_the_te_backend_free_of_these_checks(te_present: None, monkeypatch) -> None:
    monkeypatch.setattr(selection, "gradient_accumulation_fusion_available", lambda: True)
    selection.check_config_support("te", _tiny_config(gradient_accumulation_fusion=True))


def test_te_backend_refuses_gradient_accumulation_fusion_without_apex(te_present: None, monkeypatch) -> None:
    """megatron-core's own output layer raises in its constructor (after allocation) when the fusion is on and apex's
    extension is missing, even on the te backend: refused from the arguments and from a config, naming the flag."""
    monkeypatch.setattr(selection, "gradient_accumulation_fusion_available", lambda: False)
    message = r"te backend cannot run here: gradient_accumulation_fusion=True.*--no-gradient-accumulation-fusion"
    with pytest.raises(ValueError, match=message):
        selection.check_config_support("te", _tiny_config(gradient_accumulation_fusion=True))
    with pytest.raises(ValueError, match=message):
        selection.check_args_support("te", parse_oellm_argv(["--oellm-model", "qwen3-30b-a3b-tiny"]))
    selection.check_args_support("te", parse_oellm_argv(["--oellm-model", "qwen3-30b-a3b-tiny",
                                                          "--no-gradient-accumulation-fusion"]))
    selection.check_config_support("te", _tiny_config(gradient_accumulation_fusion=False))


def test_the_fusion_probe_is_megatron_cores_own_decision() -> None:
    from megatron.core.tensor_parallel import layers

    assert selection.gradient_accumulation_fusion_available() is layers._grad_accum_fusion_available


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"], r"drop --delay-wgrad-compute\."),
        (
            ["--overlap-dispatch-backward-with-experts-wgrad"],
            r"overlap_dispatch_backward_with_experts_wgrad: only Transformer Engine's grouped experts",
        ),
        (
            ["--pipeline-model-parallel-size", "2", "--defer-embedding-wgrad-compute"],
            r"defer_embedding_wgrad_compute: .*gradient_accumulation_fusion, which the training entry turns off",
        ),
    ],
)
def test_args_support_refuses_deferred_weight_gradients(flags: list[str], message: str) -> None:
    """Weight-gradient deferral the torch-native modules cannot do is refused from the arguments (before Megatron
    initialises), while Megatron's default gradient accumulation and RoPE fusions, which the entry turns off, are not
    held against the arguments."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.megatron_args import flags_to_argv, megatron_parser, model_flags

    card_argv = flags_to_argv(model_flags(get_card("qwen3-30b-a3b-tiny")))
    parser = megatron_parser()
    default = parser.parse_args(card_argv)
    assert default.gradient_accumulation_fusion and default.apply_rope_fusion
    selection.check_args_support("torch", default)
    with pytest.raises(ValueError, match=message):
        selection.check_args_support("torch", parser.parse_args([*card_argv, *flags]))


def test_entry_config_of_the_torch_backend_passes_the_config_check() -> None:
    """The entry turns off exactly the fusions the config check refuses (one table), so the TransformerConfig it
    builds for the torch backend from Megatron's defaults passes the check its model builder applies."""
    from megatron.oellm.models import spec_builder
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster
    from megatron.oellm.training.model_provider import card_from_args, layout_from_args, runtime_overrides

    args = validate_on_cluster(
        ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--micro-batch-size", "1",
         "--global-batch-size", "8", "--seq-length", "128", "--bf16"], 1, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
    )
    args.padded_vocab_size = args.vocab_size
    card, layout = card_from_args(args), layout_from_args(args)
    config = spec_builder(card.family).transformer_config(card, layout, args.params_dtype,
                                                          **runtime_overrides(args, card, layout))
    assert not any(getattr(config, name) for name in selection.TORCH_BACKEND_DISABLED_FUSIONS)
    selection.check_config_support("torch", config)


def test_entry_refuses_output_layer_wgrad_deferral_before_megatron_initialises() -> None:
    """--defer-embedding-wgrad-compute on the torch backend used to pass every start-up check and then stop in the
    model provider (after Megatron initialised) with megatron-core's 'gradient accumulation fusion is not used',
    a fusion the entry itself had turned off."""
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster

    with pytest.raises(ValueError, match=r"drop --defer-embedding-wgrad-compute"):
        validate_on_cluster(
            ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--pipeline-model-parallel-size", "2",
             "--defer-embedding-wgrad-compute", "--micro-batch-size", "1", "--global-batch-size", "8",
             "--seq-length", "128", "--bf16"], 2, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
        )


FLASH_ATTN_2 = te_flash.FlashAttentionFound({2: "2.7.4"})
"""A flash-attn 2 that TE took up."""


@pytest.fixture
def no_flash_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    """No NVTE_FLASH_ATTN_V* pin in this process's environment, and no GPU seen (the GPU rule left out)."""
    for generation in te_flash.FLASH_ATTN_PACKAGES:
        monkeypatch.delenv(f"NVTE_FLASH_ATTN_V{generation}", raising=False)
    monkeypatch.setattr(te_flash, "cuda_capability", lambda: None)


def _pretend_flash_found(monkeypatch: pytest.MonkeyPatch, found: "te_flash.FlashAttentionFound") -> None:
    """TE's import-time flash-attn detection as if it had taken up ``found``; every other rule is the real one."""
    monkeypatch.setattr(te_flash, "te_flash_attention_found", lambda: found)


def test_te_backend_refuses_flash_attention_without_a_flash_attn_te_supports(te_present: None, no_flash_pins: None,
                                                                               monkeypatch) -> None:
    """--attention-backend flash turns TE's fused and unfused attention off; without a flash-attn TE supports the
    first forward stopped with "No dot product attention backend is available" after the model was allocated (seen
    on the H200 with the MN5 recipes' --local runs). Refused from the arguments and from a config, naming the fix;
    auto, and flash with a flash-attn present, go on."""
    monkeypatch.setattr(selection, "gradient_accumulation_fusion_available", lambda: True)
    _pretend_flash_found(monkeypatch, te_flash.FlashAttentionFound())
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--bf16"]
    message = (r"te backend cannot run here: attention_backend=flash: Transformer Engine finds no flash-attn it "
               r"supports, .*Pass --attention-backend auto.*install a flash-attn that TE supports")
    with pytest.raises(ValueError, match=message):
        selection.check_args_support("te", parse_oellm_argv([*argv, "--attention-backend", "flash"]))
    with pytest.raises(ValueError, match=message):
        selection.check_config_support("te", _tiny_config(attention_backend=AttnBackend.flash))
    selection.check_args_support("te", parse_oellm_argv([*argv, "--attention-backend", "auto"]))
    selection.check_backend_support("torch", flash_attention_only=True)
    _pretend_flash_found(monkeypatch, FLASH_ATTN_2)
    selection.check_args_support("te", parse_oellm_argv([*argv, "--attention-backend", "flash"]))
    selection.check_config_support("te", _tiny_config(attention_backend=AttnBackend.flash))
    # both kernels missing: one message names both fixes, so fixing one does not reveal the other a run later
    _pretend_flash_found(monkeypatch, te_flash.FlashAttentionFound())
    monkeypatch.setattr(selection, "gradient_accumulation_fusion_available", lambda: False)
    with pytest.raises(ValueError, match=r"attention_backend=flash.*; and gradient_accumulation_fusion=True"):
        selection.check_args_support("te", parse_oellm_argv([*argv, "--attention-backend", "flash"]))


@pytest.mark.parametrize(("flags", "config", "reason"), [
    ([], {"bf16": False, "params_dtype": torch.float32}, "fp32 training"),
    (["--bf16", "--flash-attention-version", "3"], {"flash_attention_version": 3},
     "flash-attn 2.7.4 is turned off by --flash-attention-version 3"),
])
def test_the_entry_judges_flash_attention_with_the_runs_dtype_and_flash_attention_version(
        te_present: None, no_flash_pins: None, monkeypatch, flags: list[str], config: dict, reason: str) -> None:
    """TE drops flash attention for fp32 attention inputs, and megatron-core pins TE to the generation of
    --flash-attention-version (NVTE_FLASH_ATTN_V<other>=0): with only flash-attn 2 taken up, both runs would find no
    attention backend at the first forward. The arguments and a config carry both into the check."""
    monkeypatch.setattr(selection, "gradient_accumulation_fusion_available", lambda: True)
    _pretend_flash_found(monkeypatch, FLASH_ATTN_2)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--attention-backend", "flash"]
    with pytest.raises(ValueError, match=f"attention_backend=flash: {reason}"):
        selection.check_args_support("te", parse_oellm_argv([*argv, *flags]))
    with pytest.raises(ValueError, match=f"attention_backend=flash: {reason}"):
        selection.check_config_support("te", _tiny_config(attention_backend=AttnBackend.flash, **config))
    selection.check_args_support("te", parse_oellm_argv([*argv, "--bf16", "--flash-attention-version", "2"]))
    selection.check_args_support("te", parse_oellm_argv([*argv, "--fp16"]))


@pytest.mark.parametrize(("accepted", "environ", "dtype", "capability", "version", "reason"), [
    ({2: "2.7.4"}, {}, "bf16", (9, 0), None, None),
    ({2: "2.7.4"}, {}, None, None, None, None),  # a login node, dtype not known: only the packages count
    ({}, {}, "bf16", (9, 0), None, "Transformer Engine finds no flash-attn it supports"),
    ({2: "2.7.4"}, {"NVTE_FLASH_ATTN_V2": "0"}, "bf16", (9, 0), None, "flash-attn 2.7.4 is turned off by "
     "NVTE_FLASH_ATTN_V2=0"),
    ({3: "3.0.0b1"}, {"NVTE_FLASH_ATTN_V3": "0"}, "bf16", (9, 0), None, "turned off by NVTE_FLASH_ATTN_V3=0"),
    ({2: "2.7.4"}, {"NVTE_FLASH_ATTN_V2": "1"}, "bf16", (9, 0), None, None),
    ({2: "2.7.4", 3: "3.0.0b1"}, {"NVTE_FLASH_ATTN_V3": "0"}, "bf16", (9, 0), None, None),  # flash-attn 2 is left
    ({2: "2.7.4"}, {}, "bf16", (7, 5), None, "flash-attn 2.7.4 does not run on this sm75 GPU"),
    ({2: "2.7.4"}, {}, "bf16", (8, 0), None, None),
    ({2: "2.7.4"}, {}, "bf16", (12, 0), None, None),
    ({3: "3.0.0b1"}, {}, "bf16", (9, 0), None, None),
    ({3: "3.0.0b1"}, {}, "bf16", (8, 0), None, "flash-attn-3 3.0.0b1 does not run on this sm80 GPU"),
    ({3: "3.0.0b1"}, {}, "bf16", (10, 0), None, "does not run on this sm100 GPU (TE runs it on sm90 only)"),
    ({4: "4.0.0b11"}, {}, "bf16", (8, 9), None, "flash-attn-4 4.0.0b11 does not run on this sm89 GPU"),
    ({4: "4.0.0b11"}, {}, "bf16", (9, 0), None, None),
    ({4: "4.0.0b11"}, {}, "bf16", (10, 0), None, None),
    ({2: "2.7.4"}, {}, "fp32", (9, 0), None, "fp32 training"),
    ({2: "2.7.4"}, {}, "fp16", (9, 0), None, None),
    ({2: "2.7.4"}, {}, "bf16", (9, 0), 3, "flash-attn 2.7.4 is turned off by --flash-attention-version 3"),
    ({2: "2.7.4", 3: "3.0.0b1"}, {}, "bf16", (9, 0), 3, None),
    ({2: "2.7.4", 3: "3.0.0b1"}, {}, "bf16", (8, 0), 3, "flash-attn-3 3.0.0b1 does not run on this sm80 GPU"),
])
def test_the_flash_attention_rules_follow_transformer_engines(accepted, environ, dtype, capability, version,
                                                               reason) -> None:
    """TE's get_attention_backend (2.20.2) drops flash-attn 2 below sm80, flash-attn-3 off sm90, flash-attn-4 below
    sm90, each one pinned to 0 by its NVTE_FLASH_ATTN_V<n>, and all of them for attention inputs other than bf16 and
    fp16; flash attention is left while one generation it took up survives."""
    refusal = te_flash.flash_attention_refusal(te_flash.FlashAttentionFound(accepted), environ=environ, dtype=dtype,
                                                capability=capability, flash_attention_version=version)
    if reason is None:
        assert refusal is None
    else:
        assert refusal is not None and reason in refusal.why


def test_a_flash_attention_refusal_names_every_rule_that_applies_and_only_those() -> None:
    """Fixing one rule must not reveal the next a run later; a rule that does not decide is not named."""
    found = te_flash.FlashAttentionFound({2: "2.7.4", 3: "3.0.0b1"})
    refusal = te_flash.flash_attention_refusal(found, environ={"NVTE_FLASH_ATTN_V2": "0"}, dtype="fp32",
                                                capability=(8, 0), flash_attention_version=None)
    assert refusal.why == ("fp32 training (TE's flash attention takes bf16 or fp16 only); flash-attn 2.7.4 is turned "
                           "off by NVTE_FLASH_ATTN_V2=0; flash-attn-3 3.0.0b1 does not run on this sm80 GPU (TE runs it "
                           "on sm90 only)")
    assert refusal.fix == ("train with --bf16 or --fp16, and unset NVTE_FLASH_ATTN_V2, and install a flash-attn that "
                           "TE runs on this GPU")
    # the dtype alone rules flash attention out when flash-attn 2 would otherwise run: only the dtype is named
    refusal = te_flash.flash_attention_refusal(found, environ={}, dtype="fp32", capability=(8, 0),
                                                flash_attention_version=None)
    assert refusal.why == "fp32 training (TE's flash attention takes bf16 or fp16 only)"
    refusal = te_flash.flash_attention_refusal(te_flash.FlashAttentionFound(), environ={}, dtype="fp32",
                                                capability=None, flash_attention_version=None)
    assert "fp32 training" in refusal.why and te_flash.NO_SUPPORTED_FLASH_ATTN in refusal.why


def test_a_fix_shared_by_several_rules_is_named_once() -> None:
    """flash-attn-3 and flash-attn-4 on an sm80 GPU are each dropped for the GPU, with the same fix: the refusal
    names both rules and that fix once."""
    found = te_flash.FlashAttentionFound({3: "3.0.0b1", 4: "4.0.0b11"})
    refusal = te_flash.flash_attention_refusal(found, environ={}, dtype="bf16", capability=(8, 0),
                                                flash_attention_version=None)
    assert refusal.why.count("does not run on this sm80 GPU") == 2
    assert refusal.fix == "install a flash-attn that TE runs on this GPU"


@pytest.mark.parametrize("version", [3, 4])
def test_an_environment_pin_and_the_flash_attention_version_pinning_the_same_package_are_both_named(version) -> None:
    """NVTE_FLASH_ATTN_V2=0 with --flash-attention-version 3 or 4 (which makes megatron-core set it to 0 as well):
    unsetting the variable alone would leave flash-attn 2 off, so the refusal names both rules and both fixes."""
    refusal = te_flash.flash_attention_refusal(te_flash.FlashAttentionFound({2: "2.7.4"}),
                                                environ={"NVTE_FLASH_ATTN_V2": "0"}, dtype="bf16", capability=(9, 0),
                                                flash_attention_version=version)
    assert refusal.why == (f"flash-attn 2.7.4 is turned off by NVTE_FLASH_ATTN_V2=0; flash-attn 2.7.4 is turned off "
                           f"by --flash-attention-version {version} (megatron-core sets NVTE_FLASH_ATTN_V2=0)")
    assert refusal.fix == "unset NVTE_FLASH_ATTN_V2, and pass --flash-attention-version 2 or drop it"


def _te_flags(**changes):
    """TE 2.20.2's FlashAttentionUtils defaults (nothing taken up), ``changes`` on top."""
    from types import SimpleNamespace

    from packaging.version import Version

    flags = dict(is_installed=False, version=Version("0"), version_required=Version("2.1.1"),
                 version_required_blackwell=Version("2.7.3"), max_version=Version("2.8.4"), v3_is_installed=False,
                 fa3_version=Version("0"), v4_is_installed=False, fa4_version=Version("0"))
    return SimpleNamespace(**{**flags, **changes})


def test_what_te_took_up_is_read_from_its_flags() -> None:
    """Accepted packages from TE's is_installed flags; a flash-attn 2 or 4 TE found but did not take up is named with
    TE's own range (the Blackwell minimum on sm100 and newer)."""
    from packaging.version import Version

    read = te_flash.flash_attention_found_from
    assert read(_te_flags(), None) == te_flash.FlashAttentionFound()
    assert read(_te_flags(is_installed=True, version=Version("2.7.4"), v3_is_installed=True,
                          fa3_version=Version("3.0.0b1")), (9, 0)).accepted == {2: "2.7.4", 3: "3.0.0b1"}
    rejected = read(_te_flags(version=Version("2.8.4")), (9, 0))
    assert rejected.accepted == {} and rejected.rejected == (
        "flash-attn 2.8.4 is installed, but TE takes flash-attn 2 only at versions >= 2.1.1 and < 2.8.4",)
    assert ">= 2.7.3 and < 2.8.4" in read(_te_flags(version=Version("2.6.3")), (10, 0)).rejected[0]
    assert "flash-attn-4 4.0.0b11 is installed but does not load" in read(
        _te_flags(fa4_version=Version("4.0.0b11")), None).rejected[0]


def test_the_gpu_rule_is_left_out_without_cuda(monkeypatch) -> None:
    """A login node (``oellm recipe --local --dry-run``) has no GPU to judge: no capability, not a guessed one."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert te_flash.cuda_capability() is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert te_flash.cuda_capability() == (7, 5)


TE_IMPORTS = selection.transformer_engine_import_error() is None


@pytest.mark.skipif(not TE_IMPORTS, reason="needs Transformer Engine")
def test_the_flash_attention_probe_follows_the_installed_packages() -> None:
    """TE's own detection, against the distributions it looks for: no flash-attn 2, 3 or 4 installed, no flash
    backend (the device and this repository's TE venv have none)."""
    import importlib.metadata

    installed = []
    for name in ("flash-attn", "flash-attn-3", "flash-attn-4"):
        try:
            installed.append(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            pass
    if installed:
        pytest.skip(f"a flash-attn is installed ({installed}): its supported range is TE's to judge")
    assert te_flash.te_flash_attention_found() == te_flash.FlashAttentionFound()
    assert te_flash.te_flash_attention_refusal() is not None


@pytest.fixture
def te_flash_utils(no_flash_pins: None, monkeypatch: pytest.MonkeyPatch):
    """TE's FlashAttentionUtils with a flash-attn 2 that TE 2.20.2 accepts taken up (restored afterwards)."""
    from packaging.version import Version

    te_flash.te_flash_attention_found()  # TE's backends module sets the flags on import: before they are changed
    utils = importlib.import_module("transformer_engine.pytorch.attention.dot_product_attention.utils")
    flags = utils.FlashAttentionUtils
    assert flags.is_version_supported(Version("2.7.4"), flags.version_required)  # in TE's range
    monkeypatch.setattr(flags, "is_installed", True)
    monkeypatch.setattr(flags, "version", Version("2.7.4"))
    return flags


@pytest.mark.skipif(not TE_IMPORTS, reason="needs Transformer Engine")
def test_the_te_probe_reads_transformer_engines_flags_and_applies_each_rule(te_flash_utils, monkeypatch) -> None:
    """With a flash-attn 2 TE took up, flash runs; each rule TE applies after that rules it out, named."""
    monkeypatch.setattr(selection, "gradient_accumulation_fusion_available", lambda: True)
    assert te_flash.te_flash_attention_found() == te_flash.FlashAttentionFound({2: "2.7.4"})
    assert te_flash.te_flash_attention_refusal(dtype="bf16") is None
    selection.check_backend_support("te", flash_attention_only=True, dtype="bf16")

    def refused(reason: str, **features) -> None:
        assert te_flash.te_flash_attention_refusal(**features) is not None
        with pytest.raises(ValueError, match=f"attention_backend=flash: {reason}"):
            selection.check_backend_support("te", flash_attention_only=True, **features)

    refused("fp32 training", dtype="fp32")
    refused(r"flash-attn 2.7.4 is turned off by --flash-attention-version 3", dtype="bf16", flash_attention_version=3)
    monkeypatch.setattr(te_flash, "cuda_capability", lambda: (7, 5))
    refused(r"flash-attn 2.7.4 does not run on this sm75 GPU", dtype="bf16")
    monkeypatch.setattr(te_flash, "cuda_capability", lambda: None)
    monkeypatch.setenv("NVTE_FLASH_ATTN_V2", "0")
    refused(r"flash-attn 2.7.4 is turned off by NVTE_FLASH_ATTN_V2=0", dtype="bf16")
    monkeypatch.delenv("NVTE_FLASH_ATTN_V2")
    monkeypatch.setattr(te_flash_utils, "is_installed", False)  # as TE leaves a flash-attn past its range
    monkeypatch.setattr(te_flash_utils, "version", te_flash_utils.max_version)
    refused(rf"Transformer Engine finds no flash-attn it supports \(flash-attn {te_flash_utils.max_version} is "
            "installed", dtype="bf16")


@pytest.mark.skipif(not TE_IMPORTS, reason="needs Transformer Engine")
@pytest.mark.parametrize("version", ["2.8.4", "2.0.4"])
def test_a_flash_attn_outside_transformer_engines_range_is_refused(tmp_path, version: str) -> None:
    """TE's own import-time detection, in a fresh interpreter that finds a flash-attn distribution of ``version``
    (TE looks it up by its metadata, and imports flash_attn only for a version it accepts): 2.8.4 is past TE
    2.20.2's range, 2.0.4 below it, so flash attention is refused, naming the version."""
    import json
    import os
    import subprocess
    import sys

    info = tmp_path / f"flash_attn-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flash-attn\nVersion: {version}\n")
    probe = ("import json; from megatron.oellm.backends import te_flash_attention as te_flash; "
             "print(json.dumps(te_flash.te_flash_attention_refusal(dtype='bf16').why))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    why = json.loads(done.stdout.strip().splitlines()[-1])
    assert why.startswith(te_flash.NO_SUPPORTED_FLASH_ATTN) and f"flash-attn {version} is installed" in why


def test_te_cuda_graphs_are_named_once_not_with_the_rng_tracker_megatron_turned_on() -> None:
    """``--cuda-graph-impl transformer_engine`` makes megatron's validate_args turn the TE RNG tracker on; the torch
    backend's refusal told the user to unset both, one of which they never set. Now the graphs alone are named; a
    tracker the user asked for is still named."""
    graphs = ("cuda_graph_impl='transformer_engine'",)
    with pytest.raises(ValueError) as refused:
        selection.check_backend_support("torch", te_kernel_settings=graphs, te_rng_tracker=True)
    assert "cuda_graph_impl='transformer_engine'" in str(refused.value) and "RNG tracker" not in str(refused.value)
    with pytest.raises(ValueError, match="RNG tracker"):
        selection.check_backend_support("torch", te_kernel_settings=("moe_router_fusion=True",), te_rng_tracker=True)
