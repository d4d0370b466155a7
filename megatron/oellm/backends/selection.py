"""Choosing the compute backend ("te" = Transformer Engine, "torch" = torch-native) and vetting feature combos."""

import importlib
import importlib.util
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
from megatron.core.models.backends import BackendSpecProvider
from megatron.core.transformer.enums import AttnBackend
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.oellm.backends.te_flash_attention import te_flash_attention_refusal
from megatron.oellm.megatron_args import megatron_flag
from megatron.oellm.training.flags import BACKEND_CHOICES

TE_INSTALL_HINT = ("install Transformer Engine (pip install --no-build-isolation 'transformer-engine[core_cu13,pytorch]', "
                   "core_cu12 for a CUDA 12 torch; PyPI's TE does not import without a core package)")


@lru_cache(maxsize=1)
def transformer_engine_import_error() -> str | None:
    """Why ``transformer_engine.pytorch`` cannot be imported here, or None when it can (cached per process)."""
    try:
        importlib.import_module("transformer_engine.pytorch")
    except Exception as error:  # ImportError, or OSError/RuntimeError from missing CUDA libraries
        return f"{type(error).__name__}: {error}"
    return None


@lru_cache(maxsize=1)
def _warn_broken_transformer_engine(te_error: str) -> None:
    """Say once per process that ``auto`` falls back although Transformer Engine is installed: a broken install
    (e.g. a library missing from LD_LIBRARY_PATH) would otherwise silently cost the TE backend's speed."""
    warnings.warn(
        f"--oellm-backend auto: Transformer Engine is installed but does not import ({te_error}); using the "
        "torch-native backend (`oellm doctor` explains; --oellm-backend te makes this an error)",
        stacklevel=3,
    )


def resolve_backend(name: str) -> str:
    """Turn a backend name (``--oellm-backend``) into ``"te"`` or ``"torch"``; ``"auto"`` means TE when importable.

    Raises ValueError for an unknown name, and for ``"te"`` when Transformer Engine cannot be imported, naming both
    ways out (install it, or choose the torch backend).
    """
    if name not in BACKEND_CHOICES:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_CHOICES)}")
    te_error = transformer_engine_import_error()
    if name == "auto":
        if te_error is None:
            return "te"
        if importlib.util.find_spec("transformer_engine") is not None:
            _warn_broken_transformer_engine(te_error)
        return "torch"
    if name == "te" and te_error is not None:
        raise ValueError(
            f"backend 'te' requested but Transformer Engine does not import ({te_error}); "
            f"{TE_INSTALL_HINT}, or use --oellm-backend torch"
        )
    return name


def backend_spec_provider(name: str) -> BackendSpecProvider:
    """The megatron-core BackendSpecProvider for ``name`` (resolved by :func:`resolve_backend`).

    ``te`` gives megatron-core's TESpecProvider, ``torch`` our TorchNativeSpecProvider; both build modules with
    the same parameter names and distributed-checkpoint keys (the plain state dicts differ in Transformer Engine's
    core attention's ``_extra_state``, which ours lacks and megatron-core leaves out of distributed checkpoints).
    """
    backend = resolve_backend(name)
    if backend == "te":
        from megatron.core.extensions.transformer_engine_spec_provider import TESpecProvider

        return TESpecProvider()
    from megatron.oellm.backends.torch_native import TorchNativeSpecProvider

    return TorchNativeSpecProvider()


