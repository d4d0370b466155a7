"""Review findings: flex dispatcher combinations megatron-core 0.19.2 refuses only once it builds the model, and a
``torch_dist`` checkpoint loaded under another ``--ckpt-format`` than ``torch``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from megatron.oellm.training import dispatcher
from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.checkpoint_layout import check_checkpoint_format
from megatron.oellm.training.stored_checkpoint import read_stored_checkpoint

sys.path.insert(0, str(Path(__file__).parent))

FLEX = ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend"]
EP2 = ["--expert-model-parallel-size", "2"]


@pytest.fixture
def libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepEP (with its hybrid-ep branch) and Transformer Engine present, whatever this machine has."""
    real_find_spec = dispatcher.importlib.util.find_spec
    monkeypatch.setattr(dispatcher.importlib.util, "find_spec",
                        lambda name, *rest: object() if name == "deep_ep" else real_find_spec(name, *rest))
    monkeypatch.setattr(dispatcher, "deep_ep_declares_hybrid_ep", lambda: True)
    monkeypatch.setattr(dispatcher, "transformer_engine_import_error", lambda: None)


@pytest.mark.parametrize("backend", ["deepep", "ncclep"])
def test_deepep_and_ncclep_need_more_than_one_expert_rank(libraries: None, backend: str) -> None:
    """megatron-core asserts TP x EP > 1 (the expert tensor and expert sizes) when it builds the dispatcher."""
    with pytest.raises(ValueError, match="expert"):
        dispatcher.check_flex_dispatcher(parse_oellm_argv([*FLEX, backend]))
    dispatcher.check_flex_dispatcher(parse_oellm_argv([*FLEX, backend, *EP2]))
    dispatcher.check_flex_dispatcher(parse_oellm_argv([*FLEX, backend, "--expert-tensor-parallel-size", "2"]))
    dispatcher.check_flex_dispatcher(parse_oellm_argv([*FLEX, "hybridep"]))  # no such assertion


def test_moe_enable_deepep_is_the_deepep_backend(libraries: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """TransformerConfig turns --moe-enable-deepep into the deepep backend (so ncclep runs need DeepEP), and refuses
    it without the flex dispatcher or with hybridep."""
    with pytest.raises(ValueError, match="moe-enable-deepep"):
        dispatcher.check_flex_dispatcher(parse_oellm_argv(["--moe-enable-deepep", *EP2]))
    with pytest.raises(ValueError, match="moe-enable-deepep"):
        dispatcher.check_flex_dispatcher(parse_oellm_argv([*FLEX, "hybridep", "--moe-enable-deepep", *EP2]))
    dispatcher.check_flex_dispatcher(parse_oellm_argv([*FLEX, "deepep", "--moe-enable-deepep", *EP2]))
    monkeypatch.setattr(dispatcher.importlib.util, "find_spec", lambda name, *rest: None)
    with pytest.raises(ValueError, match="needs DeepEP"):
        dispatcher.check_flex_dispatcher(parse_oellm_argv([*FLEX, "ncclep", "--moe-enable-deepep", *EP2]))


@pytest.mark.parametrize("run_format", ["torch_dcp", "fsdp_dtensor"])
def test_a_torch_dist_checkpoint_is_refused_under_the_dcp_formats(tmp_path: Path, run_format: str) -> None:
    """Under torch_dcp / fsdp_dtensor megatron builds plain tensors for a torch_dist checkpoint, which the
    distributed load drops: it fails on 'model' after allocating the model."""
    from test_checkpoint_layout import _run, _save, _stored

    load = _save(tmp_path, _stored())
    checkpoint = read_stored_checkpoint(load)
    with pytest.raises(ValueError, match=f"--ckpt-format {run_format} cannot load"):
        check_checkpoint_format(_run(load, ckpt_format=run_format), checkpoint)
    check_checkpoint_format(_run(load, ckpt_format="torch_dist"), checkpoint)
