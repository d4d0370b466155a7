"""``oellm convert mcore-to-hf`` opens the checkpoint's ``.metadata`` once.

``CheckpointReader`` reads it at construction, yet DCP's loads of the common state and of each unit's tensors went
through torch's ``FileSystemReader``, which opened and unpickled it again every time (6 opens for
``qwen3-30b-a3b-tiny``, 8 for ``qwen3.5-35b-a3b-tiny``). They now take the metadata read (``GivenMetadataReader``).
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from megatron.oellm.cards import get_card
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from tests.unit_tests.training.checkpoint_helpers import converted_random_checkpoint, counted_metadata_opens


def test_a_conversion_to_hugging_face_opens_the_metadata_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    card = get_card(random.choice(["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"]))
    mcore = converted_random_checkpoint(card.name, tmp_path)
    opens = counted_metadata_opens(monkeypatch)
    mcore_to_hf_checkpoint(card, mcore, tmp_path / "back")
    assert opens == Counter({mcore / "release": 1})
    exported = {name: tensor for path in sorted((tmp_path / "back").glob("*.safetensors"))
                for name, tensor in load_file(path).items()}
    original = {name: tensor for path in sorted((tmp_path / "hf").glob("*.safetensors"))
                for name, tensor in load_file(path).items()}
    assert exported.keys() == original.keys()
    assert all(torch.equal(exported[name], original[name]) for name in original)
