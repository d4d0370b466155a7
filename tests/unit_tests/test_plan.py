"""Training plans: per-rank contents add up to the model, bad layouts are refused, the expert data-parallel group
and the FLOP line are megatron-core's."""

import json
import random

import pytest

from megatron.oellm import cli
from megatron.oellm.cards import get_card
from megatron.oellm.flops import pad_vocab
from megatron.oellm.models.parallel import ParallelLayout, ParallelLayoutError
from megatron.oellm.params import parameter_counts, tp_replicated_layer_params
from megatron.oellm.plan import (
    BYTES_PER_PARAM_GRAD,
    BYTES_PER_PARAM_OPTIMIZER,
    BYTES_PER_PARAM_WEIGHT,
    build_plan,
    format_plan,
)

JUPITER_235B_LAYOUT = "Et*2|" + "|".join(["t*3"] * 30) + "|t*2L"


@pytest.mark.parametrize("name, layout, world", [
    ("qwen3-235b-a22b", ParallelLayout(tp=2, pp=8, ep=16, sp=True, pipeline_layout=JUPITER_235B_LAYOUT), 256),
    ("qwen3.5-35b-a3b", ParallelLayout(pp=4, ep=4, pipeline_layout="Et*6|t*6|t*6|t*3|t*6|t*6|t*6|t*1L"), 32),
    ("qwen3-30b-a3b", ParallelLayout(tp=2, pp=2, ep=8, etp=1, sp=True), 64),
])
def test_rank_contents_add_up_to_the_whole_model(name, layout, world):
    card = get_card(name)
    plan = build_plan(card, layout, world_size=world)
    layers = sorted(i for r in plan.ranks for i in r.decoder_layers)
    assert layers == list(range(card.num_layers))
    counts = parameter_counts(card)
    # every TP rank holds the norms, routers and shared-expert gates whole: count them once
    whole = sum(tp_replicated_layer_params(card, mixer) for mixer in card.mixer_types) + card.hidden_size
    dense = sum(r.dense_params for r in plan.ranks) * layout.tp - (layout.tp - 1) * whole
    experts = sum(r.expert_params for r in plan.ranks) * layout.ep * layout.etp
    assert experts == counts.routed_experts
    assert dense == counts.total - counts.routed_experts
    assert sum(r.has_embedding for r in plan.ranks) == 1 and sum(r.has_output_layer for r in plan.ranks) == 1


def test_virtual_stages_interleave_over_pipeline_ranks():
    plan = build_plan(get_card("qwen3.5-35b-a3b"),
                      ParallelLayout(pp=4, ep=4, pipeline_layout="Et*6|t*6|t*6|t*3|t*6|t*6|t*6|t*1L"), 16)
    assert plan.ranks[0].decoder_layers == tuple(range(0, 6)) + tuple(range(21, 27))
    assert plan.ranks[3].decoder_layers == tuple(range(18, 21)) + (39,)
    assert plan.ranks[0].has_embedding and plan.ranks[3].has_output_layer


def test_bad_layout_is_refused_before_anything_else():
    with pytest.raises(ParallelLayoutError, match="pp x vpp"):
        build_plan(get_card("qwen3-235b-a22b"), ParallelLayout(tp=2, pp=8, vpp=4, ep=16), 256)
    with pytest.raises(ParallelLayoutError, match="world size"):
        build_plan(get_card("qwen3-235b-a22b"), ParallelLayout(tp=2, pp=8, ep=16, pipeline_layout=JUPITER_235B_LAYOUT),
                   100)


def test_recipe_dry_run_prints_the_plan_of_the_jupiter_row(capsys):
    from pathlib import Path

    from megatron.oellm.cli import main

    config = Path(__file__).parents[2] / "examples/oellm/qwen3_235b_a22b_jupiter.toml"
    assert main(["recipe", str(config), "--dry-run", "--row", "1"]) == 0
    out = capsys.readouterr().out
    assert "layout ok: TP2 PP8" in out and "EP16" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.strip().startswith("PP rank"))
    ranks = [int(line.split()[0]) for line in lines[header + 1:header + 9]]
    assert ranks == list(range(8))
    assert "148.34 GFLOP/token" in out


