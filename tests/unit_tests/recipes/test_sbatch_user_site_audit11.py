"""The sbatch script keeps the user's site-packages off even in an image that sets ``PYTHONNOUSERSITE`` itself
(audit 11): Apptainer lets a host variable through only where the image sets none, so the job exports the setting
as ``APPTAINERENV_PYTHONNOUSERSITE`` too, which wins over the image's value."""

from __future__ import annotations

from sbatch_job_helpers import user_site_job

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
    """The image's empty ``PYTHONNOUSERSITE`` (user site on) loses to the job's ``APPTAINERENV_`` copy."""
    assert user_site_job(tmp_path, {}, IMAGE_WITH_USER_SITE_ON) == ["user module False"]
