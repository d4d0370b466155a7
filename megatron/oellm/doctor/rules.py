"""The doctor's rules: pure functions of (report, environment variables) -> findings.

The rules on Python, torch, the GPUs, megatron-core (and its compiled dataset helper), Transformer Engine, fla's GDN
imports, fla on Hopper, megatron-oellm's slow-path switches, HybridEP, TE's flash attention and TE's attention switches
live here; the NCCL ones in :mod:`megatron.oellm.doctor.nccl`, the allocator's in
:mod:`megatron.oellm.doctor.allocator`. :data:`RULES` lists them all in report order; :func:`check_environment` runs
them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from packaging.version import InvalidVersion, Version

from megatron.oellm import MEGATRON_CORE_VERSION
from megatron.oellm.doctor.allocator import check_allocator_conf
from megatron.oellm.doctor.nccl import check_nccl_channels, check_nccl_variable_names
from megatron.oellm.doctor.probes import FLA_GDN_PROBE
from megatron.oellm.doctor.report import EnvironmentReport, Finding, GpuInfo
from megatron.oellm.switches import SLOW_PATH_SWITCHES, is_on

FLA_BAD_TRITON_FROM = Version("3.4.0")
"""First Triton release with which fla's Triton GDN/KDA backward is wrong on Hopper (fla issue 640)."""
FLA_FIXED_TRITON = Version("3.7.1")
"""First Triton release with which fla's Triton GDN/KDA backward is right again on Hopper."""
TILELANG_STACK_INSTALL = ("pip install tilelang==0.1.15 apache-tvm-ffi==0.1.12 torch-c-dlpack-ext==0.1.5 "
                          "z3-solver==4.15.4.0 (the versions tested; fla then uses its TileLang backward, which needs "
                          "nvcc)")
"""How to install the TileLang stack ``docker/constraints.txt`` pins (a test keeps them equal)."""
FLA_TILELANG_FIX = f"{TILELANG_STACK_INSTALL}, or, where this torch allows it, pip install 'triton>=3.7.1'"
"""The fix of an fla issue 640 error: the TileLang stack, or a Triton without the bug."""
FLA_FREE_MODELS = "; the Qwen3 MoE models use no fla kernel"
"""The note that ends the doctor's fla errors (its report covers every model); a refusal of a run of a model with GDN
or KDA layers leaves it out."""


def tool_command(report: EnvironmentReport, script: str, arguments: str = "") -> str:
    """``bash tools/SCRIPT ARGUMENTS``, the script's path absolute in the megatron-oellm checkout the doctor runs from
    (a fix can then be pasted in any folder); relative, saying where it lives, for an installed copy without
    ``tools/``."""
    if report.megatron_oellm_checkout:
        return f"bash {report.megatron_oellm_checkout}/tools/{script}{arguments}"
    return f"bash tools/{script}{arguments} in a megatron-oellm checkout"


def _python_minor(report: EnvironmentReport) -> str:
    """``MAJOR.MINOR`` of the reported Python (``3.11``)."""
    return ".".join(report.python_version.split(".")[:2])


def _before_python_312(report: EnvironmentReport) -> bool:
    """Whether the reported Python is older than 3.12 (megatron-core 0.19.2 declares >= 3.12; False if unparsable)."""
    try:
        return Version(report.python_version) < Version("3.12")
    except InvalidVersion:
        return False


def megatron_core_pip(report: EnvironmentReport, reinstall: bool = False) -> str:
    """The pip command that installs the supported megatron-core into this Python: on Python < 3.12 with
    ``--ignore-requires-python`` (its metadata says >= 3.12 and pip refuses it otherwise; ``tools/install.sh`` does the
    same, as megatron.oellm provides the one 3.12 feature it uses); ``reinstall`` replaces an installed copy."""
    flags = "--ignore-requires-python " if _before_python_312(report) else ""
    flags += "--force-reinstall --no-deps " if reinstall else ""
    return f"pip install {flags}megatron-core=={MEGATRON_CORE_VERSION}"


SITE_BUNDLE_ARCHES = ("x86_64", "aarch64", "arm64")
"""CPU architectures ``tools/build_site_bundle.sh --arch`` builds for."""


def site_bundle_build(report: EnvironmentReport) -> str:
    """The command that builds the offline site bundle for the reported Python and CPU (run where there is
    internet); it carries megatron-core, fla and tilelang with its runtime, built for one Python and architecture."""
    arch = f" --arch {report.machine}" if report.machine in SITE_BUNDLE_ARCHES else ""
    return tool_command(report, "build_site_bundle.sh", f" --python-version {_python_minor(report)}{arch}")


BUNDLE_ON_THE_NODE = ("check its checksum (sha256sum -c on its .sha256 file), unpack it into a fresh folder (unpacked "
                      "over an earlier bundle's folder, the packages of both would mix) and put that folder first on "
                      "PYTHONPATH")
"""What to do with a site bundle on the node, as README's :data:`AIR_GAPPED_NODES` section says."""
AIR_GAPPED_NODES = 'README.md, "Air-gapped nodes"'
"""The README section on site bundles, which the fixes naming one point to."""


