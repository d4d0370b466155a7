"""``oellm doctor`` where torch does not import inside a Slurm job given GPUs: the gpus finding's fix is torch's.

It said to run the doctor inside a job on a compute node, which is where it already ran.
"""

from __future__ import annotations

import random

import pytest

from megatron.oellm.doctor.rules import check_gpus
from tests.unit_tests.doctor_reports import make_report


@pytest.mark.parametrize("torch_state", ["does not import", "not installed"])
def test_a_torch_that_does_not_import_in_a_gpu_job_points_at_torch(torch_state):
    changes = ({"torch_import_error": f"OSError: libcudnn.so.{random.randint(8, 9)}: cannot open shared object file"}
               if torch_state == "does not import" else {"versions": {"torch": None}})
    env = {"SLURM_JOB_ID": str(random.randint(10**5, 10**8)), "SLURM_JOB_GPUS": "0"}
    (finding,) = check_gpus(make_report(gpus=(), **changes), env)
    assert "inside a job on a compute node" not in finding.fix
    assert "make torch import" in finding.fix and "torch finding" in finding.fix


def test_a_login_node_with_a_working_torch_keeps_its_advice():
    (finding,) = check_gpus(make_report(gpus=(), cuda_version=None), {})
    assert finding.severity == "warning" and "inside a job on a compute node" in finding.fix
