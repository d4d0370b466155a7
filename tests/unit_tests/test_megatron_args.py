"""Flags rendered by ``flags_to_argv`` read back by Megatron's own parser as the values they were written from."""

import pytest

from megatron.oellm.megatron_args import flags_to_argv, parse_megatron_argv


def test_bools_none_and_lists():
    argv = flags_to_argv({"swiglu": True, "qk-layernorm": False, "kv-channels": None, "disable-bias-linear": True,
                          "moe-aux-loss-coeff": [1e-3, 0.5], "num-layers": 0})
    assert argv == ["--swiglu", "--disable-bias-linear", "--moe-aux-loss-coeff", "0.001", "0.5", "--num-layers", "0"]
    args = parse_megatron_argv(argv)
    assert (args.swiglu, args.qk_layernorm, args.kv_channels, args.add_bias_linear) == (True, False, None, False)


@pytest.mark.parametrize("name, value", [
    ("weight-decay", -1e-05),
    ("weight-decay", -0.5),
    ("seed", -1),
    ("moe-aux-loss-coeff", [-2.5e-07, 1e-05]),
])
def test_negative_numbers_are_values_not_options(name, value):
    """``-1e-05`` was rendered as is, which argparse (Python < 3.13) takes for an option: 'expected one argument'."""
    args = parse_megatron_argv(flags_to_argv({name: value}))
    assert getattr(args, name.replace("-", "_")) == value
