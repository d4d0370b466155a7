"""Parallel layout of a model (TP, PP, VPP, EP, ETP, CP, SP, custom pipeline layout) and its validation.

:func:`validate_layout` holds every divisibility and layout check in one place, so that a recipe's ``--dry-run`` and
the spec builders reject a bad layout with the same message, naming the fix, before any GPU is touched. The module
is pure Python (no torch, no megatron-core import) so that the check is fast.

Pipeline layouts use the syntax of Megatron's ``--pipeline-model-parallel-layout``: ``E`` embedding, ``t`` one
decoder layer, ``L`` loss, ``m`` one MTP layer, ``|`` a stage boundary, ``x*N`` repeats ``x`` and ``(...)*N``
repeats a group, commas are cosmetic; whitespace is refused, as megatron-core's parser refuses it. The stages are
listed virtual stage by virtual stage: stage ``i`` goes to pipeline rank ``i % pp`` and virtual stage ``i // pp``, so
``len(stages) / pp`` is the VPP size.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import cached_property

from megatron.oellm.cards import ModelCard

LAYOUT_SYMBOLS: dict[str, str] = {"E": "embedding", "t": "decoder", "L": "loss", "m": "mtp"}
"""Pipeline layout characters and the layer each stands for (Megatron's ``LayerType`` names)."""

_REPEAT = re.compile(r"\*(\d+)")

MAX_EXPANDED_LAYOUT = 10_000_000
"""Most symbols a layout may expand to: no model has layers near it, and expanding ``t*100000000000`` as asked would
end in a MemoryError traceback instead of the layer-count error."""


class ParallelLayoutError(ValueError):
    """A parallel layout does not fit the model or is malformed; the message names the fix."""


@dataclass(frozen=True)
class ParallelLayout:
    """How one model replica is split over GPUs (megatron-core's parallel sizes)."""

    tp: int = 1
    """Tensor-parallel size (attention heads, GDN heads, dense widths split over ``tp`` GPUs)."""
    pp: int = 1
    """Pipeline-parallel size (decoder layers split into ``pp`` stages)."""
    vpp: int | None = None
    """Virtual pipeline stages per pipeline rank (interleaved schedule); None = 1, or read from ``pipeline_layout``."""
    ep: int = 1
    """Expert-parallel size (routed experts split over ``ep`` GPUs)."""
    etp: int = 1
    """Expert tensor-parallel size (each expert's FFN width split over ``etp`` GPUs)."""
    cp: int = 1
    """Context-parallel size (the sequence split over ``cp`` GPUs)."""
    sp: bool = False
    """Sequence parallelism inside the tensor-parallel group (needs ``tp > 1``)."""
    pipeline_layout: str | None = None
    """Custom stage layout in ``--pipeline-model-parallel-layout`` syntax, e.g. ``Et*6|t*6|t*6|t*6L``."""

    @cached_property
    def custom_stages(self) -> tuple[tuple[str, ...], ...] | None:
        """The stages of :attr:`pipeline_layout` (:func:`parse_pipeline_layout`; None without one), parsed at the first
        use and kept on this layout: its checks, its VPP size and a plan's tables then read one parse of the string."""
        if self.pipeline_layout is None:
            return None
        return tuple(tuple(stage) for stage in parse_pipeline_layout(self.pipeline_layout))

    @property
    def vpp_size(self) -> int:
        """Virtual pipeline size actually used (1 if none)."""
        if self.custom_stages is not None:
            return max(1, len(self.custom_stages) // self.pp)
        return self.vpp or 1

    def sizes_label(self) -> str:
        """The sizes in one label, ``TP2 PP8 VPP3 EP16 ETP1 CP1 SP`` (``SP`` only where sequence parallelism is on),
        as the plan's layout line and the recipe header both print them."""
        return (f"TP{self.tp} PP{self.pp} VPP{self.vpp_size} EP{self.ep} ETP{self.etp} CP{self.cp}"
                + (" SP" if self.sp else ""))

    def decoder_layers_per_stage(self, num_layers: int) -> list[int]:
        """Decoder layers of each pipeline stage in vpp-major order (stage ``i``: rank ``i % pp``, chunk ``i // pp``)."""
        if self.custom_stages is not None:
            return [stage.count("decoder") for stage in self.custom_stages]
        num_stages = self.pp * self.vpp_size
        return [num_layers // num_stages] * num_stages


SINGLE_GPU = ParallelLayout()
"""No model parallelism at all (the default layout of the spec builders)."""


def parse_pipeline_layout(layout: str) -> list[list[str]]:
    """Stages of a ``--pipeline-model-parallel-layout`` string, each a list of layer names (see module docstring).

    Same semantics as megatron-core's ``PipelineParallelLayerLayout.parse_str_to_list`` (the CPU tests compare the
    two), written without importing megatron-core so that validation stays fast.
    """
    if any(char.isspace() for char in layout):
        raise ParallelLayoutError(f"pipeline layout {layout!r} contains whitespace, which megatron-core's "
                                  "--pipeline-model-parallel-layout parser refuses; remove the spaces (commas may "
                                  "separate groups)")
    text = layout.replace(",", "")
    expanded, _ = _expand(text, 0, layout, top_level=True)
    stages: list[list[str]] = []
    for stage in expanded.split("|"):
        unknown = sorted(set(stage) - set(LAYOUT_SYMBOLS))
        if unknown:
            raise ParallelLayoutError(
                f"pipeline layout {layout!r}: unknown layer character(s) {unknown}; use E (embedding), t (decoder "
                "layer), L (loss), m (MTP layer), '|' between stages, t*N or (...)*N to repeat")
        stages.append([LAYOUT_SYMBOLS[c] for c in stage])
    return stages


def _expand(text: str, pos: int, layout: str, top_level: bool) -> tuple[str, int]:
    """Expand repeats from ``pos`` up to a closing ``)`` (or the end at top level); return (expansion, next pos).

    A group (``top_level`` False) returns at its ``)``, the top level at the end of ``text``; a stray ``)`` at top
    level and a group without one are refused here, so callers need not check the position."""
    out: list[str] = []
    while pos < len(text):
        char = text[pos]
        if char == ")":
            if top_level:
                raise ParallelLayoutError(f"pipeline layout {layout!r}: ')' without a matching '('")
            return "".join(out), pos
        if char == "(":
            if not top_level:
                raise ParallelLayoutError(f"pipeline layout {layout!r}: nested parentheses are not supported")
            unit, pos = _expand(text, pos + 1, layout, top_level=False)
            if not unit:
                raise ParallelLayoutError(f"pipeline layout {layout!r}: empty group '()' (megatron-core's parser "
                                          "refuses it); remove it or put layers inside")
            pos += 1
            repeat = _REPEAT.match(text, pos)
            if repeat is None:
                raise ParallelLayoutError(_negative_repeat(text, pos, layout)
                                          or f"pipeline layout {layout!r}: a group '(...)' must be followed by *N")
        elif char == "*":
            raise ParallelLayoutError(_negative_repeat(text, pos, layout)
                                      or f"pipeline layout {layout!r}: '*' at position {pos} repeats nothing")
        else:
            unit, pos = char, pos + 1
            repeat = _REPEAT.match(text, pos)
        if repeat is not None:
            unit, pos = unit * _repeat_count(repeat.group(1), len(unit), sum(map(len, out)), layout), repeat.end()
        out.append(unit)
    if not top_level:
        raise ParallelLayoutError(f"pipeline layout {layout!r}: '(' without a matching ')'")
    return "".join(out), pos


_NEGATIVE_REPEAT = re.compile(r"\*-\d+")


def _negative_repeat(text: str, pos: int, layout: str) -> str | None:
    """The refusal of a negative repeat count at ``pos`` of ``text`` (``layout`` without its commas), such as
    ``t*-1`` or ``(t|)*-2``: there the sign, not the ``*``, is the mistake; None where no ``*-N`` starts at ``pos``."""
    negative = _NEGATIVE_REPEAT.match(text, pos)
    if negative is None:
        return None
    return (f"pipeline layout {layout!r}: '{negative.group()}' at position {pos} is a negative repeat count; give a "
            "count of 0 or more after '*', such as '*1'")


def _repeat_count(digits: str, unit_length: int, expanded: int, layout: str) -> int:
    """The count of a ``*N`` repeating ``unit_length`` symbols after ``expanded`` others; refused if the expansion
    would pass :data:`MAX_EXPANDED_LAYOUT` (checked before ``int()``, which refuses over 4300 digits)."""
    significant = digits.lstrip("0")
    if len(significant) <= len(str(MAX_EXPANDED_LAYOUT)):
        count = int(significant or "0")
        if expanded + unit_length * count <= MAX_EXPANDED_LAYOUT:
            return count
    shown = significant if len(significant) <= 20 else f"{significant[:8]}... ({len(significant)} digits)"
    where = repr(layout) if len(layout) <= 80 else f"{layout[:60]!r}... ({len(layout)} characters)"
    raise ParallelLayoutError(f"pipeline layout {where}: '*{shown}' expands it past {MAX_EXPANDED_LAYOUT:,} symbols, "
                              "far more than any model has layers; give one 't' per decoder layer of the model")


def pipelined_hybrid_pattern(card: ModelCard, layout: ParallelLayout) -> str:
    """``card.hybrid_layer_pattern`` with ``|`` between the pipeline stages of ``layout`` (megatron-core's order:
    segment ``i`` on pipeline rank ``i % pp``, chunk ``i // pp``); no ``|`` with a single stage.

    Each decoder layer is two symbols (mixer, then ``E``); megatron-core places the embedding on the first segment
    and the loss on the last, as :func:`validate_layout` requires of a custom layout.
    """
    per_layer = len(card.hybrid_layer_pattern) // card.num_layers
    segments, start = [], 0
    for layers in layout.decoder_layers_per_stage(card.num_layers):
        end = start + layers * per_layer
        segments.append(card.hybrid_layer_pattern[start:end])
        start = end
    return "|".join(segments)


HYBRID_STAGES = ("whose run splits its pipeline stages with '|' in --hybrid-layer-pattern, PP x VPP segments "
                 "(megatron refuses --pipeline-model-parallel-layout and --num-virtual-stages-per-pipeline-rank beside "
                 "a hybrid pattern)")
"""How a hybrid model's run takes its pipeline stages: why ``oellm plan`` and the training entry refuse the other
stage options for one."""


def same_stages_hybrid_pattern(card: ModelCard, layout: ParallelLayout) -> str:
    """The ``--hybrid-layer-pattern`` (quoted for a shell) of the pipeline stages ``layout`` describes, as the recipes
    compute it; PP x VPP stages that do not split the card's layers evenly, as uneven ones
    (:func:`_uneven_hybrid_pattern`); where no stages fit the card, what such a pattern is. The fix a refusal of
    another stage option for a hybrid card names (``oellm plan --pipeline-layout``/``--vpp``, the entry's pipeline
    flags)."""
    try:
        validate_layout(card, layout)
    except ParallelLayoutError:
        uneven = _uneven_hybrid_pattern(card, layout)
        if uneven is not None:
            return uneven
        return (f"PATTERN: the card's layer pattern with '|' between PP x VPP stages of whole layers (the stages "
                f"given do not fit its {card.num_layers} layers)")
    return shlex.quote(pipelined_hybrid_pattern(card, layout))


def _uneven_hybrid_pattern(card: ModelCard, layout: ParallelLayout) -> str | None:
    """The ``--hybrid-layer-pattern`` (quoted for a shell) of ``layout``'s PP x VPP stages of ``card`` when each can
    hold a layer but they do not split the layers evenly, as even as they go (:func:`even_pipeline_layout`), then the
    split counting the embedding and the loss where there is one (:func:`_counted_split_hint`). megatron-core takes
    segments of any whole layers, segment ``i`` on pipeline rank ``i % pp``, virtual stage ``i // pp``, while a
    refused ``--vpp`` named no pattern to paste. None for a custom layout, PP 1, VPP below 1, more stages than layers
    or an even split."""
    vpp = 1 if layout.vpp is None else layout.vpp
    stages = layout.pp * vpp
    if (layout.pipeline_layout is not None or layout.pp < 2 or vpp < 1 or stages > card.num_layers
            or card.num_layers % stages == 0):
        return None
    even = ParallelLayout(pp=layout.pp, pipeline_layout=even_pipeline_layout(card.num_layers, stages))
    return (f"{shlex.quote(pipelined_hybrid_pattern(card, even))} ({card.num_layers} layers do not split evenly into "
            f"PP x VPP = {stages} stages: the first {card.num_layers % stages} hold one layer more"
            f"{_counted_split_hint(card, layout.pp, stages)})")


HYBRID_SYMBOLS_PER_LAYER = 2
"""Symbols of one decoder layer in a hybrid pattern: the mixer (``G``, ``*``, ...), then its MoE block ``E``."""


def pipeline_layout_from_hybrid_pattern(pattern: str) -> str | None:
    """The ``--pipeline-model-parallel-layout`` equivalent of a hybrid pattern's ``|`` stages (None without ``|``).

    The inverse of :func:`pipelined_hybrid_pattern`: segment ``i`` holds ``len(segment) / HYBRID_SYMBOLS_PER_LAYER``
    decoder layers; the embedding opens the first stage and the loss closes the last.
    """
    segments = pattern.split("|")
    if len(segments) == 1:
        return None
    counts = []
    for segment in segments:
        if len(segment) % HYBRID_SYMBOLS_PER_LAYER:
            raise ParallelLayoutError(f"hybrid pattern stage {segment!r} is not whole decoder layers of "
                                      f"{HYBRID_SYMBOLS_PER_LAYER} symbols (mixer, then E); put each '|' "
                                      "between two layers")
        counts.append(len(segment) // HYBRID_SYMBOLS_PER_LAYER)
    return layout_from_counts(counts)


def embedding_and_loss_layout(num_layers: int, num_stages: int) -> str | None:
    """The layout string of ``num_stages`` equal stages when the embedding and the loss count as a decoder layer each,
    as Megatron's ``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split`` split (which
    megatron-oellm takes only as a layout): the first stage one layer short for the embedding, the last for the loss.
    None unless ``num_stages`` divides ``num_layers + 2`` (Jupiter's 94 layers over PP8 x VPP3: 4 per stage)."""
    per_stage, rest = divmod(num_layers + 2, num_stages)
    if rest or num_stages < 2:
        return None
    return layout_from_counts([per_stage - 1, *[per_stage] * (num_stages - 2), per_stage - 1])


def _counted_split_hint(card: ModelCard, pp: int, num_stages: int) -> str:
    """The end of the refusal of ``num_stages`` stages over ``pp`` ranks that do not divide ``card``'s layers: the
    layout of a config counting the embedding and the loss as layers (:func:`embedding_and_loss_layout`), where there
    is one, given as :func:`_uneven_stages` gives stages (a hybrid card's also as its pattern)."""
    layout = embedding_and_loss_layout(card.num_layers, num_stages)
    if layout is None:
        return ""
    return (f"; a config splitting {card.num_layers} + 2 layers (the embedding and the loss counted as one each, "
            "Megatron's --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split) gives "
            f"those stages {_uneven_stages(card, pp, layout)}")


VPP_FLAGS = "recipe: vpp; oellm plan: --vpp; Megatron: --num-virtual-stages-per-pipeline-rank"
"""Where each caller of the shared layout check sets the virtual stages per pipeline rank, for its refusals."""


def megatron_vpp_of_layers_per_stage(counted_layers: int, pp: int, layers_per_stage: int) -> int | None:
    """The virtual pipeline size megatron's ``validate_args`` derives from ``--num-layers-per-virtual-pipeline-stage``
    ``layers_per_stage`` at ``pp`` pipeline ranks: ``counted_layers`` (the decoder layers, plus one each for the
    embedding and the loss where ``--account-for-*-in-pipeline-split`` counts them) per pipeline rank, over the layers
    per virtual stage. None where megatron refuses them (its assertions: ``pp`` or ``layers_per_stage`` does not
    divide) or no virtual stage would hold a layer."""
    per_rank, rest = divmod(counted_layers, pp)
    if rest or per_rank % layers_per_stage or per_rank < layers_per_stage:
        return None
    return per_rank // layers_per_stage


def _vpp_read_as_layers_hint(card: ModelCard, pp: int, vpp: int) -> str:
    """The clause of a refused VPP above 1 (ending in ``; ``) saying that it counts virtual stages per pipeline rank,
    not layers per virtual stage (a config's ``num_layers_per_virtual_pipeline_stage``, which users pass as VPP), and,
    where ``vpp`` read as those layers fits megatron's conversion with the embedding and the loss counted as layers
    (:func:`megatron_vpp_of_layers_per_stage`), the VPP it stands for and its stages (VPP 1: leave vpp out). Of the
    layers alone, the conversion gives a VPP only where ``vpp`` already splits them (``num_layers = pp x VPP x vpp``),
    which is no refusal. A hybrid card gets the meaning alone: megatron-core refuses the layers-per-stage flags beside
    ``--hybrid-layer-pattern``. Empty at VPP 1."""
    if vpp < 2:
        return ""
    meaning = (f"vpp ({VPP_FLAGS}) counts virtual stages per pipeline rank, not layers per virtual stage (a config's "
               "num_layers_per_virtual_pipeline_stage, Megatron's --num-layers-per-virtual-pipeline-stage)")
    if card.linear_mixer != "none":  # megatron-core refuses the layers-per-stage flags beside a hybrid pattern
        return f"{meaning}; "
    converted = megatron_vpp_of_layers_per_stage(card.num_layers + 2, pp, vpp)
    if converted is None or converted == vpp:  # the same stages: the counted split after the clause names them
        return f"{meaning}; "
    if converted == 1:  # every layer of a rank in one virtual stage: no virtual pipeline
        return (f"{meaning}: {vpp} layers per virtual stage at pp {pp} are all of a rank's layers, with the embedding "
                "and the loss counted as a layer each, one virtual stage per rank: leave vpp out; otherwise ")
    stages = embedding_and_loss_layout(card.num_layers, pp * converted)
    return (f"{meaning}: {vpp} layers per virtual stage at pp {pp} are vpp {converted}, as Megatron converts them "
            "with --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split, which count the "
            f"embedding and the loss as a layer each (({card.num_layers} + 2) / ({pp} x {vpp}) = {converted}); give "
            f"those {pp * converted} stages {_uneven_stages(card, pp, stages)}; otherwise ")


def _uneven_stages(card: ModelCard, pp: int, layout: str) -> str:
    """How to give the uneven stages of the layout string ``layout`` over ``pp`` pipeline ranks for ``card``: as a
    pipeline layout everywhere for a GPT card; for a hybrid card as a layout in a recipe (which turns it into the
    pattern) and as ``|`` in ``--hybrid-layer-pattern`` to ``oellm plan`` and Megatron, which refuse a layout beside
    a hybrid pattern."""
    if card.linear_mixer == "none":
        return (f"as a pipeline layout (recipe: pipeline_layout; oellm plan: --pipeline-layout; Megatron: "
                f"--pipeline-model-parallel-layout) such as {layout!r}")
    pattern = pipelined_hybrid_pattern(card, ParallelLayout(pp=pp, pipeline_layout=layout))
    return (f"as a recipe's pipeline_layout, such as {layout!r}, or, to oellm plan and Megatron, as '|' between "
            f"them in --hybrid-layer-pattern: {shlex.quote(pattern)}")


def layout_from_counts(counts: list[int]) -> str:
    """A layout string with ``counts[i]`` decoder layers in stage ``i``, the embedding first and the loss last."""
    stages = [f"t*{n}" if n else "" for n in counts]
    stages[0] = "E" + stages[0]
    stages[-1] += "L"
    return "|".join(stages)


def validate_layout(card: ModelCard, layout: ParallelLayout, world_size: int | None = None) -> None:
    """Check that ``layout`` fits ``card`` (and ``world_size`` GPUs if given); raise :class:`ParallelLayoutError`.

    Every check names the fix. Checked: positive sizes; SP needs TP (megatron-core's ``ModelParallelConfig``;
    ``oellm plan`` turns ``--sp`` off at TP 1 first, and the training entry checks after megatron's ``validate_args``
    has, as it does there); heads, query groups, GDN heads, shared-expert
    width vs TP; GDN heads vs TP x CP; experts vs EP; expert width vs ETP; sequence vs CP and, under SP, vs TP x CP;
    layers vs PP x VPP or the custom pipeline layout (syntax, PP divides the stage count, VPP agrees, layer count,
    embedding first, loss last, no MTP); the world size vs TP x PP x CP and ETP x EP x PP; last, TP needs SP in an
    MoE model (every card).
    """
    for name in ("tp", "pp", "ep", "etp", "cp"):
        if getattr(layout, name) < 1:
            raise ParallelLayoutError(f"{name} must be >= 1, got {getattr(layout, name)}")
    if layout.vpp is not None and layout.vpp < 1:
        raise ParallelLayoutError(f"vpp must be >= 1 or unset, got {layout.vpp}")
    if layout.sp and layout.tp == 1:
        raise ParallelLayoutError("sequence parallelism (recipe: sp = true) needs tp > 1: megatron-core's "
                                  "ModelParallelConfig refuses it at tp 1 (megatron's validate_args turns "
                                  "--sequence-parallel off there with a warning, as oellm plan does with --sp); turn "
                                  "it off or use tp >= 2")
    _validate_tensor_parallel(card, layout)
    _validate_experts(card, layout)
    _validate_context_parallel(card, layout)
    _validate_sequence_parallel(card, layout)
    _validate_pipeline(card, layout)
    if world_size is not None:
        _validate_world_size(layout, world_size)
    if layout.tp > 1 and not layout.sp and card.num_experts:
        raise ParallelLayoutError(f"tp={layout.tp} without sequence parallelism: {card.name} is an MoE model, and "
                                  "megatron-core's MoE layer refuses to train with tp > 1 unless sequence "
                                  "parallelism is on (at the first forward step); turn sequence parallelism on (recipe: sp = "
                                  "true; oellm plan: --sp; Megatron: --sequence-parallel) or use tp = 1")


def _divides(what: str, amount: int, by_name: str, by: int, fix: str) -> None:
    """Raise if ``by`` does not divide ``amount``."""
    if amount % by:
        raise ParallelLayoutError(f"{what} ({amount}) is not divisible by {by_name} ({by}); {fix}")


def _valid_sizes(amount: int, limit: int | None = None) -> str:
    """The divisors of ``amount`` (up to ``limit``), for error messages."""
    return ", ".join(str(d) for d in range(1, (limit or amount) + 1) if amount % d == 0)


def _validate_tensor_parallel(card: ModelCard, layout: ParallelLayout) -> None:
    """Heads, GDN heads and the shared expert's width must split evenly over TP; the query groups too, or TP must be
    a multiple of them (megatron-core's ``SelfAttention`` then replicates each KV head over ``tp / groups`` ranks)."""
    tp = layout.tp
    _divides("num_attention_heads", card.num_attention_heads, "tp", tp,
             f"use tp in {{{_valid_sizes(card.num_attention_heads)}}}")
    groups = card.num_query_groups
    if groups % tp and tp % groups:
        sizes = [d for d in range(1, card.num_attention_heads + 1)
                 if card.num_attention_heads % d == 0 and (groups % d == 0 or d % groups == 0)]
        raise ParallelLayoutError(
            f"num_query_groups (KV heads) ({groups}) is neither divisible by tp ({tp}) nor a divisor of it; use tp in "
            f"{{{', '.join(map(str, sizes))}}} (each TP rank holds whole KV heads, or megatron-core replicates each "
            "KV head over tp / num_query_groups ranks)")
    if card.linear_mixer != "none":
        _divides("linear_num_key_heads", card.linear_num_key_heads, "tp", tp,
                 f"use tp in {{{_valid_sizes(card.linear_num_key_heads)}}}")
        _divides("linear_num_value_heads", card.linear_num_value_heads, "tp", tp,
                 f"use tp in {{{_valid_sizes(card.linear_num_value_heads)}}}")
    if card.moe_shared_expert_intermediate_size:
        _divides("moe_shared_expert_intermediate_size", card.moe_shared_expert_intermediate_size, "tp", tp,
                 "use a tp that divides the shared expert width")


def _validate_experts(card: ModelCard, layout: ParallelLayout) -> None:
    """Routed experts must split evenly over EP and each expert's width over ETP."""
    _divides("num_experts", card.num_experts, "ep", layout.ep,
             f"use ep in {{{_valid_sizes(card.num_experts, 64)}...}}")
    _divides("moe_ffn_hidden_size", card.moe_ffn_hidden_size, "etp", layout.etp,
             "use an etp that divides the expert width (etp=1 is usual with EP)")


def _validate_context_parallel(card: ModelCard, layout: ParallelLayout) -> None:
    """The sequence must split into 2 x CP load-balanced chunks; GDN heads must split over TP x CP (all-to-all)."""
    if layout.cp == 1:
        return
    _divides("seq_length", card.seq_length, "2 x cp", 2 * layout.cp,
             "context parallelism splits each sequence into 2 x cp chunks; pick cp so that 2 x cp divides it")
    if card.linear_mixer != "none":
        tp_cp = layout.tp * layout.cp
        _divides("linear_num_key_heads", card.linear_num_key_heads, "tp x cp", tp_cp,
                 "GDN context parallelism scatters heads over tp x cp GPUs; lower cp or tp")
        _divides("linear_num_value_heads", card.linear_num_value_heads, "tp x cp", tp_cp,
                 "GDN context parallelism scatters heads over tp x cp GPUs; lower cp or tp")


def _validate_sequence_parallel(card: ModelCard, layout: ParallelLayout) -> None:
    """Under SP each CP rank's ``seq_length / cp`` tokens are split over TP (megatron-core scatters the embedding
    output along the sequence and asserts an even split at the first forward step, on the GPU)."""
    if not layout.sp:
        return
    local = card.seq_length // layout.cp
    if local % layout.tp:
        per_rank = f"seq_length / cp = {card.seq_length} / {layout.cp}" if layout.cp > 1 else "seq_length"
        raise ParallelLayoutError(f"{per_rank} ({local}) is not divisible by tp ({layout.tp}): sequence parallelism "
                                  "splits each rank's tokens over tp; use a seq_length divisible by tp x cp "
                                  f"({layout.tp * layout.cp}) or another tp")


def _validate_pipeline(card: ModelCard, layout: ParallelLayout) -> None:
    """Decoder layers must fill the PP x VPP stages, evenly or as the custom layout says."""
    pp = layout.pp
    if layout.pipeline_layout is None:
        vpp = layout.vpp or 1
        if vpp > 1 and pp == 1:
            raise ParallelLayoutError(f"vpp={vpp} needs pp > 1 (virtual stages interleave pipeline ranks)")
        misread = _vpp_read_as_layers_hint(card, pp, vpp)
        if pp * vpp > card.num_layers:
            raise ParallelLayoutError(f"pp x vpp ({pp * vpp}) exceeds num_layers ({card.num_layers}): a stage "
                                      f"without a layer computes nothing; {misread}use pp x vpp in "
                                      f"{{{_valid_sizes(card.num_layers)}}}")
        _divides("num_layers", card.num_layers, "pp x vpp", pp * vpp,
                 f"{misread}use pp x vpp in {{{_valid_sizes(card.num_layers)}}} or give uneven stages "
                 f"{_uneven_stages(card, pp, even_pipeline_layout(card.num_layers, pp * vpp))}"
                 f"{_counted_split_hint(card, pp, pp * vpp)}")
        return
    stages = layout.custom_stages
    where = f"pipeline layout {layout.pipeline_layout!r}"
    check_stage_count(len(stages), where, pp)
    vpp = len(stages) // pp
    if layout.vpp is not None and layout.vpp != vpp:
        raise ParallelLayoutError(f"{where} has {len(stages)} stages = pp ({pp}) x {vpp}, but vpp={layout.vpp}; "
                                  f"set vpp={vpp} (or leave it unset) or give {pp * layout.vpp} stages")
    flat = [name for stage in stages for name in stage]
    decoders = flat.count("decoder")
    if decoders != card.num_layers:
        raise ParallelLayoutError(f"{where} places {decoders} decoder layers ('t'), the model has {card.num_layers}; "
                                  f"e.g. {even_pipeline_layout(card.num_layers, len(stages))!r}")
    if flat.count("mtp"):
        raise ParallelLayoutError(f"{where} places MTP layers ('m'), but {card.name} has no MTP; remove them")
    if flat.count("embedding") != 1 or not stages[0] or stages[0][0] != "embedding":
        raise ParallelLayoutError(f"{where}: the embedding 'E' must appear once, at the start of the first stage")
    if flat.count("loss") != 1 or not stages[-1] or stages[-1][-1] != "loss":
        raise ParallelLayoutError(f"{where}: the loss 'L' must appear once, at the end of the last stage")


def pipeline_stages(pipeline_layout: str, pp: int) -> list[list[str]]:
    """The stages of ``pipeline_layout`` (:func:`parse_pipeline_layout`) for ``pp`` pipeline ranks; raise
    :class:`ParallelLayoutError` unless they are pp x vpp stages, with ``pp > 1`` for more than one. The checks of a
    layout that need no model card."""
    stages = parse_pipeline_layout(pipeline_layout)
    check_stage_count(len(stages), f"pipeline layout {pipeline_layout!r}", pp)
    return stages


PP_FLAGS = "set by oellm plan's --pp (default 1), a recipe's pp or Megatron's --pipeline-model-parallel-size"
"""Where each caller of the shared layout check sets the pipeline-parallel size, for its refusals."""


def check_stage_count(count: int, where: str, pp: int) -> None:
    """Raise :class:`ParallelLayoutError` unless ``count`` stages are pp x vpp, with ``pp > 1`` for more than one:
    :func:`pipeline_stages`'s check, for callers that hold the count without parsing the string again. ``where``
    names the stage list the user gave (``pipeline layout 'Et|tL'``, ``--hybrid-layer-pattern 'GE|GE'``), and the
    refusal names the pipeline-parallel size's flag (:data:`PP_FLAGS`), which a user who left it out never typed."""
    if count % pp:
        raise ParallelLayoutError(f"{where} has {count} stages, not a multiple of pp ({pp}), {PP_FLAGS}; give pp x "
                                  f"vpp stages separated by '|', or a pp that divides {count}")
    if count > 1 and pp == 1:
        raise ParallelLayoutError(f"{where} has {count} stages for pp=1, {PP_FLAGS}: stages beyond one per pipeline "
                                  f"rank are virtual stages, which need pp > 1; give a pp above 1 that divides {count}, "
                                  "or no '|' for a single stage")


def even_pipeline_layout(num_layers: int, num_stages: int) -> str:
    """A layout string spreading ``num_layers`` over ``num_stages`` stages as evenly as possible (the first stages one
    layer longer)."""
    base, extra = divmod(num_layers, num_stages)
    return layout_from_counts([base + (1 if i < extra else 0) for i in range(num_stages)])


def _validate_world_size(layout: ParallelLayout, world_size: int) -> None:
    """The GPUs must split into TP x PP x CP x DP for dense parts and ETP x EP x PP x expert-DP for experts."""
    dense = layout.tp * layout.pp * layout.cp
    if world_size % dense:
        raise ParallelLayoutError(f"world size {world_size} is not divisible by tp x pp x cp = {dense}; "
                                  "change the GPU count or the parallel sizes")
    expert = layout.etp * layout.ep * layout.pp
    if world_size % expert:
        raise ParallelLayoutError(f"world size {world_size} is not divisible by etp x ep x pp = {expert}; "
                                  "change the GPU count, ep, etp or pp")
