"""``oellm doctor`` cases a mutation audit of ``megatron/oellm/doctor/`` found untested: each test pins a verdict or a
message a user acts on, which a plausible slip in the rule (a dropped branch, a wrong severity, a lost value) would
change without any other doctor test noticing."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import json
import os
import random
import string
import subprocess
import sys
from pathlib import Path

from megatron.oellm import MEGATRON_CORE_VERSION
from megatron.oellm.backends.te_flash_attention import FlashAttentionFound
from megatron.oellm.doctor import nccl as doctor_nccl
from megatron.oellm.doctor import probes as doctor_probes
from megatron.oellm.doctor.allocator import check_allocator_conf, parse_allocator_conf
from megatron.oellm.doctor.nccl import check_nccl_channels, check_nccl_variable_names
from megatron.oellm.doctor.probes import PACKAGE_PROBES, collect_environment
from megatron.oellm.doctor.report import UNKNOWN_VERSION, GpuInfo, NcclNames, exit_status, format_text
from megatron.oellm.doctor.rules import (
    check_environment,
    check_fla_hopper_triton,
    check_megatron_core,
    check_te_flash_attention,
)
from tests.unit_tests.doctor_reports import TORCH_REFUSES, make_report


def _word(rng: random.Random, length: int = 8) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(length))


def test_an_unreadable_megatron_core_version_is_not_taken_for_the_supported_release():
    """A ``megatron.core`` found without metadata (shown as ``unknown``) or with a version that is no PEP 440
    version cannot be shown to be the supported release: the doctor must say so as an error naming what it read,
    not pass it (an unparsable version compared as equal would let an arbitrary Megatron-LM checkout through)."""
    rng = random.Random(random.random())
    for installed in (UNKNOWN_VERSION, f"{_word(rng)}-{rng.randint(1, 99)}"):
        (finding,) = check_megatron_core(make_report(versions={"megatron-core": installed}), {})
        assert finding.severity == "error", installed
        assert f"megatron-core {installed} is installed" in finding.message
        assert finding.fix.startswith(f"pip install megatron-core=={MEGATRON_CORE_VERSION}; ")
        assert exit_status([finding]) == 1


def test_the_fla_error_names_the_hopper_gpu_and_the_triton_release():
    """On a node with several GPU models the fla issue 640 error names the Hopper GPU it is about (not the first GPU
    listed) and the installed Triton release, the two facts that make the run fail."""
    rng = random.Random(random.random())
    hopper = GpuInfo(1, f"NVIDIA H{rng.randint(100, 999)} {_word(rng, 4).upper()}", (9, 0), 80.0)
    other = GpuInfo(0, f"NVIDIA A{rng.randint(10, 99)}", (8, 0), 80.0)
    triton = f"3.{rng.randint(4, 6)}.{rng.randint(0, 9)}"
    (finding,) = check_fla_hopper_triton(make_report(versions={"triton": triton}, gpus=(other, hopper)), {})
    assert finding.severity == "error"
    assert f"on Hopper ({hopper.name}) with Triton {triton} " in finding.message and other.name not in finding.message


def test_the_flash_attention_fix_points_to_nvidias_containers_only_where_te_took_none_up():
    """Where Transformer Engine took up no flash-attn at all, the fix says NVIDIA's PyTorch containers bring one;
    where it took one up that cannot run here (pinned off, or not for this GPU), another container would not help and
    the fix does not say so."""
    te = {"transformer-engine": f"2.{random.randint(5, 20)}.{random.randint(0, 9)}"}
    (none,) = check_te_flash_attention(make_report(versions=te, te_flash_attention=FlashAttentionFound()), {})
    assert none.severity == "warning" and "(NVIDIA's PyTorch containers bring one)" in none.fix
    pinned = make_report(versions={**te, "flash-attn-3": "3.0.0b1"},
                         te_flash_attention=FlashAttentionFound({3: "3.0.0b1"}))
    (off,) = check_te_flash_attention(pinned, {"NVTE_FLASH_ATTN_V3": "0"})
    assert off.severity == "warning" and "NVIDIA's PyTorch containers" not in off.fix


# --- NCCL --------------------------------------------------------------------------------------------------------


def _nccl_names(rng: random.Random, library: str = "/site/nvidia/nccl/lib/libnccl.so.2") -> NcclNames:
    """The names of an nvidia-nccl wheel at ``library`` that reads none of the test's variables."""
    return NcclNames(library, f"2.{rng.randint(18, 40)}.{rng.randint(1, 9)}", frozenset(), frozenset())