def check_backend_support(
    backend: str,
    *,
    fp8: bool = False,
    fp4: bool = False,
    precision_recipe: bool = False,
    context_parallel_size: int = 1,
    normalization: str = "RMSNorm",
    sliding_window: bool = False,
    softmax_type: str = "vanilla",
    max_attention_logit: bool = False,
    fused_residual_rmsnorm: bool = False,
    moe_expert_bias: bool = False,
    moe_glu_interleave: bool = False,
    moe_latent: bool = False,
    offloaded_expert_activations: tuple[str, ...] = (),
    te_kernel_settings: tuple[str, ...] = (),
    disabled_fusions: tuple[str, ...] = (),
    deferred_wgrad: tuple[str, ...] = (),
    te_rng_tracker: bool = False,
    cpu_offloading: bool = False,
    meta_device_init: bool = False,
    gtp_weight_shards: tuple[str, ...] = (),
    gradient_accumulation_fusion: bool = False,
    flash_attention_only: bool = False,
    local_attention: bool = False,
    dtype: str | None = None,
    flash_attention_version: int | None = None,
    attention_backend: str = "auto",
) -> None:
    """Raise ValueError, before anything is allocated, if ``backend`` cannot run the requested features.

    ``backend`` is a :data:`BACKEND_CHOICES` value (``auto`` is resolved first). The keyword features mirror
    TransformerConfig fields (see :func:`check_config_support`); ``disabled_fusions`` holds names of
    :data:`TORCH_BACKEND_DISABLED_FUSIONS`, ``deferred_wgrad`` names of :data:`WGRAD_DEFERRAL_SETTINGS` and
    ``gtp_weight_shards`` the weight-sharding flags in use (:func:`gtp_weight_shard_flags`); ``meta_device_init`` is
    ``init_model_with_meta_device``; ``gradient_accumulation_fusion`` is checked for the te backend only (the torch one
    handles it through
    ``disabled_fusions``), as is ``flash_attention_only`` (``--attention-backend flash``, which only TE's attention
    reads) with the ``dtype`` (:data:`FLASH_ATTENTION_DTYPES` or another name, None when unknown) and the
    ``flash_attention_version`` (``--flash-attention-version``) it is judged with, and ``local_attention``
    (``--attention-backend local``, :data:`TE_LOCAL_ATTENTION_REFUSAL`); ``attention_backend`` (the
    ``--attention-backend`` name) for the torch one only, which runs SDPA / varlen attention whatever it says. The
    message names the setting to change.
    """
    resolved = resolve_backend(backend)
    if resolved == "te":
        missing = te_missing_kernels(gradient_accumulation_fusion=gradient_accumulation_fusion,
                                     flash_attention_only=flash_attention_only, dtype=dtype,
                                     flash_attention_version=flash_attention_version)
        refusals = [TE_LOCAL_ATTENTION_REFUSAL] if local_attention else []
        refusals += [missing[setting].message for setting in sorted(missing)]  # by name
        if refusals:  # every one in one message: fixing one must not reveal the next
            raise ValueError("the te backend cannot run here: " + "; and ".join(refusals))
        return
    unsupported = []
    if attention_backend != "auto":
        unsupported.append(f"--attention-backend {attention_backend} (the torch-native core attention always runs "
                           "SDPA / varlen attention and reads no attention backend): use --attention-backend auto")
    if fp8:
        unsupported.append("fp8 training (needs Transformer Engine): drop --fp8-format")
    if fp4:
        unsupported.append("fp4 training (needs Transformer Engine): drop --fp4-format")
    if precision_recipe:
        unsupported.append(
            "a per-module precision recipe (quant_recipe; only Transformer Engine's linears apply it, the torch-native "
            "modules would run in the model's dtype): drop --te-precision-config-file"
        )
    if context_parallel_size > 1:
        unsupported.append(f"context parallelism (context_parallel_size={context_parallel_size}): set it to 1")
    if normalization != "RMSNorm":
        unsupported.append(f"normalization={normalization!r}: only RMSNorm is implemented")
    if sliding_window:
        unsupported.append("sliding-window attention (window_size): unset it")
    if softmax_type != "vanilla":
        unsupported.append(f"softmax_type={softmax_type!r} (attention softmax offset): use 'vanilla'")
    if max_attention_logit:
        unsupported.append("qk_clip / log_max_attention_logit (need the attention's max logits): unset them")
    if fused_residual_rmsnorm:
        unsupported.append("fused_residual_rmsnorm: set it to False")
    if moe_expert_bias:
        unsupported.append("biases in grouped MoE experts (add_bias_linear with MoE): set add_bias_linear=False")
    if moe_glu_interleave:
        unsupported.append("moe_mlp_glu_interleave_size: unset it")
    if moe_latent:
        unsupported.append("latent MoE projections (moe_latent_size): unset it")
    if offloaded_expert_activations:
        unsupported.append(
            f"offloading the grouped experts' activations (offload_modules {', '.join(offloaded_expert_activations)}; "
            "the torch-native experts would keep them on the GPU): remove them from --offload-modules"
        )
    if te_kernel_settings:
        unsupported.append(
            f"settings that run Transformer Engine's kernels ({', '.join(te_kernel_settings)}): unset them"
        )
    if disabled_fusions:
        unsupported.append(
            "fusions whose kernels this backend does not bring, which the training entry turns off for it ("
            + "; ".join(f"{name}=True: {TORCH_BACKEND_DISABLED_FUSIONS[name]}" for name in disabled_fusions)
            + "): set them to False"
        )
    if deferred_wgrad:
        unsupported.append(
            "deferred weight gradients ("
            + "; ".join(f"{name}: {WGRAD_DEFERRAL_SETTINGS[name]}" for name in deferred_wgrad)
            + "; the torch-native modules compute every weight gradient in the ordinary backward pass, so the "
            f"overlap would be lost): drop {', '.join(megatron_flag(name) for name in deferred_wgrad)}"
        )
    # megatron's validate_args turns the TE RNG tracker on itself for TE's CUDA graphs: unsetting those is the fix
    te_graphs = any(setting.startswith("cuda_graph_impl=") for setting in te_kernel_settings)  # TE's only
    if te_rng_tracker and not te_graphs:
        unsupported.append(
            "Transformer Engine's RNG tracker (te_rng_tracker): unset it (megatron-core's tracker is "
            "used, made CUDA-graphable when CUDA graphs are on)"
        )
    if cpu_offloading:
        unsupported.append(
            "offloading whole layers to the CPU (cpu_offloading: megatron-core's transformer block runs it through "
            "Transformer Engine's offload context, and without TE stops building the model with 'CPU Offloading is "
            "enabled when TE is not present'): drop --cpu-offloading-num-layers"
        )
    if meta_device_init:
        unsupported.append(
            "--init-model-with-meta-device (init_model_with_meta_device: the torch-native norms and stacked experts, "
            "like megatron-core's own parallel linears, allocate their weights on the GPU or CPU explicitly, which "
            "megatron's torch.device('meta') does not override, so the model would not be built on the meta "
            "device): drop it"
        )
    if gtp_weight_shards:
        unsupported.append(
            f"weights sharded beyond tensor parallelism ({', '.join(gtp_weight_shards)}: megatron-core's GTP weight "
            "rematerialisation gathers them with Transformer Engine, and the torch-native grouped experts would keep "
            "whole weights): drop it"
        )
    if unsupported:
        raise ValueError(torch_backend_refusal(backend, unsupported))


