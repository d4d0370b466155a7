"""``tools/install.sh``'s warning that it re-points another checkout's editable megatron-oellm comes right before the
``pip install -e`` that does it, in the present tense. It came before the torch checks, saying the install "was"
re-pointed, also where install.sh then refused (a CPU torch on a GPU node) or a pip call before it failed, and so
changed nothing. Same stand-ins as test_install_script (pip only records its arguments, or fails)."""

from __future__ import annotations

import random
from pathlib import Path

from tests.unit_tests.fake_site import base_versions, other_checkout_site
from tests.unit_tests.install_helpers import run_install


def test_a_refused_install_warns_of_no_re_pointing(tmp_path: Path) -> None:
    """A CPU torch on a GPU node: install.sh refuses before any pip call."""
    overlay, other = other_checkout_site(tmp_path)
    done, calls = run_install(tmp_path, torch="None", triton=True, driver=f"{random.randint(580, 600)}.65.06",
                              installed=base_versions(), extra_site=overlay)
    assert done.returncode == 1 and calls == []
    assert "CPU build" in done.stderr
    assert "re-point" not in done.stderr and str(other) not in done.stderr


def test_a_failing_pip_call_before_it_warns_of_no_re_pointing(tmp_path: Path) -> None:
    """megatron-core missing, no package index: its pip call fails first, and nothing is re-pointed."""
    overlay, other = other_checkout_site(tmp_path)
    installed = {name: version for name, version in base_versions().items() if name != "megatron-core"}
    failure = f"ERROR: No matching distribution found ({random.randrange(10**6)})"
    done, calls = run_install(tmp_path, torch="None", triton=True, installed=installed, extra_site=overlay,
                              FAKE_PIP_FAILURE=failure)
    assert done.returncode == 1 and len(calls) == 1 and "-e" not in calls[0]
    assert "re-point" not in done.stderr and str(other) not in done.stderr


def test_the_warning_comes_right_before_the_pip_call_that_re_points(tmp_path: Path) -> None:
    """pip fails on ``-e``, its only call here: the warning is printed before pip's error."""
    overlay, other = other_checkout_site(tmp_path)
    failure = f"ERROR: could not build the editable wheel ({random.randrange(10**6)})"
    done, calls = run_install(tmp_path, torch="None", triton=True, installed=base_versions(), extra_site=overlay,
                              FAKE_PIP_FAILURE=failure)
    assert done.returncode == 1 and len(calls) == 1 and "-e" in calls[0]
    lines = done.stderr.splitlines()
    [warning] = [index for index, line in enumerate(lines) if "re-pointing" in line]
    assert lines[warning].startswith("warning: install.sh: re-pointing") and str(other) in lines[warning]
    assert lines.index(failure) == warning + 1
