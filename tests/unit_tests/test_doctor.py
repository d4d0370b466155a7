"""Tests of ``oellm doctor``: every rule on synthetic reports and environments, rendering, exit status, a real probe."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import json
import os
import platform
import random
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from packaging.version import Version

from megatron.oellm import MEGATRON_CORE_VERSION, cli
from megatron.oellm.backends.selection import transformer_engine_import_error
from megatron.oellm.backends.te_flash_attention import FlashAttentionFound, te_flash_attention_found
from megatron.oellm.commands import doctor as doctor_command
from megatron.oellm.doctor import nccl as doctor_nccl
from megatron.oellm.doctor import probes as doctor_probes
from megatron.oellm.doctor.allocator import check_allocator_conf, parse_allocator_conf
from megatron.oellm.doctor.nccl import NCCL_CHANNEL_VARIABLES, check_nccl_channels, check_nccl_variable_names
from megatron.oellm.doctor.probes import PackageProbe, collect_environment
from megatron.oellm.doctor.report import (
    UNKNOWN_VERSION,
    EnvironmentReport,
    Finding,
    GpuInfo,
    NcclNames,
    exit_status,
    format_text,
    to_json,
)
from megatron.oellm.doctor.rules import (
    FLASH_ATTENTION_RECIPE_BASES,
    HYBRID_EP_RECIPE_BASES,
    check_attention_switches,
    check_environment,
    check_fla_hopper_triton,
    check_gpus,
    check_hybrid_ep,
    check_megatron_core,
    check_python,
    check_slow_path_switches,
    check_te_flash_attention,
    check_torch,
    check_transformer_engine,
)
from megatron.oellm.switches import SLOW_PATH_SWITCHES
from tests.unit_tests.doctor_reports import H100, TORCH_REFUSES, make_report

GH200 = GpuInfo(0, "NVIDIA GH200 480GB", (9, 0), 95.0)
A100 = GpuInfo(0, "NVIDIA A100-SXM4-80GB", (8, 0), 79.2)
B200 = GpuInfo(0, "NVIDIA B200", (10, 0), 178.0)
GOOD_ENV = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}  # read by every torch release


def severities(findings: list[Finding]) -> list[str]:
    return [finding.severity for finding in findings]


def test_healthy_report_has_only_ok_findings_and_exit_zero():
    findings = check_environment(make_report(), GOOD_ENV)
    assert set(severities(findings)) == {"ok"}
    assert exit_status(findings) == 0


# --- fla on Hopper with Triton in [3.4, 3.7.1) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("triton", "bad"),
    [("3.3.9", False), ("3.4.0", True), ("3.5.1", True), ("3.7.0", True), ("3.7.1rc1", True), ("3.7.1", False),
     ("3.8.0", False), ("3.4.0+git1a2b3c", True), ("3.7.1+git1a2b3c", False)],
)
def test_fla_rule_triton_bounds(triton, bad):
    findings = check_fla_hopper_triton(make_report(versions={"triton": triton}), {})
    assert severities(findings) == (["error"] if bad else ["ok"])
    if bad:
        assert "640" in findings[0].message and triton in findings[0].message
        assert "Qwen3 MoE models use no fla kernel" in findings[0].message  # who is affected: GDN/KDA models only
        assert "tilelang" in findings[0].fix and "3.7.1" in findings[0].fix
        # the fix installs the TileLang stack the image pins (tilelang's own requirements float)
        pins = dict(line.split("==") for line in (Path(__file__).resolve().parents[2] / "docker" /
                                                  "constraints.txt").read_text().splitlines()
                    if "==" in line and not line.startswith("#"))
        for name in ("tilelang", "apache-tvm-ffi", "z3-solver"):
            assert f"{name}=={pins[name]}" in findings[0].fix, findings[0].fix


@pytest.mark.parametrize(("gpu", "bad"), [(H100, True), (GH200, True), (A100, False), (B200, False)])
def test_fla_rule_only_on_hopper(gpu, bad):
    findings = check_fla_hopper_triton(make_report(versions={"triton": "3.5.0"}, gpus=(gpu,)), {})
    assert severities(findings) == (["error"] if bad else ["ok"])


def test_fla_rule_hopper_by_name_as_fla_decides():
    renamed = GpuInfo(0, "NVIDIA H20", (9, 0), 95.0)
    odd_capability = dataclasses.replace(renamed, capability=(8, 9))
    report = make_report(versions={"triton": "3.5.0"}, gpus=(odd_capability,))
    assert severities(check_fla_hopper_triton(report, {})) == ["error"]


def test_fla_rule_any_hopper_among_the_gpus():
    report = make_report(versions={"triton": "3.5.0"}, gpus=(A100, dataclasses.replace(H100, index=1)))
    assert severities(check_fla_hopper_triton(report, {})) == ["error"]


@pytest.mark.parametrize("absent", ["fla", "triton"])
def test_fla_rule_needs_fla_and_triton(absent):
    report = make_report(versions={"triton": "3.5.0", absent: None})
    assert severities(check_fla_hopper_triton(report, {})) == ["ok"]


def test_fla_rule_without_gpus_is_not_an_error():
    assert severities(check_fla_hopper_triton(make_report(versions={"triton": "3.5.0"}, gpus=()), {})) == ["ok"]


def test_fla_rule_tilelang_with_nvcc_is_ok():
    report = make_report(versions={"triton": "3.5.0", "tilelang": "0.1.6"}, tilelang_importable=True,
                         nvcc_path="/usr/local/cuda/bin/nvcc")
    findings = check_fla_hopper_triton(report, {})
    assert severities(findings) == ["ok"] and "TileLang" in findings[0].message


@pytest.mark.parametrize(
    ("nvcc", "env", "reason"),
    [(None, {}, "nvcc"),
     ("/usr/local/cuda/bin/nvcc", {"FLA_TILELANG": "0"}, "FLA_TILELANG=0"),
     ("/usr/local/cuda/bin/nvcc", {"FLA_DISABLE_BACKEND_DISPATCH": "1"}, "FLA_DISABLE_BACKEND_DISPATCH=1")],
)
def test_fla_rule_tilelang_unusable_by_fla_is_an_error(nvcc, env, reason):
    report = make_report(versions={"triton": "3.5.0", "tilelang": "0.1.6"}, tilelang_importable=True, nvcc_path=nvcc)
    findings = check_fla_hopper_triton(report, env)
    assert severities(findings) == ["error"] and reason in findings[0].message


def test_fla_rule_tilelang_explicitly_enabled_is_ok():
    report = make_report(versions={"triton": "3.5.0"}, tilelang_importable=True, nvcc_path="/opt/cuda/bin/nvcc")
    assert severities(check_fla_hopper_triton(report, {"FLA_TILELANG": "1"})) == ["ok"]


def test_fla_rule_unparsable_triton_is_a_warning():
    findings = check_fla_hopper_triton(make_report(versions={"triton": "main-branch"}), {})
    assert severities(findings) == ["warning"] and "main-branch" in findings[0].message


# --- megatron-core pin -----------------------------------------------------------------------------------------

SHADOWING_PROBE = """
import json
from megatron.oellm.doctor.probes import collect_environment
report = collect_environment()
print(json.dumps([report.versions["megatron-core"], report.megatron_core_path]))
"""


def test_a_megatron_checkout_on_pythonpath_is_the_version_checked(tmp_path):
    """A Megatron-LM checkout on PYTHONPATH is what ``import megatron.core`` loads, whatever release pip's metadata
    names: the doctor checks the checkout's version (from its package_info.py) and says where it is."""
    minor, patch = random.randint(20, 99), random.randint(0, 9)
    core = tmp_path / "megatron" / "core"
    core.mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "package_info.py").write_text(f"MAJOR = 0\nMINOR = {minor}\nPATCH = {patch}\nPRE_RELEASE = 'rc1'\n")
    root = str(Path(doctor_probes.__file__).parents[2])  # the megatron folder of this checkout
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.path.dirname(root)])}
    done = subprocess.run([sys.executable, "-c", SHADOWING_PROBE], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    version, path = json.loads(done.stdout.strip().splitlines()[-1])
    assert version == f"0.{minor}.{patch}rc1" and path == str(core)
    (finding,) = check_megatron_core(make_report(versions={"megatron-core": version}, megatron_core_path=path), {})
    assert finding.severity == "error" and str(core) in finding.message and "PYTHONPATH" in finding.fix


def test_the_installed_megatron_core_module_reports_the_pinned_release():
    """This environment's megatron.core (the pinned wheel) parses to the pin, so a healthy install stays green."""
    version, path = doctor_probes.megatron_core_module()
    assert version == MEGATRON_CORE_VERSION and path is not None


@pytest.mark.parametrize(
    ("installed", "severity"),
    [(MEGATRON_CORE_VERSION, "ok"), (MEGATRON_CORE_VERSION + ".0", "ok"), ("0.19.1", "error"), ("0.19.3", "error"),
     ("0.20.0", "error"), (MEGATRON_CORE_VERSION + "rc0", "error"), (None, "error")],
)
def test_megatron_core_pin(installed, severity):
    findings = check_megatron_core(make_report(versions={"megatron-core": installed}), {})
    assert severities(findings) == [severity]
    if severity == "error":
        assert findings[0].fix.startswith(f"pip install megatron-core=={MEGATRON_CORE_VERSION}; ")


# --- NCCL channels ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variable", NCCL_CHANNEL_VARIABLES)
def test_nccl_channels_warn_above_four(variable):
    rng = random.Random(random.random())
    for value in rng.sample(range(1, 65), 12) + [4, 5]:  # 0 and less are errors (the test below)
        findings = {f.name: f for f in check_nccl_channels(make_report(), {variable: str(value)})}
        expected = "warning" if value > 4 else "ok"
        assert findings[variable].severity == expected, value
        if expected == "warning":
            assert f"{variable}={value} is above 4" in findings[variable].message
            assert "GPU memory that PyTorch does not own" in findings[variable].message
            assert "14 GiB" not in findings[variable].message  # the MN5 figure came with the unread variable
            assert findings[variable].fix == f"export {variable}=4"


def test_nccl_channels_cover_the_variables_nccl_reads_that_raise_channels():
    """The channel variables are those NCCL's libraries name that raise a channel count, not the one they lack."""
    assert set(NCCL_CHANNEL_VARIABLES) == {"NCCL_MIN_NCHANNELS", "NCCL_NCHANNELS_PER_NET_PEER",
                                           "NCCL_MIN_P2P_NCHANNELS"}
    assert "NCCL_NCHANNELS_PER_PEER" not in NCCL_CHANNEL_VARIABLES


@pytest.mark.parametrize("raw", ["four", "4.0", "0x"])
def test_nccl_channels_non_integer_is_an_error_naming_the_variable(raw):
    """A non-number is an error naming the variable (an empty value and a minimum of 0 are NCCL's defaults, a
    negative minimum a warning: test_doctor_nccl_channel_values.py)."""
    findings = check_nccl_channels(make_report(), {"NCCL_MIN_NCHANNELS": raw, "NCCL_NCHANNELS_PER_NET_PEER": "2"})
    by_name = {f.name: f for f in findings}
    assert by_name["NCCL_MIN_NCHANNELS"].severity == "error"
    assert "NCCL_MIN_NCHANNELS" in by_name["NCCL_MIN_NCHANNELS"].message
    assert by_name["NCCL_NCHANNELS_PER_NET_PEER"].severity == "ok"
    assert exit_status(findings) == 1


def test_nccl_channels_unset_is_ok():
    findings = check_nccl_channels(make_report(), {})
    assert set(severities(findings)) == {"ok"} and {f.name for f in findings} == set(NCCL_CHANNEL_VARIABLES)


def test_nchannels_per_peer_is_a_warning_that_nccl_does_not_read_it():
    """``NCCL_NCHANNELS_PER_PEER`` (exported by MN5 report #438) is in no NCCL 2.18-2.28 library: whatever its value,
    the doctor says it has no effect and names the per-peer variable NCCL reads, instead of calling a large value a
    GPU memory cost or a small one an error."""
    rng = random.Random(random.random())
    for raw in [str(rng.randint(5, 64)), str(rng.randint(1, 4)), "0", hex(rng.randint(1, 64)), "many"]:
        findings = check_nccl_channels(make_report(), {"NCCL_NCHANNELS_PER_PEER": raw})
        (finding,) = [f for f in findings if f.name == "NCCL_NCHANNELS_PER_PEER"]
        assert finding.severity == "warning", raw
        assert "has no effect" in finding.message and "2.18 to 2.28" in finding.message
        assert "NCCL_NCHANNELS_PER_NET_PEER" in finding.message and "GiB" not in finding.message
        assert finding.fix.startswith("unset NCCL_NCHANNELS_PER_PEER")
        assert exit_status(findings) == 0
    empty = check_nccl_channels(make_report(), {"NCCL_NCHANNELS_PER_PEER": ""})
    assert "NCCL_NCHANNELS_PER_PEER" not in {f.name for f in empty}  # an empty variable sets nothing


def test_nchannels_per_peer_is_ok_where_the_nccl_found_reads_it():
    """A later NCCL whose library holds ``NCCL_NCHANNELS_PER_PEER`` reads it: an ok line naming that library, no
    warning; the warning stays where the library lacks the name or is not the NCCL torch runs."""
    rng = random.Random(random.random())
    raw = str(rng.randint(1, 64))
    names = _names(rng, ["NCCL_NCHANNELS_PER_PEER", "NCCL_MIN_NCHANNELS"], [])
    (finding,) = [f for f in check_nccl_channels(nccl_report(names), {"NCCL_NCHANNELS_PER_PEER": raw})
                  if f.name == "NCCL_NCHANNELS_PER_PEER"]
    assert finding.severity == "ok" and names.library in finding.message and names.version in finding.message
    for report in (nccl_report(_names(rng, ["NCCL_MIN_NCHANNELS"], [])),
                   make_report(nccl_names=names, nccl_version=f"{names.version}9")):
        (finding,) = [f for f in check_nccl_channels(report, {"NCCL_NCHANNELS_PER_PEER": raw})
                      if f.name == "NCCL_NCHANNELS_PER_PEER"]
        assert finding.severity == "warning" and "has no effect" in finding.message


def test_the_mn5_recipe_env_gets_the_unread_variable_warning_and_no_other():
    """The environment ``examples/oellm/_mn5.toml`` exports (report #438's values): one warning, on
    NCCL_NCHANNELS_PER_PEER; NCCL_MIN_NCHANNELS=4 passes."""
    env = tomllib.loads((EXAMPLES / "_mn5.toml").read_text())["cluster"]["env"]
    findings = [f for f in check_environment(make_report(), env) if f.severity != "ok"]
    assert [(f.severity, f.name) for f in findings] == [("warning", "NCCL_NCHANNELS_PER_PEER")]


def test_the_unread_variable_warning_says_the_mn5_recipes_set_it_on_purpose():
    """A user who runs the doctor in an MN5 recipe's job, as the README advises, was told only to unset
    NCCL_NCHANNELS_PER_PEER, which the recipe exports to reproduce report #438's environment: the warning stays (NCCL
    ignores the variable) and says that the MN5 recipes set it, harmlessly, and that in their jobs there is nothing
    to fix. The recipe file it names exports the variable."""
    raw = str(random.randint(1, 64))
    (finding,) = [f for f in check_nccl_channels(make_report(), {"NCCL_NCHANNELS_PER_PEER": raw})
                  if f.name == "NCCL_NCHANNELS_PER_PEER"]
    assert finding.severity == "warning" and "has no effect" in finding.message
    assert "The MN5 recipes (examples/oellm/_mn5.toml) export it to reproduce MN5 report #438's environment" in (
        finding.message)
    assert "harmless there" in finding.message
    assert finding.fix.endswith("unless the MN5 recipes (examples/oellm/_mn5.toml) set it: then leave it, nothing to "
                                "fix")
    env = tomllib.loads((EXAMPLES.parents[1] / "examples/oellm/_mn5.toml").read_text())["cluster"]["env"]
    assert "NCCL_NCHANNELS_PER_PEER" in env


# --- NCCL_* names neither NCCL nor torch reads ------------------------------------------------------------------


def _random_names(rng: random.Random, count: int) -> list[str]:
    """``count`` distinct random ``NCCL_*`` names (upper-case words joined by ``_``)."""
    names: set[str] = set()
    while len(names) < count:
        words = ["".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(rng.randint(2, 9)))
                 for _ in range(rng.randint(1, 3))]
        names.add("NCCL_" + "_".join(words))
    return sorted(names)


