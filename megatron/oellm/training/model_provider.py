"""Megatron ``model_provider``: the ``--oellm-model`` card built by its family's spec builder.

The architecture comes from the card (``--oellm-model``, already merged into Megatron's flags by the entry, or
rebuilt from Megatron's architecture flags when no model is named); every other TransformerConfig field comes from
Megatron's arguments through Megatron's own ``core_transformer_config_from_args``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
from typing import TYPE_CHECKING

from megatron.oellm.cards import HYBRID_SYMBOLS, ModelCard, get_card
from megatron.oellm.models.parallel import (
    HYBRID_STAGES,
    ParallelLayout,
    ParallelLayoutError,
    check_stage_count,
    even_pipeline_layout,
    layout_from_counts,
    pipeline_layout_from_hybrid_pattern,
    pipeline_stages,
    same_stages_hybrid_pattern,
)
from megatron.oellm.training.card_from_args import card_from_megatron_args, check_expressible

if TYPE_CHECKING:
    import torch
    from megatron.core.transformer import TransformerConfig


def card_from_args(args: argparse.Namespace) -> ModelCard:
    """The run's card with the padded vocabulary Megatron chose (the embedding's real size) and the run's
    ``--seq-length`` (the layout checks judge the split of the run's sequence, not the card's default).

    ``--oellm-model``'s card when given, else the card Megatron's architecture flags describe. Either way a flag no
    card describes (``--add-qkv-bias``, ``--use-rope-scaling``, ...) is refused: beside a named card the model would
    be built without it.
    """
    if args.oellm_model:
        check_expressible(args)
    card = get_card(args.oellm_model) if args.oellm_model else card_from_megatron_args(args)
    if args.seq_length:
        card = dataclasses.replace(card, seq_length=args.seq_length)
    return card.with_vocab(args.padded_vocab_size)


LOCAL_SPEC = ["local"]
"""``--spec local``: what megatron-core's ``validate_args`` asks for beside ``--attention-backend local``, which the
backends honour (or refuse) through ``--attention-backend`` itself."""


def check_layer_spec(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for a ``--spec MODULE FUNCTION``: Megatron's own model builders import that layer spec,
    while the model provider builds the card family's layers with the ``--oellm-backend`` modules and reads no
    ``--spec``, so the layers that spec names would not be built, without a word. ``--spec local`` is valid only
    beside ``--attention-backend local`` (megatron-core requires it there); anywhere else it would ask for Megatron's
    own non-TE layers and get the backend's (Transformer Engine's with ``--oellm-backend te``) all the same."""
    spec = getattr(args, "spec", None)
    if spec is None or (spec == LOCAL_SPEC and args.attention_backend.name == "local"):
        return
    if spec == LOCAL_SPEC:
        raise ValueError(f"--spec local: the model provider reads no --spec (the --oellm-backend modules build the "
                         f"layers; --oellm-backend torch builds them without Transformer Engine), and megatron-core "
                         f"needs it only beside --attention-backend local, not {args.attention_backend.name}; drop "
                         "--spec")
    raise ValueError(f"{' '.join(['--spec', *spec])}: the model is built by the card family's spec builder with the "
                     "--oellm-backend modules, which read no --spec, so this layer spec would not be used; drop "
                     "--spec (--spec local stays valid beside --attention-backend local)")


GDN_VARIANT = "gated_delta_net"
"""``--experimental-attention-variant`` of megatron-core's GPT-path Gated DeltaNet: the one setting under which
megatron-core 0.19.2's ``TransformerConfig`` accepts ``gdn_norm_out`` in ``recompute_modules``."""


