"""``mcore-to-hf --mcore`` given the staging folder a stopped conversion left (``.NAME.partial-PID``, or a folder in
it) says so and that it can be removed: it said "not a megatron-core distributed checkpoint (no .metadata)"."""

from __future__ import annotations

import random
import shutil

import pytest

from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.mcore_checkpoint import RELEASE
from megatron.oellm.convert.output import staging_directory
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint


@pytest.mark.parametrize("inside", ["", RELEASE])
def test_a_partial_output_is_named_as_such(converted, inside: str) -> None:
    card, _, tmp = converted
    target = tmp / f"ckpt{random.randrange(10**6)}"
    partial = staging_directory(target).with_name(f".{target.name}.partial-{random.randrange(10**5, 10**6)}")
    shutil.copytree(tmp / "mcore", partial)
    (partial / RELEASE / ".metadata").unlink()  # killed before DCP wrote its metadata
    given = partial / inside if inside else partial
    with pytest.raises(ConversionError, match=rf"^--mcore {given} is the partial output of a conversion into "
                                              rf"{target} that was stopped \(or is still running, as process "
                                              rf"{partial.name.rsplit('-', 1)[1]}\), not a checkpoint; remove "
                                              rf"{partial} unless"):
        mcore_to_hf_checkpoint(card, given, tmp / "out")
    assert not (tmp / "out").exists()
