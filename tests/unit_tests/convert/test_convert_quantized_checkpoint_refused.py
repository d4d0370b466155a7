"""A quantized Hugging Face checkpoint (GPTQ, AWQ: packed integer ``qweight`` / ``qzeros`` / ``scales`` in place of
each linear weight; FP8: float8 weights with a ``weight_scale_inv`` each) is refused by its config's
``quantization_config``, naming the method and the unquantized release to convert instead: it was refused as a
missing tensor (as if another card were needed) or an unread dtype."""

from __future__ import annotations

import json
import random

import pytest
import torch
from torch import Tensor

from megatron.oellm.cards import get_card
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import edit_json, random_hf_tensors, write_hf

QUANTIZATION = {"gptq": {"bits": 4, "group_size": 128, "desc_act": False, "sym": True},
                "awq": {"bits": 4, "group_size": 128, "version": "gemm", "zero_point": True},
                "fp8": {"fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}}
"""Each method's ``quantization_config`` fields besides ``quant_method``, like those of the published Qwen3 releases."""
PACKED = 8
"""4-bit values per int32 of GPTQ and AWQ."""


def _quantized(tensors: dict[str, Tensor], method: str) -> dict[str, Tensor]:
    """``tensors`` with every projection weight stored as ``method`` stores it."""
    out = {}
    for name, weight in tensors.items():
        stem = name.removesuffix(".weight")
        if not (name.endswith("proj.weight") and weight.dim() == 2):
            out[name] = weight
        elif method == "fp8":
            out[name] = weight.to(torch.float8_e4m3fn)
            out[f"{stem}.weight_scale_inv"] = torch.rand(1, 1) + 0.5
        else:
            rows, columns = weight.shape
            out[f"{stem}.qweight"] = torch.randint(-2**31, 2**31 - 1, (max(1, columns // PACKED), rows),
                                                   dtype=torch.int32)
            out[f"{stem}.qzeros"] = torch.randint(-2**31, 2**31 - 1, (1, max(1, rows // PACKED)), dtype=torch.int32)
            out[f"{stem}.scales"] = (torch.rand(1, rows) + 0.5).half()
    return out


def _refusal(config: str, method: str) -> str:
    """The refusal of the quantized model's ``config`` (a path)."""
    return (f"{config} describes a {method} quantized model (quantization_config, quant_method {method!r}): oellm "
            "convert reads and writes unquantized weights (bf16, fp16, fp32) only; convert the model's unquantized "
            "release (the repository without -GPTQ-Int4, -AWQ or -FP8 in its name)")


@pytest.mark.parametrize("card_name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
@pytest.mark.parametrize("method", list(QUANTIZATION))
def test_a_quantized_checkpoint_is_refused_naming_its_method(tmp_path, method: str, card_name: str) -> None:
    """The refusal names no release of another model (it named Qwen/Qwen3-30B-A3B for a Qwen3.5 checkpoint too)."""
    card = get_card(card_name)
    hf = write_hf(card, _quantized(random_hf_tensors(card, seed=random.randrange(2**31)), method), tmp_path / "hf")
    edit_json(hf / "config.json", quantization_config={"quant_method": method, **QUANTIZATION[method]})
    with pytest.raises(ConversionError) as refusal:
        hf_to_mcore_checkpoint(card, hf, tmp_path / "mcore")
    assert str(refusal.value) == _refusal(str(hf / "config.json"), method)
    assert not (tmp_path / "mcore").exists()


def test_an_hf_config_of_a_quantized_release_is_refused(converted) -> None:
    """mcore-to-hf with ``--hf-config`` of a quantized release: its ``quantization_config`` in the export would make
    transformers load the unquantized weights as quantized ones."""
    card, _, tmp = converted
    method = random.choice(list(QUANTIZATION))
    config = json.loads((tmp / "hf" / "config.json").read_text())
    (tmp / "quantized").mkdir()
    (tmp / "quantized" / "config.json").write_text(json.dumps(
        {**config, "quantization_config": {"quant_method": method, **QUANTIZATION[method]}}))
    with pytest.raises(ConversionError) as refusal:
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", hf_config_dir=tmp / "quantized")
    assert str(refusal.value) == _refusal(str(tmp / "quantized" / "config.json"), method)
    assert not (tmp / "out").exists()


def test_a_multimodal_config_quantized_in_its_text_config_is_refused() -> None:
    """A multimodal config may state ``quantization_config`` only in the ``text_config`` that describes its language
    model, the part converted: refused as one at the top level is."""
    from megatron.oellm.convert.hf_config import check_not_quantized

    method = random.choice(list(QUANTIZATION))
    where = f"/models/vl-{random.randrange(10**6)}/config.json"
    stored = {"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"],
              "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 64 * random.randint(1, 32),
                              "quantization_config": {"quant_method": method, **QUANTIZATION[method]}}}
    with pytest.raises(ConversionError) as refusal:
        check_not_quantized(stored, where)
    assert str(refusal.value) == _refusal(where, method)
