"""Collection: the only part of the doctor that looks at the running process.

:func:`collect_environment` probes this process once into an :class:`~megatron.oellm.doctor.report.EnvironmentReport`:
package versions from distribution metadata (:data:`PACKAGE_PROBES`), modules located with
``importlib.util.find_spec`` without importing them; only torch is imported, for its CUDA build and the GPUs; what
may fail to import, Transformer Engine among them, is imported in a fresh interpreter. The ``NCCL_*`` names of the
NCCL library torch loads are read by :mod:`megatron.oellm.doctor.nccl`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from megatron.oellm.doctor.allocator import ALLOCATOR_VARIABLES, allocator_conf, allocator_items
from megatron.oellm.doctor.locate import is_file, module_findable, module_folder, package_folders
from megatron.oellm.doctor.nccl import _nccl_names
from megatron.oellm.doctor.report import UNKNOWN_VERSION, EnvironmentReport, GpuInfo
from megatron.oellm.paths import source_checkout

if typing.TYPE_CHECKING:
    from megatron.oellm.backends.te_flash_attention import FlashAttentionFound


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


def distribution_version(probe: PackageProbe) -> str | None:
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
    return UNKNOWN_VERSION if probe.module is not None and module_findable(probe.module) else None


def module_folders() -> dict[str, str | None]:
    """Package name -> the folder its module is imported from (:func:`~megatron.oellm.doctor.locate.module_folder`),
    None where it is not found, for each of :data:`PACKAGE_PROBES` that names a module: a torch, fla or Triton on
    PYTHONPATH ahead of the environment's own copy is then seen in the report."""
    folders = {probe.name: module_folder(probe.module) for probe in PACKAGE_PROBES if probe.module is not None}
    return {name: None if folder is None else str(folder) for name, folder in folders.items()}


def _run_in_fresh_interpreter(code: str, what: str, timeout_s: float,
                              env: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """(stdout, None) of ``code`` run in a fresh interpreter (what may load native libraries or fail to import is
    kept out of this process), with ``env`` (default: this process's), or (stdout, why) when it fails: its last error
    line, else what happened to ``what`` (the probe's name in messages)."""
    try:  # errors="replace": a native library's message may name a path in another encoding than UTF-8
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, errors="replace",
                                timeout=timeout_s, check=False, env=None if env is None else dict(env))
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
from megatron.oellm.backends.te_flash_attention import te_flash_attention_found
found = te_flash_attention_found()
print(json.dumps({"accepted": found.accepted, "rejected": found.rejected}))
"""
"""What the doctor runs in a fresh interpreter to read which flash-attn packages Transformer Engine takes up."""


ALLOCATOR_SETTINGS_PROBE = """
import torch
parse = getattr(torch._C, "_accelerator_setAllocatorSettings", None)  # what torch reads the variables with
items = {items!r}
for end in range(1, len(items) + 1) if parse is not None else ():
    try:
        parse(",".join(items[:end]))
    except Exception as error:
        lines = str(error).strip().splitlines()
        print(items[end - 1])
        print(type(error).__name__ + (": " + lines[0][:200] if lines else ""))
        break