def site_bundle_route(report: EnvironmentReport) -> str:
    """The offline route for a node without internet: :func:`site_bundle_build` on a machine with internet, then the
    bundle checked and unpacked into a fresh folder on PYTHONPATH (:data:`BUNDLE_ON_THE_NODE`)."""
    return (f"on a node without internet, build the offline site bundle on a machine with internet "
            f"({site_bundle_build(report)}); on the node, {BUNDLE_ON_THE_NODE} ({AIR_GAPPED_NODES})")


TILELANG_STACK = dict(re.findall(r"([A-Za-z0-9_.-]+)==(\S+)", TILELANG_STACK_INSTALL))
"""Distribution -> version of the TileLang stack :data:`TILELANG_STACK_INSTALL` installs (the site bundle carries the
same)."""
TILELANG_STACK_IMPORT_NAMES = {"apache-tvm-ffi": "tvm_ffi", "z3-solver": "z3"}
"""Top-level modules of the :data:`TILELANG_STACK` distributions whose name is not the distribution's with ``_`` for
``-``: ``pip install tvm_ffi`` or ``pip install z3`` would install other PyPI projects."""
TILELANG_STACK_MODULES = {TILELANG_STACK_IMPORT_NAMES.get(name, name.replace("-", "_")): f"{name}=={version}"
                          for name, version in TILELANG_STACK.items()}
"""Top-level module -> pinned requirement of each :data:`TILELANG_STACK` distribution."""
TILELANG_OUT = ("take tilelang out of this environment (pip uninstall tilelang; in an unpacked site bundle, delete "
                "its tilelang folder: the bundle's folder also holds fla)")
"""How to stop fla from importing a tilelang that does not import."""
BROKEN_TILELANG_FIX = (f"make `import tilelang` work: {TILELANG_STACK_INSTALL}, or the offline site bundle, which "
                       f"carries that stack, first on PYTHONPATH ({AIR_GAPPED_NODES}); or {TILELANG_OUT}. "
                       "FLA_TILELANG=0 does not help: fla imports a tilelang it finds whatever its switches say")
"""The fix where fla fails importing its kernels because tilelang, which it found, does not import (fla 0.6.0's
``fla.ops.utils.sinkhorn`` imports tilelang wherever ``TileLangBackend.is_available()``, which reads no switch)."""

MISSING_LIBRARY = re.compile(r"(?P<library>(?P<stem>lib[\w+-]+?)\.so[\w.]*): cannot open shared object file")
"""The dynamic loader's message for a shared library it cannot find (``libz3.so.4.15: cannot open shared object
file``), raised as OSError by ``ctypes`` and as ImportError by an extension module's import."""
TILELANG_STACK_LIBRARIES = {"libz3": "z3-solver", "libtvm_ffi": "apache-tvm-ffi", "libtvm_compiler": "tilelang",
                            "libtvm_runtime": "tilelang", "libtilelang": "tilelang"}
"""Shared libraries the TileLang stack loads as tilelang imports (by file name without ``.so``) -> the
:data:`TILELANG_STACK` distribution that ships each (the files of the cp312 wheels of tilelang 0.1.15, z3-solver
and apache-tvm-ffi 0.1.12 in the offline site bundle)."""


def broken_tilelang_fix(error: str | None) -> str:
    """The fix where tilelang (which fla imports) does not import with ``error``: where the loader could not find a
    shared library (:data:`MISSING_LIBRARY`), that library put back first, by the distribution of the stack that
    ships it (:data:`TILELANG_STACK_LIBRARIES`) or else on the loader's path; then :data:`BROKEN_TILELANG_FIX` (the
    whole stack, or tilelang taken out). The doctor and the training entry give the same text for the same error."""
    missing = MISSING_LIBRARY.search(error or "")
    if missing is None:
        return BROKEN_TILELANG_FIX
    library, distribution = missing["library"], TILELANG_STACK_LIBRARIES.get(missing["stem"])
    if distribution is None:
        return (f"make {library} loadable (install what ships it, or put the folder holding it on LD_LIBRARY_PATH); "
                f"else {BROKEN_TILELANG_FIX}")
    requirement = f"{distribution}=={TILELANG_STACK[distribution]}"
    return (f"put back {library}, which {requirement} ships (pip install --force-reinstall {requirement}); else "
            f"{BROKEN_TILELANG_FIX}")


def tilelang_fix(report: EnvironmentReport) -> str:
    """:data:`FLA_TILELANG_FIX`, with the site bundle (which carries the same TileLang stack) for nodes without
    internet. Where an installed tilelang does not import, the fixed Triton comes with that tilelang taken out: fla
    imports a tilelang it finds wherever an nvcc is usable, and fails there whatever Triton it has."""
    triton = (f"{FLA_TILELANG_FIX} and {TILELANG_OUT}" if _tilelang_import_problem(report) is not None
              else FLA_TILELANG_FIX)
    return f"{triton}; {site_bundle_route(report)}"


CUDA_TORCH_INDEX = "https://download.pytorch.org/whl/cuXYZ"
"""PyTorch's index of CUDA builds, ``cuXYZ`` standing for a CUDA version (``cu128``): what ``TORCH_INDEX_URL``
names for ``tools/install.sh``."""


