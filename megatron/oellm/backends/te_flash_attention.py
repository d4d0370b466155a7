"""What Transformer Engine's flash attention can run here: the flash-attn packages TE took up when importing its
attention backends, and the rules (environment pins, megatron-core's ``--flash-attention-version``, the GPU, the
training dtype) by which it would still drop them, judged before anything is allocated."""

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from megatron.oellm.training.attention_env import megatron_version_pins, version_pin

FLASH_ATTN_PACKAGES: dict[int, str] = {2: "flash-attn", 3: "flash-attn-3", 4: "flash-attn-4"}
"""The flash-attn generations Transformer Engine runs, and the distribution it looks each one up by."""

TE_FLASH_ATTN_FLAGS: dict[int, tuple[str, str]] = {
    2: ("is_installed", "version"), 3: ("v3_is_installed", "fa3_version"), 4: ("v4_is_installed", "fa4_version"),
}
"""Generation -> the ``FlashAttentionUtils`` attributes in which TE records that it took the package up, and its
version (a version is recorded as soon as the package is found, also when TE then rejects it)."""

FLASH_ATTN_GPUS: dict[int, str] = {2: "sm80 or newer", 3: "sm90 only", 4: "sm90 or newer"}
"""The GPUs Transformer Engine runs each flash-attn generation on (its ``get_attention_backend``)."""

FLASH_ATTENTION_DTYPES = ("bf16", "fp16")
"""Training dtypes whose attention inputs Transformer Engine's flash attention takes (fp32 rules all out)."""

NO_SUPPORTED_FLASH_ATTN = "Transformer Engine finds no flash-attn it supports"
"""Why flash attention is ruled out when TE accepted no flash-attn package when importing its attention backends."""


@dataclass(frozen=True)
class FlashAttentionFound:
    """The flash-attn packages Transformer Engine took up when importing its attention backends."""

    accepted: dict[int, str] = field(default_factory=dict)
    """Generation (2, 3, 4) -> version, for each package TE accepted and loaded."""
    rejected: tuple[str, ...] = ()
    """Installed packages TE did not take up, each with why (e.g. a flash-attn 2 outside TE's version range)."""


@dataclass(frozen=True)
class FlashAttentionRefusal:
    """Why ``--attention-backend flash`` would leave Transformer Engine no attention backend, and the way to keep
    flash attention."""

    why: str
    fix: str


def flash_attention_found_from(flags: Any, capability: tuple[int, int] | None) -> FlashAttentionFound:
    """:class:`FlashAttentionFound` read from TE's ``FlashAttentionUtils`` (``flags``), as its attention backends
    module set it on import; ``capability`` (None without CUDA) picks which flash-attn 2 minimum TE applied."""
    accepted = {generation: str(getattr(flags, version))
                for generation, (installed, version) in TE_FLASH_ATTN_FLAGS.items() if getattr(flags, installed)}
    rejected = []
    if 2 not in accepted and str(flags.version) != "0":
        blackwell = capability is not None and capability >= (10, 0)
        minimum = flags.version_required_blackwell if blackwell else flags.version_required
        rejected.append(f"flash-attn {flags.version} is installed, but TE takes flash-attn 2 only at versions >= "
                        f"{minimum} and < {flags.max_version}")
    if 4 not in accepted and str(flags.fa4_version) != "0":
        rejected.append(f"flash-attn-4 {flags.fa4_version} is installed but does not load (TE warned why on import)")
    return FlashAttentionFound(accepted, tuple(rejected))


def cuda_capability() -> tuple[int, int] | None:
    """The current GPU's compute capability, None without CUDA (a login node): read from the device's properties,
    without allocating memory."""
    if not torch.cuda.is_available():
        return None
    try:
        return tuple(torch.cuda.get_device_capability())
    except RuntimeError:  # a CUDA error while reading it: leave the GPU rule out rather than guess
        return None


def te_flash_attention_found() -> FlashAttentionFound:
    """The flash-attn packages Transformer Engine took up here (it decides when importing its attention backends,
    which this imports). Call it only where Transformer Engine imports."""
    importlib.import_module("transformer_engine.pytorch.attention.dot_product_attention.backends")  # TE's detection
    utils = importlib.import_module("transformer_engine.pytorch.attention.dot_product_attention.utils")
    return flash_attention_found_from(utils.FlashAttentionUtils, cuda_capability())


def _switched_off(environ: Mapping[str, str], variable: str) -> bool:
    """Whether ``variable`` turns a TE attention backend off: TE reads it as an integer, 1 when unset."""
    try:
        return int(environ.get(variable, "1")) == 0
    except ValueError:  # not a number: TE itself would stop on it, not rule flash attention out
        return False