def _fake_library(path: Path, strings: list[str], rng: random.Random) -> Path:
    """A file that stands in for a shared library: ``strings`` as NUL-terminated C strings between random bytes that
    cannot be part of a name (so the names found are exactly those put in)."""
    filler = bytes(range(0, 48)) + b":;<=>?@[\\]^`{|}~" + bytes(range(128, 256))
    chunks = [bytes(rng.choice(filler) for _ in range(rng.randint(0, 300)))]
    for string in strings:
        chunks += [string.encode() + b"\0", bytes(rng.choice(filler) for _ in range(rng.randint(0, 300)))]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(chunks))
    return path


def test_library_names_are_found_wherever_they_start(tmp_path):
    """Names are read from a library's bytes, a name kept only as the tail of a longer string (a linker's merge of
    ``NCCL_BLOCKING_WAIT`` into ``TORCH_NCCL_BLOCKING_WAIT``) and a format string's name included; a name that is
    only the head of a longer one is not there."""
    rng = random.Random(random.random())
    plain, tail, in_format, longer, outer, inner = _random_names(rng, 6)
    library = _fake_library(tmp_path / "libfake.so", [plain, "TORCH_" + tail, f"{in_format}=%s is set",
                                                      longer + "_EXTRA", f"{outer}_{inner}"], rng)
    names = doctor_nccl.library_nccl_names(library)
    assert {plain, tail, in_format, longer + "_EXTRA", f"{outer}_{inner}", inner} <= names  # inner: a tail of an
    # NCCL_ name, which the search's match (starting at the first NCCL_) holds but does not start with
    assert longer not in names and "TORCH_" + tail not in names
    library.write_bytes(library.read_bytes().replace(plain.encode(), b"x" * len(plain)))
    assert plain not in doctor_nccl.library_nccl_names(library)  # a changed file is read again, not cached


