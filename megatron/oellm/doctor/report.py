"""What the doctor found: the report of this process's environment, the findings of its rules, and their rendering.

:class:`EnvironmentReport` (with :class:`GpuInfo` and :class:`NcclNames`) is what
:func:`megatron.oellm.doctor.probes.collect_environment` fills in and every rule reads; a :class:`Finding` is the
outcome of one rule; :func:`format_text` / :func:`to_json` render them and :func:`exit_status` turns them into the exit
status.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, Literal

if typing.TYPE_CHECKING:
    from megatron.oellm.backends.te_flash_attention import FlashAttentionFound


Severity = Literal["error", "warning", "ok"]


UNKNOWN_VERSION = "unknown"
"""Version shown for a module that is importable but has no distribution metadata (e.g. a source-tree build)."""


@dataclass(frozen=True)
class GpuInfo:
    """One CUDA device as torch sees it."""

    index: int
    name: str
    capability: tuple[int, int]
    """Compute capability (major, minor): 9.x is Hopper (H100, H200, GH200)."""
    memory_gib: float


@dataclass(frozen=True)
class NcclNames:
    """The ``NCCL_*`` names that the NCCL library torch loads and torch's own CUDA library hold (see
    :func:`library_nccl_names`): every variable either of them reads is among them."""

    library: str
    """Path of the nvidia-nccl wheel's ``libnccl.so``."""
    version: str | None
    """Version of the nvidia-nccl distribution that owns :attr:`library`; None where none or several do."""
    nccl: frozenset[str]
    """The names in :attr:`library`."""
    torch: frozenset[str]
    """The names in torch's ``lib/libtorch_cuda.so``."""


