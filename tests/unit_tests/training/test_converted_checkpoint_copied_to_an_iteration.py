"""``oellm convert hf-to-mcore`` writes its checkpoint as ``release`` (the tracker names ``release``), which megatron
loads as iteration 0 without optimizer or RNG state; the checks that exempt or refuse a converted checkpoint
(:func:`~megatron.oellm.training.stored_checkpoint.converted_args`) take only that. The same files copied to an
iteration directory, with a tracker naming that iteration, are loaded by megatron as a resume of that iteration and
are not taken for a converted checkpoint."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from megatron.oellm.convert.mcore_checkpoint import ITERATION_FILE, RELEASE, iteration_directory_name
from megatron.oellm.training.stored_checkpoint import converted_args, read_stored_checkpoint
from tests.unit_tests.training.checkpoint_helpers import converted_random_checkpoint

CARD = "qwen3-30b-a3b-tiny"


def test_a_converted_release_copied_to_an_iteration_is_not_converted(tmp_path: Path) -> None:
    """The converter's ``release`` checkpoint is taken as converted; its copy as ``iter_N`` (tracker naming N) is
    not."""
    converted = converted_random_checkpoint(CARD, tmp_path)
    assert converted_args(read_stored_checkpoint(converted)) is not None
    step = random.randrange(1, 10**6)
    run = tmp_path / "run"
    shutil.copytree(converted / RELEASE, run / iteration_directory_name(step))
    (run / ITERATION_FILE).write_text(f"{step}\n")
    copied = read_stored_checkpoint(run)
    assert copied is not None and copied.directory.name == iteration_directory_name(step)
    assert converted_args(copied) is None
