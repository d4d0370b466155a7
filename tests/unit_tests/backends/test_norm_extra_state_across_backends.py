"""Distributed checkpoints move between the torch-native and the Transformer Engine backend under megatron's default
``--dist-ckpt-strictness assume_ok_unexpected`` (CPU, gloo, world of one).

Transformer Engine's RMSNorm (``te.pytorch.RMSNorm``, a fusible basic operation) has an ``_extra_state``: an empty
uint8 tensor without FP8. megatron-core turns it into a checkpoint object of every norm (final, pre-MLP, q/k, GDN
output norm), so a TE model asks for those keys when it loads. The TE model is stood in for by the torch-native
provider with its norms replaced by one that has TE's extra state and nothing else of ours (Transformer Engine does
not import here). A checkpoint saved before the torch-native norms carried that state is made by dropping their
entries: the loader's own answer to it is the rule the training entry applies
(:func:`megatron.oellm.training.load_checks.check_norm_extra_state`).
"""

from pathlib import Path
from typing import Any

import pytest
import torch
from megatron.core import dist_checkpointing
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.oellm.backends.torch_native import TorchNativeSpecProvider
from megatron.oellm.backends.torch_native.norms import RMSNorm
from megatron.oellm.cards import get_card
from megatron.oellm.models import spec_builder
from megatron.oellm.training.load_checks import CONVERTED_LOAD_STRICTNESS, NORM_EXTRA_STATE_SUFFIX
from tests.unit_tests.cpu_megatron import cpu_checkpoint_saving, cpu_model_building

CARDS = ("qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny")
DEFAULT_STRICTNESS = "assume_ok_unexpected"


class TENormStandIn(torch.nn.Module):
    """What megatron-core's checkpointing sees of Transformer Engine's RMSNorm: a ``weight`` and an ``_extra_state``
    that is an empty uint8 tensor, whatever is loaded into it."""

    def __init__(self, config: TransformerConfig, hidden_size: int, eps: float = 1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, dtype=config.params_dtype))

    def get_extra_state(self) -> torch.Tensor:
        return torch.empty(0, dtype=torch.uint8)

    def set_extra_state(self, state: Any) -> None:
        pass


class TEStandInProvider(TorchNativeSpecProvider):
    """The torch-native provider with Transformer Engine's norms (:class:`TENormStandIn`) in every norm slot."""

    def layer_norm(self, rms_norm: bool = False, for_qk: bool = False, has_residual: bool = False) -> type:
        return TENormStandIn


@pytest.fixture
def cpu_checkpoints() -> None:
    """megatron-core's model building and checkpoint writer on the CPU (see cpu_megatron)."""
    with cpu_model_building(), cpu_checkpoint_saving():
        yield


