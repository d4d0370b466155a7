"""Every note in the top-level ``patches/`` has the headings its README promises, in order: **Problem.**, **Fix.**,
**Evidence.**, **Tests.** (a note of several findings: each finding its problem, fix and evidence, the tests at the
end). validate-args-bare-asserts.md had no evidence, fsdp-checkpoints-stacked-experts.md used other headings, and
several notes gave their evidence inline or named the fix "Fix here"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

NOTES = sorted(path for path in (Path(__file__).resolve().parents[3] / "patches").glob("*.md")
               if path.name != "README.md")
HEADINGS = ("Problem", "Fix", "Evidence", "Tests")
HEADING = re.compile(r"^\*\*([^*]+?)\.\*\*", re.M)


def _headings(note: Path) -> list[str]:
    """The bold paragraph headings of ``note`` (``**Name.**`` at a line's start), in order."""
    return HEADING.findall(note.read_text())


def test_there_are_notes() -> None:
    assert len(NOTES) > 20


@pytest.mark.parametrize("note", NOTES, ids=[note.name for note in NOTES])
def test_a_note_has_problem_fix_evidence_and_tests_in_order(note: Path) -> None:
    found = [name for name in _headings(note) if name in HEADINGS]
    assert found[-1] == "Tests", found
    findings = found[:-1]
    assert findings and len(findings) % 3 == 0, found
    for start in range(0, len(findings), 3):
        assert findings[start:start + 3] == ["Problem", "Fix", "Evidence"], found


@pytest.mark.parametrize("note", NOTES, ids=[note.name for note in NOTES])
def test_no_note_uses_a_variant_of_the_headings(note: Path) -> None:
    variants = [name for name in _headings(note)
                if name.split()[0] in (*HEADINGS, "Here", "Upstream") and name not in HEADINGS
                and name != "Upstream PR it should become"]
    assert variants == []
