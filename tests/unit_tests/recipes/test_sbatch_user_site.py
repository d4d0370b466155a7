"""The generated sbatch script keeps the user's own site-packages out of the container's Python: Apptainer mounts
``$HOME``, and ``~/.local/lib/pythonX.Y/site-packages`` comes before the image's site-packages, so a ``pip install
--user`` on the login node could replace the image's torch or Transformer Engine in every rank."""

from __future__ import annotations

import pytest
from sbatch_job_helpers import RUNTIME_ENVIRONMENT, user_site_job


@pytest.mark.parametrize("cluster_env, reachable", [({}, False), ({"PYTHONNOUSERSITE": ""}, True)])
def test_the_users_site_packages_stay_out_of_the_container_unless_the_recipe_lets_them_in(tmp_path, cluster_env,
                                                                                          reachable):
    """A module in the user's site-packages (here under PYTHONUSERBASE) is not importable by the job's Python; a
    recipe that sets ``PYTHONNOUSERSITE = ""`` in ``[cluster.env]`` gets it back (Python ignores an empty value)."""
    record = user_site_job(tmp_path, cluster_env, RUNTIME_ENVIRONMENT.format(prefix="APPTAINER"))
    assert record == [f"user module {reachable}"]
