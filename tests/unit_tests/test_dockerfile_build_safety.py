"""The Dockerfile's TileLang step, run with stand-ins, and the build settings the Jupiter image needs.

The TileLang step read any Python error in its Triton check (a triton that does not import) as "Triton is new enough"
and skipped TileLang, never checked that the TileLang it installed imports, and let pip fall back to source builds of
TileLang (which builds TVM) and its pinned requirements; the Jupiter build commands left HybridEP single-node although
every Jupiter recipe row's expert-parallel group spans nodes.
"""

from __future__ import annotations

import os
import random
import re
import string
import subprocess
import sys
from pathlib import Path

import pytest

import megatron.oellm

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
WHEEL_ONLY = {"tilelang", "apache-tvm-ffi", "z3-solver", "torch-c-dlpack-ext"}
"""Pinned packages whose source builds take hours or need toolchains the base may lack: wheels only."""


def _tilelang_run() -> str:
    """The shell command of the Dockerfile's ``RUN`` that installs TileLang, continuation lines joined as Docker
    joins them."""
    commands = re.findall(r"^RUN (.*?[^\\])\n", DOCKERFILE.replace("\\\n", ""), re.M)
    (command,) = [command for command in commands if "tilelang==" in command]
    return command


def _word() -> str:
    """A fresh lowercase word: markers that only this run can have printed."""
    return "".join(random.choices(string.ascii_lowercase, k=10))