def check_recompute_modules(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``gdn_norm_out`` in selective ``--recompute-modules`` where megatron-core 0.19.2's
    ``TransformerConfig`` refuses it: anywhere but ``--experimental-attention-variant gated_delta_net``.

    megatron-core's refusal names only that variant, which a model built from a hybrid layer pattern never sets, and
    comes once the model's config is built. A hybrid pattern's GDN layers read the setting, but the config check
    refuses it for them (``patches/gdn-norm-out-hybrid.md``); a model without GDN layers has nothing to recompute.
    Called on the validated arguments by the training entry and by ``oellm recipe --dry-run`` / ``--submit``."""
    if args.recompute_granularity != "selective" or "gdn_norm_out" not in (args.recompute_modules or ()):
        return
    if args.experimental_attention_variant == GDN_VARIANT:
        return
    model = f"model card {args.oellm_model}" if args.oellm_model else "the model of Megatron's flags"
    if HYBRID_SYMBOLS["gdn"] in (args.hybrid_layer_pattern or ""):
        raise ValueError(
            f"--recompute-modules gdn_norm_out: {model} is a HybridModel with Gated DeltaNet layers in its hybrid "
            f"layer pattern, and megatron-core 0.19.2's TransformerConfig accepts gdn_norm_out only for GPT models "
            f"with --experimental-attention-variant {GDN_VARIANT}, not for HybridModel's GDN layers, so it would "
            "refuse the run when it builds the model (patches/gdn-norm-out-hybrid.md); drop gdn_norm_out from "
            "--recompute-modules")
    raise ValueError(f"--recompute-modules gdn_norm_out: {model} has no Gated DeltaNet layers, whose output norm it "
                     "recomputes, and megatron-core would refuse the run when it builds the model; drop gdn_norm_out "
                     "from --recompute-modules")


def layout_from_args(args: argparse.Namespace) -> ParallelLayout:
    """The model-parallel layout of Megatron's parallel-size arguments.

    Hybrid models carry their pipeline stages as ``|`` in ``--hybrid-layer-pattern`` (Megatron refuses a
    ``--pipeline-model-parallel-layout`` for them): those stages become the layout's pipeline layout, so an uneven
    split such as the MN5 report's 6/6/6/3/6/6/6/1 is built as given.
    """
    custom = args.pipeline_model_parallel_layout
    if not isinstance(custom, str) and getattr(args, "hybrid_layer_pattern", None):
        custom = pipeline_layout_from_hybrid_pattern(args.hybrid_layer_pattern)
    return ParallelLayout(
        tp=args.tensor_model_parallel_size,
        pp=args.pipeline_model_parallel_size,
        vpp=None if isinstance(custom, str) else args.virtual_pipeline_model_parallel_size,
        ep=args.expert_model_parallel_size,
        etp=args.expert_tensor_parallel_size or 1,
        cp=args.context_parallel_size,
        sp=args.sequence_parallel,
        pipeline_layout=custom if isinstance(custom, str) else None,
    )


def check_pipeline_stage_flags(parsed: argparse.Namespace) -> None:
    """Raise :class:`ParallelLayoutError` for a ``--pipeline-model-parallel-layout`` or ``--hybrid-layer-pattern``
    stage list of the parsed (not yet validated) command line that is malformed or does not make pp x vpp stages
    (:func:`~megatron.oellm.models.parallel.pipeline_stages`). megatron's ``validate_args`` expands a layout's repeats
    as written (``t*99999999999999``: a MemoryError traceback) and judges a pattern's stages by its interleaved
    schedule's rule ("pipeline-model-parallel size should be greater than 1"), naming neither flag; the card's layer
    count is checked after it (:func:`layout_from_args`)."""
    check_hybrid_card_stage_flags(parsed)
    pp = parsed.pipeline_model_parallel_size
    if isinstance(parsed.pipeline_model_parallel_layout, str):
        pipeline_stages(parsed.pipeline_model_parallel_layout, pp)
    pattern = getattr(parsed, "hybrid_layer_pattern", None)
    if pattern:
        hybrid_pattern_stage_layout(pattern, pp)


def hybrid_pattern_stage_layout(pattern: str, pp: int) -> str | None:
    """The pipeline layout of ``--hybrid-layer-pattern pattern``'s ``|`` stages
    (:func:`~megatron.oellm.models.parallel.pipeline_layout_from_hybrid_pattern`; None without ``|``: a single stage),
    refused when its stages are not whole layers or not pp x vpp of them for ``pp`` >= 1 pipeline ranks
    (:func:`~megatron.oellm.models.parallel.check_stage_count`, on the pattern's segments: the layout built from them
    is not parsed back, the :class:`~megatron.oellm.models.parallel.ParallelLayout` that takes it parses it once).
    Returned so that a caller that needs the layout (``oellm plan``) takes it from this one read of the pattern."""
    if "|" not in pattern:
        return None
    named = f"--hybrid-layer-pattern {pattern!r}, whose '|' marks pipeline stages"
    try:
        layout = pipeline_layout_from_hybrid_pattern(pattern)
    except ParallelLayoutError as error:
        raise ParallelLayoutError(f"{named}: {error}") from error
    check_stage_count(pattern.count("|") + 1, f"{named},", pp)
    return layout


HYBRID_REFUSED_STAGE_FLAGS = {
    "pipeline_model_parallel_layout": "--pipeline-model-parallel-layout",
    "num_virtual_stages_per_pipeline_rank": "--num-virtual-stages-per-pipeline-rank",
    "num_layers_per_virtual_pipeline_stage": "--num-layers-per-virtual-pipeline-stage",
}
"""Stage flags (argument -> flag) megatron's ``validate_args`` refuses beside ``--hybrid-layer-pattern``."""


def check_hybrid_card_stage_flags(parsed: argparse.Namespace) -> None:
    """Raise :class:`ParallelLayoutError` in one line for :data:`HYBRID_REFUSED_STAGE_FLAGS` beside a hybrid
    ``--oellm-model`` card, naming the ``--hybrid-layer-pattern`` of the same stages. The card fills in its pattern,
    and megatron's ``validate_args`` then refuses those flags "with --hybrid-layer-pattern", a flag the user never
    gave."""
    name = getattr(parsed, "oellm_model", None)
    if not name:
        return
    given = {dest: getattr(parsed, dest, None) for dest in HYBRID_REFUSED_STAGE_FLAGS}
    given = {dest: value for dest, value in given.items() if value is not None}
    card = get_card(name)
    if not given or card.linear_mixer == "none":
        return
    shown = " and ".join(f"{HYBRID_REFUSED_STAGE_FLAGS[dest]} {value!r}" for dest, value in given.items())
    pattern = same_stages_hybrid_pattern(card, _stages_given(parsed, card))
    raise ParallelLayoutError(f"{shown}: {card.name} is a hybrid model, {HYBRID_STAGES}; give the same stages as "
                              f"--hybrid-layer-pattern {pattern}")


def _stages_given(parsed: argparse.Namespace, card: ModelCard) -> ParallelLayout:
    """The pipeline stages the parsed stage flags describe for ``card``. Layers per virtual stage that split no
    pipeline rank's layers evenly give vpp 0, which :func:`~megatron.oellm.models.parallel.validate_layout` refuses."""
    pp = parsed.pipeline_model_parallel_size
    vpp = parsed.num_virtual_stages_per_pipeline_rank
    per_stage = parsed.num_layers_per_virtual_pipeline_stage
    if per_stage:
        vpp = card.num_layers // (pp * per_stage) if card.num_layers % (pp * per_stage) == 0 else 0
    layout = parsed.pipeline_model_parallel_layout
    return ParallelLayout(pp=pp, vpp=vpp, pipeline_layout=layout if isinstance(layout, str) else None)


UNEVEN_SPLIT_FLAGS = {
    "decoder_first_pipeline_num_layers": "--decoder-first-pipeline-num-layers",
    "decoder_last_pipeline_num_layers": "--decoder-last-pipeline-num-layers",
    "account_for_embedding_in_pipeline_split": "--account-for-embedding-in-pipeline-split",
    "account_for_loss_in_pipeline_split": "--account-for-loss-in-pipeline-split",
}
"""Megatron's uneven pipeline-split flags (argument -> flag). The spec builders place decoder layers by an even split
over PP x VPP or by a pipeline layout (:func:`layout_from_args`), which these flags are not part of."""


def check_pipeline_split_flags(args: argparse.Namespace, card: ModelCard) -> None:
    """Raise :class:`ParallelLayoutError` for Megatron's uneven-split flags (:data:`UNEVEN_SPLIT_FLAGS`), naming the
    equivalent ``--pipeline-model-parallel-layout`` where there is one (first/last stage sizes without virtual
    stages), or the ``|`` stage boundaries of ``--hybrid-layer-pattern`` for a hybrid model.

    Without this the layout check judged the even split the flags replace (refusing, for one, Qwen3-235B-A22B's 94
    layers with ``--pipeline-model-parallel-size 8 --decoder-first-pipeline-num-layers 10
    --decoder-last-pipeline-num-layers 12`` as "94 is not divisible by 8")."""
    given = [flag for name, flag in UNEVEN_SPLIT_FLAGS.items() if getattr(args, name, None)]
    if not given:
        return
    if card.linear_mixer != "none":
        fix = "mark the stage boundaries with '|' in --hybrid-layer-pattern instead"
    else:
        layout = _layout_of_first_and_last(args, card.num_layers)
        if layout is None:
            fix = ("give the stages as --pipeline-model-parallel-layout instead, one '|'-separated stage per pipeline "
                   "rank and virtual stage, 'E' before the first layer and 'L' after the last (e.g. "
                   f"{even_pipeline_layout(card.num_layers, args.pipeline_model_parallel_size)!r})")
        else:
            fix = f"give --pipeline-model-parallel-layout {layout!r} instead"
    raise ParallelLayoutError(f"{', '.join(given)}: the layers are placed by an even split or a pipeline layout, "
                              f"which these flags are not part of; {fix}")


def _layout_of_first_and_last(args: argparse.Namespace, num_layers: int) -> str | None:
    """The pipeline layout that places the decoder layers as ``--decoder-first/last-pipeline-num-layers`` would, when
    only those are given, there are no virtual stages and the middle stages split the rest evenly (or, as
    megatron-core allows, there are neither middle stages nor middle layers); else None."""
    if args.account_for_embedding_in_pipeline_split or args.account_for_loss_in_pipeline_split:
        return None
    virtual = (getattr(args, "virtual_pipeline_model_parallel_size", None)
               or getattr(args, "num_virtual_stages_per_pipeline_rank", None))
    if (virtual or 1) > 1:
        return None
    pp = args.pipeline_model_parallel_size
    first, last = args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers
    middle_stages = pp - (first is not None) - (last is not None)
    rest = num_layers - (first or 0) - (last or 0)
    # megatron-core takes middle stages and middle layers together or neither (first + last = pp: no middle layers)
    if middle_stages < 0 or rest < 0 or bool(rest) != bool(middle_stages) or (middle_stages and rest % middle_stages):
        return None
    counts = [rest // middle_stages] * middle_stages if middle_stages else []
    return layout_from_counts(([first] if first is not None else []) + counts + ([last] if last is not None else []))


def megatron_config_kwargs(args: argparse.Namespace, backend: str) -> dict:
    """Every TransformerConfig field as megatron's own ``core_transformer_config_from_args`` derives it from ``args``.

    Megatron's function, not a list of ours, so that every runtime flag a recipe passes (dispatcher backend, forced
    balancing, FP8, recompute, attention backend, CUDA graphs, ...) reaches the model. On the torch-native backend
    the fusions Megatron enables by default whose kernels that backend does not bring
    (:data:`megatron.oellm.backends.selection.TORCH_BACKEND_DISABLED_FUSIONS`) are turned off first.
    """
    from megatron.training.arguments import core_transformer_config_from_args

    from megatron.oellm.backends.selection import TORCH_BACKEND_DISABLED_FUSIONS

    source = copy.copy(args)
    if backend == "torch":
        for name in TORCH_BACKEND_DISABLED_FUSIONS:
            setattr(source, name, False)
    config = core_transformer_config_from_args(source)
    return {field.name: getattr(config, field.name) for field in dataclasses.fields(config) if field.init}


def runtime_overrides(args: argparse.Namespace, card: ModelCard, layout: ParallelLayout) -> dict:
    """The TransformerConfig fields the run takes from Megatron's arguments: all but those the card and layout own."""
    from megatron.oellm.backends.selection import resolve_backend
    from megatron.oellm.models import spec_builder

    owned = spec_builder(card.family).config_kwargs(card, layout, args.params_dtype)
    megatron = megatron_config_kwargs(args, resolve_backend(args.oellm_backend))
    return {name: value for name, value in megatron.items() if name not in owned}


def model_config(args: argparse.Namespace, card: ModelCard, layout: ParallelLayout) -> TransformerConfig:
    """The megatron-core ``TransformerConfig`` the run's model is built with: the fields ``card`` and the run's
    ``layout`` own, plus :func:`runtime_overrides`."""
    from megatron.oellm.models import spec_builder

    return spec_builder(card.family).transformer_config(card, layout, args.params_dtype,
                                                        **runtime_overrides(args, card, layout))


def check_layer_offloading(args: argparse.Namespace, card: ModelCard) -> None:
    """Raise ``ValueError`` for ``--cpu-offloading-num-layers`` on a hybrid card (Qwen3.5): megatron-core 0.19.2's
    ``HybridStack`` never enters the layer-offload context that ``TransformerBlock`` (the GPT models) opens, so the
    run would keep every layer's activations on the GPU, as without the flag, and say nothing."""
    if card.linear_mixer != "none" and args.cpu_offloading_num_layers > 0:
        raise ValueError(f"--cpu-offloading-num-layers {args.cpu_offloading_num_layers}: {card.name} is a "
                         "megatron-core HybridModel, whose layer stack does not offload layers to the CPU (only the GPT "
                         "models' TransformerBlock does), so the flag would change nothing; drop it (activation "
                         "recompute, --recompute-granularity, is the way to save activation memory here)")


def check_meta_device_init(args: argparse.Namespace, card: ModelCard) -> None:
    """Raise ``ValueError`` for ``--init-model-with-meta-device`` without Megatron-FSDP or FSDP2: megatron-core 0.19.2
    then builds the model under ``torch.device("meta")`` and later fills every tensor left there with ``torch.empty``,
    initialising none of them. The parallel linears name their device and escape the meta device, but the MoE
    routers' weights (and the shared-expert gates) do not, so they would start training from uninitialised memory,
    silently."""
    if args.init_model_with_meta_device and not (args.use_megatron_fsdp or args.use_torch_fsdp2):
        raise ValueError("--init-model-with-meta-device without --use-megatron-fsdp or --use-torch-fsdp2: "
                         "megatron-core 0.19.2 then fills the tensors built on the meta device with uninitialised "
                         f"memory and initialises none of them; {card.name}'s MoE router weights are built there, so "
                         "training would start from garbage; drop the flag")


def check_model_config(args: argparse.Namespace, card: ModelCard, layout: ParallelLayout | None = None) -> None:
    """Raise ``ValueError`` when megatron-core's ``TransformerConfig`` refuses the run's arguments.

    Its ``__post_init__`` checks combinations Megatron's ``validate_args`` lets through (for one,
    ``--moe-router-padding-for-fp8`` without ``--fp8-format``); the model provider builds the config after process
    groups and GPU memory are set up, on every rank, so the training entry builds it once before Megatron
    initialises (the config needs neither CUDA nor process groups). ``layout`` is the run's layout where the caller
    holds it (the entry's checked one, whose pipeline stages are parsed already), else read from ``args``
    (:func:`layout_from_args`)."""
    try:
        model_config(args, card, layout_from_args(args) if layout is None else layout)
    except (AssertionError, ValueError) as error:
        detail = str(error) or f"{type(error).__name__} without a message"
        raise ValueError(f"the model's TransformerConfig refuses the run's arguments: {detail}") from error


def backend_description(name: str) -> str:
    """The backend as the start-up log states it: the name given, what ``auto`` resolved to, and for the
    torch-native backend which RMSNorm path runs (``OELLM_EAGER_RMS_NORM``), e.g. ``backend auto -> torch, RMSNorm
    triton``."""
    from megatron.oellm.backends.selection import resolve_backend
    from megatron.oellm.layers.rms_norm import cuda_path

    resolved = resolve_backend(name)
    text = f"backend {name}" + (f" -> {resolved}" if resolved != name else "")
    return text + (f", RMSNorm {cuda_path()}" if resolved == "torch" else "")


def moe_permutation_description(args: argparse.Namespace) -> str:
    """The start-up log's ``MoE permutation ...`` clause (:func:`megatron.oellm.patches.moe_permutation.describe`
    of the run's arguments), empty for a model without experts."""
    from megatron.oellm.patches import moe_permutation

    path = moe_permutation.describe(args.num_experts, args.moe_permute_fusion, args.moe_token_dispatcher_type,
                                    getattr(args, "moe_flex_dispatcher_backend", "deepep"))
    return "" if path == "none" else f", MoE permutation {path}"


def router_description(args: argparse.Namespace) -> str:
    """The start-up log's ``router GEMMs ...`` clause for the torch-native backend's MoE router
    (:func:`megatron.oellm.backends.torch_native.router.router_gemm_path`), empty for TE or a model without experts."""
    from megatron.oellm.backends.selection import resolve_backend

    if not args.num_experts or resolve_backend(args.oellm_backend) != "torch":
        return ""
    from megatron.oellm.backends.torch_native.router import router_gemm_path

    return f", router GEMMs {router_gemm_path(args.moe_router_dtype, args.params_dtype)}"


def model_provider(pre_process: bool = True, post_process: bool = True, vp_stage: int | None = None,
                   config: TransformerConfig | None = None, pg_collection: object | None = None) -> torch.nn.Module:
    """Build this rank's part of the card's model with the ``--oellm-backend`` modules (Megatron calls this).

    ``config`` and ``pg_collection`` (what megatron's training loop may pass) are not read: the config comes from
    the card and the run's arguments, the process groups from megatron-core's parallel state."""
    from megatron.training import get_args, print_rank_0

    from megatron.oellm.models import spec_builder

    args = get_args()
    card = card_from_args(args)
    layout = layout_from_args(args)
    family = spec_builder(card.family)
    transformer_config = model_config(args, card, layout)
    print_rank_0(f"> building {card.name} ({card.family}, {backend_description(args.oellm_backend)}"
                 f"{moe_permutation_description(args)}{router_description(args)})")
    return family.build_model(card, layout, args.oellm_backend, config=transformer_config, pre_process=pre_process,
                              post_process=post_process, vp_stage=vp_stage, params_dtype=args.params_dtype)