def nccl_report(names: NcclNames) -> EnvironmentReport:
    """:func:`make_report` of a node whose torch runs the nvidia-nccl wheel's NCCL, whose names are ``names``."""
    return make_report(nccl_names=names, nccl_version=names.version)


def _names(rng: random.Random, nccl: list[str], torch_names: list[str]) -> NcclNames:
    version = f"2.{rng.randint(18, 40)}.{rng.randint(1, 9)}"
    return NcclNames("/site/nvidia/nccl/lib/libnccl.so.2", version, frozenset(nccl), frozenset(torch_names))


def test_nccl_variables_neither_nccl_nor_torch_reads_are_warnings():
    rng = random.Random(random.random())
    read_by_nccl, read_by_torch, unread = (_random_names(rng, 9)[i::3] for i in range(3))
    names = _names(rng, read_by_nccl, read_by_torch)
    env = {variable: str(rng.randint(1, 9)) for variable in read_by_nccl + read_by_torch + unread}
    env |= {"PATH": "/usr/bin", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}  # not NCCL_*: not this check's
    findings = check_nccl_variable_names(nccl_report(names), env)
    assert severities(findings) == ["warning"] * len(unread)
    for variable, finding in zip(unread, findings, strict=True):
        assert finding.message.startswith(f"{variable}={env[variable]!r} is read by neither NCCL {names.version} ")
        assert variable in finding.fix
    assert exit_status(findings) == 0
    (finding,) = check_nccl_variable_names(nccl_report(names),
                                           {v: env[v] for v in read_by_nccl + read_by_torch})
    assert finding.severity == "ok" and f"{len(read_by_nccl + read_by_torch)} NCCL_* variable(s)" in finding.message


def test_nccl_variable_names_skip_empty_unknown_and_preloaded():
    rng = random.Random(random.random())
    (variable,) = _random_names(rng, 1)
    names = _names(rng, [], [])
    assert check_nccl_variable_names(nccl_report(names), {variable: ""}) == []
    assert check_nccl_variable_names(nccl_report(names), {}) == []
    (finding,) = check_nccl_variable_names(make_report(nccl_names=None, nccl_names_unread="why"), {variable: "1"})
    assert finding.severity == "ok" and "not checked: why" in finding.message
    (finding,) = check_nccl_variable_names(nccl_report(names),
                                           {variable: "1", "LD_PRELOAD": "/opt/nccl/lib/libnccl.so.2"})
    assert finding.severity == "ok" and "LD_PRELOAD" in finding.message
    # NCCL_NCHANNELS_PER_PEER has its own warning (check_nccl_channels), not a second one here
    assert check_nccl_variable_names(nccl_report(names), {"NCCL_NCHANNELS_PER_PEER": "4"}) == []


def test_only_another_nccl_in_ld_preload_skips_the_name_check():
    """A preloaded NCCL plugin (``libnccl-net.so``, ``libnccl-tuner-*.so``) or the wheel's own library loads no other
    NCCL: the names are still checked. Any other ``libnccl.so*``, wherever it stands in the list, skips the check."""
    rng = random.Random(random.random())
    (variable,) = _random_names(rng, 1)
    names = _names(rng, [], [])
    report, folder = nccl_report(names), f"/opt/plugin-{rng.randint(1, 999)}/lib"
    for preload in (f"{folder}/libnccl-net.so", f"{folder}/libnccl-tuner-{rng.randint(1, 9)}.so",
                    f"/usr/lib/libjemalloc.so:{names.library}"):
        (finding,) = check_nccl_variable_names(report, {variable: "1", "LD_PRELOAD": preload})
        assert finding.severity == "warning" and finding.message.startswith(f"{variable}="), preload
    for preload in (f"{folder}/libnccl-net.so /opt/nccl-{rng.randint(1, 99)}/lib/libnccl.so.2", "libnccl.so.2",
                    f"{folder}/libnccl.so:{folder}/libnccl-net.so"):
        (finding,) = check_nccl_variable_names(report, {variable: "1", "LD_PRELOAD": preload})
        assert finding.severity == "ok" and "LD_PRELOAD" in finding.message, preload


def test_the_warning_does_not_say_a_plugins_variable_is_ignored():
    """A variable neither library names may be read by a plugin NCCL loads (Google's and AWS's network plugins read
    their own ``NCCL_*`` names): the warning says NCCL itself and PyTorch ignore it, not that NCCL as loaded does, and
    asks to check the plugins' variables before unsetting it."""
    rng = random.Random(random.random())
    variables = ["NCCL_FASTRAK_IFNAME", *_random_names(rng, 2)]
    findings = check_nccl_variable_names(nccl_report(_names(rng, [], [])), dict.fromkeys(variables, "1"))
    assert len(findings) == len(variables)
    for finding in findings:
        assert finding.severity == "warning"
        assert "plugin NCCL loads" in finding.message and "NCCL runs as if it were unset" not in finding.message
        assert "NCCL itself and PyTorch run as if it were unset" in finding.message
        assert "plugins NCCL loads" in finding.fix


def test_a_wheel_of_another_nccl_release_than_torch_runs_is_not_read_as_its():
    """Where torch reports another NCCL release than the nvidia-nccl wheel found (an NGC torch linked against the
    system's NCCL, the wheel pulled in by another package), the wheel's names say nothing of what runs: one ok line
    naming both, no warning. A wheel whose version differs only by a local or post suffix is the same release."""
    rng = random.Random(random.random())
    (variable,) = _random_names(rng, 1)
    names = _names(rng, [], [])
    major, minor, patch = (int(part) for part in names.version.split("."))
    other = f"{major}.{minor + rng.randint(1, 3)}.{patch}"
    (finding,) = check_nccl_variable_names(make_report(nccl_names=names, nccl_version=other), {variable: "1"})
    assert finding.severity == "ok" and f"torch runs NCCL {other}, not the nvidia-nccl wheel's {names.version}" in (
        finding.message)
    same = dataclasses.replace(names, version=f"{names.version}.post1")
    (finding,) = check_nccl_variable_names(make_report(nccl_names=same, nccl_version=names.version), {variable: "1"})
    assert finding.severity == "warning" and finding.message.startswith(f"{variable}='1' is read by neither")


def test_nccl_variables_of_an_installation_are_no_typos():
    """NVIDIA's CUDA images export NCCL_VERSION (the lent H200's: 2.28.3-1) and environment modules the install
    folders: neither library holds those names, yet they are no typo; a misspelt variable beside them still is."""
    rng = random.Random(random.random())
    (typo,) = _random_names(rng, 1)
    installation = ("NCCL_HOME", "NCCL_ROOT", "NCCL_ROOT_DIR", "NCCL_DIR", "NCCL_LIB_DIR", "NCCL_INCLUDE_DIR")
    env = {variable: f"/opt/nccl-{rng.randint(1, 99)}" for variable in installation}
    env |= {"NCCL_VERSION": f"2.{rng.randint(18, 40)}.{rng.randint(1, 9)}-1", typo: str(rng.randint(1, 9))}
    findings = check_nccl_variable_names(nccl_report(_names(rng, [], [])), env)
    assert [(f.severity, f.message.split("=")[0]) for f in findings] == [("warning", typo)]
    assert check_nccl_variable_names(nccl_report(_names(rng, [], [])), {"NCCL_VERSION": "2.28.3-1"}) == []


def test_check_environment_runs_every_rule_in_report_order():
    """Each rule's finding is in the report, in the documented order (python, torch, GPUs, megatron-core, TE, fla,
    NCCL, allocator, switches, HybridEP, TE's flash attention, attention switches): a rule left out of RULES drops
    its check from ``oellm doctor`` without any other test noticing."""
    switch = random.choice(sorted(SLOW_PATH_SWITCHES))
    report = make_report(versions=TE, te_flash_attention=FlashAttentionFound({3: "3.0.0b1"}), nccl_names=None,
                         nccl_names_unread="no nvidia-nccl wheel")
    env = {**GOOD_ENV, "NCCL_DEBUG": "INFO", switch: "1", "NVTE_FUSED_ATTN": "0"}
    assert [f.name for f in check_environment(report, env)] == [
        "python", "torch", "gpus", "megatron-core", "transformer-engine", "fla-gdn-imports", "fla-hopper-triton",
        *NCCL_CHANNEL_VARIABLES,
        "nccl-variables", "pytorch-alloc-conf", "oellm-switches", "hybrid-ep", "te-flash-attention",
        "attention-switches"]


def test_check_environment_runs_the_name_check():
    rng = random.Random(random.random())
    (variable,) = _random_names(rng, 1)
    findings = check_environment(nccl_report(_names(rng, [], [])), {**GOOD_ENV, variable: "1"})
    assert [(f.severity, f.name) for f in findings if f.severity != "ok"] == [("warning", "nccl-variables")]


def _fake_nccl_wheel(site: Path, names: list[str], version: str, rng: random.Random) -> Path:
    """An nvidia-nccl-cu12 wheel of ``version`` installed in ``site``, its library a stand-in holding ``names``."""
    library = _fake_library(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2", names, rng)
    info = site / f"nvidia_nccl_cu12-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: {version}\n")
    (info / "RECORD").write_text("nvidia/nccl/lib/libnccl.so.2,,\n")
    return library


