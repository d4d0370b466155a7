"""The source tree's package layout: ``megatron`` stays a namespace shared with megatron-core (no
``megatron/__init__.py``, which would hide ``megatron.core`` once installed), and every folder of ``megatron/oellm``
that holds modules is a regular package, so that its import does not depend on the namespace machinery."""

from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_megatron_is_a_namespace_and_every_oellm_folder_with_modules_a_package():
    assert not (ROOT / "megatron" / "__init__.py").exists()
    folders = {path.parent for path in (ROOT / "megatron" / "oellm").rglob("*.py") if "__pycache__" not in path.parts}
    assert len(folders) > 5
    assert sorted(str(folder.relative_to(ROOT)) for folder in folders if not (folder / "__init__.py").is_file()) == []
