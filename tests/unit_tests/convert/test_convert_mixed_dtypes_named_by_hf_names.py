"""hf-to-mcore's refusal of tensors megatron stores in one checkpoint tensor in differing dtypes names the HF tensors
the user's files hold (published ``model.language_model.`` names, fused experts, gate and up of one expert), not
the megatron tensors made of them, and calls none the odd one out on a tie."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import fuse_experts, random_hf_tensors, write_hf

QWEN3, QWEN35 = "qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"


def _refusal(card_name: str, tensors: dict[str, torch.Tensor], tmp_path: Path) -> str:
    """The message hf-to-mcore refuses ``tensors`` (written as an HF checkpoint of the card) with; nothing written."""
    write_hf(get_card(card_name), tensors, tmp_path / "hf")
    with pytest.raises(ConversionError) as refusal:
        hf_to_mcore_checkpoint(get_card(card_name), tmp_path / "hf", tmp_path / "mcore")
    assert not (tmp_path / "mcore").exists()
    return str(refusal.value)


def _random_index(size: int) -> int:
    """A random index below ``size`` from the suite's seeded generator."""
    return int(torch.randint(0, size, ()))


def test_published_names_are_named_as_the_files_hold_them(tmp_path: Path) -> None:
    """A published Qwen3.5 checkpoint stores the text model under ``model.language_model.``: the odd expert is named
    under that name, the one the user finds in the files."""
    card = get_card(QWEN35)
    layer, expert = _random_index(card.num_layers), _random_index(card.num_experts)
    hf = {name.replace("model.", "model.language_model.", 1): tensor
          for name, tensor in random_hf_tensors(card, seed=_random_index(2**31)).items()}
    odd = f"model.language_model.layers.{layer}.mlp.experts.{expert}.down_proj.weight"
    hf[odd] = hf[odd].float()
    message = _refusal(QWEN35, hf, tmp_path)
    assert re.match(rf"'{re.escape(odd)}' is torch\.float32 but is stored with 'model\.language_model\.layers\."
                    rf"{layer}\.mlp\.experts\.\d+\.down_proj\.weight' \(torch\.bfloat16\) in one megatron checkpoint "
                    "tensor", message), message


def test_an_expert_whose_gate_and_up_differ_from_the_rest_names_both(tmp_path: Path) -> None:
    """gate and up of one expert make one megatron tensor: both HF tensors are named, in float32, and so is how
    many more are stored that way."""
    card = get_card(QWEN3)
    hf = random_hf_tensors(card, seed=_random_index(2**31))
    experts = [_random_index(card.num_experts) for _ in range(card.num_layers)]
    odd = [f"model.layers.{layer}.mlp.experts.{expert}.{part}_proj.weight"
           for layer, expert in enumerate(experts) for part in ("gate", "up")]
    hf.update({name: hf[name].float() for name in odd})
    message = _refusal(QWEN3, hf, tmp_path)
    total = card.num_layers * card.num_experts
    assert message.startswith(f"{odd[0]!r} and {odd[1]!r} are torch.float32 (so are {card.num_layers - 1} more of "
                              f"the {total} stored there) but are stored with 'model.layers."), message


def test_fused_experts_of_two_layers_in_two_dtypes_are_a_tie(tmp_path: Path) -> None:
    """transformers' fused expert tensors, one layer in float32 and one in bfloat16: both named with their dtype,
    neither called the odd one out."""
    card = get_card(QWEN3)
    hf = fuse_experts(card, random_hf_tensors(card, seed=_random_index(2**31)))
    layer = _random_index(card.num_layers)
    hf[f"model.layers.{layer}.mlp.experts.down_proj"] = hf[f"model.layers.{layer}.mlp.experts.down_proj"].float()
    dtypes = {layer: "torch.float32", 1 - layer: "torch.bfloat16"}
    message = _refusal(QWEN3, hf, tmp_path)
    assert message.startswith(f"'model.layers.0.mlp.experts.down_proj' ({dtypes[0]}) and "
                              f"'model.layers.1.mlp.experts.down_proj' ({dtypes[1]}) differ in dtype but are stored in "
                              "one megatron checkpoint tensor"), message
    assert " but is " not in message and "odd" not in message