def _unread_variable(rng: random.Random) -> str:
    return "NCCL_" + "_".join(_word(rng, rng.randint(2, 8)).upper() for _ in range(rng.randint(1, 3)))


def test_a_library_two_nccl_wheels_claim_has_no_version(tmp_path, monkeypatch):
    """Where two nvidia-nccl wheels (cu12 and cu13, say) both list the library torch loads, the last one installed
    wrote it and the doctor cannot tell which: the version is unknown (None), not one of the two picked at random,
    which would then be compared with torch's NCCL release to decide whether the names are checked at all. One
    owner gives its version."""
    rng = random.Random(random.random())
    library = tmp_path / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"\0")
    cu13, cu12 = rng.sample(range(18, 41), 2)
    versions = {"nvidia-nccl-cu13": f"2.{cu13}.{rng.randint(1, 9)}",
                "nvidia-nccl-cu12": f"2.{cu12}.{rng.randint(1, 9)}"}

    class Record:
        name = library.name

        def locate(self) -> Path:
            return library

    class Distribution:
        def __init__(self, version: str) -> None:
            self.version, self.files = version, [Record()]

    def distributions(owners):
        def distribution(name: str) -> Distribution:
            if name not in owners:
                raise importlib.metadata.PackageNotFoundError(name)
            return Distribution(versions[name])
        return distribution

    monkeypatch.setattr(importlib.metadata, "distribution", distributions(set(versions)))
    assert doctor_nccl._nccl_wheel_version(library) is None
    monkeypatch.setattr(importlib.metadata, "distribution", distributions({"nvidia-nccl-cu12"}))
    assert doctor_nccl._nccl_wheel_version(library) == versions["nvidia-nccl-cu12"]


def test_an_nccl_preloaded_among_space_separated_libraries_skips_the_name_check():
    """The loader takes ``LD_PRELOAD`` entries separated by spaces as well as colons: an NCCL preloaded first in a
    space-separated list runs instead of the wheel's, whose names then say nothing; the doctor must not warn that
    variables that NCCL may read are read by nothing."""
    rng = random.Random(random.random())
    names, variable = _nccl_names(rng), _unread_variable(rng)
    report = make_report(nccl_names=names, nccl_version=names.version)
    other = f"/opt/nccl-{rng.randint(1, 99)}/lib/libnccl.so.2"
    for preload in (f"{other} /usr/lib/libjemalloc.so", f"{other}  /usr/lib/libtcmalloc.so:/usr/lib/libz.so"):
        (finding,) = check_nccl_variable_names(report, {variable: str(rng.randint(1, 9)), "LD_PRELOAD": preload})
        assert finding.severity == "ok" and "LD_PRELOAD" in finding.message, preload


def test_preloading_the_wheels_own_nccl_through_another_path_keeps_the_name_check(tmp_path):
    """``LD_PRELOAD`` naming the nvidia-nccl wheel's own library through a symbolic link or a ``..`` path loads no
    other NCCL: the names are still checked and an unread variable is still a warning."""
    rng = random.Random(random.random())
    library = tmp_path / "site" / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    library.parent.mkdir(parents=True)
    library.write_bytes(bytes(rng.randrange(256) for _ in range(64)))
    link = tmp_path / "links" / "libnccl.so.2"
    link.parent.mkdir()
    link.symlink_to(library)
    names, variable = _nccl_names(rng, str(library)), _unread_variable(rng)
    report = make_report(nccl_names=names, nccl_version=names.version)
    for preload in (str(link), str(library.parent / ".." / "lib" / library.name)):
        (finding,) = check_nccl_variable_names(report, {variable: "1", "LD_PRELOAD": preload})
        assert finding.severity == "warning" and finding.message.startswith(f"{variable}='1' "), preload


