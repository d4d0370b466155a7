"""Transformer Engine's attention switches in the environment, checked against what megatron-core will set.

megatron-core 0.19.2's ``LanguageModule`` (every GPT and hybrid model, whichever backend builds its layers) sets
``NVTE_FLASH_ATTN``, ``NVTE_FUSED_ATTN`` and ``NVTE_UNFUSED_ATTN`` for ``--attention-backend``, and
``NVTE_FLASH_ATTN_V2/V3/V4`` to 0 for the generations ``--flash-attention-version`` leaves out, when it builds the
model (``_set_attention_backend``). It asserts that a value already in the environment is the one it would set, so a
switch exported by a cluster module or a job script (``NVTE_FUSED_ATTN=0`` to avoid a cuDNN kernel, say) stops every
rank with an ``AssertionError`` after process groups and GPU memory are set up. :func:`check_attention_env` refuses
such a run before Megatron initialises.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from megatron.oellm.training.environment_refusal import EnvironmentRefusal

SWITCHES = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")
"""TE's attention switches megatron-core sets for ``--attention-backend``, in this order."""

SWITCH_VALUES: dict[str, tuple[int, int, int]] = {
    "local": (0, 0, 0),
    "flash": (1, 0, 0),
    "fused": (0, 1, 0),
    "unfused": (0, 0, 1),
    "auto": (1, 1, 1),
}
"""The values of :data:`SWITCHES` megatron-core sets for each ``--attention-backend`` (``AttnBackend`` member name;
names, so that ``oellm doctor`` uses this table without importing megatron-core)."""


class AttentionEnvError(EnvironmentRefusal):
    """A refusal of :func:`check_attention_env`, holding the ``names`` of the NVTE switches that decided it."""


FLASH_GENERATIONS = (2, 3, 4)
"""flash-attn generations ``--flash-attention-version`` chooses among."""


def version_pin(generation: int) -> str:
    """TE's switch of flash-attn ``generation`` (``NVTE_FLASH_ATTN_V<generation>``, on unless 0)."""
    return f"NVTE_FLASH_ATTN_V{generation}"


VERSION_PINS = tuple(version_pin(generation) for generation in FLASH_GENERATIONS)
"""TE's per-generation flash-attn switches, which megatron-core sets for ``--flash-attention-version``."""


def megatron_version_pins(flash_attention_version: int | None) -> dict[str, str]:
    """The per-generation switches megatron-core sets for ``--flash-attention-version``: 0 for every other
    generation (none without the flag)."""
    if flash_attention_version is None:
        return {}
    return {version_pin(generation): "0" for generation in FLASH_GENERATIONS if generation != flash_attention_version}


def megatron_attention_env(attention_backend: str, flash_attention_version: int | None) -> dict[str, str]:
    """The environment variables megatron-core sets when it builds a model with ``--attention-backend
    attention_backend`` and ``--flash-attention-version flash_attention_version``, and their values."""
    expected = {name: str(value) for name, value in zip(SWITCHES, SWITCH_VALUES[attention_backend], strict=True)}
    return {**expected, **megatron_version_pins(flash_attention_version)}


def attention_env_conflicts(environ: Mapping[str, str], attention_backend: str,
                            flash_attention_version: int | None) -> dict[str, tuple[str, str]]:
    """Variable -> (value in ``environ``, value megatron-core sets) for each preset variable megatron-core's assertion
    rejects (it accepts an unset variable or exactly the value it sets)."""
    expected = megatron_attention_env(attention_backend, flash_attention_version)
    return {name: (environ[name], value) for name, value in expected.items()
            if name in environ and environ[name] != value}


def check_attention_env(args: Any, environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`AttentionEnvError` (a ``ValueError``) naming every variable of ``environ`` (default: this
    process's) that megatron-core's ``_set_attention_backend`` would find set to another value than it sets for
    ``args.attention_backend`` and ``args.flash_attention_version``, and the ways out."""
    environ = os.environ if environ is None else environ
    backend = args.attention_backend.name
    conflicts = attention_env_conflicts(environ, backend, getattr(args, "flash_attention_version", None))
    if not conflicts:
        return
    found = ", ".join(f"{name}={value!r} (megatron-core sets {expected})" for name, (value, expected)
                      in conflicts.items())
    settings = [f"--attention-backend {backend}"] if set(conflicts) & set(SWITCHES) else []
    if set(conflicts) - set(SWITCHES):
        settings.append(f"--flash-attention-version {args.flash_attention_version}")
    raise AttentionEnvError(f"the environment sets {found}, which megatron-core asserts against for "
                            f"{' and '.join(settings)} when it builds the model, on every rank after GPU set-up; "
                            f"unset {' '.join(conflicts)} (a cluster module or the job script may export them) and "
                            f"choose TE's attention kernels with --attention-backend (flash, fused, unfused) and "
                            f"--flash-attention-version instead", tuple(conflicts))