def cuda_torch_install(torch_version: str | None) -> str:
    """How to put a CUDA build of torch (``torch_version``'s release, else any) into this environment without leaving
    it torch-less: pip run where it reaches an index, which replaces an installed build only once the new wheel is
    downloaded. A local version (``+cuXYZ``) is named because pip takes an installed ``+cpu`` build as satisfying the
    plain release."""
    release = torch_version.split("+")[0] if torch_version and torch_version[:1].isdigit() else None
    requirement = f"'torch=={release}+cuXYZ'" if release else "torch"
    return (f"from a login node with internet (where the environment's folder is shared with the GPU nodes), run "
            f"this environment's pip install {requirement} --index-url {CUDA_TORCH_INDEX} (the index TORCH_INDEX_URL "
            "names for tools/install.sh), cuXYZ being a CUDA the GPU node's driver supports (nvidia-smi's \"CUDA "
            "Version\")")


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
                        f"use the cluster container's torch, or run {tool_command(report, 'install.sh')}, where pip "
                        f"reaches a package index (on a GPU node); for an air-gapped GPU node, "
                        f"{cuda_torch_install(None)}")]
    build = f"CUDA {report.cuda_version} build" if report.cuda_version else "CPU build"
    return [Finding("ok", "torch", f"torch {version} imports ({build}).")]


def torch_imports(report: EnvironmentReport) -> bool:
    """Whether torch is installed and imports: where it does not, the torch rule's error names the cause and the
    rules of what needs torch (megatron-core's helper, fla's kernels) say nothing, as their fixes would miss it."""
    return report.torch_import_error is None and report.versions.get("torch") is not None