def test_the_per_peer_variable_counts_as_read_only_where_nccl_itself_holds_the_name():
    """``NCCL_NCHANNELS_PER_PEER`` in torch's own ``libtorch_cuda.so`` (a log string, say) does not make NCCL read it:
    only the NCCL library holding the name turns the "no effect" warning into an ok line."""
    rng = random.Random(random.random())
    names = dataclasses.replace(_nccl_names(rng), torch=frozenset({"NCCL_NCHANNELS_PER_PEER"}))
    report = make_report(nccl_names=names, nccl_version=names.version)
    (finding,) = [f for f in check_nccl_channels(report, {"NCCL_NCHANNELS_PER_PEER": str(rng.randint(1, 64))})
                  if f.name == "NCCL_NCHANNELS_PER_PEER"]
    assert finding.severity == "warning" and "has no effect" in finding.message


def test_the_unread_per_peer_variable_warning_quotes_its_value():
    """The warning on ``NCCL_NCHANNELS_PER_PEER`` (read by no NCCL checked) quotes the value exported, so the user
    can carry the count over to ``NCCL_NCHANNELS_PER_NET_PEER``."""
    raw = str(random.randint(1, 64))
    (finding,) = [f for f in check_nccl_channels(make_report(), {"NCCL_NCHANNELS_PER_PEER": raw})
                  if f.name == "NCCL_NCHANNELS_PER_PEER"]
    assert finding.severity == "warning"
    assert finding.message.startswith(f"NCCL_NCHANNELS_PER_PEER={raw!r} has no effect")


def test_minus_one_is_no_automatic_count_for_a_minimum():
    """-1 leaves ``NCCL_NCHANNELS_PER_NET_PEER`` to NCCL (ok), but a minimum of -1 (``NCCL_MIN_NCHANNELS``,
    ``NCCL_MIN_P2P_NCHANNELS``) is taken as no minimum: a warning says so (a setting without effect, as an unread
    variable, so that a job gating on the doctor's exit status still runs), for -1 written in decimal or hex too."""
    for raw in ("-1", "-0x1", " -1 "):
        for variable in ("NCCL_MIN_NCHANNELS", "NCCL_MIN_P2P_NCHANNELS"):
            (finding,) = [f for f in check_nccl_channels(make_report(), {variable: raw}) if f.name == variable]
            assert finding.severity == "warning", (variable, raw)
            assert f"{variable}={raw!r} is a negative minimum, which NCCL takes as no minimum" in finding.message
        (finding,) = [f for f in check_nccl_channels(make_report(), {"NCCL_NCHANNELS_PER_NET_PEER": raw})
                      if f.name == "NCCL_NCHANNELS_PER_NET_PEER"]
        assert finding.severity == "ok" and "leaves the count to NCCL" in finding.message, raw


def test_a_wheel_of_unknown_version_is_still_checked_against_torchs_nccl():
    """Where no single nvidia-nccl distribution owns the library found (its version unknown), the doctor cannot
    tell it from torch's NCCL by release, so it checks the names (naming the library instead of a version) rather
    than crash comparing a missing version or skip the check."""
    rng = random.Random(random.random())
    names, variable = dataclasses.replace(_nccl_names(rng), version=None), _unread_variable(rng)
    report = make_report(nccl_names=names, nccl_version=f"2.{rng.randint(18, 40)}.{rng.randint(1, 9)}")
    (finding,) = check_nccl_variable_names(report, {variable: "1"})
    assert finding.severity == "warning"
    assert finding.message.startswith(f"{variable}='1' is read by neither the NCCL of {names.library} nor PyTorch")
    channels = check_nccl_channels(report, {"NCCL_NCHANNELS_PER_PEER": str(rng.randint(1, 64))})
    assert [f.severity for f in channels if f.name == "NCCL_NCHANNELS_PER_PEER"] == ["warning"]


