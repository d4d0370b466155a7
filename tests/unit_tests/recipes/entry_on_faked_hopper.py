"""The training entry, run as a script on a CPU machine up to megatron's ``pretrain``: the GPU queries its checks make
are answered as an H100's, the GPU-node check passes, and ``pretrain`` exits with status 0 after printing REACHED.
Megatron's own argument validation runs for real. Arguments: the entry's command line."""

from __future__ import annotations

import sys
import types

import torch

import megatron.oellm  # noqa: F401  (before megatron.training: typing.override on Python 3.11)

HOPPER = types.SimpleNamespace(major=9, minor=0, name="NVIDIA H100 80GB HBM3", total_memory=80 * 2**30,
                               multi_processor_count=132)


def _reached(*_args: object, **_kwargs: object) -> None:
    print("REACHED pretrain", flush=True)
    raise SystemExit(0)


def main() -> int:
    """Run the entry on ``sys.argv[1:]`` with the fakes in place; its exit status (0 once ``pretrain`` is reached)."""
    import megatron.training

    torch.cuda.get_device_capability = lambda *_args, **_kwargs: (HOPPER.major, HOPPER.minor)
    torch.cuda.get_device_name = lambda *_args, **_kwargs: HOPPER.name
    torch.cuda.get_device_properties = lambda *_args, **_kwargs: HOPPER
    megatron.training.pretrain = _reached
    from megatron.oellm.training import entry

    entry.check_gpu_node = lambda _world_size: None
    return entry.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
