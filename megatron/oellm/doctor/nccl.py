"""The doctor's NCCL part: the channel variables and the ``NCCL_*`` names nothing reads.

* :func:`check_nccl_channels`: channel variables (:data:`NCCL_CHANNEL_VARIABLES`) whose large values make NCCL keep
  buffers in GPU memory outside PyTorch's allocator, read as NCCL reads numbers (:func:`nccl_integer`);
* the name scan: :func:`nccl_wheel_library` finds the nvidia-nccl wheel's library torch loads, without importing torch,
  and :func:`library_nccl_names` reads the ``NCCL_*`` names in it and in torch's ``libtorch_cuda.so``;
  ``_nccl_names`` reads both into the report's :class:`~megatron.oellm.doctor.report.NcclNames` for
  :func:`~megatron.oellm.doctor.probes.collect_environment`;
* :func:`check_nccl_variable_names`: each ``NCCL_*`` variable set that neither library names.
"""

from __future__ import annotations

import functools
import importlib.metadata
import mmap
import re
from collections.abc import Mapping
from pathlib import Path

from megatron.oellm.doctor.locate import is_file, package_folders
from megatron.oellm.doctor.report import EnvironmentReport, Finding, NcclNames

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
NCCL_UNREAD_RECIPE_EXPORTS = {"NCCL_NCHANNELS_PER_PEER": "the MN5 recipes (examples/oellm/_mn5.toml)"}
"""The recipes that export a variable of :data:`NCCL_UNREAD_VARIABLES` on purpose, to reproduce the environment of
the report they follow: the warning says so and that it is harmless there, so that a user running the doctor in such
a job, as the README advises, is not told to undo the recipe."""
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


def nccl_wheel_library() -> Path | None:
    """The nvidia-nccl wheel's ``nvidia/nccl/lib/libnccl.so.N`` that torch loads, found through importlib without
    importing torch: first the one next to torch (the ``libtorch_cuda.so`` of torch's pip wheels, 2.11 checked,
    carries the RPATH ``$ORIGIN/../../nvidia/nccl/lib``, which the loader searches before LD_LIBRARY_PATH), else the
    first along ``sys.path`` (where torch's ``_preload_cuda_deps`` looks when that fails). None without that wheel, as
    in containers whose torch is linked against the system's NCCL."""
    folders = [folder.parent / "nvidia" / "nccl" for folder in package_folders("torch")[:1]]
    for folder in folders + package_folders("nvidia.nccl"):
        found = sorted(path for path in (folder / "lib").glob(NCCL_WHEEL_LIBRARY) if is_file(path))
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
    torch_library = next((folder / TORCH_CUDA_LIBRARY for folder in package_folders("torch")[:1]), None)
    if torch_library is None or not is_file(torch_library):
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
                f"over the network.{_recipe_export_note(variable)}",
                f"unset {variable} ({instead} sets the channels per network peer){_recipe_export_fix(variable)}"))
    return findings


def _recipe_export_note(variable: str) -> str:
    """The end of the warning on ``variable`` unread by NCCL: which recipes export it and why it is harmless there
    (:data:`NCCL_UNREAD_RECIPE_EXPORTS`); '' for one no recipe exports."""
    recipes = NCCL_UNREAD_RECIPE_EXPORTS.get(variable)
    if recipes is None:
        return ""
    return (f" {recipes[0].upper()}{recipes[1:]} export it to reproduce MN5 report #438's environment, which set it; "
            "harmless there, as NCCL ignores it.")


def _recipe_export_fix(variable: str) -> str:
    """The end of the fix for ``variable``: nothing to do in a job of the recipes that export it on purpose."""
    recipes = NCCL_UNREAD_RECIPE_EXPORTS.get(variable)
    return "" if recipes is None else f", unless {recipes} set it: then leave it, nothing to fix"


def _nccl_channel_finding(variable: str, raw: str | None) -> Finding:
    """The finding on one of :data:`NCCL_CHANNEL_VARIABLES` set to ``raw`` (None: unset)."""
    if not raw:  # NCCL reads an empty variable as an unset one
        state = "unset" if raw is None else "empty, which NCCL reads as unset"
        return Finding("ok", variable, f"{variable} is {state} (NCCL default).")
    value = nccl_integer(raw)
    if value is not None and value == NCCL_CHANNEL_AUTOMATIC.get(variable):
        return Finding("ok", variable, f"{variable}={raw.strip()} leaves the count to NCCL.")
    smallest = NCCL_CHANNEL_SMALLEST[variable]
    if value is None and NCCL_INTEGER.fullmatch(raw.strip()):
        return Finding("error", variable, f"{variable}={raw!r} overflows the signed 64-bit integer NCCL reads it "
                       "into (strtoll): NCCL ignores it and keeps its default, saying so only at NCCL_DEBUG=INFO "
                       "(\"Invalid value ..., using default\").",
                       f"export {variable}={NCCL_CHANNEL_LIMIT}  (or unset it)")
    if value is not None and value < 0 and smallest == 0:  # no effect, as an unread variable: a warning
        return Finding("warning", variable, f"{variable}={raw!r} is a negative minimum, which NCCL takes as no "
                       "minimum at all (as 0), its default, so it has no effect: a typo for a count?",
                       f"unset {variable}, or export {variable}={NCCL_CHANNEL_LIMIT} for a minimum")
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