# --- allocator configuration -----------------------------------------------------------------------------------


def test_a_configuration_without_expandable_segments_is_quoted_in_the_warning():
    """The warning on an allocator configuration that leaves expandable segments off quotes the variable and the
    value torch reads, so a user sees which export (of several in a job script) to correct, and the fix keeps the
    options already there."""
    rng = random.Random(random.random())
    split, threshold = rng.randint(20, 8192), f"{rng.uniform(0.05, 0.95):.3f}"
    value = f"max_split_size_mb:{split},garbage_collection_threshold:{threshold}"
    for variable, torch_version in (("PYTORCH_CUDA_ALLOC_CONF", "2.9.0"), ("PYTORCH_ALLOC_CONF", "2.10.0")):
        (finding,) = check_allocator_conf(make_report(versions={"torch": torch_version}), {variable: value})
        assert finding.severity == "warning"
        assert finding.message.startswith(f"{variable}={value!r} lacks expandable_segments:True")
        suggested = finding.fix.split(f"export {variable}=")[1]
        assert parse_allocator_conf(suggested) == {"max_split_size_mb": str(split),
                                                   "garbage_collection_threshold": threshold,
                                                   "expandable_segments": "True"}




def test_spaces_around_allocator_items_and_values_are_no_error():
    """torch's allocator-settings tokenizer skips spaces, so ``max_split_size_mb: 512 , expandable_segments: True``
    and a trailing ``, `` are taken: the doctor must not call them an error (which would send a user to rewrite a
    working job script), and reads expandable segments as on. The installed torch's own parser (fresh interpreter)
    is asked too, where it has one."""
    split = random.randint(20, 8192)
    values = [f"max_split_size_mb: {split} , expandable_segments: True", "expandable_segments:True, ",
              f" expandable_segments:True ,max_split_size_mb:{split},  "]
    for value in values:
        (finding,) = check_allocator_conf(make_report(versions={"torch": "2.10.0"}), {"PYTORCH_CUDA_ALLOC_CONF": value})
        assert (finding.severity, finding.message) == ("ok", "PYTORCH_CUDA_ALLOC_CONF enables expandable segments."), \
            value
    done = subprocess.run([sys.executable, "-c", TORCH_REFUSES, *values], capture_output=True, text=True, timeout=120,
                          check=False)
    if done.returncode != 3:
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1]) == dict.fromkeys(values, False)


def test_an_ignored_pytorch_alloc_conf_beside_a_good_one_says_where_its_options_go():
    """On a torch that reads PYTORCH_CUDA_ALLOC_CONF first, a PYTORCH_ALLOC_CONF beside one that enables expandable
    segments is lost: the warning quotes the lost value and the fix says to move its options into the variable torch
    reads (unsetting it alone would silently drop them)."""
    threshold = f"{random.uniform(0.05, 0.95):.3f}"
    lost = f"garbage_collection_threshold:{threshold}"
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTORCH_ALLOC_CONF": lost}
    (finding,) = check_allocator_conf(make_report(versions={"torch": f"2.{random.randint(10, 13)}.0"}), env)
    assert finding.severity == "warning"
    assert f"PYTORCH_ALLOC_CONF={lost!r} is ignored" in finding.message
    assert finding.fix == "move the options you need into PYTORCH_CUDA_ALLOC_CONF and unset PYTORCH_ALLOC_CONF"


# --- rendering ---------------------------------------------------------------------------------------------------