@pytest.fixture
def fresh_nvidia_namespace():
    """Leaves ``sys.modules["nvidia"]`` as it was: a namespace package keeps a stale path when its folder leaves
    sys.path, so one imported from a test's folder would be found by later tests."""
    before = sys.modules.get("nvidia")
    yield
    if before is None:
        sys.modules.pop("nvidia", None)
    else:
        sys.modules["nvidia"] = before


def test_collect_reads_the_names_of_the_nccl_wheel_torch_loads(tmp_path, monkeypatch, fresh_nvidia_namespace):
    """torch's CUDA library and an nvidia-nccl wheel, both stand-ins with chosen names: the report holds their names
    and the wheel's version, and the check warns on exactly the names neither holds. The wheel is found along
    sys.path, and the one next to torch (its RPATH) is preferred."""
    rng = random.Random(random.random())
    in_nccl, in_torch, unread, next_to_torch = (_random_names(rng, 8)[i::4] for i in range(4))
    torch_site, nccl_site = tmp_path / "torch_site", tmp_path / "nccl_site"
    _fake_library(torch_site / "torch" / "lib" / "libtorch_cuda.so", ["TORCH_" + name for name in in_torch], rng)
    version = f"2.{rng.randint(18, 40)}.{rng.randint(1, 9)}"
    library = _fake_nccl_wheel(nccl_site, in_nccl, version, rng)
    monkeypatch.syspath_prepend(str(nccl_site))
    located = doctor_nccl.package_folders  # torch is imported here: it is located in the fake site instead
    monkeypatch.setattr(doctor_nccl, "package_folders",
                        lambda module: [torch_site / module] if module == "torch" else located(module))
    names, why = doctor_nccl._nccl_names()
    assert why is None and names.version == version and Path(names.library) == library
    assert set(in_nccl) <= names.nccl and set(in_torch) <= names.torch
    env = {variable: "1" for variable in in_nccl + in_torch + unread}
    findings = check_nccl_variable_names(nccl_report(names), env)
    assert sorted(f.message.split("=", 1)[0] for f in findings) == sorted(unread)
    adjacent = _fake_nccl_wheel(torch_site, next_to_torch, f"{version}.post1", rng)
    monkeypatch.syspath_prepend(str(torch_site))  # torch's site-packages, where pip put both
    names, _ = doctor_nccl._nccl_names()
    assert Path(names.library) == adjacent and set(next_to_torch) <= names.nccl and names.version == f"{version}.post1"
    (torch_site / "torch" / "lib" / "libtorch_cuda.so").unlink()  # a CPU build: nothing read, and the report says why
    names, why = doctor_nccl._nccl_names()
    assert names is None and "libtorch_cuda.so" in why


def test_the_nccl_wheel_next_to_torch_wins_over_one_earlier_on_sys_path(tmp_path, monkeypatch,
                                                                          fresh_nvidia_namespace):
    """torch's libtorch_cuda.so loads the nvidia-nccl wheel next to it (its RPATH), whatever other nvidia-nccl wheel
    sys.path lists first (a user-site or PYTHONPATH install): the names read are those of the wheel next to torch."""
    rng = random.Random(random.random())
    beside, elsewhere = (_random_names(rng, 6)[i::2] for i in range(2))
    torch_site, other_site = tmp_path / "torch_site", tmp_path / "other_site"
    _fake_library(torch_site / "torch" / "lib" / "libtorch_cuda.so", [], rng)
    adjacent = _fake_library(torch_site / "nvidia" / "nccl" / "lib" / "libnccl.so.2", beside, rng)
    _fake_nccl_wheel(other_site, elsewhere, f"2.{rng.randint(18, 40)}.{rng.randint(1, 9)}", rng)
    monkeypatch.syspath_prepend(str(other_site))
    located = doctor_nccl.package_folders
    monkeypatch.setattr(doctor_nccl, "package_folders",
                        lambda module: [torch_site / module] if module == "torch" else located(module))
    assert doctor_nccl.nccl_wheel_library() == adjacent
    names, why = doctor_nccl._nccl_names()
    assert why is None and Path(names.library) == adjacent
    assert set(beside) <= names.nccl and not set(elsewhere) & names.nccl


def test_the_installed_nccl_reads_per_net_peer_and_not_per_peer():
    """Where this environment has the nvidia-nccl wheel (the GPU images), its library holds NCCL_MIN_NCHANNELS and
    NCCL_NCHANNELS_PER_NET_PEER and, for the releases the doctor's warning names, no NCCL_NCHANNELS_PER_PEER."""
    library = doctor_nccl.nccl_wheel_library()
    if library is None:
        pytest.skip("no nvidia-nccl wheel here")
    names = doctor_nccl.library_nccl_names(library)
    assert {"NCCL_MIN_NCHANNELS", "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_MIN_P2P_NCHANNELS"} <= names
    version = doctor_nccl._nccl_wheel_version(library)
    if version is not None and Version("2.18") <= Version(version) < Version("2.29"):
        assert "NCCL_NCHANNELS_PER_PEER" not in names


# --- slow-path switches ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SLOW_PATH_SWITCHES))
def test_a_slow_path_switch_left_on_is_a_warning_naming_it(name):
    findings = check_slow_path_switches(make_report(), {name: "1"})
    assert severities(findings) == ["warning"] and findings[0].fix == f"unset {name}"
    assert name in findings[0].message and exit_status(findings) == 0


@pytest.mark.parametrize("name", sorted(SLOW_PATH_SWITCHES))
def test_a_switch_set_to_another_value_than_one_is_a_warning_that_it_stays_off(name):
    """``OELLM_UPSTREAM_MOE_PERMUTATION=yes`` (or ``true``, ``2``) leaves the switch off, as only ``1`` turns it on;
    the doctor said no switch was set, so an A/B run would time the fast path twice."""
    value = random.choice(["yes", "true", "True", "on", str(random.randint(2, 99)), " 1"])
    findings = check_slow_path_switches(make_report(), {name: value})
    assert severities(findings) == ["warning"] and exit_status(findings) == 0
    assert name in findings[0].message and repr(value) in findings[0].message and "off" in findings[0].message
    assert findings[0].fix == f"export {name}=1 to run the slow path, or unset {name}"


def test_switches_off_or_not_one_are_ok():
    for env in ({}, {name: "0" for name in SLOW_PATH_SWITCHES}):
        assert severities(check_slow_path_switches(make_report(), env)) == ["ok"]
    both = check_slow_path_switches(make_report(), {name: "1" for name in SLOW_PATH_SWITCHES})
    assert severities(both) == ["warning"] * len(SLOW_PATH_SWITCHES)


# --- allocator configuration -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "severity"),
    [({}, "warning"),
     ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "ok"),
     ({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}, "ok"),
     ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:512, expandable_segments:True"}, "ok"),
     ({"PYTORCH_ALLOC_CONF": "roundup_power2_divisions:[256:1,512:2],expandable_segments:True"}, "ok"),
     ({"PYTORCH_ALLOC_CONF": "expandable_segments:False"}, "warning"),
     ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:512"}, "warning"),
     ({"PYTORCH_ALLOC_CONF": "garbage_collection_threshold:0.8",
       "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "warning"),
     ({"PYTORCH_ALLOC_CONF": "expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"},
      "warning")],
)
def test_allocator_conf(env, severity):
    """On a torch whose CUDA allocator reads both variables (PYTORCH_CUDA_ALLOC_CONF first)."""
    findings = check_allocator_conf(make_report(versions={"torch": "2.10.0"}), env)
    assert severities(findings) == [severity]


