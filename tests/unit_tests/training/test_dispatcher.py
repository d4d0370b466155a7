"""The flex dispatcher is checked from the parsed arguments, before Megatron initialises: its communication library,
and the combinations megatron-core 0.19.2 refuses only once it builds the model (DeepEP and NCCL-EP need TP x EP > 1;
``--moe-enable-deepep`` is the deepep backend)."""

import importlib
from pathlib import Path

import pytest

from megatron.oellm.training import dispatcher
from megatron.oellm.training.args import parse_oellm_argv

FLEX = ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend"]
EP2 = ["--expert-model-parallel-size", "2"]


def fake_deep_ep(root: Path, monkeypatch: pytest.MonkeyPatch, init: str) -> None:
    """A ``deep_ep`` package whose ``__init__`` holds ``init``, first on ``sys.path`` (never imported here)."""
    (root / "deep_ep").mkdir()
    (root / "deep_ep" / "__init__.py").write_text(init)
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()


@pytest.fixture
def no_deep_ep(monkeypatch: pytest.MonkeyPatch) -> None:
    """``deep_ep`` not importable, whatever this machine has."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(dispatcher.importlib.util, "find_spec",
                        lambda name, *rest: None if name == "deep_ep" else real_find_spec(name, *rest))


@pytest.fixture
def libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepEP (with its hybrid-ep branch) and Transformer Engine present, whatever this machine has."""
    real_find_spec = dispatcher.importlib.util.find_spec
    monkeypatch.setattr(dispatcher.importlib.util, "find_spec",
                        lambda name, *rest: object() if name == "deep_ep" else real_find_spec(name, *rest))
    monkeypatch.setattr(dispatcher, "deep_ep_declares_hybrid_ep", lambda: True)
    monkeypatch.setattr(dispatcher, "transformer_engine_import_error", lambda: None)


def test_the_all_to_all_dispatcher_needs_nothing(no_deep_ep: None) -> None:
    assert dispatcher.flex_dispatcher_problem(parse_oellm_argv(["--moe-token-dispatcher-type", "alltoall"])) is None


@pytest.mark.parametrize("backend", ["hybridep", "deepep"])
def test_flex_without_deep_ep_names_the_image_and_the_way_out(no_deep_ep: None, backend: str) -> None:
    with pytest.raises(ValueError, match=rf"{backend} needs DeepEP .*not installed.*--target hybridep.*alltoall"):
        dispatcher.check_flex_dispatcher(parse_oellm_argv([*FLEX, backend]))


def test_hybridep_needs_deep_eps_hybrid_ep_branch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_deep_ep(tmp_path, monkeypatch, "from .buffer import Buffer\n")
    args = parse_oellm_argv([*FLEX, "hybridep"])
    assert "hybrid-ep branch" in dispatcher.flex_dispatcher_problem(args)
    assert dispatcher.flex_dispatcher_problem(parse_oellm_argv([*FLEX, "deepep", "--expert-model-parallel-size", "2"])) is None
    (tmp_path / "deep_ep" / "__init__.py").write_text("from .buffer import Buffer\nfrom .hybrid_ep import HybridEPBuffer\n")
    assert dispatcher.flex_dispatcher_problem(args) is None


def test_ncclep_needs_transformer_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parse_oellm_argv([*FLEX, "ncclep", "--expert-model-parallel-size", "2"])
    monkeypatch.setattr(dispatcher, "transformer_engine_import_error", lambda: "ModuleNotFoundError: no TE")
    assert "ncclep needs Transformer Engine" in dispatcher.flex_dispatcher_problem(args)
    monkeypatch.setattr(dispatcher, "transformer_engine_import_error", lambda: None)
    assert dispatcher.flex_dispatcher_problem(args) is None


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


def test_hybridep_is_let_through_where_deep_eps_init_cannot_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """deep_ep installed without a readable ``__init__.py`` (a compiled-only install): whether it has HybridEPBuffer
    is unknown (None), so the run is not refused at start; only a known lack (False) is."""
    monkeypatch.setattr(dispatcher.importlib.util, "find_spec", lambda name, *rest: object())
    args = parse_oellm_argv([*FLEX, "hybridep"])
    monkeypatch.setattr(dispatcher, "deep_ep_declares_hybrid_ep", lambda: None)
    assert dispatcher.flex_dispatcher_problem(args) is None
    monkeypatch.setattr(dispatcher, "deep_ep_declares_hybrid_ep", lambda: False)
    assert "hybrid-ep branch" in dispatcher.flex_dispatcher_problem(args)


@pytest.mark.parametrize("backend", ["deepep", "ncclep"])
def test_the_expert_tensor_size_defaults_to_the_tensor_parallel_size(libraries: None, backend: str) -> None:
    """megatron's validate_args sets an unset --expert-tensor-parallel-size to --tensor-model-parallel-size, so TP 2
    alone gives the dispatcher's TP x EP group two ranks (accepted); an explicit --expert-tensor-parallel-size 1
    next to TP 2 leaves it one rank, which megatron-core's assertion refuses."""
    tp2 = ["--tensor-model-parallel-size", "2"]
    dispatcher.check_flex_dispatcher(parse_oellm_argv([*FLEX, backend, *tp2]))
    with pytest.raises(ValueError, match="--expert-tensor-parallel-size 1 and --expert-model-parallel-size 1"):
        dispatcher.check_flex_dispatcher(parse_oellm_argv([*FLEX, backend, *tp2, "--expert-tensor-parallel-size", "1"]))
