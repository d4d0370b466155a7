"""``oellm plan`` says what its numbers are and names the user's flags (review of session 62).

A ``--vpp`` read as a config's layers per virtual stage is explained, with the VPP megatron converts those layers to;
the FLOPs line and ``--json`` name the count (mode ``corrected``, as ``oellm flops`` does); ``--json`` holds the
sequence, padded vocabulary and parameters the text prints; ``--sp`` at TP 1 is a warning, as megatron's
``validate_args`` turns it off; refusals name ``--seq-length`` and ``--pp``, not a card field or a derived layout.
"""

from __future__ import annotations

import json
import random
import re

import pytest

from megatron.oellm import cli
from megatron.oellm.cards import get_card
from megatron.oellm.models.parallel import (
    ParallelLayout,
    ParallelLayoutError,
    layout_from_counts,
    pipelined_hybrid_pattern,
    validate_layout,
)
from megatron.oellm.params import format_count, parameter_counts

GPT_CARDS = ["qwen3-30b-a3b", "qwen3-235b-a22b"]
CARDS = [*GPT_CARDS, "qwen3.5-35b-a3b", "oellm-ckda-hybrid"]
HYBRIDS = ["qwen3.5-35b-a3b", "oellm-ckda-hybrid"]
VPP_MEANING = ("vpp (recipe: vpp; oellm plan: --vpp; Megatron: --num-virtual-stages-per-pipeline-rank) counts virtual "
               "stages per pipeline rank, not layers per virtual stage")


