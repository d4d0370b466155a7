"""The process environment put back after code that writes to ``os.environ`` directly (see ``conftest.py``)."""

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def environment_restored() -> Iterator[None]:
    """Within the block, ``os.environ`` may change in any way; on leaving it, even by an exception, every variable has
    its value from the block's start again, those set inside are gone and those removed inside are back."""
    found = dict(os.environ)
    try:
        yield
    finally:
        if dict(os.environ) != found:
            os.environ.clear()
            os.environ.update(found)
