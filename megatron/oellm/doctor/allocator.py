"""The allocator rule: which of ``PYTORCH_CUDA_ALLOC_CONF`` / ``PYTORCH_ALLOC_CONF`` the installed torch reads
(:func:`allocator_variables`), and whether what it reads enables expandable segments and is taken by torch's own
allocator-settings parser (:func:`check_allocator_conf`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from packaging.version import InvalidVersion, Version

from megatron.oellm.doctor.report import EnvironmentReport, Finding

UNIFIED_ALLOC_CONF_TORCH = (2, 10)
"""First torch release (major, minor) whose CUDA caching allocator reads ``PYTORCH_ALLOC_CONF``, and then only where
``PYTORCH_CUDA_ALLOC_CONF`` is absent (an empty one counts as present). torch 2.9 reads ``PYTORCH_ALLOC_CONF`` into
its device-generic settings but not into the CUDA allocator's expandable segments (pytorch issue 183387); older
releases do not read it at all."""

ALLOCATOR_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")
"""Every variable torch reads allocator settings from (the CUDA, device-generic and ROCm names)."""


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


def allocator_items(value: str) -> list[str]:
    """The comma-separated items of ``value``, stripped; commas inside ``[...]`` (e.g. roundup_power2_divisions) do
    not split."""
    items, depth, current = [], 0, ""
    for char in value:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return [item.strip() for item in items]


def parse_allocator_conf(value: str) -> dict[str, str]:
    """``key:value,key:value`` -> dict; commas inside ``[...]`` (e.g. roundup_power2_divisions) do not split."""
    options = {}
    for item in allocator_items(value):
        key, _, option = item.partition(":")
        if key.strip():
            options[key.strip()] = option.strip()
    return options


def malformed_allocator_items(value: str) -> list[str]:
    """The items of ``value`` that are not ``key:value`` (no colon, or nothing before or after it, e.g. the typo
    ``expandable_segments=True``): torch's allocator-settings parser raises on each at the first CUDA allocation.
    Empty items (a trailing comma) are no item."""
    malformed = []
    for item in allocator_items(value):
        key, colon, option = item.partition(":")
        if item and not (colon and key.strip() and option.strip()):
            malformed.append(item)
    return malformed


def check_allocator_conf(report: EnvironmentReport, env: Mapping[str, str]) -> list[Finding]:
    """Without expandable segments the caching allocator fragments and long MoE runs OOM with memory still free; a
    value other than ``True``/``False`` (``true``, ``1``), an item that is not ``key:value``
    (:func:`malformed_allocator_items`), or an item the installed torch's own parser refuses
    (:attr:`EnvironmentReport.allocator_refusal`: a size that is no number, a threshold out of range, an unknown key
    to a CUDA build) makes torch raise when CUDA allocates, so it is an error.
    With ``backend:cudaMallocAsync`` torch's caching allocator is not used, so expandable segments are not asked for.
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
    malformed = malformed_allocator_items(value)
    if malformed:
        return [Finding("error", name, f"{variable}={value!r} holds {', '.join(map(repr, malformed))}, not "
                        "key:value: torch's allocator-settings parser raises on it at the first CUDA allocation, "
                        f"after the job has started{also}.",
                        f"export {variable}={_with_expandable_segments(value)}")]
    expandable = parse_allocator_conf(value).get("expandable_segments")
    if expandable not in (None, "True", "False"):
        return [Finding("error", name, f"{variable}={value!r} sets expandable_segments to {expandable!r}: torch "
                        "accepts only True or False and raises a ValueError at the first CUDA allocation, after the "
                        f"job has started{also}.",
                        f"export {variable}={_with_expandable_segments(value)}")]
    if report.allocator_refusal is not None:
        item, why = report.allocator_refusal
        shown = repr(item) if item else "an empty item (two commas in a row, or a trailing one)"
        return [Finding("error", name, f"{variable}={value!r}: the allocator-settings parser of torch {torch_version} "
                        f"refuses {shown} ({why}) and raises at the first CUDA allocation, after the job has "
                        f"started{also}.",
                        (f"correct or drop {item.partition(':')[0]!r}" if item else "drop the empty item")
                        + f", e.g. export {variable}={_with_expandable_segments(value, {item})}")]
    backend = parse_allocator_conf(value).get("backend")
    if backend in ASYNC_BACKENDS:
        return [_async_backend_finding(variable, value, backend, expandable == "True", ignored)]
    if expandable != "True":
        return [Finding("warning", name, f"{variable}={value!r} lacks expandable_segments:True, so the caching "
                        f"allocator fragments{also}.",
                        f"add expandable_segments:True to {variable}, e.g. "
                        f"export {variable}={_with_expandable_segments(value)}")]
    if ignored is not None:
        return [Finding("warning", name, f"{variable} enables expandable segments, but {ignored}.",
                        f"move the options you need into {variable} and unset PYTORCH_ALLOC_CONF")]
    return [Finding("ok", name, f"{variable} enables expandable segments.")]


ASYNC_BACKENDS = ("cudaMallocAsync", "hipMallocAsync")
"""Values of the ``backend`` option that replace torch's native caching allocator by CUDA's (ROCm's) stream-ordered
one; expandable segments are an option of the native allocator alone."""


def _async_backend_finding(variable: str, value: str, backend: str, expandable_set: bool,
                           ignored: str | None) -> Finding:
    """The finding for ``variable=value`` choosing an :data:`ASYNC_BACKENDS` allocator (``backend``): expandable
    segments, which only torch's native caching allocator has, neither apply nor need adding (``expandable_set``:
    they are set and have no effect); a warning only for a ``PYTORCH_ALLOC_CONF`` torch ignores (``ignored``)."""
    unused = " (its expandable_segments:True has no effect)" if expandable_set else ""
    message = (f"{variable}={value!r} chooses the stream-ordered {backend} allocator in place of torch's "
               f"caching allocator: expandable segments, an option of the caching allocator, do not apply{unused}")
    if ignored is not None:
        return Finding("warning", "pytorch-alloc-conf", f"{message}, but {ignored}.",
                       f"move the options you need into {variable} and unset PYTORCH_ALLOC_CONF")
    return Finding("ok", "pytorch-alloc-conf", f"{message}.")


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


def _with_expandable_segments(value: str, drop: Collection[str] = ()) -> str:
    """``value`` with ``expandable_segments:True`` set (replacing any other expandable_segments value), without its
    items that are not ``key:value`` (:func:`malformed_allocator_items`) and those in ``drop``."""
    malformed = set(malformed_allocator_items(value)).union(drop)
    options = parse_allocator_conf(",".join(item for item in allocator_items(value) if item not in malformed))
    options["expandable_segments"] = "True"
    return ",".join(f"{key}:{option}" for key, option in options.items())
