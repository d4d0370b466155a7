"""Megatron's ``validate_args`` run on the CPU machine as the recipes' clusters would run it.

``validate_args`` asks the GPU's compute capability and Transformer Engine's version; the answers here are those of
an H100 / GH200 node (sm_90) with the image's TE, recent enough for every version gate.
"""

import argparse
from collections.abc import Mapping

import torch


def validate_as_hopper(args: argparse.Namespace, monkeypatch, world_size: int = 1,
                       env: Mapping[str, object] | None = None) -> argparse.Namespace:
    """``args`` after ``validate_args`` on rank 0 of ``world_size`` sm_90 GPUs, with ``env`` exported."""
    import megatron.training.arguments as arguments

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (9, 0))
    monkeypatch.setattr(arguments, "get_device_arch_version", lambda: 9)
    monkeypatch.setattr(arguments, "is_te_min_version", lambda *_args, **_kwargs: True)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    args.world_size, args.rank = world_size, 0
    arguments.validate_args(args)
    return args
