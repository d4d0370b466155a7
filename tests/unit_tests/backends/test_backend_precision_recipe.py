"""The torch-native backend refuses a per-module precision recipe (``--te-precision-config-file``), from a
TransformerConfig and from Megatron's parsed arguments (CPU only); each test fails if the recipe is accepted."""

import pytest
from megatron.core.quantization.quant_config import GlobMatcher, RecipeConfig
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.oellm.backends import selection

PRECISION_RECIPE = RecipeConfig(
    matchers=[GlobMatcher(pattern="*linear_fc*", config_key="fp8")],
    config_dict={"fp8": {"transformer_engine_config_type": "TEQuantizationParams",
                         "training_recipe": {"fp8_quantization_recipe": "tensorwise", "fp8_format": "e4m3"}}},
)
"""A per-module precision recipe as ``--te-precision-config-file`` loads one: the MLP linears in fp8."""


def test_torch_backend_refuses_a_per_module_precision_recipe() -> None:
    """megatron-core hands ``quant_recipe`` (``--te-precision-config-file``) to the modules that define
    ``finish_init``, which only Transformer Engine's linears do (not the torch-native ones, nor megatron-core's local
    linears): the torch-native model would train every module in bf16 with no word that the requested per-module
    fp8/fp4 precision was dropped."""
    config = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, normalization="RMSNorm",
                               quant_recipe=PRECISION_RECIPE)
    with pytest.raises(ValueError, match=r"per-module precision recipe.*--te-precision-config-file"):
        selection.check_config_support("torch", config)


def test_entry_refuses_the_precision_config_file_on_the_torch_backend() -> None:
    from megatron.oellm.cards import get_card
    from megatron.oellm.megatron_args import flags_to_argv, megatron_parser, model_flags

    card_argv = flags_to_argv(model_flags(get_card("qwen3-30b-a3b-tiny")))
    parser = megatron_parser()
    selection.check_args_support("torch", parser.parse_args(card_argv))
    args = parser.parse_args([*card_argv, "--te-precision-config-file", "precision.yaml"])
    with pytest.raises(ValueError, match=r"per-module precision recipe.*--te-precision-config-file"):
        selection.check_args_support("torch", args)