def _run_tilelang_step(tmp_path: Path, triton_init: str, tilelang_init: str | None) -> tuple[subprocess.CompletedProcess,
                                                                                              str]:
    """Run the TileLang step with a stand-in ``triton`` (``triton_init`` as its ``__init__.py``), a stand-in
    ``tilelang`` (``tilelang_init``; None: not installed) and a ``pip`` that logs its arguments and
    ``PIP_ONLY_BINARY``; the completed process and pip's log."""
    bin_dir, site = tmp_path / "bin", tmp_path / "site"
    bin_dir.mkdir()
    (site / "triton").mkdir(parents=True)
    (site / "triton" / "__init__.py").write_text(triton_init)
    if tilelang_init is not None:
        (site / "tilelang").mkdir()
        (site / "tilelang" / "__init__.py").write_text(tilelang_init)
    (bin_dir / "python").symlink_to(sys.executable)
    log = tmp_path / "pip.log"
    (bin_dir / "pip").write_text(f'#!/bin/sh\necho "pip $* only-binary=$PIP_ONLY_BINARY" >> "{log}"\n')
    (bin_dir / "pip").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "PYTHONPATH": str(site)}
    done = subprocess.run(["bash", "-o", "pipefail", "-c", _tilelang_run()], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    return done, log.read_text() if log.exists() else ""


def test_a_triton_that_does_not_import_fails_the_build(tmp_path: Path):
    """A broken triton was read as "Triton >= 3.7.1" and the image came without TileLang; now the build stops."""
    marker = _word()
    done, pip_log = _run_tilelang_step(tmp_path, f"raise ImportError('libtriton {marker}')\n", None)
    assert done.returncode != 0 and marker in done.stderr, done.stderr
    assert pip_log == ""


@pytest.mark.parametrize("tilelang_imports", [True, False])
def test_tilelang_is_installed_from_wheels_and_must_import(tmp_path: Path, tilelang_imports: bool):
    """Triton older than 3.7.1: TileLang is installed with its pinned requirements as wheels only, and a TileLang
    that does not import afterwards fails the build instead of passing into the image."""
    version = f"3.{random.randint(4, 6)}.{random.randint(0, 9)}"
    marker = _word()
    tilelang = f"VERSION = '{marker}'\n" if tilelang_imports else f"raise OSError('libz3.so.4.15: {marker}')\n"
    done, pip_log = _run_tilelang_step(tmp_path, f"__version__ = '{version}'\n", tilelang)
    assert "tilelang==" in pip_log
    only_binary = pip_log.rsplit("only-binary=", 1)[1].strip()
    assert set(only_binary.split(",")) == WHEEL_ONLY
    if tilelang_imports:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode != 0 and marker in done.stderr, done.stderr


def test_a_new_enough_triton_installs_nothing(tmp_path: Path):
    version = f"3.{random.randint(8, 20)}.{random.randint(0, 9)}"
    done, pip_log = _run_tilelang_step(tmp_path, f"__version__ = '{version}'\n", None)
    assert done.returncode == 0, done.stderr
    assert pip_log == ""


def test_only_the_tilelang_step_is_wheel_only():
    """megatron-core and fla build from source where no wheel fits: the wheel-only list stays on the TileLang step."""
    assert DOCKERFILE.count("PIP_ONLY_BINARY") == 1 and "--only-binary" not in DOCKERFILE
    assert "PIP_ONLY_BINARY" in _tilelang_run()


def _stage(name: str) -> str:
    """The text of Dockerfile stage ``name``, up to the next ``FROM``."""
    return re.search(rf"^FROM \S+ AS {name}\n(.*?)(?=^FROM |\Z)", DOCKERFILE, re.M | re.S).group(1)


def test_the_hybridep_image_records_its_multinode_setting():
    """Whether DeepEP was built for HybridEP between nodes could not be read from an image; the hybridep stage now
    records the build argument as a label and as the variable ``oellm doctor`` reads."""
    stage = _stage("hybridep-build")
    argument = stage.index("ARG HYBRID_EP_MULTINODE=0")
    label = stage.index('LABEL org.openeurollm.hybrid-ep-multinode="${HYBRID_EP_MULTINODE}"')
    env = stage.index("ENV OELLM_HYBRID_EP_MULTINODE=${HYBRID_EP_MULTINODE}")
    assert argument < label and argument < env < stage.index("RUN ")
    assert "OELLM_HYBRID_EP_MULTINODE" not in "".join(map(_stage, ("base", "deepep-build", "deepep", "hybridep",
                                                                   "oellm")))


def test_the_jupiter_build_commands_build_hybrid_ep_for_several_nodes():
    """Every Jupiter recipe row's HybridEP group spans nodes, so the documented Jupiter builds pass
    ``HYBRID_EP_MULTINODE=1``; the MareNostrum 5 ones (groups within a node) keep the default."""
    version = megatron.oellm.__version__
    docs = (ROOT / "docs" / "container.md").read_text()
    for text in (DOCKERFILE, docs):
        joined = re.sub(r"\\\n#?\s*", " ", text)  # shell continuations, in comments too
        jupiter = re.findall(rf"docker buildx build [^\n]*-t megatron-oellm:{re.escape(version)}-hybridep-arm64[^\n]*",
                             joined)
        assert jupiter and all("--build-arg HYBRID_EP_MULTINODE=1" in command for command in jupiter), jupiter
        mn5 = re.findall(rf"docker build -t megatron-oellm:{re.escape(version)}-hybridep [^\n]*", joined)
        assert mn5 and not any("HYBRID_EP_MULTINODE" in command for command in mn5), mn5


def test_the_container_docs_tell_how_to_submit_and_where_kernels_are_cached():
    """The login node needs torch and megatron-core for ``--dry-run`` / ``--submit``; the JIT caches default to the
    home folder that every rank shares, and a recipe's ``[cluster.env]`` moves them per job."""
    docs = (ROOT / "docs" / "container.md").read_text()
    assert "## Submitting from the login node" in docs and "bash tools/install.sh dev,hf" in docs
    caches = docs[docs.index("## Kernel caches"):]
    for variable in ("TRITON_CACHE_DIR", "TILELANG_CACHE_DIR", "HYBRID_EP_CACHE_DIR"):
        assert re.search(rf'^{variable} = "\$TMPDIR/', caches, re.M), variable
