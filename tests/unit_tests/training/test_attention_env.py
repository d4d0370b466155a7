"""TE's attention switches preset in the environment: the entry's check against megatron-core's own
``LanguageModule._set_attention_backend`` (run here on a stand-in model, CPU), and the refusal before init."""

from __future__ import annotations

import random
import types

import pytest
from megatron.core.models.common.language_module.language_module import LanguageModule
from megatron.core.transformer.enums import AttnBackend

from megatron.oellm.training.attention_env import FLASH_GENERATIONS, SWITCHES, VERSION_PINS, attention_env_conflicts
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain

VARIABLES = (*SWITCHES, *VERSION_PINS)


def megatron_accepts(monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], backend: AttnBackend,
                     version: int | None) -> bool:
    """Whether megatron-core's ``_set_attention_backend`` passes with ``environ`` preset. megatron-core writes the
    variables into ``os.environ`` itself: each is set through ``monkeypatch`` first, so that pytest restores it."""
    for name in VARIABLES:
        monkeypatch.setenv(name, "recorded")
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    model = types.SimpleNamespace(config=types.SimpleNamespace(attention_backend=backend,
                                                               flash_attention_version=version))
    try:
        LanguageModule._set_attention_backend(model)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("draw", range(40))
def test_the_conflicts_are_those_megatron_asserts_on(draw: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random presets of the six variables (unset, 0, 1, or a word) against every backend and version pin."""
    rng = random.Random(random.random())
    backend = rng.choice(list(AttnBackend))
    version = rng.choice([None, *FLASH_GENERATIONS])
    environ = {name: rng.choice(["0", "1", "true"]) for name in VARIABLES if rng.random() < 0.4}
    conflicts = attention_env_conflicts(environ, backend.name, version)
    assert (not conflicts) == megatron_accepts(monkeypatch, environ, backend, version), (environ, backend, version)


def test_megatrons_own_values_and_unset_variables_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    for backend in AttnBackend:
        assert attention_env_conflicts({}, backend.name, None) == {}
        assert megatron_accepts(monkeypatch, {}, backend, None)
    preset = {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0", "NVTE_FLASH_ATTN_V2": "0"}
    assert attention_env_conflicts(preset, "flash", 3) == {}
    assert set(attention_env_conflicts(preset, "auto", 2)) == {"NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN"}


def test_the_entry_refuses_a_conflict_before_it_starts_anything(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """One error line naming each variable, what megatron sets and the way out; without the variable it goes on."""
    entry = entry_up_to_pretrain(monkeypatch)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data",
            "--seq-length", "64"]
    for name in VARIABLES:
        monkeypatch.setenv(name, "recorded")  # restored after the test, whatever the entry's run writes
        monkeypatch.delenv(name)
    monkeypatch.setenv("NVTE_FUSED_ATTN", "0")
    monkeypatch.setenv("NVTE_FLASH_ATTN_V3", "1")
    assert entry.main([*argv, "--flash-attention-version", "2"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "NVTE_FUSED_ATTN='0' (megatron-core sets 1), NVTE_FLASH_ATTN_V3='1' (megatron-core sets 0)" in line
    assert "for --attention-backend auto and --flash-attention-version 2 when it builds" in line
    assert "unset NVTE_FUSED_ATTN NVTE_FLASH_ATTN_V3" in line
    assert "from this shell" not in line, line  # a GPU node's environment is the job's
    monkeypatch.delenv("NVTE_FUSED_ATTN")
    monkeypatch.delenv("NVTE_FLASH_ATTN_V3")
    with pytest.raises(Reached):
        entry.main(argv)


@pytest.mark.parametrize("generation", [2, 3, 4])
def test_each_flash_generation_megatron_pins_is_checked(generation: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """megatron-core 0.19.2 sets NVTE_FLASH_ATTN_V2, _V3 and _V4 (its literal ``for version in (2, 3, 4)``) to 0 for
    each generation other than --flash-attention-version: a preset 1 on any of them is a conflict."""
    version = random.choice([other for other in (2, 3, 4) if other != generation])
    environ = {f"NVTE_FLASH_ATTN_V{generation}": "1"}
    backend = random.choice(list(AttnBackend))
    assert not megatron_accepts(monkeypatch, environ, backend, version)
    assert attention_env_conflicts(environ, backend.name, version) == {f"NVTE_FLASH_ATTN_V{generation}": ("1", "0")}