def torch_backend_refusal(backend: str, unsupported: list[str]) -> str:
    """The refusal of the torch-native backend for the ``unsupported`` features of a run asking for ``backend``.
    Under ``auto`` the run did not choose that backend: auto fell back to it because Transformer Engine does not
    import, so the message opens with that import error and its fix, then the torch-native alternative (a row's
    ``--attention-backend flash``, which every MN5 row has, is otherwise blamed on the flag first)."""
    te_error = transformer_engine_import_error() if backend == "auto" else None
    if te_error is None:
        return (f"the torch-native backend cannot run: {'; '.join(unsupported)}. Otherwise use the te backend "
                f"({TE_INSTALL_HINT} if it is missing).")
    return (f"--oellm-backend auto chose the torch-native backend because Transformer Engine does not import here "
            f"({te_error}): make it import, {TE_INSTALL_HINT}, and auto takes the te backend; or, to stay on the "
            f"torch-native backend, change what it cannot run: {'; '.join(unsupported)}")


TE_LOCAL_ATTENTION_REFUSAL = (
    "attention_backend=local: megatron-core then sets NVTE_FLASH_ATTN, NVTE_FUSED_ATTN and NVTE_UNFUSED_ATTN to 0, "
    "but the spec builders take core attention from the backend (Transformer Engine's DotProductAttention, whatever "
    "--spec says), so the first forward pass would stop with 'No dot product attention backend is available' after "
    "the model is allocated. Pass --attention-backend unfused (or auto, flash, fused) and drop --spec local"
)
"""Why the te backend refuses ``--attention-backend local`` (Megatron accepts it only with ``--spec local``, which
swaps in megatron-core's own attention in Megatron's model builders, not in ours)."""


