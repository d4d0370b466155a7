"""ParallelLayout validation and the pipeline-layout parser, checked against megatron-core's own parser and its
``TransformerConfig`` (TP sizes against the KV heads); a vpp below one, or an absurd ``*N`` in a pipeline layout, is
refused in one line (exit 2), not read as "unset" or expanded into a MemoryError."""

import dataclasses
import random
import re

import pytest
import torch

import megatron.oellm  # noqa: F401  (3.11 provision before megatron-core imports)
from megatron.oellm.cards import get_card
from megatron.oellm.models.parallel import (
    MAX_EXPANDED_LAYOUT,
    ParallelLayout,
    ParallelLayoutError,
    parse_pipeline_layout,
    validate_layout,
)

QWEN35 = get_card("qwen3.5-35b-a3b")
QWEN3 = get_card("qwen3-30b-a3b")
CARDS = ["qwen3.5-35b-a3b", "qwen3-30b-a3b", "qwen3-235b-a22b"]

LAYOUTS = [
    "Et*6|t*6|t*6|t*3|t*6|t*6|t*6|t*1L",
    "Ettt|(tt|)*29,m|L",
    "E|t*4|(t|)*3,tL",
    "Et*2,t*10|t*12L",
    "(Et|)*1,t|t|tL",
    "E|*2tL",
]


