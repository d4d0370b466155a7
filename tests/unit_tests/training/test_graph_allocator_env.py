"""Transformer Engine's CUDA graphs with expandable segments that megatron-core's own allocator check misses.

megatron-core 0.19.2 refuses ``--cuda-graph-impl transformer_engine`` with ``expandable_segments:True`` in
``PYTORCH_CUDA_ALLOC_CONF`` unless ``NCCL_GRAPH_REGISTER=0``; the allocator settings torch 2.10 and later read from
``PYTORCH_ALLOC_CONF``, or written with a space, turn expandable segments on without that check seeing them.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest

from megatron.oellm.recipes.megatron_validation import megatron_refusal
from megatron.oellm.recipes.resolve import resolve_row
from megatron.oellm.recipes.toml_loading import load_recipe
from megatron.oellm.training.environment_refusal import EnvironmentRefusal
from megatron.oellm.training.graph_allocator_env import check_graph_allocator_env
from tests.unit_tests.training.entry_helpers import TINY_MOE_RUN, entry_on_a_cpu_node, one_error_line

RECIPES = sorted(p for p in (Path(__file__).parents[3] / "examples/oellm").glob("*.toml") if not p.name.startswith("_"))

OTHER_ITEMS = ["garbage_collection_threshold:0.8", "max_split_size_mb:512", "roundup_power2_divisions:[256:1,512:2]"]


def _graphs(impl: str = "transformer_engine") -> argparse.Namespace:
    return argparse.Namespace(cuda_graph_impl=impl)


def _expandable(spaced: bool = False) -> str:
    """An allocator setting turning expandable segments on, among a fresh choice of other items."""
    item = "expandable_segments: True" if spaced else "expandable_segments:True"
    items = [item, *random.sample(OTHER_ITEMS, random.randint(0, len(OTHER_ITEMS)))]
    random.shuffle(items)
    return ",".join(items)


def _register_not_zero() -> dict[str, str]:
    """No ``NCCL_GRAPH_REGISTER``, or one that is not ``0``."""
    return random.choice([{}, {"NCCL_GRAPH_REGISTER": random.choice(["1", "", "00", " 0"])}])


def test_the_device_generic_name_is_refused_without_graph_registration_off():
    """``PYTORCH_ALLOC_CONF`` alone, which torch 2.10 and later read: refused, naming the variable, its value and the
    fix; ``NCCL_GRAPH_REGISTER=0`` lets it through."""
    conf = _expandable()
    environ = {"PYTORCH_ALLOC_CONF": conf, **_register_not_zero()}
    with pytest.raises(EnvironmentRefusal) as refusal:
        check_graph_allocator_env(_graphs(), environ)
    assert f"PYTORCH_ALLOC_CONF={conf!r}" in str(refusal.value)
    assert "set NCCL_GRAPH_REGISTER=0 in the job's environment" in str(refusal.value)
    assert refusal.value.names == ("PYTORCH_ALLOC_CONF", "NCCL_GRAPH_REGISTER")
    check_graph_allocator_env(_graphs(), {**environ, "NCCL_GRAPH_REGISTER": "0"})


@pytest.mark.parametrize("spaced", ["expandable_segments: True", " expandable_segments :True ",
                                    "expandable_segments:Tr ue", "expandable_segments:\tTrue"])
def test_a_spaced_setting_megatron_core_does_not_match_is_refused(spaced):
    """Whitespace anywhere in ``PYTORCH_CUDA_ALLOC_CONF``'s setting: torch's tokenizer drops it, megatron-core's text
    match does not see the setting."""
    items = [spaced, *random.sample(OTHER_ITEMS, random.randint(0, 2))]
    random.shuffle(items)
    environ = {"PYTORCH_CUDA_ALLOC_CONF": ",".join(items), **_register_not_zero()}
    with pytest.raises(EnvironmentRefusal, match="PYTORCH_CUDA_ALLOC_CONF="):
        check_graph_allocator_env(_graphs(), environ)


@pytest.mark.parametrize("register", ["1", "", "00", " 0", "0 ", "\t0\n", "+0", "0.0"])
@pytest.mark.parametrize("variable", ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"])
def test_graph_registration_is_off_only_at_exactly_zero(variable, register):
    """``NCCL_GRAPH_REGISTER`` is read as megatron-core's own assertion reads it (``== "0"``): a padded or another
    spelling of zero is not the ``0`` it asks for, so it does not let expandable segments through. Each value in
    turn: the shared random draw (:func:`_register_not_zero`) reaches the padded ones in a few runs only."""
    environ = {variable: _expandable(spaced=random.random() < 0.5), "NCCL_GRAPH_REGISTER": register}
    with pytest.raises(EnvironmentRefusal, match=f"{variable}="):
        check_graph_allocator_env(_graphs(), environ)
    check_graph_allocator_env(_graphs(), {**environ, "NCCL_GRAPH_REGISTER": "0"})


@pytest.mark.parametrize("environ", [
    {"PYTORCH_CUDA_ALLOC_CONF": "", "PYTORCH_ALLOC_CONF": "expandable_segments:True"},  # torch reads the empty one
    {"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.8", "PYTORCH_ALLOC_CONF": "expandable_segments:True"},
    {"PYTORCH_ALLOC_CONF": "expandable_segments:False"},
    {"PYTORCH_ALLOC_CONF": "max_split_size_mb:512"},
    {},
], ids=["empty-cuda-name-first", "cuda-name-first", "off", "other-item", "unset"])
def test_settings_without_expandable_segments_pass(environ):
    """What torch reads turns expandable segments off: nothing for NCCL's graph registration to meet."""
    check_graph_allocator_env(_graphs(), {**environ, **_register_not_zero()})