@dataclass(frozen=True)
class EnvironmentReport:
    """Everything the doctor knows about this process's software and hardware; the input of every rule."""

    python_version: str
    typing_override_provided: bool
    """True when ``megatron.oellm.compat`` had to provide ``typing.override`` (Python < 3.12)."""
    versions: dict[str, str | None]
    """Package name (see :data:`PACKAGE_PROBES`) -> version, :data:`UNKNOWN_VERSION`, or None when absent."""
    machine: str | None = None
    """The interpreter's CPU architecture (``platform.machine()``: ``x86_64``, ``aarch64``); None where not probed."""
    megatron_oellm_version: str | None = None
    """Version of the megatron-oellm this doctor runs from (``megatron.oellm.__version__``)."""
    megatron_oellm_path: str | None = None
    """Folder that megatron-oellm was imported from: a checkout on PYTHONPATH comes ahead of an image's or venv's copy."""
    megatron_oellm_checkout: str | None = None
    """Root of the megatron-oellm checkout this doctor runs from (the folder holding ``tools/install.sh``:
    :func:`megatron.oellm.paths.source_checkout`), so that a fix can name its scripts by absolute path; None for an
    installed copy without ``tools/``."""
    cuda_version: str | None = None
    """CUDA version torch was built with (``torch.version.cuda``); None for a CPU build or without torch."""
    nccl_version: str | None = None
    """NCCL version bundled with torch; None for a CPU build or without torch."""
    nccl_names: NcclNames | None = None
    """The ``NCCL_*`` names NCCL and torch can read here, or None where they were not read (see
    :attr:`nccl_names_unread`)."""
    nccl_names_unread: str | None = None
    """Why :attr:`nccl_names` is None (no CUDA torch, no nvidia-nccl wheel, an unreadable library)."""
    gpus: tuple[GpuInfo, ...] = ()
    gpu_probe_error: str | None = None
    """Why the GPUs could not be listed, when torch raised while probing them."""
    driver_gpus: tuple[str, ...] = ()
    """Names of the GPUs ``nvidia-smi -L`` lists where the NVIDIA driver is loaded: the node's GPUs seen without torch
    (:func:`megatron.oellm.doctor.probes.nvidia_smi_gpus`); empty where there is no driver or nvidia-smi."""
    torch_import_error: str | None = None
    """``import torch`` raised (e.g. a CUDA library missing from LD_LIBRARY_PATH): its type and message, else None."""
    tilelang_importable: bool = False
    """``tilelang`` can be found on ``sys.path`` (located, not imported)."""
    tilelang_import_error: str | None = None
    """Last line of the error a fresh interpreter raised on ``import tilelang`` (e.g. a missing ``libz3.so``), or
    None when it imported or is not installed. fla only checks that tilelang is findable, then crashes on import."""
    transformer_engine_import_error: str | None = None
    """Last line of the error a fresh interpreter raised on ``import torch, transformer_engine.pytorch`` (e.g. a
    library missing from LD_LIBRARY_PATH), or None when it imported or Transformer Engine is not installed."""
    megatron_core_import_error: str | None = None
    """Only probed when Transformer Engine is installed but does not import: the last error line of a fresh
    ``import megatron.core`` (megatron-core takes TE as present when its top-level package imports, then imports its
    PyTorch part unguarded, so a broken TE can stop megatron-core itself, whichever backend is chosen), or None."""
    nvcc_path: str | None = None
    """An ``nvcc`` binary TileLang can JIT-compile with; fla only uses its TileLang kernels when one exists."""
    hybrid_ep: bool | None = None
    """``deep_ep`` declares ``HybridEPBuffer`` (its hybrid-ep branch, which megatron-core imports); None if no deep_ep."""
    grad_accum_fusion_available: bool = True
    """apex's ``fused_weight_gradient_mlp_cuda`` extension imports after torch in a fresh interpreter, as
    megatron-core decides it (an extension built against another torch is on ``sys.path`` but raises ImportError):
    the kernel megatron-core's own parallel linears (the output layer) need under Megatron's default
    ``--gradient-accumulation-fusion``."""
    helpers_cpp_import_error: str | None = None
    """Last error line of a fresh ``import megatron.core.datasets.helpers_cpp`` (megatron-core's compiled dataset
    helper: without it megatron tries to compile it with ``make``, which an installed wheel cannot, and exits on every
    rank), or None when it loads or was not probed (megatron-core not found, or not importing at all)."""
    helpers_cpp_mismatch: str | None = None
    """Why the helper's ``.so`` cannot load here, when its file name or ELF header says it was built for another
    Python or CPU architecture than this interpreter's; None where nothing tells (or it loads)."""
    helpers_cpp_makefile: bool = False
    """megatron-core's ``datasets`` folder holds its ``Makefile`` (a source tree, not a wheel): where the helper does
    not load, megatron compiles it there with ``make`` at start."""
    fla_gdn_import_error: str | None = None
    """Last error line of a fresh import of the fla entry points megatron-core's GDN layer imports
    (:data:`~megatron.oellm.doctor.probes.FLA_GDN_PROBE`), e.g. a missing ``einops``: megatron-core catches it and
    later says only "FLA is not installed"; None when they import or fla is not installed."""
    megatron_core_path: str | None = None
    """Folder of the ``megatron.core`` that ``import megatron.core`` loads (a source checkout on PYTHONPATH shadows
    the installed distribution, whose metadata then names another release); None when it is not found."""
    module_folders: dict[str, str | None] = field(default_factory=dict)
    """Package name (see :data:`PACKAGE_PROBES`) -> folder its module is imported from, None where not found
    (:func:`megatron.oellm.doctor.probes.module_folders`): a copy on PYTHONPATH ahead of the environment's own (a
    second torch, an old fla) shows by its folder; empty where not probed."""
    te_flash_attention: FlashAttentionFound | None = None
    """The flash-attn packages Transformer Engine took up when a fresh interpreter imported its attention backends
    (:func:`megatron.oellm.backends.te_flash_attention.te_flash_attention_found`); None where TE does not import or that
    probe failed (see :attr:`te_flash_attention_error`)."""
    te_flash_attention_error: str | None = None
    """Last error line of the probe that reads :attr:`te_flash_attention`, when it failed although TE imports."""
    allocator_refusal: tuple[str, str] | None = None
    """(item, torch's error) of the first item of the allocator configuration torch reads that the installed torch's
    own allocator-settings parser refuses (it raises on it at the first CUDA allocation): run in a fresh interpreter;
    None when it takes every item, or when nothing was asked (no allocator configuration, no torch, a torch without
    that parser)."""


@dataclass(frozen=True)
class Finding:
    """The outcome of one rule: an error makes ``oellm doctor`` exit 1, a warning is reported only."""

    severity: Severity
    name: str
    """Short rule name, e.g. ``megatron-core`` or ``fla-hopper-triton``."""
    message: str
    fix: str | None = None
    """What to run or set to resolve it; None for ``ok`` findings."""


def exit_status(findings: list[Finding]) -> int:
    """1 if any finding is an error, else 0."""
    return int(any(finding.severity == "error" for finding in findings))