def _runs_on(generation: int, capability: tuple[int, int]) -> bool:
    """Whether TE runs flash-attn ``generation`` on a GPU of ``capability`` (:data:`FLASH_ATTN_GPUS`)."""
    if generation == 3:
        return capability == (9, 0)
    return capability >= ((8, 0) if generation == 2 else (9, 0))


def _generation_blockers(generation: int, version: str, environ: Mapping[str, str],
                         capability: tuple[int, int] | None,
                         flash_attention_version: int | None) -> list[FlashAttentionRefusal]:
    """Each rule that makes TE drop the accepted flash-attn ``generation`` (``version``): an environment pin, the
    pin megatron-core derives from ``--flash-attention-version`` (named too where the environment pins the same
    variable to 0, since megatron-core would set it again once the variable is unset), the GPU."""
    name = f"{FLASH_ATTN_PACKAGES[generation]} {version}"
    variable = version_pin(generation)
    blockers = []
    if _switched_off(environ, variable):
        blockers.append(FlashAttentionRefusal(f"{name} is turned off by {variable}={environ[variable]}",
                                              f"unset {variable}"))
    if variable in megatron_version_pins(flash_attention_version):
        blockers.append(FlashAttentionRefusal(
            f"{name} is turned off by --flash-attention-version {flash_attention_version} (megatron-core sets "
            f"{variable}=0)", f"pass --flash-attention-version {generation} or drop it"))
    if capability is not None and not _runs_on(generation, capability):
        blockers.append(FlashAttentionRefusal(
            f"{name} does not run on this sm{capability[0]}{capability[1]} GPU (TE runs it on "
            f"{FLASH_ATTN_GPUS[generation]})", "install a flash-attn that TE runs on this GPU"))
    return blockers


def flash_attention_refusal(found: FlashAttentionFound, *, environ: Mapping[str, str], dtype: str | None,
                            capability: tuple[int, int] | None,
                            flash_attention_version: int | None) -> FlashAttentionRefusal | None:
    """Why Transformer Engine would keep no flash attention for a training run, None when one generation stays.

    The rules of TE's ``get_attention_backend`` that are known before anything is allocated: the packages TE took
    up (``found``), the ``NVTE_FLASH_ATTN_V2/V3/V4`` pins in ``environ``, those megatron-core sets for
    ``flash_attention_version``, the GPU's ``capability`` and the training ``dtype``; a None input (no CUDA, dtype not
    known) leaves its rule out. Every rule that applies is named, so fixing one does not reveal the next.
    """
    blockers = []
    if dtype is not None and dtype not in FLASH_ATTENTION_DTYPES:
        blockers.append(FlashAttentionRefusal(f"{dtype} training (TE's flash attention takes bf16 or fp16 only)",
                                              "train with --bf16 or --fp16"))
    if not found.accepted:
        detail = f" ({'; '.join(found.rejected)})" if found.rejected else ""
        blockers.append(FlashAttentionRefusal(NO_SUPPORTED_FLASH_ATTN + detail, "install a flash-attn that TE supports"))
    per_generation = {generation: _generation_blockers(generation, version, environ, capability,
                                                       flash_attention_version)
                      for generation, version in sorted(found.accepted.items())}
    if all(per_generation.values()):  # every generation TE took up is dropped too (none taken up: nothing to add)
        blockers += [blocker for generation_blockers in per_generation.values() for blocker in generation_blockers]
    if not blockers:
        return None
    fixes = dict.fromkeys(blocker.fix for blocker in blockers)  # in order, once each
    return FlashAttentionRefusal("; ".join(blocker.why for blocker in blockers), ", and ".join(fixes))


def runnable_flash_attention(found: FlashAttentionFound, *, environ: Mapping[str, str],
                             capability: tuple[int, int] | None) -> dict[int, str]:
    """Generation -> version of each flash-attn Transformer Engine took up that no pin in ``environ`` and no GPU
    rule (``capability``, None: left out) drops: what ``oellm doctor`` reports as runnable."""
    return {generation: version for generation, version in sorted(found.accepted.items())
            if not _generation_blockers(generation, version, environ, capability, None)}


def te_flash_attention_refusal(*, dtype: str | None = None, flash_attention_version: int | None = None,
                               environ: Mapping[str, str] | None = None) -> FlashAttentionRefusal | None:
    """:func:`flash_attention_refusal` for this process: the flash-attn packages Transformer Engine took up, the
    pins of ``environ`` (default: this process's environment; ``oellm recipe --local`` passes the run's) and this
    GPU's capability (left out without CUDA). Call it only where TE imports."""
    return flash_attention_refusal(te_flash_attention_found(), environ=os.environ if environ is None else environ,
                                   dtype=dtype, capability=cuda_capability(),
                                   flash_attention_version=flash_attention_version)