TE_KERNEL_SETTINGS: dict[str, object] = {
    "moe_permute_fusion": True,
    "moe_router_fusion": True,
    "cross_entropy_fusion_impl": "te",
    "cuda_graph_impl": "transformer_engine",
    "tp_comm_overlap": True,
    "use_te_activation_func": True,
    "use_transformer_engine_op_fuser": True,
    "use_grouped_gemm_for_shared_expert": True,
}
"""Settings (TransformerConfig fields and Megatron arguments of the same name) and the values that run Transformer
Engine's kernels (fused MoE permutation and routing, TE's cross entropy, TE's CUDA graphs, TE's userbuffer
communication overlap, TE's activation modules, TE's fused grouped MLP, TE's grouped shared expert): with TE
installed they would bring TE into a torch-native model or be ignored by its modules (megatron-core's MLP given no
TE activation module applies the plain activation to a gated unit's whole fc1 output), without it megatron-core
raises once it reaches them."""


TE_KERNEL_SETTING_SWITCHES: dict[str, str] = {"cross_entropy_fusion_impl": "cross_entropy_loss_fusion"}
"""Settings of :data:`TE_KERNEL_SETTINGS` that choose a kernel only while a switch is on, with that switch: without
``cross_entropy_loss_fusion`` megatron-core computes the loss with its own unfused vocab-parallel cross entropy
whatever ``cross_entropy_fusion_impl`` says, and Megatron's ``validate_args`` refuses ``--cross-entropy-fusion-impl te``
with the fusion, so on Megatron's arguments the ``te`` value is harmless (it reaches the torch backend from a script
written for a TE container)."""


EXPERT_OFFLOAD_MODULES = ("expert_fc1", "moe_act", "fused_group_mlp")
"""``offload_modules`` entries that megatron-core's TE grouped experts implement and the torch-native ones do not."""


TORCH_BACKEND_DISABLED_FUSIONS: dict[str, str] = {
    "apply_rope_fusion": "Transformer Engine's fused RoPE",
    "gradient_accumulation_fusion": "apex's fused weight-gradient GEMM (Transformer Engine's GEMM under Megatron-FSDP)",
}
"""TransformerConfig fields (and Megatron arguments of the same name, on by default there) that run fused kernels the
torch-native backend does not bring, and what they run. The training entry turns them off for the torch backend
whatever the arguments say (:func:`megatron.oellm.training.model_provider.megatron_config_kwargs` reads this table),
so they are checked on a TransformerConfig only: a config built by hand with one on would bring Transformer Engine
into a torch-native model, or (gradient accumulation fusion without apex) stop in megatron-core once building the
model has allocated memory."""


WGRAD_DEFERRAL_SETTINGS: dict[str, str] = {
    "delay_wgrad_compute": "only Transformer Engine's linears hold weight gradients back for the EP-overlap schedule",
    "overlap_dispatch_backward_with_experts_wgrad": "only Transformer Engine's grouped experts hold theirs back for "
    "the dispatch backward",
    "defer_embedding_wgrad_compute": "the output layer defers its weight gradient only with "
    "gradient_accumulation_fusion, which the training entry turns off for this backend",
}
"""Settings (TransformerConfig fields and Megatron arguments of the same name) that defer weight-gradient GEMMs to
overlap them with communication, and why the torch-native backend cannot: megatron-core calls the modules'
``backward_dw`` for the deferred work, which is a no-op on megatron-core's local linears and on our grouped experts,
so the run would train with the overlap silently lost (or, for the output layer, megatron-core would refuse the
config only once Megatron has initialised)."""


def gradient_accumulation_fusion_available() -> bool:
    """Whether megatron-core's own parallel linears can fuse weight-gradient accumulation here, as megatron-core
    decides it when importing them (apex's ``fused_weight_gradient_mlp_cuda`` imports). Without it a model with
    ``gradient_accumulation_fusion`` (Megatron's default) stops in the output layer's constructor, on either backend:
    the torch backend turns the fusion off, the te backend refuses it before anything is allocated."""
    from megatron.core.tensor_parallel import layers

    return layers._grad_accum_fusion_available