@pytest.mark.parametrize("impl", ["none", "local", "full_iteration"])
def test_other_captures_are_not_asked(impl):
    """megatron-core asks ``NCCL_GRAPH_REGISTER=0`` of Transformer Engine's capture only."""
    check_graph_allocator_env(_graphs(impl), {"PYTORCH_ALLOC_CONF": _expandable()})


@pytest.mark.parametrize("version, refused", [("2.9.1", False), ("2.10.0", True), ("2.13.0+cpu", True)])
def test_this_process_is_judged_by_its_own_torch(monkeypatch, version, refused):
    """Without a given environment, this process's, as its torch reads it: torch 2.9 takes no expandable segments
    from ``PYTORCH_ALLOC_CONF``."""
    import torch

    monkeypatch.setattr(torch, "__version__", version)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("NCCL_GRAPH_REGISTER", raising=False)
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", _expandable())
    if refused:
        with pytest.raises(EnvironmentRefusal):
            check_graph_allocator_env(_graphs())
    else:
        check_graph_allocator_env(_graphs())


def _graph_row():
    """A shipped recipe (not one waiting for the CKDA layer) and one of its rows capturing Transformer Engine's CUDA
    graphs, resolved."""
    for path in RECIPES:
        recipe = load_recipe(path)
        if recipe.model.startswith("oellm-ckda-hybrid"):
            continue
        for row in recipe.rows:
            resolved = resolve_row(recipe, row)
            if "transformer_engine" in resolved.argv and "--cuda-graph-impl" in resolved.argv:
                return recipe, resolved
    raise AssertionError("no shipped recipe row captures Transformer Engine's CUDA graphs")


def test_a_recipe_exporting_the_device_generic_name_is_refused_before_submission():
    """The Jupiter sweep's CUDA-graph row with ``PYTORCH_ALLOC_CONF`` in its ``[cluster.env]`` instead of
    ``PYTORCH_CUDA_ALLOC_CONF`` and without ``NCCL_GRAPH_REGISTER=0``: megatron-core's validation passed it, the job
    would have met the illegal memory access."""
    recipe, resolved = _graph_row()
    env = {name: value for name, value in recipe.cluster.env.items()
           if name not in ("PYTORCH_CUDA_ALLOC_CONF", "NCCL_GRAPH_REGISTER")}
    assert megatron_refusal(resolved.argv, resolved.world_size, env) is None
    refusal = megatron_refusal(resolved.argv, resolved.world_size, {**env, "PYTORCH_ALLOC_CONF": _expandable()})
    assert refusal is not None and "need NCCL_GRAPH_REGISTER=0" in refusal, refusal
    assert megatron_refusal(resolved.argv, resolved.world_size,
                            {**env, "PYTORCH_ALLOC_CONF": _expandable(), "NCCL_GRAPH_REGISTER": "0"}) is None


def test_a_recipe_is_judged_with_the_shells_environment_the_job_inherits(monkeypatch):
    """The job inherits the submitting shell's environment (sbatch's default, the job script's ``srun
    --export=ALL``), which megatron's validation in the same check reads too: a shell's ``NCCL_GRAPH_REGISTER=0``
    lets the row through, a shell's ``PYTORCH_ALLOC_CONF`` turning expandable segments on is refused with the row,
    not at the job's start."""
    from megatron.oellm.commands.recipe import where_to_set

    recipe, resolved = _graph_row()
    env = {name: value for name, value in recipe.cluster.env.items()
           if name not in ("PYTORCH_CUDA_ALLOC_CONF", "NCCL_GRAPH_REGISTER")}
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", _expandable())
    monkeypatch.delenv("NCCL_GRAPH_REGISTER", raising=False)
    refusal = megatron_refusal(resolved.argv, resolved.world_size, env)
    assert refusal is not None and "need NCCL_GRAPH_REGISTER=0" in refusal, refusal
    assert where_to_set(refusal, recipe, resolved) == ""  # the fix is the environment's, not a flag's
    monkeypatch.setenv("NCCL_GRAPH_REGISTER", "0")
    assert megatron_refusal(resolved.argv, resolved.world_size, env) is None
    monkeypatch.delenv("PYTORCH_ALLOC_CONF")
    assert megatron_refusal(resolved.argv, resolved.world_size, {**env, "PYTORCH_ALLOC_CONF": _expandable()}) is None


def test_the_entry_off_a_gpu_node_names_this_shells_values(monkeypatch, capsys):
    """Refused on a login node from this shell's ``PYTORCH_ALLOC_CONF``, the line says the values are this shell's,
    not the job's."""
    entry = entry_on_a_cpu_node(monkeypatch)
    conf = "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", conf)
    assert entry.main([*TINY_MOE_RUN, "--cuda-graph-impl", "transformer_engine"]) == 2
    line = one_error_line(capsys)
    assert "need NCCL_GRAPH_REGISTER=0" in line, line
    assert f"the entry read PYTORCH_ALLOC_CONF={conf}, NCCL_GRAPH_REGISTER unset from this shell" in line, line