def _megatron_parse(layout: str) -> list[list[str]]:
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    return [[layer.name for layer in stage] for stage in PipelineParallelLayerLayout.parse_str_to_list(layout)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_parser_matches_megatron(layout: str) -> None:
    assert parse_pipeline_layout(layout) == _megatron_parse(layout)


def test_parser_matches_megatron_on_random_layouts() -> None:
    rng = random.Random(random.random())
    for _ in range(50):
        stages = [f"t*{rng.randint(0, 5)}" if rng.random() < 0.7 else "t" * rng.randint(0, 3)
                  for _ in range(rng.randint(1, 6))]
        group = f"(t*{rng.randint(1, 3)}|)*{rng.randint(1, 4)}"
        layout = "E" + "|".join(stages) + "|" + group + "tL"
        assert parse_pipeline_layout(layout) == _megatron_parse(layout), layout


@pytest.mark.parametrize("layout,message", [
    ("Ex*3|tL", "unknown layer character"),
    ("E(tt|*2L", "without a matching ')'"),
    ("Et)|tL", "without a matching '('"),
    ("E((t)*2)*2L", "nested parentheses"),
    ("E*|tL", "repeats nothing"),
    ("E(tt)|tL", "must be followed by *N"),
])
def test_parser_errors(layout: str, message: str) -> None:
    with pytest.raises(ParallelLayoutError, match=re.escape(message)):
        parse_pipeline_layout(layout)


@pytest.mark.parametrize("card,layout", [
    (QWEN35, ParallelLayout()),
    (QWEN35, ParallelLayout(tp=2, pp=4, vpp=5, ep=8, cp=2, sp=True)),
    (QWEN35, ParallelLayout(pp=2, pipeline_layout="Et*6|t*6|t*6|t*2|t*6|t*6|t*6|t*2L")),
    (QWEN3, ParallelLayout(tp=4, pp=2, ep=16, etp=1, sp=True)),
    (QWEN3, ParallelLayout(pp=4, pipeline_layout="Et*5|t*7|t*6|t*6|t*6|t*6|t*6|t*6L")),
])
def test_valid_layouts_pass(card, layout) -> None:
    validate_layout(card, layout, world_size=layout.tp * layout.pp * layout.cp * layout.ep)


@pytest.mark.parametrize("card,layout,message", [
    (QWEN35, ParallelLayout(tp=0), "tp must be >= 1"),
    (QWEN35, ParallelLayout(sp=True), "needs tp > 1"),
    (QWEN3, ParallelLayout(tp=3), r"num_attention_heads \(32\) is not divisible by tp \(3\)"),
    (QWEN35, ParallelLayout(tp=32, sp=True), r"num_attention_heads \(16\) is not divisible by tp \(32\)"),
    (QWEN35, ParallelLayout(ep=3), r"num_experts \(256\) is not divisible by ep \(3\)"),
    (QWEN35, ParallelLayout(etp=3), r"moe_ffn_hidden_size \(512\) is not divisible by etp \(3\)"),
    (QWEN35, ParallelLayout(cp=3), r"seq_length \(4096\) is not divisible by 2 x cp \(6\)"),
    (QWEN35, ParallelLayout(tp=2, cp=16), r"linear_num_key_heads \(16\) is not divisible by tp x cp \(32\)"),
    (QWEN35, ParallelLayout(pp=3), r"num_layers \(40\) is not divisible by pp x vpp \(3\).*Et\*14\|t\*13\|t\*13L"),
    (QWEN35, ParallelLayout(vpp=2), "needs pp > 1"),
    # more stages than layers: no layout of empty stages is suggested
    (QWEN35, ParallelLayout(pp=41), r"pp x vpp \(41\) exceeds num_layers \(40\): a stage without a layer computes "
                                    r"nothing; use pp x vpp in \{1, 2, 4, 5, 8, 10, 20, 40\}$"),
    (QWEN3, ParallelLayout(pp=25, vpp=2), r"pp x vpp \(50\) exceeds num_layers \(48\)"),
    (QWEN3, ParallelLayout(pp=3, pipeline_layout="Et*24|t*24L"), "2 stages, not a multiple of pp"),
    (QWEN3, ParallelLayout(pp=2, vpp=3, pipeline_layout="Et*24|t*24L"), "set vpp=1"),
    # megatron's validate_args: an interleaved schedule (a layout of 2 stages at pp=1 is vpp=2) needs pp > 1
    (QWEN3, ParallelLayout(pipeline_layout="Et*24|t*24L"),
     "2 stages for pp=1, set by oellm plan's --pp .*: stages beyond one per pipeline rank are virtual stages, which "
     "need pp > 1"),
    (QWEN3, ParallelLayout(pp=2, pipeline_layout="Et*24|t*23L"), "places 47 decoder layers"),
    (QWEN3, ParallelLayout(pp=2, pipeline_layout="t*24|Et*24L"), "embedding 'E' must appear once, at the start"),
    (QWEN3, ParallelLayout(pp=2, pipeline_layout="Et*24|Lt*24"), "loss 'L' must appear once, at the end"),
    (QWEN3, ParallelLayout(pp=2, pipeline_layout="Et*24|t*24mL"), "has no MTP"),
])
def test_invalid_layouts_name_the_problem(card, layout, message) -> None:
    with pytest.raises(ParallelLayoutError, match=message):
        validate_layout(card, layout)


@pytest.mark.parametrize("card", [QWEN3, QWEN35], ids=["qwen3", "qwen3.5"])
def test_moe_with_tensor_parallelism_needs_sequence_parallelism(card) -> None:
    """megatron-core's MoE layer raises at the first training forward with TP > 1 and no SP: after the queue."""
    fix = "turn sequence parallelism on (recipe: sp = true; oellm plan: --sp; Megatron: --sequence-parallel)"
    with pytest.raises(ParallelLayoutError, match=r"tp=2 without sequence parallelism: .* MoE model.*" + re.escape(fix)):
        validate_layout(card, ParallelLayout(tp=2, ep=8), world_size=16)
    validate_layout(card, ParallelLayout(tp=2, ep=8, sp=True), world_size=16)


def test_gdn_heads_vs_tp() -> None:
    card = dataclasses.replace(QWEN35, name="x", num_attention_heads=16, num_query_groups=16,
                               linear_num_key_heads=6, linear_num_value_heads=12)
    with pytest.raises(ParallelLayoutError, match=r"linear_num_key_heads \(6\) is not divisible by tp \(4\)"):
        validate_layout(card, ParallelLayout(tp=4))


def test_world_size_checks() -> None:
    with pytest.raises(ParallelLayoutError, match="not divisible by tp x pp x cp = 8"):
        validate_layout(QWEN3, ParallelLayout(tp=4, pp=2), world_size=12)
    with pytest.raises(ParallelLayoutError, match="not divisible by etp x ep x pp = 32"):
        validate_layout(QWEN3, ParallelLayout(tp=2, pp=2, ep=16), world_size=16)


@pytest.mark.parametrize("num_layers,pp,vpp,layout", [
    (40, 4, None, "Et*6|t*6|t*6|t*3|t*6|t*6|t*6|t*1L"),
    (48, 2, None, "Et*5|t*7|t*6|t*6|t*6|t*6|t*6|t*6L"),
    (48, 4, 2, None),
    (48, 8, None, None),
])
def test_stage_split_matches_megatron(num_layers, pp, vpp, layout) -> None:
    """Decoder layers per (pp rank, virtual stage) agree with megatron-core's layout object."""
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    ours = ParallelLayout(pp=pp, vpp=vpp, pipeline_layout=layout)
    counts = ours.decoder_layers_per_stage(num_layers)
    assert sum(counts) == num_layers
    reference_layout = layout or "|".join(
        ("E" if i == 0 else "") + f"t*{num_layers // len(counts)}" + ("L" if i == len(counts) - 1 else "")
        for i in range(len(counts)))
    reference = PipelineParallelLayerLayout(reference_layout, pp)
    reference.validate_layer_layout(num_layers=num_layers, mtp_num_layers=None)
    assert reference.virtual_pipeline_model_parallel_size == ours.vpp_size
    for index, count in enumerate(counts):
        pp_rank, vp_stage = index % pp, index // pp
        assert reference.layout[pp_rank][vp_stage].count(LayerType.decoder) == count


@pytest.mark.parametrize("layout_string", ["Et*6|t*6|t*6|t*3|t*6|t*6|t*6|t*1L", "Et*10|t*10|t*10|t*10L"])
def test_hybrid_pattern_stages_round_trip_to_the_pipeline_layout(layout_string):
    from megatron.oellm.models.parallel import pipeline_layout_from_hybrid_pattern, pipelined_hybrid_pattern

    card = get_card("qwen3.5-35b-a3b")
    layout = ParallelLayout(pp=4, ep=4, pipeline_layout=layout_string)
    pattern = pipelined_hybrid_pattern(card, layout)
    assert pattern.replace("|", "") == card.hybrid_layer_pattern
    back = ParallelLayout(pp=4, ep=4, pipeline_layout=pipeline_layout_from_hybrid_pattern(pattern))
    assert back.decoder_layers_per_stage(40) == layout.decoder_layers_per_stage(40)
    assert pipeline_layout_from_hybrid_pattern(card.hybrid_layer_pattern) is None


@pytest.mark.parametrize("layout", ["Et*24 | t*24L", "Et*24|\tt*24L", "E(t*2)*2|()*3t*20L", "E(,)*2t*24|t*24L"])
def test_layouts_megatron_refuses_are_refused_before_megatron(layout: str) -> None:
    """A layout megatron-core's parser refuses (whitespace, an empty group) must not pass the layout check: the GPT
    spec builder hands the string to megatron-core verbatim, which fails with an AssertionError."""
    with pytest.raises(Exception):  # noqa: B017 - megatron-core raises a bare AssertionError
        _megatron_parse(layout)
    with pytest.raises(ParallelLayoutError, match="whitespace|empty group"):
        validate_layout(QWEN3, ParallelLayout(pp=2, pipeline_layout=layout))


def test_parser_agrees_with_megatron_on_random_strings() -> None:
    """Fresh random strings over the layout alphabet (commas, spaces, groups; no ``*0``, where megatron-core's regex
    can delete a bracket): whatever megatron-core parses, ours parses the same, and ours parses nothing more. Left
    out: a group whose body starts with a digit (``E*1(12)*2``), which megatron-core expands first and so glues onto
    the count before it (``E*11212``: 11,212 embeddings), a string ours refuses; one such draw in 3000 failed CI."""
    rng = random.Random(random.random())
    alphabet = "Ettt||()*123, Lm"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10)))
        if re.search(r"\([, ]*\d", text):
            continue
        try:
            ours = parse_pipeline_layout(text)
        except ParallelLayoutError:
            ours = None
        try:
            reference = _megatron_parse(text)
        except AssertionError:
            reference = None
        assert ours == reference, text


