"""``_hf_sources`` (which HF tensors a megatron tensor is made of, for hf-to-mcore's mixed-dtype refusal) agrees with
a perturbation ground truth (change one HF tensor, see which megatron tensors change) for every unit and megatron
tensor of both tiny MoE cards, per-expert and fused experts; it works under a caller's ``torch.inference_mode``, lists
q, k and v in that order whatever the files' order, and a refusal never reads "error: are torch.float16"."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import hf_to_mcore_unit, units
from megatron.oellm.convert.hf_names import CanonicalView
from megatron.oellm.convert.to_mcore import _hf_sources, hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import fuse_experts, random_hf_tensors, write_hf

CARDS = ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"]


class _Reads(Mapping[str, torch.Tensor]):
    """``tensors``, remembering which names were read: a unit's converter reads only its own HF tensors."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.tensors, self.read = tensors, set()

    def __getitem__(self, name: str) -> torch.Tensor:
        self.read.add(name)
        return self.tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)


def _perturbation_truth(card_name: str, unit: object, hf: dict[str, torch.Tensor]) -> dict[str, set[str]]:
    """Megatron tensor -> the HF tensors whose change (adding 1) changes it: the unit converted once per HF tensor
    it reads, that tensor changed."""
    card = get_card(card_name)
    reads = _Reads(hf)
    base = hf_to_mcore_unit(card, unit, CanonicalView(reads))
    truth = {name: set() for name in base}
    for source in reads.read:
        changed = hf_to_mcore_unit(card, unit, CanonicalView({**hf, source: hf[source] + 1}))
        for name, tensor in base.items():
            if not torch.equal(changed[name], tensor):
                truth[name].add(source)
    return truth


def _random_seed() -> int:
    """A seed from the suite's seeded generator."""
    return int(torch.randint(0, 2**31, ()))


def _meta(hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``hf`` as the checkpoint's headers give it (meta tensors), in alphabetical order as a safetensors header."""
    return {name: torch.empty(hf[name].shape, dtype=hf[name].dtype, device="meta") for name in sorted(hf)}


@pytest.mark.parametrize("fused", [False, True], ids=["per-expert", "fused-experts"])
@pytest.mark.parametrize("card_name", CARDS)
def test_sources_agree_with_a_perturbation_ground_truth(card_name: str, fused: bool) -> None:
    """Every megatron tensor of every unit: exactly the HF tensors whose change changes it, none left out."""
    card = get_card(card_name)
    hf = random_hf_tensors(card, seed=_random_seed())
    hf = fuse_experts(card, hf) if fused else hf
    meta = _meta(hf)
    for unit in units(card):
        truth = _perturbation_truth(card_name, unit, hf)
        sources = _hf_sources(card, unit, meta)
        assert sorted(sources) == sorted(truth), unit
        for name, expected in truth.items():
            assert expected, (unit, name)
            assert sorted(sources[name]) == sorted(expected), (unit, name)


@pytest.mark.parametrize("card_name", CARDS)
def test_sources_are_found_under_inference_mode_in_the_order_combined(card_name: str) -> None:
    """Under the caller's ``torch.inference_mode`` (where ``enable_grad`` records no graph) the sources are those
    found outside it, and an attention layer's fused qkv lists q, k, v in that order, not the header's alphabetical
    k, q, v."""
    card = get_card(card_name)
    meta = _meta(random_hf_tensors(card, seed=_random_seed()))
    outside = {unit: _hf_sources(card, unit, meta) for unit in units(card)}
    with torch.inference_mode():
        inside = {unit: _hf_sources(card, unit, meta) for unit in units(card)}
    assert inside == outside
    qkv = [sources for unit in outside.values() for name, sources in unit.items()
           if name.endswith("self_attention.linear_qkv.weight")]
    assert qkv
    for sources in qkv:
        assert [source.rsplit(".", 2)[-2] for source in sources] == ["q_proj", "k_proj", "v_proj"], sources


def test_a_refusal_under_inference_mode_names_the_hf_tensors(tmp_path: Path) -> None:
    """hf-to-mcore called under ``torch.inference_mode`` with gate and up of one expert in float16 (one megatron
    tensor, concatenated): the refusal names both and the bfloat16 ones they are stored with, not "error: are
    torch.float16 but are stored with  (torch.bfloat16)"."""
    card = get_card(CARDS[0])
    hf = random_hf_tensors(card, seed=_random_seed())
    layer, expert = int(torch.randint(0, card.num_layers, ())), int(torch.randint(0, card.num_experts, ()))
    odd = [f"model.layers.{layer}.mlp.experts.{expert}.{part}_proj.weight" for part in ("gate", "up")]
    hf.update({name: hf[name].half() for name in odd})
    write_hf(card, hf, tmp_path / "hf")
    with torch.inference_mode(), pytest.raises(ConversionError) as refusal:
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert str(refusal.value).startswith(f"{odd[0]!r} and {odd[1]!r} are torch.float16 but are stored with "
                                         "'model.layers."), refusal.value
