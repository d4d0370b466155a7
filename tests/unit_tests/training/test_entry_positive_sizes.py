"""The training entry refuses a sequence length or parallel size below 1 in one line, before megatron's
``validate_args``, which takes the world size modulo the parallel sizes (a ``ZeroDivisionError`` traceback on every
rank at 0) and passed a ``--seq-length`` of 0 (the job stopped when it built its datasets)."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.training.args import POSITIVE_SIZES, check_positive_sizes, parse_oellm_argv
from megatron.oellm.training.startup_checks import check_parsed_args
from tests.unit_tests.training.entry_helpers import TINY_MOE_RUN, entry_up_to_pretrain, refused_line

PARALLEL_FLAGS = ["--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                  "--expert-tensor-parallel-size", "--num-layers-per-virtual-pipeline-stage"]


@pytest.mark.parametrize("flag", [flag for flag in PARALLEL_FLAGS if flag != "--expert-tensor-parallel-size"])
def test_megatron_divides_by_a_parallel_size_of_zero(flag):
    """What the check guards against, on megatron-core 0.19.2's own validation (as the cluster's rank 0 runs it):
    each of these sizes at 0 stops ``validate_args`` with a ``ZeroDivisionError``, naming no flag (an expert
    tensor-parallel size of 0 passes it and divides in megatron-core's ``TransformerConfig``)."""
    from megatron.oellm.recipes.megatron_validation import validate_args_on_cluster
    from megatron.oellm.training.args import merge_card_flags, with_training_defaults

    argv = with_training_defaults(merge_card_flags([*TINY_MOE_RUN, flag, "0"]).argv)
    with pytest.raises(ZeroDivisionError):
        validate_args_on_cluster(parse_oellm_argv(argv), 8)


@pytest.mark.parametrize("flag", [*PARALLEL_FLAGS, "--seq-length", "--expert-model-parallel-size"])
def test_a_size_below_one_is_refused_in_one_line_naming_the_flag(flag, monkeypatch, capsys):
    value = random.choice([0, -random.randint(1, 64)])
    argv = [*TINY_MOE_RUN, flag, str(value)]
    with pytest.raises(ValueError, match=rf"^{flag} {value}: give a size of at least 1"):
        check_parsed_args(parse_oellm_argv(argv))
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, argv)
    assert line.endswith(f"error: {flag} {value}: give a size of at least 1"
                         + (" (1: none of that parallelism)" if flag.endswith("parallel-size") else ""))


def test_sizes_of_one_or_more_and_unset_ones_pass():
    """Every checked size at a random positive value passes, and so does a command line that sets none of them (the
    optional ones, e.g. the expert tensor-parallel size, stay None)."""
    argv = [token for name in POSITIVE_SIZES for token in (f"--{name.replace('_', '-')}", str(random.randint(1, 64)))]
    check_positive_sizes(parse_oellm_argv(argv))
    unset = parse_oellm_argv([])
    assert unset.expert_tensor_parallel_size is None and unset.num_layers_per_virtual_pipeline_stage is None
    check_positive_sizes(unset)