@pytest.mark.parametrize("seq_length,tp,cp", [(4100, 8, 1), (4100, 4, 2), (4108, 4, 2), (130, 4, 1)])
def test_sequence_parallelism_needs_the_sequence_to_split_over_tp(seq_length: int, tp: int, cp: int) -> None:
    """Under SP megatron-core scatters each CP rank's ``seq_length / cp`` tokens over TP and asserts an even split at
    the first forward step (on the GPU): the layout check must refuse it first."""
    card = dataclasses.replace(QWEN3, name="x", num_query_groups=8, seq_length=seq_length)
    assert seq_length % (2 * cp) == 0  # the CP rule alone passes
    with pytest.raises(ParallelLayoutError, match=rf"\({seq_length // cp}\) is not divisible by tp \({tp}\)"):
        validate_layout(card, ParallelLayout(tp=tp, cp=cp, sp=True))
    validate_layout(dataclasses.replace(card, seq_length=seq_length * tp), ParallelLayout(tp=tp, cp=cp, sp=True))


def test_divisibility_errors_list_every_size_that_would_work():
    """Qwen3-30B-A3B has 32 heads and 4 KV heads, 48 layers, 128 experts: the fix lists all divisors, the amount
    itself included (a tp above the 4 KV heads replicates them, so every divisor of the 32 heads works)."""
    with pytest.raises(ParallelLayoutError, match=re.escape("use tp in {1, 2, 4, 8, 16, 32}")):
        validate_layout(QWEN3, ParallelLayout(tp=64, sp=True))
    with pytest.raises(ParallelLayoutError, match=re.escape("use pp x vpp in {1, 2, 3, 4, 6, 8, 12, 16, 24, 48}")):
        validate_layout(QWEN3, ParallelLayout(pp=5))
    with pytest.raises(ParallelLayoutError, match=re.escape("use ep in {1, 2, 4, 8, 16, 32, 64...}")):
        validate_layout(QWEN3, ParallelLayout(ep=3))


