"""``tools/install_needs.py`` keeps its own copy of the Triton range of fla issue 640 (it runs before megatron-oellm is
installed, so it cannot import the doctor's): the two must name the same releases."""

import importlib.util
from pathlib import Path

from packaging.version import Version

from megatron.oellm.doctor.rules import FLA_BAD_TRITON_FROM, FLA_FIXED_TRITON

TOOL = Path(__file__).resolve().parents[2] / "tools" / "install_needs.py"


def test_the_installers_triton_range_is_the_doctors() -> None:
    spec = importlib.util.spec_from_file_location("install_needs", TOOL)
    install_needs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(install_needs)
    assert tuple(Version(bound) for bound in install_needs.FLA_BAD_TRITON) == (FLA_BAD_TRITON_FROM, FLA_FIXED_TRITON)