def test_the_text_report_says_when_torch_sees_no_gpu():
    """Run on a login node, the text report's GPU section says that torch sees none instead of staying empty (an
    empty section reads like a truncated report)."""
    report = make_report(gpus=(), cuda_version=f"12.{random.randint(0, 9)}")
    text = format_text(report, check_environment(report, {}))
    assert "GPUs\n  none seen by torch\n\nFindings" in text


# --- probes ------------------------------------------------------------------------------------------------------


def test_triton_shipped_as_pytorch_triton_is_read_by_its_version(monkeypatch):
    """PyTorch's nightly and ROCm wheels bring Triton as the ``pytorch-triton`` distribution: its version must be
    read (not ``unknown`` from the module alone), or the fla issue 640 rule cannot tell an affected Triton on Hopper
    and gives a "cannot parse" warning instead of the error."""
    rng = random.Random(random.random())
    version = f"3.{rng.randint(4, 6)}.{rng.randint(0, 9)}+git{_word(rng, 8)}"
    real = importlib.metadata.version

    def only_pytorch_triton(name: str) -> str:
        if name == "pytorch-triton":
            return version
        if name == "triton":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", only_pytorch_triton)
    (probe,) = [probe for probe in PACKAGE_PROBES if probe.name == "triton"]
    assert doctor_probes.distribution_version(probe) == version
    (finding,) = check_fla_hopper_triton(make_report(versions={"triton": version}), {})
    assert finding.severity == "error" and f"Triton {version}" in finding.message


def test_a_deep_ep_that_only_mentions_hybrid_ep_has_no_hybrid_ep_buffer(tmp_path, monkeypatch):
    """DeepEP's main branch may name HybridEP in a comment or another class without exporting ``HybridEPBuffer``
    (what megatron-core imports): that is no HybridEP, so the doctor must warn rather than say the recipes' hybridep
    dispatcher can run."""
    package = tmp_path / "deep_ep"
    package.mkdir()
    other = f"HybridEP{_word(random.Random(random.random()), 6).capitalize()}"
    (package / "__init__.py").write_text(f"# {other}: HybridEP is on the hybrid-ep branch\n"
                                         "from .buffer import Buffer\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert doctor_probes.deep_ep_declares_hybrid_ep() is False
    (package / "__init__.py").write_text("from .buffer import Buffer\nfrom .hybrid_ep_buffer import HybridEPBuffer\n")
    assert doctor_probes.deep_ep_declares_hybrid_ep() is True


def test_a_tilelang_that_does_not_import_is_found_by_the_probe(tmp_path, monkeypatch):
    """fla only checks that tilelang can be found, then crashes importing it: ``collect_environment`` must import it
    in a fresh interpreter and carry the error, so the fla issue 640 rule reports an error naming it instead of
    saying fla uses its TileLang backward."""
    marker = f"oellm_doctor_audit_{_word(random.Random(random.random()))}"
    (tmp_path / "tilelang").mkdir()
    (tmp_path / "tilelang" / "__init__.py").write_text(
        f"raise OSError('libz3.so.4.15: cannot open shared object file: {marker}')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    report = collect_environment({})
    assert report.tilelang_importable and marker in (report.tilelang_import_error or "")
    hopper = make_report(versions={"triton": "3.5.0", "tilelang": UNKNOWN_VERSION},
                         nvcc_path="/usr/local/cuda/bin/nvcc", tilelang_importable=True,
                         tilelang_import_error=report.tilelang_import_error)
    (finding,) = check_fla_hopper_triton(hopper, {})
    assert finding.severity == "error" and marker in finding.message


def test_a_flash_attention_probe_that_prints_nothing_says_so(monkeypatch):
    """A probe that exits 0 without printing its report (a stray ``sys.exit(0)`` in a site hook) is a reason the doctor
    names in its warning, not a silent "not probed"."""
    monkeypatch.setattr(doctor_probes, "_run_in_fresh_interpreter", lambda *args, **kwargs: ("\n", None))
    found, why = doctor_probes._te_flash_attention_in_subprocess()
    assert found is None and why is not None and "exited with status 0" in why
