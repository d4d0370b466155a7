"""Qwen3.5's GDN output-norm gain: transformers stores the gain ``w``, megatron-core the zero-centred ``w - 1``. In
bf16 the shift rounds wherever ``w - 1`` needs more bits than ``w`` has (``w`` below 0.5); the conversion still
runs, and says where, as one ``warning:`` line per tensor rather than a Python warning with its source line."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from megatron.oellm.cards import get_card
from megatron.oellm.cli import main
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf

QWEN35 = "qwen3.5-35b-a3b-tiny"


@pytest.mark.filterwarnings("default::UserWarning")  # pytest.ini ignores them; a user's Python shows them
def test_a_gain_the_shift_rounds_is_one_warning_line_naming_the_tensor(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """A gain below 0.5 with its lowest mantissa bit set (``0.25 + 2**-9`` in bf16): its zero-centred form
    ``-0.75 + 2**-9`` needs a bit bf16 lacks near 0.75, so it rounds. The converter warns once for that tensor, names
    it and the count, and the other layers' gains (around 1) convert silently; on the way back exactly the rounded
    elements differ."""
    card = get_card(QWEN35)
    hf = random_hf_tensors(card, seed=random.randrange(10**6))
    name = next(key for key in hf if key.endswith("linear_attn.norm.weight"))
    gain = hf[name].clone()
    rounded = random.sample(range(gain.numel()), k=random.randint(1, gain.numel()))
    gain[rounded] = torch.tensor(0.25 + 2**-9, dtype=torch.bfloat16)
    hf[name] = gain
    write_hf(card, hf, tmp_path / "hf")
    assert main(["convert", "hf-to-mcore", "--model", QWEN35, "--hf", str(tmp_path / "hf"), "--out",
                 str(tmp_path / "mcore")]) == 0
    err = capsys.readouterr().err
    assert err == (f"oellm convert hf-to-mcore: warning: {name}: adding -1 is not exactly invertible for "
                   f"{len(rounded)} of {gain.numel()} elements in torch.bfloat16 (each changed by up to 0.00195); "
                   "the converted model's norm gains differ there from the checkpoint's, and so will a round trip\n")
    assert main(["convert", "mcore-to-hf", "--model", QWEN35, "--mcore", str(tmp_path / "mcore"), "--out",
                 str(tmp_path / "back")]) == 0
    back = {key: value for path in sorted((tmp_path / "back").glob("*.safetensors")) for key, value in
            load_file(path).items()}
    differ = (back[name] != hf[name]).nonzero().flatten().tolist()
    assert sorted(differ) == sorted(rounded)
    assert all(torch.equal(back[key], hf[key]) for key in hf if key != name)