@dataclass(frozen=True)
class MissingKernel:
    """A kernel the te backend needs for a requested setting and this machine lacks, with the flag that does
    without it."""

    flag: str
    """Megatron flag (without ``--``) that runs the setting without the kernel."""
    value: bool | str
    """Its value (``True`` for a switch)."""
    why: str
    """What is missing, in a few words."""
    message: str
    """The refusal: the setting, what would happen, the fix."""


def te_missing_kernels(*, gradient_accumulation_fusion: bool, flash_attention_only: bool, dtype: str | None = None,
                       flash_attention_version: int | None = None,
                       environ: Mapping[str, str] | None = None) -> dict[str, MissingKernel]:
    """Setting -> :class:`MissingKernel` for each requested setting whose kernel the te backend lacks here: the
    training entry refuses them (:func:`check_backend_support`), ``oellm recipe --local`` sets their flags instead
    (:func:`megatron.oellm.recipes.local.machine_adjustments`). ``dtype``, ``flash_attention_version`` (None when
    not known) and ``environ`` (the run's environment, default this process's) judge ``flash_attention_only`` as
    :func:`te_flash_attention_refusal` does."""
    missing = {}
    if gradient_accumulation_fusion and not gradient_accumulation_fusion_available():
        missing["gradient_accumulation_fusion"] = MissingKernel(
            "no-gradient-accumulation-fusion", True, "apex's fused_weight_gradient_mlp_cuda is missing",
            "gradient_accumulation_fusion=True: megatron-core's own parallel linears (the output layer) need apex's "
            "fused_weight_gradient_mlp_cuda extension, which does not import, and megatron-core would raise once "
            "building the model has allocated memory. Pass --no-gradient-accumulation-fusion (Transformer Engine's "
            "linears then accumulate weight gradients unfused), or install apex with its CUDA extensions")
    refusal = (te_flash_attention_refusal(dtype=dtype, flash_attention_version=flash_attention_version,
                                          environ=environ) if flash_attention_only else None)
    if refusal is not None:
        missing["attention_backend"] = MissingKernel(
            "attention-backend", "auto", refusal.why,
            f"attention_backend=flash: {refusal.why}, so no attention backend would be left and the first forward "
            "pass would stop with 'No dot product attention backend is available' after the model is allocated. "
            f"Pass --attention-backend auto (TE then picks another of its attention backends), or {refusal.fix}")
    return missing


GTP_WEIGHT_SHARD_FLAGS: dict[str, str] = {
    "tensor_parallel_num_weight_shards": "tensor_model_parallel_size",
    "expert_tensor_parallel_num_weight_shards": "expert_tensor_parallel_size",
}
"""Weight-shard settings (TransformerConfig fields and Megatron arguments of the same name) and the tensor-parallel
size each is compared with: a value above it shards every weight further over a GTP group (megatron-core's
generalized tensor parallelism with weight rematerialisation), which runs on Transformer Engine."""


def gtp_weight_shard_flags(source: TransformerConfig | Any) -> tuple[str, ...]:
    """``--flag N`` for each :data:`GTP_WEIGHT_SHARD_FLAGS` setting of a TransformerConfig or Megatron's arguments
    that shards weights beyond tensor parallelism (an unset expert tensor-parallel size is the tensor-parallel size,
    as megatron-core resolves it)."""
    flags = []
    for name, tp_name in GTP_WEIGHT_SHARD_FLAGS.items():
        shards = getattr(source, name)
        tp_size = getattr(source, tp_name) or source.tensor_model_parallel_size
        if shards is not None and shards > tp_size:
            flags.append(f"{megatron_flag(name)} {shards}")
    return tuple(flags)


