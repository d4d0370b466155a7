"""The model provider's checks and layout on cases the other model-provider tests leave out (found by a mutation audit
of :mod:`megatron.oellm.training.model_provider`): megatron-core's GPT-path Gated DeltaNet, context parallelism, the
pipeline layout named for ``--decoder-first/last-pipeline-num-layers``, and the run's arguments left as parsed."""

from __future__ import annotations

import random
import re

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.megatron_args import flags_to_argv, megatron_parser, model_flags
from megatron.oellm.recipes.megatron_validation import validate_args_on_cluster
from megatron.oellm.training.args import add_oellm_arguments, merge_card_flags, parse_oellm_argv
from megatron.oellm.training.model_provider import (
    card_from_args,
    check_model_config,
    check_recompute_modules,
    layout_from_args,
    runtime_overrides,
)

RUN = ["--micro-batch-size", "1", "--global-batch-size", "8", "--seq-length", "128", "--bf16", "--oellm-backend",
       "torch", "--mock-data"]
"""A small run's flags beside the model's."""


def parsed(argv: list[str]):
    """Megatron's parse of ``argv`` with the card's flags merged in (no validation), and the two fields megatron's
    validation and tokenizer set."""
    merged = merge_card_flags(argv)
    args = megatron_parser(add_oellm_arguments).parse_args(merged.argv if merged else argv)
    args.padded_vocab_size, args.virtual_pipeline_model_parallel_size = 640, None
    return args


def validated(argv: list[str], world_size: int = 1):
    """Megatron's arguments for ``argv`` after its ``validate_args`` (as on a cluster's rank 0)."""
    merged = merge_card_flags(argv)
    args = validate_args_on_cluster(parse_oellm_argv(merged.argv if merged else argv), world_size)
    args.padded_vocab_size = args.vocab_size
    return args


def test_gdn_norm_out_is_accepted_for_megatrons_gpt_path_gated_deltanet():
    """megatron-core's own GPT model with ``--experimental-attention-variant gated_delta_net`` (a Qwen3.5 model given
    by Megatron's flags, no ``--oellm-model``) is the one model whose config accepts ``gdn_norm_out``: the check lets
    it through, and megatron-core's config takes it as well, so the run is not refused as having no GDN layers."""
    flags = {**model_flags(get_card("qwen3.5-35b-a3b-tiny")), "hybrid-layer-pattern": None,
             "experimental-attention-variant": "gated_delta_net", "linear-attention-freq": 4}
    modules = random.sample(["core_attn", "layernorm", "moe", "moe_act"], random.randint(0, 2)) + ["gdn_norm_out"]
    random.shuffle(modules)
    args = validated([*flags_to_argv(flags), *RUN, "--recompute-granularity", "selective",
                      "--recompute-modules", *modules])
    check_recompute_modules(args)
    card = card_from_args(args)
    assert card.linear_mixer == "gdn"
    check_model_config(args, card)


def test_the_layout_carries_the_runs_context_parallel_size():
    """``--context-parallel-size`` reaches the layout the model is built and checked with: a CP size whose 2 x cp
    chunks do not divide the run's sequence is refused before Megatron starts, one that does is not."""
    from megatron.oellm.training.entry import check_layout

    cp = random.choice([3, 5, 7])
    bad = parsed(["--oellm-model", "qwen3-30b-a3b-tiny", "--seq-length", "128", "--context-parallel-size", str(cp)])
    assert layout_from_args(bad).cp == cp
    with pytest.raises(ValueError, match=rf"seq_length \(128\) is not divisible by 2 x cp \({2 * cp}\)"):
        check_layout(bad)
    good = random.choice([2, 4])
    check_layout(parsed(["--oellm-model", "qwen3-30b-a3b-tiny", "--seq-length", "128",
                         "--context-parallel-size", str(good)]))


QWEN3_PP4 = ["--oellm-model", "qwen3-30b-a3b", "--pipeline-model-parallel-size", "4", "--seq-length", "128"]
"""Qwen3-30B-A3B's 48 layers over 4 pipeline ranks."""


def _refusal(argv: list[str]) -> str:
    """The layout check's refusal of ``argv``."""
    from megatron.oellm.training.entry import check_layout

    with pytest.raises(ValueError) as refused:
        check_layout(parsed(argv))
    return str(refused.value)


def test_a_last_stage_size_alone_is_named_as_its_pipeline_layout():
    """``--decoder-last-pipeline-num-layers N`` alone leaves 48 - N layers to the first three stages: the refusal names
    the pipeline layout that places them as Megatron would (the even split of the rest, the last stage's N)."""
    last = random.choice([3, 6, 9, 12, 15])
    rest = (48 - last) // 3
    message = _refusal([*QWEN3_PP4, "--decoder-last-pipeline-num-layers", str(last)])
    layout = f"Et*{rest}|t*{rest}|t*{rest}|t*{last}L"
    assert message.endswith(f"give --pipeline-model-parallel-layout {layout!r} instead"), message


def test_a_first_stage_size_that_leaves_an_uneven_rest_gets_the_even_example():
    """When the layers after the first stage do not split evenly over the other stages there is no equivalent layout
    (Megatron refuses the flags too): the refusal gives the even split as an example, not a layout of other sizes."""
    first = random.choice([10, 11, 13, 14])  # 48 - first is not a multiple of 3
    message = _refusal([*QWEN3_PP4, "--decoder-first-pipeline-num-layers", str(first)])
    assert message.startswith("--decoder-first-pipeline-num-layers: "), message
    assert message.endswith("(e.g. 'Et*12|t*12|t*12|t*12L')"), message


@pytest.mark.parametrize("accounting", ["--account-for-embedding-in-pipeline-split",
                                        "--account-for-loss-in-pipeline-split"])
def test_stage_sizes_beside_an_accounting_flag_get_the_even_example(accounting):
    """Megatron-core refuses first/last stage sizes beside the embedding or loss accounting flags, so no layout is
    equivalent to them: the refusal names both flags and gives the even split as an example, not the layout of the
    stage sizes alone (which would drop the accounting without a word)."""
    first = random.choice([9, 15, 18])
    message = _refusal([*QWEN3_PP4, "--decoder-first-pipeline-num-layers", str(first), accounting])
    assert message.startswith(f"--decoder-first-pipeline-num-layers, {accounting}: "), message
    assert message.endswith("(e.g. 'Et*12|t*12|t*12|t*12L')"), message
    assert re.search(rf"'Et\*{first}\|", message) is None, message


def test_the_torch_backend_leaves_the_runs_fusion_arguments_as_parsed():
    """The torch-native backend turns Transformer Engine's fused RoPE and the fused weight-gradient GEMM off in the
    model's config only; Megatron's arguments (which the run saves in its checkpoints and which megatron reads
    elsewhere) keep the values the command line gave."""
    args = validated(["--oellm-model", "qwen3-30b-a3b-tiny", *RUN])
    args.apply_rope_fusion = args.gradient_accumulation_fusion = True
    card = card_from_args(args)
    overrides = runtime_overrides(args, card, layout_from_args(args))
    assert (overrides["apply_rope_fusion"], overrides["gradient_accumulation_fusion"]) == (False, False)
    assert (args.apply_rope_fusion, args.gradient_accumulation_fusion) == (True, True)
