"""The sixteenth mutation audit's tests of which recipe config paths are open streams (no name of their own, no
folder for a relative ``extends``): the whole path as given must be one, ``/proc/thread-self/fd/N`` included, so a
file whose path only begins or ends like one (``/dev/stdin.toml``, ``configs/dev/fd/3``) keeps its name."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.recipes.toml_loading import is_open_stream


def test_every_form_of_an_open_stream_is_one() -> None:
    fd, pid = random.randrange(3, 1000), random.randrange(2, 10**6)
    for form in ("/dev/stdin", f"/dev/fd/{fd}", f"/proc/self/fd/{fd}", f"/proc/thread-self/fd/{fd}",
                 f"/proc/{pid}/fd/{fd}", f"//dev/fd/{fd}"):
        assert is_open_stream(Path(form)), form


@pytest.mark.parametrize("path", ["/dev/stdin.toml", "/dev/stdin/x.toml", "/dev/fd/{fd}.toml", "/dev/fd/{fd}/x.toml",
                                  "configs/dev/stdin", "/home/user/dev/fd/{fd}", "/tmp/proc/self/fd/{fd}",
                                  "dev/stdin", "/proc/self/fd/{fd}x", "/proc/other/fd/{fd}"])
def test_a_path_that_only_holds_the_form_of_one_is_no_open_stream(path: str) -> None:
    given = Path(path.format(fd=random.randrange(3, 1000)))
    assert not is_open_stream(given), given