@pytest.mark.parametrize("variable", ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"])
@pytest.mark.parametrize("spelling", ["true", "1", "TRUE", "yes", "on"])
def test_allocator_conf_expandable_segments_that_torch_refuses_is_an_error(variable, spelling):
    """torch parses expandable_segments as exactly True or False and raises a ValueError on anything else, at the
    first CUDA allocation; a warning ("lacks expandable_segments:True") would let the job start and crash."""
    split = random.choice([64, 128, 256, 512])
    findings = check_allocator_conf(make_report(versions={"torch": "2.10.0"}),
                                    {variable: f"max_split_size_mb:{split},expandable_segments:{spelling}"})
    assert severities(findings) == ["error"]
    suggested = findings[0].fix.split(f"export {variable}=")[1]
    assert parse_allocator_conf(suggested) == {"max_split_size_mb": str(split), "expandable_segments": "True"}


def test_allocator_conf_errors_are_the_values_torchs_own_parser_refuses():
    """This torch's allocator-settings parser (in a fresh interpreter, so this process's allocator is untouched)
    refuses exactly the expandable_segments values the rule calls errors."""
    values = [f"expandable_segments:{spelling}" for spelling in ("True", "False", "true", "1", "false")]
    done = subprocess.run([sys.executable, "-c", TORCH_REFUSES, *values], capture_output=True, text=True,
                          timeout=120, check=False)
    if done.returncode == 3:
        pytest.skip("this torch has no _accelerator_setAllocatorSettings")
    assert done.returncode == 0, done.stderr
    for value, refused in json.loads(done.stdout.strip().splitlines()[-1]).items():
        error = severities(check_allocator_conf(make_report(versions={"torch": importlib.metadata.version("torch")}),
                                                {"PYTORCH_ALLOC_CONF": value})) == ["error"]
        assert refused == error, value


@pytest.mark.parametrize("variable", ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"])
@pytest.mark.parametrize("malformed", ["expandable_segments=True", "expandable_segments", "garbage_collection:",
                                       ":True"])
def test_allocator_conf_item_that_is_not_key_value_is_an_error_and_the_fix_drops_it(variable, malformed):
    """An item that is not ``key:value`` (``expandable_segments=True``, an easy typo) makes torch's allocator-settings
    parser raise at the first CUDA allocation, after the job has started: the rule said only "lacks
    expandable_segments:True" (a warning) and its fix kept the item (``expandable_segments=True:,...``), which raises
    too. This torch's own parser (fresh interpreter) refuses the value and accepts the suggested fix."""
    split = random.choice([64, 128, 256, 512])
    value = ",".join(random.sample([f"max_split_size_mb:{split}", malformed], 2))
    findings = check_allocator_conf(make_report(versions={"torch": "2.10.0"}), {variable: value})
    assert severities(findings) == ["error"] and repr(malformed) in findings[0].message
    suggested = findings[0].fix.split(f"export {variable}=")[1]
    assert parse_allocator_conf(suggested) == {"max_split_size_mb": str(split), "expandable_segments": "True"}
    done = subprocess.run([sys.executable, "-c", TORCH_REFUSES, value, suggested], capture_output=True, text=True,
                          timeout=120, check=False)
    if done.returncode == 3:
        pytest.skip("this torch has no _accelerator_setAllocatorSettings")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {value: True, suggested: False}


def _allocator_items_with_one_torch_refuses(rng: random.Random) -> tuple[list[str], str]:
    """Items torch's parser takes, in a random order, with one it refuses at a random place; (items, that one)."""
    good = ["expandable_segments:True", f"max_split_size_mb:{rng.randint(20, 8192)}",
            f"garbage_collection_threshold:{rng.uniform(0.05, 0.95):.3f}",
            f"roundup_power2_divisions:{2 ** rng.randint(0, 6)}"]
    rng.shuffle(good)
    bad = rng.choice([f"max_split_size_mb:{rng.choice(['abc', 'x12', 'mb'])}",
                      f"garbage_collection_threshold:{rng.uniform(1.01, 5):.3f}",
                      f"roundup_power2_divisions:{rng.choice([3, 5, 6, 7, 12, 24, 100])}"])
    good.insert(rng.randint(0, len(good)), bad)
    return good, bad


def test_allocator_probe_names_the_item_the_installed_torchs_parser_refuses():
    """``max_split_size_mb:abc``, ``garbage_collection_threshold:2``, a roundup that is no power of 2: torch's
    allocator-settings parser raises on each at the first CUDA allocation, after the job has started. The probe asks
    the installed torch's own parser in a fresh interpreter and names the item (fresh random items and places), and
    finds nothing in items it takes."""
    import torch

    if not hasattr(torch._C, "_accelerator_setAllocatorSettings"):
        pytest.skip("this torch has no _accelerator_setAllocatorSettings")
    rng = random.Random(random.random())
    items, bad = _allocator_items_with_one_torch_refuses(rng)
    item, why = doctor_probes.allocator_refusal_in_subprocess(items)
    assert item == bad and why.split(":")[0] in ("ValueError", "RuntimeError", "IndexError"), (items, why)
    assert doctor_probes.allocator_refusal_in_subprocess([i for i in items if i != bad]) is None


def test_collect_environment_asks_torch_about_the_allocator_configuration_it_reads(monkeypatch):
    """End to end, with the configuration exported as in a job (``PYTORCH_CUDA_ALLOC_CONF``, which every torch
    reads): it reaches the probe, and the report names the item torch refuses, not the first item (a probe that
    inherits the variable has torch parse it first); the rule then is an error."""
    items, bad = _allocator_items_with_one_torch_refuses(random.Random(random.random()))
    env = {"PYTORCH_CUDA_ALLOC_CONF": ",".join(items)}
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", env["PYTORCH_CUDA_ALLOC_CONF"])
    report = collect_environment(env)
    if report.versions.get("torch") is None:
        pytest.skip("needs torch")
    assert report.allocator_refusal is not None and report.allocator_refusal[0] == bad
    assert severities(check_allocator_conf(report, env)) == ["error"]


def test_empty_allocator_items_are_judged_as_torch_judges_the_exported_value(monkeypatch):
    """``expandable_segments:True,,`` (an empty item) is refused by torch's tokenizer, ``...,`` (a trailing comma)
    taken: the probe asks torch about the exported value itself, empty items included, and the rule agrees with
    torch's own verdict on each (before, empty items were dropped and both were ok)."""
    size = random.randint(20, 8192)
    values = [f"max_split_size_mb:{size},expandable_segments:True,,", f"max_split_size_mb:{size},expandable_segments:True,"]
    done = subprocess.run([sys.executable, "-c", TORCH_REFUSES, *values], capture_output=True, text=True,
                          timeout=120, check=False)
    if done.returncode == 3:
        pytest.skip("this torch has no _accelerator_setAllocatorSettings")
    refused = json.loads(done.stdout.strip().splitlines()[-1])
    assert refused[values[0]], "torch takes a doubled comma: the case this test is about is gone"
    for value in values:
        monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", value)
        report = collect_environment({"PYTORCH_CUDA_ALLOC_CONF": value})
        (finding,) = check_allocator_conf(report, {"PYTORCH_CUDA_ALLOC_CONF": value})
        assert finding.severity == ("error" if refused[value] else "ok"), (value, finding.message)
        if refused[value]:
            assert "empty item" in finding.message and finding.fix.endswith("expandable_segments:True")


def test_an_allocator_item_torch_refuses_is_an_error_naming_it_whose_fix_drops_it():
    """The rule turns the probe's refusal into an error that names the item and torch's words; the suggested value
    drops the item, keeps the others and enables expandable segments, and the installed torch takes it."""
    items, bad = _allocator_items_with_one_torch_refuses(random.Random(random.random()))
    value = ",".join(i for i in items if not i.startswith("expandable_segments"))
    report = make_report(versions={"torch": "2.11.0"}, allocator_refusal=(bad, "ValueError: stoull"))
    (finding,) = check_allocator_conf(report, {"PYTORCH_CUDA_ALLOC_CONF": value})
    assert finding.severity == "error" and repr(bad) in finding.message and "ValueError: stoull" in finding.message
    suggested = finding.fix.split("export PYTORCH_CUDA_ALLOC_CONF=")[1]
    assert bad not in suggested.split(",") and "expandable_segments:True" in suggested.split(",")
    assert set(suggested.split(",")) == {i for i in items if i != bad} | {"expandable_segments:True"}
    assert doctor_probes.allocator_refusal_in_subprocess(suggested.split(",")) is None
    taken = make_report(versions={"torch": "2.11.0"})
    assert severities(check_allocator_conf(taken, {"PYTORCH_CUDA_ALLOC_CONF": value + ",expandable_segments:True"})) \
        == ["ok"]


def test_allocator_conf_fix_keeps_other_options():
    findings = check_allocator_conf(make_report(), {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:256"})
    suggested = findings[0].fix.split("export PYTORCH_CUDA_ALLOC_CONF=")[1]
    assert parse_allocator_conf(suggested) == {"max_split_size_mb": "256", "expandable_segments": "True"}


def test_parse_allocator_conf_brackets():
    parsed = parse_allocator_conf("roundup_power2_divisions:[256:1,512:2],expandable_segments:True")
    assert parsed == {"roundup_power2_divisions": "[256:1,512:2]", "expandable_segments": "True"}


# --- python and gpus -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("provided", [True, False])
def test_python_reports_version_and_provision(provided):
    findings = check_python(make_report(python_version="3.11.7", typing_override_provided=provided), {})
    assert severities(findings) == ["ok"] and "3.11.7" in findings[0].message
    assert ("megatron.oellm.compat" in findings[0].message) is provided


def test_torch_rule_installed_missing_and_broken():
    working = check_torch(make_report(), {})
    assert severities(working) == ["ok"] and "2.9.0" in working[0].message and "CUDA 12.8" in working[0].message
    cpu = check_torch(make_report(cuda_version=None, gpus=()), {})
    assert severities(cpu) == ["ok"] and "CPU build" in cpu[0].message
    assert severities(check_torch(make_report(versions={"torch": None}), {})) == ["error"]
    error = "OSError: libcudnn.so.9: cannot open shared object file: No such file or directory"
    report = make_report(cuda_version=None, gpus=(), torch_import_error=error)
    broken = check_torch(report, {})
    assert severities(broken) == ["error"] and "libcudnn.so.9" in broken[0].message
    assert "LD_LIBRARY_PATH" in broken[0].fix
    assert "does not import" in check_gpus(report, {})[0].message and exit_status(check_environment(report, {})) == 1


def test_a_torch_that_does_not_import_is_a_finding_not_a_traceback(tmp_path):
    """A CUDA torch whose libraries are not on LD_LIBRARY_PATH raises on import: the doctor reports it, exit 1."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "raise OSError('libcudnn.so.9: cannot open shared object file: oellm_doctor_test')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "megatron.oellm", "doctor", "--json"], capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1
    findings = {f["name"]: f for f in json.loads(done.stdout)["findings"]}
    assert findings["torch"]["severity"] == "error" and "oellm_doctor_test" in findings["torch"]["message"]


def test_gpus_none_seen_is_a_warning_with_the_reason():
    cpu_build = check_gpus(make_report(gpus=(), cuda_version=None), {})
    no_device = check_gpus(make_report(gpus=()), {})
    broken = check_gpus(make_report(gpus=(), gpu_probe_error="RuntimeError: driver too old"), {})
    assert severities(cpu_build + no_device + broken) == ["warning"] * 3
    assert "CPU build" in cpu_build[0].message and "12.8" in no_device[0].message
    assert "driver too old" in broken[0].message


# --- rendering and exit status ---------------------------------------------------------------------------------


def test_exit_status_counts_only_errors():
    assert exit_status([Finding("warning", "a", "m", "f"), Finding("ok", "b", "m")]) == 0
    assert exit_status([Finding("ok", "b", "m"), Finding("error", "c", "m", "f")]) == 1
    assert exit_status([]) == 0


def test_json_shape():
    report = make_report(versions={"triton": "3.5.0", "deep-ep": "1.2.1"}, hybrid_ep=True)
    findings = check_environment(report, {"NCCL_MIN_NCHANNELS": "32"})
    document = json.loads(json.dumps(to_json(report, findings)))
    assert set(document) == {"versions", "paths", "gpus", "findings", "ok"}
    assert document["ok"] is False
    assert document["versions"]["triton"] == "3.5.0" and document["versions"]["tilelang"] is None
    assert document["versions"]["python"] == "3.12.3" and document["versions"]["cuda"] == "12.8"
    assert document["versions"]["hybrid-ep"] == "1.2.1"
    assert document["gpus"] == [{"index": 0, "name": H100.name, "capability": "9.0", "memory_gib": 79.1}]
    assert {f["severity"] for f in document["findings"]} == {"ok", "warning", "error"}
    assert all(set(f) == {"severity", "name", "message", "fix"} for f in document["findings"])


def test_version_rows_show_torchs_nccl_and_hybrid_ep_only_where_deep_ep_has_it():
    """The nccl row is the NCCL torch reports (not its CUDA), and the hybrid-ep row names deep_ep's version only where
    its ``__init__`` declares HybridEPBuffer: "-" on DeepEP's main branch and where that could not be read. The
    python row says typing.override was provided only where it was; a GPU of n + 0.5 GiB shows as n.5 GiB."""
    rng = random.Random(random.random())
    cuda, nccl = f"12.{rng.randint(1, 9)}", f"2.{rng.randint(18, 29)}.{rng.randint(1, 9)}"
    deep_ep = f"1.{rng.randint(0, 9)}.{rng.randint(0, 9)}+{rng.randint(0, 0xFFFFFF):06x}"
    gib = rng.randint(16, 191)
    for (hybrid_ep, shown), provided in zip(((True, deep_ep), (False, None), (None, None)), (True, False, True),
                                            strict=True):
        report = make_report(versions={"deep-ep": deep_ep}, hybrid_ep=hybrid_ep, cuda_version=cuda,
                             nccl_version=nccl, typing_override_provided=provided,
                             gpus=(dataclasses.replace(H100, memory_gib=gib + 0.5),))
        rows = to_json(report, [])["versions"]
        assert (rows["cuda"], rows["nccl"], rows["hybrid-ep"]) == (cuda, nccl, shown), hybrid_ep
        text = format_text(report, [])
        lines = text.split("\n\n")[0].splitlines()[1:]
        table = {line.split()[0]: line.split()[1] for line in lines}
        assert (table["cuda"], table["nccl"], table["hybrid-ep"]) == (cuda, nccl, shown or "-"), hybrid_ep
        assert ("typing.override provided" in next(line for line in lines if "python" in line)) is provided
        assert f"  {gib}.5 GiB" in text


def test_text_report_is_aligned_and_lists_fixes():
    report = make_report(versions={"triton": "3.5.0"})
    findings = check_environment(report, {})
    text = format_text(report, findings)
    table = text.split("\n\n")[0].splitlines()[1:]
    value_columns = {len(line) - len(line[2:].split("  ", 1)[1].lstrip()) for line in table}
    assert len(value_columns) == 1
    assert "sm_90" in text and H100.name in text
    for finding in findings:
        assert finding.message in text
        if finding.fix:
            assert f"fix: {finding.fix}" in text
    assert text.rstrip().endswith("1 error(s), 1 warning(s)")


@pytest.mark.parametrize(("json_flag", "bad"), [(False, False), (True, False), (False, True), (True, True)])
def test_command_exit_status_and_output(monkeypatch, capsys, json_flag, bad):
    report = make_report(versions={"megatron-core": "0.18.0" if bad else MEGATRON_CORE_VERSION})
    monkeypatch.setattr(doctor_command, "collect_environment", lambda: report)
    for variable in [name for name in os.environ if name.startswith("NCCL_")] + ["PYTORCH_CUDA_ALLOC_CONF"]:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    status = cli.main(["doctor", "--json"] if json_flag else ["doctor"])
    out = capsys.readouterr().out
    assert status == (1 if bad else 0)
    if json_flag:
        assert json.loads(out)["ok"] is (not bad)
    else:
        assert ("megatron-core 0.18.0" in out) is bad


def test_command_judges_the_environment_it_runs_in(monkeypatch, capsys):
    """``oellm doctor`` runs its rules on the variables exported in the job that starts it: a channel count NCCL
    cannot read is an error (exit 1), a large one a warning (exit 0)."""
    monkeypatch.setattr(doctor_command, "collect_environment", lambda: make_report())
    for variable in [name for name in os.environ if name.startswith(("NCCL_", "NVTE_", "OELLM_", "PYTORCH_"))]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("NCCL_MIN_NCHANNELS", random.choice(["four", "4.0", "0x"]))
    assert cli.main(["doctor", "--json"]) == 1
    findings = {f["name"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert findings["NCCL_MIN_NCHANNELS"]["severity"] == "error"
    count = random.randint(5, 64)
    monkeypatch.setenv("NCCL_MIN_NCHANNELS", str(count))
    assert cli.main(["doctor"]) == 0
    assert f"NCCL_MIN_NCHANNELS={count} is above 4" in capsys.readouterr().out


# --- the real probe --------------------------------------------------------------------------------------------


def test_collect_environment_on_this_machine():
    report = collect_environment()
    assert report.python_version == platform.python_version()
    assert report.typing_override_provided is (sys.version_info < (3, 12))
    # a PyPI CUDA wheel's metadata says 2.11.0 where torch.__version__ says 2.11.0+cu130: the local label may differ
    assert Version(report.versions["torch"]).public == Version(torch.__version__).public
    transformers = pytest.importorskip("transformers")
    assert report.versions["transformers"] == transformers.__version__
    fla = pytest.importorskip("fla")
    assert report.versions["fla"] == fla.__version__
    assert report.versions["megatron-core"] is not None
    assert report.cuda_version == torch.version.cuda
    expected_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert len(report.gpus) == expected_gpus
    assert [gpu.capability for gpu in report.gpus] == [
        torch.cuda.get_device_capability(i) for i in range(expected_gpus)
    ]
    assert report.tilelang_importable is (importlib.util.find_spec("tilelang") is not None)
    te_installed = importlib.util.find_spec("transformer_engine") is not None
    assert (report.transformer_engine_import_error is None) is (
        not te_installed or transformer_engine_import_error() is None)
    findings = check_environment(report, {})
    assert exit_status(findings) == int(any(f.severity == "error" for f in findings))


def test_collect_finds_modules_without_metadata_and_hybrid_ep(tmp_path, monkeypatch):
    package = tmp_path / "deep_ep"
    package.mkdir()
    (package / "__init__.py").write_text("from .hybrid import HybridEPBuffer\n")
    (tmp_path / "doctor_probe_only_module.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    probe = PackageProbe("probe", ("no-such-distribution-for-doctor",), "doctor_probe_only_module")
    assert doctor_probes.distribution_version(probe) == UNKNOWN_VERSION
    missing = PackageProbe("missing", ("no-such-distribution-for-doctor",), "no_such_module_for_doctor")
    assert doctor_probes.distribution_version(missing) is None
    assert doctor_probes.deep_ep_declares_hybrid_ep() is True
    (package / "__init__.py").write_text("from .buffer import Buffer\n")
    assert doctor_probes.deep_ep_declares_hybrid_ep() is False


def test_find_nvcc_from_cuda_home(tmp_path):
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("")
    assert doctor_probes.find_nvcc({"CUDA_HOME": str(tmp_path), "PATH": ""}) == str(nvcc)
    found_without = doctor_probes.find_nvcc({"PATH": ""})
    assert found_without is None or found_without != str(nvcc)


@pytest.mark.parametrize("cuda_home", [None, "bad", "good"])
@pytest.mark.parametrize("cuda_path", [None, "bad", "good"])
def test_find_nvcc_searches_as_fla_does(tmp_path, monkeypatch, cuda_home, cuda_path):
    """fla 0.6.0 reads CUDA_PATH only when CUDA_HOME is unset: with CUDA_HOME naming a folder without nvcc and
    CUDA_PATH one with it, fla keeps Triton, so the doctor must not count that nvcc."""
    env_utils = pytest.importorskip("fla.utils.env")
    good, bad = tmp_path / "good", tmp_path / "bad"
    (good / "bin").mkdir(parents=True)
    (good / "bin" / "nvcc").write_text("")
    (bad / "bin").mkdir(parents=True)
    folders = {"good": str(good), "bad": str(bad)}
    env = {"PATH": ""}
    monkeypatch.setenv("PATH", "")
    for variable, choice in (("CUDA_HOME", cuda_home), ("CUDA_PATH", cuda_path)):
        monkeypatch.delenv(variable, raising=False)
        if choice is not None:
            env[variable] = folders[choice]
            monkeypatch.setenv(variable, folders[choice])
    found = doctor_probes.find_nvcc(env)
    assert (found is not None) is env_utils.has_usable_nvcc.__wrapped__()
    if cuda_home == "bad" and cuda_path == "good":
        assert found != str(good / "bin" / "nvcc")


def test_find_nvcc_falls_back_to_the_nvcc_wheel_then_usr_local_cuda(tmp_path, monkeypatch):
    """Without CUDA_HOME, CUDA_PATH or an nvcc on PATH, fla 0.6.0 (``fla.utils.env.has_usable_nvcc``) still takes the
    nvcc of the nvidia-cuda-nvcc wheel, else /usr/local/cuda/bin/nvcc, and runs its TileLang backward: the doctor
    must find both, or it calls such a node an fla issue 640 error. The wheel is a stand-in (its RECORD lists
    bin/nvcc); /usr/local/cuda is made to hold the only nvcc by the file test."""
    version = f"13.{random.randint(0, 9)}.{random.randint(1, 99)}"
    site = tmp_path / "site"
    nvcc = site / "nvidia" / "cuda_nvcc" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("")
    info = site / f"nvidia_cuda_nvcc-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-cuda-nvcc\nVersion: {version}\n")
    (info / "RECORD").write_text("nvidia/cuda_nvcc/bin/nvcc,,\n")
    monkeypatch.syspath_prepend(str(site))
    assert doctor_probes.find_nvcc({"PATH": ""}) == str(nvcc)
    usr_local = Path("/usr/local/cuda/bin/nvcc")
    monkeypatch.setattr(doctor_probes, "is_file", lambda path: Path(path) == usr_local)
    assert doctor_probes.find_nvcc({"PATH": ""}) == str(usr_local)


def test_fla_rule_tilelang_that_fails_to_import_is_an_error():
    """The bundle once held z3-solver 5.x: tilelang was findable, fla chose it, and importing it crashed."""
    error = "OSError: libz3.so.4.15: cannot open shared object file: No such file or directory"
    report = make_report(versions={"triton": "3.6.0", "tilelang": "0.1.15"}, tilelang_importable=True,
                         tilelang_import_error=error, nvcc_path="/usr/local/cuda/bin/nvcc")
    findings = check_fla_hopper_triton(report, {})
    assert severities(findings) == ["error"] and "libz3.so.4.15" in findings[0].message


def test_import_probe_reports_the_last_error_line_of_a_fresh_interpreter(tmp_path, monkeypatch):
    from megatron.oellm.doctor.probes import _import_error_in_subprocess

    (tmp_path / "broken_module_for_doctor.py").write_text("raise OSError('libfoo.so.1: cannot open shared object')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert "libfoo.so.1" in _import_error_in_subprocess("broken_module_for_doctor")
    assert _import_error_in_subprocess("json") is None


# --- Transformer Engine ----------------------------------------------------------------------------------------


def test_te_rule_absent_installed_and_broken():
    assert severities(check_transformer_engine(make_report(), {})) == ["ok"]
    working = check_transformer_engine(make_report(versions={"transformer-engine": "2.20.2"}), {})
    assert severities(working) == ["ok"] and "2.20.2 imports" in working[0].message
    no_apex = check_transformer_engine(make_report(versions={"transformer-engine": "2.20.2"},
                                                   grad_accum_fusion_available=False), {})
    assert severities(no_apex) == ["warning"] and "fused_weight_gradient_mlp_cuda" in no_apex[0].message
    assert "--no-gradient-accumulation-fusion" in no_apex[0].fix
    assert severities(check_transformer_engine(make_report(grad_accum_fusion_available=False), {})) == ["ok"]
    error = "OSError: libnccl.so.2: cannot open shared object file: No such file or directory"
    broken = check_transformer_engine(
        make_report(versions={"transformer-engine": "2.20.2"}, transformer_engine_import_error=error), {})
    assert severities(broken) == ["error"]
    assert "libnccl.so.2" in broken[0].message and "fall back to the torch-native" in broken[0].message
    assert "LD_LIBRARY_PATH" in broken[0].fix and "--oellm-backend torch" in broken[0].fix
    fatal = check_transformer_engine(make_report(versions={"transformer-engine": "2.20.2"},
                                                 transformer_engine_import_error=error,
                                                 megatron_core_import_error=error), {})
    assert severities(fatal) == ["error"]
    assert "megatron-core itself does not import" in fatal[0].message and "fall back" not in fatal[0].message
    assert "transformer-engine-cu12 transformer-engine-cu13" in fatal[0].fix and "--oellm-backend torch" not in fatal[0].fix


@pytest.mark.parametrize("error", ["ImportError('transformer_engine_torch.so: undefined symbol: oellm_doctor_test')",
                                   "OSError('libcudnn.so.9: cannot open shared object file: oellm_doctor_test')",
                                   "ModuleNotFoundError('No module named transformer_engine_torch: oellm_doctor_test')"])
def test_a_broken_transformer_engine_stops_megatron_core_and_the_doctor_says_so(tmp_path, monkeypatch, error):
    """A package named transformer_engine (with a version, as TE's) whose ``pytorch`` module raises as a broken
    install does: megatron-core 0.19.2 does not import next to it, and the report carries both errors."""
    package = tmp_path / "transformer_engine"
    (package / "pytorch").mkdir(parents=True)
    (package / "__init__.py").write_text("__version__ = '2.20.2'\n")
    (package / "pytorch" / "__init__.py").write_text(f"raise {error}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(tmp_path))
    report = collect_environment()
    assert "oellm_doctor_test" in report.transformer_engine_import_error
    assert "oellm_doctor_test" in report.megatron_core_import_error
    assert "megatron-core itself does not import" in check_transformer_engine(report, {})[0].message


# --- HybridEP, which the recipes' flex dispatcher uses ----------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "oellm"


@pytest.mark.parametrize(("deep_ep", "hybrid_ep", "reason"), [
    (None, None, "DeepEP (deep_ep) is not installed"),
    ("1.2.1", False, "deep_ep 1.2.1 has no HybridEPBuffer"),
    ("1.2.1", None, "could not be read"),
])
def test_hybrid_ep_missing_is_a_warning_naming_the_recipes_and_the_image(deep_ep, hybrid_ep, reason):
    """The recipes need HybridEP, an all-to-all or torch-backend run does not: a warning, never an exit status 1."""
    report = make_report(versions={"deep-ep": deep_ep}, hybrid_ep=hybrid_ep)
    findings = check_hybrid_ep(report, GOOD_ENV)
    assert [(f.severity, f.name) for f in findings] == [("warning", "hybrid-ep")]
    assert reason in findings[0].message and "moe-flex-dispatcher-backend hybridep" in findings[0].message
    assert all(f"examples/oellm/{base}" in findings[0].message for base in HYBRID_EP_RECIPE_BASES)
    assert "--target hybridep" in findings[0].fix and "alltoall" in findings[0].fix
    everything = check_environment(report, GOOD_ENV)
    assert [f.name for f in everything if f.severity != "ok"] == ["hybrid-ep"] and exit_status(everything) == 0


def test_hybrid_ep_present_is_ok():
    findings = check_hybrid_ep(make_report(versions={"deep-ep": "1.2.1+7febc6e"}, hybrid_ep=True), {})
    assert [(f.severity, f.name) for f in findings] == [("ok", "hybrid-ep")]
    assert "1.2.1+7febc6e" in findings[0].message


def _extends_chain(path: Path) -> list[str]:
    """File names of ``path``'s ``extends`` bases, nearest first."""
    chain = []
    while (base := tomllib.loads(path.read_text()).get("extends")) is not None:
        path = path.parent / base
        chain.append(path.name)
    return chain


def test_the_recipe_bases_the_hybrid_ep_warning_names_are_the_ones_that_use_it():
    """The warning's bases are exactly where examples/oellm/'s recipes get the flex dispatcher with HybridEP."""
    from megatron.oellm.recipes.toml_loading import load_recipe

    recipes = sorted(path for path in EXAMPLES.glob("*.toml") if not path.name.startswith("_"))
    assert recipes
    for path in recipes:
        flags = load_recipe(path).megatron_flags
        uses = (flags.get("moe-token-dispatcher-type"), flags.get("moe-flex-dispatcher-backend")) == ("flex", "hybridep")
        assert uses == bool(set(_extends_chain(path)) & set(HYBRID_EP_RECIPE_BASES)), path.name


def test_the_recipe_bases_the_flash_attention_warning_names_are_the_ones_that_use_it():
    """The warning's bases are exactly where examples/oellm/'s recipes get --attention-backend flash (a row of its
    own may choose another: the attention recipe's second row)."""
    from megatron.oellm.recipes.toml_loading import load_recipe

    for path in sorted(path for path in EXAMPLES.glob("*.toml") if not path.name.startswith("_")):
        uses = load_recipe(path).megatron_flags.get("attention-backend") == "flash"
        assert uses == bool(set(_extends_chain(path)) & set(FLASH_ATTENTION_RECIPE_BASES)), path.name


TE = {"transformer-engine": "2.20.2"}
PAST_TE_RANGE = "flash-attn 2.8.4 is installed, but TE takes flash-attn 2 only at versions >= 2.1.1 and < 2.8.4"


@pytest.mark.parametrize(("versions", "found", "gpu", "env", "reason"), [
    ({}, FlashAttentionFound(), H100, {}, "Transformer Engine finds no flash-attn it supports"),
    # installed, but TE does not take it up: the package alone is no flash attention
    ({"flash-attn": "2.8.4"}, FlashAttentionFound(rejected=(PAST_TE_RANGE,)), H100, {}, PAST_TE_RANGE),
    ({"flash-attn-3": "3.0.0b1"}, FlashAttentionFound({3: "3.0.0b1"}), H100, {"NVTE_FLASH_ATTN_V3": "0"},
     "flash-attn-3 3.0.0b1 is turned off by NVTE_FLASH_ATTN_V3=0"),
    ({"flash-attn-3": "3.0.0b1"}, FlashAttentionFound({3: "3.0.0b1"}), A100, {},
     "flash-attn-3 3.0.0b1 does not run on this sm80 GPU"),
    ({"flash-attn-3": "3.0.0b1"}, FlashAttentionFound({3: "3.0.0b1"}), B200, {}, "does not run on this sm100 GPU"),
])
def test_no_flash_attention_te_can_run_is_a_warning_naming_why_the_recipes_and_the_way_out(versions, found, gpu, env,
                                                                                           reason):
    """Transformer Engine with no flash attention it can run here (no flash-attn taken up, or each one pinned off or
    not for this GPU, as the training entry judges it): the MN5 rows' --attention-backend flash is refused at
    start, a warning (auto rows run)."""
    report = make_report(versions={**TE, **versions}, gpus=(gpu,), te_flash_attention=found,
                         grad_accum_fusion_available=True)
    findings = check_te_flash_attention(report, {**GOOD_ENV, **env})
    assert [(f.severity, f.name) for f in findings] == [("warning", "te-flash-attention")]
    assert reason in findings[0].message
    assert "--attention-backend flash are refused at start" in findings[0].message
    assert all(f"examples/oellm/{base}" in findings[0].message for base in FLASH_ATTENTION_RECIPE_BASES)
    assert 'attention-backend = "auto"' in findings[0].fix
    assert exit_status(check_environment(report, {**GOOD_ENV, **env})) == 0


@pytest.mark.parametrize(("found", "gpu", "env", "shown"), [
    (FlashAttentionFound({2: "2.7.4"}), A100, {}, "flash-attn 2.7.4"),
    (FlashAttentionFound({3: "3.0.0b1"}), H100, {}, "flash-attn-3 3.0.0b1"),
    (FlashAttentionFound({2: "2.7.4", 3: "3.0.0b1"}), H100, {}, "flash-attn 2.7.4, flash-attn-3 3.0.0b1"),
    (FlashAttentionFound({2: "2.7.4", 3: "3.0.0b1"}), B200, {}, "flash-attn 2.7.4"),  # flash-attn-3: sm90 only
    (FlashAttentionFound({2: "2.7.4", 3: "3.0.0b1"}), H100, {"NVTE_FLASH_ATTN_V3": "0"}, "flash-attn 2.7.4"),
])
def test_a_flash_attention_te_can_run_is_ok_naming_only_those_that_run(found, gpu, env, shown):
    """ok where one flash-attn TE took up runs on this GPU, naming those no GPU rule or pin drops; no finding
    without TE or where TE does not import."""
    report = make_report(versions=TE, gpus=(gpu,), te_flash_attention=found)
    findings = check_te_flash_attention(report, {**GOOD_ENV, **env})
    assert [(f.severity, f.name) for f in findings] == [("ok", "te-flash-attention")]
    assert f"runs {shown} here" in findings[0].message
    assert check_te_flash_attention(make_report(), GOOD_ENV) == []
    broken = make_report(versions=TE, transformer_engine_import_error="libcudnn")
    assert check_te_flash_attention(broken, GOOD_ENV) == []


def test_an_unread_flash_attention_probe_is_a_warning_saying_why():
    report = make_report(versions=TE, te_flash_attention_error="ModuleNotFoundError: oellm_doctor_test")
    (finding,) = check_te_flash_attention(report, GOOD_ENV)
    assert finding.severity == "warning" and "could not be read (ModuleNotFoundError: oellm_doctor_test)" in (
        finding.message)


def test_a_probe_whose_last_line_is_not_its_report_is_a_reason_not_a_crash(monkeypatch):
    """Something printed after the probe's JSON line (a library's banner on stdout) is read as a failed probe."""
    done = type("Done", (), {"returncode": 0, "stdout": '{"accepted": {}, "rejected": []}\nbanner\n', "stderr": ""})
    monkeypatch.setattr(doctor_probes.subprocess, "run", lambda *args, **kwargs: done())
    found, error = doctor_probes._te_flash_attention_in_subprocess()
    assert found is None and error == "the probe's last line is not its report: 'banner'"


TE_IMPORTS = transformer_engine_import_error() is None


@pytest.mark.skipif(not TE_IMPORTS, reason="needs Transformer Engine")
def test_the_doctor_reads_what_te_took_up_as_the_entry_does():
    """The fresh interpreter's reading is the training entry's (``te_flash_attention_found``) on this machine."""
    assert doctor_probes._te_flash_attention_in_subprocess() == (te_flash_attention_found(), None)


@pytest.mark.skipif(not TE_IMPORTS, reason="needs Transformer Engine")
@pytest.mark.parametrize("version", ["2.8.4", "2.0.4"])
def test_a_flash_attn_outside_transformer_engines_range_is_a_warning(tmp_path, monkeypatch, version):
    """A flash-attn distribution TE 2.20.2 finds but does not take up (2.8.4 past its range, 2.0.4 below it), read
    through TE's own import-time detection: the old rule said ok as soon as any flash-attn was installed."""
    info = tmp_path / f"flash_attn-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flash-attn\nVersion: {version}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    found, error = doctor_probes._te_flash_attention_in_subprocess()
    assert error is None and found.accepted == {}
    report = make_report(versions={**TE, "flash-attn": version}, te_flash_attention=found)
    (finding,) = check_te_flash_attention(report, GOOD_ENV)
    assert finding.severity == "warning" and f"flash-attn {version} is installed, but TE takes" in finding.message


@pytest.mark.parametrize(("env", "severity", "shown"), [
    ({}, "ok", "no NVTE attention switch is preset"),
    ({"NVTE_FLASH_ATTN": "1"}, "ok", "agrees with what megatron-core sets for --attention-backend auto and flash"),
    ({"NVTE_FLASH_ATTN_V3": "0"}, "ok", "agrees"),
    ({"NVTE_FUSED_ATTN": "0"}, "warning", "runs start with --attention-backend local / flash / unfused only ("),
    ({"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "1"}, "warning", "runs start with --attention-backend fused only ("),
    ({"NVTE_FLASH_ATTN_V2": "1"}, "warning", "only, and --flash-attention-version unset or 2 ("),
    ({"NVTE_FLASH_ATTN_V2": "1", "NVTE_FLASH_ATTN_V3": "1"}, "warning", "and --flash-attention-version unset ("),
    ({"NVTE_UNFUSED_ATTN": "yes"}, "warning", "so no run starts, whatever its --attention-backend (the training"),
    # auto sets (1, 1, 1) and agrees, flash sets NVTE_FUSED_ATTN / NVTE_UNFUSED_ATTN to 0 and asserts: the MN5
    # recipes' flash rows are refused, so no ok line
    ({"NVTE_FUSED_ATTN": "1"}, "warning", "runs start with --attention-backend fused / auto only ("),
    ({"NVTE_UNFUSED_ATTN": "1"}, "warning", "runs start with --attention-backend unfused / auto only ("),
])
def test_preset_attention_switches_name_the_settings_megatron_still_starts_with(env, severity, shown):
    """megatron-core asserts a preset NVTE attention switch agrees with what it sets; the doctor says which
    --attention-backend / --flash-attention-version still start (a warning where auto or flash does not)."""
    (finding,) = check_attention_switches(make_report(), {**GOOD_ENV, **env})
    assert (finding.severity, finding.name) == (severity, "attention-switches")
    assert shown in finding.message
    if severity == "warning":
        assert finding.fix.startswith(f"unset {' '.join(env)}")
        assert exit_status([finding]) == 0
