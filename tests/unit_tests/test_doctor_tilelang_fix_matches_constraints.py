"""The fix of the fla issue 640 error pins the same TileLang stack as the image (``docker/constraints.txt``)."""

from __future__ import annotations

import re
from pathlib import Path

from megatron.oellm.doctor.rules import FLA_TILELANG_FIX

CONSTRAINTS = Path(__file__).resolve().parents[2] / "docker" / "constraints.txt"
TILELANG_STACK = ("tilelang", "apache-tvm-ffi", "torch-c-dlpack-ext", "z3-solver")
"""TileLang and the requirements the image pins with it."""


def _pins(text: str) -> dict[str, str]:
    """``name -> version`` of the ``name==version`` requirements in ``text``, comments left out."""
    pins = {}
    for line in text.splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.split("#", 1)[0].strip())
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


def test_the_remedy_names_every_tilelang_pin_of_the_image():
    image = {name: version for name, version in _pins(CONSTRAINTS.read_text()).items() if name in TILELANG_STACK}
    assert sorted(image) == sorted(TILELANG_STACK), "docker/constraints.txt no longer pins the whole TileLang stack"
    remedy = _pins("\n".join(FLA_TILELANG_FIX.split()))
    assert {name: remedy.get(name) for name in TILELANG_STACK} == image
