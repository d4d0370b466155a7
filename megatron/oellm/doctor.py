"""Environment doctor: which versions are installed, which GPUs are seen, and which known-bad combinations apply.

The work is split so that every rule can be tested without the hardware it is about:

* :func:`collect_environment` probes this process once into an :class:`EnvironmentReport` (package versions from
  distribution metadata, modules located with ``importlib.util.find_spec`` without importing them; only torch is
  imported, for its CUDA build and the GPUs; what may fail to import, Transformer Engine among them, is imported in
  a fresh interpreter);
* :func:`check_environment` runs each known-bad rule, a pure function of the report and an environment-variable
  mapping, and returns :class:`Finding` s;
* :func:`format_text` / :func:`to_json` render them and :func:`exit_status` turns them into the exit status.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import mmap
import os
import re
import shutil
import subprocess
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from megatron.oellm import MEGATRON_CORE_VERSION
from megatron.oellm.switches import SLOW_PATH_SWITCHES, is_on

if typing.TYPE_CHECKING:
    from megatron.oellm.backends.selection import FlashAttentionFound

Severity = Literal["error", "warning", "ok"]

NCCL_CHANNEL_VARIABLES = ("NCCL_MIN_NCHANNELS", "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_MIN_P2P_NCHANNELS")
"""NCCL variables whose large values make NCCL set up more channels, each with its own buffers in GPU memory outside
PyTorch's allocator: ``NCCL_MIN_NCHANNELS`` the channels of every communicator's collectives,
``NCCL_NCHANNELS_PER_NET_PEER`` the channels send/recv uses with each peer reached over the network, and
``NCCL_MIN_P2P_NCHANNELS`` the pool of channels send/recv spreads its peers over. The last is in because NCCL's
``ncclTopoComputeP2pChannels`` caps the channels each peer pair connects on, and so holds buffers for
(``p2pnChannelsPerPeer``, from the topology and ``NCCL_NCHANNELS_PER_NET_PEER``), at that pool (``p2pnChannels``,
``max(min(nChannels, NCCL_MAX_P2P_NCHANNELS), NCCL_MIN_P2P_NCHANNELS)``): where NCCL would pick few channels, raising
the pool raises the channels, and buffers, per peer. The ``NCCL_MAX_*`` variables only lower counts."""
NCCL_CHANNEL_EFFECTS = {
    "NCCL_MIN_NCHANNELS": "every communicator then runs its collectives on at least that many channels",
    "NCCL_NCHANNELS_PER_NET_PEER": "send/recv with each peer reached over the network (pipeline parallelism across "
                                   "nodes) then runs on up to that many channels",
    "NCCL_MIN_P2P_NCHANNELS": "send/recv then spreads its peers over at least that many channels, and each peer pair "
                              "connects on up to that many where the topology allows",
}
"""What a large value of each of :data:`NCCL_CHANNEL_VARIABLES` makes NCCL do."""
NCCL_CHANNEL_LIMIT = 4
"""Largest channel count the doctor passes without a warning: the value MN5 report #438 exported, which the recipes of
``examples/oellm/_mn5.toml`` reproduce."""
NCCL_CHANNEL_SMALLEST = {"NCCL_MIN_NCHANNELS": 0, "NCCL_NCHANNELS_PER_NET_PEER": 1, "NCCL_MIN_P2P_NCHANNELS": 0}
"""Smallest value of each channel variable that NCCL takes as meant: a minimum of 0 channels is no minimum (NCCL's
own default for ``ncclMinNchannels``; the p2p pool has at least one channel anyway), a peer needs at least one
channel."""
NCCL_CHANNEL_AUTOMATIC = {"NCCL_NCHANNELS_PER_NET_PEER": -1}
"""A value below the smallest that is no typo: -1 leaves the count to NCCL. It is the default of the releases whose
``NCCL_PARAM(NChannelsPerNetPeer, ...)`` picks the count from the network when it reads -1, and NCCL 2.28.9 ignores
any value below 1 (its log says "too low, leaving it set")."""
NCCL_UNREAD_VARIABLES = {"NCCL_NCHANNELS_PER_PEER": "NCCL_NCHANNELS_PER_NET_PEER"}
"""Variables that NCCL 2.18 to 2.28 do not read (no such name in the strings of their ``libnccl.so``, through which
NCCL names every variable it reads), each with the one NCCL reads for what it seems to set. MN5 report #438
exported ``NCCL_NCHANNELS_PER_PEER``; the recipes reproduce it."""
NCCL_INSTALL_VARIABLES = ("NCCL_VERSION", "NCCL_HOME", "NCCL_ROOT", "NCCL_ROOT_DIR", "NCCL_DIR", "NCCL_LIB_DIR",
                          "NCCL_INCLUDE_DIR")
"""``NCCL_*`` names that describe an NCCL installation instead of setting NCCL, so the name check passes them: NVIDIA's
CUDA container images export ``NCCL_VERSION`` (the lent H200's image: ``NCCL_VERSION=2.28.3-1``), environment modules
export the install folders, which build systems (PyTorch's and apex's builds) read. Nothing reads them at run time,
and they are no typo."""
NCCL_CHECKED_RELEASES = "2.18 to 2.28"
"""The NCCL releases whose libraries were searched for :data:`NCCL_UNREAD_VARIABLES`: the nvidia-nccl-cu12 wheels
2.18.1, 2.20.5, 2.23.4 and 2.27.3, and the 2.28.9 of torch 2.11's CUDA 13 build."""
NCCL_INTEGER = re.compile(r"([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
"""An integer as C's ``strtoll`` reads it with base 0, which NCCL's ``ncclLoadParam`` uses for every numeric
variable: decimal, ``0x`` hexadecimal or ``0``-prefixed octal, after an optional sign."""

FLA_BAD_TRITON_FROM = Version("3.4.0")
"""First Triton release with which fla's Triton GDN/KDA backward is wrong on Hopper (fla issue 640)."""
FLA_FIXED_TRITON = Version("3.7.1")
"""First Triton release with which fla's Triton GDN/KDA backward is right again on Hopper."""


@dataclass(frozen=True)
class PackageProbe:
    """Where to find one component: its distribution names (first installed wins) and its top-level module."""

    name: str
    """Name shown in the report and used as key of :attr:`EnvironmentReport.versions`."""
    distributions: tuple[str, ...]
    """Distribution names to read the version from with ``importlib.metadata``, in order of preference."""
    module: str | None
    """Top-level module; located (not imported) when no distribution metadata is found. None where only the
    metadata counts (Transformer Engine looks for flash-attn-3 and flash-attn-4 by their distributions alone)."""


PACKAGE_PROBES: tuple[PackageProbe, ...] = (
    PackageProbe("torch", ("torch",), "torch"),
    PackageProbe("triton", ("triton", "pytorch-triton"), "triton"),
    PackageProbe("megatron-core", ("megatron-core",), "megatron.core"),
    PackageProbe(
        "transformer-engine",
        ("transformer-engine", "transformer-engine-cu12", "transformer-engine-cu13"),
        "transformer_engine",
    ),
    PackageProbe("transformer-engine-torch", ("transformer-engine-torch",), "transformer_engine_torch"),
    PackageProbe("fla", ("fla-core", "flash-linear-attention"), "fla"),
    PackageProbe("tilelang", ("tilelang",), "tilelang"),
    PackageProbe("deep-ep", ("deep-ep",), "deep_ep"),
    PackageProbe("apex", ("apex",), "apex"),
    PackageProbe("flash-attn", ("flash-attn",), "flash_attn"),
    PackageProbe("flash-attn-3", ("flash-attn-3",), None),
    PackageProbe("flash-attn-4", ("flash-attn-4",), None),
    PackageProbe("transformers", ("transformers",), "transformers"),
)
"""Every package the doctor reports, in display order."""

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


NCCL_NAME = re.compile(rb"NCCL_[A-Za-z0-9_]+")
"""An ``NCCL_`` name in a library's bytes, wherever it starts: a linker may keep a string literal only as the tail of a
longer one (torch 2.11's ``libtorch_cuda.so`` holds ``NCCL_BLOCKING_WAIT``, which it reads, only inside
``TORCH_NCCL_BLOCKING_WAIT``), so nothing is asked of the byte before it."""
NCCL_WHEEL_LIBRARY = "libnccl.so.*[0-9]"
"""The file torch's loader (``_preload_cuda_deps`` in ``torch/__init__.py``) takes in the nvidia-nccl wheel's
``nvidia/nccl/lib``."""
LIBNCCL_FILE = re.compile(r"libnccl\.so(\.|$)")
"""The file name of an NCCL library (``libnccl.so``, ``libnccl.so.2``, ...), not of a plugin (``libnccl-net.so``,
``libnccl-tuner-*.so``): what an ``LD_PRELOAD`` entry must be named to load an NCCL before the wheel's."""
NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
"""The nvidia-nccl wheels whose metadata gives the version of the library in ``nvidia/nccl/lib``."""
TORCH_CUDA_LIBRARY = Path("lib") / "libtorch_cuda.so"
"""torch's CUDA library, under its package folder: its ProcessGroupNCCL reads the ``TORCH_NCCL_*`` variables and the
legacy ``NCCL_*`` names of some (``NCCL_ASYNC_ERROR_HANDLING``, ``NCCL_BLOCKING_WAIT``, ``NCCL_DESYNC_DEBUG``, ...),
which NCCL itself does not read."""


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
    megatron_core_path: str | None = None
    """Folder of the ``megatron.core`` that ``import megatron.core`` loads (a source checkout on PYTHONPATH shadows
    the installed distribution, whose metadata then names another release); None when it is not found."""
    te_flash_attention: FlashAttentionFound | None = None
    """The flash-attn packages Transformer Engine took up when a fresh interpreter imported its attention backends
    (:func:`megatron.oellm.backends.selection.te_flash_attention_found`); None where TE does not import or that
    probe failed (see :attr:`te_flash_attention_error`)."""
    te_flash_attention_error: str | None = None
    """Last error line of the probe that reads :attr:`te_flash_attention`, when it failed although TE imports."""


@dataclass(frozen=True)
class Finding:
    """The outcome of one rule: an error makes ``oellm doctor`` exit 1, a warning is reported only."""

    severity: Severity
    name: str
    """Short rule name, e.g. ``megatron-core`` or ``fla-hopper-triton``."""
    message: str
    fix: str | None = None
    """What to run or set to resolve it; None for ``ok`` findings."""


# ---------------------------------------------------------------------------------------------------------------
# Collection: the only part that looks at the running process.


def _distribution_version(probe: PackageProbe) -> str | None:
    """Version of the first installed distribution of ``probe``, else UNKNOWN_VERSION if its module is found.

    A dist-info folder without its METADATA (an interrupted pip, a package removed by hand) makes
    ``importlib.metadata.version`` return None: it counts as no metadata, so the next name and the module are tried.
    """
    for distribution in probe.distributions:
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
        if version:
            return version
    return UNKNOWN_VERSION if probe.module is not None and _module_findable(probe.module) else None


def _module_findable(module: str) -> bool:
    """Whether ``module`` is on ``sys.path``, without importing it (a parent package may be imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _run_in_fresh_interpreter(code: str, what: str, timeout_s: float) -> tuple[str, str | None]:
    """(stdout, None) of ``code`` run in a fresh interpreter (what may load native libraries or fail to import is
    kept out of this process), or (stdout, why) when it fails: its last error line, else what happened to ``what``
    (the probe's name in messages)."""
    try:  # errors="replace": a native library's message may name a path in another encoding than UTF-8
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, errors="replace",
                                timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return "", f"{what} did not finish within {timeout_s:.0f} s"
    except OSError as error:  # e.g. sys.executable removed or not executable: the probe's outcome, not a crash
        return "", f"{what} could not start ({type(error).__name__}: {error})"
    if result.returncode == 0:
        return result.stdout, None
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return result.stdout, lines[-1] if lines else f"{what} exited with status {result.returncode}"


def _import_error_in_subprocess(module: str, timeout_s: float = 180.0) -> str | None:
    """Import ``module`` (or a comma-separated list, in order) in a fresh interpreter (it may load native
    libraries); its last error line, or None."""
    return _run_in_fresh_interpreter(f"import {module}", f"import {module}", timeout_s)[1]


MEGATRON_CORE_PROBE = "megatron.oellm, megatron.core"
"""What the doctor imports to see whether megatron-core starts next to a broken Transformer Engine (megatron-core
0.19.2 imports ``transformer_engine.pytorch.tensor`` unguarded once the top-level package imports:
``megatron/core/fp8_utils.py``); ``megatron.oellm`` first for the Python 3.11 provision."""


TE_FLASH_ATTENTION_PROBE = """
import json
import torch  # first, as in training
from megatron.oellm.backends.selection import te_flash_attention_found
found = te_flash_attention_found()
print(json.dumps({"accepted": found.accepted, "rejected": found.rejected}))
"""
"""What the doctor runs in a fresh interpreter to read which flash-attn packages Transformer Engine takes up."""


def _te_flash_attention_in_subprocess(timeout_s: float = 180.0) -> tuple[FlashAttentionFound | None, str | None]:
    """(the flash-attn packages Transformer Engine takes up, None) read in a fresh interpreter, as the training
    entry reads them; (None, why) when that probe fails."""
    stdout, error = _run_in_fresh_interpreter(TE_FLASH_ATTENTION_PROBE, "the probe", timeout_s)
    lines = stdout.strip().splitlines()
    if error is not None or not lines:
        return None, error or "the probe exited with status 0"
    from megatron.oellm.backends.selection import FlashAttentionFound

    try:
        data = json.loads(lines[-1])
        accepted = {int(generation): str(version) for generation, version in data["accepted"].items()}
        rejected = tuple(str(reason) for reason in data["rejected"])
    except (ValueError, KeyError, TypeError, AttributeError):  # something else printed last
        return None, f"the probe's last line is not its report: {lines[-1][:200]!r}"
    return FlashAttentionFound(accepted, rejected), None


GRAD_ACCUM_FUSION_MODULE = "fused_weight_gradient_mlp_cuda"
"""apex's extension whose import decides megatron-core's ``_grad_accum_fusion_available``."""


def _grad_accum_fusion_available() -> bool:
    """Whether apex's :data:`GRAD_ACCUM_FUSION_MODULE` imports after torch, in a fresh interpreter (it loads native
    libraries); not imported where it cannot be found."""
    return (_module_findable(GRAD_ACCUM_FUSION_MODULE)
            and _import_error_in_subprocess(f"torch, {GRAD_ACCUM_FUSION_MODULE}") is None)


def _typing_override_provided() -> bool:
    """True when ``typing.override`` exists only because ``megatron.oellm.compat`` installed it."""
    if sys.version_info >= (3, 12) or not hasattr(typing, "override"):
        return False
    import typing_extensions

    return typing.override is typing_extensions.override  # type: ignore[attr-defined]


def _find_nvcc(env: Mapping[str, str]) -> str | None:
    """An nvcc TileLang could use, searched as fla 0.6.0 does (``fla.utils.env.has_usable_nvcc``): $CUDA_HOME, or
    $CUDA_PATH only when CUDA_HOME is unset or empty, PATH, the nvidia-cuda-nvcc wheel, /usr/local/cuda."""
    cuda_home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    candidates = [Path(cuda_home) / "bin" / "nvcc"] if cuda_home else []
    on_path = shutil.which("nvcc", path=env.get("PATH"))
    if on_path:
        candidates.append(Path(on_path))
    try:
        wheel_files = importlib.metadata.files("nvidia-cuda-nvcc") or []
    except importlib.metadata.PackageNotFoundError:
        wheel_files = []
    candidates += [Path(str(f.locate())) for f in wheel_files if f.name == "nvcc"]
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    return next((str(path) for path in candidates if _is_file(path)), None)


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False where it cannot be looked at: before Python 3.14 ``is_file`` raises PermissionError
    for a file under a folder this user may not enter (a CUDA_HOME in another group's software tree)."""
    try:
        return path.is_file()
    except OSError:
        return False


PACKAGE_INFO_FIELDS = ("MAJOR", "MINOR", "PATCH", "PRE_RELEASE")
"""Assignments of megatron-core's ``package_info.py`` that make up its version."""


def megatron_core_module() -> tuple[str | None, str | None]:
    """(version, folder) of the ``megatron.core`` that ``import megatron.core`` loads, its version read as text from
    its ``package_info.py`` (importing it would run git); (None, folder) when that file cannot be parsed, (None, None)
    when megatron.core is not found. The distribution's metadata is not enough: a Megatron-LM checkout on PYTHONPATH
    is imported instead of the pip-installed megatron-core whose version the metadata gives."""
    folders = _package_folders("megatron.core")
    if not folders:
        return None, None
    folder = folders[0]
    try:
        text = (folder / "package_info.py").read_text(errors="replace")
    except OSError:
        return None, str(folder)
    fields = {}
    for field in PACKAGE_INFO_FIELDS:
        match = re.search(rf"^{field}\s*=\s*(\d+|'[^']*'|\"[^\"]*\")\s*(?:#.*)?$", text, re.M)
        if match is None:
            return None, str(folder)
        fields[field] = match.group(1).strip("'\"")
    return f"{fields['MAJOR']}.{fields['MINOR']}.{fields['PATCH']}{fields['PRE_RELEASE']}", str(folder)


def deep_ep_declares_hybrid_ep() -> bool | None:
    """Whether ``deep_ep/__init__.py`` names ``HybridEPBuffer``; read as text because importing it initialises CUDA.

    None when deep_ep is not installed (or is not a source package whose ``__init__`` can be read).
    """
    try:
        spec = importlib.util.find_spec("deep_ep")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    try:
        text = Path(spec.origin).read_text(errors="replace")
    except OSError:  # unreadable (permissions of a shared install): unknown, which check_hybrid_ep says
        return None
    return re.search(r"\bHybridEPBuffer\b", text) is not None


def library_nccl_names(path: Path) -> frozenset[str]:
    """Every ``NCCL_*`` name in the bytes of the library at ``path`` (:data:`NCCL_NAME`), the tails of longer names
    that start with ``NCCL_`` included. NCCL reads each variable through a name that is a string literal
    (``NCCL_PARAM`` pastes ``"NCCL_" name`` at compile time), and torch's ProcessGroupNCCL names the variables it
    reads in string literals too, so a variable neither library holds is read by neither. Cached per (path, size,
    modification time). The file is memory-mapped and searched with one regular expression: about 0.3 s for the 267 MiB
    ``libnccl.so.2`` of nvidia-nccl-cu12 2.18.1, 0.5 s for the 410 MiB one of 2.27.3 and 0.6 s for torch 2.11's 435 MiB
    ``libtorch_cuda.so`` (medians of 5, files in the page cache, a shared 2-core Intel Xeon under load 2.8; a first read
    from disk adds what the disk needs), 0.15 ms once cached."""
    stat = path.stat()
    return _library_nccl_names(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _library_nccl_names(path: str, size: int, mtime_ns: int) -> frozenset[str]:
    """:func:`library_nccl_names` of ``path``, whose size and modification time make a changed file a new entry."""
    if size == 0:  # mmap refuses an empty file
        return frozenset()
    names = set()
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for match in NCCL_NAME.finditer(data):
            found = match.group().decode("ascii")
            names.update(found[start:] for start in range(len(found)) if found.startswith("NCCL_", start))
    return frozenset(names)


def _package_folders(module: str) -> list[Path]:
    """The folders of the package ``module`` (one, or several for a namespace package), located without importing it
    (a parent package may be imported); empty where it is not found or is no package."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(folder) for folder in spec.submodule_search_locations]


def nccl_wheel_library() -> Path | None:
    """The nvidia-nccl wheel's ``nvidia/nccl/lib/libnccl.so.N`` that torch loads, found through importlib without
    importing torch: first the one next to torch (the ``libtorch_cuda.so`` of torch's pip wheels, 2.11 checked,
    carries the RPATH ``$ORIGIN/../../nvidia/nccl/lib``, which the loader searches before LD_LIBRARY_PATH), else the
    first along ``sys.path`` (where torch's ``_preload_cuda_deps`` looks when that fails). None without that wheel, as
    in containers whose torch is linked against the system's NCCL."""
    folders = [folder.parent / "nvidia" / "nccl" for folder in _package_folders("torch")[:1]]
    for folder in folders + _package_folders("nvidia.nccl"):
        found = sorted(path for path in (folder / "lib").glob(NCCL_WHEEL_LIBRARY) if _is_file(path))
        if found:
            return found[0]
    return None


def _nccl_wheel_version(library: Path) -> str | None:
    """Version of the one nvidia-nccl distribution (:data:`NCCL_DISTRIBUTIONS`) whose files hold ``library``; None
    where none does, or several do (two wheels write the same path)."""
    owners = set()
    for name in NCCL_DISTRIBUTIONS:
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        files = [Path(str(file.locate())) for file in distribution.files or () if file.name == library.name]
        if distribution.version and any(_same_path(file, library) for file in files):
            owners.add(distribution.version)
    return owners.pop() if len(owners) == 1 else None


def _same_path(first: Path, second: Path) -> bool:
    """Whether the two paths name one file (symbolic links and ``..`` resolved)."""
    try:
        return first.resolve() == second.resolve()
    except OSError:
        return False


def _nccl_names() -> tuple[NcclNames | None, str | None]:
    """(the ``NCCL_*`` names of the NCCL library torch loads and of torch's CUDA library, None), or (None, why they
    were not read)."""
    torch_library = next((folder / TORCH_CUDA_LIBRARY for folder in _package_folders("torch")[:1]), None)
    if torch_library is None or not _is_file(torch_library):
        return None, "torch has no lib/libtorch_cuda.so (a CPU build, or no torch), so it runs no NCCL"
    library = nccl_wheel_library()
    if library is None:
        return None, ("no nvidia-nccl wheel (nvidia/nccl/lib/libnccl.so.*) next to torch or on sys.path: torch uses "
                      "an NCCL of the system (a container's build), which the doctor does not read")
    try:
        return NcclNames(str(library), _nccl_wheel_version(library), library_nccl_names(library),
                         library_nccl_names(torch_library)), None
    except (OSError, ValueError) as error:  # unreadable (permissions of a shared install), or not mappable
        return None, f"{library} or {torch_library} could not be read ({type(error).__name__}: {error})"


def _torch_cuda_facts() -> tuple[str | None, str | None, tuple[GpuInfo, ...], str | None, str | None]:
    """(CUDA build version, NCCL version, GPUs, probe error, import error) from torch; all empty when torch is
    absent, and all but the import error when ``import torch`` raises."""
    if not _module_findable("torch"):
        return None, None, (), None, None
    try:
        import torch
    except Exception as error:  # a broken install raises OSError, ImportError, AttributeError, ...: a finding
        return None, None, (), None, f"{type(error).__name__}: {error}"

    try:
        cuda_version = torch.version.cuda
    except AttributeError as error:  # a torch that imports half-installed
        return None, None, (), f"{type(error).__name__}: {error}", None
    try:
        if cuda_version is None or not torch.cuda.is_available():
            return cuda_version, None, (), None, None
        nccl = torch.cuda.nccl.version()
        nccl_version = ".".join(str(part) for part in nccl) if isinstance(nccl, tuple) else str(nccl)
        gpus = []
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            gpus.append(GpuInfo(index, props.name, (props.major, props.minor), props.total_memory / 2**30))
    except Exception as error:  # a broken driver raises RuntimeError, a build without NCCL AttributeError, ...
        return cuda_version, None, (), f"{type(error).__name__}: {error}", None
    return cuda_version, nccl_version, tuple(gpus), None, None


def collect_environment(env: Mapping[str, str] | None = None) -> EnvironmentReport:
    """Probe this process: package versions, Python provision, torch's CUDA build and GPUs, nvcc, HybridEP, the
    ``NCCL_*`` names NCCL and torch read.

    ``env`` (default ``os.environ``) is only used to locate nvcc; the rules read their variables separately.
    """
    env = os.environ if env is None else env
    cuda_version, nccl_version, gpus, gpu_probe_error, torch_import_error = _torch_cuda_facts()
    tilelang_findable = _module_findable("tilelang")
    versions = {probe.name: _distribution_version(probe) for probe in PACKAGE_PROBES}
    # installed by its metadata or its module: a distribution whose package folder is gone does not import either.
    # torch first, as in training: torch loads the CUDA/NCCL libraries TE's core library links against
    te_installed = versions["transformer-engine"] is not None or _module_findable("transformer_engine")
    te_error = _import_error_in_subprocess("torch, transformer_engine.pytorch") if te_installed else None
    core_version, core_path = megatron_core_module()
    if core_version is not None:  # the release that is imported, not the one pip's metadata names
        versions["megatron-core"] = core_version
    te_flash_attention, te_flash_attention_error = (
        _te_flash_attention_in_subprocess() if te_installed and te_error is None else (None, None))
    nccl_names, nccl_names_unread = _nccl_names()
    return EnvironmentReport(
        python_version=".".join(str(part) for part in sys.version_info[:3]),
        typing_override_provided=_typing_override_provided(),
        versions=versions,
        cuda_version=cuda_version,
        nccl_version=nccl_version,
        nccl_names=nccl_names,
        nccl_names_unread=nccl_names_unread,
        gpus=gpus,
        gpu_probe_error=gpu_probe_error,
        torch_import_error=torch_import_error,
        tilelang_importable=tilelang_findable,
        tilelang_import_error=_import_error_in_subprocess("tilelang") if tilelang_findable else None,
        transformer_engine_import_error=te_error,
        megatron_core_import_error=(_import_error_in_subprocess(MEGATRON_CORE_PROBE) if te_error else None),
        nvcc_path=_find_nvcc(env),
        hybrid_ep=deep_ep_declares_hybrid_ep(),
        grad_accum_fusion_available=_grad_accum_fusion_available(),
        megatron_core_path=core_path,
        te_flash_attention=te_flash_attention,
        te_flash_attention_error=te_flash_attention_error,
    )


# ---------------------------------------------------------------------------------------------------------------
# Rules: pure functions of (report, environment variables) -> findings.


def check_python(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """Python version and whether ``typing.override`` (needed by ``megatron.training``) had to be provided."""
    if report.typing_override_provided:
        message = f"Python {report.python_version}: typing.override provided by megatron.oellm.compat."
    else:
        message = f"Python {report.python_version}: typing.override is native."
    return [Finding("ok", "python", message)]


def check_torch(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """torch must be installed and import: megatron-core, both backends and every GPU check need it."""
    version = report.versions.get("torch")
    if report.torch_import_error is not None:
        return [Finding("error", "torch", f"torch {version} is installed but `import torch` fails "
                        f"({report.torch_import_error}).",
                        "a missing lib*.so: put its folder on LD_LIBRARY_PATH (pip-installed CUDA libraries live in "
                        "site-packages/nvidia/*/lib); otherwise reinstall torch, or use the cluster container's")]
    if version is None:
        return [Finding("error", "torch", "torch is not installed.",
                        "use the cluster container's torch, or bash tools/install.sh")]
    build = f"CUDA {report.cuda_version} build" if report.cuda_version else "CPU build"
    return [Finding("ok", "torch", f"torch {version} imports ({build}).")]


def check_gpus(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """Warn when torch sees no GPU: the GPU-dependent rules then cannot tell whether they apply."""
    if report.gpus:
        names = ", ".join(sorted({gpu.name for gpu in report.gpus}))
        return [Finding("ok", "gpus", f"{len(report.gpus)} GPU(s) seen: {names}.")]
    if report.torch_import_error:
        reason = "torch does not import"
    elif report.gpu_probe_error:
        reason = f"torch failed to list the GPUs ({report.gpu_probe_error})"
    elif report.cuda_version is None:
        reason = "torch is a CPU build or not installed"
    else:
        reason = f"torch (CUDA {report.cuda_version}) sees no GPU"
    return [Finding("warning", "gpus", f"{reason}; the GPU-dependent checks (fla on Hopper) were not evaluated.",
                    "run `oellm doctor` inside a job on a compute node")]


def check_megatron_core(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """megatron-oellm is written against exactly one megatron-core release."""
    installed = report.versions.get("megatron-core")
    fix = f"pip install megatron-core=={MEGATRON_CORE_VERSION}"
    if installed is None:
        return [Finding("error", "megatron-core", "megatron-core is not installed.", fix)]
    if not _same_version(installed, MEGATRON_CORE_VERSION):
        where = f" (`import megatron.core` loads {report.megatron_core_path})" if report.megatron_core_path else ""
        return [Finding("error", "megatron-core",
                        f"megatron-core {installed} is installed{where}; megatron-oellm supports only "
                        f"{MEGATRON_CORE_VERSION}.",
                        f"{fix}; if {report.megatron_core_path} is a Megatron-LM checkout, take it off PYTHONPATH"
                        if where else fix)]
    return [Finding("ok", "megatron-core", f"megatron-core {installed} is the supported release.")]


def _same_version(installed: str, wanted: str) -> bool:
    """PEP 440 equality (``0.19.2`` == ``0.19.2.0``), falling back to string equality for unparsable versions."""
    try:
        return Version(installed) == Version(wanted)
    except InvalidVersion:
        return installed == wanted


def is_hopper(gpu: GpuInfo) -> bool:
    """Hopper as fla decides it: compute capability 9.x, or a device name containing ``NVIDIA H``."""
    return gpu.capability[0] == 9 or "NVIDIA H" in gpu.name


def check_transformer_engine(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """Which backend ``--oellm-backend auto`` gets, and an error when Transformer Engine is installed but does not import:
    ``auto`` would then fall back to the torch-native backend (slower, no FP8, no context parallelism) without the
    user having chosen it, or, when megatron-core does not import next to that TE either, nothing runs at all."""
    version = report.versions.get("transformer-engine")
    if version is None:
        return [Finding("ok", "transformer-engine",
                        "Transformer Engine is not installed: --oellm-backend auto uses the torch-native backend.")]
    if report.transformer_engine_import_error is None:
        imports = f"Transformer Engine {version} imports: --oellm-backend auto uses it"
        if report.grad_accum_fusion_available:
            return [Finding("ok", "transformer-engine", f"{imports}.")]
        return [Finding("warning", "transformer-engine",
                        f"{imports}; apex's fused_weight_gradient_mlp_cuda extension is missing or does not import "
                        "(built against another torch?), which megatron-core's output layer needs under Megatron's "
                        "default gradient accumulation fusion, so the training entry refuses te-backend runs without "
                        "--no-gradient-accumulation-fusion (`oellm recipe --local` adds it).",
                        "install apex with its CUDA extensions (--cpp_ext --cuda_ext), built against this torch, or "
                        "pass --no-gradient-accumulation-fusion")]
    repair = ("a missing lib*.so: put its folder on LD_LIBRARY_PATH (pip-installed CUDA libraries live in "
              "site-packages/nvidia/*/lib); otherwise rebuild transformer_engine_torch against this torch")
    broken = (f"Transformer Engine {version} is installed but `import transformer_engine.pytorch` fails "
              f"({report.transformer_engine_import_error})")
    if report.megatron_core_import_error is not None:
        return [Finding(
            "error", "transformer-engine",
            f"{broken}, and megatron-core itself does not import next to it ({report.megatron_core_import_error}): "
            "it treats only a missing Transformer Engine as absent, so no backend runs, the torch-native one "
            "included.",
            f"{repair}; or remove Transformer Engine from this environment (pip uninstall transformer-engine "
            "transformer-engine-torch transformer-engine-cu12 transformer-engine-cu13, or take it off PYTHONPATH) to "
            "run the torch-native backend")]
    return [Finding("error", "transformer-engine", f"{broken}; --oellm-backend auto would fall back to the torch-native "
                    "backend.", f"{repair}, or choose --oellm-backend torch explicitly")]


def check_fla_hopper_triton(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """fla's Triton GDN/KDA backward is wrong on Hopper with 3.4 <= Triton < 3.7.1 unless its TileLang path runs.

    fla 0.6.0 replaces that Triton kernel by a TileLang one when tilelang is importable, an nvcc is found, and
    neither ``FLA_TILELANG=0`` nor ``FLA_DISABLE_BACKEND_DISPATCH=1`` is set; otherwise it raises in the backward
    pass (older fla releases silently computed wrong gradients).
    """
    name = "fla-hopper-triton"
    fla, triton = report.versions.get("fla"), report.versions.get("triton")
    hopper = [gpu for gpu in report.gpus if is_hopper(gpu)]
    missing = [what for what, absent in (("fla", fla is None), ("Triton", triton is None), ("Hopper GPU", not hopper))
               if absent]
    if missing:
        return [Finding("ok", name, f"not applicable: {', '.join(missing)} not found.")]
    try:
        triton_version = Version(triton)
    except InvalidVersion:
        return [Finding("warning", name, f"cannot parse the Triton version {triton!r} to check fla issue 640.",
                        "install a released Triton >= 3.7.1")]
    if not FLA_BAD_TRITON_FROM <= triton_version < FLA_FIXED_TRITON:
        return [Finding("ok", name, f"Triton {triton} is outside the range affected by fla issue 640.")]
    tilelang_blocker = _fla_tilelang_blocker(report, env)
    if tilelang_blocker is None:
        return [Finding("ok", name,
                        f"Triton {triton} on Hopper is affected by fla issue 640, but fla uses its TileLang backward.")]
    return [Finding(
        "error", name,
        f"fla GDN/KDA backward gives wrong gradients on Hopper ({hopper[0].name}) with Triton {triton} "
        f"(fla issue 640; fla 0.6.0 raises in the GDN backward instead), and fla cannot use its TileLang backward: "
        f"{tilelang_blocker}. Training the models with GDN or KDA layers (Qwen3.5, the OEL hybrid) fails; the Qwen3 "
        f"MoE models use no fla kernel.",
        "pip install tilelang (fla then uses its TileLang backward; it needs nvcc) or pip install 'triton>=3.7.1'",
    )]


def _fla_tilelang_blocker(report: EnvironmentReport, env: Mapping[str, str]) -> str | None:
    """Why fla would not use its TileLang kernels here, or None when it would."""
    if not report.tilelang_importable:
        return "tilelang is not installed"
    if report.tilelang_import_error is not None:
        return (f"tilelang is installed but does not import ({report.tilelang_import_error}); tilelang 0.1.15 needs "
                "z3-solver >= 4.13, < 4.15.5 (it loads libz3.so.4.15) and apache-tvm-ffi >= 0.1.11, < 0.1.13")
    if report.nvcc_path is None:
        return "tilelang is installed but no nvcc was found (set CUDA_HOME or load a CUDA module)"
    if env.get("FLA_DISABLE_BACKEND_DISPATCH") == "1":
        return "FLA_DISABLE_BACKEND_DISPATCH=1 disables fla's backend dispatch"
    if env.get("FLA_TILELANG", "1") == "0":
        return "FLA_TILELANG=0 disables fla's TileLang backend"
    return None


def nccl_integer(raw: str) -> int | None:
    """The value NCCL reads from a numeric variable's ``raw`` text (see :data:`NCCL_INTEGER`: ``0x10`` is 16,
    ``010`` is 8), or None where the whole text is no such number or lies outside int64, whose overflow makes NCCL
    keep its default. Surrounding whitespace is ignored, as NCCL's parse stops at it."""
    match = NCCL_INTEGER.fullmatch(raw.strip())
    if match is None:
        return None
    sign, digits = match.groups()
    base = 16 if digits[:2] in ("0x", "0X") else 8 if digits[0] == "0" else 10
    value = -int(digits, base) if sign == "-" else int(digits, base)
    return value if -(2**63) <= value < 2**63 else None


def check_nccl_channels(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """The channel variables NCCL reads (:data:`NCCL_CHANNEL_VARIABLES`) above :data:`NCCL_CHANNEL_LIMIT` make NCCL set
    up more channels, whose buffers lie in GPU memory outside PyTorch's allocator; one NCCL reads as no number is an
    error. A variable of :data:`NCCL_UNREAD_VARIABLES` that is set is a warning: it changes nothing, unless the NCCL
    library found here (:attr:`EnvironmentReport.nccl_names`, a later release) holds its name, which is an ok line."""
    findings = [_nccl_channel_finding(variable, env.get(variable)) for variable in NCCL_CHANNEL_VARIABLES]
    names = report.nccl_names if not _wheel_is_not_torchs_nccl(report) else None
    for variable, instead in NCCL_UNREAD_VARIABLES.items():
        if not env.get(variable):  # an empty one is no setting under any name
            continue
        if names is not None and variable in names.nccl:
            findings.append(Finding("ok", variable, f"{variable}={env[variable]!r}: {names.library} (NCCL "
                                    f"{names.version or 'of unknown version'}) holds the name, unlike NCCL "
                                    f"{NCCL_CHECKED_RELEASES}; its value is not checked."))
        else:
            findings.append(Finding(
                "warning", variable,
                f"{variable}={env[variable]!r} has no effect: NCCL {NCCL_CHECKED_RELEASES} (the releases checked) "
                f"read no such variable. The per-peer channel count NCCL reads is {instead}, for peers reached "
                "over the network.",
                f"unset {variable} ({instead} sets the channels per network peer)"))
    return findings


def _nccl_channel_finding(variable: str, raw: str | None) -> Finding:
    """The finding on one of :data:`NCCL_CHANNEL_VARIABLES` set to ``raw`` (None: unset)."""
    if not raw:  # NCCL reads an empty variable as an unset one
        state = "unset" if raw is None else "empty, which NCCL reads as unset"
        return Finding("ok", variable, f"{variable} is {state} (NCCL default).")
    value = nccl_integer(raw)
    if value is not None and value == NCCL_CHANNEL_AUTOMATIC.get(variable):
        return Finding("ok", variable, f"{variable}={raw.strip()} leaves the count to NCCL.")
    smallest = NCCL_CHANNEL_SMALLEST[variable]
    if value is None or value < smallest:  # a non-number or a count below the smallest NCCL means is a typo
        return Finding("error", variable, f"{variable}={raw!r} is not a whole number of {smallest} or more (NCCL "
                       "reads decimal, 0x hexadecimal or 0-prefixed octal).",
                       f"export {variable}={NCCL_CHANNEL_LIMIT}  (or unset it)")
    shown = str(value) if raw.strip() == str(value) else f"{raw.strip()} (= {value})"
    if value > NCCL_CHANNEL_LIMIT:
        return Finding(
            "warning", variable,
            f"{variable}={shown} is above {NCCL_CHANNEL_LIMIT}: {NCCL_CHANNEL_EFFECTS[variable]}, and NCCL keeps "
            "buffers for each channel in GPU memory that PyTorch does not own, so training OOMs at a smaller batch "
            "than torch.cuda memory statistics suggest.",
            f"export {variable}={NCCL_CHANNEL_LIMIT}")
    return Finding("ok", variable, f"{variable}={shown}.")


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version (``2.27.3.post1`` and ``2.27.3`` are both (2, 27, 3)), to compare the
    nvidia-nccl wheel's version with the NCCL torch reports."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _wheel_is_not_torchs_nccl(report: EnvironmentReport) -> bool:
    """Whether torch reports another NCCL release than the nvidia-nccl wheel whose names were read: those names then
    say nothing of the NCCL that runs."""
    names = report.nccl_names
    return bool(names is not None and names.version and report.nccl_version
                and _release(names.version) != _release(report.nccl_version))


def check_nccl_variable_names(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """Every ``NCCL_*`` variable set in ``env`` that neither the NCCL library torch loads nor torch's own CUDA library
    names (:attr:`EnvironmentReport.nccl_names`) is a warning: nothing in NCCL or PyTorch reads it, so it is a typo, a
    variable of another tool, or one read only by a plugin NCCL loads (a network, tuner or profiler plugin such as
    aws-ofi-nccl or a cloud's network plugin, which may well act on it). torch's ``libtorch_cuda.so`` is
    searched too because its ProcessGroupNCCL reads legacy ``NCCL_*`` names NCCL does not (``NCCL_BLOCKING_WAIT``,
    ``NCCL_ASYNC_ERROR_HANDLING``, ``NCCL_DESYNC_DEBUG``, ...). Empty variables are skipped (no setting under any
    name), as are those :func:`check_nccl_channels` reports and the installation's (:data:`NCCL_INSTALL_VARIABLES`).
    One ok line where the names were not read (no CUDA torch, an NCCL not from the nvidia-nccl wheel, or torch
    reporting another NCCL release than the wheel found, as where torch links a system NCCL), or where
    ``LD_PRELOAD`` puts another NCCL first (a ``libnccl.so.*`` other than the wheel's; a preloaded
    ``libnccl-net.so`` plugin is no NCCL)."""
    name = "nccl-variables"
    passed = {*NCCL_UNREAD_VARIABLES, *NCCL_INSTALL_VARIABLES}
    variables = sorted(variable for variable, value in env.items()
                       if variable.startswith("NCCL_") and value and variable not in passed)
    if not variables:
        return []
    names = report.nccl_names
    if names is None:
        return [Finding("ok", name, f"NCCL_* names not checked: {report.nccl_names_unread or 'not probed'}.")]
    if _wheel_is_not_torchs_nccl(report):
        return [Finding("ok", name, f"NCCL_* names not checked: torch runs NCCL {report.nccl_version}, not the "
                        f"nvidia-nccl wheel's {names.version} at {names.library} (a torch linked against another "
                        "NCCL, the wheel installed for some other package).")]
    preloaded = [entry for entry in re.split(r"[\s:]+", env.get("LD_PRELOAD", ""))
                 if LIBNCCL_FILE.match(Path(entry).name)]
    if any(not _same_path(Path(entry), Path(names.library)) for entry in preloaded):
        return [Finding("ok", name, f"NCCL_* names not checked: LD_PRELOAD={env['LD_PRELOAD']!r} loads an NCCL "
                        f"before the nvidia-nccl wheel's {names.library}.")]
    nccl = f"NCCL {names.version}" if names.version else f"the NCCL of {names.library}"
    read = names.nccl | names.torch
    unread = [variable for variable in variables if variable not in read]
    findings = [Finding(
        "warning", name,
        f"{variable}={env[variable]!r} is read by neither {nccl} nor PyTorch (neither {names.library} nor torch's "
        "libtorch_cuda.so holds the name): a typo, a variable of another tool, or one read only by a plugin NCCL "
        "loads (network, tuner or profiler, e.g. aws-ofi-nccl); NCCL itself and PyTorch run as if it were unset.",
        "check the name against NCCL's documented variables (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ENV logs those NCCL "
        f"takes up) and those of the plugins NCCL loads; unset {variable} if nothing reads it") for variable in unread]
    return findings or [Finding("ok", name, f"{len(variables)} NCCL_* variable(s) set, each read by {nccl} or "
                                "PyTorch.")]


UNIFIED_ALLOC_CONF_TORCH = (2, 10)
"""First torch release (major, minor) whose CUDA caching allocator reads ``PYTORCH_ALLOC_CONF``, and then only where
``PYTORCH_CUDA_ALLOC_CONF`` is absent (an empty one counts as present). torch 2.9 reads ``PYTORCH_ALLOC_CONF`` into
its device-generic settings but not into the CUDA allocator's expandable segments (pytorch issue 183387); older
releases do not read it at all."""


def allocator_variables(torch_version: str | None) -> tuple[str, ...]:
    """The allocator variables the CUDA caching allocator of torch ``torch_version`` reads, in its order (the first
    present one wins): ``PYTORCH_CUDA_ALLOC_CONF`` alone before :data:`UNIFIED_ALLOC_CONF_TORCH` (or when the version
    is unknown), then ``PYTORCH_ALLOC_CONF`` after it; so the doctor judges the variable torch really uses."""
    try:
        release = Version(torch_version or "").release
    except InvalidVersion:
        release = ()
    if release[:2] >= UNIFIED_ALLOC_CONF_TORCH:  # 2.10.0a0 (an NGC build of 2.10) counts as 2.10
        return "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"
    return ("PYTORCH_CUDA_ALLOC_CONF",)


def allocator_conf(env: Mapping[str, str], torch_version: str | None) -> tuple[str, str] | None:
    """(variable, value) of the allocator configuration torch ``torch_version`` reads (:func:`allocator_variables`),
    or None when it reads none."""
    for variable in allocator_variables(torch_version):
        if variable in env:
            return variable, env[variable]
    return None


def parse_allocator_conf(value: str) -> dict[str, str]:
    """``key:value,key:value`` -> dict; commas inside ``[...]`` (e.g. roundup_power2_divisions) do not split."""
    items, depth, current = [], 0, ""
    for char in value:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    options = {}
    for item in items:
        key, _, option = item.partition(":")
        if key.strip():
            options[key.strip()] = option.strip()
    return options


def check_allocator_conf(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """Without expandable segments the caching allocator fragments and long MoE runs OOM with memory still free; a
    value other than ``True``/``False`` (``true``, ``1``) makes torch raise when CUDA allocates, so it is an error.
    Judged on the variable the installed torch reads (:func:`allocator_variables`): a ``PYTORCH_ALLOC_CONF`` that
    torch ignores (too old a torch, or shadowed by ``PYTORCH_CUDA_ALLOC_CONF``) is a warning, since what it says is
    lost."""
    name = "pytorch-alloc-conf"
    torch_version = report.versions.get("torch")
    variables = allocator_variables(torch_version)
    found = allocator_conf(env, torch_version)
    ignored = _ignored_allocator_conf(env, torch_version, found)
    if found is None:
        wanted = variables[-1]  # the newest name this torch reads
        if ignored is not None:
            return [Finding("warning", name, f"{ignored}, so expandable segments are off.",
                            f"export {wanted}={_with_expandable_segments(env['PYTORCH_ALLOC_CONF'])}")]
        return [Finding("warning", name, f"{' and '.join(variables)} {'is' if len(variables) == 1 else 'are'} "
                        "unset, so expandable segments are off and the caching allocator fragments.",
                        f"export {wanted}=expandable_segments:True")]
    variable, value = found
    also = f" ({ignored})" if ignored is not None else ""
    expandable = parse_allocator_conf(value).get("expandable_segments")
    if expandable not in (None, "True", "False"):
        return [Finding("error", name, f"{variable}={value!r} sets expandable_segments to {expandable!r}: torch "
                        "accepts only True or False and raises a ValueError at the first CUDA allocation, after the "
                        f"job has started{also}.",
                        f"export {variable}={_with_expandable_segments(value)}")]
    if expandable != "True":
        return [Finding("warning", name, f"{variable}={value!r} lacks expandable_segments:True, so the caching "
                        f"allocator fragments{also}.",
                        f"add expandable_segments:True to {variable}, e.g. "
                        f"export {variable}={_with_expandable_segments(value)}")]
    if ignored is not None:
        return [Finding("warning", name, f"{variable} enables expandable segments, but {ignored}.",
                        f"move the options you need into {variable} and unset PYTORCH_ALLOC_CONF")]
    return [Finding("ok", name, f"{variable} enables expandable segments.")]


def _ignored_allocator_conf(env: Mapping[str, str], torch_version: str | None,
                            found: tuple[str, str] | None) -> str | None:
    """Why a ``PYTORCH_ALLOC_CONF`` set to something else than what torch reads is lost, or None when it is not."""
    value = env.get("PYTORCH_ALLOC_CONF")
    if value is None or (found is not None and found[1] == value):
        return None
    since = ".".join(map(str, UNIFIED_ALLOC_CONF_TORCH))
    if "PYTORCH_ALLOC_CONF" not in allocator_variables(torch_version):
        if not _readable_version(torch_version):
            return (f"PYTORCH_ALLOC_CONF={value!r} is ignored if torch (its version unknown here) is older than "
                    f"{since}, whose CUDA allocator reads only PYTORCH_CUDA_ALLOC_CONF")
        return (f"PYTORCH_ALLOC_CONF={value!r} is ignored: the CUDA allocator of torch {torch_version} reads only "
                f"PYTORCH_CUDA_ALLOC_CONF (PYTORCH_ALLOC_CONF from torch {since} on)")
    return f"PYTORCH_ALLOC_CONF={value!r} is ignored: torch reads PYTORCH_CUDA_ALLOC_CONF first, even when empty"


def _readable_version(version: str | None) -> bool:
    """Whether ``version`` is a version number (not None, not :data:`UNKNOWN_VERSION`): only then may a message say
    which release is installed and what it reads."""
    try:
        Version(version or "")
    except InvalidVersion:
        return False
    return True


def _with_expandable_segments(value: str) -> str:
    """``value`` with ``expandable_segments:True`` set (replacing any other expandable_segments value)."""
    options = parse_allocator_conf(value)
    options["expandable_segments"] = "True"
    return ",".join(f"{key}:{option}" for key, option in options.items())


SWITCH_OFF_VALUES = ("", "0")
"""Values of a slow-path switch that say "off" as plainly as leaving it unset."""


def check_slow_path_switches(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """megatron-oellm's A/B switches (:data:`megatron.oellm.switches.SLOW_PATH_SWITCHES`) left on in a job's
    environment make a production run slower without any error; one set to another value than ``1`` (``true``,
    ``yes``) is silently off, so an A/B run meant to time the slow path would time the fast one twice."""
    findings = []
    for name, cost in SLOW_PATH_SWITCHES.items():
        if is_on(name, env):
            findings.append(Finding("warning", "oellm-switches", f"{name}=1: {cost}; it is meant for A/B runs.",
                                    f"unset {name}"))
        elif env.get(name, "") not in SWITCH_OFF_VALUES:
            findings.append(Finding("warning", "oellm-switches",
                                    f"{name}={env[name]!r} leaves the switch off: only the value 1 turns it on.",
                                    f"export {name}=1 to run the slow path, or unset {name}"))
    return findings or [Finding("ok", "oellm-switches", f"no slow-path switch ({', '.join(SLOW_PATH_SWITCHES)}) is "
                                "set.")]


HYBRID_EP_RECIPE_BASES = ("_mn5.toml", "_qwen3_235b_a22b_jupiter.toml")
"""Recipe bases in ``examples/oellm/`` that set ``moe-token-dispatcher-type = "flex"`` with
``moe-flex-dispatcher-backend = "hybridep"``; every recipe extending them dispatches with HybridEP."""


def _recipe_bases_text(bases: tuple[str, ...]) -> str:
    """``examples/oellm/A and examples/oellm/B``: the recipe bases a warning names."""
    return " and ".join(f"examples/oellm/{base}" for base in bases)


def check_hybrid_ep(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """The recipes of ``examples/oellm/`` dispatch MoE tokens with HybridEP (``deep_ep.HybridEPBuffer``, DeepEP's
    hybrid-ep branch), some rows with DeepEP's own ``deepep`` backend (``deep_ep`` alone). Said as the training entry
    judges it (:func:`megatron.oellm.training.dispatcher.flex_dispatcher_problem`): without deep_ep it refuses both
    backends at start, after the job's wait in the queue; with DeepEP's main branch only hybridep; where deep_ep's
    ``__init__`` cannot be read it lets both through, and megatron-core raises on a missing HybridEPBuffer only as it
    builds the MoE layers. A warning, not an error: the all-to-all dispatcher and dense models need neither."""
    name = "hybrid-ep"
    deep_ep = report.versions.get("deep-ep")
    if report.hybrid_ep:
        return [Finding("ok", name, f"deep_ep {deep_ep} has HybridEPBuffer: the flex dispatcher's hybridep backend "
                        "(the examples/oellm/ recipes') can run.")]
    bases = _recipe_bases_text(HYBRID_EP_RECIPE_BASES)
    image = "use the image of the Dockerfile's hybridep target (docker build --target hybridep .; docs/container.md)"
    alltoall = 'moe-token-dispatcher-type = "alltoall"'
    if deep_ep is None:
        return [Finding(
            "warning", name,
            "DeepEP (deep_ep) is not installed, so runs with --moe-token-dispatcher-type flex "
            f"--moe-flex-dispatcher-backend hybridep or deepep are refused at start: those of the recipes extending "
            f"{bases}, except rows that switch to the all-to-all dispatcher, which needs neither.",
            f"{image}, or set {alltoall} in the recipe's flags")]
    rows = (f"those of the recipes extending {bases}, except rows that switch to the all-to-all dispatcher or to "
            "DeepEP's own backend, which need no HybridEP")
    way_out = f"{image}, or set moe-flex-dispatcher-backend = \"deepep\" or {alltoall} in the recipe's flags"
    if report.hybrid_ep is False:
        return [Finding(
            "warning", name,
            f"deep_ep {deep_ep} has no HybridEPBuffer (DeepEP's main branch; HybridEP is on its hybrid-ep branch), so "
            f"runs with --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep are refused at start: "
            f"{rows}.", way_out)]
    return [Finding(
        "warning", name,
        f"deep_ep {deep_ep} is installed, but whether it has HybridEPBuffer could not be read, nor can the training "
        "entry read it: if it lacks it, runs with --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend "
        f"hybridep start and fail when megatron-core builds the MoE layers, on every rank after GPU set-up: {rows}.",
        way_out)]


FLASH_ATTENTION_RECIPE_BASES = ("_mn5.toml",)
"""Recipe bases in ``examples/oellm/`` that set ``attention-backend = "flash"``."""


def check_te_flash_attention(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """``--attention-backend flash`` on the te backend needs a flash attention Transformer Engine can run here: the
    training entry refuses it otherwise (TE's first forward would find no attention backend), judged as the entry
    judges it (:func:`megatron.oellm.backends.selection.flash_attention_refusal`) from the flash-attn packages TE
    took up, the ``NVTE_FLASH_ATTN_V*`` pins in ``env`` and the first GPU; the run's dtype is not known here. Only
    where TE imports; a warning, as rows with ``attention-backend = "auto"`` run either way."""
    name = "te-flash-attention"
    te = report.versions.get("transformer-engine")
    if te is None or report.transformer_engine_import_error is not None:
        return []
    bases = _recipe_bases_text(FLASH_ATTENTION_RECIPE_BASES)
    refused = (f"te-backend runs with --attention-backend flash are refused at start: the rows of the recipes "
               f"extending {bases} (`oellm recipe --local` runs them with --attention-backend auto).")
    way_out = "attention-backend = \"auto\" in the recipe's flags"
    if report.te_flash_attention is None:
        why = report.te_flash_attention_error or "not probed"
        return [Finding("warning", name, f"which flash-attn Transformer Engine {te} takes up could not be read "
                        f"({why}); if it takes none up, {refused}", f"set {way_out} where in doubt")]
    from megatron.oellm.backends.selection import (
        FLASH_ATTN_PACKAGES,
        flash_attention_refusal,
        runnable_flash_attention,
    )

    capability = report.gpus[0].capability if report.gpus else None
    refusal = flash_attention_refusal(report.te_flash_attention, environ=env, dtype=None, capability=capability,
                                      flash_attention_version=None)
    if refusal is None:
        runnable = runnable_flash_attention(report.te_flash_attention, environ=env, capability=capability)
        found = ", ".join(f"{FLASH_ATTN_PACKAGES[generation]} {version}" for generation, version in runnable.items())
        return [Finding("ok", name, f"Transformer Engine {te} runs {found} here: --attention-backend flash can run "
                        "(in bf16 or fp16 training).")]
    container = "" if report.te_flash_attention.accepted else " (NVIDIA's PyTorch containers bring one)"
    return [Finding("warning", name, f"Transformer Engine {te} has no flash attention here: {refusal.why}, so {refused}",
                    f"{refusal.fix}{container}, or set {way_out}")]


def check_attention_switches(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """Transformer Engine's attention switches (``NVTE_FLASH_ATTN``, ``NVTE_FUSED_ATTN``, ``NVTE_UNFUSED_ATTN``,
    ``NVTE_FLASH_ATTN_V2/V3/V4``) preset in ``env``: megatron-core sets them itself when it builds a model and asserts
    that a preset value agrees (:mod:`megatron.oellm.training.attention_env`), so the training entry refuses runs whose
    ``--attention-backend`` / ``--flash-attention-version`` disagree. A warning naming the settings that still start,
    as the doctor does not know which a run will use; ok when none is preset."""
    from megatron.oellm.training.attention_env import (
        FLASH_GENERATIONS,
        SWITCH_VALUES,
        SWITCHES,
        VERSION_PINS,
        attention_env_conflicts,
    )

    name = "attention-switches"
    preset = {variable: env[variable] for variable in (*SWITCHES, *VERSION_PINS) if variable in env}
    if not preset:
        return [Finding("ok", name, "no NVTE attention switch is preset (megatron-core sets them for "
                        "--attention-backend).")]
    backends = [backend for backend in SWITCH_VALUES
                if not set(attention_env_conflicts(env, backend, None)) & set(SWITCHES)]
    versions = [generation for generation in FLASH_GENERATIONS
                if not set(attention_env_conflicts(env, "auto", generation)) & set(VERSION_PINS)]
    shown = ", ".join(f"{variable}={value}" for variable, value in preset.items())
    starts = (f"with --attention-backend {' / '.join(backends)} only" if backends
              else "with no --attention-backend (auto, the default, included)")
    if len(versions) == len(FLASH_GENERATIONS):
        pinned = ""
    elif versions:
        pinned = f", and --flash-attention-version unset or {' / '.join(map(str, versions))}"
    else:
        pinned = ", and --flash-attention-version unset"
    if "auto" in backends and "flash" in backends and not pinned:
        return [Finding("ok", name, f"{shown} preset: it agrees with what megatron-core sets for --attention-backend "
                        "auto and flash.")]
    return [Finding(
        "warning", name,
        f"{shown} preset: megatron-core sets these itself when it builds a model and asserts that a preset value "
        f"agrees, so runs start {starts}{pinned} (the training entry refuses the others before they start; the "
        f"default is auto, the MN5 recipes use flash).",
        f"unset {' '.join(preset)} and choose TE's attention kernels with --attention-backend and "
        "--flash-attention-version")]


Rule = Callable[[EnvironmentReport, Mapping[str, str]], list[Finding]]
RULES: tuple[Rule, ...] = (
    check_python,
    check_torch,
    check_gpus,
    check_megatron_core,
    check_transformer_engine,
    check_fla_hopper_triton,
    check_nccl_channels,
    check_nccl_variable_names,
    check_allocator_conf,
    check_slow_path_switches,
    check_hybrid_ep,
    check_te_flash_attention,
    check_attention_switches,
)
"""Every rule, in report order."""


def check_environment(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """Run every rule of :data:`RULES` on ``report`` and the environment variables ``env``."""
    return [finding for rule in RULES for finding in rule(report, env)]


def exit_status(findings: list[Finding]) -> int:
    """1 if any finding is an error, else 0."""
    return int(any(finding.severity == "error" for finding in findings))


# ---------------------------------------------------------------------------------------------------------------
# Rendering.


def version_rows(report: EnvironmentReport) -> dict[str, str | None]:
    """Every reported version in display order: python, CUDA and NCCL of torch, packages, HybridEP."""
    rows: dict[str, str | None] = {"python": report.python_version}
    rows.update(report.versions)
    rows["cuda"] = report.cuda_version
    rows["nccl"] = report.nccl_version
    rows["hybrid-ep"] = report.versions.get("deep-ep") if report.hybrid_ep else None
    return rows


def format_text(report: EnvironmentReport, findings: list[Finding]) -> str:
    """Human report: aligned version table, GPU list, then each finding with its fix line."""
    rows = version_rows(report)
    width = max(len(name) for name in rows)
    lines = ["Versions"]
    for name, version in rows.items():
        shown = version if version is not None else "-"
        if name == "python" and report.typing_override_provided:
            shown += "  (typing.override provided by megatron.oellm.compat)"
        if name in ("cuda", "nccl") and version is not None:
            shown += "  (torch build)"
        if name == "hybrid-ep" and version is not None:
            shown += "  (deep_ep.HybridEPBuffer)"
        lines.append(f"  {name:<{width}}  {shown}")
    lines += ["", "GPUs"]
    lines += [f"  {gpu.index}  {gpu.name}  sm_{gpu.capability[0]}{gpu.capability[1]}  {gpu.memory_gib:.1f} GiB"
              for gpu in report.gpus] or ["  none seen by torch"]
    lines += ["", "Findings"]
    for finding in findings:
        lines.append(f"  {'[' + finding.severity + ']':<9}  {finding.name}: {finding.message}")
        if finding.fix:
            lines.append(f"  {'':<9}  fix: {finding.fix}")
    errors = sum(finding.severity == "error" for finding in findings)
    warnings = sum(finding.severity == "warning" for finding in findings)
    lines += ["", f"{errors} error(s), {warnings} warning(s)"]
    return "\n".join(lines)


def to_json(report: EnvironmentReport, findings: list[Finding]) -> dict[str, Any]:
    """Machine report: ``{versions, gpus, findings, ok}``; ``ok`` is False exactly when the exit status is 1."""
    return {
        "versions": version_rows(report),
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


__all__ = [
    "EnvironmentReport",
    "Finding",
    "GpuInfo",
    "PACKAGE_PROBES",
    "RULES",
    "check_environment",
    "collect_environment",
    "exit_status",
    "format_text",
    "to_json",
]