def check_gpus(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """Whether torch sees the GPUs. Where it sees none on a node that has them (nvidia-smi lists them, or Slurm gave
    the job some) training would find no GPU: an error naming the fix. Elsewhere (a login node, a build host) only a
    warning, as the GPU-dependent rules then cannot tell whether they apply."""
    if report.gpus:
        names = ", ".join(sorted({gpu.name for gpu in report.gpus}))
        return [Finding("ok", "gpus", f"{len(report.gpus)} GPU(s) seen: {names}.")]
    reason = _why_torch_sees_no_gpu(report)
    evidence = _node_gpu_evidence(report, env) if torch_imports(report) else None  # else the torch rule says it
    if evidence is None:
        fix = ("run `oellm doctor` inside a job on a compute node" if torch_imports(report)
               else "make torch import (the torch finding says how), then run `oellm doctor` again")
        return [Finding("warning", "gpus", f"{reason}; the GPU-dependent checks (whether fla on Hopper needs TileLang) "
                        "were not evaluated.", fix)]
    return [Finding("error", "gpus", f"{reason}, but this node has NVIDIA GPUs ({evidence}): training here finds no "
                    "GPU, and the GPU-dependent checks were not evaluated.", _torch_gpu_fix(report, env))]


def _why_torch_sees_no_gpu(report: EnvironmentReport) -> str:
    """Why torch lists no GPU: it does not import or is absent, it raised listing them, it is a CPU build, or none."""
    if report.torch_import_error:
        return "torch does not import"
    if report.versions.get("torch") is None:
        return "torch is not installed"
    if report.gpu_probe_error:
        return f"torch failed to list the GPUs ({report.gpu_probe_error})"
    if report.cuda_version is None:
        return f"torch {report.versions['torch']} is a CPU build"
    return f"torch (CUDA {report.cuda_version}) sees no GPU"


SLURM_GPU_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
"""Variables that list the GPUs Slurm gave a job or step. CUDA_VISIBLE_DEVICES is no evidence, even inside a job:
sbatch and salloc pass the submitting shell's environment on (``--export=ALL``), so a login node's or a site profile's
export reaches a job on a CPU partition unchanged."""

GPU_DEVICE = re.compile(r"\d+|(?:GPU|MIG)-[0-9A-Za-z/-]+")
"""One entry of a GPU list: an index or a UUID; Slurm's ``NoDevFiles``, ``-1`` and empty entries name no device."""


def _node_gpu_evidence(report: EnvironmentReport, env: Mapping[str, str]) -> str | None:
    """What shows, without torch, that this node has NVIDIA GPUs for this process: nvidia-smi lists them where the
    driver is loaded, or the Slurm job running it was given some; None on a login node or a build host."""
    if report.driver_gpus:
        names = ", ".join(sorted(set(report.driver_gpus)))
        return f"nvidia-smi -L lists {len(report.driver_gpus)} GPU(s): {names}"
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job:
        return None
    for variable in SLURM_GPU_VARIABLES:
        value = env.get(variable, "")
        if any(GPU_DEVICE.fullmatch(entry.strip()) for entry in value.split(",")):
            return f"Slurm job {job} was given GPUs: {variable}={value}"
    return None


def _torch_gpu_fix(report: EnvironmentReport, env: Mapping[str, str]) -> str:
    """The fix where torch sees none of a GPU node's GPUs: a CUDA torch for a CPU build, else the driver, the
    visible devices and the container's GPU flag."""
    if report.cuda_version is None:
        return ("install a CUDA build of torch in place of this CPU build (this venv was probably made on a GPU-less "
                f"login node): {cuda_torch_install(report.versions.get('torch'))}; or use the cluster container's "
                "torch. Do not pip uninstall torch on the compute node first: without internet there that leaves no "
                "torch at all")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    shown = "unset" if visible is None else repr(visible)
    return (f"check the driver: the CUDA version nvidia-smi reports must be at least torch's {report.cuda_version} "
            "(else install a torch built for an older CUDA); CUDA_VISIBLE_DEVICES is "
            f"{shown}: unset it or name GPUs that exist; in a container, pass --nv to apptainer exec (--gpus all to "
            "docker run)")


def check_megatron_core(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """megatron-oellm is written against exactly one megatron-core release."""
    installed = report.versions.get("megatron-core")
    fix = f"{megatron_core_pip(report)}; {site_bundle_route(report)}"
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
    pass (older fla releases silently computed wrong gradients). Those switches only choose the backward: fla imports
    a tilelang it finds wherever an nvcc is usable as its kernels import, reading neither, so a tilelang that is
    installed but does not import is an error on Hopper with any Triton where an nvcc is found, whatever they say.
    Where no Hopper GPU is seen (an image build, a login node) the rule does not apply, except to such a tilelang with
    a Triton of issue 640's range: that install fails on the Hopper nodes too, so it is an error wherever the doctor
    runs; only where no GPU at all is seen and the import failed for want of the NVIDIA driver's library, which GPU
    nodes have, is it a warning.
    """
    name = "fla-hopper-triton"
    fla, triton = report.versions.get("fla"), report.versions.get("triton")
    hopper = [gpu for gpu in report.gpus if is_hopper(gpu)]
    missing = [what for what, absent in (("fla", fla is None), ("Triton", triton is None), ("Hopper GPU", not hopper))
               if absent]
    broken_tilelang = _tilelang_import_problem(report)
    if missing == ["Hopper GPU"] and broken_tilelang is not None and fla_affected_triton(triton):
        if not report.gpus and DRIVER_LIBRARY.search(report.tilelang_import_error or ""):
            return [_tilelang_needs_driver(triton, report.tilelang_import_error)]
        return [_broken_tilelang_without_hopper(report, triton, broken_tilelang)]
    if missing:
        return [Finding("ok", name, f"not applicable: {', '.join(missing)} not found.")]
    affected = fla_affected_triton(triton)
    if affected is None:
        return [Finding("warning", name, f"cannot parse the Triton version {triton!r} to check fla issue 640.",
                        "install a released Triton >= 3.7.1")]
    if not affected:
        broken = _broken_tilelang_fla_imports(report)
        if broken is not None:
            return [_broken_tilelang_on_hopper(hopper[0], triton, broken, report.tilelang_import_error)]
        return [Finding("ok", name, f"Triton {triton} is outside the range affected by fla issue 640.")]
    tilelang_blocker = fla_tilelang_blocker(report.tilelang_importable, report.tilelang_import_error,
                                            report.nvcc_path, env)
    if tilelang_blocker is None:
        return [Finding("ok", name,
                        f"Triton {triton} on Hopper is affected by fla issue 640, but fla uses its TileLang backward.")]
    return [Finding(
        "error", name,
        f"fla GDN/KDA backward gives wrong gradients on Hopper ({hopper[0].name}) with Triton {triton} "
        f"(fla issue 640; fla 0.6.0 raises in the GDN backward instead), and fla cannot use its TileLang backward: "
        f"{tilelang_blocker}. Training the models with GDN or KDA layers (Qwen3.5, the OEL hybrid) fails"
        f"{FLA_FREE_MODELS}.",
        tilelang_fix(report),
    )]


def fla_affected_triton(triton: str) -> bool | None:
    """Whether Triton release ``triton`` is in the range where fla's Triton GDN/KDA backward is wrong on Hopper (fla
    issue 640), so that fla needs its TileLang backward there; None when the version cannot be parsed."""
    try:
        return FLA_BAD_TRITON_FROM <= Version(triton) < FLA_FIXED_TRITON
    except InvalidVersion:
        return None


FLA_TILELANG_FROM_TRITON = FLA_BAD_TRITON_FROM
"""fla 0.6.0 turns its TileLang backend on by default on Hopper for every Triton from this release on, fixed ones
included (``default_enable = IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0`` in ``fla/ops/common/backends/tilelang``)."""


def fla_takes_tilelang(triton: str | None) -> bool:
    """Whether fla 0.6.0 on Hopper turns its TileLang backend on with Triton release ``triton`` (from
    :data:`FLA_TILELANG_FROM_TRITON` on; False for no or an unparsable version). The training entry asks it before
    it reads tilelang's import on a Hopper GPU (with an older Triton a broken tilelang fails the import of fla's
    kernels, which :func:`~megatron.oellm.training.fla_kernels.fla_import_problem` names)."""
    try:
        return triton is not None and Version(triton) >= FLA_TILELANG_FROM_TRITON
    except InvalidVersion:
        return False


def _broken_tilelang_fla_imports(report: EnvironmentReport) -> str | None:
    """Why tilelang does not import, where fla 0.6.0 imports it as its kernels import (tilelang found and an nvcc
    found: ``TileLangBackend.is_available()``, which reads neither FLA_TILELANG nor FLA_DISABLE_BACKEND_DISPATCH), so
    that fla's GDN kernels fail to import with any Triton and any switch; else None."""
    problem = _tilelang_import_problem(report)
    return None if problem is None or report.nvcc_path is None else problem


