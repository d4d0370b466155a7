"""Each test helper module (a non-test, non-conftest ``.py`` file under ``tests/unit_tests/``) is imported one way
only, so that it is loaded once (two names would run it twice, with two copies of its state): by bare name within
``recipes/`` and ``backends/`` (pytest's rootdir import mode puts a test file's own folder on the path), otherwise as
``tests.unit_tests.<folder>.<module>`` (``pytest.ini`` puts the repository root on the path), as docs/architecture.md
says. Three training tests imported ``entry_helpers`` by bare name beside 64 that import it dotted, and a command
test imported ``recipe_helpers`` dotted beside 46 recipe tests that import it by bare name.

No file imports a test module (``test_*.py``): what tests share lives in helper modules. pytest loads a test module
under its bare name, so a dotted import loaded it a second time, and a test function imported by name would be
collected again in the importing module. About twenty tests imported fixtures, constants and helpers from other test
modules, against docs/architecture.md's rule."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

UNIT_TESTS = Path(__file__).resolve().parent
BARE_NAME_FOLDERS = ("recipes", "backends")
"""Folders whose helper modules their own tests import by bare name."""


def helper_modules(unit_tests: Path) -> dict[str, Path]:
    """Every helper module under ``unit_tests`` by its bare name (names are unique: pytest's rootdir import mode
    would clash otherwise)."""
    return {path.stem: path for path in unit_tests.rglob("*.py")
            if not path.name.startswith("test_") and path.name != "conftest.py"}


def expected_import(helper: Path, unit_tests: Path) -> str:
    """The one name ``helper`` is imported by: its bare name in a :data:`BARE_NAME_FOLDERS` folder, else its dotted
    name from the repository root (two levels above ``unit_tests``)."""
    folder = helper.parent.relative_to(unit_tests)
    if folder.parts and folder.parts[0] in BARE_NAME_FOLDERS:
        return helper.stem
    return ".".join(helper.relative_to(unit_tests.parents[1]).with_suffix("").parts)


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module name) of each absolute import in ``path``, ``from package import module`` named by both the
    package and ``package.module`` (which of them is a module the caller decides)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)


def helper_import_problems(unit_tests: Path) -> list[str]:
    """``file:line: imports helper as X, not Y`` for each import, in a file under ``unit_tests``, of a helper module
    by another name than :func:`expected_import`'s, or by bare name from outside the helper's own folder (where it
    resolves only when another test put that folder on the path first)."""
    helpers = helper_modules(unit_tests)
    problems = []
    for path in sorted(unit_tests.rglob("*.py")):
        for line, module in imported_modules(path):
            stem = module.rsplit(".", 1)[-1]
            helper = helpers.get(stem)
            if helper is None or not (module == stem or module.startswith("tests.")):
                continue
            expected = expected_import(helper, unit_tests)
            where = f"{path.relative_to(unit_tests.parents[1])}:{line}"
            if module != expected:
                problems.append(f"{where}: imports {helper.name} as {module}, not {expected}")
            elif module == stem and path.parent != helper.parent:
                problems.append(f"{where}: imports {helper.name} by bare name from outside {helper.parent.name}/")
    return problems


def imports_of_test_modules(unit_tests: Path) -> list[str]:
    """``file:line: imports test module X`` for each import, in a file under ``unit_tests``, of a test module there
    (by bare name or dotted; ``from package import test_module`` too)."""
    test_modules = {path.stem: path for path in unit_tests.rglob("test_*.py")}
    problems = []
    for path in sorted(unit_tests.rglob("*.py")):
        for line, module in imported_modules(path):
            stem = module.rsplit(".", 1)[-1]
            if stem in test_modules and (module == stem or module.startswith("tests.")):
                imported = test_modules[stem].relative_to(unit_tests.parents[1])
                problems.append(f"{path.relative_to(unit_tests.parents[1])}:{line}: imports test module {imported}")
    return problems


def test_each_helper_module_is_imported_one_way_only():
    problems = helper_import_problems(UNIT_TESTS)
    assert not problems, "\n".join(problems)


def test_the_check_sees_each_way_of_importing_a_helper_wrongly(tmp_path):
    """The check itself: a bare import of a dotted helper, a dotted import of a bare-name helper and a bare import
    from another folder are each reported; the right imports are not."""
    unit = tmp_path / "tests" / "unit_tests"
    for folder in ("recipes", "training", "commands"):
        (unit / folder).mkdir(parents=True)
    (unit / "recipes" / "recipe_kit.py").write_text("")
    (unit / "training" / "entry_kit.py").write_text("")
    (unit / "recipes" / "test_right.py").write_text("from recipe_kit import x\n")
    (unit / "training" / "test_right.py").write_text("from tests.unit_tests.training.entry_kit import x\n")
    (unit / "training" / "test_bare.py").write_text("from entry_kit import x\n")
    (unit / "commands" / "test_dotted.py").write_text("import tests.unit_tests.recipes.recipe_kit\n")
    (unit / "commands" / "test_elsewhere.py").write_text("from recipe_kit import x\n")
    assert helper_import_problems(unit) == [
        "tests/unit_tests/commands/test_dotted.py:1: imports recipe_kit.py as tests.unit_tests.recipes.recipe_kit, "
        "not recipe_kit",
        "tests/unit_tests/commands/test_elsewhere.py:1: imports recipe_kit.py by bare name from outside recipes/",
        "tests/unit_tests/training/test_bare.py:1: imports entry_kit.py as entry_kit, not "
        "tests.unit_tests.training.entry_kit",
    ]


def test_no_file_imports_a_test_module():
    problems = imports_of_test_modules(UNIT_TESTS)
    assert not problems, "\n".join(problems)


def test_the_check_sees_each_way_of_importing_a_test_module(tmp_path):
    """The check itself: a bare, a dotted and a ``from package import`` import of a test module are each reported;
    imports of a helper module, and of a name that only starts with ``test_``, are not."""
    unit = tmp_path / "tests" / "unit_tests"
    (unit / "training").mkdir(parents=True)
    (unit / "test_top.py").write_text("")
    (unit / "training" / "test_entry.py").write_text("")
    (unit / "training" / "entry_kit.py").write_text("from tests.unit_tests.training.entry_kit import test_value\n")
    (unit / "test_bare.py").write_text("from test_top import x\n")
    (unit / "training" / "test_dotted.py").write_text("import tests.unit_tests.test_top\n"
                                                     "from tests.unit_tests.training.test_entry import x\n")
    (unit / "training" / "test_package.py").write_text("from tests.unit_tests.training import test_entry\n")
    assert imports_of_test_modules(unit) == [
        "tests/unit_tests/test_bare.py:1: imports test module tests/unit_tests/test_top.py",
        "tests/unit_tests/training/test_dotted.py:1: imports test module tests/unit_tests/test_top.py",
        "tests/unit_tests/training/test_dotted.py:2: imports test module tests/unit_tests/training/test_entry.py",
        "tests/unit_tests/training/test_package.py:1: imports test module tests/unit_tests/training/test_entry.py",
    ]
