"""Argument handling of ``megatron_args`` the other tests left open (mutation audit): the flag named in messages is the
one Megatron's parser knows, a tuple is written like a list, and Megatron's parser here refuses an abbreviated flag
as megatron-core's own ``parse_args`` does."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.megatron_args import flags_to_argv, megatron_flag, megatron_parser, parse_megatron_argv

MODULES = ["moe_act", "layernorm", "mlp", "moe", "core_attn", "shared_experts"]


def test_the_flag_named_for_a_destination_is_megatrons_spelling_of_it() -> None:
    """Error messages (backend checks, the run schedule) name the flag a user wrote from an argument's destination:
    ``delay_wgrad_compute`` must read ``--delay-wgrad-compute``, the option Megatron's parser has for it (every
    destination with an underscore whose flag is spelled after it; ``--no-...`` style flags are not named this way)."""
    parser = megatron_parser()
    actions = [action for action in parser._actions if "_" in action.dest
               and any(option[2:].replace("-", "_") == action.dest for option in action.option_strings)]
    for action in random.sample(actions, 20):
        assert megatron_flag(action.dest) in action.option_strings, action.dest
    assert megatron_flag("delay_wgrad_compute") == "--delay-wgrad-compute"


def test_a_tuple_value_is_written_as_separate_tokens_like_a_list() -> None:
    """Flags built in Python (a recipe's or a test's dict) may hold a tuple; it must reach Megatron as the same
    values as the list, not as the one token ``('moe_act', 'mlp')``."""
    modules = random.sample(MODULES, random.randint(2, 4))
    coeffs = (random.random(), -random.random() * 1e-9)
    argv = flags_to_argv({"recompute-modules": tuple(modules), "moe-aux-loss-coeff": coeffs})
    assert argv == flags_to_argv({"recompute-modules": modules, "moe-aux-loss-coeff": list(coeffs)})
    args = parse_megatron_argv(argv)
    assert args.recompute_modules == modules and args.moe_aux_loss_coeff == list(coeffs)
    with pytest.raises(ValueError, match=r"--moe-aux-loss-coeff: list values \['-inf'\]"):
        flags_to_argv({"moe-aux-loss-coeff": (random.random(), float("-inf"))})


@pytest.mark.parametrize("flag", ["--hidden-siz", "--num-layer", "--seq-len"])
def test_an_abbreviated_flag_is_refused_as_megatron_refuses_it(flag: str, capsys: pytest.CaptureFixture) -> None:
    """megatron-core parses with ``allow_abbrev=False``: a prefix of a flag (a typo that drops its last letters) is
    an error in the job, so the plan, FLOP count and flag checks that read the same argv must not take it for the
    full flag."""
    value = str(random.randint(2, 64) * 64)
    with pytest.raises(SystemExit):
        parse_megatron_argv([flag, value])
    assert f"unrecognized arguments: {flag} {value}" in capsys.readouterr().err
