"""``oellm doctor``'s allocator rule judges the variable the installed torch's CUDA allocator reads: torch before 2.10
reads only PYTORCH_CUDA_ALLOC_CONF, later ones PYTORCH_CUDA_ALLOC_CONF first and PYTORCH_ALLOC_CONF only without it."""

from __future__ import annotations

import importlib.metadata
import json
import os
import random
import subprocess
import sys

import pytest

from megatron.oellm.doctor.allocator import allocator_conf, check_allocator_conf, parse_allocator_conf
from tests.unit_tests.doctor_reports import make_report

OLD_TORCH = ["2.4.1", "2.7.0+cu126", "2.8.0", "2.9.0", "2.9.1+cu128"]
NEW_TORCH = ["2.10.0", "2.10.0a0+b4e4ee81d3.nv25.12", "2.11.0+cu130", "2.13.0+cpu"]


@pytest.mark.parametrize("torch_version", OLD_TORCH)
def test_old_torch_ignores_pytorch_alloc_conf_and_the_fix_names_the_variable_it_reads(torch_version):
    split = random.choice([64, 128, 256, 512, 1024])
    env = {"PYTORCH_ALLOC_CONF": f"max_split_size_mb:{split},expandable_segments:True"}
    findings = check_allocator_conf(make_report(versions={"torch": torch_version}), env)
    assert [f.severity for f in findings] == ["warning"]
    assert "ignored" in findings[0].message and torch_version in findings[0].message
    assert findings[0].fix.startswith("export PYTORCH_CUDA_ALLOC_CONF=")
    suggested = findings[0].fix.split("export PYTORCH_CUDA_ALLOC_CONF=")[1]
    assert parse_allocator_conf(suggested) == {"max_split_size_mb": str(split), "expandable_segments": "True"}


@pytest.mark.parametrize(("torch_version", "variable"),
                         [*((v, "PYTORCH_CUDA_ALLOC_CONF") for v in OLD_TORCH),
                          *((v, "PYTORCH_ALLOC_CONF") for v in NEW_TORCH)])
def test_nothing_set_suggests_a_variable_the_installed_torch_reads(torch_version, variable):
    findings = check_allocator_conf(make_report(versions={"torch": torch_version}), {})
    assert [f.severity for f in findings] == ["warning"]
    assert findings[0].fix == f"export {variable}=expandable_segments:True"


