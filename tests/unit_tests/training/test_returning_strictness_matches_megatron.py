"""The ``--dist-ckpt-strictness`` values the entry refuses for a distributed checkpoint because megatron-core's loader
returns mismatched keys beside the state are exactly those megatron-core itself says return them
(``StrictHandling.requires_returning_mismatch_keys``), and ``return_all`` is refused for a converted checkpoint as
such, not only as a strictness that fails on its missing ``_extra_state``."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from megatron.core.dist_checkpointing.validation import StrictHandling

from megatron.oellm.training import load_checks
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import converted_random_checkpoint

CARD = "qwen3-30b-a3b-tiny"


def test_the_returning_values_are_megatron_cores():
    """Every ``StrictHandling`` value megatron-core's own predicate names as returning mismatch keys, and no other."""
    returning = {value.value for value in StrictHandling if StrictHandling.requires_returning_mismatch_keys(value)}
    assert set(load_checks.RETURNING_STRICTNESS) == returning
    assert len(load_checks.RETURNING_STRICTNESS) == len(returning)


def test_return_all_with_a_converted_checkpoint_is_refused_as_returning(tmp_path: Path):
    """``--dist-ckpt-strictness return_all`` with a converted checkpoint (``--finetune`` or not) is refused naming
    the returned keys and the ``log_*`` values that show them."""
    converted = converted_random_checkpoint(CARD, tmp_path)
    flags = random.choice([[], ["--finetune"]])
    args = parse_oellm_argv(merge_card_flags(["--oellm-model", CARD, "--load", str(converted), "--ckpt-format",
                                              "torch_dist", "--dist-ckpt-strictness", "return_all", *flags]).argv)
    with pytest.raises(ValueError, match=rf"^--dist-ckpt-strictness return_all: megatron-core's checkpoint loader "
                                         rf"then returns the mismatched keys .*--load {converted} would not load; use "
                                         "log_unexpected or log_all"):
        load_checks.check_load_strictness(args, read_loaded_checkpoint(args))