"""
"""What the doctor runs in a fresh interpreter to ask the installed torch's own allocator-settings parser about an
allocator configuration: its items in growing prefixes (torch reads them in order), printing the first item refused
and the error."""


def allocator_refusal_in_subprocess(items: list[str], timeout_s: float = 180.0) -> tuple[str, str] | None:
    """(item, torch's error) of the first of ``items`` (an allocator configuration's ``key:value`` items) that the
    installed torch's allocator-settings parser refuses, asked in a fresh interpreter (the parser sets process-wide
    state); None when it takes them all, or cannot be asked (torch does not import, has no such parser)."""
    # torch would parse an exported configuration before the probe's own call, and refuse its first item for what
    # another item holds
    unset = {key: value for key, value in os.environ.items() if key not in ALLOCATOR_VARIABLES}
    out, error = _run_in_fresh_interpreter(ALLOCATOR_SETTINGS_PROBE.format(items=items), "the allocator probe",
                                           timeout_s, unset)
    lines = out.splitlines()
    return (lines[0], lines[1]) if error is None and len(lines) >= 2 else None


def _te_flash_attention_in_subprocess(timeout_s: float = 180.0) -> tuple[FlashAttentionFound | None, str | None]:
    """(the flash-attn packages Transformer Engine takes up, None) read in a fresh interpreter, as the training
    entry reads them; (None, why) when that probe fails."""
    stdout, error = _run_in_fresh_interpreter(TE_FLASH_ATTENTION_PROBE, "the probe", timeout_s)
    lines = stdout.strip().splitlines()
    if error is not None or not lines:
        return None, error or "the probe exited with status 0"
    from megatron.oellm.backends.te_flash_attention import FlashAttentionFound

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
    return (module_findable(GRAD_ACCUM_FUSION_MODULE)
            and _import_error_in_subprocess(f"torch, {GRAD_ACCUM_FUSION_MODULE}") is None)


def _typing_override_provided() -> bool:
    """True when ``typing.override`` exists only because ``megatron.oellm.compat`` installed it."""
    if sys.version_info >= (3, 12) or not hasattr(typing, "override"):
        return False
    import typing_extensions

    return typing.override is typing_extensions.override  # type: ignore[attr-defined]


def find_nvcc(env: Mapping[str, str]) -> str | None:
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
    return next((str(path) for path in candidates if is_file(path)), None)


PACKAGE_INFO_FIELDS = ("MAJOR", "MINOR", "PATCH", "PRE_RELEASE")
"""Assignments of megatron-core's ``package_info.py`` that make up its version."""


def megatron_core_module() -> tuple[str | None, str | None]:
    """(version, folder) of the ``megatron.core`` that ``import megatron.core`` loads, its version read as text from
    its ``package_info.py`` (importing it would run git); (None, folder) when that file cannot be parsed, (None, None)
    when megatron.core is not found. The distribution's metadata is not enough: a Megatron-LM checkout on PYTHONPATH
    is imported instead of the pip-installed megatron-core whose version the metadata gives."""
    folders = package_folders("megatron.core")
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


PACKAGE_PROBE_BY_NAME = {probe.name: probe for probe in PACKAGE_PROBES}
""":data:`PACKAGE_PROBES` by their names (``fla``, ``triton``, ...)."""


def gpu_info(index: int, capability: tuple[int, int] | None = None) -> GpuInfo:
    """The doctor's facts of torch's CUDA device ``index`` (name, compute capability, memory); ``capability`` where
    the caller has already asked torch for it."""
    import torch

    props = torch.cuda.get_device_properties(index)
    return GpuInfo(index, props.name, capability or (props.major, props.minor), props.total_memory / 2**30)


def megatron_oellm_module() -> tuple[str, str]:
    """(version, folder) of the megatron-oellm this doctor runs from: a checkout on PYTHONPATH (a container job's) is
    imported ahead of the copy installed in the image or venv, whose metadata would name another release."""
    import megatron.oellm

    return megatron.oellm.__version__, str(Path(megatron.oellm.__file__).parent)


HELPERS_CPP_MODULE = "megatron.core.datasets.helpers_cpp"
"""megatron-core's compiled dataset helper: where it does not load, megatron runs ``make`` in its folder (a wheel
ships no Makefile) and exits on every rank at start."""

ELF_MACHINES = {0x03: "i386", 0x28: "arm", 0x3E: "x86_64", 0xB7: "aarch64", 0x15: "ppc64le", 0xF3: "riscv64"}
"""ELF ``e_machine`` values of little-endian files -> the names ``platform.machine()`` gives those architectures on
Linux (POWER's 0x15 is ``ppc64le`` little-endian, ``ppc64`` big-endian)."""
BIG_ENDIAN_ELF_MACHINES = {0x15: "ppc64", 0x16: "s390x"}
"""ELF ``e_machine`` values of big-endian files -> the names ``platform.machine()`` gives those architectures."""
ELF_BYTE_ORDERS: dict[int, tuple[typing.Literal["little", "big"], dict[int, str]]] = {
    1: ("little", ELF_MACHINES), 2: ("big", BIG_ENDIAN_ELF_MACHINES)}
"""ELF ``EI_DATA`` (the header's byte 5) -> (byte order of the file's fields, its table of machines)."""

EXTENSION_TAG = re.compile(r"\.cpython-(?P<major>\d)(?P<minor>\d+)[a-z]*-(?P<machine>[^-]+)-[^.]*\.so$")
"""The CPython tag of an extension module's file name (``.cpython-312-x86_64-linux-gnu.so``)."""


