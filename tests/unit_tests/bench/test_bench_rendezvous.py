"""``oellm bench`` is one process on one GPU: a MASTER_ADDR/MASTER_PORT preset by a SLURM job script (another node's
address, a port this node already uses) must neither stall nor break its one-rank process group."""

from __future__ import annotations

import os
import random
import socket
import time

import pytest
import torch

from megatron.oellm import runtime
from megatron.oellm.bench import sides
from megatron.oellm.cards import get_card


class _Built(Exception):
    """Raised by the stand-in transformers side: the runtime came up and the bench went on to build the models."""


def test_bench_runtime_ignores_a_preset_rendezvous(monkeypatch):
    init = torch.distributed.init_process_group

    def on_gloo(*args, **kwargs):  # this CPU machine has no NCCL; the rendezvous is what is under test
        return init(*args, **{**kwargs, "backend": "gloo"})

    def hf_side(card):
        assert torch.distributed.is_initialized() and torch.distributed.get_world_size() == 1
        raise _Built

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(torch.distributed, "init_process_group", on_gloo)
    monkeypatch.setattr(runtime, "reseed", lambda seed=runtime.DEFAULT_SEED: None)
    monkeypatch.setattr(sides, "HFSide", hf_side)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("", 0))
        busy.listen()
        preset = {"MASTER_ADDR": f"10.{random.randint(0, 255)}.{random.randint(0, 255)}.{random.randint(1, 254)}",
                  "MASTER_PORT": str(busy.getsockname()[1])}
        for name, value in preset.items():
            monkeypatch.setenv(name, value)
        started = time.monotonic()
        try:
            with pytest.raises(_Built):
                sides.build_sides(get_card("qwen3.5-35b-a3b-proxy-4L"), ["hf"], {})
        finally:
            runtime.shutdown_single_gpu_runtime()
    assert time.monotonic() - started < 60
    assert {name: os.environ[name] for name in preset} == preset  # the job's own settings are left alone
