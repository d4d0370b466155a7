"""A recipe wrapper run through a symbolic link to it (``ln -s .../qwen3_235b_a22b_jupiter_sweep.sh sw.sh``) looked
for its config, and put the checkout on ``PYTHONPATH``, beside the link instead of beside the script: "recipe config
.../qwen3_235b_a22b_jupiter_sweep.toml does not exist". The interpreter is a stand-in that prints what it got."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES

WRAPPERS = sorted(path for path in EXAMPLES.glob("*.sh") if path.with_suffix(".toml").is_file())


@pytest.mark.parametrize("wrapper", WRAPPERS, ids=lambda path: path.stem)
def test_a_linked_wrapper_runs_its_own_config_from_its_checkout(tmp_path, wrapper):
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\necho "$PYTHONPATH"\nfor arg in "$@"; do echo "$arg"; done\n')
    python.chmod(0o755)
    link = tmp_path / f"link{random.randrange(10**6)}" / random.choice(["sw.sh", wrapper.name])
    link.parent.mkdir()
    link.symlink_to(wrapper if random.random() < 0.5 else os.path.relpath(wrapper, link.parent))
    row = str(random.randint(1, 9))
    done = subprocess.run([shutil.which("bash"), str(link), "--row", row], env={**os.environ, "PYTHON": str(python)},
                          capture_output=True, text=True, check=True, cwd=tmp_path)
    pythonpath, *argv = done.stdout.splitlines()
    assert Path(pythonpath.split(":")[0]).resolve() == EXAMPLES.parent.parent.resolve()
    assert argv == ["-m", "megatron.oellm", "recipe", str(wrapper.with_suffix(".toml").resolve()), "--row", row]
