"""The package's version follows its last release: ``__version__`` stayed 0.1.0, the version CHANGELOG.md gives its
release of 2026-11-30, through the Unreleased changes after it (a breaking CSV column rename among them), so a
build of current code claimed to be that release. It is a PEP 440 development release above the last one, and the
image tags and file names the Dockerfile, the docs and the recipes build from it are valid Docker tags."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.version import Version

import megatron.oellm

ROOT = Path(__file__).resolve().parents[2]
RELEASE_HEADING = re.compile(r"^## \[(\d[^\]]*)\] - \d{4}-\d{2}-\d{2}$", re.M)
DOCKER_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
"""A Docker image tag (the reference grammar's ``tag``)."""
VERSIONED_FILES = ("Dockerfile", "README.md", "docs/container.md", "examples/oellm/README.md",
                   "examples/oellm/_mn5.toml", "examples/oellm/_qwen3_235b_a22b_jupiter.toml")


def _changelog() -> str:
    return (ROOT / "CHANGELOG.md").read_text()


def test_the_version_is_a_development_release_after_the_last_one() -> None:
    version = Version(megatron.oellm.__version__)  # PEP 440, or InvalidVersion
    releases = [Version(text) for text in RELEASE_HEADING.findall(_changelog())]
    assert releases, "CHANGELOG.md names no release"
    assert version > max(releases)
    unreleased = _changelog().split("## [Unreleased]", 1)[1].split("\n## [", 1)[0]
    if unreleased.strip():
        assert version.is_prerelease, f"{version} is not marked as a development release of the Unreleased changes"


def test_image_tags_and_files_name_the_version_and_are_valid_tags() -> None:
    version = megatron.oellm.__version__
    tags, files = set(), set()
    for name in VERSIONED_FILES:
        text = (ROOT / name).read_text()
        tags.update(re.findall(r"megatron-oellm:(\d[^\s`\"'\\]*)", text))
        files.update(re.findall(r"megatron-oellm-([^\s`\"'\\]+?)\.(?:sif|tar)\b", text))
    assert tags and files
    assert [tag for tag in tags if not DOCKER_TAG.match(tag)] == []
    assert [tag for tag in tags | files if not (tag == version or tag.startswith(f"{version}-"))] == []
