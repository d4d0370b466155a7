"""A shard the user may not read (a shared HF cache downloaded with another user's umask) is named as such:
safetensors reports it as ``No such file or directory``, and the refusal asked whether the file was complete."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint


def test_a_shard_without_read_permission_is_named_as_one(converted, monkeypatch: pytest.MonkeyPatch) -> None:
    card, _, tmp = converted
    shards = sorted((tmp / "hf").glob("*.safetensors"))
    locked = random.choice(shards)
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: access(path, mode, **kw)
                        and not (Path(path) == locked and mode & os.R_OK))
    with pytest.raises(ConversionError) as refusal:
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "out")
    message = str(refusal.value)
    assert message.startswith(f"cannot read {locked}: no read permission"), message
    assert "re-download" not in message
