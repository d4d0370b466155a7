"""``tools/install.sh`` where pip fails or torch does not import, against the stand-ins of test_install_script.

A failing pip got one line naming the offline site bundle whatever pip said: also for ``No module named pip`` and
for a distribution's Python that refuses pip installs (PEP 668); that line now follows what pip's messages name. A
torch that is installed but does not import (a CUDA build on a login node without its cuDNN) read as missing, and
pip installed another over it without saying why; it is now refused, quoting the import's error, and nothing is
installed.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.unit_tests.fake_site import add_distribution
from tests.unit_tests.install_helpers import run_install

OFFLINE = 'use the offline site bundle instead (README.md, "Air-gapped nodes")'
VENV = "python3 -m venv .venv && . .venv/bin/activate"
OWN = "pip install failed: pip's message above says why"


def _offline(tag: int) -> str:
    """pip's messages where no package index answers: retries of a refused connection, then no version found."""
    return (f"WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError(<conn {tag}>: "
            "Failed to establish a new connection: [Errno 101] Network is unreachable')': /simple/torch/\n"
            "ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu (from versions: none)")


def _pep668(tag: int) -> str:
    """pip's refusal on Debian's /usr/bin/python3 (its EXTERNALLY-MANAGED file)."""
    return ("error: externally-managed-environment\n\n× This environment is externally managed\n"
            f"╰─> To install Python packages system-wide, try apt install python3-xyz ({tag})")


def _no_pip(tag: int) -> str:
    """A Python without pip (Debian's without python3-pip)."""
    return f"/usr/bin/python3.{tag}: No module named pip"


@pytest.mark.parametrize(("failure", "fix", "others"), [
    (_offline, OFFLINE, (VENV, OWN)), (_pep668, VENV, (OFFLINE, OWN)), (_no_pip, OWN, (OFFLINE, VENV))])
def test_a_failing_pip_gets_the_line_its_messages_call_for(tmp_path: Path, failure, fix: str,
                                                           others: tuple[str, str]) -> None:
    """A CPU machine without torch: pip's messages, then one ``error:`` line with the fix they call for."""
    messages = failure(random.randrange(10**6))
    done, calls = run_install(tmp_path, FAKE_PIP_FAILURE=messages)
    assert done.returncode == 1 and len(calls) == 2
    last = done.stderr.splitlines()[-1]
    assert done.stderr.endswith(f"{messages}\n{last}\n"), done.stderr
    assert last.startswith("error: install.sh: pip install failed") and fix in last, done.stderr
    assert not any(other in done.stderr for other in others), done.stderr


@pytest.mark.parametrize("driver", ["", "590.48.01"])
def test_an_installed_torch_that_does_not_import_is_refused_as_it_is(tmp_path: Path, driver: str) -> None:
    """Without a GPU pip installed the CPU build over it, on a GPU node the CUDA build; now one line quotes the
    import's error and pip is not called."""
    error = f"libcudnn.so.{random.randint(8, 99)}: cannot open shared object file: No such file or directory"
    site = tmp_path / "pre"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(f"raise ImportError({error!r})\n")
    add_distribution(site, "torch", f"2.{random.randint(5, 13)}.0")
    done, calls = run_install(tmp_path, triton=True, driver=driver, extra_site=site, FAKE_TORCH_CUDA="'13.0'")
    assert done.returncode == 1 and calls == [], done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: install.sh: ") and f"(ImportError: {error})" in line, line
    assert (tmp_path / "site" / "torch" / "__init__.py").read_text() == f"raise ImportError({error!r})\n"


def test_a_torch_module_without_its_distribution_still_counts_as_missing(tmp_path: Path) -> None:
    """A folder named torch that importlib.metadata does not know (no torch installed): install.sh installs one."""
    site = tmp_path / "pre"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("raise ImportError('partial')\n")
    done, calls = run_install(tmp_path, triton=True, extra_site=site)
    assert done.returncode == 0, done.stderr
    assert any("torch==2.13.0+cpu" in call for call in calls)


def test_pips_messages_reach_stderr_while_pip_runs(tmp_path: Path) -> None:
    """pip's messages (a long download, index retries) are shown as they come, not once pip ends: the stand-in pip
    waits for its message to reach install.sh's stderr before it fails, and they are read for the cause after."""
    tag, stderr = f"{random.randrange(10**9)}", tmp_path / "stderr.txt"
    verdict = tmp_path / "verdict"
    done, _calls = run_install(tmp_path, stderr_file=stderr, FAKE_PIP_LIVE_TAG=tag, FAKE_PIP_VERDICT=str(verdict))
    assert done.returncode == 1
    assert verdict.read_text() == "live\n", stderr.read_text()
    lines = stderr.read_text().splitlines()
    assert lines[-2:] == [f"pip message {tag}", f"error: install.sh: {OWN}"], lines
