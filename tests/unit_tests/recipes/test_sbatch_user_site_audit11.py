"""The sbatch script keeps the user's site-packages off even in an image that sets ``PYTHONNOUSERSITE`` itself
(audit 11): Apptainer lets a host variable through only where the image sets none, so the job exports the setting
as ``APPTAINERENV_PYTHONNOUSERSITE`` too, which wins over the image's value."""

from __future__ import annotations

import os
import random
import sys
import sysconfig
from pathlib import Path

from test_sbatch_runs import _recipe, _run_job
from test_sbatch_user_site import TORCHRUN_USER_SITE

from megatron.oellm.recipes import resolve_row, sbatch_text

IMAGE_WITH_USER_SITE_ON = """#!/bin/bash
# Apptainer's environment rules in miniature, for an image built with `ENV PYTHONNOUSERSITE=` (user site on): the
# image's value replaces the host's, and every host APPTAINERENV_NAME becomes NAME over the image's value
shift  # exec
while [[ "$1" == --* ]]; do [[ "$1" == --bind ]] && shift; shift; done
shift  # the image
export PYTHONNOUSERSITE=
while IFS='=' read -r name value; do export "${name#APPTAINERENV_}=$value"; done < <(env | grep '^APPTAINERENV_')
exec "$@"
"""


def test_the_users_site_packages_stay_off_in_an_image_that_turns_them_on(tmp_path):
    (tmp_path / "image.sif").touch()
    module = f"oellm_user_probe_{random.randint(0, 10**6)}"
    user_base = tmp_path / "home" / ".local"
    user_site = Path(sysconfig.get_path("purelib", f"{os.name}_user", vars={"userbase": str(user_base)}))
    user_site.mkdir(parents=True)
    (user_site / f"{module}.py").write_text("SHADOWS_THE_IMAGE = True\n")
    recipe = _recipe(image=str(tmp_path / "image.sif"), env={})
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    status, record = _run_job(script, tmp_path, tmp_path, 2, torchrun=TORCHRUN_USER_SITE.format(module=module),
                              env={"PYTHONUSERBASE": str(user_base), "OELLM_PYTHON": sys.executable},
                              runtimes={"apptainer": IMAGE_WITH_USER_SITE_ON})
    assert status == 0, (tmp_path / "stderr").read_text()
    assert record == ["user module False"]
