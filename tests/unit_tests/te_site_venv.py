"""A stand-in virtual environment for ``tools/te_site_bundle.sh``, shared by the site-bundle tests."""

from __future__ import annotations

import random
import subprocess
import sys
import sysconfig
from pathlib import Path

PACKAGES = ["transformer_engine", "pydantic", "pydantic_core", "annotated_types", "typing_inspection",
            "nvdlfw_inspect", "cudnn"]
"""The packages the script packs, each faked as a folder with an ``__init__.py``."""
DISTRIBUTIONS = ["transformer_engine", "transformer_engine_cu13", "transformer_engine_torch", "pydantic",
                 "pydantic_core", "annotated_types", "typing_inspection", "nvdlfw_inspect", "nvidia_cudnn_frontend"]
"""The distributions the script packs, each faked as a ``.dist-info`` folder with its metadata."""


def fake_venv(root: Path) -> Path:
    """A virtual environment whose site-packages holds fake TE packages (the core library as 2.5 MB of random bytes,
    so that the bundle needs three 1 MiB parts); returns its site-packages folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    purelib = subprocess.run([str(root / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    site = Path(purelib)
    for package in PACKAGES:
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text(f"NAME = {package!r}\n")
    wheel_lib = site / "transformer_engine" / "wheel_lib"
    wheel_lib.mkdir()
    (wheel_lib / "libtransformer_engine.so").write_bytes(random.randbytes(2_500_000))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    (wheel_lib / f"transformer_engine_torch{suffix}").write_bytes(random.randbytes(1000))
    (site / "transformer_engine" / "__pycache__").mkdir()
    (site / "transformer_engine" / "__pycache__" / "stale.pyc").write_bytes(b"not packed")
    for distribution, version in [*((d, "2.20.2") for d in DISTRIBUTIONS), ("torch", "2.11.0")]:
        info = site / f"{distribution}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    return site