def elf_machine(path: Path) -> str | None:
    """The CPU architecture an ELF file (a Linux ``.so``) is built for, read from its header in the file's byte order
    (which tells ppc64le from ppc64); None for another file, an unknown machine, or one that cannot be read."""
    try:
        with path.open("rb") as file:
            header = file.read(20)
    except OSError:
        return None
    if len(header) < 20 or header[:4] != b"\x7fELF" or header[5] not in ELF_BYTE_ORDERS:
        return None
    byte_order, machines = ELF_BYTE_ORDERS[header[5]]
    return machines.get(int.from_bytes(header[18:20], byte_order))


def _extension_mismatch(path: Path, suffix: str, machine: str) -> str | None:
    """Why extension ``path`` cannot load into an interpreter that loads ``*{suffix}`` on ``machine``: built for
    another CPython (its file name's tag) or CPU (its ELF header); None where nothing says so."""
    tag = EXTENSION_TAG.search(path.name)
    built_for = elf_machine(path) or (tag["machine"] if tag else None)
    if tag and not path.name.endswith(suffix):
        where = f" on {built_for}" if built_for else ""
        return (f"{path.name} is built for CPython {tag['major']}.{tag['minor']}{where}, and this interpreter loads "
                f"only *{suffix}")
    if built_for is not None and built_for != machine:
        return f"{path.name} is built for {built_for}, and this interpreter runs on {machine}"
    return None


def helpers_cpp_mismatch(core_folder: Path, suffix: str | None = None, machine: str | None = None) -> str | None:
    """Why megatron-core's compiled dataset helper in ``core_folder`` cannot load here: each ``helpers_cpp*.so`` is
    built for another Python ABI or CPU architecture than this interpreter's (``suffix``: its extension suffix,
    ``machine``: its CPU; default this process's), or none is there; None when one matches or nothing tells."""
    suffix = suffix or sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    machine = machine or platform.machine()
    built = sorted((core_folder / "datasets").glob("helpers_cpp*.so"))
    if not built:
        return f"{core_folder / 'datasets'} holds no helpers_cpp*.so (a source tree that was never built?)"
    reasons = [_extension_mismatch(path, suffix, machine) for path in built]
    return "; ".join(reason for reason in reasons if reason) if all(reasons) else None


HELPERS_CPP_PROBE = f"import megatron.oellm, {HELPERS_CPP_MODULE}"
"""How the doctor imports megatron-core's compiled dataset helper: after megatron.oellm, for Python 3.11."""