def random_model(name: str, backend: str | TorchNativeSpecProvider) -> torch.nn.Module:
    """Card ``name``'s model built with ``backend``, fp32 on the CPU, every parameter fresh random."""
    card = get_card(name)
    builder = spec_builder(card.family)
    config = builder.transformer_config(card, params_dtype=torch.float32, use_cpu_initialization=True,
                                        perform_initialization=False, moe_token_dispatcher_type="allgather")
    model = builder.build_model(card, backend=backend, config=config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_()
    return model


def norm_extra_state_keys(model: torch.nn.Module) -> set[str]:
    """The checkpoint keys of the norms' extra state ``model`` asks for."""
    return {entry.key for entry in model.sharded_state_dict().values()
            if getattr(entry, "key", "").endswith(NORM_EXTRA_STATE_SUFFIX)}


def save_and_load(source: torch.nn.Module, target: torch.nn.Module, directory: Path, strictness: str,
                  drop_norm_extra_state: bool = False) -> None:
    """Save ``source`` with megatron-core's writer (without its norms' extra state if ``drop_norm_extra_state``:
    what the torch-native backend saved before it had one), load it into ``target`` under ``strictness`` and check
    that every parameter of ``target`` holds ``source``'s values."""
    saved = source.sharded_state_dict()
    if drop_norm_extra_state:
        saved = {name: entry for name, entry in saved.items()
                 if not getattr(entry, "key", "").endswith(NORM_EXTRA_STATE_SUFFIX)}
    directory.mkdir(exist_ok=True)
    dist_checkpointing.save(saved, str(directory))
    loaded = dist_checkpointing.load(target.sharded_state_dict(), str(directory), strict=strictness)
    target.load_state_dict(loaded, strict=False)
    expected = dict(source.named_parameters())
    for name, parameter in target.named_parameters():
        torch.testing.assert_close(parameter.detach(), expected[name].detach(), rtol=0, atol=0, msg=name)


def test_the_torch_native_norm_has_te_extra_state(world_of_one) -> None:
    """An empty uint8 tensor, as Transformer Engine's RMSNorm gives without FP8; whatever is loaded is ignored."""
    config = TransformerConfig(num_layers=1, hidden_size=16, num_attention_heads=4, normalization="RMSNorm",
                               use_cpu_initialization=True)
    norm = RMSNorm(config, 16)
    state = norm.state_dict()
    assert sorted(state) == ["_extra_state", "weight"]
    assert state["_extra_state"].dtype == torch.uint8 and state["_extra_state"].numel() == 0
    weight = torch.randn(16)
    norm.load_state_dict({"weight": weight, "_extra_state": torch.randint(0, 255, (7,), dtype=torch.uint8)})
    torch.testing.assert_close(norm.weight.detach(), weight, rtol=0, atol=0)


@pytest.mark.parametrize("name", CARDS)
def test_both_backends_ask_for_the_same_norm_extra_state(world_of_one, cpu_checkpoints, name: str) -> None:
    torch_keys = norm_extra_state_keys(random_model(name, "torch"))
    assert torch_keys and torch_keys == norm_extra_state_keys(random_model(name, TEStandInProvider()))


@pytest.mark.parametrize("name", CARDS)
def test_a_torch_native_checkpoint_loads_into_the_te_model(world_of_one, cpu_checkpoints, tmp_path: Path,
                                                           name: str) -> None:
    save_and_load(random_model(name, "torch"), random_model(name, TEStandInProvider()), tmp_path, DEFAULT_STRICTNESS)


@pytest.mark.parametrize("name", CARDS)
def test_a_te_checkpoint_loads_into_the_torch_native_model(world_of_one, cpu_checkpoints, tmp_path: Path,
                                                           name: str) -> None:
    """Guards the direction opposite to the fixed bug: the torch-native model asks for no key a Transformer Engine
    checkpoint lacks, so it loads under the default strictness. It would not fail if the torch-native norms lost
    their ``_extra_state`` again (a checkpoint holding keys the model does not ask for loads); the tests of the torch
    checkpoint loading into the TE model and of both backends asking for the same keys guard that."""
    save_and_load(random_model(name, TEStandInProvider()), random_model(name, "torch"), tmp_path, DEFAULT_STRICTNESS)


@pytest.mark.parametrize("backend", ["torch", "te"])
def test_an_earlier_torch_native_checkpoint_needs_a_strictness_that_drops_missing_keys(
        world_of_one, cpu_checkpoints, tmp_path: Path, backend: str) -> None:
    """Saved without the norms' extra state, it fails under the default in either backend's model, and loads under
    each value the training entry names (``CONVERTED_LOAD_STRICTNESS``)."""
    from torch.distributed.checkpoint.api import CheckpointException

    name = CARDS[0]

    def target() -> torch.nn.Module:
        return random_model(name, "torch" if backend == "torch" else TEStandInProvider())

    with pytest.raises(CheckpointException, match="Missing key in checkpoint state_dict"):
        save_and_load(random_model(name, "torch"), target(), tmp_path / "default", DEFAULT_STRICTNESS, True)
    for strictness in CONVERTED_LOAD_STRICTNESS:
        save_and_load(random_model(name, "torch"), target(), tmp_path / strictness, strictness, True)