@pytest.mark.parametrize("torch_version", NEW_TORCH)
def test_pytorch_cuda_alloc_conf_shadows_pytorch_alloc_conf(torch_version):
    split = random.choice([64, 128, 256, 512, 1024])
    env = {"PYTORCH_CUDA_ALLOC_CONF": f"max_split_size_mb:{split}", "PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    findings = check_allocator_conf(make_report(versions={"torch": torch_version}), env)
    assert [f.severity for f in findings] == ["warning"]
    assert "PYTORCH_ALLOC_CONF='expandable_segments:True' is ignored" in findings[0].message
    suggested = findings[0].fix.split("export PYTORCH_CUDA_ALLOC_CONF=")[1]
    assert parse_allocator_conf(suggested) == {"max_split_size_mb": str(split), "expandable_segments": "True"}


TORCH_SETTINGS = "import torch; print(torch._C._accelerator_getAllocatorSettings())"


def test_allocator_conf_picks_the_variable_this_torch_reads():
    """The installed torch, in a fresh interpreter, with both variables set to different valid values: the
    settings it parsed are those of the variable :func:`allocator_conf` names, and an empty PYTORCH_CUDA_ALLOC_CONF
    still shadows PYTORCH_ALLOC_CONF."""
    torch_version = importlib.metadata.version("torch")
    a, b = random.sample([64, 128, 256, 512, 1024, 2048], 2)
    for cuda_value in (f"max_split_size_mb:{a}", ""):
        env = {"PYTORCH_CUDA_ALLOC_CONF": cuda_value, "PYTORCH_ALLOC_CONF": f"max_split_size_mb:{b}"}
        done = subprocess.run([sys.executable, "-c", TORCH_SETTINGS], capture_output=True, text=True, timeout=120,
                              check=False, env={**os.environ, **env})
        if "_accelerator_getAllocatorSettings" in done.stderr:
            pytest.skip("this torch has no _accelerator_getAllocatorSettings")
        assert done.returncode == 0, done.stderr
        parsed = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        variable, value = allocator_conf(env, torch_version)
        assert value == parsed, json.dumps({"torch": torch_version, "named": variable, "parsed": parsed})


@pytest.mark.parametrize("torch_version", [None, "unknown"])
def test_an_unknown_torch_version_is_not_named_as_a_release(torch_version):
    """Without a readable torch version the rule judges as for an old torch (PYTORCH_CUDA_ALLOC_CONF alone, read by
    every release), but its message said "the CUDA allocator of torch None reads only PYTORCH_CUDA_ALLOC_CONF": a
    release that does not exist, and a certainty the doctor does not have."""
    split = random.choice([64, 128, 256, 512, 1024])
    env = {"PYTORCH_ALLOC_CONF": f"max_split_size_mb:{split},expandable_segments:True"}
    findings = check_allocator_conf(make_report(versions={"torch": torch_version}), env)
    assert [f.severity for f in findings] == ["warning"]
    assert f"torch {torch_version}" not in findings[0].message
    assert "version unknown" in findings[0].message and "older than 2.10" in findings[0].message
    suggested = findings[0].fix.split("export PYTORCH_CUDA_ALLOC_CONF=")[1]
    assert parse_allocator_conf(suggested) == {"max_split_size_mb": str(split), "expandable_segments": "True"}


@pytest.mark.parametrize("torch_version", [*OLD_TORCH[-1:], *NEW_TORCH[:1]])
def test_the_fix_for_an_item_torch_refuses_drops_that_item_and_keeps_the_others(torch_version):
    """The error on an item the installed torch's parser refuses (a garbage_collection_threshold above 1, a
    max_split_size_mb that is no number) suggests the same configuration without that item and with expandable
    segments: following the fix must not export the refused item again. Fresh random values, items in random
    order."""
    rng = random.Random(random.random())
    keep = f"roundup_power2_divisions:{2 ** rng.randint(1, 6)}"
    refused = rng.choice([f"garbage_collection_threshold:{rng.uniform(1.01, 5):.3f}",
                          f"max_split_size_mb:{rng.choice(['abc', 'x12', 'mb'])}"])
    items = rng.sample([keep, refused, "expandable_segments:True"], 3)
    value = ",".join(items)
    report = make_report(versions={"torch": torch_version}, allocator_refusal=(refused, "ValueError: refused"))
    (finding,) = check_allocator_conf(report, {"PYTORCH_CUDA_ALLOC_CONF": value})
    assert finding.severity == "error" and repr(refused) in finding.message
    suggested = finding.fix.split("export PYTORCH_CUDA_ALLOC_CONF=")[1]
    key, _, option = keep.partition(":")
    assert parse_allocator_conf(suggested) == {key: option, "expandable_segments": "True"}, finding.fix


@pytest.mark.parametrize("torch_version", NEW_TORCH)
def test_the_cuda_malloc_async_backend_is_not_asked_for_expandable_segments(torch_version):
    """backend:cudaMallocAsync replaces the caching allocator, the only one with expandable segments: ok, no fix
    adding them (it warned that they were missing and suggested adding them)."""
    variable = random.choice(["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"])
    items = [f"backend:{random.choice(['cudaMallocAsync', 'hipMallocAsync'])}", *random.sample(["expandable_segments:True", "expandable_segments:False"],
                                                       k=random.randint(0, 1))]
    random.shuffle(items)
    (finding,) = check_allocator_conf(make_report(versions={"torch": torch_version}), {variable: ",".join(items)})
    assert finding.severity == "ok" and finding.fix is None, finding
    assert "MallocAsync" in finding.message and "do not apply" in finding.message


@pytest.mark.parametrize("torch_version", NEW_TORCH)
def test_an_ignored_alloc_conf_beside_the_async_backend_is_still_named(torch_version):
    """With backend:cudaMallocAsync in PYTORCH_CUDA_ALLOC_CONF, a PYTORCH_ALLOC_CONF torch ignores is still a
    warning naming it, not an ok."""
    env = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
           "PYTORCH_ALLOC_CONF": f"max_split_size_mb:{random.randint(64, 512)}"}
    (finding,) = check_allocator_conf(make_report(versions={"torch": torch_version}), env)
    assert finding.severity == "warning" and f"PYTORCH_ALLOC_CONF={env['PYTORCH_ALLOC_CONF']!r} is ignored" in (
        finding.message), finding
    assert "unset PYTORCH_ALLOC_CONF" in finding.fix