FLA_GDN_IMPORTS = (("fla.modules.convolution", "causal_conv1d"), ("fla.modules.l2norm", "l2norm"),
                   ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule"))
"""The fla entry points megatron-core 0.19.2's GDN layer imports (``megatron/core/ssm/gated_delta_net/common.py``), as
(module, name); megatron-core catches their ImportError and fails only at model build, saying "FLA is not installed".
megatron-oellm uses no other fla kernel (its CKDA has no fla path). The doctor and the training entry both import them."""

FLA_GDN_PROBE = "import torch; " + "; ".join(f"from {module} import {name}" for module, name in FLA_GDN_IMPORTS)
""":data:`FLA_GDN_IMPORTS` as the doctor's fresh interpreter runs them, torch first as in training."""

FRESH_IMPORTS_MARKER = "oellm-doctor-import "
"""Prefix of the lines :data:`FRESH_IMPORTS_PROBE` reports on (an imported module may print lines of its own)."""

FRESH_IMPORTS_PROBE = """
import json
for name, code in IMPORTS:
    try:
        exec(code, {})
        error = None
    except (Exception, SystemExit) as caught:  # a broken install raises anything: the probe's outcome
        lines = [line.strip() for line in str(caught).splitlines() if line.strip()]
        error = type(caught).__name__ + (": " + lines[-1] if lines else "")
    print(MARKER + json.dumps([name, error]), flush=True)
"""
"""What the doctor runs in one fresh interpreter to import several things in turn (``IMPORTS``: (name, code) pairs),
printing each one's error line (its type and last message line), or null, after ``MARKER`` as it goes."""


def fresh_import_errors(imports: Mapping[str, str], timeout_s: float = 300.0) -> dict[str, str | None]:
    """Name -> the error line of each of ``imports`` (name -> import statements), None where it imports: all run in
    turn in ONE fresh interpreter (each would otherwise load torch again, seconds apiece), each reported on its own.
    One the interpreter did not report on (it crashed or timed out there or earlier) gets why."""
    code = f"IMPORTS = {list(imports.items())!r}\nMARKER = {FRESH_IMPORTS_MARKER!r}\n{FRESH_IMPORTS_PROBE}"
    stdout, why = _run_in_fresh_interpreter(code, "the import probe", timeout_s)
    reported: dict[str, str | None] = {}
    for line in stdout.splitlines():
        if line.startswith(FRESH_IMPORTS_MARKER):
            name, error = json.loads(line[len(FRESH_IMPORTS_MARKER):])
            reported[name] = error
    unreported = why or "the import probe ended before reporting on it"
    return {name: reported[name] if name in reported else unreported for name in imports}


class FreshImportFacts(typing.NamedTuple):
    """What :func:`fresh_import_facts` read: the import errors of megatron-core's compiled dataset helper and of fla's
    GDN kernels (None where they import or were not probed), and why the helper's files cannot load here."""

    helpers_cpp_error: str | None
    helpers_cpp_mismatch: str | None
    fla_gdn_error: str | None


def fresh_import_facts(core_folder: Path | None, fla_installed: bool, timeout_s: float = 300.0) -> FreshImportFacts:
    """Import megatron-core's compiled dataset helper (:data:`HELPERS_CPP_PROBE`; not where ``core_folder`` is None)
    and fla's GDN kernels (:data:`FLA_GDN_PROBE`; where ``fla_installed``) in one fresh interpreter
    (:func:`fresh_import_errors`: both load torch, fla Triton too); only where the helper fails are its files in
    ``core_folder`` read to tell why (:func:`helpers_cpp_mismatch`)."""
    imports = {"helpers_cpp": HELPERS_CPP_PROBE} if core_folder is not None else {}
    imports.update({"fla-gdn": FLA_GDN_PROBE} if fla_installed else {})
    errors = fresh_import_errors(imports, timeout_s) if imports else {}
    helpers_error = errors.get("helpers_cpp")
    mismatch = helpers_cpp_mismatch(core_folder) if helpers_error is not None and core_folder is not None else None
    return FreshImportFacts(helpers_error, mismatch, errors.get("fla-gdn"))


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


NVIDIA_DRIVER_FILE = Path("/proc/driver/nvidia/version")
"""Present where the NVIDIA kernel driver is loaded: a GPU node (in a container, the host's ``/proc``)."""

NVIDIA_SMI_GPU = re.compile(r"GPU \d+: (.+?)(?: \(UUID: [^)]*\))?")
"""A GPU line of ``nvidia-smi -L`` (``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)``); its group is the name."""


def nvidia_smi_gpus(env: Mapping[str, str], driver_file: Path = NVIDIA_DRIVER_FILE,
                    timeout_s: float = 30.0) -> tuple[str, ...]:
    """Names of the GPUs ``nvidia-smi -L`` (found on ``env``'s PATH) lists where the NVIDIA driver is loaded
    (``driver_file`` exists): the node's GPUs seen without torch, which tell a torch that sees none (a CPU build, a
    driver too old for its CUDA) from a node that has none. Empty where the driver is not loaded (a login node, a
    docker build), nvidia-smi is missing or fails (no device files: a container without GPUs), or it lists none."""
    if not is_file(driver_file):
        return ()
    nvidia_smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if nvidia_smi is None:
        return ()
    try:
        result = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True, errors="replace",
                                timeout=timeout_s, check=False)
    except (subprocess.TimeoutExpired, OSError):  # a hung or unusable driver: no evidence either way
        return ()
    if result.returncode != 0:
        return ()
    matches = (NVIDIA_SMI_GPU.fullmatch(line.strip()) for line in result.stdout.splitlines())
    return tuple(match.group(1) for match in matches if match)


def _torch_cuda_facts() -> tuple[str | None, str | None, tuple[GpuInfo, ...], str | None, str | None]:
    """(CUDA build version, NCCL version, GPUs, probe error, import error) from torch; all empty when torch is
    absent, and all but the import error when ``import torch`` raises."""
    if not module_findable("torch"):
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
        gpus = [gpu_info(index) for index in range(torch.cuda.device_count())]
    except Exception as error:  # a broken driver raises RuntimeError, a build without NCCL AttributeError, ...
        return cuda_version, None, (), f"{type(error).__name__}: {error}", None
    return cuda_version, nccl_version, tuple(gpus), None, None


