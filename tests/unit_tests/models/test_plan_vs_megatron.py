"""``oellm plan``'s per-GPU parameter counts against the models megatron-core really builds on each rank.

Every rank of a small gloo world (spawned CPU processes, ``tests/unit_tests/cpu_megatron.py``) builds its part of a
tiny card with the torch-native spec (each virtual stage with megatron's own first/last-stage roles) and counts its
parameters: routed experts apart, everything else as dense. :func:`~megatron.oellm.plan.build_plan` must give the same
two numbers for every pipeline rank: TP splits, replicated norms/router/gate, EP x ETP, uneven and embedding-only or
loss-only stages, and the tied output layer copied to the last stage.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.multiprocessing as mp

from megatron.oellm.cards import ModelCard, get_card
from megatron.oellm.models.parallel import ParallelLayout
from megatron.oellm.plan import build_plan
from megatron.oellm.runtime import free_port

CASES = {
    "qwen3.5-tp2-sp-pp2-ep2": ("qwen3.5-35b-a3b-tiny", False, dict(tp=2, sp=True, pp=2, ep=2)),
    "qwen3-tied-etp2-standalone-stages": ("qwen3-30b-a3b-tiny", True, dict(pp=2, etp=2, pipeline_layout="E|t|t|L")),
}
"""Case id -> (card, tied embeddings, layout) on four ranks (about a minute each: the ranks are spawned processes)."""
WORLD = 4


def _card(name: str, tied: bool) -> ModelCard:
    """The tiny card, with tied input and output embeddings if ``tied``."""
    return dataclasses.replace(get_card(name), untie_embeddings=not tied)


def _count_rank(rank: int, port: int, name: str, tied: bool, sizes: dict, out: str) -> None:
    """In rank ``rank`` of the gloo world: build this rank's virtual stages, write (dense, routed-expert) counts."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from megatron.core import parallel_state

    from megatron.oellm.models import spec_builder
    from tests.unit_tests.cpu_megatron import cpu_model_building, gloo_world

    card, layout = _card(name, tied), ParallelLayout(**sizes)
    vpp = layout.vpp_size
    # tied embeddings on several stages: megatron moves the output copy to the GPU (a no-op wanted here)
    with gloo_world(rank, WORLD, port, tensor_model_parallel_size=layout.tp, pipeline_model_parallel_size=layout.pp,
                    expert_model_parallel_size=layout.ep, expert_tensor_parallel_size=layout.etp,
                    virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None), cpu_model_building(), \
            mock.patch.object(torch.Tensor, "cuda", lambda self, *args, **kwargs: self):
        builder = spec_builder(card.family)
        config = builder.transformer_config(card, layout, use_cpu_initialization=True, perform_initialization=False)
        dense = experts = 0
        for stage in range(vpp):
            vp_stage = stage if vpp > 1 else None
            model = builder.build_model(
                card, layout, backend="torch", config=config, vp_stage=vp_stage,
                pre_process=parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
                post_process=parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage))
            for parameter_name, parameter in model.named_parameters():
                routed = ".experts." in parameter_name and "shared_experts" not in parameter_name
                experts += parameter.numel() if routed else 0
                dense += 0 if routed else parameter.numel()
        pp_rank = parallel_state.get_pipeline_model_parallel_rank()
        Path(out, f"{pp_rank}-{rank}.json").write_text(json.dumps([dense, experts]))


@pytest.mark.parametrize("case", CASES)
def test_plan_counts_what_megatron_builds_on_every_rank(case: str, tmp_path: Path) -> None:
    name, tied, sizes = CASES[case]
    mp.start_processes(_count_rank, args=(free_port(), name, tied, sizes, str(tmp_path)), nprocs=WORLD, join=True,
                       start_method="spawn")
    plan = build_plan(_card(name, tied), ParallelLayout(**sizes), WORLD)
    for rank in plan.ranks:
        built = {tuple(json.loads(path.read_text())) for path in tmp_path.glob(f"{rank.pipeline_rank}-*.json")}
        assert built == {(rank.dense_params, rank.expert_params)}, f"pipeline rank {rank.pipeline_rank}"
