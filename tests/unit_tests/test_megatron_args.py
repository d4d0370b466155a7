"""Flags rendered by ``flags_to_argv`` read back by Megatron's own parser as the values they were written from: a
value argparse would take for an option (a negative number, a string starting with a dash) is still a value, and a
list element it would misread is refused by name."""

import random

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


@pytest.mark.parametrize("value", [float("-inf"), -random.uniform(1, 1e6) * 10.0 ** -random.randint(5, 300),
                                   -random.uniform(1, 9) * 10.0 ** random.randint(16, 300)])
def test_negative_floats_argparse_cannot_read_positionally_are_values(value: float) -> None:
    """``-inf`` was rendered as ``--weight-decay -inf``, which argparse takes for an unknown option (exit 2)."""
    assert parse_megatron_argv(flags_to_argv({"weight-decay": value})).weight_decay == value


def test_a_string_value_starting_with_a_dash_is_a_value() -> None:
    """A string value such as a run name ``-abc`` was rendered as a separate token that argparse reads as an option."""
    name = f"-run{random.randint(0, 10**6)}"
    assert parse_megatron_argv(flags_to_argv({"wandb-exp-name": name})).wandb_exp_name == name


def test_a_list_element_argparse_would_read_as_an_option_is_refused() -> None:
    """A list can only be written as separate tokens: one argparse would take for an option is refused by name."""
    with pytest.raises(ValueError, match="--moe-aux-loss-coeff"):
        flags_to_argv({"moe-aux-loss-coeff": [random.random(), float("-inf")]})
    coeffs = [-random.random() * 1e-9, random.random()]
    assert parse_megatron_argv(flags_to_argv({"moe-aux-loss-coeff": coeffs})).moe_aux_loss_coeff == coeffs


@pytest.mark.parametrize("element", [["moe_act"], {"module": "moe_act"}, True, None])
def test_a_list_element_that_is_no_number_or_string_is_refused(element) -> None:
    """A nested list (``recompute-modules = [["moe_act"]]``) was written as the one token ``['moe_act']``, a module
    megatron-core knows only when the job builds the model; a table or boolean as its Python text likewise."""
    modules = random.sample(["moe_act", "layernorm", "mlp", "moe", "core_attn"], 2)
    with pytest.raises(ValueError, match=r"--recompute-modules: list values .* are not numbers or strings"):
        flags_to_argv({"recompute-modules": [modules[0], element, modules[1]]})
    assert parse_megatron_argv(flags_to_argv({"recompute-modules": modules})).recompute_modules == modules