def test_plan_command_refuses_a_bad_layout(capsys):
    from megatron.oellm.cli import main

    assert main(["plan", "qwen3-235b-a22b", "--nodes", "64", "--tp", "2", "--pp", "8", "--vpp", "4",
                 "--ep", "16"]) == 2
    assert "pp x vpp" in capsys.readouterr().err


def test_plan_command_refusal_goes_to_stderr_so_a_redirected_json_stays_clean(capsys):
    """``oellm plan ... --json > plan.json``: the refusal is on stderr in the form of flops/recipe/table
    (``oellm plan: error: ...``), and stdout, the file, stays empty."""
    from megatron.oellm.cli import main

    assert main(["plan", "no-such-model", "--nodes", "1", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("oellm plan: error: ") and "no-such-model" in captured.err


def test_context_parallelism_shards_dense_optimizer_state_further():
    card = get_card("qwen3-30b-a3b")
    without = build_plan(card, ParallelLayout(tp=2, ep=8, sp=True), 64).ranks[0]
    with_cp = build_plan(card, ParallelLayout(tp=2, ep=8, cp=2, sp=True), 64).ranks[0]
    assert with_cp.dense_params == without.dense_params
    # DP halves with CP2, but the optimizer shards over DP x CP: the dense optimizer bytes stay the same
    assert with_cp.static_bytes == without.static_bytes


def test_plan_checks_context_parallelism_against_the_given_sequence_length(capsys):
    from megatron.oellm.cli import main

    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", "--tp", "2", "--cp", "2", "--seq-length", "4098"]) == 2
    assert "seq_length (4098)" in capsys.readouterr().err


def test_plan_command_refuses_tensor_parallelism_without_sequence_parallelism(capsys):
    """Every card is MoE: megatron-core's MoE layer stops a TP > 1 run without SP at its first forward step."""
    from megatron.oellm.cli import main

    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", "--tp", "2"]) == 2
    err = capsys.readouterr().err
    assert "tp=2 without sequence parallelism" in err and "oellm plan: --sp" in err
    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", "--tp", "2", "--sp"]) == 0


@pytest.mark.parametrize("nodes, gpus_per_node", [("0", "4"), ("-1", "4"), ("1", "0"), ("-1", "-4")])
def test_plan_command_refuses_an_empty_or_negative_world(nodes, gpus_per_node, capsys):
    from megatron.oellm.cli import main

    assert main(["plan", "qwen3-30b-a3b", "--nodes", nodes, "--gpus-per-node", gpus_per_node]) == 2
    assert f"--nodes {nodes} x --gpus-per-node {gpus_per_node}: both must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("option, message", [("--seq-length", "error: --seq-length must be positive, got 0"),
                                             ("--padded-vocab", "--padded-vocab 0: megatron pads")])
def test_plan_command_does_not_drop_a_zero_override(option, message, capsys):
    from megatron.oellm.cli import main

    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", option, "0"]) == 2
    assert message in capsys.readouterr().err


def test_tensor_parallelism_splits_matrices_but_not_norms_router_or_shared_expert_gate():
    """megatron-core keeps layer norms, QK norms, the GDN output norm, the router ([experts, hidden]) and the shared
    expert's gate ([1, hidden]) whole on every TP rank; the plan divided them by TP too. Hand count from the published
    configs, one pipeline rank holding everything."""
    h = 2048
    # Qwen3-30B-A3B: 48 x (q 32x128, k/v 4x128, o) + embedding and output 151,936; whole: 2 norms, QK norms 2 x 128,
    # router 128 x h per layer, final norm
    split = 48 * (h * 4096 + 2 * h * 512 + 4096 * h) + 2 * 151936 * h
    whole = 48 * (2 * h + 2 * 128 + 128 * h) + h
    plan = build_plan(get_card("qwen3-30b-a3b"), ParallelLayout(tp=2, ep=8, sp=True), 64)
    assert plan.ranks[0].dense_params == split // 2 + whole
    # Qwen3.5-35B-A3B: 10 gated attention (q and gate 16x256, k/v 2x256, o) and 30 GDN layers (in_proj q, k 16x128,
    # v, z 32x128, b, a 32; conv 4 x 8192; A_log, dt_bias 32; out_proj), shared expert 3 x h x 512 per layer;
    # whole: 2 norms, QK norms 2 x 256 / GDN output norm 128, router 256 x h, shared-expert gate h per layer
    split = (10 * (2 * h * 4096 + 2 * h * 512 + 4096 * h)
             + 30 * (h * (2048 + 2048 + 4096 + 4096 + 2 * 32) + 4 * 8192 + 2 * 32 + 4096 * h)
             + 40 * 3 * h * 512 + 2 * 248320 * h)
    whole = 10 * 2 * 256 + 30 * 128 + 40 * (2 * h + 256 * h + h) + h
    plan = build_plan(get_card("qwen3.5-35b-a3b"), ParallelLayout(tp=2, ep=4, sp=True), 8)
    assert plan.ranks[0].dense_params == split // 2 + whole