def _features(source: TransformerConfig | Any) -> dict[str, Any]:
    """:func:`check_backend_support`'s feature keywords read from a TransformerConfig or Megatron's parsed arguments
    (the same field names, except the expert count, ``num_moe_experts`` vs ``num_experts``, the RNG tracker,
    ``use_te_rng_tracker`` vs ``te_rng_tracker``, the per-module precision recipe, ``quant_recipe`` vs
    ``te_precision_config_file``, and layer CPU offloading, ``cpu_offloading`` vs ``cpu_offloading_num_layers > 0``,
    the rule by which Megatron's ``validate_args`` sets it). :data:`TORCH_BACKEND_DISABLED_FUSIONS` are read from a
    TransformerConfig only: from the arguments the training entry turns them off."""
    is_config = isinstance(source, TransformerConfig)
    experts = source.num_moe_experts if is_config else source.num_experts
    offloaded = (source.offload_modules or ()) if source.fine_grained_activation_offloading else ()
    return dict(
        fp8=source.fp8 is not None,
        fp4=source.fp4 is not None,
        precision_recipe=(source.quant_recipe if is_config else source.te_precision_config_file) is not None,
        context_parallel_size=source.context_parallel_size,
        normalization=source.normalization,
        sliding_window=source.window_size is not None,
        softmax_type=source.softmax_type,
        max_attention_logit=bool(source.qk_clip or source.log_max_attention_logit),
        fused_residual_rmsnorm=bool(source.fused_residual_rmsnorm),
        moe_expert_bias=bool(experts) and source.add_bias_linear,
        moe_glu_interleave=source.moe_mlp_glu_interleave_size is not None,
        moe_latent=source.moe_latent_size is not None,
        offloaded_expert_activations=tuple(name for name in EXPERT_OFFLOAD_MODULES if name in offloaded),
        te_kernel_settings=tuple(
            f"{name}={value!r}" for name, value in TE_KERNEL_SETTINGS.items() if _runs_te_kernel(source, name, value)
        ),
        disabled_fusions=tuple(name for name in TORCH_BACKEND_DISABLED_FUSIONS if is_config and getattr(source, name)),
        deferred_wgrad=tuple(name for name in WGRAD_DEFERRAL_SETTINGS if getattr(source, name)),
        te_rng_tracker=bool(source.use_te_rng_tracker if is_config else source.te_rng_tracker),
        cpu_offloading=bool(source.cpu_offloading if is_config else source.cpu_offloading_num_layers > 0),
        meta_device_init=bool(source.init_model_with_meta_device),
        gtp_weight_shards=gtp_weight_shard_flags(source),
        gradient_accumulation_fusion=bool(source.gradient_accumulation_fusion),
        flash_attention_only=source.attention_backend == AttnBackend.flash,
        local_attention=source.attention_backend == AttnBackend.local,
        attention_backend=source.attention_backend.name,
        dtype=_dtype_of_config_or_args(source),
        flash_attention_version=source.flash_attention_version,
    )


def _runs_te_kernel(source: TransformerConfig | Any, name: str, value: object) -> bool:
    """Whether ``source`` sets :data:`TE_KERNEL_SETTINGS` entry ``name`` to its TE ``value`` and, for an entry of
    :data:`TE_KERNEL_SETTING_SWITCHES`, turns on the switch under which it chooses a kernel."""
    switch = TE_KERNEL_SETTING_SWITCHES.get(name)
    return getattr(source, name) == value and (switch is None or bool(getattr(source, switch)))


def _dtype_of_config_or_args(source: TransformerConfig | Any) -> str:
    """The dtype a TransformerConfig or Megatron's arguments train in (:func:`training_dtype` of their switches, or
    of a config's ``params_dtype``)."""
    params_dtype = getattr(source, "params_dtype", None)
    return training_dtype(source.bf16 or params_dtype == torch.bfloat16, source.fp16 or params_dtype == torch.float16)


def training_dtype(bf16: bool, fp16: bool) -> str:
    """``bf16``, ``fp16`` or ``fp32``: the training dtype Megatron's ``--bf16`` / ``--fp16`` switches choose."""
    return "bf16" if bf16 else "fp16" if fp16 else "fp32"


def check_config_support(backend: str, config: TransformerConfig) -> None:
    """:func:`check_backend_support` with the features read from a megatron-core TransformerConfig."""
    check_backend_support(backend, **_features(config))


def check_args_support(backend: str, args: Any) -> None:
    """:func:`check_backend_support` with the features read from Megatron's parsed arguments.

    The training entry calls it right after parsing, so a run the backend cannot do stops before Megatron
    initialises (no process group, no GPU memory).
    """
    check_backend_support(backend, **_features(args))