def collect_environment(env: Mapping[str, str] | None = None) -> EnvironmentReport:
    """Probe this process: megatron-oellm's version and folder, package versions and folders, Python provision,
    torch's CUDA build and GPUs, nvcc, HybridEP, the ``NCCL_*`` names NCCL and torch read, whether torch's parser
    takes the allocator configuration, the GPUs nvidia-smi lists.

    ``env`` (default ``os.environ``) is used to locate nvcc and nvidia-smi and for the allocator configuration torch
    reads; the rules read their variables separately.
    """
    env = os.environ if env is None else env
    cuda_version, nccl_version, gpus, gpu_probe_error, torch_import_error = _torch_cuda_facts()
    tilelang_findable = module_findable("tilelang")
    versions = {probe.name: distribution_version(probe) for probe in PACKAGE_PROBES}
    # installed by its metadata or its module: a distribution whose package folder is gone does not import either.
    # torch first, as in training: torch loads the CUDA/NCCL libraries TE's core library links against
    te_installed = versions["transformer-engine"] is not None or module_findable("transformer_engine")
    te_error = _import_error_in_subprocess("torch, transformer_engine.pytorch") if te_installed else None
    core_import_error = _import_error_in_subprocess(MEGATRON_CORE_PROBE) if te_error else None
    core_version, core_path = megatron_core_module()
    oellm_version, oellm_path = megatron_oellm_module()
    checkout = source_checkout()
    if core_version is not None:  # the release that is imported, not the one pip's metadata names
        versions["megatron-core"] = core_version
    te_flash_attention, te_flash_attention_error = (
        _te_flash_attention_in_subprocess() if te_installed and te_error is None else (None, None))
    # without an importable torch neither megatron-core nor fla imports, and the torch rule says why; where
    # megatron-core does not import at all, the Transformer Engine rule says so
    torch_imports = module_findable("torch") and torch_import_error is None
    fresh = fresh_import_facts(Path(core_path) if torch_imports and core_path and core_import_error is None else None,
                               torch_imports and versions["fla"] is not None)
    nccl_names, nccl_names_unread = _nccl_names()
    conf = allocator_conf(env, versions["torch"]) if torch_imports else None
    items = allocator_items(conf[1]) if conf is not None else []  # empty ones too: torch may refuse them
    return EnvironmentReport(
        python_version=".".join(str(part) for part in sys.version_info[:3]),
        typing_override_provided=_typing_override_provided(),
        versions=versions,
        machine=platform.machine(),
        megatron_oellm_version=oellm_version,
        megatron_oellm_path=oellm_path,
        megatron_oellm_checkout=None if checkout is None else str(checkout),
        cuda_version=cuda_version,
        nccl_version=nccl_version,
        nccl_names=nccl_names,
        nccl_names_unread=nccl_names_unread,
        gpus=gpus,
        gpu_probe_error=gpu_probe_error,
        driver_gpus=nvidia_smi_gpus(env),
        torch_import_error=torch_import_error,
        tilelang_importable=tilelang_findable,
        tilelang_import_error=_import_error_in_subprocess("tilelang") if tilelang_findable else None,
        transformer_engine_import_error=te_error,
        megatron_core_import_error=core_import_error,
        nvcc_path=find_nvcc(env),
        hybrid_ep=deep_ep_declares_hybrid_ep(),
        grad_accum_fusion_available=_grad_accum_fusion_available(),
        helpers_cpp_import_error=fresh.helpers_cpp_error,
        helpers_cpp_mismatch=fresh.helpers_cpp_mismatch,
        helpers_cpp_makefile=core_path is not None and is_file(Path(core_path) / "datasets" / "Makefile"),
        fla_gdn_import_error=fresh.fla_gdn_error,
        megatron_core_path=core_path,
        module_folders=module_folders(),
        te_flash_attention=te_flash_attention,
        te_flash_attention_error=te_flash_attention_error,
        allocator_refusal=allocator_refusal_in_subprocess(items) if any(items) else None,
    )