def test_a_split_counting_the_embedding_and_the_loss_is_named_as_the_layout_megatron_builds():
    """Jupiter's recipe splits Qwen3-235B-A22B's 94 layers over PP 8 x VPP 3 by counting the embedding and the loss as
    a layer each (96 / 24); ``vpp=3`` got "not divisible by pp x vpp (24)" and only an even layout of 94. The refusal
    of any such pp x vpp names the layout of that split: the decoder layers megatron-core builds per stage under
    ``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split``, a layout that passes."""
    from types import SimpleNamespace

    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    card = get_card("qwen3-235b-a22b")
    pp, vpp = random.choice([(pp, vpp) for pp in range(2, 95) for vpp in range(1, 48)
                             if pp * vpp <= card.num_layers and card.num_layers % (pp * vpp)
                             and (card.num_layers + 2) % (pp * vpp) == 0])
    with pytest.raises(ParallelLayoutError, match=r"is not divisible by pp x vpp.*--pipeline-layout") as refusal:
        validate_layout(card, ParallelLayout(pp=pp, vpp=vpp))
    layout = re.search(r"--account-for-loss-in-pipeline-split\) gives those stages as a pipeline layout \(.*\) such "
                       r"as '(?P<layout>[^']+)'$", str(refusal.value))["layout"]
    validate_layout(card, ParallelLayout(pp=pp, vpp=vpp, pipeline_layout=layout))
    config = SimpleNamespace(pipeline_model_parallel_layout=None, num_layers_in_first_pipeline_stage=None,
                             num_layers_in_last_pipeline_stage=None, account_for_embedding_in_pipeline_split=True,
                             account_for_loss_in_pipeline_split=True, num_layers=card.num_layers,
                             pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None)
    built = [get_num_layers_to_build(config, vp_stage=index // pp, pp_rank=index % pp) for index in range(pp * vpp)]
    assert [stage.count("decoder") for stage in parse_pipeline_layout(layout)] == built


def test_uneven_stages_of_a_hybrid_card_are_named_as_the_pattern_its_plan_and_run_take():
    """A hybrid card's pp not dividing its layers: the refusal named a pipeline layout, which ``oellm plan`` and
    megatron refuse beside a hybrid pattern; it now names the ``--hybrid-layer-pattern`` of the same stages too,
    whose stages are the layout's and which plans at that pp."""
    from megatron.oellm.models.parallel import pipeline_layout_from_hybrid_pattern

    pp = random.choice([n for n in range(2, QWEN35.num_layers) if QWEN35.num_layers % n])
    with pytest.raises(ParallelLayoutError) as refusal:
        validate_layout(QWEN35, ParallelLayout(pp=pp))
    found = list(re.finditer(r"pipeline_layout, such as '(?P<layout>[^']+)', or, to oellm plan and Megatron, as "
                             r"'\|' between them in --hybrid-layer-pattern: '(?P<pattern>[^']+)'", str(refusal.value)))
    # the even split, and the split counting the embedding and the loss where pp divides the layers + 2
    assert len(found) == (2 if (QWEN35.num_layers + 2) % pp == 0 else 1), refusal.value
    for stages in found:
        assert pipeline_layout_from_hybrid_pattern(stages["pattern"]) == stages["layout"]
        assert stages["pattern"].replace("|", "") == QWEN35.hybrid_layer_pattern
        validate_layout(QWEN35, ParallelLayout(pp=pp, pipeline_layout=stages["layout"]))
    assert "--pipeline-layout" not in str(refusal.value), refusal.value


def _megatron_refusal(card, tp: int) -> str | None:
    """What megatron-core's ``TransformerConfig`` says about ``card``'s attention (and GDN) heads at ``tp``: None when
    it accepts them. The GDN checks of 0.19.2 run under ``experimental_attention_variant="gated_delta_net"``."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    gdn = {}
    if card.linear_mixer != "none":
        gdn = dict(experimental_attention_variant="gated_delta_net", linear_attention_freq=4,
                   linear_conv_kernel_dim=card.linear_conv_kernel_dim, linear_key_head_dim=card.linear_key_head_dim,
                   linear_value_head_dim=card.linear_value_head_dim, linear_num_key_heads=card.linear_num_key_heads,
                   linear_num_value_heads=card.linear_num_value_heads)
    try:
        TransformerConfig(num_layers=card.num_layers, hidden_size=card.hidden_size,
                          num_attention_heads=card.num_attention_heads, num_query_groups=card.num_query_groups,
                          kv_channels=card.kv_channels, tensor_model_parallel_size=tp, sequence_parallel=tp > 1,
                          params_dtype=torch.bfloat16, bf16=True, **gdn)
    except (AssertionError, ValueError) as error:
        return str(error)
    return None


@pytest.mark.parametrize("name", CARDS)
def test_tensor_parallel_sizes_match_megatron(name: str) -> None:
    """megatron-core 0.19.2 accepts a TP size that is a multiple of the KV heads (``TransformerConfig``: "must be a
    multiple or divisor"), and ``SelfAttention`` replicates each KV head over ``tp / num_query_groups`` ranks. The
    layout check refused it ("each TP rank needs whole KV heads"): Qwen3-235B-A22B (4 KV heads) at TP 8, Qwen3.5 at
    TP 4."""
    card = get_card(name)
    for tp in range(1, 2 * card.num_attention_heads + 1):
        try:
            validate_layout(card, ParallelLayout(tp=tp, sp=tp > 1))
            ours = None
        except ParallelLayoutError as error:
            ours = str(error)
        theirs = _megatron_refusal(card, tp)
        assert (ours is None) == (theirs is None), f"tp={tp}: ours {ours!r}, megatron {theirs!r}"


def test_tensor_parallel_neither_multiple_nor_divisor_of_kv_heads_is_refused() -> None:
    """12 heads, 4 KV heads: TP 6 splits the heads but neither holds whole KV heads nor replicates them evenly."""
    card = dataclasses.replace(get_card("qwen3-30b-a3b"), name="x", num_attention_heads=12, num_query_groups=4,
                               seq_length=4104)
    assert _megatron_refusal(card, 6) is not None
    with pytest.raises(ParallelLayoutError, match=r"num_query_groups \(KV heads\) \(4\).*tp \(6\).*use tp in \{1, 2, 4, 12\}"):
        validate_layout(card, ParallelLayout(tp=6, sp=True))
    validate_layout(card, ParallelLayout(tp=12, sp=True))


@pytest.mark.parametrize("vpp", [0, -random.randint(1, 8)])
def test_a_vpp_below_one_is_refused_not_treated_as_unset(vpp):
    """``vpp = 0`` would otherwise plan and run as one virtual stage: the user's value silently changed."""
    with pytest.raises(ParallelLayoutError, match=rf"vpp must be >= 1 or unset, got {vpp}"):
        validate_layout(get_card("qwen3-30b-a3b"), ParallelLayout(pp=2, vpp=vpp), world_size=2)


def test_oellm_plan_refuses_vpp_zero(capsys):
    from megatron.oellm.cli import main

    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", "--pp", "2", "--vpp", "0"]) == 2
    assert "vpp must be >= 1 or unset, got 0" in capsys.readouterr().err


def test_plan_refuses_a_huge_repeat_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """``t*<twelve or more digits>`` used to be expanded as asked and end in a MemoryError traceback."""
    from megatron.oellm.cli import main

    count = random.randint(10**12, 10**18)
    layout = f"Et*{count}|t*24L"
    assert main(["plan", QWEN3.name, "--nodes", "1", "--pp", "2", "--pipeline-layout", layout]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"'*{count}' expands it past" in err


def test_a_count_of_thousands_of_digits_is_refused_before_int() -> None:
    """Python's ``int()`` refuses more than 4300 digits with a ValueError that named no layout."""
    rng = random.Random(random.random())
    digits = str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(rng.randint(4400, 6000)))
    with pytest.raises(ParallelLayoutError, match=rf"'\*{digits[:8]}\.\.\. \({len(digits)} digits\)'"):
        parse_pipeline_layout(f"(tt|)*{digits}")


def test_group_and_total_expansion_count_against_the_limit() -> None:
    """A group's length times its count, plus what precedes it, is what the limit bounds."""
    size = random.randint(2, 9)
    fits = MAX_EXPANDED_LAYOUT // (size + 1)
    assert len(parse_pipeline_layout(f"({'t' * size}|)*{fits}")) == fits + 1
    with pytest.raises(ParallelLayoutError, match="expands it past"):
        parse_pipeline_layout(f"({'t' * size}|)*{fits + 1}")
    with pytest.raises(ParallelLayoutError, match="expands it past"):
        parse_pipeline_layout(f"{'E' * (size + 1)}({'t' * size}|)*{fits}")


def test_a_plausible_wrong_count_still_gets_the_layer_count_message() -> None:
    """Below the limit the usual check names the model's layer count; leading zeros are still a plain count."""
    count = random.randint(QWEN3.num_layers, 100_000)
    with pytest.raises(ParallelLayoutError, match=f"places {count + 24} decoder layers"):
        validate_layout(QWEN3, ParallelLayout(pp=2, pipeline_layout=f"Et*{'0' * 5000}{count}|t*24L"))


def test_a_single_stage_layout_passes_at_pp_1():
    """Fourteenth mutation audit: one stage at ``--pp 1`` is no virtual stage; only more than one need pp > 1."""
    from megatron.oellm.models.parallel import pipeline_stages

    layers = random.randint(1, 48)
    assert pipeline_stages(f"Et*{layers}L", 1) == [["embedding", *["decoder"] * layers, "loss"]]


def test_a_negative_repeat_count_is_named_as_such() -> None:
    """``t*-1`` was refused as "'*' at position 2 repeats nothing": the count's sign is the mistake, after a layer or
    a group alike."""
    count = random.randint(1, 99)
    layout = random.choice([f"Et*-{count}|tL", f"E(t|)*-{count}tL"])
    with pytest.raises(ParallelLayoutError, match=re.escape(f"'*-{count}' at position ") + r"\d+ is a negative "
                       r"repeat count; give a count of 0 or more after '\*'") as refused:
        parse_pipeline_layout(layout)
    assert "repeats nothing" not in str(refused.value) and "must be followed" not in str(refused.value)


def test_an_unknown_character_is_refused_with_a_repeat_hint_of_a_known_one() -> None:
    """The hint read ``x*N ... to repeat`` beside a refused ``x``: its placeholder is now a decoder layer ``t``."""
    char = random.choice([c for c in "abcdfghijknopqrsuvwxyzABCDFGHIJKMNOPQRSTUVWXYZ" if c not in "EtLm"])
    with pytest.raises(ParallelLayoutError) as refused:
        parse_pipeline_layout(f"E{char}*3|tL")
    message = str(refused.value)
    assert f"unknown layer character(s) ['{char}']" in message and "t*N or (...)*N to repeat" in message
    assert "x*N" not in message, message