def _broken_tilelang_on_hopper(gpu: GpuInfo, triton: str, problem: str, error: str | None) -> Finding:
    """The error for a tilelang that fla imports on Hopper (``gpu``), with a Triton outside fla issue 640's range,
    but that does not import (``problem``, from its import ``error``): fla's kernels then fail to import. That
    Triton's own backward is right, so taking tilelang out works as well as making it import
    (:func:`broken_tilelang_fix`, the fla-gdn-imports finding's fix for the same failure); no Triton to install."""
    return Finding(
        "error", "fla-hopper-triton",
        f"fla 0.6.0 imports tilelang as its kernels import wherever tilelang and an nvcc are found, on Hopper "
        f"({gpu.name}) with Triton {triton} too (which needs no TileLang: outside fla issue 640's range), and "
        f"{problem}: the models with GDN or KDA layers (Qwen3.5, the OEL hybrid) fail as fla's kernels import"
        f"{FLA_FREE_MODELS}.",
        broken_tilelang_fix(error))


def _broken_tilelang_without_hopper(report: EnvironmentReport, triton: str, problem: str) -> Finding:
    """The error for a tilelang that is installed but does not import (``problem``) where no Hopper GPU is seen (an
    image build, a login node): Hopper nodes need it with this Triton, and an install that fails to import here fails
    there too, so waiting for a GPU would only move the error into a queued job."""
    return Finding(
        "error", "fla-hopper-triton",
        f"no Hopper GPU is seen here, but with Triton {triton} fla needs its TileLang backward on Hopper (fla issue "
        f"640), and {problem}. Training the models with GDN or KDA layers (Qwen3.5, the OEL hybrid) on a Hopper "
        f"node with this environment fails{FLA_FREE_MODELS}.",
        tilelang_fix(report),
    )


DRIVER_LIBRARY = re.compile(r"\blibcuda\b|\blibnvidia-")
"""Names of the NVIDIA driver's user-space libraries (``libcuda.so.1``, ``libnvidia-ml.so.1``): only a GPU node, or a
container started with ``--nv`` there, has them; the CUDA runtime (``libcudart``) comes with the toolkit or a wheel."""


def _tilelang_needs_driver(triton: str, error: str) -> Finding:
    """The warning for a tilelang whose import failed for want of the NVIDIA driver's library (``error``) where no
    GPU is seen (a login node, ``apptainer exec`` without ``--nv``, a docker build host): the same install may import
    on a GPU node, so it can be judged only there."""
    return Finding(
        "warning", "fla-hopper-triton",
        f"no GPU is seen here, and `import tilelang` fails for want of the NVIDIA driver's library ({error}); "
        "tilelang needs the driver to import, which a login node, `apptainer exec` without --nv or a docker build host "
        f"lacks, so whether it works cannot be told here. With Triton {triton}, fla needs its TileLang backward on "
        "Hopper (fla issue 640) for the models with GDN or KDA layers (Qwen3.5, the OEL hybrid).",
        "re-run `oellm doctor` on a GPU node (in a container: apptainer exec --nv)",
    )


def _tilelang_import_problem(report: EnvironmentReport) -> str | None:
    """Why an installed tilelang does not import (what fla then crashes on), or None when it imports or is absent."""
    if not report.tilelang_importable or report.tilelang_import_error is None:
        return None
    return tilelang_import_problem(report.tilelang_import_error)


def tilelang_import_problem(error: str) -> str:
    """The blocker for a tilelang installed whose import raised ``error``, with the versions tilelang 0.1.15 needs."""
    return (f"tilelang is installed but does not import ({error}); tilelang 0.1.15 needs z3-solver >= 4.13, < 4.15.5 "
            "(it loads libz3.so.4.15) and apache-tvm-ffi >= 0.1.11, < 0.1.13")


def fla_tilelang_blocker(tilelang_found: bool, import_error: str | None, nvcc_path: str | None,
                         env: Mapping[str, str]) -> str | None:
    """Why fla 0.6.0 would not run its TileLang GDN/KDA kernels, or None when it would: tilelang absent
    (``tilelang_found``) or failing to import (``import_error``), no nvcc for it to compile with (``nvcc_path``), or a
    switch in ``env`` turning fla's backend dispatch or TileLang backend off. The doctor reads these facts in
    subprocesses; the training entry reads them in its own process (:mod:`megatron.oellm.training.fla_kernels`)."""
    if not tilelang_found:
        return "tilelang is not installed"
    if import_error is not None:
        return tilelang_import_problem(import_error)
    if nvcc_path is None:
        return "tilelang is installed but no nvcc was found (set CUDA_HOME or load a CUDA module)"
    return tilelang_switched_off(env)


def tilelang_switched_off(env: Mapping[str, str]) -> str | None:
    """Which switch of ``env`` keeps fla 0.6.0 from its TileLang kernels (its backend dispatch or TileLang backend
    turned off), or None."""
    if env.get("FLA_DISABLE_BACKEND_DISPATCH") == "1":
        return "FLA_DISABLE_BACKEND_DISPATCH=1 disables fla's backend dispatch"
    if env.get("FLA_TILELANG", "1") == "0":
        return "FLA_TILELANG=0 disables fla's TileLang backend"
    return None


