"""docs/architecture.md's data-flow tree names every module of ``megatron/oellm/convert/`` (the README's layout says
so); ``tokenizer_files.py``, which checks and copies ``mcore-to-hf --tokenizer``'s files, was missing from it."""

from __future__ import annotations

from pathlib import Path

import megatron.oellm.convert

ROOT = Path(__file__).resolve().parents[3]


def test_every_convert_module_is_named_in_the_architecture_document() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    modules = sorted(path.name for path in Path(megatron.oellm.convert.__file__).parent.glob("*.py")
                     if path.name != "__init__.py")
    assert modules, "no modules found in megatron/oellm/convert/"
    assert [name for name in modules if name not in text] == []