def _refusal(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The one ``error:`` line ``oellm plan`` prints for ``argv`` (exit 2, nothing on stdout)."""
    assert cli.main(["plan", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured
    assert captured.err.startswith("oellm plan: error: "), captured.err
    return captured.err.strip()


def _json_plan(argv: list[str], capsys: pytest.CaptureFixture) -> dict:
    """``oellm plan ARGV --json``'s object (exit 0)."""
    assert cli.main(["plan", *argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _counted_layers_per_stage_cases() -> list[tuple[str, int, int, int]]:
    """(GPT card, PP, layers per virtual stage N >= 2, the VPP megatron's validate_args derives from N with
    ``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split``: layers + 2 per PP rank over
    N) where N given as ``--vpp`` does not split the card's layers and stands for another VPP."""
    cases = []
    for name in GPT_CARDS:
        layers = get_card(name).num_layers
        for pp in range(2, 17):
            for per_stage in range(2, 17):
                per_rank, rest = divmod(layers + 2, pp)
                if rest or per_rank % per_stage or per_rank < per_stage or layers % (pp * per_stage) == 0:
                    continue
                if per_rank // per_stage != per_stage:
                    cases.append((name, pp, per_stage, per_rank // per_stage))
    return cases


def test_layers_per_stage_that_are_a_whole_rank_say_leave_vpp_out(capsys):
    """N layers per virtual stage that hold all of a rank's layers (with the embedding and the loss) are VPP 1,
    megatron's "no virtual pipeline": the refusal says to leave vpp out rather than naming a one-stage-per-rank
    layout as a VPP."""
    name, pp, per_stage, _ = random.choice([case for case in _counted_layers_per_stage_cases() if case[3] == 1])
    line = _refusal([name, "--nodes", "1", "--gpus-per-node", str(pp), "--pp", str(pp), "--vpp", str(per_stage)],
                    capsys)
    assert f"{per_stage} layers per virtual stage at pp {pp} are all of a rank's layers" in line, line
    assert "leave vpp out" in line and "are vpp 1" not in line, line


def test_a_hybrid_card_gets_no_layers_per_stage_conversion():
    """megatron-core refuses --num-layers-per-virtual-pipeline-stage and the --account-for-* flags beside
    --hybrid-layer-pattern, so a hybrid card's refused VPP says what vpp counts and names no conversion."""
    card = get_card("qwen3.5-35b-a3b")
    pp, vpp = random.choice([(pp, vpp) for pp in (2, 4) for vpp in range(2, 9)
                             if card.num_layers % (pp * vpp) and (card.num_layers + 2) % pp == 0
                             and (card.num_layers + 2) // pp % vpp == 0])
    with pytest.raises(ParallelLayoutError) as refused:  # the layout check recipes run (the plan refuses --vpp first)
        validate_layout(card, ParallelLayout(pp=pp, vpp=vpp))
    assert VPP_MEANING in str(refused.value) and "as Megatron converts them" not in str(refused.value), refused.value


def test_a_vpp_given_as_layers_per_virtual_stage_names_the_vpp_megatron_derives(capsys):
    """Jupiter's config says num_layers_per_virtual_pipeline_stage 4 at PP 8 (94 layers); ``--vpp 4`` was refused
    with 32-stage suggestions only. The refusal now says what --vpp counts and which VPP those layers are, with its
    stages as a layout the plan takes."""
    name, pp, per_stage, vpp = random.choice([case for case in _counted_layers_per_stage_cases() if case[3] > 1])
    line = _refusal([name, "--nodes", "1", "--gpus-per-node", str(pp), "--pp", str(pp), "--vpp", str(per_stage)],
                    capsys)
    assert VPP_MEANING in line, line
    assert f"{per_stage} layers per virtual stage at pp {pp} are vpp {vpp}, as Megatron converts them" in line, line
    stages = re.search(rf"give those {pp * vpp} stages as a pipeline layout \(.*?\) such as '([^']+)'", line)
    assert stages is not None, line
    plan = _json_plan([name, "--nodes", "1", "--gpus-per-node", str(pp), "--pp", str(pp), "--pipeline-layout",
                       stages.group(1)], capsys)
    assert plan["layout"]["vpp_size"] == vpp


def test_the_jupiter_vpp_4_names_vpp_3(capsys):
    """The reviewer's command line: 94 layers, PP 8, 4 layers per virtual stage: (94 + 2) / (8 x 4) = VPP 3."""
    line = _refusal(["qwen3-235b-a22b", "--nodes", "64", "--tp", "2", "--sp", "--pp", "8", "--ep", "16", "--etp",
                     "1", "--vpp", "4"], capsys)
    assert line.startswith("oellm plan: error: num_layers (94) is not divisible by pp x vpp (32); " + VPP_MEANING)
    assert "4 layers per virtual stage at pp 8 are vpp 3" in line and "give those 24 stages" in line


def test_a_vpp_that_reads_as_no_layers_per_stage_still_says_what_vpp_counts(capsys):
    """Where ``--vpp`` as layers per virtual stage fits no conversion of megatron's, the refusal says only what it
    counts (no VPP named)."""
    name = random.choice(GPT_CARDS)
    layers = get_card(name).num_layers
    pp, vpp = random.choice([(pp, vpp) for pp in range(2, 9) for vpp in range(2, 9)
                             if layers % (pp * vpp) and ((layers + 2) % pp or (layers + 2) // pp % vpp)])
    line = _refusal([name, "--nodes", "1", "--gpus-per-node", str(pp), "--pp", str(pp), "--vpp", str(vpp)], capsys)
    assert VPP_MEANING in line and "layers per virtual stage at pp" not in line, line


def test_the_flops_line_and_json_name_the_count_as_oellm_flops_does(capsys):
    name = random.choice(CARDS)
    seq = random.choice([1024, 2048, 4096])
    argv = [name, "--nodes", "1", "--seq-length", str(seq)]
    plan = _json_plan(argv, capsys)
    assert cli.main(["flops", name, "--seq-length", str(seq), "--padded-vocab", str(plan["padded_vocab"]),
                     "--json"]) == 0
    flops = json.loads(capsys.readouterr().out)
    assert plan["flops"]["mode"] == flops["mode"] == "corrected"
    assert plan["flops"]["gflops_per_token"] == pytest.approx(flops["gflops_per_token"])
    assert cli.main(["plan", *argv]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("FLOPs"))
    assert f"(training, seq {seq}, mode corrected: our count of the matrix work, docs/flops.md; " in line, line
    megatron = "Megatron's count: oellm flops --megatron-compatible"
    assert (megatron in line) == (get_card(name).linear_mixer != "ckda"), line


def test_the_json_holds_the_sequence_vocabulary_and_parameters_the_text_prints(capsys):
    name, tp = random.choice(CARDS), random.choice([1, 2])
    card = get_card(name)
    seq = random.choice([512, 1024, 2048, 4096])
    argv = [name, "--nodes", "1", "--tp", str(tp), *(["--sp"] if tp > 1 else []), "--seq-length", str(seq)]
    plan = _json_plan(argv, capsys)
    counts = parameter_counts(card.with_vocab(plan["padded_vocab"]))  # the plan's card: its vocabulary padded
    assert (plan["seq_length"], plan["total_params"], plan["active_params"]) == (seq, counts.total, counts.active)
    if plan["padded_vocab"] == card.vocab_size:  # `oellm models` counts the card's own vocabulary
        assert cli.main(["models", "--json"]) == 0
        listed = next(row for row in json.loads(capsys.readouterr().out) if row["name"] == name)
        assert (listed["total_params"], listed["active_params"]) == (plan["total_params"], plan["active_params"])
    assert cli.main(["plan", *argv]) == 0
    text = capsys.readouterr().out
    assert f"padded vocab {plan['padded_vocab']})" in text and plan["padded_vocab"] % (128 * tp) == 0
    assert f"total {format_count(counts.total)}, active {format_count(counts.active)}" in text
    assert f"(training, seq {seq}," in text


@pytest.mark.parametrize("as_json", [False, True])
def test_sequence_parallelism_at_tp_1_is_a_warning_and_planned_off(as_json, capsys):
    """megatron's validate_args warns and turns --sequence-parallel off at TP 1; the plan refused it."""
    name = random.choice(CARDS)
    ep = random.choice([1, 2, 4])
    argv = ["plan", name, "--nodes", "1", "--ep", str(ep), "--sp", *(["--json"] if as_json else [])]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "--sp" in line]
    assert warnings == ["oellm plan: warning: --sp at --tp 1: sequence parallelism is off, as megatron's "
                        "validate_args turns it off without tensor parallelism ('Disabling sequence parallelism "
                        "because tensor model parallelism is disabled'); planned without it"], captured.err
    if as_json:
        assert json.loads(captured.out)["layout"]["sp"] is False
    else:
        layout = next(line for line in captured.out.splitlines() if line.startswith("layout"))
        assert f"TP1 PP1 VPP1 EP{ep} ETP1 CP1 on 4 GPUs" in layout and " SP " not in layout, layout
    assert cli.main(["plan", name, "--nodes", "1", "--tp", "2", "--sp"]) == 0
    assert "warning: --sp" not in capsys.readouterr().err


def test_a_sequence_length_below_one_names_the_flag(capsys):
    seq = random.randint(-4096, 0)
    line = _refusal([random.choice(CARDS), "--nodes", "1", f"--seq-length={seq}"], capsys)
    assert line == (f"oellm plan: error: --seq-length must be positive, got {seq} (a length in tokens; leave it out "
                    "for the card's)")


def test_a_pattern_of_stages_not_a_multiple_of_pp_is_named_once_with_one_fix(capsys):
    """The refusal named a pipeline layout the user never gave (derived from the pattern) and gave the fix twice."""
    card = get_card(random.choice(HYBRIDS))
    stages = random.randint(4, 8)
    pp = random.choice([pp for pp in range(2, stages) if stages % pp])
    counts = [1] * stages
    for _ in range(card.num_layers - stages):
        counts[random.randrange(stages)] += 1
    pattern = pipelined_hybrid_pattern(card, ParallelLayout(pp=stages, pipeline_layout=layout_from_counts(counts)))
    line = _refusal([card.name, "--nodes", "1", "--gpus-per-node", str(pp), "--pp", str(pp), "--hybrid-layer-pattern",
                     pattern], capsys)
    assert f"--hybrid-layer-pattern {pattern!r}, whose '|' marks pipeline stages, has {stages} stages, not a " \
           f"multiple of pp ({pp}), set by oellm plan's --pp" in line, line
    assert "pipeline layout" not in line and line.count("give pp x vpp") == 1, line


def test_a_layout_of_stages_at_the_default_pp_names_the_pp_flag(capsys):
    stages = random.randint(2, 6)
    layout = layout_from_counts([48 // stages] * (stages - 1) + [48 - 48 // stages * (stages - 1)])
    line = _refusal(["qwen3-30b-a3b", "--nodes", "1", "--pipeline-layout", layout], capsys)
    assert f"has {stages} stages for pp=1, set by oellm plan's --pp (default 1)" in line, line
    assert f"give a pp above 1 that divides {stages}" in line


def test_an_expert_world_size_refusal_names_pp_in_its_fix(capsys):
    pp, ep = random.choice([2, 3, 4]), random.choice([2, 4, 8])
    world = pp * (ep * random.randint(0, 3) + random.randint(1, ep - 1))
    line = _refusal(["qwen3-30b-a3b", "--nodes", "1", "--gpus-per-node", str(world), "--pp", str(pp), "--ep",
                     str(ep), "--etp", "1"], capsys)
    assert line.endswith(f"world size {world} is not divisible by etp x ep x pp = {ep * pp}; change the GPU count, "
                         "ep, etp or pp"), line
