"""Model families: card -> megatron-core TransformerConfig + ModuleSpec -> model, one sub-package per family.

``spec_builder(family)`` returns the family's spec module (``transformer_config``, ``build_model``, ...). Modules
are imported lazily so that ``import megatron.oellm.models`` (and the layout checks in
:mod:`megatron.oellm.models.parallel`) stay free of torch and megatron-core.
"""

from __future__ import annotations

import importlib
from types import ModuleType

SPEC_MODULES: dict[str, str] = {
    "qwen3_5": "megatron.oellm.models.qwen3_5.spec",
    "qwen3_moe": "megatron.oellm.models.qwen3_moe.spec",
}
"""Card family -> module with ``transformer_config(card, layout, ...)`` and ``build_model(card, layout, backend)``."""


def spec_builder(family: str) -> ModuleType:
    """The spec module of ``family`` (a card's ``family`` field); raises ``KeyError`` naming the known families."""
    if family not in SPEC_MODULES:
        raise KeyError(f"no spec builder for model family {family!r}; known: {', '.join(sorted(SPEC_MODULES))}")
    return importlib.import_module(SPEC_MODULES[family])


def missing_spec_builder(family: str) -> str:
    """Why no run of a card of model ``family`` can build its model ('' if one can): the family has no spec builder
    yet (none in :data:`SPEC_MODULES`). megatron-core then also refuses the family's layer symbols (CKDA's 'K') in
    ``validate_args``, naming none of this. The one rule of ``oellm recipe`` and the training entry."""
    if family not in SPEC_MODULES:
        return f"the spec builder of model family {family!r} (megatron/oellm/models/{family}) does not exist yet"
    return ""
