"""An HF checkpoint holding ``model.layers.N.self_attn.rotary_emb.inv_freq`` (a buffer older transformers releases
saved, which transformers recomputes from the config) converts, the buffers counted as skipped: it was refused as an
unexpected tensor with "is --model the right card?"."""

from __future__ import annotations

import random

import pytest
import torch

from megatron.oellm.cli import main
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, write_hf


def _buffers(card, seed: int) -> dict[str, torch.Tensor]:
    """Fresh random ``inv_freq`` buffers for some of ``card``'s attention layers."""
    generator = torch.Generator().manual_seed(seed)
    layers = random.Random(seed).sample(range(card.num_layers), random.Random(seed).randint(1, card.num_layers))
    return {f"model.layers.{layer}.self_attn.rotary_emb.inv_freq":
            torch.rand(card.kv_channels // 2, generator=generator) + 0.1 for layer in sorted(layers)}


def test_rope_buffers_are_skipped_and_the_weights_round_trip(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    buffers = _buffers(card, random.randrange(2**31))
    write_hf(card, {**hf, **buffers}, tmp / "hf")
    summary = hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    assert summary.skipped == sorted(buffers)
    assert summary.tensors_read == len(hf)
    mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp / "out")))


def test_the_summary_counts_the_skipped_buffers(tiny_hf, capsys: pytest.CaptureFixture) -> None:
    card, hf, tmp = tiny_hf
    buffers = _buffers(card, random.randrange(2**31))
    write_hf(card, {**hf, **buffers}, tmp / "hf")
    assert main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"),
                 "--out", str(tmp / "mcore")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"  skipped {len(buffers)} rotary_emb.inv_freq buffers (e.g. {min(buffers)}): RoPE frequencies derived " \
           "from the config, which transformers recomputes when loading; not weights" in lines, lines
