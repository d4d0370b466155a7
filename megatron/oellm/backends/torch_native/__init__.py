"""The torch-native backend: megatron-core spec modules on plain torch kernels, no Transformer Engine.

Modules keep Transformer Engine's state-dict and sharded-state-dict names, so checkpoints move between backends.
"""

from megatron.oellm.backends.torch_native.provider import TorchNativeSpecProvider

__all__ = ["TorchNativeSpecProvider"]