def test_plan_command_pads_the_vocabulary_to_128_x_tp_as_megatron(capsys):
    """Megatron pads the output layer to a multiple of 128 x TP (151,936 -> 152,064 at TP2); the plan command used the
    card's 151,936 (the recipes' --dry-run already padded)."""
    import json

    from megatron.oellm.cli import main

    layout = ["--tp", "2", "--pp", "8", "--ep", "16", "--sp", "--pipeline-layout", JUPITER_235B_LAYOUT]
    assert main(["plan", "qwen3-235b-a22b", "--nodes", "64", *layout, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    card = get_card("qwen3-235b-a22b")
    unpadded = build_plan(card, ParallelLayout(tp=2, pp=8, ep=16, sp=True, pipeline_layout=JUPITER_235B_LAYOUT), 256)
    extra_rows_per_gpu = (152064 - 151936) // 2
    assert report["ranks"][0]["dense_params"] == unpadded.ranks[0].dense_params + extra_rows_per_gpu * 4096
    assert report["flops"]["breakdown"]["logits"] == pytest.approx(3 * 2 * 4096 * 152064 / 1e9)
    jupiter_divisor = ["--make-vocab-size-divisible-by", "1187"]  # the Jupiter recipe's: 151,936 at TP2
    assert main(["plan", "qwen3-235b-a22b", "--nodes", "64", *layout, *jupiter_divisor, "--padded-vocab", "151936",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"][0]["dense_params"] == unpadded.ranks[0].dense_params
    assert main(["plan", "qwen3-235b-a22b", "--nodes", "64", *layout, *jupiter_divisor, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"][0]["dense_params"] == unpadded.ranks[0].dense_params


def test_expert_tensor_parallelism_shrinks_the_expert_data_parallel_group():
    """16 GPUs, EP4 x ETP2 and EP8 x ETP1 both split each layer's 128 x 3 x 2048 x 768 routed weights 8 ways and leave
    16 / 8 = 2 expert data-parallel replicas to shard the experts' optimizer state over: the same bytes per GPU."""
    card = get_card("qwen3-30b-a3b")
    with_etp = build_plan(card, ParallelLayout(ep=4, etp=2), 16)
    without = build_plan(card, ParallelLayout(ep=8), 16)
    assert with_etp.expert_data_parallel == without.expert_data_parallel == 2 and with_etp.data_parallel == 16
    assert with_etp.ranks[0].expert_params == without.ranks[0].expert_params == 48 * 128 * 3 * 2048 * 768 // 8
    assert with_etp.ranks[0].static_bytes == without.ranks[0].static_bytes


def test_tied_embedding_is_copied_to_the_last_pipeline_stage():
    """With tied embeddings megatron-core keeps a copy of the word embeddings on the last stage for the output layer:
    on two stages of one layer each, the last holds the first's parameters plus the final norm."""
    import dataclasses

    card = dataclasses.replace(get_card("qwen3-30b-a3b-tiny"), untie_embeddings=False)
    first, last = build_plan(card, ParallelLayout(pp=2), 2).ranks
    assert first.has_embedding and last.has_output_layer
    assert last.dense_params - first.dense_params == card.hidden_size
    assert build_plan(card, ParallelLayout(), 1).ranks[0].dense_params == (
        parameter_counts(card).total - parameter_counts(card).routed_experts)


def test_one_gpu_holds_18_bytes_per_parameter_and_the_table_prints_gib():
    """Megatron's distributed optimizer on one GPU: bf16 weight 2 + fp32 gradient 4 + fp32 master weight and two Adam
    moments 12 = 18 bytes per parameter; the table's column is GiB (2**30 bytes)."""
    from megatron.oellm.plan import format_plan

    card = get_card("qwen3-30b-a3b")
    plan = build_plan(card, ParallelLayout(), 1)
    total = parameter_counts(card).total
    assert plan.ranks[0].static_bytes == 18 * total
    row = format_plan(plan, 4096).splitlines()[-2]
    assert row.split()[-1] == f"{18 * total / 2**30:.1f}" and 18 * total / 1e9 > 18 * total / 2**30 + 30


def test_plan_command_refuses_a_padded_vocabulary_that_does_not_split_over_tp(capsys):
    """megatron-core splits the embedding and output rows evenly over TP and refuses any other vocabulary while it
    builds the model; the plan printed floor-divided per-GPU counts for such a ``--padded-vocab``. The accepted
    vocabulary is 2 mod 4: it splits over TP 2, not over EP 4, so a check against another size than TP fails here
    (at --make-vocab-size-divisible-by 1, where megatron pads to a multiple of TP alone)."""
    import random

    from megatron.oellm.cli import main

    odd = 4 * random.randrange(50_000, 100_000) + 1
    layout = ["--tp", "2", "--sp", "--ep", "4", "--make-vocab-size-divisible-by", "1"]
    assert main(["plan", "qwen3.5-35b-a3b", "--nodes", "2", *layout, "--padded-vocab", str(odd)]) == 2
    err = capsys.readouterr().err
    assert f"--padded-vocab {odd} does not split evenly over TP (2)," in err and f"({odd + 1} at or above" in err
    assert main(["plan", "qwen3.5-35b-a3b", "--nodes", "2", *layout, "--padded-vocab", str(odd + 1)]) == 0


@pytest.mark.parametrize("tp", [1, 2])
def test_plan_command_refuses_a_padded_vocabulary_megatron_cannot_pad_to(tp, capsys):
    """``--padded-vocab`` is a vocabulary megatron padded: a multiple of --make-vocab-size-divisible-by (128 by
    default) x TP. One that is not (``--padded-vocab 7``) was planned silently; one below the card's vocabulary that
    is (the byte tokenizer's 384 at TP 1) is the run's tokenizer, not a mistake."""
    from megatron.oellm.cli import main

    multiple = 128 * tp
    layout = ["--tp", str(tp), "--sp"] if tp > 1 else []
    unpadded = multiple * random.randrange(1, 2000) + tp * random.randrange(1, 128)  # splits over TP all the same
    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", *layout, "--padded-vocab", str(unpadded)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--padded-vocab {unpadded}: " in err
    assert f"a positive multiple of {multiple};" in err and f"is {-(-unpadded // multiple) * multiple})" in err
    divisor_one = ["--make-vocab-size-divisible-by", "1"]  # megatron pads to a multiple of TP alone
    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", *layout, "--padded-vocab", str(unpadded), *divisor_one]) == 0
    capsys.readouterr()
    small = multiple * random.randrange(1, 10)  # below the card's 151,936: a tokenizer of its own
    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", *layout, "--padded-vocab", str(small)]) == 0


def test_a_checkpoints_padded_vocabulary_resumed_at_a_larger_tp_is_refused_naming_the_divisor_that_plans_it(capsys):
    """A checkpoint saved at TP 1 and loaded with ``--use-checkpoint-args`` at TP 2 keeps its padded vocabulary, an
    odd multiple of 128 that is no multiple of 256: the refusal says so and names ``--make-vocab-size-divisible-by
    1``, which plans it. The library's rule (:func:`~megatron.oellm.plan.check_padded_vocab`) is the command's."""
    from megatron.oellm.plan import check_padded_vocab

    saved_at_tp1 = 128 * (2 * random.randrange(500, 1500) + 1)
    layout = ["--tp", "2", "--sp", "--padded-vocab", str(saved_at_tp1)]
    assert cli.main(["plan", "qwen3-30b-a3b", "--nodes", "1", *layout]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--use-checkpoint-args keeps the padded size it was saved with" in err
    assert "--make-vocab-size-divisible-by 1)" in err
    with pytest.raises(ParallelLayoutError) as library_error:
        check_padded_vocab(saved_at_tp1, 2, 128)
    assert err == f"oellm plan: error: {library_error.value}\n"
    assert cli.main(["plan", "qwen3-30b-a3b", "--nodes", "1", *layout, "--make-vocab-size-divisible-by", "1"]) == 0


def test_a_checkpoints_padded_vocabulary_at_a_tp_that_does_not_divide_it_is_refused_as_not_runnable(capsys):
    """Planned as the refusal above says (``--make-vocab-size-divisible-by 1``) at a TP that does not divide the
    checkpoint's padded vocabulary: megatron keeps that size under ``--use-checkpoint-args`` and megatron-core's
    vocab-parallel layers cannot split it, so the refusal says the checkpoint cannot run at that TP, rather than
    offering the next multiple of TP as the size to give (a checkpoint's size is not the user's to choose)."""
    from megatron.oellm.plan import check_padded_vocab

    tp = random.choice([3, 5, 7])
    saved = 128 * tp * random.randrange(300, 1500) + 128 * random.randrange(1, tp)  # a multiple of 128, not of TP
    with pytest.raises(ParallelLayoutError) as library_error:
        check_padded_vocab(saved, tp, 1)
    message = str(library_error.value)
    assert message.startswith(f"--padded-vocab {saved} does not split evenly over TP ({tp}),")
    assert f"--use-checkpoint-args keeps the padded size it was saved with at any TP, so it cannot run at TP {tp};" \
        in message and f"at a TP that divides {saved};" in message
    assert f"({-(-saved // tp) * tp} at or above {saved})" in message
    layout = ["--tp", str(tp), "--sp", "--padded-vocab", str(saved), "--make-vocab-size-divisible-by", "1"]
    assert cli.main(["plan", "qwen3-30b-a3b", "--nodes", "1", *layout]) == 2
    assert capsys.readouterr().err == f"oellm plan: error: {message}\n"


@pytest.mark.parametrize("etp_flags", [[], ["--etp", "1"]])
def test_plan_takes_megatrons_expert_tensor_parallel_default(capsys, etp_flags):
    """Without --etp the plan split experts as ETP 1 while megatron-core, given no --expert-tensor-parallel-size,
    runs them at the TP size: the plan described another run than the same sizes on megatron's command line."""
    import json

    from megatron.oellm.cli import main
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster

    megatron_etp = ["--expert-tensor-parallel-size", "1"] if etp_flags else []
    args = validate_on_cluster(["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--mock-data",
                                "--tensor-model-parallel-size", "2", "--sequence-parallel",
                                "--expert-model-parallel-size", "2", *megatron_etp,
                                "--seq-length", "128", "--micro-batch-size", "1", "--global-batch-size", "4"], 8,
                               {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    assert main(["plan", "qwen3-30b-a3b-tiny", "--nodes", "2", "--tp", "2", "--sp", "--ep", "2", *etp_flags,
                 "--json"]) == 0
    layout = json.loads(capsys.readouterr().out)["layout"]
    assert layout["etp"] == args.expert_tensor_parallel_size == (1 if etp_flags else 2)


def _random_padded_vocab(multiple: int) -> int:
    """A vocabulary that is a multiple of ``multiple`` but not of 128 (Megatron pads it no further)."""
    while True:
        vocab = multiple * random.randrange(10_000, 40_000)
        if vocab % 128:
            return vocab


def test_plan_counts_logits_over_the_given_padded_vocabulary_not_a_re_padded_one(capsys):
    """``oellm plan --padded-vocab V`` holds V rows in its memory table but counted logits over V rounded up to 128:
    its FLOPs disagreed with ``oellm flops --padded-vocab V`` for the same model."""
    vocab = _random_padded_vocab(8)
    seq = random.choice([1024, 2048, 4096])
    common = ["--seq-length", str(seq), "--padded-vocab", str(vocab), "--json"]
    assert cli.main(["plan", "qwen3-30b-a3b", "--nodes", "1", "--make-vocab-size-divisible-by", "8", *common]) == 0
    planned = json.loads(capsys.readouterr().out)["flops"]
    assert cli.main(["flops", "qwen3-30b-a3b", *common]) == 0
    counted = json.loads(capsys.readouterr().out)
    hidden = get_card("qwen3-30b-a3b").hidden_size
    assert planned["breakdown"]["logits"] == pytest.approx(6 * hidden * vocab / 1e9, rel=1e-12)
    assert planned["gflops_per_token"] == pytest.approx(counted["gflops_per_token"], rel=1e-12)


def test_format_plan_counts_logits_over_the_built_cards_vocabulary(monkeypatch):
    """A recipe's plan holds the vocabulary padded to its own ``--make-vocab-size-divisible-by`` x TP; the FLOP line
    must count that vocabulary, not re-pad it to 128 (a difference below the printed digits, hence the spy)."""
    import megatron.oellm.plan as plan_module

    seen = []
    real = plan_module.training_flops_per_token

    def spy(card, seq_length, padded_vocab=None, document_lengths=None):
        seen.append(padded_vocab or pad_vocab(card.vocab_size))
        return real(card, seq_length, padded_vocab, document_lengths)

    monkeypatch.setattr(plan_module, "training_flops_per_token", spy)
    card = get_card("qwen3-30b-a3b-tiny").with_vocab(_random_padded_vocab(8))
    format_plan(build_plan(card, ParallelLayout(), 1), card.seq_length)
    assert seen == [card.vocab_size]


def test_expert_data_parallel_group_is_world_over_etp_ep_and_pp():
    """megatron-core's expert data-parallel group is world / (ETP x EP x PP): with PP > 1 each routed-expert shard
    has that many replicas to split its optimizer state over, not world / (ETP x EP). Fresh random layouts of
    Qwen3-30B-A3B (48 layers, 128 experts of width 768), TP 1."""
    card = get_card("qwen3-30b-a3b")
    pp, ep, etp, replicas = random.choice([2, 4, 8]), random.choice([1, 2, 4, 8]), random.choice([1, 2]), \
        random.randint(1, 4)
    world = pp * ep * etp * replicas
    plan = build_plan(card, ParallelLayout(pp=pp, ep=ep, etp=etp), world)
    assert plan.expert_data_parallel == replicas, (pp, ep, etp, replicas)
    assert plan.data_parallel == world // pp
    per_param = BYTES_PER_PARAM_WEIGHT + BYTES_PER_PARAM_GRAD
    for rank in plan.ranks:
        assert rank.static_bytes == ((rank.dense_params + rank.expert_params) * per_param
                                     + rank.dense_params * BYTES_PER_PARAM_OPTIMIZER // (world // pp)
                                     + rank.expert_params * BYTES_PER_PARAM_OPTIMIZER // replicas)


@pytest.mark.parametrize("world", [0, -random.randint(1, 64)])
def test_a_plan_for_no_gpu_is_refused_in_one_line(world):
    """``build_plan`` on zero (or fewer) GPUs: its own error naming the fix, not a ZeroDivisionError."""
    with pytest.raises(ParallelLayoutError, match=rf"world size {world}: a plan needs at least one GPU") as refused:
        build_plan(get_card("qwen3-30b-a3b-tiny"), ParallelLayout(), world)
    assert "\n" not in str(refused.value)


def test_plan_says_where_a_defaulted_etp_came_from(capsys):
    """``oellm plan --tp 2 --ep 8`` on 8 GPUs said "etp x ep x pp = 16" though the user gave no ETP: it defaults to
    the TP size, and the refusal now says so; with an explicit --etp the message stays as it was."""
    from megatron.oellm.cli import main

    nodes, tp = random.choice([1, 2]), random.choice([2, 4])
    world = 4 * nodes
    sizes = ["--nodes", str(nodes), "--tp", str(tp), "--sp", "--ep", str(world)]
    assert main(["plan", "qwen3-30b-a3b", *sizes]) == 2
    err = capsys.readouterr().err
    assert f"etp x ep x pp = {tp * world}" in err and f"etp is {tp} because --etp was not given" in err
    assert "defaults to --tp" in err
    assert main(["plan", "qwen3-30b-a3b", *sizes, "--etp", str(tp)]) == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith(f"etp x ep x pp = {tp * world}; change the GPU count, ep, etp or pp")
    assert main(["plan", "qwen3-30b-a3b", *sizes, "--etp", "1"]) == 0
    ep = 2 * world  # twice the GPUs: an expert layout that does not fit, whatever the etp
    assert main(["plan", "qwen3-30b-a3b", "--nodes", str(nodes), "--ep", str(ep)]) == 2
    err = capsys.readouterr().err
    assert "etp" in err and "--etp was not given" not in err  # at --tp 1 the default etp 1 is not the cause


def test_plan_json_gives_the_virtual_pipeline_size_the_text_shows(capsys):
    """With a --pipeline-layout of 2 x PP stages the text said VPP2 while the JSON's layout held only the ``vpp``
    given (null): ``vpp_size`` now holds the one used, as the text's VPP, and ``vpp`` still echoes the input."""
    from dataclasses import asdict

    from megatron.oellm.cli import main
    from megatron.oellm.models.parallel import even_pipeline_layout

    pp, vpp = random.choice([2, 4]), random.choice([2, 3])
    layout = ["--pp", str(pp), "--pipeline-layout", even_pipeline_layout(48, pp * vpp)]
    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", *layout]) == 0
    assert f" PP{pp} VPP{vpp} " in capsys.readouterr().out
    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", *layout, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"] == {
        **asdict(ParallelLayout(pp=pp, pipeline_layout=layout[-1])), "vpp_size": vpp}
    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", "--pp", str(pp), "--vpp", str(vpp), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"] == {
        **asdict(ParallelLayout(pp=pp, vpp=vpp)), "vpp_size": vpp}


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "qwen3.5-35b-a3b"])
def test_plan_refuses_a_sequence_longer_than_the_cards_positions(name, capsys):
    """megatron's validate_args asserts max_position_embeddings >= seq_length, and the training entry refuses a
    longer --seq-length beside the card; the plan printed "checks ... OK" and a table for it."""
    from megatron.oellm.cli import main

    limit = get_card(name).max_position_embeddings
    longer = limit + 2 * random.randint(1, 4096)
    assert main(["plan", name, "--nodes", "1", "--seq-length", str(longer)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f"seq_length {longer} exceeds {name}'s max_position_embeddings {limit}" in line
    assert main(["plan", name, "--nodes", "1", "--seq-length", str(limit)]) == 0


JUPITER_235B_FLAGS = ["--nodes", "64", "--tp", "2", "--pp", "8", "--ep", "16", "--sp",
                      "--pipeline-layout", JUPITER_235B_LAYOUT]


def _static_bytes(capsys, flags):
    """Each PP rank's static bytes per GPU, from the plain ``--json`` plan."""
    assert cli.main(["plan", *flags, "--json"]) == 0
    return [rank["static_bytes"] for rank in json.loads(capsys.readouterr().out)["ranks"]]


def test_plan_with_gpu_memory_adds_a_free_column_and_keeps_the_rest(capsys):
    """``--gpu-memory-gib G`` (an H100 80GB reports 81559 MiB: G = 79.6) adds what is left per GPU after the static
    state, G x 2**30 bytes minus static, and a footer line; every other line is the plan without the option."""
    flags = ["qwen3-235b-a22b", *JUPITER_235B_FLAGS]
    static = _static_bytes(capsys, flags)
    gib = round(random.uniform(20, 140), 2)
    assert cli.main(["plan", *flags]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert cli.main(["plan", *flags, "--gpu-memory-gib", str(gib)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = captured.out.splitlines()
    header = plain.index(next(line for line in plain if line.lstrip().startswith("PP rank")))
    table = range(header + 1, header + 1 + len(static))
    assert lines[header] == plain[header] + "  free GiB"
    for i, row in zip(table, static, strict=True):
        assert lines[i] == plain[i] + f" {(int(gib * 2**30) - row) / 2**30:>9.1f}"
    assert [line for i, line in enumerate(lines) if i != header and i not in table][:-1] == \
        [line for i, line in enumerate(plain) if i != header and i not in table]
    assert lines[-1] == (f"free = {gib:g} GiB per GPU - static: activations, NCCL buffers and the CUDA context must "
                         "fit in it")
    assert cli.main(["plan", *flags, "--gpu-memory-gib", str(gib), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["gpu_memory_gib"] == gib
    assert [rank["free_bytes"] for rank in report["ranks"]] == [int(gib * 2**30) - row for row in static]


@pytest.mark.parametrize("as_json", [False, True])
def test_plan_exits_1_when_the_static_state_alone_does_not_fit_the_gpu(capsys, as_json):
    """Qwen3-235B-A22B on 8 nodes at PP2 x EP16 holds ~144 GiB of static state per GPU: on a GPU of fewer GiB it runs
    out of memory at start. The plan still goes to stdout, then one error line naming the worst PP rank goes to
    stderr, and the exit status is 1 (2 stays for bad arguments or layouts)."""
    flags = ["qwen3-235b-a22b", "--nodes", "8", "--pp", "2", "--ep", "16"]
    static = _static_bytes(capsys, flags)
    gib = round(random.uniform(40, 140), 1)
    assert max(static) > gib * 2**30
    assert cli.main(["plan", *flags, "--gpu-memory-gib", str(gib), *(["--json"] if as_json else [])]) == 1
    captured = capsys.readouterr()
    if as_json:
        assert [r["free_bytes"] for r in json.loads(captured.out)["ranks"]] == [int(gib * 2**30) - s for s in static]
    else:
        assert captured.out.splitlines()[-1].startswith(f"free = {gib:g} GiB per GPU")
    worst = max(range(len(static)), key=lambda r: static[r])
    [line] = captured.err.splitlines()
    assert line.startswith(f"oellm plan: error: PP rank {worst} holds {static[worst] / 2**30:.2f} GiB of static state "
                           f"per GPU, more than the GPU's {gib:g} GiB (2 of 2 PP ranks do not fit)")
    assert "more EP" in line and "more PP" in line and "more DP" in line and "bigger GPU" in line


def test_plan_names_the_worst_pipeline_rank_when_only_some_do_not_fit(capsys):
    """The Jupiter layout puts the embedding on PP rank 0 and the output layer and final norm on PP rank 7: on a GPU
    between the middle ranks' static state and theirs, those two do not fit and rank 7, the larger, is named."""
    flags = ["qwen3-235b-a22b", *JUPITER_235B_FLAGS]
    static = _static_bytes(capsys, flags)
    assert static[7] > static[0] > max(static[1:7])
    gib = random.uniform(max(static[1:7]), static[0]) / 2**30
    assert cli.main(["plan", *flags, "--gpu-memory-gib", repr(gib)]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert f"PP rank 7 holds {static[7] / 2**30:.2f} GiB" in line and "(2 of 8 PP ranks do not fit)" in line


@pytest.mark.parametrize("value", ["0", f"-{random.randint(1, 96)}", "nan", "inf", "1e400", "64GB", ""])
def test_plan_refuses_a_gpu_memory_that_is_not_a_positive_finite_number(value, capsys):
    assert cli.main(["plan", "qwen3-30b-a3b", "--nodes", "1", "--gpu-memory-gib", value]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"oellm plan: error: --gpu-memory-gib: expected a positive finite number of GiB "
                            f"(nvidia-smi's memory.total in MiB / 1024), got {value!r}\n")


def test_plan_without_gpu_memory_has_no_free_column_nor_json_fields(capsys):
    """Without ``--gpu-memory-gib`` the plan is as before: no free column or footer, no JSON memory fields."""
    assert cli.main(["plan", "qwen3-235b-a22b", *JUPITER_235B_FLAGS]) == 0
    out = capsys.readouterr().out
    assert "free" not in out and out.splitlines()[-1].startswith("static = ")
    assert cli.main(["plan", "qwen3-235b-a22b", *JUPITER_235B_FLAGS, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "gpu_memory_gib" not in report and all("free_bytes" not in rank for rank in report["ranks"])
