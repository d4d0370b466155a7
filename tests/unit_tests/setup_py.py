"""What ``setup.py`` declares, read from its source with ``ast``: tests of the install script and the Dockerfile check
against the checkout under test, which need not be installed (a source tree on ``PYTHONPATH``, as on the lent GPU
machine) and whose installed copy, where there is one, may be another version."""

from __future__ import annotations

import ast
from pathlib import Path

SETUP_PY = Path(__file__).resolve().parents[2] / "setup.py"


def setup_keyword(name: str, setup_py: Path = SETUP_PY) -> object:
    """The literal value of the ``setup(...)`` keyword ``name`` in ``setup_py``; AssertionError where it is absent."""
    for node in ast.walk(ast.parse(setup_py.read_text())):
        if isinstance(node, ast.keyword) and node.arg == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{setup_py} passes no {name} to setup()")


def declared_extras(setup_py: Path = SETUP_PY) -> list[str]:
    """The extras ``setup_py`` declares (its ``extras_require`` keys), sorted."""
    return sorted(setup_keyword("extras_require", setup_py))
