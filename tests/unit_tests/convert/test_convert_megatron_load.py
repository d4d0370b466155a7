"""A converted checkpoint loads into the models our spec builders make, through megatron-core's own loader.

The models are built on the CPU (gloo, see ``tests/unit_tests/cpu_megatron.py``) with each backend: torch-native
always, Transformer Engine where it imports. The sharded state dict is megatron's own, not a re-statement of it.
``oellm convert hf-to-mcore`` writes no Transformer Engine ``_extra_state`` objects while the model asks for them
(the torch-native modules mirror TE's layout), so the loader runs with ``log_all`` strictness, as the convert README
tells users to. Every parameter starts as NaN and must
end as its rank's block of the converted TP=EP=1 tensor, bit for bit: the whole model at world size 1, and the TP=2
and EP=2 shards on two spawned ranks, whose blocks are cut here by plain slicing. A vocabulary that megatron pads
(300 tokens: 384 rows at TP 1, 512 at TP 2) loads with zero padding rows; megatron's own save of that model then
converts back to the original HF tensors, bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from megatron.oellm.cards import get_card
from megatron.oellm.convert.dist_ckpt import CheckpointReader
from megatron.oellm.convert.family import hf_to_mcore
from megatron.oellm.convert.mcore_checkpoint import HF_CONFIG_KEY, RELEASE
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from megatron.oellm.convert.vocab_padding import VOCAB_TENSORS
from megatron.oellm.flops import MEGATRON_VOCAB_DIVISOR, pad_vocab
from megatron.oellm.runtime import free_port
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, random_hf_tensors, write_hf
from tests.unit_tests.cpu_megatron import (
    cpu_checkpoint_saving,
    cpu_model_building,
    cpu_torch_model,
    gloo_world,
    transformer_engine_building,
)
from tests.unit_tests.gpu_utils import BACKENDS

CARDS = ("qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny")
SEED = 11
TP_AXIS = {"linear_qkv.weight": 0, "linear_proj.weight": 1, "in_proj.weight": 0, "out_proj.weight": 1,
           "linear_fc1.weight": 0, "linear_fc2.weight": 1, "conv1d.weight": 0, "A_log": 0, "dt_bias": 0,
           "word_embeddings.weight": 0, "output_layer.weight": 0}
"""Tensor-parallel axis of each TP-sharded parameter (megatron's column / row parallel layers)."""
_EXPERT = re.compile(r"^(.*\.experts\.linear_fc[12]\.weight)(\d+)$")
PADDED_VOCAB = 300
"""A vocabulary megatron pads at every TP (to 384 rows at TP 1, 512 at TP 2)."""
Case = tuple[str, int, int]
"""A converted checkpoint: (iteration directory, HF vocabulary, vocabulary of the model that loads it: megatron's
padded one)."""


def _tp_axis(name: str) -> int | None:
    """Tensor-parallel axis of a state-dict tensor, None if replicated across TP."""
    if name.endswith("gate_weight") or "layer_norm" in name or "layernorm" in name or name.endswith("norm.weight"):
        return None
    if name.endswith(("A_log", "dt_bias")):
        return 0
    leaf = ".".join(re.sub(r"weight\d+$", "weight", name).rsplit(".", 2)[-2:])
    return TP_AXIS.get(leaf)


def _tp_block(card, name: str, full: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    """TP rank ``rank``'s block of a TP=1 tensor (the SwiGLU halves and the GDN sections split one by one)."""
    axis = _tp_axis(name)
    if axis is None or size == 1:
        return full
    if re.search(r"linear_fc1\.weight\d*$", name):
        gate, up = full.chunk(2)
        return torch.cat([gate.chunk(size)[rank], up.chunk(size)[rank]])
    if name.endswith(("self_attention.in_proj.weight", "self_attention.conv1d.weight")):
        qk, v, heads = card.linear_key_width, card.linear_value_width, card.linear_num_value_heads
        sections = [qk, qk, v, v, heads, heads] if name.endswith("in_proj.weight") else [qk, qk, v]
        return torch.cat([s.chunk(size)[rank] for s in full.split(sections)])
    return full.chunk(size, dim=axis)[rank]


def expected_local(card, mcore: dict[str, torch.Tensor], rank: int, tp: int, ep: int) -> dict[str, torch.Tensor]:
    """What rank ``rank`` must hold at TP=``tp`` / EP=``ep``: its experts renumbered from 0, TP blocks of the rest
    (expert tensor parallelism follows TP, megatron's default)."""
    local_experts = card.num_experts // ep
    first_expert = (rank % ep) * local_experts
    out = {}
    for name, full in mcore.items():
        expert = _EXPERT.match(name)
        if expert:
            index = int(expert[2]) - first_expert
            if not 0 <= index < local_experts:
                continue
            name = f"{expert[1]}{index}"
        out[name] = _tp_block(card, name, full, rank % tp if tp > 1 else 0, tp)
    return out


def _load_and_compare(rank: int, world: int, port: int, checkpoints: dict[str, Case], tp: int, ep: int,
                      backend: str, save_root: str | None = None) -> None:
    """In one process of ``world``: build each card's model (vocabulary as the case says, as the training entry
    builds it from megatron's ``padded_vocab_size``) with ``backend`` at TP=``tp`` / EP=``ep``, load its checkpoint
    and compare; then, with ``save_root``, save the model with megatron's ``dist_checkpointing.save`` to
    ``save_root/<card>``."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.validation import StrictHandling

    from megatron.oellm.models import spec_builder

    with gloo_world(rank, world, port, tensor_model_parallel_size=tp, expert_model_parallel_size=ep), \
            cpu_model_building():
        for name, (checkpoint, vocab, padded) in checkpoints.items():
            card = get_card(name).with_vocab(vocab)
            model_card = card.with_vocab(padded)
            builder = spec_builder(card.family)
            config = builder.transformer_config(model_card, params_dtype=torch.bfloat16, use_cpu_initialization=True,
                                                perform_initialization=False)
            with transformer_engine_building(backend == "te"):
                model = builder.build_model(model_card, backend=backend, config=config)
            # megatron's TE wrappers live in megatron.core.extensions; TE's own module classes are their bases
            te_modules = [m for m in model.modules()
                          if any(c.__module__.startswith("transformer_engine.pytorch.module") for c in type(m).__mro__)]
            assert bool(te_modules) is (backend == "te")
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.fill_(float("nan"))
            request = model.sharded_state_dict()
            loaded = dist_checkpointing.load(request, checkpoint, strict=StrictHandling.LOG_ALL)
            # megatron's loader reads the HF config kept in the common state (mcore-to-hf writes it back)
            assert json.loads(loaded[HF_CONFIG_KEY]["config.json"])["num_hidden_layers"] == card.num_layers
            # what the load wrote into the model's own tensors (FSDP2 resumes read nothing else)
            in_place = {k: v.clone() for k, v in model.state_dict().items() if not k.endswith("_extra_state")}
            # the loader also returns the checkpoint's common entries (iteration, card, ...): not model state
            result = model.load_state_dict({k: v for k, v in loaded.items() if k in request}, strict=False)
            assert all(key.endswith("_extra_state") for key in result.missing_keys), result.missing_keys
            state = {k: v for k, v in model.state_dict().items() if not k.endswith("_extra_state")}
            converted = hf_to_mcore(card, random_hf_tensors(card, seed=SEED))
            for key in VOCAB_TENSORS:  # megatron's allow_shape_mismatch: padding rows load as zeros
                converted[key] = torch.cat([converted[key], converted[key].new_zeros(padded - vocab, card.hidden_size)])
            expected = expected_local(model_card, converted, rank, tp, ep)
            assert state.keys() == expected.keys(), sorted(state.keys() ^ expected.keys())[:6]
            for key, tensor in expected.items():
                assert torch.equal(state[key], tensor), f"{name} rank {rank}: {key}"
                if key not in VOCAB_TENSORS:  # padding rows are filled by load_state_dict only
                    assert torch.equal(in_place[key], tensor), f"{name} rank {rank}: {key} not loaded in place"
            if save_root is not None:
                # megatron's training checkpoints hold its arguments too; the converter checks the padding with them
                run = argparse.Namespace(make_vocab_size_divisible_by=MEGATRON_VOCAB_DIVISOR,
                                         tensor_model_parallel_size=tp, padded_vocab_size=padded)
                with cpu_checkpoint_saving():
                    dist_checkpointing.save({**model.sharded_state_dict(), "args": run}, f"{save_root}/{name}")


def convert(name: str, vocab: int, tmp: Path) -> str:
    """Random HF weights of card ``name`` with vocabulary ``vocab`` converted in ``tmp``; the iteration directory."""
    card = get_card(name).with_vocab(vocab)
    write_hf(card, random_hf_tensors(card, seed=SEED), tmp / "hf")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    return str(tmp / "mcore" / RELEASE)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Case]:
    return {name: (convert(name, get_card(name).vocab_size, tmp_path_factory.mktemp(name)), get_card(name).vocab_size,
                   get_card(name).vocab_size) for name in CARDS}


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_whole_model_loads_at_world_size_one(checkpoints: dict[str, str], backend: str) -> None:
    _load_and_compare(0, 1, free_port(), checkpoints, 1, 1, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("tp", "ep"), [(2, 1), (1, 2)], ids=["tp2", "ep2"])
def test_two_ranks_load_their_shards(checkpoints: dict[str, str], tp: int, ep: int, backend: str) -> None:
    mp.start_processes(_load_and_compare, args=(2, free_port(), checkpoints, tp, ep, backend), nprocs=2, join=True,
                       start_method="spawn")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tp", [1, 2])
def test_a_padded_vocabulary_loads_and_megatrons_save_converts_back(tp: int, backend: str, tmp_path: Path) -> None:
    padded = pad_vocab(PADDED_VOCAB, MEGATRON_VOCAB_DIVISOR * tp)
    assert padded == {1: 384, 2: 512}[tp]
    cases = {name: (convert(name, PADDED_VOCAB, tmp_path / name), PADDED_VOCAB, padded) for name in CARDS}
    for name in CARDS:
        (tmp_path / "saved" / name).mkdir(parents=True)
    if tp == 1:
        _load_and_compare(0, 1, free_port(), cases, 1, 1, backend, str(tmp_path / "saved"))
    else:
        mp.start_processes(_load_and_compare, args=(2, free_port(), cases, tp, 1, backend, str(tmp_path / "saved")),
                           nprocs=2, join=True, start_method="spawn")
    for name in CARDS:
        card = get_card(name).with_vocab(PADDED_VOCAB)
        stored = CheckpointReader(tmp_path / "saved" / name).tensor_shapes()
        assert {stored[key][0] for key in VOCAB_TENSORS} == {(padded, card.hidden_size)}
        summary = mcore_to_hf_checkpoint(card, tmp_path / "saved" / name, tmp_path / "hf-back" / name)
        assert summary.padding_rows == padded - PADDED_VOCAB
        assert_bitwise_equal(random_hf_tensors(card, seed=SEED), dict(SafetensorsSource(tmp_path / "hf-back" / name)))


def _load_under(checkpoint: str, name: str, strictness: str) -> object:
    """megatron-core's ``dist_checkpointing.load`` of ``checkpoint`` into card ``name``'s torch-native model at world
    size one under ``--dist-ckpt-strictness strictness``: what it returns, or the exception it raised."""
    from megatron.core import dist_checkpointing
    from torch.distributed.checkpoint.api import CheckpointException

    with gloo_world(), cpu_model_building():
        model = cpu_torch_model(get_card(name), torch.bfloat16)
        try:
            return dist_checkpointing.load(model.sharded_state_dict(), checkpoint, strict=strictness)
        except (Exception, CheckpointException) as error:  # PyTorch's is a BaseException; either is the result
            return error


def test_the_training_entrys_strictness_rule_is_megatron_cores(checkpoints: dict[str, Case]) -> None:
    """The rule :func:`megatron.oellm.training.load_checks.check_load_strictness` applies to a converted checkpoint, asked
    of megatron-core's loader itself: it loads under ``CONVERTED_LOAD_STRICTNESS`` (a dict: the state), fails under
    the default and the ``raise_*`` values, and returns a tuple (which megatron's ``load_checkpoint`` takes for the
    state) under ``RETURNING_STRICTNESS``."""
    from megatron.oellm.training.load_checks import CONVERTED_LOAD_STRICTNESS, RETURNING_STRICTNESS

    checkpoint = checkpoints[CARDS[1]][0]
    outcomes = {strictness: _load_under(checkpoint, CARDS[1], strictness)
                for strictness in ("assume_ok_unexpected", "raise_unexpected", "raise_all", *CONVERTED_LOAD_STRICTNESS,
                                   *RETURNING_STRICTNESS)}
    for strictness in CONVERTED_LOAD_STRICTNESS:
        assert isinstance(outcomes[strictness], dict), (strictness, outcomes[strictness])
    for strictness in ("assume_ok_unexpected", "raise_unexpected", "raise_all"):
        assert isinstance(outcomes[strictness], BaseException), (strictness, type(outcomes[strictness]))
        assert "_extra_state" in str(outcomes[strictness]), (strictness, outcomes[strictness])
    for strictness in RETURNING_STRICTNESS:
        assert isinstance(outcomes[strictness], tuple), (strictness, type(outcomes[strictness]))