def version_rows(report: EnvironmentReport) -> dict[str, str | None]:
    """Every reported version in display order: python, megatron-oellm, packages, CUDA and NCCL of torch, HybridEP."""
    rows: dict[str, str | None] = {"python": report.python_version, "megatron-oellm": report.megatron_oellm_version}
    rows.update(report.versions)
    rows["cuda"] = report.cuda_version
    rows["nccl"] = report.nccl_version
    rows["hybrid-ep"] = report.versions.get("deep-ep") if report.hybrid_ep else None
    return rows


def module_paths(report: EnvironmentReport) -> dict[str, str | None]:
    """Folder that megatron-oellm and each reported package were imported from (None where not found), megatron-core's
    as :attr:`EnvironmentReport.megatron_core_path` names it: a checkout or package on PYTHONPATH comes ahead of the
    copy installed in an image or venv."""
    return {"megatron-oellm": report.megatron_oellm_path, **report.module_folders,
            "megatron-core": report.megatron_core_path}


def _version_lines(report: EnvironmentReport) -> list[str]:
    """The rows of the text report's version table: name, version with its notes, and the folder it was imported
    from (:func:`module_paths`) in a column of its own, so that a folder unlike the others stands out in a log."""
    rows = version_rows(report)
    paths = module_paths(report)
    shown = {}
    for name, version in rows.items():
        shown[name] = version if version is not None else "-"
        if name == "python" and report.typing_override_provided:
            shown[name] += "  (typing.override provided by megatron.oellm.compat)"
        if name in ("cuda", "nccl") and version is not None:
            shown[name] += "  (torch build)"
        if name == "hybrid-ep" and version is not None:
            shown[name] += "  (deep_ep.HybridEPBuffer)"
    located = [name for name in rows if paths.get(name)]
    name_width = max(len(name) for name in rows)
    version_width = max((len(shown[name]) for name in located), default=0)
    return [f"  {name:<{name_width}}  " + (f"{text:<{version_width}}  ({paths[name]})" if name in located else text)
            for name, text in shown.items()]


def fix_lines(findings: list[Finding]) -> list[str | None]:
    """What the text report's fix line of each finding says (None: no fix): its fix, or, where an earlier finding has
    the same fix, a pointer to that finding. On Hopper a tilelang that does not import gets one fix from two rules
    (fla's kernels do not import; fla's TileLang path is broken): a long text, said once."""
    first_with: dict[str, str] = {}
    said: list[str | None] = []
    for finding in findings:
        if finding.fix is None:
            said.append(None)
        elif finding.fix in first_with:
            said.append(f"the same as for {first_with[finding.fix]} above")
        else:
            first_with[finding.fix] = finding.name
            said.append(finding.fix)
    return said


def format_text(report: EnvironmentReport, findings: list[Finding]) -> str:
    """Human report: aligned version table (with the folder each package was imported from), GPU list, then each
    finding with its fix line (:func:`fix_lines`: a fix an earlier finding gave is not repeated)."""
    lines = ["Versions", *_version_lines(report)]
    lines += ["", "GPUs"]
    lines += [f"  {gpu.index}  {gpu.name}  sm_{gpu.capability[0]}{gpu.capability[1]}  {gpu.memory_gib:.1f} GiB"
              for gpu in report.gpus] or ["  none seen by torch"]
    lines += ["", "Findings"]
    for finding, fix in zip(findings, fix_lines(findings), strict=True):
        lines.append(f"  {'[' + finding.severity + ']':<9}  {finding.name}: {finding.message}")
        if fix:
            lines.append(f"  {'':<9}  fix: {fix}")
    errors = sum(finding.severity == "error" for finding in findings)
    warnings = sum(finding.severity == "warning" for finding in findings)
    lines += ["", f"{errors} error(s), {warnings} warning(s)"]
    return "\n".join(lines)


def to_json(report: EnvironmentReport, findings: list[Finding]) -> dict[str, Any]:
    """Machine report: ``{versions, paths, gpus, findings, ok}`` (``paths``: :func:`module_paths`); ``ok`` is False
    exactly when the exit status is 1."""
    return {
        "versions": version_rows(report),
        "paths": module_paths(report),
        "gpus": [
            {"index": gpu.index, "name": gpu.name, "capability": f"{gpu.capability[0]}.{gpu.capability[1]}",
             "memory_gib": round(gpu.memory_gib, 2)}
            for gpu in report.gpus
        ],
        "findings": [
            {"severity": finding.severity, "name": finding.name, "message": finding.message, "fix": finding.fix}
            for finding in findings
        ],
        "ok": exit_status(findings) == 0,
    }
