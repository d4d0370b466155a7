"""``--help`` of every shell script prints its whole header comment. The scripts printed fixed line ranges of
themselves (``sed -n '2,20p'``), which drifted as headers grew: ``tools/te_cpu_env.sh --help`` stopped mid-sentence.
Now each prints its leading comment block, however long."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["tools/build_site_bundle.sh", "tools/gpu_acceptance.sh", "tools/install.sh", "tools/te_cpu_env.sh",
           "tools/te_site_bundle.sh", "tools/test.sh", "examples/oellm/main.sh"]


def header(script: Path) -> str:
    """The comment lines after the shebang, up to the first line that is not one, which must be the script's ``set``
    line: a blank line or a command inside the header would otherwise cut ``--help`` (and this test's expectation
    with it) short."""
    lines = script.read_text().splitlines()[1:]
    end = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    assert lines[end].startswith("set -"), f"{script.name}: the header ends at line {end + 2}: {lines[end]!r}"
    return "\n".join(lines[:end]) + "\n"


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_prints_the_whole_header(tmp_path: Path, name: str) -> None:
    done = subprocess.run(["bash", str(ROOT / name), "--help"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    expected = header(ROOT / name)
    assert expected.count("\n") >= 4
    assert done.stdout.startswith(expected), done.stdout
    rest = done.stdout[len(expected):]
    assert rest == "" or (name == "tools/test.sh" and rest.startswith("  (other arguments go to pytest")), rest
    assert not any(tmp_path.iterdir())


def test_every_script_that_answers_help_is_checked() -> None:
    answering = sorted(str(path.relative_to(ROOT)) for path in [*ROOT.glob("tools/*.sh"), ROOT / "examples/oellm/main.sh"]
                       if "--help" in path.read_text())
    assert answering == sorted(SCRIPTS)
