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
from megatron.oellm.convert.mcore_layout import pieces
from megatron.oellm.convert.tensor_checks import check_one_dtype_per_key
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
    many more HF tensors (not megatron ones) are stored that way."""
    card = get_card(QWEN3)
    hf = random_hf_tensors(card, seed=_random_index(2**31))
    experts = [_random_index(card.num_experts) for _ in range(card.num_layers)]
    odd = [f"model.layers.{layer}.mlp.experts.{expert}.{part}_proj.weight"
           for layer, expert in enumerate(experts) for part in ("gate", "up")]
    hf.update({name: hf[name].float() for name in odd})
    message = _refusal(QWEN3, hf, tmp_path)
    total = 2 * card.num_layers * card.num_experts
    assert message.startswith(f"{odd[0]!r} and {odd[1]!r} are torch.float32 (as are {len(odd) - 2} more of the "
                              f"{total} HF tensors stored there) but are stored with 'model.layers."), message


def test_fused_experts_of_two_layers_in_two_dtypes_are_a_tie(tmp_path: Path) -> None:
    """transformers' fused expert tensors, one layer in float32 and one in bfloat16: both named with their dtype,
    neither called the odd one out."""
    card = get_card(QWEN3)
    hf = fuse_experts(card, random_hf_tensors(card, seed=_random_index(2**31)))
    layer = _random_index(card.num_layers)
    hf[f"model.layers.{layer}.mlp.experts.down_proj"] = hf[f"model.layers.{layer}.mlp.experts.down_proj"].float()
    dtypes = {layer: "torch.float32", 1 - layer: "torch.bfloat16"}
    message = _refusal(QWEN3, hf, tmp_path)
    assert message.startswith("HF tensors in 2 dtypes are stored in one megatron checkpoint tensor "), message
    assert message.endswith(f", which has one dtype: 1 in {dtypes[0]} ('model.layers.0.mlp.experts.down_proj'); 1 in "
                            f"{dtypes[1]} ('model.layers.1.mlp.experts.down_proj'); save the checkpoint in one "
                            "dtype"), message
    assert " but is " not in message and "odd" not in message


def test_one_fused_expert_tensor_is_counted_once(tmp_path: Path) -> None:
    """One layer's experts fused (transformers' ``down_proj`` of all experts) in float32, the other layer's per
    expert in bfloat16: the fused tensor feeds as many megatron tensors as the other layer's experts, yet it is one HF
    tensor among several, so it is the odd one, and no "more" are counted for it."""
    card = get_card(QWEN3)
    layer = _random_index(card.num_layers)
    per_expert = random_hf_tensors(card, seed=_random_index(2**31))
    fused = fuse_experts(card, per_expert)
    odd = f"model.layers.{layer}.mlp.experts.down_proj"
    hf = {name: tensor for name, tensor in per_expert.items() if not name.startswith(f"model.layers.{layer}.mlp.exp")}
    hf.update({name: fused[name] for name in (odd, f"model.layers.{layer}.mlp.experts.gate_up_proj")})
    hf[odd] = hf[odd].float()
    message = _refusal(QWEN3, hf, tmp_path)
    assert re.fullmatch(rf"'{re.escape(odd)}' is torch\.float32 but is stored with 'model\.layers\.{1 - layer}\.mlp\."
                        r"experts\.0\.down_proj\.weight' \(torch\.bfloat16\) in one megatron checkpoint tensor "
                        r"'[\w.]+', which has one dtype; save the checkpoint in one dtype", message), message


def test_one_more_is_said_in_the_singular(tmp_path: Path) -> None:
    """Two experts' ``down_proj`` in float32: one is named, "as is 1 more of the N HF tensors stored there"."""
    card = get_card(QWEN35)
    hf = random_hf_tensors(card, seed=_random_index(2**31))
    layer, first = _random_index(card.num_layers), _random_index(card.num_experts - 1)
    odd = [f"model.layers.{layer}.mlp.experts.{expert}.down_proj.weight" for expert in (first, first + 1)]
    hf.update({name: hf[name].float() for name in odd})
    message = _refusal(QWEN35, hf, tmp_path)
    assert message.startswith(f"{odd[0]!r} is torch.float32 (as is 1 more of the "
                              f"{card.num_experts} HF tensors stored there) but is stored with "), message


def test_three_dtypes_are_all_named_with_their_counts(tmp_path: Path) -> None:
    """Experts of one layer (one checkpoint tensor of the hybrid model) in float32 (3), float16 (3) and bfloat16 (the
    other 2): every dtype is named with how many HF tensors have it and one of them, most common first, float32 before
    float16 on their tie (checkpoint order), so that one fix of the files is enough; it named two dtypes only."""
    card = get_card(QWEN35)
    hf = random_hf_tensors(card, seed=_random_index(2**31))
    layer = _random_index(card.num_layers)
    down = [f"model.layers.{layer}.mlp.experts.{expert}.down_proj.weight" for expert in range(card.num_experts)]
    hf.update({name: hf[name].float() for name in down[:3]})
    hf.update({name: hf[name].half() for name in down[3:6]})
    message = _refusal(QWEN35, hf, tmp_path)
    rest = card.num_experts - 6
    assert re.fullmatch(rf"HF tensors in 3 dtypes are stored in one megatron checkpoint tensor '[\w.]+', which has "
                        rf"one dtype: 3 in torch\.float32 \(e\.g\. {re.escape(repr(down[0]))}\); 3 in torch\.float16 "
                        rf"\(e\.g\. {re.escape(repr(down[3]))}\); {rest} in torch\.bfloat16 \(e\.g\. "
                        rf"{re.escape(repr(down[6]))}\); save the checkpoint in one dtype", message), message


def test_a_megatron_tensor_without_hf_sources_is_named_as_megatrons() -> None:
    """Where no HF tensor is found for a megatron tensor (``hf_names`` gives none), it is named as megatron's, not
    left out ("error: are torch.float16 but are stored with  (torch.bfloat16)")."""
    card = get_card(QWEN3)
    chunks = []
    for layer in range(card.num_layers):
        name = f"decoder.layers.{layer}.pre_mlp_layernorm.weight"
        dtype = torch.float16 if layer == 0 else torch.bfloat16
        chunks += [(piece, dtype) for piece in pieces(card, "gpt", name, (card.hidden_size,))]
    with pytest.raises(ConversionError) as refusal:
        check_one_dtype_per_key(chunks, lambda name: [])
    assert str(refusal.value).startswith("HF tensors in 2 dtypes are stored in one megatron checkpoint tensor "
                                         "'decoder.layers.pre_mlp_layernorm.weight', which has one dtype: 1 in "
                                         "torch.float16 (megatron's 'decoder.layers.0.pre_mlp_layernorm.weight'); 1 "
                                         "in torch.bfloat16 (megatron's 'decoder.layers.1."), refusal.value
