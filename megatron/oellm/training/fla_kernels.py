"""fla's GDN kernels (installed, importing) and GDN/KDA backward on the run's GPU, checked before Megatron initialises.

On Hopper (H100, H200, GH200) with 3.4 <= Triton < 3.7.1, fla 0.6.0's Triton GDN/KDA backward is wrong (fla issue
640), so fla runs its TileLang backward there and raises in the first backward pass where it cannot: tilelang absent or
not importing, no nvcc, or its dispatch switched off; that is after the model and optimizer are on every GPU and a
forward pass ran. fla also imports a tilelang it finds wherever an nvcc is usable, whatever its switches say, so a
tilelang that is installed but does not import fails the import of fla's kernels with any Triton. The entry names
either first, in one line, with the fix. The rules and their wording are the
doctor's (:func:`megatron.oellm.doctor.rules.check_fla_hopper_triton`); here the facts are read in the run's own
process, and only where they matter (a model with GDN or KDA layers on a Hopper GPU with a Triton from 3.4 on).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import traceback
from collections.abc import Mapping

from megatron.oellm.cards import ModelCard
from megatron.oellm.doctor.probes import (
    FLA_GDN_IMPORTS,
    PACKAGE_PROBE_BY_NAME,
    distribution_version,
    find_nvcc,
    gpu_info,
)
from megatron.oellm.doctor.report import UNKNOWN_VERSION, EnvironmentReport, GpuInfo
from megatron.oellm.doctor.rules import (
    FLA_FREE_MODELS,
    FLA_TILELANG_FIX,
    TILELANG_STACK_MODULES,
    check_fla_hopper_triton,
    fla_affected_triton,
    fla_import_error_fix,
    fla_takes_tilelang,
    fla_tilelang_blocker,
)
from megatron.oellm.error_lines import one_line_error
from megatron.oellm.paths import source_checkout


def _fla_layers_on_affected_triton(card: ModelCard, triton: str | None) -> bool:
    """Whether ``card`` has GDN or KDA layers (fla's kernels) and Triton release ``triton`` is in fla issue 640's
    range: the facts read without the GPU or tilelang, so a run they rule out asks neither."""
    return card.linear_mixer != "none" and triton is not None and bool(fla_affected_triton(triton))


def _fla_may_take_tilelang(card: ModelCard, triton: str | None) -> bool:
    """Whether ``card`` has GDN or KDA layers and fla 0.6.0 turns its TileLang backend on on Hopper with Triton release
    ``triton`` (from 3.4 on: fla issue 640's range and the fixed releases alike); False for an unparsable version."""
    return card.linear_mixer != "none" and fla_takes_tilelang(triton)


def _is_hopper(capability: tuple[int, int] | None) -> bool:
    """Whether compute ``capability`` is Hopper's 9.x (None: no GPU seen)."""
    return capability is not None and capability[0] == 9


def fla_backward_problem(card: ModelCard, capability: tuple[int, int] | None, triton: str | None,
                         tilelang_blocker: str | None) -> str:
    """Why the run's fla backward would raise ('' when it would not): ``card`` has GDN or KDA layers, the GPU's compute
    capability is Hopper's 9.x, ``triton`` is in fla issue 640's range, and ``tilelang_blocker``
    (:func:`~megatron.oellm.doctor.rules.fla_tilelang_blocker`) says why fla cannot take its TileLang path."""
    if not _fla_layers_on_affected_triton(card, triton) or not _is_hopper(capability) or tilelang_blocker is None:
        return ""
    return (f"--oellm-model {card.name} has {card.linear_mixer.upper()} layers, whose fla 0.6.0 backward is wrong on "
            f"this Hopper GPU (compute capability {capability[0]}.{capability[1]}) with Triton {triton} (fla issue "
            f"640): fla runs its TileLang backward instead and raises in the first backward pass where it cannot, "
            f"and here {tilelang_blocker}. Fix: {FLA_TILELANG_FIX}")


def tilelang_facts_here(env: Mapping[str, str]) -> tuple[bool, str | None, str | None]:
    """(found, import error, nvcc) of tilelang for this process: located and imported here (fla imports it in this
    process too), the error as ``Type: message`` or None, and the nvcc found as fla searches it with ``env``."""
    found = importlib.util.find_spec("tilelang") is not None
    error = None
    if found:
        try:
            importlib.import_module("tilelang")
        except Exception as failure:  # noqa: BLE001  (any import failure is what fla would stop on)
            error = f"{type(failure).__name__}: {failure}"
    return found, error, find_nvcc(env)


def tilelang_blocker_here(env: Mapping[str, str]) -> str | None:
    """:func:`~megatron.oellm.doctor.rules.fla_tilelang_blocker` for this process (:func:`tilelang_facts_here`, the
    switches of ``env``)."""
    return fla_tilelang_blocker(*tilelang_facts_here(env), env)


def doctor_report_here(gpu: GpuInfo, triton: str, tilelang: tuple[bool, str | None, str | None]) -> EnvironmentReport:
    """The facts of this process that the doctor's fla rule reads, as its report: fla's and Triton's (``triton``)
    versions, the run's ``gpu``, ``tilelang`` (:func:`tilelang_facts_here`), and the Python, CPU and checkout its fix's
    site-bundle command names. Fields the rule does not read keep their defaults."""
    fla = distribution_version(PACKAGE_PROBE_BY_NAME["fla"])
    found, error, nvcc = tilelang
    checkout = source_checkout()
    return EnvironmentReport(
        python_version=platform.python_version(), typing_override_provided=False,
        versions={"fla": fla or UNKNOWN_VERSION, "triton": triton}, machine=platform.machine(),
        megatron_oellm_checkout=None if checkout is None else str(checkout), gpus=(gpu,),
        tilelang_importable=found, tilelang_import_error=error, nvcc_path=nvcc)


def fla_tilelang_crash_problem(card: ModelCard, report: EnvironmentReport, env: Mapping[str, str]) -> str:
    """Why fla's kernels for ``card``'s GDN or KDA layers would fail on ``report``'s Hopper GPU with a Triton past
    fla issue 640's range ('' when it would not, or the card has none): the doctor's verdict
    (:func:`~megatron.oellm.doctor.rules.check_fla_hopper_triton` with ``env``), an error where fla 0.6.0's
    kernels import tilelang (tilelang findable, an nvcc found, whatever the switches) and tilelang does not import,
    without the doctor's note on the models that use no fla kernel."""
    if card.linear_mixer == "none":
        return ""
    errors = [finding for finding in check_fla_hopper_triton(report, env) if finding.severity == "error"]
    if not errors:
        return ""
    message = errors[0].message.replace(FLA_FREE_MODELS, "")  # the run's model has fla layers
    return f"--oellm-model {card.name} has {card.linear_mixer.upper()} layers: {message} Fix: {errors[0].fix}"


def _tilelang_stack_module(error: BaseException) -> str | None:
    """The top-level module of the TileLang stack (:data:`~megatron.oellm.doctor.rules.TILELANG_STACK_MODULES`:
    tilelang, tvm_ffi, z3, ...) whose code ran innermost when ``error`` was raised: the package whose import failed
    as fla imported tilelang (a ``ctypes`` load of a missing ``libz3.so`` raises OSError from its frame); None where
    none of the stack's code ran."""
    running = [frame.f_globals.get("__name__", "") for frame, _line in traceback.walk_tb(error.__traceback__)]
    stack = [name.split(".")[0] for name in running if name.split(".")[0] in TILELANG_STACK_MODULES]
    return stack[-1] if stack else None


def _import_failure(error: Exception) -> tuple[str, str | None]:
    """(what failed, missing package) of fla's kernels failing to import with ``error``: a missing module by its
    name, with its top-level package; any other error as its one line (package None), which names tilelang where the
    error came from tilelang's stack (:func:`_tilelang_stack_module`) and does not name it itself, so that the fix
    (:func:`~megatron.oellm.doctor.rules.fla_import_error_fix`) is tilelang's."""
    if isinstance(error, ModuleNotFoundError) and error.name:
        return f"the module {error.name!r} is missing", error.name.split(".")[0]
    stack_module = _tilelang_stack_module(error)
    described = one_line_error(error)
    if stack_module is not None and not isinstance(error, ImportError):  # an ImportError's line names its module
        described = f"importing {stack_module} raised {described}"
    if stack_module is not None and "tilelang" not in described:
        described = f"as fla imported tilelang, {described}"
    return described, None


def megatron_core_catches(error: Exception) -> bool:
    """Whether megatron-core 0.19.2 catches ``error`` raised as it imports fla's kernels: its ``from ... import``
    catches only an ``ImportError`` (a ``ModuleNotFoundError`` among them, and the one of a name fla lacks,
    :func:`imported_entry_point`); any other error (an AttributeError, OSError or RuntimeError raised by the code fla
    runs as it imports) ends the run in its traceback."""
    return isinstance(error, ImportError)


def imported_entry_point(module: str, name: str) -> object:
    """``name`` of fla's ``module``, imported as megatron-core's ``from module import name`` imports it: a name the
    module lacks is the ``ImportError`` that statement raises, not an AttributeError, which megatron-core would not
    catch; an AttributeError raised inside the module's import stays one."""
    imported = importlib.import_module(module)
    try:
        return getattr(imported, name)
    except AttributeError as missing:
        raise ImportError(f"cannot import name {name!r} from {module!r}") from missing


def fla_import_problem(card: ModelCard) -> str:
    """Why megatron-core could not build ``card``'s GDN or KDA layers ('' when it could, or the card has none): an fla
    entry point megatron-core 0.19.2 imports for them (:data:`~megatron.oellm.doctor.probes.FLA_GDN_IMPORTS`) does
    not import here. megatron-core swallows that ``ImportError`` at import and raises "FLA is not installed" from the
    layer's constructor, on every rank after process groups and GPU memory are set up; the missing module (fla
    itself, or one it needs such as einops) is named here instead, in one line, with the doctor's fix. Any other
    ``Exception`` raised as fla imports (an AttributeError or OSError of its own code or of a library it loads, a
    RuntimeError or ValueError of TVM's), which megatron-core does not catch and which would end the run in a
    traceback on every rank, is named as the failed import of an installed fla, by its type and message.
    KeyboardInterrupt and SystemExit (not Exceptions) pass."""
    if card.linear_mixer == "none":
        return ""
    for module, name in FLA_GDN_IMPORTS:
        try:
            imported_entry_point(module, name)
        except Exception as error:  # noqa: BLE001  (a broken fla or TileLang stack raises anything; named here)
            failure, package = _import_failure(error)
            layers = f"--oellm-model {card.name} has {card.linear_mixer.upper()} layers, built on fla's {module}"
            fix = fla_import_error_fix(failure, package)
            if megatron_core_catches(error):
                return (f"{layers}, which does not import here ({failure}); megatron-core would stop with 'FLA is "
                        f"not installed' on every rank once the model is built. Fix: {fix}")
            return (f"{layers}: fla is installed, but its import failed here ({failure}); megatron-core, which "
                    "catches only an ImportError there, would end every rank in this error's traceback as it "
                    f"imports fla. Fix: {fix}")
    return ""


def _tilelang_crash_here(card: ModelCard, capability: tuple[int, int], triton: str, env: Mapping[str, str]) -> str:
    """:func:`fla_tilelang_crash_problem` on this process's GPU (of compute ``capability``), Triton ``triton`` and
    tilelang."""
    import torch

    gpu = gpu_info(torch.cuda.current_device(), capability)
    return fla_tilelang_crash_problem(card, doctor_report_here(gpu, triton, tilelang_facts_here(env)), env)


def check_fla_backward(card: ModelCard, env: Mapping[str, str] | None = None) -> None:
    """Raise ``ValueError`` naming :func:`fla_import_problem`, else :func:`fla_backward_problem` (a Triton of fla
    issue 640's range) or :func:`fla_tilelang_crash_problem` (a later one), for the run's card on this process's GPU.
    Imports fla and reads the GPU only for a card with GDN or KDA layers, the GPU only with a Triton from 3.4 on (where
    fla turns TileLang on on Hopper), and tilelang only on a Hopper GPU, so other runs pay nothing."""
    import torch

    problem = fla_import_problem(card)
    if problem:
        raise ValueError(problem)
    env = os.environ if env is None else env
    triton = distribution_version(PACKAGE_PROBE_BY_NAME["triton"])
    if not _fla_may_take_tilelang(card, triton) or not torch.cuda.is_available():
        return
    capability = torch.cuda.get_device_capability()
    if not _is_hopper(capability):
        return
    if fla_affected_triton(triton):
        problem = fla_backward_problem(card, capability, triton, tilelang_blocker_here(env))
    else:
        problem = _tilelang_crash_here(card, capability, triton, env)
    if problem:
        raise ValueError(problem)