def check_helpers_cpp(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """megatron-core's compiled dataset helper (``megatron.core.datasets.helpers_cpp``) must load: where it does not,
    megatron runs ``make`` in its folder at start, which fails for an installed wheel ("No targets specified and no
    makefile found"), and every rank exits. The usual cause is a site bundle or wheel built for another Python or CPU
    architecture. A source tree of megatron-core (its ``Makefile`` in place) is only a warning: megatron compiles the
    helper there. Not judged where torch or megatron-core is missing or does not import at all (other rules say so)."""
    name = "megatron-core-helpers"
    if not torch_imports(report):
        return []
    if report.helpers_cpp_import_error is None:
        if report.megatron_core_path is None or report.megatron_core_import_error is not None:
            return []
        return [Finding("ok", name, "megatron-core's compiled dataset helper (helpers_cpp) loads.")]
    if report.helpers_cpp_makefile:
        return [_helpers_cpp_compiled_at_start(report)]
    cause = (f"; {report.helpers_cpp_mismatch}" if report.helpers_cpp_mismatch
             else "; likely built for another Python ABI or CPU architecture")
    return [Finding(
        "error", name,
        f"megatron-core's compiled dataset helper (megatron.core.datasets.helpers_cpp, in "
        f"{report.megatron_core_path}) does not load ({report.helpers_cpp_import_error}){cause}. Megatron then tries "
        "to compile it with make, which an installed megatron-core cannot (\"No targets specified and no makefile "
        "found\"), and every rank exits at start.",
        f"{built_for_this_python(report, 'megatron-core', 'it')}; where pip installed it, "
        f"{megatron_core_pip(report, reinstall=True)}")]


def built_for_this_python(report: EnvironmentReport, what: str, pronoun: str) -> str:
    """The start of the fix for compiled modules of ``what`` built for another Python or CPU: install them built for
    the reported Python and CPU, from a new site bundle where an old one on PYTHONPATH holds ``pronoun`` (it, them);
    the caller adds how to reinstall with pip."""
    return (f"install {what} built for this Python {_python_minor(report)} on {report.machine or 'this CPU'}: "
            f"where a site bundle on PYTHONPATH holds {pronoun}, build a new one for them on a machine with internet "
            f"({site_bundle_build(report)}); on the node, {BUNDLE_ON_THE_NODE} in place of the old bundle's folder "
            f"({AIR_GAPPED_NODES})")


def _helpers_cpp_compiled_at_start(report: EnvironmentReport) -> Finding:
    """The warning for a helper that does not load in a megatron-core source tree, whose Makefile megatron runs at
    start: that works where the node has the tools, so it is said, with the command that builds it now."""
    folder = f"{report.megatron_core_path}/datasets"
    return Finding(
        "warning", "megatron-core-helpers",
        f"megatron-core's compiled dataset helper (megatron.core.datasets.helpers_cpp) does not load "
        f"({report.helpers_cpp_import_error}), but {report.megatron_core_path} is a source tree with its Makefile: "
        "megatron compiles the helper with make at start, which needs make, a C++ compiler and pybind11 where the "
        "job runs; without them every rank exits at start.",
        f"build it once now, with this Python's python3 and python3-config first on PATH (the Makefile calls them): "
        f"make -C {folder}")


MISSING_MODULE = re.compile(r"No module named '(?P<module>[^']+)'")
"""The message of a ModuleNotFoundError, naming the module that is missing."""


MEGATRON_CORE_CAUGHT = ("ImportError", "ModuleNotFoundError")
"""Error types (as an import error line starts) that megatron-core 0.19.2's import of fla's kernels turns into "FLA is
not installed", as the training entry counts them
(:func:`~megatron.oellm.training.fla_kernels.megatron_core_catches`); any other, an AttributeError raised inside fla's
import among them, ends the run in its traceback."""

ERROR_LINE_TYPE = re.compile(r"^(?:importing \S+ raised )?(?P<type>[\w.]+)(?::|$)")
"""The error type an import error line (:func:`megatron.oellm.error_lines.one_line_error`) starts with, after the
``importing MODULE raised`` of an ImportError that names its module."""


def megatron_core_catches_line(error: str) -> bool:
    """Whether megatron-core 0.19.2 takes fla as absent on the import error line ``error`` (its type is one of
    :data:`MEGATRON_CORE_CAUGHT`), rather than ending the run in the error's traceback."""
    found = ERROR_LINE_TYPE.match(error)
    return found is not None and found["type"] in MEGATRON_CORE_CAUGHT


def uncaught_import_error_fix(error: str) -> str:
    """The fix where fla's kernels, fla installed, fail to import with an error line ``error`` of a type megatron-core
    does not catch that is neither a loader's for another Python (:data:`NATIVE_LOAD_FAILURE`) nor tilelang's: a
    shared library the loader cannot find made loadable (``libcuda.so.1`` off a GPU node, say), else the error's own
    cause removed (a full disk under Triton's cache, say). "Install fla" would do nothing: fla is installed."""
    missing = MISSING_LIBRARY.search(error)
    if missing is not None:
        return (f"make {missing['library']} loadable (install what ships it, or put the folder holding it on "
                "LD_LIBRARY_PATH); fla itself is installed")
    return (f"remove the cause of this error, which fla's import raised (fla itself is installed); "
            f"`python3 -c \"{FLA_GDN_PROBE}\"` prints its whole traceback")


def check_fla_gdn_imports(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """The fla kernels megatron-core's GDN layer imports must import where fla is installed: megatron-core catches
    their ImportError (a requirement of fla missing, einops for one, which the site bundle does not carry) and the
    models with GDN layers fail only at model build, saying "FLA is not installed"; any other error (an OSError of a
    shared library of tilelang's that does not load, a RuntimeError of TVM's) it does not catch. The error names the
    real cause, and the consequence as the training entry's refusal does
    (:func:`megatron.oellm.training.fla_kernels.fla_import_problem`)."""
    name = "fla-gdn-imports"
    fla = report.versions.get("fla")
    if fla is None or not torch_imports(report):  # without torch, the torch rule's error says what to do
        return []
    error = report.fla_gdn_import_error
    if error is None:
        return [Finding("ok", name, f"fla {fla}: the GDN kernels megatron-core uses import.")]
    outcome = ("megatron-core catches only an ImportError there, so the models with GDN layers (Qwen3.5) end in this "
               "error's traceback on every rank as megatron-core imports fla"
               if not megatron_core_catches_line(error)
               else "megatron-core then takes fla as absent, and the models with GDN layers (Qwen3.5) stop at model "
               "build with \"FLA is not installed\"")
    return [Finding(
        "error", name,
        f"fla {fla} is installed, but the GDN kernels megatron-core imports from it do not import ({error}): "
        f"{outcome}{FLA_FREE_MODELS}.", _fla_gdn_fix(report, error))]


TORCH_MODULES = ("torch", "triton")
"""Modules that come with torch (a CUDA build of torch requires the Triton release it was built with): a bare
``pip install`` of either may replace that build, so a fix for them is torch's."""


FLA_COMPILED_PACKAGES = "fla and the compiled packages it imports (tilelang, apache-tvm-ffi)"
"""What a loader error in fla's import asks to be installed again, built for this Python and CPU."""

NATIVE_LOAD_FAILURE = re.compile(r"symbol lookup error|undefined symbol|wrong ELF class")
"""What the dynamic loader says of a compiled module built for another Python or CPU (a cp312 ``abi3`` extension
loaded by Python 3.11 lacks symbols; a 32-bit or foreign library has the wrong ELF class)."""


def _fla_gdn_fix(report: EnvironmentReport, error: str) -> str:
    """The fix for fla's GDN kernels failing to import with ``error``: a compiled module built for another Python or
    CPU (:data:`NATIVE_LOAD_FAILURE`) replaced by one built for them; a tilelang that fla imports but that does not
    import made to import or taken out (:func:`broken_tilelang_fix` of tilelang's own error); a missing requirement of
    fla installed (torch's own modules fixed as torch is); else fla reinstalled."""
    if NATIVE_LOAD_FAILURE.search(error):
        return (f"{built_for_this_python(report, FLA_COMPILED_PACKAGES, 'them')}; where pip installed them, reinstall them with "
                "this Python's pip (pip install --force-reinstall PACKAGE, for the package whose library the error "
                "names)")
    if _broken_tilelang_fla_imports(report) is not None:
        return broken_tilelang_fix(report.tilelang_import_error)
    if not megatron_core_catches_line(error) and "tilelang" not in error:
        return uncaught_import_error_fix(error)
    missing = MISSING_MODULE.search(error)
    package = missing["module"].split(".")[0] if missing is not None else None
    if package in TORCH_MODULES:
        return (f"{package} comes with torch: fix torch as the torch finding says (use the cluster container's torch, "
                f"or run {tool_command(report, 'install.sh')}, which keeps an importable torch and adds a Triton where "
                "it has none)")
    return fla_requirement_fix(package)


def fla_import_error_fix(error: str, package: str | None) -> str:
    """The training entry's fix for fla's kernels failing to import with ``error`` (``package``: the missing
    module's top-level name, None when none is missing), where no doctor report is at hand: a compiled module built
    for another Python or CPU (:data:`NATIVE_LOAD_FAILURE`) replaced by one built for this one; a tilelang that does
    not import (it is named in ``error``) made to import or taken out, a shared library it cannot load put back first
    (:func:`broken_tilelang_fix`, the doctor's text for the same error); another error megatron-core does not catch
    by its own cause (:func:`uncaught_import_error_fix`); else :func:`fla_requirement_fix`. "Install fla" would do
    nothing there: fla is installed."""
    if NATIVE_LOAD_FAILURE.search(error):
        return (f"install {FLA_COMPILED_PACKAGES} built for this Python and CPU: a site bundle built for them (tools/build_site_bundle.sh with this node's --python-version and "
                "platform; oellm doctor prints the command) in place of the old one, or pip install --force-reinstall "
                "of the package whose library the error names")
    if package is None and "tilelang" in error:
        return broken_tilelang_fix(error)
    if package is None and not megatron_core_catches_line(error):
        return uncaught_import_error_fix(error)
    return fla_requirement_fix(package)


def fla_requirement_fix(package: str | None) -> str:
    """The fix for fla's GDN kernels failing to import for want of ``package`` (a module's top-level name; None when
    the error names none), other than torch's own: a module of the TileLang stack (which fla imports with tilelang)
    by its distribution, which the site bundle carries; another package installed where fla is; or fla reinstalled.
    The doctor's and the training entry's refusal say the same (the entry through :func:`fla_import_error_fix`)."""
    if package in TILELANG_STACK_MODULES:
        owner = "tilelang is incomplete" if package == "tilelang" else f"{package} is tilelang's"
        return (f"{owner} (pip install {TILELANG_STACK_MODULES[package]}; the site bundle carries it), and fla "
                f"imports tilelang wherever an nvcc is usable: {BROKEN_TILELANG_FIX}")
    if package is not None and package != "fla":
        return (f"install {package} into this environment or the container (pip install {package}); a site bundle "
                "does not carry it: its BUNDLE_REQUIRES.txt lists what it needs from its host, and "
                "`PYTHONPATH=<bundle> python3 -m pip check` names what is missing")
    return ("install fla (pip install fla-core==0.6.0 flash-linear-attention==0.6.0, the gdn extra) or, on a node "
            "without a package index, put the offline site bundle (tools/build_site_bundle.sh) on PYTHONPATH; where "
            "fla is installed, `python3 -m pip check` names a broken requirement")


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


HYBRID_EP_MULTINODE_VARIABLE = "OELLM_HYBRID_EP_MULTINODE"
"""Set by the Dockerfile's hybridep stage to its ``HYBRID_EP_MULTINODE`` build argument, so that a job can tell
whether the image's HybridEP was built to send tokens between nodes."""


def check_hybrid_ep_multinode(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """The hybridep image's DeepEP build setting: built with ``HYBRID_EP_MULTINODE=1`` it sends tokens between nodes;
    built without (``0``), HybridEP stays within one node's NVLink domain, right for the MareNostrum 5 recipes (their
    expert-parallel groups fit a node) and wrong for the Jupiter ones (theirs span nodes): said as ``ok`` with which
    recipes it serves, since the image cannot know the run's groups (``oellm recipe --dry-run`` notes each row whose
    group spans nodes). Another value is a warning; nothing outside that image (the variable is unset)."""
    value = env.get(HYBRID_EP_MULTINODE_VARIABLE)
    if value is None:
        return []
    name = "hybrid-ep-multinode"
    if value == "1":
        return [Finding("ok", name, f"{HYBRID_EP_MULTINODE_VARIABLE}=1: this image's DeepEP was built with "
                        "HYBRID_EP_MULTINODE=1 (HybridEP between nodes over RDMA).")]
    if value == "0":
        return [Finding("ok", name, f"{HYBRID_EP_MULTINODE_VARIABLE}=0: this image's HybridEP stays within one node's "
                        "NVLink domain: right for expert-parallel groups within a node (the MareNostrum 5 recipes); "
                        "groups that span nodes (every Jupiter row) need an image built with --build-arg "
                        "HYBRID_EP_MULTINODE=1 (docs/container.md, \"HybridEP across nodes\").")]
    return [Finding(
        "warning", name,
        f"{HYBRID_EP_MULTINODE_VARIABLE}={value!r} is neither 0 nor 1, so whether this image's HybridEP sends tokens "
        "between nodes is unknown; rows whose expert-parallel group spans nodes (every row of the Jupiter recipes) "
        "need a multi-node build.",
        "rebuild the hybridep target with --build-arg HYBRID_EP_MULTINODE=1 (multi-node) or 0 (within a node) "
        "(docs/container.md, \"HybridEP across nodes\")")]


FLASH_ATTENTION_RECIPE_BASES = ("_mn5.toml",)
"""Recipe bases in ``examples/oellm/`` that set ``attention-backend = "flash"``."""


def check_te_flash_attention(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """``--attention-backend flash`` on the te backend needs a flash attention Transformer Engine can run here: the
    training entry refuses it otherwise (TE's first forward would find no attention backend), judged as the entry
    judges it (:func:`megatron.oellm.backends.te_flash_attention.flash_attention_refusal`) from the flash-attn
    packages TE took up, the ``NVTE_FLASH_ATTN_V*`` pins in ``env`` and the first GPU; the run's dtype is not known
    here. Only where TE imports; a warning, as rows with ``attention-backend = "auto"`` run either way."""
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
    from megatron.oellm.backends.te_flash_attention import (
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
    if len(versions) == len(FLASH_GENERATIONS):
        pinned = ""
    elif versions:
        pinned = f", and --flash-attention-version unset or {' / '.join(map(str, versions))}"
    else:
        pinned = ", and --flash-attention-version unset"
    if "auto" in backends and "flash" in backends and not pinned:
        return [Finding("ok", name, f"{shown} preset: it agrees with what megatron-core sets for --attention-backend "
                        "auto and flash.")]
    starts = (f"runs start with --attention-backend {' / '.join(backends)} only{pinned} (the training entry refuses "
              "the others before they start" if backends
              else "no run starts, whatever its --attention-backend (the training entry refuses each before it starts")
    return [Finding(
        "warning", name,
        f"{shown} preset: megatron-core sets these itself when it builds a model and asserts that a preset value "
        f"agrees, so {starts}; the default is auto, the MN5 recipes use flash).",
        f"unset {' '.join(preset)} and choose TE's attention kernels with --attention-backend and "
        "--flash-attention-version")]


Rule = Callable[[EnvironmentReport, Mapping[str, str]], list[Finding]]
RULES: tuple[Rule, ...] = (
    check_python,
    check_torch,
    check_gpus,
    check_megatron_core,
    check_helpers_cpp,
    check_transformer_engine,
    check_fla_gdn_imports,
    check_fla_hopper_triton,
    check_nccl_channels,
    check_nccl_variable_names,
    check_allocator_conf,
    check_slow_path_switches,
    check_hybrid_ep,
    check_hybrid_ep_multinode,
    check_te_flash_attention,
    check_attention_switches,
)
"""Every rule, in report order."""


def check_environment(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """Run every rule of :data:`RULES` on ``report`` and the environment variables ``env``."""
    return [finding for rule in RULES for finding in rule(report, env)]
