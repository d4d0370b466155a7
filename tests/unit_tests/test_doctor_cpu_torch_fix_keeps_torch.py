"""``oellm doctor``'s fix for a CPU build of torch on a GPU node must not leave the node without torch.

It said ``pip uninstall torch, then bash tools/install.sh on a GPU node``: on an air-gapped GPU node install.sh cannot
download a torch, so the environment was left with none (the README said the same).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from megatron.oellm.doctor.rules import check_gpus
from tests.unit_tests.doctor_reports import make_report

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_cpu_torch_fix_installs_the_cuda_build_from_a_login_node_and_never_uninstalls_first():
    release = f"2.{random.randint(6, 13)}.{random.randint(0, 3)}"
    report = make_report(gpus=(), cuda_version=None, nccl_version=None, versions={"torch": f"{release}+cpu"})
    env = {"SLURM_JOB_ID": str(random.randint(10**5, 10**8)), "SLURM_JOB_GPUS": "0,1"}
    (finding,) = check_gpus(report, env)
    assert finding.severity == "error"
    assert "pip uninstall torch, then" not in finding.fix
    assert f"pip install 'torch=={release}+cuXYZ' --index-url https://download.pytorch.org/whl/cuXYZ" in finding.fix
    assert "login node with internet" in finding.fix and "TORCH_INDEX_URL" in finding.fix
    assert "container's torch" in finding.fix and "Do not pip uninstall torch" in finding.fix


def test_the_readme_passage_no_longer_says_to_uninstall_torch_first():
    text = README.read_text()
    start = text.index("A venv made on a GPU-less login node holds the CPU build of torch.")
    passage = text[start:text.index("\n\n", start)]
    assert not re.search(r"pip uninstall torch`?, then", passage), passage
    assert "TORCH_INDEX_URL" in passage and "login node" in passage
